/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn: the client connection state machine. See conn.h.
 *
 * | state      | waits for                                          | conn timer            |
 * |------------|----------------------------------------------------|-----------------------|
 * | READ_HEAD  | a complete request head in <in>                    | keepalive / request   |
 * | RESOLVE    | pass: the origin's address (resolver_route)        | send (if output left) |
 * | UPSTREAM   | pass: the origin's response head                   | send (if output left) |
 * | STREAM     | pass: body bytes from upstream, or room for them   | send (if output left) |
 * | CACHE_HEAD | cache: the first chunk's meta (memory, disk, fill) | send (if output left) |
 * | CACHE_BODY | cache: chunk bytes, or room in the socket for them | send (if output left, |
 * |            | (or the next iteration: turn put off, turnq.h)     | or turn put off)      |
 * | SHARE      | share: room in the socket for a shared answer      | send (if output left, |
 * |            | (or the next iteration: turn put off)              | or turn put off)      |
 * | FLUSH      | <out> to drain, then close                         | send                  |
 * | LINGER     | our side shut down: the client's EOF (its bytes    | CONN_LINGER_S         |
 * |            | are read and dropped), then close                  |                       |
 * | CLOSING    | the reaper (watchers stopped, nothing happens)     | -                     |
 *
 * Two responders answer a request once its head is parsed and admitted (struct conn_responder,
 * conn_int.h): the pass-through path (conn_pass.c: RESOLVE, UPSTREAM, STREAM) and the cache path
 * (conn_cache.c: CACHE_HEAD, CACHE_BODY; it hands a request over to the pass path when the
 * answer cannot be cached, or to the share path, conn_share.c: SHARE, when the fill it waited
 * on brought an uncacheable answer for all its readers). conn.c keeps the rest: the state machine
 * and its transition table (conn_set_state), the socket I/O, the timer, keep-alive and pipelining,
 * local responses and the access log line. A responder's states are stepped through its step(); its
 * state is dropped by its reset() when the request ends, however it ends.
 *
 * One driver (on_conn_io) writes what it can, reads what fits, then steps while progress is made;
 * conn_update_io() alone decides watcher interest and conn_update_timer() the one timer. The
 * reaper (an ev_prepare, once per loop iteration) drives too: first the responses whose turn of
 * body bytes was put off in the iteration before, once it had sent CONN_LOOP_SEND (send_turns,
 * turnq.h; such a response waits for no socket event, and an ev_idle keeps the loop from sleeping
 * while one is queued), then conns kicked from outside their own callbacks (conn_kick). A
 * request's head is copied out of <in> (req_head) so that <in> can take the next pipelined request
 * while the response runs; the next request is parsed only once the current response is fully
 * queued. Bounded memory: <in> holds one head (H1_MAX_HEAD + slack), <out> CONN_OUTBUF; when <out>
 * is full the upstream is paused (back-pressure), and a client that takes nothing for send_timeout
 * is closed.
 */
#include "conn.h"
#include "conn_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "access.h"
#include "admit.h"
#include "buf.h"
#include "cache.h"
#include "cluster.h"
#include "config.h"
#include "forward.h"
#include "http1.h"
#include "httpdate.h"
#include "live.h"
#include "log.h"
#include "peers.h"
#include "stats.h"
#include "util.h"

static struct conn *conns;
static unsigned n_conns;
static unsigned conn_next_id;
static struct conn *reap_list;
static struct conn *kick_list;
static ev_prepare reaper;       /* runs put-off and kicked drivers, then frees closed conns */
static struct turnq send_turns; /* the iteration's send budget, turns put off (turnq.h) */
static ev_idle turns_pending;   /* active while turns are queued: the next poll does not sleep */
static struct ev_loop *module_loop;

static void conn_kick(struct conn *c);

const char *const conn_state_names[] = {
#define CONN_SX(s) #s,
    CONN_STATES(CONN_SX)
#undef CONN_SX
};

#define CONN_TO(s) (1u << (s))
/* The legal transitions: from each state, the states it may move to. Every state but CLOSING
 * may close. A request ends in READ_HEAD (keep-alive) or FLUSH (close after the response), from
 * wherever it was answered: locally, by a responder, or cut short. */
static const unsigned conn_next[] = {
    /* (SHARE: the cache path found a kept fresh answer before any chunk) */
    [CONN_S_READ_HEAD] = CONN_TO(CONN_S_READ_HEAD) | CONN_TO(CONN_S_RESOLVE) |
                         CONN_TO(CONN_S_CACHE_HEAD) | CONN_TO(CONN_S_SHARE) |
                         CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    /* (CACHE_HEAD: a revalidation hands the request back to the cache path; RESOLVE: which,
     * for a HEAD whose object it no longer finds, hands it on to the pass path again) */
    [CONN_S_RESOLVE] = CONN_TO(CONN_S_UPSTREAM) | CONN_TO(CONN_S_CACHE_HEAD) |
                       CONN_TO(CONN_S_RESOLVE) | CONN_TO(CONN_S_READ_HEAD) | CONN_TO(CONN_S_FLUSH) |
                       CONN_TO(CONN_S_CLOSING),
    [CONN_S_UPSTREAM] = CONN_TO(CONN_S_STREAM) | CONN_TO(CONN_S_CACHE_HEAD) |
                        CONN_TO(CONN_S_RESOLVE) | CONN_TO(CONN_S_READ_HEAD) |
                        CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    [CONN_S_STREAM] = CONN_TO(CONN_S_READ_HEAD) | CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    /* (RESOLVE: handed over to the pass path; SHARE: to the share path) */
    [CONN_S_CACHE_HEAD] = CONN_TO(CONN_S_CACHE_BODY) | CONN_TO(CONN_S_RESOLVE) |
                          CONN_TO(CONN_S_SHARE) | CONN_TO(CONN_S_READ_HEAD) |
                          CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    [CONN_S_CACHE_BODY] =
        CONN_TO(CONN_S_READ_HEAD) | CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    [CONN_S_SHARE] = CONN_TO(CONN_S_READ_HEAD) | CONN_TO(CONN_S_FLUSH) | CONN_TO(CONN_S_CLOSING),
    [CONN_S_FLUSH] = CONN_TO(CONN_S_LINGER) | CONN_TO(CONN_S_CLOSING),
    [CONN_S_LINGER] = CONN_TO(CONN_S_CLOSING),
    [CONN_S_CLOSING] = 0,
};

void conn_set_state(struct conn *c, enum conn_state st)
{
    log_debug("conn#%u %s %s -> %s", c->id, c->peer, conn_state_names[c->state],
              conn_state_names[st]);
    ASSERT((size_t)c->state < ARRAY_SIZE(conn_next) && (size_t)st < ARRAY_SIZE(conn_next));
    ASSERT(conn_next[c->state] & CONN_TO(st));
    c->state = st;
}

static void count_status(int status)
{
    if (status >= 100 && status < STATS_STATUS_MAX)
        g_stats_status[status]++;
    if (status < 200)
        g_stats.resp_1xx++;
    else if (status < 300)
        g_stats.resp_2xx++;
    else if (status < 400)
        g_stats.resp_3xx++;
    else if (status < 500)
        g_stats.resp_4xx++;
    else
        g_stats.resp_5xx++;
}

void conn_out_ensure(struct conn *c)
{
    if (!buf_is_alloc(&c->out))
        buf_alloc(&c->out, CONN_OUTBUF);
}

/* Writes <out> to the socket. Returns false if the connection failed (and is closing). */
static bool flush_out(struct conn *c)
{
    while (buf_is_alloc(&c->out) && buf_len(&c->out) > 0) {
        ssize_t n = send(c->fd, c->out.pos, buf_len(&c->out), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) {
            log_debug("conn#%u %s: send: %s", c->id, c->peer, strerror(errno));
            if (c->state == CONN_S_STREAM || c->state == CONN_S_UPSTREAM)
                g_stats.client_reset++;
            conn_close(c);
            return false;
        }
        buf_consume(&c->out, (size_t)n);
        c->last_write = ev_now(c->ctx->loop);
    }
    return true;
}

static struct access_str field_str(const struct conn *c, const char *name)
{
    struct access_str s = {NULL, 0};
    if (c->req_head == NULL)
        return s;
    const struct h1_field *f = h1_find(c->req_head, c->req.fields, c->req.n_fields, name);
    if (f != NULL) {
        s.p = c->req_head + f->value.off;
        s.len = f->value.len;
    }
    return s;
}

void conn_count_bytes(const struct conn *c, uint64_t miss, uint64_t hit, uint64_t bypass)
{
    if (c->from_peer > 0)
        return;
    g_stats.bytes_miss += miss;
    g_stats.bytes_hit += hit;
    g_stats.bytes_bypass += bypass;
}

void conn_live_account(struct conn *c, bool all)
{
    uint64_t bytes = c->body_bytes - c->live_bytes;
    if (!c->proxied || c->ident == NULL || bytes == 0 || (!all && bytes < CONN_LIVE_STEP) ||
        c->from_peer > 0) /* (a node's clients are counted on that node) */
        return;
    live_account(c->ident, strlen(c->ident), c->peer_ip, bytes, c->hit_bytes - c->live_hit);
    c->live_bytes = c->body_bytes;
    c->live_hit = c->hit_bytes;
}

/* The request's access log line, once (status and bytes as far as they got). */
static void log_access(struct conn *c)
{
    if (c->logged || c->status == 0)
        return;
    c->logged = true;
    conn_live_account(c, true);
    if (c->from_peer > 0)
        peers_count_served(c->from_peer - 1, c->body_bytes);
    static const char *const protos[] = {"HTTP/1.0", "HTTP/1.1"};
    char uri[H1_MAX_TARGET + 2];
    struct access_entry e;
    memset(&e, 0, sizeof(e));
    e.client = (struct access_str){c->peer_ip, strlen(c->peer_ip)};
    if (c->req_head != NULL) {
        e.method = (struct access_str){c->req_head + c->req.method_s.off, c->req.method_s.len};
        e.target = (struct access_str){c->req_head + c->req.target.off, c->req.target.len};
        e.proto = (struct access_str){protos[c->req.version_minor == 0 ? 0 : 1], 8};
        if (c->req.absolute_form) {
            /* $request_uri of "GET http://h/p?q": "/p?q" ("/" when the URI has no path) */
            int n = snprintf(uri, sizeof(uri), "%s%.*s", c->req.path_only.len == 0 ? "/" : "",
                             (int)c->req.path.len, c->req_head + c->req.path.off);
            if (n > 0)
                e.request_uri = (struct access_str){uri, strnlen(uri, sizeof(uri))};
        }
        e.referer = field_str(c, "Referer");
        e.user_agent = field_str(c, "User-Agent");
        e.range = field_str(c, "Range");
        e.forwarded_for = field_str(c, "X-Forwarded-For");
        /* $host: the request line's host, else Host's (the log cuts the port, lowercases) */
        e.host = c->req.authority.len > 0
                     ? (struct access_str){c->req_head + c->req.authority.off, c->req.authority.len}
                     : field_str(c, "Host");
        /* $cacheidentifier of an answer with no service: monolithic's map default, $http_host */
        e.ident = field_str(c, "Host");
    }
    if (c->proxied) {
        e.ident = (struct access_str){c->ident, strlen(c->ident)};
        if (!c->local_resp)
            e.cache_status = c->reval_status != NULL ? c->reval_status
                             : c->force || c->bypass
                                 ? "BYPASS" /* ?nocache=, rules, Authorization */
                             : c->cached && !conn_cache_is_miss(c) ? "HIT"
                                                                   : "MISS";
    }
    e.status = c->status;
    e.bytes = c->body_bytes;
    access_log(&e, util_wall_ms());
}

/* Ends the current request's state (not the connection). */
static void req_reset(struct conn *c)
{
    if (c->resp != NULL) {
        c->resp->reset(c);
        c->resp = NULL;
    }
    free(c->req_head);
    c->req_head = NULL;
    turnq_remove(&send_turns, &c->turn); /* (a next response's first bytes are never put off) */
    c->status = 0;
    c->proxied = false;
    c->logged = false;
    c->local_resp = false;
    c->body_bytes = c->hit_bytes = c->live_bytes = c->live_hit = 0;
}

/* The response is fully queued: next request, or close once flushed. */
void conn_response_done(struct conn *c)
{
    count_status(c->status);
    log_access(c);
    c->served++;
    req_reset(c);
    if (c->keep_alive && !c->draining) {
        conn_set_state(c, CONN_S_READ_HEAD);
        c->idle_since = ev_now(c->ctx->loop);
        c->head_since = buf_len(&c->in) > 0 ? c->idle_since : 0;
    } else {
        conn_set_state(c, CONN_S_FLUSH);
    }
    /* Run the driver before the loop sleeps: a pipelined request may wait in <in>, or <out>
     * may need writing, and this may be called from a resolver or upstream callback. */
    conn_kick(c);
}

/* The response was cut short after its head went out: its access line says how far it got, and
 * the connection closes once <out> is written. */
void conn_response_cut(struct conn *c)
{
    count_status(c->status);
    log_access(c);
    c->keep_alive = false;
    req_reset(c);
    conn_set_state(c, CONN_S_FLUSH);
    conn_kick(c); /* closes at once if nothing is left to write */
}

/* Hands the admitted request to <r>. */
static void conn_respond(struct conn *c, const struct conn_responder *r)
{
    ASSERT(c->resp == NULL);
    c->resp = r;
    r->begin(c);
}

void conn_hand_over(struct conn *c, const struct conn_responder *to)
{
    ASSERT(c->resp != NULL && c->resp != to);
    ASSERT(!c->turn.queued); /* (a hand-over comes before any body byte) */
    log_debug("conn#%u %s: %s hands the request over to %s", c->id, c->peer, c->resp->name,
              to->name);
    c->resp->reset(c);
    c->resp = to;
    to->begin(c);
}

const char *conn_date(const struct conn *c)
{
    static char date[HTTPDATE_LEN + 1];
    static int64_t date_s = INT64_MIN;
    int64_t now = (int64_t)ev_now(c->ctx->loop);
    if (now != date_s) {
        httpdate_format(now, date);
        date_s = now;
    }
    return date;
}

const char *conn_processed_by(const struct conn *c)
{
    static char pb[1024 + 256];
    const struct h1_field *f =
        c->req_head != NULL
            ? h1_find(c->req_head, c->req.fields, c->req.n_fields, "X-LanCache-Processed-By")
            : NULL;
    if (f == NULL || f->value.len == 0 || f->value.len > 1024)
        return g_cfg->hostname;
    snprintf(pb, sizeof(pb), "%s,%.*s", g_cfg->hostname, (int)f->value.len,
             c->req_head + f->value.off);
    return pb;
}

/* Queues a proxy-made response and finishes the request. <close> forces Connection: close. */
void conn_local_response(struct conn *c, int status, bool close_after, const char *extra)
{
    conn_out_ensure(c);
    buf_compact(&c->out);
    if (close_after || c->req.version_minor == 0)
        c->keep_alive = false;
    size_t n = fwd_local_response(status, conn_processed_by(c), conn_date(c), c->keep_alive,
                                  c->head_req, extra, c->out.last, buf_room(&c->out));
    ASSERT(n > 0); /* a local response is small and <out> is at most half full here */
    c->out.last += n;
    c->status = status;
    c->local_resp = true;
    c->body_bytes = fwd_local_body_len(status, c->head_req);
    conn_response_done(c);
}

/* A copy of span <s> of the request head, NUL-terminated (free() it). */
static char *span_dup(const struct conn *c, struct h1_span s)
{
    return xstrndup(c->req_head + s.off, s.len);
}

/*
 * The request's X-Cacheparty-Peer credential (cluster.h), checked against the connection's
 * source address, the clock and the request's method, Host, target and Range: sets
 * c->from_peer when it holds. Returns false when the request was refused (403, answered here,
 * with X-Cacheparty-Peer-Refused so that the sending node tells it from an origin's 403).
 * Without a credential, or without a cluster, nothing.
 */
static bool check_peer(struct conn *c)
{
    const struct cluster *cl = peers_cluster();
    const struct h1_field *cred =
        h1_find(c->req_head, c->req.fields, c->req.n_fields, "X-Cacheparty-Peer");
    c->from_peer = 0;
    if (cred == NULL || cl == NULL)
        return true;
    const struct h1_field *host = h1_find(c->req_head, c->req.fields, c->req.n_fields, "Host");
    const struct h1_field *range = h1_find(c->req_head, c->req.fields, c->req.n_fields, "Range");
    char *m = span_dup(c, c->req.method_s);
    char *hv = host != NULL ? span_dup(c, host->value) : xstrdup("");
    char *t = span_dup(c, c->req.target);
    char *rv = range != NULL ? span_dup(c, range->value) : NULL;
    unsigned from = 0;
    enum cluster_verdict v = cluster_verify(cl, c->req_head + cred->value.off, cred->value.len,
                                            (const struct sockaddr *)&c->peer_sa,
                                            (int64_t)ev_now(c->ctx->loop), m, hv, t, rv, &from);
    free(m);
    free(hv);
    free(t);
    free(rv);
    if (v == CLUSTER_PEER_OK) {
        c->from_peer = from + 1;
        return true;
    }
    /* (a node that disagrees sends its heartbeat every second: one line per 10 s at most, for
     * the nodes' addresses and for any other apart, so that a LAN client's forged field never
     * hides a node's refusal) */
    static ev_tstamp logged_at[2] = {-100, -100};
    ev_tstamp now = ev_now(c->ctx->loop);
    int from_node = cluster_node_of(cl, (const struct sockaddr *)&c->peer_sa, false) >= 0;
    if (now - logged_at[from_node] >= 10) {
        logged_at[from_node] = now;
        log_warn("conn#%u %s: peer request refused: its credential fails (%s; %llu refused so "
                 "far)",
                 c->id, c->peer, cluster_verdict_name(v),
                 (unsigned long long)g_stats.cluster_peer_refused + 1);
    }
    g_stats.cluster_peer_refused++;
    char extra[96];
    snprintf(extra, sizeof(extra), "%s: %s\r\n", PEERS_REFUSED_FIELD, cluster_verdict_name(v));
    /* A body (or a tunnel) is never read here: the connection closes after the answer, or the
     * body would be read as the next request (another client's, behind a front that pools). */
    conn_local_response(c, 403, c->req.has_body || c->req.method == H1_M_CONNECT, extra);
    return false;
}

/* Whether the request's method is <name>. */
static bool method_is(const struct conn *c, const char *name)
{
    size_t n = strlen(name);
    return c->req.method_s.len == n && memcmp(c->req_head + c->req.method_s.off, name, n) == 0;
}

/* A peer's purge is done: <arg> is what it was (a string owned here). */
static void on_peer_purged(void *arg, int n)
{
    if (n < 0)
        log_warn("%s: %s", (char *)arg, strerror(-n));
    else
        log_info("%s: %d chunks removed", (char *)arg, n);
    free(arg);
}

/*
 * A peer's PURGE (peers_purge_all: "PURGE <path>?identifier=<id>", credential held): the
 * object's chunks here are removed; never sent on (the node that was asked sends it to all).
 */
static void peer_purge(struct conn *c)
{
    const char *h = c->req_head;
    const char *q = h + c->req.path.off + c->req.path_only.len;
    size_t qlen = c->req.path.len - c->req.path_only.len;
    static const char pre[] = "?identifier=";
    size_t plen = sizeof(pre) - 1;
    bool ok = qlen > plen && memcmp(q, pre, plen) == 0 && c->req.path_only.len > 0 &&
              cluster_purge_ident_ok(q + plen, qlen - plen);
    if (!ok || c->ctx->cache == NULL) {
        conn_local_response(c, 400, false, NULL);
        return;
    }
    char ident[128];
    snprintf(ident, sizeof(ident), "%.*s", (int)(qlen - plen), q + plen);
    size_t klen;
    char *key = cache_key_build(ident, h + c->req.path_only.off, c->req.path_only.len, &klen);
    char what[1400];
    snprintf(what, sizeof(what), "conn#%u %s: peer's PURGE [%s] %.*s", c->id, c->peer, ident,
             (int)c->req.path_only.len, h + c->req.path_only.off);
    (void)cache_purge(c->ctx->cache, key, klen, on_peer_purged, xstrdup(what));
    free(key);
    /* Gone from lookups now; its files follow on the I/O pool (logged when they are). */
    conn_local_response(c, 200, false, NULL);
}

/* Acts on a parsed request head held in c->req_head / c->req. */
static void handle_request(struct conn *c)
{
    const char *h = c->req_head;
    const struct h1_req *req = &c->req;
    g_stats.requests++;
    c->head_req = req->method == H1_M_HEAD;
    c->keep_alive = req->keep_alive && g_cfg->keepalive_timeout_ms > 0;
    if (!check_peer(c))
        return;

    if (req->method == H1_M_CONNECT) {
        conn_local_response(c, 405, true, "Allow: GET, HEAD\r\n");
        return;
    }
    if (h1_is_heartbeat(h, req)) {
        /* Any method, as lancache's nginx answers it. A body already read is dropped; one still
         * to come (or chunked) is not waited for: the answer closes the connection. */
        bool close = req->has_te;
        if (req->content_length > 0) {
            if (buf_is_alloc(&c->in) && buf_len(&c->in) >= req->content_length)
                buf_consume(&c->in, (size_t)req->content_length);
            else
                close = true;
        }
        if (close)
            c->keep_alive = false;
        /* To a peer's heartbeat (its credential held): with the node's agreement digest
         * (peers.h). Never to anyone else: a digest is an HMAC of guessable text, which would
         * let a weak secret be guessed offline. */
        bool digest = peers_cluster() != NULL && c->from_peer > 0;
        char extra[160];
        snprintf(extra, sizeof(extra),
                 "Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: *\r\n%s%s%s%s",
                 digest ? PEERS_DIGEST_FIELD : "", digest ? ": " : "", digest ? peers_digest() : "",
                 digest ? "\r\n" : "");
        conn_local_response(c, 204, close, extra);
        return;
    }
    if (c->from_peer > 0 && req->method == H1_M_OTHER && method_is(c, "PURGE") && !req->has_body &&
        !req->has_te) {
        peer_purge(c);
        return;
    }
    if (req->method == H1_M_OTHER) {
        /* A body we will not read means we cannot find the next request: close. */
        conn_local_response(c, 405, req->has_body || req->has_te, "Allow: GET, HEAD\r\n");
        return;
    }
    if (fwd_is_loop(h, req, g_cfg->hostname)) {
        log_warn("conn#%u %s: loop detected (%s already in X-LanCache-Processed-By)", c->id,
                 c->peer, g_cfg->hostname);
        g_stats.loops++;
        conn_local_response(c, 508, false, NULL);
        return;
    }
    if (h1_authority_parse(h + req->authority.off, req->authority.len, &c->auth) < 0) {
        g_stats.client_bad_request++;
        conn_local_response(c, 400, true, NULL);
        return;
    }
    const struct h1_field *ua = h1_find(h, req->fields, req->n_fields, "User-Agent");
    admit_host(g_cfg, g_domains, &c->auth, ua ? h + ua->value.off : NULL, ua ? ua->value.len : 0,
               ADMIT_REQUEST, &c->adm);
    if (!c->adm.allow) {
        if (c->adm.reason == ADMIT_R_IP_LITERAL)
            log_info("conn#%u %s: IP-literal host %s refused", c->id, c->peer, c->auth.host);
        else
            log_info("conn#%u %s: host %s not in the cache-domains lists", c->id, c->peer,
                     c->auth.host);
        g_stats.forbidden++;
        conn_local_response(c, 403, false, NULL);
        return;
    }
    c->ident = c->adm.ident;
    /* [rules] (config.h): the first that applies to the identifier, host and path */
    c->rule =
        config_rule_for(g_cfg, c->ident, c->auth.host, h + req->path_only.off, req->path_only.len);
    enum cfg_rule_policy policy = c->rule != NULL ? c->rule->policy : CFG_RULE_OFF;
    c->hide_etag = policy == CFG_RULE_HIDE_ETAG;
    c->reval = policy == CFG_RULE_REVALIDATE;
    c->reval_done = false;
    c->reval_pending = false;
    c->reval_status = NULL;
    c->reval_upstream = 0;
    c->bypass = policy == CFG_RULE_BYPASS ||
                h1_find(h, req->fields, req->n_fields, "Authorization") != NULL;
    c->proxied = true;
    conn_respond(c,
                 c->bypass || c->ctx->cache == NULL ? &conn_pass_responder : &conn_cache_responder);
}

/* One step of the state machine; returns true if it made progress. */
static void conn_linger(struct conn *c);
static void linger_read(struct conn *c);

static bool conn_step(struct conn *c)
{
    switch (c->state) {
    case CONN_S_READ_HEAD: {
        size_t len = buf_len(&c->in);
        if (len == 0) {
            if (c->peer_eof || c->draining) {
                if (buf_is_alloc(&c->out) && buf_len(&c->out) > 0) {
                    conn_set_state(c, CONN_S_FLUSH);
                    return true;
                }
                conn_close(c);
                return false;
            }
            return false;
        }
        /* Keep room for the next response head: wait until <out> drained below half. */
        if (buf_is_alloc(&c->out) && buf_len(&c->out) > CONN_OUTBUF / 2)
            return false;
        const char *why = NULL;
        ssize_t n = h1_req_parse(c->in.pos, len, &c->req, &why);
        if (n == 0) {
            if (c->peer_eof) {
                conn_close(c);
                return false;
            }
            if (c->head_since == 0)
                c->head_since = ev_now(c->ctx->loop);
            return false;
        }
        if (n < 0) {
            log_info("conn#%u %s: bad request (%d %s)", c->id, c->peer, (int)-n, why ? why : "");
            g_stats.requests++;
            g_stats.client_bad_request++;
            c->head_req = false;
            c->req.version_minor = 1;
            c->keep_alive = false;
            buf_reset(&c->in);
            c->peer_eof = true; /* read nothing more from this client */
            conn_local_response(c, (int)-n, true, NULL);
            return true;
        }
        c->req_head = xmalloc((size_t)n);
        memcpy(c->req_head, c->in.pos, (size_t)n);
        buf_consume(&c->in, (size_t)n);
        c->head_since = 0;
        handle_request(c);
        return true;
    }
    case CONN_S_FLUSH:
        if (!buf_is_alloc(&c->out) || buf_len(&c->out) == 0)
            conn_linger(c);
        return false;
    case CONN_S_LINGER:
    case CONN_S_CLOSING:
        return false;
    default: /* a responder's state */
        ASSERT(c->resp != NULL);
        return c->resp->step(c);
    }
}

void conn_update_io(struct conn *c)
{
    unsigned ev = 0;
    if (c->state == CONN_S_CLOSING)
        return;
    if (c->state == CONN_S_LINGER)
        ev = EV_READ;
    else if ((buf_is_alloc(&c->out) && buf_len(&c->out) > 0) || c->blocked_write)
        ev |= EV_WRITE;
    if (c->state != CONN_S_LINGER && !c->peer_eof && c->state != CONN_S_FLUSH &&
        (buf_room(&c->in) > 0 || c->in.pos > c->in.start))
        ev |= EV_READ;
    if (ev == c->io_events)
        return;
    ev_io_stop(c->ctx->loop, &c->io);
    c->io_events = ev;
    if (ev != 0) {
        ev_io_set(&c->io, c->fd, (int)ev);
        ev_io_start(c->ctx->loop, &c->io);
    }
}

/* The one timer: the earliest applicable deadline for the current state. */
void conn_update_timer(struct conn *c)
{
    ev_tstamp now = ev_now(c->ctx->loop), dl = 0;
    if (c->state == CONN_S_CLOSING)
        return;
    bool send_dl = false; /* send_timeout's deadline */
    if (c->state == CONN_S_LINGER) {
        dl = c->last_write + CONN_LINGER_S;
    } else if ((buf_is_alloc(&c->out) && buf_len(&c->out) > 0) || c->blocked_write ||
               c->turn.queued) {
        dl = c->last_write + (double)g_cfg->send_timeout_ms / 1000.0;
        send_dl = true;
    } else if (c->state == CONN_S_READ_HEAD) {
        if (buf_len(&c->in) > 0 && c->head_since > 0)
            dl = c->head_since + (double)g_cfg->request_timeout_ms / 1000.0;
        else if (c->served == 0)
            dl = c->idle_since + (double)g_cfg->request_timeout_ms / 1000.0;
        else
            dl = c->idle_since + (double)g_cfg->keepalive_timeout_ms / 1000.0;
    }
    c->deadline = dl;
    c->deadline_send = send_dl;
    if (dl == 0) {
        ev_timer_stop(c->ctx->loop, &c->timer);
        return;
    }
    /* Re-arm only when the timer would fire too late; an early fire just re-checks. */
    if (ev_is_active(&c->timer) && now + ev_timer_remaining(c->ctx->loop, &c->timer) <= dl)
        return;
    ev_timer_stop(c->ctx->loop, &c->timer);
    ev_timer_set(&c->timer, dl - now > 0 ? dl - now : 0., 0.);
    ev_timer_start(c->ctx->loop, &c->timer);
}

static void on_conn_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct conn *c = container_of(w, struct conn, timer);
    CHECK_OBJ(c, CONN_MAGIC);
    if (c->deadline == 0 || ev_now(loop) < c->deadline - 0.001) {
        conn_update_timer(c);
        return;
    }
    if (c->state == CONN_S_LINGER) {
        log_debug("conn#%u %s: lingering close done", c->id, c->peer);
    } else if (c->state == CONN_S_READ_HEAD && buf_len(&c->in) == 0 && !c->deadline_send) {
        log_debug("conn#%u %s: idle timeout", c->id, c->peer);
    } else {
        /* (send: for send_timeout the client took none of the bytes waiting for it in <out> or
         * in its socket, or a turn put off was not taken again: conn_take_turn restarts the
         * clock, so that takes a loop stalled that long; request: its head did not come whole) */
        log_info("conn#%u %s: %s timeout in %s", c->id, c->peer,
                 c->deadline_send ? "send" : "request", conn_state_names[c->state]);
        g_stats.client_timeout++;
    }
    conn_close(c);
}

static void on_conn_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct conn *c = container_of(w, struct conn, io);
    CHECK_OBJ(c, CONN_MAGIC);

    if (c->state == CONN_S_LINGER) {
        linger_read(c);
        return;
    }
    if (revents & EV_WRITE) {
        c->blocked_write = false;
        if (!flush_out(c))
            return; /* (a responder waiting for room hears of it from its step, below) */
    }
    if ((revents & EV_READ) && !c->peer_eof) {
        ssize_t n = buf_recv(&c->in, c->fd);
        if (n > 0) {
            if (c->state == CONN_S_READ_HEAD && c->head_since == 0)
                c->head_since = ev_now(c->ctx->loop);
        } else if (n == 0) {
            c->peer_eof = true;
            c->peer_fin = true;
        } else if (n != -EAGAIN) {
            log_debug("conn#%u %s: recv: %s", c->id, c->peer, strerror((int)-n));
            if (c->state != CONN_S_READ_HEAD)
                g_stats.client_reset++;
            conn_close(c);
            return;
        }
    }
    conn_drive(c);
}

/* Drops what the client sends while lingering; closes at its EOF, an error, or the limit. */
static void linger_read(struct conn *c)
{
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0 || (c->lingered += (size_t)n) > CONN_LINGER_MAX) {
            conn_close(c);
            return;
        }
    }
}

/*
 * The last response of a connection is out: close it, after a lingering close when the client
 * may still be sending (its EOF not seen): shut our side down (it sees EOF after the response)
 * and drop what it sends until its EOF, for at most CONN_LINGER_S.
 */
static void conn_linger(struct conn *c)
{
    if (c->peer_fin || c->draining || shutdown(c->fd, SHUT_WR) < 0) {
        conn_close(c);
        return;
    }
    buf_free(&c->in);
    buf_free(&c->out);
    conn_set_state(c, CONN_S_LINGER);
    c->lingered = 0;
    c->last_write = ev_now(c->ctx->loop);
    linger_read(c);
    if (c->state == CONN_S_CLOSING)
        return;
    conn_update_io(c);
    conn_update_timer(c);
}

void conn_drive(struct conn *c)
{
    for (;;) {
        while (c->state != CONN_S_CLOSING && conn_step(c)) {
        }
        if (c->state == CONN_S_CLOSING)
            return;
        if (!buf_is_alloc(&c->out) || buf_len(&c->out) == 0)
            break;
        /* What a step queued (a head, a local response) is written at once; once it is all out,
         * the state steps again (a cached body follows its head, a finished FLUSH lingers). */
        if (!flush_out(c))
            return;
        if (buf_len(&c->out) > 0)
            break;
    }
    /* Release <out>'s memory while idle between requests. */
    if (c->state == CONN_S_READ_HEAD && buf_is_alloc(&c->out) && buf_len(&c->out) == 0)
        buf_free(&c->out);
    conn_update_io(c);
    conn_update_timer(c);
}

void conn_close(struct conn *c)
{
    if (c->state == CONN_S_CLOSING)
        return;
    conn_set_state(c, CONN_S_CLOSING);
    ev_io_stop(c->ctx->loop, &c->io);
    ev_timer_stop(c->ctx->loop, &c->timer);
    turnq_remove(&send_turns, &c->turn); /* (a closed conn is never driven again) */
    c->reap_next = reap_list;
    reap_list = c;
}

bool conn_take_turn(struct conn *c)
{
    bool queued = c->turn.queued;
    /* (sent_bytes, not body_bytes: a multipart response counts its part heads in body_bytes) */
    if (turnq_take_turn(&send_turns, &c->turn, !c->sent_bytes))
        return true;
    if (!queued) {
        g_stats.send_turns_put_off++;
        /* The next poll must not sleep, whenever this is (a callback fed from the reaper runs
         * after it, before the poll); and the wait is ours, not the client's (send_timeout). */
        ev_idle_start(module_loop, &turns_pending);
        c->last_write = ev_now(module_loop);
    }
    return false;
}

void conn_turn_sent(uint64_t n)
{
    turnq_sent(&send_turns, n);
}

static void conn_free(struct conn *c)
{
    ASSERT(!c->turn.queued); /* (conn_close took it off) */
    if (c->req_head != NULL && c->status == 0)
        c->status = 499; /* nginx's "client closed request": gone before any response */
    log_access(c);       /* a client gone mid-response still gets its line */
    req_reset(c);
    ev_io_stop(c->ctx->loop, &c->io);
    ev_timer_stop(c->ctx->loop, &c->timer);
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    n_conns--;
    g_stats.conn_open--;
    void (*on_closed)(void) = c->ctx->on_closed;
    c->magic = 0;
    free(c);
    if (on_closed)
        on_closed();
}

static void conn_kick(struct conn *c)
{
    if (c->kicked)
        return;
    c->kicked = true;
    c->kick_next = kick_list;
    kick_list = c;
}

static void on_reap(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    /* A new iteration's budget; the turns put off in the last one go first, in their order: the
     * n queued now, those put off again going behind them for the next iteration (were one of the
     * n closed meanwhile, one put off again is driven twice, and put off again). Then kicked
     * conns. Driving a conn may close it (conn_close takes it off the queue); closed ones are
     * freed below. */
    for (size_t n = turnq_new_iteration(&send_turns); n > 0; n--) {
        struct turnq_node *t = turnq_pop(&send_turns);
        if (t == NULL)
            break;
        conn_drive(container_of(t, struct conn, turn));
    }
    while (kick_list != NULL) {
        struct conn *c = kick_list;
        kick_list = c->kick_next;
        c->kicked = false;
        if (c->state != CONN_S_CLOSING)
            conn_drive(c);
    }
    while (reap_list != NULL) {
        struct conn *c = reap_list;
        reap_list = c->reap_next;
        conn_free(c);
    }
    if (send_turns.n == 0) /* (conn_take_turn starts it when it queues one) */
        ev_idle_stop(module_loop, &turns_pending);
}

static void on_turns_pending(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents; /* nothing: the reaper drives them before the next poll */
}

void conn_module_init(struct conn_ctx *ctx)
{
    module_loop = ctx->loop;
    turnq_init(&send_turns, CONN_LOOP_SEND);
    ev_idle_init(&turns_pending, on_turns_pending);
    ev_prepare_init(&reaper, on_reap);
    ev_prepare_start(ctx->loop, &reaper);
    ev_unref(ctx->loop); /* the reaper alone must not keep the loop running */
}

void conn_module_fini(void)
{
    /* All closed first (off the turn queue, never driven again), then freed by one reap. */
    for (struct conn *c = conns; c != NULL; c = c->next)
        conn_close(c);
    on_reap(module_loop, &reaper, 0);
    ASSERT(conns == NULL);
    ev_idle_stop(module_loop, &turns_pending);
    ev_ref(module_loop);
    ev_prepare_stop(module_loop, &reaper);
}

void conn_new(struct conn_ctx *ctx, int fd, const struct sockaddr_storage *peer)
{
    struct conn *c = xcalloc(1, sizeof(*c));
    c->magic = CONN_MAGIC;
    c->id = ++conn_next_id;
    c->ctx = ctx;
    c->fd = fd;
    c->state = CONN_S_READ_HEAD;
    util_addr_text(peer, c->peer, sizeof(c->peer));
    util_addr_ip(peer, c->peer_ip, sizeof(c->peer_ip));
    c->peer_sa = *peer;
    buf_alloc(&c->in, CONN_INBUF);
    c->idle_since = ev_now(ctx->loop);
    c->last_write = c->idle_since;
    ev_init(&c->io, on_conn_io);
    ev_init(&c->timer, on_conn_timer);
    c->next = conns;
    if (conns)
        conns->pprev = &c->next;
    c->pprev = &conns;
    conns = c;
    n_conns++;
    g_stats.conn_open++;
    g_stats.conn_accepted++;
    log_debug("conn#%u %s: accepted", c->id, c->peer);
    conn_update_io(c);
    conn_update_timer(c);
}

unsigned conn_count(void)
{
    return n_conns;
}

void conn_drain_all(void)
{
    for (struct conn *c = conns; c != NULL; c = c->next) {
        if (c->state == CONN_S_CLOSING)
            continue;
        c->draining = true;
        if (c->state == CONN_S_LINGER || (c->state == CONN_S_READ_HEAD && buf_len(&c->in) == 0 &&
                                          !(buf_is_alloc(&c->out) && buf_len(&c->out) > 0)))
            conn_close(c);
    }
}
