/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_forward: the pure head builders of forward.c. Requests and origin responses are parsed
 * from literal strings with h1_req_parse()/h1_resp_parse(), then the built heads are compared
 * byte for byte (the field order of the input is kept) or checked field by field.
 */
#include "forward.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>

#include "http1.h"
#include "objhead.h"
#include "util.h"

#define HOSTNAME "cache1"
#define DATE "Sun, 06 Nov 1994 08:49:37 GMT"

/* Parsed messages are large (H1_MAX_FIELDS fields): keep them off the stack. */
static struct h1_req g_req;
static struct h1_resp g_resp;
static struct h1_authority g_auth;
static char g_out[8192];

/* Parses <s> as a complete request head into g_req and its authority into g_auth. */
static void parse_req(const char *s)
{
    const char *why = NULL;
    ssize_t n = h1_req_parse(s, strlen(s), &g_req, &why);
    if (n != (ssize_t)strlen(s))
        fail_msg("request refused (%zd, %s): %s", n, why ? why : "-", s);
    assert_int_equal(h1_authority_parse(s + g_req.authority.off, g_req.authority.len, &g_auth), 0);
}

/* Parses <s> as a complete response head (for a <method> request) into g_resp. */
static void parse_resp(const char *s, enum h1_method method)
{
    ssize_t n = h1_resp_parse(s, strlen(s), method, &g_resp);
    if (n != (ssize_t)strlen(s))
        fail_msg("response refused (%zd): %s", n, s);
}

static const char *req_head(const char *s, bool cond, bool authz)
{
    struct fwd_req_opts o = {HOSTNAME, cond, authz};
    parse_req(s);
    size_t n = fwd_request_head(s, &g_req, &g_auth, &o, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    return g_out;
}

/* Counts the lines of head <h> that start with "<name>:" (case-sensitive, as we write them). */
static unsigned count_field(const char *h, const char *name)
{
    unsigned n = 0;
    size_t nl = strlen(name);
    for (const char *p = h; p != NULL && *p; p = strstr(p, "\r\n")) {
        if (p != h)
            p += 2;
        if (strncmp(p, name, nl) == 0 && p[nl] == ':')
            n++;
    }
    return n;
}

/* The value of the first "<name>: value" line of <h> into <v>, or false. */
static bool field_value(const char *h, const char *name, char *v, size_t vlen)
{
    size_t nl = strlen(name);
    for (const char *p = h; p != NULL && *p; p = strstr(p, "\r\n")) {
        if (p != h)
            p += 2;
        if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *s = p + nl + 1;
            while (*s == ' ')
                s++;
            const char *e = strstr(s, "\r\n");
            size_t len = e ? (size_t)(e - s) : strlen(s);
            if (len >= vlen)
                len = vlen - 1;
            memcpy(v, s, len);
            v[len] = '\0';
            return true;
        }
    }
    return false;
}

/* ---- fwd_request_head ---- */

static void test_fwd_request_head_get_keeps_method_path_and_allowed_fields(void **state)
{
    (void)state;
    const char *h = req_head("GET /depot/1/chunk?x=1&y=2 HTTP/1.1\r\n"
                             "Host: Example.ORG\r\n"
                             "User-Agent: Valve/Steam HTTP Client 1.0\r\n"
                             "Accept: */*\r\n"
                             "Range: bytes=0-99\r\n"
                             "Cookie: session=1\r\n"
                             "Connection: keep-alive\r\n"
                             "\r\n",
                             false, false);
    assert_string_equal(h, "GET /depot/1/chunk?x=1&y=2 HTTP/1.1\r\n"
                           "Host: example.org\r\n"
                           "User-Agent: Valve/Steam HTTP Client 1.0\r\n"
                           "Accept: */*\r\n"
                           "Range: bytes=0-99\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                           "\r\n");
}

static void test_fwd_request_head_head_method_kept(void **state)
{
    (void)state;
    const char *h = req_head("HEAD /a HTTP/1.1\r\nHost: h.example\r\n\r\n", false, false);
    assert_string_equal(h, "HEAD /a HTTP/1.1\r\nHost: h.example\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_http10_client_sends_http11(void **state)
{
    (void)state;
    const char *h = req_head("GET /a HTTP/1.0\r\nHost: h.example\r\n\r\n", false, false);
    assert_true(strncmp(h, "GET /a HTTP/1.1\r\n", 17) == 0);
}

static void test_fwd_request_head_host_is_ident_with_port(void **state)
{
    (void)state;
    const char *h = req_head("GET / HTTP/1.1\r\nHost: CDN.Example.com.:8080\r\n\r\n", false, false);
    char v[300];
    assert_true(field_value(h, "Host", v, sizeof(v)));
    assert_string_equal(v, g_auth.ident);
    assert_string_equal(v, "cdn.example.com:8080");
    assert_int_equal(count_field(h, "Host"), 1);
}

static void test_fwd_request_head_absolute_form_uses_its_authority(void **state)
{
    (void)state;
    const char *h = req_head(
        "GET http://Origin.Example/p/q?r HTTP/1.1\r\nHost: other.example\r\n\r\n", false, false);
    assert_string_equal(h, "GET /p/q?r HTTP/1.1\r\nHost: origin.example\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_empty_path_becomes_slash(void **state)
{
    (void)state;
    const char *h = req_head("GET http://origin.example HTTP/1.1\r\nHost: origin.example\r\n\r\n",
                             false, false);
    assert_int_equal(g_req.path.len, 0);
    assert_true(strncmp(h, "GET / HTTP/1.1\r\n", 16) == 0);
}

/*
 * http1.h: absolute-form without a path but with a query ("http://h?q") gives an empty path_only
 * and a path of "?q"; callers write "/" before <path> whenever path_only is empty.
 */
static void test_fwd_request_head_query_without_path_gets_slash(void **state)
{
    (void)state;
    const char *h = req_head(
        "GET http://origin.example?x=1 HTTP/1.1\r\nHost: origin.example\r\n\r\n", false, false);
    assert_int_equal(g_req.path_only.len, 0);
    assert_true(g_req.path.len > 0);
    if (strncmp(h, "GET /?x=1 HTTP/1.1\r\n", 20) != 0)
        fail_msg("request line must be \"GET /?x=1 HTTP/1.1\", got: %.*s",
                 (int)(strstr(h, "\r\n") - h), h);
}

static void test_fwd_request_head_conditionals_dropped_by_default(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "If-None-Match: \"e1\"\r\n"
                              "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                              "If-Match: \"e2\"\r\n"
                              "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                              "If-Range: \"e3\"\r\n"
                              "\r\n";
    const char *h = req_head(req, false, false);
    assert_null(strstr(h, "If-"));
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_conditionals_forwarded_when_passed(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "If-None-Match: \"e1\"\r\n"
                              "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                              "If-Match: \"e2\"\r\n"
                              "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                              "if-range: \"e3\"\r\n"
                              "Authorization: Basic eDp5\r\n"
                              "\r\n";
    const char *h = req_head(req, true, false);
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                           "If-None-Match: \"e1\"\r\n"
                           "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                           "If-Match: \"e2\"\r\n"
                           "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                           "if-range: \"e3\"\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_authorization_only_when_passed(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "Authorization: Bearer tok\r\n"
                              "Proxy-Authorization: Basic cDpx\r\n"
                              "If-None-Match: \"e1\"\r\n"
                              "\r\n";
    const char *h = req_head(req, false, false);
    assert_null(strstr(h, "Authorization"));
    h = req_head(req, false, true);
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                           "Authorization: Bearer tok\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
    /* Proxy-Authorization is hop-by-hop: never forwarded. */
    h = req_head(req, true, true);
    assert_null(strstr(h, "Proxy-Authorization"));
    assert_int_equal(count_field(h, "Authorization"), 1);
    assert_int_equal(count_field(h, "If-None-Match"), 1);
}

static void test_fwd_request_head_hop_by_hop_and_others_dropped(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "Connection: keep-alive, X-Secret\r\n"
                              "Keep-Alive: timeout=5\r\n"
                              "Proxy-Connection: keep-alive\r\n"
                              "TE: trailers\r\n"
                              "Upgrade: h2c\r\n"
                              "X-Secret: 1\r\n"
                              "Cookie: a=b\r\n"
                              "Referer: http://x/\r\n"
                              "X-Forwarded-For: 10.0.0.1\r\n"
                              "Via: 1.1 other\r\n"
                              "Accept-Encoding: gzip\r\n"
                              "Cache-Control: no-cache\r\n"
                              "Pragma: no-cache\r\n"
                              "Expect: 100-continue\r\n"
                              "User-Agent: ua\r\n"
                              "\r\n";
    const char *h = req_head(req, true, false);
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                           "User-Agent: ua\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_bypass_forwards_authorization_and_cookie(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "Cookie: a=b\r\n"
                              "Authorization: Bearer t\r\n"
                              "X-Other: 1\r\n"
                              "\r\n";
    assert_string_equal(req_head(req, true, true), "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                                                   "Cookie: a=b\r\n"
                                                   "Authorization: Bearer t\r\n"
                                                   "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
    assert_string_equal(req_head(req, true, false),
                        "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                        "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

/* fwd_fill_fields of request head <s> into g_fill (NUL-terminated), at most <cap> bytes. */
static char g_fill[FWD_FILL_FIELDS_MAX + 16];
static const char *fill_fields(const char *s, size_t cap, unsigned *dropped)
{
    parse_req(s);
    assert_true(cap < sizeof(g_fill));
    memset(g_fill, 'Z', sizeof(g_fill));
    size_t n = fwd_fill_fields(s, &g_req, g_fill, cap, dropped);
    assert_true(n <= cap);
    assert_int_equal(g_fill[n], 'Z'); /* nothing written past the length */
    g_fill[n] = '\0';
    return g_fill;
}

static void test_fwd_fill_fields_end_to_end_kept_in_order(void **state)
{
    (void)state;
    unsigned dropped = 99;
    const char *h = fill_fields("GET /a HTTP/1.1\r\nHost: h.example\r\n"
                                "X-Foo: bar baz\r\n"
                                "Accept-Language: de-DE, en;q=0.5\r\n"
                                "User-Agent: ua\r\n"
                                "Accept: */*\r\n"
                                "Referer: http://x/\r\n"
                                "Via: 1.1 other\r\n"
                                "Cache-Control: no-transform\r\n"
                                "X-Foo: again\r\n"
                                "X-Epic-Launcher: 15.2\r\n"
                                "X-LanCache-Processed-By: cache-a\r\n"
                                "x-lowercase: v\r\n"
                                "\r\n",
                                FWD_FILL_FIELDS_MAX, &dropped);
    assert_string_equal(h, "X-Foo: bar baz\r\n"
                           "Accept-Language: de-DE, en;q=0.5\r\n"
                           "Accept: */*\r\n"
                           "Referer: http://x/\r\n"
                           "Via: 1.1 other\r\n"
                           "Cache-Control: no-transform\r\n"
                           "X-Foo: again\r\n"
                           "X-Epic-Launcher: 15.2\r\n"
                           "x-lowercase: v\r\n");
    assert_int_equal(dropped, 0);
}

static void test_fwd_fill_fields_never_forwarded(void **state)
{
    (void)state;
    unsigned dropped = 99;
    const char *h = fill_fields("GET /a HTTP/1.1\r\nHost: h.example\r\n"
                                "Connection: keep-alive, X-Named\r\n"
                                "connection: x-named-too\r\n"
                                "X-Named: 1\r\n"
                                "X-NAMED-TOO: 1\r\n"
                                "Keep-Alive: timeout=5\r\n"
                                "TE: trailers\r\n"
                                "Trailer: X-Sum\r\n"
                                "Upgrade: h2c\r\n"
                                "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
                                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                "sec-websocket-version: 13\r\n"
                                "Proxy-Connection: keep-alive\r\n"
                                "Proxy-Authorization: Basic x\r\n"
                                "Proxy-Anything: 1\r\n"
                                "Range: bytes=0-1\r\n"
                                "If-None-Match: \"x\"\r\n"
                                "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                                "If-Match: *\r\n"
                                "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"
                                "If-Range: \"x\"\r\n"
                                "if-schedule-tag-match: 1\r\n"
                                "Cookie: a=b\r\n"
                                "Authorization: Bearer t\r\n"
                                "Accept-Encoding: gzip\r\n"
                                "Forwarded: for=192.0.2.1\r\n"
                                "X-Forwarded-For: 192.0.2.1\r\n"
                                "X-Forwarded-Host: evil\r\n"
                                "x-forwarded-proto: https\r\n"
                                "X-Original-URL: /admin\r\n"
                                "X-Rewrite-URL: /admin\r\n"
                                "X-HTTP-Method-Override: DELETE\r\n"
                                "X-HTTP-Method: PUT\r\n"
                                "X-Method-Override: PATCH\r\n"
                                "Max-Forwards: 0\r\n"
                                "Expect: 100-continue\r\n"
                                "Content-Length: 0\r\n"
                                "User-Agent: ua\r\n"
                                "X-LanCache-Processed-By: cache-a\r\n"
                                "\r\n",
                                FWD_FILL_FIELDS_MAX, &dropped);
    assert_string_equal(h, "");
    assert_int_equal(dropped, 0);
}

static void test_fwd_fill_forwards_names(void **state)
{
    (void)state;
    static const char *const yes[] = {"X-Foo",
                                      "Accept",
                                      "Accept-Language",
                                      "Referer",
                                      "Via",
                                      "Cache-Control",
                                      "Pragma",
                                      "X-Forwarded",
                                      "Iff",
                                      "X-Proxy-Thing",
                                      "Proxy",
                                      "Forwarded-X",
                                      "Cookie2x",
                                      "X-Upstream-Cache-Status",
                                      "Content-Type",
                                      "Sec-Fetch-Mode"};
    static const char *const no[] = {"host",
                                     "CONTENT-LENGTH",
                                     "range",
                                     "If-",
                                     "If-X",
                                     "Proxy-",
                                     "X-Forwarded-",
                                     "X-Forwarded-Port",
                                     "cookie",
                                     "authorization",
                                     "accept-encoding",
                                     "forwarded",
                                     "x-original-url",
                                     "x-rewrite-url",
                                     "x-http-method-override",
                                     "x-http-method",
                                     "x-method-override",
                                     "max-forwards",
                                     "expect",
                                     "user-agent",
                                     "x-lancache-processed-by",
                                     "connection",
                                     "keep-alive",
                                     "te",
                                     "trailer",
                                     "transfer-encoding",
                                     "upgrade",
                                     "HTTP2-Settings",
                                     "Sec-WebSocket-Key",
                                     "Sec-WebSocket-Protocol"};
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
        if (!fwd_fill_forwards(yes[i], strlen(yes[i])))
            fail_msg("%s not forwarded", yes[i]);
    for (size_t i = 0; i < ARRAY_SIZE(no); i++)
        if (fwd_fill_forwards(no[i], strlen(no[i])))
            fail_msg("%s forwarded", no[i]);
    /* a prefix of a name is not the name */
    assert_true(fwd_fill_forwards("Hos", 3));
    assert_true(fwd_fill_forwards("Cookies", 7));
}

static void test_fwd_fill_fields_bounded_field_by_field(void **state)
{
    (void)state;
    static const char req[] = "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                              "X-A: 0123456789\r\n"          /* 17 bytes out */
                              "X-B: 0123456789012345\r\n"    /* 23 */
                              "X-C: 01\r\n"                  /* 9 */
                              "X-D: 0123456789012345678\r\n" /* 26 */
                              "\r\n";
    unsigned dropped = 99;
    /* all of it */
    assert_string_equal(fill_fields(req, 75, &dropped),
                        "X-A: 0123456789\r\nX-B: 0123456789012345\r\nX-C: 01\r\n"
                        "X-D: 0123456789012345678\r\n");
    assert_int_equal(dropped, 0);
    /* one byte short: the last is dropped whole */
    assert_string_equal(fill_fields(req, 74, &dropped),
                        "X-A: 0123456789\r\nX-B: 0123456789012345\r\nX-C: 01\r\n");
    assert_int_equal(dropped, 1);
    /* B does not fit after A, the shorter C still does */
    assert_string_equal(fill_fields(req, 30, &dropped), "X-A: 0123456789\r\nX-C: 01\r\n");
    assert_int_equal(dropped, 2);
    assert_string_equal(fill_fields(req, 8, &dropped), "");
    assert_int_equal(dropped, 4);
    assert_string_equal(fill_fields(req, 0, &dropped), "");
    assert_int_equal(dropped, 4);
}

static void test_fwd_request_head_field_names_case_insensitive(void **state)
{
    (void)state;
    const char *h = req_head("GET /a HTTP/1.1\r\nhost: h.example\r\nuser-agent: ua\r\n"
                             "RANGE: bytes=1-2\r\naccept: text/plain\r\n\r\n",
                             false, false);
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\nuser-agent: ua\r\n"
                           "RANGE: bytes=1-2\r\naccept: text/plain\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n\r\n");
}

static void test_fwd_request_head_processed_by_chain_appended(void **state)
{
    (void)state;
    const char *h = req_head("GET /a HTTP/1.1\r\nHost: h.example\r\n"
                             "X-LanCache-Processed-By: edge1, edge2\r\n"
                             "User-Agent: ua\r\n\r\n",
                             false, false);
    assert_string_equal(h, "GET /a HTTP/1.1\r\nHost: h.example\r\n"
                           "X-LanCache-Processed-By: edge1, edge2, " HOSTNAME "\r\n"
                           "User-Agent: ua\r\n\r\n");
}

static void test_fwd_request_head_processed_by_fields_merged(void **state)
{
    (void)state;
    const char *h = req_head("GET /a HTTP/1.1\r\nHost: h.example\r\n"
                             "x-lancache-processed-by: edge1\r\n"
                             "Accept: */*\r\n"
                             "X-LanCache-Processed-By: edge2\r\n\r\n",
                             false, false);
    assert_int_equal(count_field(h, "X-LanCache-Processed-By"), 1);
    assert_null(strstr(h, "x-lancache-processed-by"));
    char v[128];
    assert_true(field_value(h, "X-LanCache-Processed-By", v, sizeof(v)));
    assert_string_equal(v, "edge1, edge2, " HOSTNAME);
    assert_int_equal(count_field(h, "Accept"), 1);
}

static void test_fwd_request_head_processed_by_empty_value_adds_ours(void **state)
{
    (void)state;
    const char *h = req_head("GET /a HTTP/1.1\r\nHost: h.example\r\n"
                             "X-LanCache-Processed-By:\r\n\r\n",
                             false, false);
    char v[128];
    assert_int_equal(count_field(h, "X-LanCache-Processed-By"), 1);
    assert_true(field_value(h, "X-LanCache-Processed-By", v, sizeof(v)));
    assert_string_equal(v, HOSTNAME);
}

static void test_fwd_request_head_cap_too_small_returns_zero(void **state)
{
    (void)state;
    /* Both the chain-append path and the putf path of X-LanCache-Processed-By. */
    static const char *const reqs[] = {
        "GET /a/b HTTP/1.1\r\nHost: h.example\r\nUser-Agent: ua\r\nRange: bytes=0-9\r\n\r\n",
        "GET /a/b HTTP/1.1\r\nHost: h.example\r\nX-LanCache-Processed-By: e1\r\n"
        "Range: bytes=0-9\r\n\r\n",
    };
    struct fwd_req_opts o = {HOSTNAME, false, false};
    char out[512];
    for (size_t k = 0; k < ARRAY_SIZE(reqs); k++) {
        parse_req(reqs[k]);
        size_t full = fwd_request_head(reqs[k], &g_req, &g_auth, &o, out, sizeof(out));
        assert_true(full > 0 && full < sizeof(out));
        char want[512];
        memcpy(want, out, full);
        for (size_t cap = 0; cap < full; cap++)
            assert_int_equal(fwd_request_head(reqs[k], &g_req, &g_auth, &o, out, cap), 0);
        assert_int_equal(fwd_request_head(reqs[k], &g_req, &g_auth, &o, out, full), full);
        assert_memory_equal(out, want, full);
    }
}

/* ---- fwd_response_head ---- */

static const char *resp_head(const char *s, enum h1_method m, int minor, bool keep,
                             const char *status, enum fwd_body *body)
{
    struct fwd_resp_opts o = {HOSTNAME, status, minor, m == H1_M_HEAD, keep,
                              NULL,     false,  0,     false,          0};
    parse_resp(s, m);
    *body = (enum fwd_body) - 1;
    size_t n = fwd_response_head(s, &g_resp, &o, body, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    return g_out;
}

#define R_LENGTH "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Type: x/y\r\n\r\n"
#define R_CHUNKED "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: x/y\r\n\r\n"
#define R_CLOSE "HTTP/1.1 200 OK\r\nContent-Type: x/y\r\n\r\n"
#define R_204 "HTTP/1.1 204 No Content\r\nContent-Type: x/y\r\n\r\n"
#define R_304 "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"e\"\r\n\r\n"
#define R_HEAD_LEN "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Type: x/y\r\n\r\n"

struct resp_case {
    const char *resp;
    enum h1_method method;
    int minor;
    bool keep;
    enum fwd_body want_body;
    const char *want_conn; /* Connection value we write, or NULL for none */
    bool want_te;          /* Transfer-Encoding: chunked */
    const char *want_cl;   /* Content-Length value, or NULL for none */
};

/* Fails with the case index and the head when <cond> is false. */
#define CASE_CHECK(cond, i, h)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("case %zu: %s failed; head:\n%s", (i), #cond, (h));                           \
    } while (0)

static void check_resp_cases(const struct resp_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum fwd_body body;
        char v[64];
        const char *h = resp_head(c[i].resp, c[i].method, c[i].minor, c[i].keep, "MISS", &body);
        CASE_CHECK(body == c[i].want_body, i, h);
        if (c[i].want_conn == NULL) {
            CASE_CHECK(count_field(h, "Connection") == 0, i, h);
        } else {
            CASE_CHECK(count_field(h, "Connection") == 1, i, h);
            CASE_CHECK(field_value(h, "Connection", v, sizeof(v)), i, h);
            CASE_CHECK(strcmp(v, c[i].want_conn) == 0, i, h);
        }
        CASE_CHECK(count_field(h, "Transfer-Encoding") == (c[i].want_te ? 1u : 0u), i, h);
        if (c[i].want_te) {
            CASE_CHECK(field_value(h, "Transfer-Encoding", v, sizeof(v)), i, h);
            CASE_CHECK(strcmp(v, "chunked") == 0, i, h);
        }
        if (c[i].want_cl == NULL) {
            CASE_CHECK(count_field(h, "Content-Length") == 0, i, h);
        } else {
            CASE_CHECK(count_field(h, "Content-Length") == 1, i, h);
            CASE_CHECK(field_value(h, "Content-Length", v, sizeof(v)), i, h);
            CASE_CHECK(strcmp(v, c[i].want_cl) == 0, i, h);
        }
        CASE_CHECK(count_field(h, "X-LanCache-Processed-By") == 1, i, h);
        CASE_CHECK(count_field(h, "X-Upstream-Cache-Status") == 1, i, h);
        /* Whatever the framing, the head we write parses back as a valid response. */
        struct h1_resp back;
        CASE_CHECK(h1_resp_parse(h, strlen(h), c[i].method, &back) == (ssize_t)strlen(h), i, h);
        CASE_CHECK(back.status == g_resp.status, i, h);
    }
}

/* A kept answer: the origin's Age (one or several) gives way to ours, its Date stays; without
 * send_age, the origin's Age is passed on and none is added. */
static void test_fwd_response_head_age_of_a_kept_answer(void **state)
{
    (void)state;
    const char *s = "HTTP/1.1 404 Not Found\r\nDate: Wed, 02 Dec 2026 00:00:00 GMT\r\nAge: 5\r\n"
                    "X-A: 1\r\nAge: 7\r\nContent-Length: 3\r\n\r\n";
    struct fwd_resp_opts o = {.hostname = HOSTNAME,
                              .cache_status = "HIT",
                              .client_minor = 1,
                              .keep_alive = true,
                              .date = "Thu, 03 Dec 2026 00:00:00 GMT",
                              .send_age = true,
                              .age = 42};
    enum fwd_body body;
    char v[64];
    parse_resp(s, H1_M_GET);
    size_t n = fwd_response_head(s, &g_resp, &o, &body, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_int_equal(count_field(g_out, "Age"), 1);
    assert_true(field_value(g_out, "Age", v, sizeof(v)));
    assert_string_equal(v, "42");
    assert_int_equal(count_field(g_out, "Date"), 1);
    assert_true(field_value(g_out, "Date", v, sizeof(v)));
    assert_string_equal(v, "Wed, 02 Dec 2026 00:00:00 GMT");
    assert_int_equal(count_field(g_out, "X-A"), 1);

    /* no Date from the origin: the one given (when the answer was received) */
    s = "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n";
    parse_resp(s, H1_M_GET);
    n = fwd_response_head(s, &g_resp, &o, &body, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_true(field_value(g_out, "Date", v, sizeof(v)));
    assert_string_equal(v, "Thu, 03 Dec 2026 00:00:00 GMT");
    assert_true(field_value(g_out, "Age", v, sizeof(v)));
    assert_string_equal(v, "42");

    o.send_age = false;
    s = "HTTP/1.1 404 Not Found\r\nAge: 5\r\nContent-Length: 3\r\n\r\n";
    parse_resp(s, H1_M_GET);
    n = fwd_response_head(s, &g_resp, &o, &body, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_int_equal(count_field(g_out, "Age"), 1);
    assert_true(field_value(g_out, "Age", v, sizeof(v)));
    assert_string_equal(v, "5");
}

static void test_fwd_response_head_length_framing_matrix(void **state)
{
    (void)state;
    static const struct resp_case c[] = {
        {R_LENGTH, H1_M_GET, 1, true, FWD_BODY_LENGTH, NULL, false, "10"},
        {R_LENGTH, H1_M_GET, 1, false, FWD_BODY_LENGTH, "close", false, "10"},
        {R_LENGTH, H1_M_GET, 0, true, FWD_BODY_LENGTH, "keep-alive", false, "10"},
        {R_LENGTH, H1_M_GET, 0, false, FWD_BODY_LENGTH, "close", false, "10"},
        {R_HEAD_LEN, H1_M_HEAD, 1, true, FWD_BODY_NONE, NULL, false, "10"},
        {R_HEAD_LEN, H1_M_HEAD, 1, false, FWD_BODY_NONE, "close", false, "10"},
        {R_HEAD_LEN, H1_M_HEAD, 0, true, FWD_BODY_NONE, "keep-alive", false, "10"},
        {R_HEAD_LEN, H1_M_HEAD, 0, false, FWD_BODY_NONE, "close", false, "10"},
    };
    check_resp_cases(c, ARRAY_SIZE(c));
}

static void test_fwd_response_head_chunked_framing_matrix(void **state)
{
    (void)state;
    static const struct resp_case c[] = {
        {R_CHUNKED, H1_M_GET, 1, true, FWD_BODY_CHUNKED, NULL, true, NULL},
        {R_CHUNKED, H1_M_GET, 1, false, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CHUNKED, H1_M_GET, 0, true, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CHUNKED, H1_M_GET, 0, false, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CHUNKED, H1_M_HEAD, 1, true, FWD_BODY_NONE, NULL, false, NULL},
        {R_CHUNKED, H1_M_HEAD, 1, false, FWD_BODY_NONE, "close", false, NULL},
        {R_CHUNKED, H1_M_HEAD, 0, true, FWD_BODY_NONE, "keep-alive", false, NULL},
        {R_CHUNKED, H1_M_HEAD, 0, false, FWD_BODY_NONE, "close", false, NULL},
    };
    check_resp_cases(c, ARRAY_SIZE(c));
}

static void test_fwd_response_head_close_framing_matrix(void **state)
{
    (void)state;
    static const struct resp_case c[] = {
        {R_CLOSE, H1_M_GET, 1, true, FWD_BODY_CHUNKED, NULL, true, NULL},
        {R_CLOSE, H1_M_GET, 1, false, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CLOSE, H1_M_GET, 0, true, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CLOSE, H1_M_GET, 0, false, FWD_BODY_CLOSE, "close", false, NULL},
        {R_CLOSE, H1_M_HEAD, 1, true, FWD_BODY_NONE, NULL, false, NULL},
        {R_CLOSE, H1_M_HEAD, 0, false, FWD_BODY_NONE, "close", false, NULL},
    };
    check_resp_cases(c, ARRAY_SIZE(c));
}

static void test_fwd_response_head_no_body_framing_matrix(void **state)
{
    (void)state;
    static const struct resp_case c[] = {
        {R_204, H1_M_GET, 1, true, FWD_BODY_NONE, NULL, false, NULL},
        {R_204, H1_M_GET, 1, false, FWD_BODY_NONE, "close", false, NULL},
        {R_204, H1_M_GET, 0, true, FWD_BODY_NONE, "keep-alive", false, NULL},
        {R_204, H1_M_GET, 0, false, FWD_BODY_NONE, "close", false, NULL},
        {R_304, H1_M_GET, 1, true, FWD_BODY_NONE, NULL, false, "10"},
        {R_304, H1_M_GET, 1, false, FWD_BODY_NONE, "close", false, "10"},
        {R_304, H1_M_GET, 0, true, FWD_BODY_NONE, "keep-alive", false, "10"},
        {R_304, H1_M_HEAD, 0, false, FWD_BODY_NONE, "close", false, "10"},
    };
    check_resp_cases(c, ARRAY_SIZE(c));
}

static void test_fwd_response_head_length_exact_output(void **state)
{
    (void)state;
    enum fwd_body body;
    const char *h = resp_head("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nETag: \"x\"\r\n"
                              "Connection: keep-alive\r\n\r\n",
                              H1_M_GET, 1, true, "HIT", &body);
    assert_int_equal(body, FWD_BODY_LENGTH);
    assert_string_equal(h, "HTTP/1.1 200 OK\r\nETag: \"x\"\r\nContent-Length: 10\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                           "X-Upstream-Cache-Status: HIT\r\n\r\n");
}

static void test_fwd_response_head_duplicate_content_length_written_once(void **state)
{
    (void)state;
    enum fwd_body body;
    const char *h = resp_head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                              H1_M_GET, 1, true, "MISS", &body);
    assert_int_equal(body, FWD_BODY_LENGTH);
    assert_int_equal(count_field(h, "Content-Length"), 1);
}

static void test_fwd_response_head_status_line_is_ours(void **state)
{
    (void)state;
    enum fwd_body body;
    const char *h = resp_head("HTTP/1.0 404 Nope\r\nContent-Length: 0\r\n\r\n", H1_M_GET, 1, true,
                              "MISS", &body);
    assert_true(strncmp(h, "HTTP/1.1 404 Not Found\r\n", 24) == 0);
    assert_int_equal(body, FWD_BODY_LENGTH);
}

static void test_fwd_response_head_hop_by_hop_and_connection_named_removed(void **state)
{
    (void)state;
    enum fwd_body body;
    const char *h = resp_head("HTTP/1.1 200 OK\r\n"
                              "Connection: keep-alive, X-Private, x-other\r\n"
                              "Keep-Alive: timeout=5\r\n"
                              "Proxy-Connection: keep-alive\r\n"
                              "TE: trailers\r\n"
                              "Trailer: X-Sum\r\n"
                              "Upgrade: h2c\r\n"
                              "Proxy-Authenticate: Basic\r\n"
                              "Proxy-Authorization: Basic x\r\n"
                              "X-Private: secret\r\n"
                              "X-Other: 2\r\n"
                              "Transfer-Encoding: chunked\r\n"
                              "Cache-Control: max-age=60\r\n"
                              "\r\n",
                              H1_M_GET, 1, true, "MISS", &body);
    assert_int_equal(body, FWD_BODY_CHUNKED);
    assert_string_equal(h, "HTTP/1.1 200 OK\r\n"
                           "Cache-Control: max-age=60\r\n"
                           "Transfer-Encoding: chunked\r\n"
                           "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                           "X-Upstream-Cache-Status: MISS\r\n\r\n");
}

static void test_fwd_response_head_origin_lancache_fields_replaced(void **state)
{
    (void)state;
    enum fwd_body body;
    const char *h = resp_head("HTTP/1.1 200 OK\r\n"
                              "X-LanCache-Processed-By: upstream-cache\r\n"
                              "x-upstream-cache-status: HIT\r\n"
                              "Content-Length: 1\r\n\r\n",
                              H1_M_GET, 1, true, "BYPASS", &body);
    char v[64];
    assert_int_equal(count_field(h, "X-LanCache-Processed-By"), 1);
    assert_int_equal(count_field(h, "X-Upstream-Cache-Status"), 1);
    assert_null(strstr(h, "x-upstream-cache-status"));
    assert_null(strstr(h, "upstream-cache\r\n"));
    assert_true(field_value(h, "X-LanCache-Processed-By", v, sizeof(v)));
    assert_string_equal(v, HOSTNAME);
    assert_true(field_value(h, "X-Upstream-Cache-Status", v, sizeof(v)));
    assert_string_equal(v, "BYPASS");
}

static const char cap_resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 123\r\nETag: \"abc\"\r\n\r\n";

static void test_fwd_response_head_cap_too_small_returns_zero(void **state)
{
    (void)state;
    struct fwd_resp_opts o = {HOSTNAME, "MISS", 1, false, true, NULL, false, 0, false, 0};
    enum fwd_body body;
    char out[512];
    parse_resp(cap_resp, H1_M_GET);
    size_t full = fwd_response_head(cap_resp, &g_resp, &o, &body, out, sizeof(out));
    assert_true(full > 0 && full < sizeof(out));
    for (size_t cap = 0; cap < full; cap++)
        assert_int_equal(fwd_response_head(cap_resp, &g_resp, &o, &body, out, cap), 0);
}

/* A hide_etag rule: the origin's ETag (any case of the name) is not passed on; the rest is. */
static void test_fwd_response_head_hide_etag_drops_only_the_etag(void **state)
{
    (void)state;
    static const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                               "etag: \"v1\"\r\nX-Other: 1\r\nETag: W/\"v2\"\r\n\r\n";
    struct fwd_resp_opts o = {HOSTNAME, "MISS", 1, false, true, NULL, false, 0, true, 0};
    enum fwd_body body;
    char out[512];
    parse_resp(resp, H1_M_GET);
    size_t n = fwd_response_head(resp, &g_resp, &o, &body, out, sizeof(out) - 1);
    assert_true(n > 0);
    out[n] = '\0';
    assert_null(strcasestr(out, "etag"));
    assert_non_null(strstr(out, "X-Other: 1\r\n"));
    o.hide_etag = false;
    n = fwd_response_head(resp, &g_resp, &o, &body, out, sizeof(out) - 1);
    out[n] = '\0';
    assert_non_null(strstr(out, "etag: \"v1\"\r\n"));
    assert_non_null(strstr(out, "ETag: W/\"v2\"\r\n"));
}

/* lancache's X-Upstream-Status / X-Upstream-Response-Time: from an origin answer only, on the
 * statuses nginx's add_header decorates, the origin's own copies never passed on. */
static void test_fwd_response_head_upstream_fields_as_add_header(void **state)
{
    (void)state;
    static const struct {
        const char *resp;
        int upstream;
        bool want;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, true},
        {"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", 302, true},
        {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 404, false},
        {"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", 503, false},
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, false},
        {"HTTP/1.1 200 OK\r\nX-Upstream-Status: 999\r\nX-Upstream-Response-Time: 9\r\n"
         "Content-Length: 0\r\n\r\n",
         0, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fwd_resp_opts o = {HOSTNAME, "MISS", 1, false, true,
                                  NULL,     false,  0, false, cases[i].upstream};
        enum fwd_body body;
        char out[512], want[64];
        parse_resp(cases[i].resp, H1_M_GET);
        size_t n = fwd_response_head(cases[i].resp, &g_resp, &o, &body, out, sizeof(out) - 1);
        assert_true(n > 0);
        out[n] = '\0';
        snprintf(want, sizeof(want), "X-Upstream-Status: %d\r\nX-Upstream-Response-Time: -\r\n",
                 cases[i].upstream);
        if (cases[i].want)
            assert_non_null(strstr(out, want));
        else
            assert_null(strstr(out, "X-Upstream-Status"));
        assert_null(strstr(out, "999"));
        assert_null(strstr(out, "X-Upstream-Response-Time: 9"));
    }
}

/* forward.h: "writes at most <cap> bytes ... or 0 if it did not fit": a head of exactly <cap>
 * bytes fits. */
static void test_fwd_response_head_cap_exact_fits(void **state)
{
    (void)state;
    struct fwd_resp_opts o = {HOSTNAME, "MISS", 1, false, true, NULL, false, 0, false, 0};
    enum fwd_body body;
    char out[512], want[512];
    parse_resp(cap_resp, H1_M_GET);
    size_t full = fwd_response_head(cap_resp, &g_resp, &o, &body, out, sizeof(out));
    assert_true(full > 0 && full < sizeof(out));
    memcpy(want, out, full);
    memset(out, 0, sizeof(out));
    assert_int_equal(fwd_response_head(cap_resp, &g_resp, &o, &body, out, full), full);
    assert_memory_equal(out, want, full);
}

/* ---- fwd_local_response ---- */

/* Builds a local response into g_out (NUL-terminated) and returns its length. */
static size_t local(int status, bool keep, bool head, const char *extra)
{
    size_t n =
        fwd_local_response(status, HOSTNAME, NULL, keep, head, extra, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    return n;
}

static void test_fwd_local_response_404_exact_with_body(void **state)
{
    (void)state;
    size_t n = local(404, false, false, NULL);
    assert_string_equal(g_out, "HTTP/1.1 404 Not Found\r\n"
                               "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 14\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "404 Not Found\n");
    assert_int_equal(n, strlen(g_out));
}

static void test_fwd_local_response_content_length_matches_body(void **state)
{
    (void)state;
    static const int statuses[] = {200, 400, 403, 404, 405, 408, 414, 431, 500, 502, 503, 504, 508};
    for (size_t i = 0; i < ARRAY_SIZE(statuses); i++) {
        size_t n = local(statuses[i], i % 2 == 0, false, NULL);
        struct h1_resp r;
        ssize_t hl = h1_resp_parse(g_out, n, H1_M_GET, &r);
        assert_true(hl > 0);
        assert_int_equal(r.status, statuses[i]);
        assert_int_equal(r.framing, H1_BODY_LENGTH);
        assert_int_equal(r.content_length, n - (size_t)hl);
        char want[64];
        snprintf(want, sizeof(want), "%d %s\n", statuses[i], h1_reason(statuses[i]));
        assert_string_equal(g_out + hl, want);
    }
}

static void test_fwd_local_response_keep_alive_has_no_connection_close(void **state)
{
    (void)state;
    local(503, true, false, NULL);
    assert_int_equal(count_field(g_out, "Connection"), 0);
    local(503, false, false, NULL);
    assert_int_equal(count_field(g_out, "Connection"), 1);
    char v[32];
    assert_true(field_value(g_out, "Connection", v, sizeof(v)));
    assert_string_equal(v, "close");
}

static void test_fwd_local_response_extra_lines_in_head(void **state)
{
    (void)state;
    size_t n = local(405, true, false, "Allow: GET, HEAD\r\nX-Why: method\r\n");
    const char *end = strstr(g_out, "\r\n\r\n");
    assert_non_null(end);
    const char *allow = strstr(g_out, "\r\nAllow: GET, HEAD\r\nX-Why: method\r\n");
    assert_non_null(allow);
    assert_true(allow < end);
    struct h1_resp r;
    ssize_t hl = h1_resp_parse(g_out, n, H1_M_GET, &r);
    assert_true(hl > 0);
    assert_int_equal(r.content_length, n - (size_t)hl);
    assert_non_null(h1_find(g_out, r.fields, r.n_fields, "allow"));
}

static void test_fwd_local_response_head_has_length_but_no_body(void **state)
{
    (void)state;
    size_t n = local(404, false, true, NULL);
    const char *end = strstr(g_out, "\r\n\r\n");
    assert_non_null(end);
    assert_int_equal((size_t)(end + 4 - g_out), n);
    char v[32];
    assert_true(field_value(g_out, "Content-Length", v, sizeof(v)));
    assert_string_equal(v, "14");
}

static void test_fwd_local_response_204_and_304_have_no_body(void **state)
{
    (void)state;
    static const int statuses[] = {204, 304};
    for (size_t i = 0; i < ARRAY_SIZE(statuses); i++) {
        size_t n = local(statuses[i], true, false, NULL);
        const char *end = strstr(g_out, "\r\n\r\n");
        assert_non_null(end);
        assert_int_equal((size_t)(end + 4 - g_out), n);
        assert_int_equal(count_field(g_out, "Content-Length"), 0);
        assert_int_equal(count_field(g_out, "Content-Type"), 0);
        assert_int_equal(count_field(g_out, "X-LanCache-Processed-By"), 1);
    }
}

static void test_fwd_local_response_cap_too_small_returns_zero(void **state)
{
    (void)state;
    char out[512];
    size_t full =
        fwd_local_response(502, HOSTNAME, DATE, false, false, "X-A: b\r\n", out, sizeof(out));
    assert_true(full > 0 && full < sizeof(out));
    for (size_t cap = 0; cap < full; cap++)
        assert_int_equal(
            fwd_local_response(502, HOSTNAME, DATE, false, false, "X-A: b\r\n", out, cap), 0);
    assert_int_equal(fwd_local_response(502, HOSTNAME, DATE, false, false, "X-A: b\r\n", out, full),
                     full);
}

/* ---- Date (RFC 9110 §6.6.1) ---- */

static void test_fwd_local_response_carries_the_date_given(void **state)
{
    (void)state;
    size_t n =
        fwd_local_response(404, HOSTNAME, DATE, false, false, NULL, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_string_equal(g_out, "HTTP/1.1 404 Not Found\r\n"
                               "Date: " DATE "\r\n"
                               "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 14\r\n"
                               "Connection: close\r\n"
                               "\r\n"
                               "404 Not Found\n");
    n = fwd_local_response(204, HOSTNAME, DATE, true, false, NULL, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_int_equal(count_field(g_out, "Date"), 1);
}

static size_t resp_head_dated(const char *s, const char *date)
{
    struct fwd_resp_opts o = {HOSTNAME, "MISS", 1, false, true, date, false, 0, false, 0};
    enum fwd_body body;
    parse_resp(s, H1_M_GET);
    size_t n = fwd_response_head(s, &g_resp, &o, &body, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    return n;
}

static void test_fwd_response_head_keeps_the_origin_date(void **state)
{
    (void)state;
    char v[64];
    resp_head_dated("HTTP/1.1 404 Not Found\r\nDate: Mon, 07 Nov 1994 01:02:03 GMT\r\n"
                    "Content-Length: 0\r\n\r\n",
                    DATE);
    assert_int_equal(count_field(g_out, "Date"), 1);
    assert_true(field_value(g_out, "Date", v, sizeof(v)));
    assert_string_equal(v, "Mon, 07 Nov 1994 01:02:03 GMT");
}

static void test_fwd_response_head_adds_our_date_when_the_origin_sent_none(void **state)
{
    (void)state;
    char v[64];
    resp_head_dated("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", DATE);
    assert_true(field_value(g_out, "Date", v, sizeof(v)));
    assert_string_equal(v, DATE);
    resp_head_dated("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", NULL);
    assert_int_equal(count_field(g_out, "Date"), 0);
}

/* ---- fwd_cache_response ---- */

static void test_fwd_cache_response_412_has_a_short_text_body(void **state)
{
    (void)state;
    struct fwd_cache_head h = {.status = 412,
                               .total = 1000,
                               .end = 999,
                               .etag = "\"e\"",
                               .last_modified = "",
                               .content_type = "x/y",
                               .hostname = HOSTNAME,
                               .cache_status = "HIT",
                               .keep_alive = true,
                               .client_minor = 1};
    size_t n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_string_equal(g_out, "HTTP/1.1 412 Precondition Failed\r\n"
                               "ETag: \"e\"\r\n"
                               "Accept-Ranges: bytes\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 24\r\n"
                               "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                               "X-Upstream-Cache-Status: HIT\r\n"
                               "\r\n"
                               "412 Precondition Failed\n");
    assert_int_equal(fwd_local_body_len(412, false), 24);
    n = fwd_cache_response(&h, true, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_null(strstr(g_out, "\r\n\r\n412"));
}

static void test_fwd_cache_response_replays_the_stored_head(void **state)
{
    (void)state;
    const char *text = "Content-Encoding: gzip\r\nContent-MD5: x\r\nX-A: 1\r\n";
    struct objhead *oh = objhead_new(text, strlen(text), DATE, strlen(DATE), 784111777, 7);
    assert_non_null(oh);
    struct fwd_cache_head h = {.status = 200,
                               .total = 10,
                               .end = 9,
                               .etag = "\"e\"",
                               .last_modified = "",
                               .content_type = "x/y",
                               .head = oh,
                               .age = true,
                               .now = 784111777 + 3,
                               .hostname = HOSTNAME,
                               .cache_status = "HIT",
                               .keep_alive = true,
                               .client_minor = 1};
    size_t n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_string_equal(g_out, "HTTP/1.1 200 OK\r\n"
                               "Date: " DATE "\r\n"
                               "Age: 10\r\n"
                               "Content-Type: x/y\r\n"
                               "ETag: \"e\"\r\n"
                               "Accept-Ranges: bytes\r\n"
                               "Content-Length: 10\r\n"
                               "Content-Encoding: gzip\r\nContent-MD5: x\r\nX-A: 1\r\n"
                               "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                               "X-Upstream-Cache-Status: HIT\r\n"
                               "\r\n");
    h.status = 206; /* a part: no digest of the whole content */
    h.start = 2;
    h.end = 3;
    n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_non_null(strstr(g_out, "Content-Encoding: gzip\r\nX-A: 1\r\n"));
    assert_null(strstr(g_out, "Content-MD5"));
    h.status = 304;
    h.age = false;
    n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_null(strstr(g_out, "Content-"));
    assert_null(strstr(g_out, "Age:"));
    assert_non_null(strstr(g_out, "X-A: 1\r\n"));
    assert_non_null(strstr(g_out, "Date: " DATE "\r\n"));
    h.status = 412;
    n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    assert_null(strstr(g_out, "X-A"));
    assert_null(strstr(g_out, "Content-Encoding"));
    assert_non_null(strstr(g_out, "Date: " DATE "\r\n"));
    assert_int_equal(fwd_cache_response(&h, false, g_out, 60), 0); /* does not fit */
    objhead_unref(&oh);
}

static void test_fwd_cache_response_416_says_the_length(void **state)
{
    (void)state;
    struct fwd_cache_head h = {.status = 416,
                               .total = 1000,
                               .end = 999,
                               .etag = "",
                               .last_modified = "",
                               .content_type = "x/y",
                               .hostname = HOSTNAME,
                               .cache_status = "MISS",
                               .keep_alive = true,
                               .client_minor = 1};
    size_t n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_string_equal(g_out, "HTTP/1.1 416 Range Not Satisfiable\r\n"
                               "Accept-Ranges: bytes\r\n"
                               "Content-Range: bytes */1000\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 26\r\n"
                               "X-LanCache-Processed-By: " HOSTNAME "\r\n"
                               "X-Upstream-Cache-Status: MISS\r\n"
                               "\r\n"
                               "416 Range Not Satisfiable\n");
}

/* ---- fwd_is_loop ---- */

static bool is_loop(const char *req)
{
    parse_req(req);
    return fwd_is_loop(req, &g_req, HOSTNAME);
}

static void test_fwd_is_loop_detects_our_name(void **state)
{
    (void)state;
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert_true(
        is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: " HOSTNAME "\r\n\r\n"));
    assert_true(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: a, " HOSTNAME
                        ", b\r\n\r\n"));
    assert_true(is_loop("GET / HTTP/1.1\r\nHost: h\r\nx-lancache-processed-by: CACHE1\r\n\r\n"));
    assert_true(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: a\r\n"
                        "X-LanCache-Processed-By: b," HOSTNAME "\r\n\r\n"));
}

static void test_fwd_is_loop_other_names_are_not_loops(void **state)
{
    (void)state;
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: cache10\r\n\r\n"));
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: cache\r\n\r\n"));
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By: a, b\r\n\r\n"));
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\nX-LanCache-Processed-By:\r\n\r\n"));
    /* Our name in another field is not a loop. */
    assert_false(is_loop("GET / HTTP/1.1\r\nHost: h\r\nVia: " HOSTNAME "\r\n\r\n"));
}

static void test_fwd_is_loop_after_our_own_request_head(void **state)
{
    (void)state;
    /* A request we forwarded, arriving back at us, is detected. */
    const char *h = req_head("GET /a HTTP/1.1\r\nHost: h.example\r\n\r\n", false, false);
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", h);
    assert_true(is_loop(copy));
}

static void test_fwd_cache_response_multipart_has_its_type_and_body_length(void **state)
{
    (void)state;
    struct fwd_cache_head h;
    memset(&h, 0, sizeof(h));
    h.status = 206;
    h.total = 8000;
    h.start = 500;
    h.end = 999;
    h.etag = "\"e\"";
    h.last_modified = "";
    h.content_type = "application/pdf";
    h.hostname = HOSTNAME;
    h.cache_status = "HIT";
    h.keep_alive = true;
    h.client_minor = 1;
    h.boundary = "B0";
    h.multipart_len = 1234;
    size_t n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_non_null(strstr(g_out, "HTTP/1.1 206 Partial Content\r\n"));
    assert_non_null(strstr(g_out, "\r\nContent-Type: multipart/byteranges; boundary=B0\r\n"));
    assert_non_null(strstr(g_out, "\r\nContent-Length: 1234\r\n"));
    assert_null(strstr(g_out, "application/pdf")); /* in each part, not here */
    assert_null(strstr(g_out, "Content-Range"));
    /* One range: the stored type and its Content-Range, as before. */
    h.boundary = NULL;
    n = fwd_cache_response(&h, false, g_out, sizeof(g_out) - 1);
    assert_true(n > 0);
    g_out[n] = '\0';
    assert_non_null(strstr(g_out, "\r\nContent-Type: application/pdf\r\n"));
    assert_non_null(strstr(g_out, "\r\nContent-Range: bytes 500-999/8000\r\n"));
    assert_non_null(strstr(g_out, "\r\nContent-Length: 500\r\n"));
    assert_null(strstr(g_out, "multipart"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwd_request_head_get_keeps_method_path_and_allowed_fields),
        cmocka_unit_test(test_fwd_request_head_head_method_kept),
        cmocka_unit_test(test_fwd_request_head_http10_client_sends_http11),
        cmocka_unit_test(test_fwd_request_head_host_is_ident_with_port),
        cmocka_unit_test(test_fwd_request_head_absolute_form_uses_its_authority),
        cmocka_unit_test(test_fwd_request_head_empty_path_becomes_slash),
        cmocka_unit_test(test_fwd_request_head_query_without_path_gets_slash),
        cmocka_unit_test(test_fwd_request_head_conditionals_dropped_by_default),
        cmocka_unit_test(test_fwd_request_head_conditionals_forwarded_when_passed),
        cmocka_unit_test(test_fwd_request_head_authorization_only_when_passed),
        cmocka_unit_test(test_fwd_request_head_hop_by_hop_and_others_dropped),
        cmocka_unit_test(test_fwd_request_head_bypass_forwards_authorization_and_cookie),
        cmocka_unit_test(test_fwd_fill_fields_end_to_end_kept_in_order),
        cmocka_unit_test(test_fwd_fill_fields_never_forwarded),
        cmocka_unit_test(test_fwd_fill_forwards_names),
        cmocka_unit_test(test_fwd_fill_fields_bounded_field_by_field),
        cmocka_unit_test(test_fwd_request_head_field_names_case_insensitive),
        cmocka_unit_test(test_fwd_request_head_processed_by_chain_appended),
        cmocka_unit_test(test_fwd_request_head_processed_by_fields_merged),
        cmocka_unit_test(test_fwd_request_head_processed_by_empty_value_adds_ours),
        cmocka_unit_test(test_fwd_request_head_cap_too_small_returns_zero),
        cmocka_unit_test(test_fwd_response_head_age_of_a_kept_answer),
        cmocka_unit_test(test_fwd_response_head_length_framing_matrix),
        cmocka_unit_test(test_fwd_response_head_chunked_framing_matrix),
        cmocka_unit_test(test_fwd_response_head_close_framing_matrix),
        cmocka_unit_test(test_fwd_response_head_no_body_framing_matrix),
        cmocka_unit_test(test_fwd_response_head_length_exact_output),
        cmocka_unit_test(test_fwd_response_head_duplicate_content_length_written_once),
        cmocka_unit_test(test_fwd_response_head_status_line_is_ours),
        cmocka_unit_test(test_fwd_response_head_hop_by_hop_and_connection_named_removed),
        cmocka_unit_test(test_fwd_response_head_origin_lancache_fields_replaced),
        cmocka_unit_test(test_fwd_response_head_cap_too_small_returns_zero),
        cmocka_unit_test(test_fwd_response_head_cap_exact_fits),
        cmocka_unit_test(test_fwd_local_response_404_exact_with_body),
        cmocka_unit_test(test_fwd_local_response_content_length_matches_body),
        cmocka_unit_test(test_fwd_local_response_keep_alive_has_no_connection_close),
        cmocka_unit_test(test_fwd_local_response_extra_lines_in_head),
        cmocka_unit_test(test_fwd_local_response_head_has_length_but_no_body),
        cmocka_unit_test(test_fwd_local_response_204_and_304_have_no_body),
        cmocka_unit_test(test_fwd_local_response_cap_too_small_returns_zero),
        cmocka_unit_test(test_fwd_local_response_carries_the_date_given),
        cmocka_unit_test(test_fwd_response_head_keeps_the_origin_date),
        cmocka_unit_test(test_fwd_response_head_adds_our_date_when_the_origin_sent_none),
        cmocka_unit_test(test_fwd_cache_response_412_has_a_short_text_body),
        cmocka_unit_test(test_fwd_cache_response_416_says_the_length),
        cmocka_unit_test(test_fwd_cache_response_replays_the_stored_head),
        cmocka_unit_test(test_fwd_is_loop_detects_our_name),
        cmocka_unit_test(test_fwd_is_loop_other_names_are_not_loops),
        cmocka_unit_test(test_fwd_is_loop_after_our_own_request_head),
        cmocka_unit_test(test_fwd_cache_response_multipart_has_its_type_and_body_length),
        cmocka_unit_test(test_fwd_response_head_hide_etag_drops_only_the_etag),
        cmocka_unit_test(test_fwd_response_head_upstream_fields_as_add_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
