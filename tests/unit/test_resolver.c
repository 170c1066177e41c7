/* LDFLAGS: -Wl,--wrap=util_now_ms */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_resolver: resolver_addr_is_private() over address tables, address health (dead marks,
 * the failover order, with the time passed in or the wrapped clock), and the c-ares resolver on a
 * real libev loop against a tiny DNS responder written here (a UDP socket on 127.0.0.1:0 served
 * by an ev_io watcher on the same loop). The responder knows a few names, counts the questions it
 * gets, answers with a chosen TTL, and can hold its answers to keep queries pending.
 * util_now_ms() is wrapped (--wrap) so that cache expiry is tested by moving a clock offset,
 * never by sleeping. The loop is driven with ev_run(EVRUN_ONCE) in bounded loops; a repeating
 * tick timer bounds each iteration.
 */
#include "resolver.h"

#include <arpa/inet.h>
#include <ctype.h>
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
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "config.h"
#include "log.h"
#include "stats.h"
#include "util.h"

/* ---- clock: util_now_ms() as the resolver sees it ---- */

static uint64_t g_clock_offset_ms;

uint64_t __real_util_now_ms(void);
uint64_t __wrap_util_now_ms(void);

uint64_t __wrap_util_now_ms(void)
{
    return __real_util_now_ms() + g_clock_offset_ms;
}

/* ---- resolver_addr_is_private ---- */

struct addr_case {
    const char *ip;
    bool is_private;
};

static void check_addr_cases(const struct addr_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof(ss));
        if (strchr(c[i].ip, ':') != NULL) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            s6->sin6_family = AF_INET6;
            s6->sin6_port = htons(80);
            assert_int_equal(inet_pton(AF_INET6, c[i].ip, &s6->sin6_addr), 1);
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            s4->sin_family = AF_INET;
            s4->sin_port = htons(80);
            assert_int_equal(inet_pton(AF_INET, c[i].ip, &s4->sin_addr), 1);
        }
        bool got = resolver_addr_is_private((const struct sockaddr *)&ss);
        if (got != c[i].is_private)
            fail_msg("%s: is_private %d, want %d", c[i].ip, got, c[i].is_private);
    }
}

static void test_resolver_addr_is_private_v4_table(void **state)
{
    static const struct addr_case c[] = {
        /* public */
        {"8.8.8.8", false},
        {"1.1.1.1", false},
        {"93.184.216.34", false},
        {"9.255.255.255", false},
        {"11.0.0.0", false},
        {"100.63.255.255", false},
        {"100.128.0.0", false},
        {"126.255.255.255", false},
        {"128.0.0.0", false},
        {"169.253.255.255", false},
        {"169.255.0.0", false},
        {"172.15.255.255", false},
        {"172.32.0.0", false},
        {"192.167.255.255", false},
        {"192.169.0.0", false},
        {"223.255.255.255", false},
        /* private and special-purpose */
        {"0.0.0.0", true},
        {"0.1.2.3", true},
        {"10.0.0.0", true},
        {"10.0.0.1", true},
        {"10.255.255.255", true},
        {"100.64.0.0", true},
        {"100.64.0.1", true},
        {"100.127.255.255", true},
        {"127.0.0.1", true},
        {"127.255.255.254", true},
        {"169.254.0.1", true},
        {"169.254.169.254", true},
        {"172.16.0.1", true},
        {"172.20.1.1", true},
        {"172.31.255.255", true},
        {"192.0.0.8", true},
        {"192.0.2.1", true},
        {"192.88.99.1", true},
        {"192.168.0.1", true},
        {"192.168.255.255", true},
        {"198.18.0.1", true},
        {"198.19.255.255", true},
        {"198.51.100.7", true},
        {"203.0.113.9", true},
        {"224.0.0.1", true},
        {"239.255.255.250", true},
        {"240.0.0.1", true},
        {"255.255.255.255", true},
    };
    (void)state;
    check_addr_cases(c, ARRAY_SIZE(c));
}

static void test_resolver_addr_is_private_v6_table(void **state)
{
    static const struct addr_case c[] = {
        /* public */
        {"2606:4700::1111", false},
        {"2001:4860:4860::8888", false},
        {"2a00:1450:4001:80b::200e", false},
        {"::ffff:8.8.8.8", false},
        {"64:ff9b::808:808", false},
        {"2002:808:808::1", false},
        /* private and special-purpose */
        {"::", true},
        {"::1", true},
        {"fc00::1", true},
        {"fd12:3456:789a::1", true},
        {"fe80::1", true},
        {"febf::1", true},
        {"fec0::1", true},
        {"ff02::1", true},
        {"ff05::1:3", true},
        {"::ffff:10.0.0.1", true},
        {"::ffff:127.0.0.1", true},
        {"::ffff:192.168.1.1", true},
        {"::ffff:169.254.169.254", true},
        {"::ffff:0.0.0.0", true},
        {"::10.0.0.1", true},
        {"::8.8.8.8", true},
        {"64:ff9b::a00:1", true},
        {"64:ff9b::7f00:1", true},
        {"64:ff9b:1::a00:1", true},
        {"2001:db8::1", true},
        {"2002:a00:1::1", true},
        {"2002:c0a8:101::1", true},
        {"100::1", true},
    };
    (void)state;
    check_addr_cases(c, ARRAY_SIZE(c));
}

static void test_resolver_addr_is_private_other_family_true(void **state)
{
    struct sockaddr_un su;
    (void)state;
    memset(&su, 0, sizeof(su));
    su.sun_family = AF_UNIX;
    assert_true(resolver_addr_is_private((const struct sockaddr *)&su));
}

static void set_v4(struct sockaddr_storage *ss, const char *ip)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof(*ss));
    s4->sin_family = AF_INET;
    s4->sin_port = htons(80);
    assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
}

static void test_resolver_acceptable_drops_private_keeps_order(void **state)
{
    struct sockaddr_storage a[4], out[4];
    (void)state;
    set_v4(&a[0], "10.0.0.1");
    set_v4(&a[1], "93.184.216.34");
    set_v4(&a[2], "127.0.0.1");
    set_v4(&a[3], "8.8.8.8");
    assert_int_equal(resolver_acceptable(a, 4, false, out), 2);
    assert_memory_equal(&out[0], &a[1], sizeof(a[0]));
    assert_memory_equal(&out[1], &a[3], sizeof(a[0]));
    assert_int_equal(resolver_acceptable(a, 4, true, out), 4); /* allow_private: all, in order */
    assert_memory_equal(out, a, sizeof(a));
    assert_int_equal(resolver_acceptable(a, 1, false, out), 0); /* only private */
    assert_int_equal(resolver_acceptable(a, 1, true, out), 1);
    assert_int_equal(resolver_acceptable(a, 0, true, out), 0);
}

/* ---- a tiny DNS responder ---- */

#define SRV_MAX_SEEN 64
#define SRV_MAX_HELD 16

struct held_query {
    unsigned char pkt[512];
    size_t len;
    struct sockaddr_storage from;
    socklen_t fromlen;
};

struct dns_srv {
    int fd;
    uint16_t port;
    ev_io io;
    struct ev_loop *loop;
    uint32_t ttl;    /* TTL of every answer */
    bool hold;       /* keep questions unanswered until srv_release() */
    unsigned n_pkts; /* every question received */
    struct {
        char name[256];
        uint16_t type;
    } seen[SRV_MAX_SEEN];
    unsigned n_seen;
    struct held_query held[SRV_MAX_HELD];
    unsigned n_held;
};

#define T_A 1
#define T_AAAA 28

/* How many questions for <name> of <type> arrived. */
static unsigned srv_count(const struct dns_srv *s, const char *name, uint16_t type)
{
    unsigned n = 0;
    for (unsigned i = 0; i < s->n_seen && i < SRV_MAX_SEEN; i++)
        if (s->seen[i].type == type && strcmp(s->seen[i].name, name) == 0)
            n++;
    return n;
}

static size_t put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
    return 2;
}

static size_t put_rr(unsigned char *p, uint16_t type, uint32_t ttl, const void *rdata,
                     uint16_t rdlen)
{
    size_t o = 0;
    o += put16(p + o, 0xc00c); /* the question's name */
    o += put16(p + o, type);
    o += put16(p + o, 1); /* IN */
    o += put16(p + o, (uint16_t)(ttl >> 16));
    o += put16(p + o, (uint16_t)ttl);
    o += put16(p + o, rdlen);
    memcpy(p + o, rdata, rdlen);
    return o + rdlen;
}

/*
 * The zone:
 *   ok.test, ok2.test, slow.test   A 127.0.0.1
 *   mixed.test                     A 127.0.0.2, AAAA ::2
 *   v6only.test                    AAAA ::1 (A: no data)
 *   public.test                    A 10.0.0.1, AAAA 2606:4700::1111 (a private and a public one)
 *   multi.test                     A 127.0.0.1, A 127.0.0.2, AAAA ::1
 *   pubmulti.test                  A 10.0.0.1, A 93.184.216.34, AAAA 2606:4700::1111
 *   nodata.test                    no data for either type
 *   fail.test                      SERVFAIL
 *   anything else                  NXDOMAIN
 */
static void srv_answer(struct dns_srv *s, const unsigned char *q, size_t qlen,
                       const struct sockaddr *from, socklen_t fromlen)
{
    unsigned char r[512];
    char name[256];
    size_t nl = 0, off = 12;

    if (qlen < 12 || qlen > 400)
        return;
    while (off < qlen && q[off] != 0) {
        size_t l = q[off++];
        if (l > 63 || off + l > qlen || nl + l + 2 > sizeof(name))
            return;
        if (nl > 0)
            name[nl++] = '.';
        for (size_t i = 0; i < l; i++)
            name[nl++] = (char)tolower(q[off + i]);
        off += l;
    }
    name[nl] = '\0';
    off++;
    if (off + 4 > qlen)
        return;
    uint16_t type = (uint16_t)(q[off] << 8 | q[off + 1]);
    off += 4;
    if (s->n_seen < SRV_MAX_SEEN) {
        snprintf(s->seen[s->n_seen].name, sizeof(s->seen[0].name), "%s", name);
        s->seen[s->n_seen].type = type;
    }
    s->n_seen++;

    static const unsigned char a1[4] = {127, 0, 0, 1}, a2[4] = {127, 0, 0, 2};
    static const unsigned char six1[16] = {[15] = 1}, six2[16] = {[15] = 2};
    int rcode = 0;
    size_t o = off;
    unsigned an = 0;
    memcpy(r, q, off);
    if (strcmp(name, "ok.test") == 0 || strcmp(name, "ok2.test") == 0 ||
        strcmp(name, "slow.test") == 0) {
        if (type == T_A) {
            o += put_rr(r + o, T_A, s->ttl, a1, 4);
            an++;
        }
    } else if (strcmp(name, "mixed.test") == 0) {
        if (type == T_A) {
            o += put_rr(r + o, T_A, s->ttl, a2, 4);
            an++;
        } else if (type == T_AAAA) {
            o += put_rr(r + o, T_AAAA, s->ttl, six2, 16);
            an++;
        }
    } else if (strcmp(name, "public.test") == 0) {
        static const unsigned char ten[4] = {10, 0, 0, 1};
        static const unsigned char pub6[16] = {0x26, 0x06, 0x47, 0x00, [14] = 0x11, [15] = 0x11};
        if (type == T_A) {
            o += put_rr(r + o, T_A, s->ttl, ten, 4);
            an++;
        } else if (type == T_AAAA) {
            o += put_rr(r + o, T_AAAA, s->ttl, pub6, 16);
            an++;
        }
    } else if (strcmp(name, "multi.test") == 0) {
        if (type == T_A) {
            o += put_rr(r + o, T_A, s->ttl, a1, 4);
            o += put_rr(r + o, T_A, s->ttl, a2, 4);
            an += 2;
        } else if (type == T_AAAA) {
            o += put_rr(r + o, T_AAAA, s->ttl, six1, 16);
            an++;
        }
    } else if (strcmp(name, "pubmulti.test") == 0) {
        static const unsigned char ten[4] = {10, 0, 0, 1}, pub[4] = {93, 184, 216, 34};
        static const unsigned char pub6[16] = {0x26, 0x06, 0x47, 0x00, [14] = 0x11, [15] = 0x11};
        if (type == T_A) {
            o += put_rr(r + o, T_A, s->ttl, ten, 4);
            o += put_rr(r + o, T_A, s->ttl, pub, 4);
            an += 2;
        } else if (type == T_AAAA) {
            o += put_rr(r + o, T_AAAA, s->ttl, pub6, 16);
            an++;
        }
    } else if (strcmp(name, "v6only.test") == 0) {
        if (type == T_AAAA) {
            o += put_rr(r + o, T_AAAA, s->ttl, six1, 16);
            an++;
        }
    } else if (strcmp(name, "nodata.test") == 0) {
        /* NOERROR, no answers */
    } else if (strcmp(name, "fail.test") == 0) {
        rcode = 2;
    } else {
        rcode = 3;
    }
    r[2] = (unsigned char)(0x80 | (q[2] & 0x01)); /* QR, RD as asked */
    r[3] = (unsigned char)(0x80 | rcode);         /* RA */
    put16(r + 4, 1);
    put16(r + 6, (uint16_t)an);
    put16(r + 8, 0);
    put16(r + 10, 0);
    (void)sendto(s->fd, r, o, 0, from, fromlen);
}

static void srv_release(struct dns_srv *s)
{
    for (unsigned i = 0; i < s->n_held; i++)
        srv_answer(s, s->held[i].pkt, s->held[i].len, (struct sockaddr *)&s->held[i].from,
                   s->held[i].fromlen);
    s->n_held = 0;
    s->hold = false;
}

static void on_srv_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    struct dns_srv *s = container_of(w, struct dns_srv, io);
    (void)loop;
    (void)revents;
    for (;;) {
        struct held_query hq;
        hq.fromlen = sizeof(hq.from);
        ssize_t n =
            recvfrom(s->fd, hq.pkt, sizeof(hq.pkt), 0, (struct sockaddr *)&hq.from, &hq.fromlen);
        if (n <= 0)
            return;
        hq.len = (size_t)n;
        s->n_pkts++;
        if (s->hold && s->n_held < SRV_MAX_HELD)
            s->held[s->n_held++] = hq;
        else
            srv_answer(s, hq.pkt, hq.len, (struct sockaddr *)&hq.from, hq.fromlen);
    }
}

static void srv_start(struct dns_srv *s, struct ev_loop *loop)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->ttl = 300;
    s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(s->fd >= 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&sin, &sl), 0);
    s->port = ntohs(sin.sin_port);
    ev_io_init(&s->io, on_srv_readable, s->fd, EV_READ);
    ev_io_start(loop, &s->io);
}

static void srv_stop(struct dns_srv *s)
{
    ev_io_stop(s->loop, &s->io);
    close(s->fd);
}

/* ---- fixture ---- */

struct fx {
    struct ev_loop *loop;
    struct dns_srv srv;
    struct config *cfg;
    struct resolver *r;
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
    char text[256], err[256];
    g_log_level = CFG_LOG_ERROR;
    g_clock_offset_ms = 0;
    memset(&g_stats, 0, sizeof(g_stats));
    f->loop = ev_loop_new(EVFLAG_AUTO);
    assert_non_null(f->loop);
    srv_start(&f->srv, f->loop);
    snprintf(text, sizeof(text), "[server]\nlisten=127.0.0.1:1\n[upstream]\ndns = 127.0.0.1:%u\n",
             f->srv.port);
    if (config_load_string("t", text, &f->cfg, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    g_cfg = f->cfg;
    f->r = resolver_new(f->loop, f->cfg, err, sizeof(err));
    if (f->r == NULL)
        fail_msg("resolver_new: %s", err);
    ev_timer_init(&f->tick, on_tick, 0.02, 0.02);
    ev_timer_start(f->loop, &f->tick);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    resolver_free(&f->r);
    assert_null(f->r);
    ev_timer_stop(f->loop, &f->tick);
    srv_stop(&f->srv);
    ev_loop_destroy(f->loop);
    g_cfg = NULL;
    config_free(&f->cfg);
    free(f);
    return 0;
}

/* Runs the loop until <cond> holds, at most ~500 iterations (each bounded by the tick). */
#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        for (int it_ = 0; !(cond) && it_ < 500; it_++)                                             \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        if (!(cond))                                                                               \
            fail_msg("loop never reached: %s", #cond);                                             \
    } while (0)

/* Runs <n> loop iterations (to show that something does NOT happen). */
static void run_iterations(struct fx *f, int n)
{
    for (int i = 0; i < n; i++)
        ev_run(f->loop, EVRUN_ONCE);
}

/* ---- query results ---- */

static bool g_in_query; /* true while resolver_query() runs */

struct res {
    int fired;
    bool sync; /* fired inside resolver_query() */
    int err;
    size_t n;
    struct sockaddr_storage addrs[RESOLVER_MAX_ADDRS];
};

static void on_res(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct res *r = arg;
    r->fired++;
    r->sync |= g_in_query;
    r->err = err;
    r->n = n;
    assert_true(n <= RESOLVER_MAX_ADDRS);
    if (n > 0)
        memcpy(r->addrs, addrs, n * sizeof(addrs[0]));
}

static struct resolver_query *query(struct fx *f, const char *host, uint16_t port, struct res *r)
{
    g_in_query = true;
    struct resolver_query *q = resolver_query(f->r, host, port, on_res, r);
    g_in_query = false;
    assert_non_null(q);
    assert_int_equal(r->fired, 0);
    return q;
}

static void assert_v4(const struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
    char buf[INET_ADDRSTRLEN];
    assert_int_equal(ss->ss_family, AF_INET);
    assert_non_null(inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof(buf)));
    assert_string_equal(buf, ip);
    assert_int_equal(ntohs(s4->sin_port), port);
}

static void assert_v6(const struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    char buf[INET6_ADDRSTRLEN];
    assert_int_equal(ss->ss_family, AF_INET6);
    assert_non_null(inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof(buf)));
    assert_string_equal(buf, ip);
    assert_int_equal(ntohs(s6->sin6_port), port);
}

/* ---- resolver_query ---- */

static void test_resolver_query_resolves_with_port(void **state)
{
    struct fx *f = *state;
    struct res r = {0};
    query(f, "ok.test", 8080, &r);
    RUN_UNTIL(f, r.fired > 0);
    assert_int_equal(r.fired, 1);
    assert_false(r.sync);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.n, 1);
    assert_v4(&r.addrs[0], "127.0.0.1", 8080);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    assert_int_equal(g_stats.dns_queries, 1);
    assert_int_equal(g_stats.dns_failures, 0);
    /* Exactly once: more loop iterations deliver nothing else. */
    run_iterations(f, 3);
    assert_int_equal(r.fired, 1);
}

static void test_resolver_query_ipv4_first(void **state)
{
    struct fx *f = *state;
    struct res r = {0};
    query(f, "mixed.test", 80, &r);
    RUN_UNTIL(f, r.fired > 0);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.n, 2);
    assert_v4(&r.addrs[0], "127.0.0.2", 80);
    assert_v6(&r.addrs[1], "::2", 80);
}

static void test_resolver_query_v6_only_name(void **state)
{
    struct fx *f = *state;
    struct res r = {0};
    query(f, "v6only.test", 443, &r);
    RUN_UNTIL(f, r.fired > 0);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.n, 1);
    assert_v6(&r.addrs[0], "::1", 443);
}

static void test_resolver_query_concurrent_same_name_coalesced(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0}, c = {0}, d = {0};
    query(f, "ok.test", 80, &a);
    query(f, "ok.test", 81, &b);
    RUN_UNTIL(f, a.fired > 0 && b.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    assert_int_equal(g_stats.dns_queries, 1);
    assert_int_equal(a.err, 0);
    assert_int_equal(b.err, 0);
    assert_v4(&a.addrs[0], "127.0.0.1", 80);
    assert_v4(&b.addrs[0], "127.0.0.1", 81);

    /* A third one joining while the DNS answer is held also shares the single question. */
    f->srv.hold = true;
    query(f, "ok2.test", 82, &c);
    RUN_UNTIL(f, f->srv.n_held > 0);
    query(f, "ok2.test", 83, &d);
    srv_release(&f->srv);
    RUN_UNTIL(f, c.fired > 0 && d.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok2.test", T_A), 1);
    assert_int_equal(d.err, 0);
    assert_v4(&c.addrs[0], "127.0.0.1", 82);
    assert_v4(&d.addrs[0], "127.0.0.1", 83);
}

static void test_resolver_query_cached_no_new_dns_query_and_deferred(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0};
    query(f, "ok.test", 80, &a);
    RUN_UNTIL(f, a.fired > 0);
    unsigned pkts = f->srv.n_pkts;
    uint64_t hits = g_stats.dns_cache_hits;

    query(f, "ok.test", 443, &b); /* asserts b did not fire before returning */
    assert_int_equal(b.fired, 0);
    RUN_UNTIL(f, b.fired > 0);
    assert_int_equal(b.fired, 1);
    assert_false(b.sync);
    assert_int_equal(b.err, 0);
    assert_int_equal(b.n, 1);
    assert_v4(&b.addrs[0], "127.0.0.1", 443);
    assert_int_equal(f->srv.n_pkts, pkts);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    assert_int_equal(g_stats.dns_cache_hits, hits + 1);
    assert_int_equal(g_stats.dns_queries, 1);
}

static void test_resolver_query_nxdomain_enoent_negatively_cached(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0}, c = {0};
    query(f, "nx.test", 80, &a);
    RUN_UNTIL(f, a.fired > 0);
    assert_int_equal(a.err, -ENOENT);
    assert_int_equal(a.n, 0);
    assert_int_equal(g_stats.dns_failures, 1);
    unsigned asked = srv_count(&f->srv, "nx.test", T_A);
    assert_true(asked >= 1);

    /* Within RESOLVER_NEG_TTL_MS: the failure comes from the cache. */
    g_clock_offset_ms = RESOLVER_NEG_TTL_MS - 500;
    query(f, "nx.test", 80, &b);
    RUN_UNTIL(f, b.fired > 0);
    assert_int_equal(b.err, -ENOENT);
    assert_int_equal(srv_count(&f->srv, "nx.test", T_A), asked);

    /* After it: asked again. */
    g_clock_offset_ms = RESOLVER_NEG_TTL_MS + 500;
    query(f, "nx.test", 80, &c);
    RUN_UNTIL(f, c.fired > 0);
    assert_int_equal(c.err, -ENOENT);
    assert_true(srv_count(&f->srv, "nx.test", T_A) > asked);
}

static void test_resolver_query_no_data_enoent(void **state)
{
    struct fx *f = *state;
    struct res r = {0};
    query(f, "nodata.test", 80, &r);
    RUN_UNTIL(f, r.fired > 0);
    assert_int_equal(r.err, -ENOENT);
    assert_int_equal(r.n, 0);
}

static void test_resolver_query_servfail_eio(void **state)
{
    struct fx *f = *state;
    struct res r = {0};
    query(f, "fail.test", 80, &r);
    RUN_UNTIL(f, r.fired > 0);
    assert_int_equal(r.fired, 1);
    assert_int_equal(r.err, -EIO);
    assert_int_equal(r.n, 0);
}

static void test_resolver_query_expired_entry_queries_again(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0}, c = {0};
    f->srv.ttl = 5;
    query(f, "ok.test", 80, &a);
    RUN_UNTIL(f, a.fired > 0);
    g_clock_offset_ms = 4000;
    query(f, "ok.test", 80, &b);
    RUN_UNTIL(f, b.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    g_clock_offset_ms = 6000;
    query(f, "ok.test", 80, &c);
    RUN_UNTIL(f, c.fired > 0);
    assert_int_equal(c.err, 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 2);
    assert_int_equal(g_stats.dns_queries, 2);
}

static void test_resolver_query_zero_ttl_cached_one_second(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0}, c = {0};
    f->srv.ttl = 0;
    query(f, "ok.test", 80, &a);
    RUN_UNTIL(f, a.fired > 0);
    g_clock_offset_ms = 500;
    query(f, "ok.test", 80, &b);
    RUN_UNTIL(f, b.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    g_clock_offset_ms = 1500;
    query(f, "ok.test", 80, &c);
    RUN_UNTIL(f, c.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 2);
}

/* Answers <name> with <ttl>, then checks it is still cached 10 s later and expired after 1 h. */
static void check_long_ttl_clamped_to_one_hour(struct fx *f, uint32_t ttl)
{
    struct res a = {0}, b = {0}, c = {0};
    f->srv.ttl = ttl;
    query(f, "ok.test", 80, &a);
    RUN_UNTIL(f, a.fired > 0);
    assert_int_equal(a.err, 0);
    g_clock_offset_ms = 10 * 1000;
    query(f, "ok.test", 80, &b);
    RUN_UNTIL(f, b.fired > 0);
    if (srv_count(&f->srv, "ok.test", T_A) != 1)
        fail_msg("an answer with TTL %u s was not cached for 10 s", (unsigned)ttl);
    g_clock_offset_ms = 3601 * 1000;
    query(f, "ok.test", 80, &c);
    RUN_UNTIL(f, c.fired > 0);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 2);
}

static void test_resolver_query_one_day_ttl_cached_one_hour(void **state)
{
    check_long_ttl_clamped_to_one_hour(*state, 86400);
}

/*
 * resolver.h: TTLs are clamped to 1 s .. 1 h. A TTL above INT_MAX / 1000 s (24.8 days; still a
 * valid 31-bit DNS TTL, e.g. 3000000 s) must be cached for the full hour too.
 */
static void test_resolver_query_ttl_over_24_days_cached_one_hour(void **state)
{
    check_long_ttl_clamped_to_one_hour(*state, 3000000);
}

static void test_resolver_query_distinct_names_independent(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0};
    query(f, "ok.test", 80, &a);
    query(f, "nx.test", 80, &b);
    RUN_UNTIL(f, a.fired > 0 && b.fired > 0);
    assert_int_equal(a.err, 0);
    assert_int_equal(b.err, -ENOENT);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
    assert_true(srv_count(&f->srv, "nx.test", T_A) >= 1);
}

/* A callback that starts a query for a cached name: it fires later, not inside this one. */
struct chain {
    struct fx *f;
    struct res first;
    struct res second;
    bool second_fired_in_first;
};

static void on_chain_second(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct chain *c = arg;
    on_res(&c->second, err, addrs, n);
}

static void on_chain_first(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct chain *c = arg;
    on_res(&c->first, err, addrs, n);
    struct resolver_query *q = resolver_query(c->f->r, "ok.test", 9, on_chain_second, c);
    assert_non_null(q);
    c->second_fired_in_first = c->second.fired > 0;
}

static void test_resolver_query_from_callback_is_deferred(void **state)
{
    struct fx *f = *state;
    struct chain c = {.f = f};
    struct res warm = {0};
    query(f, "ok.test", 80, &warm);
    RUN_UNTIL(f, warm.fired > 0);
    g_in_query = true;
    assert_non_null(resolver_query(f->r, "ok.test", 80, on_chain_first, &c));
    g_in_query = false;
    RUN_UNTIL(f, c.second.fired > 0);
    assert_int_equal(c.first.fired, 1);
    assert_false(c.first.sync);
    assert_false(c.second_fired_in_first);
    assert_int_equal(c.second.err, 0);
    assert_v4(&c.second.addrs[0], "127.0.0.1", 9);
    assert_int_equal(srv_count(&f->srv, "ok.test", T_A), 1);
}

/* ---- resolver_cancel ---- */

static void test_resolver_cancel_pending_never_fires(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0};
    f->srv.hold = true;
    struct resolver_query *q = query(f, "slow.test", 80, &a);
    RUN_UNTIL(f, f->srv.n_held > 0);
    resolver_cancel(&q);
    assert_null(q);
    /* A second waiter of the same entry shows when the answer has been processed. */
    query(f, "slow.test", 81, &b);
    srv_release(&f->srv);
    RUN_UNTIL(f, b.fired > 0);
    run_iterations(f, 3);
    assert_int_equal(a.fired, 0);
    assert_int_equal(b.fired, 1);
    assert_int_equal(b.err, 0);
    assert_int_equal(srv_count(&f->srv, "slow.test", T_A), 1);
}

static void test_resolver_cancel_only_waiter_then_entry_still_cached(void **state)
{
    struct fx *f = *state;
    struct res a = {0}, b = {0}, other = {0};
    f->srv.hold = true;
    struct resolver_query *q = query(f, "slow.test", 80, &a);
    RUN_UNTIL(f, f->srv.n_held > 0);
    resolver_cancel(&q);
    srv_release(&f->srv);
    /* Another name's answer comes after slow.test's: once it fired, slow.test's was processed. */
    query(f, "ok2.test", 80, &other);
    RUN_UNTIL(f, other.fired > 0);
    run_iterations(f, 2);
    assert_int_equal(a.fired, 0);
    unsigned asked = srv_count(&f->srv, "slow.test", T_A);
    query(f, "slow.test", 80, &b);
    RUN_UNTIL(f, b.fired > 0);
    assert_int_equal(b.err, 0);
    assert_int_equal(srv_count(&f->srv, "slow.test", T_A), asked);
}

static void test_resolver_cancel_ready_queries_keeps_list(void **state)
{
    struct fx *f = *state;
    struct res warm = {0}, a = {0}, b = {0}, c = {0}, d = {0};
    query(f, "ok.test", 80, &warm);
    RUN_UNTIL(f, warm.fired > 0);
    /* Cache hits wait on the ready list: cancel the head and the tail, then append. */
    struct resolver_query *qa = query(f, "ok.test", 1, &a);
    struct resolver_query *qb = query(f, "ok.test", 2, &b);
    struct resolver_query *qc = query(f, "ok.test", 3, &c);
    resolver_cancel(&qa);
    resolver_cancel(&qc);
    assert_null(qa);
    assert_null(qc);
    query(f, "ok.test", 4, &d);
    RUN_UNTIL(f, b.fired > 0 && d.fired > 0);
    run_iterations(f, 2);
    assert_int_equal(a.fired, 0);
    assert_int_equal(c.fired, 0);
    assert_int_equal(b.fired, 1);
    assert_int_equal(d.fired, 1);
    assert_v4(&b.addrs[0], "127.0.0.1", 2);
    assert_v4(&d.addrs[0], "127.0.0.1", 4);
    (void)qb;
}

static void test_resolver_cancel_null_is_noop(void **state)
{
    struct resolver_query *q = NULL;
    (void)state;
    resolver_cancel(&q);
    assert_null(q);
}

/* ---- resolver_free ---- */

static void test_resolver_free_with_pending_queries_no_callbacks(void **state)
{
    struct fx *f = *state;
    struct res warm = {0}, a = {0}, b = {0}, c = {0};
    query(f, "ok.test", 80, &warm);
    RUN_UNTIL(f, warm.fired > 0);
    f->srv.hold = true;
    query(f, "slow.test", 80, &a); /* waiting for DNS */
    query(f, "slow.test", 81, &b); /* coalesced with it */
    RUN_UNTIL(f, f->srv.n_held > 0);
    query(f, "ok.test", 82, &c); /* cache hit on the ready list */
    resolver_free(&f->r);
    assert_null(f->r);
    srv_release(&f->srv);
    run_iterations(f, 3);
    assert_int_equal(a.fired, 0);
    assert_int_equal(b.fired, 0);
    assert_int_equal(c.fired, 0);
}

static void test_resolver_free_null_is_noop(void **state)
{
    struct resolver *r = NULL;
    (void)state;
    resolver_free(&r);
    assert_null(r);
}

static void test_resolver_new_system_dns_then_free(void **state)
{
    struct fx *f = *state;
    struct config *cfg = NULL;
    char err[256];
    if (config_load_string("t", "[server]\nlisten=127.0.0.1:1\n[upstream]\ndns = system\n", &cfg,
                           err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    struct resolver *r = resolver_new(f->loop, cfg, err, sizeof(err));
    assert_non_null(r);
    resolver_free(&r);
    assert_null(r);
    config_free(&cfg);
}

/* ---- resolver_route ---- */

struct route_res {
    int fired;
    bool sync; /* fired inside resolver_route() */
    int err;
    bool has_addr;
    struct sockaddr_storage addr; /* the first one */
    size_t n;
    struct sockaddr_storage addrs[RESOLVER_MAX_ADDRS];
};

static void on_route(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct route_res *r = arg;
    r->fired++;
    r->sync |= g_in_query;
    r->err = err;
    r->has_addr = addrs != NULL;
    r->n = n;
    assert_true(n <= RESOLVER_MAX_ADDRS);
    assert_true((addrs != NULL) == (n > 0));
    if (addrs != NULL) {
        r->addr = addrs[0];
        memcpy(r->addrs, addrs, n * sizeof(addrs[0]));
    }
}

static struct resolver_query *route(struct fx *f, const char *host, bool is_ip, uint16_t port,
                                    const struct sockaddr_storage *override, bool allow_private,
                                    struct route_res *r)
{
    g_in_query = true;
    struct resolver_query *q =
        resolver_route(f->r, host, is_ip, port, override, allow_private, on_route, r);
    g_in_query = false;
    assert_non_null(q);
    assert_int_equal(r->fired, 0); /* never before it returns */
    return q;
}

/* Delivered once, from the loop, with an address (or none when <err>). */
static void assert_routed(struct fx *f, struct route_res *r, int err)
{
    RUN_UNTIL(f, r->fired > 0);
    run_iterations(f, 2);
    assert_int_equal(r->fired, 1);
    assert_false(r->sync);
    assert_int_equal(r->err, err);
    assert_int_equal(r->has_addr, err == 0);
}

static void test_resolver_route_override_used_as_is_without_dns(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage ov;
    assert_int_equal(resolver_literal("127.0.0.9", 3128, &ov), 0);
    struct route_res r = {0};
    /* private, and allow_private off: the operator's override is not checked */
    route(f, "ok.test", false, 80, &ov, false, &r);
    assert_routed(f, &r, 0);
    assert_v4(&r.addr, "127.0.0.9", 3128);
    assert_int_equal(f->srv.n_pkts, 0);
    assert_int_equal(g_stats.dns_queries, 0);
}

static void test_resolver_route_ip_literal_used_as_is_without_dns(void **state)
{
    struct fx *f = *state;
    struct route_res a = {0}, b = {0};
    route(f, "10.1.2.3", true, 8080, NULL, false, &a);
    route(f, "::1", true, 81, NULL, false, &b);
    assert_routed(f, &a, 0);
    assert_routed(f, &b, 0);
    assert_v4(&a.addr, "10.1.2.3", 8080);
    assert_v6(&b.addr, "::1", 81);
    assert_int_equal(f->srv.n_pkts, 0);
}

/* An answer made ready inside a loop callback (here an IP literal's, ready at once; a cached
 * name's goes the same way) is delivered in that same loop iteration, after the callback returns:
 * a fetch's origin request must not wait for every other client's turn of the next iteration. */
struct asker {
    struct fx *f;
    ev_timer timer;
    struct route_res r;
};

static void on_asker(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct asker *a = container_of(w, struct asker, timer);
    route(a->f, "10.1.2.3", true, 8080, NULL, false, &a->r); /* (asserts: not inside the call) */
}

static void test_resolver_route_from_a_callback_answers_in_the_same_iteration(void **state)
{
    struct fx *f = *state;
    struct asker a = {.f = f};
    ev_timer_init(&a.timer, on_asker, 0., 0.);
    ev_timer_start(f->loop, &a.timer);
    ev_run(f->loop, EVRUN_ONCE); /* one iteration: the asker's timer fires, and the answer */
    assert_int_equal(a.r.fired, 1);
    assert_false(a.r.sync);
    assert_int_equal(a.r.err, 0);
    assert_v4(&a.r.addr, "10.1.2.3", 8080);
}

/* Made ready outside any loop callback (before ev_run, or between two), an answer does not wait
 * for some other event to end the next poll: that iteration returns at once with it. */
static void on_far_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    *(bool *)w->data = true;
}

static void test_resolver_route_outside_the_loop_answers_in_the_next_iteration(void **state)
{
    struct fx *f = *state;
    ev_timer_stop(f->loop, &f->tick); /* the only other watcher: a timer far away */
    bool far_fired = false;
    ev_timer far;
    ev_timer_init(&far, on_far_timer, 10., 0.);
    far.data = &far_fired;
    ev_timer_start(f->loop, &far);
    struct route_res r = {0};
    route(f, "10.1.2.3", true, 8080, NULL, false, &r);
    ev_run(f->loop, EVRUN_ONCE);
    ev_timer_stop(f->loop, &far);
    ev_timer_start(f->loop, &f->tick);
    assert_int_equal(r.fired, 1);
    assert_false(far_fired); /* the iteration did not wait for it */
    assert_v4(&r.addr, "10.1.2.3", 8080);
}

static void test_resolver_route_not_a_literal_einval_deferred(void **state)
{
    struct fx *f = *state;
    struct route_res r = {0};
    route(f, "ok.test", true, 80, NULL, true, &r);
    assert_routed(f, &r, -EINVAL);
    assert_int_equal(f->srv.n_pkts, 0);
}

static void test_resolver_route_private_answer_refused_eacces(void **state)
{
    struct fx *f = *state;
    struct route_res a = {0}, b = {0};
    route(f, "ok.test", false, 80, NULL, false, &a);
    assert_routed(f, &a, -EACCES);
    route(f, "mixed.test", false, 80, NULL, false, &b); /* every address private */
    assert_routed(f, &b, -EACCES);
}

static void test_resolver_route_private_answer_allowed_with_allow_private(void **state)
{
    struct fx *f = *state;
    struct route_res r = {0};
    route(f, "ok.test", false, 8080, NULL, true, &r);
    assert_routed(f, &r, 0);
    assert_v4(&r.addr, "127.0.0.1", 8080);
}

static void test_resolver_route_picks_the_first_public_address(void **state)
{
    struct fx *f = *state;
    struct route_res a = {0}, b = {0};
    route(f, "public.test", false, 80, NULL, false, &a);
    assert_routed(f, &a, 0);
    assert_v6(&a.addr, "2606:4700::1111", 80);
    assert_int_equal(a.n, 1);
    route(f, "public.test", false, 80, NULL, true, &b); /* cached: the first one */
    assert_routed(f, &b, 0);
    assert_v4(&b.addr, "10.0.0.1", 80);
    assert_int_equal(b.n, 2);
}

static void test_resolver_route_dns_failure_passed_on(void **state)
{
    struct fx *f = *state;
    struct route_res a = {0}, b = {0};
    route(f, "nx.test", false, 80, NULL, true, &a);
    assert_routed(f, &a, -ENOENT);
    route(f, "fail.test", false, 80, NULL, true, &b);
    assert_routed(f, &b, -EIO);
}

static void test_resolver_route_cancel_never_fires(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage ov;
    assert_int_equal(resolver_literal("127.0.0.9", 3128, &ov), 0);
    struct route_res a = {0}, b = {0}, c = {0}, d = {0};
    struct resolver_query *qa = route(f, "x.test", false, 80, &ov, false, &a); /* at once */
    struct resolver_query *qb = route(f, "10.0.0.1", true, 80, NULL, false, &b);
    f->srv.hold = true;
    struct resolver_query *qc = route(f, "ok.test", false, 80, NULL, true, &c); /* pending */
    route(f, "10.0.0.2", true, 80, NULL, false, &d);                            /* the one left */
    resolver_cancel(&qa);
    resolver_cancel(&qc);
    assert_null(qa);
    assert_null(qc);
    RUN_UNTIL(f, f->srv.n_held > 0);
    srv_release(&f->srv);
    assert_routed(f, &d, 0);
    assert_routed(f, &b, 0);
    (void)qb; /* delivered: the handle is freed (a caller clears its copy in the callback) */
    run_iterations(f, 5);
    assert_int_equal(a.fired, 0);
    assert_int_equal(c.fired, 0);
}

/* ---- address health and failover order ---- */

static void test_resolver_route_lists_every_address_ipv4_first(void **state)
{
    struct fx *f = *state;
    struct route_res r = {0};
    route(f, "multi.test", false, 8080, NULL, true, &r);
    assert_routed(f, &r, 0);
    assert_int_equal(r.n, 3);
    assert_v4(&r.addrs[0], "127.0.0.1", 8080);
    assert_v4(&r.addrs[1], "127.0.0.2", 8080);
    assert_v6(&r.addrs[2], "::1", 8080);
}

static void test_resolver_route_private_addresses_left_out_of_the_list(void **state)
{
    struct fx *f = *state;
    struct route_res a = {0}, b = {0};
    route(f, "pubmulti.test", false, 80, NULL, false, &a);
    assert_routed(f, &a, 0);
    assert_int_equal(a.n, 2); /* 10.0.0.1 is never tried */
    assert_v4(&a.addrs[0], "93.184.216.34", 80);
    assert_v6(&a.addrs[1], "2606:4700::1111", 80);
    route(f, "multi.test", false, 80, NULL, false, &b); /* all loopback */
    assert_routed(f, &b, -EACCES);
    assert_int_equal(b.n, 0);
}

static void test_resolver_route_dead_address_listed_last_until_it_expires(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage dead;
    assert_int_equal(resolver_literal("127.0.0.1", 8080, &dead), 0);
    resolver_mark_dead(f->r, &dead, util_now_ms());
    struct route_res a = {0}, b = {0}, c = {0};
    route(f, "multi.test", false, 8080, NULL, true, &a);
    assert_routed(f, &a, 0);
    assert_int_equal(a.n, 3);
    assert_v4(&a.addrs[0], "127.0.0.2", 8080);
    assert_v6(&a.addrs[1], "::1", 8080);
    assert_v4(&a.addrs[2], "127.0.0.1", 8080); /* still tried, last */
    /* The mark is per port: 127.0.0.1:80 is not dead. */
    route(f, "multi.test", false, 80, NULL, true, &b);
    assert_routed(f, &b, 0);
    assert_v4(&b.addrs[0], "127.0.0.1", 80);
    /* RESOLVER_DEAD_MS later (the DNS answer is still cached) the order is the DNS's again. */
    g_clock_offset_ms += RESOLVER_DEAD_MS;
    route(f, "multi.test", false, 8080, NULL, true, &c);
    assert_routed(f, &c, 0);
    assert_int_equal(c.n, 3);
    assert_v4(&c.addrs[0], "127.0.0.1", 8080);
    assert_v4(&c.addrs[1], "127.0.0.2", 8080);
}

static void test_resolver_route_every_address_dead_still_lists_them_all(void **state)
{
    struct fx *f = *state;
    static const char *const ips[] = {"127.0.0.1", "127.0.0.2", "::1"};
    for (size_t i = 0; i < ARRAY_SIZE(ips); i++) {
        struct sockaddr_storage a;
        assert_int_equal(resolver_literal(ips[i], 80, &a), 0);
        resolver_mark_dead(f->r, &a, util_now_ms());
    }
    struct route_res r = {0};
    route(f, "multi.test", false, 80, NULL, true, &r);
    assert_routed(f, &r, 0);
    assert_int_equal(r.n, 3);
    assert_v4(&r.addrs[0], "127.0.0.1", 80);
    assert_v4(&r.addrs[1], "127.0.0.2", 80);
    assert_v6(&r.addrs[2], "::1", 80);
}

static void test_resolver_mark_dead_expires_after_dead_ms(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a, b;
    assert_int_equal(resolver_literal("192.0.2.7", 443, &a), 0);
    assert_int_equal(resolver_literal("192.0.2.7", 80, &b), 0);
    assert_false(resolver_is_dead(f->r, &a, 1000));
    resolver_mark_dead(f->r, &a, 1000);
    assert_true(resolver_is_dead(f->r, &a, 1000));
    assert_true(resolver_is_dead(f->r, &a, 1000 + RESOLVER_DEAD_MS - 1));
    assert_false(resolver_is_dead(f->r, &a, 1000 + RESOLVER_DEAD_MS));
    assert_false(resolver_is_dead(f->r, &b, 1000)); /* another port */
    /* Marked again: dead again, from then on. */
    resolver_mark_dead(f->r, &a, 1000 + RESOLVER_DEAD_MS);
    assert_true(resolver_is_dead(f->r, &a, 1000 + 2 * RESOLVER_DEAD_MS - 1));
}

static void test_resolver_mark_alive_clears_the_mark(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a, b;
    assert_int_equal(resolver_literal("2001:db8::5", 80, &a), 0);
    assert_int_equal(resolver_literal("192.0.2.5", 80, &b), 0);
    resolver_mark_dead(f->r, &a, 1000);
    resolver_mark_dead(f->r, &b, 1000);
    resolver_mark_alive(f->r, &a);
    assert_false(resolver_is_dead(f->r, &a, 1000));
    assert_true(resolver_is_dead(f->r, &b, 1000));
    resolver_mark_alive(f->r, &a); /* not marked: nothing */
    assert_true(resolver_is_dead(f->r, &b, 1000));
}

static void test_resolver_order_live_first_each_group_in_order(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a[4], want[4];
    set_v4(&a[0], "192.0.2.1");
    set_v4(&a[1], "192.0.2.2");
    set_v4(&a[2], "192.0.2.3");
    set_v4(&a[3], "192.0.2.4");
    want[0] = a[1];
    want[1] = a[3];
    want[2] = a[0];
    want[3] = a[2];
    resolver_mark_dead(f->r, &a[0], 5000);
    resolver_mark_dead(f->r, &a[2], 5000);
    struct sockaddr_storage b[4];
    memcpy(b, a, sizeof(a));
    resolver_order(f->r, b, 4, 5000);
    assert_memory_equal(b, want, sizeof(want));
    memcpy(b, a, sizeof(a));
    resolver_order(f->r, b, 4, 5000 + RESOLVER_DEAD_MS); /* expired: as given */
    assert_memory_equal(b, a, sizeof(a));
}

static void test_resolver_mark_dead_table_bounded_forgets_the_soonest(void **state)
{
    struct fx *f = *state;
    struct sockaddr_storage a[RESOLVER_DEAD_MAX + 1];
    for (size_t i = 0; i <= RESOLVER_DEAD_MAX; i++) {
        assert_int_equal(resolver_literal("192.0.2.9", (uint16_t)(1000 + i), &a[i]), 0);
        resolver_mark_dead(f->r, &a[i], 1000 + i); /* a[0]'s mark ends first */
    }
    uint64_t now = 1000 + RESOLVER_DEAD_MAX;
    assert_false(resolver_is_dead(f->r, &a[0], now)); /* forgotten for the newest */
    for (size_t i = 1; i <= RESOLVER_DEAD_MAX; i++)
        assert_true(resolver_is_dead(f->r, &a[i], now));
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolver_addr_is_private_v4_table),
        cmocka_unit_test(test_resolver_addr_is_private_v6_table),
        cmocka_unit_test(test_resolver_addr_is_private_other_family_true),
        cmocka_unit_test(test_resolver_acceptable_drops_private_keeps_order),
        FX(test_resolver_query_resolves_with_port),
        FX(test_resolver_query_ipv4_first),
        FX(test_resolver_query_v6_only_name),
        FX(test_resolver_query_concurrent_same_name_coalesced),
        FX(test_resolver_query_cached_no_new_dns_query_and_deferred),
        FX(test_resolver_query_nxdomain_enoent_negatively_cached),
        FX(test_resolver_query_no_data_enoent),
        FX(test_resolver_query_servfail_eio),
        FX(test_resolver_query_expired_entry_queries_again),
        FX(test_resolver_query_zero_ttl_cached_one_second),
        FX(test_resolver_query_one_day_ttl_cached_one_hour),
        FX(test_resolver_query_distinct_names_independent),
        FX(test_resolver_query_from_callback_is_deferred),
        FX(test_resolver_cancel_pending_never_fires),
        FX(test_resolver_cancel_only_waiter_then_entry_still_cached),
        FX(test_resolver_cancel_ready_queries_keeps_list),
        cmocka_unit_test(test_resolver_cancel_null_is_noop),
        FX(test_resolver_free_with_pending_queries_no_callbacks),
        cmocka_unit_test(test_resolver_free_null_is_noop),
        FX(test_resolver_new_system_dns_then_free),
        FX(test_resolver_route_override_used_as_is_without_dns),
        FX(test_resolver_route_ip_literal_used_as_is_without_dns),
        FX(test_resolver_route_from_a_callback_answers_in_the_same_iteration),
        FX(test_resolver_route_outside_the_loop_answers_in_the_next_iteration),
        FX(test_resolver_route_not_a_literal_einval_deferred),
        FX(test_resolver_route_private_answer_refused_eacces),
        FX(test_resolver_route_private_answer_allowed_with_allow_private),
        FX(test_resolver_route_picks_the_first_public_address),
        FX(test_resolver_route_dns_failure_passed_on),
        FX(test_resolver_route_cancel_never_fires),
        FX(test_resolver_route_lists_every_address_ipv4_first),
        FX(test_resolver_route_private_addresses_left_out_of_the_list),
        FX(test_resolver_route_dead_address_listed_last_until_it_expires),
        FX(test_resolver_route_every_address_dead_still_lists_them_all),
        FX(test_resolver_mark_dead_expires_after_dead_ms),
        FX(test_resolver_mark_alive_clears_the_mark),
        FX(test_resolver_order_live_first_each_group_in_order),
        FX(test_resolver_mark_dead_table_bounded_forgets_the_soonest),
        /* Last: under "make asan" (UBSan halt_on_error) its signed overflow aborts the binary. */
        FX(test_resolver_query_ttl_over_24_days_cached_one_hour),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
