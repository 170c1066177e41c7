/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * upstream: the origin client state machine. See upstream.h for the contract.
 *
 * | state      | waits for                                   | timer              |
 * |------------|---------------------------------------------|--------------------|
 * | WAIT_SLOT  | upool to grant a busy slot                  | first_byte_timeout |
 * | CONNECTING | the non-blocking connect to finish          | connect_timeout    |
 * | SENDING    | the socket to take the request head         | first_byte_timeout |
 * | WAIT_HEAD  | a complete response head (1xx skipped)      | first_byte_timeout |
 * | BODY       | body bytes, or the sink to take them        | read_timeout       |
 * | DONE       | nothing: on_done called, about to be freed  | -                  |
 *
 * One driver (on_up_io) does the I/O the event allows, then steps while progress is made, then
 * recomputes watcher interest in update_io(). A failed connect goes on to the next address
 * (up_failover: CONNECTING -> WAIT_SLOT or CONNECTING again) before anything was sent. The
 * struct is freed only in up_finish(), never while a sink callback is on the stack (in_cb guards
 * upstream_cancel() from inside a callback).
 */
#include "upstream.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "buf.h"
#include "config.h"
#include "log.h"
#include "resolver.h"
#include "stats.h"
#include "upool.h"
#include "util.h"

#define UPSTREAM_MAGIC 0x0b57ea11u
#define UP_INBUF (64 * 1024)

#define UP_STATES(X)                                                                               \
    X(UP_S_WAIT_SLOT)                                                                              \
    X(UP_S_CONNECTING)                                                                             \
    X(UP_S_SENDING)                                                                                \
    X(UP_S_WAIT_HEAD)                                                                              \
    X(UP_S_BODY)                                                                                   \
    X(UP_S_DONE)

enum up_state {
#define UP_SX(s) s,
    UP_STATES(UP_SX)
#undef UP_SX
};

static const char *const up_state_names[] = {
#define UP_SX(s) #s,
    UP_STATES(UP_SX)
#undef UP_SX
};

static const char *const up_err_names[] = {
#define UP_X(e, s) s,
    UP_ERRORS(UP_X)
#undef UP_X
};

struct upstream {
    unsigned magic;
    unsigned id;
    enum up_state state;
    struct ev_loop *loop;
    struct upool *pool;    /* borrows */
    struct origin *origin; /* borrows; kept alive by our slot or wait */
    bool have_slot;
    struct upool_wait wait;                            /* queued for a slot in WAIT_SLOT */
    struct sockaddr_storage addrs[UPSTREAM_MAX_TRIES]; /* where to connect, in order */
    size_t n_addrs;
    size_t cur;                  /* addrs[cur]: this attempt's address (origin's) */
    struct resolver *resolver;   /* borrows; NULL: no address health kept */
    struct sockaddr_storage src; /* bound before connect when has_src */
    bool has_src;
    int fd;      /* owns, -1 when none */
    bool reused; /* fd came from the idle pool */
    bool retried;
    bool got_bytes; /* any response byte seen on this fd */
    bool paused;    /* the sink took less than offered */
    bool cancelled; /* upstream_cancel() from inside a callback */
    int in_cb;
    unsigned io_events; /* current interest of io */
    ev_io io;
    ev_timer timer;
    enum up_err pending_err;       /* failure to report from the timer (no synchronous callbacks) */
    ev_tstamp first_byte_deadline; /* from upstream_start: slot wait + connect + response head */
    struct buf out;                /* owns: the request head */
    size_t out_sent;
    struct buf in; /* owns: response bytes */
    enum h1_method method;
    struct h1_resp resp;
    uint64_t left; /* H1_BODY_LENGTH: bytes still expected */
    struct h1_chunked chunked;
    const struct upstream_sink *sink; /* borrows */
    void *arg;
};

static unsigned up_next_id;
static unsigned up_live;

const char *upstream_strerror(enum up_err err)
{
    return (unsigned)err < ARRAY_SIZE(up_err_names) ? up_err_names[err] : "?";
}

unsigned upstream_live(void)
{
    return up_live;
}

unsigned upstream_id(const struct upstream *up)
{
    return up->id;
}

bool upstream_origin_has_room(const struct upstream *up)
{
    CHECK_OBJ(up, UPSTREAM_MAGIC);
    return up->state != UP_S_WAIT_SLOT && up->have_slot && upool_has_room(up->origin);
}

static void up_set_state(struct upstream *up, enum up_state st)
{
    log_debug("up#%u %s: %s -> %s", up->id, up->origin ? upool_origin_name(up->origin) : "-",
              up_state_names[up->state], up_state_names[st]);
    up->state = st;
}

static void up_timer(struct upstream *up, uint64_t ms)
{
    ev_timer_stop(up->loop, &up->timer);
    if (ms > 0) {
        ev_timer_set(&up->timer, (double)ms / 1000.0, 0.);
        ev_timer_start(up->loop, &up->timer);
    }
}

/* Arms the first-byte timeout for what remains of it since upstream_start(). */
static void up_timer_first_byte(struct upstream *up)
{
    ev_tstamp left = up->first_byte_deadline - ev_now(up->loop);
    ev_timer_stop(up->loop, &up->timer);
    ev_timer_set(&up->timer, left > 0 ? left : 0., 0.);
    ev_timer_start(up->loop, &up->timer);
}

static void update_io(struct upstream *up)
{
    unsigned ev = 0;
    if (up->fd >= 0) {
        switch (up->state) {
        case UP_S_CONNECTING:
        case UP_S_SENDING:
            ev = EV_WRITE;
            break;
        case UP_S_WAIT_HEAD:
            ev = EV_READ;
            break;
        case UP_S_BODY:
            if (!up->paused && (buf_room(&up->in) > 0 || up->in.pos > up->in.start))
                ev = EV_READ;
            break;
        default:
            break;
        }
    }
    if (ev == up->io_events && (ev == 0 || ev_is_active(&up->io)))
        return;
    ev_io_stop(up->loop, &up->io);
    up->io_events = ev;
    if (ev != 0) {
        ev_io_set(&up->io, up->fd, (int)ev);
        ev_io_start(up->loop, &up->io);
    }
}

static void close_fd(struct upstream *up)
{
    if (up->fd >= 0) {
        ev_io_stop(up->loop, &up->io);
        close(up->fd);
        up->fd = -1;
        up->io_events = 0;
    }
}

/* Releases everything and frees. <keep_fd>: hand the socket back to the pool. */
static void up_free(struct upstream *up, bool keep_fd)
{
    ev_timer_stop(up->loop, &up->timer);
    ev_io_stop(up->loop, &up->io);
    if (upool_wait_cancel(up->pool, &up->wait)) /* queued, or granted and not yet told */
        up->have_slot = true;
    int fd = -1;
    if (keep_fd && up->fd >= 0) {
        fd = up->fd;
        up->fd = -1;
    }
    close_fd(up);
    if (up->have_slot)
        upool_release(up->origin, fd);
    else if (fd >= 0)
        close(fd);
    buf_free(&up->out);
    buf_free(&up->in);
    up->magic = 0;
    up_live--;
    free(up);
}

/* The end: report, then free (unless a callback up the stack still runs: see in_cb). */
static void up_finish(struct upstream *up, enum up_err err)
{
    bool reusable = false;
    if (err == UP_OK)
        reusable =
            up->resp.keep_alive && up->resp.framing != H1_BODY_CLOSE && buf_len(&up->in) == 0;
    else
        log_debug("up#%u %s: %s (%s)", up->id, upool_origin_name(up->origin),
                  upstream_strerror(err), up_state_names[up->state]);
    if (!reusable)
        close_fd(up);
    else
        ev_io_stop(up->loop, &up->io);
    ev_timer_stop(up->loop, &up->timer);
    up_set_state(up, UP_S_DONE);
    up->in_cb++;
    up->sink->on_done(up->arg, err);
    up->in_cb--;
    up_free(up, reusable);
}

static void on_slot(struct upool_wait *w);
static void up_begin(struct upstream *up);
static bool up_failover(struct upstream *up, const char *why);

/* The connect to addrs[cur] works: the address is not dead (any more). */
static void up_connected(struct upstream *up)
{
    if (up->resolver != NULL)
        resolver_mark_alive(up->resolver, &up->addrs[up->cur]);
    up_set_state(up, UP_S_SENDING);
    up_timer_first_byte(up);
}

static void up_fail_later(struct upstream *up, enum up_err err)
{
    up->pending_err = err; /* reported from the timer: never inside the caller */
    ev_timer_stop(up->loop, &up->timer);
    ev_timer_set(&up->timer, 0., 0.);
    ev_timer_start(up->loop, &up->timer);
}

/* The origin counters (stats.h): a peer request's (a cluster node's, has_src) are not an
 * origin's; the peers module counts those per peer. */
static void up_count(const struct upstream *up, uint64_t *counter)
{
    if (!up->has_src)
        (*counter)++;
}

static void up_uncount(const struct upstream *up, uint64_t *counter)
{
    if (!up->has_src)
        (*counter)--;
}

static void up_connect(struct upstream *up)
{
    const struct sockaddr_storage *addr = &up->addrs[up->cur];
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_warn("up#%u: socket: %s", up->id, strerror(errno));
        up_count(up, &g_stats.upstream_err_connect);
        up_fail_later(up, UP_ERR_CONNECT);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    socklen_t alen =
        addr->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    up->fd = fd;
    up->reused = false;
    up->got_bytes = false;
    up_count(up, &g_stats.upstream_conn_new);
    if (up->has_src && up->src.ss_family == addr->ss_family) {
        /* (the port is chosen at connect: bind does not reserve one per address) */
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)&up->src, alen) < 0) {
            /* (one line per 10 s: every request to a peer fails alike) */
            static ev_tstamp logged_at = -100;
            if (ev_now(up->loop) - logged_at >= 10) {
                logged_at = ev_now(up->loop);
                log_warn("up#%u: bind to the cluster address: %s", up->id, strerror(errno));
            }
            close_fd(up);
            up_count(up, &g_stats.upstream_err_connect);
            up_fail_later(up, UP_ERR_CONNECT);
            return;
        }
    }
    if (connect(fd, (const struct sockaddr *)addr, alen) == 0) {
        up_connected(up);
    } else if (errno == EINPROGRESS) {
        up_set_state(up, UP_S_CONNECTING);
        up_timer(up, g_cfg->connect_timeout_ms);
    } else {
        int e = errno; /* (refused or unreachable at once: loopback, no route) */
        log_debug("up#%u %s: connect: %s", up->id, upool_origin_name(up->origin), strerror(e));
        close_fd(up);
        up_count(up, &g_stats.upstream_err_connect);
        if (!up_failover(up, strerror(e)))
            up_fail_later(up, UP_ERR_CONNECT); /* (the next address's connect ran already) */
        return;
    }
    update_io(up);
}

/* With a slot held: reuse an idle socket or connect. */
static void up_begin(struct upstream *up)
{
    up->out_sent = 0;
    if (!buf_is_alloc(&up->in)) /* not while queued for a slot: queued requests stay small */
        buf_alloc(&up->in, UP_INBUF);
    int fd = up->retried ? -1 : upool_take_idle(up->origin);
    up_count(up, &g_stats.upstream_requests);
    if (fd >= 0) {
        up->fd = fd;
        up->reused = true;
        up->got_bytes = false;
        up_count(up, &g_stats.upstream_conn_reused);
        up_set_state(up, UP_S_SENDING);
        up_timer_first_byte(up);
        update_io(up);
        /* A connected socket takes the request now, in this iteration (after the running
         * callback: on_up_io never runs inside upstream_start), not after a poll and every
         * client's turn in the next one. */
        ev_feed_event(up->loop, &up->io, EV_WRITE);
        return;
    }
    up_connect(up);
}

static void on_slot(struct upool_wait *w)
{
    struct upstream *up = container_of(w, struct upstream, wait);
    CHECK_OBJ(up, UPSTREAM_MAGIC);
    up->have_slot = true;
    up_begin(up);
}

/* A failure before any response byte on a reused socket: the origin closed it while idle. */
static bool up_retry(struct upstream *up)
{
    if (!up->reused || up->got_bytes || up->retried || up->state > UP_S_WAIT_HEAD)
        return false;
    log_debug("up#%u %s: pooled connection failed, retrying on a new one", up->id,
              upool_origin_name(up->origin));
    up_count(up, &g_stats.upstream_retries);
    up_uncount(up, &g_stats.upstream_requests); /* counted again by up_begin */
    close_fd(up);
    up->retried = true;
    buf_reset(&up->in);
    up_begin(up);
    return true;
}

/*
 * The connect to addrs[cur] failed (<why>): the address is marked dead and, when the request
 * has another address, it goes on there (nothing was sent yet) with a slot of that address's
 * origin and a first-byte timeout of its own. Returns false when no address is left.
 */
static bool up_failover(struct upstream *up, const char *why)
{
    if (up->resolver != NULL)
        resolver_mark_dead(up->resolver, &up->addrs[up->cur], util_now_ms());
    if (up->cur + 1 >= up->n_addrs)
        return false;
    char next[UTIL_ADDR_TEXT_MAX];
    util_addr_text(&up->addrs[up->cur + 1], next, sizeof(next));
    log_info("up#%u %s: connect: %s: trying %s (address %zu of %zu)", up->id,
             upool_origin_name(up->origin), why, next, up->cur + 2, up->n_addrs);
    up_count(up, &g_stats.upstream_connect_failover);
    up_uncount(up, &g_stats.upstream_requests); /* counted again by up_begin */
    close_fd(up);
    ev_timer_stop(up->loop, &up->timer);
    if (up->have_slot) {
        up->have_slot = false;
        upool_release(up->origin, -1); /* (may free that origin) */
    }
    up->cur++;
    up->retried = false; /* another origin: its idle sockets may be taken (and retried once) */
    up->origin = upool_origin(up->pool, &up->addrs[up->cur]);
    up->first_byte_deadline = ev_now(up->loop) + (double)g_cfg->first_byte_timeout_ms / 1000.0;
    if (upool_slot_try(up->origin)) {
        up->have_slot = true;
        up_begin(up);
    } else {
        up_count(up, &g_stats.upstream_queued);
        up_set_state(up, UP_S_WAIT_SLOT);
        upool_wait(up->origin, &up->wait, on_slot);
        up_timer_first_byte(up);
    }
    return true;
}

/* A connect that failed after EINPROGRESS (<err>: UP_ERR_CONNECT or UP_ERR_CONNECT_TIMEOUT). */
static void up_connect_failed(struct upstream *up, enum up_err err, const char *why)
{
    if (err == UP_ERR_CONNECT_TIMEOUT)
        up_count(up, &g_stats.upstream_err_timeout);
    else
        up_count(up, &g_stats.upstream_err_connect);
    if (!up_failover(up, why))
        up_finish(up, err);
}

static void up_fail(struct upstream *up, enum up_err err)
{
    if (err == UP_ERR_IO && up_retry(up))
        return;
    switch (err) {
    case UP_ERR_PROTO:
        up_count(up, &g_stats.upstream_err_proto);
        break;
    case UP_ERR_IO:
        up_count(up, &g_stats.upstream_err_io);
        break;
    case UP_ERR_CONNECT:
        up_count(up, &g_stats.upstream_err_connect);
        break;
    case UP_ERR_CONNECT_TIMEOUT:
    case UP_ERR_FIRST_BYTE_TIMEOUT:
    case UP_ERR_READ_TIMEOUT:
        up_count(up, &g_stats.upstream_err_timeout);
        break;
    default:
        break;
    }
    up_finish(up, err);
}

static void on_up_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct upstream *up = container_of(w, struct upstream, timer);
    CHECK_OBJ(up, UPSTREAM_MAGIC);
    if (up->pending_err != UP_OK) {
        enum up_err err = up->pending_err;
        up->pending_err = UP_OK;
        up_finish(up, err);
        return;
    }
    switch (up->state) {
    case UP_S_CONNECTING:
        up_connect_failed(up, UP_ERR_CONNECT_TIMEOUT, "timed out");
        break;
    case UP_S_WAIT_SLOT:
    case UP_S_SENDING:
    case UP_S_WAIT_HEAD:
        up_fail(up, UP_ERR_FIRST_BYTE_TIMEOUT);
        break;
    case UP_S_BODY:
        up_fail(up, UP_ERR_READ_TIMEOUT);
        break;
    default:
        WRONG("timer in a state without one");
    }
}

/* Offers body bytes to the sink; returns false when the sink took less (paused). */
static bool deliver(struct upstream *up, const char *data, size_t len, size_t *taken)
{
    up->in_cb++;
    size_t n = up->sink->on_body(up->arg, data, len);
    up->in_cb--;
    ASSERT(n <= len);
    *taken = n;
    if (!up->has_src) /* (a peer's bytes are not an origin's) */
        g_stats.upstream_bytes += n;
    if (n < len)
        up->paused = true;
    return n == len;
}

/* Parses and delivers what is buffered. Returns true if the upstream still exists. */
static bool up_process(struct upstream *up)
{
    while (up->state == UP_S_WAIT_HEAD) {
        ssize_t n = h1_resp_parse(up->in.pos, buf_len(&up->in), up->method, &up->resp);
        if (n == 0) {
            if (buf_room(&up->in) == 0 && up->in.pos == up->in.start) {
                up_fail(up, UP_ERR_PROTO);
                return false;
            }
            return true;
        }
        if (n < 0) {
            log_debug("up#%u %s: invalid response head (%s)", up->id, upool_origin_name(up->origin),
                      n == -E2BIG ? "too large" : "malformed");
            up_fail(up, UP_ERR_PROTO);
            return false;
        }
        if (up->resp.status < 200) {
            buf_consume(&up->in, (size_t)n);
            continue;
        }
        up_set_state(up, UP_S_BODY);
        up->left = up->resp.content_length;
        h1_chunked_init(&up->chunked);
        up_timer(up, g_cfg->read_timeout_ms);
        up->in_cb++;
        up->sink->on_head(up->arg, up->in.pos, &up->resp);
        up->in_cb--;
        buf_consume(&up->in, (size_t)n);
        if (up->cancelled) {
            up_free(up, false);
            return false;
        }
    }
    if (up->state != UP_S_BODY)
        return true;

    while (!up->paused) {
        size_t len = buf_len(&up->in), taken = 0;
        switch (up->resp.framing) {
        case H1_BODY_NONE:
            up_finish(up, UP_OK);
            return false;
        case H1_BODY_LENGTH:
            if (up->left == 0) {
                up_finish(up, UP_OK);
                return false;
            }
            if (len == 0)
                return true;
            if (len > up->left)
                len = (size_t)up->left;
            deliver(up, up->in.pos, len, &taken);
            up->left -= taken;
            buf_consume(&up->in, taken);
            break;
        case H1_BODY_CHUNKED: {
            size_t framing = 0, avail = 0;
            if (h1_chunked_parse(&up->chunked, up->in.pos, len, &framing, &avail) < 0) {
                log_debug("up#%u %s: bad chunked framing", up->id, upool_origin_name(up->origin));
                up_fail(up, UP_ERR_PROTO);
                return false;
            }
            buf_consume(&up->in, framing);
            if (up->chunked.done) {
                up_finish(up, UP_OK);
                return false;
            }
            if (avail == 0)
                return true;
            deliver(up, up->in.pos, avail, &taken);
            h1_chunked_take(&up->chunked, taken);
            buf_consume(&up->in, taken);
            break;
        }
        case H1_BODY_CLOSE:
            if (len == 0)
                return true;
            deliver(up, up->in.pos, len, &taken);
            buf_consume(&up->in, taken);
            break;
        }
        if (up->cancelled) {
            up_free(up, false);
            return false;
        }
    }
    ev_timer_stop(up->loop, &up->timer); /* paused: the sink, not the origin, is slow */
    return true;
}

static void on_up_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct upstream *up = container_of(w, struct upstream, io);
    CHECK_OBJ(up, UPSTREAM_MAGIC);

    if (up->state == UP_S_CONNECTING && (revents & EV_WRITE)) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(up->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            soerr = errno;
        if (soerr != 0) {
            log_debug("up#%u %s: connect: %s", up->id, upool_origin_name(up->origin),
                      strerror(soerr));
            up_connect_failed(up, UP_ERR_CONNECT, strerror(soerr));
            return;
        }
        up_connected(up);
    }
    if (up->state == UP_S_SENDING && (revents & EV_WRITE)) {
        while (up->out_sent < buf_len(&up->out)) {
            ssize_t n = send(up->fd, up->out.pos + up->out_sent, buf_len(&up->out) - up->out_sent,
                             MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                break;
            if (n < 0) {
                up_fail(up, UP_ERR_IO);
                return;
            }
            up->out_sent += (size_t)n;
        }
        if (up->out_sent == buf_len(&up->out))
            up_set_state(up, UP_S_WAIT_HEAD);
    }
    if ((revents & EV_READ) && (up->state == UP_S_WAIT_HEAD || up->state == UP_S_BODY)) {
        ssize_t n = buf_recv(&up->in, up->fd);
        if (n > 0) {
            up->got_bytes = true;
            if (up->state == UP_S_BODY)
                up_timer(up, g_cfg->read_timeout_ms);
        } else if (n != -EAGAIN) {
            /* EOF or reset: first deliver what is buffered; close-delimited bodies end here. */
            if (!up_process(up))
                return;
            if (up->state == UP_S_BODY && up->resp.framing == H1_BODY_CLOSE && n == 0 &&
                buf_len(&up->in) == 0) {
                up_finish(up, UP_OK);
                return;
            }
            if (up->state == UP_S_BODY && up->paused && n == 0) {
                /* Keep the buffered tail for the sink; the EOF is seen again after resume. */
                close_fd(up);
                return;
            }
            up_fail(up, UP_ERR_IO);
            return;
        }
    }
    if (!up_process(up))
        return;
    if (up->fd < 0 && up->state == UP_S_BODY && !up->paused) {
        /* The origin closed while we were paused and the tail is now delivered. */
        if (up->resp.framing == H1_BODY_CLOSE && buf_len(&up->in) == 0)
            up_finish(up, UP_OK);
        else
            up_fail(up, UP_ERR_IO);
        return;
    }
    update_io(up);
}

struct upstream *upstream_start(struct ev_loop *loop, struct upool *pool,
                                const struct upstream_req *req, const struct upstream_sink *sink,
                                void *arg)
{
    struct upstream *up = xcalloc(1, sizeof(*up));
    up->magic = UPSTREAM_MAGIC;
    up->id = ++up_next_id;
    up->loop = loop;
    up->pool = pool;
    up->fd = -1;
    ASSERT(req->n_addrs >= 1 && req->n_addrs <= RESOLVER_MAX_ADDRS);
    struct sockaddr_storage addrs[RESOLVER_MAX_ADDRS];
    memcpy(addrs, req->addrs, req->n_addrs * sizeof(addrs[0]));
    if (req->resolver != NULL) /* the health of now, not of when the list was made */
        resolver_order(req->resolver, addrs, req->n_addrs, util_now_ms());
    up->n_addrs = req->n_addrs < UPSTREAM_MAX_TRIES ? req->n_addrs : UPSTREAM_MAX_TRIES;
    memcpy(up->addrs, addrs, up->n_addrs * sizeof(addrs[0]));
    up->resolver = req->resolver;
    if (req->src != NULL) {
        up->src = *req->src;
        up->has_src = true;
        if (up->src.ss_family == AF_INET)
            ((struct sockaddr_in *)&up->src)->sin_port = 0;
        else if (up->src.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&up->src)->sin6_port = 0;
    }
    up->method = req->method;
    up->sink = sink;
    up->arg = arg;
    up->state = UP_S_WAIT_SLOT;
    buf_alloc(&up->out, req->head_len);
    buf_append(&up->out, req->head, req->head_len);
    ev_init(&up->io, on_up_io);
    /* Origin bytes before the clients' turns in an iteration: a head or bytes that arrive go out
     * to their waiting clients in the same iteration (see cache.c notify_soon). */
    ev_set_priority(&up->io, EV_MAXPRI - 1);
    ev_init(&up->timer, on_up_timer);
    up->first_byte_deadline = ev_now(loop) + (double)g_cfg->first_byte_timeout_ms / 1000.0;
    up_live++;
    up->origin = upool_origin(pool, &up->addrs[0]);
    if (upool_slot_try(up->origin)) {
        up->have_slot = true;
        up_begin(up);
    } else {
        up_count(up, &g_stats.upstream_queued);
        upool_wait(up->origin, &up->wait, on_slot);
        up_timer_first_byte(up);
    }
    return up;
}

void upstream_resume(struct upstream *up)
{
    CHECK_OBJ(up, UPSTREAM_MAGIC);
    if (!up->paused)
        return;
    up->paused = false;
    if (up->fd >= 0)
        up_timer(up, g_cfg->read_timeout_ms);
    /* Offer the buffered bytes from the loop, not from inside the caller. */
    ev_feed_event(up->loop, &up->io, EV_CUSTOM);
}

void upstream_cancel(struct upstream **upp)
{
    struct upstream *up = *upp;
    if (up == NULL)
        return;
    CHECK_OBJ(up, UPSTREAM_MAGIC);
    *upp = NULL;
    if (up->in_cb > 0) {
        up->cancelled = true;
        return;
    }
    up_free(up, false);
}
