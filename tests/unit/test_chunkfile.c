/* LDFLAGS: -Wl,--wrap=write,--wrap=fdatasync,--wrap=pread,--wrap=pread64 */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_chunkfile: the chunk file format. Header layout pinned byte by byte, build/parse round
 * trip, key hash and paths; write (tmp + rename, lazy ab/cd directories) and read_verify round
 * trips; and every corruption kind rejected as -EBADMSG without touching any file: truncated to
 * every shorter length, zeroed, each bit flipped, extended, foreign key, other chunk_size, other
 * index, directory and symlink in place. write() and fdatasync() are wrapped (--wrap) to inject
 * ENOSPC, EIO, EINTR and short writes: a failed write leaves neither its tmp file nor a final file
 * (an older final file stays intact); pread() is wrapped to count its calls and sizes. Each test
 * runs in its own mkdtemp() directory under /tmp.
 */
#include "chunkfile.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "range.h"
#include "util.h"

/* ---- write() / fdatasync() fault injection ---- */

static int g_write_calls;        /* write() calls since the last reset */
static int g_write_fail_at;      /* fail this call (1-based) with g_write_errno; 0: never */
static int g_write_errno;        /* errno for the failing call */
static size_t g_write_max;       /* cap each write() at this many bytes; 0: no cap */
static size_t g_write_most;      /* the most bytes one write() was asked to move */
static int g_write_eintr;        /* fail this many calls with EINTR first */
static size_t g_read_most;       /* the most bytes one pread() was asked for */
static int g_read_calls;         /* pread() calls since the last reset */
static int g_read_errno;         /* fail every pread() with this errno; 0: never */
static int g_sync_calls;         /* fdatasync() calls */
static int g_sync_errno;         /* fail fdatasync() with this errno; 0: succeed */
static uint8_t g_write_first[8]; /* the first bytes the first write() was asked to move */

static void faults_reset(void)
{
    g_write_calls = g_write_fail_at = g_write_errno = g_write_eintr = 0;
    g_write_max = g_write_most = g_read_most = 0;
    g_read_calls = g_read_errno = 0;
    g_sync_calls = g_sync_errno = 0;
}

ssize_t __real_write(int fd, const void *buf, size_t count);
ssize_t __wrap_write(int fd, const void *buf, size_t count);
int __real_fdatasync(int fd);
int __wrap_fdatasync(int fd);

ssize_t __wrap_write(int fd, const void *buf, size_t count)
{
    g_write_calls++;
    if (g_write_calls == 1)
        memcpy(g_write_first, buf, count < sizeof(g_write_first) ? count : sizeof(g_write_first));
    if (count > g_write_most)
        g_write_most = count;
    if (g_write_eintr > 0) {
        g_write_eintr--;
        errno = EINTR;
        return -1;
    }
    if (g_write_fail_at != 0 && g_write_calls == g_write_fail_at) {
        errno = g_write_errno;
        return -1;
    }
    if (g_write_max != 0 && count > g_write_max)
        count = g_write_max;
    return __real_write(fd, buf, count);
}

/* pread() (pread64() where _FILE_OFFSET_BITS=64 renames it, as here): counted, not changed. */
ssize_t __real_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __real_pread64(int fd, void *buf, size_t count, off64_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t count, off64_t off);

/* Counts a call; whether it is to fail (errno set). */
static bool count_read(size_t count)
{
    g_read_calls++;
    if (count > g_read_most)
        g_read_most = count;
    if (g_read_errno == 0)
        return false;
    errno = g_read_errno;
    return true;
}

ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off)
{
    return count_read(count) ? -1 : __real_pread(fd, buf, count, off);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t count, off64_t off)
{
    return count_read(count) ? -1 : __real_pread64(fd, buf, count, off);
}

int __wrap_fdatasync(int fd)
{
    g_sync_calls++;
    if (g_sync_errno != 0) {
        errno = g_sync_errno;
        return -1;
    }
    return __real_fdatasync(fd);
}

/* ---- fixture: a shard directory with tmp/ under /tmp ---- */

#define CS 64u     /* chunk size of the small test object */
#define TOTAL 150u /* 3 chunks: 64, 64, 22 */

struct fx {
    char dir[64];
    char path[256];
    char tmp[256];
    uint8_t body[CS];
    uint8_t out[CS];
};

static const char KEY[] = "steam\n/depot/42/chunk/0a1b";
#define DATE "Sun, 06 Nov 1994 08:49:37 GMT"
#define FIELDS "Content-Encoding: gzip\r\nX-Custom: 1\r\n"
static const char KEY2[] = "steam\n/depot/42/chunk/ffff";
static const char ETAG[] = "\"v1-abc\"";
static const char LM[] = "Tue, 01 Jan 2030 00:00:00 GMT";
static const char CT[] = "application/octet-stream";

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    strcpy(fx->dir, "/tmp/cp_chunkfile.XXXXXX");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    char t[256];
    snprintf(t, sizeof(t), "%s/tmp", fx->dir);
    if (mkdir(t, 0755) < 0)
        return -1;
    faults_reset();
    *state = fx;
    return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    faults_reset();
    int rc = nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return rc;
}

static struct chunkfile_meta meta_for(const char *key, uint64_t index, uint64_t cs, uint64_t total)
{
    uint64_t off, len;
    range_chunk_span(index, cs, total, &off, &len);
    struct chunkfile_meta m = {
        .chunk_size = cs,
        .index = index,
        .total = total,
        .data_len = (uint32_t)len,
        .flags = 0x5a,
        .key = key,
        .key_len = strlen(key),
        .etag = ETAG,
        .etag_len = strlen(ETAG),
        .last_modified = LM,
        .last_modified_len = strlen(LM),
        .content_type = CT,
        .content_type_len = strlen(CT),
        .date = DATE,
        .date_len = strlen(DATE),
        .fields = FIELDS,
        .fields_len = strlen(FIELDS),
        .response_time = 0x0102030405060708ll,
        .initial_age = 0x21,
    };
    return m;
}

/* A version 1 header (as written before the stored fields) for <m>, by hand. Returns its length. */
static size_t v1_header(const struct chunkfile_meta *m, uint64_t body_hash, uint8_t *out)
{
    size_t hl = 56 + m->key_len + m->etag_len + m->last_modified_len + m->content_type_len + 16;
    memset(out, 0, hl);
    memcpy(out, "CPCHUNK1", 8);
    out[8] = 1;
    for (int i = 0; i < 4; i++) {
        out[12 + i] = (uint8_t)(hl >> (8 * i));
        out[40 + i] = (uint8_t)(m->data_len >> (8 * i));
        out[44 + i] = (uint8_t)(m->flags >> (8 * i));
    }
    for (int i = 0; i < 8; i++) {
        out[16 + i] = (uint8_t)(m->chunk_size >> (8 * i));
        out[24 + i] = (uint8_t)(m->index >> (8 * i));
        out[32 + i] = (uint8_t)(m->total >> (8 * i));
    }
    out[48] = (uint8_t)m->key_len;
    out[50] = (uint8_t)m->etag_len;
    out[52] = (uint8_t)m->last_modified_len;
    out[54] = (uint8_t)m->content_type_len;
    size_t o = 56;
    memcpy(out + o, m->key, m->key_len);
    o += m->key_len;
    memcpy(out + o, m->etag, m->etag_len);
    o += m->etag_len;
    memcpy(out + o, m->last_modified, m->last_modified_len);
    o += m->last_modified_len;
    memcpy(out + o, m->content_type, m->content_type_len);
    o += m->content_type_len;
    for (int i = 0; i < 8; i++)
        out[o + (size_t)i] = (uint8_t)(body_hash >> (8 * i));
    o += 8;
    uint64_t hh = XXH3_64bits(out, o);
    for (int i = 0; i < 8; i++)
        out[o + (size_t)i] = (uint8_t)(hh >> (8 * i));
    return o + 8;
}

static void fill_body(uint8_t *b, size_t len, uint64_t index)
{
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(index * 131 + i * 7 + 1);
}

/* Paths of <key>'s chunk <index> into fx->path and fx->tmp. */
static void paths_for(struct fx *fx, const char *key, uint64_t index)
{
    uint8_t h[16];
    chunkfile_key_hash(key, strlen(key), h);
    assert_int_equal(chunkfile_path(fx->path, sizeof(fx->path), fx->dir, h, index), 0);
    assert_int_equal(chunkfile_tmp_path(fx->tmp, sizeof(fx->tmp), fx->dir, h, index, 1), 0);
}

/* Writes <key>'s chunk <index> (chunk size <cs>) to its path; fills fx->body. Returns data_len. */
static size_t write_chunk(struct fx *fx, const char *key, uint64_t index, uint64_t cs)
{
    struct chunkfile_meta m = meta_for(key, index, cs, TOTAL);
    paths_for(fx, key, index);
    fill_body(fx->body, m.data_len, index);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, m.data_len, false),
                     0);
    return m.data_len;
}

static int verify(struct fx *fx, const char *key, uint64_t cs, uint64_t index,
                  struct chunkfile_info *info)
{
    size_t blen = 0;
    off_t boff = 0;
    return chunkfile_read_verify(AT_FDCWD, fx->path, key, strlen(key), cs, index, info, fx->out,
                                 sizeof(fx->out), &blen, &boff);
}

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static off_t file_size(const char *p)
{
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    return st.st_size;
}

static size_t read_file(const char *p, uint8_t *buf, size_t cap)
{
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = pread(fd, buf, cap, 0);
    assert_true(n >= 0 && (size_t)n < cap);
    close(fd);
    return (size_t)n;
}

static void put_file(const char *p, const uint8_t *buf, size_t len)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
    close(fd);
}

/* ---- key hash and paths ---- */

static void test_chunkfile_key_hash_known_vector(void **state)
{
    /* XXH3-128 of the empty input, canonical (big-endian) bytes: pins the on-disk naming. */
    static const uint8_t empty[16] = {0x99, 0xaa, 0x06, 0xd3, 0x01, 0x47, 0x98, 0xd8,
                                      0x60, 0x01, 0xc3, 0x24, 0x46, 0x8d, 0x49, 0x7f};
    uint8_t h[16];
    (void)state;
    chunkfile_key_hash("", 0, h);
    assert_memory_equal(h, empty, 16);
    chunkfile_key_hash(NULL, 0, h);
    assert_memory_equal(h, empty, 16);
}

static void test_chunkfile_key_hash_stable_and_distinct(void **state)
{
    uint8_t a[16], b[16], c[16];
    (void)state;
    chunkfile_key_hash(KEY, strlen(KEY), a);
    chunkfile_key_hash(KEY, strlen(KEY), b);
    chunkfile_key_hash(KEY2, strlen(KEY2), c);
    assert_memory_equal(a, b, 16);
    assert_memory_not_equal(a, c, 16);
    /* Only the given length counts. */
    chunkfile_key_hash(KEY2, strlen(KEY2) - 4, c);
    chunkfile_key_hash(KEY, strlen(KEY) - 4, b);
    assert_memory_equal(b, c, 16);
}

static void test_chunkfile_path_layout(void **state)
{
    uint8_t h[16];
    char p[256];
    (void)state;
    for (int i = 0; i < 16; i++)
        h[i] = (uint8_t)(0xa0 + i);
    assert_int_equal(chunkfile_path(p, sizeof(p), "/cache/0", h, 0), 0);
    assert_string_equal(p, "/cache/0/a0/a1/a0a1a2a3a4a5a6a7a8a9aaabacadaeaf.0");
    assert_int_equal(chunkfile_path(p, sizeof(p), "d", h, UINT64_MAX), 0);
    assert_string_equal(p, "d/a0/a1/a0a1a2a3a4a5a6a7a8a9aaabacadaeaf.18446744073709551615");
    assert_true(strlen(p) <= 1 + CHUNKFILE_PATH_EXTRA);
}

static void test_chunkfile_path_too_small_is_enametoolong(void **state)
{
    uint8_t h[16] = {0};
    char p[64];
    (void)state;
    const char *want = "/c/00/00/00000000000000000000000000000000.7";
    assert_int_equal(chunkfile_path(p, strlen(want), "/c", h, 7), -ENAMETOOLONG);
    assert_int_equal(chunkfile_path(p, strlen(want) + 1, "/c", h, 7), 0);
    assert_string_equal(p, want);
    assert_int_equal(chunkfile_tmp_path(p, 10, "/c", h, 7, 1), -ENAMETOOLONG);
}

static void test_chunkfile_tmp_path_layout(void **state)
{
    uint8_t h[16];
    char p[256];
    (void)state;
    for (int i = 0; i < 16; i++)
        h[i] = (uint8_t)(0xa0 + i);
    assert_int_equal(chunkfile_tmp_path(p, sizeof(p), "/cache/0", h, 3, 99), 0);
    assert_string_equal(p, "/cache/0/tmp/a0a1a2a3a4a5a6a7a8a9aaabacadaeaf.3.99");
    assert_int_equal(chunkfile_tmp_path(p, sizeof(p), "d", h, UINT64_MAX, UINT64_MAX), 0);
    assert_true(strlen(p) <= 1 + CHUNKFILE_PATH_EXTRA);
}

/* ---- header build / parse ---- */

static void test_chunkfile_header_build_layout_is_pinned(void **state)
{
    uint8_t got[CHUNKFILE_HDR_MAX], want[512];
    (void)state;
    struct chunkfile_meta m = meta_for("k\n/p", 2, 64, 150);
    size_t hl = chunkfile_header_build(&m, 0x1122334455667788ull, got, sizeof(got));
    size_t klen = 4, elen = strlen(ETAG), llen = strlen(LM), clen = strlen(CT);
    size_t dlen = strlen(DATE), flen = strlen(FIELDS);
    assert_int_equal(hl, 80 + klen + elen + llen + clen + dlen + flen + 16);

    /* The layout of chunkfile.h, written out by hand. */
    memset(want, 0, sizeof(want));
    memcpy(want, "CPCHUNK1", 8);
    want[8] = 2;              /* version */
    want[12] = (uint8_t)hl;   /* hdr_len */
    want[16] = 64;            /* chunk_size */
    want[24] = 2;             /* index */
    want[32] = 150;           /* total */
    want[40] = 22;            /* data_len: the short last chunk */
    want[44] = 0x5a;          /* flags */
    want[48] = (uint8_t)klen; /* key_len */
    want[50] = (uint8_t)elen; /* etag_len */
    want[52] = (uint8_t)llen; /* last_modified_len */
    want[54] = (uint8_t)clen; /* content_type_len */
    want[56] = (uint8_t)flen; /* fields_len */
    want[60] = (uint8_t)dlen; /* date_len */
    for (int i = 0; i < 8; i++)
        want[64 + i] = (uint8_t)(0x0102030405060708ull >> (8 * i)); /* response_time */
    want[72] = 0x21;                                                /* initial_age */
    size_t o = 80;
    memcpy(want + o, "k\n/p", klen);
    o += klen;
    memcpy(want + o, ETAG, elen);
    o += elen;
    memcpy(want + o, LM, llen);
    o += llen;
    memcpy(want + o, CT, clen);
    o += clen;
    memcpy(want + o, DATE, dlen);
    o += dlen;
    memcpy(want + o, FIELDS, flen);
    o += flen;
    for (int i = 0; i < 8; i++)
        want[o + (size_t)i] = (uint8_t)(0x1122334455667788ull >> (8 * i));
    o += 8;
    uint64_t hh = XXH3_64bits(want, o);
    for (int i = 0; i < 8; i++)
        want[o + (size_t)i] = (uint8_t)(hh >> (8 * i));
    o += 8;
    assert_int_equal(o, hl);
    assert_memory_equal(got, want, hl);
}

static void test_chunkfile_header_parse_round_trip(void **state)
{
    uint8_t buf[CHUNKFILE_HDR_MAX];
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 1, CS, TOTAL), p;
    size_t hl = chunkfile_header_build(&m, 42, buf, sizeof(buf));
    assert_true(hl >= CHUNKFILE_HDR_MIN && hl <= CHUNKFILE_HDR_MAX);
    uint64_t bh = 0;
    size_t plen = 0;
    /* Extra bytes after the header (the body) are not the parser's business. */
    assert_int_equal(chunkfile_header_parse(buf, sizeof(buf), &p, &bh, &plen), 0);
    assert_int_equal(plen, hl);
    assert_int_equal(bh, 42);
    assert_int_equal(p.chunk_size, CS);
    assert_int_equal(p.index, 1);
    assert_int_equal(p.total, TOTAL);
    assert_int_equal(p.data_len, CS);
    assert_int_equal(p.flags, 0x5a);
    assert_int_equal(p.key_len, strlen(KEY));
    assert_memory_equal(p.key, KEY, p.key_len);
    assert_int_equal(p.etag_len, strlen(ETAG));
    assert_memory_equal(p.etag, ETAG, p.etag_len);
    assert_int_equal(p.last_modified_len, strlen(LM));
    assert_memory_equal(p.last_modified, LM, p.last_modified_len);
    assert_int_equal(p.content_type_len, strlen(CT));
    assert_memory_equal(p.content_type, CT, p.content_type_len);
    /* The strings borrow the buffer. */
    assert_true((const uint8_t *)p.key > buf && (const uint8_t *)p.key < buf + hl);
}

static void test_chunkfile_header_parse_empty_validators(void **state)
{
    uint8_t buf[CHUNKFILE_HDR_MAX];
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL), p;
    m.etag = m.last_modified = m.content_type = m.date = m.fields = NULL;
    m.etag_len = m.last_modified_len = m.content_type_len = m.date_len = m.fields_len = 0;
    size_t hl = chunkfile_header_build(&m, 1, buf, sizeof(buf));
    assert_int_equal(hl, CHUNKFILE_FIXED_LEN + strlen(KEY) + 16);
    uint64_t bh;
    size_t plen;
    assert_int_equal(chunkfile_header_parse(buf, hl, &p, &bh, &plen), 0);
    assert_int_equal(p.etag_len, 0);
    assert_int_equal(p.last_modified_len, 0);
    assert_int_equal(p.content_type_len, 0);
}

static void test_chunkfile_header_parse_short_input_is_eagain(void **state)
{
    uint8_t buf[CHUNKFILE_HDR_MAX];
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL), p;
    size_t hl = chunkfile_header_build(&m, 1, buf, sizeof(buf));
    for (size_t len = 0; len < hl; len++) {
        uint64_t bh;
        size_t plen = 0;
        assert_int_equal(chunkfile_header_parse(buf, len, &p, &bh, &plen), -EAGAIN);
        assert_int_equal(plen, len < 16 ? CHUNKFILE_HDR_MIN : hl);
    }
}

static void test_chunkfile_header_parse_bad_magic_fails_early(void **state)
{
    uint8_t buf[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta p;
    uint64_t bh;
    size_t plen;
    (void)state;
    memcpy(buf, "XPCHUNK1", 8);
    assert_int_equal(chunkfile_header_parse(buf, 1, &p, &bh, &plen), -EBADMSG);
    memcpy(buf, "CPCHUNK2", 8);
    assert_int_equal(chunkfile_header_parse(buf, 7, &p, &bh, &plen), -EAGAIN);
    assert_int_equal(chunkfile_header_parse(buf, 8, &p, &bh, &plen), -EBADMSG);
}

/* Rewrites the header hash after an edit, so that only the semantic checks can catch it. */
static void rehash(uint8_t *buf, size_t hl)
{
    uint64_t h = XXH3_64bits(buf, hl - 8);
    for (int i = 0; i < 8; i++)
        buf[hl - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

static void test_chunkfile_header_parse_inconsistent_fields_fail(void **state)
{
    uint8_t good[CHUNKFILE_HDR_MAX], buf[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta p;
    uint64_t bh;
    size_t plen;
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 2, CS, TOTAL);
    size_t hl = chunkfile_header_build(&m, 1, good, sizeof(good));
    /* byte offset, new value: each yields a well-hashed header that lies */
    static const struct {
        size_t off;
        uint8_t val;
    } edits[] = {
        {8, 3},     /* version 3 */
        {8, 1},     /* version 1: its layout is shorter, the sum no longer matches hdr_len */
        {56, 0xff}, /* fields_len: the sum no longer matches hdr_len */
        {60, 0xff}, /* date_len 255: over its bound */
        {79, 0x80}, /* initial_age negative */
        {16, 0},    /* chunk_size 0 */
        {16, 32},   /* chunk_size 32: index 2's length would be 32 */
        {24, 3},    /* index 3 of a 3-chunk object */
        {32, 0},    /* total 0 */
        {32, 140},  /* total 140: last chunk would be 12 bytes */
        {40, 64},   /* data_len of a full chunk for the short last one */
        {48, 0},    /* key_len 0: the sum no longer matches hdr_len */
        {50, 0xff}, /* etag_len 255: the sum no longer matches hdr_len */
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        memcpy(buf, good, hl);
        buf[edits[i].off] = edits[i].val;
        rehash(buf, hl);
        if (chunkfile_header_parse(buf, hl, &p, &bh, &plen) != -EBADMSG)
            fail_msg("edit %zu (offset %zu) accepted", i, edits[i].off);
    }
    /* hdr_len out of bounds. */
    memcpy(buf, good, hl);
    buf[12] = 10;
    assert_int_equal(chunkfile_header_parse(buf, hl, &p, &bh, &plen), -EBADMSG);
    memcpy(buf, good, hl);
    buf[14] = 1; /* 64 KiB */
    assert_int_equal(chunkfile_header_parse(buf, hl, &p, &bh, &plen), -EBADMSG);
}

static void test_chunkfile_header_parse_reads_version_1(void **state)
{
    uint8_t buf[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta p;
    uint64_t bh;
    size_t plen;
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 2, CS, TOTAL);
    size_t hl = v1_header(&m, 0x77, buf);
    assert_int_equal(chunkfile_header_parse(buf, hl, &p, &bh, &plen), 0);
    assert_int_equal(plen, hl);
    assert_int_equal(bh, 0x77);
    assert_int_equal(p.version, 1);
    assert_int_equal(p.index, 2);
    assert_int_equal(p.total, TOTAL);
    assert_int_equal(p.data_len, m.data_len);
    assert_memory_equal(p.key, KEY, p.key_len);
    assert_memory_equal(p.etag, ETAG, p.etag_len);
    assert_memory_equal(p.last_modified, LM, p.last_modified_len);
    assert_memory_equal(p.content_type, CT, p.content_type_len);
    assert_int_equal(p.date_len, 0);
    assert_int_equal(p.fields_len, 0);
    assert_int_equal(p.response_time, 0);
    assert_int_equal(p.initial_age, 0);
    for (size_t len = 0; len < hl; len++)
        assert_int_equal(chunkfile_header_parse(buf, len, &p, &bh, &plen), -EAGAIN);
}

static void test_chunkfile_read_verify_version_1_file(void **state)
{
    struct fx *fx = *state;
    uint8_t hdr[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta m = meta_for(KEY, 1, CS, TOTAL);
    paths_for(fx, KEY, 1);
    fill_body(fx->body, m.data_len, 1);
    size_t hl = v1_header(&m, chunkfile_body_hash(fx->body, m.data_len), hdr);
    FILE *f = fopen(fx->path, "wb");
    if (f == NULL) {
        assert_int_equal(chunkfile_mkdirs(AT_FDCWD, fx->path), 0);
        f = fopen(fx->path, "wb");
    }
    assert_non_null(f);
    assert_int_equal(fwrite(hdr, 1, hl, f), hl);
    assert_int_equal(fwrite(fx->body, 1, m.data_len, f), m.data_len);
    assert_int_equal(fclose(f), 0);
    struct chunkfile_info info;
    size_t blen;
    off_t boff;
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), CS, 1, &info,
                                           fx->out, CS, &blen, &boff),
                     0);
    assert_int_equal(info.version, 1);
    assert_int_equal(blen, m.data_len);
    assert_int_equal(boff, (off_t)hl);
    assert_memory_equal(fx->out, fx->body, blen);
    assert_string_equal(info.etag, ETAG);
    assert_int_equal(info.date_len, 0);
    assert_int_equal(info.fields_len, 0);
}

static void test_chunkfile_header_parse_flipped_bit_fails(void **state)
{
    uint8_t good[CHUNKFILE_HDR_MAX], buf[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta p;
    uint64_t bh;
    size_t plen;
    (void)state;
    struct chunkfile_meta m = meta_for(KEY, 1, CS, TOTAL);
    memset(good, 0, sizeof(good));
    size_t hl = chunkfile_header_build(&m, 77, good, sizeof(good));
    for (size_t bit = 0; bit < hl * 8; bit++) {
        memcpy(buf, good, sizeof(buf));
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        /* The whole buffer is offered, so a grown hdr_len is not merely -EAGAIN. */
        if (chunkfile_header_parse(buf, sizeof(buf), &p, &bh, &plen) != -EBADMSG)
            fail_msg("bit %zu flipped: accepted", bit);
    }
}

static void test_chunkfile_header_build_refuses_invalid_meta(void **state)
{
    static char big[CHUNKFILE_KEY_MAX + 2];
    uint8_t buf[CHUNKFILE_HDR_MAX];
    (void)state;
    memset(big, 'x', sizeof(big));
    struct chunkfile_meta ok = meta_for(KEY, 0, CS, TOTAL), m;

    m = ok;
    m.key_len = 0;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.key = big;
    m.key_len = CHUNKFILE_KEY_MAX + 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m.key_len = CHUNKFILE_KEY_MAX; /* at the limit: fine */
    assert_true(chunkfile_header_build(&m, 0, buf, sizeof(buf)) > 0);
    m = ok;
    m.etag = big;
    m.etag_len = CHUNKFILE_ETAG_MAX + 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.last_modified = big;
    m.last_modified_len = CHUNKFILE_LAST_MODIFIED_MAX + 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.content_type = big;
    m.content_type_len = CHUNKFILE_CONTENT_TYPE_MAX + 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.chunk_size = 0;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.chunk_size = (uint64_t)CHUNKFILE_CHUNK_SIZE_MAX + 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.total = 0;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.index = 3;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = ok;
    m.data_len = CS - 1;
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    m = meta_for(KEY, 2, CS, TOTAL);
    m.data_len = CS; /* the last chunk is 22 bytes */
    assert_int_equal(chunkfile_header_build(&m, 0, buf, sizeof(buf)), 0);
    /* Room for the header, less one byte. */
    m = ok;
    size_t hl = chunkfile_header_build(&m, 0, buf, sizeof(buf));
    assert_int_equal(chunkfile_header_build(&m, 0, buf, hl - 1), 0);
    assert_int_equal(chunkfile_header_build(&m, 0, buf, hl), hl);
}

/* ---- write + read_verify round trips ---- */

static void test_chunkfile_write_read_round_trip(void **state)
{
    struct fx *fx = *state;
    for (uint64_t idx = 0; idx < 3; idx++) {
        size_t dlen = write_chunk(fx, KEY, idx, CS);
        assert_int_equal(dlen, idx < 2 ? CS : TOTAL - 2 * CS);
        assert_false(exists(fx->tmp));

        struct chunkfile_info info;
        size_t blen = 0;
        off_t boff = 0;
        memset(fx->out, 0, sizeof(fx->out));
        assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), CS, idx, &info,
                                               fx->out, sizeof(fx->out), &blen, &boff),
                         0);
        assert_int_equal(blen, dlen);
        assert_memory_equal(fx->out, fx->body, dlen);
        assert_int_equal(boff, CHUNKFILE_FIXED_LEN + strlen(KEY) + strlen(ETAG) + strlen(LM) +
                                   strlen(CT) + strlen(DATE) + strlen(FIELDS) + 16);
        assert_int_equal(info.version, CHUNKFILE_VERSION);
        assert_string_equal(info.date, DATE);
        assert_int_equal(info.fields_len, strlen(FIELDS));
        assert_int_equal(info.response_time, 0x0102030405060708ll);
        assert_int_equal(info.initial_age, 0x21);
        assert_int_equal(file_size(fx->path), boff + (off_t)dlen);
        assert_int_equal(info.chunk_size, CS);
        assert_int_equal(info.index, idx);
        assert_int_equal(info.total, TOTAL);
        assert_int_equal(info.data_len, dlen);
        assert_int_equal(info.flags, 0x5a);
        assert_string_equal(info.etag, ETAG);
        assert_int_equal(info.etag_len, strlen(ETAG));
        assert_string_equal(info.last_modified, LM);
        assert_int_equal(info.last_modified_len, strlen(LM));
        assert_string_equal(info.content_type, CT);
        assert_int_equal(info.content_type_len, strlen(CT));

        /* The body really is at body_offset (sendfile will rely on it). */
        uint8_t whole[512];
        size_t n = read_file(fx->path, whole, sizeof(whole));
        assert_int_equal(n, (size_t)boff + dlen);
        assert_memory_equal(whole + boff, fx->body, dlen);
    }
}

static void test_chunkfile_write_durable_syncs_once(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    struct chunkfile_info info;
    paths_for(fx, KEY, 0);
    fill_body(fx->body, CS, 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, true), 0);
    assert_int_equal(g_sync_calls, 1);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    /* Not durable: no flush. */
    assert_int_equal(unlink(fx->path), 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false), 0);
    assert_int_equal(g_sync_calls, 1);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
}

static void test_chunkfile_write_big_header_and_body(void **state)
{
    struct fx *fx = *state;
    /* A key, ETag, Last-Modified, Content-Type, Date and fields at their limits, a 1 MiB body. */
    static char key[CHUNKFILE_KEY_MAX], etag[CHUNKFILE_ETAG_MAX];
    static char lm[CHUNKFILE_LAST_MODIFIED_MAX], ct[CHUNKFILE_CONTENT_TYPE_MAX];
    static char date[CHUNKFILE_DATE_MAX], fields[CHUNKFILE_FIELDS_MAX];
    const uint64_t cs = 1u << 20;
    memset(key, 'k', sizeof(key));
    memset(etag, 'e', sizeof(etag));
    etag[0] = etag[sizeof(etag) - 1] = '"';
    memset(lm, 'l', sizeof(lm));
    memset(ct, 'c', sizeof(ct));
    memset(date, 'd', sizeof(date));
    memset(fields, 'f', sizeof(fields));
    struct chunkfile_meta m = {
        .chunk_size = cs,
        .index = 0,
        .total = 3 * cs,
        .data_len = (uint32_t)cs,
        .key = key,
        .key_len = sizeof(key),
        .etag = etag,
        .etag_len = sizeof(etag),
        .last_modified = lm,
        .last_modified_len = sizeof(lm),
        .content_type = ct,
        .content_type_len = sizeof(ct),
        .date = date,
        .date_len = sizeof(date),
        .fields = fields,
        .fields_len = sizeof(fields),
    };
    uint8_t *body = malloc(cs), *out = malloc(cs);
    assert_non_null(body);
    assert_non_null(out);
    fill_body(body, cs, 9);
    uint8_t h[16];
    chunkfile_key_hash(key, sizeof(key), h);
    assert_int_equal(chunkfile_path(fx->path, sizeof(fx->path), fx->dir, h, 0), 0);
    assert_int_equal(chunkfile_tmp_path(fx->tmp, sizeof(fx->tmp), fx->dir, h, 0, 5), 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, body, cs, false), 0);
    assert_int_equal(file_size(fx->path), (off_t)(CHUNKFILE_HDR_MAX + cs));

    struct chunkfile_info info;
    size_t blen = 0;
    off_t boff = 0;
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, key, sizeof(key), cs, 0, &info, out,
                                           cs, &blen, &boff),
                     0);
    assert_int_equal(blen, cs);
    assert_int_equal(boff, CHUNKFILE_HDR_MAX);
    assert_memory_equal(out, body, cs);
    assert_int_equal(info.etag_len, CHUNKFILE_ETAG_MAX);
    assert_memory_equal(info.etag, etag, sizeof(etag));
    assert_int_equal(info.etag[CHUNKFILE_ETAG_MAX], '\0');
    /* A buffer one byte short. */
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, key, sizeof(key), cs, 0, &info, out,
                                           cs - 1, &blen, &boff),
                     -ENOBUFS);
    free(body);
    free(out);
}

/* A chunk is written and read in system calls of at most UTIL_IO_STEP bytes each (util.h: the
 * loop waits for no long copy of a disk thread on its core). */
static void test_chunkfile_io_moves_at_most_a_step_per_call(void **state)
{
    struct fx *fx = *state;
    const uint64_t cs = 1u << 20;
    uint8_t *body = malloc(cs), *out = malloc(cs);
    assert_non_null(body);
    assert_non_null(out);
    fill_body(body, cs, 3);
    struct chunkfile_meta m = meta_for(KEY, 0, cs, 2 * cs);
    paths_for(fx, KEY, 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, body, cs, false), 0);
    assert_true(g_write_most > 0 && g_write_most <= UTIL_IO_STEP);
    assert_true((size_t)g_write_calls >= cs / UTIL_IO_STEP);
    struct chunkfile_info info;
    size_t blen = 0;
    off_t boff = 0;
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), cs, 0, &info, out,
                                           cs, &blen, &boff),
                     0);
    assert_memory_equal(out, body, cs);
    assert_true(g_read_most > 0 && g_read_most <= UTIL_IO_STEP);
    assert_true((size_t)g_read_calls >= cs / UTIL_IO_STEP);
    free(body);
    free(out);
}

/* A body copied from another file (chunkfile_write_tmp_from: a chunk in memory-file memory)
 * makes the same file, byte for byte, as from memory; it moves in steps; a source that ends
 * early or a failed write leaves no tmp file. */
static void test_chunkfile_write_tmp_from_a_file_is_the_same_file(void **state)
{
    struct fx *fx = *state;
    const uint64_t cs = (1u << 20) + 100; /* more than a step, not a multiple of one */
    const off_t at = 4097;                /* where the body starts in the source */
    uint8_t *src = calloc(1, (size_t)at + cs), *a = malloc(2 * cs), *b = malloc(2 * cs);
    assert_non_null(src);
    assert_non_null(a);
    assert_non_null(b);
    fill_body(src + at, cs, 5);
    char srcpath[300], tmp2[300];
    snprintf(srcpath, sizeof(srcpath), "%s/source", fx->dir);
    put_file(srcpath, src, (size_t)at + cs);
    int sfd = open(srcpath, O_RDONLY);
    assert_true(sfd >= 0);
    struct chunkfile_meta m = meta_for(KEY, 0, cs, 2 * cs);
    paths_for(fx, KEY, 0);
    snprintf(tmp2, sizeof(tmp2), "%s.2", fx->tmp);
    assert_int_equal(chunkfile_write_tmp(AT_FDCWD, fx->tmp, &m, src + at, cs, false), 0);
    faults_reset();
    assert_int_equal(chunkfile_write_tmp_from(AT_FDCWD, tmp2, &m, sfd, at, cs, false), 0);
    assert_true(g_read_most > 0 && g_read_most <= UTIL_IO_STEP);
    assert_true(g_write_most > 0 && g_write_most <= UTIL_IO_STEP);
    size_t na = read_file(fx->tmp, a, 2 * cs), nb = read_file(tmp2, b, 2 * cs);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_int_equal(unlink(fx->tmp), 0);
    assert_int_equal(chunkfile_commit(AT_FDCWD, tmp2, fx->path), 0);
    struct chunkfile_info info;
    size_t blen = 0;
    off_t boff = 0;
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), cs, 0, &info, a,
                                           2 * cs, &blen, &boff),
                     0);
    assert_int_equal(blen, cs);
    assert_memory_equal(a, src + at, cs);
    /* The source ends a byte early: -ENODATA (not the disk's error), no tmp file. */
    assert_int_equal(chunkfile_write_tmp_from(AT_FDCWD, tmp2, &m, sfd, at + 1, cs, false),
                     -ENODATA);
    assert_false(exists(tmp2));
    /* A read of the source fails: -ENODATA too, no tmp file. */
    faults_reset();
    g_read_errno = EIO;
    assert_int_equal(chunkfile_write_tmp_from(AT_FDCWD, tmp2, &m, sfd, at, cs, false), -ENODATA);
    assert_int_equal(g_read_calls, 1);
    assert_false(exists(tmp2));
    /* The disk fills on the second write (the first step of the body): no tmp file. */
    faults_reset();
    g_write_fail_at = 2;
    g_write_errno = ENOSPC;
    assert_int_equal(chunkfile_write_tmp_from(AT_FDCWD, tmp2, &m, sfd, at, cs, false), -ENOSPC);
    assert_false(exists(tmp2));
    close(sfd);
    free(src);
    free(a);
    free(b);
}

static void test_chunkfile_write_creates_shard_subdirs_lazily(void **state)
{
    struct fx *fx = *state;
    paths_for(fx, KEY, 0);
    char d1[300], d2[300];
    size_t dl = strlen(fx->dir);
    snprintf(d1, sizeof(d1), "%.*s", (int)(dl + 3), fx->path);
    snprintf(d2, sizeof(d2), "%.*s", (int)(dl + 6), fx->path);
    assert_false(exists(d1));
    write_chunk(fx, KEY, 0, CS);
    struct stat st;
    assert_int_equal(stat(d2, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* A second chunk of the same object, and chunkfile_mkdirs() again: existing dirs are fine. */
    write_chunk(fx, KEY, 1, CS);
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, fx->path), 0);
}

static void test_chunkfile_write_relative_to_dirfd(void **state)
{
    struct fx *fx = *state;
    int dfd = open(fx->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    uint8_t h[16];
    char rel[256], reltmp[256];
    chunkfile_key_hash(KEY, strlen(KEY), h);
    assert_int_equal(chunkfile_path(rel, sizeof(rel), ".", h, 0), 0);
    assert_int_equal(chunkfile_tmp_path(reltmp, sizeof(reltmp), ".", h, 0, 1), 0);
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    fill_body(fx->body, CS, 0);
    assert_int_equal(chunkfile_write(dfd, reltmp, rel, &m, fx->body, CS, false), 0);
    struct chunkfile_info info;
    size_t blen;
    off_t boff;
    assert_int_equal(chunkfile_read_verify(dfd, rel, KEY, strlen(KEY), CS, 0, &info, fx->out,
                                           sizeof(fx->out), &blen, &boff),
                     0);
    close(dfd);
    /* The same file by its absolute path. */
    paths_for(fx, KEY, 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
}

static void test_chunkfile_write_replaces_existing_final(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, CS);
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    m.etag = "\"v2\"";
    m.etag_len = 4;
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false), 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    assert_string_equal(info.etag, "\"v2\"");
}

static void test_chunkfile_write_existing_tmp_is_eexist_and_kept(void **state)
{
    struct fx *fx = *state;
    static const uint8_t other[] = "another writer's partial file";
    paths_for(fx, KEY, 0);
    put_file(fx->tmp, other, sizeof(other));
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    fill_body(fx->body, CS, 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false),
                     -EEXIST);
    uint8_t buf[64];
    assert_int_equal(read_file(fx->tmp, buf, sizeof(buf)), sizeof(other));
    assert_memory_equal(buf, other, sizeof(other));
    assert_false(exists(fx->path));
}

static void test_chunkfile_write_invalid_meta_is_einval_and_creates_nothing(void **state)
{
    struct fx *fx = *state;
    paths_for(fx, KEY, 0);
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    m.etag_len = CHUNKFILE_ETAG_MAX + 1;
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false),
                     -EINVAL);
    assert_false(exists(fx->tmp));
    assert_false(exists(fx->path));
    assert_int_equal(g_write_calls, 0);
}

static void test_chunkfile_write_missing_shard_dir_is_enoent(void **state)
{
    struct fx *fx = *state;
    char shard[128], path[256];
    uint8_t h[16];
    chunkfile_key_hash(KEY, strlen(KEY), h);
    snprintf(shard, sizeof(shard), "%s/gone", fx->dir);
    assert_int_equal(chunkfile_path(path, sizeof(path), shard, h, 0), 0);
    paths_for(fx, KEY, 0); /* a tmp/ that exists */
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    fill_body(fx->body, CS, 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, path, &m, fx->body, CS, false), -ENOENT);
    assert_false(exists(fx->tmp));
    assert_false(exists(shard)); /* the shard directory is never created */
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, path), -ENOENT);
}

static void test_chunkfile_write_rename_failure_removes_tmp(void **state)
{
    struct fx *fx = *state;
    char sub[300];
    paths_for(fx, KEY, 0);
    /* A non-empty directory where the final file goes: rename(2) refuses. */
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, fx->path), 0);
    assert_int_equal(mkdir(fx->path, 0755), 0);
    snprintf(sub, sizeof(sub), "%s/x", fx->path);
    assert_int_equal(mkdir(sub, 0755), 0);
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    fill_body(fx->body, CS, 0);
    int rc = chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false);
    assert_true(rc == -EISDIR || rc == -ENOTEMPTY || rc == -EEXIST);
    assert_false(exists(fx->tmp));
    assert_true(exists(sub));
}

/* ---- write fault injection ---- */

static void write_fails(struct fx *fx, int fail_at, int err, bool durable, int sync_err)
{
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    paths_for(fx, KEY, 0);
    fill_body(fx->body, CS, 0);
    faults_reset();
    g_write_fail_at = fail_at;
    g_write_errno = err;
    g_sync_errno = sync_err;
    int want = sync_err ? -sync_err : -err;
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, durable), want);
    faults_reset();
    assert_false(exists(fx->tmp));
}

static void test_chunkfile_write_enospc_on_header_removes_tmp(void **state)
{
    struct fx *fx = *state;
    write_fails(fx, 1, ENOSPC, false, 0);
    assert_false(exists(fx->path));
}

static void test_chunkfile_write_enospc_on_body_removes_tmp(void **state)
{
    struct fx *fx = *state;
    write_fails(fx, 2, ENOSPC, true, 0);
    assert_false(exists(fx->path));
}

static void test_chunkfile_write_eio_removes_tmp(void **state)
{
    struct fx *fx = *state;
    write_fails(fx, 2, EIO, false, 0);
    assert_false(exists(fx->path));
}

/* The header is written first without its magic and again, whole, after the body: a file left
 * in between is not a chunk file; a failure of that last write leaves no tmp file. */
static void test_chunkfile_write_header_goes_last(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    assert_int_equal(write_chunk(fx, KEY, 0, CS), CS); /* (the fixture reset the faults) */
    int calls = g_write_calls;
    assert_true(calls >= 3);
    static const uint8_t none[8];
    assert_memory_equal(g_write_first, none, sizeof(none));
    uint8_t head[8];
    int fd = open(fx->path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
    close(fd);
    assert_memory_equal(head, CHUNKFILE_MAGIC, sizeof(head));
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    assert_int_equal(unlink(fx->path), 0);
    write_fails(fx, calls, ENOSPC, false, 0);
    assert_false(exists(fx->path));
}

static void test_chunkfile_write_fdatasync_eio_removes_tmp(void **state)
{
    struct fx *fx = *state;
    write_fails(fx, 0, 0, true, EIO);
    assert_false(exists(fx->path));
}

static void test_chunkfile_write_failure_keeps_previous_final(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, CS);
    write_fails(fx, 2, ENOSPC, false, 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    assert_memory_equal(fx->out, fx->body, CS);
}

static void test_chunkfile_write_short_writes_and_eintr_complete(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    struct chunkfile_info info;
    paths_for(fx, KEY, 0);
    fill_body(fx->body, CS, 0);
    g_write_max = 7;
    g_write_eintr = 2;
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false), 0);
    assert_true(g_write_calls > 20);
    faults_reset();
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    assert_memory_equal(fx->out, fx->body, CS);
}

/* ---- read_verify: each corruption kind ---- */

static void test_chunkfile_read_verify_missing_is_enoent(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    paths_for(fx, KEY, 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -ENOENT);
    assert_int_equal(info.chunk_size, 0);
}

static void test_chunkfile_read_verify_truncated_every_length(void **state)
{
    struct fx *fx = *state;
    uint8_t whole[512];
    struct chunkfile_info info;
    write_chunk(fx, KEY, 1, CS);
    size_t n = read_file(fx->path, whole, sizeof(whole));
    for (size_t len = 0; len < n; len++) {
        put_file(fx->path, whole, len);
        if (verify(fx, KEY, CS, 1, &info) != -EBADMSG)
            fail_msg("truncated to %zu of %zu bytes: accepted", len, n);
        assert_int_equal(file_size(fx->path), (off_t)len); /* never modified */
    }
    put_file(fx->path, whole, n);
    assert_int_equal(verify(fx, KEY, CS, 1, &info), 0);
}

static void test_chunkfile_read_verify_zeroed(void **state)
{
    struct fx *fx = *state;
    uint8_t whole[512], z[512];
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, CS);
    size_t n = read_file(fx->path, whole, sizeof(whole));
    size_t hl = n - CS;
    /* All zeroes, as a crash before the data reached the disk leaves it. */
    memset(z, 0, sizeof(z));
    put_file(fx->path, z, n);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(info.chunk_size, 0);
    /* Only the body zeroed: the header still verifies, the body hash does not. */
    memcpy(z, whole, hl);
    put_file(fx->path, z, n);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(info.chunk_size, CS);
    /* Only the header zeroed. */
    memset(z, 0, hl);
    memcpy(z + hl, whole + hl, CS);
    put_file(fx->path, z, n);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
}

static void test_chunkfile_read_verify_flipped_bit_anywhere(void **state)
{
    struct fx *fx = *state;
    uint8_t whole[512];
    struct chunkfile_info info;
    write_chunk(fx, KEY, 2, CS); /* the short last chunk */
    size_t n = read_file(fx->path, whole, sizeof(whole));
    int fd = open(fx->path, O_WRONLY);
    assert_true(fd >= 0);
    for (size_t bit = 0; bit < n * 8; bit++) {
        uint8_t b = whole[bit / 8] ^ (uint8_t)(1u << (bit % 8));
        assert_int_equal(pwrite(fd, &b, 1, (off_t)(bit / 8)), 1);
        if (verify(fx, KEY, CS, 2, &info) != -EBADMSG)
            fail_msg("bit %zu of %zu flipped: accepted", bit, n * 8);
        assert_int_equal(pwrite(fd, &whole[bit / 8], 1, (off_t)(bit / 8)), 1);
    }
    close(fd);
    assert_int_equal(verify(fx, KEY, CS, 2, &info), 0);
}

static void test_chunkfile_read_verify_extended_by_a_byte(void **state)
{
    struct fx *fx = *state;
    uint8_t whole[512];
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, CS);
    size_t n = read_file(fx->path, whole, sizeof(whole));
    whole[n] = 0;
    put_file(fx->path, whole, n + 1);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    whole[n] = 0xff;
    put_file(fx->path, whole, n + 1);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    /* A whole second body appended. */
    memcpy(whole + n, whole + n - CS, CS);
    put_file(fx->path, whole, n + CS);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
}

static void test_chunkfile_read_verify_foreign_key(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    char mine[256];
    paths_for(fx, KEY, 0);
    strcpy(mine, fx->path);
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, mine), 0);
    /* Another key's valid chunk file, renamed into this key's place. */
    write_chunk(fx, KEY2, 0, CS);
    assert_int_equal(rename(fx->path, mine), 0);
    strcpy(fx->path, mine);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(info.chunk_size, CS); /* its header verified: just not ours */
    assert_int_equal(verify(fx, KEY2, CS, 0, &info), 0);
    /* A key that is a prefix of the stored one is foreign too. */
    char prefix[sizeof(KEY2)];
    memcpy(prefix, KEY2, sizeof(KEY2));
    prefix[sizeof(KEY2) - 2] = '\0';
    assert_int_equal(verify(fx, prefix, CS, 0, &info), -EBADMSG);
}

static void test_chunkfile_read_verify_wrong_chunk_size(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, 32); /* a cache written with 32-byte chunks */
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(info.chunk_size, 32);
    assert_int_equal(verify(fx, KEY, 32, 0, &info), 0);
}

static void test_chunkfile_read_verify_wrong_index(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    char one[256];
    write_chunk(fx, KEY, 1, CS);
    strcpy(one, fx->path);
    paths_for(fx, KEY, 0);
    assert_int_equal(rename(one, fx->path), 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(info.index, 1);
    assert_int_equal(verify(fx, KEY, CS, 1, &info), 0);
}

static void test_chunkfile_read_verify_leftover_tmp_untouched(void **state)
{
    struct fx *fx = *state;
    uint8_t whole[512], after[512];
    struct chunkfile_info info;
    write_chunk(fx, KEY, 0, CS);
    /* A crashed writer's half-written tmp file of the same chunk. */
    size_t n = read_file(fx->path, whole, sizeof(whole));
    char tmp[256];
    uint8_t h[16];
    chunkfile_key_hash(KEY, strlen(KEY), h);
    assert_int_equal(chunkfile_tmp_path(tmp, sizeof(tmp), fx->dir, h, 0, 77), 0);
    put_file(tmp, whole, n / 2);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), 0);
    assert_int_equal(read_file(tmp, after, sizeof(after)), n / 2);
    assert_memory_equal(after, whole, n / 2);
    /* Reading the leftover itself: rejected, still not removed (removal is the caller's). */
    strcpy(fx->path, tmp);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_true(exists(tmp));
    /* And a new write of the chunk does not collide with it (another seq). */
    struct chunkfile_meta m = meta_for(KEY, 0, CS, TOTAL);
    paths_for(fx, KEY, 0);
    assert_int_equal(chunkfile_write(AT_FDCWD, fx->tmp, fx->path, &m, fx->body, CS, false), 0);
    assert_true(exists(tmp));
}

static void test_chunkfile_read_verify_not_a_regular_file(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    char target[300];
    write_chunk(fx, KEY, 0, CS);
    snprintf(target, sizeof(target), "%s.target", fx->path);
    assert_int_equal(rename(fx->path, target), 0);
    /* A symlink to a valid file: not followed. */
    assert_int_equal(symlink(target, fx->path), 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(unlink(fx->path), 0);
    /* A directory. */
    assert_int_equal(mkdir(fx->path, 0755), 0);
    assert_int_equal(verify(fx, KEY, CS, 0, &info), -EBADMSG);
    assert_int_equal(rmdir(fx->path), 0);
}

static void test_chunkfile_read_verify_small_buffer_is_enobufs(void **state)
{
    struct fx *fx = *state;
    struct chunkfile_info info;
    size_t blen = 0;
    off_t boff = 0;
    write_chunk(fx, KEY, 2, CS); /* 22 bytes */
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), CS, 2, &info,
                                           fx->out, 21, &blen, &boff),
                     -ENOBUFS);
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, fx->path, KEY, strlen(KEY), CS, 2, &info,
                                           fx->out, 22, &blen, &boff),
                     0);
    assert_int_equal(blen, 22);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunkfile_key_hash_known_vector),
        cmocka_unit_test_setup_teardown(test_chunkfile_io_moves_at_most_a_step_per_call, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_tmp_from_a_file_is_the_same_file,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_header_goes_last, setup, teardown),
        cmocka_unit_test(test_chunkfile_key_hash_stable_and_distinct),
        cmocka_unit_test(test_chunkfile_path_layout),
        cmocka_unit_test(test_chunkfile_path_too_small_is_enametoolong),
        cmocka_unit_test(test_chunkfile_tmp_path_layout),
        cmocka_unit_test(test_chunkfile_header_build_layout_is_pinned),
        cmocka_unit_test(test_chunkfile_header_parse_round_trip),
        cmocka_unit_test(test_chunkfile_header_parse_empty_validators),
        cmocka_unit_test(test_chunkfile_header_parse_short_input_is_eagain),
        cmocka_unit_test(test_chunkfile_header_parse_bad_magic_fails_early),
        cmocka_unit_test(test_chunkfile_header_parse_inconsistent_fields_fail),
        cmocka_unit_test(test_chunkfile_header_parse_flipped_bit_fails),
        cmocka_unit_test(test_chunkfile_header_parse_reads_version_1),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_version_1_file, setup, teardown),
        cmocka_unit_test(test_chunkfile_header_build_refuses_invalid_meta),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_read_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_durable_syncs_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_big_header_and_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_creates_shard_subdirs_lazily, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_relative_to_dirfd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_replaces_existing_final, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_existing_tmp_is_eexist_and_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_chunkfile_write_invalid_meta_is_einval_and_creates_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_missing_shard_dir_is_enoent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_rename_failure_removes_tmp, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_enospc_on_header_removes_tmp, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_enospc_on_body_removes_tmp, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_eio_removes_tmp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_fdatasync_eio_removes_tmp, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_failure_keeps_previous_final, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_write_short_writes_and_eintr_complete, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_missing_is_enoent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_truncated_every_length, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_zeroed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_flipped_bit_anywhere, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_extended_by_a_byte, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_foreign_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_wrong_chunk_size, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_wrong_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_leftover_tmp_untouched, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_not_a_regular_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_chunkfile_read_verify_small_buffer_is_enobufs, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
