/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests for http1: request and response heads (every refusal cause, limits, every prefix of
 * a valid head), chunked decoding at every split point, authority normalisation and the small
 * helpers. Inputs are copied into exact-size heap buffers so that ASan catches any read past
 * <len>.
 */
#include "http1.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* An exact-size copy of s[0..len) with no terminating NUL. */
static char *dup_exact(const char *s, size_t len)
{
    char *p = malloc(len ? len : 1);

    assert_non_null(p);
    memcpy(p, s, len);
    return p;
}

/* <s> with control bytes escaped, for failure messages. */
static const char *esc(const char *s, size_t len)
{
    static char out[512];
    size_t o = 0;

    for (size_t i = 0; i < len && o + 8 < sizeof(out); i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '\r')
            o += (size_t)snprintf(out + o, sizeof(out) - o, "\\r");
        else if (c == '\n')
            o += (size_t)snprintf(out + o, sizeof(out) - o, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            o += (size_t)snprintf(out + o, sizeof(out) - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
    return out;
}

static ssize_t req_n(const char *s, size_t len, struct h1_req *r)
{
    char *b = dup_exact(s, len);
    const char *why = NULL;
    ssize_t n = h1_req_parse(b, len, r, &why);

    if (n < 0 && why == NULL)
        fail_msg("no reason for %s", esc(s, len));
    free(b);
    return n;
}

/* Parse an exact-size copy of s[0..len) and check the result. */
static void expect_req_n(const char *s, size_t len, ssize_t want)
{
    struct h1_req r;
    const char *why = NULL;
    char *b = dup_exact(s, len);
    ssize_t got = h1_req_parse(b, len, &r, &why);

    free(b);
    if (got != want)
        fail_msg("request \"%s\": got %zd want %zd (%s)", esc(s, len), got, want, why ? why : "-");
}

static void expect_req(const char *s, ssize_t want)
{
    expect_req_n(s, strlen(s), want);
}

static void expect_resp(const char *s, enum h1_method m, ssize_t want)
{
    struct h1_resp r;
    size_t len = strlen(s);
    char *b = dup_exact(s, len);
    ssize_t got = h1_resp_parse(b, len, m, &r);

    free(b);
    if (got != want)
        fail_msg("response \"%s\": got %zd want %zd", esc(s, len), got, want);
}

static void assert_span(const char *buf, struct h1_span sp, const char *want)
{
    if (sp.len != strlen(want) || memcmp(buf + sp.off, want, sp.len) != 0)
        fail_msg("span \"%s\" want \"%s\"", esc(buf + sp.off, sp.len), want);
}

static const char *value_of(const char *buf, const struct h1_field *fields, unsigned n,
                            const char *name)
{
    static char out[256];
    const struct h1_field *f = h1_find(buf, fields, n, name);

    assert_non_null(f);
    assert_true(f->value.len < sizeof(out));
    memcpy(out, buf + f->value.off, f->value.len);
    out[f->value.len] = '\0';
    return out;
}

/* ---- h1_req_parse: valid heads ---- */

static void test_h1_req_parse_get_origin_form(void **state)
{
    const char *s = "GET /a/b?x=1&y HTTP/1.1\r\nHost: Example.COM\r\nUser-Agent: t/1\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.method, H1_M_GET);
    assert_span(s, r.method_s, "GET");
    assert_span(s, r.target, "/a/b?x=1&y");
    assert_span(s, r.path, "/a/b?x=1&y");
    assert_span(s, r.path_only, "/a/b");
    assert_span(s, r.authority, "Example.COM");
    assert_false(r.absolute_form);
    assert_int_equal(r.version_minor, 1);
    assert_true(r.keep_alive);
    assert_false(r.has_body);
    assert_false(r.has_te);
    assert_int_equal(r.content_length, 0);
    assert_int_equal(r.n_fields, 2);
    assert_span(s, r.fields[0].name, "Host");
    assert_span(s, r.fields[1].name, "User-Agent");
    assert_span(s, r.fields[1].value, "t/1");
}

static void test_h1_req_parse_head_method(void **state)
{
    const char *s = "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(s, strlen(s), &r), strlen(s));
    assert_int_equal(r.method, H1_M_HEAD);
}

static void test_h1_req_parse_http10_closes_by_default(void **state)
{
    const char *s = "GET /x HTTP/1.0\r\nHost: a:8080\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.version_minor, 0);
    assert_false(r.keep_alive);
    assert_span(s, r.authority, "a:8080");
}

static void test_h1_req_parse_http10_keep_alive(void **state)
{
    const char *s = "GET /x HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n";
    const char *c = "GET /x HTTP/1.0\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(r.keep_alive);
    assert_int_equal(h1_req_parse(c, strlen(c), &r, NULL), strlen(c));
    assert_false(r.keep_alive);
}

static void test_h1_req_parse_connection_close(void **state)
{
    const char *s =
        "GET / HTTP/1.1\r\nConnection: x-foo\r\nHost: a\r\nConnection: x, CLOSE\r\n\r\n";
    const char *k = "GET / HTTP/1.1\r\nHost: a\r\nConnection: closed, upgrade\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_false(r.keep_alive);
    assert_int_equal(h1_req_parse(k, strlen(k), &r, NULL), strlen(k));
    assert_true(r.keep_alive);
}

static void test_h1_req_parse_absolute_form(void **state)
{
    const char *s = "GET http://Example.com:8080/p/q?z=1 HTTP/1.1\r\nHost: other.org\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(r.absolute_form);
    assert_span(s, r.target, "http://Example.com:8080/p/q?z=1");
    assert_span(s, r.authority, "Example.com:8080");
    assert_span(s, r.path, "/p/q?z=1");
    assert_span(s, r.path_only, "/p/q");
}

static void test_h1_req_parse_absolute_form_without_path(void **state)
{
    const char *s = "GET HTTP://h.example HTTP/1.1\r\nHost: h.example\r\n\r\n";
    const char *q = "GET http://h.example?a=b HTTP/1.1\r\nHost: h.example\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(r.absolute_form);
    assert_span(s, r.authority, "h.example");
    assert_int_equal(r.path.len, 0);
    assert_int_equal(r.path_only.len, 0);
    assert_int_equal(h1_req_parse(q, strlen(q), &r, NULL), strlen(q));
    assert_span(q, r.authority, "h.example");
    assert_span(q, r.path, "?a=b");
    assert_int_equal(r.path_only.len, 0);
}

static void test_h1_req_parse_absolute_form_http10_without_host(void **state)
{
    const char *s = "GET http://h/x HTTP/1.0\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.authority, "h");
    assert_span(s, r.path, "/x");
}

/* The heartbeat is exempt from the Host rule of HTTP/1.0 and from the no-body rule of GET/HEAD;
 * nothing else is, and a look-alike path is no heartbeat. */
static void test_h1_req_parse_heartbeat_exemptions(void **state)
{
    struct h1_req r;
    (void)state;
    const char *s = "GET /lancache-heartbeat HTTP/1.0\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(h1_is_heartbeat(s, &r));
    assert_int_equal(r.authority.len, 0);
    s = "GET /lancache-heartbeat?a=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(h1_is_heartbeat(s, &r));
    assert_int_equal(r.content_length, 3);
    s = "HEAD /lancache-heartbeat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(r.has_te);
    /* not the heartbeat: the rules hold */
    s = "GET /lancache-heartbeatx HTTP/1.0\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), -400);
    s = "GET /lancache-heartbea HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), -400);
    s = "GET /x/lancache-heartbeat HTTP/1.0\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), -400);
    /* HTTP/1.1 still needs its Host */
    s = "GET /lancache-heartbeat HTTP/1.1\r\n\r\n";
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), -400);
}

static void test_h1_req_parse_absolute_form_ipv6(void **state)
{
    const char *s = "GET http://[::1]:8080/x HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.authority, "[::1]:8080");
    assert_span(s, r.path, "/x");
}

static void test_h1_req_parse_fragment_dropped(void **state)
{
    const char *s = "GET /a?b#frag HTTP/1.1\r\nHost: a\r\n\r\n";
    const char *t = "GET /a#f?g HTTP/1.1\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.path, "/a?b");
    assert_span(s, r.path_only, "/a");
    assert_int_equal(h1_req_parse(t, strlen(t), &r, NULL), strlen(t));
    assert_span(t, r.path, "/a");
}

static void test_h1_req_parse_ows_trimmed(void **state)
{
    const char *s = "GET / HTTP/1.1\r\nHost: \t a \t\r\nX-A:v a l\t \r\nX-B:   \r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.authority, "a");
    assert_string_equal(value_of(s, r.fields, r.n_fields, "x-a"), "v a l");
    assert_string_equal(value_of(s, r.fields, r.n_fields, "X-B"), "");
}

static void test_h1_req_parse_empty_value(void **state)
{
    const char *s = "GET / HTTP/1.1\r\nX-E:\r\nHost: a\r\nX-F:\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.n_fields, 3);
    assert_span(s, r.fields[0].name, "X-E");
    assert_int_equal(r.fields[0].value.len, 0);
    assert_span(s, r.fields[1].value, "a");
    assert_span(s, r.fields[2].name, "X-F");
    assert_int_equal(r.fields[2].value.len, 0);
}

static void test_h1_req_parse_obs_text_allowed(void **state)
{
    const char *s = "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\nX-U: \xc3\xa9t\xe9\xff\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.path, "/caf\xc3\xa9");
    assert_string_equal(value_of(s, r.fields, r.n_fields, "x-u"), "\xc3\xa9t\xe9\xff");
}

static void test_h1_req_parse_leading_crlf_skipped(void **state)
{
    const char *s = "\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(s, strlen(s), &r), strlen(s));
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_span(s, r.method_s, "GET");
    assert_int_equal(r.method_s.off, 4);
    assert_span(s, r.path, "/x");
}

static void test_h1_req_parse_post_with_body(void **state)
{
    const char *s = "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s) - 5);
    assert_int_equal(r.method, H1_M_OTHER);
    assert_span(s, r.method_s, "POST");
    assert_true(r.has_body);
    assert_false(r.has_te);
    assert_int_equal(r.content_length, 5);
    assert_string_equal(value_of(s, r.fields, r.n_fields, "content-length"), "5");
}

static void test_h1_req_parse_post_te_sets_has_te(void **state)
{
    const char *s = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_true(r.has_te);
    assert_true(r.has_body);
}

static void test_h1_req_parse_unknown_method_is_other(void **state)
{
    const char *s = "BREW /pot?sugar HTTP/1.1\r\nHost: tea\r\nContent-Length: 0\r\nX: y\r\n\r\n";
    const char *l = "get / HTTP/1.0\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.method, H1_M_OTHER);
    assert_span(s, r.method_s, "BREW");
    assert_span(s, r.target, "/pot?sugar");
    assert_span(s, r.path_only, "/pot");
    assert_span(s, r.authority, "tea");
    assert_int_equal(r.n_fields, 3);
    assert_span(s, r.fields[2].value, "y");
    /* Methods are case-sensitive: "get" is not GET. */
    assert_int_equal(h1_req_parse(l, strlen(l), &r, NULL), strlen(l));
    assert_int_equal(r.method, H1_M_OTHER);
    assert_int_equal(r.version_minor, 0);
}

static void test_h1_req_parse_get_content_length_zero(void **state)
{
    const char *s = "GET / HTTP/1.1\r\nContent-Length: 0\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_false(r.has_body);
    assert_int_equal(r.n_fields, 2);
}

static void test_h1_req_parse_duplicate_equal_content_length(void **state)
{
    const char *s = "PUT / HTTP/1.1\r\nX-E:\r\nContent-Length: 7\r\nHost: a\r\n"
                    "content-length:7 , 7\r\nContent-Length: 7\r\nX-Z: z\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.content_length, 7);
    assert_int_equal(r.n_fields, 6);
    assert_span(s, r.fields[0].name, "X-E");
    assert_int_equal(r.fields[0].value.len, 0);
    assert_span(s, r.fields[1].name, "Content-Length");
    assert_span(s, r.fields[1].value, "7");
    assert_span(s, r.fields[2].value, "a");
    assert_span(s, r.fields[3].name, "content-length");
    assert_span(s, r.fields[3].value, "7 , 7");
    assert_span(s, r.fields[4].value, "7");
    assert_span(s, r.fields[5].name, "X-Z");
    assert_span(s, r.fields[5].value, "z");
}

static void test_h1_req_parse_connect_authority_form(void **state)
{
    const char *s = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.method, H1_M_CONNECT);
    assert_span(s, r.target, "example.com:443");
    assert_int_equal(r.path.len, 0);
}

static void test_h1_req_parse_options_asterisk(void **state)
{
    const char *s = "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.method, H1_M_OTHER);
    assert_span(s, r.target, "*");
}

static void test_h1_req_parse_pipelined_returns_first_length(void **state)
{
    const char *a = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n";
    const char *b = "HEAD /2 HTTP/1.1\r\nHost: b\r\n\r\n";
    char buf[256];
    size_t la = strlen(a), lb = strlen(b);
    struct h1_req r;

    (void)state;
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    assert_int_equal(req_n(buf, la + lb, &r), la);
    assert_int_equal(h1_req_parse(buf, la + lb, &r, NULL), la);
    assert_span(buf, r.path, "/1");
    assert_int_equal(h1_req_parse(buf + la, lb, &r, NULL), lb);
    assert_int_equal(r.method, H1_M_HEAD);
    assert_span(buf + la, r.path, "/2");
    /* The second head incomplete does not matter to the first. */
    assert_int_equal(req_n(buf, la + 3, &r), la);
}

static const char *const valid_heads[] = {
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "\r\n\r\nGET /x?y HTTP/1.1\r\nHost: a.b:81\r\nX-Empty:\r\nUser-Agent: Valve/1.0\r\n\r\n",
    "GET http://example.com/depot/1/chunk/ab HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "HEAD /z HTTP/1.1\r\nhost:\t[::1]:8080 \r\nContent-Length: 0\r\nX: \xff\r\n\r\n",
    "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
    "PURGE /obj HTTP/1.1\r\nHost: steam\r\n\r\n",
    "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
};

static void test_h1_req_parse_every_prefix_incomplete(void **state)
{
    struct h1_req r;

    (void)state;
    for (size_t i = 0; i < sizeof(valid_heads) / sizeof(valid_heads[0]); i++) {
        const char *h = valid_heads[i];
        size_t len = strlen(h);

        for (size_t k = 0; k < len; k++) {
            ssize_t n = req_n(h, k, &r);

            if (n != 0)
                fail_msg("prefix %zu of \"%s\": %zd", k, esc(h, len), n);
        }
        assert_int_equal(req_n(h, len, &r), len);
    }
}

/* A request with <n> fields in all (Host first), whose final CRLF is omitted if <open>. */
static char *many_fields(unsigned n, bool open, size_t *len)
{
    size_t cap = 64 + (size_t)n * 32, o = 0;
    char *b = malloc(cap);

    assert_non_null(b);
    o += (size_t)snprintf(b + o, cap - o, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (unsigned i = 1; i < n; i++)
        o += (size_t)snprintf(b + o, cap - o, "X-F%u: %u\r\n", i, i);
    if (!open)
        o += (size_t)snprintf(b + o, cap - o, "\r\n");
    *len = o;
    return b;
}

static void test_h1_req_parse_max_fields_ok(void **state)
{
    size_t len;
    char *b = many_fields(H1_MAX_FIELDS, false, &len);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, len, &r), len);
    assert_int_equal(h1_req_parse(b, len, &r, NULL), len);
    assert_int_equal(r.n_fields, H1_MAX_FIELDS);
    assert_string_equal(value_of(b, r.fields, r.n_fields, "x-f99"), "99");
    free(b);
}

static void test_h1_req_parse_too_many_fields_431(void **state)
{
    size_t len;
    char *b = many_fields(H1_MAX_FIELDS + 1, false, &len);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, len, &r), -431);
    free(b);
    /* Detected before the head is complete. */
    b = many_fields(H1_MAX_FIELDS + 1, true, &len);
    assert_int_equal(req_n(b, len, &r), -431);
    assert_int_equal(req_n(b, len - 1, &r), 0);
    free(b);
}

/* A complete request head of exactly <total> bytes, padded in one field value. */
static char *head_of_size(size_t total)
{
    const char *pre = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ";
    size_t lp = strlen(pre);
    char *b = malloc(total);

    assert_non_null(b);
    assert_true(total > lp + 4);
    memcpy(b, pre, lp);
    memset(b + lp, 'p', total - lp - 4);
    memcpy(b + total - 4, "\r\n\r\n", 4);
    return b;
}

static void test_h1_req_parse_max_head_ok(void **state)
{
    char *b = head_of_size(H1_MAX_HEAD);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, H1_MAX_HEAD, &r), H1_MAX_HEAD);
    assert_int_equal(req_n(b, H1_MAX_HEAD - 1, &r), 0);
    free(b);
}

static void test_h1_req_parse_head_too_large_431(void **state)
{
    char *b = head_of_size(H1_MAX_HEAD + 1);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, H1_MAX_HEAD + 1, &r), -431);
    /* Incomplete: 0 below the limit, 431 once H1_MAX_HEAD bytes hold no end of head. */
    assert_int_equal(req_n(b, H1_MAX_HEAD - 1, &r), 0);
    assert_int_equal(req_n(b, H1_MAX_HEAD, &r), -431);
    free(b);
    /* Leading empty lines count. */
    b = malloc(H1_MAX_HEAD);
    assert_non_null(b);
    for (size_t i = 0; i < H1_MAX_HEAD; i += 2)
        memcpy(b + i, "\r\n", 2);
    assert_int_equal(req_n(b, H1_MAX_HEAD - 2, &r), 0);
    assert_int_equal(req_n(b, H1_MAX_HEAD, &r), -431);
    free(b);
}

/* "GET /ttt...t HTTP/1.1" with a <tlen>-byte target; *len is the complete head's length. */
static char *long_target(size_t tlen, size_t *len)
{
    const char *tail = " HTTP/1.1\r\nHost: a\r\n\r\n";
    size_t lt = strlen(tail);
    char *b = malloc(4 + tlen + lt);

    assert_non_null(b);
    memcpy(b, "GET ", 4);
    b[4] = '/';
    memset(b + 5, 't', tlen - 1);
    memcpy(b + 4 + tlen, tail, lt);
    *len = 4 + tlen + lt;
    return b;
}

static void test_h1_req_parse_max_target_ok(void **state)
{
    size_t len;
    char *b = long_target(H1_MAX_TARGET, &len);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, len, &r), len);
    for (size_t k = 0; k < len; k += 97)
        assert_int_equal(req_n(b, k, &r), 0);
    free(b);
}

static void test_h1_req_parse_long_target_414(void **state)
{
    size_t len;
    char *b = long_target(H1_MAX_TARGET + 1, &len);
    struct h1_req r;

    (void)state;
    assert_int_equal(req_n(b, len, &r), -414);
    free(b);
}

static void test_h1_req_parse_long_target_incomplete_414(void **state)
{
    size_t len;
    char *b = long_target(H1_MAX_TARGET + 100, &len);
    struct h1_req r;

    (void)state;
    /* No SP after the target yet: 414 as soon as the target alone is too long. */
    assert_int_equal(req_n(b, 4 + H1_MAX_TARGET, &r), 0);
    assert_int_equal(req_n(b, 4 + H1_MAX_TARGET + 1, &r), -414);
    free(b);
}

static void test_h1_req_parse_long_request_line_no_crlf_414(void **state)
{
    size_t n = H1_MAX_TARGET + 100;
    char *b = malloc(n);
    struct h1_req r;

    (void)state;
    assert_non_null(b);
    memset(b, 'A', n); /* an endless method token */
    assert_int_equal(req_n(b, H1_MAX_TARGET + 64, &r), 0);
    assert_int_equal(req_n(b, H1_MAX_TARGET + 65, &r), -414);
    /* Complete, such a line is refused the same way. */
    memcpy(b + H1_MAX_TARGET + 70, " / HTTP/1.1\r\n\r\n", 15);
    assert_int_equal(req_n(b, H1_MAX_TARGET + 85, &r), -414);
    free(b);
}

static void test_h1_req_parse_upgrade_ignored(void **state)
{
    const char *s = "GET /u HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    assert_int_equal(r.method, H1_M_GET);
    assert_true(r.keep_alive);
    assert_int_equal(r.n_fields, 3);
}

/* ---- h1_req_parse: refusals ---- */

static void test_h1_req_parse_bare_lf_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\n\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n", -400);
    expect_req("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    /* Refused before the head completes. */
    expect_req("GET / HTTP/1.1\r\nHost: a\n", -400);
    expect_req("GET / HTTP/1.1\n", -400);
}

static void test_h1_req_parse_bare_cr_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\rHost: a\r\n\r\n", -400);
    expect_req("GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\r\n\r\n", -400);
    expect_req("\r\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    /* Incomplete, but a CR followed by something else than LF is already wrong. */
    expect_req("GET / HTTP/1.1\r\nHost: a\rX", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r", 0);
}

static void test_h1_req_parse_request_line_spacing_400(void **state)
{
    (void)state;
    expect_req("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET /  HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", -400);
    expect_req("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET /\tHTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET\r\nHost: a\r\n\r\n", -400);
}

static void test_h1_req_parse_bad_method_400(void **state)
{
    (void)state;
    expect_req("GE(T / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET\x7f / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    /* A TLS ClientHello on the HTTP port is refused from its first bytes. */
    expect_req_n("\x16\x03\x01\x02\x00\x01", 6, -400);
}

static void test_h1_req_parse_bad_target_400(void **state)
{
    static const char nul[] = "GET /a\x00 HTTP/1.1\r\nHost: a\r\n\r\n";

    (void)state;
    expect_req("GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req_n(nul, sizeof(nul) - 1, -400);
    expect_req("GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET * HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("CONNECT http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
}

static void test_h1_req_parse_obs_fold_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\n Host: a\r\n\r\n", -400);
}

static void test_h1_req_parse_space_before_colon_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost : a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX-A\t: b\r\n\r\n", -400);
}

static void test_h1_req_parse_bad_field_name_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX(y): b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX-A b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nno-colon\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX\xc3\xa9: b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX/Y: b\r\n\r\n", -400);
}

static void test_h1_req_parse_control_in_value_400(void **state)
{
    static const char bytes[] = {0x00, 0x01, 0x08, 0x0b, 0x0c, 0x1b, 0x1f, 0x7f};
    char buf[64];
    struct h1_req r;

    (void)state;
    for (size_t i = 0; i < sizeof(bytes); i++) {
        int n = snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a\r\nX: a?b\r\n\r\n");
        char *q = memchr(buf, '?', (size_t)n);

        *q = bytes[i];
        assert_int_equal(req_n(buf, (size_t)n, &r), -400);
    }
    /* HTAB is the one control byte allowed. */
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nX: a\tb\r\n\r\n", 35);
}

static void test_h1_req_parse_missing_host_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHostname: a\r\n\r\n", -400);
    expect_req("GET http://a/ HTTP/1.1\r\n\r\n", -400);
}

static void test_h1_req_parse_duplicate_host_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nhOST: b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", -400);
}

static void test_h1_req_parse_invalid_host_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost:\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a:\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a:0\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a:65536\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", -400);
    /* Host must be valid even when the absolute-form authority wins. */
    expect_req("GET http://a/ HTTP/1.1\r\nHost: b..c\r\n\r\n", -400);
}

static void test_h1_req_parse_http10_without_host_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.0\r\n\r\n", -400);
    expect_req("GET / HTTP/1.0\r\nUser-Agent: x\r\n\r\n", -400);
}

static void test_h1_req_parse_absolute_form_bad_scheme_400(void **state)
{
    (void)state;
    expect_req("GET https://a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET httpx://a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET http:/a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
}

static void test_h1_req_parse_absolute_form_bad_authority_400(void **state)
{
    (void)state;
    expect_req("GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET http://a:0/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET http://a..b/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET http://a:/ HTTP/1.1\r\nHost: a\r\n\r\n", -400);
}

static void test_h1_req_parse_te_on_get_head_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", -400);
    expect_req("HEAD / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\ntransfer-encoding:\r\n\r\n", -400);
}

static void test_h1_req_parse_body_on_get_head_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", -400);
    expect_req("HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n", -400);
}

static void test_h1_req_parse_bad_content_length_400(void **state)
{
    (void)state;
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n", -400);
}

static void test_h1_req_parse_differing_content_length_400(void **state)
{
    (void)state;
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
               -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n", -400);
}

static void test_h1_req_parse_te_with_content_length_400(void **state)
{
    (void)state;
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: "
               "chunked\r\n\r\n",
               -400);
    expect_req("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: "
               "0\r\n\r\n",
               -400);
}

static void test_h1_req_parse_garbage_version_400(void **state)
{
    (void)state;
    expect_req("GET / HTTP/1.10\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/x.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / http/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/11\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTP/1.1x\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / HTTPS/1.1\r\nHost: a\r\n\r\n", -400);
    expect_req("GET / FOO\r\n", -400);
    /* Refused while still incomplete. */
    expect_req("GET / HTTP/1.1x", -400);
    expect_req("GET / XTTP", -400);
}

static void test_h1_req_parse_missing_version_400(void **state)
{
    (void)state;
    expect_req("GET /\r\n\r\n", -400);
    expect_req("GET / \r\nHost: a\r\n\r\n", -400);
}

static void test_h1_req_parse_version_505(void **state)
{
    (void)state;
    expect_req("GET / HTTP/2.0\r\nHost: a\r\n\r\n", -505);
    expect_req("GET / HTTP/0.9\r\nHost: a\r\n\r\n", -505);
    expect_req("GET / HTTP/1.2\r\nHost: a\r\n\r\n", -505);
    expect_req("GET / HTTP/3.0\r\n", -505);
}

static void test_h1_req_parse_why_set_on_error(void **state)
{
    const char *s = "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
    const char *why = NULL;
    struct h1_req r;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, &why), -400);
    assert_non_null(why);
    assert_string_equal(why, "duplicate Host");
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), -400);
}

/* ---- h1_resp_parse ---- */

static void test_h1_resp_parse_content_length(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nETag: \"x\"\r\n\r\nbody";
    struct h1_resp r;
    size_t hl = strlen(s) - 4;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), hl);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.version_minor, 1);
    assert_span(s, r.reason, "OK");
    assert_int_equal(r.framing, H1_BODY_LENGTH);
    assert_int_equal(r.content_length, 1234);
    assert_true(r.keep_alive);
    assert_int_equal(r.n_fields, 2);
    assert_string_equal(value_of(s, r.fields, r.n_fields, "etag"), "\"x\"");
    assert_string_equal(value_of(s, r.fields, r.n_fields, "content-length"), "1234");
}

static void test_h1_resp_parse_chunked(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_int_equal(r.framing, H1_BODY_CHUNKED);
    assert_true(r.keep_alive);
}

static void test_h1_resp_parse_close_delimited(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nServer: x\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_int_equal(r.framing, H1_BODY_CLOSE);
    assert_false(r.keep_alive);
}

static void test_h1_resp_parse_head_request_no_body(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    const char *c = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_HEAD, &r), strlen(s));
    assert_int_equal(r.framing, H1_BODY_NONE);
    assert_int_equal(r.content_length, 99);
    assert_true(r.keep_alive);
    assert_int_equal(h1_resp_parse(c, strlen(c), H1_M_HEAD, &r), strlen(c));
    assert_int_equal(r.framing, H1_BODY_NONE);
}

static void test_h1_resp_parse_no_body_statuses(void **state)
{
    static const char *const heads[] = {
        "HTTP/1.1 204 No Content\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 102 Processing\r\n\r\n",
        "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    };
    struct h1_resp r;

    (void)state;
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        assert_int_equal(h1_resp_parse(heads[i], strlen(heads[i]), H1_M_GET, &r), strlen(heads[i]));
        assert_int_equal(r.framing, H1_BODY_NONE);
    }
}

static void test_h1_resp_parse_101_eproto(void **state)
{
    (void)state;
    expect_resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", H1_M_GET,
                -EPROTO);
}

static void test_h1_resp_parse_te_not_chunked_eproto(void **state)
{
    (void)state;
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
                "chunked\r\n\r\n",
                H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n", H1_M_GET, -EPROTO);
}

static void test_h1_resp_parse_te_with_content_length_eproto(void **state)
{
    (void)state;
    expect_resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                H1_M_GET, -EPROTO);
}

static void test_h1_resp_parse_equal_content_lengths_ok(void **state)
{
    const char *s =
        "HTTP/1.1 200 OK\r\nContent-Length: 42\r\nX: y\r\ncontent-length: 42, 42\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_int_equal(r.framing, H1_BODY_LENGTH);
    assert_int_equal(r.content_length, 42);
    assert_int_equal(r.n_fields, 3);
    assert_span(s, r.fields[1].value, "y");
    assert_span(s, r.fields[2].value, "42, 42");
}

static void test_h1_resp_parse_differing_content_length_eproto(void **state)
{
    (void)state;
    expect_resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", H1_M_GET,
                -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nContent-Length: 5,6\r\n\r\n", H1_M_GET, -EPROTO);
    /* Invalid framing fields are refused even where the body is known to be empty. */
    expect_resp("HTTP/1.1 200 OK\r\nContent-Length: 5,6\r\n\r\n", H1_M_HEAD, -EPROTO);
}

static void test_h1_resp_parse_invalid_content_length_eproto(void **state)
{
    static const char *const values[] = {
        "abc", "-1", "+5", "", "1 2", "5a", "0x5", "18446744073709551616", "99999999999999999999",
    };
    char buf[128];

    (void)state;
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n", values[i]);
        expect_resp(buf, H1_M_GET, -EPROTO);
    }
    snprintf(buf, sizeof(buf), "HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n",
             "9223372036854775807");
    expect_resp(buf, H1_M_GET, (ssize_t)strlen(buf));
}

static void test_h1_resp_parse_keep_alive_rules(void **state)
{
    const char *a = "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n";
    const char *b = "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n";
    const char *c = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n";
    const char *d =
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
    const char *e = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(a, strlen(a), H1_M_GET, &r), strlen(a));
    assert_true(r.keep_alive);
    assert_int_equal(r.version_minor, 0);
    assert_int_equal(h1_resp_parse(b, strlen(b), H1_M_GET, &r), strlen(b));
    assert_false(r.keep_alive);
    assert_int_equal(h1_resp_parse(c, strlen(c), H1_M_GET, &r), strlen(c));
    assert_false(r.keep_alive);
    assert_int_equal(h1_resp_parse(d, strlen(d), H1_M_GET, &r), strlen(d));
    assert_int_equal(r.framing, H1_BODY_CHUNKED);
    assert_false(r.keep_alive);
    assert_int_equal(h1_resp_parse(e, strlen(e), H1_M_GET, &r), strlen(e));
    assert_int_equal(r.framing, H1_BODY_CLOSE);
    assert_false(r.keep_alive);
}

static void test_h1_resp_parse_no_reason(void **state)
{
    const char *s = "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n";
    const char *t = "HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_int_equal(r.status, 404);
    assert_int_equal(r.reason.len, 0);
    assert_int_equal(h1_resp_parse(t, strlen(t), H1_M_GET, &r), strlen(t));
    assert_int_equal(r.reason.len, 0);
}

static void test_h1_resp_parse_bad_status_line_eproto(void **state)
{
    static const char *const lines[] = {
        "HTTP/1.1 20 OK",      "HTTP/1.1 2000 OK", "HTTP/1.1 600 X",   "HTTP/1.1 099 X",
        "HTTP/1.1  200 OK",    "HTTP/2 200 OK",    "HTTP/2.0 200 OK",  "HTTP/1.2 200 OK",
        "http/1.1 200 OK",     "ICY 200 OK",       "HTTP/1.1 2x0 OK",  "HTTP/1.1 200\x01",
        "HTTP/1.1 200 O\x7fK", "HTTP/1.1",         "HTTP/1.1 200\tOK", "",
    };
    char buf[128];

    (void)state;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        snprintf(buf, sizeof(buf), "%s\r\nContent-Length: 0\r\n\r\n", lines[i]);
        expect_resp(buf, H1_M_GET, -EPROTO);
    }
    /* Garbage instead of a status line fails without waiting for the end of the head. */
    expect_resp("<html>", H1_M_GET, -EPROTO);
}

static void test_h1_resp_parse_bad_fields_eproto(void **state)
{
    (void)state;
    expect_resp("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nContent-Length: 0\n\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nX : a\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", H1_M_GET, -EPROTO);
    expect_resp("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", H1_M_GET, -EPROTO);
}

static const char *const valid_resps[] = {
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-E:\r\nContent-Length: 3\r\n\r\n",
    "HTTP/1.0 404\r\nServer: s\r\n\r\n",
    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/1\r\nTE: x\r\n\r\n",
};

static void test_h1_resp_parse_every_prefix_incomplete(void **state)
{
    struct h1_resp r;

    (void)state;
    for (size_t i = 0; i < sizeof(valid_resps) / sizeof(valid_resps[0]); i++) {
        const char *h = valid_resps[i];
        size_t len = strlen(h);

        for (size_t k = 0; k < len; k++) {
            char *b = dup_exact(h, k);
            ssize_t n = h1_resp_parse(b, k, H1_M_GET, &r);

            free(b);
            if (n != 0)
                fail_msg("prefix %zu of \"%s\": %zd", k, esc(h, len), n);
        }
        expect_resp(h, H1_M_GET, (ssize_t)len);
    }
}

static void test_h1_resp_parse_too_large_e2big(void **state)
{
    size_t n = H1_MAX_RESP_HEAD + 10;
    char *b = malloc(n);
    const char *pre = "HTTP/1.1 200 OK\r\nX-Pad: ";
    struct h1_resp r;

    (void)state;
    assert_non_null(b);
    memcpy(b, pre, strlen(pre));
    memset(b + strlen(pre), 'p', n - strlen(pre));
    assert_int_equal(h1_resp_parse(b, H1_MAX_RESP_HEAD - 1, H1_M_GET, &r), 0);
    assert_int_equal(h1_resp_parse(b, H1_MAX_RESP_HEAD, H1_M_GET, &r), -E2BIG);
    assert_int_equal(h1_resp_parse(b, n, H1_M_GET, &r), -E2BIG);
    /* Exactly at the limit is fine. */
    memcpy(b + H1_MAX_RESP_HEAD - 4, "\r\n\r\n", 4);
    assert_int_equal(h1_resp_parse(b, n, H1_M_GET, &r), H1_MAX_RESP_HEAD);
    free(b);
}

static void test_h1_resp_parse_too_many_fields_eproto(void **state)
{
    char buf[4096];
    size_t o = 0;
    struct h1_resp r;

    (void)state;
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "HTTP/1.1 200 OK\r\n");
    for (unsigned i = 0; i < H1_MAX_FIELDS; i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "X-%u: %u\r\n", i, i);
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\r\n");
    assert_int_equal(h1_resp_parse(buf, o, H1_M_GET, &r), o);
    assert_int_equal(r.n_fields, H1_MAX_FIELDS);
    o -= 2;
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "X-Last: 1\r\n\r\n");
    assert_int_equal(h1_resp_parse(buf, o, H1_M_GET, &r), -EPROTO);
}

/* ---- h1_chunked ---- */

static const char chunked_stream[] = "5\r\nhello\r\n"
                                     "1A;name=value;x=\"q\"\r\nabcdefghijklmnopqrstuvwxyz\r\n"
                                     "000A  ; ext\r\n, world!\r\n\r\n"
                                     "1\r\n\x00\r\n"
                                     "0;last\r\nTrailer-A: 1\r\nTrailer-B: two\r\n\r\n";
static const char chunked_body[] = "hello"
                                   "abcdefghijklmnopqrstuvwxyz"
                                   ", world!\r\n"
                                   "\x00";

static uint32_t rng_next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/*
 * Decode s[0..len) arriving in pieces: <piece> bytes at a time (0: random sizes from <seed>),
 * taking at most <take> body bytes per call (0: a random share of what is available). Returns
 * 0 or the decoder's error; *used is the input consumed, body[0..*blen) the body seen.
 */
static int decode(const char *s, size_t len, size_t piece, size_t take, uint32_t seed, size_t *used,
                  char *body, size_t *blen, struct h1_chunked *c)
{
    char *in = dup_exact(s, len);
    size_t pos = 0, arrived = 0;
    uint32_t rng = seed ? seed : 1;

    h1_chunked_init(c);
    *blen = 0;
    while (!c->done) {
        size_t framing, avail, n;
        int rc = h1_chunked_parse(c, in + pos, arrived - pos, &framing, &avail);

        if (rc != 0) {
            free(in);
            return rc;
        }
        assert_true(framing + avail <= arrived - pos);
        pos += framing;
        n = avail;
        if (n > 0) {
            size_t lim = take ? take : 1 + rng_next(&rng) % avail;

            n = n < lim ? n : lim;
            memcpy(body + *blen, in + pos, n);
            *blen += n;
            h1_chunked_take(c, n);
            pos += n;
        }
        if (framing + n == 0 && !c->done) {
            size_t add = piece ? piece : 1 + rng_next(&rng) % 7;

            if (arrived == len)
                break;
            arrived = arrived + add < len ? arrived + add : len;
        }
    }
    *used = pos;
    free(in);
    return 0;
}

static void check_full_decode(size_t piece, size_t take, uint32_t seed)
{
    char body[256];
    size_t used, blen, slen = sizeof(chunked_stream) - 1;
    struct h1_chunked c;

    assert_int_equal(decode(chunked_stream, slen, piece, take, seed, &used, body, &blen, &c), 0);
    assert_true(c.done);
    assert_int_equal(used, slen);
    assert_int_equal(blen, sizeof(chunked_body) - 1);
    assert_memory_equal(body, chunked_body, blen);
}

static void test_h1_chunked_parse_whole(void **state)
{
    (void)state;
    check_full_decode(sizeof(chunked_stream), 1000, 0);
}

static void test_h1_chunked_parse_byte_by_byte(void **state)
{
    (void)state;
    check_full_decode(1, 1000, 0);
    check_full_decode(1, 1, 0);
}

static void test_h1_chunked_parse_every_split_point(void **state)
{
    size_t slen = sizeof(chunked_stream) - 1;

    (void)state;
    /* Input arriving <k> bytes at a time for every k, the body consumed whole or in bits. */
    for (size_t k = 1; k < slen; k++) {
        check_full_decode(k, 1000, 0);
        check_full_decode(k, 1, 0);
        check_full_decode(k, 3, 0);
    }
}

static void test_h1_chunked_parse_random_splits(void **state)
{
    (void)state;
    for (uint32_t seed = 1; seed <= 500; seed++)
        check_full_decode(0, 0, seed * 2654435761u);
}

static void test_h1_chunked_parse_stops_at_end(void **state)
{
    const char *s = "3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n";
    struct h1_chunked c;
    size_t framing, avail;

    (void)state;
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, s, strlen(s), &framing, &avail), 0);
    assert_int_equal(framing, 3);
    assert_int_equal(avail, 3);
    h1_chunked_take(&c, 3);
    assert_int_equal(h1_chunked_parse(&c, s + 6, strlen(s) - 6, &framing, &avail), 0);
    assert_true(c.done);
    assert_int_equal(avail, 0);
    assert_int_equal(framing, 7);
    assert_string_equal(s + 6 + framing, "HTTP/1.1 200 OK\r\n");
    /* Once done, nothing more is consumed. */
    assert_int_equal(h1_chunked_parse(&c, s + 13, strlen(s) - 13, &framing, &avail), 0);
    assert_int_equal(framing, 0);
    assert_int_equal(avail, 0);
}

static void test_h1_chunked_parse_avail_bounded_by_chunk(void **state)
{
    const char *s = "4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n";
    struct h1_chunked c;
    size_t framing, avail;

    (void)state;
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, s, strlen(s), &framing, &avail), 0);
    assert_int_equal(framing, 3);
    assert_int_equal(avail, 4);
    h1_chunked_take(&c, 1);
    /* Not taking anything is allowed: the same bytes are offered again. */
    assert_int_equal(h1_chunked_parse(&c, s + 4, strlen(s) - 4, &framing, &avail), 0);
    assert_int_equal(framing, 0);
    assert_int_equal(avail, 3);
    h1_chunked_take(&c, 0);
    h1_chunked_take(&c, 3);
    assert_int_equal(h1_chunked_parse(&c, s + 7, strlen(s) - 7, &framing, &avail), 0);
    assert_int_equal(framing, 5);
    assert_int_equal(avail, 2);
}

static int decode_all(const char *s, size_t len)
{
    char body[8192];
    size_t used, blen;
    struct h1_chunked c;
    int rc = decode(s, len, len, 1000000, 0, &used, body, &blen, &c);

    return rc == 0 && !c.done ? 1 : rc;
}

static void test_h1_chunked_parse_hex_overflow_eproto(void **state)
{
    static const char big[] = "FFFFFFFFFFFFFFFF\r\nab";
    struct h1_chunked c;
    size_t framing, avail;

    (void)state;
    assert_int_equal(decode_all("10000000000000000\r\n", 19), -EPROTO);
    /* The largest size is accepted: the data just never ends here. */
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, big, sizeof(big) - 1, &framing, &avail), 0);
    assert_int_equal(framing, 18);
    assert_int_equal(avail, 2);
    assert_int_equal(c.remaining, UINT64_MAX);
    /* Leading zeros do not count towards overflow. */
    assert_int_equal(decode_all("000000000000000000001\r\nx\r\n0\r\n\r\n", 31), 0);
}

static void test_h1_chunked_parse_bad_size_eproto(void **state)
{
    (void)state;
    assert_int_equal(decode_all("zz\r\n", 4), -EPROTO);
    assert_int_equal(decode_all("\r\n", 2), -EPROTO);
    assert_int_equal(decode_all(";x\r\n", 4), -EPROTO);
    assert_int_equal(decode_all("-1\r\n", 4), -EPROTO);
    assert_int_equal(decode_all("0x5\r\n", 5), -EPROTO);
    assert_int_equal(decode_all("5\r\r\n", 4), -EPROTO);
    assert_int_equal(decode_all("5;a\x01\r\n", 6), -EPROTO);
}

static void test_h1_chunked_parse_missing_crlf_after_data_eproto(void **state)
{
    (void)state;
    assert_int_equal(decode_all("5\r\nhelloX\r\n0\r\n\r\n", 17), -EPROTO);
    assert_int_equal(decode_all("5\r\nhello\rX0\r\n\r\n", 16), -EPROTO);
    assert_int_equal(decode_all("5\r\nhello0\r\n\r\n", 13), -EPROTO);
}

static void test_h1_chunked_parse_bare_lf_eproto(void **state)
{
    (void)state;
    assert_int_equal(decode_all("5\nhello\r\n0\r\n\r\n", 15), -EPROTO);
    assert_int_equal(decode_all("5\r\nhello\n0\r\n\r\n", 15), -EPROTO);
    assert_int_equal(decode_all("5\r\nhello\r\n0\r\n\n", 14), -EPROTO);
    assert_int_equal(decode_all("0\r\nX: y\n\r\n", 10), -EPROTO);
}

static void test_h1_chunked_parse_extensions_ignored(void **state)
{
    const char *s = "5;foo=bar;baz\r\nhello\r\n0 ;q=\"a b\"\r\n\r\n";
    char body[64];
    size_t used, blen;
    struct h1_chunked c;

    (void)state;
    assert_int_equal(decode(s, strlen(s), 2, 1, 7, &used, body, &blen, &c), 0);
    assert_true(c.done);
    assert_int_equal(used, strlen(s));
    assert_int_equal(blen, 5);
    assert_memory_equal(body, "hello", 5);
}

static void test_h1_chunked_parse_long_size_line_eproto(void **state)
{
    char *s = malloc(5000);

    (void)state;
    assert_non_null(s);
    memcpy(s, "1;", 2);
    memset(s + 2, 'e', 4094); /* 4096 bytes: the limit */
    memcpy(s + 4096, "\r\nx\r\n0\r\n\r\n", 10);
    assert_int_equal(decode_all(s, 4106), 0);
    memset(s + 2, 'e', 4095);
    memcpy(s + 4097, "\r\nx\r\n0\r\n\r\n", 10);
    assert_int_equal(decode_all(s, 4107), -EPROTO);
    /* The size digits count too. */
    memset(s, '0', 4097);
    assert_int_equal(decode_all(s, 4097), -EPROTO);
    free(s);
}

static void test_h1_chunked_parse_trailers_consumed(void **state)
{
    const char *s = "0\r\nX-Checksum: abc\r\nX-Other:\t1\r\n\r\nnext";
    struct h1_chunked c;
    size_t framing, avail;

    (void)state;
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, s, strlen(s), &framing, &avail), 0);
    assert_true(c.done);
    assert_int_equal(avail, 0);
    assert_int_equal(framing, strlen(s) - 4);
}

static void test_h1_chunked_parse_long_trailers_eproto(void **state)
{
    size_t n = 20000;
    char *s = malloc(n);
    size_t o = 0;

    (void)state;
    assert_non_null(s);
    memcpy(s, "0\r\n", 3);
    o = 3;
    while (o + 100 < n) {
        memcpy(s + o, "X-T: ", 5);
        memset(s + o + 5, 'v', 93);
        memcpy(s + o + 98, "\r\n", 2);
        o += 100;
    }
    memcpy(s + o, "\r\n", 2);
    o += 2;
    assert_int_equal(decode_all(s, o), -EPROTO);
    /* A trailer section well under the limit is fine. */
    memcpy(s + 3 + 100 * 10, "\r\n", 2);
    assert_int_equal(decode_all(s, 3 + 100 * 10 + 2), 0);
    free(s);
}

static void test_h1_chunked_parse_error_sticky(void **state)
{
    struct h1_chunked c;
    size_t framing, avail;

    (void)state;
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, "g", 1, &framing, &avail), -EPROTO);
    assert_int_equal(h1_chunked_parse(&c, "0\r\n\r\n", 5, &framing, &avail), -EPROTO);
    assert_int_equal(h1_chunked_parse(&c, "", 0, &framing, &avail), -EPROTO);
    assert_false(c.done);
}

static void test_h1_chunked_parse_empty_input(void **state)
{
    struct h1_chunked c;
    size_t framing = 9, avail = 9;

    (void)state;
    h1_chunked_init(&c);
    assert_int_equal(h1_chunked_parse(&c, "", 0, &framing, &avail), 0);
    assert_int_equal(framing, 0);
    assert_int_equal(avail, 0);
    assert_false(c.done);
}

/* ---- h1_authority_parse ---- */

static int auth(const char *s, struct h1_authority *a)
{
    char *b = dup_exact(s, strlen(s));
    int rc = h1_authority_parse(b, strlen(s), a);

    free(b);
    return rc;
}

static void test_h1_authority_parse_lowercases(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(auth("Cache.Steam-Content.COM", &a), 0);
    assert_string_equal(a.host, "cache.steam-content.com");
    assert_string_equal(a.ident, "cache.steam-content.com");
    assert_int_equal(a.port, 80);
    assert_false(a.is_ip);
    assert_int_equal(auth("under_score.a-b.c", &a), 0);
    assert_string_equal(a.host, "under_score.a-b.c");
    assert_int_equal(auth("x", &a), 0);
    assert_int_equal(auth("localhost", &a), 0);
    assert_false(a.is_ip);
}

static void test_h1_authority_parse_port(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(auth("Example.com:8080", &a), 0);
    assert_string_equal(a.host, "example.com");
    assert_string_equal(a.ident, "example.com:8080");
    assert_int_equal(a.port, 8080);
    assert_int_equal(auth("a:80", &a), 0);
    assert_string_equal(a.ident, "a:80");
    assert_int_equal(a.port, 80);
    assert_int_equal(auth("a:65535", &a), 0);
    assert_int_equal(a.port, 65535);
    assert_int_equal(auth("a:1", &a), 0);
    assert_int_equal(a.port, 1);
}

static void test_h1_authority_parse_trailing_dot(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(auth("Example.com.", &a), 0);
    assert_string_equal(a.host, "example.com");
    assert_string_equal(a.ident, "example.com");
    assert_int_equal(auth("example.com.:81", &a), 0);
    assert_string_equal(a.host, "example.com");
    assert_string_equal(a.ident, "example.com:81");
    assert_int_equal(a.port, 81);
}

static void test_h1_authority_parse_bad_dots_einval(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(auth("example.com..", &a), -EINVAL);
    assert_int_equal(auth(".", &a), -EINVAL);
    assert_int_equal(auth("..", &a), -EINVAL);
    assert_int_equal(auth(".a", &a), -EINVAL);
    assert_int_equal(auth("a..b", &a), -EINVAL);
    assert_int_equal(auth(".:80", &a), -EINVAL);
}

static void test_h1_authority_parse_bad_chars_einval(void **state)
{
    static const char *const bad[] = {
        "a b",         "a/b", "a@b", "user:pw@host", "a%41",  "a\tb",
        "caf\xc3\xa9", "a*b", "a,b", "a]",           "a\x7f",
    };
    struct h1_authority a;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth(bad[i], &a) != -EINVAL)
            fail_msg("accepted \"%s\"", esc(bad[i], strlen(bad[i])));
}

static void test_h1_authority_parse_bad_port_einval(void **state)
{
    static const char *const bad[] = {
        "a:",   "a:0",  "a:00000", "a:65536", "a:99999", "a:123456", "a:+1",
        "a:-1", "a:1x", "a:1:2",   "a: 80",   ":80",     "a:0x50",
    };
    struct h1_authority a;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth(bad[i], &a) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
}

static void test_h1_authority_parse_length_limit(void **state)
{
    char host[300];
    struct h1_authority a;

    (void)state;
    /* 253 bytes of labels "aaaaaaaaa." ending in a label. */
    for (size_t i = 0; i < 253; i++)
        host[i] = (i % 10 == 9) ? '.' : 'a';
    host[253] = '\0';
    assert_int_equal(auth(host, &a), 0);
    assert_int_equal(strlen(a.host), 253);
    memcpy(host + 253, ".:65535", 8);
    assert_int_equal(auth(host, &a), 0);
    assert_string_equal(a.ident + 253, ":65535");
    host[253] = 'a';
    host[254] = '\0';
    assert_int_equal(auth(host, &a), -EINVAL);
}

static void test_h1_authority_parse_ipv4_spellings(void **state)
{
    static const char *const ips[] = {
        "127.0.0.1",  "127.1",         "0x7f.0.0.1",   "2130706433",
        "0177.0.0.1", "10.0.0.1:8080", "192.168.1.1.", "0X7F000001",
    };
    struct h1_authority a;

    (void)state;
    for (size_t i = 0; i < sizeof(ips) / sizeof(ips[0]); i++) {
        if (auth(ips[i], &a) != 0 || !a.is_ip)
            fail_msg("not an IP: \"%s\"", ips[i]);
    }
    assert_int_equal(auth("0X7F000001", &a), 0);
    assert_string_equal(a.host, "0x7f000001");
    assert_int_equal(auth("1.2.3.4.example", &a), 0);
    assert_false(a.is_ip);
    assert_int_equal(auth("1e100.net", &a), 0);
    assert_false(a.is_ip);
}

static void test_h1_authority_parse_ipv6(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(auth("[::1]", &a), 0);
    assert_string_equal(a.host, "::1");
    assert_string_equal(a.ident, "[::1]");
    assert_true(a.is_ip);
    assert_int_equal(a.port, 80);
    assert_int_equal(auth("[FE80::1:AB]:8080", &a), 0);
    assert_string_equal(a.host, "fe80::1:ab");
    assert_string_equal(a.ident, "[fe80::1:ab]:8080");
    assert_int_equal(a.port, 8080);
    assert_int_equal(auth("[::ffff:10.0.0.1]", &a), 0);
    assert_string_equal(a.host, "::ffff:10.0.0.1");
    assert_true(a.is_ip);
}

static void test_h1_authority_parse_bad_ipv6_einval(void **state)
{
    static const char *const bad[] = {
        "[::1",
        "[]",
        "[zz]",
        "[::1]x",
        "[::1]:",
        "[::1]:0",
        "::1",
        "[1.2.3.4]",
        "[::1%eth0]",
        "[:::1]",
        "[1:2:3:4:5:6:7:8:9]",
        "[::1]]",
        "[[::1]]",
    };
    struct h1_authority a;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth(bad[i], &a) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
}

static void test_h1_authority_parse_empty_einval(void **state)
{
    struct h1_authority a;

    (void)state;
    assert_int_equal(h1_authority_parse("x", 0, &a), -EINVAL);
}

/* ---- helpers ---- */

static void test_h1_find_case_insensitive(void **state)
{
    const char *s = "GET / HTTP/1.1\r\nHost: a\r\nX-Dup: 1\r\nx-dup: 2\r\n\r\n";
    struct h1_req r;
    const struct h1_field *f;

    (void)state;
    assert_int_equal(h1_req_parse(s, strlen(s), &r, NULL), strlen(s));
    f = h1_find(s, r.fields, r.n_fields, "X-DUP");
    assert_ptr_equal(f, &r.fields[1]);
    assert_null(h1_find(s, r.fields, r.n_fields, "X-Du"));
    assert_null(h1_find(s, r.fields, r.n_fields, "X-Dupe"));
    assert_null(h1_find(s, r.fields, 0, "host"));
}

static void test_h1_is_hop_by_hop_standard(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                    "Proxy-Connection: x\r\nTE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\n"
                    "Proxy-Authenticate: Basic\r\nProxy-Authorization: x\r\nContent-Length: 0\r\n"
                    "ETag: \"e\"\r\nTEA: 1\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_int_equal(r.n_fields, 11);
    for (unsigned i = 0; i < 8; i++)
        assert_true(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[i]));
    for (unsigned i = 8; i < 11; i++)
        assert_false(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[i]));
}

static void test_h1_is_hop_by_hop_connection_listed(void **state)
{
    const char *s = "HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: close, X-A\r\nX-B: 2\r\n"
                    "connection: x-b ,\r\nX-C: 3\r\nContent-Length: 0\r\n\r\n";
    struct h1_resp r;

    (void)state;
    assert_int_equal(h1_resp_parse(s, strlen(s), H1_M_GET, &r), strlen(s));
    assert_true(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[0]));
    assert_true(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[2]));
    assert_false(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[4]));
    assert_false(h1_is_hop_by_hop(s, r.fields, r.n_fields, &r.fields[5]));
}

static void test_h1_list_has_tokens(void **state)
{
    const char *v = " keep-alive ,\tUpgrade,, close ";

    (void)state;
    assert_true(h1_list_has(v, strlen(v), "close"));
    assert_true(h1_list_has(v, strlen(v), "upgrade"));
    assert_true(h1_list_has(v, strlen(v), "KEEP-ALIVE"));
    assert_false(h1_list_has(v, strlen(v), "clos"));
    assert_false(h1_list_has(v, strlen(v), "keep"));
    assert_false(h1_list_has("closed", 6, "close"));
    assert_false(h1_list_has("", 0, "close"));
    assert_false(h1_list_has(" , ,", 4, "close"));
    /* Only <len> bytes count. */
    assert_false(h1_list_has("close", 4, "close"));
}

static void test_h1_reason_known_and_unknown(void **state)
{
    static const int codes[] = {200, 204, 206, 301, 302, 304, 307, 308, 400, 403, 404, 405,
                                408, 412, 414, 416, 431, 500, 502, 503, 504, 505, 508};

    (void)state;
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        assert_string_not_equal(h1_reason(codes[i]), "Unknown");
    assert_string_equal(h1_reason(200), "OK");
    assert_string_equal(h1_reason(404), "Not Found");
    assert_string_equal(h1_reason(431), "Request Header Fields Too Large");
    assert_string_equal(h1_reason(508), "Loop Detected");
    assert_string_equal(h1_reason(799), "Unknown");
    assert_string_equal(h1_reason(-1), "Unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h1_req_parse_get_origin_form),
        cmocka_unit_test(test_h1_req_parse_heartbeat_exemptions),
        cmocka_unit_test(test_h1_req_parse_head_method),
        cmocka_unit_test(test_h1_req_parse_http10_closes_by_default),
        cmocka_unit_test(test_h1_req_parse_http10_keep_alive),
        cmocka_unit_test(test_h1_req_parse_connection_close),
        cmocka_unit_test(test_h1_req_parse_absolute_form),
        cmocka_unit_test(test_h1_req_parse_absolute_form_without_path),
        cmocka_unit_test(test_h1_req_parse_absolute_form_http10_without_host),
        cmocka_unit_test(test_h1_req_parse_absolute_form_ipv6),
        cmocka_unit_test(test_h1_req_parse_fragment_dropped),
        cmocka_unit_test(test_h1_req_parse_ows_trimmed),
        cmocka_unit_test(test_h1_req_parse_empty_value),
        cmocka_unit_test(test_h1_req_parse_obs_text_allowed),
        cmocka_unit_test(test_h1_req_parse_leading_crlf_skipped),
        cmocka_unit_test(test_h1_req_parse_post_with_body),
        cmocka_unit_test(test_h1_req_parse_post_te_sets_has_te),
        cmocka_unit_test(test_h1_req_parse_unknown_method_is_other),
        cmocka_unit_test(test_h1_req_parse_get_content_length_zero),
        cmocka_unit_test(test_h1_req_parse_duplicate_equal_content_length),
        cmocka_unit_test(test_h1_req_parse_connect_authority_form),
        cmocka_unit_test(test_h1_req_parse_options_asterisk),
        cmocka_unit_test(test_h1_req_parse_pipelined_returns_first_length),
        cmocka_unit_test(test_h1_req_parse_every_prefix_incomplete),
        cmocka_unit_test(test_h1_req_parse_max_fields_ok),
        cmocka_unit_test(test_h1_req_parse_too_many_fields_431),
        cmocka_unit_test(test_h1_req_parse_max_head_ok),
        cmocka_unit_test(test_h1_req_parse_head_too_large_431),
        cmocka_unit_test(test_h1_req_parse_max_target_ok),
        cmocka_unit_test(test_h1_req_parse_long_target_414),
        cmocka_unit_test(test_h1_req_parse_long_target_incomplete_414),
        cmocka_unit_test(test_h1_req_parse_long_request_line_no_crlf_414),
        cmocka_unit_test(test_h1_req_parse_upgrade_ignored),
        cmocka_unit_test(test_h1_req_parse_bare_lf_400),
        cmocka_unit_test(test_h1_req_parse_bare_cr_400),
        cmocka_unit_test(test_h1_req_parse_request_line_spacing_400),
        cmocka_unit_test(test_h1_req_parse_bad_method_400),
        cmocka_unit_test(test_h1_req_parse_bad_target_400),
        cmocka_unit_test(test_h1_req_parse_obs_fold_400),
        cmocka_unit_test(test_h1_req_parse_space_before_colon_400),
        cmocka_unit_test(test_h1_req_parse_bad_field_name_400),
        cmocka_unit_test(test_h1_req_parse_control_in_value_400),
        cmocka_unit_test(test_h1_req_parse_missing_host_400),
        cmocka_unit_test(test_h1_req_parse_duplicate_host_400),
        cmocka_unit_test(test_h1_req_parse_invalid_host_400),
        cmocka_unit_test(test_h1_req_parse_http10_without_host_400),
        cmocka_unit_test(test_h1_req_parse_absolute_form_bad_scheme_400),
        cmocka_unit_test(test_h1_req_parse_absolute_form_bad_authority_400),
        cmocka_unit_test(test_h1_req_parse_te_on_get_head_400),
        cmocka_unit_test(test_h1_req_parse_body_on_get_head_400),
        cmocka_unit_test(test_h1_req_parse_bad_content_length_400),
        cmocka_unit_test(test_h1_req_parse_differing_content_length_400),
        cmocka_unit_test(test_h1_req_parse_te_with_content_length_400),
        cmocka_unit_test(test_h1_req_parse_garbage_version_400),
        cmocka_unit_test(test_h1_req_parse_missing_version_400),
        cmocka_unit_test(test_h1_req_parse_version_505),
        cmocka_unit_test(test_h1_req_parse_why_set_on_error),
        cmocka_unit_test(test_h1_resp_parse_content_length),
        cmocka_unit_test(test_h1_resp_parse_chunked),
        cmocka_unit_test(test_h1_resp_parse_close_delimited),
        cmocka_unit_test(test_h1_resp_parse_head_request_no_body),
        cmocka_unit_test(test_h1_resp_parse_no_body_statuses),
        cmocka_unit_test(test_h1_resp_parse_101_eproto),
        cmocka_unit_test(test_h1_resp_parse_te_not_chunked_eproto),
        cmocka_unit_test(test_h1_resp_parse_te_with_content_length_eproto),
        cmocka_unit_test(test_h1_resp_parse_equal_content_lengths_ok),
        cmocka_unit_test(test_h1_resp_parse_differing_content_length_eproto),
        cmocka_unit_test(test_h1_resp_parse_invalid_content_length_eproto),
        cmocka_unit_test(test_h1_resp_parse_keep_alive_rules),
        cmocka_unit_test(test_h1_resp_parse_no_reason),
        cmocka_unit_test(test_h1_resp_parse_bad_status_line_eproto),
        cmocka_unit_test(test_h1_resp_parse_bad_fields_eproto),
        cmocka_unit_test(test_h1_resp_parse_every_prefix_incomplete),
        cmocka_unit_test(test_h1_resp_parse_too_large_e2big),
        cmocka_unit_test(test_h1_resp_parse_too_many_fields_eproto),
        cmocka_unit_test(test_h1_chunked_parse_whole),
        cmocka_unit_test(test_h1_chunked_parse_byte_by_byte),
        cmocka_unit_test(test_h1_chunked_parse_every_split_point),
        cmocka_unit_test(test_h1_chunked_parse_random_splits),
        cmocka_unit_test(test_h1_chunked_parse_stops_at_end),
        cmocka_unit_test(test_h1_chunked_parse_avail_bounded_by_chunk),
        cmocka_unit_test(test_h1_chunked_parse_hex_overflow_eproto),
        cmocka_unit_test(test_h1_chunked_parse_bad_size_eproto),
        cmocka_unit_test(test_h1_chunked_parse_missing_crlf_after_data_eproto),
        cmocka_unit_test(test_h1_chunked_parse_bare_lf_eproto),
        cmocka_unit_test(test_h1_chunked_parse_extensions_ignored),
        cmocka_unit_test(test_h1_chunked_parse_long_size_line_eproto),
        cmocka_unit_test(test_h1_chunked_parse_trailers_consumed),
        cmocka_unit_test(test_h1_chunked_parse_long_trailers_eproto),
        cmocka_unit_test(test_h1_chunked_parse_error_sticky),
        cmocka_unit_test(test_h1_chunked_parse_empty_input),
        cmocka_unit_test(test_h1_authority_parse_lowercases),
        cmocka_unit_test(test_h1_authority_parse_port),
        cmocka_unit_test(test_h1_authority_parse_trailing_dot),
        cmocka_unit_test(test_h1_authority_parse_bad_dots_einval),
        cmocka_unit_test(test_h1_authority_parse_bad_chars_einval),
        cmocka_unit_test(test_h1_authority_parse_bad_port_einval),
        cmocka_unit_test(test_h1_authority_parse_length_limit),
        cmocka_unit_test(test_h1_authority_parse_ipv4_spellings),
        cmocka_unit_test(test_h1_authority_parse_ipv6),
        cmocka_unit_test(test_h1_authority_parse_bad_ipv6_einval),
        cmocka_unit_test(test_h1_authority_parse_empty_einval),
        cmocka_unit_test(test_h1_find_case_insensitive),
        cmocka_unit_test(test_h1_is_hop_by_hop_standard),
        cmocka_unit_test(test_h1_is_hop_by_hop_connection_listed),
        cmocka_unit_test(test_h1_list_has_tokens),
        cmocka_unit_test(test_h1_reason_known_and_unknown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
