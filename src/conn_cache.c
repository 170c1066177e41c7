/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn_cache: a client request served from the chunk cache (part of the conn module, see
 * conn_int.h).
 *
 * CONN_S_CACHE_HEAD waits until the first chunk the request needs knows the object's meta
 * (from memory or disk at once; from a fetch once the origin's head arrived), then decides the
 * answer (200, 206, 304, 412, 416; HEAD without a body) from the stored metadata alone, so a hit
 * and a miss answer alike (the preconditions: precond.h). CONN_S_CACHE_BODY then sends the object
 * bytes [pos, end] chunk after chunk: straight from chunk memory (send) or from the verified chunk
 * file (sendfile), never copying into <out>, and from a filling chunk as far as it is committed,
 * waiting on the chunk for more.
 * Only one chunk ref is held at a time. A chunk of another version than the head promised, or a
 * fetch failing after the head went out, closes the connection before the promised length.
 *
 * Several ranges (range_parse_set: merged, at most RANGE_SET_MAX parts, in the order asked) are
 * answered 206 multipart/byteranges: choose_ranges() decides, with a boundary made per answer
 * and the exact body length up front; CACHE_BODY then sends the parts one after the other, each
 * part's bytes through the same chunk path as a single range (a cold part starts its fills and
 * reads ahead up to its own end; a cold answer also has the chunks where its next parts begin
 * filled ahead, parts_ahead), its head (and after the last part the closing delimiter) queued
 * in <out> between them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "anstore.h"
#include "answer.h"
#include "cache.h"
#include "config.h"
#include "conn_int.h"
#include "fetch.h"
#include "forward.h"
#include "log.h"
#include "multipart.h"
#include "objhead.h"
#include "origin.h"
#include "precond.h"
#include "range.h"
#include "stats.h"
#include "util.h"

/* The parts of a multipart/byteranges answer (c->mp). */
struct conn_parts {
    struct range_set set;               /* the parts, in the order sent */
    unsigned cur;                       /* the part being sent (c->pos, c->end) */
    bool ahead;                         /* the object was being filled: fetch parts ahead */
    char boundary[MP_BOUNDARY_LEN + 1]; /* this answer's */
};

static const struct h1_field *field(const struct conn *c, const char *name)
{
    return h1_find(c->req_head, c->req.fields, c->req.n_fields, name);
}

static bool is_chain_field(const struct conn *c, const struct h1_field *f)
{
    return f->value.len > 0 &&
           util_ieq(c->req_head + f->name.off, f->name.len, "X-LanCache-Processed-By");
}

/*
 * The chain of caches before us, for the origin (or a parent cache) to see: the value of the
 * request's X-LanCache-Processed-By field, or its fields joined with ", " when there are several
 * (made once per request, in c->chain). NULL when it has none.
 */
static const char *processed_by(struct conn *c, size_t *len)
{
    const struct h1_field *one = NULL;
    size_t n = 0, total = 0;
    for (unsigned i = 0; i < c->req.n_fields; i++) {
        if (is_chain_field(c, &c->req.fields[i])) {
            one = &c->req.fields[i];
            n++;
            total += one->value.len + 2;
        }
    }
    if (n <= 1) {
        *len = one != NULL ? one->value.len : 0;
        return one != NULL ? c->req_head + one->value.off : NULL;
    }
    if (c->chain == NULL) {
        char *p = c->chain = xmalloc(total);
        for (unsigned i = 0; i < c->req.n_fields; i++) {
            const struct h1_field *f = &c->req.fields[i];
            if (!is_chain_field(c, f))
                continue;
            if (p != c->chain) {
                memcpy(p, ", ", 2);
                p += 2;
            }
            memcpy(p, c->req_head + f->value.off, f->value.len);
            p += f->value.len;
        }
        *p = '\0';
    }
    *len = strlen(c->chain);
    return c->chain;
}

/*
 * The request's end-to-end fields that a fill forwards (fwd_fill_fields), made once per request
 * in c->fill_fields. Fields beyond FWD_FILL_FIELDS_MAX are dropped, with one log line.
 */
static const char *fill_fields(struct conn *c, size_t *len)
{
    if (c->fill_fields == NULL) {
        static char tmp[FWD_FILL_FIELDS_MAX]; /* (one loop thread: copied out at once) */
        unsigned dropped;
        size_t n = fwd_fill_fields(c->req_head, &c->req, tmp, sizeof(tmp), &dropped);
        if (dropped > 0)
            log_info("conn#%u %s: %u request field(s) beyond %d bytes not forwarded to the origin",
                     c->id, c->peer, dropped, FWD_FILL_FIELDS_MAX);
        c->fill_fields = xstrndup(tmp, n);
        c->fill_fields_len = n;
    }
    *len = c->fill_fields_len;
    return c->fill_fields;
}

/* The origin to fetch from, borrowing the request's strings (whoever keeps them copies them). */
static void origin_of(struct conn *c, struct origin_req *o)
{
    const struct h1_field *ua = field(c, "User-Agent");
    memset(o, 0, sizeof(*o));
    o->host = c->auth.host;
    o->host_is_ip = c->auth.is_ip;
    o->port = c->auth.port;
    o->authority = c->auth.ident;
    o->path = c->req_head + c->req.path.off;
    o->path_len = c->req.path.len;
    if (ua != NULL) {
        o->user_agent = c->req_head + ua->value.off;
        o->ua_len = ua->value.len;
    }
    o->processed_by = processed_by(c, &o->processed_by_len);
    o->fields = fill_fields(c, &o->fields_len);
    o->hide_etag = c->hide_etag;
    o->from_peer = c->from_peer > 0;
}

/* Lets go of the current chunk, and of any wait on it (a wake may still be pending). */
static void drop_chunk(struct conn *c)
{
    cache_chunk_unwait(&c->ckw);
    cache_chunk_unref(&c->ck);
}

static void on_chunk_wake(struct chunk_waiter *w)
{
    struct conn *c = container_of(w, struct conn, ckw);
    CHECK_OBJ(c, CONN_MAGIC);
    conn_drive(c); /* from the cache's notify timer: nothing of ours is on the stack */
}

/* Waits for byte <off> of the current chunk, filling: first says so to the fill, which may make
 * it come sooner. At every wait: the chunk's fetch may not have existed at the last one (a disk
 * lookup), and a chunk that becomes two-part wakes its waiters to come here again (fetch.c). */
static void wait_chunk(struct conn *c, uint64_t off)
{
    cache_chunk_unwait(&c->ckw); /* (fetch_want must not count this reader's older wait) */
    fetch_want(c->ck, off);
    cache_chunk_wait(c->ck, &c->ckw, on_chunk_wake, off);
}

/* Takes a ref on chunk <index>, to be read from its byte <off> (starting a fetch on a miss,
 * unless <probe>). */
static bool get_chunk(struct conn *c, uint64_t index, uint64_t off, bool probe)
{
    struct origin_req o;
    origin_of(c, &o);
    drop_chunk(c);
    enum cache_lookup r = cache_chunk_get(c->ctx->cache, c->objkey, c->objkey_len, index, off,
                                          probe ? NULL : &o, c->force ? c->refetch_id : 0, &c->ck);
    if (r == CACHE_MISS)
        fetch_start_at(c->ck, off, &o); /* the cache never starts a fill: we do */
    c->ck_created = r == CACHE_MISS || r == CACHE_LOOKUP;
    if (r == CACHE_MISS || r == CACHE_JOINED)
        log_debug("conn#%u %s fetch#%u chunk %llu", c->id, r == CACHE_MISS ? "starts" : "joins",
                  fetch_id_of(c->ck), (unsigned long long)index);
    else if (r == CACHE_LOOKUP || r == CACHE_LOADING)
        log_debug("conn#%u waits for the disk lookup of chunk %llu", c->id,
                  (unsigned long long)index);
    return c->ck != NULL;
}

/* Tells the fill that this request reads the object on from its current chunk to c->end: it
 * may fetch ahead (fetch_sequential). */
static void read_sequential(struct conn *c)
{
    if (cache_chunk_state(c->ck) != CHUNK_S_FILLING)
        return; /* a hit: nothing to fetch ahead, and no origin to build on the hit path */
    struct origin_req o;
    origin_of(c, &o);
    fetch_sequential(c->ck, c->end, &o, c->force);
}

/*
 * Whether the query asks for a refetch, as lancache's `proxy_cache_bypass $arg_nocache` does:
 * the first parameter named "nocache" (case-insensitive, as nginx's $arg_ lookup) followed by
 * "=" has a value other than "" and "0" (as sent: "%30" is not "0"). "nocache" without "="
 * is no such parameter.
 */
static bool query_has_nocache(const struct conn *c)
{
    const char *p = c->req_head + c->req.path.off;
    size_t len = c->req.path.len;
    const char *q = memchr(p, '?', len);
    if (q == NULL)
        return false;
    size_t qlen = len - (size_t)(q - p) - 1;
    q++;
    while (qlen > 0) {
        const char *amp = memchr(q, '&', qlen);
        size_t n = amp ? (size_t)(amp - q) : qlen;
        if (n >= 8 && util_ieq(q, 7, "nocache") && q[7] == '=') {
            size_t vlen = n - 8;
            return vlen > 0 && !(vlen == 1 && q[8] == '0');
        }
        if (amp == NULL)
            break;
        qlen -= n + 1;
        q = amp + 1;
    }
    return false;
}

/* The lowest byte a Range asks for, if it can be told without the length (else 0). */
static uint64_t first_byte(const struct conn *c)
{
    const struct h1_field *rf = field(c, "Range");
    if (rf == NULL || c->head_req)
        return 0;
    return range_first_byte(c->req_head + rf->value.off, rf->value.len);
}

void conn_cache_begin(struct conn *c)
{
    c->cached = true;
    c->force = query_has_nocache(c);
    c->refetch_id = c->force ? cache_refetch_id(c->ctx->cache) : 0;
    c->objkey = cache_key_build(c->ident, c->req_head + c->req.path_only.off, c->req.path_only.len,
                                &c->objkey_len);

    /* The origin's latest answer for the object, when it was not one and is still fresh
     * (anstore.h): answered from it, as the share path answers a fill's. A refetch drops it. */
    struct anstore *answers = cache_answers(c->ctx->cache);
    struct anstore_hit hit;
    if (c->force) {
        anstore_drop(answers, c->objkey, c->objkey_len);
    } else if (!c->reval && memchr(c->req_head + c->req.path.off, '?', c->req.path.len) == NULL &&
               anstore_get(answers, c->objkey, c->objkey_len, c->auth.ident,
                           (int64_t)ev_now(c->ctx->loop), &hit)) {
        ASSERT(c->shared == NULL && c->shared_head == NULL);
        c->shared = answer_ref(hit.ans);
        c->shared_head = objhead_ref(hit.head);
        conn_hand_over(c, &conn_share_responder);
        return;
    }

    if (c->head_req) {
        /* HEAD never fills the cache: answer from a stored chunk, else forward it. */
        if (c->force || !get_chunk(c, 0, 0, true)) {
            c->reval_status = NULL; /* (revalidated, then gone: the origin answers it) */
            conn_hand_over(c, &conn_pass_responder);
            return;
        }
    } else {
        uint64_t first = first_byte(c), cs = cache_chunk_size(c->ctx->cache);
        get_chunk(c, first / cs, first % cs, false);
        c->first_miss = c->ck_created;
        if (c->ck_created)
            c->reval_status = NULL; /* revalidated, then evicted: a fill, a MISS after all */
    }
    conn_set_state(c, CONN_S_CACHE_HEAD);
}

void conn_cache_reset(struct conn *c)
{
    drop_chunk(c);
    free(c->objkey);
    c->objkey = NULL;
    free(c->chain);
    c->chain = NULL;
    free(c->fill_fields);
    c->fill_fields = NULL;
    c->cached = false;
    c->force = false;
    c->first_miss = false;
    c->sent_new = false;
    c->sent_bytes = false;
    c->ck_created = false;
    c->ra_pending = false;
    c->blocked_write = false;
    free(c->mp);
    c->mp = NULL;
    cache_meta_clear(&c->sent);
}

/* A request field's value for precond (absent: v NULL). */
static struct precond_field precond_field_of(const struct conn *c, const char *name)
{
    const struct h1_field *f = field(c, name);
    struct precond_field pf = {NULL, 0};
    if (f != NULL) {
        pf.v = c->req_head + f->value.off;
        pf.len = f->value.len;
    }
    return pf;
}

/* What the request's conditional fields make of an answer from the stored object <m>
 * (precond.h: RFC 9110 §13.2.2's order, If-Range included; the Range itself is parsed after). */
static enum precond_outcome preconditions(const struct conn *c, const struct cache_meta *m,
                                          bool has_range)
{
    struct precond_req r;
    r.if_match = precond_field_of(c, "If-Match");
    r.if_none_match = precond_field_of(c, "If-None-Match");
    r.if_modified_since = precond_field_of(c, "If-Modified-Since");
    r.if_unmodified_since = precond_field_of(c, "If-Unmodified-Since");
    r.if_range = precond_field_of(c, "If-Range");
    r.has_range = has_range;
    int64_t now = (int64_t)ev_now(c->ctx->loop);
    /* (the stored Date was parsed once, when the head was made) */
    struct precond_stored st = {c->hide_etag ? "" : m->etag, m->last_modified, m->head != NULL,
                                m->head != NULL ? m->head->date_value : 0};
    return precond_evaluate(&r, &st, now);
}

/*
 * A boundary no one can tell before the answer: the kernel's random bytes. Should they not be
 * ready yet (early boot), a hash of the clock and the connection: unique per answer, and never
 * a function of the object's bytes.
 */
static void make_boundary(const struct conn *c, char *out)
{
    unsigned char rnd[MP_BOUNDARY_RANDOM];
    if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        uint64_t x = (uint64_t)(ev_time() * 1e9) ^ ((uint64_t)c->id << 40) ^ c->served;
        for (size_t i = 0; i < sizeof(rnd); i++) {
            /* splitmix64: every output byte depends on every input bit */
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            rnd[i] = (unsigned char)(z ^ (z >> 31));
        }
    }
    mp_boundary_make(out, rnd);
}

/*
 * The range decision for a request whose Range <rf> applies (no conditional answered it, and
 * If-Range, if any, matched): one part: 206 of h->start..h->end; several: 206 multipart, with
 * c->mp (owned) and h's boundary and body length; unsatisfiable: 416; no usable Range, or
 * more than RANGE_SET_MAX parts: <h> stays the 200 of the whole object.
 */
static void choose_ranges(struct conn *c, const struct h1_field *rf, const struct cache_meta *m,
                          struct fwd_cache_head *h)
{
    struct range_set set;
    switch (range_parse_set(c->req_head + rf->value.off, rf->value.len, m->total, &set)) {
    case RANGE_OK:
        h->status = 206;
        h->start = set.r[0].start;
        h->end = set.r[0].end;
        if (set.n == 1)
            break;
        ASSERT(c->mp == NULL);
        c->mp = xmalloc(sizeof(*c->mp));
        c->mp->set = set;
        c->mp->cur = 0;
        c->mp->ahead = false;
        make_boundary(c, c->mp->boundary);
        h->boundary = c->mp->boundary;
        h->multipart_len = mp_body_length(h->boundary, m->content_type, set.r, set.n, m->total);
        break;
    case RANGE_UNSATISFIABLE:
        h->status = 416;
        break;
    case RANGE_NONE:
    case RANGE_MULTI:
        break; /* the whole object */
    }
}

/* A cold multipart answer: the fill may start the chunks where the next parts begin now
 * (fetch_ahead), so that they come in parallel. */
static void parts_ahead(struct conn *c)
{
    struct conn_parts *p = c->mp;
    uint64_t idx[RANGE_SET_MAX];
    size_t n = 0;
    if (!p->ahead)
        return;
    uint64_t cs = cache_chunk_size(c->ctx->cache);
    uint64_t here = p->set.r[p->cur].start / cs;
    for (unsigned j = p->cur + 1; j < p->set.n; j++) {
        uint64_t k = p->set.r[j].start / cs;
        if (k != here)
            idx[n++] = k; /* (a chunk repeated is in flight by then: nothing more is started) */
    }
    if (n == 0)
        return;
    struct origin_req o;
    origin_of(c, &o);
    fetch_ahead(c->ctx->cache, c->objkey, c->objkey_len, idx, n, &o, c->force);
}

/* Makes part c->mp->cur the bytes to send, its head queued in <out> (which has room: it holds
 * at most the answer's head, the body's bytes never go through it). */
static void start_part(struct conn *c)
{
    struct conn_parts *p = c->mp;
    const struct range *r = &p->set.r[p->cur];
    conn_out_ensure(c);
    buf_compact(&c->out);
    size_t n = mp_part_head(c->out.last, buf_room(&c->out), p->boundary, p->cur == 0,
                            c->sent.content_type, r->start, r->end, c->sent.total);
    ASSERT(n > 0); /* MP_PART_HEAD_MAX: far less than <out>, which is at most half full */
    c->out.last += n;
    c->body_bytes += n;
    c->pos = r->start;
    c->end = r->end;
    parts_ahead(c);
}

/* The current part is sent: starts the next one (true), or, after the last, queues the closing
 * delimiter (false: the body is complete once <out> is written). */
static bool next_part(struct conn *c)
{
    struct conn_parts *p = c->mp;
    if (++p->cur < p->set.n) {
        start_part(c);
        return true;
    }
    conn_out_ensure(c);
    buf_compact(&c->out);
    size_t n = mp_tail(c->out.last, buf_room(&c->out), p->boundary);
    ASSERT(n > 0);
    c->out.last += n;
    c->body_bytes += n;
    return false;
}

bool conn_cache_is_miss(const struct conn *c)
{
    return c->sent_bytes ? c->sent_new : c->first_miss;
}

/*
 * X-Upstream-Cache-Status of answer <h>, written before its body: it can only tell whether the
 * answer's first byte is new (not delivered to any client yet, nor announced new by another
 * answer's head: MISS) or not (HIT); see cache_chunk_head_is_miss. An answer without bytes, or
 * whose first byte is not in the chunk looked up (a suffix range), says whether this request
 * started the fill it looked up. The access log line, written at the end, is exact
 * (conn_cache_is_miss).
 */
static const char *head_status(const struct conn *c, const struct fwd_cache_head *h, bool no_bytes)
{
    if (c->force)
        return "BYPASS";
    uint64_t cs = cache_chunk_size(c->ctx->cache);
    if (no_bytes || c->head_req || cache_chunk_index(c->ck) != h->start / cs)
        return c->first_miss ? "MISS" : "HIT";
    uint64_t off = h->start % cs, cap = cache_chunk_cap(c->ck);
    uint64_t last = h->end / cs == h->start / cs ? h->end % cs : cap - 1;
    return cache_chunk_head_is_miss(c->ck, off, last - off + 1) ? "MISS" : "HIT";
}

static bool head_step(struct conn *c)
{
    struct chunk *ck = c->ck;
    const struct cache_meta *m = cache_chunk_meta(ck);
    enum chunk_state cst = cache_chunk_state(ck);
    if (cst == CHUNK_S_FAILED || m != NULL) /* a disk lookup has become a hit */
        c->first_miss = c->first_miss && cache_chunk_is_miss(ck);
    if (cst == CHUNK_S_FAILED) {
        enum chunk_fail why = cache_chunk_fail_cause(ck);
        if (why == CHUNK_FAIL_PASS && cache_chunk_answer(ck) != NULL) {
            ASSERT(c->shared == NULL);
            c->shared = answer_ref(cache_chunk_answer(ck));
            c->shared_force = c->force; /* (the hand-over resets c->force) */
        }
        drop_chunk(c);
        switch (why) {
        case CHUNK_FAIL_PASS:
            /* Uncacheable: answered from the fill's answer when it brought one for its readers
             * (taken before drop_chunk let go of it), else this request is forwarded as it is. */
            conn_hand_over(c, c->shared != NULL ? &conn_share_responder : &conn_pass_responder);
            break;
        case CHUNK_FAIL_FORBIDDEN:
            conn_local_response(c, 403, false, NULL);
            break;
        case CHUNK_FAIL_TIMEOUT:
            conn_local_response(c, 504, false, NULL);
            break;
        default:
            conn_local_response(c, 502, false, NULL);
            break;
        }
        return true;
    }
    if (m == NULL) {
        wait_chunk(c, first_byte(c) % cache_chunk_size(c->ctx->cache));
        return false;
    }
    /* A revalidate rule: a stored copy (not one a fill is bringing now, nor a refetch) is
     * served only once the origin was asked with its validators (conn_pass.c). */
    bool filling_now = cst == CHUNK_S_FILLING && !cache_chunk_is_loading(ck);
    if (c->reval && !c->reval_done && !c->force && !c->first_miss && !filling_now) {
        c->reval_done = true;
        c->reval_pending = true;
        snprintf(c->reval_etag, sizeof(c->reval_etag), "%s", m->etag);
        snprintf(c->reval_lm, sizeof(c->reval_lm), "%s", m->last_modified);
        drop_chunk(c);
        conn_hand_over(c, &conn_pass_responder);
        return true;
    }
    struct fwd_cache_head h;
    memset(&h, 0, sizeof(h));
    h.status = 200;
    h.total = m->total;
    h.start = 0;
    h.end = m->total - 1;
    h.etag = c->hide_etag ? "" : m->etag; /* (stored before the rule applied) */
    h.last_modified = m->last_modified;
    h.content_type = m->content_type;
    h.head = m->head;
    h.now = (int64_t)ev_now(c->ctx->loop);
    h.hostname = conn_processed_by(c);
    h.client_minor = c->req.version_minor;

    const struct h1_field *rf = field(c, "Range");
    enum precond_outcome pc = preconditions(c, m, rf != NULL);
    if (pc == PRECOND_NOT_MODIFIED)
        h.status = 304;
    else if (pc == PRECOND_FAILED)
        h.status = 412;
    if (pc == PRECOND_RANGE)
        choose_ranges(c, rf, m, &h); /* one range, several (multipart), or 416 */
    bool no_bytes = h.status == 304 || h.status == 412 || h.status == 416;
    h.cache_status = c->reval_status != NULL ? c->reval_status : head_status(c, &h, no_bytes);
    if (c->reval_status != NULL) /* the origin's answer to the revalidation (304, 5xx) */
        h.upstream_status = c->reval_upstream;
    else if (strcmp(h.cache_status, "HIT") != 0) /* (0 when its bytes came from the disk) */
        h.upstream_status = cache_chunk_origin_status(ck);
    /* RFC 9111 §5.1: Age says the answer was not made by the origin for this request; the
     * first delivery has one only when an upstream cache said so. */
    h.age = strcmp(h.cache_status, "HIT") == 0 || c->reval_status != NULL ||
            (m->head != NULL && m->head->origin_aged);
    if (no_bytes) /* no object bytes follow */
        c->keep_alive = c->keep_alive && c->req.version_minor == 1;
    h.keep_alive = c->keep_alive && !c->draining;
    c->keep_alive = h.keep_alive;

    conn_out_ensure(c);
    buf_compact(&c->out);
    size_t n = fwd_cache_response(&h, c->head_req, c->out.last, buf_room(&c->out));
    ASSERT(n > 0); /* bounded: validators are bounded, <out> at most half full */
    c->out.last += n;
    c->status = h.status;
    cache_meta_clear(&c->sent);
    cache_meta_copy(&c->sent, m);
    if (c->head_req || no_bytes) {
        c->body_bytes = h.status != 304 ? fwd_local_body_len(h.status, c->head_req) : 0;
        conn_response_done(c);
        return true;
    }
    c->pos = h.start;
    c->end = h.end;
    if (c->mp != NULL) {
        c->mp->ahead = cache_chunk_state(ck) == CHUNK_S_FILLING; /* as read_sequential */
        start_part(c); /* part 0 is h.start..h.end: its head follows the answer's */
    }
    if (cache_chunk_index(ck) != h.start / cache_chunk_size(c->ctx->cache))
        drop_chunk(c); /* a suffix range, or parts out of order: body_step gets the first */
    else
        read_sequential(c);
    conn_set_state(c, CONN_S_CACHE_BODY);
    return true;
}

/* Whether socket <fd> holds at least <n> bytes it has not handed on (sent and unacknowledged, or
 * not sent yet). */
static bool queued_at_least(int fd, int n)
{
    int q = 0;
    return ioctl(fd, SIOCOUTQ, &q) == 0 && q >= n;
}

static bool same_version(const struct cache_meta *a, const struct cache_meta *b)
{
    return a->total == b->total && strcmp(a->etag, b->etag) == 0 &&
           strcmp(a->last_modified, b->last_modified) == 0;
}

static bool body_step(struct conn *c)
{
    uint64_t cs = cache_chunk_size(c->ctx->cache);
    uint64_t turn = 0; /* bytes sent in this turn: yield after CONN_SEND_TURN for fairness */
    int by_ref = -1;   /* chunk memory goes by reference in this turn (-1: not decided) */
    if ((buf_is_alloc(&c->out) && buf_len(&c->out) > 0) || c->blocked_write)
        return false; /* the head (or earlier bytes) first */
    while (c->pos <= c->end) {
        uint64_t idx = c->pos / cs;
        if (c->ck == NULL || cache_chunk_index(c->ck) != idx) {
            get_chunk(c, idx, c->pos - idx * cs, false);
            c->ra_pending = cache_chunk_state(c->ck) == CHUNK_S_FILLING;
        }
        struct chunk *ck = c->ck;
        if (c->ra_pending && !cache_chunk_is_loading(ck)) {
            /* A fill (not a disk lookup, which may still hit): cold here, so fetch its tail of a
             * run now and keep the next chunks coming. */
            c->ra_pending = false;
            read_sequential(c);
        }
        if (cache_chunk_state(ck) == CHUNK_S_FAILED) {
            log_info("conn#%u %s: fetch of chunk %llu failed after the head was sent: closing",
                     c->id, c->peer, (unsigned long long)idx);
            conn_close(c);
            return false;
        }
        const struct cache_meta *m = cache_chunk_meta(ck);
        if (m == NULL) {
            wait_chunk(c, c->pos - idx * cs);
            return false;
        }
        if (!same_version(m, &c->sent)) {
            log_warn("conn#%u %s: object changed at the origin mid-response: closing", c->id,
                     c->peer);
            conn_close(c);
            return false;
        }
        uint64_t cstart = idx * cs;
        uint64_t off = c->pos - cstart;
        uint64_t cap = cache_chunk_cap(ck);
        uint64_t stop = c->end + 1 < cstart + cap ? c->end + 1 : cstart + cap;
        uint64_t avail = cache_chunk_avail(ck, off);
        uint64_t want = stop - c->pos;
        size_t n = (size_t)(avail < want ? avail : want);
        if (n == 0) {
            ASSERT(cache_chunk_state(ck) == CHUNK_S_FILLING);
            wait_chunk(c, off);
            return false;
        }
        if (turn == 0 && !conn_take_turn(c))
            return false; /* the iteration's sends are spent: first in the next one (turnq.h) */
        ssize_t k;
        struct chunk_bytes b;
        cache_chunk_bytes(ck, off, &b);
        if (b.data != NULL && n > CONN_SEND_MAX)
            n = CONN_SEND_MAX; /* the rest follows in this turn (see CONN_SEND_MAX) */
        /* Decided at the turn's first send of memory that can go by reference; a block that
         * cannot (malloc'd: fd -1) is copied whatever was decided. */
        if (by_ref < 0 && b.data != NULL && b.fd >= 0)
            by_ref = queued_at_least(c->fd, CONN_BYREF_QUEUE);
        bool ref = b.data != NULL && b.fd >= 0 && by_ref == 1;
        do {
            if (b.data != NULL && !ref) {
                k = send(c->fd, b.data, n, MSG_NOSIGNAL);
            } else {
                off_t fo = b.file_off;
                k = sendfile(c->fd, b.fd, &fo, n);
            }
        } while (k < 0 && errno == EINTR);
        if (k < 0 && errno == EAGAIN) {
            c->blocked_write = true;
            /* A slow client must not pin memory: continue from the stored file. */
            if (b.data != NULL && cache_chunk_state(ck) == CHUNK_S_SEALED) {
                struct chunk *dk = cache_chunk_on_disk(c->ctx->cache, ck);
                if (dk != NULL) { /* (same bytes, same miss account) */
                    drop_chunk(c);
                    c->ck = dk;
                }
            }
            return false;
        }
        if (k <= 0) {
            log_debug("conn#%u %s: send: %s", c->id, c->peer, k < 0 ? strerror(errno) : "0");
            g_stats.client_reset++;
            conn_close(c);
            return false;
        }
        if (b.data == NULL)
            g_stats.sent_file += (uint64_t)k;
        else if (ref)
            g_stats.sent_mem_ref += (uint64_t)k;
        else
            g_stats.sent_mem_copy += (uint64_t)k;
        conn_turn_sent((uint64_t)k);
        c->pos += (uint64_t)k;
        c->body_bytes += (uint64_t)k;
        /* Per byte: a first delivery is a miss, any later one a hit (cache_chunk_deliver). */
        uint64_t fresh = cache_chunk_deliver(ck, off, (uint64_t)k);
        conn_count_bytes(c, fresh, (uint64_t)k - fresh, 0);
        c->hit_bytes += (uint64_t)k - fresh;
        conn_live_account(c, false);
        c->sent_bytes = true;
        c->sent_new = c->sent_new || fresh > 0;
        c->last_write = ev_now(c->ctx->loop);
        if ((size_t)k < n) {
            c->blocked_write = true;
            return false;
        }
        turn += (uint64_t)k;
        if (turn >= CONN_SEND_TURN && c->pos <= c->end) {
            /* Let the other clients have the loop; EV_WRITE brings us back next iteration. */
            c->blocked_write = true;
            return false;
        }
        if (c->pos == cstart + cap)
            drop_chunk(c);
    }
    /* A part ending inside a chunk keeps it: the next part may start in it. */
    if (c->mp != NULL && next_part(c)) {
        /* Its head goes out first (the driver writes <out>, then steps again); after bytes of
         * this turn, in the next loop iteration, so that many small parts do not make one
         * client's turn longer than CONN_SEND_TURN allows. */
        if (turn > 0)
            c->blocked_write = true;
        return true;
    }
    drop_chunk(c);
    conn_response_done(c);
    return true;
}

bool conn_cache_step(struct conn *c)
{
    if (c->state == CONN_S_CACHE_HEAD)
        return head_step(c);
    return body_step(c);
}

const struct conn_responder conn_cache_responder = {"cache", conn_cache_begin, conn_cache_step,
                                                    conn_cache_reset};
