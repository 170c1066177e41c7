/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * chunkfile: the on-disk format of one cached chunk, one immutable file per chunk. Used by
 * cache_disk (on its I/O threads: nothing here touches loop objects, globals or ev.h).
 *
 * Layout (version 2, what is written), all integers little-endian:
 *    0  magic "CPCHUNK1"          8      48  key_len u16, etag_len u16, last_modified_len u16,
 *    8  version u32 (2)                      content_type_len u16
 *   12  hdr_len u32 (whole header)       56  fields_len u32, date_len u16, 0 u16
 *   16  chunk_size u64                   64  response_time i64 (seconds since the epoch)
 *   24  index u64                        72  initial_age i64 (RFC 9111 corrected initial age)
 *   32  total u64 (object length)        80  key, etag, last_modified, content_type, date and
 *   40  data_len u32 (<= chunk_size)         fields bytes (the stored response fields, objhead.h)
 *   44  flags u32 (the caller's; stored, returned, not read)
 *                                        hdr_len-16  XXH3-64 of the body
 *                                        hdr_len-8   XXH3-64 of header bytes [0, hdr_len-8)
 * then exactly data_len body bytes. The header hash covers the body hash, so a flipped bit
 * anywhere shows up as a header or body hash mismatch. data_len must equal the length of chunk
 * <index> of a <total>-byte object (range_chunk_span), so a short last chunk is recognised.
 * Version 1 (written before the stored fields, still read): the same up to offset 56, then the
 * key, etag, last_modified and content_type bytes and the two hashes; it has no date, no
 * fields and no times (they parse as empty and 0).
 *
 * Path: "<shard>/ab/cd/<32 hex>.<index>", the hex being XXH3-128 of the full cache key (canonical
 * big-endian bytes), ab and cd its first two bytes. All chunks of an object share the hash. The
 * ab/cd directories are created lazily by chunkfile_write (never up front: 65536 empty
 * directories cost 256 MiB on ext4); the shard directory and its tmp/ must exist.
 */
#ifndef CACHEPARTY_CHUNKFILE_H
#define CACHEPARTY_CHUNKFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CHUNKFILE_MAGIC "CPCHUNK1"
#define CHUNKFILE_VERSION 2u    /* the version written */
#define CHUNKFILE_FIXED_LEN 80u /* header bytes before the key (version 2) */
#define CHUNKFILE_FIXED_LEN_V1 56u

/* Limits on the variable fields; a meta over them is not storable (build/write refuse it). */
#define CHUNKFILE_KEY_MAX (8192u + 300u)
#define CHUNKFILE_ETAG_MAX 256u
#define CHUNKFILE_LAST_MODIFIED_MAX 64u
#define CHUNKFILE_CONTENT_TYPE_MAX 128u
#define CHUNKFILE_DATE_MAX 64u
#define CHUNKFILE_FIELDS_MAX (16u * 1024u)
#define CHUNKFILE_CHUNK_SIZE_MAX UINT32_MAX /* data_len is a u32 */

/* Header length bounds: a version 1 header with a key of one byte, and a version 2 one with
 * every field at its limit. */
#define CHUNKFILE_HDR_MIN (CHUNKFILE_FIXED_LEN_V1 + 1u + 16u)
#define CHUNKFILE_HDR_MAX                                                                          \
    (CHUNKFILE_FIXED_LEN + CHUNKFILE_KEY_MAX + CHUNKFILE_ETAG_MAX + CHUNKFILE_LAST_MODIFIED_MAX +  \
     CHUNKFILE_CONTENT_TYPE_MAX + CHUNKFILE_DATE_MAX + CHUNKFILE_FIELDS_MAX + 16u)

/* Room for the path of chunkfile_path()/chunkfile_tmp_path() beyond strlen(shard_dir). */
#define CHUNKFILE_PATH_EXTRA 96u

/*
 * A chunk's metadata as a view: every string borrows memory the struct does not own (the caller's
 * for build and write; the parsed buffer for chunkfile_header_parse). Strings are not
 * NUL-terminated; a pointer may be NULL when its length is 0.
 */
struct chunkfile_meta {
    uint64_t chunk_size; /* the cache's chunk size, 1..CHUNKFILE_CHUNK_SIZE_MAX */
    uint64_t index;      /* chunk index in the object */
    uint64_t total;      /* object length, > 0 */
    uint32_t data_len;   /* body length: chunk <index>'s length */
    uint32_t flags;      /* caller-defined bits, opaque here */
    const char *key;     /* borrows: identifier "\n" path, 1..CHUNKFILE_KEY_MAX bytes */
    size_t key_len;
    const char *etag; /* borrows: ETag as sent by the origin (quotes and W/ included) */
    size_t etag_len;
    const char *last_modified; /* borrows: Last-Modified as sent */
    size_t last_modified_len;
    const char *content_type; /* borrows: Content-Type as sent */
    size_t content_type_len;
    /* Version 2 (empty and 0 in a version 1 file; header_build always writes version 2): */
    const char *date; /* borrows: the stored Date */
    size_t date_len;
    const char *fields; /* borrows: the stored response fields ("Name: value\r\n" lines) */
    size_t fields_len;
    int64_t response_time, initial_age;
    uint32_t version; /* set by chunkfile_header_parse: the file's version; not read by build */
};

/*
 * What chunkfile_read_verify() found, as an owned value (copyable, no pointers): the validators
 * are copied and NUL-terminated ("" when the origin sent none). The key is not copied: on success
 * it equals the expected key.
 */
struct chunkfile_info {
    uint64_t chunk_size; /* 0 unless the header itself verified (see chunkfile_read_verify) */
    uint64_t index;
    uint64_t total;
    uint32_t data_len;
    uint32_t flags;
    size_t etag_len;
    size_t last_modified_len;
    size_t content_type_len;
    char etag[CHUNKFILE_ETAG_MAX + 1];
    char last_modified[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    char content_type[CHUNKFILE_CONTENT_TYPE_MAX + 1];
    uint32_t version; /* the file's format version (1 or 2) */
    size_t date_len;  /* the stored Date, copied like the validators */
    char date[CHUNKFILE_DATE_MAX + 1];
    size_t fields_len; /* the stored fields' length (their bytes are not copied) */
    int64_t response_time, initial_age;
};

/* XXH3-64 of a body, as stored in the header. <body> is borrowed (may be NULL when len is 0). */
uint64_t chunkfile_body_hash(const void *body, size_t len);

/*
 * Whether <m> can be stored: field lengths within the limits, a non-empty key, 0 < chunk_size <=
 * CHUNKFILE_CHUNK_SIZE_MAX, total > 0, index < chunk count, data_len == that chunk's length.
 */
bool chunkfile_meta_is_valid(const struct chunkfile_meta *m);

/*
 * Serialises the header for <m> (borrowed) with <body_hash> into <out>[0..cap).
 * Returns the header length (CHUNKFILE_HDR_MIN..CHUNKFILE_HDR_MAX), or 0 when <m> is not valid
 * (chunkfile_meta_is_valid) or <cap> is too small; CHUNKFILE_HDR_MAX always suffices.
 */
size_t chunkfile_header_build(const struct chunkfile_meta *m, uint64_t body_hash, uint8_t *out,
                              size_t cap);

/*
 * Parses and verifies the header at the start of <buf>[0..len) (borrowed): magic, version,
 * lengths, header hash and the chunkfile_meta_is_valid() consistency rules.
 * Returns 0 with <*m> filled (its strings borrow <buf>: valid while <buf> is), <*body_hash> and
 * <*hdr_len> set; -EAGAIN when <len> is too short to decide, <*hdr_len> then being the header
 * length if already known, else CHUNKFILE_HDR_MIN (a lower bound); -EBADMSG when the bytes are
 * not a valid header (what can be checked of them: a wrong magic fails at once).
 */
int chunkfile_header_parse(const uint8_t *buf, size_t len, struct chunkfile_meta *m,
                           uint64_t *body_hash, size_t *hdr_len)
    __attribute__((warn_unused_result));

/*
 * Writes a chunk file: header and <body>[0..len) (borrowed; len must equal m->data_len, asserted)
 * into a new <tmp_path> (O_CREAT|O_EXCL, 0644), optionally fdatasync()s it, closes it and renames
 * it to <final_path>, replacing any file there; both paths are relative to <dirfd> (or AT_FDCWD).
 * When the rename fails with ENOENT the two parent directories of <final_path> (ab/ and ab/cd/)
 * are created (chunkfile_mkdirs) and the rename retried once.
 * <durable>: with true, the data is on disk before the rename, so after a power loss the final
 * name holds a whole file or nothing. With false (faster, no flush per chunk) the rename may reach
 * the disk before the data, and a crash can leave a final file that is empty, truncated, holds
 * zeroes or its placeholder header (the header is written last, the body's hash in it):
 * chunkfile_read_verify() rejects it as -EBADMSG, a miss. The directory is never
 * fsync()ed: a lost rename is only a miss.
 * Returns 0, or -errno (-EINVAL for a meta that is not valid, -ENOSPC, -EIO, -EEXIST when
 * <tmp_path> already exists...); on any error after creating <tmp_path> it is unlinked, and
 * <final_path> is untouched.
 */
int chunkfile_write(int dirfd, const char *tmp_path, const char *final_path,
                    const struct chunkfile_meta *m, const void *body, size_t len, bool durable)
    __attribute__((warn_unused_result));

/* The two halves of chunkfile_write(): the tmp file written and closed (unlinked on error), then
 * renamed into place (the tmp file unlinked if that fails). Same return values. */
int chunkfile_write_tmp(int dirfd, const char *tmp_path, const struct chunkfile_meta *m,
                        const void *body, size_t len, bool durable)
    __attribute__((warn_unused_result));
/* chunkfile_write_tmp() with the body read from file <src_fd> (borrowed: not closed, its offset
 * unchanged) at <src_off>, with pread() in steps, hashed as it is copied: a chunk in the memory
 * file of chunkmem.h is stored without a mapping of its pages. -ENODATA when <src_fd> cannot be
 * read whole (it ends before <len> bytes, or a read fails); the other errors are the tmp file's. */
int chunkfile_write_tmp_from(int dirfd, const char *tmp_path, const struct chunkfile_meta *m,
                             int src_fd, off_t src_off, size_t len, bool durable)
    __attribute__((warn_unused_result));
int chunkfile_commit(int dirfd, const char *tmp_path, const char *final_path)
    __attribute__((warn_unused_result));

/*
 * Reads the whole chunk file <path> (relative to <dirfd> or AT_FDCWD) and verifies it: header
 * (chunkfile_header_parse), key equal to <expect_key>[0..key_len) (borrowed; a file of another
 * key is foreign), chunk_size == <expect_chunk_size>, index == <expect_index>, file size exactly
 * header + data_len (truncated or extended files fail), and the body hash.
 * On success the body is in <body_out>[0..*body_len) (caller-owned, <body_cap> bytes), its offset
 * in the file in <*body_offset> (for a later sendfile) and the metadata in <*info>.
 * <*info> is also filled when the header verified but a later check failed (info->chunk_size is
 * then non-zero: a different value means a cache written with another chunk_size); otherwise
 * info->chunk_size is 0 and the rest unspecified. Never modifies or deletes any file.
 * Returns 0; -ENOENT when there is no file; -EBADMSG when the file does not verify (not a regular
 * file, truncated, zeroed, bit flips, extended, foreign, other chunk_size or index); -ENOBUFS when
 * data_len > <body_cap>; or another -errno from open/pread (-EIO...).
 */
int chunkfile_read_verify(int dirfd, const char *path, const char *expect_key, size_t key_len,
                          uint64_t expect_chunk_size, uint64_t expect_index,
                          struct chunkfile_info *info, void *body_out, size_t body_cap,
                          size_t *body_len, off_t *body_offset) __attribute__((warn_unused_result));

/*
 * Reads the header of chunk file <path> (not its body) and copies its key, NUL-terminated, into
 * <key_out>[0..cap) with its length in *<key_len>. The header must verify
 * (chunkfile_header_parse); the body is not checked. Opens with O_NOATIME where allowed.
 * Returns 0; -ENOENT; -EBADMSG when it is no header of ours (a symlink included); -ENOBUFS when
 * the key does not fit; or another -errno.
 */
int chunkfile_read_key(const char *path, char *key_out, size_t cap, size_t *key_len)
    __attribute__((warn_unused_result));

/* XXH3-128 of the cache key <key>[0..len) (borrowed), as 16 canonical (big-endian) bytes. */
void chunkfile_key_hash(const char *key, size_t len, uint8_t out[16]);

/*
 * Writes "<shard_dir>/ab/cd/<32 hex>.<index>" to <out>[0..cap) (NUL-terminated); ab and cd are
 * hash[0] and hash[1] in hex. Creates nothing. <shard_dir> is borrowed. Returns 0, or
 * -ENAMETOOLONG when it does not fit (strlen(shard_dir) + CHUNKFILE_PATH_EXTRA always fits).
 */
int chunkfile_path(char *out, size_t cap, const char *shard_dir, const uint8_t hash[16],
                   uint64_t index) __attribute__((warn_unused_result));

/*
 * Writes "<shard_dir>/tmp/<32 hex>.<index>.<seq>" (the caller's <seq> keeps two writers of the
 * same chunk apart). Returns as chunkfile_path().
 */
int chunkfile_tmp_path(char *out, size_t cap, const char *shard_dir, const uint8_t hash[16],
                       uint64_t index, uint64_t seq) __attribute__((warn_unused_result));

/*
 * Creates the two directories above <final_path> (relative to <dirfd>), "<shard>/ab" then
 * "<shard>/ab/cd", mode 0755; existing ones are fine. Never creates the shard directory itself
 * (an unmounted cache disk must not be refilled on the root filesystem). Returns 0 or -errno
 * (-ENOENT when the shard directory is missing).
 */
int chunkfile_mkdirs(int dirfd, const char *final_path) __attribute__((warn_unused_result));

#endif
