/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn_share: a request answered from an uncacheable origin answer that the fill it waited on
 * brought for all its readers (part of the conn module, see conn_int.h; the fill side is in
 * fetch.c, the answer in answer.h). The cache path hands the request over here with c->shared
 * (a ref) once the chunk failed with that answer.
 *
 * | state | waits for                                                | driven by        |
 * |-------|----------------------------------------------------------|------------------|
 * | SHARE | room in the socket for the rest of the answer's body     | the conn driver  |
 *
 * begin() queues the head as the pass path would forward the origin's (fwd_response_head:
 * hop-by-hop fields removed, the origin's Date kept or ours added, X-LanCache-* set), framed by the
 * exact length read (Content-Length), then step() sends the body straight from the answer's memory,
 * CONN_SEND_MAX a call and CONN_SEND_TURN a turn, as the cache path does. HEAD (and 204, 304) gets
 * the head alone.
 *
 * An answer the cache kept while fresh (anstore.h; the cache path found it, c->shared_head set)
 * is sent the same way: its Date is the origin's (else when it was received), its Age computed
 * (RFC 9111 §4.2.3) in place of the origin's.
 *
 * Hit and miss per byte, as the cache path counts them: the answer came from the origin once,
 * so the first head sent from it says MISS and its bytes' first delivery is the miss; every other
 * client's, a waiter's or a later request's from a kept answer, is a hit (answer_announce,
 * answer_deliver). The access log says the same (c->first_miss, c->sent_new: conn_cache_is_miss).
 * A refetch's (?nocache=) says BYPASS, as on the cache path, its bytes counted by the same rule.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <ev.h>

#include "answer.h"
#include "config.h"
#include "conn_int.h"
#include "forward.h"
#include "log.h"
#include "objhead.h"
#include "stats.h"
#include "util.h"

static void share_begin(struct conn *c)
{
    ASSERT(c->shared != NULL && answer_complete(c->shared));
    bool kept = c->shared_head != NULL;
    /* (a HEAD delivers no byte: it announces nothing, and says what the bytes would be) */
    bool miss = c->head_req ? !answer_is_announced(c->shared) : answer_announce(c->shared);
    c->cached = true; /* (the access log: conn_cache_is_miss) */
    c->first_miss = miss;
    c->force = c->shared_force; /* (and BYPASS for a refetch, as the cache path says) */
    const char *hbuf;
    const struct h1_resp *resp = answer_head(c->shared, &hbuf);
    struct fwd_resp_opts o = {
        .hostname = conn_processed_by(c),
        .cache_status = c->force ? "BYPASS"
                        : miss   ? "MISS"
                                 : "HIT",
        .client_minor = c->req.version_minor,
        .head_req = c->head_req,
        .keep_alive = c->keep_alive && !c->draining,
        .date = kept ? c->shared_head->date : conn_date(c),
        .send_age = kept,
        .age = kept ? objhead_age(c->shared_head, (int64_t)ev_now(c->ctx->loop)) : 0,
        .hide_etag = c->hide_etag,
        .upstream_status = c->force || miss ? resp->status : 0};
    conn_out_ensure(c);
    buf_compact(&c->out);
    size_t n = fwd_response_head(hbuf, resp, &o, &c->body, c->out.last, buf_room(&c->out));
    if (n == 0) {
        log_info("conn#%u %s: origin response head too large to forward", c->id, c->peer);
        conn_local_response(c, 502, false, NULL);
        return;
    }
    if (kept)
        g_stats.fresh_answers_reused++;
    else
        g_stats.answers_shared++;
    c->out.last += n;
    c->status = resp->status;
    if (!o.keep_alive)
        c->keep_alive = false;
    c->pos = 0;
    if (c->body == FWD_BODY_NONE) {
        conn_response_done(c);
        return;
    }
    ASSERT(c->body == FWD_BODY_LENGTH); /* (answer_end framed it by its length) */
    conn_set_state(c, CONN_S_SHARE);
}

static bool share_step(struct conn *c)
{
    size_t len;
    const char *body = answer_body(c->shared, &len);
    uint64_t turn = 0;
    if ((buf_is_alloc(&c->out) && buf_len(&c->out) > 0) || c->blocked_write)
        return false; /* the head first */
    while (c->pos < len) {
        size_t n = len - (size_t)c->pos;
        if (n > CONN_SEND_MAX)
            n = CONN_SEND_MAX;
        if (turn == 0 && !conn_take_turn(c))
            return false; /* the iteration's sends are spent: first in the next one (turnq.h) */
        ssize_t k;
        do {
            k = send(c->fd, body + c->pos, n, MSG_NOSIGNAL);
        } while (k < 0 && errno == EINTR);
        if (k < 0 && errno == EAGAIN) {
            c->blocked_write = true;
            return false;
        }
        if (k <= 0) {
            log_debug("conn#%u %s: send: %s", c->id, c->peer, k < 0 ? strerror(errno) : "0");
            g_stats.client_reset++;
            conn_close(c);
            return false;
        }
        conn_turn_sent((uint64_t)k);
        size_t fresh = answer_deliver(c->shared, (size_t)c->pos, (size_t)k);
        c->pos += (uint64_t)k;
        c->body_bytes += (uint64_t)k;
        conn_count_bytes(c, fresh, (uint64_t)k - fresh, 0);
        c->hit_bytes += (uint64_t)k - fresh;
        conn_live_account(c, false);
        c->sent_bytes = true;
        c->sent_new = c->sent_new || fresh > 0;
        c->last_write = ev_now(c->ctx->loop);
        turn += (uint64_t)k;
        if ((size_t)k < n || (turn >= CONN_SEND_TURN && c->pos < len)) {
            c->blocked_write = true; /* EV_WRITE brings us back (the others get the loop) */
            return false;
        }
    }
    conn_response_done(c);
    return true;
}

static void share_reset(struct conn *c)
{
    answer_unref(&c->shared);
    objhead_unref(&c->shared_head);
    c->cached = false;
    c->force = false;
    c->shared_force = false;
    c->first_miss = false;
    c->sent_bytes = false;
    c->sent_new = false;
    c->body = FWD_BODY_NONE;
    c->blocked_write = false;
}

const struct conn_responder conn_share_responder = {"share", share_begin, share_step, share_reset};
