/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * http1: the only user of http-parser. Pure: no I/O, no ev.h.
 *
 * - Requests: h1_req_parse() finds a complete head in a byte buffer, pre-validates it strictly
 *   (RFC 9112: CRLF only, no obs-fold, token field names with no space before the colon, no
 *   control bytes in values, one valid Host, versions 1.0/1.1, no Transfer-Encoding and no body
 *   on GET/HEAD, size limits) which Debian's non-strict http-parser 2.9 does not, then parses it
 *   with http-parser into struct h1_req.
 * - Responses: h1_resp_parse() parses an origin's response head and decides the body framing.
 * - Chunked bodies: an incremental decoder that lets the caller consume body bytes partially
 *   (back-pressure) without copying.
 * - Helpers: header lookup, hop-by-hop classification, authority normalisation.
 *
 * Memory rule: every struct h1_span is an (offset, length) into the <buf> the message was parsed
 * from, which the caller owns; a parsed message borrows that buffer and is valid only while those
 * bytes stay in place. Callers that compact their input buffer copy the head first.
 */
#ifndef CACHEPARTY_HTTP1_H
#define CACHEPARTY_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H1_MAX_HEAD (32 * 1024)      /* request head limit -> 431 */
#define H1_MAX_FIELDS 100            /* header fields limit -> 431 */
#define H1_MAX_TARGET 8192           /* request-target limit -> 414 */
#define H1_MAX_RESP_HEAD (64 * 1024) /* upstream response head limit -> invalid */

struct h1_span {
    uint32_t off;
    uint32_t len;
};

struct h1_field {
    struct h1_span name;
    struct h1_span value; /* leading/trailing whitespace trimmed */
};

enum h1_method { H1_M_GET = 0, H1_M_HEAD, H1_M_CONNECT, H1_M_OTHER };

struct h1_req {
    enum h1_method method;
    struct h1_span method_s;  /* the method token as sent */
    struct h1_span target;    /* request-target as sent */
    struct h1_span path;      /* path + query, without any fragment */
    struct h1_span path_only; /* path without the query; EMPTY MEANS "/": see h1_req_parse */
    struct h1_span authority; /* absolute-form's authority, else the Host value (not normalised) */
    bool absolute_form;
    int version_minor;       /* 0 or 1 (major is always 1) */
    bool keep_alive;         /* 1.1 unless "Connection: close"; 1.0 only with keep-alive */
    bool has_body;           /* Content-Length > 0 or Transfer-Encoding present */
    uint64_t content_length; /* declared request body length (0 if none) */
    bool has_te;             /* Transfer-Encoding present */
    struct h1_field fields[H1_MAX_FIELDS];
    unsigned n_fields;
};

/*
 * Parse one request head at buf[0..len).
 * Returns > 0: the head is complete and valid; the value is its length (through the blank line,
 *              counting any empty lines skipped before the request-line), and <req> is filled
 *              (spans into <buf>).
 *           0: incomplete, read more (len < H1_MAX_HEAD and nothing invalid seen yet).
 *         < 0: minus the HTTP status to answer before closing: -400 malformed, -414 target too
 *              long, -431 head too large or too many fields, -505 version not supported.
 *              Method rules are not applied here: a valid POST parses fine (the caller answers
 * 405), except that Transfer-Encoding or a body on GET/HEAD is -400. The heartbeat
 * (h1_is_heartbeat) is exempt from both that rule and the HTTP/1.0 Host rule: lancache answers
 * it to any request (a missing Host is then an empty <authority>). <why>, if not NULL, receives a
 * static short reason for the log on errors. Spans cannot hold a "/" that was not sent:
 * absolute-form without a path ("http://h", "http://h?q") gives an empty <path_only> and a <path>
 * of "" or "?q", so callers write "/" before <path> whenever <path_only> is empty. CONNECT
 * (authority-form) and OPTIONS * have empty paths.
 */
ssize_t h1_req_parse(const char *buf, size_t len, struct h1_req *req, const char **why);

/* Whether the parsed request <req> (spans into <buf>) asks for /lancache-heartbeat (any query). */
bool h1_is_heartbeat(const char *buf, const struct h1_req *req);

enum h1_framing {
    H1_BODY_NONE = 0, /* HEAD request, 1xx, 204, 304 */
    H1_BODY_LENGTH,   /* Content-Length */
    H1_BODY_CHUNKED,  /* Transfer-Encoding: chunked (final coding) */
    H1_BODY_CLOSE     /* delimited by connection close */
};

struct h1_resp {
    int status;
    int version_minor;
    struct h1_span reason;
    enum h1_framing framing;
    uint64_t content_length; /* valid when framing == H1_BODY_LENGTH */
    bool keep_alive;         /* the connection may be reused after the body */
    struct h1_field fields[H1_MAX_FIELDS];
    unsigned n_fields;
};

/*
 * Parse one response head at buf[0..len) for a request of method <method>.
 * Returns > 0 head length (complete), 0 incomplete (and len < H1_MAX_RESP_HEAD), or -EPROTO for
 * an invalid head: bad status line, bad field syntax, duplicate differing or invalid
 * Content-Length, Content-Length together with Transfer-Encoding, a Transfer-Encoding whose final
 * coding is not chunked, status 101, too many fields; -E2BIG when the head exceeds
 * H1_MAX_RESP_HEAD. Interim 1xx (100, 102, 103) responses parse with framing NONE: the caller
 * skips them and parses again.
 */
ssize_t h1_resp_parse(const char *buf, size_t len, enum h1_method method, struct h1_resp *resp);

/* Incremental chunked-body decoder. */
struct h1_chunked {
    int state;
    uint64_t remaining; /* data bytes left in the current chunk */
    unsigned ext_len;   /* bytes of chunk-size line / trailer line seen, bounded */
    bool done;          /* last-chunk and trailers consumed */
};

void h1_chunked_init(struct h1_chunked *c);

/*
 * Decode framing at in[0..len). On return *framing is the number of framing bytes consumed from
 * the start of <in>, and *avail the number of body bytes that begin at in + *framing (possibly
 * 0: more input needed, or c->done). The caller uses n <= *avail of those bytes and reports them
 * with h1_chunked_take(c, n), then calls again with the input advanced by *framing + n.
 * Returns 0, or -EPROTO on bad framing (bad hex, missing CRLF, over-long size line or trailers).
 */
int h1_chunked_parse(struct h1_chunked *c, const char *in, size_t len, size_t *framing,
                     size_t *avail);
void h1_chunked_take(struct h1_chunked *c, size_t n);

/* First field named <name> (case-insensitive), or NULL. */
const struct h1_field *h1_find(const char *buf, const struct h1_field *fields, unsigned n,
                               const char *name);

/*
 * True if a response field must not be forwarded: hop-by-hop (Connection, Keep-Alive,
 * Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-Authenticate,
 * Proxy-Authorization) or named in any Connection field of the same message.
 */
bool h1_is_hop_by_hop(const char *buf, const struct h1_field *fields, unsigned n,
                      const struct h1_field *f);

/* A normalised authority. */
struct h1_authority {
    char host[256];  /* lowercased, one trailing dot removed; IPv6 without brackets */
    char ident[262]; /* the authority as sent, lowercased, trailing dot removed, with ":port" only
                        if one was given: the cache identifier for unlisted hosts */
    uint16_t port;   /* default 80 */
    bool is_ip;      /* an IP literal in any spelling inet_aton accepts, or [v6] */
};

/*
 * Normalise <s>[0..len) ("Host:" value or absolute-form authority). Host syntax as nginx checks
 * it: labels of letters, digits, '-', '_' and '.', no empty label (but one trailing dot), no
 * userinfo, or a bracketed IPv6 literal; port 1..65535 when present. Returns 0 or -EINVAL.
 */
int h1_authority_parse(const char *s, size_t len, struct h1_authority *out);

/* True if the comma-separated list value <v>[0..len) contains <token> (case-insensitive, OWS). */
bool h1_list_has(const char *v, size_t len, const char *token);

/* Standard reason phrase for <status> ("Unknown" if none). */
const char *h1_reason(int status);

#endif
