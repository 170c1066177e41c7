/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn_pass: the pass-through responder (part of the conn module, see conn_int.h): the request
 * is forwarded to its origin uncached and the answer streamed back as it comes.
 *
 * | state    | waits for                                                 | driven by          |
 * |----------|-----------------------------------------------------------|--------------------|
 * | RESOLVE  | the origin's address (resolver_route: override, literal   | on_routed          |
 * |          | or look-up; always from the loop)                         |                    |
 * | UPSTREAM | the origin's response head (upstream tries the next address | sink_head          |
 * |          | of the name when a connect fails)                         |                    |
 * | STREAM   | body bytes from upstream, or room in <out> to take them   | sink_body/sink_done|
 *
 * The resolver's and upstream's callbacks drive this path; the conn driver's step only lets the
 * origin send again once <out> drained below half (back-pressure: sink_body takes what fits,
 * upstream pauses until upstream_resume). Errors before the head become a local 502/504 (403
 * for a private origin address); after the head, the response is cut (conn_response_cut).
 * Used for requests with Authorization (BYPASS), HEAD requests of objects not stored, and
 * answers the cache hands over (uncacheable ones, see conn_cache.c).
 *
 * Revalidation (a revalidate rule, config.h): the cache path hands over a request whose object
 * is stored (c->reval_pending, with its validators). The request goes to the origin without the
 * client's conditionals, with If-None-Match (the stored ETag) and If-Modified-Since (the stored
 * Last-Modified), and the origin's answer decides, as lancache's proxy_cache_revalidate and
 * proxy_cache_use_stale would:
 * - 304: the stored copy is served (the cache path again: REVALIDATED);
 * - another 2xx: the object changed: the stored copy is dropped and the request goes to the
 *   cache path, which fetches and stores the new one (MISS);
 * - 500, 502, 503, 504 (lancache's proxy_cache_use_stale list), a refused or timed-out
 *   connection, a name that does not resolve: the stored copy is served (STALE);
 * - 403, 404, 410: the answer is passed to the client and the stored copy dropped;
 * - anything else (a redirect, another 4xx or 5xx): the answer is passed to the client, the
 *   stored copy kept.
 * The conditional request's answer body is never read (upstream_cancel) unless it is passed on.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <ev.h>

#include "cache.h"
#include "config.h"
#include "conn_int.h"
#include "forward.h"
#include "http1.h"
#include "log.h"
#include "resolver.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

extern const struct config *g_cfg;

static void sink_head(void *arg, const char *buf, const struct h1_resp *resp);
static size_t sink_body(void *arg, const char *data, size_t len);
static void sink_done(void *arg, enum up_err err);

static const struct upstream_sink conn_sink = {sink_head, sink_body, sink_done};

/* The object's chunks are dropped (reval_drop_object): <arg> is what for (a string owned here). */
static void on_reval_dropped(void *arg, int n)
{
    log_info("%s: %d stored chunks dropped", (char *)arg, n < 0 ? 0 : n);
    free(arg);
}

/* Drops every stored chunk of the request's object (a revalidation found it changed or gone). */
static void reval_drop_object(struct conn *c)
{
    size_t len;
    char *key =
        cache_key_build(c->ident, c->req_head + c->req.path_only.off, c->req.path_only.len, &len);
    char what[512];
    snprintf(what, sizeof(what),
             "conn#%u %s: revalidation: the origin's copy of %s changed or is gone", c->id, c->peer,
             c->auth.host);
    (void)cache_purge(c->ctx->cache, key, len, on_reval_dropped, xstrdup(what));
    free(key);
}

/* Gives a revalidated request back to the cache path, which serves the stored copy under
 * <status> ("REVALIDATED", "STALE"), or fetches the object anew (NULL). */
static void reval_back(struct conn *c, const char *status, int upstream_status)
{
    c->reval_pending = false;
    c->reval_status = status;
    c->reval_upstream = upstream_status;
    conn_hand_over(c, &conn_cache_responder);
    conn_drive(c); /* (from an upstream or resolver callback: nothing else steps it now) */
}

/* Appends the stored validators to the request head <head>[0..n) (ending in its blank line).
 * Returns the new length, or 0 when they do not fit in <cap>. */
static size_t reval_fields(const struct conn *c, char *head, size_t n, size_t cap)
{
    ASSERT(n >= 2);
    n -= 2; /* the blank line, written again below */
    int k = snprintf(head + n, cap - n, "%s%s%s%s%s%s\r\n",
                     c->reval_etag[0] ? "If-None-Match: " : "", c->reval_etag,
                     c->reval_etag[0] ? "\r\n" : "", c->reval_lm[0] ? "If-Modified-Since: " : "",
                     c->reval_lm, c->reval_lm[0] ? "\r\n" : "");
    return k > 0 && (size_t)k < cap - n ? n + (size_t)k : 0;
}

/* To the origin's addresses <addrs>[0..n_addrs) in order (upstream fails over between them). */
static void start_upstream(struct conn *c, const struct sockaddr_storage *addrs, size_t n_addrs)
{
    static char head[CONN_UPHEAD];
    /* (a revalidation sends the stored validators, never the client's) */
    struct fwd_req_opts o = {g_cfg->hostname, c->bypass && !c->reval_pending, c->bypass};
    size_t n = fwd_request_head(c->req_head, &c->req, &c->auth, &o, head, sizeof(head));
    if (n > 0 && c->reval_pending)
        n = reval_fields(c, head, n, sizeof(head));
    if (n == 0) {
        conn_local_response(c, 431, true, NULL);
        return;
    }
    struct upstream_req ur;
    memset(&ur, 0, sizeof(ur));
    ur.addrs = addrs;
    ur.n_addrs = n_addrs;
    ur.resolver = c->ctx->resolver;
    ur.head = head;
    ur.head_len = n;
    ur.method = c->req.method;
    conn_set_state(c, CONN_S_UPSTREAM);
    c->up = upstream_start(c->ctx->loop, c->ctx->upool, &ur, &conn_sink, c);
}

static void on_routed(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct conn *c = arg;
    CHECK_OBJ(c, CONN_MAGIC);
    c->rq = NULL;
    if (c->state == CONN_S_CLOSING)
        return;
    if (err == 0) {
        start_upstream(c, addrs, n);
    } else if (c->reval_pending && err != -EACCES && err != -EINVAL) {
        log_info("conn#%u %s: revalidation: cannot resolve %s: %s: serving the stored copy", c->id,
                 c->peer, c->auth.host, strerror(-err));
        reval_back(c, "STALE", 502);
    } else if (err == -EACCES) {
        log_info("conn#%u %s: %s resolves to a private address: refused", c->id, c->peer,
                 c->auth.host);
        g_stats.forbidden++;
        conn_local_response(c, 403, false, NULL);
    } else if (err == -EINVAL) {
        conn_local_response(c, 400, true, NULL); /* (h1_authority_parse let no such literal by) */
    } else {
        log_info("conn#%u %s: cannot resolve %s: %s", c->id, c->peer, c->auth.host, strerror(-err));
        conn_local_response(c, 502, false, NULL);
    }
    conn_update_io(c);
    conn_update_timer(c);
}

static void sink_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    struct conn *c = arg;
    CHECK_OBJ(c, CONN_MAGIC);
    if (c->state == CONN_S_CLOSING)
        return;
    if (c->reval_pending) {
        int st = resp->status;
        if (st == 304) {
            reval_back(c, "REVALIDATED", st);
            return;
        }
        if ((st >= 200 && st < 300) || st == 403 || st == 404 || st == 410)
            reval_drop_object(c);
        if (st >= 200 && st < 300) {
            reval_back(c, NULL, 0);
            return;
        }
        if (st == 500 || st == 502 || st == 503 || st == 504) { /* lancache's use_stale list */
            log_info("conn#%u %s: revalidation: origin %s answered %d: serving the stored copy",
                     c->id, c->peer, c->auth.host, st);
            reval_back(c, "STALE", st);
            return;
        }
        c->reval_pending = false; /* passed on to the client as it is */
    }
    conn_out_ensure(c);
    buf_compact(&c->out);
    struct fwd_resp_opts o = {.hostname = conn_processed_by(c),
                              .cache_status = c->bypass ? "BYPASS" : "MISS",
                              .client_minor = c->req.version_minor,
                              .head_req = c->head_req,
                              .keep_alive = c->keep_alive && !c->draining,
                              .date = conn_date(c),
                              .hide_etag = c->hide_etag,
                              .upstream_status = resp->status};
    /* Keep room after the head for a chunked body's framing and its last-chunk. */
    size_t room = buf_room(&c->out) > 32 ? buf_room(&c->out) - 32 : 0;
    size_t n = fwd_response_head(buf, resp, &o, &c->body, c->out.last, room);
    if (n == 0) {
        log_info("conn#%u %s: origin response head too large to forward", c->id, c->peer);
        conn_close(c);
        return;
    }
    c->out.last += n;
    c->status = resp->status;
    if (c->body == FWD_BODY_CLOSE || !o.keep_alive)
        c->keep_alive = false;
    conn_set_state(c, CONN_S_STREAM);
    conn_update_io(c);
}

static size_t sink_body(void *arg, const char *data, size_t len)
{
    struct conn *c = arg;
    CHECK_OBJ(c, CONN_MAGIC);
    if (c->state != CONN_S_STREAM)
        return 0;
    if (c->body == FWD_BODY_NONE)
        return len; /* HEAD: the origin should send nothing; drop it */
    size_t taken = 0;
    if (c->body == FWD_BODY_CHUNKED) {
        /* Re-chunk into <out>, keeping room for the last-chunk "0\r\n\r\n". */
        buf_compact(&c->out);
        size_t room = buf_room(&c->out);
        if (room <= 12 + 5)
            return 0;
        size_t n = len < room - 12 - 5 ? len : room - 12 - 5;
        int k = snprintf(c->out.last, room, "%zx\r\n", n);
        c->out.last += k;
        memcpy(c->out.last, data, n);
        c->out.last += n;
        memcpy(c->out.last, "\r\n", 2);
        c->out.last += 2;
        taken = n;
    } else {
        if (buf_len(&c->out) == 0) {
            /* Nothing queued before: write straight from the upstream buffer, no copy. */
            ssize_t n;
            do {
                n = send(c->fd, data, len, MSG_NOSIGNAL);
            } while (n < 0 && errno == EINTR);
            if (n < 0 && errno != EAGAIN) {
                log_debug("conn#%u %s: send: %s", c->id, c->peer, strerror(errno));
                g_stats.client_reset++;
                conn_close(c);
                return 0;
            }
            if (n > 0) {
                taken = (size_t)n;
                c->last_write = ev_now(c->ctx->loop);
            }
        }
        if (taken < len)
            taken += buf_append(&c->out, data + taken, len - taken);
    }
    c->body_bytes += taken;
    conn_live_account(c, false);
    conn_count_bytes(c, c->bypass ? 0 : taken, 0, c->bypass ? taken : 0);
    conn_update_io(c);
    conn_update_timer(c);
    return taken;
}

static void sink_done(void *arg, enum up_err err)
{
    struct conn *c = arg;
    CHECK_OBJ(c, CONN_MAGIC);
    c->up = NULL;
    if (c->state == CONN_S_CLOSING)
        return;
    if (err == UP_OK) {
        if (c->body == FWD_BODY_CHUNKED && buf_append(&c->out, "0\r\n\r\n", 5) != 5) {
            /* Cannot happen while sink_head and sink_body keep their room; never trust it. */
            log_warn("conn#%u %s: no room for the last chunk: closing", c->id, c->peer);
            conn_close(c);
            return;
        }
        if (c->body == FWD_BODY_CLOSE)
            c->keep_alive = false;
        conn_response_done(c);
    } else if (c->state == CONN_S_UPSTREAM) {
        int status =
            (err == UP_ERR_CONNECT_TIMEOUT || err == UP_ERR_FIRST_BYTE_TIMEOUT) ? 504 : 502;
        if (c->reval_pending) {
            log_info("conn#%u %s: revalidation: origin %s: %s: serving the stored copy", c->id,
                     c->peer, c->auth.host, upstream_strerror(err));
            reval_back(c, "STALE", status);
            conn_update_io(c);
            conn_update_timer(c);
            return;
        }
        /* upstream logs its failures at debug level only: this layer decides, so it says why */
        log_info("conn#%u %s: origin %s: %s: answering %d", c->id, c->peer, c->auth.host,
                 upstream_strerror(err), status);
        conn_local_response(c, status, false, NULL);
    } else {
        /* Failure after the head went out: the client sees a short body, then the close. */
        log_info("conn#%u %s: origin failed mid-body after %llu bytes: closing", c->id, c->peer,
                 (unsigned long long)c->body_bytes);
        conn_response_cut(c);
    }
    conn_update_io(c);
    conn_update_timer(c);
}

static void pass_begin(struct conn *c)
{
    c->cached = false;
    conn_set_state(c, CONN_S_RESOLVE);
    c->rq = resolver_route(c->ctx->resolver, c->auth.host, c->auth.is_ip, c->auth.port,
                           c->ctx->has_override ? &c->ctx->override_addr : NULL,
                           g_cfg->allow_private, on_routed, c);
}

static bool pass_step(struct conn *c)
{
    /* <out> may have drained (the driver wrote it): let the origin send again. */
    if (c->state == CONN_S_STREAM && c->up != NULL && buf_len(&c->out) < CONN_OUTBUF / 2)
        upstream_resume(c->up);
    return false;
}

static void pass_reset(struct conn *c)
{
    resolver_cancel(&c->rq);
    upstream_cancel(&c->up);
    c->body = FWD_BODY_NONE;
}

const struct conn_responder conn_pass_responder = {"pass", pass_begin, pass_step, pass_reset};
