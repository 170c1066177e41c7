/* LDFLAGS: -Wl,--wrap=statvfs,--wrap=statvfs64 */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_diskidx: chunk file accounting and eviction. Name parsing; add/touch/remove accounting
 * without a loop and with a fake clock; eviction order (LRU, max_age, min_free) with real files
 * unlinked in a mkdtemp() tree; the mtime written back by touch once per clock hour; the
 * start-up scan on a real libev loop (run with EVRUN_NOWAIT until scan_done, bounded), which
 * finds pre-existing files, skips tmp/, the marker and foreign names, never double counts
 * chunks added or removed while it runs, and evicts at start when over disk_size; and a 10k-entry
 * run checking the sampled LRU's quality and the table's integrity. statvfs() is wrapped (--wrap)
 * to fake a filesystem's free space.
 */
#include "diskidx.h"

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
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "chunkfile.h"
#include "inventory.h"

#define T0 1700000000000ull /* a wall clock in ms (2023) */
#define HOUR 3600000ull

/* ---- statvfs() fake: a filesystem of g_fs_size bytes with g_fs_avail available ---- */

static uint64_t g_fs_avail = 1ull << 50;
static uint64_t g_fs_size = 1ull << 50;
static unsigned g_statvfs_calls;

int __wrap_statvfs(const char *path, struct statvfs *sv);
int __wrap_statvfs64(const char *path, struct statvfs64 *sv);

int __wrap_statvfs(const char *path, struct statvfs *sv)
{
    (void)path;
    g_statvfs_calls++;
    memset(sv, 0, sizeof(*sv));
    sv->f_frsize = 512;
    sv->f_bsize = 512;
    sv->f_bavail = g_fs_avail / 512;
    sv->f_bfree = g_fs_avail / 512;
    sv->f_blocks = g_fs_size / 512;
    return 0;
}

int __wrap_statvfs64(const char *path, struct statvfs64 *sv)
{
    (void)path;
    g_statvfs_calls++;
    memset(sv, 0, sizeof(*sv));
    sv->f_frsize = 512;
    sv->f_bsize = 512;
    sv->f_bavail = g_fs_avail / 512;
    sv->f_bfree = g_fs_avail / 512;
    sv->f_blocks = g_fs_size / 512;
    return 0;
}

/* ---- temp trees and chunk files ---- */

struct tree {
    char root[64];
    char dirs[2][96];
};

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

static void tree_new(struct tree *t, size_t n_dirs)
{
    snprintf(t->root, sizeof(t->root), "/tmp/test_diskidx.XXXXXX");
    assert_non_null(mkdtemp(t->root));
    for (size_t i = 0; i < n_dirs; i++) {
        snprintf(t->dirs[i], sizeof(t->dirs[i]), "%s/shard%zu", t->root, i);
        assert_int_equal(mkdir(t->dirs[i], 0755), 0);
        char p[160];
        snprintf(p, sizeof(p), "%s/tmp", t->dirs[i]);
        assert_int_equal(mkdir(p, 0755), 0);
    }
}

static void tree_free(struct tree *t)
{
    assert_int_equal(nftw(t->root, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void obj_of(unsigned n, uint8_t obj[16])
{
    /* Distinct, spread objects; obj[0] even keeps them in shard 0 of two. */
    for (int i = 0; i < 16; i++)
        obj[i] = (uint8_t)((n * 2654435761u) >> (i % 4 * 8)) ^ (uint8_t)(i * 37);
    obj[0] = (uint8_t)(obj[0] & 0xfe);
}

static void chunk_path(const char *dir, const uint8_t obj[16], uint64_t index, char *out,
                       size_t cap)
{
    assert_int_equal(chunkfile_path(out, cap, dir, obj, index), 0);
}

/* Creates the chunk file of (obj, index) under <dir> with <len> bytes and mtime <mtime_ms>;
 * returns its diskidx_file_bytes(). */
static uint64_t make_chunk(const char *dir, const uint8_t obj[16], uint64_t index, size_t len,
                           uint64_t mtime_ms)
{
    char p[256];
    chunk_path(dir, obj, index, p, sizeof(p));
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, p), 0);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    static char buf[65536];
    memset(buf, 'x', sizeof(buf));
    size_t left = len;
    while (left > 0) {
        size_t n = left < sizeof(buf) ? left : sizeof(buf);
        assert_int_equal(write(fd, buf, n), (ssize_t)n);
        left -= n;
    }
    assert_int_equal(close(fd), 0);
    struct timespec ts[2] = {{.tv_sec = (time_t)(mtime_ms / 1000), .tv_nsec = 0},
                             {.tv_sec = (time_t)(mtime_ms / 1000), .tv_nsec = 0}};
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    return diskidx_file_bytes(&sb);
}

static bool chunk_exists(const char *dir, const uint8_t obj[16], uint64_t index)
{
    char p[256];
    struct stat sb;
    chunk_path(dir, obj, index, p, sizeof(p));
    return stat(p, &sb) == 0;
}

static uint64_t chunk_mtime_ms(const char *dir, const uint8_t obj[16], uint64_t index)
{
    char p[256];
    struct stat sb;
    chunk_path(dir, obj, index, p, sizeof(p));
    assert_int_equal(stat(p, &sb), 0);
    return (uint64_t)sb.st_mtim.tv_sec * 1000u + (uint64_t)sb.st_mtim.tv_nsec / 1000000u;
}

static void write_file(const char *path, const char *data)
{
    FILE *f = fopen(path, "we");
    assert_non_null(f);
    fputs(data, f);
    assert_int_equal(fclose(f), 0);
}

static struct diskidx_stats stats_of(const struct diskidx *d)
{
    struct diskidx_stats st;
    diskidx_get_stats(d, &st);
    return st;
}

/* Evicts with <now> until the policy has no work left (bounded). */
static void evict_all(struct diskidx *d, uint64_t now)
{
    for (int i = 0; i < 100000 && diskidx_evict(d, now); i++)
        ;
    assert_false(diskidx_evict(d, now));
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Runs <loop> without blocking until the scan is done (at most 20 s). */
static void run_until_scanned(struct ev_loop *loop, struct diskidx *d)
{
    uint64_t until = mono_ms() + 20000;
    while (!stats_of(d).scan_done && mono_ms() < until)
        ev_run(loop, EVRUN_NOWAIT);
    assert_true(stats_of(d).scan_done);
}

/* Runs <loop> until stats.bytes <= <limit> (at most 20 s; the policy runs ~1 ms after a kick). */
static void run_until_bytes_at_most(struct ev_loop *loop, struct diskidx *d, uint64_t limit)
{
    uint64_t until = mono_ms() + 20000;
    while (stats_of(d).bytes > limit && mono_ms() < until)
        ev_run(loop, EVRUN_NOWAIT);
    assert_true(stats_of(d).bytes <= limit);
}

/* ---- name parsing ---- */

static void test_diskidx_parse_name_good(void **state)
{
    (void)state;
    uint8_t obj[16];
    uint64_t index = 99;
    assert_int_equal(diskidx_parse_name("00112233445566778899aabbccddeeff.0", obj, &index), 0);
    static const uint8_t want[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                     0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    assert_memory_equal(obj, want, 16);
    assert_int_equal(index, 0);
    assert_int_equal(diskidx_parse_name("ffffffffffffffffffffffffffffffff.12345", obj, &index), 0);
    assert_int_equal(index, 12345);
    assert_int_equal(
        diskidx_parse_name("0123456789abcdef0123456789abcdef.18446744073709551615", obj, &index),
        0);
    assert_true(index == UINT64_MAX);
    /* Round trip with chunkfile_path(). */
    char p[256];
    uint8_t o[16];
    obj_of(7, o);
    assert_int_equal(chunkfile_path(p, sizeof(p), "/x", o, 4242), 0);
    assert_int_equal(diskidx_parse_name(strrchr(p, '/') + 1, obj, &index), 0);
    assert_memory_equal(obj, o, 16);
    assert_int_equal(index, 4242);
}

static void test_diskidx_parse_name_bad_hex(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "0",
        "00112233445566778899AABBCCDDEEFF.0",  /* uppercase: not what chunkfile_path writes */
        "00112233445566778899aabbccddeef.0",   /* 31 digits */
        "00112233445566778899aabbccddeeff0.0", /* 33 digits */
        "0011223344556677889gaabbccddeeff.0",
        "00112233445566778899aabbccddeeff",
        "00112233445566778899aabbccddeeff_0",
        " 0112233445566778899aabbccddeeff.0",
        "..",
        ".",
    };
    uint8_t obj[16] = {0};
    uint64_t index = 7;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(diskidx_parse_name(bad[i], obj, &index), -EINVAL);
        assert_int_equal(index, 7); /* untouched */
    }
}

static void test_diskidx_parse_name_bad_index(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "00112233445566778899aabbccddeeff.",
        "00112233445566778899aabbccddeeff.-1",
        "00112233445566778899aabbccddeeff.+1",
        "00112233445566778899aabbccddeeff.01",
        "00112233445566778899aabbccddeeff.00",
        "00112233445566778899aabbccddeeff.1a",
        "00112233445566778899aabbccddeeff. 1",
        "00112233445566778899aabbccddeeff.1 ",
        "00112233445566778899aabbccddeeff.18446744073709551616",
        "00112233445566778899aabbccddeeff.99999999999999999999",
    };
    uint8_t obj[16];
    uint64_t index;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(diskidx_parse_name(bad[i], obj, &index), -EINVAL);
}

static void test_diskidx_parse_name_tmp_and_marker_rejected(void **state)
{
    (void)state;
    uint8_t obj[16], o[16];
    uint64_t index;
    assert_int_equal(diskidx_parse_name("cacheparty.cache", obj, &index), -EINVAL);
    assert_int_equal(diskidx_parse_name("tmp", obj, &index), -EINVAL);
    /* A tmp file name (chunkfile_tmp_path): "<hex>.<index>.<seq>". */
    char p[256];
    obj_of(3, o);
    assert_int_equal(chunkfile_tmp_path(p, sizeof(p), "/x", o, 5, 17), 0);
    assert_int_equal(diskidx_parse_name(strrchr(p, '/') + 1, obj, &index), -EINVAL);
}

static void test_diskidx_file_bytes_is_max_of_size_and_blocks(void **state)
{
    (void)state;
    struct stat sb;
    memset(&sb, 0, sizeof(sb));
    sb.st_size = 65636;
    sb.st_blocks = 136; /* 69632 bytes: allocated in 4K blocks */
    assert_int_equal(diskidx_file_bytes(&sb), 69632);
    sb.st_blocks = 0; /* sparse, or inline in the inode */
    assert_int_equal(diskidx_file_bytes(&sb), 65636);
}

/* ---- accounting ---- */

static void test_diskidx_add_touch_remove_accounting(void **state)
{
    (void)state;
    char *dirs[] = {"/nonexistent/a", "/nonexistent/b"};
    struct diskidx *d = diskidx_new(NULL, dirs, 2, 0, 0, 0);
    struct diskidx_stats st = stats_of(d);
    assert_true(st.scan_done);
    assert_int_equal(st.chunks, 0);
    assert_int_equal(st.bytes, 0);
    uint8_t a[16], b[16];
    obj_of(1, a);
    obj_of(2, b);
    b[0] = 1; /* the other shard */
    diskidx_add(d, a, 0, 4096, T0, 0);
    diskidx_add(d, a, 1, 1000, T0, 0); /* rounded up to 512-byte units: 1024 */
    diskidx_add(d, b, 0, 512, T0, 0);
    st = stats_of(d);
    assert_int_equal(st.chunks, 3);
    assert_int_equal(st.bytes, 4096 + 1024 + 512);
    /* Re-adding a chunk replaces it. */
    diskidx_add(d, a, 1, 8192, T0 + 1, 0);
    st = stats_of(d);
    assert_int_equal(st.chunks, 3);
    assert_int_equal(st.bytes, 4096 + 8192 + 512);
    /* Touch changes nothing in the accounting (the files do not exist: within the hour, no
     * syscall is made, so the entries stay). */
    diskidx_touch(d, a, 0, T0 + 2);
    diskidx_touch(d, b, 7, T0 + 2); /* unknown: ignored */
    st = stats_of(d);
    assert_int_equal(st.chunks, 3);
    assert_int_equal(st.errors, 0);
    diskidx_remove(d, a, 1);
    diskidx_remove(d, a, 1); /* twice: no-op */
    diskidx_remove(d, a, 9); /* unknown: no-op */
    st = stats_of(d);
    assert_int_equal(st.chunks, 2);
    assert_int_equal(st.bytes, 4096 + 512);
    diskidx_remove(d, a, 0);
    diskidx_remove(d, b, 0);
    st = stats_of(d);
    assert_int_equal(st.chunks, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.evictions, 0);
    assert_false(diskidx_evict(d, T0 + 10));
    diskidx_free(&d);
    assert_null(d);
    diskidx_free(&d); /* NULL is fine */
}

/* ---- eviction ---- */

static void test_diskidx_evict_lru_order(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    uint8_t o[5][16];
    uint64_t bytes[5];
    for (unsigned i = 0; i < 5; i++) {
        obj_of(10 + i, o[i]);
        bytes[i] = make_chunk(t.dirs[0], o[i], i, 4096, T0);
    }
    uint64_t fb = bytes[0];
    /* Room for three and a half files; 95% of it holds three. */
    struct diskidx *d = diskidx_new(NULL, dirs, 1, fb * 7 / 2, 0, 0);
    diskidx_add(d, o[0], 0, bytes[0], T0 + 1000, 0); /* a */
    diskidx_add(d, o[1], 1, bytes[1], T0 + 2000, 0); /* b */
    diskidx_add(d, o[2], 2, bytes[2], T0 + 3000, 0); /* c */
    diskidx_touch(d, o[0], 0, T0 + 4000);            /* a is now the most recent */
    assert_false(diskidx_evict(d, T0 + 4000));       /* within limits */
    assert_int_equal(stats_of(d).evictions, 0);
    diskidx_add(d, o[3], 3, bytes[3], T0 + 5000, 0); /* d: over disk_size */
    evict_all(d, T0 + 5000);
    assert_int_equal(stats_of(d).evictions, 1);
    assert_false(chunk_exists(t.dirs[0], o[1], 1)); /* b, the least recently used */
    assert_true(chunk_exists(t.dirs[0], o[0], 0));
    assert_true(chunk_exists(t.dirs[0], o[2], 2));
    assert_true(chunk_exists(t.dirs[0], o[3], 3));
    assert_int_equal(stats_of(d).chunks, 3);
    assert_int_equal(stats_of(d).bytes, 3 * fb);
    diskidx_add(d, o[4], 4, bytes[4], T0 + 6000, 0); /* e */
    evict_all(d, T0 + 6000);
    assert_int_equal(stats_of(d).evictions, 2);
    assert_false(chunk_exists(t.dirs[0], o[2], 2)); /* then c */
    assert_true(chunk_exists(t.dirs[0], o[0], 0));  /* a, touched, outlives c */
    /* A file already gone is dropped without counting an eviction. */
    char p[256];
    chunk_path(t.dirs[0], o[0], 0, p, sizeof(p));
    assert_int_equal(unlink(p), 0);
    make_chunk(t.dirs[0], o[1], 1, 4096, T0);
    diskidx_add(d, o[1], 1, bytes[1], T0 + 7000, 0); /* b again */
    evict_all(d, T0 + 7000);
    assert_int_equal(stats_of(d).evictions, 2); /* a (missing) was the victim */
    assert_true(chunk_exists(t.dirs[0], o[1], 1));
    assert_int_equal(stats_of(d).chunks, 3);
    assert_int_equal(stats_of(d).errors, 0);
    diskidx_free(&d);
    tree_free(&t);
}

static void test_diskidx_evict_max_age(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    struct diskidx *d = diskidx_new(NULL, dirs, 1, 0, 0, 10 * HOUR);
    uint8_t o[6][16];
    for (unsigned i = 0; i < 6; i++) {
        obj_of(20 + i, o[i]);
        uint64_t b = make_chunk(t.dirs[0], o[i], 0, 1000, T0);
        diskidx_add(d, o[i], 0, b, T0 + i * HOUR, 0); /* used at T0 + 0h..5h */
    }
    evict_all(d, T0 + 10 * HOUR);
    assert_int_equal(stats_of(d).evictions, 0); /* 10 h is not older than max_age */
    diskidx_touch(d, o[1], 0, T0 + 12 * HOUR);
    evict_all(d, T0 + 13 * HOUR);
    /* Unused for more than 10 h: 0 (13 h), 2 (11 h); 1 was used 1 h ago, 3 used 10 h ago. */
    struct diskidx_stats st = stats_of(d);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.expired, 2);
    assert_int_equal(st.chunks, 4);
    assert_false(chunk_exists(t.dirs[0], o[0], 0));
    assert_true(chunk_exists(t.dirs[0], o[1], 0));
    assert_false(chunk_exists(t.dirs[0], o[2], 0));
    for (unsigned i = 3; i < 6; i++)
        assert_true(chunk_exists(t.dirs[0], o[i], 0));
    diskidx_free(&d);
    tree_free(&t);
}

static void test_diskidx_evict_min_free(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    const uint64_t min_free = 1u << 20;
    g_fs_size = 100u << 20;
    g_fs_avail = 2u << 20;
    struct diskidx *d = diskidx_new(NULL, dirs, 1, 0, min_free, 0);
    uint8_t o[40][16];
    for (unsigned i = 0; i < 40; i++) {
        obj_of(100 + i, o[i]);
        make_chunk(t.dirs[0], o[i], 0, 10, T0);
        diskidx_add(d, o[i], 0, 65536, T0 + i, 0); /* accounted as 64 KiB each */
    }
    g_statvfs_calls = 0;
    evict_all(d, T0 + 100);
    assert_int_equal(g_statvfs_calls, 1);
    assert_int_equal(stats_of(d).evictions, 0); /* 2 MiB free >= 1 MiB */
    /* One more file, and the filesystem fills up (someone else's files): below min_free. */
    uint8_t last[16];
    obj_of(99, last);
    make_chunk(t.dirs[0], last, 0, 10, T0);
    diskidx_add(d, last, 0, 65536, T0 + 150, 0);
    g_fs_avail = 512u << 10;
    evict_all(d, T0 + 200);
    assert_int_equal(g_statvfs_calls, 1); /* after adds, the period is 1 s */
    assert_int_equal(stats_of(d).evictions, 0);
    evict_all(d, T0 + 1200);
    assert_int_equal(g_statvfs_calls, 2);
    /* Up to min_free + 1% of 100 MiB = 2 MiB: (2 MiB - 512 KiB) / 64 KiB = 24 files, oldest. */
    assert_int_equal(stats_of(d).evictions, 24);
    for (unsigned i = 0; i < 40; i++)
        assert_int_equal(chunk_exists(t.dirs[0], o[i], 0), i >= 24);
    assert_true(chunk_exists(t.dirs[0], last, 0));
    g_fs_avail = 4u << 20;
    /* Idle (no adds): the next statvfs is 10 s later. */
    evict_all(d, T0 + 5000);
    assert_int_equal(g_statvfs_calls, 2);
    evict_all(d, T0 + 11300);
    assert_int_equal(g_statvfs_calls, 3);
    diskidx_free(&d);
    g_fs_avail = g_fs_size = 1ull << 50;
    tree_free(&t);
}

/* ---- mtime written back by touch ---- */

static void test_diskidx_touch_writes_mtime_once_per_hour(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    struct diskidx *d = diskidx_new(NULL, dirs, 1, 0, 0, 0);
    uint8_t o[16];
    obj_of(30, o);
    const uint64_t h0 = T0 / HOUR * HOUR; /* the start of an hour */
    uint64_t b = make_chunk(t.dirs[0], o, 2, 100, h0 + 1000);
    diskidx_add(d, o, 2, b, h0 + 1000, 0);
    diskidx_touch(d, o, 2, h0 + 20 * 60000); /* same hour: no write */
    assert_int_equal(chunk_mtime_ms(t.dirs[0], o, 2), h0 + 1000);
    diskidx_touch(d, o, 2, h0 + HOUR + 5); /* the next hour */
    assert_int_equal(chunk_mtime_ms(t.dirs[0], o, 2), h0 + HOUR + 5);
    diskidx_touch(d, o, 2, h0 + HOUR + 50 * 60000);
    diskidx_touch(d, o, 2, h0 + HOUR + 59 * 60000);
    assert_int_equal(chunk_mtime_ms(t.dirs[0], o, 2), h0 + HOUR + 5);
    diskidx_touch(d, o, 2, h0 + 2 * HOUR + 7);
    assert_int_equal(chunk_mtime_ms(t.dirs[0], o, 2), h0 + 2 * HOUR + 7);
    /* A file deleted behind the index's back is dropped when the touch finds it missing. */
    char p[256];
    chunk_path(t.dirs[0], o, 2, p, sizeof(p));
    assert_int_equal(unlink(p), 0);
    diskidx_touch(d, o, 2, h0 + 3 * HOUR);
    struct diskidx_stats st = stats_of(d);
    assert_int_equal(st.chunks, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.errors, 0);
    diskidx_free(&d);
    tree_free(&t);
}

/* ---- the start-up scan ---- */

static void test_diskidx_scan_finds_existing_files(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 2);
    char *dirs[] = {t.dirs[0], t.dirs[1]};
    uint64_t want_bytes = 0, want = 0;
    for (unsigned i = 0; i < 30; i++) {
        uint8_t o[16];
        obj_of(200 + i, o);
        o[0] = (uint8_t)(o[0] | (i & 1)); /* both shards */
        want_bytes += make_chunk(t.dirs[i & 1], o, i, 1000 + 3000 * i, T0 + i);
        want++;
    }
    /* Not chunk files: the marker, tmp/ contents, foreign names, a chunk name in the wrong
     * ab/cd directory, a directory with a chunk name, a symlink. */
    char p[256], q[300];
    snprintf(p, sizeof(p), "%s/cacheparty.cache", t.dirs[0]);
    write_file(p, "cacheparty cache v1 chunk_size 65536\n");
    uint8_t o[16];
    obj_of(300, o);
    assert_int_equal(chunkfile_tmp_path(p, sizeof(p), t.dirs[0], o, 3, 1), 0);
    write_file(p, "half a chunk");
    chunk_path(t.dirs[0], o, 3, p, sizeof(p));
    snprintf(q, sizeof(q), "%s/tmp/%s", t.dirs[0], strrchr(p, '/') + 1);
    write_file(q, "a whole chunk name in tmp/");
    assert_int_equal(chunkfile_mkdirs(AT_FDCWD, p), 0);
    *strrchr(p, '/') = '\0'; /* <dir>/ab/cd */
    snprintf(q, sizeof(q), "%s/README", p);
    write_file(q, "foreign");
    snprintf(q, sizeof(q), "%s/00000000000000000000000000000000.1", p); /* wrong ab/cd */
    write_file(q, "misplaced");
    chunk_path(t.dirs[0], o, 4, q, sizeof(q));
    assert_int_equal(mkdir(q, 0755), 0);
    chunk_path(t.dirs[0], o, 5, q, sizeof(q));
    assert_int_equal(symlink("/etc/passwd", q), 0);
    snprintf(q, sizeof(q), "%s/zz", t.dirs[0]);
    assert_int_equal(mkdir(q, 0755), 0);
    snprintf(q, sizeof(q), "%s/zz/00000000000000000000000000000000.1", t.dirs[0]);
    write_file(q, "not under a hex dir");

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct diskidx *d = diskidx_new(loop, dirs, 2, 0, 0, 0);
    assert_false(stats_of(d).scan_done);
    run_until_scanned(loop, d);
    struct diskidx_stats st = stats_of(d);
    assert_int_equal(st.chunks, want);
    assert_int_equal(st.scanned_files, want);
    assert_int_equal(st.bytes, want_bytes);
    assert_int_equal(st.skipped_files, 4); /* README, misplaced, directory, symlink */
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.errors, 0);
    diskidx_free(&d);
    ev_loop_destroy(loop);
    tree_free(&t);
}

static void test_diskidx_scan_evicts_over_disk_size_at_start(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    uint8_t o[20][16];
    uint64_t fb = 0;
    uint64_t now = (uint64_t)time(NULL) * 1000u;
    for (unsigned i = 0; i < 20; i++) {
        obj_of(400 + i, o[i]);
        /* File i was last used i minutes after the oldest. */
        fb = make_chunk(t.dirs[0], o[i], 0, 4096, now - HOUR + i * 60000u);
    }
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct diskidx *d = diskidx_new(loop, dirs, 1, 10 * fb, 0, 0);
    run_until_scanned(loop, d);
    run_until_bytes_at_most(loop, d, 10 * fb);
    /* Usually the scan takes one step and the 11 least recently used go (down to 95%). When it
     * takes several (a loaded machine), eviction starts on what is known so far: a file is only
     * evicted while at least 9 newer ones are known, so the 9 newest always stay. */
    struct diskidx_stats st = stats_of(d);
    assert_true(st.chunks == 9 || st.chunks == 10);
    assert_int_equal(st.evictions, 20 - st.chunks);
    for (unsigned i = 11; i < 20; i++)
        assert_true(chunk_exists(t.dirs[0], o[i], 0));
    unsigned gone = 0;
    for (unsigned i = 0; i < 11; i++)
        gone += !chunk_exists(t.dirs[0], o[i], 0);
    assert_int_equal(gone, st.evictions);
    diskidx_free(&d);
    ev_loop_destroy(loop);
    tree_free(&t);
}

static void test_diskidx_scan_adds_during_scan_not_double_counted(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    enum { N = 1500 };
    static uint8_t o[N][16];
    static uint64_t bytes[N];
    uint64_t now = (uint64_t)time(NULL) * 1000u;
    for (unsigned i = 0; i < N; i++) {
        obj_of(1000 + i, o[i]);
        bytes[i] = make_chunk(t.dirs[0], o[i], i % 3, 100, now - 1000);
    }
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct diskidx *d = diskidx_new(loop, dirs, 1, 0, 0, 0);
    /* Before the first step: the cache rewrites some chunks, deletes others. */
    uint64_t want_bytes = 0, want = 0;
    for (unsigned i = 0; i < N; i++) {
        if (i % 10 == 0) {
            diskidx_add(d, o[i], i % 3, 8192, now, 0); /* rewritten, now bigger */
            want_bytes += 8192;
        } else if (i % 10 == 1) {
            char p[256];
            chunk_path(t.dirs[0], o[i], i % 3, p, sizeof(p));
            assert_int_equal(unlink(p), 0);
            diskidx_remove(d, o[i], i % 3);
            continue;
        } else {
            want_bytes += bytes[i];
        }
        want++;
    }
    /* One step (at most 512 directory entries): the scan is under way. */
    ev_run(loop, EVRUN_NOWAIT);
    assert_false(stats_of(d).scan_done);
    assert_true(stats_of(d).chunks >= N / 10);
    /* While it runs: every remaining chunk is added again (some seen, some not yet). */
    for (unsigned i = 0; i < N; i++)
        if (i % 10 == 2)
            diskidx_add(d, o[i], i % 3, bytes[i], now, 0);
    run_until_scanned(loop, d);
    struct diskidx_stats st = stats_of(d);
    assert_int_equal(st.chunks, want);
    assert_int_equal(st.bytes, want_bytes);
    /* What the scan found while entries existed is found but not counted twice. */
    assert_int_equal(st.scanned_files, want);
    /* Once done, re-adding changes nothing either. */
    for (unsigned i = 0; i < N; i++)
        if (i % 10 == 3)
            diskidx_add(d, o[i], i % 3, bytes[i], now, 0);
    assert_int_equal(stats_of(d).chunks, want);
    assert_int_equal(stats_of(d).bytes, want_bytes);
    diskidx_free(&d);
    ev_loop_destroy(loop);
    tree_free(&t);
}

static void test_diskidx_free_during_scan(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 1);
    char *dirs[] = {t.dirs[0]};
    for (unsigned i = 0; i < 600; i++) {
        uint8_t o[16];
        obj_of(5000 + i, o);
        make_chunk(t.dirs[0], o, 0, 10, T0);
    }
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct diskidx *d = diskidx_new(loop, dirs, 1, 0, 0, 0);
    ev_run(loop, EVRUN_NOWAIT);
    assert_false(stats_of(d).scan_done);
    diskidx_free(&d); /* closes the open directories, stops the watchers */
    assert_null(d);
    ev_run(loop, EVRUN_NOWAIT);
    ev_loop_destroy(loop);
    tree_free(&t);
}

static void test_diskidx_scan_missing_dir_counted(void **state)
{
    (void)state;
    char *dirs[] = {"/nonexistent/test_diskidx"};
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    struct diskidx *d = diskidx_new(loop, dirs, 1, 0, 0, 0);
    run_until_scanned(loop, d);
    struct diskidx_stats st = stats_of(d);
    assert_int_equal(st.chunks, 0);
    assert_int_equal(st.errors, 1);
    diskidx_free(&d);
    ev_loop_destroy(loop);
}

/* ---- scale ---- */

/* The stated bound (README, docs/interfaces.md "Dashboard API"): 10 M chunk files, the
 * inventory's 65,535 named groups full, hold under DISKIDX_BOUND_PER_FILE bytes per file plus
 * 16 MiB for the group table; the groups' totals are exact and a group's purge-like removal of
 * every entry empties it. No files: the index is driven directly, as the cache drives it. Under
 * an emulator (CP_UNIT_EMULATED, make cross) 1 M files: the same bound per file. */
#define DISKIDX_BOUND_PER_FILE 48u
static void big_obj_of(uint64_t n, uint8_t obj[16])
{
    /* splitmix64: distinct for distinct <n>, spread over both shards */
    uint64_t z = n + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    memcpy(obj, &z, 8);
    memcpy(obj + 8, &n, 8);
}
static void test_diskidx_ten_million_files_within_the_stated_bound(void **state)
{
    (void)state;
    const unsigned TEN_M = getenv("CP_UNIT_EMULATED") != NULL ? 1000000u : 10000000u;
    struct tree t;
    tree_new(&t, 2);
    char *dirs[] = {t.dirs[0], t.dirs[1]};
    struct diskidx *d = diskidx_new(NULL, dirs, 2, 0, 0, 0);
    struct inventory *inv = diskidx_inventory(d);
    enum { GROUPS = INV_GROUPS_MAX - INV_FIRST };
    static uint32_t ids[GROUPS];
    for (unsigned g = 0; g < GROUPS; g++) {
        char prefix[INV_PREFIX_MAX];
        snprintf(prefix, sizeof(prefix), "/depot/%u/", 100000 + g);
        ids[g] = inv_intern(inv, "steam", prefix);
        assert_true(ids[g] >= INV_FIRST);
    }
    /* The table is full: a new group's files are counted under INV_OTHER. */
    assert_int_equal(inv_intern(inv, "steam", "/depot/1/"), INV_OTHER);
    uint8_t obj[16];
    for (unsigned i = 0; i < TEN_M; i++) {
        big_obj_of(i, obj);
        diskidx_add(d, obj, i & 3, 1048576 + 512, T0 + i, ids[i % GROUPS]);
    }
    struct diskidx_stats st;
    diskidx_get_stats(d, &st);
    assert_int_equal(st.chunks, TEN_M);
    size_t mem = diskidx_memory(d), table = inv_memory(inv);
    printf("# %u files: index %zu bytes (%.1f per file), group table %zu bytes\n", TEN_M, mem,
           (double)(mem - table) / TEN_M, table);
    assert_true(table < 16u << 20);
    assert_true(mem <= (size_t)TEN_M * DISKIDX_BOUND_PER_FILE + (16u << 20));
    /* Totals: each group holds its share, exactly. */
    uint64_t per = 1048576 + 512;
    const struct inv_group *g0 = inv_get(inv, ids[0]), *gl = inv_get(inv, ids[GROUPS - 1]);
    assert_non_null(g0);
    assert_non_null(gl);
    assert_int_equal(g0->chunks, TEN_M / GROUPS + (0 < TEN_M % GROUPS));
    assert_int_equal(g0->bytes, g0->chunks * per);
    assert_int_equal(gl->chunks, TEN_M / GROUPS + (GROUPS - 1 < TEN_M % GROUPS));
    /* Removing the first group's files frees it; the others keep theirs. */
    for (unsigned i = 0; i < TEN_M; i += GROUPS) {
        big_obj_of(i, obj);
        diskidx_remove(d, obj, i & 3);
    }
    assert_null(inv_get(inv, ids[0]));
    assert_int_equal(inv_get(inv, ids[1])->chunks, TEN_M / GROUPS + 1);
    diskidx_get_stats(d, &st);
    assert_int_equal(st.chunks, TEN_M - (TEN_M / GROUPS + 1));
    diskidx_free(&d);
    tree_free(&t);
}

static void test_diskidx_evict_10k_entries_sampled_lru(void **state)
{
    (void)state;
    struct tree t;
    tree_new(&t, 2);
    char *dirs[] = {t.dirs[0], t.dirs[1]};
    enum { N = 10000, FB = 4096 };
    static uint8_t o[N][16];
    static unsigned order[N];
    static bool touched[N];
    /* Entry i was last used at T0 + i s; added in a shuffled order, both shards. */
    for (unsigned i = 0; i < N; i++) {
        obj_of(20000 + i, o[i]);
        o[i][0] = (uint8_t)(o[i][0] | (i & 1));
        order[i] = i;
        char p[256];
        chunk_path(t.dirs[i & 1], o[i], 0, p, sizeof(p));
        assert_int_equal(chunkfile_mkdirs(AT_FDCWD, p), 0);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    srand(1);
    for (unsigned i = N - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    struct diskidx *d = diskidx_new(NULL, dirs, 2, (uint64_t)N * FB, 0, 0);
    for (unsigned k = 0; k < N; k++)
        diskidx_add(d, o[order[k]], 0, FB, T0 + order[k] * 1000ull, 0);
    assert_int_equal(stats_of(d).chunks, N);
    /* 500 of the oldest half are used again: they must survive. */
    for (unsigned k = 0; k < 500; k++) {
        unsigned i = (unsigned)rand() % (N / 2);
        touched[i] = true;
        diskidx_touch(d, o[i], 0, T0 + (N + k) * 1000ull);
    }
    /* Over the limit by one: evicts down to 95%, 501 entries. */
    uint8_t extra[16];
    obj_of(99999, extra);
    diskidx_add(d, extra, 0, FB, T0 + 2 * N * 1000ull, 0);
    evict_all(d, T0 + 2 * N * 1000ull);
    struct diskidx_stats st = stats_of(d);
    assert_true(st.bytes <= (uint64_t)N * FB * 95 / 100);
    assert_int_equal(st.evictions, 501);
    assert_int_equal(st.chunks, N + 1 - 501);
    unsigned evicted = 0, old = 0, oldest = 0;
    for (unsigned i = 0; i < N; i++) {
        if (chunk_exists(t.dirs[i & 1], o[i], 0))
            continue;
        evicted++;
        assert_false(touched[i]);
        if (i < 1500)
            old++;
        if (i < 1000)
            oldest++;
    }
    assert_int_equal(evicted, 501);
    /* Sampled LRU: nearly every victim is among the least recently used 15%. */
    print_message("      victims: %u of %u among the 1000 least recently used, %u among 1500\n",
                  oldest, evicted, old);
    assert_true(old * 100 >= evicted * 95);
    assert_true(oldest * 100 >= evicted * 80);
    /* The table stays consistent: every remaining entry is found and removed. */
    for (unsigned i = 0; i < N; i++)
        diskidx_remove(d, o[i], 0);
    diskidx_remove(d, extra, 0);
    st = stats_of(d);
    assert_int_equal(st.chunks, 0);
    assert_int_equal(st.bytes, 0);
    diskidx_free(&d);
    tree_free(&t);
}

static void test_diskidx_add_remove_random_matches_model(void **state)
{
    (void)state;
    char *dirs[] = {"/nonexistent/a", "/nonexistent/b", "/nonexistent/c"};
    struct diskidx *d = diskidx_new(NULL, dirs, 3, 0, 0, 0);
    enum { KEYS = 6000, OPS = 60000 };
    static uint64_t model[KEYS]; /* bytes + 1 when present, 0 when absent */
    uint64_t n = 0, bytes = 0, x = 12345;
    for (unsigned op = 0; op < OPS; op++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(x >> 33) % KEYS;
        uint8_t o[16];
        obj_of(k / 4, o); /* four chunks per object, objects over three shards */
        uint64_t index = k % 4;
        if ((x >> 20) % 3 != 0) {
            uint64_t b = 512 * (1 + (x >> 40) % 64);
            diskidx_add(d, o, index, b, T0 + op, 0);
            if (model[k] != 0)
                bytes -= model[k] - 1;
            else
                n++;
            model[k] = b + 1;
            bytes += b;
        } else {
            diskidx_remove(d, o, index);
            if (model[k] != 0) {
                bytes -= model[k] - 1;
                n--;
                model[k] = 0;
            }
        }
        if (op % 997 == 0) {
            assert_int_equal(stats_of(d).chunks, n);
            assert_int_equal(stats_of(d).bytes, bytes);
        }
    }
    assert_int_equal(stats_of(d).chunks, n);
    assert_int_equal(stats_of(d).bytes, bytes);
    for (unsigned k = 0; k < KEYS; k++) {
        uint8_t o[16];
        obj_of(k / 4, o);
        diskidx_remove(d, o, k % 4);
    }
    assert_int_equal(stats_of(d).chunks, 0);
    assert_int_equal(stats_of(d).bytes, 0);
    diskidx_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_diskidx_parse_name_good),
        cmocka_unit_test(test_diskidx_parse_name_bad_hex),
        cmocka_unit_test(test_diskidx_parse_name_bad_index),
        cmocka_unit_test(test_diskidx_parse_name_tmp_and_marker_rejected),
        cmocka_unit_test(test_diskidx_file_bytes_is_max_of_size_and_blocks),
        cmocka_unit_test(test_diskidx_add_touch_remove_accounting),
        cmocka_unit_test(test_diskidx_evict_lru_order),
        cmocka_unit_test(test_diskidx_evict_max_age),
        cmocka_unit_test(test_diskidx_evict_min_free),
        cmocka_unit_test(test_diskidx_touch_writes_mtime_once_per_hour),
        cmocka_unit_test(test_diskidx_scan_finds_existing_files),
        cmocka_unit_test(test_diskidx_scan_evicts_over_disk_size_at_start),
        cmocka_unit_test(test_diskidx_scan_adds_during_scan_not_double_counted),
        cmocka_unit_test(test_diskidx_free_during_scan),
        cmocka_unit_test(test_diskidx_scan_missing_dir_counted),
        cmocka_unit_test(test_diskidx_add_remove_random_matches_model),
        cmocka_unit_test(test_diskidx_evict_10k_entries_sampled_lru),
        cmocka_unit_test(test_diskidx_ten_million_files_within_the_stated_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
