/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * chunkfile: chunk file format, write (tmp + rename), read and verify. See chunkfile.h.
 * No state: every function works on its arguments only and is safe to call from any thread.
 * Invariant of a file that verifies: it is exactly hdr_len + data_len bytes, its header hash and
 * body hash match, and its header says the key, chunk_size and index the reader expected.
 * Anything the disk can do (short files, garbage, foreign files, I/O errors) is a return value,
 * never an assert; only caller contract violations assert.
 */
#include "chunkfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "range.h"
#include "util.h"

#define MAGIC_LEN 8u

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint64_t chunkfile_body_hash(const void *body, size_t len)
{
    return XXH3_64bits(len ? body : "", len);
}

bool chunkfile_meta_is_valid(const struct chunkfile_meta *m)
{
    if (m->key_len == 0 || m->key_len > CHUNKFILE_KEY_MAX || m->etag_len > CHUNKFILE_ETAG_MAX ||
        m->last_modified_len > CHUNKFILE_LAST_MODIFIED_MAX ||
        m->content_type_len > CHUNKFILE_CONTENT_TYPE_MAX || m->date_len > CHUNKFILE_DATE_MAX ||
        m->fields_len > CHUNKFILE_FIELDS_MAX || m->initial_age < 0)
        return false;
    if (m->chunk_size == 0 || m->chunk_size > CHUNKFILE_CHUNK_SIZE_MAX || m->total == 0)
        return false;
    if (m->index >= range_chunk_count(m->total, m->chunk_size))
        return false;
    uint64_t off, len;
    range_chunk_span(m->index, m->chunk_size, m->total, &off, &len);
    return m->data_len == len;
}

static size_t header_len(const struct chunkfile_meta *m, uint32_t version)
{
    size_t n = m->key_len + m->etag_len + m->last_modified_len + m->content_type_len + 16;
    if (version == 1)
        return CHUNKFILE_FIXED_LEN_V1 + n;
    return CHUNKFILE_FIXED_LEN + n + m->date_len + m->fields_len;
}

static uint8_t *put_str(uint8_t *p, const char *s, size_t len)
{
    if (len > 0)
        memcpy(p, s, len);
    return p + len;
}

size_t chunkfile_header_build(const struct chunkfile_meta *m, uint64_t body_hash, uint8_t *out,
                              size_t cap)
{
    if (!chunkfile_meta_is_valid(m))
        return 0;
    size_t hl = header_len(m, CHUNKFILE_VERSION);
    if (hl > cap)
        return 0;
    memcpy(out, CHUNKFILE_MAGIC, MAGIC_LEN);
    put32(out + 8, CHUNKFILE_VERSION);
    put32(out + 12, (uint32_t)hl);
    put64(out + 16, m->chunk_size);
    put64(out + 24, m->index);
    put64(out + 32, m->total);
    put32(out + 40, m->data_len);
    put32(out + 44, m->flags);
    put16(out + 48, (uint16_t)m->key_len);
    put16(out + 50, (uint16_t)m->etag_len);
    put16(out + 52, (uint16_t)m->last_modified_len);
    put16(out + 54, (uint16_t)m->content_type_len);
    put32(out + 56, (uint32_t)m->fields_len);
    put16(out + 60, (uint16_t)m->date_len);
    put16(out + 62, 0);
    put64(out + 64, (uint64_t)m->response_time);
    put64(out + 72, (uint64_t)m->initial_age);
    uint8_t *p = out + CHUNKFILE_FIXED_LEN;
    p = put_str(p, m->key, m->key_len);
    p = put_str(p, m->etag, m->etag_len);
    p = put_str(p, m->last_modified, m->last_modified_len);
    p = put_str(p, m->content_type, m->content_type_len);
    p = put_str(p, m->date, m->date_len);
    p = put_str(p, m->fields, m->fields_len);
    put64(p, body_hash);
    put64(p + 8, XXH3_64bits(out, hl - 8));
    ASSERT((size_t)(p + 16 - out) == hl);
    return hl;
}

int chunkfile_header_parse(const uint8_t *buf, size_t len, struct chunkfile_meta *m,
                           uint64_t *body_hash, size_t *hdr_len)
{
    /* Refuse a wrong magic as early as possible, even from a few bytes. */
    if (len > 0 && memcmp(buf, CHUNKFILE_MAGIC, len < MAGIC_LEN ? len : MAGIC_LEN) != 0)
        return -EBADMSG;
    if (len < 16) {
        *hdr_len = CHUNKFILE_HDR_MIN;
        return -EAGAIN;
    }
    uint32_t version = get32(buf + 8);
    if (version != 1 && version != CHUNKFILE_VERSION)
        return -EBADMSG;
    uint32_t hl = get32(buf + 12);
    if (hl < CHUNKFILE_HDR_MIN || hl > CHUNKFILE_HDR_MAX)
        return -EBADMSG;
    *hdr_len = hl;
    if (len < hl)
        return -EAGAIN;
    if (XXH3_64bits(buf, hl - 8) != get64(buf + hl - 8))
        return -EBADMSG;

    struct chunkfile_meta pm = {
        .chunk_size = get64(buf + 16),
        .index = get64(buf + 24),
        .total = get64(buf + 32),
        .data_len = get32(buf + 40),
        .flags = get32(buf + 44),
        .key_len = get16(buf + 48),
        .etag_len = get16(buf + 50),
        .last_modified_len = get16(buf + 52),
        .content_type_len = get16(buf + 54),
        .version = version,
    };
    if (version >= 2) {
        if (hl < CHUNKFILE_FIXED_LEN + 16u)
            return -EBADMSG;
        if (get16(buf + 62) != 0)
            return -EBADMSG; /* reserved: written as 0 */
        pm.fields_len = get32(buf + 56);
        pm.date_len = get16(buf + 60);
        pm.response_time = (int64_t)get64(buf + 64);
        pm.initial_age = (int64_t)get64(buf + 72);
    }
    /* The hash matched, so these hold unless a writer was buggy: still never trust the disk. */
    if (header_len(&pm, version) != hl || !chunkfile_meta_is_valid(&pm))
        return -EBADMSG;
    const char *s =
        (const char *)buf + (version == 1 ? CHUNKFILE_FIXED_LEN_V1 : CHUNKFILE_FIXED_LEN);
    pm.key = s;
    s += pm.key_len;
    pm.etag = s;
    s += pm.etag_len;
    pm.last_modified = s;
    s += pm.last_modified_len;
    pm.content_type = s;
    s += pm.content_type_len;
    pm.date = s;
    s += pm.date_len;
    pm.fields = s;
    *m = pm;
    *body_hash = get64(buf + hl - 16);
    return 0;
}

/* write() all of <p>[0..len) in steps of UTIL_IO_STEP, retrying short writes and EINTR. Returns 0
 * or -errno. */
static int write_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = write(fd, b, len < UTIL_IO_STEP ? len : UTIL_IO_STEP);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Where a body comes from: file <fd> from <off>, or when <fd> is -1 <mem> (borrowed). */
struct body_src {
    const uint8_t *mem;
    int fd;
    off_t off;
};

/* Appends <len> bytes of <src> to <fd> in steps of UTIL_IO_STEP, hashing them on the way
 * (XXH3 streamed: the same value as chunkfile_body_hash of the whole). 0 with <*hash> set,
 * -ENODATA when the source file cannot be read whole (it ends first, or a read fails: not the
 * destination's fault), or -errno of a write. */
static int copy_body(int fd, const struct body_src *src, size_t len, uint64_t *hash)
{
    uint8_t buf[UTIL_IO_STEP]; /* (a file source's step: on the writer's stack) */
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t done = 0; done < len;) {
        size_t n = len - done < UTIL_IO_STEP ? len - done : UTIL_IO_STEP;
        const uint8_t *p = buf;
        if (src->fd < 0)
            p = src->mem + done;
        else if (util_pread_exact(src->fd, buf, n, src->off + (off_t)done) < 0)
            return -ENODATA;
        XXH3_64bits_update(&st, p, n);
        int rc = write_all(fd, p, n);
        if (rc < 0)
            return rc;
        done += n;
    }
    *hash = XXH3_64bits_digest(&st);
    return 0;
}

/* chunkfile_write_tmp from <src>: a placeholder header (no magic: a file left at that point
 * fails at its first bytes), the body after it in one pass that hashes it, then the header. */
static int write_tmp(int dirfd, const char *tmp_path, const struct chunkfile_meta *m,
                     const struct body_src *src, size_t len, bool durable)
{
    uint8_t hdr[CHUNKFILE_HDR_MAX];
    ASSERT(len == m->data_len);
    size_t hl = chunkfile_header_build(m, 0, hdr, sizeof(hdr));
    if (hl == 0)
        return -EINVAL;

    int fd = openat(dirfd, tmp_path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno; /* not ours: never unlink a tmp file we did not create */
    uint64_t hash = 0;
    memset(hdr, 0, MAGIC_LEN);
    int rc = write_all(fd, hdr, hl);
    if (rc == 0)
        rc = copy_body(fd, src, len, &hash);
    if (rc == 0) {
        size_t again = chunkfile_header_build(m, hash, hdr, sizeof(hdr));
        ASSERT(again == hl); /* (the hash is a fixed-size field) */
        rc = lseek(fd, 0, SEEK_SET) < 0 ? -errno : write_all(fd, hdr, hl);
    }
    if (rc == 0 && durable && fdatasync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno; /* a deferred write error (NFS, quota) shows up here */
    if (rc < 0)
        (void)unlinkat(dirfd, tmp_path, 0);
    return rc;
}

int chunkfile_write_tmp(int dirfd, const char *tmp_path, const struct chunkfile_meta *m,
                        const void *body, size_t len, bool durable)
{
    ASSERT(body != NULL || len == 0);
    const struct body_src src = {.mem = body, .fd = -1};
    return write_tmp(dirfd, tmp_path, m, &src, len, durable);
}

int chunkfile_write_tmp_from(int dirfd, const char *tmp_path, const struct chunkfile_meta *m,
                             int src_fd, off_t src_off, size_t len, bool durable)
{
    ASSERT(src_fd >= 0);
    const struct body_src src = {.mem = NULL, .fd = src_fd, .off = src_off};
    return write_tmp(dirfd, tmp_path, m, &src, len, durable);
}

int chunkfile_commit(int dirfd, const char *tmp_path, const char *final_path)
{
    int rc = 0;
    if (renameat(dirfd, tmp_path, dirfd, final_path) < 0) {
        rc = -errno;
        if (rc == -ENOENT) {
            /* ab/ or ab/cd/ not there yet: the tree is created lazily, on first use. */
            rc = chunkfile_mkdirs(dirfd, final_path);
            if (rc == 0 && renameat(dirfd, tmp_path, dirfd, final_path) < 0)
                rc = -errno;
        }
    }
    if (rc < 0)
        (void)unlinkat(dirfd, tmp_path, 0);
    return rc;
}

int chunkfile_write(int dirfd, const char *tmp_path, const char *final_path,
                    const struct chunkfile_meta *m, const void *body, size_t len, bool durable)
{
    int rc = chunkfile_write_tmp(dirfd, tmp_path, m, body, len, durable);
    return rc < 0 ? rc : chunkfile_commit(dirfd, tmp_path, final_path);
}

/* util_pread_exact, a file that ends first being one we cannot trust (-EBADMSG). */
static int pread_all(int fd, void *p, size_t len, off_t off)
{
    int rc = util_pread_exact(fd, p, len, off);
    return rc == -ENODATA ? -EBADMSG : rc; /* shrank under us */
}

/* Copies <s>[0..len) into <dst> (room for len + 1) and NUL-terminates it. */
static void copy_str(char *dst, const char *s, size_t len)
{
    if (len > 0)
        memcpy(dst, s, len);
    dst[len] = '\0';
}

static void fill_info(struct chunkfile_info *info, const struct chunkfile_meta *m)
{
    info->chunk_size = m->chunk_size;
    info->index = m->index;
    info->total = m->total;
    info->data_len = m->data_len;
    info->flags = m->flags;
    info->etag_len = m->etag_len;
    info->last_modified_len = m->last_modified_len;
    info->content_type_len = m->content_type_len;
    copy_str(info->etag, m->etag, m->etag_len);
    copy_str(info->last_modified, m->last_modified, m->last_modified_len);
    copy_str(info->content_type, m->content_type, m->content_type_len);
    info->version = m->version;
    info->date_len = m->date_len;
    copy_str(info->date, m->date, m->date_len);
    info->fields_len = m->fields_len;
    info->response_time = m->response_time;
    info->initial_age = m->initial_age;
}

/* Everything after open(): reads and checks the file on <fd>. */
static int read_verify_fd(int fd, const char *expect_key, size_t key_len,
                          uint64_t expect_chunk_size, uint64_t expect_index,
                          struct chunkfile_info *info, void *body_out, size_t body_cap,
                          size_t *body_len, off_t *body_offset)
{
    uint8_t hdr[CHUNKFILE_HDR_MAX];
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < CHUNKFILE_HDR_MIN ||
        (uint64_t)st.st_size > CHUNKFILE_HDR_MAX + (uint64_t)CHUNKFILE_CHUNK_SIZE_MAX)
        return -EBADMSG;
    uint64_t fsize = (uint64_t)st.st_size;

    /* One read for the header and, usually, the start of the body. */
    size_t got = fsize < sizeof(hdr) ? (size_t)fsize : sizeof(hdr);
    int rc = pread_all(fd, hdr, got, 0);
    if (rc < 0)
        return rc;
    struct chunkfile_meta m;
    uint64_t body_hash;
    size_t hl;
    rc = chunkfile_header_parse(hdr, got, &m, &body_hash, &hl);
    if (rc < 0)
        return -EBADMSG; /* -EAGAIN too: the file is shorter than its header */
    fill_info(info, &m);

    if (m.key_len != key_len || memcmp(m.key, expect_key, key_len) != 0 ||
        m.chunk_size != expect_chunk_size || m.index != expect_index ||
        fsize != (uint64_t)hl + m.data_len)
        return -EBADMSG;
    if (m.data_len > body_cap)
        return -ENOBUFS;

    /* fsize == hl + data_len, so the body bytes already read are at most data_len. */
    size_t head = got - hl;
    if (head > 0)
        memcpy(body_out, hdr + hl, head);
    rc = pread_all(fd, (uint8_t *)body_out + head, m.data_len - head, (off_t)got);
    if (rc < 0)
        return rc;
    if (chunkfile_body_hash(body_out, m.data_len) != body_hash)
        return -EBADMSG;
    *body_len = m.data_len;
    *body_offset = (off_t)hl;
    return 0;
}

int chunkfile_read_verify(int dirfd, const char *path, const char *expect_key, size_t key_len,
                          uint64_t expect_chunk_size, uint64_t expect_index,
                          struct chunkfile_info *info, void *body_out, size_t body_cap,
                          size_t *body_len, off_t *body_offset)
{
    info->chunk_size = 0;
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ELOOP ? -EBADMSG : -errno; /* a symlink is no file of ours */
    int rc = read_verify_fd(fd, expect_key, key_len, expect_chunk_size, expect_index, info,
                            body_out, body_cap, body_len, body_offset);
    (void)close(fd);
    return rc;
}

int chunkfile_read_key(const char *path, char *key_out, size_t cap, size_t *key_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOATIME);
    if (fd < 0 && errno == EPERM) /* O_NOATIME needs the file's owner */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ELOOP ? -EBADMSG : -errno;
    size_t have = 0, want = 4096;
    uint8_t *buf = NULL;
    int rc;
    for (;;) {
        buf = xrealloc(buf, want);
        ssize_t n;
        do {
            n = pread(fd, buf + have, want - have, (off_t)have);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            rc = -errno;
            break;
        }
        have += (size_t)n;
        struct chunkfile_meta m;
        uint64_t body_hash;
        size_t hdr_len;
        rc = chunkfile_header_parse(buf, have, &m, &body_hash, &hdr_len);
        if (rc == 0) {
            if (m.key_len >= cap) {
                rc = -ENOBUFS;
            } else {
                memcpy(key_out, m.key, m.key_len);
                key_out[m.key_len] = '\0';
                *key_len = m.key_len;
            }
            break;
        }
        if (rc != -EAGAIN || n == 0 || hdr_len <= have || hdr_len > CHUNKFILE_HDR_MAX) {
            rc = -EBADMSG; /* short, or not a header */
            break;
        }
        want = hdr_len;
    }
    free(buf);
    (void)close(fd);
    return rc;
}

void chunkfile_key_hash(const char *key, size_t len, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(len ? key : "", len));
    memcpy(out, c.digest, 16);
}

static void hex(char *out, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int chunkfile_path(char *out, size_t cap, const char *shard_dir, const uint8_t hash[16],
                   uint64_t index)
{
    char h[33];
    hex(h, hash, 16);
    int n = snprintf(out, cap, "%s/%.2s/%.2s/%s.%llu", shard_dir, h, h + 2, h,
                     (unsigned long long)index);
    return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

int chunkfile_tmp_path(char *out, size_t cap, const char *shard_dir, const uint8_t hash[16],
                       uint64_t index, uint64_t seq)
{
    char h[33];
    hex(h, hash, 16);
    int n = snprintf(out, cap, "%s/tmp/%s.%llu.%llu", shard_dir, h, (unsigned long long)index,
                     (unsigned long long)seq);
    return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

int chunkfile_mkdirs(int dirfd, const char *final_path)
{
    char dir[PATH_MAX];
    size_t len = strlen(final_path);
    if (len >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, final_path, len + 1);

    /* dir = "<shard>/ab/cd", then cut at the slash before "cd" for "<shard>/ab". */
    char *leaf = strrchr(dir, '/');
    if (leaf == NULL || leaf == dir)
        return -EINVAL;
    *leaf = '\0';
    char *mid = strrchr(dir, '/');
    if (mid != NULL && mid != dir) {
        *mid = '\0';
        if (mkdirat(dirfd, dir, 0755) < 0 && errno != EEXIST)
            return -errno;
        *mid = '/';
    }
    if (mkdirat(dirfd, dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}
