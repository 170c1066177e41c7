/* LDFLAGS: -Wl,--wrap=pread,--wrap=pread64,--wrap=unlinkat */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_cache: the chunk cache (memory table, budget, disk tier, versions, purge) driven through
 * its own API and a fake filler only: no origin, no fetch. The fake filler records every disk
 * miss handed to it and takes the chunk as a real fill would (a ref, its handle); the tests then
 * fill chunks with the filler API (meta, reserve, commit, seal) the way fetch.c does. A real
 * libev loop runs the cache's notify event and the I/O pool's completions; every test uses a
 * fresh temporary cache dir and ends with no chunk alive.
 */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "answer.h"
#include "cache_int.h"
#include "chunkfile.h"
#include "chunkmem.h"
#include "config.h"
#include "http1.h"
#include "log.h"
#include "objhead.h"
#include "origin.h"
#include "stats.h"
#include "util.h"

#define CS 4096u /* chunk size */
#define KEY "steam\n/depot/1/chunk/abc"
#define KEY_LEN (sizeof(KEY) - 1)
#define MAX_MISSES 16

/* ---- pread() fault injection: reads of one file fail ---- */

static int g_fail_fd = -1; /* pread() of this fd fails with EIO; -1: none */

ssize_t __real_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off);
ssize_t __real_pread64(int fd, void *buf, size_t count, off64_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t count, off64_t off);

ssize_t __wrap_pread(int fd, void *buf, size_t count, off_t off)
{
    if (fd == g_fail_fd) {
        errno = EIO;
        return -1;
    }
    return __real_pread(fd, buf, count, off);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t count, off64_t off)
{
    if (fd == g_fail_fd) {
        errno = EIO;
        return -1;
    }
    return __real_pread64(fd, buf, count, off);
}

/* ---- a gate on unlinkat(): a purge's unlinks wait while it is shut ---- */

static atomic_bool g_unlink_shut;

int __real_unlinkat(int dirfd, const char *path, int flags);
int __wrap_unlinkat(int dirfd, const char *path, int flags);

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
    while (atomic_load(&g_unlink_shut))
        usleep(1000); /* (the test opens it; its loop goes on meanwhile) */
    return __real_unlinkat(dirfd, path, flags);
}

/* ---- the fake filler ---- */

struct miss {
    struct chunk *ck; /* ref, as a fill holds */
    uint64_t index, off;
    char host[64];
};

struct fake_filler {
    struct miss misses[MAX_MISSES];
    size_t n;
};

static void fake_disk_miss(void *arg, struct chunk *ck, uint64_t off, const struct origin_req *o)
{
    struct fake_filler *ff = arg;
    assert_true(ff->n < MAX_MISSES);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FILLING);
    assert_null(cache_chunk_filler(ck));
    struct miss *m = &ff->misses[ff->n++];
    m->ck = cache_chunk_ref(ck);
    cache_chunk_set_filler(ck, ff);
    m->index = cache_chunk_index(ck);
    m->off = off;
    snprintf(m->host, sizeof(m->host), "%s", o->host);
}

/* ---- fixture ---- */

struct fx {
    struct ev_loop *loop;
    ev_timer tick; /* keeps the loop turning while the I/O pool works */
    char dir[64];
    struct config cfg;
    struct cache *cache;
    struct fake_filler ff;
};

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static void cache_open(struct fx *f)
{
    char err[256];
    memset(&g_stats, 0, sizeof(g_stats)); /* the counters of this cache instance */
    f->cache = cache_new(f->loop, &f->cfg, err, sizeof(err));
    if (f->cache == NULL)
        fail_msg("cache_new: %s", err);
    struct cache_filler filler = {fake_disk_miss, &f->ff};
    cache_set_filler(f->cache, &filler);
    /* Once the disk index has scanned the dir, it knows which chunks have files. */
    for (int it = 0; it < 1000; it++) {
        struct cache_stats st;
        cache_get_stats(f->cache, &st);
        if (st.disk_scan_done)
            return;
        ev_run(f->loop, EVRUN_ONCE);
    }
    fail_msg("the disk scan never finished");
}

static int fx_setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    g_log_level = CFG_LOG_ERROR;
    f->loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(f->loop);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_cache.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    f->cfg.dirs[0] = f->dir;
    f->cfg.n_dirs = 1;
    f->cfg.chunk_size = CS;
    f->cfg.memory_size = 4 * CS;
    f->cfg.disk_size = 1ull << 30;
    f->cfg.min_free = 0;
    f->cfg.max_age_ms = 1ull << 40;
    ev_timer_init(&f->tick, on_tick, 0.01, 0.01);
    ev_timer_start(f->loop, &f->tick);
    cache_open(f);
    *state = f;
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void drop_misses(struct fx *f)
{
    for (size_t i = 0; i < f->ff.n; i++) {
        struct chunk *ck = f->ff.misses[i].ck;
        if (ck == NULL)
            continue;
        if (cache_chunk_state(ck) == CHUNK_S_FILLING)
            cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
        cache_chunk_unref(&f->ff.misses[i].ck);
    }
    f->ff.n = 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    atomic_store(&g_unlink_shut, false); /* (a test that failed with it shut) */
    drop_misses(f);
    for (int i = 0; i < 2; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    cache_free(&f->cache);
    assert_int_equal(cache_live_chunks(), 0);
    ev_timer_stop(f->loop, &f->tick);
    ev_loop_destroy(f->loop);
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        for (int it_ = 0; !(cond) && it_ < 1000; it_++)                                            \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        if (!(cond))                                                                               \
            fail_msg("loop never reached: %s", #cond);                                             \
    } while (0)

static struct cache_stats stats(struct fx *f)
{
    struct cache_stats st;
    cache_get_stats(f->cache, &st);
    return st;
}

/* Closes the cache (pending stores finish) and opens a new one on the same dir: nothing in
 * memory, no version remembered, the files kept. */
static void restart(struct fx *f)
{
    drop_misses(f);
    cache_free(&f->cache);
    assert_int_equal(cache_live_chunks(), 0);
    cache_open(f);
}

static const struct origin_req origin = {
    .host = "origin.test",
    .port = 80,
    .authority = "origin.test",
    .path = "/depot/1/chunk/abc",
    .path_len = 18,
};

/* The stored response every test object carries (a fill always gives one): one for the whole
 * run, kept reachable, so that a test's meta may borrow it (the cache takes refs of its own). */
static struct objhead *shared_head(void)
{
    static struct objhead *h;
    if (h == NULL) {
        const char *text = "X-Test: 1\r\n", *date = "Sun, 06 Nov 1994 08:49:37 GMT";
        h = objhead_new(text, strlen(text), date, strlen(date), 784111777, 0);
        assert_non_null(h);
    }
    return h;
}

static struct cache_meta meta_of(uint64_t total, const char *etag)
{
    struct cache_meta m;
    memset(&m, 0, sizeof(m));
    m.head = shared_head();
    m.total = total;
    snprintf(m.etag, sizeof(m.etag), "%s", etag);
    snprintf(m.content_type, sizeof(m.content_type), "application/octet-stream");
    return m;
}

static char byte_at(uint64_t obj_off, const char *etag)
{
    return (char)('a' + (obj_off * 7 + (unsigned char)etag[2]) % 26);
}

/* Fills <ck> (FILLING) as a fill would: meta, memory, bytes, seal. */
static void fill(struct chunk *ck, const struct cache_meta *m)
{
    assert_int_equal(cache_chunk_set_meta(ck, m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    uint64_t cap = cache_chunk_cap(ck), start = cache_chunk_index(ck) * CS;
    char buf[CS];
    for (uint64_t i = 0; i < cap; i++)
        buf[i] = byte_at(start + i, m->etag);
    cache_chunk_commit(ck, 0, buf, (size_t)cap);
    cache_chunk_seal(ck);
}

/* A MISS for chunk <index>, filled with version <m> and let go of (the table keeps it). */
static void store_chunk(struct fx *f, uint64_t index, const struct cache_meta *m)
{
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, index, 0, &origin, true, &ck),
                     CACHE_MISS);
    fill(ck, m);
    cache_chunk_unref(&ck);
}

/* A MISS for chunk <index> of version <m>, filled and sealed; the caller's ref. */
static struct chunk *filled_chunk(struct fx *f, uint64_t index, const struct cache_meta *m)
{
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, index, 0, &origin, false, &ck),
                     CACHE_MISS);
    fill(ck, m);
    return ck;
}

static void wait_stores(struct fx *f)
{
    RUN_UNTIL(f, stats(f).io_pending == 0);
}

/* Whether the bytes of <ck> (sealed) are those of version <etag>, read through the API. */
static void assert_bytes(const struct chunk *ck, const char *etag)
{
    uint64_t cap = cache_chunk_cap(ck), start = cache_chunk_index(ck) * CS;
    assert_int_equal(cache_chunk_avail(ck, 0), cap);
    struct chunk_bytes b;
    cache_chunk_bytes(ck, 0, &b);
    char buf[CS];
    const char *p = b.data;
    if (p == NULL) {
        assert_true(b.fd >= 0);
        assert_int_equal(pread(b.fd, buf, (size_t)cap, b.file_off), (ssize_t)cap);
        p = buf;
    }
    for (uint64_t i = 0; i < cap; i++)
        assert_int_equal(p[i], byte_at(start + i, etag));
}

static void chunk_file(struct fx *f, uint64_t index, char *path, size_t cap)
{
    uint8_t obj[16];
    cache_obj_hash(KEY, KEY_LEN, obj);
    assert_int_equal(chunkfile_path(path, cap, f->dir, obj, index), 0);
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- lookups ---- */

static void test_a_miss_is_a_new_filling_chunk_that_the_caller_fills(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    assert_non_null(ck);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FILLING);
    assert_true(cache_chunk_is_miss(ck));
    assert_null(cache_chunk_meta(ck));
    assert_null(cache_chunk_filler(ck));
    assert_int_equal(f->ff.n, 0); /* the cache never starts a fill itself */
    assert_int_equal(g_stats.cache_misses, 1);
    cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&ck);
}

static void test_a_sealed_chunk_in_memory_is_a_hit_with_its_bytes(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(3 * CS + 100, "\"v1\"");
    store_chunk(f, 3, &m);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 3, 0, &origin, false, &ck), CACHE_HIT);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_SEALED);
    assert_int_equal(cache_chunk_cap(ck), 100); /* the last chunk is shorter */
    assert_string_equal(cache_chunk_meta(ck)->etag, "\"v1\"");
    assert_bytes(ck, "\"v1\"");
    assert_int_equal(g_stats.cache_mem_hits, 1);
    assert_int_equal(f->ff.n, 0);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_probe_of_an_absent_chunk_gives_no_chunk(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &ck), CACHE_ABSENT);
    assert_null(ck);
}

struct reader {
    struct chunk_waiter w;
    int woken;
};

static void on_reader_wake(struct chunk_waiter *w)
{
    container_of(w, struct reader, w)->woken++;
}

static void test_a_second_reader_joins_the_fill_and_is_woken_by_its_bytes(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL, *ck2 = NULL;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck2),
                     CACHE_JOINED);
    assert_ptr_equal(ck, ck2);
    assert_int_equal(g_stats.cache_coalesced, 1);
    struct reader r = {0};
    cache_chunk_wait(ck2, &r.w, on_reader_wake, 0);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(r.woken, 0); /* never from inside the call that changed it */
    RUN_UNTIL(f, r.woken == 1);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char half[CS / 2];
    memset(half, 'x', sizeof(half));
    cache_chunk_wait(ck2, &r.w, on_reader_wake, 0);
    cache_chunk_commit(ck, 0, half, sizeof(half));
    RUN_UNTIL(f, r.woken == 2);
    assert_int_equal(cache_chunk_avail(ck2, 0), CS / 2);
    assert_int_equal(cache_chunk_avail(ck2, CS / 2), 0);
    cache_chunk_unwait(&r.w);
    cache_chunk_failed(ck, CHUNK_FAIL_TIMEOUT);
    assert_int_equal(cache_chunk_state(ck2), CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck2), CHUNK_FAIL_TIMEOUT);
    cache_chunk_unref(&ck);
    cache_chunk_unref(&ck2);
}

static void test_readers_of_a_chunk_failed_with_an_answer_share_it(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL, *ck2 = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck2),
                     CACHE_JOINED);
    static char head[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n";
    struct h1_resp resp;
    assert_int_equal(h1_resp_parse(head, strlen(head), H1_M_GET, &resp), (ssize_t)strlen(head));
    struct answer *a = answer_new(head, &resp, 100);
    assert_true(answer_append(a, "no", 2));
    answer_end(a);
    cache_chunk_failed_answer(ck, a);
    answer_unref(&a); /* the chunk holds its own ref */
    assert_int_equal(cache_chunk_state(ck2), CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck2), CHUNK_FAIL_PASS);
    assert_non_null(cache_chunk_answer(ck2));
    const char *b;
    assert_int_equal(answer_head(cache_chunk_answer(ck2), &b)->status, 404);
    /* out of the table: the next lookup is a miss of its own (an uncacheable answer is not kept) */
    struct chunk *ck3 = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck3),
                     CACHE_MISS);
    assert_null(cache_chunk_answer(ck3));
    cache_chunk_failed(ck3, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&ck3);
    cache_chunk_unref(&ck);
    assert_int_equal(answer_live(), 1);
    cache_chunk_unref(&ck2);
    assert_int_equal(answer_live(), 0); /* freed with the last chunk ref */
}

static void test_a_two_part_chunk_takes_both_parts_and_joins_them(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    cache_chunk_split_at(ck, CS / 2);
    assert_true(cache_chunk_is_split(ck));
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char buf[CS];
    memset(buf, 't', sizeof(buf));
    assert_false(cache_chunk_fits(ck, 0, CS / 2 + 1)); /* the head part stops at the tail */
    assert_true(cache_chunk_fits(ck, CS / 2, CS / 2));
    cache_chunk_commit(ck, CS / 2, buf, CS / 2);
    assert_int_equal(cache_chunk_avail(ck, CS / 2), CS / 2);
    assert_int_equal(cache_chunk_avail(ck, 0), 0);
    cache_chunk_commit(ck, 0, buf, CS / 2);
    assert_false(cache_chunk_is_split(ck)); /* the parts met */
    assert_int_equal(cache_chunk_len(ck), CS);
    cache_chunk_seal(ck);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

/* ---- the disk tier ---- */

static void test_many_readers_share_one_disk_lookup(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    store_chunk(f, 1, &m);
    wait_stores(f);
    assert_int_equal(g_stats.cache_disk_writes, 1);
    restart(f);
    struct chunk *cks[3] = {NULL};
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 1, 0, &origin, false, &cks[0]),
                     CACHE_LOOKUP);
    assert_true(cache_chunk_is_loading(cks[0]));
    for (int i = 1; i < 3; i++) {
        assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 1, 0, &origin, false, &cks[i]),
                         CACHE_LOADING);
        assert_ptr_equal(cks[i], cks[0]);
    }
    struct reader r = {0};
    cache_chunk_wait(cks[2], &r.w, on_reader_wake, 0);
    RUN_UNTIL(f, cache_chunk_state(cks[0]) == CHUNK_S_SEALED && r.woken == 1);
    assert_false(cache_chunk_is_loading(cks[0]));
    assert_false(cache_chunk_is_miss(cks[0]));
    assert_int_equal(g_stats.cache_disk_hits, 1);
    assert_int_equal(g_stats.cache_misses, 0);
    assert_int_equal(f->ff.n, 0);
    assert_bytes(cks[1], "\"v1\""); /* from the file */
    for (int i = 0; i < 3; i++)
        cache_chunk_unref(&cks[i]);
}

/* Reopens the cache on a dir of its own (a dir keeps its chunk size) with chunks of <big>
 * bytes, which go in the memory file (the test is skipped where there is none). The dir. */
static const char *reopen_with_big_chunks(struct fx *f, uint64_t big)
{
    struct chunkmem *probe = chunkmem_new(big, true, 0);
    bool no_file = chunkmem_fd(probe) < 0;
    chunkmem_free(&probe);
    if (no_file)
        skip(); /* (every chunk is malloc'd here) */
    static char dir[sizeof(f->dir) + 8];
    snprintf(dir, sizeof(dir), "%s/big", f->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    drop_misses(f);
    cache_free(&f->cache);
    f->cfg.dirs[0] = dir;
    f->cfg.chunk_size = big;
    f->cfg.memory_size = 4 * big;
    cache_open(f);
    return dir;
}

/* A MISS for chunk <index> (chunks of <big> bytes), filled with version <m> as a fill commits:
 * in three pieces; its bytes into <want> (room for <big>). Returns it unsealed, still held, with
 * the memory file's fd in <*fd> (asserted: the chunk is in the file, not malloc'd). */
static struct chunk *commit_in_file(struct fx *f, uint64_t index, uint64_t big,
                                    const struct cache_meta *m, char *want, int *fd)
{
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, index, 0, &origin, true, &ck),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_set_meta(ck, m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    uint64_t cap = cache_chunk_cap(ck);
    assert_true(cap > 70001);
    for (uint64_t i = 0; i < cap; i++)
        want[i] = byte_at(index * big + i, m->etag);
    const uint64_t cut[] = {0, 1000, 70001, cap};
    for (int p = 0; p < 3; p++)
        cache_chunk_commit(ck, cut[p], want + cut[p], (size_t)(cut[p + 1] - cut[p]));
    struct chunk_bytes cb;
    cache_chunk_bytes(ck, 0, &cb);
    assert_true(cb.fd >= 0);
    *fd = cb.fd;
    return ck;
}

/* A chunk of CHUNKMEM_REF_MIN or more lives in the memory file (chunkmem.h) and is stored from
 * it (pread, chunkfile_write_tmp_from): each file holds exactly the bytes committed, in pieces
 * as a fill commits them, the short last chunk too. */
static void test_a_chunk_in_the_memory_file_is_stored_byte_for_byte(void **state)
{
    struct fx *f = *state;
    const uint64_t big = 256 * 1024;
    const char *dir = reopen_with_big_chunks(f, big);
    struct cache_meta m = meta_of(big + big / 2, "\"v9\"");
    char *want = malloc(big), *got = malloc(big);
    assert_non_null(want);
    assert_non_null(got);
    for (uint64_t index = 0; index < 2; index++) {
        int fd;
        struct chunk *ck = commit_in_file(f, index, big, &m, want, &fd);
        assert_int_equal(cache_chunk_cap(ck), index == 0 ? big : big / 2);
        cache_chunk_seal(ck);
        cache_chunk_unref(&ck);
    }
    wait_stores(f);
    assert_int_equal(g_stats.cache_disk_writes, 2);
    restart(f);
    for (uint64_t index = 0; index < 2; index++) {
        char path[PATH_MAX];
        uint8_t obj[16];
        cache_obj_hash(KEY, KEY_LEN, obj);
        assert_int_equal(chunkfile_path(path, sizeof(path), dir, obj, index), 0);
        struct chunkfile_info info;
        size_t blen = 0;
        off_t boff = 0;
        assert_int_equal(chunkfile_read_verify(AT_FDCWD, path, KEY, KEY_LEN, big, index, &info, got,
                                               big, &blen, &boff),
                         0);
        assert_int_equal(blen, index == 0 ? big : big / 2);
        for (uint64_t i = 0; i < blen; i++)
            want[i] = byte_at(index * big + i, m.etag);
        assert_memory_equal(got, want, blen);
    }
    free(want);
    free(got);
}

/* A chunk the store cannot read back from the memory file is counted as chunk memory's error,
 * not the disk's: the cache dir stays up, and the next chunk is stored. */
static void test_a_memory_file_read_failure_is_not_the_disks(void **state)
{
    struct fx *f = *state;
    const uint64_t big = 128 * 1024;
    const char *dir = reopen_with_big_chunks(f, big);
    struct cache_meta m = meta_of(2 * big, "\"v8\"");
    char *buf = malloc(big);
    assert_non_null(buf);
    for (uint64_t index = 0; index < 2; index++) {
        int fd;
        struct chunk *ck = commit_in_file(f, index, big, &m, buf, &fd);
        g_fail_fd = index == 0 ? fd : -1;
        cache_chunk_seal(ck);
        cache_chunk_unref(&ck);
        wait_stores(f);
        g_fail_fd = -1;
    }
    assert_int_equal(g_stats.chunkmem_errors, 1);
    assert_int_equal(g_stats.cache_disk_write_errors, 0);
    assert_int_equal(g_stats.cache_disk_writes, 1);
    char path[PATH_MAX];
    uint8_t obj[16];
    cache_obj_hash(KEY, KEY_LEN, obj);
    assert_int_equal(chunkfile_path(path, sizeof(path), dir, obj, 0), 0);
    assert_false(file_exists(path));
    assert_int_equal(chunkfile_path(path, sizeof(path), dir, obj, 1), 0);
    assert_true(file_exists(path));
    free(buf);
}

static void test_a_damaged_file_is_a_disk_miss_handed_to_the_filler(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    store_chunk(f, 0, &m);
    wait_stores(f);
    restart(f);
    char path[PATH_MAX];
    chunk_file(f, 0, path, sizeof(path));
    FILE *fp = fopen(path, "r+");
    assert_non_null(fp);
    fseek(fp, -10, SEEK_END);
    fputc('#', fp);
    fclose(fp);
    struct chunk *ck = NULL, *probe = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 777, &origin, false, &ck),
                     CACHE_LOOKUP);
    assert_int_equal(f->ff.n, 0); /* only once the I/O pool has answered */
    RUN_UNTIL(f, f->ff.n == 1);
    assert_ptr_equal(f->ff.misses[0].ck, ck);
    assert_int_equal(f->ff.misses[0].index, 0);
    assert_int_equal(f->ff.misses[0].off, 777);
    assert_string_equal(f->ff.misses[0].host, "origin.test");
    assert_true(cache_chunk_is_miss(ck));
    assert_int_equal(g_stats.cache_integrity_failures, 1);
    assert_int_equal(g_stats.cache_misses, 1);
    assert_false(file_exists(path));
    /* The filler's chunk is joinable while it fills. */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &probe),
                     CACHE_JOINED);
    cache_chunk_unref(&probe);
    fill(ck, &m);
    cache_chunk_set_filler(ck, NULL);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_probe_that_misses_on_disk_fails_to_be_forwarded(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    store_chunk(f, 0, &m);
    wait_stores(f);
    restart(f);
    char path[PATH_MAX];
    chunk_file(f, 0, path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    struct chunk *ck = NULL;
    /* The disk index still lists the file: looked up, found missing. */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &ck), CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(ck) == CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck), CHUNK_FAIL_PASS);
    assert_int_equal(f->ff.n, 0);
    cache_chunk_unref(&ck);
}

/* ---- memory ---- */

static void test_eviction_never_takes_a_chunk_with_readers(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(8 * CS, "\"v1\"");
    for (uint64_t i = 0; i < 4; i++)
        store_chunk(f, i, &m);
    wait_stores(f); /* (a store holds a ref too) */
    struct chunk *held = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &held),
                     CACHE_HIT);
    /* Four more chunks: each needs one evicted; never chunk 0, which a reader holds. */
    for (uint64_t i = 4; i < 8; i++) {
        store_chunk(f, i, &m);
        wait_stores(f);
    }
    assert_int_equal(g_stats.cache_evictions, 4);
    assert_int_equal(stats(f).mem_bytes, 4 * CS);
    struct chunk *again = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &again),
                     CACHE_HIT);
    assert_ptr_equal(again, held);
    assert_bytes(held, "\"v1\"");
    cache_chunk_unref(&again);
    cache_chunk_unref(&held);
    wait_stores(f);
}

struct memw {
    struct chunk_waiter w;
    int woken;
};

static void on_mem(struct chunk_waiter *w)
{
    container_of(w, struct memw, w)->woken++;
}

static void test_a_fill_waits_for_memory_until_a_reader_lets_go(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(8 * CS, "\"v1\"");
    struct chunk *held[4] = {NULL};
    for (uint64_t i = 0; i < 4; i++) {
        store_chunk(f, i, &m);
        assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, i, 0, &origin, false, &held[i]),
                         CACHE_HIT);
    }
    wait_stores(f);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 4, 0, &origin, true, &ck), CACHE_MISS);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), -ENOMEM); /* every chunk in memory is read */
    assert_false(cache_chunk_is_reserved(ck));
    struct memw w = {0};
    cache_mem_wait(f->cache, &w.w, on_mem);
    ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(w.woken, 0);
    cache_chunk_unref(&held[2]); /* now only the table holds it: evictable */
    assert_int_equal(w.woken, 0);
    RUN_UNTIL(f, w.woken == 1);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    assert_true(cache_chunk_is_reserved(ck));
    assert_int_equal(g_stats.cache_evictions, 1);
    cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&ck);
    for (int i = 0; i < 4; i++)
        cache_chunk_unref(&held[i]);
}

/* ---- versions ---- */

static void test_a_fill_of_a_new_version_replaces_the_old_ones_chunks(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(2 * CS, "\"v1\""), v2 = meta_of(2 * CS, "\"v2\"");
    store_chunk(f, 0, &v1);
    wait_stores(f);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 1, 0, &origin, true, &ck), CACHE_MISS);
    fill(ck, &v2); /* the origin answered another version */
    cache_chunk_unref(&ck);
    /* A fill still running for v1 may not claim chunks any more. */
    assert_null(cache_chunk_claim(f->cache, KEY, KEY_LEN, 5, &v1));
    /* Chunk 0 of v1 left memory; its file is another version: deleted, and a disk miss. */
    struct chunk *old = NULL;
    enum cache_lookup r = cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &old);
    assert_int_not_equal(r, CACHE_HIT);
    assert_int_equal(r, CACHE_LOOKUP);
    RUN_UNTIL(f, f->ff.n == 1);
    assert_ptr_equal(f->ff.misses[0].ck, old);
    char path[PATH_MAX];
    chunk_file(f, 0, path, sizeof(path));
    assert_false(file_exists(path));
    cache_chunk_unref(&old);
    wait_stores(f);
}

static void test_a_file_of_another_version_than_the_objects_is_a_miss(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(2 * CS, "\"v1\""), v2 = meta_of(2 * CS, "\"v2\"");
    store_chunk(f, 0, &v1);
    wait_stores(f);
    restart(f); /* no version remembered: the file alone says v1 */
    store_chunk(f, 1, &v2);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, f->ff.n == 1);
    assert_ptr_equal(f->ff.misses[0].ck, ck);
    assert_int_equal(g_stats.cache_disk_hits, 0);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_chunk_filled_in_four_parts_joins_them_in_any_order(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    const uint64_t q = CS / 4;
    /* Split where readers start: the deepest first, then two before it (as readers arrive). */
    cache_chunk_split_at(ck, 3 * q);
    assert_false(cache_chunk_can_split_at(ck, 3 * q)); /* a part starts there */
    cache_chunk_split_at(ck, q);
    cache_chunk_split_at(ck, 2 * q);
    assert_false(cache_chunk_can_split_at(ck, q / 2)); /* CACHE_SPLITS_MAX */
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char buf[CS];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)(i * 7);
    /* Each part takes bytes where it has reached, and never runs into the next. */
    assert_false(cache_chunk_fits(ck, 0, q + 1));
    assert_false(cache_chunk_fits(ck, q, q + 1));
    assert_false(cache_chunk_fits(ck, q + 1, 1)); /* nobody has reached there */
    cache_chunk_commit(ck, 2 * q, buf + 2 * q, 10);
    assert_false(cache_chunk_fits(ck, 2 * q, 1)); /* committed already */
    assert_true(cache_chunk_fits(ck, 2 * q + 10, q - 10));
    assert_false(cache_chunk_can_split_at(ck, 2 * q + 5));  /* inside a part */
    assert_false(cache_chunk_can_split_at(ck, 2 * q + 10)); /* where one has reached */
    cache_chunk_commit(ck, 3 * q, buf + 3 * q, q);          /* the last part, whole */
    assert_int_equal(cache_chunk_avail(ck, 3 * q + 1), q - 1);
    assert_int_equal(cache_chunk_avail(ck, 2 * q), 10);
    assert_int_equal(cache_chunk_avail(ck, 2 * q + 10), 0);
    cache_chunk_commit(ck, 2 * q + 10, buf + 2 * q + 10, q - 10); /* meets the last one */
    assert_int_equal(cache_chunk_avail(ck, 2 * q), 2 * q);
    assert_true(cache_chunk_is_split(ck));
    cache_chunk_commit(ck, q, buf + q, q); /* meets it too: one part from q on */
    assert_int_equal(cache_chunk_avail(ck, q), 3 * q);
    assert_int_equal(cache_chunk_len(ck), 0);
    cache_chunk_commit(ck, 0, buf, q); /* and the first */
    assert_false(cache_chunk_is_split(ck));
    assert_int_equal(cache_chunk_len(ck), CS);
    struct chunk_bytes b;
    cache_chunk_bytes(ck, 0, &b);
    assert_memory_equal(b.data, buf, CS);
    cache_chunk_seal(ck);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_part_past_the_end_or_never_filled_is_undone(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    /* The object ends inside the chunk, before its last split point. */
    struct cache_meta m = meta_of(CS / 2, "\"v1\"");
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    cache_chunk_split_at(ck, CS / 4);
    cache_chunk_split_at(ck, 3 * CS / 4);
    cache_chunk_unsplit(ck, CS / 8); /* none there: nothing */
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_cap(ck), CS / 2);
    assert_false(cache_chunk_can_split_at(ck, CS / 2)); /* past the end */
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char buf[CS / 2];
    memset(buf, 'p', sizeof(buf));
    /* The part at CS / 4 runs to the end now: the one past the end was dropped. */
    assert_true(cache_chunk_fits(ck, CS / 4, CS / 4));
    cache_chunk_unsplit(ck, CS / 4); /* (say its fill was answered 416) */
    assert_false(cache_chunk_is_split(ck));
    assert_true(cache_chunk_fits(ck, 0, CS / 2));
    cache_chunk_commit(ck, 0, buf, CS / 2);
    cache_chunk_seal(ck);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_SEALED);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_parts_past_the_end_are_all_dropped_and_waiters_are_told_apart(void **state)
{
    struct fx *f = *state;
    struct chunk *ck = NULL;
    struct cache_meta m = meta_of(CS / 3, "\"v1\"");
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    cache_chunk_split_at(ck, CS / 4);
    cache_chunk_split_at(ck, CS / 2);
    cache_chunk_split_at(ck, 3 * CS / 4);
    /* Readers wait for bytes 10 and CS / 2: told apart by where they wait. */
    struct reader r1 = {0}, r2 = {0};
    cache_chunk_wait(ck, &r1.w, on_reader_wake, 10);
    cache_chunk_wait(ck, &r2.w, on_reader_wake, CS / 2);
    assert_true(cache_chunk_waited_in(ck, 0, 11));
    assert_false(cache_chunk_waited_in(ck, 0, 10));
    assert_false(cache_chunk_waited_in(ck, 11, CS / 2));
    assert_true(cache_chunk_waited_in(ck, 11, CS / 2 + 1));
    cache_chunk_unwait(&r1.w);
    assert_false(cache_chunk_waited_in(ck, 0, CS / 4));
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0); /* ends before the last two parts */
    assert_int_equal(cache_chunk_cap(ck), CS / 3);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    assert_true(cache_chunk_fits(ck, CS / 4, CS / 3 - CS / 4)); /* to the end: the rest dropped */
    char buf[CS / 3];
    memset(buf, 'e', sizeof(buf));
    cache_chunk_commit(ck, CS / 4, buf + CS / 4, CS / 3 - CS / 4);
    cache_chunk_commit(ck, 0, buf, CS / 4);
    assert_false(cache_chunk_is_split(ck));
    assert_int_equal(cache_chunk_len(ck), CS / 3);
    cache_chunk_seal(ck);
    cache_chunk_unwait(&r2.w);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_set_meta_refuses_a_second_part_of_another_version(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(CS, "\"v1\""), v2 = meta_of(CS, "\"v2\"");
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    cache_chunk_split_at(ck, CS / 2);
    assert_int_equal(cache_chunk_set_meta(ck, &v1), 0);
    assert_int_equal(cache_chunk_set_meta(ck, &v2), -ESTALE);
    assert_int_equal(cache_chunk_set_meta(ck, &v1), 0);
    cache_chunk_failed(ck, CHUNK_FAIL_CHANGED);
    cache_chunk_unref(&ck);
}

/* ---- purge ---- */

/* The purge comes right after the seals: each store may be queued, writing, or done by then;
 * in every order no chunk file is left afterwards. */
struct purged {
    int called, n;
    unsigned seq; /* of the call, among every purge's */
};

static unsigned g_purge_seq;

static void on_purged(void *arg, int n)
{
    struct purged *p = arg;
    p->called++;
    p->n = n;
    p->seq = ++g_purge_seq;
}

/* Purges KEY and waits for its done call (never made from inside cache_purge()). Its count. */
static int purge_wait(struct fx *f)
{
    struct purged p = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p);
    assert_int_equal(p.called, 0);
    RUN_UNTIL(f, p.called > 0);
    assert_int_equal(p.called, 1);
    return p.n;
}

static void test_a_purge_wins_over_stores_still_pending(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(3 * CS, "\"v1\"");
    for (uint64_t i = 0; i < 3; i++)
        store_chunk(f, i, &m); /* each submits a store to the I/O pool */
    int n = purge_wait(f);
    assert_true(n >= 0 && n <= 3); /* files of the stores that were done */
    wait_stores(f);
    for (uint64_t i = 0; i < 3; i++) {
        char path[PATH_MAX];
        chunk_file(f, i, path, sizeof(path));
        assert_false(file_exists(path)); /* no store put its file back */
    }
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &ck), CACHE_ABSENT);
    assert_null(ck);
    assert_int_equal(f->ff.n, 0);
}

static void test_readers_of_a_purged_chunk_keep_it(void **state)
{
    struct fx *f = *state;
    struct chunk *again = NULL;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    store_chunk(f, 0, &m);
    wait_stores(f);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck), CACHE_HIT);
    struct purged p = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p);
    /* Gone from lookups at once, its file still indexed or not. */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &again),
                     CACHE_ABSENT);
    RUN_UNTIL(f, p.called > 0);
    assert_int_equal(p.n, 1); /* its file */
    assert_bytes(ck, "\"v1\"");
    cache_chunk_unref(&ck);
    wait_stores(f);
}

/* While the purge's unlinks wait, its files are not read (a lookup is a miss, never a disk
 * lookup of a file still there) and a chunk filled anew is not stored; once they are done, it
 * is, and the new version is what the disk holds. */
static void test_a_purge_keeps_its_files_from_lookups_and_stores_until_they_are_gone(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(2 * CS, "\"v1\""), v2 = meta_of(2 * CS, "\"v2\"");
    store_chunk(f, 0, &v1);
    store_chunk(f, 1, &v1);
    wait_stores(f);
    restart(f); /* (nothing in memory: a lookup would go to disk) */
    assert_int_equal(stats(f).disk_chunks, 2);
    atomic_store(&g_unlink_shut, true);
    struct purged p = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p);
    assert_int_equal(cache_purges_pending(f->cache), 1);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    fill(ck, &v2);
    for (int i = 0; i < 20; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(p.called, 0);
    assert_int_equal(g_stats.cache_disk_writes, 0); /* put off */
    atomic_store(&g_unlink_shut, false);
    RUN_UNTIL(f, p.called > 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(cache_purges_pending(f->cache), 0);
    wait_stores(f);
    assert_int_equal(g_stats.cache_disk_writes, 1); /* the new fill, once the purge was done */
    assert_int_equal(stats(f).disk_chunks, 1);
    cache_chunk_unref(&ck);
    restart(f);
    assert_int_equal(stats(f).disk_chunks, 1);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, NULL, false, &ck), CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(ck) == CHUNK_S_SEALED);
    assert_bytes(ck, "\"v2\"");
    cache_chunk_unref(&ck);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 1, 0, NULL, false, &ck), CACHE_ABSENT);
}

/* With lancache's trees set, a lookup while the purge is held looks in them only: the chunk file
 * still waiting for its unlink is not read (a miss, never the purged bytes). */
static void test_a_lancache_lookup_during_a_purge_does_not_read_the_purged_file(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(CS, "\"v1\"");
    store_chunk(f, 0, &v1);
    wait_stores(f);
    char lc[] = "/tmp/test_cache_lc.XXXXXX"; /* empty: lancache has nothing */
    assert_non_null(mkdtemp(lc));
    f->cfg.lancache_dirs[0] = lc;
    f->cfg.n_lancache_dirs = 1;
    restart(f);
    atomic_store(&g_unlink_shut, true);
    struct purged p = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_LOOKUP); /* lancache's trees are looked in */
    RUN_UNTIL(f, f->ff.n == 1);     /* then a miss: the filler fetches it */
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FILLING);
    assert_int_equal(g_stats.cache_disk_hits, 0);
    assert_int_equal(p.called, 0);
    atomic_store(&g_unlink_shut, false);
    RUN_UNTIL(f, p.called > 0);
    assert_int_equal(p.n, 1);
    cache_chunk_unref(&ck);
    drop_misses(f);
    f->cfg.n_lancache_dirs = 0;
    assert_int_equal(rmdir(lc), 0);
}

/* Memory short (a slow reader would be moved to the chunk's file), but the file there while a
 * purge is held is the purged one: the reader stays on memory. */
static void test_a_reader_is_not_moved_to_a_file_a_purge_holds(void **state)
{
    struct fx *f = *state;
    struct cache_meta v1 = meta_of(4 * CS, "\"v1\"");
    struct chunk *held[4] = {NULL};
    for (uint64_t i = 0; i < 4; i++)
        held[i] = filled_chunk(f, i, &v1); /* memory full: 4 chunks, each with its file */
    wait_stores(f);
    atomic_store(&g_unlink_shut, true);
    struct purged p = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p);
    /* Refilled at once with the same validators (the readers of the purged ones hold them). */
    struct chunk *again = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &again),
                     CACHE_MISS);
    assert_null(cache_chunk_on_disk(f->cache, held[0])); /* its file: the purged one */
    atomic_store(&g_unlink_shut, false);
    RUN_UNTIL(f, p.called > 0);
    assert_int_equal(p.n, 4);
    assert_null(cache_chunk_on_disk(f->cache, held[0])); /* and now none */
    cache_chunk_failed(again, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&again);
    for (int i = 0; i < 4; i++)
        cache_chunk_unref(&held[i]);
}

/* Purges are done in the order asked, each once: a second purge of the object finds nothing the
 * first one left, and is done after it. */
static void test_purges_are_done_in_order_and_count_each_file_once(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    store_chunk(f, 0, &m);
    store_chunk(f, 1, &m);
    wait_stores(f);
    atomic_store(&g_unlink_shut, true);
    struct purged a = {0}, b = {0};
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &a);
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &b);
    assert_int_equal(cache_purges_pending(f->cache), 2);
    for (int i = 0; i < 20; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(a.called + b.called, 0);
    atomic_store(&g_unlink_shut, false);
    RUN_UNTIL(f, b.called > 0);
    assert_int_equal(a.called, 1);
    assert_true(a.seq < b.seq);
    assert_int_equal(a.n, 2);
    assert_int_equal(b.n, 0);
    assert_int_equal(g_stats.cache_purged, 2);
    assert_int_equal(stats(f).disk_chunks, 0);
    /* Their memory too, released in the loop's turns after the purge. */
    RUN_UNTIL(f, stats(f).mem_bytes == 0);
    assert_int_equal(cache_live_chunks(), 0);
}

/* A caller gone first is not called back; the purge goes on. */
static void test_a_forgotten_purge_goes_on_without_its_caller(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    store_chunk(f, 0, &m);
    wait_stores(f);
    struct purged p = {0};
    cache_purge_forget(cache_purge(f->cache, KEY, KEY_LEN, on_purged, &p));
    RUN_UNTIL(f, cache_purges_pending(f->cache) == 0);
    assert_int_equal(p.called, 0);
    char path[PATH_MAX];
    chunk_file(f, 0, path, sizeof(path));
    assert_false(file_exists(path));
    assert_int_equal(g_stats.cache_purged, 1);
}

/* Purges still queued when the cache closes are done before it is gone: their files do not
 * come back with the next start. */
static void test_purges_queued_at_close_are_done(void **state)
{
    struct fx *f = *state;
    static const char key2[] = "steam\n/depot/1/chunk/def";
    struct cache_meta m = meta_of(CS, "\"v1\"");
    store_chunk(f, 0, &m);
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, key2, sizeof(key2) - 1, 0, 0, &origin, true, &ck),
                     CACHE_MISS);
    fill(ck, &m);
    cache_chunk_unref(&ck);
    wait_stores(f);
    assert_int_equal(stats(f).disk_chunks, 2);
    struct purged a = {0}, b = {0};
    cache_purge(f->cache, key2, sizeof(key2) - 1, on_purged, &a);
    cache_purge(f->cache, KEY, KEY_LEN, on_purged, &b); /* queued behind the first */
    restart(f);                                         /* (no loop turn: neither is done) */
    assert_int_equal(a.called + b.called, 2);
    assert_int_equal(a.n + b.n, 2);
    assert_int_equal(stats(f).disk_chunks, 0);
    char path[PATH_MAX];
    chunk_file(f, 0, path, sizeof(path));
    assert_false(file_exists(path));
}

static void test_a_forced_lookup_joins_a_refetch_but_replaces_other_fills(void **state)
{
    struct fx *f = *state;
    struct chunk *plain = NULL, *re = NULL, *again = NULL, *reader = NULL, *next = NULL;
    /* an ordinary miss being filled: a forced lookup does not take its bytes */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &plain),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &re), CACHE_MISS);
    assert_ptr_not_equal(re, plain);
    /* a second forced lookup while that refetch fills shares it, as an ordinary reader does */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &again),
                     CACHE_JOINED);
    assert_ptr_equal(again, re);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &reader),
                     CACHE_JOINED);
    assert_ptr_equal(reader, re);
    /* once sealed it is stored: the next forced lookup refetches again */
    struct cache_meta m = meta_of(CS, "\"v1\"");
    fill(re, &m);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &next),
                     CACHE_MISS);
    assert_ptr_not_equal(next, re);
    cache_chunk_failed(next, CHUNK_FAIL_ORIGIN);
    cache_chunk_failed(plain, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&next);
    cache_chunk_unref(&plain);
    cache_chunk_unref(&re);
    cache_chunk_unref(&again);
    cache_chunk_unref(&reader);
    wait_stores(f);
}

/* ---- delivered bytes: hit and miss per byte ---- */

static void test_cache_seen_mark_counts_each_byte_once_in_any_order(void **state)
{
    (void)state;
    uint8_t obj[16] = {1};
    struct chunk_seen *s = cache_seen_new(obj, 0);
    assert_false(cache_seen_has(s, 0));
    assert_true(cache_seen_is_untouched(s));
    struct chunk_seen *t = cache_seen_new(obj, 1);
    assert_true(cache_seen_tell(t, 0, 10)); /* announced by a head: touched, nothing delivered */
    assert_false(cache_seen_is_untouched(t));
    cache_seen_unref(&t);
    assert_int_equal(cache_seen_mark(s, 100, 200), 200); /* a reader starting mid-chunk */
    assert_false(cache_seen_is_untouched(s));
    assert_true(cache_seen_has(s, 100));
    assert_true(cache_seen_has(s, 299));
    assert_false(cache_seen_has(s, 300));
    assert_false(cache_seen_has(s, 99));
    assert_int_equal(cache_seen_mark(s, 0, 150), 100); /* overlaps the first run */
    assert_int_equal(cache_seen_mark(s, 250, 100), 50);
    assert_int_equal(cache_seen_mark(s, 1000, 10), 10);  /* a second run */
    assert_int_equal(cache_seen_mark(s, 350, 650), 650); /* fills the gap exactly: one run */
    assert_int_equal(s->done.n, 1);
    assert_int_equal(cache_seen_mark(s, 0, 1010), 0);
    assert_int_equal(cache_seen_mark(s, 5, 0), 0);
    assert_false(cache_seen_is_complete(s, CS));
    assert_int_equal(cache_seen_mark(s, 0, CS), CS - 1010);
    assert_true(cache_seen_is_complete(s, CS));
    cache_seen_unref(&s);
    assert_null(s);
}

static void test_cache_seen_mark_is_exact_up_to_its_runs_then_merges_the_closest(void **state)
{
    (void)state;
    uint8_t obj[16] = {2};
    struct chunk_seen *s = cache_seen_new(obj, 0);
    /* CACHE_SEEN_RUNS runs, 1 byte each, gaps of 9 (the last one's gap is 4): exact */
    for (unsigned i = 0; i < CACHE_SEEN_RUNS; i++)
        assert_int_equal(cache_seen_mark(s, i * 10, 1), 1);
    assert_int_equal(s->done.n, CACHE_SEEN_RUNS);
    assert_false(cache_seen_has(s, 1));
    /* one more run: the two runs closest together (gap 4) become one, their gap delivered */
    uint64_t last = (CACHE_SEEN_RUNS - 1) * 10;
    assert_int_equal(cache_seen_mark(s, last + 5, 1), 1);
    assert_int_equal(s->done.n, CACHE_SEEN_RUNS);
    assert_true(cache_seen_has(s, last + 2)); /* counted as delivered: its delivery is a hit */
    assert_false(cache_seen_has(s, 1));       /* the other gaps stay exact */
    uint64_t end = last + 6;
    assert_int_equal(cache_seen_mark(s, 0, end),
                     end - (CACHE_SEEN_RUNS + 1) - 4 /* the merged gap */);
    assert_true(cache_seen_is_complete(s, end));
    cache_seen_unref(&s);
}

static void test_the_kept_records_are_bounded_oldest_dropped_first(void **state)
{
    (void)state;
    struct cache_seen_tab t;
    cache_seen_tab_init(&t);
    uint8_t obj[16] = {3};
    for (uint64_t i = 0; i <= CACHE_SEEN_KEPT_MAX; i++) {
        struct chunk_seen *s = cache_seen_new(obj, i);
        cache_seen_tab_keep(&t, s);
        cache_seen_tab_keep(&t, s); /* kept already: no-op */
        cache_seen_unref(&s);       /* the table's ref keeps it */
    }
    assert_int_equal(t.count, CACHE_SEEN_KEPT_MAX);
    assert_null(cache_seen_tab_find(&t, obj, 0)); /* the oldest went */
    struct chunk_seen *s = cache_seen_tab_find(&t, obj, 1);
    assert_non_null(s);
    assert_int_equal(s->refs, 2);
    /* a newer record of the same chunk replaces it */
    struct chunk_seen *s2 = cache_seen_new(obj, 1);
    cache_seen_tab_keep(&t, s2);
    assert_null(s->tab);
    assert_int_equal(s->refs, 1);
    cache_seen_unref(&s);
    s = cache_seen_tab_find(&t, obj, 1);
    assert_ptr_equal(s, s2);
    cache_seen_unref(&s);
    cache_seen_tab_forget(&t, obj, 1);
    assert_null(s2->tab);
    assert_null(cache_seen_tab_find(&t, obj, 1));
    cache_seen_unref(&s2);
    assert_int_equal(t.count, CACHE_SEEN_KEPT_MAX - 1);
    cache_seen_tab_fini(&t);
}

static void test_a_fill_counts_each_byte_a_miss_once_whoever_delivers_it(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(2 * CS, "\"v1\"");
    struct chunk *ck = NULL, *joiner = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char buf[CS];
    memset(buf, 'x', sizeof(buf));
    cache_chunk_commit(ck, 0, buf, CS / 2);
    assert_false(cache_chunk_was_delivered(ck, 0));
    assert_int_equal(cache_chunk_deliver(ck, 0, CS / 4), CS / 4); /* the first reader */
    assert_true(cache_chunk_was_delivered(ck, 0));
    assert_false(cache_chunk_was_delivered(ck, CS / 4));
    /* a joiner gets what the first reader had (hits) and what it had not yet (misses) */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &joiner),
                     CACHE_JOINED);
    assert_int_equal(cache_chunk_deliver(joiner, 0, CS / 2), CS / 4);
    assert_int_equal(cache_chunk_deliver(ck, CS / 4, CS / 4), 0);
    cache_chunk_commit(ck, CS / 2, buf, CS / 2);
    cache_chunk_seal(ck);
    assert_int_equal(cache_chunk_deliver(ck, CS / 2, CS / 2), CS / 2);
    assert_int_equal(cache_chunk_deliver(joiner, CS / 2, CS / 2), 0);
    cache_chunk_unref(&joiner);
    cache_chunk_unref(&ck);
    /* the next reader, from memory: all hits */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck), CACHE_HIT);
    assert_true(cache_chunk_was_delivered(ck, CS - 1));
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), 0);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_of_heads_asking_the_same_new_bytes_at_once_one_says_miss(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_true(cache_chunk_head_is_miss(ck, 0, CS));    /* the first head: MISS */
    assert_false(cache_chunk_head_is_miss(ck, 0, CS));   /* the same bytes: HIT */
    assert_false(cache_chunk_head_is_miss(ck, 100, 10)); /* within them: HIT */
    assert_int_equal(cache_chunk_deliver(ck, 0, 0), 0);  /* (announcing delivers nothing) */
    assert_false(cache_chunk_was_delivered(ck, 0));
    cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&ck);
    /* a head for bytes after what another head announced is a MISS of its own */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    assert_true(cache_chunk_head_is_miss(ck, 0, CS / 2));
    assert_true(cache_chunk_head_is_miss(ck, CS / 2, CS / 2));
    char buf[CS];
    memset(buf, 'x', sizeof(buf));
    cache_chunk_commit(ck, 0, buf, CS);
    cache_chunk_seal(ck);
    assert_int_equal(cache_chunk_deliver(ck, 0, CS / 4), CS / 4);
    assert_false(cache_chunk_head_is_miss(ck, 0, CS)); /* delivered: HIT */
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_two_part_fill_counts_each_part_once(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    struct chunk *ck = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_MISS);
    cache_chunk_split_at(ck, CS / 2);
    assert_int_equal(cache_chunk_set_meta(ck, &m), 0);
    assert_int_equal(cache_chunk_reserve(ck), 0);
    char buf[CS];
    memset(buf, 't', sizeof(buf));
    cache_chunk_commit(ck, CS / 2, buf, CS / 2); /* the tail part first, its reader gets it */
    assert_int_equal(cache_chunk_deliver(ck, CS / 2, CS / 2), CS / 2);
    cache_chunk_commit(ck, 0, buf, CS / 2);
    cache_chunk_seal(ck);
    /* a reader of the whole chunk: only the head part is new */
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), CS / 2);
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), 0);
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_a_file_of_an_earlier_run_counts_as_delivered(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    struct chunk *ck = filled_chunk(f, 0, &m); /* never delivered */
    cache_chunk_unref(&ck);
    wait_stores(f);
    restart(f);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &ck),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(ck) == CHUNK_S_SEALED);
    assert_true(cache_chunk_was_delivered(ck, 0));
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), 0);
    cache_chunk_unref(&ck);
}

static void test_a_chunk_evicted_before_delivery_keeps_its_misses_in_its_file(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(8 * CS, "\"v1\"");
    /* chunk 0 half delivered, chunk 1 fully, chunk 2 not at all (read ahead of its reader) */
    struct chunk *ck = filled_chunk(f, 0, &m);
    assert_int_equal(cache_chunk_deliver(ck, CS / 4, CS / 2), CS / 2);
    cache_chunk_unref(&ck);
    ck = filled_chunk(f, 1, &m);
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), CS);
    cache_chunk_unref(&ck);
    ck = filled_chunk(f, 2, &m);
    cache_chunk_unref(&ck);
    wait_stores(f);
    /* five more chunks through 4 chunks of memory: 0, 1 and 2 are evicted */
    for (uint64_t i = 3; i < 8; i++) {
        ck = filled_chunk(f, i, &m);
        cache_chunk_unref(&ck);
        wait_stores(f);
    }
    assert_true(g_stats.cache_evictions >= 3);
    struct chunk *a = NULL, *b = NULL;
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &a),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_SEALED);
    assert_false(cache_chunk_was_delivered(a, 0));
    assert_true(cache_chunk_was_delivered(a, CS / 4));
    /* a second load of the same file while the first is read shares its account */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &b),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(b) == CHUNK_S_SEALED);
    assert_ptr_not_equal(a, b);
    assert_int_equal(cache_chunk_deliver(a, 0, CS / 2), CS / 4);
    assert_int_equal(cache_chunk_deliver(b, 0, CS), CS / 4);
    assert_int_equal(cache_chunk_deliver(a, 0, CS), 0);
    cache_chunk_unref(&a);
    cache_chunk_unref(&b);
    /* complete now: a later load is all hits */
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, false, &a),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_SEALED);
    assert_int_equal(cache_chunk_deliver(a, 0, CS), 0);
    cache_chunk_unref(&a);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 1, 0, &origin, false, &a),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_SEALED);
    assert_int_equal(cache_chunk_deliver(a, 0, CS), 0); /* delivered before it was evicted */
    cache_chunk_unref(&a);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 2, 0, &origin, false, &a),
                     CACHE_LOOKUP);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_SEALED);
    assert_int_equal(cache_chunk_deliver(a, 0, CS), CS); /* never delivered: all misses */
    cache_chunk_unref(&a);
    wait_stores(f);
}

static void test_a_refetch_makes_its_bytes_new_again(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(CS, "\"v1\"");
    struct chunk *ck = filled_chunk(f, 0, &m);
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), CS);
    cache_chunk_unref(&ck);
    wait_stores(f);
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 0, 0, &origin, true, &ck), CACHE_MISS);
    fill(ck, &m);
    assert_int_equal(cache_chunk_deliver(ck, 0, CS), CS); /* fetched again: misses again */
    cache_chunk_unref(&ck);
    wait_stores(f);
}

static void test_the_file_copy_of_a_memory_chunk_shares_its_account(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(4 * CS, "\"v1\"");
    struct chunk *held[4] = {NULL};
    for (uint64_t i = 0; i < 4; i++)
        held[i] = filled_chunk(f, i, &m); /* memory full: 4 chunks */
    wait_stores(f);
    assert_int_equal(cache_chunk_deliver(held[0], 0, CS / 2), CS / 2);
    struct chunk *dk = cache_chunk_on_disk(f->cache, held[0]);
    assert_non_null(dk); /* memory is short and the file was written here */
    assert_ptr_not_equal(dk, held[0]);
    assert_true(cache_chunk_was_delivered(dk, 0));
    assert_int_equal(cache_chunk_deliver(dk, 0, CS), CS / 2);
    assert_int_equal(cache_chunk_deliver(held[0], 0, CS), 0);
    cache_chunk_unref(&dk);
    for (int i = 0; i < 4; i++)
        cache_chunk_unref(&held[i]);
}

/* ---- read-ahead spans ---- */

static void test_a_span_stops_before_a_chunk_in_flight(void **state)
{
    struct fx *f = *state;
    struct chunk *busy = NULL, *cks[CACHE_SPAN_MAX];
    assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, 3, 0, &origin, true, &busy),
                     CACHE_MISS);
    size_t n = cache_chunk_span(f->cache, KEY, KEY_LEN, 1, 10, cks);
    assert_int_equal(n, 2); /* chunks 1 and 2 */
    assert_int_equal(cache_chunk_index(cks[0]), 1);
    assert_int_equal(cache_chunk_index(cks[1]), 2);
    assert_int_equal(g_stats.cache_readahead, 2);
    assert_int_equal(cache_chunk_span(f->cache, KEY, KEY_LEN, 3, 10, cks + 2), 0);
    for (size_t i = 0; i < n; i++) {
        cache_chunk_failed(cks[i], CHUNK_FAIL_ORIGIN);
        cache_chunk_unref(&cks[i]);
    }
    cache_chunk_failed(busy, CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&busy);
}

/* A chunk with a file but no memory copy (evicted, or from before a restart) is present: a span
 * ending before it leaves it to a disk lookup instead of asking the origin for its bytes again. */
static void test_a_span_stops_before_a_chunk_on_disk(void **state)
{
    struct fx *f = *state;
    struct cache_meta m = meta_of(6 * CS, "\"v1\"");
    store_chunk(f, 3, &m);
    wait_stores(f);
    restart(f); /* chunk 3 only in its file now */
    struct chunk *cks[CACHE_SPAN_MAX];
    size_t n = cache_chunk_span(f->cache, KEY, KEY_LEN, 1, 5, cks);
    assert_int_equal(n, 2); /* chunks 1 and 2 */
    assert_int_equal(cache_chunk_index(cks[1]), 2);
    assert_int_equal(cache_chunk_span(f->cache, KEY, KEY_LEN, 3, 5, cks + 2), 0);
    for (size_t i = 0; i < n; i++) {
        cache_chunk_failed(cks[i], CHUNK_FAIL_ORIGIN);
        cache_chunk_unref(&cks[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
        T(test_a_miss_is_a_new_filling_chunk_that_the_caller_fills),
        T(test_a_sealed_chunk_in_memory_is_a_hit_with_its_bytes),
        T(test_a_probe_of_an_absent_chunk_gives_no_chunk),
        T(test_a_second_reader_joins_the_fill_and_is_woken_by_its_bytes),
        T(test_a_forced_lookup_joins_a_refetch_but_replaces_other_fills),
        T(test_readers_of_a_chunk_failed_with_an_answer_share_it),
        T(test_a_two_part_chunk_takes_both_parts_and_joins_them),
        T(test_many_readers_share_one_disk_lookup),
        T(test_a_chunk_in_the_memory_file_is_stored_byte_for_byte),
        T(test_a_memory_file_read_failure_is_not_the_disks),
        T(test_a_damaged_file_is_a_disk_miss_handed_to_the_filler),
        T(test_a_probe_that_misses_on_disk_fails_to_be_forwarded),
        T(test_eviction_never_takes_a_chunk_with_readers),
        T(test_a_fill_waits_for_memory_until_a_reader_lets_go),
        T(test_a_fill_of_a_new_version_replaces_the_old_ones_chunks),
        T(test_a_file_of_another_version_than_the_objects_is_a_miss),
        T(test_a_chunk_filled_in_four_parts_joins_them_in_any_order),
        T(test_a_part_past_the_end_or_never_filled_is_undone),
        T(test_parts_past_the_end_are_all_dropped_and_waiters_are_told_apart),
        T(test_set_meta_refuses_a_second_part_of_another_version),
        T(test_a_purge_wins_over_stores_still_pending),
        T(test_readers_of_a_purged_chunk_keep_it),
        T(test_a_purge_keeps_its_files_from_lookups_and_stores_until_they_are_gone),
        T(test_a_lancache_lookup_during_a_purge_does_not_read_the_purged_file),
        T(test_a_reader_is_not_moved_to_a_file_a_purge_holds),
        T(test_purges_are_done_in_order_and_count_each_file_once),
        T(test_a_forgotten_purge_goes_on_without_its_caller),
        T(test_purges_queued_at_close_are_done),
        T(test_a_span_stops_before_a_chunk_in_flight),
        T(test_a_span_stops_before_a_chunk_on_disk),
        T(test_cache_seen_mark_counts_each_byte_once_in_any_order),
        T(test_cache_seen_mark_is_exact_up_to_its_runs_then_merges_the_closest),
        T(test_the_kept_records_are_bounded_oldest_dropped_first),
        T(test_a_fill_counts_each_byte_a_miss_once_whoever_delivers_it),
        T(test_of_heads_asking_the_same_new_bytes_at_once_one_says_miss),
        T(test_a_two_part_fill_counts_each_part_once),
        T(test_a_file_of_an_earlier_run_counts_as_delivered),
        T(test_a_chunk_evicted_before_delivery_keeps_its_misses_in_its_file),
        T(test_a_refetch_makes_its_bytes_new_again),
        T(test_the_file_copy_of_a_memory_chunk_shares_its_account),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
