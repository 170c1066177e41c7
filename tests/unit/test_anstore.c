/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_anstore: which answers are kept (statuses, Cache-Control, Vary, Set-Cookie, framing, body
 * size, a lifetime longer than the age on arrival), reuse while fresh and never after (Age from
 * the origin's Date and Age, the request's delay), a new answer replacing the old, drops, the
 * byte limit (LRU, a reload's smaller limit, 0 keeps nothing) and the refs (nothing leaks).
 */
#include "anstore.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "answer.h"
#include "http1.h"
#include "httpdate.h"
#include "objhead.h"

#define T0 1796169600.0 /* 2026-12-02 00:00:00 GMT */

static char g_head[4096];
static struct h1_resp g_resp;

/* A complete answer: status line and <fields> (CRLF each), then a body of <body_len> bytes. */
static struct answer *make(const char *status, const char *fields, size_t body_len)
{
    char date[HTTPDATE_LEN + 1];
    httpdate_format((int64_t)T0, date);
    /* (a Date of T0 unless <fields> has one) */
    char text[4096];
    if (strstr(fields, "Date:") != NULL)
        snprintf(text, sizeof(text), "HTTP/1.1 %s\r\n%sContent-Length: %zu\r\n\r\n", status, fields,
                 body_len);
    else
        snprintf(text, sizeof(text), "HTTP/1.1 %s\r\nDate: %s\r\n%sContent-Length: %zu\r\n\r\n",
                 status, date, fields, body_len);
    size_t len = strlen(text);
    memcpy(g_head, text, len);
    assert_int_equal(h1_resp_parse(g_head, len, H1_M_GET, &g_resp), (ssize_t)len);
    struct answer *a = answer_new(g_head, &g_resp, 1024 * 1024);
    static char body[128 * 1024];
    memset(body, 'b', sizeof(body));
    assert_true(body_len <= sizeof(body));
    assert_true(answer_append(a, body, body_len));
    answer_end(a);
    return a;
}

/* Whether an answer made of <status>/<fields> is kept (arriving at T0, asked at T0). */
static bool kept(const char *status, const char *fields)
{
    struct anstore *s = anstore_new(1 << 20);
    struct answer *a = make(status, fields, 10);
    bool k = anstore_put(s, "k", 1, "h", a, T0, T0);
    struct anstore_hit hit;
    assert_int_equal(anstore_get(s, "k", 1, "h", (int64_t)T0, &hit), k);
    answer_unref(&a);
    anstore_free(&s);
    assert_int_equal(answer_live(), 0);
    return k;
}

static void test_what_is_kept(void **state)
{
    (void)state;
    const char *fresh = "Cache-Control: max-age=60\r\n";
    assert_true(kept("404 Not Found", fresh));
    assert_true(kept("410 Gone", "Expires: Wed, 02 Dec 2026 01:00:00 GMT\r\n"));
    assert_true(kept("503 Service Unavailable", "Cache-Control: s-maxage=5, max-age=0\r\n"));
    assert_true(kept("301 Moved Permanently", fresh));
    assert_true(kept("299 Whatever", fresh));
    assert_true(kept("599 Whatever", fresh));
    assert_true(kept("204 No Content", fresh));
    /* objects are the chunk cache's */
    assert_false(kept("200 OK", fresh));
    assert_false(kept("206 Partial Content", fresh));
    assert_false(kept("304 Not Modified", fresh));
    /* no explicit lifetime, or stale on arrival */
    assert_false(kept("404 Not Found", ""));
    assert_false(kept("404 Not Found", "Cache-Control: public\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=0\r\n"));
    assert_false(kept("404 Not Found", "Expires: Tue, 01 Dec 2026 00:00:00 GMT\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: s-maxage=0, max-age=60\r\n"));
    /* an age on arrival at or past the lifetime: the origin's Age, or its Date */
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60\r\nAge: 60\r\n"));
    assert_true(kept("404 Not Found", "Cache-Control: max-age=60\r\nAge: 59\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60\r\n"
                                       "Date: Tue, 01 Dec 2026 23:58:00 GMT\r\n"));
    /* the origin forbids it */
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60, no-store\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60, no-cache\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60, private\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60, private=\"X-A\"\r\n"));
    assert_false(kept("599 Whatever", "Cache-Control: max-age=60, must-understand\r\n"));
    assert_true(kept("404 Not Found", "Cache-Control: max-age=60, must-understand\r\n"));
    /* what the key cannot tell, or a personal field */
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60\r\nVary: Accept-Language\r\n"));
    assert_false(kept("404 Not Found", "Cache-Control: max-age=60\r\nSet-Cookie: a=b\r\n"));
}

static void test_close_delimited_and_large_bodies_are_not_kept(void **state)
{
    (void)state;
    struct anstore *s = anstore_new(1 << 20);
    const char *text = "HTTP/1.1 404 Not Found\r\nCache-Control: max-age=60\r\n\r\n";
    size_t len = strlen(text);
    memcpy(g_head, text, len);
    assert_int_equal(h1_resp_parse(g_head, len, H1_M_GET, &g_resp), (ssize_t)len);
    assert_int_equal(g_resp.framing, H1_BODY_CLOSE);
    struct answer *a = answer_new(g_head, &g_resp, 1024);
    assert_true(answer_append(a, "gone", 4));
    /* incomplete first */
    assert_false(anstore_put(s, "k", 1, "h", a, T0, T0));
    answer_end(a);
    assert_false(answer_is_framed(a));
    assert_false(anstore_put(s, "k", 1, "h", a, T0, T0));
    answer_unref(&a);

    a = make("404 Not Found", "Cache-Control: max-age=60\r\n", ANSTORE_BODY_MAX + 1);
    assert_false(anstore_put(s, "k", 1, "h", a, T0, T0));
    answer_unref(&a);
    a = make("404 Not Found", "Cache-Control: max-age=60\r\n", ANSTORE_BODY_MAX);
    assert_true(anstore_put(s, "k", 1, "h", a, T0, T0));
    answer_unref(&a);
    assert_int_equal(anstore_count(s), 1);
    anstore_free(&s);
    assert_int_equal(answer_live(), 0);
}

static void test_reused_while_fresh_with_its_age(void **state)
{
    (void)state;
    struct anstore *s = anstore_new(1 << 20);
    /* the origin says Age 10; the request took 2 s: corrected initial age 12 */
    struct answer *a = make("404 Not Found", "Cache-Control: max-age=60\r\nAge: 10\r\n", 10);
    assert_true(anstore_put(s, "/a", 2, "h", a, T0 - 2, T0));
    answer_unref(&a);
    struct anstore_hit hit;
    assert_true(anstore_get(s, "/a", 2, "h", (int64_t)T0, &hit));
    assert_int_equal(hit.age, 12);
    const char *buf;
    assert_int_equal(answer_head(hit.ans, &buf)->status, 404);
    assert_non_null(hit.head);
    assert_true(anstore_get(s, "/a", 2, "h", (int64_t)T0 + 47, &hit));
    assert_int_equal(hit.age, 59);
    /* another key, a prefix of it, is not it */
    assert_false(anstore_get(s, "/", 1, "h", (int64_t)T0, &hit));
    assert_false(anstore_get(s, "/ab", 3, "h", (int64_t)T0, &hit));
    /* stale at age 60: dropped */
    assert_false(anstore_get(s, "/a", 2, "h", (int64_t)T0 + 48, &hit));
    assert_int_equal(anstore_count(s), 0);
    assert_false(anstore_get(s, "/a", 2, "h", (int64_t)T0, &hit));
    anstore_free(&s);
    assert_int_equal(answer_live(), 0);
}

static void test_lifetime_is_capped(void **state)
{
    (void)state;
    struct anstore *s = anstore_new(1 << 20);
    struct answer *a = make("404 Not Found", "Cache-Control: max-age=31536000\r\n", 10);
    assert_true(anstore_put(s, "k", 1, "h", a, T0, T0));
    answer_unref(&a);
    struct anstore_hit hit;
    assert_true(anstore_get(s, "k", 1, "h", (int64_t)T0 + ANSTORE_LIFETIME_MAX - 1, &hit));
    assert_false(anstore_get(s, "k", 1, "h", (int64_t)T0 + ANSTORE_LIFETIME_MAX, &hit));
    anstore_free(&s);
}

static void test_replace_and_drop(void **state)
{
    (void)state;
    struct anstore *s = anstore_new(1 << 20);
    struct answer *a = make("404 Not Found", "Cache-Control: max-age=60\r\n", 10);
    struct answer *b = make("410 Gone", "Cache-Control: max-age=60\r\n", 10);
    struct answer *c = make("500 Internal Server Error", "", 10);
    assert_true(anstore_put(s, "k", 1, "h", a, T0, T0));
    assert_true(anstore_put(s, "k", 1, "h", b, T0, T0));
    assert_int_equal(anstore_count(s), 1);
    struct anstore_hit hit;
    const char *buf;
    assert_true(anstore_get(s, "k", 1, "h", (int64_t)T0, &hit));
    assert_int_equal(answer_head(hit.ans, &buf)->status, 410);
    /* an answer that is not kept still drops the old one: the origin's latest word */
    assert_false(anstore_put(s, "k", 1, "h", c, T0, T0));
    assert_false(anstore_get(s, "k", 1, "h", (int64_t)T0, &hit));
    assert_true(anstore_put(s, "k", 1, "h", a, T0, T0));
    anstore_drop(s, "x", 1);
    assert_int_equal(anstore_count(s), 1);
    anstore_drop(s, "k", 1);
    assert_int_equal(anstore_count(s), 0);
    assert_int_equal(anstore_bytes(s), 0);
    answer_unref(&a);
    answer_unref(&b);
    answer_unref(&c);
    anstore_free(&s);
    assert_int_equal(answer_live(), 0);
}

/* Entries are per object and authority: another host of the same object misses, and a drop
 * (purge, new version) takes every host's. */
static void test_per_authority(void **state)
{
    (void)state;
    struct anstore *s = anstore_new(1 << 20);
    struct answer *a = make("404 Not Found", "Cache-Control: max-age=60\r\n", 10);
    struct answer *b = make("503 Service Unavailable", "Cache-Control: max-age=60\r\n", 10);
    struct anstore_hit hit;
    const char *buf;
    assert_true(anstore_put(s, "k", 1, "mirror1.example", a, T0, T0));
    assert_false(anstore_get(s, "k", 1, "mirror2.example", (int64_t)T0, &hit));
    assert_true(anstore_put(s, "k", 1, "mirror2.example", b, T0, T0));
    assert_true(anstore_get(s, "k", 1, "mirror1.example", (int64_t)T0, &hit));
    assert_int_equal(answer_head(hit.ans, &buf)->status, 404);
    assert_true(anstore_get(s, "k", 1, "mirror2.example", (int64_t)T0, &hit));
    assert_int_equal(answer_head(hit.ans, &buf)->status, 503);
    /* a key that is a prefix of key + authority is not confused with it */
    assert_false(anstore_get(s, "km", 2, "irror1.example", (int64_t)T0, &hit));
    assert_int_equal(anstore_count(s), 2);
    anstore_drop(s, "k", 1);
    assert_int_equal(anstore_count(s), 0);
    assert_int_equal(anstore_bytes(s), 0);
    answer_unref(&a);
    answer_unref(&b);
    anstore_free(&s);
    assert_int_equal(answer_live(), 0);
}

static void test_byte_limit_lru(void **state)
{
    (void)state;
    struct answer *a = make("404 Not Found", "Cache-Control: max-age=60\r\n", 1000);
    struct anstore *s = anstore_new(1 << 20);
    assert_true(anstore_put(s, "probe", 5, "h", a, T0, T0));
    size_t one = anstore_bytes(s); /* what one entry of a 5-byte key costs */
    anstore_free(&s);
    assert_true(one > 1000);

    s = anstore_new(3 * one);
    char key[16];
    struct anstore_hit hit;
    for (int i = 0; i < 500; i++) { /* many, through several bucket doublings */
        snprintf(key, sizeof(key), "k%04d", i);
        assert_true(anstore_put(s, key, 5, "h", a, T0, T0));
        assert_true(anstore_bytes(s) <= 3 * one);
        assert_true(anstore_count(s) <= 3);
    }
    assert_int_equal(anstore_count(s), 3);
    assert_false(anstore_get(s, "k0496", 5, "h", (int64_t)T0, &hit));
    /* k0497 used again: k0498 is now the least recently used, and goes for a new one */
    assert_true(anstore_get(s, "k0497", 5, "h", (int64_t)T0, &hit));
    assert_true(anstore_put(s, "n0000", 5, "h", a, T0, T0));
    assert_false(anstore_get(s, "k0498", 5, "h", (int64_t)T0, &hit));
    assert_true(anstore_get(s, "k0499", 5, "h", (int64_t)T0, &hit));
    assert_true(anstore_get(s, "n0000", 5, "h", (int64_t)T0, &hit));
    assert_true(anstore_get(s, "k0497", 5, "h", (int64_t)T0, &hit));
    /* a smaller limit (a reload) keeps the most recently used */
    anstore_set_limit(s, one);
    assert_int_equal(anstore_count(s), 1);
    assert_true(anstore_get(s, "k0497", 5, "h", (int64_t)T0, &hit));
    /* 0 keeps nothing */
    anstore_set_limit(s, 0);
    assert_int_equal(anstore_count(s), 0);
    assert_false(anstore_put(s, "k", 1, "h", a, T0, T0));
    assert_int_equal(anstore_bytes(s), 0);
    anstore_free(&s);
    answer_unref(&a);
    assert_int_equal(answer_live(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_is_kept),
        cmocka_unit_test(test_close_delimited_and_large_bodies_are_not_kept),
        cmocka_unit_test(test_reused_while_fresh_with_its_age),
        cmocka_unit_test(test_lifetime_is_capped),
        cmocka_unit_test(test_replace_and_drop),
        cmocka_unit_test(test_per_authority),
        cmocka_unit_test(test_byte_limit_lru),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
