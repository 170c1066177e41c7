/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_fetch: the fill module (fetch.c) on a real libev loop, filling a real cache (temporary
 * dir) from a scripted origin: a loopback listening socket served by threads written here
 * (blocking sockets, one thread per connection, keep-alive), which records every request's path
 * and Range and answers as the test's script says (206 ranges, the whole object to a Range,
 * an answer cut short once, a redirect, a close without answer, an error page). The tests start
 * fills the way the client path does (a lookup's MISS, fetch_start_at, fetch_want,
 * fetch_sequential, fetch_ahead) and assert on the bytes committed into the chunks and on what the
 * origin was asked. Every test ends with no fetch, upstream or chunk alive.
 */
#include "fetch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "answer.h"
#include "cache.h"
#include "config.h"
#include "http1.h"
#include "log.h"
#include "origin.h"
#include "resolver.h"
#include "stats.h"
#include "upool.h"
#include "upstream.h"
#include "util.h"

#define CS (256u * 1024u) /* chunk size: above FETCH_TWO_PART_MIN, so two-part fills happen */
#define MAX_REQS 64
#define MAX_CONNS 64

/* ---- the scripted origin ---- */

enum script {
    SCRIPT_RANGES,   /* 206 for every Range (416 past the end) */
    SCRIPT_NORANGE,  /* 200 with the whole object, whatever the Range */
    SCRIPT_CUT_ONCE, /* the first answer stops after <cut> body bytes (closed); then ranges */
    SCRIPT_REDIRECT, /* "/r" answers 302 to "/obj" (empty body); then ranges */
    SCRIPT_CLOSE,    /* every connection closed without an answer */
    SCRIPT_404,      /* a short error page */
    SCRIPT_STALL,    /* requests read, never answered */
    SCRIPT_SHORT,    /* 206s of at most <cut> bytes from the start asked (RFC 9110 §15.3.7) */
    SCRIPT_CHUNKED,  /* 200 with the whole object, chunked (no length), whatever the Range */
};

struct req_rec {
    char path[64];
    uint64_t a, b; /* the Range asked (b as asked: may lie past the end) */
    bool has_range;
    char xfoo[32];    /* the value of an X-Foo field, "" without */
    bool ae_identity; /* "Accept-Encoding: identity" sent */
    bool has_cookie;  /* a Cookie field sent */
};

struct origin_srv {
    int lfd;
    struct sockaddr_in addr;
    pthread_t acceptor;
    pthread_mutex_t mu;
    enum script script;
    uint64_t total; /* the object's length */
    uint64_t cut;   /* SCRIPT_CUT_ONCE: body bytes sent before the cut; SCRIPT_SHORT: the most */
    bool cut_done;
    bool changed; /* SCRIPT_SHORT: answers after the first have another ETag */
    int n_answers;
    struct req_rec reqs[MAX_REQS];
    int n_reqs;
    pthread_t conns[MAX_CONNS];
    int n_conns;
};

/* Byte <off> of the object. */
static char obj_byte(uint64_t off)
{
    return (char)('A' + (off * 13 + off / 251) % 53);
}

static bool write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        len -= (size_t)k;
    }
    return true;
}

static bool write_body(int fd, uint64_t a, uint64_t n)
{
    char buf[64 * 1024];
    while (n > 0) {
        size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
        for (size_t i = 0; i < k; i++)
            buf[i] = obj_byte(a + i);
        if (!write_all(fd, buf, k))
            return false;
        a += k;
        n -= k;
    }
    return true;
}

/* Reads one request head into <buf>; false at EOF or error. */
static bool read_head(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t k = read(fd, buf + len, 1); /* byte by byte: no pipelining to keep apart */
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        len += (size_t)k;
        buf[len] = '\0';
        if (len >= 4 && memcmp(buf + len - 4, "\r\n\r\n", 4) == 0)
            return true;
    }
    return false;
}

static void parse_req(const char *head, struct req_rec *r)
{
    memset(r, 0, sizeof(*r));
    const char *sp = strchr(head, ' ');
    if (sp != NULL) {
        size_t n = strcspn(sp + 1, " ");
        if (n >= sizeof(r->path))
            n = sizeof(r->path) - 1;
        memcpy(r->path, sp + 1, n);
    }
    for (const char *l = strstr(head, "\r\n"); l != NULL; l = strstr(l + 2, "\r\n")) {
        unsigned long long a, b;
        if (strncasecmp(l + 2, "Range: bytes=", 13) == 0 &&
            sscanf(l + 15, "%llu-%llu", &a, &b) == 2) {
            r->a = a;
            r->b = b;
            r->has_range = true;
        }
        if (strncasecmp(l + 2, "X-Foo: ", 7) == 0)
            sscanf(l + 9, "%31[^\r]", r->xfoo);
        if (strncmp(l + 2, "Accept-Encoding: identity\r\n", 27) == 0)
            r->ae_identity = true;
        if (strncasecmp(l + 2, "Cookie:", 7) == 0)
            r->has_cookie = true;
    }
}

static bool answer(struct origin_srv *s, int fd, const struct req_rec *r)
{
    char head[512];
    pthread_mutex_lock(&s->mu);
    enum script sc = s->script;
    bool cut = sc == SCRIPT_CUT_ONCE && !s->cut_done;
    if (cut)
        s->cut_done = true;
    uint64_t most = s->cut;
    const char *etag = s->changed && s->n_answers > 0 ? "\"e2\"" : "\"e1\"";
    s->n_answers++;
    pthread_mutex_unlock(&s->mu);
    if (sc == SCRIPT_CLOSE)
        return false;
    if (sc == SCRIPT_STALL)
        return true; /* until the client hangs up */
    if (sc == SCRIPT_404) {
        const char *resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found";
        return write_all(fd, resp, strlen(resp));
    }
    if (sc == SCRIPT_REDIRECT && strcmp(r->path, "/r") == 0) {
        const char *resp = "HTTP/1.1 302 Found\r\nLocation: /obj\r\nContent-Length: 0\r\n\r\n";
        return write_all(fd, resp, strlen(resp));
    }
    if (sc == SCRIPT_CHUNKED) {
        const char *h = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"e1\"\r\n"
                        "Content-Type: application/octet-stream\r\n\r\n";
        if (!write_all(fd, h, strlen(h)))
            return false;
        for (uint64_t a = 0; a < s->total;) {
            uint64_t k = s->total - a < 40000 ? s->total - a : 40000;
            int n = snprintf(head, sizeof(head), "%llx\r\n", (unsigned long long)k);
            if (!write_all(fd, head, (size_t)n) || !write_body(fd, a, k) ||
                !write_all(fd, "\r\n", 2))
                return false;
            a += k;
        }
        return write_all(fd, "0\r\n\r\n", 5);
    }
    if (sc == SCRIPT_NORANGE || !r->has_range) {
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nETag: \"e1\"\r\n"
                         "Content-Type: application/octet-stream\r\n\r\n",
                         (unsigned long long)s->total);
        return write_all(fd, head, (size_t)n) && write_body(fd, 0, s->total);
    }
    if (r->a >= s->total) {
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%llu\r\n"
                         "Content-Length: 0\r\n\r\n",
                         (unsigned long long)s->total);
        return write_all(fd, head, (size_t)n);
    }
    uint64_t b = r->b < s->total - 1 ? r->b : s->total - 1;
    if (sc == SCRIPT_SHORT && b - r->a + 1 > most)
        b = r->a + most - 1;
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\n"
                     "Content-Range: bytes %llu-%llu/%llu\r\nETag: %s\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n",
                     (unsigned long long)(b - r->a + 1), (unsigned long long)r->a,
                     (unsigned long long)b, (unsigned long long)s->total, etag);
    if (!write_all(fd, head, (size_t)n))
        return false;
    if (cut) {
        (void)write_body(fd, r->a, s->cut);
        return false; /* closed there */
    }
    return write_body(fd, r->a, b - r->a + 1);
}

struct conn_arg {
    struct origin_srv *s;
    int fd;
};

static void *conn_thread(void *p)
{
    struct conn_arg *ca = p;
    struct origin_srv *s = ca->s;
    int fd = ca->fd;
    free(ca);
    char head[4096];
    while (read_head(fd, head, sizeof(head))) {
        struct req_rec r;
        parse_req(head, &r);
        pthread_mutex_lock(&s->mu);
        if (s->n_reqs < MAX_REQS)
            s->reqs[s->n_reqs++] = r;
        pthread_mutex_unlock(&s->mu);
        if (!answer(s, fd, &r))
            break;
    }
    close(fd);
    return NULL;
}

static void *accept_thread(void *p)
{
    struct origin_srv *s = p;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return NULL; /* shut down */
        }
        struct conn_arg *ca = xmalloc(sizeof(*ca));
        ca->s = s;
        ca->fd = fd;
        pthread_mutex_lock(&s->mu);
        assert_true(s->n_conns < MAX_CONNS);
        int rc = pthread_create(&s->conns[s->n_conns++], NULL, conn_thread, ca);
        pthread_mutex_unlock(&s->mu);
        assert_int_equal(rc, 0);
    }
}

static void srv_start(struct origin_srv *s)
{
    pthread_mutex_init(&s->mu, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->lfd >= 0);
    s->addr.sin_family = AF_INET;
    s->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&s->addr, sizeof(s->addr)), 0);
    socklen_t alen = sizeof(s->addr);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&s->addr, &alen), 0);
    assert_int_equal(listen(s->lfd, 64), 0);
    assert_int_equal(pthread_create(&s->acceptor, NULL, accept_thread, s), 0);
}

/* After the pool closed its sockets: every connection thread sees EOF and ends. */
static void srv_stop(struct origin_srv *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->acceptor, NULL);
    close(s->lfd);
    for (int i = 0; i < s->n_conns; i++)
        pthread_join(s->conns[i], NULL);
    pthread_mutex_destroy(&s->mu);
}

static void srv_script(struct origin_srv *s, enum script sc, uint64_t total)
{
    pthread_mutex_lock(&s->mu);
    s->script = sc;
    s->total = total;
    pthread_mutex_unlock(&s->mu);
}

static int srv_requests(struct origin_srv *s, struct req_rec *out)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_reqs;
    memcpy(out, s->reqs, (size_t)n * sizeof(*out));
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- fixture ---- */

struct fx {
    struct ev_loop *loop;
    ev_timer tick;
    char dir[64];
    struct config *cfg;
    struct cache *cache;
    struct upool *pool;
    struct resolver *resolver; /* routes through the override: never asked a name */
    struct fetch_ctx fctx;
    struct origin_srv srv;
};

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

static int fx_setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    char err[256], text[512];
    g_log_level = CFG_LOG_ERROR;
    memset(&g_stats, 0, sizeof(g_stats));
    f->loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(f->loop);
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_fetch.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(
        text, sizeof(text),
        "[server]\nlisten=127.0.0.1:1\n[cache]\ndir=%s\nchunk_size=256K\nmemory_size=16M\n"
        "min_free=0\n[upstream]\nreadahead=4\ndns=127.0.0.1:1\n[domains]\nallow_unlisted=yes\n",
        f->dir);
    if (config_load_string("t", text, &f->cfg, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    g_cfg = f->cfg;
    f->cache = cache_new(f->loop, f->cfg, err, sizeof(err));
    if (f->cache == NULL)
        fail_msg("cache_new: %s", err);
    f->pool = upool_new(f->loop);
    f->resolver = resolver_new(f->loop, f->cfg, err, sizeof(err));
    if (f->resolver == NULL)
        fail_msg("resolver_new: %s", err);
    srv_start(&f->srv);
    f->fctx.loop = f->loop;
    f->fctx.upool = f->pool;
    f->fctx.resolver = f->resolver;
    f->fctx.has_override = true; /* every origin is the scripted one */
    memcpy(&f->fctx.override_addr, &f->srv.addr, sizeof(f->srv.addr));
    f->fctx.cache = f->cache;
    fetch_module_init(&f->fctx);
    ev_timer_init(&f->tick, on_tick, 0.01, 0.01);
    ev_timer_start(f->loop, &f->tick);
    /* Once the disk index has scanned the (empty) dir, a chunk without a file is a MISS at
     * once rather than a disk lookup first. */
    for (int it = 0; it < 2000; it++) {
        struct cache_stats st;
        cache_get_stats(f->cache, &st);
        if (st.disk_scan_done)
            break;
        ev_run(f->loop, EVRUN_ONCE);
    }
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

#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        for (int it_ = 0; !(cond) && it_ < 2000; it_++)                                            \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        if (!(cond))                                                                               \
            fail_msg("loop never reached: %s", #cond);                                             \
    } while (0)

static struct cache_stats cstats(struct fx *f)
{
    struct cache_stats st;
    cache_get_stats(f->cache, &st);
    return st;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    RUN_UNTIL(f, fetch_live() == 0 && cstats(f).io_pending == 0);
    for (int i = 0; i < 2; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(upstream_live(), 0);
    cache_free(&f->cache);
    assert_int_equal(cache_live_chunks(), 0);
    upool_free(&f->pool);
    resolver_free(&f->resolver);
    srv_stop(&f->srv);
    ev_timer_stop(f->loop, &f->tick);
    ev_loop_destroy(f->loop);
    g_cfg = NULL;
    config_free(&f->cfg);
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

#define KEY "svc\n/obj"
#define KEY_LEN (sizeof(KEY) - 1)

static struct origin_req origin_for(const char *authority, const char *path)
{
    struct origin_req o;
    memset(&o, 0, sizeof(o));
    o.host = authority;
    o.port = 80;
    o.authority = authority;
    o.path = path;
    o.path_len = strlen(path);
    o.user_agent = "test";
    o.ua_len = 4;
    return o;
}

/* What a client does on a lookup: a ref on chunk <index>, its fill started on a MISS. */
static struct chunk *read_chunk(struct fx *f, uint64_t index, uint64_t off,
                                const struct origin_req *o, enum cache_lookup *out)
{
    struct chunk *ck = NULL;
    enum cache_lookup r = cache_chunk_get(f->cache, KEY, KEY_LEN, index, off, o, false, &ck);
    if (r == CACHE_MISS)
        fetch_start_at(ck, off, o);
    if (out != NULL)
        *out = r;
    return ck;
}

/* Whether <ck> is sealed with the object's bytes. */
static void assert_chunk_bytes(struct fx *f, const struct chunk *ck, uint64_t total)
{
    (void)f;
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_SEALED);
    uint64_t start = cache_chunk_index(ck) * CS;
    uint64_t cap = cache_chunk_cap(ck);
    assert_int_equal(cap, total - start < CS ? total - start : CS);
    assert_int_equal(cache_chunk_meta(ck)->total, total);
    assert_string_equal(cache_chunk_meta(ck)->etag, "\"e1\"");
    struct chunk_bytes b;
    cache_chunk_bytes(ck, 0, &b);
    assert_non_null(b.data);
    for (uint64_t i = 0; i < cap; i++)
        if (b.data[i] != obj_byte(start + i))
            fail_msg("chunk %llu byte %llu differs", (unsigned long long)cache_chunk_index(ck),
                     (unsigned long long)i);
}

/* Every chunk of the object is in memory (a HIT) with the object's bytes. */
static void assert_object_cached(struct fx *f, uint64_t total)
{
    uint64_t n = (total + CS - 1) / CS;
    for (uint64_t i = 0; i < n; i++) {
        struct chunk *ck = NULL;
        assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, i, 0, NULL, false, &ck),
                         CACHE_HIT);
        assert_chunk_bytes(f, ck, total);
        cache_chunk_unref(&ck);
    }
}

static int cmp_req(const void *a, const void *b)
{
    const struct req_rec *x = a, *y = b;
    return x->a < y->a ? -1 : x->a > y->a;
}

/* ---- tests ---- */

static void test_a_miss_fills_its_chunk_with_one_range_request(void **state)
{
    struct fx *f = *state;
    uint64_t total = 3 * CS - 1000;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    enum cache_lookup r;
    struct chunk *ck = read_chunk(f, 1, 0, &o, &r);
    assert_int_equal(r, CACHE_MISS);
    assert_int_equal(fetch_live(), 1);
    assert_int_not_equal(fetch_id_of(ck), 0);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
    assert_string_equal(reqs[0].path, "/obj");
    assert_true(reqs[0].has_range);
    assert_int_equal(reqs[0].a, CS);
    assert_int_equal(reqs[0].b, 2 * CS - 1);
    assert_int_equal(g_stats.fetches, 1);
}

static void test_a_reader_who_joins_shares_the_fill(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    enum cache_lookup r1, r2;
    struct chunk *a = read_chunk(f, 0, 0, &o, &r1), *b = read_chunk(f, 0, 100, &o, &r2);
    assert_int_equal(r1, CACHE_MISS);
    assert_int_equal(r2, CACHE_JOINED);
    assert_ptr_equal(a, b);
    RUN_UNTIL(f, cache_chunk_state(a) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, b, total);
    cache_chunk_unref(&a);
    cache_chunk_unref(&b);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
}

static void test_read_ahead_asks_the_rest_of_the_object_once_in_runs(void **state)
{
    struct fx *f = *state;
    uint64_t total = 10 * CS + 123;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    fetch_sequential(ck, total - 1, &o, false);
    assert_int_equal(fetch_live(), 1 + 4); /* [upstream] readahead = 4 runs after chunk 0 */
    RUN_UNTIL(f, fetch_live() == 0);
    cache_chunk_unref(&ck);
    assert_object_cached(f, total);
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    assert_int_equal(n, 5);
    qsort(reqs, (size_t)n, sizeof(reqs[0]), cmp_req);
    uint64_t next = 0;
    for (int i = 0; i < n; i++) { /* every byte asked once, in whole chunks */
        assert_int_equal(reqs[i].a, next);
        assert_int_equal(reqs[i].a % CS, 0);
        assert_int_equal((reqs[i].b + 1) % CS, 0);
        next = reqs[i].b + 1;
    }
    assert_true(next >= total);
    assert_int_equal(g_stats.cache_readahead, 10);
}

static void test_no_read_ahead_for_nocache_or_the_last_chunk(void **state)
{
    struct fx *f = *state;
    uint64_t total = 4 * CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    fetch_sequential(ck, total - 1, &o, true); /* ?nocache=1 */
    fetch_sequential(ck, CS - 1, &o, false);   /* the reader wants this chunk only */
    assert_int_equal(fetch_live(), 1);
    RUN_UNTIL(f, fetch_live() == 0);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
}

static void test_no_read_ahead_while_the_cap_of_fetches_runs(void **state)
{
    struct fx *f = *state;
    uint64_t total = 64 * CS;
    srv_script(&f->srv, SCRIPT_STALL, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *cks[FETCH_READAHEAD_MAX_FETCHES];
    for (unsigned i = 0; i < FETCH_READAHEAD_MAX_FETCHES; i++)
        cks[i] = read_chunk(f, 2 * i, 0, &o, NULL);
    assert_int_equal(fetch_live(), FETCH_READAHEAD_MAX_FETCHES);
    fetch_sequential(cks[0], total - 1, &o, false);
    assert_int_equal(fetch_live(), FETCH_READAHEAD_MAX_FETCHES); /* none ahead */
    assert_int_equal(g_stats.cache_readahead, 0);
    fetch_cancel_all();
    for (unsigned i = 0; i < FETCH_READAHEAD_MAX_FETCHES; i++) {
        assert_int_equal(cache_chunk_state(cks[i]), CHUNK_S_FAILED);
        cache_chunk_unref(&cks[i]);
    }
}

static void test_parts_ahead_fill_the_first_readahead_missing_chunks_once(void **state)
{
    struct fx *f = *state;
    uint64_t total = 12 * CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    /* The window is the first 4 ([upstream] readahead): 5, 2, 9 and 2 again (in flight). */
    const uint64_t next[] = {5, 2, 9, 2, 11, 7};
    fetch_ahead(f->cache, KEY, KEY_LEN, next, ARRAY_SIZE(next), &o, false);
    assert_int_equal(fetch_live(), 1 + 3);
    RUN_UNTIL(f, fetch_live() == 0);
    /* The reader moved on: the rest of the list; a chunk already stored is not asked again. */
    fetch_ahead(f->cache, KEY, KEY_LEN, next + 2, ARRAY_SIZE(next) - 2, &o, false);
    assert_int_equal(fetch_live(), 2); /* 11 and 7 */
    RUN_UNTIL(f, fetch_live() == 0);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    assert_int_equal(n, 6);
    qsort(reqs, (size_t)n, sizeof(reqs[0]), cmp_req);
    const uint64_t want[] = {0, 2, 5, 7, 9, 11};
    for (int i = 0; i < n; i++) { /* one request per chunk, the whole chunk */
        assert_int_equal(reqs[i].a, want[i] * CS);
        assert_int_equal(reqs[i].b, want[i] * CS + CS - 1);
    }
    const uint64_t idx[] = {0, 2, 5, 7, 9, 11};
    for (size_t i = 0; i < ARRAY_SIZE(idx); i++) {
        struct chunk *c = NULL;
        assert_int_equal(cache_chunk_get(f->cache, KEY, KEY_LEN, idx[i], 0, NULL, false, &c),
                         CACHE_HIT);
        assert_chunk_bytes(f, c, total);
        cache_chunk_unref(&c);
    }
}

static void test_no_parts_ahead_for_nocache_or_at_the_cap_of_fetches(void **state)
{
    struct fx *f = *state;
    uint64_t total = 80 * CS;
    srv_script(&f->srv, SCRIPT_STALL, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    const uint64_t next[] = {70, 71};
    struct chunk *cks[FETCH_READAHEAD_MAX_FETCHES];
    cks[0] = read_chunk(f, 0, 0, &o, NULL);
    fetch_ahead(f->cache, KEY, KEY_LEN, next, ARRAY_SIZE(next), &o, true); /* ?nocache=1 */
    assert_int_equal(fetch_live(), 1);
    for (unsigned i = 1; i < FETCH_READAHEAD_MAX_FETCHES; i++)
        cks[i] = read_chunk(f, 2 * i, 0, &o, NULL);
    assert_int_equal(fetch_live(), FETCH_READAHEAD_MAX_FETCHES);
    fetch_ahead(f->cache, KEY, KEY_LEN, next, ARRAY_SIZE(next), &o, false);
    assert_int_equal(fetch_live(), FETCH_READAHEAD_MAX_FETCHES); /* none ahead */
    fetch_cancel_all();
    for (unsigned i = 0; i < FETCH_READAHEAD_MAX_FETCHES; i++)
        cache_chunk_unref(&cks[i]);
}

/* A 12-chunk-and-a-byte object (<total>) scripted as <script>: chunk 0 read, its sequential
 * read-ahead started (runs 1-3, 4-6, 7-9, 10-12). Returns chunk 0 (the caller's ref). */
static struct chunk *read_in_runs(struct fx *f, enum script script, uint64_t *total,
                                  const struct origin_req *o)
{
    *total = 12 * CS + 1;
    srv_script(&f->srv, script, *total);
    struct chunk *ck0 = read_chunk(f, 0, 0, o, NULL);
    fetch_sequential(ck0, *total - 1, o, false);
    return ck0;
}

/* Whether the origin was asked for bytes [<a>, <b>] of the object. */
static bool asked_from(struct fx *f, uint64_t a, uint64_t b)
{
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    for (int i = 0; i < n; i++)
        if (reqs[i].a == a && reqs[i].b == b)
            return true;
    return false;
}

static void test_a_reader_far_behind_in_a_run_gets_the_run_split_for_it(void **state)
{
    struct fx *f = *state;
    uint64_t total;
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck0 = read_in_runs(f, SCRIPT_RANGES, &total, &o);
    assert_int_equal(fetch_live(), 5);
    enum cache_lookup r;
    struct chunk *ck3 = read_chunk(f, 3, 0, &o, &r);
    assert_int_equal(r, CACHE_JOINED);
    /* Nothing of the run flows yet: chunk 3 would wait for chunks 1 and 2 first. */
    assert_true(fetch_want(ck3, 0));
    assert_int_equal(g_stats.fetch_split, 1);
    assert_int_equal(fetch_live(), 6);
    RUN_UNTIL(f, fetch_live() == 0);
    cache_chunk_unref(&ck0);
    cache_chunk_unref(&ck3);
    assert_object_cached(f, total);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 6);
    assert_true(asked_from(f, 3 * CS, 4 * CS - 1)); /* (the run's own answer is cut before 3) */
}

/* The origin was asked exactly the ranges [<from>[i], <to>[i]], i < <n>, in ascending order. */
static void assert_asked_exactly(struct fx *f, const uint64_t *from, const uint64_t *to, int n)
{
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), n);
    qsort(reqs, (size_t)n, sizeof(reqs[0]), cmp_req);
    for (int i = 0; i < n; i++) {
        assert_int_equal(reqs[i].a, from[i]);
        assert_int_equal(reqs[i].b, to[i]);
    }
}

static void test_a_reader_deep_in_a_run_s_first_chunk_gets_its_own_request(void **state)
{
    struct fx *f = *state;
    uint64_t total;
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck0 = read_in_runs(f, SCRIPT_RANGES, &total, &o);
    assert_int_equal(fetch_live(), 5);
    enum cache_lookup r;
    uint64_t off = CS / 2;
    struct chunk *ck4 = read_chunk(f, 4, off, &o, &r);
    assert_int_equal(r, CACHE_JOINED);
    /* Chunk 4 is the first of run 4-6, not answered yet: the reader would wait for its first
     * byte and then for the CS / 2 bytes before its own. */
    assert_true(fetch_want(ck4, off));
    assert_int_equal(g_stats.fetch_split, 1);
    assert_true(cache_chunk_is_split(ck4));
    assert_int_equal(fetch_live(), 6);
    assert_false(fetch_want(ck4, off)); /* once */
    RUN_UNTIL(f, fetch_live() == 0);
    cache_chunk_unref(&ck0);
    cache_chunk_unref(&ck4);
    assert_object_cached(f, total);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 6);
    assert_true(asked_from(f, 4 * CS + off, 7 * CS - 1)); /* its own, to the run's end */
    /* The run was not routed yet: its request asks the head part alone. */
    assert_true(asked_from(f, 4 * CS, 4 * CS + off - 1));
}

static void on_wake_nothing(struct chunk_waiter *w)
{
    (void)w;
}

static void test_a_run_s_first_chunk_is_cut_while_its_request_waits_for_the_answer(void **state)
{
    struct fx *f = *state;
    uint64_t total = 12 * CS + 1;
    srv_script(&f->srv, SCRIPT_STALL, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck0 = read_chunk(f, 0, 0, &o, NULL);
    fetch_sequential(ck0, total - 1, &o, false);
    struct req_rec reqs[MAX_REQS];
    RUN_UNTIL(f, srv_requests(&f->srv, reqs) == 5); /* asked, never answered */
    struct chunk *ck4 = read_chunk(f, 4, CS - 1, &o, NULL);
    /* Not deep enough to be worth a request of its own: it waits for the run. */
    assert_false(fetch_want(ck4, FETCH_TWO_PART_MIN - 1));
    /* Another reader waits for byte 100: the run's request, out already, is its. Asking it
     * again for less would make that reader wait one more round trip: no cut. */
    struct chunk_waiter w = {0};
    cache_chunk_wait(ck4, &w, on_wake_nothing, 100);
    assert_false(fetch_want(ck4, CS - 1));
    cache_chunk_unwait(&w);
    assert_int_equal(fetch_live(), 5);
    assert_true(fetch_want(ck4, CS - 1));
    assert_int_equal(fetch_live(), 6);
    /* The new part's request, and the run's again for the bytes it keeps: every byte asked once
     * (the first request of the run is closed unanswered). */
    RUN_UNTIL(f, srv_requests(&f->srv, reqs) == 7);
    assert_true(asked_from(f, 5 * CS - 1, 7 * CS - 1));
    assert_true(asked_from(f, 4 * CS, 5 * CS - 2));
    fetch_cancel_all();
    assert_int_equal(cache_chunk_state(ck4), CHUNK_S_FAILED);
    cache_chunk_unref(&ck0);
    cache_chunk_unref(&ck4);
}

static void test_the_head_part_is_still_asked_after_its_holder_was_cut(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_RANGES, CS);
    struct origin_req o = origin_for("origin.test", "/obj");
    const uint64_t q = CS / 4;
    struct chunk *ck = read_chunk(f, 0, q, &o, NULL); /* [q, CS); the head part [0, q) held */
    assert_true(fetch_want(ck, q + 100 * 1024));      /* not routed yet: cut */
    assert_int_equal(fetch_live(), 2);
    /* The fetch cut still holds the head part: a reader before q has it asked at once. */
    assert_true(fetch_want(ck, 10));
    assert_int_equal(fetch_live(), 3);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, CS);
    cache_chunk_unref(&ck);
    RUN_UNTIL(f, fetch_live() == 0);
    const uint64_t from[] = {0, q, q + 100 * 1024}, to[] = {q - 1, q + 100 * 1024 - 1, CS - 1};
    assert_asked_exactly(f, from, to, 3); /* every byte asked once */
}

static struct chunk *wake_ck;
static int wake_cuts, wake_order, deep_woken_at, near_woken_at;

/* Readers as conn_cache.c's wait_chunk: ask (fetch_want), then wait again. */
static void on_wake_deep(struct chunk_waiter *w)
{
    deep_woken_at = ++wake_order;
    if (fetch_want(wake_ck, CS - 1))
        wake_cuts++;
    cache_chunk_wait(wake_ck, w, on_wake_deep, CS - 1);
}

static void on_wake_near(struct chunk_waiter *w)
{
    near_woken_at = ++wake_order;
    fetch_want(wake_ck, 100);
    cache_chunk_wait(wake_ck, w, on_wake_near, 100);
}

static void test_a_reader_being_woken_still_counts_as_waiting(void **state)
{
    struct fx *f = *state;
    uint64_t total = 12 * CS + 1;
    srv_script(&f->srv, SCRIPT_STALL, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck0 = read_chunk(f, 0, 0, &o, NULL);
    fetch_sequential(ck0, total - 1, &o, false);
    struct req_rec reqs[MAX_REQS];
    RUN_UNTIL(f, srv_requests(&f->srv, reqs) == 5);
    struct chunk *ck4 = read_chunk(f, 4, 100, &o, NULL);
    wake_ck = ck4;
    wake_cuts = wake_order = deep_woken_at = near_woken_at = 0;
    struct chunk_waiter a = {0}, b = {0};
    cache_chunk_wait(ck4, &a, on_wake_near, 100); /* waits inside the run's request */
    assert_false(fetch_want(ck4, CS - 1));
    cache_chunk_wait(ck4, &b, on_wake_deep, CS - 1);
    /* Both are woken (any change of the chunk); the deep one is called back first, while the
     * other one, not called back yet, still waits for the run's request: no cut. */
    cache_chunk_poke(ck4);
    RUN_UNTIL(f, deep_woken_at > 0 && near_woken_at > 0);
    assert_true(deep_woken_at < near_woken_at);
    assert_int_equal(wake_cuts, 0);
    assert_int_equal(fetch_live(), 5);
    /* Once the other reader is gone, the same wake cuts (the check is not vacuous). */
    cache_chunk_unwait(&a);
    cache_chunk_poke(ck4);
    RUN_UNTIL(f, wake_cuts > 0);
    assert_int_equal(fetch_live(), 6);
    cache_chunk_unwait(&b);
    fetch_cancel_all();
    cache_chunk_unref(&ck0);
    cache_chunk_unref(&ck4);
}

static void test_no_cut_when_the_origin_has_no_connection_slot_to_spare(void **state)
{
    struct fx *f = *state;
    f->cfg->max_per_origin = 2;
    uint64_t total;
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck0 = read_in_runs(f, SCRIPT_STALL, &total, &o);
    struct req_rec reqs[MAX_REQS];
    RUN_UNTIL(f, srv_requests(&f->srv, reqs) == 2); /* chunk 0 and run 1-3 hold the slots */
    /* Run 1-3's request is out and holds a slot, but the others queue for one: asked again, it
     * and the new request would both wait behind them. */
    struct chunk *ck1 = read_chunk(f, 1, CS - 1, &o, NULL);
    assert_false(fetch_want(ck1, CS - 1));
    /* Run 4-6's request waits for a slot: cancelled, it would go to the back of the queue. */
    struct chunk *ck4 = read_chunk(f, 4, CS - 1, &o, NULL);
    assert_false(fetch_want(ck4, CS - 1));
    assert_int_equal(fetch_live(), 5);
    assert_int_equal(g_stats.fetch_split, 0);
    fetch_cancel_all();
    cache_chunk_unref(&ck0);
    cache_chunk_unref(&ck1);
    cache_chunk_unref(&ck4);
}

static void test_a_reader_deep_in_a_chunk_gets_a_two_part_fill(void **state)
{
    struct fx *f = *state;
    uint64_t total = 2 * CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    uint64_t off = CS / 2;
    struct chunk *ck = read_chunk(f, 1, off, &o, NULL);
    assert_int_equal(g_stats.fetch_two_part, 1);
    assert_true(cache_chunk_is_split(ck));
    /* Its own part comes first, alone; the head part once that is answered. */
    RUN_UNTIL(f, cache_chunk_avail(ck, off) > 0);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
    assert_int_equal(reqs[0].a, CS + off);
    assert_int_equal(reqs[0].b, 2 * CS - 1);
    assert_int_equal(reqs[1].a, CS);
    assert_int_equal(reqs[1].b, CS + off - 1);
}

static void test_a_reader_waiting_before_the_tail_asks_the_head_part_at_once(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, CS / 2, &o, NULL);
    assert_int_equal(fetch_live(), 1); /* the head part is held back */
    assert_true(fetch_want(ck, 10));   /* a reader waits for byte 10 */
    assert_int_equal(fetch_live(), 2);
    assert_false(fetch_want(ck, 10)); /* asked already */
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
}

static void test_a_reader_deep_in_a_held_head_part_gets_a_part_of_its_own(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    const uint64_t q = CS / 4;
    struct chunk *ck = read_chunk(f, 0, 3 * q, &o, NULL);
    assert_int_equal(fetch_live(), 1); /* [3q, CS); the head part [0, 3q) is held back */
    /* A reader at q would wait for [0, q) to stream by: [q, 3q) is asked for it now, [0, q)
     * still held back. */
    assert_true(fetch_want(ck, q));
    assert_int_equal(fetch_live(), 2);
    assert_int_equal(g_stats.fetch_two_part, 2);
    assert_false(fetch_want(ck, q + q / 2)); /* near the start of a part asked: it waits */
    assert_int_equal(fetch_live(), 2);
    assert_true(fetch_want(ck, 10)); /* not deep: the rest of the head part, [0, q) */
    assert_int_equal(fetch_live(), 3);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    RUN_UNTIL(f, fetch_live() == 0);
    const uint64_t from[] = {0, q, 3 * q}, to[] = {q - 1, 3 * q - 1, CS - 1};
    assert_asked_exactly(f, from, to, 3); /* every byte asked once */
}

static void test_a_reader_deep_in_a_head_part_asked_but_not_answered_gets_its_own_part(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    const uint64_t q = CS / 4;
    struct chunk *ck = read_chunk(f, 0, 3 * q, &o, NULL);
    assert_true(fetch_want(ck, 10)); /* the head part [0, 3q) is asked */
    assert_int_equal(fetch_live(), 2);
    /* Not answered yet: a reader at 2q would wait for it, then for [0, 2q) to stream by. */
    assert_true(fetch_want(ck, 2 * q));
    assert_int_equal(fetch_live(), 3);
    assert_int_equal(g_stats.fetch_split, 1);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    RUN_UNTIL(f, fetch_live() == 0);
    const uint64_t from[] = {0, 2 * q, 3 * q}, to[] = {2 * q - 1, 3 * q - 1, CS - 1};
    assert_asked_exactly(f, from, to, 3); /* every byte asked once */
}

static void test_head_part_pieces_stop_at_the_chunk_s_last_split(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    const uint64_t step = 50 * 1024, first = CS - 6 * 1024;
    struct chunk *ck = read_chunk(f, 0, first, &o, NULL);
    /* Readers ever further back, each deep enough for a part of its own: each gets a piece of
     * the held head part while the chunk has parts left... */
    for (unsigned i = 1; i < CACHE_SPLITS_MAX; i++) {
        assert_true(fetch_want(ck, first - i * step));
        assert_int_equal(fetch_live(), 1 + i);
    }
    assert_int_equal(g_stats.fetch_two_part, CACHE_SPLITS_MAX);
    /* ...then the rest of the head part is asked as one. */
    uint64_t last_split = first - (CACHE_SPLITS_MAX - 1) * step;
    assert_true(last_split - step >= FETCH_TWO_PART_MIN);
    assert_true(fetch_want(ck, last_split - step));
    assert_int_equal(fetch_live(), CACHE_SPLITS_MAX + 1);
    assert_int_equal(g_stats.fetch_two_part, CACHE_SPLITS_MAX);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    RUN_UNTIL(f, fetch_live() == 0);
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    assert_int_equal(n, CACHE_SPLITS_MAX + 1);
    qsort(reqs, (size_t)n, sizeof(reqs[0]), cmp_req);
    assert_int_equal(reqs[0].a, 0);
    assert_int_equal(reqs[0].b, last_split - 1);
    uint64_t next = 0;
    for (int i = 0; i < n; i++) { /* every byte asked once */
        assert_int_equal(reqs[i].a, next);
        next = reqs[i].b + 1;
    }
    assert_int_equal(next, CS);
}

static void test_a_cut_answer_is_resumed_from_the_byte_reached(void **state)
{
    struct fx *f = *state;
    uint64_t total = 2 * CS;
    srv_script(&f->srv, SCRIPT_CUT_ONCE, total);
    f->srv.cut = 100000;
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    assert_int_equal(g_stats.fetch_resumed, 1);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
    assert_int_equal(reqs[0].a, 0);
    assert_int_equal(reqs[1].a, 100000);
    assert_int_equal(reqs[1].b, CS - 1);
}

static void test_a_short_206_is_completed_by_asking_for_the_rest(void **state)
{
    struct fx *f = *state;
    uint64_t total = 2 * CS + 5;
    srv_script(&f->srv, SCRIPT_SHORT, total);
    f->srv.cut = 100000; /* CS is 262144: three answers for chunk 0, the last ending with it */
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 3);
    for (int i = 0; i < 3; i++) { /* each asks the rest of the chunk from where the last ended */
        assert_int_equal(reqs[i].a, (uint64_t)i * 100000);
        assert_int_equal(reqs[i].b, CS - 1);
    }
    assert_int_equal(g_stats.fetch_short, 2);
    assert_int_equal(g_stats.fetch_resumed, 0); /* not a fault */
    assert_int_equal(g_stats.fetch_failed, 0);
    assert_int_equal(g_stats.fetches, 1);
}

static void test_a_short_206_of_another_version_next_fails_the_chunk(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_SHORT, total);
    f->srv.cut = 100000;
    f->srv.changed = true; /* the rest comes with another ETag */
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck), CHUNK_FAIL_ORIGIN);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
    assert_int_equal(g_stats.fetch_short, 1);
}

static void test_every_request_of_a_fill_carries_the_readers_fields(void **state)
{
    struct fx *f = *state;
    uint64_t total = 2 * CS;
    srv_script(&f->srv, SCRIPT_CUT_ONCE, total);
    f->srv.cut = 1000;
    struct origin_req o = origin_for("origin.test", "/obj");
    o.fields = "X-Foo: bar\r\nAccept-Language: de\r\n";
    o.fields_len = strlen(o.fields);
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    fetch_sequential(ck, total - 1, &o, false); /* read-ahead: chunk 1 */
    RUN_UNTIL(f, fetch_live() == 0);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    assert_int_equal(n, 3); /* chunk 0, its resumption, chunk 1 */
    for (int i = 0; i < n; i++) {
        assert_string_equal(reqs[i].xfoo, "bar");
        assert_true(reqs[i].ae_identity);
        assert_false(reqs[i].has_cookie);
    }
    assert_int_equal(g_stats.fetch_resumed, 1);
}

static void test_a_redirect_is_followed_and_stored_under_the_first_key(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS + 10;
    srv_script(&f->srv, SCRIPT_REDIRECT, total);
    struct origin_req o = origin_for("origin.test", "/r");
    o.fields = "X-Foo: hop\r\n";
    o.fields_len = strlen(o.fields);
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(ck) != CHUNK_S_FILLING);
    assert_chunk_bytes(f, ck, total); /* under KEY, though its bytes came from /obj */
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
    assert_string_equal(reqs[0].path, "/r");
    assert_string_equal(reqs[1].path, "/obj");
    assert_string_equal(reqs[0].xfoo, "hop"); /* the redirect's target is asked with them too */
    assert_string_equal(reqs[1].xfoo, "hop");
    assert_int_equal(reqs[1].a, 0);
    assert_int_equal(reqs[1].b, CS - 1);
}

static void test_an_origin_without_ranges_fills_every_chunk_from_one_answer(void **state)
{
    struct fx *f = *state;
    uint64_t total = 5 * CS + 7;
    srv_script(&f->srv, SCRIPT_NORANGE, total);
    /* (its own authority: the module remembers origins without ranges for an hour) */
    struct origin_req o = origin_for("norange.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, fetch_live() == 0);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    assert_object_cached(f, total);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
    assert_int_equal(reqs[0].a, 0);
}

struct waiter {
    struct chunk_waiter w;
    int woken;
};

static void on_wake(struct chunk_waiter *w)
{
    container_of(w, struct waiter, w)->woken++;
}

static void test_a_failure_reaches_every_waiter(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_CLOSE, CS);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *a = read_chunk(f, 0, 0, &o, NULL), *b = read_chunk(f, 0, 0, &o, NULL);
    struct waiter wa = {0}, wb = {0};
    cache_chunk_wait(a, &wa.w, on_wake, 0);
    cache_chunk_wait(b, &wb.w, on_wake, 0);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_FAILED && wa.woken > 0 && wb.woken > 0);
    assert_int_equal(cache_chunk_fail_cause(b), CHUNK_FAIL_ORIGIN);
    assert_int_equal(g_stats.fetch_failed, 1);
    cache_chunk_unref(&a);
    cache_chunk_unref(&b);
}

static void test_an_error_page_fails_the_chunk_to_be_forwarded(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_404, CS);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(ck) == CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck), CHUNK_FAIL_PASS);
    cache_chunk_unref(&ck);
}

static void test_an_error_page_is_the_answer_of_every_waiter(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_404, CS);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *a = read_chunk(f, 0, 0, &o, NULL), *b = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, cache_chunk_state(a) == CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(b), CHUNK_FAIL_PASS);
    struct answer *ans = cache_chunk_answer(b);
    assert_non_null(ans);
    assert_ptr_equal(ans, cache_chunk_answer(a));
    const char *hb;
    const struct h1_resp *r = answer_head(ans, &hb);
    assert_int_equal(r->status, 404);
    assert_int_equal(r->framing, H1_BODY_LENGTH);
    assert_int_equal(r->content_length, 9);
    size_t len;
    const char *body = answer_body(ans, &len);
    assert_int_equal(len, 9);
    assert_memory_equal(body, "not found", 9);
    cache_chunk_unref(&a);
    cache_chunk_unref(&b);
    assert_int_equal(answer_live(), 0);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
}

static void test_a_chunked_whole_answer_is_stored_once_complete(void **state)
{
    struct fx *f = *state;
    uint64_t total = 3 * CS + 7;
    srv_script(&f->srv, SCRIPT_CHUNKED, total);
    struct origin_req o = origin_for("chunked.test", "/obj");
    /* deep in chunk 1: a two-part fill, whose head part this one answer brings too */
    struct chunk *ck = read_chunk(f, 1, CS / 2, &o, NULL);
    assert_true(cache_chunk_is_split(ck));
    RUN_UNTIL(f, fetch_live() == 0);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    assert_object_cached(f, total); /* the chunks before and after the reader's too */
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 1);
    assert_int_equal(g_stats.fetch_chunked_stored, 1);
    assert_int_equal(g_stats.answer_bytes, 0);
}

static void test_a_chunked_answer_past_the_bound_is_forwarded_by_each_reader(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_CHUNKED, 5 * CS); /* 1.25 MiB: more than the 1 MiB bound */
    struct origin_req o = origin_for("chunked2.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, 0, &o, NULL);
    RUN_UNTIL(f, fetch_live() == 0);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck), CHUNK_FAIL_PASS);
    assert_null(cache_chunk_answer(ck)); /* no answer cut at the bound */
    cache_chunk_unref(&ck);
    assert_int_equal(g_stats.answer_fallbacks, 1);
    assert_int_equal(g_stats.answer_bytes, 0);
}

/* Review coverage (issue 15): paths of the fetch state machine that peers drive (a 416 for a
 * tail part, a redirect or an error page answering a two-part fill, a cut tail part), each with a
 * reader asking for the bytes before its offset while it runs. They pass on d9352ee: they pin
 * that no transition there is refused (an assert) and that the chunk ends as before. */

/* Runs the loop until no fetch is left, saying at every turn that a reader waits for byte <want>
 * of <ck> (as a client's wait_chunk does each time it is woken). */
static void run_wanting(struct fx *f, struct chunk *ck, uint64_t want)
{
    for (int it = 0; it < 2000 && fetch_live() > 0; it++) {
        if (cache_chunk_state(ck) == CHUNK_S_FILLING)
            fetch_want(ck, want);
        ev_run(f->loop, EVRUN_ONCE);
    }
    assert_int_equal(fetch_live(), 0);
}

static void test_a_tail_part_past_the_objects_end_leaves_the_chunk_to_its_head_part(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS + 100; /* chunk 1 holds 100 bytes: a reader at CS/2 is past the end */
    srv_script(&f->srv, SCRIPT_RANGES, total);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 1, CS / 2, &o, NULL);
    assert_true(cache_chunk_is_split(ck));
    RUN_UNTIL(f, fetch_live() == 0);
    assert_chunk_bytes(f, ck, total); /* the 416 did not fail it: the head part filled it */
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    assert_int_equal(srv_requests(&f->srv, reqs), 2);
    assert_int_equal(reqs[0].a, CS + CS / 2);
    assert_int_equal(reqs[1].a, CS);
}

static void test_a_redirected_two_part_fill_serves_a_reader_before_its_offset(void **state)
{
    struct fx *f = *state;
    uint64_t total = CS;
    srv_script(&f->srv, SCRIPT_REDIRECT, total);
    struct origin_req o = origin_for("origin.test", "/r");
    struct chunk *ck = read_chunk(f, 0, CS / 2, &o, NULL);
    run_wanting(f, ck, 10);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    struct req_rec reqs[MAX_REQS];
    int n = srv_requests(&f->srv, reqs);
    for (int i = 0; i < n; i++) /* every range asked lies inside the chunk */
        assert_true(reqs[i].has_range && reqs[i].b < CS);
}

static void test_an_error_page_for_a_two_part_fill_fails_the_chunk_to_be_forwarded(void **state)
{
    struct fx *f = *state;
    srv_script(&f->srv, SCRIPT_404, CS);
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 0, CS / 2, &o, NULL);
    run_wanting(f, ck, 10);
    assert_int_equal(cache_chunk_state(ck), CHUNK_S_FAILED);
    assert_int_equal(cache_chunk_fail_cause(ck), CHUNK_FAIL_PASS);
    cache_chunk_unref(&ck);
}

static void test_a_cut_tail_part_is_resumed_and_the_chunk_completes(void **state)
{
    struct fx *f = *state;
    uint64_t total = 2 * CS;
    srv_script(&f->srv, SCRIPT_CUT_ONCE, total);
    f->srv.cut = 1000;
    struct origin_req o = origin_for("origin.test", "/obj");
    struct chunk *ck = read_chunk(f, 1, CS / 2, &o, NULL);
    run_wanting(f, ck, CS / 2);
    assert_chunk_bytes(f, ck, total);
    cache_chunk_unref(&ck);
    assert_int_equal(g_stats.fetch_resumed, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
        T(test_a_miss_fills_its_chunk_with_one_range_request),
        T(test_a_reader_who_joins_shares_the_fill),
        T(test_read_ahead_asks_the_rest_of_the_object_once_in_runs),
        T(test_no_read_ahead_for_nocache_or_the_last_chunk),
        T(test_no_read_ahead_while_the_cap_of_fetches_runs),
        T(test_parts_ahead_fill_the_first_readahead_missing_chunks_once),
        T(test_no_parts_ahead_for_nocache_or_at_the_cap_of_fetches),
        T(test_a_reader_far_behind_in_a_run_gets_the_run_split_for_it),
        T(test_a_reader_deep_in_a_run_s_first_chunk_gets_its_own_request),
        T(test_a_run_s_first_chunk_is_cut_while_its_request_waits_for_the_answer),
        T(test_the_head_part_is_still_asked_after_its_holder_was_cut),
        T(test_a_reader_being_woken_still_counts_as_waiting),
        T(test_no_cut_when_the_origin_has_no_connection_slot_to_spare),
        T(test_a_reader_deep_in_a_chunk_gets_a_two_part_fill),
        T(test_a_reader_waiting_before_the_tail_asks_the_head_part_at_once),
        T(test_a_reader_deep_in_a_held_head_part_gets_a_part_of_its_own),
        T(test_a_reader_deep_in_a_head_part_asked_but_not_answered_gets_its_own_part),
        T(test_head_part_pieces_stop_at_the_chunk_s_last_split),
        T(test_a_cut_answer_is_resumed_from_the_byte_reached),
        T(test_a_short_206_is_completed_by_asking_for_the_rest),
        T(test_a_short_206_of_another_version_next_fails_the_chunk),
        T(test_every_request_of_a_fill_carries_the_readers_fields),
        T(test_a_redirect_is_followed_and_stored_under_the_first_key),
        T(test_an_origin_without_ranges_fills_every_chunk_from_one_answer),
        T(test_a_failure_reaches_every_waiter),
        T(test_an_error_page_fails_the_chunk_to_be_forwarded),
        T(test_an_error_page_is_the_answer_of_every_waiter),
        T(test_a_chunked_whole_answer_is_stored_once_complete),
        T(test_a_chunked_answer_past_the_bound_is_forwarded_by_each_reader),
        T(test_a_tail_part_past_the_objects_end_leaves_the_chunk_to_its_head_part),
        T(test_a_redirected_two_part_fill_serves_a_reader_before_its_offset),
        T(test_an_error_page_for_a_two_part_fill_fails_the_chunk_to_be_forwarded),
        T(test_a_cut_tail_part_is_resumed_and_the_chunk_completes),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
