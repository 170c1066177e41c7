/* LDFLAGS: -Wl,--wrap=free */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_upool: origins, busy-slot accounting, FIFO waiters and idle keep-alive sockets on a real
 * libev loop. Idle sockets are socketpair() ends: the test holds the peer end to write to it,
 * close it, or see the pool close ours (EOF on the peer). free() is wrapped (--wrap) so that a
 * test can see an origin being freed. Limits come from g_cfg, a config the test adjusts.
 */
#include "upool.h"

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
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "config.h"
#include "log.h"
#include "util.h"

/* ---- free() spy ---- */

#define FREED_MAX 4096

static const void *g_freed[FREED_MAX];
static size_t g_n_freed;

void __real_free(void *p);
void __wrap_free(void *p);

void __wrap_free(void *p)
{
    if (p != NULL)
        g_freed[g_n_freed++ % FREED_MAX] = p;
    __real_free(p);
}

/* True if <p> was freed after free-count <mark>. */
static bool freed_since(size_t mark, const void *p)
{
    for (size_t i = mark; i < g_n_freed; i++)
        if (g_freed[i % FREED_MAX] == p)
            return true;
    return false;
}

/* ---- fixture ---- */

struct fx {
    struct ev_loop *loop;
    struct config *cfg;
    struct upool *pool;
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
    f->loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(f->loop);
    if (config_load_string("t", "[server]\nlisten=127.0.0.1:1\n", &f->cfg, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    f->cfg->max_per_origin = 2;
    f->cfg->keepalive = 2;
    g_cfg = f->cfg;
    f->pool = upool_new(f->loop);
    assert_non_null(f->pool);
    ev_timer_init(&f->tick, on_tick, 0.02, 0.02);
    ev_timer_start(f->loop, &f->tick);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    upool_free(&f->pool);
    assert_null(f->pool);
    ev_timer_stop(f->loop, &f->tick);
    ev_loop_destroy(f->loop);
    g_cfg = NULL;
    config_free(&f->cfg);
    free(f);
    return 0;
}

#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        for (int it_ = 0; !(cond) && it_ < 250; it_++)                                             \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        if (!(cond))                                                                               \
            fail_msg("loop never reached: %s", #cond);                                             \
    } while (0)

static void run_iterations(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        ev_run(f->loop, EVRUN_ONCE);
}

static struct sockaddr_storage addr4(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    memset(&ss, 0, sizeof(ss));
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage addr6(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    memset(&ss, 0, sizeof(ss));
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    return ss;
}

/* A connected pair: sp[0] is handed to the pool, the test keeps sp[1] (non-blocking). */
static void pair(int sp[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
}

/* True once the pool closed its end: the peer reads EOF. */
static bool peer_sees_eof(int peer)
{
    char c;
    return recv(peer, &c, 1, MSG_DONTWAIT) == 0;
}

/* True while the pool's end is open: the peer would block. */
static bool peer_sees_open(int peer)
{
    char c;
    return recv(peer, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

/* ---- waiters ---- */

#define MAX_GRANTS 16

struct grants {
    struct upool_wait *order[MAX_GRANTS];
    unsigned n;
    bool in_release; /* set by the test around upool_release() */
    bool sync;       /* a callback fired inside upool_release() or upool_wait() */
};

static struct grants g_grants;

static void on_granted(struct upool_wait *w)
{
    g_grants.sync |= g_grants.in_release;
    assert_null(w->origin);
    assert_null(w->pprev);
    if (g_grants.n < MAX_GRANTS)
        g_grants.order[g_grants.n] = w;
    g_grants.n++;
}

static void release(struct origin *o, int fd)
{
    g_grants.in_release = true;
    upool_release(o, fd);
    g_grants.in_release = false;
}

static void wait_for(struct origin *o, struct upool_wait *w)
{
    g_grants.in_release = true;
    upool_wait(o, w, on_granted);
    g_grants.in_release = false;
}

/* ---- upool_origin ---- */

static void test_upool_origin_same_address_same_origin(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80), a2 = addr4("192.0.2.1", 80);
    struct sockaddr_storage b = addr4("192.0.2.1", 8080), c = addr4("192.0.2.2", 80);
    struct sockaddr_storage d = addr6("2001:db8::1", 80);
    struct origin *oa = upool_origin(f->pool, &a);
    assert_non_null(oa);
    assert_ptr_equal(upool_origin(f->pool, &a2), oa);
    struct origin *ob = upool_origin(f->pool, &b);
    struct origin *oc = upool_origin(f->pool, &c);
    struct origin *od = upool_origin(f->pool, &d);
    assert_true(ob != oa && oc != oa && oc != ob && od != oa && od != ob && od != oc);
    assert_ptr_equal(upool_origin(f->pool, &d), od);
    assert_string_equal(upool_origin_name(oa), "192.0.2.1:80");
    assert_string_equal(upool_origin_name(ob), "192.0.2.1:8080");
    assert_string_equal(upool_origin_name(od), "[2001:db8::1]:80");
}

static void test_upool_origin_many_addresses_distinct(void **state)
{
    struct fx *f = *state;
    static struct origin *seen[600];
    /* More origins than hash buckets: chains work and each address keeps its origin. */
    for (unsigned i = 0; i < 600; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.0.%u.%u", i / 250, i % 250);
        struct sockaddr_storage a = addr4(ip, 80);
        seen[i] = upool_origin(f->pool, &a);
        for (unsigned j = 0; j < i; j++)
            assert_true(seen[j] != seen[i]);
    }
    for (unsigned i = 0; i < 600; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.0.%u.%u", i / 250, i % 250);
        struct sockaddr_storage a = addr4(ip, 80);
        assert_ptr_equal(upool_origin(f->pool, &a), seen[i]);
    }
}

/* ---- slots ---- */

static void test_upool_slot_try_up_to_max_per_origin(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80), b = addr4("192.0.2.2", 80);
    struct origin *o = upool_origin(f->pool, &a);
    struct origin *ob = upool_origin(f->pool, &b);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    assert_false(upool_slot_try(o));
    /* Limits are per origin. */
    assert_true(upool_slot_try(ob));
    release(ob, -1);
    release(o, -1);
    assert_true(upool_slot_try(o));
    assert_false(upool_slot_try(o));
    release(o, -1);
    release(o, -1);
}

static void test_upool_release_last_slot_frees_origin(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    size_t mark = g_n_freed;
    release(o, -1);
    assert_false(freed_since(mark, o));
    release(o, -1);
    assert_true(freed_since(mark, o));
    /* The address gets a fresh origin with every slot free. */
    o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    assert_false(upool_slot_try(o));
    release(o, -1);
    release(o, -1);
}

/* ---- waiters ---- */

static void test_upool_wait_fifo_granted_in_order_deferred(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[3];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    for (int i = 0; i < 3; i++)
        wait_for(o, &w[i]);
    run_iterations(f, 2);
    assert_int_equal(g_grants.n, 0); /* all slots busy: nobody granted */
    assert_false(upool_slot_try(o));

    for (unsigned i = 0; i < 3; i++) {
        release(o, -1);
        assert_int_equal(g_grants.n, i); /* not inside upool_release() */
        RUN_UNTIL(f, g_grants.n == i + 1);
        assert_ptr_equal(g_grants.order[i], &w[i]);
        /* The slot moved to the waiter: still no free slot. */
        assert_false(upool_slot_try(o));
    }
    assert_false(g_grants.sync);
    size_t mark = g_n_freed;
    release(o, -1);
    assert_true(freed_since(mark, o));
}

static void test_upool_slot_try_refused_while_waiters_queued(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w;
    memset(&g_grants, 0, sizeof(g_grants));
    memset(&w, 0, sizeof(w));
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    wait_for(o, &w);
    /* A release hands the slot to the queued waiter: a newcomer cannot jump the queue. */
    release(o, -1);
    assert_false(upool_slot_try(o));
    RUN_UNTIL(f, g_grants.n == 1);
    release(o, -1);
    release(o, -1);
}

static void test_upool_wait_with_free_slot_granted_deferred(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w;
    memset(&g_grants, 0, sizeof(g_grants));
    memset(&w, 0, sizeof(w));
    struct origin *o = upool_origin(f->pool, &a);
    wait_for(o, &w); /* a slot is free (e.g. max_per_origin raised by a reload) */
    assert_int_equal(g_grants.n, 0);
    RUN_UNTIL(f, g_grants.n == 1);
    assert_false(g_grants.sync);
    assert_ptr_equal(g_grants.order[0], &w);
    /* It holds one of the two slots. */
    assert_true(upool_slot_try(o));
    assert_false(upool_slot_try(o));
    release(o, -1);
    release(o, -1);
}

static void test_upool_wait_cancel_queued_returns_false(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[3];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    for (int i = 0; i < 3; i++)
        wait_for(o, &w[i]);
    /* Cancel the head and the tail; the middle one is served next. */
    assert_false(upool_wait_cancel(f->pool, &w[0]));
    assert_false(upool_wait_cancel(f->pool, &w[2]));
    assert_null(w[0].pprev);
    /* Cancelling again is harmless. */
    assert_false(upool_wait_cancel(f->pool, &w[0]));
    release(o, -1);
    RUN_UNTIL(f, g_grants.n == 1);
    assert_ptr_equal(g_grants.order[0], &w[1]);
    /* A later waiter queues behind correctly after the tail was cancelled. */
    struct upool_wait w4;
    memset(&w4, 0, sizeof(w4));
    wait_for(o, &w4);
    release(o, -1);
    RUN_UNTIL(f, g_grants.n == 2);
    assert_ptr_equal(g_grants.order[1], &w4);
    run_iterations(f, 2);
    assert_int_equal(g_grants.n, 2);
    size_t mark = g_n_freed;
    release(o, -1);
    assert_true(freed_since(mark, o));
}

static void test_upool_wait_cancel_after_grant_returns_true(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[2];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    wait_for(o, &w[0]);
    wait_for(o, &w[1]);
    release(o, -1); /* slot granted to w[0], callback pending */
    assert_true(upool_wait_cancel(f->pool, &w[0]));
    assert_null(w[0].pprev);
    assert_false(upool_wait_cancel(f->pool, &w[0]));
    run_iterations(f, 3);
    assert_int_equal(g_grants.n, 0); /* never called back */
    /* The canceller holds the slot and releases it: w[1] is next. */
    assert_false(upool_slot_try(o));
    release(o, -1);
    RUN_UNTIL(f, g_grants.n == 1);
    assert_ptr_equal(g_grants.order[0], &w[1]);
    /* After its callback ran, a waiter is no longer queued. */
    assert_false(upool_wait_cancel(f->pool, &w[1]));
    size_t mark = g_n_freed;
    release(o, -1);
    assert_true(freed_since(mark, o));
}

static void test_upool_wait_cancel_granted_middle_keeps_others(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[3];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 3;
    struct origin *o = upool_origin(f->pool, &a);
    for (int i = 0; i < 3; i++)
        assert_true(upool_slot_try(o));
    for (int i = 0; i < 3; i++)
        wait_for(o, &w[i]);
    for (int i = 0; i < 3; i++)
        release(o, -1); /* all three granted, callbacks pending */
    assert_int_equal(g_grants.n, 0);
    assert_true(upool_wait_cancel(f->pool, &w[1]));
    assert_true(upool_wait_cancel(f->pool, &w[2])); /* the tail */
    RUN_UNTIL(f, g_grants.n == 1);
    run_iterations(f, 2);
    assert_int_equal(g_grants.n, 1);
    assert_ptr_equal(g_grants.order[0], &w[0]);
    for (int i = 0; i < 3; i++)
        release(o, -1);
}

/*
 * upool.c's invariant: "a waiter is queued only while o->busy >= max_per_origin". After a reload
 * raised max_per_origin, the next release must hand every slot now free to the queue, not keep
 * the origin at the old concurrency until the queue drains.
 */
static void test_upool_release_after_limit_raised_grants_all_free_slots(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[3];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    for (int i = 0; i < 3; i++)
        wait_for(o, &w[i]);
    f->cfg->max_per_origin = 3; /* a reload raised the limit */
    release(o, -1);
    RUN_UNTIL(f, g_grants.n >= 1);
    run_iterations(f, 3);
    unsigned granted = g_grants.n;
    /* Clean up whatever the outcome: each waiter releases the slot it was given. */
    for (unsigned r = 0; r < 3; r++) {
        RUN_UNTIL(f, g_grants.n > r);
        release(o, -1);
    }
    if (granted != 3)
        fail_msg("limit raised to 3 with 3 waiters and no busy slot: %u granted, want 3", granted);
}

/* A callback that releases its slot at once: every waiter is still served, in order. */
static struct origin *g_chain_origin;

static void on_granted_release(struct upool_wait *w)
{
    on_granted(w);
    upool_release(g_chain_origin, -1);
}

static void test_upool_wait_callback_releasing_serves_next(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w[4];
    memset(&g_grants, 0, sizeof(g_grants));
    memset(w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    g_chain_origin = o;
    assert_true(upool_slot_try(o));
    for (int i = 0; i < 4; i++)
        upool_wait(o, &w[i], on_granted_release);
    size_t mark = g_n_freed;
    release(o, -1);
    RUN_UNTIL(f, g_grants.n == 4);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(g_grants.order[i], &w[i]);
    assert_true(freed_since(mark, o));
}

/* ---- idle sockets ---- */

static void test_upool_release_fd_kept_idle_and_taken(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int sp[2];
    pair(sp);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), -1);
    size_t mark = g_n_freed;
    release(o, sp[0]);
    /* The idle socket keeps the origin alive. */
    assert_false(freed_since(mark, o));
    assert_ptr_equal(upool_origin(f->pool, &a), o);
    run_iterations(f, 2);
    assert_true(peer_sees_open(sp[1]));
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), sp[0]);
    assert_int_equal(upool_take_idle(o), -1);
    /* Ownership moved to us: the pool no longer watches it. */
    assert_int_equal(send(sp[1], "x", 1, 0), 1);
    run_iterations(f, 2);
    char c;
    assert_int_equal(recv(sp[0], &c, 1, MSG_DONTWAIT), 1);
    release(o, -1);
    assert_true(freed_since(mark, o));
    close(sp[0]);
    close(sp[1]);
}

static void test_upool_take_idle_most_recent_first(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int s1[2], s2[2];
    pair(s1);
    pair(s2);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    release(o, s1[0]);
    release(o, s2[0]);
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), s2[0]);
    assert_int_equal(upool_take_idle(o), s1[0]);
    assert_int_equal(upool_take_idle(o), -1);
    release(o, -1);
    close(s1[0]);
    close(s1[1]);
    close(s2[0]);
    close(s2[1]);
}

static void test_upool_take_idle_skips_socket_with_unread_bytes_or_eof(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int s1[2], s2[2], s3[2];
    pair(s1);
    pair(s2);
    pair(s3);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    release(o, s1[0]);
    release(o, s2[0]);
    /* Before the loop runs again, s2 (the most recent) gets bytes out of turn: s1 is taken. */
    assert_int_equal(send(s2[1], "HTTP/1.1 200 OK\r\n", 17, 0), 17);
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), s1[0]);
    assert_int_equal(upool_take_idle(o), -1);
    assert_false(peer_sees_open(s2[1])); /* closed (reset: it had unread bytes) */
    release(o, -1);
    /* An EOF not yet seen by the loop: not taken either. */
    o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    release(o, s3[0]);
    close(s3[1]);
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), -1);
    release(o, -1);
    close(s1[0]);
    close(s1[1]);
    close(s2[1]);
}

static void test_upool_release_beyond_keepalive_closes_fd(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int sp[3][2];
    f->cfg->max_per_origin = 4;
    f->cfg->keepalive = 2;
    struct origin *o = upool_origin(f->pool, &a);
    for (int i = 0; i < 3; i++) {
        pair(sp[i]);
        assert_true(upool_slot_try(o));
    }
    for (int i = 0; i < 3; i++)
        release(o, sp[i][0]);
    assert_true(peer_sees_open(sp[0][1]));
    assert_true(peer_sees_open(sp[1][1]));
    assert_true(peer_sees_eof(sp[2][1])); /* the pool was full: closed at once */
    assert_true(upool_slot_try(o));
    int t1 = upool_take_idle(o), t2 = upool_take_idle(o);
    assert_int_equal(upool_take_idle(o), -1);
    assert_true((t1 == sp[0][0] && t2 == sp[1][0]) || (t1 == sp[1][0] && t2 == sp[0][0]));
    release(o, -1);
    close(sp[0][0]);
    close(sp[1][0]);
    for (int i = 0; i < 3; i++)
        close(sp[i][1]);
}

static void test_upool_release_keepalive_zero_closes_fd(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int sp[2];
    pair(sp);
    f->cfg->keepalive = 0;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    size_t mark = g_n_freed;
    release(o, sp[0]);
    assert_true(peer_sees_eof(sp[1]));
    assert_true(freed_since(mark, o));
    close(sp[1]);
}

static void test_upool_release_idle_closed_when_peer_writes(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int sp[2];
    pair(sp);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    release(o, sp[0]);
    size_t mark = g_n_freed;
    /* An origin speaking out of turn on an idle connection makes it unusable. */
    assert_int_equal(send(sp[1], "HTTP/1.1 408 x\r\n\r\n", 18, 0), 18);
    RUN_UNTIL(f, peer_sees_eof(sp[1]));
    /* The socket was its last use: the origin went with it. */
    assert_true(freed_since(mark, o));
    o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), -1);
    release(o, -1);
    close(sp[1]);
}

static void test_upool_release_idle_closed_when_peer_closes(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int s1[2], s2[2];
    pair(s1);
    pair(s2);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    release(o, s1[0]);
    release(o, s2[0]);
    size_t mark = g_n_freed;
    close(s1[1]); /* the origin closes one idle connection */
    RUN_UNTIL(f, g_n_freed > mark);
    run_iterations(f, 2);
    assert_false(freed_since(mark, o)); /* the other idle socket keeps it */
    assert_true(upool_slot_try(o));
    assert_int_equal(upool_take_idle(o), s2[0]);
    assert_int_equal(upool_take_idle(o), -1);
    release(o, -1);
    close(s2[0]);
    close(s2[1]);
}

static void test_upool_release_fd_with_waiter_hands_slot_and_socket(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    struct upool_wait w;
    int sp[2];
    pair(sp);
    memset(&g_grants, 0, sizeof(g_grants));
    memset(&w, 0, sizeof(w));
    f->cfg->max_per_origin = 1;
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    wait_for(o, &w);
    release(o, sp[0]);
    assert_int_equal(g_grants.n, 0);
    RUN_UNTIL(f, g_grants.n == 1);
    /* The waiter now holds the slot and reuses the socket just given back. */
    assert_int_equal(upool_take_idle(o), sp[0]);
    release(o, -1);
    close(sp[0]);
    close(sp[1]);
}

static void test_upool_drain_closes_idle_and_refuses_new(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80);
    int s1[2], s2[2];
    pair(s1);
    pair(s2);
    struct origin *o = upool_origin(f->pool, &a);
    assert_true(upool_slot_try(o));
    assert_true(upool_slot_try(o));
    release(o, s1[0]);
    upool_drain(f->pool);
    assert_true(peer_sees_eof(s1[1]));
    /* Still held: this slot's socket is closed on release instead of kept. */
    size_t mark = g_n_freed;
    release(o, s2[0]);
    assert_false(peer_sees_open(s2[1])); /* closed (reset: it had unread bytes) */
    assert_true(freed_since(mark, o));
    close(s1[1]);
    close(s2[1]);
}

static void test_upool_free_closes_idle_sockets(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a = addr4("192.0.2.1", 80), b = addr6("2001:db8::2", 443);
    int s1[2], s2[2];
    pair(s1);
    pair(s2);
    struct origin *oa = upool_origin(f->pool, &a);
    struct origin *ob = upool_origin(f->pool, &b);
    assert_true(upool_slot_try(oa));
    assert_true(upool_slot_try(ob));
    release(oa, s1[0]);
    release(ob, s2[0]);
    (void)upool_origin(f->pool, &(struct sockaddr_storage){.ss_family = AF_INET}); /* unused */
    size_t mark = g_n_freed;
    upool_free(&f->pool);
    assert_null(f->pool);
    assert_true(freed_since(mark, oa));
    assert_true(freed_since(mark, ob));
    assert_true(peer_sees_eof(s1[1]));
    assert_false(peer_sees_open(s2[1])); /* closed (reset: it had unread bytes) */
    close(s1[1]);
    close(s2[1]);
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_upool_origin_same_address_same_origin),
        FX(test_upool_origin_many_addresses_distinct),
        FX(test_upool_slot_try_up_to_max_per_origin),
        FX(test_upool_release_last_slot_frees_origin),
        FX(test_upool_wait_fifo_granted_in_order_deferred),
        FX(test_upool_slot_try_refused_while_waiters_queued),
        FX(test_upool_wait_with_free_slot_granted_deferred),
        FX(test_upool_wait_cancel_queued_returns_false),
        FX(test_upool_wait_cancel_after_grant_returns_true),
        FX(test_upool_wait_cancel_granted_middle_keeps_others),
        FX(test_upool_release_after_limit_raised_grants_all_free_slots),
        FX(test_upool_wait_callback_releasing_serves_next),
        FX(test_upool_release_fd_kept_idle_and_taken),
        FX(test_upool_take_idle_most_recent_first),
        FX(test_upool_take_idle_skips_socket_with_unread_bytes_or_eof),
        FX(test_upool_release_beyond_keepalive_closes_fd),
        FX(test_upool_release_keepalive_zero_closes_fd),
        FX(test_upool_release_idle_closed_when_peer_writes),
        FX(test_upool_release_idle_closed_when_peer_closes),
        FX(test_upool_release_fd_with_waiter_hands_slot_and_socket),
        FX(test_upool_drain_closes_idle_and_refuses_new),
        FX(test_upool_free_closes_idle_sockets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
