/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * admin: the admin listener (/metrics, /status, PURGE). See admin.h.
 *
 * | phase   | waits for                                   | idle timer (10 s) |
 * |---------|---------------------------------------------|-------------------|
 * | reading | a complete request head in <in> (16 KiB)    | armed             |
 * | writing | <out> (one whole response) to drain         | armed             |
 * | linger  | the client's EOF after our FIN (input is    | 2 s               |
 * |         | discarded), so that closing with unread     |                   |
 * |         | input sends no RST that could destroy the   |                   |
 * |         | response in flight                          |                   |
 * | closing | nothing: freed when the current callback    | stopped           |
 * |         | (the bottom of the stack) returns           |                   |
 *
 * A response is built whole into <out> from the counters at that instant (metrics are bounded by
 * the number of families and status codes), then written; the next pipelined request is parsed
 * only once <out> is empty. Every byte read or written re-arms the idle timer, so a client that
 * sends or takes nothing for 10 s is closed. At most ADMIN_MAX_CONNS connections: more are closed
 * at once. Ownership: the module owns the listening socket and every struct admin_conn (the list
 * <conns>); each conn owns its fd and buffers. Loop thread only; never reachable on `listen`.
 */
#include "admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "adminauth.h"
#include "admit.h"
#include "buf.h"
#include "cache.h"
#include "chunkfile.h"
#include "config.h"
#include "dashboard.h"
#include "domains.h"
#include "fetch.h"
#include "http1.h"
#include "inventory.h"
#include "live.h"
#include "log.h"
#include "peers.h"
#include "server.h"
#include "stats.h"
#include "util.h"

#define ADMIN_MAGIC 0xad3170c0u
#define ADMIN_MAX_CONNS 64
#define ADMIN_INBUF (16 * 1024) /* request head limit here (431 beyond) */
#define ADMIN_IDLE_TIMEOUT 10.0 /* seconds without a byte either way */
#define ADMIN_BACKLOG 64
#define ADMIN_EMFILE_BACKOFF 0.1 /* seconds */
#define ADMIN_IDENT_MAX 320      /* a cache identifier given as ?identifier= */
#define ADMIN_LINGER_TIMEOUT 2.0 /* seconds of discarding input after a final response */
#define ADMIN_LINGER_MAX (256 * 1024)

/* ---- a growable text buffer: one response under construction ------------------------------ */

struct abuf {
    char *p; /* owns */
    size_t len, cap;
};

static void ab_reserve(struct abuf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void ab_append(struct abuf *b, const char *s, size_t len)
{
    ab_reserve(b, len);
    memcpy(b->p + b->len, s, len);
    b->len += len;
    b->p[b->len] = '\0';
}

static void ab_puts(struct abuf *b, const char *s)
{
    ab_append(b, s, strlen(s));
}

static void ab_printf(struct abuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ab_printf(struct abuf *b, const char *fmt, ...)
{
    ab_reserve(b, 128);
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, room, fmt, ap);
        va_end(ap);
        ASSERT(n >= 0);
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        ab_reserve(b, (size_t)n);
    }
}

static void ab_free(struct abuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- metrics: one model, two renderings ---------------------------------------------------- */

enum mfmt { MFMT_PROM, MFMT_JSON };

/*
 * A metrics writer. mw_family() starts a family (and ends the previous one); mw_sample() adds
 * one sample: <label_value> NULL for an unlabelled family (exactly one sample then).
 * Prometheus text format 0.0.4: "# HELP", "# TYPE", then "cacheparty_NAME{LABEL="V"} VALUE".
 * JSON: "NAME": VALUE, or "NAME": {"V": VALUE, ...} for a labelled family.
 */
struct mw {
    struct abuf *b; /* borrows */
    enum mfmt fmt;
    char fam[96];
    const char *label; /* borrows: static; NULL = unlabelled */
    unsigned n_fam;
    unsigned n_samples; /* in the current family */
};

/* Label values and HELP text (Prometheus): backslash, double quote (labels), newline escaped. */
static void prom_escape(struct abuf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            ab_puts(b, "\\\\");
        else if (*s == '\n')
            ab_puts(b, "\\n");
        else if (*s == '"' && quote)
            ab_puts(b, "\\\"");
        else
            ab_append(b, s, 1);
    }
}

/* <s>[0..len) as a JSON string: control bytes escaped, bytes over 0x7f as the Latin-1 code
 * points they are (a path is bytes, not always UTF-8: the output stays valid JSON). */
static void json_bytes(struct abuf *b, const char *s, size_t len)
{
    ab_puts(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            ab_printf(b, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            ab_printf(b, "\\u%04x", ch);
        else
            ab_append(b, s + i, 1);
    }
    ab_puts(b, "\"");
}

static void json_string(struct abuf *b, const char *s)
{
    json_bytes(b, s, strlen(s));
}

static void mw_end_family(struct mw *w)
{
    if (w->n_fam == 0)
        return;
    ASSERT(w->label != NULL || w->n_samples == 1);
    if (w->fmt == MFMT_JSON && w->label != NULL)
        ab_puts(w->b, "}");
}

static void mw_begin(struct mw *w, struct abuf *b, enum mfmt fmt)
{
    memset(w, 0, sizeof(*w));
    w->b = b;
    w->fmt = fmt;
    if (fmt == MFMT_JSON)
        ab_puts(b, "{");
}

static void mw_finish(struct mw *w)
{
    mw_end_family(w);
    if (w->fmt == MFMT_JSON)
        ab_puts(w->b, "\n}\n");
}

/* <name> without the cacheparty_ prefix; <type> "counter" or "gauge"; <label> NULL or static. */
static void mw_family(struct mw *w, const char *name, const char *type, const char *help,
                      const char *label)
{
    mw_end_family(w);
    int n = snprintf(w->fam, sizeof(w->fam), "%s", name);
    ASSERT(n > 0 && (size_t)n < sizeof(w->fam));
    w->label = label;
    w->n_samples = 0;
    if (w->fmt == MFMT_PROM) {
        ab_printf(w->b, "# HELP cacheparty_%s ", name);
        prom_escape(w->b, help, false);
        ab_printf(w->b, "\n# TYPE cacheparty_%s %s\n", name, type);
    } else {
        ab_puts(w->b, w->n_fam > 0 ? ",\n  " : "\n  ");
        json_string(w->b, name);
        ab_puts(w->b, label != NULL ? ": {" : ": ");
    }
    w->n_fam++;
}

static void mw_sample(struct mw *w, const char *label_value, uint64_t v)
{
    ASSERT(w->n_fam > 0);
    ASSERT((label_value == NULL) == (w->label == NULL));
    if (w->fmt == MFMT_PROM) {
        ab_printf(w->b, "cacheparty_%s", w->fam);
        if (label_value != NULL) {
            ab_printf(w->b, "{%s=\"", w->label);
            prom_escape(w->b, label_value, true);
            ab_puts(w->b, "\"}");
        }
        ab_printf(w->b, " %llu\n", (unsigned long long)v);
    } else {
        if (label_value != NULL) {
            if (w->n_samples > 0)
                ab_puts(w->b, ", ");
            json_string(w->b, label_value);
            ab_puts(w->b, ": ");
        }
        ab_printf(w->b, "%llu", (unsigned long long)v);
    }
    w->n_samples++;
}

/* ---- the dashboard's JSON (docs/interfaces.md "Dashboard API") ---------------------------- */

#define ADMIN_STALL_S 10 /* a fetch with no body byte for that long is shown stalled */

struct live_json {
    struct abuf *b;
    unsigned n;
    double now;
};

static void json_sep(struct live_json *j)
{
    ab_puts(j->b, j->n++ > 0 ? ",\n    " : "\n    ");
}

static void on_json_fetch(const struct fetch_info *fi, void *arg)
{
    struct live_json *j = arg;
    json_sep(j);
    const char *nl = fi->key != NULL ? memchr(fi->key, '\n', fi->key_len) : NULL;
    size_t il = nl != NULL ? (size_t)(nl - fi->key) : 0;
    ab_printf(j->b, "{\"id\": %u, \"state\": ", fi->id);
    json_string(j->b, fi->state);
    ab_puts(j->b, ", \"service\": ");
    json_bytes(j->b, fi->key != NULL ? fi->key : "", il);
    ab_puts(j->b, ", \"path\": ");
    json_bytes(j->b, nl != NULL ? nl + 1 : "", nl != NULL ? fi->key_len - il - 1 : 0);
    double age = j->now - fi->started_at, idle = j->now - fi->byte_at;
    uint64_t done = fi->pos - fi->first;
    ab_printf(j->b,
              ", \"first\": %llu, \"last\": %llu, \"done\": %llu, \"total\": %llu, "
              "\"readers\": %u, \"seconds\": %.1f, \"idle_seconds\": %.1f, \"rate\": %.0f, "
              "\"stalled\": %s}",
              (unsigned long long)fi->first, (unsigned long long)fi->last, (unsigned long long)done,
              (unsigned long long)fi->total, fi->readers, age, idle,
              age > 0 ? (double)done / age : 0.0, idle >= ADMIN_STALL_S ? "true" : "false");
}

static void on_json_entry(const struct live_entry *e, void *arg)
{
    struct live_json *j = arg;
    json_sep(j);
    ab_puts(j->b, "{\"name\": ");
    json_bytes(j->b, e->name, strlen(e->name));
    ab_printf(j->b,
              ", \"bytes\": %llu, \"hit\": %llu, \"floor\": %llu, \"total_bytes\": %llu, "
              "\"total_hit\": %llu, \"last_ms\": %llu}",
              (unsigned long long)e->bytes, (unsigned long long)e->hit,
              (unsigned long long)e->floor, (unsigned long long)e->total_bytes,
              (unsigned long long)e->total_hit, (unsigned long long)e->last_ms);
}

static void json_sample(struct abuf *b, const struct live_sample *s)
{
    ab_printf(b, "[%llu, %llu, %llu, %llu, %llu, %llu, %u, %u]", (unsigned long long)s->t_ms,
              (unsigned long long)s->bytes_hit, (unsigned long long)s->bytes_miss,
              (unsigned long long)s->bytes_bypass, (unsigned long long)s->upstream_bytes,
              (unsigned long long)s->requests, s->connections, s->fetches);
}

struct last_two {
    struct live_sample a, b; /* the newest two */
    unsigned n;
};

static void on_keep_last(const struct live_sample *s, void *arg)
{
    struct last_two *l = arg;
    l->a = l->b;
    l->b = *s;
    l->n++;
}

static void on_json_sample(const struct live_sample *s, void *arg)
{
    struct live_json *j = arg;
    json_sep(j);
    json_sample(j->b, s);
}

static void api_live(struct abuf *b, double now)
{
    struct live_sample cur;
    live_now(&cur);
    struct last_two l = {.n = 0};
    live_samples(on_keep_last, &l);
    /* Rates over at least one second: the newest stored sample, or the one before it. */
    const struct live_sample *base = l.n > 0 ? &l.b : &cur;
    if (l.n > 1 && cur.t_ms - l.b.t_ms < 1000)
        base = &l.a;
    double dt = (double)(cur.t_ms - base->t_ms) / 1000.0;
    double k = dt > 0 ? 1.0 / dt : 0.0;
    uint64_t served = cur.bytes_hit + cur.bytes_miss + cur.bytes_bypass;
    ab_printf(b,
              "{\n  \"t_ms\": %llu,\n  \"tick_s\": %d,\n  \"stall_s\": %d,\n  \"now\": "
              "{\"seconds\": %.3f, \"client_hit_bps\": %.0f, \"client_miss_bps\": %.0f, "
              "\"client_bypass_bps\": %.0f, \"origin_bps\": %.0f, \"requests_ps\": %.1f, "
              "\"connections\": %u, \"fetches\": %u},\n",
              (unsigned long long)cur.t_ms, LIVE_TICK_S, ADMIN_STALL_S, dt,
              (double)(cur.bytes_hit - base->bytes_hit) * k,
              (double)(cur.bytes_miss - base->bytes_miss) * k,
              (double)(cur.bytes_bypass - base->bytes_bypass) * k,
              (double)(cur.upstream_bytes - base->upstream_bytes) * k,
              (double)(cur.requests - base->requests) * k, cur.connections, cur.fetches);
    ab_printf(b,
              "  \"totals\": {\"bytes_hit\": %llu, \"bytes_miss\": %llu, \"bytes_bypass\": "
              "%llu, \"upstream_bytes\": %llu, \"requests\": %llu, \"hit_ratio\": %.4f},\n",
              (unsigned long long)cur.bytes_hit, (unsigned long long)cur.bytes_miss,
              (unsigned long long)cur.bytes_bypass, (unsigned long long)cur.upstream_bytes,
              (unsigned long long)cur.requests,
              served > 0 ? (double)cur.bytes_hit / (double)served : 0.0);
    struct live_json j = {.b = b, .n = 0, .now = now};
    ab_puts(b, "  \"fetches\": [");
    fetch_foreach(on_json_fetch, &j);
    ab_puts(b, j.n > 0 ? "\n  ],\n  \"services\": [" : "],\n  \"services\": [");
    j.n = 0;
    live_services(on_json_entry, &j);
    ab_puts(b, j.n > 0 ? "\n  ],\n  \"clients\": [" : "],\n  \"clients\": [");
    j.n = 0;
    live_clients(on_json_entry, &j);
    ab_puts(b, j.n > 0 ? "\n  ]\n}\n" : "]\n}\n");
}

static void api_history(struct abuf *b)
{
    ab_printf(b,
              "{\n  \"tick_s\": %d,\n  \"columns\": [\"t_ms\", \"bytes_hit\", "
              "\"bytes_miss\", \"bytes_bypass\", \"upstream_bytes\", \"requests\", "
              "\"connections\", \"fetches\"],\n  \"samples\": [",
              LIVE_TICK_S);
    struct live_json j = {.b = b, .n = 0, .now = 0};
    live_samples(on_json_sample, &j);
    ab_puts(b, j.n > 0 ? "\n  ]\n}\n" : "]\n}\n");
}

/* ---- the inventory ------------------------------------------------------------------------ */

static struct admin_ctx *actx; /* borrows: main's */

#define ADMIN_INV_GROUPS 500 /* groups an answer lists (the largest; ?service= narrows them) */
#define ADMIN_INV_SERVICES 200
#define ADMIN_INV_VALUE_MAX (CHUNKFILE_KEY_MAX + 1) /* a query value: a path or prefix */

struct inv_list {
    const struct inv_group **g; /* owns the array, borrows the groups */
    size_t n;
    const char *service; /* the filter, or NULL */
};

static void on_inv_collect(const struct inv_group *g, void *arg)
{
    struct inv_list *l = arg;
    l->g[l->n++] = g;
}

static int by_service(const void *a, const void *b)
{
    const struct inv_group *x = *(const struct inv_group *const *)a;
    const struct inv_group *y = *(const struct inv_group *const *)b;
    return strcmp(x->service, y->service);
}

static int by_bytes(const void *a, const void *b)
{
    const struct inv_group *x = *(const struct inv_group *const *)a;
    const struct inv_group *y = *(const struct inv_group *const *)b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->prefix, y->prefix);
}

struct inv_service {
    const char *name; /* borrows a group's */
    uint64_t bytes, chunks, last_ms;
    unsigned groups;
};

static int service_by_bytes(const void *a, const void *b)
{
    const struct inv_service *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->name, y->name);
}

static void json_inv_group(struct abuf *b, const struct inv_group *g)
{
    ab_puts(b, "{\"service\": ");
    json_string(b, g->service);
    ab_puts(b, ", \"prefix\": ");
    json_string(b, g->prefix);
    ab_printf(b, ", \"bytes\": %llu, \"chunks\": %llu, \"last_ms\": %llu, \"purging\": %s}",
              (unsigned long long)g->bytes, (unsigned long long)g->chunks,
              (unsigned long long)g->last_ms, g->purging ? "true" : "false");
}

/* GET /api/inventory[?service=S]: totals per service, then the largest groups. */
static void api_inventory(struct abuf *b, const char *service)
{
    struct inventory *inv = cache_inventory(actx->cache);
    struct cache_inv_status st;
    cache_inv_status(actx->cache, &st);
    struct inv_list l = {xcalloc(inv_count(inv) + 1, sizeof(*l.g)), 0, service};
    inv_foreach(inv, on_inv_collect, &l);
    /* Services: runs of one name once sorted by it. */
    qsort(l.g, l.n, sizeof(*l.g), by_service);
    struct inv_service *sv = xcalloc(l.n + 1, sizeof(*sv));
    size_t n_sv = 0;
    uint64_t bytes = 0, chunks = 0;
    for (size_t i = 0; i < l.n; i++) {
        const struct inv_group *g = l.g[i];
        bytes += g->bytes;
        chunks += g->chunks;
        if (g->id < INV_FIRST)
            continue; /* not a service's */
        if (n_sv == 0 || strcmp(sv[n_sv - 1].name, g->service) != 0)
            sv[n_sv++].name = g->service;
        struct inv_service *s = &sv[n_sv - 1];
        s->bytes += g->bytes;
        s->chunks += g->chunks;
        s->groups++;
        if (g->last_ms > s->last_ms)
            s->last_ms = g->last_ms;
    }
    qsort(sv, n_sv, sizeof(*sv), service_by_bytes);
    ab_printf(b,
              "{\n  \"complete\": %s,\n  \"unread_chunks\": %llu,\n  \"purges\": %u,\n  "
              "\"purged_chunks\": %llu,\n  \"bytes\": %llu,\n  \"chunks\": %llu,\n  "
              "\"groups_total\": %zu,\n  \"services_total\": %zu,\n  \"index_memory_bytes\": "
              "%llu,\n  \"inventory_memory_bytes\": %zu,\n  \"services\": [",
              st.complete ? "true" : "false", (unsigned long long)st.unread_chunks, st.purges,
              (unsigned long long)st.purged_chunks, (unsigned long long)bytes,
              (unsigned long long)chunks, l.n, n_sv, (unsigned long long)st.index_bytes,
              inv_memory(inv));
    for (size_t i = 0; i < n_sv && i < ADMIN_INV_SERVICES; i++) {
        ab_puts(b, i > 0 ? ",\n    {\"service\": " : "\n    {\"service\": ");
        json_string(b, sv[i].name);
        ab_printf(b, ", \"bytes\": %llu, \"chunks\": %llu, \"groups\": %u, \"last_ms\": %llu}",
                  (unsigned long long)sv[i].bytes, (unsigned long long)sv[i].chunks, sv[i].groups,
                  (unsigned long long)sv[i].last_ms);
    }
    ab_puts(b, n_sv > 0 ? "\n  ],\n  \"groups\": [" : "],\n  \"groups\": [");
    qsort(l.g, l.n, sizeof(*l.g), by_bytes);
    size_t shown = 0, matched = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (service != NULL && strcmp(l.g[i]->service, service) != 0)
            continue;
        matched++;
        if (shown == ADMIN_INV_GROUPS)
            continue;
        ab_puts(b, shown++ > 0 ? ",\n    " : "\n    ");
        json_inv_group(b, l.g[i]);
    }
    ab_printf(b, "%s,\n  \"groups_matched\": %zu\n}\n", shown > 0 ? "\n  ]" : "]", matched);
    free(sv);
    free(l.g);
}

/* GET /api/objects?service=S&prefix=P: 200 with the listing, 202 while it is made, 404. */
static int api_objects(struct abuf *b, const char *service, const char *prefix)
{
    const struct cache_inv_listing *l = NULL;
    enum cache_inv_list_rc rc = cache_inv_list(actx->cache, service, prefix, &l);
    if (rc == CACHE_INV_LIST_NONE) {
        ab_puts(b, "{\"error\": \"nothing stored in that group\"}\n");
        return 404;
    }
    if (rc == CACHE_INV_LIST_PENDING) {
        ab_puts(b, "{\"pending\": true}\n");
        return 202;
    }
    ab_puts(b, "{\n  \"service\": ");
    json_string(b, l->service);
    ab_puts(b, ",\n  \"prefix\": ");
    json_string(b, l->prefix);
    ab_printf(b, ",\n  \"truncated\": %s,\n  \"objects\": [", l->truncated ? "true" : "false");
    for (size_t i = 0; i < l->n; i++) {
        const struct cache_inv_obj *o = &l->objs[i];
        ab_puts(b, i > 0 ? ",\n    {\"path\": " : "\n    {\"path\": ");
        if (o->path != NULL)
            json_string(b, o->path);
        else
            ab_puts(b, "null");
        ab_printf(b, ", \"bytes\": %llu, \"chunks\": %llu, \"last_ms\": %llu}",
                  (unsigned long long)o->bytes, (unsigned long long)o->chunks,
                  (unsigned long long)o->last_ms);
    }
    ab_puts(b, l->n > 0 ? "\n  ]\n}\n" : "]\n}\n");
    return 200;
}

/* The page's own headers: nothing from elsewhere, never framed (a purge button under another
 * site's page), no Referer with its address. */
#define ADMIN_PAGE_HEADERS                                                                         \
    "Content-Security-Policy: default-src 'self'; script-src 'self' 'unsafe-inline'; "             \
    "style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'\r\n"                  \
    "X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"                                    \
    "X-Content-Type-Options: nosniff\r\n"

/* Debian's libjs-chart.js (3.x in Debian 12), read once when first asked. */
static const char *const chart_paths[] = {
    "/usr/share/javascript/chart.js/chart.min.js",  "/usr/share/javascript/chart.js/chart.umd.js",
    "/usr/share/javascript/chart.js/Chart.min.js",  "/usr/share/nodejs/chart.js/dist/chart.min.js",
    "/usr/share/nodejs/chart.js/dist/chart.umd.js",
};
#define ADMIN_STATIC_MAX (4u << 20)

static struct {
    bool tried;
    char *body; /* owns: the file, or NULL when none is installed */
    size_t len;
} chart_js;

static void chart_js_load(void)
{
    if (chart_js.tried)
        return;
    chart_js.tried = true;
    const char *own = g_cfg->dashboard_chart_js;
    size_t n_paths = own != NULL ? 1 : ARRAY_SIZE(chart_paths);
    for (size_t i = 0; i < n_paths && chart_js.body == NULL; i++) {
        const char *path = own != NULL ? own : chart_paths[i];
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        char *b = xmalloc(ADMIN_STATIC_MAX);
        size_t n = fread(b, 1, ADMIN_STATIC_MAX, f);
        bool whole = feof(f) && !ferror(f);
        fclose(f);
        if (!whole || n == 0) {
            free(b);
            continue;
        }
        chart_js.body = b;
        chart_js.len = n;
        log_info("admin: the dashboard's charts from %s", path);
    }
    if (chart_js.body == NULL)
        log_info("admin: no chart library (Debian's libjs-chart.js): the dashboard shows tables");
}

static unsigned n_conns;
static bool on_loopback; /* admin_listen is a loopback address (fixed for the listener's life) */

/* adminauth's policy of this moment (the token, the names and admin_public change on reload). */
static struct adminauth_policy admin_policy(void)
{
    const struct config *cfg = g_cfg;
    return (struct adminauth_policy){.loopback = on_loopback,
                                     .token = cfg->admin_token,
                                     .public_views = cfg->admin_public,
                                     .names = (const char *const *)cfg->admin_names,
                                     .n_names = cfg->n_admin_names};
}

static void on_export_family(const struct stats_family *fam, void *arg)
{
    mw_family(arg, fam->name, fam->type, fam->help, fam->label);
}

static void on_export_sample(const char *label_value, uint64_t value, void *arg)
{
    mw_sample(arg, label_value, value);
}

/* The cluster's peers (peers.h), one family per counter, labelled by the peer's address: only
 * with a [cluster]. */
static const struct {
    const char *name, *type, *help;
    size_t off;
} peer_families[] = {
    {"cluster_peer_up", "gauge", "1 while the peer answers its heartbeats with our digest",
     offsetof(struct peers_info, up)},
    {"cluster_peer_disagrees", "gauge",
     "1 while the peer's chunk size, node list or secret differs from ours (never used)",
     offsetof(struct peers_info, disagrees)},
    {"cluster_peer_requests_total", "counter", "fills asked of the peer (it owns their chunks)",
     offsetof(struct peers_info, requests)},
    {"cluster_peer_hits_total", "counter", "of them, answered HIT by the peer",
     offsetof(struct peers_info, requests_hit)},
    {"cluster_peer_bytes_asked_total", "counter",
     "body bytes the peer sent this node for its clients",
     offsetof(struct peers_info, bytes_asked)},
    {"cluster_peer_bytes_served_total", "counter",
     "body bytes this node sent the peer for the peer's clients",
     offsetof(struct peers_info, bytes_served)},
    {"cluster_peer_failures_total", "counter",
     "requests to the peer (fills, heartbeats) that failed", offsetof(struct peers_info, failures)},
    {"cluster_peer_purges_total", "counter", "purges sent on to the peer and done there",
     offsetof(struct peers_info, purges_sent)},
    {"cluster_peer_purge_failures_total", "counter", "purges sent on to the peer and not done",
     offsetof(struct peers_info, purges_failed)},
};

struct peer_export {
    struct mw *w;
    size_t fam;
};

static void on_export_peer(const struct peers_info *pi, void *arg)
{
    struct peer_export *pe = arg;
    const char *p = (const char *)pi + peer_families[pe->fam].off;
    uint64_t v;
    if (pe->fam < 2)
        v = *(const bool *)p ? 1 : 0;
    else
        memcpy(&v, p, sizeof(v));
    mw_sample(pe->w, pi->addr, v);
}

static void export_peers(struct mw *w)
{
    if (peers_cluster() == NULL)
        return;
    for (size_t i = 0; i < ARRAY_SIZE(peer_families); i++) {
        mw_family(w, peer_families[i].name, peer_families[i].type, peer_families[i].help, "peer");
        struct peer_export pe = {w, i};
        peers_foreach(on_export_peer, &pe);
    }
}

/* ---- connections --------------------------------------------------------------------------- */

struct admin_conn {
    unsigned magic;
    unsigned id;
    int fd; /* owns */
    ev_io io;
    unsigned io_events;
    ev_timer timer;   /* idle: re-armed on every byte read or written */
    struct buf in;    /* owns: request heads */
    struct abuf out;  /* owns: the response being sent */
    size_t out_off;   /* bytes of <out> already sent */
    bool peer_eof;    /* read nothing more */
    bool close_after; /* close once <out> is sent; read no more requests */
    bool lingering;   /* FIN sent: discarding input until EOF */
    size_t discarded; /* input bytes discarded while lingering */
    bool closing;     /* watchers stopped; freed when the current callback returns */
    /* A purge being done (its files unlinked off the loop): answered when it is, and until then
     * nothing more is read and the idle timer does not run (the wait is ours, not the peer's). */
    struct cache_purge *purge;
    bool purge_api;          /* answered in JSON (/api/purge), else as text (PURGE) */
    bool purge_keep_alive;   /* of the request */
    int purge_version_minor; /* of the request */
    char purge_what[1400];   /* "[ident] path" for the log (a longer path is cut) */
    char peer[64];
    struct admin_conn *next, **pprev; /* all live admin conns */
};

static ev_io listener;
static bool listening;
static ev_timer backoff;
static struct admin_conn *conns;
static unsigned next_id;

/* Queues the whole response to the current request. <body> is borrowed. */
static void respond(struct admin_conn *c, const struct h1_req *req, int status, const char *ctype,
                    const char *extra, const char *body, size_t body_len, bool head_only)
{
    ASSERT(c->out.len == 0);
    if (req == NULL || !req->keep_alive)
        c->close_after = true;
    ab_printf(&c->out,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-store\r\n%s",
              status, h1_reason(status), ctype, body_len, extra != NULL ? extra : "");
    if (c->close_after)
        ab_puts(&c->out, "Connection: close\r\n");
    else if (req->version_minor == 0)
        ab_puts(&c->out, "Connection: keep-alive\r\n");
    ab_puts(&c->out, "\r\n");
    if (!head_only)
        ab_append(&c->out, body, body_len);
    c->out_off = 0;
}

/* A short formatted answer of type <ctype> (at most 1 KiB: longer is cut). */
static void respond_vfmt(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *ctype, const char *extra, bool head_only, const char *fmt,
                         va_list ap) __attribute__((format(printf, 7, 0)));
static void respond_vfmt(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *ctype, const char *extra, bool head_only, const char *fmt,
                         va_list ap)
{
    char body[1024];
    int n = vsnprintf(body, sizeof(body), fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1;
    respond(c, req, status, ctype, extra, body, len, head_only);
}

static void respond_text(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *extra, bool head_only, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void respond_text(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *extra, bool head_only, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    respond_vfmt(c, req, status, "text/plain; charset=utf-8", extra, head_only, fmt, ap);
    va_end(ap);
}

/* A short JSON answer (a POST's: never to a HEAD). */
static void respond_json(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void respond_json(struct admin_conn *c, const struct h1_req *req, int status,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    respond_vfmt(c, req, status, "application/json", NULL, false, fmt, ap);
    va_end(ap);
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/*
 * The value of query parameter <name> in <q>[0..len) (without the '?'), percent-decoded into
 * <out>. Returns 1 when found and valid, 0 when absent, -1 when empty, too long or holding
 * control bytes, spaces or a bad escape (a cache identifier never does).
 */
static int query_param(const char *q, size_t len, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    size_t i = 0;
    while (i < len) {
        const char *p = q + i;
        const char *amp = memchr(p, '&', len - i);
        size_t plen = amp != NULL ? (size_t)(amp - p) : len - i;
        i += plen + 1;
        if (plen <= nlen || memcmp(p, name, nlen) != 0 || p[nlen] != '=')
            continue;
        size_t o = 0;
        for (size_t k = nlen + 1; k < plen; k++) {
            int ch = (unsigned char)p[k];
            if (ch == '%') {
                int hi = k + 2 < plen ? hexval(p[k + 1]) : -1;
                int lo = k + 2 < plen ? hexval(p[k + 2]) : -1;
                if (hi < 0 || lo < 0)
                    return -1;
                ch = hi * 16 + lo;
                k += 2;
            }
            if (ch <= 0x20 || ch == 0x7f || o + 1 >= outlen)
                return -1;
            out[o++] = (char)ch;
        }
        if (o == 0)
            return -1;
        out[o] = '\0';
        return 1;
    }
    return 0;
}

static void admin_drive(struct admin_conn *c);
static void admin_free(struct admin_conn *c);

/* Purge <c> waited for is done: its answer, and the conn goes on. */
static void on_purged(void *arg, int n)
{
    struct admin_conn *c = arg;
    CHECK_OBJ(c, ADMIN_MAGIC);
    c->purge = NULL;
    struct h1_req req;
    memset(&req, 0, sizeof(req));
    req.keep_alive = c->purge_keep_alive;
    req.version_minor = c->purge_version_minor;
    if (n < 0) {
        log_warn("admin#%u %s: %s %s: %s", c->id, c->peer, c->purge_api ? "purge" : "PURGE",
                 c->purge_what, strerror(-n));
        respond_text(c, &req, 500, NULL, false, "purge failed: %s\n", strerror(-n));
    } else {
        log_info("admin#%u %s: %s %s: %d chunks removed", c->id, c->peer,
                 c->purge_api ? "purge" : "PURGE", c->purge_what, n);
        if (c->purge_api)
            respond_json(c, &req, 200, "{\"removed\": %d}\n", n);
        else
            respond_text(c, &req, 200, NULL, false, "purged %d\n", n);
    }
    ev_timer_again(actx->loop, &c->timer);
    admin_drive(c);
    if (c->closing)
        admin_free(c); /* (called from the cache's completion: nothing above uses <c>) */
}

/* Purges object <path> of cache identifier <ident>; answered when its files are gone. */
static void purge_start(struct admin_conn *c, const struct h1_req *req, bool api, const char *ident,
                        const char *path, size_t plen, const char *what)
{
    size_t klen;
    char *key = cache_key_build(ident, path, plen, &klen);
    c->purge_api = api;
    c->purge_keep_alive = req->keep_alive;
    c->purge_version_minor = req->version_minor;
    snprintf(c->purge_what, sizeof(c->purge_what), "%s", what);
    c->purge = cache_purge(actx->cache, key, klen, on_purged, c);
    free(key);
    ev_timer_stop(actx->loop, &c->timer);
}

static void handle_purge(struct admin_conn *c, const char *h, const struct h1_req *req)
{
    const char *path = req->path_only.len > 0 ? h + req->path_only.off : "/";
    size_t plen = req->path_only.len > 0 ? req->path_only.len : 1;
    const char *q = h + req->path.off + req->path_only.len;
    size_t qlen = req->path.len - req->path_only.len;
    if (qlen > 0 && q[0] == '?') {
        q++;
        qlen--;
    }
    char ident[ADMIN_IDENT_MAX];
    int found = query_param(q, qlen, "identifier", ident, sizeof(ident));
    if (found < 0) {
        respond_text(c, req, 400, NULL, false, "bad ?identifier= value\n");
        return;
    }
    if (found == 0) {
        struct h1_authority auth;
        if (h1_authority_parse(h + req->authority.off, req->authority.len, &auth) < 0) {
            respond_text(c, req, 400, NULL, false, "bad Host\n");
            return;
        }
        /* With steam_user_agent = any the User-Agent alone picks Steam whatever the Host: then
         * only on the admin's own Host (a rebound name names its own objects, never a
         * service's). With yes it counts only for Steam's own hosts, which no page rebinds. */
        struct adminauth_policy pol = admin_policy();
        bool ua_ok = g_cfg->steam_user_agent != CFG_STEAM_UA_ANY ||
                     adminauth_host_is_admin(&pol, h + req->authority.off, req->authority.len);
        const struct h1_field *ua =
            ua_ok ? h1_find(h, req->fields, req->n_fields, "User-Agent") : NULL;
        const struct domains *doms = g_domains;
        struct admit_result adm;
        admit_host(g_cfg, doms, &auth, ua ? h + ua->value.off : NULL, ua ? ua->value.len : 0,
                   ADMIT_PURGE, &adm);
        if (adm.reason == ADMIT_R_IP_LITERAL) {
            /* As for a request: no object is served or stored under it (see admit.h). */
            respond_text(c, req, 404, NULL, false,
                         "host %s is an IP address (allow_private = no): no cache identifier; "
                         "give ?identifier=NAME\n",
                         auth.host);
            return;
        }
        if (!adm.allow) {
            respond_text(c, req, 404, NULL, false,
                         "host %s is not in the cache-domains lists (allow_unlisted = no): "
                         "no cache identifier; give ?identifier=NAME\n",
                         auth.host);
            return;
        }
        snprintf(ident, sizeof(ident), "%s", adm.ident);
    }
    peers_purge_all(ident, path, plen); /* (every node of a cluster: it may be anywhere) */
    if (actx->cache == NULL) {
        log_info("admin#%u %s: PURGE [%s] %.*s: 0 chunks removed (no cache)", c->id, c->peer, ident,
                 (int)plen, path);
        respond_text(c, req, 200, NULL, false, "purged 0\n");
        return;
    }
    char what[sizeof(c->purge_what)];
    snprintf(what, sizeof(what), "[%s] %.*s", ident, (int)plen, path);
    purge_start(c, req, false, ident, path, plen, what);
}

/* Whether a PURGE says its identifier in its query (then its Host is the admin's). */
static bool purge_names_identifier(const char *h, const struct h1_req *req)
{
    const char *q = h + req->path.off + req->path_only.len;
    size_t qlen = req->path.len - req->path_only.len;
    for (size_t i = 1; i < qlen; i++) /* "identifier=" at the start of a parameter */
        if ((q[i - 1] == '?' || q[i - 1] == '&') && qlen - i >= 11 &&
            memcmp(q + i, "identifier=", 11) == 0)
            return true;
    return false;
}

static bool path_is(const char *h, const struct h1_req *req, const char *p)
{
    size_t len = strlen(p);
    return req->path_only.len == len && memcmp(h + req->path_only.off, p, len) == 0;
}

static void field_of(const char *h, const struct h1_req *req, const char *name, const char **v,
                     size_t *len)
{
    const struct h1_field *f = h1_find(h, req->fields, req->n_fields, name);
    *v = f != NULL ? h + f->value.off : NULL;
    *len = f != NULL ? f->value.len : 0;
}

/* adminauth's checks for the request (the configuration of this moment: the token, the names
 * and admin_public change on reload). Returns true when it may go on; otherwise the refusal is
 * queued and logged. */
static bool admitted(struct admin_conn *c, const char *h, const struct h1_req *req, bool read_only,
                     bool host_is_object)
{
    struct adminauth_policy pol = admin_policy();
    struct adminauth_req r = {.read_only = read_only, .host_is_object = host_is_object};
    r.host = req->authority.len > 0 ? h + req->authority.off : NULL;
    r.host_len = req->authority.len;
    field_of(h, req, "Authorization", &r.authorization, &r.authorization_len);
    field_of(h, req, "Cookie", &r.cookie, &r.cookie_len);
    field_of(h, req, "Origin", &r.origin, &r.origin_len);
    field_of(h, req, "Sec-Fetch-Site", &r.fetch_site, &r.fetch_site_len);
    enum adminauth_verdict v = adminauth_check(&pol, &r);
    if (v == ADMINAUTH_OK)
        return true;
    int status = adminauth_status(v);
    log_info("admin#%u %s: %.*s %.*s refused (%d): %s", c->id, c->peer, (int)req->method_s.len,
             h + req->method_s.off, (int)req->path.len, h + req->path.off, status,
             adminauth_reason(v));
    if (status == 401 && read_only && path_is(h, req, "/")) {
        /* The page itself holds no data: it asks for the token and keeps it as a cookie. */
        respond(c, req, 401, "text/html; charset=utf-8",
                "WWW-Authenticate: Bearer realm=\"cacheparty admin\"\r\n" ADMIN_PAGE_HEADERS,
                (const char *)dashboard_html, dashboard_html_len, req->method == H1_M_HEAD);
        return false;
    }
    respond_text(c, req, status,
                 status == 401 ? "WWW-Authenticate: Bearer realm=\"cacheparty admin\"\r\n" : NULL,
                 req->method == H1_M_HEAD, "%s\n", adminauth_reason(v));
    return false;
}

/* The request's query, without its '?'. */
static void query_of(const char *h, const struct h1_req *req, const char **q, size_t *len)
{
    *q = h + req->path.off + req->path_only.len;
    *len = req->path.len - req->path_only.len;
    if (*len > 0 && (*q)[0] == '?') {
        (*q)++;
        (*len)--;
    }
}

/* One query value into a buffer of ADMIN_INV_VALUE_MAX (owned by the caller): 1 found, 0 absent,
 * -1 bad (then answered 400). */
static int inv_param(struct admin_conn *c, const struct h1_req *req, const char *q, size_t qlen,
                     const char *name, char *out)
{
    int rc = query_param(q, qlen, name, out, ADMIN_INV_VALUE_MAX);
    if (rc < 0)
        respond_text(c, req, 400, NULL, req->method == H1_M_HEAD, "bad ?%s= value\n", name);
    return rc;
}

/* The inventory's GETs: /api/inventory and /api/objects. */
static void handle_inventory(struct admin_conn *c, const char *h, const struct h1_req *req,
                             bool head)
{
    if (actx->cache == NULL) {
        respond_text(c, req, 503, NULL, head, "no cache\n");
        return;
    }
    const char *q;
    size_t qlen;
    query_of(h, req, &q, &qlen);
    char *service = xmalloc(ADMIN_INV_VALUE_MAX), *prefix = xmalloc(ADMIN_INV_VALUE_MAX);
    struct abuf body = {NULL, 0, 0};
    int rs = inv_param(c, req, q, qlen, "service", service), rp = 0;
    if (rs >= 0 && path_is(h, req, "/api/inventory")) {
        api_inventory(&body, rs > 0 ? service : NULL);
        respond(c, req, 200, "application/json", NULL, body.p, body.len, head);
    } else if (rs >= 0 && (rp = inv_param(c, req, q, qlen, "prefix", prefix)) >= 0) {
        if (rs == 0 || rp == 0) {
            respond_text(c, req, 400, NULL, head, "give ?service=S&prefix=P\n");
        } else {
            int status = api_objects(&body, service, prefix);
            respond(c, req, status, "application/json", NULL, body.p, body.len, head);
        }
    }
    ab_free(&body);
    free(service);
    free(prefix);
}

/* POST /api/purge?service=S[&prefix=P | &path=P]: a group, a whole service, or one object. */
static void handle_api_purge(struct admin_conn *c, const char *h, const struct h1_req *req)
{
    if (actx->cache == NULL) {
        respond_text(c, req, 503, NULL, false, "no cache\n");
        return;
    }
    const char *q;
    size_t qlen;
    query_of(h, req, &q, &qlen);
    char *service = xmalloc(ADMIN_INV_VALUE_MAX), *prefix = xmalloc(ADMIN_INV_VALUE_MAX),
         *path = xmalloc(ADMIN_INV_VALUE_MAX);
    int rs = inv_param(c, req, q, qlen, "service", service), rp = 0, ro = 0;
    if (rs >= 0)
        rp = inv_param(c, req, q, qlen, "prefix", prefix);
    if (rs >= 0 && rp >= 0)
        ro = inv_param(c, req, q, qlen, "path", path);
    if (rs < 0 || rp < 0 || ro < 0) {
        /* answered */
    } else if (rs == 0 || (rp > 0 && ro > 0)) {
        respond_text(c, req, 400, NULL, false,
                     "give ?service=S, with &prefix=P for one group or &path=P for one object\n");
    } else if (ro > 0) {
        char what[sizeof(c->purge_what)];
        snprintf(what, sizeof(what), "[%s] %s", service, path);
        purge_start(c, req, true, service, path, strlen(path), what);
    } else {
        uint64_t chunks = 0;
        int n = cache_inv_purge(actx->cache, service, rp > 0 ? prefix : NULL, &chunks);
        log_info("admin#%u %s: purge [%s] %s: %d groups, %llu chunk files%s", c->id, c->peer,
                 service, rp > 0 ? prefix : "(every group)", n < 0 ? 0 : n,
                 (unsigned long long)chunks, n == -EBUSY ? " (refused: purges are queued)" : "");
        if (n == -EBUSY)
            respond_text(c, req, 503, "Retry-After: 5\r\n", false,
                         "%u purges are queued: try again when one is done\n", CACHE_INV_PURGES);
        else if (n == 0)
            respond_text(c, req, 404, NULL, false, "nothing stored in that group\n");
        else
            respond_json(c, req, 202, "{\"groups\": %d, \"chunks\": %llu}\n", n,
                         (unsigned long long)chunks);
    }
    free(service);
    free(prefix);
    free(path);
}

/* Answers the request held in <h> (the input buffer) and parsed into <req>. */
static void handle_request(struct admin_conn *c, const char *h, const struct h1_req *req)
{
    /* A request body is never read: the next request could not be found after it. */
    if (req->has_body || req->has_te)
        c->close_after = true;
    bool get = req->method == H1_M_GET || req->method == H1_M_HEAD;
    bool head = req->method == H1_M_HEAD;
    bool purge = req->method == H1_M_OTHER && req->method_s.len == 5 &&
                 memcmp(h + req->method_s.off, "PURGE", 5) == 0;
    bool post = req->method == H1_M_OTHER && req->method_s.len == 4 &&
                memcmp(h + req->method_s.off, "POST", 4) == 0;
    bool api = path_is(h, req, "/api/live") || path_is(h, req, "/api/history");
    bool inv = path_is(h, req, "/api/inventory") || path_is(h, req, "/api/objects");
    bool api_purge = path_is(h, req, "/api/purge");
    bool page = path_is(h, req, "/") || path_is(h, req, "/static/chart.js");
    bool known = path_is(h, req, "/metrics") || path_is(h, req, "/status") || api || inv || page;

    if (req->method == H1_M_CONNECT)
        c->close_after = true;
    if (!admitted(c, h, req, get, purge && !purge_names_identifier(h, req)))
        return;
    if (purge) {
        handle_purge(c, h, req);
    } else if (post && api_purge) {
        handle_api_purge(c, h, req);
    } else if (api_purge) {
        respond_text(c, req, 405, "Allow: POST\r\n", head, "method not allowed: POST only\n");
    } else if (get && inv) {
        handle_inventory(c, h, req, head);
    } else if (get && path_is(h, req, "/")) {
        respond(c, req, 200, "text/html; charset=utf-8", ADMIN_PAGE_HEADERS,
                (const char *)dashboard_html, dashboard_html_len, head);
    } else if (get && page) {
        chart_js_load();
        if (chart_js.body != NULL)
            respond(c, req, 200, "text/javascript; charset=utf-8",
                    "X-Content-Type-Options: nosniff\r\n", chart_js.body, chart_js.len, head);
        else
            respond_text(c, req, 404, NULL, head,
                         "no chart library: install Debian's libjs-chart.js\n");
    } else if (get && api) {
        struct abuf body = {NULL, 0, 0};
        if (path_is(h, req, "/api/live"))
            api_live(&body, ev_now(actx->loop));
        else
            api_history(&body);
        respond(c, req, 200, "application/json", NULL, body.p, body.len, head);
        ab_free(&body);
    } else if (get && known) {
        struct abuf body = {NULL, 0, 0};
        struct mw w;
        bool prom = path_is(h, req, "/metrics");
        mw_begin(&w, &body, prom ? MFMT_PROM : MFMT_JSON);
        stats_export(on_export_family, on_export_sample, &w);
        export_peers(&w);
        mw_finish(&w);
        respond(c, req, 200, prom ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
                NULL, body.p, body.len, head);
        ab_free(&body);
    } else if (get) {
        respond_text(c, req, 404, NULL, head, "not found: try /metrics, /status or PURGE\n");
    } else {
        respond_text(c, req, 405, known ? "Allow: GET, HEAD\r\n" : "Allow: GET, HEAD, PURGE\r\n",
                     false, "method not allowed\n");
    }
}

/* Parses and answers one request from <in>. Returns true if a response was queued. */
static bool admin_step(struct admin_conn *c)
{
    size_t len = buf_len(&c->in);
    if (len == 0)
        return false;
    struct h1_req req;
    const char *why = NULL;
    ssize_t n = h1_req_parse(c->in.pos, len, &req, &why);
    if (n == 0 && len >= ADMIN_INBUF) {
        n = -431;
        why = "head too large";
    }
    if (n == 0)
        return false;
    if (n < 0) {
        log_info("admin#%u %s: bad request (%d %s)", c->id, c->peer, (int)-n, why ? why : "");
        c->close_after = true; /* parse nothing more */
        buf_reset(&c->in);
        respond_text(c, NULL, (int)-n, NULL, false, "%s\n", h1_reason((int)-n));
        return true;
    }
    handle_request(c, c->in.pos, &req);
    buf_consume(&c->in, (size_t)n);
    return true;
}

static void admin_close(struct admin_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    ev_io_stop(actx->loop, &c->io);
    ev_timer_stop(actx->loop, &c->timer);
}

static void admin_free(struct admin_conn *c)
{
    CHECK_OBJ(c, ADMIN_MAGIC);
    if (c->purge != NULL)
        cache_purge_forget(c->purge); /* (it goes on) */
    ev_io_stop(actx->loop, &c->io);
    ev_timer_stop(actx->loop, &c->timer);
    close(c->fd);
    buf_free(&c->in);
    ab_free(&c->out);
    *c->pprev = c->next;
    if (c->next != NULL)
        c->next->pprev = c->pprev;
    n_conns--;
    log_debug("admin#%u %s: closed", c->id, c->peer);
    c->magic = 0;
    free(c);
}

/* Writes what it can of <out>. Returns false if the connection failed (and is closing). */
static bool admin_flush(struct admin_conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n < 0) {
            log_debug("admin#%u %s: send: %s", c->id, c->peer, strerror(errno));
            admin_close(c);
            return false;
        }
        c->out_off += (size_t)n;
        ev_timer_again(actx->loop, &c->timer);
    }
    if (c->out.len > 0) {
        ab_free(&c->out); /* between requests an idle conn holds no output memory */
        c->out_off = 0;
    }
    return true;
}

/* The one place that decides watcher interest: write while output is pending, read while there
 * is room for input and more may come. */
static void admin_update_io(struct admin_conn *c)
{
    unsigned ev = 0;
    if (c->closing)
        return;
    if (c->out_off < c->out.len)
        ev |= EV_WRITE;
    if (c->lingering || (!c->peer_eof && !c->close_after && c->purge == NULL &&
                         (buf_room(&c->in) > 0 || c->in.pos > c->in.start)))
        ev |= EV_READ;
    if (ev == c->io_events)
        return;
    ev_io_stop(actx->loop, &c->io);
    c->io_events = ev;
    if (ev != 0) {
        ev_io_set(&c->io, c->fd, (int)ev);
        ev_io_start(actx->loop, &c->io);
    }
}

/* Writes, answers the requests buffered (one at a time), decides to close. */
static void admin_drive(struct admin_conn *c)
{
    for (;;) {
        if (!admin_flush(c))
            return;
        if (c->out.len > 0)
            break; /* the client is slow: wait for EV_WRITE */
        if (c->purge != NULL)
            break; /* on_purged answers and drives it again */
        if (c->close_after) {
            if (!c->peer_eof && shutdown(c->fd, SHUT_WR) == 0) {
                c->lingering = true;
                c->timer.repeat = ADMIN_LINGER_TIMEOUT;
                ev_timer_again(actx->loop, &c->timer);
                break;
            }
            admin_close(c);
            return;
        }
        if (admin_step(c))
            continue; /* a response was queued: write it */
        if (c->peer_eof) {
            admin_close(c); /* no complete request left and nothing more will come */
            return;
        }
        break;
    }
    admin_update_io(c);
}

static void on_admin_io(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct admin_conn *c = container_of(w, struct admin_conn, io);
    CHECK_OBJ(c, ADMIN_MAGIC);
    if ((revents & EV_READ) && c->lingering) {
        char scratch[4096];
        ssize_t n;
        do {
            n = recv(c->fd, scratch, sizeof(scratch), 0);
        } while (n < 0 && errno == EINTR);
        if (n > 0)
            c->discarded += (size_t)n;
        if (n == 0 || (n < 0 && errno != EAGAIN) || c->discarded > ADMIN_LINGER_MAX)
            admin_close(c);
    } else if ((revents & EV_READ) && !c->peer_eof && !c->close_after) {
        ssize_t n = buf_recv(&c->in, c->fd);
        if (n > 0) {
            ev_timer_again(actx->loop, &c->timer);
        } else if (n == 0) {
            c->peer_eof = true;
        } else if (n != -EAGAIN) {
            log_debug("admin#%u %s: recv: %s", c->id, c->peer, strerror((int)-n));
            admin_close(c);
        }
    }
    if (!c->closing && !c->lingering)
        admin_drive(c);
    /* The bottom of the stack: nothing above still uses <c>. */
    if (c->closing)
        admin_free(c);
}

static void on_admin_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct admin_conn *c = container_of(w, struct admin_conn, timer);
    CHECK_OBJ(c, ADMIN_MAGIC);
    log_debug("admin#%u %s: idle timeout", c->id, c->peer);
    admin_close(c);
    admin_free(c);
}

static void admin_conn_new(int fd, const struct sockaddr_storage *peer)
{
    struct admin_conn *c = xcalloc(1, sizeof(*c));
    c->magic = ADMIN_MAGIC;
    c->id = ++next_id;
    c->fd = fd;
    util_addr_text(peer, c->peer, sizeof(c->peer));
    buf_alloc(&c->in, ADMIN_INBUF);
    ev_init(&c->io, on_admin_io);
    ev_init(&c->timer, on_admin_timeout);
    c->timer.repeat = ADMIN_IDLE_TIMEOUT;
    ev_timer_again(actx->loop, &c->timer);
    c->next = conns;
    if (conns != NULL)
        conns->pprev = &c->next;
    c->pprev = &conns;
    conns = c;
    n_conns++;
    log_debug("admin#%u %s: accepted", c->id, c->peer);
    admin_update_io(c);
}

/* ---- the listener -------------------------------------------------------------------------- */

static void on_backoff(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    if (listening)
        ev_io_start(loop, &listener);
}

static void on_admin_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    for (int i = 0; i < ADMIN_MAX_CONNS; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(w->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                return;
            log_warn("admin accept: %s", strerror(errno));
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Level-triggered: retrying at once would spin. */
                ev_io_stop(loop, &listener);
                ev_timer_stop(loop, &backoff);
                ev_timer_set(&backoff, ADMIN_EMFILE_BACKOFF, 0.);
                ev_timer_start(loop, &backoff);
            }
            return;
        }
        if (n_conns >= ADMIN_MAX_CONNS) {
            log_warn("admin: %u connections open: closing a new one", n_conns);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        admin_conn_new(fd, &peer);
    }
}

int admin_start(struct admin_ctx *ctx, const struct cfg_addr *addr, char *err, size_t errlen)
{
    ASSERT(!listening);
    actx = ctx;
    int fd = server_listen_socket(addr, ADMIN_BACKLOG, "admin_listen", err, errlen);
    if (fd < 0)
        return -1;
    on_loopback = util_addr_is_loopback(&addr->ss);
    ev_io_init(&listener, on_admin_accept, fd, EV_READ);
    ev_io_start(ctx->loop, &listener);
    ev_init(&backoff, on_backoff);
    listening = true;
    log_info("admin listening on %s", addr->text);
    return 0;
}

void admin_stop(void)
{
    free(chart_js.body);
    chart_js.body = NULL;
    chart_js.tried = false;
    if (!listening)
        return;
    listening = false;
    ev_timer_stop(actx->loop, &backoff);
    ev_io_stop(actx->loop, &listener);
    close(listener.fd);
    while (conns != NULL) {
        admin_close(conns);
        admin_free(conns);
    }
}

unsigned admin_conn_count(void)
{
    return n_conns;
}
