/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_freshness: Cache-Control directives read from every field as one list (names without
 * case, quoted arguments, lists with field names, junk), delta-seconds capped at 2^31, conflicting
 * duplicates invalid; the shared cache's explicit lifetime (s-maxage over max-age over Expires
 * minus Date, an invalid Expires stale, none at all -1); the statuses must-understand knows.
 */
#include "freshness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"

static struct h1_resp g_resp;
static char g_head[2048];

static const struct h1_resp *parse(const char *text)
{
    size_t n = strlen(text);
    assert_true(n < sizeof(g_head));
    memcpy(g_head, text, n);
    assert_int_equal(h1_resp_parse(g_head, n, H1_M_GET, &g_resp), (ssize_t)n);
    return &g_resp;
}

static struct freshness_cc cc_of(const char *fields)
{
    char text[1024];
    snprintf(text, sizeof(text), "HTTP/1.1 404 Not Found\r\n%sContent-Length: 0\r\n\r\n", fields);
    struct freshness_cc cc;
    freshness_cc_parse(g_head, parse(text), &cc);
    return cc;
}

static int64_t life_of(const char *fields, int64_t date_value)
{
    char text[1024];
    snprintf(text, sizeof(text), "HTTP/1.1 404 Not Found\r\n%sContent-Length: 0\r\n\r\n", fields);
    const struct h1_resp *r = parse(text);
    struct freshness_cc cc;
    freshness_cc_parse(g_head, r, &cc);
    return freshness_lifetime(g_head, r, &cc, date_value, date_value);
}

static void test_cc_directives(void **state)
{
    (void)state;
    struct freshness_cc cc = cc_of("");
    assert_int_equal(cc.max_age, -1);
    assert_int_equal(cc.s_maxage, -1);
    assert_false(cc.no_store || cc.no_cache || cc.private_ || cc.must_understand || cc.invalid);

    cc = cc_of("Cache-Control: Max-Age=60, NO-STORE\r\n");
    assert_int_equal(cc.max_age, 60);
    assert_true(cc.no_store);

    /* two fields are one list; field-name lists count as the directive */
    cc = cc_of("Cache-Control: public\r\nCache-Control: private=\"Set-Cookie, X-A\", "
               "no-cache=\"X-B\"\r\n");
    assert_true(cc.public_ && cc.private_ && cc.no_cache);
    assert_false(cc.invalid);

    cc = cc_of("Cache-Control: s-maxage=\"30\" , max-age=10,must-understand\r\n");
    assert_int_equal(cc.s_maxage, 30);
    assert_int_equal(cc.max_age, 10);
    assert_true(cc.must_understand);

    cc = cc_of("Cache-Control: ,, max-age=5 ,\r\n");
    assert_int_equal(cc.max_age, 5);
    assert_false(cc.invalid);

    /* unknown directives are ignored */
    cc = cc_of("Cache-Control: foo=bar, x=\"a,b\", max-age=7\r\n");
    assert_int_equal(cc.max_age, 7);
    assert_false(cc.invalid);
}

static void test_cc_invalid_and_capped(void **state)
{
    (void)state;
    assert_true(cc_of("Cache-Control: max-age=abc\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=-1\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=\"1\\0\"\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=\"10\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=10 20\r\n").invalid);
    assert_true(cc_of("Cache-Control: max-age=10, max-age=20\r\n").invalid);
    assert_false(cc_of("Cache-Control: max-age=10, max-age=10\r\n").invalid);
    struct freshness_cc cc = cc_of("Cache-Control: max-age=99999999999999999999999\r\n");
    assert_false(cc.invalid);
    assert_int_equal(cc.max_age, FRESHNESS_DELTA_MAX);
}

static void test_lifetime_order(void **state)
{
    (void)state;
    /* 2026-12-02 00:00:00 GMT */
    int64_t d = 1796169600;
    assert_int_equal(life_of("", d), -1);
    assert_int_equal(life_of("Cache-Control: public\r\n", d), -1);
    assert_int_equal(life_of("Cache-Control: max-age=60, s-maxage=5\r\n", d), 5);
    assert_int_equal(
        life_of("Cache-Control: max-age=60\r\nExpires: Thu, 03 Dec 2026 00:00:00 GMT\r\n", d), 60);
    assert_int_equal(life_of("Expires: Thu, 03 Dec 2026 00:00:00 GMT\r\n", d), 86400);
    /* the other two formats */
    assert_int_equal(life_of("Expires: Wednesday, 02-Dec-26 01:00:00 GMT\r\n", d), 3600);
    assert_int_equal(life_of("Expires: Wed Dec  2 00:00:10 2026\r\n", d), 10);
    /* in the past, equal, invalid ("0" too): stale */
    assert_int_equal(life_of("Expires: Tue, 01 Dec 2026 00:00:00 GMT\r\n", d), 0);
    assert_int_equal(life_of("Expires: Wed, 02 Dec 2026 00:00:00 GMT\r\n", d), 0);
    assert_int_equal(life_of("Expires: 0\r\n", d), 0);
    assert_int_equal(life_of("Expires: soon\r\n", d), 0);
    /* invalid Cache-Control: stale, whatever Expires says */
    assert_int_equal(
        life_of("Cache-Control: max-age=x\r\nExpires: Thu, 03 Dec 2026 00:00:00 GMT\r\n", d), 0);
    assert_int_equal(life_of("Cache-Control: max-age=0\r\n", d), 0);
}

static void test_understood_statuses(void **state)
{
    (void)state;
    static const int yes[] = {200, 203, 204, 206, 300, 301, 302, 303, 307, 308,
                              400, 404, 410, 417, 421, 422, 426, 500, 503, 505};
    static const int no[] = {100, 199, 207, 299, 306, 309, 418, 420, 451, 499, 506, 599};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        assert_true(freshness_status_is_understood(yes[i]));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        assert_false(freshness_status_is_understood(no[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cc_directives),
        cmocka_unit_test(test_cc_invalid_and_capped),
        cmocka_unit_test(test_lifetime_order),
        cmocka_unit_test(test_understood_statuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
