/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fetch: fills a run of consecutive chunks of one object from the origin. See fetch.h.
 *
 * | state (FETCH_S_) | waits for                                 | holds                         |
 * |------------------|-------------------------------------------|-------------------------------|
 * | NEW              | - (made, not routed yet)                  | chunk refs                    |
 * | RESOLVE          | the resolver (skipped with an override)   | chunk refs, resolver query    |
 * | WAIT_HEAD        | the response head (connect, send, answer) | chunk refs, upstream          |
 * | BODY             | body bytes, committed into the chunks     | chunk refs, upstream          |
 * | MEMORY           | room for the current chunk (reads paused) | + mem waiter, its timer       |
 * | DRAIN_PASS       | the end of an uncacheable answer, read    | chunk refs, upstream, answer  |
 * |                  | into memory to share (or a short one away)|                               |
 * | BUFFER           | the end of a chunked 200 (no Range), read | chunk refs, upstream, answer  |
 * |                  | into memory, then stored (or shared)      |                               |
 * | DRAIN_REDIRECT   | the end of a redirect's short body (kept  | chunk refs, upstream, Location|
 * |                  | as the answer until its target is routed) | answer                        |
 * | DONE             | -: every chunk sealed or failed, freed    | -                             |
 * fetch_set_state() is the one setter (it checks the transition, see fetch_next_ok); a redirect
 * goes back to RESOLVE or WAIT_HEAD towards its target, and a resumption to WAIT_HEAD.
 * One upstream request "Range: bytes=a-b" covers the run; its body fills chunk after chunk, each
 * sealed (stored) as soon as it is complete, so readers of later chunks join them while they
 * fill. A connection lost, cut short or stalled mid-body is resumed from the byte reached, up to
 * FETCH_ATTEMPTS times, only if the origin answers with the same length and validators; readers
 * see only a pause. Every request of a fetch is given all the addresses its route found
 * (upstream tries the next one when a connect fails), so a resumption may be answered by
 * another address of the same name. fetch_finish() is the one exit.
 *
 * A fetch fills object bytes [pos, last]: usually whole chunks, but a chunk whose first reader
 * starts deep inside it (fetch_start_at, fetch_split) is shared by two fetches, the run's from the
 * reader's offset on (the chunk's filler, cache_chunk_filler) and one of its own for the bytes
 * before it (holding only a ref). The run's fetch holds that head part (head_ck) until its own
 * answer comes, so that the origin sees the request the reader waits for first; it is asked then,
 * or sooner for a reader who wants its bytes (release_head_part, fetch_want), or only its piece
 * from a reader deep inside it (ask_head_piece). A reader deep inside what a request not answered
 * yet is to bring cuts it (cut_unanswered). So a chunk may be filled by up to CACHE_SPLITS_MAX + 1
 * fetches, each of one part. Each commits at the end of its part (cache_chunk_commit), parts join
 * when they meet, and whichever completes the chunk seals it. A part that fails fails the chunk;
 * the other parts' fetches then read their bytes away. All answers must be the same version
 * (cache_chunk_set_meta refuses another), so a chunk never holds bytes of two versions.
 *
 * One origin request per uncacheable answer: what a fill's request brings that cannot be cached
 * (a 404, a 5xx, a redirect not followed, a 200 of unknown length...) is read into an answer
 * (answer.h) of at most share_bound() bytes, and its chunks fail with it
 * (cache_chunk_failed_answer): every reader waiting on them is answered from that one answer
 * (conn_share.c). A body that does not fit (a Content-Length past the bound, or more bytes than the
 * bound before its end) is not shared: the chunks fail with CHUNK_FAIL_PASS alone and each reader
 * forwards its own request. A 206 or 416 answers the fill's own Range, not the readers' requests:
 * never shared. A chunked 200 (an origin that ignores Range and does not say the length) is read
 * the same way (BUFFER) and, complete within the bound, stored as the object (store_whole); a
 * close-delimited one is only shared, never stored (its end cannot be told from a cut).
 */
#include "fetch.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "admit.h"
#include "anstore.h"
#include "answer.h"
#include "cache.h"
#include "config.h"
#include "log.h"
#include "cluster.h"
#include "objhead.h"
#include "origin.h"
#include "peers.h"
#include "range.h"
#include "resolver.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

#define FETCH_MAGIC 0xfe7c4001u
#define FETCH_ATTEMPTS 3 /* resumptions after a failure mid-body */

#define FETCH_STATES(X)                                                                            \
    X(FETCH_S_NEW)            /* made, not routed yet */                                           \
    X(FETCH_S_RESOLVE)        /* waiting for the resolver */                                       \
    X(FETCH_S_WAIT_HEAD)      /* an upstream request runs: waiting for its head */                 \
    X(FETCH_S_BODY)           /* committing its body into the chunks */                            \
    X(FETCH_S_MEMORY)         /* body paused until the current chunk gets memory */                \
    X(FETCH_S_DRAIN_PASS)     /* reading an uncacheable answer (to share), then PASS */            \
    X(FETCH_S_BUFFER)         /* reading a chunked 200 whole, then storing it */                   \
    X(FETCH_S_DRAIN_REDIRECT) /* reading away a redirect's short body, then following it */        \
    X(FETCH_S_DONE)           /* finished: being freed */

enum fetch_state {
#define FETCH_SX(s) s,
    FETCH_STATES(FETCH_SX)
#undef FETCH_SX
};

static const char *const fetch_state_names[] = {
#define FETCH_SN(s) &(#s)[8], /* without the FETCH_S_ prefix */
    FETCH_STATES(FETCH_SN)
#undef FETCH_SN
};

struct fetch {
    unsigned magic;
    unsigned id;
    enum fetch_state state;
    struct fetch *next, **pprev;       /* all live fetches */
    struct chunk *cks[CACHE_SPAN_MAX]; /* refs, consecutive indices */
    size_t n;                          /* chunks in the run (trimmed to the object's end) */
    size_t cur;                        /* the chunk being filled */
    char *host;                        /* owns */
    char *authority;                   /* owns: the Host header value */
    uint16_t port;
    char *target;   /* owns: the request target asked (path and query, from '/') */
    char *req_pre;  /* owns: request line and Host */
    char *req_post; /* owns: the fields after Range, and the blank line */
    struct sockaddr_storage
        addrs[RESOLVER_MAX_ADDRS]; /* as routed, in order; upstream fails over */
    size_t n_addrs;                /* 0 until routed */
    bool flowing;              /* body bytes of the object have arrived (the run is streaming) */
    struct resolver_query *rq; /* owns while resolving */
    struct upstream *up;       /* owns while fetching */
    uint64_t skip;             /* body bytes to drop first (200 answer to a range) */
    bool whole_object;         /* the origin ignored our Range */
    bool resumed;              /* this attempt continues an earlier one */
    unsigned attempts;
    unsigned hops;          /* redirects followed */
    char *location;         /* owns: a redirect to follow (DRAIN_REDIRECT: once drained) */
    char *ua;               /* owns: the first reader's User-Agent (redirect checks) */
    char *processed_by;     /* owns: the X-LanCache-Processed-By chain received */
    char *fields;           /* owns: the first reader's fields a fill forwards (origin_req) */
    struct cache_meta meta; /* as first answered (resumptions must match); owns its head's ref */
    bool meta_known;
    double sent_at; /* when the current upstream request was started (RFC 9111 request_time) */
    double ans_at;  /* when the head of f->ans arrived (RFC 9111 response_time) */
    bool has_query; /* the path asked has a query: its answers are never kept (anstore.h) */
    bool followed;  /* a redirect was followed: the answer is the target's, never kept */
    bool hide_etag; /* a hide_etag rule (config.h): the origin's ETag is not part of the meta */
    int ans_status; /* the status of the origin answer being read (X-Upstream-Status) */
    struct chunk_waiter memw; /* waiting for memory */
    ev_timer memt;            /* bounds that wait: read_timeout */
    uint64_t req_end;         /* last byte the current upstream request asked for */
    uint64_t ans_end;         /* last byte of the current answer, when it is a short 206 */
    bool short_ans;           /* the current answer is a 206 ending before req_end */
    bool host_is_ip;          /* <host> is an IP literal (as routed) */
    uint64_t pos;             /* the next object byte this fetch commits */
    uint64_t last;            /* the last object byte it fills (its run may end mid-chunk) */
    uint64_t next_index;      /* the chunk after the run (a whole-object answer goes on there) */
    bool past_end;            /* answered 416 for bytes from pos on: the object ends before */
    struct cache *cache;      /* borrows; with <key>, once the answer is the whole object */
    char *key;                /* owns: the object's cache key */
    size_t key_len;
    struct chunk *head_ck; /* ref: a chunk whose head part [0, head_off) is not asked yet */
    uint64_t head_off;
    struct answer *ans; /* ref: the answer being read to share or store (DRAIN_*, BUFFER) */
    int peer;           /* the cluster node asked for the run (its index); -1: the origin */
    bool from_peer;     /* filling a peer's request: from the origin, never from a node */
    bool peer_hit;      /* the node's answer said HIT */
    unsigned peer_hops; /* nodes given up on (peer_fallback): at CLUSTER_MAX_NODES, the origin */
    bool not_ours;      /* filled from the origin for chunks a node owns (PEER_ANSWERED) */
    uint64_t first;     /* the first object byte it was asked for (fetch_foreach) */
    double started_at;  /* ev_now at its start */
    double byte_at;     /* ev_now of its last body byte (started_at before the first) */
};

static struct fetch_ctx *fctx;
static struct fetch *fetches;
static unsigned n_fetches;
/* Cluster nodes found down since the last turn (bits), and the turn that moves the fills that
 * ask them (on_nodes_down). */
static uint32_t nodes_down;
static ev_timer nodes_down_ev;
static void on_nodes_down(struct ev_loop *loop, ev_timer *t, int revents);
static void on_node_down(unsigned node);
static unsigned fetch_next_id;

/* Whether a fetch may go from state <from> to <to>. */
static bool fetch_next_ok(enum fetch_state from, enum fetch_state to)
{
    if (to == FETCH_S_DONE)
        return from != FETCH_S_DONE;
    switch (from) {
    case FETCH_S_NEW:
        return to == FETCH_S_RESOLVE || to == FETCH_S_WAIT_HEAD;
    case FETCH_S_RESOLVE:
        return to == FETCH_S_WAIT_HEAD;
    case FETCH_S_WAIT_HEAD: /* (a redirect followed at once, or a resumption asked again) */
        return to == FETCH_S_RESOLVE || to == FETCH_S_WAIT_HEAD || to == FETCH_S_BODY ||
               to == FETCH_S_DRAIN_PASS || to == FETCH_S_DRAIN_REDIRECT || to == FETCH_S_BUFFER;
    case FETCH_S_BODY: /* (RESOLVE: a node failed mid-body, the origin is asked for the rest) */
        return to == FETCH_S_MEMORY || to == FETCH_S_WAIT_HEAD || to == FETCH_S_RESOLVE;
    case FETCH_S_MEMORY:
        return to == FETCH_S_BODY || to == FETCH_S_WAIT_HEAD || to == FETCH_S_RESOLVE;
    case FETCH_S_DRAIN_PASS:
    case FETCH_S_BUFFER:
        return false;
    case FETCH_S_DRAIN_REDIRECT:
        return to == FETCH_S_RESOLVE || to == FETCH_S_WAIT_HEAD;
    case FETCH_S_DONE:
        return false;
    }
    return false;
}

/* The one setter of f->state. Leaving MEMORY ends its wait and the timer that bounds it. */
static void fetch_set_state(struct fetch *f, enum fetch_state st)
{
    log_debug("fetch#%u %s -> %s", f->id, fetch_state_names[f->state], fetch_state_names[st]);
    ASSERT(fetch_next_ok(f->state, st));
    if (f->state == FETCH_S_MEMORY) {
        cache_chunk_unwait(&f->memw);
        ev_timer_stop(fctx->loop, &f->memt);
    }
    f->state = st;
}

/*
 * Origins seen answering a range request with the whole object (200): remembered for
 * NORANGE_TTL s by authority, at most NORANGE_MAX (the oldest is forgotten first), forgotten at
 * once when one answers 206. For them, a fetch takes the whole answer, filling every chunk it
 * passes, instead of several range requests that would each bring the object from its start.
 */
#define NORANGE_MAX 64
#define NORANGE_TTL 3600.0
static struct {
    char authority[CONFIG_HOST_MAX + 8];
    ev_tstamp until;
} norange[NORANGE_MAX];

static int norange_find(const char *authority)
{
    for (int i = 0; i < NORANGE_MAX; i++)
        if (norange[i].until > 0 && strcmp(norange[i].authority, authority) == 0)
            return i;
    return -1;
}

/* What fetch <f>'s answer showed of its origin (f->authority): <none>, no range support. */
static void norange_note(const struct fetch *f, bool none)
{
    const char *authority = f->authority;
    int i = norange_find(authority);
    if (!none) {
        if (i >= 0)
            norange[i].until = 0;
        return;
    }
    if (i < 0) {
        i = 0;
        for (int j = 1; j < NORANGE_MAX; j++)
            if (norange[j].until < norange[i].until)
                i = j;
        if (strlen(authority) >= sizeof(norange[i].authority))
            return;
        strcpy(norange[i].authority, authority);
        log_info("fetch#%u %s: the origin ignores Range: whole answers from now on", f->id,
                 authority);
    }
    norange[i].until = ev_now(fctx->loop) + NORANGE_TTL;
}

/*
 * Whether the origin <authority> ("host[:port]" as in Host) was seen answering a range request
 * with the whole object (200) within the last hour and not with a 206 since: then a fetch reads
 * its whole answer, filling every chunk it passes that nobody else has, and neither read-ahead,
 * nor a split, nor a two-part fill asks it for more (each would bring the object from byte 0).
 */
static bool origin_ignores_ranges(const char *authority)
{
    int i = norange_find(authority);
    return i >= 0 && norange[i].until > ev_now(fctx->loop);
}

/* The cache's filler: a disk lookup found nothing usable, fill the chunk as any miss. */
static void on_disk_miss(void *arg, struct chunk *ck, uint64_t off, const struct origin_req *o)
{
    (void)arg;
    fetch_start_at(ck, off, o);
    log_debug("fetch#%u starts chunk %llu after a disk miss", fetch_id_of(ck),
              (unsigned long long)cache_chunk_index(ck));
}

void fetch_module_init(struct fetch_ctx *ctx)
{
    fctx = ctx;
    ASSERT(!ev_is_active(&nodes_down_ev));
    ev_timer_init(&nodes_down_ev, on_nodes_down, 0., 0.);
    nodes_down = 0;
    peers_set_down_hook(on_node_down);
    if (ctx->cache != NULL) {
        struct cache_filler filler = {on_disk_miss, NULL};
        cache_set_filler(ctx->cache, &filler);
    }
}

unsigned fetch_live(void)
{
    return n_fetches;
}

unsigned fetch_id_of(const struct chunk *ck)
{
    const struct fetch *f = cache_chunk_filler(ck);
    return f != NULL ? f->id : 0;
}

/* The chunk size, from the cache (its one source). */
static uint64_t chunk_size(const struct chunk *ck)
{
    return cache_chunk_size(cache_chunk_cache(ck));
}

static uint64_t chunk_start(const struct chunk *ck)
{
    return cache_chunk_index(ck) * chunk_size(ck);
}

/* Where this fetch's part of the current chunk ends (exclusive, object offset); the object's
 * length is known (from this fetch's own answer) whenever body bytes arrive. */
static uint64_t part_end(const struct fetch *f)
{
    const struct chunk *ck = f->cks[f->cur];
    uint64_t end = chunk_start(ck) + chunk_size(ck);
    if (end > f->meta.total)
        end = f->meta.total;
    return end < f->last + 1 ? end : f->last + 1;
}

/* This fetch's part of its current chunk is done: seal the chunk if it is complete (the other
 * part's fetch may still be filling it), let go of it, go on to the next. */
static void next_chunk(struct fetch *f)
{
    struct chunk *ck = f->cks[f->cur];
    if (cache_chunk_state(ck) == CHUNK_S_FILLING && cache_chunk_len(ck) == cache_chunk_cap(ck))
        cache_chunk_seal(ck); /* stored now, so that readers and later fetches need not wait */
    if (cache_chunk_filler(ck) == f)
        cache_chunk_set_filler(ck, NULL);
    cache_chunk_unref(&f->cks[f->cur]);
    f->cur++;
}

static void fetch_free(struct fetch *f)
{
    ASSERT(f->head_ck == NULL);
    resolver_cancel(&f->rq);
    upstream_cancel(&f->up);
    cache_chunk_unwait(&f->memw);
    ev_timer_stop(fctx->loop, &f->memt);
    *f->pprev = f->next;
    if (f->next)
        f->next->pprev = f->pprev;
    n_fetches--;
    free(f->host);
    free(f->authority);
    free(f->target);
    free(f->req_pre);
    free(f->req_post);
    free(f->location);
    free(f->ua);
    free(f->processed_by);
    free(f->fields);
    free(f->key);
    cache_meta_clear(&f->meta);
    answer_unref(&f->ans);
    f->magic = 0;
    free(f);
}

/*
 * Whether this fetch's part of its current chunk turned out to lie past the object's end (a
 * reader asked from beyond it, and the chunk was split there): the chunk's other part fills all
 * of it, so this fetch's failure, or its 416, must not fail the chunk.
 */
static bool part_is_past_end(const struct fetch *f)
{
    const struct chunk *ck = f->cks[f->cur];
    uint64_t start = chunk_start(ck);
    if (f->pos == start)
        return false; /* the whole chunk is this fetch's */
    if (cache_chunk_meta(ck) != NULL)
        return f->pos >= start + cache_chunk_cap(ck);
    return f->past_end;
}

static void release_head_part(struct fetch *g);

/* The end: chunks from cur on are sealed (why == NONE, only when complete) or failed; failed
 * with CHUNK_FAIL_PASS and a complete f->ans, they carry that answer to their readers. */
static void fetch_finish(struct fetch *f, enum chunk_fail why)
{
    struct answer *ans =
        why == CHUNK_FAIL_PASS && f->ans != NULL && answer_complete(f->ans) ? f->ans : NULL;
    for (size_t i = 0; ans != NULL && i < f->n; i++) {
        if (f->cks[i] == NULL)
            continue;
        /* Kept for later requests too, when the origin gave it a freshness lifetime: only the
         * answer to the object's first chunk of an object the cache does not hold. The answer
         * to a chunk further in (a 503 while the rest is stored) is that chunk's, and must not
         * hide the stored ones. Nor the answer to a path with a query (the key has no query,
         * and an error depends on it), nor one that came after a redirect (the target's). */
        size_t key_len;
        const char *key = cache_chunk_key(f->cks[i], &key_len);
        struct cache *cache = cache_chunk_cache(f->cks[i]);
        struct anstore *st = cache_answers(cache);
        if (cache_chunk_index(f->cks[i]) == 0 && !f->has_query && !f->followed &&
            !cache_object_is_known(cache, key, key_len) &&
            anstore_put(st, key, key_len, f->authority, ans, f->sent_at, f->ans_at)) {
            const char *hb;
            log_debug("fetch#%u %s: answer %d kept while fresh", f->id, f->host,
                      answer_head(ans, &hb)->status);
            g_stats.fresh_answers_kept++;
        }
        break;
    }
    for (size_t i = 0; i < f->n; i++) {
        struct chunk *ck = f->cks[i];
        if (ck == NULL)
            continue;
        if (cache_chunk_state(ck) == CHUNK_S_FILLING && !(i == f->cur && part_is_past_end(f))) {
            if (why == CHUNK_FAIL_NONE && cache_chunk_meta(ck) != NULL &&
                cache_chunk_len(ck) == cache_chunk_cap(ck))
                cache_chunk_seal(ck);
            else if (ans != NULL) /* every reader is answered from the one answer */
                cache_chunk_failed_answer(ck, ans);
            else /* this fetch's part is missing (the other part's fetch sees it fail) */
                cache_chunk_failed(ck, why == CHUNK_FAIL_NONE ? CHUNK_FAIL_ORIGIN : why);
        }
        if (cache_chunk_filler(ck) == f)
            cache_chunk_set_filler(ck, NULL);
        cache_chunk_unref(&f->cks[i]);
    }
    release_head_part(f); /* asked now, or finished when our end failed the chunk */
    fetch_set_state(f, FETCH_S_DONE);
    fetch_free(f);
}

/* Copies field <name>'s value to <out> ("" when absent). Returns false when it does not fit
 * (<out> is then ""). */
static bool header_value(const char *buf, const struct h1_resp *resp, const char *name, char *out,
                         size_t cap)
{
    const struct h1_field *fl = h1_find(buf, resp->fields, resp->n_fields, name);
    out[0] = '\0';
    if (fl == NULL)
        return true;
    if (fl->value.len >= cap)
        return false;
    memcpy(out, buf + fl->value.off, fl->value.len);
    out[fl->value.len] = '\0';
    return true;
}

static void fetch_connect(struct fetch *f);
static void fetch_route(struct fetch *f, bool host_is_ip);
static bool two_part(const struct chunk *ck, uint64_t off);
static void extend_run(struct fetch *f);
static void start_head_part(struct chunk *ck, uint64_t off, struct fetch *g, bool route);
static void build_head(struct fetch *f, const struct origin_req *o);
static void rebuild_head(struct fetch *f);
static int route_of(const struct chunk *ck, bool from_peer);
static void mark_remote(struct fetch *f);
static void on_mem(struct chunk_waiter *w);

/*
 * Follows f->location: "http://authority/path", "//authority/path" or "/path" (same origin).
 * Returns false when it cannot or must not be followed (the caller fails the chunk: PASS).
 */
static bool follow_redirect(struct fetch *f)
{
    const char *loc = f->location, *path;
    char authority[300];
    if (strncmp(loc, "http://", 7) == 0 || strncmp(loc, "//", 2) == 0) {
        const char *a = loc + (loc[0] == '/' ? 2 : 7);
        size_t alen = strcspn(a, "/?#");
        if (alen == 0 || alen >= sizeof(authority))
            return false;
        memcpy(authority, a, alen);
        authority[alen] = '\0';
        path = a + alen;
    } else if (loc[0] == '/') {
        snprintf(authority, sizeof(authority), "%s", f->authority);
        path = loc;
    } else {
        return false; /* https, relative paths without '/', anything else */
    }
    struct h1_authority auth;
    if (h1_authority_parse(authority, strlen(authority), &auth) < 0)
        return false;
    const struct domains *d = g_domains;
    struct admit_result adm;
    admit_host(g_cfg, d, &auth, f->ua, f->ua ? strlen(f->ua) : 0, ADMIT_REDIRECT, &adm);
    if (!adm.allow)
        return false;
    size_t plen = strcspn(path, "#");
    struct origin_req o;
    memset(&o, 0, sizeof(o));
    o.host = auth.host;
    o.host_is_ip = auth.is_ip;
    o.port = auth.port;
    o.authority = auth.ident;
    o.path = plen > 0 ? path : "/";
    o.path_len = plen > 0 ? plen : 1;
    o.user_agent = f->ua;
    o.ua_len = f->ua ? strlen(f->ua) : 0;
    o.processed_by = f->processed_by;
    o.processed_by_len = f->processed_by ? strlen(f->processed_by) : 0;
    o.fields = f->fields;
    o.fields_len = f->fields ? strlen(f->fields) : 0;
    log_info("fetch#%u %s: redirected to http://%s%.*s (hop %u)", f->id, f->host, auth.ident,
             (int)plen, path, f->hops);
    free(f->host);
    free(f->authority);
    f->host = xstrdup(auth.host);
    f->authority = xstrdup(auth.ident);
    f->port = auth.port;
    build_head(f, &o);
    free(f->location);
    f->location = NULL;
    fetch_route(f, auth.is_ip);
    return true;
}

/* Memory for the current chunk; false while waiting (reads stay paused). */
static bool reserve_current(struct fetch *f)
{
    struct chunk *ck = f->cks[f->cur];
    /* (Reserved by its other part's fetch, or failed by it meanwhile: sink_body reads it away.) */
    if (cache_chunk_is_reserved(ck) || cache_chunk_state(ck) != CHUNK_S_FILLING ||
        cache_chunk_reserve(ck) == 0) {
        if (f->state == FETCH_S_MEMORY)
            fetch_set_state(f, FETCH_S_BODY);
        return true;
    }
    cache_mem_wait(cache_chunk_cache(ck), &f->memw, on_mem);
    if (f->state != FETCH_S_MEMORY) {
        fetch_set_state(f, FETCH_S_MEMORY);
        ev_timer_set(&f->memt, (double)g_cfg->read_timeout_ms / 1000.0, 0.);
        ev_timer_start(fctx->loop, &f->memt);
    }
    return false;
}

/* Memory stayed full (readers pinning it) for read_timeout: give the fill up rather than hold
 * its readers and its origin slot forever; readers without a head yet are forwarded uncached. */
static void on_mem_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct fetch *f = container_of(t, struct fetch, memt);
    CHECK_OBJ(f, FETCH_MAGIC);
    log_warn("fetch#%u %s: no cache memory for %llu ms: giving this fill up", f->id, f->host,
             (unsigned long long)g_cfg->read_timeout_ms);
    g_stats.fetch_failed++;
    upstream_cancel(&f->up);
    fetch_finish(f, CHUNK_FAIL_PASS);
}

static void on_mem(struct chunk_waiter *w)
{
    struct fetch *f = container_of(w, struct fetch, memw);
    CHECK_OBJ(f, FETCH_MAGIC);
    if (reserve_current(f) && f->up != NULL)
        upstream_resume(f->up);
}

/* Sets the meta on every chunk of the run; chunks beyond the object's end are dropped.
 * Returns 0, -EFBIG (an object too large to cache) or another -errno. */
static int apply_meta(struct fetch *f, const struct cache_meta *m)
{
    cache_meta_clear(&f->meta);
    cache_meta_copy(&f->meta, m);
    f->meta_known = true;
    size_t keep = f->n;
    for (size_t i = 0; i < f->n; i++) {
        if (cache_chunk_state(f->cks[i]) != CHUNK_S_FILLING)
            continue; /* failed by its other part's fetch: sink_body reads our part away */
        int rc = cache_chunk_set_meta(f->cks[i], m);
        if (rc == 0)
            cache_chunk_set_origin_status(f->cks[i], f->ans_status);
        if (rc < 0) {
            if (i == 0 || rc == -ESTALE)
                return rc;
            if (keep == f->n)
                keep = i;
            cache_chunk_failed(f->cks[i], CHUNK_FAIL_ORIGIN);
            if (cache_chunk_filler(f->cks[i]) == f)
                cache_chunk_set_filler(f->cks[i], NULL);
            cache_chunk_unref(&f->cks[i]);
        }
    }
    f->n = keep;
    return 0;
}

static bool same_version(const struct cache_meta *a, const struct cache_meta *b)
{
    return a->total == b->total && strcmp(a->etag, b->etag) == 0 &&
           strcmp(a->last_modified, b->last_modified) == 0;
}

/*
 * A 416 ("Content-Range: bytes *" "/N") for a part that starts inside a chunk of the object but
 * past its end N: the chunk is the other part's alone (see part_is_past_end).
 */
static void note_past_end(struct fetch *f, const char *buf, const struct h1_resp *resp)
{
    const struct h1_field *cr = h1_find(buf, resp->fields, resp->n_fields, "Content-Range");
    if (cr == NULL || cr->value.len < 9 || cr->value.len > 28 ||
        memcmp(buf + cr->value.off, "bytes */", 8) != 0)
        return;
    uint64_t total = 0;
    for (size_t i = 8; i < cr->value.len; i++) {
        char ch = buf[cr->value.off + i];
        if (ch < '0' || ch > '9' || total > UINT64_MAX / 10 - 1)
            return;
        total = total * 10 + (uint64_t)(ch - '0');
    }
    struct chunk *ck = f->cks[f->cur];
    uint64_t start = chunk_start(ck);
    if (f->pos == start || f->pos < total || total <= start)
        return;
    f->past_end = true;
    if (cache_chunk_state(ck) == CHUNK_S_FILLING && cache_chunk_meta(ck) == NULL)
        cache_chunk_unsplit(ck, f->pos - start); /* the part before fills it to its end */
}

/*
 * How large an answer a fill reads into memory to share with its readers (or, a chunked 200, to
 * store): FETCH_SHARE_MIN, or the chunk size when it is larger (answer.h bounds them all
 * together).
 */
#define FETCH_SHARE_MIN (1024 * 1024)
static size_t share_bound(const struct fetch *f)
{
    uint64_t cs = chunk_size(f->cks[f->cur]);
    return cs > FETCH_SHARE_MIN ? (size_t)cs : FETCH_SHARE_MIN;
}

/* Reads the answer whose head is <buf>/<resp> into f->ans, in state <st>. */
static void start_answer(struct fetch *f, const char *buf, const struct h1_resp *resp,
                         enum fetch_state st)
{
    ASSERT(f->ans == NULL);
    f->ans = answer_new(buf, resp, share_bound(f));
    f->ans_at = ev_now(fctx->loop);
    if (resp->framing == H1_BODY_NONE)
        answer_end(f->ans); /* (no body follows: upstream ends it at once) */
    fetch_set_state(f, st);
}

/* Why a fill leaves the node it asks (peer_fallback). */
enum peer_leave {
    PEER_FAULT,    /* unreachable, refused, cut: it is marked down */
    PEER_ANSWERED, /* it answered that it could not get the bytes (502, 504): it stays up */
    PEER_DOWN,     /* its heartbeats (or another fill) found it down meanwhile */
};

/*
 * Node f->peer is given up on for this fetch (<why>; <leave>). After PEER_FAULT (marked down
 * here) or PEER_DOWN, the fetch goes on from the byte reached towards the node that now owns
 * the run's next chunk (the next of its rank), or the origin when that is this node; after
 * PEER_ANSWERED, this node asks the origin itself. The node's answer so far, if any, is
 * continued only with the same version (a resumption), with the attempts of a new source.
 * Bounded: after CLUSTER_MAX_NODES nodes given up on (heartbeats may bring them back
 * meanwhile), the origin.
 */
static void peer_fallback(struct fetch *f, const char *why, enum peer_leave leave)
{
    upstream_cancel(&f->up);
    unsigned node = (unsigned)f->peer;
    if (leave == PEER_FAULT)
        peers_failed(node, why);
    g_stats.fetch_peer_fallback++;
    const struct chunk *ck = NULL;
    for (size_t i = f->cur; i < f->n && ck == NULL; i++)
        ck = f->cks[i];
    f->peer = ck != NULL && leave != PEER_ANSWERED && ++f->peer_hops < CLUSTER_MAX_NODES
                  ? route_of(ck, f->from_peer)
                  : -1;
    f->peer_hit = false;
    f->attempts = 0;
    f->not_ours = f->not_ours || (leave == PEER_ANSWERED && f->peer < 0);
    ASSERT(f->peer != (int)node);
    log_info("fetch#%u %s: node %s: %s: asking %s from byte %llu", f->id, f->host,
             peers_cluster()->nodes[node].addr, why,
             f->peer >= 0 ? peers_cluster()->nodes[f->peer].addr : "the origin",
             (unsigned long long)f->pos);
    mark_remote(f);
    rebuild_head(f);
    f->resumed = f->meta_known; /* (the same version, or nothing) */
    fetch_route(f, f->host_is_ip);
}

static void on_nodes_down(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t;
    (void)revents;
    uint32_t down = nodes_down;
    nodes_down = 0;
    const double quiet = PEERS_TIMEOUT_MS / 1000.0;
    double recheck = 0; /* > 0: look again this much later (a node still down) */
    /* Each fill moved asks another node (or the origin) afterwards: scan again from the
     * start until none is left to move now (the list may change under a fallback). */
    for (bool again = true; again;) {
        again = false;
        for (struct fetch *f = fetches; f != NULL; f = f->next) {
            CHECK_OBJ(f, FETCH_MAGIC);
            if (f->peer < 0 || (down & (1u << f->peer)) == 0 ||
                (peers_live() & (1u << f->peer)) != 0 || f->up == NULL ||
                (f->state != FETCH_S_WAIT_HEAD && f->state != FETCH_S_BODY &&
                 f->state != FETCH_S_MEMORY))
                continue;
            /* Only those that the node has sent nothing for a heartbeat's timeout (since the
             * request, or its last byte): a node found down wrongly (one request timed out)
             * keeps the streams it is sending. The others are looked at again while the node
             * stays down; one waiting for memory here is not the node's doing. */
            double progress = f->byte_at > f->sent_at ? f->byte_at : f->sent_at;
            double left = f->state == FETCH_S_MEMORY ? quiet : progress + quiet - ev_now(loop);
            if (left > 0) {
                nodes_down |= 1u << f->peer;
                if (recheck == 0 || left < recheck)
                    recheck = left;
                continue;
            }
            peer_fallback(f, "it is down", PEER_DOWN);
            again = true;
            break;
        }
    }
    if (nodes_down != 0) {
        ev_timer_set(&nodes_down_ev, recheck, 0.);
        ev_timer_start(loop, &nodes_down_ev);
    }
}

static void on_node_down(unsigned node)
{
    nodes_down |= 1u << node;
    if (fctx != NULL) { /* (at once, also when a recheck was due later) */
        ev_timer_stop(fctx->loop, &nodes_down_ev);
        ev_timer_set(&nodes_down_ev, 0., 0.);
        ev_timer_start(fctx->loop, &nodes_down_ev);
    }
}

static void sink_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    struct cache_meta m;
    memset(&m, 0, sizeof(m));
    f->ans_status = resp->status;
    if (f->peer >= 0) {
        if (h1_find(buf, resp->fields, resp->n_fields, PEERS_REFUSED_FIELD) != NULL) {
            peer_fallback(f, "it refused the request", PEER_FAULT);
            return;
        }
        if (resp->status == 502 || resp->status == 504) {
            /* Its fill failed (its uplink or DNS, or the origin's own gateway error): asked
             * here, the origin may answer; the node is not down. */
            peer_fallback(f, resp->status == 502 ? "it answered 502" : "it answered 504",
                          PEER_ANSWERED);
            return;
        }
        /* The owner's hit or miss is this node's, and so is its origin's status. */
        char v[16];
        header_value(buf, resp, "X-Upstream-Cache-Status", v, sizeof(v));
        f->peer_hit = strcmp(v, "HIT") == 0;
        peers_count_request((unsigned)f->peer, f->peer_hit);
        header_value(buf, resp, "X-Upstream-Status", v, sizeof(v));
        if (v[0] >= '1' && v[0] <= '5' && v[1] >= '0' && v[1] <= '9' && v[2] >= '0' &&
            v[2] <= '9' && v[3] == '\0')
            f->ans_status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
    }
    bool meta_fits = f->hide_etag || header_value(buf, resp, "ETag", m.etag, sizeof(m.etag));
    meta_fits &= header_value(buf, resp, "Last-Modified", m.last_modified, sizeof(m.last_modified));
    meta_fits &= header_value(buf, resp, "Content-Type", m.content_type, sizeof(m.content_type));
    uint64_t pos = f->pos;
    f->skip = 0;
    f->whole_object = false;
    f->short_ans = false;

    if (resp->status == 206) {
        const struct h1_field *cr = h1_find(buf, resp->fields, resp->n_fields, "Content-Range");
        uint64_t a, b, total;
        if (cr == NULL || resp->framing != H1_BODY_LENGTH ||
            range_parse_content_range(buf + cr->value.off, cr->value.len, &a, &b, &total) !=
                RANGE_OK) {
            log_info("fetch#%u %s: 206 without a usable Content-Range: not cached", f->id, f->host);
            goto pass;
        }
        /* What was asked: the run may have been split since (fetch_split), the answer not. A
         * 206 may end before (RFC 9110 §15.3.7): its bytes are taken, and the rest asked again
         * once they are in (sink_done). */
        uint64_t want_end = f->req_end < total - 1 ? f->req_end : total - 1;
        if (a != pos || b > want_end || resp->content_length != b - a + 1) {
            log_info("fetch#%u %s: origin answered bytes %llu-%llu/%llu for %llu-%llu", f->id,
                     f->host, (unsigned long long)a, (unsigned long long)b,
                     (unsigned long long)total, (unsigned long long)pos,
                     (unsigned long long)want_end);
            goto fail;
        }
        m.total = total;
        f->short_ans = b < want_end;
        f->ans_end = b;
        if (f->peer < 0) /* (a node's answer tells nothing of the origin's ranges) */
            norange_note(f, false);
    } else if (resp->status == 200 && resp->framing == H1_BODY_LENGTH &&
               resp->content_length > pos) {
        /* No range support: the whole object comes; our part of it, and every chunk after it
         * that nobody has (extend_run). */
        f->whole_object = true;
        f->skip = pos;
        m.total = resp->content_length;
        if (f->peer < 0)
            norange_note(f, true);
        if (f->key == NULL) {
            const struct chunk *ck = f->cks[f->cur];
            size_t key_len;
            const char *key = cache_chunk_key(ck, &key_len);
            f->cache = cache_chunk_cache(ck);
            f->key = xstrndup(key, key_len);
            f->key_len = key_len;
        }
    } else if (resp->status == 200 && resp->framing == H1_BODY_CHUNKED && !f->resumed) {
        /* No range support and no length: the whole object, read into memory (within
         * share_bound) and stored once its last chunk arrived (store_whole). */
        if (f->peer < 0)
            norange_note(f, true);
        cache_meta_clear(&f->meta);
        f->meta = m; /* (its length is known at the end) */
        /* Its fields, as for any stored answer; without them it is shared, never stored. */
        if (!meta_fits ||
            objhead_from_response(buf, resp, f->sent_at, ev_now(fctx->loop), &f->meta.head) < 0)
            f->meta.head = NULL;
        struct chunk *hk = f->head_ck;
        if (hk != NULL) {
            /* A two-part chunk whose head part is not asked yet: this answer brings all of it. */
            f->head_ck = NULL;
            if (cache_chunk_state(hk) == CHUNK_S_FILLING)
                cache_chunk_unsplit(hk, f->pos - chunk_start(hk));
            cache_chunk_unref(&hk);
        }
        start_answer(f, buf, resp, FETCH_S_BUFFER);
        return;
    } else if (!f->resumed && f->peer < 0 &&
               (resp->status == 301 || resp->status == 302 || resp->status == 303 ||
                resp->status == 307 || resp->status == 308)) {
        char loc[CHUNKFILE_KEY_MAX];
        header_value(buf, resp, "Location", loc, sizeof(loc));
        if (loc[0] == '\0')
            goto pass;
        if (++f->hops > FETCH_MAX_REDIRECTS) {
            log_info("fetch#%u %s: more than %d redirects", f->id, f->host, FETCH_MAX_REDIRECTS);
            goto fail;
        }
        free(f->location);
        f->location = xstrdup(loc);
        if (resp->framing == H1_BODY_NONE ||
            (resp->framing == H1_BODY_LENGTH && resp->content_length <= 64 * 1024)) {
            /* Followed once its body is read; kept as the readers' answer should it not be. */
            start_answer(f, buf, resp, FETCH_S_DRAIN_REDIRECT);
            return;
        }
        upstream_cancel(&f->up);
        if (!follow_redirect(f))
            fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    } else if (f->resumed) {
        log_info("fetch#%u %s: resumption answered %d: giving up", f->id, f->host, resp->status);
        goto fail;
    } else {
        if (resp->status == 416)
            note_past_end(f, buf, resp);
        goto pass;
    }
    if (f->resumed) {
        /* Continue only with the very same object (length and validators). */
        if (!same_version(&m, &f->meta)) {
            log_info("fetch#%u %s: object changed while resuming: giving up", f->id, f->host);
            goto fail;
        }
        fetch_set_state(f, FETCH_S_BODY);
        mark_remote(f);
        return;
    }
    /* What is replayed on every answer of this version (objhead.h). */
    if (!meta_fits ||
        objhead_from_response(buf, resp, f->sent_at, ev_now(fctx->loop), &m.head) < 0) {
        log_info("fetch#%u %s: response fields too long to store (ETag, Last-Modified or "
                 "Content-Type, or %u bytes of others): not cached",
                 f->id, f->host, OBJHEAD_FIELDS_MAX);
        goto pass;
    }
    fetch_set_state(f, FETCH_S_BODY);
    int rc = apply_meta(f, &m);
    cache_meta_clear(&m);
    if (rc == 0 && f->whole_object)
        extend_run(f);
    if (rc == -EFBIG) {
        log_info("fetch#%u %s: object of %llu bytes: too large to cache, forwarded", f->id, f->host,
                 (unsigned long long)m.total);
        upstream_cancel(&f->up);
        fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (rc < 0)
        goto fail;
    mark_remote(f);
    release_head_part(f);
    return;
pass:
    if (resp->status != 206 && resp->status != 416 &&
        (resp->framing != H1_BODY_LENGTH || resp->content_length <= share_bound(f))) {
        /* The answer to every reader waiting on this fill: read it, then fail the chunks with
         * it (sink_done). A 206 or 416 answers our Range, not theirs: they forward their own. */
        start_answer(f, buf, resp, FETCH_S_DRAIN_PASS);
        return;
    }
    if (resp->status != 206 && resp->status != 416) {
        log_info("fetch#%u %s: uncacheable answer of %llu bytes: too large to share, its readers "
                 "forward their requests",
                 f->id, f->host, (unsigned long long)resp->content_length);
        g_stats.answer_fallbacks++;
    }
    if (resp->framing == H1_BODY_NONE ||
        (resp->framing == H1_BODY_LENGTH && resp->content_length <= 64 * 1024)) {
        /* A short error page: read it away so that the connection can be reused. */
        fetch_set_state(f, FETCH_S_DRAIN_PASS);
        return;
    }
    upstream_cancel(&f->up);
    fetch_finish(f, CHUNK_FAIL_PASS);
    return;
fail:
    upstream_cancel(&f->up);
    fetch_finish(f, CHUNK_FAIL_ORIGIN);
}

/*
 * A whole-object answer: the chunks after the run that nobody has (in memory, in flight or on
 * disk) join it, up to CACHE_SPAN_MAX at a time, so that readers find them filling instead of
 * starting fetches of their own. It stops at the object's end or at the first chunk that is
 * someone else's. Not for a run that ends inside a chunk (the part before a reader's offset).
 */
static void extend_run(struct fetch *f)
{
    if (f->key == NULL || !f->meta_known || f->peer >= 0)
        return; /* (a node's answer is for one chunk: see fetch_start) */
    uint64_t cs = cache_chunk_size(f->cache);
    if ((f->last + 1) % cs != 0)
        return;
    if (f->cur > 0) { /* the chunks done are NULL: keep the rest at the front */
        size_t left = f->n - f->cur;
        memmove(f->cks, f->cks + f->cur, left * sizeof(f->cks[0]));
        memset(f->cks + left, 0, f->cur * sizeof(f->cks[0]));
        f->n = left;
        f->cur = 0;
    }
    while (f->n < CACHE_SPAN_MAX) {
        uint64_t start = f->next_index * cs;
        if (start >= f->meta.total)
            break;
        struct chunk *ck = cache_chunk_claim(f->cache, f->key, f->key_len, f->next_index, &f->meta);
        if (ck == NULL)
            break;
        if (cache_chunk_set_meta(ck, &f->meta) < 0) {
            cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
            cache_chunk_unref(&ck);
            break;
        }
        cache_chunk_set_origin_status(ck, f->ans_status);
        cache_chunk_set_filler(ck, f);
        f->cks[f->n++] = ck; /* the claim's ref is the fetch's */
        f->next_index++;
        f->last = start + cs - 1;
    }
}

/* Stores chunk <ck> (FILLING, meta set) whole from the object's bytes <body>; when it cannot
 * (no memory, a part filled by another fetch), fails it: with <ans> for its readers, if given. */
static void store_chunk(struct chunk *ck, const char *body, struct answer *ans)
{
    uint64_t cap = cache_chunk_cap(ck);
    if (cache_chunk_len(ck) == 0 && cache_chunk_fits(ck, 0, (size_t)cap) &&
        (cache_chunk_is_reserved(ck) || cache_chunk_reserve(ck) == 0)) {
        cache_chunk_commit(ck, 0, body + chunk_start(ck), (size_t)cap);
        cache_chunk_seal(ck);
    } else if (ans != NULL) {
        cache_chunk_failed_answer(ck, ans);
    } else {
        cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
    }
}

/*
 * A chunked 200 read whole (BUFFER, f->ans complete): its length is the object's. Sets the meta
 * on the run's chunks, stores each of them from the answer's bytes (commit, seal), and the other
 * chunks of the object that nobody has too (claimed). Returns false, nothing stored, when it
 * cannot be (an empty body, a run that starts past the end, another version meanwhile): the
 * caller shares the answer instead. A chunk that finds no memory now fails with the answer.
 */
static bool store_whole(struct fetch *f)
{
    size_t len;
    const char *body = answer_body(f->ans, &len);
    if (len == 0 || f->meta.head == NULL)
        return false; /* (no fields that fit: shared, not stored) */
    struct cache_meta m;
    cache_meta_copy(&m, &f->meta); /* (apply_meta replaces f->meta) */
    m.total = len;
    if (apply_meta(f, &m) < 0) {
        cache_meta_clear(&m);
        return false;
    }
    struct cache *c = cache_chunk_cache(f->cks[f->cur]);
    size_t key_len;
    const char *key = cache_chunk_key(f->cks[f->cur], &key_len);
    mark_remote(f); /* (a node's answer: kept in memory only, as any of its bytes) */
    for (size_t i = f->cur; i < f->n; i++)
        if (f->cks[i] != NULL && cache_chunk_state(f->cks[i]) == CHUNK_S_FILLING)
            store_chunk(f->cks[i], body, f->ans);
    uint64_t cs = cache_chunk_size(c);
    /* The object's other chunks too, unless a node answered: they are its owners'. */
    for (uint64_t idx = 0; f->peer < 0 && idx < (len + cs - 1) / cs; idx++) {
        struct chunk *ck = cache_chunk_claim(c, key, key_len, idx, &m);
        if (ck == NULL)
            continue; /* the run's, or someone else's */
        if (cache_chunk_set_meta(ck, &m) == 0) {
            cache_chunk_set_origin_status(ck, f->ans_status);
            store_chunk(ck, body, NULL);
        } else
            cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
        cache_chunk_unref(&ck);
    }
    cache_meta_clear(&m);
    log_info("fetch#%u %s: chunked answer of %zu bytes read whole: stored", f->id, f->host, len);
    g_stats.fetch_chunked_stored++;
    return true;
}

static size_t sink_body(void *arg, const char *data, size_t len)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    if (f->state == FETCH_S_DRAIN_PASS || f->state == FETCH_S_DRAIN_REDIRECT ||
        f->state == FETCH_S_BUFFER) {
        if (f->ans != NULL && !answer_append(f->ans, data, len)) {
            /* Past the bound (or no memory for it): never a cut answer that looks complete.
             * Nothing was sent to the readers yet: each forwards its own request. */
            log_info("fetch#%u %s: answer longer than %zu bytes: not %s, its readers forward "
                     "their requests",
                     f->id, f->host, share_bound(f),
                     f->state == FETCH_S_BUFFER ? "stored" : "shared");
            g_stats.answer_fallbacks++;
            answer_unref(&f->ans);
            if (f->state != FETCH_S_DRAIN_REDIRECT) {
                upstream_cancel(&f->up);
                fetch_finish(f, CHUNK_FAIL_PASS);
            }
        }
        return len;
    }
    size_t taken = 0;
    while (taken < len) {
        if (f->skip > 0) {
            size_t k = len - taken < f->skip ? len - taken : (size_t)f->skip;
            f->skip -= k;
            taken += k;
            continue;
        }
        if (f->cur == f->n) {
            if (f->whole_object)
                extend_run(f);
            if (f->cur == f->n)
                break;
        }
        struct chunk *ck = f->cks[f->cur];
        uint64_t cstart = chunk_start(ck);
        uint64_t end = part_end(f);
        size_t n = len - taken;
        if (n > end - f->pos)
            n = (size_t)(end - f->pos);
        if (cache_chunk_state(ck) == CHUNK_S_FILLING) {
            if (!cache_chunk_fits(ck, f->pos - cstart, n)) {
                /* Only when its other part's fetch moved it under us (an object that ends
                 * before this part): never write where we were not asked to. */
                log_info("fetch#%u %s: chunk %llu no longer takes bytes at %llu", f->id, f->host,
                         (unsigned long long)cache_chunk_index(ck), (unsigned long long)f->pos);
                upstream_cancel(&f->up);
                fetch_finish(f, CHUNK_FAIL_ORIGIN);
                return len;
            }
            if (!reserve_current(f))
                return taken; /* paused until memory frees */
            cache_chunk_commit(ck, f->pos - cstart, data + taken, n);
            f->flowing = true;
            if (f->peer >= 0)
                peers_count_asked((unsigned)f->peer, n);
        } else if (f->n - f->cur == 1 && !f->whole_object) {
            /* Failed by its other part's fetch, and nothing follows it in this run: stop. */
            upstream_cancel(&f->up);
            fetch_finish(f, CHUNK_FAIL_NONE);
            return len;
        } /* else failed by its other part's fetch: our part of it is read away */
        f->pos += n;
        f->byte_at = ev_now(fctx->loop);
        taken += n;
        if (f->pos == end) {
            next_chunk(f);
            if (f->whole_object && f->n - f->cur < CACHE_SPAN_MAX / 2)
                extend_run(f); /* keep the chunks ahead claimed */
        }
    }
    if (f->cur == f->n) {
        if (f->whole_object || taken < len) {
            /* The rest of a whole-object answer is another fill's: stop here. */
            upstream_cancel(&f->up);
            fetch_finish(f, CHUNK_FAIL_NONE);
            return len;
        }
    }
    return taken;
}

static void sink_done(void *arg, enum up_err err)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    f->up = NULL;
    if (f->ans != NULL && !answer_complete(f->ans)) {
        if (err == UP_OK)
            answer_end(f->ans);
        else
            answer_unref(&f->ans); /* cut short: never shared */
    }
    if (f->state == FETCH_S_DRAIN_REDIRECT) {
        if (!follow_redirect(f))
            fetch_finish(f, CHUNK_FAIL_PASS); /* its readers get the redirect itself */
        return;
    }
    if (f->state == FETCH_S_DRAIN_PASS || f->state == FETCH_S_BUFFER) {
        if (err == UP_ERR_READ_TIMEOUT) {
            /* A stalled answer: its readers would only stall again. */
            log_info("fetch#%u %s: uncacheable answer stalled: %s", f->id, f->host,
                     upstream_strerror(err));
            g_stats.fetch_failed++;
            fetch_finish(f, CHUNK_FAIL_TIMEOUT);
            return;
        }
        if (f->state == FETCH_S_BUFFER && f->ans != NULL && store_whole(f)) {
            fetch_finish(f, CHUNK_FAIL_NONE);
            return;
        }
        /* With the answer read: its readers are answered from it; cut short: each forwards. */
        fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (err == UP_OK && f->cur == f->n) {
        fetch_finish(f, CHUNK_FAIL_NONE);
        return;
    }
    if (f->peer >= 0 && err != UP_OK &&
        (!f->meta_known || err == UP_ERR_CONNECT || err == UP_ERR_CONNECT_TIMEOUT ||
         err == UP_ERR_FIRST_BYTE_TIMEOUT)) {
        /* The node did not answer (or not in time): the next node, or the origin. Cut
         * mid-body, it is asked again (resumed below); if it is gone, that ends here. */
        peer_fallback(f, upstream_strerror(err), PEER_FAULT);
        return;
    }
    if (err == UP_OK && f->short_ans && f->pos == f->ans_end + 1 && f->cur < f->n) {
        /* A short 206, all of it in: the rest of the run from where it ended, as a resumption
         * (the same version, checked in sink_head) but not a fault (no attempt counted). */
        f->resumed = true;
        g_stats.fetch_short++;
        log_debug("fetch#%u %s: answer ended at byte %llu: asking for the rest", f->id, f->host,
                  (unsigned long long)f->ans_end);
        fetch_connect(f);
        return;
    }
    if (f->meta_known && f->cur < f->n && f->attempts < FETCH_ATTEMPTS &&
        (err == UP_OK || err == UP_ERR_IO || err == UP_ERR_READ_TIMEOUT || err == UP_ERR_PROTO)) {
        /* Cut short mid-body: ask for the rest, from the byte reached, of the same addresses
         * (upstream goes on to the next one if the first refuses now). */
        f->attempts++;
        f->resumed = true;
        g_stats.fetch_resumed++;
        log_info("fetch#%u %s: %s at byte %llu: resuming (attempt %u)", f->id, f->host,
                 err == UP_OK ? "short body" : upstream_strerror(err), (unsigned long long)f->pos,
                 f->attempts);
        fetch_connect(f);
        return;
    }
    if (f->peer >= 0 && f->cur < f->n) {
        /* Cut again and again by the node: the origin (or the next node) for the rest. */
        peer_fallback(f, err == UP_OK ? "short body" : upstream_strerror(err), PEER_FAULT);
        return;
    }
    enum chunk_fail why = CHUNK_FAIL_ORIGIN;
    if (err == UP_ERR_CONNECT_TIMEOUT || err == UP_ERR_FIRST_BYTE_TIMEOUT ||
        err == UP_ERR_READ_TIMEOUT)
        why = CHUNK_FAIL_TIMEOUT;
    log_info("fetch#%u %s chunk %llu: %s", f->id, f->host,
             (unsigned long long)(f->cur < f->n ? cache_chunk_index(f->cks[f->cur]) : 0),
             err == UP_OK ? "short body" : upstream_strerror(err));
    g_stats.fetch_failed++;
    fetch_finish(f, why);
}

static const struct upstream_sink fetch_sink = {sink_head, sink_body, sink_done};

static void fetch_connect(struct fetch *f)
{
    size_t cap = strlen(f->req_pre) + strlen(f->req_post) + 64 + 20 + CLUSTER_PEER_MAX;
    char *head = xmalloc(cap);
    f->req_end = f->last;
    char range[64], cred[CLUSTER_PEER_MAX] = "";
    snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)f->pos,
             (unsigned long long)f->last);
    if (f->peer >= 0) /* (signed for this very request: method, Host, target and Range) */
        cluster_sign(peers_cluster(), (int64_t)ev_now(fctx->loop), "GET", f->authority, f->target,
                     range, cred, sizeof(cred));
    int n =
        snprintf(head, cap, "%sRange: %s\r\n%s%s%s%s", f->req_pre, range,
                 cred[0] ? "X-Cacheparty-Peer: " : "", cred, cred[0] ? "\r\n" : "", f->req_post);
    ASSERT(n > 0 && (size_t)n < cap);
    struct upstream_req ur;
    memset(&ur, 0, sizeof(ur));
    ur.addrs = f->addrs; /* (upstream puts them in today's order: a resumption avoids the dead) */
    ur.n_addrs = f->n_addrs;
    ur.resolver = f->peer >= 0 ? NULL : fctx->resolver; /* (a node's health is peers') */
    ur.src = f->peer >= 0 ? peers_source() : NULL;
    ur.head = head;
    ur.head_len = (size_t)n;
    ur.method = H1_M_GET;
    fetch_set_state(f, FETCH_S_WAIT_HEAD);
    f->sent_at = ev_now(fctx->loop);
    f->up = upstream_start(fctx->loop, fctx->upool, &ur, &fetch_sink, f);
    log_debug("fetch#%u up#%u: bytes %llu-%llu", f->id, upstream_id(f->up),
              (unsigned long long)f->pos, (unsigned long long)f->last);
    free(head); /* upstream_start copied it */
}

static void on_routed(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    f->rq = NULL;
    if (err != -EACCES) {
        answer_unref(&f->ans); /* a redirect followed: not the answer any more */
        f->followed = f->followed || f->hops > 0;
    }
    if (err == 0) {
        ASSERT(n >= 1 && n <= RESOLVER_MAX_ADDRS);
        memcpy(f->addrs, addrs, n * sizeof(addrs[0]));
        f->n_addrs = n;
        fetch_connect(f);
        return;
    }
    if (err == -EACCES) {
        log_info("fetch#%u: %s resolves to a private address: refused", f->id, f->host);
        g_stats.forbidden++;
        /* A redirect's target failing the checks is not followed: the clients get the redirect
         * itself, uncached (docs/interfaces.md, "Requests to origins"), from the one answer. */
        fetch_finish(f, f->hops > 0 ? CHUNK_FAIL_PASS : CHUNK_FAIL_FORBIDDEN);
        return;
    }
    if (err != -EINVAL)
        log_info("fetch#%u: cannot resolve %s: %s", f->id, f->host, strerror(-err));
    fetch_finish(f, CHUNK_FAIL_ORIGIN);
}

/*
 * The request head around its Range field: request line and Host before, the rest after
 * (User-Agent, the client's other fields a fill forwards, Accept-Encoding: identity so that the
 * stored body is one every client can read, and the X-LanCache-Processed-By chain with us). To a
 * cluster node (f->peer), the chain as the client sent it: the hop between nodes is not one of
 * the chain's (a node's name in it is a loop, whichever node sees it).
 */
static void build_head(struct fetch *f, const struct origin_req *o)
{
    size_t cap = o->path_len + 2;
    char *target = xmalloc(cap);
    snprintf(target, cap, "%s%.*s", o->path_len > 0 && o->path[0] == '/' ? "" : "/",
             (int)o->path_len, o->path);
    cap = strlen(target) + strlen(o->authority) + 64;
    char *pre = xmalloc(cap);
    snprintf(pre, cap, "GET %s HTTP/1.1\r\nHost: %s\r\n", target, o->authority);
    cap = o->ua_len + o->fields_len + o->processed_by_len + CONFIG_HOST_MAX + 96;
    char *post = xmalloc(cap);
    bool peer = f->peer >= 0, chain = o->processed_by_len > 0;
    snprintf(post, cap, "%s%.*s%s%.*sAccept-Encoding: identity\r\n%s%.*s%s%s%s\r\n",
             o->user_agent ? "User-Agent: " : "", (int)o->ua_len,
             o->user_agent ? o->user_agent : "", o->user_agent ? "\r\n" : "", (int)o->fields_len,
             o->fields ? o->fields : "",
             peer && !chain ? "" : "X-LanCache-Processed-By: ", (int)o->processed_by_len,
             o->processed_by ? o->processed_by : "", chain && !peer ? ", " : "",
             peer ? "" : g_cfg->hostname, peer && !chain ? "" : "\r\n");
    free(f->target);
    free(f->req_pre);
    free(f->req_post);
    f->target = target;
    f->req_pre = pre;
    f->req_post = post;
}

/* The head again from the fetch's own copies (its route changed: a node or the origin). */
static void rebuild_head(struct fetch *f)
{
    struct origin_req o;
    memset(&o, 0, sizeof(o));
    o.authority = f->authority;
    o.path = f->target;
    o.path_len = strlen(f->target);
    o.user_agent = f->ua;
    o.ua_len = f->ua ? strlen(f->ua) : 0;
    o.processed_by = f->processed_by;
    o.processed_by_len = f->processed_by ? strlen(f->processed_by) : 0;
    o.fields = f->fields;
    o.fields_len = f->fields ? strlen(f->fields) : 0;
    build_head(f, &o);
}

/*
 * The cluster node to ask for chunk <ck> (peers.h): its owner among the nodes up, unless that is
 * this node or the fill is a peer's request (never asked of a node again): -1, the origin.
 */
static int route_of(const struct chunk *ck, bool from_peer)
{
    const struct cluster *cl = peers_cluster();
    if (cl == NULL || from_peer)
        return -1;
    size_t key_len;
    const char *key = cache_chunk_key(ck, &key_len);
    uint32_t owner = cluster_owner(cl, key, key_len, cache_chunk_index(ck), peers_live());
    return owner == CLUSTER_NONE || owner == cl->self ? -1 : (int)owner;
}

/* The run's chunks from cur on (FILLING) are filled from f->peer's node, or from the origin:
 * remote (memory only here) unless this node owns them. */
static void mark_remote(struct fetch *f)
{
    for (size_t i = f->cur; i < f->n; i++)
        if (f->cks[i] != NULL && cache_chunk_state(f->cks[i]) == CHUNK_S_FILLING)
            cache_chunk_set_remote(
                f->cks[i], f->peer >= 0 || (f->not_ours && route_of(f->cks[i], f->from_peer) >= 0),
                f->peer_hit);
}

/* A new fetch, linked into the live list and counted; the caller fills in the rest. */
static struct fetch *fetch_alloc(void)
{
    struct fetch *f = xcalloc(1, sizeof(*f));
    f->magic = FETCH_MAGIC;
    f->id = ++fetch_next_id;
    f->started_at = f->byte_at = ev_now(fctx->loop);
    f->peer = -1;
    ev_init(&f->memt, on_mem_timeout);
    f->next = fetches;
    if (fetches)
        fetches->pprev = &f->next;
    f->pprev = &fetches;
    fetches = f;
    n_fetches++;
    g_stats.fetches++;
    return f;
}

/* A fetch of <cks>[0..n) from object byte <pos> to <last>, not started, asking node <peer>
 * (route_of), -1: the origin. */
static struct fetch *fetch_new(struct chunk **cks, size_t n, uint64_t pos, uint64_t last,
                               const struct origin_req *o, int peer)
{
    ASSERT(n >= 1 && n <= CACHE_SPAN_MAX);
    struct fetch *f = fetch_alloc();
    for (size_t i = 0; i < n; i++)
        f->cks[i] = cache_chunk_ref(cks[i]);
    f->n = n;
    f->pos = f->first = pos;
    f->last = last;
    f->next_index = cache_chunk_index(cks[n - 1]) + 1;
    f->host_is_ip = o->host_is_ip;
    f->host = xstrdup(o->host);
    f->port = o->port;
    f->peer = peer;
    f->from_peer = o->from_peer;
    if (peer >= 0)
        g_stats.fetch_peer++;
    build_head(f, o);
    f->authority = xstrdup(o->authority);
    f->has_query = memchr(o->path, '?', o->path_len) != NULL;
    f->hide_etag = o->hide_etag;
    if (o->user_agent != NULL)
        f->ua = xstrndup(o->user_agent, o->ua_len);
    if (o->processed_by != NULL)
        f->processed_by = xstrndup(o->processed_by, o->processed_by_len);
    if (o->fields != NULL)
        f->fields = xstrndup(o->fields, o->fields_len);
    return f;
}

void fetch_start(struct chunk **cks, size_t n, const struct origin_req *o)
{
    uint64_t cs = chunk_size(cks[0]);
    /* In a cluster, one request per stretch of the run asked of the origin, and one per chunk
     * asked of a node: the node's X-Upstream-Cache-Status tells of its answer's first byte
     * only, so of one chunk (a HIT for the next chunk of a stretch could be a miss there). */
    for (size_t i = 0; i < n;) {
        int peer = route_of(cks[i], o->from_peer);
        size_t j = i + 1;
        while (j < n && peer < 0 && route_of(cks[j], o->from_peer) == peer)
            j++;
        struct fetch *f = fetch_new(cks + i, j - i, chunk_start(cks[i]),
                                    chunk_start(cks[j - 1]) + cs - 1, o, peer);
        for (size_t k = i; k < j; k++)
            cache_chunk_set_filler(cks[k], f);
        fetch_route(f, o->host_is_ip);
        i = j;
    }
}

/*
 * Read-ahead: one fetch for the missing chunks <first>..<last> of object <key> (at most
 * CACHE_SPAN_MAX, stopping before the first chunk in memory, in flight or on disk): one upstream
 * range request whose bytes fill the chunks in order, each joinable while it fills. Returns how
 * many chunks the fetch covers (0 if <first> is present).
 */
static int fetch_span(struct cache *c, const char *key, size_t key_len, uint64_t first,
                      uint64_t last, const struct origin_req *o)
{
    struct chunk *cks[CACHE_SPAN_MAX];
    size_t n = cache_chunk_span(c, key, key_len, first, last, cks);
    if (n == 0)
        return 0;
    fetch_start(cks, n, o);
    for (size_t i = 0; i < n; i++)
        cache_chunk_unref(&cks[i]); /* the table and the fetch hold them */
    return (int)n;
}

/* A new fetch of the same object from the same origin as <src> (no chunks yet). */
static struct fetch *fetch_sibling(const struct fetch *src)
{
    struct fetch *f = fetch_alloc();
    f->host = xstrdup(src->host);
    f->authority = xstrdup(src->authority);
    f->has_query = src->has_query;
    f->followed = src->followed; /* (its request may be a redirect target's) */
    f->hide_etag = src->hide_etag;
    f->port = src->port;
    f->target = xstrdup(src->target);
    f->req_pre = xstrdup(src->req_pre);
    f->req_post = xstrdup(src->req_post);
    f->peer = src->peer;
    f->from_peer = src->from_peer;
    /* (its own answer tells whether the node had its bytes) */
    f->not_ours = src->not_ours;
    f->ua = src->ua ? xstrdup(src->ua) : NULL;
    f->processed_by = src->processed_by ? xstrdup(src->processed_by) : NULL;
    f->fields = src->fields ? xstrdup(src->fields) : NULL;
    return f;
}

/* Starts <f> towards <src>'s origin: its addresses when it has them, else routed as it was. */
static void fetch_go_like(struct fetch *f, const struct fetch *src)
{
    if (f->peer >= 0 && (peers_live() & (1u << f->peer)) == 0) {
        /* The node <src> asks is down now: this part goes to its chunk's owner now. */
        f->peer = route_of(f->cks[0], f->from_peer);
        mark_remote(f);
        rebuild_head(f);
        fetch_route(f, src->host_is_ip);
        return;
    }
    if (src->n_addrs > 0) {
        memcpy(f->addrs, src->addrs, src->n_addrs * sizeof(src->addrs[0]));
        f->n_addrs = src->n_addrs;
        f->host_is_ip = src->host_is_ip;
        fetch_connect(f);
    } else {
        fetch_route(f, src->host_is_ip);
    }
}

/* Whether a reader starting at <off> inside <ck> gets a two-part fill (see fetch.h). */
static bool two_part(const struct chunk *ck, uint64_t off)
{
    return off >= FETCH_TWO_PART_MIN && off < chunk_size(ck);
}

/* Makes <ck> a two-part chunk: <g> fills [off, ...) and asks for the head part [0, off) later,
 * in release_head_part(). <route>: g is not routed yet, do it here. Nothing when g (already
 * routed) failed at once. */
static void start_head_part(struct chunk *ck, uint64_t off, struct fetch *g, bool route)
{
    if (cache_chunk_state(ck) != CHUNK_S_FILLING)
        return;
    cache_chunk_split_at(ck, off);
    g->head_ck = cache_chunk_ref(ck);
    g->head_off = off;
    g_stats.fetch_two_part++;
    /* Readers may already wait on <ck> (a disk lookup, a run that could not be cut then): they
     * waited before there was a head part to ask, so let them look again (fetch_want). */
    cache_chunk_poke(ck);
    if (route)
        fetch_route(g, g->host_is_ip); /* (its failure, from the loop, lets go of head_ck) */
}

/*
 * The head part of <g>'s two-part chunk, if not asked yet: asked now, of the origin g asks (the
 * one a redirect led g to), once g is answered (sink_head), when g ends (fetch_finish) or for a
 * reader waiting for it (fetch_want). Not when the chunk failed meanwhile: then nothing is left
 * to fill.
 */
/* Asks bytes [<from>, g->head_off) of <ck>, g's head part (a ref the new fetch takes over), as
 * g's origin. */
static void ask_head_bytes(struct fetch *g, struct chunk *ck, uint64_t from)
{
    uint64_t start = chunk_start(ck);
    struct fetch *h = fetch_sibling(g);
    h->cks[0] = ck;
    h->n = 1;
    h->pos = h->first = start + from;
    h->last = start + g->head_off - 1;
    h->next_index = cache_chunk_index(ck) + 1;
    /* A redirect g has read but not followed yet: h asks g's URL and meets it too. */
    h->hops = g->hops - (g->location != NULL ? 1 : 0);
    fetch_go_like(h, g);
}

static void release_head_part(struct fetch *g)
{
    struct chunk *ck = g->head_ck;
    if (ck == NULL)
        return;
    g->head_ck = NULL;
    if (cache_chunk_state(ck) != CHUNK_S_FILLING) {
        cache_chunk_unref(&ck);
        return;
    }
    ask_head_bytes(g, ck, 0); /* g's ref is the new fetch's now */
}

/*
 * A reader waits for byte <off> of <g>'s two-part chunk, deep inside the head part g holds back:
 * the head part is cut there, [off, head_off) asked now for it (a request of its own, as a first
 * reader's part; otherwise it would wait for every byte before its own to stream by), and
 * [0, off) still held back as the head part (released as before).
 */
static void ask_head_piece(struct fetch *g, uint64_t off)
{
    struct chunk *ck = g->head_ck;
    cache_chunk_split_at(ck, off);
    g_stats.fetch_two_part++;
    ask_head_bytes(g, cache_chunk_ref(ck), off); /* [off, head_off) */
    g->head_off = off;                           /* [0, off) still held back */
}

void fetch_start_at(struct chunk *ck, uint64_t off, const struct origin_req *o)
{
    if (!two_part(ck, off) || origin_ignores_ranges(o->authority)) {
        fetch_start(&ck, 1, o);
        return;
    }
    uint64_t start = chunk_start(ck);
    struct fetch *g =
        fetch_new(&ck, 1, start + off, start + chunk_size(ck) - 1, o, route_of(ck, o->from_peer));
    cache_chunk_set_filler(ck, g);
    start_head_part(ck, off, g, true);
}

/* To the override address, the IP literal, or through the resolver for f->host (resolver_route:
 * the answer always comes from the loop, never before this returns). */
static void fetch_route(struct fetch *f, bool host_is_ip)
{
    ASSERT(f->rq == NULL);
    f->host_is_ip = host_is_ip;
    if (f->peer >= 0) { /* a cluster node: its own address, none of the origin's checks */
        f->addrs[0] = peers_cluster()->nodes[f->peer].sa;
        f->n_addrs = 1;
        fetch_connect(f);
        return;
    }
    f->n_addrs = 0; /* until routed (a redirect re-routes: fetch_split must not copy them) */
    fetch_set_state(f, FETCH_S_RESOLVE);
    f->rq = resolver_route(fctx->resolver, f->host, host_is_ip, f->port,
                           fctx->has_override ? &fctx->override_addr : NULL, g_cfg->allow_private,
                           on_routed, f);
}

/*
 * The fetch that is to bring byte <off> of <ck> as the next bytes of its current chunk, and is
 * not answered yet (routing, or waiting for the answer's head), or NULL.
 */
static struct fetch *unanswered_fill_of(struct chunk *ck, uint64_t off)
{
    uint64_t at = chunk_start(ck) + off;
    for (struct fetch *f = fetches; f != NULL; f = f->next)
        if (f->cur < f->n && f->cks[f->cur] == ck && f->pos <= at && at <= f->last &&
            (f->state == FETCH_S_RESOLVE || f->state == FETCH_S_WAIT_HEAD))
            return f;
    return NULL;
}

/* Gives <g> the rest of <f>'s run: f's chunks from index <from> on become g's from g->cks[<at>]
 * (those before are the caller's), g asks from object byte <g_pos> to f's end, and f now ends
 * at <f_last> with <f_next> as the index after its run. */
static void give_rest_of_run(struct fetch *f, struct fetch *g, size_t from, size_t at,
                             uint64_t g_pos, uint64_t f_last, uint64_t f_next)
{
    for (size_t i = from; i < f->n; i++) {
        g->cks[i - from + at] = f->cks[i];
        cache_chunk_set_filler(f->cks[i], g);
        f->cks[i] = NULL;
    }
    g->n = f->n - from + at;
    f->n = from;
    g->pos = g->first = g_pos;
    g->last = f->last;
    g->next_index = f->next_index;
    f->last = f_last;
    f->next_index = f_next;
    g_stats.fetch_split++;
}

/*
 * A reader waits for byte <off> of <ck>, deep inside what <f> is to bring of it (FETCH_TWO_PART_MIN
 * or more past f's next byte), before f is answered: it would wait for the rest of f's first-byte
 * delay and then for every byte before its own, where a request of its own costs one delay. So f
 * is cut there: f keeps [its next byte, off), and a new fetch asks [off, f's end] now, with the
 * rest of f's run; <ck> gets a part from <off> (cache_chunk_split_at). Every byte is still asked
 * once: f's request, when it is out already, asked for more than f keeps, so it is asked again
 * for f's part alone (on a connection of its own: the first is closed unanswered), and that only
 * when no other reader waits for a byte of that part (it would wait one more origin round trip),
 * and when the origin has a connection slot free for the new request besides f's (else both
 * would queue behind others). No cut while the cluster node f asks is down (f's own fallback
 * moves it). Returns whether it cut.
 */
static bool cut_unanswered(struct fetch *f, struct chunk *ck, uint64_t off)
{
    uint64_t start = chunk_start(ck);
    if (start + off < f->pos + FETCH_TWO_PART_MIN || f->whole_object ||
        origin_ignores_ranges(f->authority) ||
        (f->peer >= 0 && (peers_live() & (1u << f->peer)) == 0))
        return false;
    bool asked = f->state == FETCH_S_WAIT_HEAD;
    if (asked && (f->up == NULL || !upstream_origin_has_room(f->up) ||
                  cache_chunk_waited_in(ck, f->pos - start, off)))
        return false;
    size_t k = f->cur;
    struct fetch *g = fetch_sibling(f);
    g->hops = f->hops;
    g->cks[0] = cache_chunk_ref(ck); /* f keeps its own ref: it fills the part before */
    /* The chunk's filler is the fetch that holds its head part back, if any (fetch_want finds
     * the head part through it): f keeps it then. */
    if (cache_chunk_filler(ck) == f && f->head_ck != ck)
        cache_chunk_set_filler(ck, g);
    give_rest_of_run(f, g, k + 1, 1, start + off, start + off - 1, cache_chunk_index(ck) + 1);
    cache_chunk_split_at(ck, off);
    if (asked) { /* (nothing of its answer was taken: asked again, the same way) */
        upstream_cancel(&f->up);
        fetch_connect(f);
    }
    /* (g outlives the call, as in fetch_split) */
    fetch_go_like(g, f);
    return true;
}

static bool fetch_split(struct chunk *ck, uint64_t off)
{
    struct fetch *f = cache_chunk_filler(ck);
    if (f == NULL)
        return false;
    CHECK_OBJ(f, FETCH_MAGIC);
    if (f->state == FETCH_S_DRAIN_PASS || f->state == FETCH_S_DRAIN_REDIRECT ||
        f->state == FETCH_S_BUFFER || f->whole_object || origin_ignores_ranges(f->authority))
        return false;
    size_t k = f->cur;
    while (k < f->n && f->cks[k] != ck)
        k++;
    if (k >= f->n)
        return false; /* not in this run */
    if (f->state == FETCH_S_MEMORY)
        return false; /* waiting for memory: a new request could only wait for it too */
    /* Before the run's bytes flow, a chunk behind the first waits the rest of the first-byte
     * delay plus the transfer of every chunk before it: a request of its own costs one delay at
     * most. Once they flow, the fill reaches the next chunk or two within a chunk's transfer. */
    size_t gap = f->flowing ? FETCH_SPLIT_GAP : 1;
    if (k < f->cur + gap)
        return false; /* the fill reaches it soon enough (see cut_unanswered for its first) */
    bool tp = two_part(ck, off) && !(cache_chunk_meta(ck) != NULL &&
                                     off >= cache_chunk_cap(ck)); /* (not past the end) */
    struct fetch *g = fetch_sibling(f);
    /* (the old request's answer is cut at f's new end: see sink_body) */
    give_rest_of_run(f, g, k, 0, chunk_start(ck) + (tp ? off : 0), chunk_start(ck) - 1,
                     cache_chunk_index(ck));
    /* g is still alive after this: neither routing (resolver_route) nor upstream_start ever
     * answers before it returns, so nothing can finish g inside the call. */
    fetch_go_like(g, f);
    if (tp)
        start_head_part(ck, off, g, false);
    return true;
}

void fetch_sequential(struct chunk *ck, uint64_t end, const struct origin_req *o, bool force)
{
    if (cache_chunk_state(ck) != CHUNK_S_FILLING)
        return; /* (a hit, or a fill that has already failed) */
    struct cache *c = cache_chunk_cache(ck);
    uint64_t cs = cache_chunk_size(c), idx = cache_chunk_index(ck);
    uint64_t last = end / cs;
    unsigned segs = g_cfg->readahead;
    if (force || last <= idx || segs <= 1 || origin_ignores_ranges(o->authority))
        return; /* (an origin without ranges: the fetch running brings the whole object) */
    /* Only while few fetches run. Many running means many clients on cold data: the origins and
     * the uplink are busy with what they asked for, and fetching ahead as well would only push
     * their first bytes back (measured in bench/README), while one or a few clients still get
     * their downloads multiplied. It also bounds the optional fetches, which outlive their
     * clients: clients that ask and hang up cannot pile them up. */
    if (fetch_live() >= FETCH_READAHEAD_MAX_FETCHES)
        return;
    /* Read-ahead is part of the object's fill: its requests carry the fields of the request
     * that started it (the filler's copies), whichever reader reads on. */
    struct origin_req ra = *o;
    const struct fetch *filler = cache_chunk_filler(ck);
    if (filler != NULL) {
        CHECK_OBJ(filler, FETCH_MAGIC);
        ra.user_agent = filler->ua;
        ra.ua_len = filler->ua ? strlen(filler->ua) : 0;
        ra.processed_by = filler->processed_by;
        ra.processed_by_len = filler->processed_by ? strlen(filler->processed_by) : 0;
        ra.fields = filler->fields;
        ra.fields_len = filler->fields ? strlen(filler->fields) : 0;
    }
    size_t key_len;
    const char *key = cache_chunk_key(ck, &key_len);
    uint64_t window = (uint64_t)segs * CACHE_SPAN_MAX;
    uint64_t wend = last < idx + window ? last : idx + window;
    uint64_t per = (wend - idx + segs - 1) / segs;
    if (per > CACHE_SPAN_MAX)
        per = CACHE_SPAN_MAX;
    if (per == 0)
        per = 1;
    uint64_t i = idx + 1;
    for (unsigned started = 0; i <= wend && started < segs;) {
        /* (checked per span: in a cluster a span is one fetch per chunk a node owns) */
        if (fetch_live() >= FETCH_READAHEAD_MAX_FETCHES)
            break;
        if (cache_chunk_exists(c, key, key_len, i)) {
            i++;
            continue;
        }
        uint64_t j = i + per - 1 < wend ? i + per - 1 : wend;
        /* In a cluster a span is up to one fetch per chunk: no more than the cap leaves. */
        uint64_t room = FETCH_READAHEAD_MAX_FETCHES - fetch_live();
        if (peers_cluster() != NULL && j - i + 1 > room)
            j = i + room - 1;
        int n = fetch_span(c, key, key_len, i, j, &ra);
        i += n > 0 ? (uint64_t)n : 1;
        started++;
    }
}

void fetch_ahead(struct cache *cache, const char *key, size_t key_len, const uint64_t *idx,
                 size_t n, const struct origin_req *o, bool force)
{
    if (force || origin_ignores_ranges(o->authority))
        return;
    size_t window = g_cfg->readahead;
    for (size_t i = 0; i < n && i < window; i++) {
        if (fetch_live() >= FETCH_READAHEAD_MAX_FETCHES)
            return;
        if (!cache_chunk_exists(cache, key, key_len, idx[i]))
            (void)fetch_span(cache, key, key_len, idx[i], idx[i], o);
    }
}

bool fetch_want(struct chunk *ck, uint64_t off)
{
    if (cache_chunk_state(ck) != CHUNK_S_FILLING)
        return false;
    struct fetch *f = cache_chunk_filler(ck);
    if (f != NULL) {
        CHECK_OBJ(f, FETCH_MAGIC);
        if (f->head_ck == ck && off < f->head_off) {
            if ((f->state == FETCH_S_DRAIN_PASS && !f->past_end) || f->state == FETCH_S_BUFFER)
                return false; /* its answer fails (or fills) the chunk once read: nothing to ask */
            if (two_part(ck, off) && cache_chunk_can_split_at(ck, off) &&
                !origin_ignores_ranges(f->authority))
                ask_head_piece(f, off);
            else
                release_head_part(f);
            return true;
        }
    }
    /* (cheap checks first: a reader streaming behind a fill waits where a part has reached, or
     * ahead of the filler's answer, which is flowing) */
    uint64_t at = chunk_start(ck) + off;
    bool flowing = f != NULL && f->cur < f->n && f->cks[f->cur] == ck &&
                   (f->state == FETCH_S_BODY || f->state == FETCH_S_MEMORY) && f->pos <= at &&
                   at <= f->last;
    if (!flowing && off >= FETCH_TWO_PART_MIN && cache_chunk_avail(ck, off) == 0 &&
        cache_chunk_can_split_at(ck, off)) {
        struct fetch *p = unanswered_fill_of(ck, off);
        if (p != NULL && cut_unanswered(p, ck, off))
            return true;
    }
    if (f != NULL && cache_chunk_len(ck) == 0 && !cache_chunk_is_split(ck))
        return fetch_split(ck, off);
    return false;
}

void fetch_cancel_all(void)
{
    if (fctx != NULL && ev_is_active(&nodes_down_ev))
        ev_timer_stop(fctx->loop, &nodes_down_ev);
    while (fetches != NULL)
        fetch_finish(fetches, CHUNK_FAIL_ORIGIN);
}

void fetch_foreach(fetch_visit_fn *fn, void *arg)
{
    for (struct fetch *f = fetches; f != NULL; f = f->next) {
        CHECK_OBJ(f, FETCH_MAGIC);
        struct fetch_info fi;
        memset(&fi, 0, sizeof(fi));
        fi.id = f->id;
        fi.state = fetch_state_names[f->state];
        fi.host = f->host;
        /* The chunks before <cur> are done and their refs dropped (NULL): the object and its
         * length from the first one still held, or from the fetch's own key. */
        const struct chunk *ck = NULL;
        for (size_t i = f->cur; i < f->n && ck == NULL; i++)
            ck = f->cks[i];
        if (ck != NULL) {
            fi.key = cache_chunk_key(ck, &fi.key_len);
        } else if (f->key != NULL) {
            fi.key = f->key;
            fi.key_len = f->key_len;
        }
        fi.first = f->first;
        fi.pos = f->pos;
        fi.last = f->last;
        const struct cache_meta *m = ck != NULL ? cache_chunk_meta(ck) : NULL;
        fi.total = m != NULL ? m->total : f->meta_known ? f->meta.total : 0;
        for (size_t i = f->cur; i < f->n; i++)
            if (f->cks[i] != NULL)
                fi.readers += cache_chunk_readers(f->cks[i]);
        fi.started_at = f->started_at;
        fi.byte_at = f->byte_at;
        fn(&fi, arg);
    }
}
