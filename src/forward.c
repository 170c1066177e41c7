/* SPDX-License-Identifier: BSD-2-Clause */
/* forward: pure builders of upstream requests and client response heads. See forward.h. */
#include "forward.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "objhead.h"
#include "util.h"

/* A bounded appender: once it overflows, every later append fails and the length is 0. */
struct out {
    char *p;
    size_t len;
    size_t cap;
    bool over;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->over || o->cap - o->len < n) {
        o->over = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void putf(struct out *o, const char *fmt, ...)
{
    char tmp[512]; /* formatted pieces are short: numbers, a hostname, a reason phrase */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        o->over = true;
    else
        put(o, tmp, (size_t)n);
}

static void put_field(struct out *o, const char *buf, const struct h1_field *f)
{
    put(o, buf + f->name.off, f->name.len);
    put(o, ": ", 2);
    put(o, buf + f->value.off, f->value.len);
    put(o, "\r\n", 2);
}

/*
 * lancache's debug fields (add_header X-Upstream-Status $upstream_status, X-Upstream-Response-Time
 * $upstream_response_time): only on an answer made from an origin answer (<upstream_status>
 * non-zero) and, as add_header, only for the statuses it decorates. nginx writes its headers
 * before the origin's answer has ended, so $upstream_response_time is always "-" there; so here.
 */
static void put_upstream(struct out *o, int status, int upstream_status)
{
    static const int decorated[] = {200, 201, 204, 206, 301, 302, 303, 304, 307, 308};
    if (upstream_status < 100 || upstream_status > 999)
        return;
    for (size_t i = 0; i < sizeof(decorated) / sizeof(decorated[0]); i++) {
        if (decorated[i] == status) {
            putf(o, "X-Upstream-Status: %d\r\nX-Upstream-Response-Time: -\r\n", upstream_status);
            return;
        }
    }
}

/* X-LanCache-Processed-By: <v> (a chain may be longer than what putf formats) */
static void put_processed_by(struct out *o, const char *v)
{
    puts_(o, "X-LanCache-Processed-By: ");
    puts_(o, v);
    puts_(o, "\r\n");
}

static size_t out_done(struct out *o)
{
    return o->over ? 0 : o->len;
}

static bool name_is(const char *buf, const struct h1_field *f, const char *name)
{
    return util_ieq(buf + f->name.off, f->name.len, name);
}

static const char *const always_forwarded[] = {"User-Agent", "Range", "Accept"};
static const char *const conditionals[] = {"If-Match", "If-None-Match", "If-Modified-Since",
                                           "If-Unmodified-Since", "If-Range"};

size_t fwd_request_head(const char *hbuf, const struct h1_req *req, const struct h1_authority *auth,
                        const struct fwd_req_opts *o, char *out, size_t cap)
{
    struct out w = {out, 0, cap, false};
    put(&w, hbuf + req->method_s.off, req->method_s.len);
    put(&w, " ", 1);
    if (req->path_only.len == 0) /* absolute-form without a path: "/" (then any query) */
        put(&w, "/", 1);
    put(&w, hbuf + req->path.off, req->path.len);
    puts_(&w, " HTTP/1.1\r\nHost: ");
    puts_(&w, auth->ident);
    puts_(&w, "\r\n");

    bool seen_loop_hdr = false;
    for (unsigned i = 0; i < req->n_fields; i++) {
        const struct h1_field *f = &req->fields[i];
        bool fwd = false;
        for (size_t k = 0; k < ARRAY_SIZE(always_forwarded) && !fwd; k++)
            fwd = name_is(hbuf, f, always_forwarded[k]);
        for (size_t k = 0; o->pass_conditionals && k < ARRAY_SIZE(conditionals) && !fwd; k++)
            fwd = name_is(hbuf, f, conditionals[k]);
        if (!fwd && o->pass_authorization)
            fwd = name_is(hbuf, f, "Authorization") || name_is(hbuf, f, "Cookie");
        if (fwd) {
            put_field(&w, hbuf, f);
        } else if (name_is(hbuf, f, "X-LanCache-Processed-By") && !seen_loop_hdr) {
            /* Keep the chain: every earlier cache's name, then ours, in one field. */
            seen_loop_hdr = true;
            puts_(&w, "X-LanCache-Processed-By: ");
            bool first = true;
            for (unsigned j = i; j < req->n_fields; j++) {
                const struct h1_field *g = &req->fields[j];
                if (!name_is(hbuf, g, "X-LanCache-Processed-By") || g->value.len == 0)
                    continue;
                if (!first)
                    puts_(&w, ", ");
                put(&w, hbuf + g->value.off, g->value.len);
                first = false;
            }
            if (!first)
                puts_(&w, ", ");
            puts_(&w, o->hostname);
            puts_(&w, "\r\n");
        }
    }
    if (!seen_loop_hdr)
        putf(&w, "X-LanCache-Processed-By: %s\r\n", o->hostname);
    puts_(&w, "\r\n");
    return out_done(&w);
}

/* Whether <s>[0..len) starts with <prefix> (ASCII case-insensitive). */
static bool has_prefix(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && strncasecmp(s, prefix, n) == 0;
}

/* What a fill never forwards (fwd_fill_fields, forward.h says why), by name and by prefix. */
static const char *const never_filled[] = {
    /* hop-by-hop (and whatever a Connection field names: h1_is_hop_by_hop); an upgrade's
     * handshake fields (Sec-WebSocket-* too): an upgrade is never forwarded */
    "Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade", "HTTP2-Settings",
    /* the fill's own: a GET without a body, its Range, fields written by fetch */
    "Host", "Content-Length", "Range", "User-Agent", "X-LanCache-Processed-By",
    /* personal, or one encoding for every client */
    "Authorization", "Cookie", "Accept-Encoding",
    /* what steers where or how the request is handled on the way */
    "Forwarded", "X-Original-URL", "X-Rewrite-URL", "X-HTTP-Method-Override", "X-HTTP-Method",
    "X-Method-Override", "Max-Forwards", "Expect"};
static const char *const never_filled_prefix[] = {
    "If-", "Proxy-", "X-Forwarded-", "Sec-WebSocket-",
    "X-Cacheparty-" /* a cluster's own: a peer credential is for the node it was sent to */};

bool fwd_fill_forwards(const char *name, size_t len)
{
    for (size_t k = 0; k < ARRAY_SIZE(never_filled); k++)
        if (util_ieq(name, len, never_filled[k]))
            return false;
    for (size_t k = 0; k < ARRAY_SIZE(never_filled_prefix); k++)
        if (has_prefix(name, len, never_filled_prefix[k]))
            return false;
    return true;
}

size_t fwd_fill_fields(const char *hbuf, const struct h1_req *req, char *out, size_t cap,
                       unsigned *dropped)
{
    size_t len = 0;
    *dropped = 0;
    for (unsigned i = 0; i < req->n_fields; i++) {
        const struct h1_field *f = &req->fields[i];
        if (!fwd_fill_forwards(hbuf + f->name.off, f->name.len) ||
            h1_is_hop_by_hop(hbuf, req->fields, req->n_fields, f))
            continue;
        size_t n = (size_t)f->name.len + 2 + f->value.len + 2;
        if (cap - len < n) {
            (*dropped)++;
            continue;
        }
        memcpy(out + len, hbuf + f->name.off, f->name.len);
        len += f->name.len;
        memcpy(out + len, ": ", 2);
        len += 2;
        memcpy(out + len, hbuf + f->value.off, f->value.len);
        len += f->value.len;
        memcpy(out + len, "\r\n", 2);
        len += 2;
    }
    return len;
}

size_t fwd_response_head(const char *rbuf, const struct h1_resp *resp,
                         const struct fwd_resp_opts *o, enum fwd_body *body, char *out, size_t cap)
{
    struct out w = {out, 0, cap, false};
    bool keep = o->keep_alive;
    bool keep_cl_field = false;

    switch (resp->framing) {
    case H1_BODY_NONE:
        *body = FWD_BODY_NONE;
        /* A HEAD or 304 answer's Content-Length describes the entity: pass it on. */
        keep_cl_field = o->head_req || resp->status == 304;
        break;
    case H1_BODY_LENGTH:
        *body = o->head_req ? FWD_BODY_NONE : FWD_BODY_LENGTH;
        break;
    case H1_BODY_CHUNKED:
    case H1_BODY_CLOSE:
        if (o->head_req) {
            *body = FWD_BODY_NONE;
        } else if (o->client_minor >= 1 && keep) {
            *body = FWD_BODY_CHUNKED;
        } else {
            *body = FWD_BODY_CLOSE;
            keep = false;
        }
        break;
    }

    putf(&w, "HTTP/1.1 %d %s\r\n", resp->status, h1_reason(resp->status));
    bool has_date = false;
    for (unsigned i = 0; i < resp->n_fields; i++) {
        const struct h1_field *f = &resp->fields[i];
        if (h1_is_hop_by_hop(rbuf, resp->fields, resp->n_fields, f))
            continue;
        has_date = has_date || name_is(rbuf, f, "Date");
        if (name_is(rbuf, f, "Content-Length") && !keep_cl_field)
            continue;
        if (name_is(rbuf, f, "X-LanCache-Processed-By") ||
            name_is(rbuf, f, "X-Upstream-Cache-Status") || name_is(rbuf, f, "X-Upstream-Status") ||
            name_is(rbuf, f, "X-Upstream-Response-Time") ||
            (o->send_age && name_is(rbuf, f, "Age")) || (o->hide_etag && name_is(rbuf, f, "ETag")))
            continue;
        put_field(&w, rbuf, f);
    }
    if (!has_date && o->date != NULL) /* RFC 9110 §6.6.1: a recipient with a clock adds one */
        putf(&w, "Date: %s\r\n", o->date);
    if (o->send_age)
        putf(&w, "Age: %lld\r\n", (long long)o->age);
    if (resp->framing == H1_BODY_LENGTH)
        putf(&w, "Content-Length: %llu\r\n", (unsigned long long)resp->content_length);
    if (*body == FWD_BODY_CHUNKED)
        puts_(&w, "Transfer-Encoding: chunked\r\n");
    if (!keep)
        puts_(&w, "Connection: close\r\n");
    else if (o->client_minor == 0)
        puts_(&w, "Connection: keep-alive\r\n");
    put_processed_by(&w, o->hostname);
    put_upstream(&w, resp->status, o->upstream_status);
    putf(&w, "X-Upstream-Cache-Status: %s\r\n\r\n", o->cache_status);
    return out_done(&w);
}

size_t fwd_cache_response(const struct fwd_cache_head *h, bool head_req, char *out, size_t cap)
{
    struct out w = {out, 0, cap, false};
    putf(&w, "HTTP/1.1 %d %s\r\n", h->status, h1_reason(h->status));
    bool short_body = h->status == 412 || h->status == 416; /* our text, not the object */
    bool no_content = short_body || h->status == 304;       /* no representation follows */
    bool multipart = h->status == 206 && h->boundary != NULL;
    if (h->head != NULL)
        putf(&w, "Date: %s\r\n", h->head->date);
    else if (h->date != NULL)
        putf(&w, "Date: %s\r\n", h->date);
    if (h->age && h->head != NULL)
        putf(&w, "Age: %lld\r\n", (long long)objhead_age(h->head, h->now));
    if (multipart)
        putf(&w, "Content-Type: multipart/byteranges; boundary=%s\r\n", h->boundary);
    else if (h->content_type[0] != '\0' && !no_content)
        putf(&w, "Content-Type: %s\r\n", h->content_type);
    if (h->etag[0] != '\0')
        putf(&w, "ETag: %s\r\n", h->etag);
    if (h->last_modified[0] != '\0')
        putf(&w, "Last-Modified: %s\r\n", h->last_modified);
    puts_(&w, "Accept-Ranges: bytes\r\n");
    switch (h->status) {
    case 206:
        if (multipart) { /* each part carries its Content-Range */
            putf(&w, "Content-Length: %llu\r\n", (unsigned long long)h->multipart_len);
            break;
        }
        putf(&w, "Content-Range: bytes %llu-%llu/%llu\r\nContent-Length: %llu\r\n",
             (unsigned long long)h->start, (unsigned long long)h->end, (unsigned long long)h->total,
             (unsigned long long)(h->end - h->start + 1));
        break;
    case 416:
        putf(&w, "Content-Range: bytes */%llu\r\n", (unsigned long long)h->total);
        /* fall through */
    case 412:
        putf(&w, "Content-Type: text/plain\r\nContent-Length: %zu\r\n",
             fwd_local_body_len(h->status, false));
        break;
    case 304:
        break;
    default:
        putf(&w, "Content-Length: %llu\r\n", (unsigned long long)h->total);
        break;
    }
    if (h->head != NULL && !short_body && !w.over) { /* (412, 416: our text, not the object) */
        enum objhead_omit omit = no_content         ? OBJHEAD_NO_CONTENT
                                 : h->status == 206 ? OBJHEAD_PART
                                                    : OBJHEAD_ALL;
        size_t n = objhead_write(h->head, omit, w.p + w.len, w.cap - w.len);
        if (n == SIZE_MAX)
            w.over = true;
        else
            w.len += n;
    }
    if (!h->keep_alive)
        puts_(&w, "Connection: close\r\n");
    else if (h->client_minor == 0)
        puts_(&w, "Connection: keep-alive\r\n");
    put_processed_by(&w, h->hostname);
    put_upstream(&w, h->status, h->upstream_status);
    putf(&w, "X-Upstream-Cache-Status: %s\r\n\r\n", h->cache_status);
    if (short_body && !head_req)
        putf(&w, "%d %s\n", h->status, h1_reason(h->status));
    return out_done(&w);
}

size_t fwd_local_body_len(int status, bool head_req)
{
    if (head_req || status == 204 || status == 304 || status < 200)
        return 0;
    return (size_t)snprintf(NULL, 0, "%d %s\n", status, h1_reason(status));
}

size_t fwd_local_response(int status, const char *hostname, const char *date, bool keep_alive,
                          bool head_req, const char *extra, char *out, size_t cap)
{
    struct out w = {out, 0, cap, false};
    char body[64];
    bool no_body = status == 204 || status == 304 || status < 200;
    int blen = no_body ? 0 : snprintf(body, sizeof(body), "%d %s\n", status, h1_reason(status));
    putf(&w, "HTTP/1.1 %d %s\r\n", status, h1_reason(status));
    if (date != NULL)
        putf(&w, "Date: %s\r\n", date);
    put_processed_by(&w, hostname);
    if (!no_body)
        putf(&w, "Content-Type: text/plain\r\nContent-Length: %d\r\n", blen);
    if (extra != NULL)
        puts_(&w, extra);
    puts_(&w, keep_alive ? "" : "Connection: close\r\n");
    puts_(&w, "\r\n");
    if (!no_body && !head_req)
        put(&w, body, (size_t)blen);
    return out_done(&w);
}

bool fwd_is_loop(const char *hbuf, const struct h1_req *req, const char *hostname)
{
    for (unsigned i = 0; i < req->n_fields; i++) {
        const struct h1_field *f = &req->fields[i];
        if (name_is(hbuf, f, "X-LanCache-Processed-By") &&
            h1_list_has(hbuf + f->value.off, f->value.len, hostname))
            return true;
    }
    return false;
}
