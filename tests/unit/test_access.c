/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_access: the cachelog line as monolithic's nginx writes it (field order, "/ XFF - -",
 * nginx's \xHH escaping of '"', '\', control bytes and bytes >= 0x7F, "-" for absent and nothing
 * for empty values, $host lowercased without its port, IPv6 hosts, bounds that never cut an
 * escape), and the cachelog-json object (monolithic's 17 keys in order, status a string,
 * bytes_sent a number, "" for absent, escape=json, bytes that are not UTF-8 as \u00XX).
 */
#include "access.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define S(x) ((struct access_str){(x), sizeof(x) - 1})
#define ABSENT ((struct access_str){NULL, 0})

/* 2026-12-02 18:00:00.123 UTC; the tests run with TZ=UTC (main). */
#define WALL 1796234400123ull

static char g_out[64 * 1024];

static struct access_entry entry(void)
{
    struct access_entry e;
    memset(&e, 0, sizeof(e));
    e.ident = S("steam");
    e.client = S("192.168.1.5");
    e.method = S("GET");
    e.target = S("/depot/1/chunk/ab?x=1");
    e.proto = S("HTTP/1.1");
    e.status = 206;
    e.bytes = 1024;
    e.referer = ABSENT;
    e.user_agent = S("Valve/Steam HTTP Client 1.0");
    e.cache_status = "HIT";
    e.host = S("Lancache.SteamContent.com:80");
    e.range = S("bytes=0-1023");
    return e;
}

static const char *cachelog(const struct access_entry *e)
{
    size_t n = access_format_cachelog(e, WALL, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    return g_out;
}

static const char *json(const struct access_entry *e)
{
    size_t n = access_format_json(e, WALL, g_out, sizeof(g_out) - 1);
    g_out[n] = '\0';
    return g_out;
}

static void test_cachelog_line(void **state)
{
    (void)state;
    struct access_entry e = entry();
    assert_string_equal(cachelog(&e),
                        "[steam] 192.168.1.5 / - - - [02/Dec/2026:18:00:00 +0000] "
                        "\"GET /depot/1/chunk/ab?x=1 HTTP/1.1\" 206 1024 \"-\" "
                        "\"Valve/Steam HTTP Client 1.0\" \"HIT\" \"lancache.steamcontent.com\" "
                        "\"bytes=0-1023\"");
    /* X-Forwarded-For in its place; no cache status; an empty Referer; no Host */
    e.forwarded_for = S("10.0.0.7");
    e.cache_status = NULL;
    e.referer = (struct access_str){"", 0};
    e.host = ABSENT;
    e.ident = ABSENT;
    e.range = ABSENT;
    assert_string_equal(cachelog(&e), "[-] 192.168.1.5 / 10.0.0.7 - - [02/Dec/2026:18:00:00 +0000] "
                                      "\"GET /depot/1/chunk/ab?x=1 HTTP/1.1\" 206 1024 \"\" "
                                      "\"Valve/Steam HTTP Client 1.0\" \"-\" \"-\" \"-\"");
}

static void test_cachelog_escapes_as_nginx(void **state)
{
    (void)state;
    struct access_entry e = entry();
    e.user_agent = S("a\"b\\c\x01\x7f\xc3\xa9 [x] {y}\\");
    e.referer = S("q\"");
    e.ident = S("game.example:8080");
    e.host = S("[::1]:8080");
    const char *l = cachelog(&e);
    assert_non_null(strstr(l, "\"a\\x22b\\x5Cc\\x01\\x7F\\xC3\\xA9 [x] {y}\\x5C\""));
    assert_non_null(strstr(l, "\"q\\x22\""));
    assert_non_null(strstr(l, "[game.example:8080] "));
    assert_non_null(strstr(l, "\"[::1]\""));
    for (const char *p = l; *p; p++)
        assert_true((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
}

static void test_cachelog_bounds_never_cut_an_escape(void **state)
{
    (void)state;
    struct access_entry e = entry();
    char *ua = malloc(3 * ACCESS_FIELD_MAX);
    memset(ua, 'a', 3 * ACCESS_FIELD_MAX);
    ua[ACCESS_FIELD_MAX - 2] = '"'; /* its \x22 would end past the bound */
    e.user_agent = (struct access_str){ua, 3 * ACCESS_FIELD_MAX};
    char *t = malloc(20000);
    memset(t, '/', 20000);
    e.target = (struct access_str){t, 20000};
    const char *l = cachelog(&e);
    const char *u = strstr(l, "\" \"aaa");
    assert_non_null(u);
    const char *end = strchr(u + 3, '"');
    assert_int_equal(end - (u + 3), ACCESS_FIELD_MAX - 2);
    /* the request line within its bound, the line still whole */
    const char *r = strchr(l, '"');
    const char *rend = strchr(r + 1, '"');
    assert_true(rend - (r + 1) <= ACCESS_REQUEST_MAX);
    assert_non_null(strstr(l, "\"HIT\" \"lancache.steamcontent.com\" \"bytes=0-1023\""));
    free(ua);
    free(t);
}

static void test_json_keys_in_order(void **state)
{
    (void)state;
    struct access_entry e = entry();
    e.forwarded_for = S("10.0.0.7");
    assert_string_equal(
        json(&e),
        "{\"timestamp\":\"1796234400.123\",\"time_local\":\"02/Dec/2026:18:00:00 +0000\","
        "\"cache_identifier\":\"steam\",\"remote_addr\":\"192.168.1.5\","
        "\"forwarded_for\":\"10.0.0.7\",\"remote_user\":\"\",\"status\":\"206\","
        "\"bytes_sent\":1024,\"referer\":\"\",\"user_agent\":\"Valve/Steam HTTP Client 1.0\","
        "\"upstream_cache_status\":\"HIT\",\"host\":\"lancache.steamcontent.com\","
        "\"http_range\":\"bytes=0-1023\",\"method\":\"GET\",\"path\":\"/depot/1/chunk/ab?x=1\","
        "\"proto\":\"HTTP/1.1\",\"scheme\":\"http\"}");
    e.cache_status = NULL;
    e.host = ABSENT;
    assert_non_null(strstr(json(&e), "\"upstream_cache_status\":\"\",\"host\":\"\","));
}

static void test_json_escapes_and_stays_utf8(void **state)
{
    (void)state;
    struct access_entry e = entry();
    /* valid UTF-8 (é, €, U+1F600) passes; a lone 0xff, a cut sequence, an overlong '/', a
     * surrogate do not */
    static const char ua[] = "q\"\\\n\r\t\b\f\x01\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 "
                             "\xff \xe2\x82 \xc0\xaf \xed\xa0\x80";
    e.user_agent = (struct access_str){ua, sizeof(ua) - 1};
    const char *j = json(&e);
    assert_non_null(strstr(j, "\"user_agent\":\"q\\\"\\\\\\n\\r\\t\\b\\f\\u0001\x7f "
                              "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \\u00ff \\u00e2\\u0082 "
                              "\\u00c0\\u00af \\u00ed\\u00a0\\u0080\","));
}

/* nginx drops one trailing dot of the host ($host); review repro */
static void test_host_trailing_dot_as_nginx(void **state)
{
    (void)state;
    struct access_entry e = entry();
    e.host = S("Lancache.SteamContent.com.:80");
    assert_non_null(strstr(cachelog(&e), "\"HIT\" \"lancache.steamcontent.com\" "));
    e.host = S("Lancache.SteamContent.com.");
    assert_non_null(strstr(cachelog(&e), "\"HIT\" \"lancache.steamcontent.com\" "));
}

/* JSON "path" is $request_uri when given (an absolute-form target), else the target */
static void test_json_path_is_request_uri(void **state)
{
    (void)state;
    struct access_entry e = entry();
    e.target = S("http://h.example/p?q=1");
    e.request_uri = S("/p?q=1");
    const char *j = json(&e);
    assert_non_null(strstr(j, "\"path\":\"/p?q=1\","));
    assert_non_null(strstr(cachelog(&e), "\"GET http://h.example/p?q=1 HTTP/1.1\""));
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cachelog_line),
        cmocka_unit_test(test_cachelog_escapes_as_nginx),
        cmocka_unit_test(test_cachelog_bounds_never_cut_an_escape),
        cmocka_unit_test(test_json_keys_in_order),
        cmocka_unit_test(test_json_escapes_and_stays_utf8),
        cmocka_unit_test(test_host_trailing_dot_as_nginx),
        cmocka_unit_test(test_json_path_is_request_uri),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
