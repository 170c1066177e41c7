/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * resolver: c-ares on the libev loop, TTL cache, coalesced lookups. See resolver.h.
 *
 * Entries (struct rentry) are keyed by host name in a small chained hash. An entry is PENDING
 * while one ares_getaddrinfo() runs for it (the c-ares query borrows the entry pointer) and READY
 * once answered (addresses or an error) until it expires. Queries wait on their entry's list;
 * every completion, even a cache hit, goes through the ready list and the defer watcher, fed as a
 * pending event of high priority when made ready inside a loop callback (a zero-delay timer
 * outside one): callbacks never fire inside resolver_query() nor inside c-ares (which may call
 * back synchronously), yet run in the same loop iteration, right after the callback that made
 * them ready and before the clients' I/O (a fetch's origin request must not wait a whole
 * iteration of other clients' sends for a cached answer). Entries are freed by a sweep
 * when the table grows, or by resolver_free(). A route (resolver_route) is a query whose answer is
 * checked and ordered when delivered (resolver_acceptable, resolver_order), or, for an override or
 * an IP literal, a query put on the ready list at once with its one address. Dead addresses are a
 * small array (RESOLVER_DEAD_MAX) searched linearly: it is read once per route and per origin
 * connection.
 */
#include "resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "config.h"
#include "log.h"
#include "stats.h"
#include "util.h"

#define RESOLVER_MAGIC 0x7e5017e1u
#define RQUERY_MAGIC 0x7e5017e2u
#define RESOLVER_BUCKETS 256
#define RESOLVER_MAX_ENTRIES 4096
#define RESOLVER_MIN_TTL_MS 1000
#define RESOLVER_MAX_TTL_MS 3600000

struct resolver_query {
    unsigned magic;
    struct resolver *r;          /* borrows */
    struct rentry *entry;        /* borrows; NULL once moved to the ready list */
    struct resolver_query *next; /* in entry->waiters or r->ready */
    struct resolver_query **pprev;
    resolver_fn *cb;             /* a look-up's; NULL for a route */
    resolver_route_fn *route_cb; /* a route's; NULL for a look-up */
    void *arg;
    bool allow_private; /* a route: the private-address check of the answer */
    bool routed;        /* a route known at once (override, literal): no check of addrs[0] */
    uint16_t port;
    int err; /* the result, copied when released */
    size_t n;
    struct sockaddr_storage addrs[RESOLVER_MAX_ADDRS];
};

enum rentry_state { RENTRY_PENDING, RENTRY_READY };

struct rentry {
    struct rentry *next; /* hash chain */
    char *host;          /* owns */
    enum rentry_state state;
    int err;
    struct sockaddr_storage addrs[RESOLVER_MAX_ADDRS];
    size_t n;
    uint64_t expires_ms;
    struct resolver_query *waiters; /* queries waiting for this entry */
};

struct sockw {
    ev_io io;
    struct resolver *r;
    struct sockw *next;
};

struct rdead {
    struct sockaddr_storage addr;
    uint64_t until_ms; /* dead until then */
};

struct resolver {
    unsigned magic;
    struct ev_loop *loop;
    ares_channel channel;
    ev_timer timeout; /* c-ares retransmit timer */
    ev_timer defer; /* fed, or a zero-delay timer outside ev_run (ready_push): delivers r->ready */
    struct sockw *socks; /* watchers for c-ares sockets */
    struct rentry *buckets[RESOLVER_BUCKETS];
    size_t n_entries;
    struct resolver_query *ready; /* completed queries to call back */
    struct resolver_query **ready_tail;
    bool freeing;
    struct rdead dead[RESOLVER_DEAD_MAX];
    size_t n_dead; /* entries in use at the front of dead (some may have expired) */
};

static unsigned host_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % RESOLVER_BUCKETS;
}

static void rearm_timeout(struct resolver *r)
{
    struct timeval tv, *tvp = ares_timeout(r->channel, NULL, &tv);
    ev_timer_stop(r->loop, &r->timeout);
    if (tvp != NULL) {
        ev_timer_set(&r->timeout, (double)tvp->tv_sec + (double)tvp->tv_usec / 1e6, 0.);
        ev_timer_start(r->loop, &r->timeout);
    }
}

static void on_ares_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct sockw *s = container_of(w, struct sockw, io);
    struct resolver *r = s->r;
    int fd = w->fd;
    ares_process_fd(r->channel, (revents & EV_READ) ? fd : ARES_SOCKET_BAD,
                    (revents & EV_WRITE) ? fd : ARES_SOCKET_BAD);
    rearm_timeout(r);
}

static void on_ares_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct resolver *r = container_of(w, struct resolver, timeout);
    ares_process_fd(r->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm_timeout(r);
}

static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    struct resolver *r = data;
    struct sockw **pp = &r->socks, *s;
    while ((s = *pp) != NULL && s->io.fd != fd)
        pp = &s->next;
    if (!readable && !writable) {
        if (s != NULL) {
            ev_io_stop(r->loop, &s->io);
            *pp = s->next;
            free(s);
        }
        return;
    }
    if (s == NULL) {
        s = xcalloc(1, sizeof(*s));
        s->r = r;
        s->next = r->socks;
        r->socks = s;
        ev_init(&s->io, on_ares_io);
    }
    ev_io_stop(r->loop, &s->io);
    ev_io_set(&s->io, fd, (readable ? EV_READ : 0) | (writable ? EV_WRITE : 0));
    ev_io_start(r->loop, &s->io);
}

/* Appends <q> (its result set) to the ready list and makes the defer watcher pending. */
static void ready_push(struct resolver *r, struct resolver_query *q)
{
    q->pprev = r->ready_tail;
    *r->ready_tail = q;
    r->ready_tail = &q->next;
    if (r->freeing)
        return;
    /* Inside a loop callback: fed, so it runs right after that callback (libev 4.33's
     * ev_feed_event makes ev_invoke_pending look at the higher priorities again). Outside one
     * (before ev_run, between two): a fed event would wait for whatever ends the next poll, so a
     * zero-delay timer makes that poll return at once. */
    if (ev_depth(r->loop) > 0) {
        if (!ev_is_pending(&r->defer))
            ev_feed_event(r->loop, &r->defer, EV_TIMER);
    } else if (!ev_is_active(&r->defer)) {
        ev_timer_start(r->loop, &r->defer);
    }
}

/* Moves every waiter of <e> to the ready list and makes the defer watcher pending. */
static void entry_release_waiters(struct resolver *r, struct rentry *e)
{
    struct resolver_query *q;
    while ((q = e->waiters) != NULL) {
        e->waiters = q->next;
        if (q->next)
            q->next->pprev = &e->waiters;
        q->entry = NULL;
        q->next = NULL;
        q->err = e->err;
        q->n = e->n;
        memcpy(q->addrs, e->addrs, e->n * sizeof(e->addrs[0]));
        for (size_t i = 0; i < q->n; i++) {
            if (q->addrs[i].ss_family == AF_INET)
                ((struct sockaddr_in *)&q->addrs[i])->sin_port = htons(q->port);
            else
                ((struct sockaddr_in6 *)&q->addrs[i])->sin6_port = htons(q->port);
        }
        ready_push(r, q);
    }
}

static int map_ares_err(int status)
{
    switch (status) {
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
    case ARES_ENONAME:
    case ARES_EBADNAME:
        return -ENOENT;
    case ARES_ETIMEOUT:
        return -ETIMEDOUT;
    default:
        return -EIO;
    }
}

static void on_addrinfo(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    (void)timeouts;
    struct rentry *e = arg;
    struct resolver_query *q = e->waiters;
    struct resolver *r = q ? q->r : NULL;
    uint64_t now = util_now_ms();
    int64_t ttl_ms = RESOLVER_MAX_TTL_MS;

    e->n = 0;
    e->err = 0;
    if (status == ARES_SUCCESS && res != NULL) {
        /* IPv4 first, then IPv6: many LAN uplinks have no working IPv6 route. */
        for (int fam = 0; fam < 2; fam++) {
            for (struct ares_addrinfo_node *nd = res->nodes; nd; nd = nd->ai_next) {
                int want = fam == 0 ? AF_INET : AF_INET6;
                if (nd->ai_family != want || e->n >= RESOLVER_MAX_ADDRS)
                    continue;
                memset(&e->addrs[e->n], 0, sizeof(e->addrs[e->n]));
                memcpy(&e->addrs[e->n], nd->ai_addr, nd->ai_addrlen);
                e->n++;
                if (nd->ai_ttl >= 0 && (int64_t)nd->ai_ttl * 1000 < ttl_ms)
                    ttl_ms = (int64_t)nd->ai_ttl * 1000;
            }
        }
        if (e->n == 0)
            e->err = -ENOENT;
    } else {
        e->err = map_ares_err(status);
    }
    if (res != NULL)
        ares_freeaddrinfo(res);
    if (e->err != 0) {
        ttl_ms = RESOLVER_NEG_TTL_MS;
        g_stats.dns_failures++;
        if (status != ARES_EDESTRUCTION)
            log_info("dns: %s: %s", e->host, ares_strerror(status));
    }
    if (ttl_ms < RESOLVER_MIN_TTL_MS)
        ttl_ms = RESOLVER_MIN_TTL_MS;
    e->expires_ms = now + (uint64_t)ttl_ms;
    e->state = RENTRY_READY;
    if (r != NULL)
        entry_release_waiters(r, e);
}

static struct rentry *entry_find(struct resolver *r, const char *host)
{
    for (struct rentry *e = r->buckets[host_hash(host)]; e; e = e->next)
        if (strcmp(e->host, host) == 0)
            return e;
    return NULL;
}

/* A route's answer: the checked addresses in the order to try them, or why there are none. */
static void deliver_route(struct resolver_query *q)
{
    if (q->err != 0) {
        q->route_cb(q->arg, q->err, NULL, 0);
        return;
    }
    if (q->routed) {
        q->route_cb(q->arg, 0, q->addrs, 1);
        return;
    }
    struct sockaddr_storage ok[RESOLVER_MAX_ADDRS];
    size_t n = resolver_acceptable(q->addrs, q->n, q->allow_private, ok);
    if (n == 0) {
        q->route_cb(q->arg, -EACCES, NULL, 0);
        return;
    }
    resolver_order(q->r, ok, n, util_now_ms());
    q->route_cb(q->arg, 0, ok, n);
}

static void on_defer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct resolver *r = container_of(w, struct resolver, defer);
    struct resolver_query *q;
    ev_timer_stop(loop, w); /* (when it was started rather than fed) */
    /* Pop one at a time: a callback may cancel or start other queries. */
    while ((q = r->ready) != NULL) {
        CHECK_OBJ(q, RQUERY_MAGIC);
        r->ready = q->next;
        if (r->ready != NULL)
            r->ready->pprev = &r->ready;
        else
            r->ready_tail = &r->ready;
        q->magic = 0;
        if (q->route_cb != NULL)
            deliver_route(q);
        else
            q->cb(q->arg, q->err, q->addrs, q->err == 0 ? q->n : 0);
        free(q);
    }
}

struct resolver *resolver_new(struct ev_loop *loop, const struct config *cfg, char *err,
                              size_t errlen)
{
    struct ares_options opt;
    int optmask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    int rc;

    rc = ares_library_init(ARES_LIB_INIT_ALL); /* reference counted by c-ares */
    if (rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares init: %s", ares_strerror(rc));
        return NULL;
    }
    struct resolver *r = xcalloc(1, sizeof(*r));
    r->magic = RESOLVER_MAGIC;
    r->loop = loop;
    r->ready_tail = &r->ready;
    ev_init(&r->timeout, on_ares_timeout);
    ev_timer_init(&r->defer, on_defer, 0., 0.);
    ev_set_priority(&r->defer, EV_MAXPRI - 1); /* as the origin sockets (upstream.c) */

    memset(&opt, 0, sizeof(opt));
    opt.sock_state_cb = on_sock_state;
    opt.sock_state_cb_data = r;
    opt.timeout = 2000;
    opt.tries = 2;
    if (!cfg->dns_system) {
        /* Configured servers only: never /etc/hosts, never the LAN's resolver. */
        opt.lookups = (char *)"b";
        optmask |= ARES_OPT_LOOKUPS;
    }
    rc = ares_init_options(&r->channel, &opt, optmask);
    if (rc != ARES_SUCCESS) {
        snprintf(err, errlen, "c-ares: %s", ares_strerror(rc));
        free(r);
        ares_library_cleanup();
        return NULL;
    }
    if (!cfg->dns_system) {
        char csv[CONFIG_MAX_ADDRS * (CONFIG_HOST_MAX + 10)];
        size_t off = 0;
        for (size_t i = 0; i < cfg->n_dns; i++) {
            bool v6 = strchr(cfg->dns[i].host, ':') != NULL;
            int k = snprintf(csv + off, sizeof(csv) - off, "%s%s%s%s:%u", i ? "," : "",
                             v6 ? "[" : "", cfg->dns[i].host, v6 ? "]" : "", cfg->dns[i].port);
            if (k < 0 || (size_t)k >= sizeof(csv) - off)
                break;
            off += (size_t)k;
        }
        rc = ares_set_servers_ports_csv(r->channel, csv);
        if (rc != ARES_SUCCESS) {
            snprintf(err, errlen, "dns servers '%s': %s", csv, ares_strerror(rc));
            ares_destroy(r->channel);
            free(r);
            ares_library_cleanup();
            return NULL;
        }
    }
    return r;
}

static void entry_free(struct rentry *e)
{
    ASSERT(e->waiters == NULL);
    free(e->host);
    free(e);
}

/* Drops READY entries that have expired; bounds the table. */
static void sweep(struct resolver *r, uint64_t now)
{
    for (size_t b = 0; b < RESOLVER_BUCKETS; b++) {
        struct rentry **pp = &r->buckets[b], *e;
        while ((e = *pp) != NULL) {
            if (e->state == RENTRY_READY && e->waiters == NULL && e->expires_ms <= now) {
                *pp = e->next;
                entry_free(e);
                r->n_entries--;
            } else {
                pp = &e->next;
            }
        }
    }
}

struct resolver_query *resolver_query(struct resolver *r, const char *host, uint16_t port,
                                      resolver_fn *cb, void *arg)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    uint64_t now = util_now_ms();
    struct resolver_query *q = xcalloc(1, sizeof(*q));
    q->magic = RQUERY_MAGIC;
    q->r = r;
    q->cb = cb;
    q->arg = arg;
    q->port = port;

    struct rentry *e = entry_find(r, host);
    if (e == NULL) {
        if (r->n_entries >= RESOLVER_MAX_ENTRIES)
            sweep(r, now);
        if (r->n_entries >= RESOLVER_MAX_ENTRIES)
            sweep(r, UINT64_MAX); /* still full of fresh answers: drop every idle one */
        e = xcalloc(1, sizeof(*e));
        e->host = xstrdup(host);
        e->state = RENTRY_READY;
        e->expires_ms = 0;
        unsigned b = host_hash(host);
        e->next = r->buckets[b];
        r->buckets[b] = e;
        r->n_entries++;
    }
    /* Join the entry's waiters; a fresh answer releases them at once (deferred). */
    q->entry = e;
    q->next = e->waiters;
    if (q->next)
        q->next->pprev = &q->next;
    q->pprev = &e->waiters;
    e->waiters = q;

    if (e->state == RENTRY_READY && e->expires_ms > now) {
        g_stats.dns_cache_hits++;
        entry_release_waiters(r, e);
    } else if (e->state == RENTRY_READY) {
        struct ares_addrinfo_hints hints;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = ARES_AI_NOSORT;
        e->state = RENTRY_PENDING;
        g_stats.dns_queries++;
        ares_getaddrinfo(r->channel, host, NULL, &hints, on_addrinfo, e);
        rearm_timeout(r);
    }
    return q;
}

struct resolver_query *resolver_route(struct resolver *r, const char *host, bool host_is_ip,
                                      uint16_t port, const struct sockaddr_storage *override,
                                      bool allow_private, resolver_route_fn *cb, void *arg)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    ASSERT(cb != NULL);
    if (override == NULL && !host_is_ip) {
        struct resolver_query *q = resolver_query(r, host, port, NULL, arg);
        q->route_cb = cb;
        q->allow_private = allow_private;
        return q;
    }
    /* Known at once: the answer still goes through the ready list (never a callback before
     * this returns). */
    struct resolver_query *q = xcalloc(1, sizeof(*q));
    q->magic = RQUERY_MAGIC;
    q->r = r;
    q->route_cb = cb;
    q->arg = arg;
    q->port = port;
    q->routed = true;
    if (override != NULL) {
        q->addrs[0] = *override;
        q->n = 1;
    } else if (resolver_literal(host, port, &q->addrs[0]) == 0) {
        q->n = 1;
    } else {
        q->err = -EINVAL;
    }
    ready_push(r, q);
    return q;
}

void resolver_cancel(struct resolver_query **qp)
{
    struct resolver_query *q = *qp;
    if (q == NULL)
        return;
    CHECK_OBJ(q, RQUERY_MAGIC);
    struct resolver *r = q->r;
    *q->pprev = q->next;
    if (q->next)
        q->next->pprev = q->pprev;
    else if (q->entry == NULL && r->ready_tail == &q->next)
        r->ready_tail = q->pprev;
    q->magic = 0;
    free(q);
    *qp = NULL;
}

void resolver_free(struct resolver **rp)
{
    struct resolver *r = *rp;
    if (r == NULL)
        return;
    CHECK_OBJ(r, RESOLVER_MAGIC);
    r->freeing = true;
    /* Cancel every query first so that c-ares' destruction callbacks deliver nothing. */
    for (size_t b = 0; b < RESOLVER_BUCKETS; b++)
        for (struct rentry *e = r->buckets[b]; e; e = e->next)
            while (e->waiters != NULL) {
                struct resolver_query *q = e->waiters;
                resolver_cancel(&q);
            }
    while (r->ready != NULL) {
        struct resolver_query *q = r->ready;
        resolver_cancel(&q);
    }
    ares_destroy(r->channel);
    ev_timer_stop(r->loop, &r->timeout);
    ev_timer_stop(r->loop, &r->defer); /* (also clears a fed, still pending event) */
    while (r->socks != NULL) {
        struct sockw *s = r->socks;
        r->socks = s->next;
        ev_io_stop(r->loop, &s->io);
        free(s);
    }
    for (size_t b = 0; b < RESOLVER_BUCKETS; b++)
        while (r->buckets[b] != NULL) {
            struct rentry *e = r->buckets[b];
            r->buckets[b] = e->next;
            entry_free(e);
        }
    r->magic = 0;
    free(r);
    *rp = NULL;
    ares_library_cleanup();
}

int resolver_literal(const char *host, uint16_t port, struct sockaddr_storage *out)
{
    struct sockaddr_in *s4 = (void *)out;
    struct sockaddr_in6 *s6 = (void *)out;
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        return 0;
    }
    if (inet_aton(host, &s4->sin_addr) != 0) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        return 0;
    }
    return -EINVAL;
}

static bool v4_is_private(uint32_t a)
{
    static const struct {
        uint32_t net;
        unsigned bits;
    } ranges[] = {
        {0x00000000u, 8},  /* 0/8 "this network" */
        {0x0a000000u, 8},  /* 10/8 */
        {0x64400000u, 10}, /* 100.64/10 CGNAT */
        {0x7f000000u, 8},  /* 127/8 loopback */
        {0xa9fe0000u, 16}, /* 169.254/16 link-local */
        {0xac100000u, 12}, /* 172.16/12 */
        {0xc0000000u, 24}, /* 192.0.0/24 IETF */
        {0xc0000200u, 24}, /* 192.0.2/24 TEST-NET-1 */
        {0xc0586300u, 24}, /* 192.88.99/24 6to4 relay */
        {0xc0a80000u, 16}, /* 192.168/16 */
        {0xc6120000u, 15}, /* 198.18/15 benchmarking */
        {0xc6336400u, 24}, /* 198.51.100/24 TEST-NET-2 */
        {0xcb007100u, 24}, /* 203.0.113/24 TEST-NET-3 */
        {0xe0000000u, 4},  /* 224/4 multicast */
        {0xf0000000u, 4},  /* 240/4 reserved + broadcast */
    };
    for (size_t i = 0; i < ARRAY_SIZE(ranges); i++) {
        uint32_t mask = ranges[i].bits ? ~0u << (32 - ranges[i].bits) : 0;
        if ((a & mask) == ranges[i].net)
            return true;
    }
    return false;
}

size_t resolver_acceptable(const struct sockaddr_storage *addrs, size_t n, bool allow_private,
                           struct sockaddr_storage *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (allow_private || !resolver_addr_is_private((const void *)&addrs[i]))
            out[k++] = addrs[i];
    return k;
}

/* The index of <addr>'s mark (expired or not) in r->dead, or r->n_dead when it has none. */
static size_t dead_index(const struct resolver *r, const struct sockaddr_storage *addr)
{
    size_t i = 0;
    while (i < r->n_dead && !util_addr_equal(&r->dead[i].addr, addr))
        i++;
    return i;
}

void resolver_mark_dead(struct resolver *r, const struct sockaddr_storage *addr, uint64_t now_ms)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    size_t i = dead_index(r, addr);
    if (i == r->n_dead && r->n_dead < RESOLVER_DEAD_MAX) {
        r->n_dead++;
    } else if (i == r->n_dead) { /* full: forget the mark that ends soonest (expired ones first) */
        i = 0;
        for (size_t j = 1; j < r->n_dead; j++)
            if (r->dead[j].until_ms < r->dead[i].until_ms)
                i = j;
    }
    r->dead[i].addr = *addr;
    r->dead[i].until_ms = now_ms + RESOLVER_DEAD_MS;
}

void resolver_mark_alive(struct resolver *r, const struct sockaddr_storage *addr)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    size_t i = dead_index(r, addr);
    if (i < r->n_dead)
        r->dead[i] = r->dead[--r->n_dead];
}

bool resolver_is_dead(const struct resolver *r, const struct sockaddr_storage *addr,
                      uint64_t now_ms)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    size_t i = dead_index(r, addr);
    return i < r->n_dead && r->dead[i].until_ms > now_ms;
}

void resolver_order(const struct resolver *r, struct sockaddr_storage *addrs, size_t n,
                    uint64_t now_ms)
{
    CHECK_OBJ(r, RESOLVER_MAGIC);
    if (r->n_dead == 0 || n < 2)
        return;
    ASSERT(n <= RESOLVER_MAX_ADDRS);
    struct sockaddr_storage dead[RESOLVER_MAX_ADDRS];
    size_t k = 0, nd = 0;
    for (size_t i = 0; i < n; i++) {
        if (resolver_is_dead(r, &addrs[i], now_ms))
            dead[nd++] = addrs[i];
        else
            addrs[k++] = addrs[i];
    }
    memcpy(&addrs[k], dead, nd * sizeof(dead[0]));
}

bool resolver_addr_is_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        return v4_is_private(ntohl(s4->sin_addr.s_addr));
    }
    if (sa->sa_family != AF_INET6)
        return true;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
    const uint8_t *b = s6->sin6_addr.s6_addr;
    static const uint8_t zero[16];
    uint32_t v4 =
        ((uint32_t)b[12] << 24) | ((uint32_t)b[13] << 16) | ((uint32_t)b[14] << 8) | b[15];
    if (memcmp(b, zero, 15) == 0) /* :: and ::1 */
        return true;
    if (memcmp(b, zero, 10) == 0 && b[10] == 0xff && b[11] == 0xff) /* ::ffff:a.b.c.d */
        return v4_is_private(v4);
    if (memcmp(b, zero, 12) == 0) /* deprecated IPv4-compatible ::a.b.c.d */
        return true;
    if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b) /* 64:ff9b::/96 NAT64 */
        return memcmp(b + 4, zero, 8) != 0 || v4_is_private(v4);
    if ((b[0] & 0xfe) == 0xfc) /* fc00::/7 ULA */
        return true;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) /* fe80::/10 link-local */
        return true;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) /* fec0::/10 site-local (deprecated) */
        return true;
    if (b[0] == 0xff) /* multicast */
        return true;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) /* 2001:db8::/32 docs */
        return true;
    if (b[0] == 0x20 && b[1] == 0x02) /* 2002::/16 6to4: judge the embedded IPv4 */
        return v4_is_private(((uint32_t)b[2] << 24) | ((uint32_t)b[3] << 16) |
                             ((uint32_t)b[4] << 8) | b[5]);
    if (b[0] == 0x01 && b[1] == 0x00 && memcmp(b + 2, zero, 6) == 0) /* 100::/64 discard */
        return true;
    return false;
}
