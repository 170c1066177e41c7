/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fetch: fills a run of consecutive chunks of one object from the origin. See fetch.h.
 *
 * | phase    | waits for                                  | holds                            |
 * |----------|--------------------------------------------|----------------------------------|
 * | RESOLVE  | the resolver (skipped with an override)    | chunk refs, resolver query       |
 * | UPSTREAM | the response head, then body bytes         | chunk refs, upstream             |
 * | MEMORY   | room for the current chunk (reads paused)  | chunk refs, upstream, mem waiter |
 * | done     | -: every chunk sealed or failed, freed     | -                                |
 * One upstream request "Range: bytes=a-b" covers the run; its body fills chunk after chunk, each
 * sealed (stored) as soon as it is complete, so readers of later chunks join them while they
 * fill. A connection lost, cut short or stalled mid-body is resumed from the byte reached, up to
 * FETCH_ATTEMPTS times, only if the origin answers with the same length and validators; readers
 * see only a pause. fetch_finish() is the one exit.
 *
 * A fetch fills object bytes [pos, last]: usually whole chunks, but a chunk whose first reader
 * starts deep inside it (fetch_start_at, fetch_split) is shared by two fetches, the run's from the
 * reader's offset on (ck->fetch) and one of its own for the bytes before it (holding only a ref).
 * The run's fetch holds that head part (head_ck) until its own answer comes, so that the origin
 * sees the request the reader waits for first; it is asked then, or sooner for a reader who
 * wants its bytes (release_head_part, fetch_hurry).
 * Each commits at the end of its part (cache_chunk_commit), the parts join when they meet, and
 * whichever completes the chunk seals it. A part that fails fails the chunk; the other part's
 * fetch then reads its bytes away. The two answers must be the same version (cache_chunk_set_meta
 * refuses another), so a chunk never holds bytes of two versions.
 */
#include "fetch.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "admit.h"
#include "cache.h"
#include "config.h"
#include "domains.h"
#include "log.h"
#include "range.h"
#include "resolver.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

#define FETCH_MAGIC 0xfe7c4001u
#define FETCH_ATTEMPTS 3 /* resumptions after a failure mid-body */

extern const struct config *g_cfg;

struct fetch {
    unsigned magic;
    struct fetch *next, **pprev;       /* all live fetches */
    struct chunk *cks[CACHE_SPAN_MAX]; /* refs, consecutive indices */
    size_t n;                          /* chunks in the run (trimmed to the object's end) */
    size_t cur;                        /* the chunk being filled */
    char *host;                        /* owns */
    char *authority;                   /* owns: the Host header value */
    uint16_t port;
    char *req_pre;  /* owns: request line and Host */
    char *req_post; /* owns: the fields after Range, and the blank line */
    struct sockaddr_storage addr;
    bool have_addr;
    bool flowing;              /* body bytes of the object have arrived (the run is streaming) */
    struct resolver_query *rq; /* owns while resolving */
    struct upstream *up;       /* owns while fetching */
    uint64_t skip;             /* body bytes to drop first (200 answer to a range) */
    bool whole_object;         /* the origin ignored our Range */
    bool discard;              /* uncacheable answer: drain its short body, keep the socket */
    bool resumed;              /* this attempt continues an earlier one */
    unsigned attempts;
    unsigned hops;          /* redirects followed */
    char *location;         /* owns: a redirect to follow once its body is drained */
    char *ua;               /* owns: the first reader's User-Agent (redirect checks) */
    char *processed_by;     /* owns: the X-LanCache-Processed-By chain received */
    struct cache_meta meta; /* as first answered (resumptions must match) */
    bool meta_known;
    struct chunk_waiter memw; /* waiting for memory */
    ev_timer memt;            /* bounds that wait: read_timeout */
    uint64_t req_end;         /* last byte the current upstream request asked for */
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
};

static struct fetch_ctx *fctx;
static struct fetch *fetches;
static unsigned n_fetches;

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

static void norange_note(const char *authority, bool none)
{
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
        log_info("fetch %s: the origin ignores Range: whole answers from now on", authority);
    }
    norange[i].until = ev_now(fctx->loop) + NORANGE_TTL;
}

bool fetch_origin_ignores_ranges(const char *authority)
{
    int i = norange_find(authority);
    return i >= 0 && norange[i].until > ev_now(fctx->loop);
}

void fetch_module_init(struct fetch_ctx *ctx)
{
    fctx = ctx;
}

unsigned fetch_live(void)
{
    return n_fetches;
}

static uint64_t chunk_start(const struct chunk *ck)
{
    return ck->index * g_cfg->chunk_size;
}

/* Where this fetch's part of the current chunk ends (exclusive, object offset); the object's
 * length is known (from this fetch's own answer) whenever body bytes arrive. */
static uint64_t part_end(const struct fetch *f)
{
    uint64_t end = chunk_start(f->cks[f->cur]) + g_cfg->chunk_size;
    if (end > f->meta.total)
        end = f->meta.total;
    return end < f->last + 1 ? end : f->last + 1;
}

/* This fetch's part of its current chunk is done: seal the chunk if it is complete (the other
 * part's fetch may still be filling it), let go of it, go on to the next. */
static void next_chunk(struct fetch *f)
{
    struct chunk *ck = f->cks[f->cur];
    if (ck->state == CHUNK_S_FILLING && ck->len == ck->cap)
        cache_chunk_seal(ck); /* stored now, so that readers and later fetches need not wait */
    if (ck->fetch == f)
        ck->fetch = NULL;
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
    free(f->req_pre);
    free(f->req_post);
    free(f->location);
    free(f->ua);
    free(f->processed_by);
    free(f->key);
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
    if (ck->meta_known)
        return f->pos >= start + ck->cap;
    return f->past_end;
}

static void release_head_part(struct fetch *g);

/* The end: chunks from cur on are sealed (why == NONE, only when complete) or failed. */
static void fetch_finish(struct fetch *f, enum chunk_fail why)
{
    for (size_t i = 0; i < f->n; i++) {
        struct chunk *ck = f->cks[i];
        if (ck == NULL)
            continue;
        if (ck->state == CHUNK_S_FILLING && !(i == f->cur && part_is_past_end(f))) {
            if (why == CHUNK_FAIL_NONE && ck->meta_known && ck->len == ck->cap)
                cache_chunk_seal(ck);
            else /* this fetch's part is missing (the other part's fetch sees it fail) */
                cache_chunk_failed(ck, why == CHUNK_FAIL_NONE ? CHUNK_FAIL_502 : why);
        }
        if (ck->fetch == f)
            ck->fetch = NULL;
        cache_chunk_unref(&f->cks[i]);
    }
    release_head_part(f); /* asked now, or finished when our end failed the chunk */
    fetch_free(f);
}

static void header_value(const char *buf, const struct h1_resp *resp, const char *name, char *out,
                         size_t cap)
{
    const struct h1_field *fl = h1_find(buf, resp->fields, resp->n_fields, name);
    out[0] = '\0';
    if (fl != NULL && fl->value.len < cap) {
        memcpy(out, buf + fl->value.off, fl->value.len);
        out[fl->value.len] = '\0';
    }
}

static void fetch_connect(struct fetch *f);
static void fetch_route(struct fetch *f, bool host_is_ip);
static bool two_part(uint64_t off);
static void extend_run(struct fetch *f);
static void start_head_part(struct chunk *ck, uint64_t off, struct fetch *g, bool route);
static void build_head(struct fetch *f, const struct fetch_origin *o);
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
    const struct domains *d = fctx->domains != NULL ? *fctx->domains : NULL;
    struct admit_result adm;
    admit_host(g_cfg, d, &auth, f->ua, f->ua ? strlen(f->ua) : 0, ADMIT_REDIRECT, &adm);
    if (!adm.allow)
        return false;
    size_t plen = strcspn(path, "#");
    struct fetch_origin o;
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
    log_info("fetch %s: redirected to http://%s%.*s (hop %u)", f->host, auth.ident, (int)plen, path,
             f->hops);
    free(f->req_pre);
    free(f->req_post);
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
    if (ck->data != NULL || ck->state != CHUNK_S_FILLING)
        return true; /* (failed by its other part's fetch meanwhile: sink_body reads it away) */
    if (cache_chunk_reserve(ck) == 0) {
        ev_timer_stop(fctx->loop, &f->memt);
        return true;
    }
    cache_mem_wait(ck->cache, &f->memw, on_mem);
    if (!ev_is_active(&f->memt)) {
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
    log_warn("fetch %s: no cache memory for %llu ms: giving this fill up", f->host,
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
    f->meta = *m;
    f->meta_known = true;
    size_t keep = f->n;
    for (size_t i = 0; i < f->n; i++) {
        if (f->cks[i]->state != CHUNK_S_FILLING)
            continue; /* failed by its other part's fetch: sink_body reads our part away */
        int rc = cache_chunk_set_meta(f->cks[i], m);
        if (rc < 0) {
            if (i == 0 || rc == -ESTALE)
                return rc;
            if (keep == f->n)
                keep = i;
            cache_chunk_failed(f->cks[i], CHUNK_FAIL_502);
            if (f->cks[i]->fetch == f)
                f->cks[i]->fetch = NULL;
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
    if (ck->state == CHUNK_S_FILLING && !ck->meta_known)
        ck->tail_off = ck->tail_end = 0; /* the other part fills it to its end */
}

static void sink_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    struct cache_meta m;
    memset(&m, 0, sizeof(m));
    header_value(buf, resp, "ETag", m.etag, sizeof(m.etag));
    header_value(buf, resp, "Last-Modified", m.last_modified, sizeof(m.last_modified));
    header_value(buf, resp, "Content-Type", m.content_type, sizeof(m.content_type));
    uint64_t pos = f->pos;
    f->skip = 0;
    f->whole_object = false;

    if (resp->status == 206) {
        const struct h1_field *cr = h1_find(buf, resp->fields, resp->n_fields, "Content-Range");
        uint64_t a, b, total;
        if (cr == NULL || resp->framing != H1_BODY_LENGTH ||
            range_parse_content_range(buf + cr->value.off, cr->value.len, &a, &b, &total) !=
                RANGE_OK) {
            log_info("fetch %s: 206 without a usable Content-Range: not cached", f->host);
            goto pass;
        }
        /* What was asked: the run may have been split since (fetch_split), the answer not. */
        uint64_t want_end = f->req_end < total - 1 ? f->req_end : total - 1;
        if (a != pos || b != want_end || resp->content_length != b - a + 1) {
            log_info("fetch %s: origin answered bytes %llu-%llu/%llu for %llu-%llu", f->host,
                     (unsigned long long)a, (unsigned long long)b, (unsigned long long)total,
                     (unsigned long long)pos, (unsigned long long)want_end);
            goto fail;
        }
        m.total = total;
        norange_note(f->authority, false);
    } else if (resp->status == 200 && resp->framing == H1_BODY_LENGTH &&
               resp->content_length > pos) {
        /* No range support: the whole object comes; our part of it, and every chunk after it
         * that nobody has (extend_run). */
        f->whole_object = true;
        f->skip = pos;
        m.total = resp->content_length;
        norange_note(f->authority, true);
        if (f->key == NULL) {
            const struct chunk *ck = f->cks[f->cur];
            f->cache = ck->cache;
            f->key = xstrndup(ck->key, ck->key_len);
            f->key_len = ck->key_len;
        }
    } else if (!f->resumed && (resp->status == 301 || resp->status == 302 || resp->status == 303 ||
                               resp->status == 307 || resp->status == 308)) {
        char loc[CHUNKFILE_KEY_MAX];
        header_value(buf, resp, "Location", loc, sizeof(loc));
        if (loc[0] == '\0')
            goto pass;
        if (++f->hops > FETCH_MAX_REDIRECTS) {
            log_info("fetch %s: more than %d redirects", f->host, FETCH_MAX_REDIRECTS);
            goto fail;
        }
        free(f->location);
        f->location = xstrdup(loc);
        if (resp->framing == H1_BODY_NONE ||
            (resp->framing == H1_BODY_LENGTH && resp->content_length <= 64 * 1024)) {
            f->discard = true; /* followed once the short body is read away */
            return;
        }
        upstream_cancel(&f->up);
        if (!follow_redirect(f))
            fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    } else if (f->resumed) {
        log_info("fetch %s: resumption answered %d: giving up", f->host, resp->status);
        goto fail;
    } else {
        if (resp->status == 416)
            note_past_end(f, buf, resp);
        goto pass;
    }
    if (f->resumed) {
        /* Continue only with the very same object (length and validators). */
        if (!same_version(&m, &f->meta)) {
            log_info("fetch %s: object changed while resuming: giving up", f->host);
            goto fail;
        }
        return;
    }
    int rc = apply_meta(f, &m);
    if (rc == 0 && f->whole_object)
        extend_run(f);
    if (rc == -EFBIG) {
        log_info("fetch %s: object of %llu bytes: too large to cache, forwarded", f->host,
                 (unsigned long long)m.total);
        upstream_cancel(&f->up);
        fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (rc < 0)
        goto fail;
    release_head_part(f);
    return;
pass:
    if (resp->framing == H1_BODY_NONE ||
        (resp->framing == H1_BODY_LENGTH && resp->content_length <= 64 * 1024)) {
        /* A short error page: read it away so that the connection can be reused. */
        f->discard = true;
        return;
    }
    upstream_cancel(&f->up);
    fetch_finish(f, CHUNK_FAIL_PASS);
    return;
fail:
    upstream_cancel(&f->up);
    fetch_finish(f, CHUNK_FAIL_502);
}

/*
 * A whole-object answer: the chunks after the run that nobody has (in memory, in flight or on
 * disk) join it, up to CACHE_SPAN_MAX at a time, so that readers find them filling instead of
 * starting fetches of their own. It stops at the object's end or at the first chunk that is
 * someone else's. Not for a run that ends inside a chunk (the part before a reader's offset).
 */
static void extend_run(struct fetch *f)
{
    uint64_t cs = g_cfg->chunk_size;
    if (f->key == NULL || !f->meta_known || (f->last + 1) % cs != 0)
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
            cache_chunk_failed(ck, CHUNK_FAIL_502);
            cache_chunk_unref(&ck);
            break;
        }
        ck->fetch = f;
        f->cks[f->n++] = ck; /* the claim's ref is the fetch's */
        f->next_index++;
        f->last = start + cs - 1;
    }
}

static size_t sink_body(void *arg, const char *data, size_t len)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    if (f->discard)
        return len;
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
        if (ck->state == CHUNK_S_FILLING) {
            if (!cache_chunk_fits(ck, f->pos - cstart, n)) {
                /* Only when its other part's fetch moved it under us (an object that ends
                 * before this part): never write where we were not asked to. */
                log_info("fetch %s: chunk %llu no longer takes bytes at %llu", f->host,
                         (unsigned long long)ck->index, (unsigned long long)f->pos);
                upstream_cancel(&f->up);
                fetch_finish(f, CHUNK_FAIL_502);
                return len;
            }
            if (!reserve_current(f))
                return taken; /* paused until memory frees */
            cache_chunk_commit(ck, f->pos - cstart, data + taken, n);
            f->flowing = true;
        } else if (f->n - f->cur == 1 && !f->whole_object) {
            /* Failed by its other part's fetch, and nothing follows it in this run: stop. */
            upstream_cancel(&f->up);
            fetch_finish(f, CHUNK_FAIL_NONE);
            return len;
        } /* else failed by its other part's fetch: our part of it is read away */
        f->pos += n;
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
    if (f->discard && f->location != NULL) {
        if (!follow_redirect(f))
            fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (f->discard) {
        fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (err == UP_OK && f->cur == f->n) {
        fetch_finish(f, CHUNK_FAIL_NONE);
        return;
    }
    if (f->meta_known && f->cur < f->n && f->attempts < FETCH_ATTEMPTS &&
        (err == UP_OK || err == UP_ERR_IO || err == UP_ERR_READ_TIMEOUT || err == UP_ERR_PROTO)) {
        /* Cut short mid-body: ask for the rest, from the byte reached. */
        f->attempts++;
        f->resumed = true;
        g_stats.fetch_resumed++;
        log_info("fetch %s: %s at byte %llu: resuming (attempt %u)", f->host,
                 err == UP_OK ? "short body" : upstream_strerror(err), (unsigned long long)f->pos,
                 f->attempts);
        fetch_connect(f);
        return;
    }
    enum chunk_fail why = CHUNK_FAIL_502;
    if (err == UP_ERR_CONNECT_TIMEOUT || err == UP_ERR_FIRST_BYTE_TIMEOUT ||
        err == UP_ERR_READ_TIMEOUT)
        why = CHUNK_FAIL_504;
    log_info("fetch %s chunk %llu: %s", f->host,
             (unsigned long long)(f->cur < f->n ? f->cks[f->cur]->index : 0),
             err == UP_OK ? "short body" : upstream_strerror(err));
    g_stats.fetch_failed++;
    fetch_finish(f, why);
}

static const struct upstream_sink fetch_sink = {sink_head, sink_body, sink_done};

static void fetch_connect(struct fetch *f)
{
    size_t cap = strlen(f->req_pre) + strlen(f->req_post) + 64;
    char *head = xmalloc(cap);
    f->req_end = f->last;
    int n = snprintf(head, cap, "%sRange: bytes=%llu-%llu\r\n%s", f->req_pre,
                     (unsigned long long)f->pos, (unsigned long long)f->last, f->req_post);
    ASSERT(n > 0 && (size_t)n < cap);
    struct upstream_req ur;
    memset(&ur, 0, sizeof(ur));
    ur.addr = f->addr;
    ur.head = head;
    ur.head_len = (size_t)n;
    ur.method = H1_M_GET;
    f->discard = false;
    f->up = upstream_start(fctx->loop, fctx->upool, &ur, &fetch_sink, f);
    free(head); /* upstream_start copied it */
}

static void on_routed(void *arg, int err, const struct sockaddr_storage *addr)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    f->rq = NULL;
    if (err == 0) {
        f->addr = *addr;
        f->have_addr = true;
        fetch_connect(f);
        return;
    }
    if (err == -EACCES) {
        log_info("fetch: %s resolves to a private address: refused", f->host);
        g_stats.forbidden++;
        /* A redirect's target failing the checks is not followed: the client gets the redirect
         * itself, uncached. */
        fetch_finish(f, f->hops > 0 ? CHUNK_FAIL_PASS : CHUNK_FAIL_403);
        return;
    }
    if (err != -EINVAL)
        log_info("fetch: cannot resolve %s: %s", f->host, strerror(-err));
    fetch_finish(f, CHUNK_FAIL_502);
}

/* The request head around its Range field: request line and Host before, the rest after. */
static void build_head(struct fetch *f, const struct fetch_origin *o)
{
    size_t cap = o->path_len + strlen(o->authority) + 64;
    f->req_pre = xmalloc(cap);
    snprintf(f->req_pre, cap, "GET %s%.*s HTTP/1.1\r\nHost: %s\r\n",
             o->path_len > 0 && o->path[0] == '/' ? "" : "/", (int)o->path_len, o->path,
             o->authority);
    cap = o->ua_len + o->processed_by_len + CONFIG_HOST_MAX + 64;
    f->req_post = xmalloc(cap);
    snprintf(f->req_post, cap, "%s%.*s%sX-LanCache-Processed-By: %.*s%s%s\r\n\r\n",
             o->user_agent ? "User-Agent: " : "", (int)o->ua_len,
             o->user_agent ? o->user_agent : "", o->user_agent ? "\r\n" : "",
             (int)o->processed_by_len, o->processed_by ? o->processed_by : "",
             o->processed_by_len > 0 ? ", " : "", g_cfg->hostname);
}

/* A new fetch, linked into the live list and counted; the caller fills in the rest. */
static struct fetch *fetch_alloc(void)
{
    struct fetch *f = xcalloc(1, sizeof(*f));
    f->magic = FETCH_MAGIC;
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

struct fetch_origin *fetch_origin_dup(const struct fetch_origin *o)
{
    size_t host_len = strlen(o->host) + 1, auth_len = strlen(o->authority) + 1;
    size_t ua_len = o->user_agent != NULL ? o->ua_len + 1 : 0;
    size_t pb_len = o->processed_by != NULL ? o->processed_by_len + 1 : 0;
    struct fetch_origin *d =
        xmalloc(sizeof(*d) + host_len + auth_len + o->path_len + 1 + ua_len + pb_len);
    char *p = (char *)(d + 1);
    *d = *o;
    d->host = memcpy(p, o->host, host_len);
    p += host_len;
    d->authority = memcpy(p, o->authority, auth_len);
    p += auth_len;
    memcpy(p, o->path, o->path_len);
    p[o->path_len] = '\0';
    d->path = p;
    p += o->path_len + 1;
    if (o->user_agent != NULL) {
        memcpy(p, o->user_agent, o->ua_len);
        p[o->ua_len] = '\0';
        d->user_agent = p;
        p += ua_len;
    }
    if (o->processed_by != NULL) {
        memcpy(p, o->processed_by, o->processed_by_len);
        p[o->processed_by_len] = '\0';
        d->processed_by = p;
    }
    return d;
}

/* A fetch of <cks>[0..n) from object byte <pos> to <last>, not started. */
static struct fetch *fetch_new(struct chunk **cks, size_t n, uint64_t pos, uint64_t last,
                               const struct fetch_origin *o)
{
    ASSERT(n >= 1 && n <= CACHE_SPAN_MAX);
    struct fetch *f = fetch_alloc();
    for (size_t i = 0; i < n; i++) {
        f->cks[i] = cks[i];
        cks[i]->refs++;
    }
    f->n = n;
    f->pos = pos;
    f->last = last;
    f->next_index = cks[n - 1]->index + 1;
    f->host_is_ip = o->host_is_ip;
    f->host = xstrdup(o->host);
    f->port = o->port;
    build_head(f, o);
    f->authority = xstrdup(o->authority);
    if (o->user_agent != NULL)
        f->ua = xstrndup(o->user_agent, o->ua_len);
    if (o->processed_by != NULL)
        f->processed_by = xstrndup(o->processed_by, o->processed_by_len);
    return f;
}

void fetch_start(struct chunk **cks, size_t n, const struct fetch_origin *o)
{
    uint64_t cs = g_cfg->chunk_size;
    struct fetch *f = fetch_new(cks, n, cks[0]->index * cs, cks[n - 1]->index * cs + cs - 1, o);
    for (size_t i = 0; i < n; i++)
        cks[i]->fetch = f;
    fetch_route(f, o->host_is_ip);
}

/* A new fetch of the same object from the same origin as <src> (no chunks yet). */
static struct fetch *fetch_sibling(const struct fetch *src)
{
    struct fetch *f = fetch_alloc();
    f->host = xstrdup(src->host);
    f->authority = xstrdup(src->authority);
    f->port = src->port;
    f->req_pre = xstrdup(src->req_pre);
    f->req_post = xstrdup(src->req_post);
    f->ua = src->ua ? xstrdup(src->ua) : NULL;
    f->processed_by = src->processed_by ? xstrdup(src->processed_by) : NULL;
    return f;
}

/* Starts <f> towards <src>'s origin: its address when it has one, else routed as it was. */
static void fetch_go_like(struct fetch *f, const struct fetch *src)
{
    if (src->have_addr) {
        f->addr = src->addr;
        f->have_addr = true;
        f->host_is_ip = src->host_is_ip;
        fetch_connect(f);
    } else {
        fetch_route(f, src->host_is_ip);
    }
}

/* Whether a reader starting at <off> inside a chunk gets a two-part fill (see fetch.h). */
static bool two_part(uint64_t off)
{
    return off >= FETCH_TWO_PART_MIN && off < g_cfg->chunk_size;
}

/* Makes <ck> a two-part chunk: <g> fills [off, ...) and asks for the head part [0, off) later,
 * in release_head_part(). <route>: g is not routed yet, do it here. Nothing when g (already
 * routed) failed at once. */
static void start_head_part(struct chunk *ck, uint64_t off, struct fetch *g, bool route)
{
    if (ck->state != CHUNK_S_FILLING)
        return;
    ck->tail_off = ck->tail_end = off;
    g->head_ck = ck;
    ck->refs++;
    g->head_off = off;
    g_stats.fetch_two_part++;
    /* Readers may already wait on <ck> (a disk lookup, a run that could not be cut then): they
     * waited before there was a head part to ask, so let them look again (fetch_hurry). */
    cache_chunk_poke(ck);
    if (route)
        fetch_route(g, g->host_is_ip); /* (its failure, from the loop, lets go of head_ck) */
}

/*
 * The head part of <g>'s two-part chunk, if not asked yet: asked now, of the origin g asks (the
 * one a redirect led g to), once g is answered (sink_head), when g ends (fetch_finish) or for a
 * reader waiting for it (fetch_hurry). Not when the chunk failed meanwhile: then nothing is left
 * to fill.
 */
static void release_head_part(struct fetch *g)
{
    struct chunk *ck = g->head_ck;
    if (ck == NULL)
        return;
    g->head_ck = NULL;
    if (ck->state != CHUNK_S_FILLING) {
        cache_chunk_unref(&ck);
        return;
    }
    uint64_t start = chunk_start(ck);
    struct fetch *h = fetch_sibling(g);
    h->cks[0] = ck; /* g's ref is h's now */
    h->n = 1;
    h->pos = start;
    h->last = start + g->head_off - 1;
    h->next_index = ck->index + 1;
    /* A redirect g has read but not followed yet: h asks g's URL and meets it too. */
    h->hops = g->hops - (g->location != NULL ? 1 : 0);
    fetch_go_like(h, g);
}

void fetch_start_at(struct chunk *ck, uint64_t off, const struct fetch_origin *o)
{
    if (!two_part(off) || fetch_origin_ignores_ranges(o->authority)) {
        fetch_start(&ck, 1, o);
        return;
    }
    uint64_t start = chunk_start(ck);
    struct fetch *g = fetch_new(&ck, 1, start + off, start + g_cfg->chunk_size - 1, o);
    ck->fetch = g;
    start_head_part(ck, off, g, true);
}

/* To the override address, the IP literal, or through the resolver for f->host (resolver_route:
 * the answer always comes from the loop, never before this returns). */
static void fetch_route(struct fetch *f, bool host_is_ip)
{
    ASSERT(f->rq == NULL);
    f->host_is_ip = host_is_ip;
    memset(&f->addr, 0, sizeof(f->addr));
    f->have_addr = false; /* until routed (a redirect re-routes: fetch_split must not copy it) */
    f->rq = resolver_route(fctx->resolver, f->host, host_is_ip, f->port,
                           fctx->has_override ? &fctx->override_addr : NULL, g_cfg->allow_private,
                           on_routed, f);
}

static bool fetch_split(struct chunk *ck, uint64_t off)
{
    struct fetch *f = ck->fetch;
    if (f == NULL || f->discard || f->location != NULL || f->whole_object ||
        fetch_origin_ignores_ranges(f->authority))
        return false;
    CHECK_OBJ(f, FETCH_MAGIC);
    size_t k = f->cur;
    while (k < f->n && f->cks[k] != ck)
        k++;
    /* Before the run's bytes flow, a chunk behind the first waits the rest of the first-byte
     * delay plus the transfer of every chunk before it: a request of its own costs one delay at
     * most. Once they flow, the fill reaches the next chunk or two within a chunk's transfer. */
    size_t gap = f->flowing ? FETCH_SPLIT_GAP : 1;
    if (k >= f->n || k < f->cur + gap)
        return false; /* not in this run, or the fill reaches it soon enough */
    if (ev_is_active(&f->memt))
        return false; /* waiting for memory: a new request could only wait for it too */
    struct fetch *g = fetch_sibling(f);
    for (size_t i = k; i < f->n; i++) {
        g->cks[i - k] = f->cks[i];
        f->cks[i]->fetch = g;
        f->cks[i] = NULL;
    }
    g->n = f->n - k;
    f->n = k; /* the old request's answer is cut there: see sink_body */
    bool tp = two_part(off) && !(ck->meta_known && off >= ck->cap); /* (not past the end) */
    g->pos = chunk_start(ck) + (tp ? off : 0);
    g->last = f->last;
    g->next_index = f->next_index;
    f->last = chunk_start(ck) - 1;
    f->next_index = ck->index;
    g_stats.fetch_split++;
    fetch_go_like(g, f);
    if (tp)
        start_head_part(ck, off, g, false);
    return true;
}

bool fetch_hurry(struct chunk *ck, uint64_t off)
{
    struct fetch *f = ck->fetch;
    if (f == NULL || ck->state != CHUNK_S_FILLING)
        return false;
    CHECK_OBJ(f, FETCH_MAGIC);
    if (f->head_ck == ck && off < f->head_off) {
        if (f->discard && f->location == NULL && !f->past_end)
            return false; /* its answer fails the chunk once read away: nothing to ask */
        release_head_part(f);
        return true;
    }
    if (ck->len == 0 && ck->tail_off == 0)
        return fetch_split(ck, off);
    return false;
}

void fetch_cancel_all(void)
{
    while (fetches != NULL)
        fetch_finish(fetches, CHUNK_FAIL_502);
}
