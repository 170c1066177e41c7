/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * upool: origins, busy-slot accounting, FIFO waiters and idle keep-alive sockets. See upool.h.
 *
 * Invariants: o->busy <= max_per_origin except transiently after a reload lowered it; a waiter is
 * queued only while o->busy >= max_per_origin; an origin with busy == 0, no idle socket and no
 * waiter is freed at once. Handing a slot to a waiter keeps o->busy unchanged (the slot moves).
 * Waiter callbacks run from the pool's zero-delay timer, never inside upool_release().
 */
#include "upool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "config.h"
#include "log.h"
#include "util.h"

#define ORIGIN_MAGIC 0x0419e1c1u
#define UPOOL_BUCKETS 256

struct idle_sock {
    ev_io io;
    ev_timer timer;
    struct origin *origin; /* borrows */
    struct idle_sock *next;
};

struct origin {
    unsigned magic;
    struct upool *pool;
    struct origin *hnext;
    struct sockaddr_storage addr;
    char name[64];
    unsigned busy; /* slots held by requests */
    unsigned n_idle;
    struct idle_sock *idle;     /* owns; most recently used first */
    struct upool_wait *waiters; /* FIFO head */
    struct upool_wait **wtail;
};

struct upool {
    struct ev_loop *loop;
    struct origin *buckets[UPOOL_BUCKETS];
    ev_timer defer;             /* zero-delay: runs r->granted callbacks */
    struct upool_wait *granted; /* waiters given a slot, to call back */
    struct upool_wait **gtail;
    bool draining;
};

static unsigned addr_hash(const struct sockaddr_storage *a)
{
    const unsigned char *p;
    size_t n;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)a;
        p = (const unsigned char *)&s->sin_addr;
        n = 4;
    } else {
        const struct sockaddr_in6 *s = (const void *)a;
        p = (const unsigned char *)&s->sin6_addr;
        n = 16;
    }
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    h ^= ((const struct sockaddr_in *)(const void *)a)->sin_port;
    return h % UPOOL_BUCKETS;
}

static bool addr_eq(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
}

static void origin_maybe_free(struct origin *o)
{
    if (o->busy != 0 || o->idle != NULL || o->waiters != NULL)
        return;
    struct origin **pp = &o->pool->buckets[addr_hash(&o->addr)];
    while (*pp != o)
        pp = &(*pp)->hnext;
    *pp = o->hnext;
    o->magic = 0;
    free(o);
}

static void idle_close(struct idle_sock *s)
{
    struct origin *o = s->origin;
    struct upool *p = o->pool;
    struct idle_sock **pp = &o->idle;
    while (*pp != s)
        pp = &(*pp)->next;
    *pp = s->next;
    o->n_idle--;
    ev_io_stop(p->loop, &s->io);
    ev_timer_stop(p->loop, &s->timer);
    close(s->io.fd);
    free(s);
}

static void on_idle_event(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    /* Any byte or EOF on an idle socket means it is unusable: the origin closed it, or spoke
     * out of turn. */
    struct idle_sock *s = container_of(w, struct idle_sock, io);
    struct origin *o = s->origin;
    log_debug("upool %s: idle connection closed by origin", o->name);
    idle_close(s);
    origin_maybe_free(o);
}

static void on_idle_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct idle_sock *s = container_of(w, struct idle_sock, timer);
    struct origin *o = s->origin;
    idle_close(s);
    origin_maybe_free(o);
}

static void on_defer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct upool *p = container_of(w, struct upool, defer);
    struct upool_wait *wt;
    while ((wt = p->granted) != NULL) {
        p->granted = wt->next;
        if (p->granted != NULL)
            p->granted->pprev = &p->granted;
        else
            p->gtail = &p->granted;
        wt->next = NULL;
        wt->pprev = NULL;
        wt->origin = NULL;
        wt->cb(wt);
    }
}

struct upool *upool_new(struct ev_loop *loop)
{
    struct upool *p = xcalloc(1, sizeof(*p));
    p->loop = loop;
    p->gtail = &p->granted;
    ev_timer_init(&p->defer, on_defer, 0., 0.);
    return p;
}

void upool_drain(struct upool *p)
{
    p->draining = true;
    for (size_t b = 0; b < UPOOL_BUCKETS; b++) {
        struct origin *o = p->buckets[b];
        while (o != NULL) {
            struct origin *next = o->hnext;
            while (o->idle != NULL)
                idle_close(o->idle);
            origin_maybe_free(o);
            o = next;
        }
    }
}

void upool_free(struct upool **pp)
{
    struct upool *p = *pp;
    if (p == NULL)
        return;
    upool_drain(p);
    for (size_t b = 0; b < UPOOL_BUCKETS; b++)
        ASSERT(p->buckets[b] == NULL);
    ASSERT(p->granted == NULL);
    ev_timer_stop(p->loop, &p->defer);
    free(p);
    *pp = NULL;
}

struct origin *upool_origin(struct upool *p, const struct sockaddr_storage *addr)
{
    unsigned b = addr_hash(addr);
    for (struct origin *o = p->buckets[b]; o; o = o->hnext)
        if (addr_eq(&o->addr, addr))
            return o;
    struct origin *o = xcalloc(1, sizeof(*o));
    o->magic = ORIGIN_MAGIC;
    o->pool = p;
    o->addr = *addr;
    o->wtail = &o->waiters;
    util_addr_text(addr, o->name, sizeof(o->name));
    o->hnext = p->buckets[b];
    p->buckets[b] = o;
    return o;
}

const char *upool_origin_name(const struct origin *o)
{
    return o->name;
}

bool upool_has_room(const struct origin *o)
{
    CHECK_OBJ(o, ORIGIN_MAGIC);
    return o->busy < g_cfg->max_per_origin && o->waiters == NULL;
}

bool upool_slot_try(struct origin *o)
{
    CHECK_OBJ(o, ORIGIN_MAGIC);
    if (o->busy >= g_cfg->max_per_origin || o->waiters != NULL)
        return false;
    o->busy++;
    return true;
}

void upool_wait(struct origin *o, struct upool_wait *w, upool_wait_fn *cb)
{
    CHECK_OBJ(o, ORIGIN_MAGIC);
    w->cb = cb;
    w->origin = o;
    w->next = NULL;
    w->pprev = o->wtail;
    *o->wtail = w;
    o->wtail = &w->next;
    /* A slot may be free already (e.g. max_per_origin raised by a reload): hand it over now. */
    if (o->busy < g_cfg->max_per_origin && o->waiters == w) {
        o->busy++;
        o->waiters = NULL;
        o->wtail = &o->waiters;
        w->origin = NULL; /* granted: upool_wait_cancel() must see it so */
        w->pprev = o->pool->gtail;
        *o->pool->gtail = w;
        o->pool->gtail = &w->next;
        ev_timer_start(o->pool->loop, &o->pool->defer);
    }
}

bool upool_wait_cancel(struct upool *p, struct upool_wait *w)
{
    if (w->pprev == NULL)
        return false;
    struct origin *o = w->origin;
    bool granted = o == NULL;
    *w->pprev = w->next;
    if (w->next != NULL) {
        w->next->pprev = w->pprev;
    } else if (granted) {
        p->gtail = w->pprev;
    } else {
        o->wtail = w->pprev;
    }
    w->next = NULL;
    w->pprev = NULL;
    w->origin = NULL;
    if (!granted)
        origin_maybe_free(o);
    return granted;
}

int upool_take_idle(struct origin *o)
{
    CHECK_OBJ(o, ORIGIN_MAGIC);
    for (;;) {
        struct idle_sock *s = o->idle;
        if (s == NULL)
            return -1;
        /*
         * Bytes or an EOF that arrived since the loop last polled: the watcher has not fired
         * yet. Such a socket must not carry a new request, whose answer would be read from
         * whatever the origin sent out of turn.
         */
        char c;
        ssize_t n = recv(s->io.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
            log_debug("upool %s: idle connection unusable at checkout", o->name);
            idle_close(s);
            continue;
        }
        int fd = s->io.fd;
        o->idle = s->next;
        o->n_idle--;
        ev_io_stop(o->pool->loop, &s->io);
        ev_timer_stop(o->pool->loop, &s->timer);
        free(s);
        return fd;
    }
}

void upool_release(struct origin *o, int fd)
{
    CHECK_OBJ(o, ORIGIN_MAGIC);
    struct upool *p = o->pool;
    ASSERT(o->busy > 0);
    if (fd >= 0) {
        if (!p->draining && o->n_idle < g_cfg->keepalive) {
            struct idle_sock *s = xcalloc(1, sizeof(*s));
            s->origin = o;
            ev_io_init(&s->io, on_idle_event, fd, EV_READ);
            ev_timer_init(&s->timer, on_idle_timeout, UPOOL_IDLE_TIMEOUT, 0.);
            ev_io_start(p->loop, &s->io);
            ev_timer_start(p->loop, &s->timer);
            s->next = o->idle;
            o->idle = s;
            o->n_idle++;
        } else {
            close(fd);
        }
    }
    /* The released slot moves to the first waiter (busy unchanged); if a reload raised
     * max_per_origin, further waiters get the slots now free. */
    bool moved = false;
    struct upool_wait *w;
    while ((w = o->waiters) != NULL &&
           (!moved ? o->busy <= g_cfg->max_per_origin : o->busy < g_cfg->max_per_origin)) {
        o->waiters = w->next;
        if (o->waiters != NULL)
            o->waiters->pprev = &o->waiters;
        else
            o->wtail = &o->waiters;
        w->origin = NULL;
        w->next = NULL;
        w->pprev = p->gtail;
        *p->gtail = w;
        p->gtail = &w->next;
        if (moved)
            o->busy++;
        moved = true;
    }
    if (moved) {
        ev_timer_start(p->loop, &p->defer);
        return;
    }
    o->busy--;
    origin_maybe_free(o);
}
