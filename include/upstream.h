/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * upstream: one HTTP/1.1 request to an origin address and the streaming of its response to a
 * sink. It takes a busy slot from upool (waiting FIFO if max_per_origin is reached), reuses an
 * idle keep-alive socket or connects, sends the request head it was given, parses the response
 * head (skipping 1xx), then hands body bytes (de-chunked) to the sink as they arrive.
 *
 * Back-pressure: sink->on_body() returns how many bytes it took; when fewer than offered, the
 * upstream stops reading the origin until upstream_resume(). Buffering is one fixed input buffer.
 * Retries: a request on a reused keep-alive socket that fails before any response byte is sent
 * again once on a fresh connection (GET/HEAD are idempotent).
 * Failover: the request is given the origin's addresses in order (resolver_route's answer).
 * A connect that fails (refused, unreachable, connect_timeout) marks its address dead in the
 * resolver (resolver_mark_dead) and the request goes on to the next address, with a slot of
 * that address (nothing was sent yet), at most UPSTREAM_MAX_TRIES addresses in all; a connect
 * that succeeds clears its address's mark. Each address gets its own first_byte_timeout. The
 * addresses are put in the resolver's current order at start (resolver_order), so a request
 * made from an older answer (a resumed fill) avoids the addresses found dead since.
 * Timeouts: connect_timeout; first_byte_timeout from the request (including a wait for a slot)
 * to the response head; read_timeout between body reads (not while paused by the sink).
 * Logging: what went wrong (connect error, bad head or framing, the error and the state it ended
 * in) is logged at debug level only, as "up#ID ORIGIN: ..."; the caller decides what the failure
 * means and logs it (a socket() failure, a local resource problem, is a warning here). A
 * failover is decided here, so it is logged here (info) and counted (upstream_connect_failover).
 *
 * Lifecycle: upstream_start() -> [on_head] -> on_body* -> on_done (exactly once, last) -> freed
 * by this module right after on_done returns. upstream_cancel() instead ends it silently.
 * Callbacks never fire inside upstream_start(), upstream_resume() or upstream_cancel(). A sink
 * callback may call upstream_cancel() on its own upstream (it is then freed after the callback).
 */
#ifndef CACHEPARTY_UPSTREAM_H
#define CACHEPARTY_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "http1.h"

struct ev_loop;
struct resolver;
struct upool;
struct upstream;

#define UPSTREAM_MAX_TRIES 4 /* addresses one request tries, the first included */

#define UP_ERRORS(X)                                                                               \
    X(UP_OK, "ok")                                                                                 \
    X(UP_ERR_CONNECT, "connect failed")                                                            \
    X(UP_ERR_CONNECT_TIMEOUT, "connect timeout")                                                   \
    X(UP_ERR_FIRST_BYTE_TIMEOUT, "first byte timeout")                                             \
    X(UP_ERR_READ_TIMEOUT, "read timeout")                                                         \
    X(UP_ERR_PROTO, "invalid response")                                                            \
    X(UP_ERR_IO, "connection lost")

enum up_err {
#define UP_X(e, s) e,
    UP_ERRORS(UP_X)
#undef UP_X
};

const char *upstream_strerror(enum up_err err);

struct upstream_sink {
    /* The final response head; <buf> holds the head bytes the spans of <resp> point into,
     * borrowed for the duration of the call. */
    void (*on_head)(void *arg, const char *buf, const struct h1_resp *resp);
    /* Body bytes (borrowed); returns how many were taken (0..len). */
    size_t (*on_body)(void *arg, const char *data, size_t len);
    /* End: UP_OK after the whole body, else the error (on_head may or may not have fired). */
    void (*on_done)(void *arg, enum up_err err);
};

struct upstream_req {
    const struct sockaddr_storage *addrs; /* the origin's checked addresses, in order (copied) */
    size_t n_addrs;                       /* >= 1; the first UPSTREAM_MAX_TRIES are tried */
    struct resolver *resolver; /* borrows: address health (ordering, marks); NULL: none kept */
    const char *head;          /* request head bytes to send (copied) */
    size_t head_len;
    enum h1_method method; /* GET or HEAD: decides whether a body follows */
    /* Where its connections come from (copied; the port is ignored): a cluster node's requests
     * to its peers leave from its own node address. NULL: wherever the kernel chooses. Such a
     * request is not an origin's: it is not counted in upstream_requests nor upstream_bytes
     * (peers.h counts it). */
    const struct sockaddr_storage *src;
};

/* Starts the request. Never NULL. <pool> and <sink> are borrowed and must outlive it. */
struct upstream *upstream_start(struct ev_loop *loop, struct upool *pool,
                                const struct upstream_req *req, const struct upstream_sink *sink,
                                void *arg);
/* After on_body took fewer bytes than offered: offer the rest again (later, from the loop). */
void upstream_resume(struct upstream *up);
/* Ends the request without further callbacks; the socket is closed. Sets *up = NULL. */
void upstream_cancel(struct upstream **up);
/* Number of live upstream objects (for leak checks at exit). */
unsigned upstream_live(void);
/* Its id, as its log lines show it ("up#<id>"). */
unsigned upstream_id(const struct upstream *up);
/* Whether a request of <up>'s origin asked now would get a connection slot at once, besides the
 * one <up> holds: <up> holds a slot (it is not queued for one, nor granted one it has not taken
 * yet), the origin has another free, and nobody is queued for one. */
bool upstream_origin_has_room(const struct upstream *up);

#endif
