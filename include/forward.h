/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * forward: the pure builders of the proxy's heads. No I/O, no ev.h.
 * - the upstream request, built afresh from parsed fields (never the client's bytes verbatim):
 *   method, path and query, Host, Range, User-Agent, Accept, Authorization, Cookie and If-* when
 *   asked, and X-LanCache-Processed-By with our hostname appended (chained caches detect loops);
 * - the client's end-to-end request fields a cache fill forwards (fwd_fill_fields);
 * - the client's response head from an origin's, hop-by-hop fields removed and our framing,
 *   Connection and X-LanCache-* fields set;
 * - the proxy's own short responses (errors, heartbeat), with our Date;
 * - loop detection.
 * Every builder writes at most <cap> bytes to <out> and returns the length, or 0 if it did not fit.
 */
#ifndef CACHEPARTY_FORWARD_H
#define CACHEPARTY_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

struct objhead;

struct fwd_req_opts {
    const char *hostname;    /* ours, appended to X-LanCache-Processed-By */
    bool pass_conditionals;  /* forward If-* (uncached pass-through) */
    bool pass_authorization; /* forward Authorization and Cookie (bypass) */
};

size_t fwd_request_head(const char *hbuf, const struct h1_req *req, const struct h1_authority *auth,
                        const struct fwd_req_opts *o, char *out, size_t cap);

/*
 * The fields of client request <req> (spans into <hbuf>) that a cache fill started by it
 * forwards, as "Name: value\r\n" lines in the order received, written to <out> (at most <cap>
 * bytes; the result is not NUL-terminated). Everything end-to-end goes, except what would make
 * a shared object depend on one client or steer how the request is handled on the way:
 * hop-by-hop fields (h1_is_hop_by_hop, and every Proxy-*) and an upgrade's handshake
 * (HTTP2-Settings, Sec-WebSocket-*: an upgrade is never forwarded), Host and Content-Length (a fill
 * is a GET of its own, without a body), Range (the fill's own), every If-* (fills are
 * unconditional), Authorization and Cookie (personal), Accept-Encoding (a fill asks for the
 * identity encoding, the one every client can read), Forwarded, X-Forwarded-*, X-Original-URL,
 * X-Rewrite-URL, X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, Max-Forwards and
 * Expect; and User-Agent and X-LanCache-Processed-By, which the fill writes itself (struct
 * origin_req). A field that does not fit in what is left of <cap> is dropped whole (a later,
 * shorter one may still fit); *dropped receives how many were. Returns the length written.
 */
#define FWD_FILL_FIELDS_MAX (8 * 1024)
size_t fwd_fill_fields(const char *hbuf, const struct h1_req *req, char *out, size_t cap,
                       unsigned *dropped);

/* Whether a fill forwards a request field named <name>[0..len) (fwd_fill_fields without the
 * fields a Connection field names). */
bool fwd_fill_forwards(const char *name, size_t len);

enum fwd_body { FWD_BODY_NONE, FWD_BODY_LENGTH, FWD_BODY_CHUNKED, FWD_BODY_CLOSE };

struct fwd_resp_opts {
    const char *hostname;     /* the X-LanCache-Processed-By value: ours[,incoming] */
    const char *cache_status; /* "HIT" | "MISS" | "BYPASS" */
    int client_minor;         /* client's HTTP/1.x minor version */
    bool head_req;            /* the client's request was HEAD */
    bool keep_alive;          /* we intend to keep the client connection */
    const char *date;         /* ours (IMF-fixdate), sent when the origin's answer has no Date;
                                 NULL: none. The origin's own Date is always passed on. */
    bool send_age;            /* an answer kept by the cache: the origin's Age is replaced by */
    int64_t age;              /* this one (RFC 9111 §4.2.3) */
    bool hide_etag;           /* a hide_etag rule: the origin's ETag is not passed on */
    int upstream_status;      /* the origin's status for X-Upstream-Status; 0: not from one */
};

/*
 * The client head for origin response <resp> (spans into <rbuf>). *body receives how the body is
 * framed to the client: LENGTH (Content-Length kept), CHUNKED (re-chunked for an HTTP/1.1 client
 * of an unknown-length body), CLOSE (unknown length: the connection closes after the body; the
 * head then says Connection: close, and the caller must close), or NONE.
 */
size_t fwd_response_head(const char *rbuf, const struct h1_resp *resp,
                         const struct fwd_resp_opts *o, enum fwd_body *body, char *out, size_t cap);

/*
 * The proxy's own response: <status>, Date: <date> (an IMF-fixdate, httpdate_format; NULL: no
 * Date), a short text body ("<status> <reason>\n") unless <head_req> or status 204/304,
 * Connection per <keep_alive>, and <extra> header lines (each ending in CRLF, may be NULL) such
 * as "Allow: GET, HEAD\r\n".
 */
size_t fwd_local_response(int status, const char *hostname, const char *date, bool keep_alive,
                          bool head_req, const char *extra, char *out, size_t cap);

/* A response served from the cache: status and the object's stored metadata. */
struct fwd_cache_head {
    int status;          /* 200, 206, 304, 412 or 416 */
    uint64_t total;      /* object length */
    uint64_t start, end; /* 206: the range sent (inclusive) */
    const char *etag;    /* "" when absent */
    const char *last_modified;
    const char *content_type;
    const struct objhead *head; /* borrowed: the stored fields and Date (NULL: none) */
    const char *date;           /* ours (IMF-fixdate), sent only when <head> is NULL */
    bool age;                   /* send Age (objhead_age at <now>) */
    int64_t now;
    const char *hostname;
    const char *cache_status; /* "HIT" | "MISS" | "BYPASS" (?nocache=) */
    int upstream_status;      /* the fill's origin status for X-Upstream-Status; 0: none */
    bool keep_alive;
    int client_minor;
    /* 206 of several parts: the multipart/byteranges boundary (borrowed; NULL: one range) and
     * the length of the whole multipart body (mp_body_length). */
    const char *boundary;
    uint64_t multipart_len;
};

/*
 * The head of a cached response: the stored Date, Age when asked, Content-Length (200: total,
 * 206: the range or the multipart body, 412 and 416: their short body), Content-Range (206 of one
 * range, 416), for a 206 of several parts Content-Type: multipart/byteranges with the boundary
 * instead of the stored type, validators, Accept-Ranges, the stored fields (objhead_write: on a
 * 304, 412 or 416 without Content-* ones, nor the stored Content-Type), Connection, X-LanCache-*.
 * A 412 or 416 response's body ("416 ...\n", fwd_local_body_len) is appended unless <head_req>.
 */
size_t fwd_cache_response(const struct fwd_cache_head *h, bool head_req, char *out, size_t cap);

/* The body length fwd_local_response() writes for <status>. */
size_t fwd_local_body_len(int status, bool head_req);

/* True if an X-LanCache-Processed-By field of <req> lists <hostname> (case-insensitive). */
bool fwd_is_loop(const char *hbuf, const struct h1_req *req, const char *hostname);

#endif
