/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fetch: one chunk fill from the origin. See fetch.h.
 *
 * | phase    | waits for                                  | holds                           |
 * |----------|--------------------------------------------|---------------------------------|
 * | RESOLVE  | the resolver (skipped with an override)    | chunk ref, resolver query       |
 * | UPSTREAM | the response head, then body bytes         | chunk ref, upstream             |
 * | MEMORY   | room in the memory budget (reads paused)   | chunk ref, upstream, mem waiter |
 * | done     | -: chunk sealed or failed, fetch freed     | -                               |
 * The upstream's sink callbacks drive it; fetch_finish() is the one exit.
 */
#include "fetch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "cache.h"
#include "config.h"
#include "log.h"
#include "range.h"
#include "resolver.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

#define FETCH_MAGIC 0xfe7c4001u

extern const struct config *g_cfg;

struct fetch {
    unsigned magic;
    struct fetch *next, **pprev; /* all live fetches */
    struct chunk *ck;            /* ref */
    char *host;                  /* owns */
    uint16_t port;
    bool host_is_ip;
    char *head; /* owns: the upstream request */
    size_t head_len;
    struct resolver_query *rq; /* owns while resolving */
    struct upstream *up;       /* owns while fetching */
    uint64_t start;            /* first byte of the chunk in the object */
    uint64_t skip;             /* body bytes to drop first (200 answer to a range) */
    bool whole_object;         /* the origin ignored our Range */
    bool discard;              /* uncacheable answer: drain its short body, keep the socket */
    struct chunk_waiter memw;  /* waiting for memory */
};

static struct fetch_ctx *fctx;
static struct fetch *fetches;
static unsigned n_fetches;

void fetch_module_init(struct fetch_ctx *ctx)
{
    fctx = ctx;
}

unsigned fetch_live(void)
{
    return n_fetches;
}

static void fetch_free(struct fetch *f)
{
    resolver_cancel(&f->rq);
    upstream_cancel(&f->up);
    cache_chunk_unwait(&f->memw);
    *f->pprev = f->next;
    if (f->next)
        f->next->pprev = f->pprev;
    n_fetches--;
    free(f->host);
    free(f->head);
    f->magic = 0;
    free(f);
}

/* The end: the chunk is sealed (why == NONE) or failed; drops everything. */
static void fetch_finish(struct fetch *f, enum chunk_fail why)
{
    struct chunk *ck = f->ck;
    f->ck = NULL;
    if (ck->state == CHUNK_S_FILLING) {
        if (why == CHUNK_FAIL_NONE)
            cache_chunk_seal(ck);
        else
            cache_chunk_failed(ck, why);
    }
    ck->fetch = NULL;
    cache_chunk_unref(&ck);
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

static void on_mem(struct chunk_waiter *w);

/* Sets the meta; returns false when the fill cannot go on (already failed). */
static bool fetch_set_meta(struct fetch *f, const struct cache_meta *m)
{
    int rc = cache_chunk_set_meta(f->ck, m);
    if (rc == -ENOMEM) {
        /* Memory is full of chunks in use: wait, the upstream stays paused meanwhile. */
        cache_mem_wait(f->ck->cache, &f->memw, on_mem);
        return true;
    }
    return rc == 0;
}

static void on_mem(struct chunk_waiter *w)
{
    struct fetch *f = container_of(w, struct fetch, memw);
    CHECK_OBJ(f, FETCH_MAGIC);
    int rc = cache_chunk_set_meta(f->ck, &f->ck->meta);
    if (rc == -ENOMEM) {
        cache_mem_wait(f->ck->cache, &f->memw, on_mem);
        return;
    }
    if (rc < 0) {
        upstream_cancel(&f->up);
        fetch_finish(f, CHUNK_FAIL_502);
        return;
    }
    upstream_resume(f->up);
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
    uint64_t cs = g_cfg->chunk_size;

    if (resp->status == 206) {
        const struct h1_field *cr = h1_find(buf, resp->fields, resp->n_fields, "Content-Range");
        uint64_t a, b, total;
        if (cr == NULL || resp->framing != H1_BODY_LENGTH ||
            range_parse_content_range(buf + cr->value.off, cr->value.len, &a, &b, &total) !=
                RANGE_OK) {
            log_info("fetch %s: 206 without a usable Content-Range: not cached", f->host);
            goto pass;
        }
        uint64_t want_end = f->start + cs - 1 < total - 1 ? f->start + cs - 1 : total - 1;
        if (a != f->start || b != want_end || resp->content_length != b - a + 1) {
            log_info("fetch %s: origin answered bytes %llu-%llu/%llu for %llu-%llu", f->host,
                     (unsigned long long)a, (unsigned long long)b, (unsigned long long)total,
                     (unsigned long long)f->start, (unsigned long long)want_end);
            goto fail;
        }
        m.total = total;
    } else if (resp->status == 200 && resp->framing == H1_BODY_LENGTH &&
               resp->content_length > f->start) {
        /* No range support: the whole object comes; keep our chunk's part of it. */
        f->whole_object = true;
        f->skip = f->start;
        m.total = resp->content_length;
    } else {
        goto pass;
    }
    if (!fetch_set_meta(f, &m))
        goto fail;
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

static size_t sink_body(void *arg, const char *data, size_t len)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    struct chunk *ck = f->ck;
    if (f->discard)
        return len;
    if (ck == NULL || ck->data == NULL)
        return 0; /* waiting for memory */
    size_t taken = 0;
    if (f->skip > 0) {
        taken = len < f->skip ? len : (size_t)f->skip;
        f->skip -= taken;
        if (taken == len)
            return taken;
    }
    size_t n = len - taken;
    if (n > ck->cap - ck->len)
        n = (size_t)(ck->cap - ck->len);
    cache_chunk_commit(ck, data + taken, n);
    taken += n;
    if (ck->len == ck->cap && f->whole_object) {
        /* The rest of a whole-object answer is not ours: stop here. */
        upstream_cancel(&f->up);
        fetch_finish(f, CHUNK_FAIL_NONE);
        return len;
    }
    return taken;
}

static void sink_done(void *arg, enum up_err err)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    f->up = NULL;
    if (f->discard) {
        fetch_finish(f, CHUNK_FAIL_PASS);
        return;
    }
    if (err == UP_OK && f->ck->meta_known && f->ck->len == f->ck->cap) {
        fetch_finish(f, CHUNK_FAIL_NONE);
        return;
    }
    enum chunk_fail why = CHUNK_FAIL_502;
    if (err == UP_ERR_CONNECT_TIMEOUT || err == UP_ERR_FIRST_BYTE_TIMEOUT ||
        err == UP_ERR_READ_TIMEOUT)
        why = CHUNK_FAIL_504;
    log_info("fetch %s chunk %llu: %s after %llu of %llu bytes", f->host,
             (unsigned long long)f->ck->index, err == UP_OK ? "short body" : upstream_strerror(err),
             (unsigned long long)f->ck->len, (unsigned long long)f->ck->cap);
    fetch_finish(f, why);
}

static const struct upstream_sink fetch_sink = {sink_head, sink_body, sink_done};

static void fetch_connect(struct fetch *f, const struct sockaddr_storage *addr)
{
    struct upstream_req ur;
    memset(&ur, 0, sizeof(ur));
    ur.addr = *addr;
    ur.head = f->head;
    ur.head_len = f->head_len;
    ur.method = H1_M_GET;
    f->up = upstream_start(fctx->loop, fctx->upool, &ur, &fetch_sink, f);
}

static void on_resolved(void *arg, int err, const struct sockaddr_storage *addrs, size_t n)
{
    struct fetch *f = arg;
    CHECK_OBJ(f, FETCH_MAGIC);
    f->rq = NULL;
    if (err != 0) {
        log_info("fetch: cannot resolve %s: %s", f->host, strerror(-err));
        fetch_finish(f, CHUNK_FAIL_502);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (g_cfg->allow_private || !resolver_addr_is_private((const void *)&addrs[i])) {
            fetch_connect(f, &addrs[i]);
            return;
        }
    }
    log_info("fetch: %s resolves to a private address: refused", f->host);
    g_stats.forbidden++;
    fetch_finish(f, CHUNK_FAIL_403);
}

void fetch_start(struct chunk *ck, const struct fetch_origin *o)
{
    struct fetch *f = xcalloc(1, sizeof(*f));
    f->magic = FETCH_MAGIC;
    f->ck = ck;
    ck->refs++;
    ck->fetch = f;
    f->host = xstrdup(o->host);
    f->port = o->port;
    f->host_is_ip = o->host_is_ip;
    f->start = ck->index * g_cfg->chunk_size;
    f->next = fetches;
    if (fetches)
        fetches->pprev = &f->next;
    f->pprev = &fetches;
    fetches = f;
    n_fetches++;

    size_t cap = o->path_len + o->ua_len + o->processed_by_len + strlen(o->authority) + 256 +
                 CONFIG_HOST_MAX;
    f->head = xmalloc(cap);
    int n = snprintf(f->head, cap,
                     "GET %s%.*s HTTP/1.1\r\nHost: %s\r\nRange: bytes=%llu-%llu\r\n%s%.*s%s"
                     "X-LanCache-Processed-By: %.*s%s%s\r\n\r\n",
                     o->path_len > 0 && o->path[0] == '/' ? "" : "/", (int)o->path_len, o->path,
                     o->authority, (unsigned long long)f->start,
                     (unsigned long long)(f->start + g_cfg->chunk_size - 1),
                     o->user_agent ? "User-Agent: " : "", (int)o->ua_len,
                     o->user_agent ? o->user_agent : "", o->user_agent ? "\r\n" : "",
                     (int)o->processed_by_len, o->processed_by ? o->processed_by : "",
                     o->processed_by_len > 0 ? ", " : "", g_cfg->hostname);
    ASSERT(n > 0 && (size_t)n < cap);
    f->head_len = (size_t)n;

    if (fctx->has_override) {
        fetch_connect(f, &fctx->override_addr);
    } else if (o->host_is_ip) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof(ss));
        struct sockaddr_in *s4 = (void *)&ss;
        struct sockaddr_in6 *s6 = (void *)&ss;
        if (inet_pton(AF_INET6, o->host, &s6->sin6_addr) == 1) {
            s6->sin6_family = AF_INET6;
            s6->sin6_port = htons(o->port);
        } else if (inet_aton(o->host, &s4->sin_addr) != 0) {
            s4->sin_family = AF_INET;
            s4->sin_port = htons(o->port);
        }
        fetch_connect(f, &ss);
    } else {
        f->rq = resolver_query(fctx->resolver, f->host, f->port, on_resolved, f);
    }
}

void fetch_cancel_all(void)
{
    while (fetches != NULL)
        fetch_finish(fetches, CHUNK_FAIL_502);
}
