/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tlsrelay: the HTTPS pass-through. See tlsrelay.h for the phase table and ownership.
 *
 * Each relay has two directions, up (client -> origin) and down (origin -> client), each a
 * kernel pipe the bytes are splice(2)d through: socket -> pipe -> socket, never copied to user
 * space (bench/README.md: "TLS passthrough" has the measurement against read/write). A direction
 * reads only while its pipe has room, so a slow reader stops the other side's reads: memory per
 * relay is the two pipes' capacity (in the kernel), whatever the transfer size. When a side
 * sends EOF, the other side gets shutdown(SHUT_WR) once everything before the EOF was delivered;
 * the relay ends when both directions are done, on an error on either side, or after
 * idle_timeout without a byte either way. At most RELAY_TURN bytes move per direction per
 * wake-up, so one bulk relay cannot starve the others.
 *
 * Every entry point (watcher callbacks, the resolver's callback) ends with relay_done(), which
 * frees a relay that was closed on the way: nothing else holds a pointer to it by then (its
 * resolver query is cancelled, its watchers are stopped).
 */
#include "tlsrelay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "admit.h"
#include "config.h"
#include "log.h"
#include "resolver.h"
#include "stats.h"
#include "tlshello.h"
#include "util.h"

#define RELAY_MAGIC 0x7150e1a9u
#define RELAY_PORT 443
#define RELAY_TURN (512 * 1024) /* bytes per direction per wake-up (fairness) */
#define RELAY_LINE 768          /* one access line */
#define RELAY_MAX_TRIES 4       /* origin addresses a relay tries, as upstream does */

#define RELAY_PHASES(X)                                                                            \
    X(HELLO)                                                                                       \
    X(RESOLVE)                                                                                     \
    X(CONNECT)                                                                                     \
    X(RELAY)                                                                                       \
    X(CLOSED)

enum phase {
#define PHASE_X(p) PH_##p,
    RELAY_PHASES(PHASE_X)
#undef PHASE_X
};

static const char *const phase_names[] = {
#define PHASE_X(p) #p,
    RELAY_PHASES(PHASE_X)
#undef PHASE_X
};

/* How a relay ended: the access line's outcome and the counter it bumps (NULL: none). */
#define RELAY_OUTCOMES(X)                                                                          \
    X(OK, "ok", NULL)                                                                              \
    X(IDLE, "idle", &g_stats.tls_idle_timeout)                                                     \
    X(ERROR, "error", &g_stats.tls_errors)                                                         \
    X(SHUTDOWN, "shutdown", NULL)                                                                  \
    X(NO_SNI, "no_sni", &g_stats.tls_refused_no_sni)                                               \
    X(NOT_TLS, "not_tls", &g_stats.tls_refused_not_tls)                                            \
    X(MALFORMED, "malformed", &g_stats.tls_refused_malformed)                                      \
    X(IP_LITERAL, "ip_literal", &g_stats.tls_refused_ip_literal)                                   \
    X(UNLISTED, "unlisted", &g_stats.tls_refused_unlisted)                                         \
    X(PRIVATE, "private", &g_stats.tls_refused_private)                                            \
    X(RESOLVE, "resolve", &g_stats.tls_refused_resolve)                                            \
    X(TIMEOUT, "timeout", &g_stats.tls_refused_timeout)                                            \
    X(CONNECT, "connect", &g_stats.tls_refused_connect)                                            \
    X(EOF, "eof", &g_stats.tls_refused_eof)                                                        \
    X(LOOP, "loop", &g_stats.tls_refused_loop)                                                     \
    X(OVERLOAD, "overload", &g_stats.tls_refused_overload)

enum outcome {
#define OUT_X(o, name, ctr) OUT_##o,
    RELAY_OUTCOMES(OUT_X)
#undef OUT_X
};

static const char *const outcome_names[] = {
#define OUT_X(o, name, ctr) name,
    RELAY_OUTCOMES(OUT_X)
#undef OUT_X
};

/* One direction: bytes from <from> go through the pipe to <to>. */
struct dir {
    int from, to;    /* borrowed: the relay's sockets */
    const char *pre; /* borrowed (the relay's hello): sent to <to> before anything is read */
    size_t pre_len;
    int pipe_r;        /* owns; -1 until RELAY */
    int pipe_w;        /* owns; -1 until RELAY */
    size_t cap;        /* the pipe's capacity */
    size_t pending;    /* bytes in the pipe, not yet delivered to <to> */
    bool eof;          /* <from> sent EOF (or failed: rerr) */
    bool full;         /* the pipe took nothing more (it fills by slots, not only bytes) */
    int rerr;          /* errno of a failed read of <from>: its bytes are delivered first */
    bool shut;         /* shutdown(<to>, SHUT_WR) done */
    uint64_t bytes;    /* delivered to <to> */
    uint64_t *counter; /* g_stats field for delivered bytes */
};

struct relay {
    unsigned magic;
    unsigned id;
    enum phase phase;
    int cfd; /* owns: the client socket */
    int ofd; /* owns: the origin socket, -1 before CONNECT */
    ev_io cio, oio;
    unsigned cev, oev; /* events the watchers are started with (0 = stopped) */
    ev_timer timer;
    ev_tstamp deadline; /* when the timer should act (HELLO/RESOLVE/CONNECT); RELAY: idle */
    ev_tstamp started;
    ev_tstamp last_active; /* RELAY: the last byte moved either way */
    char peer[64];
    char *hello; /* owns until RELAY: the bytes read so far (TLSHELLO_MAX_INPUT) */
    size_t hello_len;
    struct tlshello_sni sni;
    bool has_sni;
    struct resolver_query *rq;                      /* owns while RESOLVE */
    struct sockaddr_storage addrs[RELAY_MAX_TRIES]; /* the route's, in order */
    size_t n_addrs;
    size_t cur; /* addrs[cur]: the address being connected to (origin) */
    struct sockaddr_storage origin;
    bool has_origin;
    struct sockaddr_storage local; /* our end of the origin socket (loop detection) */
    bool has_local;
    struct dir up, down;
    enum outcome outcome;
    struct relay *next, **pprev; /* all live relays */
};

static struct tlsrelay_ctx *rctx; /* borrows: main's */
static struct relay *relays;
static unsigned n_relays;
static unsigned next_id;
static struct log_file tls_log = LOG_FILE_CLOSED; /* [tls] access; closed = off */

/*
 * "[tls] access TIME client=IP:PORT sni=NAME origin=IP:PORT up=N down=N duration_ms=N
 * outcome=WORD" (README.md documents it); "-" for an absent name or origin. The name was
 * checked by tlshello (host characters only), so the line needs no escaping.
 */
static void log_access(const struct relay *r, ev_tstamp now)
{
    char line[RELAY_LINE], when[40], origin[64];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t w = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof(when) - w, ".%03ldZ", ts.tv_nsec / 1000000L);
    if (r->has_origin)
        util_addr_text(&r->origin, origin, sizeof(origin));
    else
        snprintf(origin, sizeof(origin), "-");
    double ms = (now - r->started) * 1000.0;
    int n = snprintf(line, sizeof(line),
                     "[tls] access %s client=%s sni=%s origin=%s up=%llu down=%llu "
                     "duration_ms=%llu outcome=%s",
                     when, r->peer, r->has_sni ? r->sni.host : "-", origin,
                     (unsigned long long)r->up.bytes, (unsigned long long)r->down.bytes,
                     (unsigned long long)(ms > 0 ? ms : 0), outcome_names[r->outcome]);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
    if (tls_log.fd < 0)
        return; /* [tls] access empty: off */
    line[len++] = '\n';
    ssize_t k;
    do {
        k = write(tls_log.fd, line, len);
    } while (k < 0 && errno == EINTR);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static void dir_close(struct dir *d)
{
    if (d->pipe_r >= 0)
        close(d->pipe_r);
    if (d->pipe_w >= 0)
        close(d->pipe_w);
    d->pipe_r = d->pipe_w = -1;
}

/* Ends the relay with <o>: watchers stopped, query cancelled, sockets closed, line logged. The
 * memory is freed by relay_done() when the entry point returns. */
static void relay_close(struct relay *r, enum outcome o)
{
    if (r->phase == PH_CLOSED)
        return;
    struct ev_loop *loop = rctx->loop;
    log_debug("tls#%u %s: %s -> closed (%s)", r->id, r->peer, phase_names[r->phase],
              outcome_names[o]);
    r->phase = PH_CLOSED;
    r->outcome = o;
    switch (o) {
#define OUT_X(oo, name, ctr)                                                                       \
    case OUT_##oo: {                                                                               \
        uint64_t *c = ctr;                                                                         \
        if (c != NULL)                                                                             \
            (*c)++;                                                                                \
        break;                                                                                     \
    }
        RELAY_OUTCOMES(OUT_X)
#undef OUT_X
    }
    resolver_cancel(&r->rq);
    ev_io_stop(loop, &r->cio);
    ev_io_stop(loop, &r->oio);
    ev_timer_stop(loop, &r->timer);
    r->cev = r->oev = 0;
    log_access(r, ev_now(loop));
    close(r->cfd);
    r->cfd = -1;
    if (r->ofd >= 0)
        close(r->ofd);
    r->ofd = -1;
    dir_close(&r->up);
    dir_close(&r->down);
    free(r->hello);
    r->hello = NULL;
}

static void relay_free(struct relay *r)
{
    ASSERT(r->phase == PH_CLOSED);
    *r->pprev = r->next;
    if (r->next)
        r->next->pprev = r->pprev;
    n_relays--;
    r->magic = 0;
    free(r);
    if (rctx->on_closed != NULL)
        rctx->on_closed();
}

/* The end of every entry point: frees the relay if it was closed. */
static void relay_done(struct relay *r)
{
    if (r->phase == PH_CLOSED)
        relay_free(r);
}

static void set_io(ev_io *w, unsigned *cur, int fd, unsigned ev)
{
    if (ev == *cur)
        return;
    ev_io_stop(rctx->loop, w);
    *cur = ev;
    if (ev != 0) {
        ev_io_set(w, fd, (int)ev);
        ev_io_start(rctx->loop, w);
    }
}

/* The one timer, at <deadline> (the callback re-checks: an early wake-up only re-arms). */
static void arm_timer(struct relay *r, ev_tstamp deadline)
{
    ev_tstamp now = ev_now(rctx->loop);
    r->deadline = deadline;
    if (ev_is_active(&r->timer) && now + ev_timer_remaining(rctx->loop, &r->timer) <= deadline)
        return;
    ev_timer_stop(rctx->loop, &r->timer);
    ev_timer_set(&r->timer, deadline > now ? deadline - now : 0., 0.);
    ev_timer_start(rctx->loop, &r->timer);
}

/* ---- RELAY: moving bytes ----------------------------------------------------------------- */

/*
 * Moves what it can of <d> (at most RELAY_TURN bytes): pipe -> <to>, <from> -> pipe while the
 * pipe has room, and passes an EOF on once the pipe is empty. Returns the bytes delivered, or
 * -errno when either socket failed.
 */
static ssize_t pump(struct dir *d)
{
    size_t moved = 0;
    for (;;) {
        bool progress = false;
        if (d->pre_len > 0) {
            ssize_t n = send(d->to, d->pre, d->pre_len, MSG_NOSIGNAL);
            if (n > 0) {
                d->pre += n;
                d->pre_len -= (size_t)n;
                d->bytes += (uint64_t)n;
                *d->counter += (uint64_t)n;
                moved += (size_t)n;
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                return -errno;
            }
            if (d->pre_len > 0) /* the replayed bytes go first: read nothing before them */
                return (ssize_t)moved;
        }
        if (d->pending > 0) {
            ssize_t n =
                splice(d->pipe_r, NULL, d->to, NULL, d->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n > 0) {
                d->full = false;
                d->pending -= (size_t)n;
                d->bytes += (uint64_t)n;
                *d->counter += (uint64_t)n;
                moved += (size_t)n;
                progress = true;
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                return -errno;
            }
        }
        if (!d->eof && !d->full && d->pending < d->cap && moved < RELAY_TURN) {
            ssize_t n = splice(d->from, NULL, d->pipe_w, NULL, d->cap - d->pending,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n > 0) {
                d->pending += (size_t)n;
                progress = true;
            } else if (n == 0) {
                d->eof = true;
                progress = true;
            } else if (errno == EAGAIN) {
                /* Nothing to read, or a pipe full of small fragments (16 slots): stop reading
                 * <from> until the pipe drains, or its readiness would spin the loop. */
                d->full = d->pending > 0;
            } else if (errno != EINTR) {
                d->eof = true; /* what the pipe holds is still delivered, then the error */
                d->rerr = errno;
                progress = true;
            }
        }
        if (d->eof && d->rerr != 0 && d->pending == 0)
            return -d->rerr;
        if (d->eof && d->pending == 0 && !d->shut) {
            /* ENOTCONN: the peer is already gone; the other direction will tell. */
            shutdown(d->to, SHUT_WR);
            d->shut = true;
        }
        if (!progress || moved >= RELAY_TURN)
            return (ssize_t)moved;
    }
}

static bool dir_done(const struct dir *d)
{
    return d->shut;
}

/* Interest: read a side while its direction's pipe has room, write it while the other's has
 * bytes for it. */
static void relay_update_io(struct relay *r)
{
    unsigned cev = 0, oev = 0;
    if (!r->up.eof && !r->up.full && r->up.pending < r->up.cap && r->up.pre_len == 0)
        cev |= EV_READ;
    if (r->down.pending > 0)
        cev |= EV_WRITE;
    if (!r->down.eof && !r->down.full && r->down.pending < r->down.cap)
        oev |= EV_READ;
    if (r->up.pending > 0 || r->up.pre_len > 0)
        oev |= EV_WRITE;
    set_io(&r->cio, &r->cev, r->cfd, cev);
    set_io(&r->oio, &r->oev, r->ofd, oev);
}

static void relay_run(struct relay *r)
{
    /* Both directions, even when one failed: the other's bytes already taken still go out. */
    ssize_t up = pump(&r->up);
    ssize_t down = pump(&r->down);
    if (up < 0 || down < 0) {
        log_debug("tls#%u %s: %s", r->id, r->peer, strerror((int)-(up < 0 ? up : down)));
        relay_close(r, OUT_ERROR);
        return;
    }
    if (up > 0 || down > 0)
        r->last_active = ev_now(rctx->loop);
    if (r->hello != NULL && r->up.pre_len == 0) {
        free(r->hello);
        r->hello = NULL;
    }
    if (dir_done(&r->up) && dir_done(&r->down)) {
        relay_close(r, OUT_OK);
        return;
    }
    relay_update_io(r);
    arm_timer(r, r->last_active + (double)g_cfg->idle_timeout_ms / 1000.0);
}

static int dir_open(struct dir *d, int from, int to, uint64_t *counter)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    d->pipe_r = p[0];
    d->pipe_w = p[1];
    int cap = fcntl(p[1], F_GETPIPE_SZ);
    d->cap = cap > 0 ? (size_t)cap : 4096;
    d->from = from;
    d->to = to;
    d->counter = counter;
    return 0;
}

/* Connected: the pipes, the replayed ClientHello, then bytes both ways. */
static void relay_start(struct relay *r)
{
    if (dir_open(&r->up, r->cfd, r->ofd, &g_stats.tls_bytes_up) < 0 ||
        dir_open(&r->down, r->ofd, r->cfd, &g_stats.tls_bytes_down) < 0) {
        log_warn("tls#%u %s: pipe: %s", r->id, r->peer, strerror(errno));
        relay_close(r, OUT_OVERLOAD);
        return;
    }
    /* The ClientHello is replayed from user space before the first splice (the pipe could be a
     * single page when the user's pipe quota is spent, smaller than a hello). */
    r->up.pre = r->hello;
    r->up.pre_len = r->hello_len;
    r->phase = PH_RELAY;
    g_stats.tls_relayed++;
    r->last_active = ev_now(rctx->loop);
    log_debug("tls#%u %s: relaying %s", r->id, r->peer, r->sni.host);
    relay_run(r);
}

/* ---- CONNECT ------------------------------------------------------------------------------ */

static void relay_connect(struct relay *r);

/*
 * The connect to addrs[cur] failed (<err>: an errno): the address is marked dead (the resolver
 * lists it last for a while) and the next one is tried, as upstream does for HTTP (nothing was
 * sent yet); without one the relay ends (OUT_CONNECT).
 */
static void relay_connect_failed(struct relay *r, int err)
{
    char a[UTIL_ADDR_TEXT_MAX];
    util_addr_text(&r->origin, a, sizeof(a));
    resolver_mark_dead(rctx->resolver, &r->origin, util_now_ms());
    if (r->cur + 1 < r->n_addrs) {
        char next[UTIL_ADDR_TEXT_MAX];
        util_addr_text(&r->addrs[r->cur + 1], next, sizeof(next));
        log_info("tls#%u %s: connect %s (%s): %s: trying %s", r->id, r->peer, a, r->sni.host,
                 strerror(err), next);
        g_stats.upstream_connect_failover++;
        set_io(&r->oio, &r->oev, r->ofd, 0);
        close(r->ofd);
        r->ofd = -1;
        r->has_local = false;
        r->cur++;
        relay_connect(r);
        return;
    }
    log_info("tls#%u %s: connect %s (%s): %s", r->id, r->peer, a, r->sni.host, strerror(err));
    relay_close(r, OUT_CONNECT);
}

static void relay_connect(struct relay *r)
{
    const struct sockaddr_storage *addr = &r->addrs[r->cur];
    r->origin = *addr;
    r->has_origin = true;
    socklen_t alen =
        addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("tls#%u %s: socket: %s", r->id, r->peer, strerror(errno));
        relay_close(r, OUT_OVERLOAD);
        return;
    }
    r->ofd = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)addr, alen) < 0 && errno != EINPROGRESS) {
        relay_connect_failed(r, errno);
        return;
    }
    socklen_t sl = sizeof(r->local);
    r->has_local = getsockname(fd, (struct sockaddr *)&r->local, &sl) == 0;
    r->phase = PH_CONNECT;
    set_io(&r->oio, &r->oev, fd, EV_WRITE);
    arm_timer(r, ev_now(rctx->loop) + (double)g_cfg->connect_timeout_ms / 1000.0);
}

static void on_connected(struct relay *r)
{
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (getsockopt(r->ofd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        soerr = errno;
    if (soerr == EINPROGRESS || soerr == EALREADY)
        return;
    if (soerr != 0) {
        relay_connect_failed(r, soerr);
        return;
    }
    resolver_mark_alive(rctx->resolver, &r->origin);
    relay_start(r);
}

/* ---- RESOLVE ------------------------------------------------------------------------------ */

static void on_routed(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct relay *r = arg;
    CHECK_OBJ(r, RELAY_MAGIC);
    r->rq = NULL;
    ASSERT(r->phase == PH_RESOLVE);
    if (err == 0) {
        r->n_addrs = n < RELAY_MAX_TRIES ? n : RELAY_MAX_TRIES;
        memcpy(r->addrs, addrs, r->n_addrs * sizeof(addrs[0]));
        r->cur = 0;
        relay_connect(r);
    } else if (err == -EACCES) {
        log_info("tls#%u %s: %s resolves to a private address: refused", r->id, r->peer,
                 r->sni.host);
        relay_close(r, OUT_PRIVATE);
    } else if (err == -EINVAL) {
        relay_close(r, OUT_MALFORMED);
    } else {
        log_info("tls#%u %s: cannot resolve %s: %s", r->id, r->peer, r->sni.host, strerror(-err));
        relay_close(r, OUT_RESOLVE);
    }
    relay_done(r);
}

/* ---- HELLO -------------------------------------------------------------------------------- */

/* A whole ClientHello with a name: the same checks as an HTTP Host, then where to connect. */
static void relay_route(struct relay *r)
{
    const struct tlshello_sni *s = &r->sni;
    struct h1_authority auth;
    memset(&auth, 0, sizeof(auth));
    snprintf(auth.host, sizeof(auth.host), "%s", s->host);
    snprintf(auth.ident, sizeof(auth.ident), "%s", s->host);
    auth.port = RELAY_PORT;
    auth.is_ip = s->is_ip;
    struct admit_result adm;
    admit_host(g_cfg, g_domains, &auth, NULL, 0, ADMIT_TLS, &adm);
    if (adm.reason == ADMIT_R_IP_LITERAL) {
        log_info("tls#%u %s: IP-literal server name %s refused", r->id, r->peer, s->host);
        relay_close(r, OUT_IP_LITERAL);
        return;
    }
    if (!adm.allow) {
        log_info("tls#%u %s: server name %s not in the cache-domains lists", r->id, r->peer,
                 s->host);
        relay_close(r, OUT_UNLISTED);
        return;
    }
    set_io(&r->cio, &r->cev, r->cfd, 0); /* nothing more is read until the origin answers */
    r->phase = PH_RESOLVE;
    r->rq = resolver_route(rctx->resolver, s->host, s->is_ip, RELAY_PORT,
                           rctx->has_override ? &rctx->override_addr : NULL, g_cfg->allow_private,
                           on_routed, r);
}

static void relay_read_hello(struct relay *r)
{
    ssize_t n;
    do {
        n = recv(r->cfd, r->hello + r->hello_len, TLSHELLO_MAX_INPUT - r->hello_len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return;
    if (n <= 0) {
        if (n < 0)
            log_debug("tls#%u %s: recv: %s", r->id, r->peer, strerror(errno));
        relay_close(r, OUT_EOF);
        return;
    }
    r->hello_len += (size_t)n;
    enum tlshello_result res = tlshello_parse(r->hello, r->hello_len, &r->sni);
    switch (res) {
    case TLSHELLO_NEED_MORE:
        ASSERT(r->hello_len < TLSHELLO_MAX_INPUT);
        return;
    case TLSHELLO_OK:
        r->has_sni = true;
        relay_route(r);
        return;
    case TLSHELLO_NO_SNI:
        log_info("tls#%u %s: ClientHello without a server name: refused", r->id, r->peer);
        relay_close(r, OUT_NO_SNI);
        return;
    case TLSHELLO_NOT_TLS:
        log_info("tls#%u %s: not a TLS handshake: refused", r->id, r->peer);
        relay_close(r, OUT_NOT_TLS);
        return;
    case TLSHELLO_MALFORMED:
        log_info("tls#%u %s: malformed ClientHello (%zu bytes): refused", r->id, r->peer,
                 r->hello_len);
        relay_close(r, OUT_MALFORMED);
        return;
    }
    WRONG("tlshello result");
}

/* ---- watchers ----------------------------------------------------------------------------- */

static void on_client_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = container_of(w, struct relay, cio);
    CHECK_OBJ(r, RELAY_MAGIC);
    if (r->phase == PH_HELLO)
        relay_read_hello(r);
    else if (r->phase == PH_RELAY)
        relay_run(r);
    relay_done(r);
}

static void on_origin_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = container_of(w, struct relay, oio);
    CHECK_OBJ(r, RELAY_MAGIC);
    if (r->phase == PH_CONNECT)
        on_connected(r);
    else if (r->phase == PH_RELAY)
        relay_run(r);
    relay_done(r);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct relay *r = container_of(w, struct relay, timer);
    CHECK_OBJ(r, RELAY_MAGIC);
    ev_tstamp now = ev_now(loop);
    if (r->phase == PH_RELAY)
        r->deadline = r->last_active + (double)g_cfg->idle_timeout_ms / 1000.0;
    if (now < r->deadline - 0.001) {
        arm_timer(r, r->deadline);
        return;
    }
    switch (r->phase) {
    case PH_HELLO:
    case PH_RESOLVE:
        log_info("tls#%u %s: handshake_timeout in %s (%zu bytes of hello)", r->id, r->peer,
                 phase_names[r->phase], r->hello_len);
        relay_close(r, OUT_TIMEOUT);
        break;
    case PH_CONNECT:
        relay_connect_failed(r, ETIMEDOUT);
        break;
    case PH_RELAY:
        log_debug("tls#%u %s: idle_timeout", r->id, r->peer);
        relay_close(r, OUT_IDLE);
        break;
    case PH_CLOSED:
        WRONG("timer of a closed relay");
    }
    relay_done(r);
}

/* ---- the module ------------------------------------------------------------------------- */

/* True when <peer> is the local end of one of our own origin connections: we relayed to
 * ourselves (a name resolving to this host, or an override pointing at passthrough_listen). */
static bool is_own_connection(const struct sockaddr_storage *peer)
{
    for (const struct relay *r = relays; r != NULL; r = r->next)
        if (r->has_local && r->ofd >= 0 && util_addr_equal(&r->local, peer))
            return true;
    return false;
}

int tlsrelay_init(struct tlsrelay_ctx *ctx, const struct config *cfg)
{
    rctx = ctx;
    return log_file_open(&tls_log, cfg->tls_access, STDOUT_FILENO);
}

void tlsrelay_accept(int fd, const struct sockaddr_storage *peer)
{
    ASSERT(rctx != NULL);
    struct relay *r = xcalloc(1, sizeof(*r));
    r->magic = RELAY_MAGIC;
    r->id = ++next_id;
    r->phase = PH_HELLO;
    r->cfd = fd;
    r->ofd = -1;
    r->up.pipe_r = r->up.pipe_w = r->down.pipe_r = r->down.pipe_w = -1;
    util_addr_text(peer, r->peer, sizeof(r->peer));
    r->started = ev_now(rctx->loop);
    ev_init(&r->cio, on_client_io);
    ev_init(&r->oio, on_origin_io);
    ev_init(&r->timer, on_timer);
    r->next = relays;
    if (relays)
        relays->pprev = &r->next;
    r->pprev = &relays;
    relays = r;
    n_relays++;
    g_stats.tls_accepted++;
    log_debug("tls#%u %s: accepted", r->id, r->peer);
    if (is_own_connection(peer)) {
        log_warn("tls#%u %s: connection from the relay itself (a name or the override leads "
                 "back to passthrough_listen): refused",
                 r->id, r->peer);
        relay_close(r, OUT_LOOP);
        relay_done(r);
        return;
    }
    r->hello = xmalloc(TLSHELLO_MAX_INPUT);
    set_io(&r->cio, &r->cev, fd, EV_READ);
    arm_timer(r, r->started + (double)g_cfg->handshake_timeout_ms / 1000.0);
}

unsigned tlsrelay_count(void)
{
    return n_relays;
}

void tlsrelay_drain(void)
{
    struct relay *r = relays;
    while (r != NULL) {
        struct relay *next = r->next;
        if (r->phase != PH_RELAY) {
            relay_close(r, OUT_SHUTDOWN);
            relay_done(r);
        }
        r = next;
    }
}

int tlsrelay_reconfigure(const struct config *cfg)
{
    const char *now = tls_log.path;
    const char *want = cfg->tls_access;
    if ((now == NULL) != (want == NULL) || (now != NULL && strcmp(now, want) != 0)) {
        struct log_file next = LOG_FILE_CLOSED;
        int rc = log_file_open(&next, want, STDOUT_FILENO);
        if (rc < 0)
            return rc; /* the previous one is kept */
        log_file_close(&tls_log);
        tls_log = next;
        return 0;
    }
    tlsrelay_reopen_log();
    return 0;
}

void tlsrelay_reopen_log(void)
{
    int rc = log_file_reopen(&tls_log);
    if (rc < 0)
        log_err("cannot reopen the TLS access log %s: %s", tls_log.path, strerror(-rc));
}

void tlsrelay_fini(void)
{
    while (relays != NULL) {
        struct relay *r = relays;
        relay_close(r, OUT_SHUTDOWN);
        relay_free(r);
    }
    log_file_close(&tls_log);
}
