/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_upstream: the origin client FSM on a real libev loop against a scripted origin written
 * here: a loopback listening socket served by ev watchers on the same loop, which accepts,
 * reads request heads and answers each with the next scripted action (respond, respond and
 * close, close without answering, stall, or hold until the test releases it). A recording sink
 * checks the callback contract: on_head before on_body, on_done exactly once and last, and no
 * callback inside upstream_start(), upstream_resume() or upstream_cancel(). Every test ends with
 * upstream_live() == 0 and an empty pool.
 */
#include "upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "config.h"
#include "log.h"
#include "resolver.h"
#include "stats.h"
#include "upool.h"
#include "util.h"

/* ---- the scripted origin ---- */

enum act_kind {
    ACT_RESPOND,       /* write <data> and keep the connection */
    ACT_RESPOND_CLOSE, /* write <data>, then close */
    ACT_CLOSE,         /* close without answering */
    ACT_STALL,         /* read the request and never answer */
};

struct action {
    enum act_kind kind;
    const char *data; /* borrowed; NULL = none */
    size_t len;       /* 0 = strlen(data) */
    bool hold;        /* wait for srv_release() before acting */
};

#define SRV_MAX_CONNS 8
#define SRV_MAX_ACTIONS 16

struct srv;

struct sconn {
    struct srv *s;
    int fd;
    ev_io rio;
    ev_io wio;
    char in[8192];
    size_t in_len;
    const char *out; /* borrowed from the action */
    size_t out_len;
    size_t out_off;
    bool close_after;
    bool closed;
    bool peer_closed; /* the client closed its end */
    const struct action *held;
};

struct srv {
    struct ev_loop *loop;
    int lfd;
    uint16_t port;
    ev_io lio;
    unsigned accepts;
    unsigned requests;
    char reqs[SRV_MAX_ACTIONS][512]; /* request heads as received */
    struct sconn conns[SRV_MAX_CONNS];
    struct action script[SRV_MAX_ACTIONS];
    unsigned n_script;
    unsigned next; /* next action */
};

static void sconn_close(struct sconn *c)
{
    if (c->closed)
        return;
    ev_io_stop(c->s->loop, &c->rio);
    ev_io_stop(c->s->loop, &c->wio);
    close(c->fd);
    c->closed = true;
}

static void sconn_flush(struct sconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            ev_io_start(c->s->loop, &c->wio);
            return;
        }
        if (n < 0) {
            sconn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    ev_io_stop(c->s->loop, &c->wio);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    if (c->close_after)
        sconn_close(c);
}

static void sconn_act(struct sconn *c, const struct action *a)
{
    switch (a->kind) {
    case ACT_CLOSE:
        sconn_close(c);
        return;
    case ACT_STALL:
        return;
    case ACT_RESPOND:
    case ACT_RESPOND_CLOSE:
        c->out = a->data;
        c->out_len = a->len ? a->len : strlen(a->data);
        c->out_off = 0;
        c->close_after = a->kind == ACT_RESPOND_CLOSE;
        sconn_flush(c);
        return;
    }
}

static void on_sconn_writable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    sconn_flush(container_of(w, struct sconn, wio));
}

/* Takes complete request heads out of c->in, one action each. */
static void sconn_requests(struct sconn *c)
{
    struct srv *s = c->s;
    char *end;
    while (!c->closed && c->held == NULL && c->out == NULL &&
           (end = memmem(c->in, c->in_len, "\r\n\r\n", 4)) != NULL) {
        size_t hl = (size_t)(end + 4 - c->in);
        if (s->requests < SRV_MAX_ACTIONS)
            snprintf(s->reqs[s->requests], sizeof(s->reqs[0]), "%.*s", (int)hl, c->in);
        s->requests++;
        memmove(c->in, c->in + hl, c->in_len - hl);
        c->in_len -= hl;
        if (s->next >= s->n_script)
            fail_msg("origin: request %u has no scripted action", s->requests);
        const struct action *a = &s->script[s->next++];
        if (a->hold)
            c->held = a;
        else
            sconn_act(c, a);
    }
}

static void on_sconn_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct sconn *c = container_of(w, struct sconn, rio);
    (void)loop;
    (void)revents;
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        c->peer_closed = true;
        sconn_close(c);
        return;
    }
    if (n > 0) {
        c->in_len += (size_t)n;
        sconn_requests(c);
    }
}

static void on_srv_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    struct srv *s = container_of(w, struct srv, lio);
    (void)revents;
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (s->accepts >= SRV_MAX_CONNS)
            fail_msg("origin: too many connections");
        struct sconn *c = &s->conns[s->accepts++];
        memset(c, 0, sizeof(*c));
        c->s = s;
        c->fd = fd;
        ev_io_init(&c->rio, on_sconn_readable, fd, EV_READ);
        ev_io_init(&c->wio, on_sconn_writable, fd, EV_WRITE);
        ev_io_start(loop, &c->rio);
    }
}

static void srv_start(struct srv *s, struct ev_loop *loop)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    int one = 1;
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(s->lfd >= 0);
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(s->lfd, 16), 0);
    assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&sin, &sl), 0);
    s->port = ntohs(sin.sin_port);
    ev_io_init(&s->lio, on_srv_accept, s->lfd, EV_READ);
    ev_io_start(loop, &s->lio);
}

static void srv_stop(struct srv *s)
{
    for (unsigned i = 0; i < s->accepts && i < SRV_MAX_CONNS; i++)
        sconn_close(&s->conns[i]);
    ev_io_stop(s->loop, &s->lio);
    close(s->lfd);
}

/* Appends an action to the script. */
static void srv_add(struct srv *s, enum act_kind kind, const char *data, size_t len, bool hold)
{
    assert_true(s->n_script < SRV_MAX_ACTIONS);
    s->script[s->n_script++] = (struct action){kind, data, len, hold};
}

/* Performs the held actions. */
static void srv_release(struct srv *s)
{
    for (unsigned i = 0; i < s->accepts && i < SRV_MAX_CONNS; i++) {
        struct sconn *c = &s->conns[i];
        const struct action *a = c->held;
        if (a == NULL || c->closed)
            continue;
        c->held = NULL;
        sconn_act(c, a);
        sconn_requests(c);
    }
}

/* ---- fixture ---- */

struct fx {
    struct ev_loop *loop;
    struct config *cfg;
    struct upool *pool;
    struct srv srv;
    ev_timer tick; /* bounds each ev_run(EVRUN_ONCE) */
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
    char err[256];
    g_log_level = CFG_LOG_ERROR;
    memset(&g_stats, 0, sizeof(g_stats));
    f->loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(f->loop);
    if (config_load_string("t", "[server]\nlisten=127.0.0.1:1\n", &f->cfg, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    g_cfg = f->cfg;
    f->pool = upool_new(f->loop);
    srv_start(&f->srv, f->loop);
    ev_timer_init(&f->tick, on_tick, 0.02, 0.02);
    ev_timer_start(f->loop, &f->tick);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    /* A few more iterations: nothing may still be pending. */
    for (int i = 0; i < 2; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(upstream_live(), 0);
    upool_free(&f->pool);
    srv_stop(&f->srv);
    ev_timer_stop(f->loop, &f->tick);
    ev_loop_destroy(f->loop);
    g_cfg = NULL;
    config_free(&f->cfg);
    free(f);
    return 0;
}

#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        for (int it_ = 0; !(cond) && it_ < 500; it_++)                                             \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        if (!(cond))                                                                               \
            fail_msg("loop never reached: %s", #cond);                                             \
    } while (0)

static void run_iterations(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        ev_run(f->loop, EVRUN_ONCE);
}

/* ---- the recording sink ---- */

static bool g_in_call; /* inside upstream_start/resume/cancel */

struct rec {
    struct upstream *up;
    int heads;
    int status;
    enum h1_framing framing;
    char *body; /* owns */
    size_t body_len;
    size_t body_cap;
    int done;
    enum up_err err;
    bool sync;     /* a callback fired inside upstream_start/resume/cancel */
    bool misorder; /* on_body before on_head, or anything after on_done */
    bool limited;  /* take at most <budget> bytes */
    size_t budget;
    bool starved;  /* the last on_body took less than offered */
    size_t offers; /* on_body calls */
    bool cancel_in_head;
    bool cancel_in_body;
    bool cancel_in_done;
};

static void rec_free(struct rec *r)
{
    free(r->body);
    r->body = NULL;
}

static void on_rec_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    struct rec *r = arg;
    r->sync |= g_in_call;
    r->misorder |= r->done > 0 || r->heads > 0;
    r->heads++;
    r->status = resp->status;
    r->framing = resp->framing;
    assert_non_null(buf);
    if (r->cancel_in_head)
        upstream_cancel(&r->up);
}

static size_t on_rec_body(void *arg, const char *data, size_t len)
{
    struct rec *r = arg;
    r->sync |= g_in_call;
    r->misorder |= r->done > 0 || r->heads == 0;
    r->offers++;
    assert_true(len > 0);
    size_t n = len;
    if (r->limited && n > r->budget)
        n = r->budget;
    if (r->limited)
        r->budget -= n;
    r->starved = n < len;
    if (r->body_len + n > r->body_cap) {
        r->body_cap = (r->body_len + n) * 2;
        r->body = xrealloc(r->body, r->body_cap);
    }
    if (n > 0)
        memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    if (r->cancel_in_body)
        upstream_cancel(&r->up);
    return n;
}

static void on_rec_done(void *arg, enum up_err err)
{
    struct rec *r = arg;
    r->sync |= g_in_call;
    r->misorder |= r->done > 0;
    r->done++;
    r->err = err;
    if (r->cancel_in_done)
        upstream_cancel(&r->up);
    r->up = NULL; /* freed by the module after on_done */
}

static const struct upstream_sink rec_sink = {on_rec_head, on_rec_body, on_rec_done};

static const char GET_HEAD[] = "GET /obj HTTP/1.1\r\nHost: origin.test\r\n\r\n";

static struct resolver *g_health; /* the next requests' req.resolver (NULL: none) */

/* 127.0.0.1:<port>. */
static void loopback(struct sockaddr_storage *ss, uint16_t port)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof(*ss));
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s4->sin_port = htons(port);
}

/* A request to 127.0.0.1:<ports>[0..n), tried in that order. */
static void start_ports(struct fx *f, struct rec *r, enum h1_method m, const uint16_t *ports,
                        size_t n)
{
    struct upstream_req req;
    struct sockaddr_storage addrs[8];
    assert_true(n >= 1 && n <= 8);
    memset(&req, 0, sizeof(req));
    for (size_t i = 0; i < n; i++)
        loopback(&addrs[i], ports[i]);
    req.addrs = addrs;
    req.n_addrs = n;
    req.resolver = g_health;
    req.head = m == H1_M_HEAD ? "HEAD /obj HTTP/1.1\r\nHost: origin.test\r\n\r\n" : GET_HEAD;
    req.head_len = strlen(req.head);
    req.method = m;
    g_in_call = true;
    r->up = upstream_start(f->loop, f->pool, &req, &rec_sink, r);
    g_in_call = false;
    assert_non_null(r->up);
    assert_int_equal(r->heads + r->done + (int)r->offers, 0);
}

static void start_port(struct fx *f, struct rec *r, enum h1_method m, uint16_t port)
{
    start_ports(f, r, m, &port, 1);
}

static void start(struct fx *f, struct rec *r, enum h1_method m)
{
    start_port(f, r, m, f->srv.port);
}

static void resume(struct rec *r)
{
    g_in_call = true;
    upstream_resume(r->up);
    g_in_call = false;
}

static void cancel(struct rec *r)
{
    g_in_call = true;
    upstream_cancel(&r->up);
    g_in_call = false;
    assert_null(r->up);
}

/* The contract checks every test makes at the end of a request. */
static void assert_clean(const struct rec *r)
{
    assert_false(r->sync);
    assert_false(r->misorder);
}

static void assert_body(const struct rec *r, const char *want, size_t len)
{
    assert_int_equal(r->body_len, len);
    if (len > 0)
        assert_memory_equal(r->body, want, len);
}

/* A response of <n> pattern bytes ('a'..'z' repeated) after a head: with Content-Length: n
 * (<chunked> false), or chunked in chunks of <chunk> bytes. Caller frees. */
static char *big_response(size_t n, size_t *out_len, bool chunked, size_t chunk)
{
    size_t cap = 128 + n + (n / (chunk ? chunk : 1) + 2) * 16;
    char *p = xmalloc(cap);
    size_t o;
    if (chunked)
        o = (size_t)snprintf(p, cap, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    else
        o = (size_t)snprintf(p, cap, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);
    for (size_t i = 0; i < n;) {
        size_t k = chunked ? (n - i < chunk ? n - i : chunk) : n;
        if (chunked)
            o += (size_t)snprintf(p + o, cap - o, "%zx\r\n", k);
        for (size_t j = 0; j < k; j++)
            p[o++] = (char)('a' + (i + j) % 26);
        if (chunked)
            o += (size_t)snprintf(p + o, cap - o, "\r\n");
        i += k;
    }
    if (chunked)
        o += (size_t)snprintf(p + o, cap - o, "0\r\n\r\n");
    *out_len = o;
    return p;
}

static void assert_pattern(const struct rec *r, size_t n)
{
    assert_int_equal(r->body_len, n);
    for (size_t i = 0; i < n; i++)
        if (r->body[i] != (char)('a' + i % 26))
            fail_msg("body byte %zu differs", i);
}

/* ---- bodies ---- */

static void test_upstream_start_content_length_body_delivered(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nETag: \"e\"\r\n\r\nhello world", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.framing, H1_BODY_LENGTH);
    assert_body(&r, "hello world", 11);
    assert_string_equal(f->srv.reqs[0], GET_HEAD);
    assert_int_equal(upstream_live(), 0);
    assert_int_equal(g_stats.upstream_requests, 1);
    assert_int_equal(g_stats.upstream_conn_new, 1);
    assert_int_equal(g_stats.upstream_bytes, 11);
    rec_free(&r);
}

static void test_upstream_start_chunked_body_dechunked(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n6;name=val\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
            0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.framing, H1_BODY_CHUNKED);
    assert_body(&r, "hello world", 11);
    assert_int_equal(upstream_live(), 0);
    rec_free(&r);
}

static void test_upstream_start_close_delimited_body(void **state)
{
    struct fx *f = *state;
    struct rec r = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Type: x/y\r\n\r\nuntil close",
            0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 204 No Content\r\n\r\n", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.framing, H1_BODY_CLOSE);
    assert_body(&r, "until close", 11);
    /* Such a connection is never reused. */
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r2.err, UP_OK);
    assert_int_equal(r2.status, 204);
    assert_int_equal(f->srv.accepts, 2);
    rec_free(&r);
    rec_free(&r2);
}

static void test_upstream_start_head_request_no_body(void **state)
{
    struct fx *f = *state;
    struct rec r = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    start(f, &r, H1_M_HEAD);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.framing, H1_BODY_NONE);
    assert_int_equal(r.offers, 0);
    assert_true(strncmp(f->srv.reqs[0], "HEAD /obj", 9) == 0);
    /* The connection stays usable: no body bytes were expected. */
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "ok", 2);
    assert_int_equal(f->srv.accepts, 1);
    rec_free(&r);
    rec_free(&r2);
}

static void test_upstream_start_1xx_skipped(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 100 Continue\r\n\r\n"
            "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.status, 200);
    assert_body(&r, "ok", 2);
    rec_free(&r);
}

static void test_upstream_start_large_length_body_whole(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    size_t len, n = 1000 * 1000;
    char *resp = big_response(n, &len, false, 0);
    srv_add(&f->srv, ACT_RESPOND, resp, len, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_pattern(&r, n);
    assert_int_equal(g_stats.upstream_bytes, n);
    rec_free(&r);
    free(resp);
}

static void test_upstream_start_large_chunked_body_whole(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    size_t len, n = 700 * 1000 + 7;
    char *resp = big_response(n, &len, true, 4099);
    srv_add(&f->srv, ACT_RESPOND, resp, len, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_pattern(&r, n);
    rec_free(&r);
    free(resp);
}

/* ---- back-pressure ---- */

/* Feeds the sink <step> bytes of budget at a time until on_done. */
static void drive_paused(struct fx *f, struct rec *r, size_t step)
{
    for (int rounds = 0; r->done == 0; rounds++) {
        if (rounds > 5000)
            fail_msg("no progress after %d resumes", rounds);
        RUN_UNTIL(f, r->done > 0 || r->starved);
        if (r->done > 0)
            break;
        size_t offers = r->offers, got = r->body_len;
        /* Paused: more loop iterations offer nothing. */
        run_iterations(f, 1);
        assert_int_equal(r->offers, offers);
        assert_int_equal(r->body_len, got);
        r->budget += step;
        r->starved = false;
        resume(r);
        assert_int_equal(r->offers, offers); /* not inside upstream_resume() */
    }
}

static void test_upstream_resume_after_partial_take_continues(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 3};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\n"
            "abcdefghijklmnopqrstuvwxyz",
            0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.starved);
    assert_int_equal(r.done, 0);
    assert_body(&r, "abc", 3);
    drive_paused(f, &r, 5);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_body(&r, "abcdefghijklmnopqrstuvwxyz", 26);
    rec_free(&r);
}

static void test_upstream_resume_zero_take_pauses(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nwxyz", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.starved);
    assert_int_equal(r.body_len, 0);
    drive_paused(f, &r, 100);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_body(&r, "wxyz", 4);
    rec_free(&r);
}

static void test_upstream_resume_large_chunked_body_in_steps(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 1000};
    size_t len, n = 300 * 1000;
    char *resp = big_response(n, &len, true, 7001);
    srv_add(&f->srv, ACT_RESPOND, resp, len, false);
    start(f, &r, H1_M_GET);
    drive_paused(f, &r, 65 * 1000);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_pattern(&r, n);
    rec_free(&r);
    free(resp);
}

static void test_upstream_resume_close_delimited_eof_while_paused(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 2};
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\n\r\n0123456789", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.starved);
    /* Let the origin's close arrive while the sink is paused. */
    RUN_UNTIL(f, f->srv.conns[0].closed);
    run_iterations(f, 2);
    assert_int_equal(r.done, 0);
    drive_paused(f, &r, 3);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_body(&r, "0123456789", 10);
    rec_free(&r);
}

static void test_upstream_resume_truncated_body_eof_while_paused_is_io_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 1};
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd", 0,
            false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.starved);
    RUN_UNTIL(f, f->srv.conns[0].closed);
    run_iterations(f, 2);
    drive_paused(f, &r, 1);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_IO);
    assert_body(&r, "abcd", 4); /* what arrived is still delivered first */
    rec_free(&r);
}

/* ---- keep-alive and retry ---- */

static void test_upstream_start_keepalive_reuses_connection(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0}, r3 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, false);
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n", 0,
            false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    start(f, &r3, H1_M_GET);
    RUN_UNTIL(f, r3.done > 0);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(r2.err, UP_OK);
    assert_int_equal(r3.err, UP_OK);
    assert_body(&r1, "one", 3);
    assert_body(&r2, "two", 3);
    assert_int_equal(r3.status, 304);
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(f->srv.requests, 3);
    assert_int_equal(g_stats.upstream_conn_new, 1);
    assert_int_equal(g_stats.upstream_conn_reused, 2);
    rec_free(&r1);
    rec_free(&r2);
    rec_free(&r3);
}

/* A request started from a loop callback on a kept-alive socket is written in that iteration,
 * not after the next poll and every client's turn in it (the fetch's first byte waits for it). */
struct later_start {
    struct fx *f;
    struct rec *r;
    ev_timer timer;
};

static void on_later_start(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct later_start *l = container_of(w, struct later_start, timer);
    start(l->f, l->r, H1_M_GET);
}

static void test_upstream_start_on_a_kept_socket_writes_in_the_same_iteration(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    assert_int_equal(f->srv.accepts, 1);
    struct later_start l = {.f = f, .r = &r2};
    ev_timer_init(&l.timer, on_later_start, 0., 0.);
    ev_timer_start(f->loop, &l.timer);
    ev_run(f->loop, EVRUN_ONCE); /* the timer fires: r2 starts on the kept socket */
    assert_non_null(r2.up);
    /* (Loopback queues sent bytes at the receiver within send(). Asserted once r2 is done, so
     * that a failure leaves no upstream alive for the teardown's check.) */
    int queued = 0;
    int ioc = ioctl(f->srv.conns[0].fd, FIONREAD, &queued);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(ioc, 0);
    assert_true(queued > 0); /* the request already waited at the origin's end */
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "two", 3);
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(g_stats.upstream_conn_reused, 1);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_connection_close_not_reused(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(r2.err, UP_OK);
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(g_stats.upstream_conn_reused, 0);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_extra_bytes_after_body_not_reused(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxJUNK", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    assert_int_equal(r1.err, UP_OK);
    assert_body(&r1, "x", 1);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "y", 1);
    assert_int_equal(f->srv.accepts, 2);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_reused_socket_closed_retries_on_new(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, false);
    srv_add(&f->srv, ACT_CLOSE, NULL, 0, false); /* 2nd request on the kept connection */
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    assert_int_equal(r1.err, UP_OK);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_clean(&r2);
    assert_int_equal(r2.err, UP_OK);
    assert_int_equal(r2.heads, 1);
    assert_body(&r2, "two", 3);
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(f->srv.requests, 3);
    assert_string_equal(f->srv.reqs[2], GET_HEAD);
    assert_int_equal(g_stats.upstream_retries, 1);
    assert_int_equal(g_stats.upstream_requests, 2);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_retry_only_once(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, false);
    srv_add(&f->srv, ACT_CLOSE, NULL, 0, false);
    srv_add(&f->srv, ACT_CLOSE, NULL, 0, false); /* the fresh connection fails too */
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_clean(&r2);
    assert_int_equal(r2.err, UP_ERR_IO);
    assert_int_equal(r2.heads, 0);
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(g_stats.upstream_retries, 1);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_fresh_connection_closed_is_io_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_CLOSE, NULL, 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_IO);
    assert_int_equal(r.heads, 0);
    assert_int_equal(f->srv.accepts, 1); /* no retry on a fresh connection */
    assert_int_equal(g_stats.upstream_retries, 0);
    rec_free(&r);
}

/* ---- errors ---- */

/* A loopback port with nothing listening: bind, read it back, close. */
static uint16_t closed_port(void)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

static void test_upstream_start_connect_refused(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    start_port(f, &r, H1_M_GET, closed_port());
    assert_int_equal(r.done, 0); /* never before upstream_start() returns */
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_CONNECT);
    assert_int_equal(r.heads, 0);
    assert_int_equal(g_stats.upstream_err_connect, 1);
    rec_free(&r);
}

static void test_upstream_start_refused_address_fails_over_to_the_next(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    uint16_t ports[2] = {closed_port(), f->srv.port};
    start_ports(f, &r, H1_M_GET, ports, 2);
    assert_int_equal(r.done, 0); /* never before upstream_start() returns */
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    assert_int_equal(r.status, 200);
    assert_body(&r, "ok", 2);
    assert_int_equal(g_stats.upstream_connect_failover, 1);
    assert_int_equal(g_stats.upstream_err_connect, 1);
    assert_int_equal(g_stats.upstream_requests, 1); /* one request, sent once */
    rec_free(&r);
}

static void test_upstream_start_every_address_refused_is_connect_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    uint16_t ports[2] = {closed_port(), closed_port()};
    start_ports(f, &r, H1_M_GET, ports, 2);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.err, UP_ERR_CONNECT);
    assert_int_equal(r.heads, 0);
    assert_int_equal(g_stats.upstream_connect_failover, 1);
    assert_int_equal(g_stats.upstream_err_connect, 2);
    rec_free(&r);
}

static void test_upstream_start_tries_at_most_four_addresses(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    uint16_t dead = closed_port();
    uint16_t ports[6] = {dead, dead, dead, dead, f->srv.port, f->srv.port};
    start_ports(f, &r, H1_M_GET, ports, 6);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_CONNECT); /* the fifth, a live one, is never tried */
    assert_int_equal(g_stats.upstream_err_connect, UPSTREAM_MAX_TRIES);
    assert_int_equal(g_stats.upstream_connect_failover, UPSTREAM_MAX_TRIES - 1);
    assert_int_equal(f->srv.accepts, 0);
    rec_free(&r);
}

static void test_upstream_start_failed_address_marked_dead_then_skipped(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    char err[256];
    g_health = resolver_new(f->loop, f->cfg, err, sizeof(err));
    assert_non_null(g_health);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    uint16_t ports[2] = {closed_port(), f->srv.port};
    struct sockaddr_storage dead, live;
    loopback(&dead, ports[0]);
    loopback(&live, ports[1]);
    resolver_mark_dead(g_health, &live, util_now_ms()); /* an old mark: cleared by a connect */
    start_ports(f, &r1, H1_M_GET, ports, 2);
    RUN_UNTIL(f, r1.done > 0);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(g_stats.upstream_connect_failover, 1);
    assert_true(resolver_is_dead(g_health, &dead, util_now_ms()));
    assert_false(resolver_is_dead(g_health, &live, util_now_ms()));
    /* The same list again: the dead address goes last, the live one answers at once. */
    start_ports(f, &r2, H1_M_GET, ports, 2);
    RUN_UNTIL(f, r2.done > 0);
    assert_clean(&r2);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "ok", 2);
    assert_int_equal(g_stats.upstream_connect_failover, 1);
    assert_int_equal(g_stats.upstream_err_connect, 1);
    rec_free(&r1);
    rec_free(&r2);
    resolver_free(&g_health);
}

static void test_upstream_start_first_byte_timeout(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    f->cfg->first_byte_timeout_ms = 50;
    srv_add(&f->srv, ACT_STALL, NULL, 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_FIRST_BYTE_TIMEOUT);
    assert_int_equal(r.heads, 0);
    assert_int_equal(f->srv.requests, 1);
    assert_int_equal(g_stats.upstream_err_timeout, 1);
    /* The connection was closed, not pooled. */
    RUN_UNTIL(f, f->srv.conns[0].peer_closed);
    rec_free(&r);
}

static void test_upstream_start_read_timeout_mid_body(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    f->cfg->read_timeout_ms = 50;
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_READ_TIMEOUT);
    assert_int_equal(r.heads, 1);
    assert_body(&r, "abc", 3);
    rec_free(&r);
}

static void test_upstream_start_invalid_head_is_proto_error(void **state)
{
    static const char *const bad[] = {
        "HTTP/1.1 2000 OK\r\n\r\n",
        "garbage garbage\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
    };
    struct fx *f = *state;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        srv_add(&f->srv, ACT_RESPOND, bad[i], 0, false);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct rec r = {0};
        start(f, &r, H1_M_GET);
        RUN_UNTIL(f, r.done > 0);
        assert_clean(&r);
        if (r.err != UP_ERR_PROTO || r.heads != 0)
            fail_msg("case %zu: err %s heads %d", i, upstream_strerror(r.err), r.heads);
        rec_free(&r);
    }
    assert_int_equal(g_stats.upstream_err_proto, ARRAY_SIZE(bad));
    assert_int_equal(f->srv.accepts, ARRAY_SIZE(bad));
}

static void test_upstream_start_bad_chunked_framing_is_proto_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_PROTO);
    assert_int_equal(r.heads, 1);
    assert_body(&r, "abc", 3);
    rec_free(&r);
}

static void test_upstream_start_truncated_length_body_is_io_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0,
            false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_IO);
    assert_int_equal(r.heads, 1);
    assert_body(&r, "abc", 3);
    assert_int_equal(g_stats.upstream_err_io, 1);
    rec_free(&r);
}

static void test_upstream_start_truncated_chunked_body_is_io_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND_CLOSE,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_IO);
    assert_body(&r, "hel", 3);
    rec_free(&r);
}

static void test_upstream_start_head_cut_before_end_is_io_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Le", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_IO);
    assert_int_equal(r.heads, 0);
    rec_free(&r);
}

/* ---- cancel ---- */

static void test_upstream_cancel_inside_on_body(void **state)
{
    struct fx *f = *state;
    struct rec r = {.cancel_in_body = true};
    size_t len, n = 200 * 1000;
    char *resp = big_response(n, &len, false, 0);
    srv_add(&f->srv, ACT_RESPOND, resp, len, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.offers > 0);
    assert_null(r.up);
    assert_int_equal(r.offers, 1);
    assert_int_equal(upstream_live(), 0); /* freed right after the callback */
    RUN_UNTIL(f, f->srv.conns[0].closed);
    run_iterations(f, 2);
    assert_int_equal(r.done, 0);
    assert_int_equal(r.offers, 1);
    assert_clean(&r);
    rec_free(&r);
    free(resp);
}

static void test_upstream_cancel_inside_on_head(void **state)
{
    struct fx *f = *state;
    struct rec r = {.cancel_in_head = true};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.heads > 0);
    assert_null(r.up);
    assert_int_equal(upstream_live(), 0);
    run_iterations(f, 2);
    assert_int_equal(r.offers, 0);
    assert_int_equal(r.done, 0);
    rec_free(&r);
}

static void test_upstream_cancel_inside_on_done(void **state)
{
    struct fx *f = *state;
    struct rec r = {.cancel_in_done = true};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_int_equal(r.done, 1);
    assert_int_equal(upstream_live(), 0);
    rec_free(&r);
}

static void test_upstream_cancel_while_waiting_for_head(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_STALL, NULL, 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1);
    cancel(&r);
    assert_int_equal(upstream_live(), 0);
    RUN_UNTIL(f, f->srv.conns[0].peer_closed);
    run_iterations(f, 2);
    assert_int_equal(r.heads + r.done + (int)r.offers, 0);
    rec_free(&r);
}

static void test_upstream_cancel_right_after_start(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    start(f, &r, H1_M_GET);
    cancel(&r);
    assert_int_equal(upstream_live(), 0);
    run_iterations(f, 3);
    assert_int_equal(r.heads + r.done + (int)r.offers, 0);
    rec_free(&r);
}

static void test_upstream_cancel_while_paused(void **state)
{
    struct fx *f = *state;
    struct rec r = {.limited = true, .budget = 1};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.starved);
    resume(&r); /* an offer is now queued on the loop ... */
    cancel(&r); /* ... and must not reach a freed upstream */
    run_iterations(f, 3);
    assert_int_equal(r.done, 0);
    assert_body(&r, "h", 1);
    assert_clean(&r);
    rec_free(&r);
}

/* ---- max_per_origin ---- */

static void test_upstream_start_max_per_origin_second_waits(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    f->cfg->max_per_origin = 1;
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, true);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo", 0, false);
    start(f, &r1, H1_M_GET);
    start(f, &r2, H1_M_GET);
    assert_int_equal(g_stats.upstream_queued, 1);
    RUN_UNTIL(f, f->srv.requests == 1);
    run_iterations(f, 3);
    /* The second has not been sent: the only slot is busy. */
    assert_int_equal(f->srv.requests, 1);
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(r2.heads + r2.done, 0);
    srv_release(&f->srv);
    RUN_UNTIL(f, r1.done > 0 && r2.done > 0);
    assert_clean(&r1);
    assert_clean(&r2);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r1, "one", 3);
    assert_body(&r2, "two", 3);
    /* The second took over the first's kept connection. */
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(f->srv.requests, 2);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_cancel_while_waiting_for_slot(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0}, r3 = {0};
    f->cfg->max_per_origin = 1;
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, true);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nthree", 0, false);
    start(f, &r1, H1_M_GET);
    start(f, &r2, H1_M_GET);
    start(f, &r3, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1);
    cancel(&r2);
    srv_release(&f->srv);
    RUN_UNTIL(f, r1.done > 0 && r3.done > 0);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(r3.err, UP_OK);
    assert_body(&r3, "three", 5);
    assert_int_equal(r2.heads + r2.done + (int)r2.offers, 0);
    assert_int_equal(f->srv.requests, 2);
    rec_free(&r1);
    rec_free(&r2);
    rec_free(&r3);
}

static void test_upstream_start_slot_wait_times_out(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    f->cfg->max_per_origin = 1;
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, true);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1); /* r1's first-byte timer is armed (default) */
    f->cfg->first_byte_timeout_ms = 50; /* only the queued request gets the short timeout */
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_clean(&r2);
    assert_int_equal(r2.err, UP_ERR_FIRST_BYTE_TIMEOUT);
    assert_int_equal(f->srv.requests, 1);
    f->cfg->first_byte_timeout_ms = 30000;
    srv_release(&f->srv);
    RUN_UNTIL(f, r1.done > 0);
    assert_int_equal(r1.err, UP_OK);
    rec_free(&r1);
    rec_free(&r2);
}

/* A one-shot timer that runs <fn> (the scripted origin's clock, never a sleep). */
struct at {
    ev_timer t;
    void (*fn)(struct at *a);
    struct fx *f;
    struct rec *r;
    bool fired;
    bool r_done_then; /* the probe: was r done when it fired */
};

static void on_at(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct at *a = container_of(w, struct at, t);
    (void)loop;
    (void)revents;
    a->fired = true;
    a->fn(a);
}

static void at_release(struct at *a)
{
    srv_release(&a->f->srv);
}

static void at_probe(struct at *a)
{
    a->r_done_then = a->r->done > 0;
}

/*
 * upstream.h: "first_byte_timeout from the request (including a wait for a slot) to the response
 * head". r2 waits for the only slot until r1's response is released at T/2, then stalls. Its
 * first-byte deadline is start + T, so it must have failed when a probe timer armed at the same
 * moment for start + 1.4 T fires. Only the order of libev timers matters, not wall-clock time:
 * restarting the timer at the grant (>= start + T/2) would move the deadline to >= start + 1.5 T.
 */
static void test_upstream_start_slot_wait_counts_toward_first_byte_timeout(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    const double t = 0.2;
    struct at rel = {.fn = at_release, .f = f}, probe = {.fn = at_probe, .f = f, .r = &r2};
    f->cfg->max_per_origin = 1;
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0, true);
    srv_add(&f->srv, ACT_STALL, NULL, 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1); /* r1 waits for its head with the default timeout */
    f->cfg->first_byte_timeout_ms = (uint64_t)(t * 1000);
    start(f, &r2, H1_M_GET);
    ev_timer_init(&rel.t, on_at, t / 2, 0.);
    ev_timer_init(&probe.t, on_at, t * 1.4, 0.);
    ev_timer_start(f->loop, &rel.t);
    ev_timer_start(f->loop, &probe.t);
    RUN_UNTIL(f, probe.fired);
    assert_true(rel.fired);
    assert_int_equal(r1.err, UP_OK);
    bool ok = probe.r_done_then;
    RUN_UNTIL(f, r2.done > 0); /* clean up either way */
    assert_int_equal(r2.err, UP_ERR_FIRST_BYTE_TIMEOUT);
    rec_free(&r1);
    rec_free(&r2);
    if (!ok)
        fail_msg("the request waited %.0f ms for a slot and was still running %.0f ms after "
                 "it started, with first_byte_timeout %.0f ms",
                 t / 2 * 1000, t * 1.4 * 1000, t * 1000);
}

static void test_upstream_start_failed_request_hands_slot_to_waiter(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    f->cfg->max_per_origin = 1;
    srv_add(&f->srv, ACT_CLOSE, NULL, 0, true);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, false);
    start(f, &r1, H1_M_GET);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1);
    srv_release(&f->srv);
    RUN_UNTIL(f, r1.done > 0 && r2.done > 0);
    assert_int_equal(r1.err, UP_ERR_IO);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "ok", 2);
    assert_int_equal(f->srv.accepts, 2);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_stale_idle_socket_retried(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    /* The origin closes its kept connection right after answering; whether the pool notices
     * before r2 takes the socket or r2 finds it dead, r2 must succeed on one new connection. */
    srv_add(&f->srv, ACT_RESPOND_CLOSE, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", 0,
            false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_clean(&r2);
    assert_int_equal(r1.err, UP_OK);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "two", 3);
    assert_int_equal(f->srv.accepts, 2);
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_http10_origin_not_reused(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {0}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 0, false);
    srv_add(&f->srv, ACT_RESPOND,
            "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\ny", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz", 0, false);
    start(f, &r1, H1_M_GET);
    RUN_UNTIL(f, r1.done > 0);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(f->srv.accepts, 2); /* 1.0 without keep-alive: closed */
    rec_free(&r2);
    memset(&r2, 0, sizeof(r2));
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r2.err, UP_OK);
    assert_body(&r2, "z", 1);
    assert_int_equal(f->srv.accepts, 2); /* 1.0 with keep-alive: reused */
    rec_free(&r1);
    rec_free(&r2);
}

static void test_upstream_start_oversized_head_is_proto_error(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    size_t n = 70 * 1024;
    char *resp = xmalloc(n + 128);
    size_t o = (size_t)snprintf(resp, n + 128, "HTTP/1.1 200 OK\r\nX-Big: ");
    memset(resp + o, 'b', n);
    o += n;
    o += (size_t)snprintf(resp + o, 128, "\r\nContent-Length: 0\r\n\r\n");
    srv_add(&f->srv, ACT_RESPOND, resp, o, false);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_ERR_PROTO);
    assert_int_equal(r.heads, 0);
    rec_free(&r);
    free(resp);
}

static void test_upstream_resume_without_pause_is_noop(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, true);
    start(f, &r, H1_M_GET);
    RUN_UNTIL(f, f->srv.requests == 1);
    resume(&r);
    run_iterations(f, 2);
    assert_int_equal(r.heads + r.done + (int)r.offers, 0);
    srv_release(&f->srv);
    RUN_UNTIL(f, r.done > 0);
    assert_clean(&r);
    assert_int_equal(r.err, UP_OK);
    rec_free(&r);
}

static void test_upstream_resume_paused_body_then_connection_reused(void **state)
{
    struct fx *f = *state;
    struct rec r1 = {.limited = true, .budget = 1}, r2 = {0};
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef", 0, false);
    srv_add(&f->srv, ACT_RESPOND, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ng", 0, false);
    start(f, &r1, H1_M_GET);
    drive_paused(f, &r1, 2);
    assert_int_equal(r1.err, UP_OK);
    assert_body(&r1, "abcdef", 6);
    start(f, &r2, H1_M_GET);
    RUN_UNTIL(f, r2.done > 0);
    assert_int_equal(r2.err, UP_OK);
    assert_int_equal(f->srv.accepts, 1);
    rec_free(&r1);
    rec_free(&r2);
}

/* ---- misc ---- */

static void test_upstream_strerror_names(void **state)
{
    (void)state;
    assert_string_equal(upstream_strerror(UP_OK), "ok");
    assert_string_equal(upstream_strerror(UP_ERR_CONNECT), "connect failed");
    assert_string_equal(upstream_strerror(UP_ERR_FIRST_BYTE_TIMEOUT), "first byte timeout");
    assert_string_equal(upstream_strerror(UP_ERR_IO), "connection lost");
    assert_string_equal(upstream_strerror((enum up_err)99), "?");
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_upstream_start_content_length_body_delivered),
        FX(test_upstream_start_chunked_body_dechunked),
        FX(test_upstream_start_close_delimited_body),
        FX(test_upstream_start_head_request_no_body),
        FX(test_upstream_start_1xx_skipped),
        FX(test_upstream_start_large_length_body_whole),
        FX(test_upstream_start_large_chunked_body_whole),
        FX(test_upstream_resume_after_partial_take_continues),
        FX(test_upstream_resume_zero_take_pauses),
        FX(test_upstream_resume_large_chunked_body_in_steps),
        FX(test_upstream_resume_close_delimited_eof_while_paused),
        FX(test_upstream_resume_truncated_body_eof_while_paused_is_io_error),
        FX(test_upstream_start_keepalive_reuses_connection),
        FX(test_upstream_start_on_a_kept_socket_writes_in_the_same_iteration),
        FX(test_upstream_start_connection_close_not_reused),
        FX(test_upstream_start_extra_bytes_after_body_not_reused),
        FX(test_upstream_start_reused_socket_closed_retries_on_new),
        FX(test_upstream_start_retry_only_once),
        FX(test_upstream_start_fresh_connection_closed_is_io_error),
        FX(test_upstream_start_connect_refused),
        FX(test_upstream_start_refused_address_fails_over_to_the_next),
        FX(test_upstream_start_every_address_refused_is_connect_error),
        FX(test_upstream_start_tries_at_most_four_addresses),
        FX(test_upstream_start_failed_address_marked_dead_then_skipped),
        FX(test_upstream_start_first_byte_timeout),
        FX(test_upstream_start_read_timeout_mid_body),
        FX(test_upstream_start_invalid_head_is_proto_error),
        FX(test_upstream_start_bad_chunked_framing_is_proto_error),
        FX(test_upstream_start_truncated_length_body_is_io_error),
        FX(test_upstream_start_truncated_chunked_body_is_io_error),
        FX(test_upstream_start_head_cut_before_end_is_io_error),
        FX(test_upstream_cancel_inside_on_body),
        FX(test_upstream_cancel_inside_on_head),
        FX(test_upstream_cancel_inside_on_done),
        FX(test_upstream_cancel_while_waiting_for_head),
        FX(test_upstream_cancel_right_after_start),
        FX(test_upstream_cancel_while_paused),
        FX(test_upstream_start_max_per_origin_second_waits),
        FX(test_upstream_cancel_while_waiting_for_slot),
        FX(test_upstream_start_slot_wait_times_out),
        FX(test_upstream_start_slot_wait_counts_toward_first_byte_timeout),
        FX(test_upstream_start_failed_request_hands_slot_to_waiter),
        FX(test_upstream_start_stale_idle_socket_retried),
        FX(test_upstream_start_http10_origin_not_reused),
        FX(test_upstream_start_oversized_head_is_proto_error),
        FX(test_upstream_resume_without_pause_is_noop),
        FX(test_upstream_resume_paused_body_then_connection_reused),
        cmocka_unit_test(test_upstream_strerror_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
