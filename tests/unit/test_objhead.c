/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Unit tests for objhead: which response fields are stored, the stored Date, the Age arithmetic
 * of RFC 9111 §4.2.3, the size bound and what a 304/412/416 leaves out.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"
#include "httpdate.h"
#include "objhead.h"

#define T0 784111777 /* Sun, 06 Nov 1994 08:49:37 GMT */
#define T0_DATE "Sun, 06 Nov 1994 08:49:37 GMT"

static struct h1_resp g_resp;
static char g_buf[70000];

static struct objhead *head_of(const char *resp, double req_time, double resp_time)
{
    ssize_t n = h1_resp_parse(resp, strlen(resp), H1_M_GET, &g_resp);
    if (n != (ssize_t)strlen(resp))
        fail_msg("response refused (%zd): %s", n, resp);
    struct objhead *h = NULL;
    assert_int_equal(objhead_from_response(resp, &g_resp, req_time, resp_time, &h), 0);
    assert_non_null(h);
    return h;
}

static void test_objhead_keeps_end_to_end_fields_in_order(void **state)
{
    (void)state;
    struct objhead *h = head_of("HTTP/1.1 200 OK\r\n"
                                "Content-Encoding: gzip\r\n"
                                "Connection: keep-alive, X-Hop\r\n"
                                "X-Hop: 1\r\n"
                                "Keep-Alive: timeout=5\r\n"
                                "Content-Length: 10\r\n"
                                "Set-Cookie: a=b\r\n"
                                "ETag: \"e\"\r\n"
                                "Last-Modified: " T0_DATE "\r\n"
                                "Content-Type: text/plain\r\n"
                                "Accept-Ranges: bytes\r\n"
                                "Proxy-Foo: 1\r\n"
                                "X-LanCache-Processed-By: other\r\n"
                                "X-Upstream-Cache-Status: HIT\r\n"
                                "Age: 3\r\n"
                                "Date: " T0_DATE "\r\n"
                                "Cache-Control: max-age=60\r\n"
                                "X-Custom: v  w\r\n"
                                "Content-Disposition: attachment; filename=\"a.bin\"\r\n"
                                "\r\n",
                                T0, T0);
    assert_string_equal(h->text, "Content-Encoding: gzip\r\n"
                                 "Cache-Control: max-age=60\r\n"
                                 "X-Custom: v  w\r\n"
                                 "Content-Disposition: attachment; filename=\"a.bin\"\r\n");
    assert_int_equal(h->len, strlen(h->text));
    assert_string_equal(h->date, T0_DATE);
    assert_int_equal(h->date_len, strlen(T0_DATE));
    assert_int_equal(h->date_value, T0);
    assert_int_equal(h->initial_age, 3); /* Age: 3, no delay, Date == response time */
    objhead_unref(&h);
    assert_null(h);
}

static void test_objhead_keeps(void **state)
{
    (void)state;
    assert_true(objhead_keeps("X-Custom", 8));
    assert_true(objhead_keeps("Content-Encoding", 16));
    assert_true(objhead_keeps("Vary", 4));
    assert_false(objhead_keeps("set-cookie", 10));
    assert_false(objhead_keeps("SET-COOKIE", 10));
    assert_false(objhead_keeps("Proxy-Authenticate", 18));
    assert_false(objhead_keeps("x-lancache-anything", 19));
    assert_false(objhead_keeps("X-Upstream-Foo", 14));
    assert_false(objhead_keeps("Transfer-Encoding", 17));
    assert_false(objhead_keeps("Content-Range", 13));
    assert_true(objhead_keeps("Content-Ranges", 14)); /* a name, not a prefix */
}

static void test_objhead_date_is_ours_when_missing_or_invalid(void **state)
{
    (void)state;
    struct objhead *h = head_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", T0, T0 + 5);
    char want[HTTPDATE_LEN + 1];
    httpdate_format(T0 + 5, want);
    assert_string_equal(h->date, want);
    assert_int_equal(h->response_time, T0 + 5);
    assert_int_equal(h->initial_age, 5); /* the request took 5 s: response_delay */
    assert_int_equal(h->len, 0);
    objhead_unref(&h);

    h = head_of("HTTP/1.1 200 OK\r\nDate: yesterday\r\nContent-Length: 1\r\n\r\n", T0, T0);
    httpdate_format(T0, want);
    assert_string_equal(h->date, want);
    assert_int_equal(h->initial_age, 0);
    objhead_unref(&h);
}

static void test_objhead_age_follows_rfc9111(void **state)
{
    (void)state;
    /* apparent_age (response_time - Date) wins over Age + delay. */
    struct objhead *h = head_of("HTTP/1.1 200 OK\r\nDate: " T0_DATE "\r\nAge: 10\r\n"
                                "Content-Length: 1\r\n\r\n",
                                T0 + 99, T0 + 100);
    assert_int_equal(h->initial_age, 100);
    assert_int_equal(objhead_age(h, T0 + 100), 100);
    assert_int_equal(objhead_age(h, T0 + 160), 160); /* + resident time */
    assert_int_equal(objhead_age(h, T0 + 50), 100);  /* a clock stepped back adds nothing */
    objhead_unref(&h);
    /* corrected_age_value (Age + delay) wins over a Date in the future. */
    h = head_of("HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:59:37 GMT\r\nAge: 10\r\n"
                "Content-Length: 1\r\n\r\n",
                T0 - 2, T0);
    assert_int_equal(h->initial_age, 12);
    objhead_unref(&h);
    /* An invalid Age counts as none. */
    h = head_of("HTTP/1.1 200 OK\r\nDate: " T0_DATE "\r\nAge: -1\r\nContent-Length: 1\r\n\r\n", T0,
                T0);
    assert_int_equal(h->initial_age, 0);
    objhead_unref(&h);
    h = head_of("HTTP/1.1 200 OK\r\nDate: " T0_DATE "\r\nAge: 99999999999999999999\r\n"
                "Content-Length: 1\r\n\r\n",
                T0, T0);
    assert_int_equal(h->initial_age, OBJHEAD_AGE_MAX);
    assert_true(h->origin_aged);
    assert_int_equal(objhead_age(h, INT64_MAX), OBJHEAD_AGE_MAX); /* never past it */
    objhead_unref(&h);
    /* A fill that crossed a second boundary in 0.2 s took no second: no Age from it. */
    h = head_of("HTTP/1.1 200 OK\r\nDate: " T0_DATE "\r\nContent-Length: 1\r\n\r\n", T0 + 0.9,
                T0 + 1.1);
    assert_int_equal(h->initial_age, 1); /* the Date is a second before the answer came */
    assert_false(h->origin_aged);
    objhead_unref(&h);
    h = head_of("HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:38 GMT\r\n"
                "Content-Length: 1\r\n\r\n",
                T0 + 0.9, T0 + 1.1);
    assert_int_equal(h->initial_age, 0);
    objhead_unref(&h);
}

static void test_objhead_content_digest_only_from_a_200(void **state)
{
    (void)state;
    const char *part = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/2\r\n"
                       "Content-Digest: sha-256=:x:\r\nContent-MD5: abc\r\n"
                       "Repr-Digest: sha-256=:y:\r\nContent-Length: 1\r\n\r\n";
    struct objhead *h = head_of(part, T0, T0);
    assert_string_equal(h->text, "Repr-Digest: sha-256=:y:\r\n");
    objhead_unref(&h);
    const char *whole = "HTTP/1.1 200 OK\r\nContent-Digest: sha-256=:x:\r\nX-A: 1\r\n"
                        "Content-Length: 1\r\n\r\n";
    h = head_of(whole, T0, T0);
    assert_string_equal(h->text, "Content-Digest: sha-256=:x:\r\nX-A: 1\r\n");
    char out[128];
    size_t n = objhead_write(h, OBJHEAD_PART, out, sizeof(out)); /* not on a 206 */
    out[n] = '\0';
    assert_string_equal(out, "X-A: 1\r\n");
    objhead_unref(&h);
}

static void test_objhead_over_the_bound_is_e2big(void **state)
{
    (void)state;
    /* Fields of 200 bytes each (a head has at most H1_MAX_FIELDS): about 82 of them pass
     * 16 KiB; only kept fields count (the Set-Cookie does not). */
    size_t n = (size_t)snprintf(g_buf, sizeof(g_buf), "HTTP/1.1 200 OK\r\n");
    unsigned i = 0;
    for (; n < OBJHEAD_FIELDS_MAX - 200; i++)
        n += (size_t)snprintf(g_buf + n, sizeof(g_buf) - n, "X-F%03u: %0*u\r\n", i, 190, i);
    n += (size_t)snprintf(g_buf + n, sizeof(g_buf) - n, "Set-Cookie: %0*u\r\n\r\n", 500, 0);
    struct objhead *h = head_of(g_buf, T0, T0); /* just under: kept */
    assert_true(h->len <= OBJHEAD_FIELDS_MAX);
    assert_true(h->len > OBJHEAD_FIELDS_MAX - 300);
    objhead_unref(&h);

    n -= 2; /* before the blank line: three more kept fields */
    for (unsigned j = 0; j < 3; j++, i++)
        n += (size_t)snprintf(g_buf + n, sizeof(g_buf) - n, "X-F%03u: %0*u\r\n", i, 190, i);
    snprintf(g_buf + n, sizeof(g_buf) - n, "\r\n");
    assert_true(h1_resp_parse(g_buf, strlen(g_buf), H1_M_GET, &g_resp) > 0);
    assert_int_equal(objhead_from_response(g_buf, &g_resp, T0, T0, &h), -E2BIG);
    assert_null(h);
}

static void test_objhead_write_omits_content_fields_when_asked(void **state)
{
    (void)state;
    const char *text = "Content-Encoding: gzip\r\nVary: Accept\r\nContent-Location: /a\r\n"
                       "content-language: de\r\nX-A: 1\r\n";
    struct objhead *h = objhead_new(text, strlen(text), T0_DATE, strlen(T0_DATE), T0, 7);
    assert_non_null(h);
    char out[256];
    size_t n = objhead_write(h, OBJHEAD_ALL, out, sizeof(out));
    assert_int_equal(n, strlen(text));
    assert_memory_equal(out, text, n);
    n = objhead_write(h, OBJHEAD_NO_CONTENT, out, sizeof(out));
    out[n] = '\0';
    assert_string_equal(out, "Vary: Accept\r\nContent-Location: /a\r\nX-A: 1\r\n");
    assert_int_equal(objhead_write(h, OBJHEAD_ALL, out, 10), SIZE_MAX);
    assert_int_equal(objhead_age(h, T0 + 3), 10);

    struct objhead *r = objhead_ref(h);
    assert_ptr_equal(r, h);
    struct objhead *same = objhead_new(text, strlen(text), T0_DATE, strlen(T0_DATE), T0, 7);
    assert_true(objhead_equal(h, same));
    struct objhead *other = objhead_new(text, strlen(text), T0_DATE, strlen(T0_DATE), T0, 8);
    assert_false(objhead_equal(h, other));
    objhead_unref(&other);
    objhead_unref(&same);
    objhead_unref(&r);
    objhead_unref(&h);
}

static void test_objhead_new_refuses_oversized_parts(void **state)
{
    (void)state;
    assert_null(objhead_new(g_buf, OBJHEAD_FIELDS_MAX + 1, "", 0, 0, 0));
    assert_null(objhead_new("", 0, g_buf, OBJHEAD_DATE_MAX + 1, 0, 0));
    assert_null(objhead_new("", 0, T0_DATE, strlen(T0_DATE), 0, -1));
    assert_null(objhead_new("", 0, T0_DATE, strlen(T0_DATE), 0, OBJHEAD_AGE_MAX + 1));
    assert_null(objhead_new("", 0, T0_DATE, strlen(T0_DATE), -1, 0));
    assert_null(objhead_new("", 0, T0_DATE, strlen(T0_DATE), OBJHEAD_TIME_MAX + 1, 0));
    assert_null(objhead_new("", 0, "", 0, 0, 0)); /* a Date is always stored */
    assert_null(objhead_new("X-A:1\r\n", 7, T0_DATE, strlen(T0_DATE), 0, 0)); /* ": " */
    assert_null(objhead_new("X-A: \x01\r\n", 9, T0_DATE, strlen(T0_DATE), 0, 0));
    assert_null(objhead_new("X A: 1\r\n", 8, T0_DATE, strlen(T0_DATE), 0, 0));
    assert_null(objhead_new("X-A: 1\n", 7, T0_DATE, strlen(T0_DATE), 0, 0));
    struct objhead *h = objhead_new("", 0, T0_DATE, strlen(T0_DATE), 0, OBJHEAD_AGE_MAX);
    assert_non_null(h);
    assert_int_equal(h->len, 0);
    assert_string_equal(h->date, T0_DATE);
    assert_int_equal(h->date_value, T0);
    objhead_unref(&h);
    h = objhead_new("X-A: v\twith\xe9 obs-text\r\n", 23, T0_DATE, strlen(T0_DATE), T0, 0);
    assert_non_null(h);
    objhead_unref(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_objhead_keeps_end_to_end_fields_in_order),
        cmocka_unit_test(test_objhead_keeps),
        cmocka_unit_test(test_objhead_date_is_ours_when_missing_or_invalid),
        cmocka_unit_test(test_objhead_age_follows_rfc9111),
        cmocka_unit_test(test_objhead_content_digest_only_from_a_200),
        cmocka_unit_test(test_objhead_over_the_bound_is_e2big),
        cmocka_unit_test(test_objhead_write_omits_content_fields_when_asked),
        cmocka_unit_test(test_objhead_new_refuses_oversized_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
