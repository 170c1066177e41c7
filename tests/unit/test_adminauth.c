/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_adminauth: the admin listener's checks: Host (DNS rebinding) on loopback and off it,
 * the token as Bearer and as cookie, admin_public, the Origin and Sec-Fetch-Site of state
 * changes, the constant-time comparison, the loopback test of listen addresses.
 */
#include "adminauth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "util.h"

#define TOKEN "s3cret-token-0123456789"

static const char *const names[] = {"lancache.lan", "pi"};

static struct adminauth_policy policy(bool loopback, const char *token, bool pub)
{
    return (struct adminauth_policy){
        .loopback = loopback, .token = token, .public_views = pub, .names = names, .n_names = 2};
}

#define S(f, v) .f = (v), .f##_len = sizeof(v) - 1

static void test_host_is_checked_on_loopback_too(void **state)
{
    (void)state;
    struct adminauth_policy p = policy(true, "", false);
    struct adminauth_req r = {.read_only = true};
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK); /* no Host: HTTP/1.0 tools */
    static const char *const good[] = {
        "127.0.0.1:8081",   "127.0.0.1",  "[::1]:8081",        "[::1]", "localhost:8081",
        "LocalHost",        "localhost.", "lancache.lan:8081", "PI",    "pi:",
        "192.168.1.5:8081", "10.0.0.1"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        r.host = good[i];
        r.host_len = strlen(good[i]);
        assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK);
    }
    static const char *const bad[] = {"attacker.example:8081",
                                      "attacker.example",
                                      "lancache.lan.evil",
                                      "localhost.evil",
                                      "127.0.0.1:80x",
                                      "[::1",
                                      "[::1]x",
                                      "[nothex]:1",
                                      ":8081",
                                      "x..y"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r.host = bad[i];
        r.host_len = strlen(bad[i]);
        assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_BAD_HOST);
    }
    /* A Host that names the object (PURGE without ?identifier=) is not the admin's. */
    r.host = "attacker.example";
    r.host_len = strlen(r.host);
    r.host_is_object = true;
    r.read_only = false;
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK);
}

static void test_off_loopback_every_request_needs_the_token(void **state)
{
    (void)state;
    struct adminauth_policy p = policy(false, TOKEN, false);
    struct adminauth_req r = {.read_only = true, S(host, "192.168.1.5:8081")};
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_NO_TOKEN);
    assert_int_equal(adminauth_status(ADMINAUTH_NO_TOKEN), 401);
    struct adminauth_req ok = r;
    ok.authorization = "Bearer " TOKEN;
    ok.authorization_len = strlen(ok.authorization);
    assert_int_equal(adminauth_check(&p, &ok), ADMINAUTH_OK);
    ok.authorization = "bearer   " TOKEN; /* the scheme is case-insensitive */
    ok.authorization_len = strlen(ok.authorization);
    assert_int_equal(adminauth_check(&p, &ok), ADMINAUTH_OK);
    /* Wrong: another token, a prefix, one more byte, another scheme, empty. */
    static const char *const wrong[] = {"Bearer x" TOKEN,    "Bearer s3cret-token-012345678",
                                        "Bearer " TOKEN "0", "Basic " TOKEN,
                                        "Bearer ",           TOKEN};
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        struct adminauth_req w = r;
        w.authorization = wrong[i];
        w.authorization_len = strlen(wrong[i]);
        assert_int_equal(adminauth_check(&p, &w), ADMINAUTH_BAD_TOKEN);
    }
    /* The cookie the login sets, among others. */
    struct adminauth_req ck = r;
    ck.cookie = "a=b; cacheparty_admin=" TOKEN "; c=d";
    ck.cookie_len = strlen(ck.cookie);
    assert_int_equal(adminauth_check(&p, &ck), ADMINAUTH_OK);
    ck.cookie = "cacheparty_admin=" TOKEN;
    ck.cookie_len = strlen(ck.cookie);
    assert_int_equal(adminauth_check(&p, &ck), ADMINAUTH_OK);
    ck.cookie = "xcacheparty_admin=" TOKEN "; cacheparty_admin=nope";
    ck.cookie_len = strlen(ck.cookie);
    assert_int_equal(adminauth_check(&p, &ck), ADMINAUTH_BAD_TOKEN);
    ck.cookie = "other=1";
    ck.cookie_len = strlen(ck.cookie);
    assert_int_equal(adminauth_check(&p, &ck), ADMINAUTH_NO_TOKEN);
    /* A state change needs it too; a wrong Host is refused before the token is looked at. */
    struct adminauth_req ch = r;
    ch.read_only = false;
    assert_int_equal(adminauth_check(&p, &ch), ADMINAUTH_NO_TOKEN);
    ch.host = "evil.example";
    ch.host_len = strlen(ch.host);
    assert_int_equal(adminauth_check(&p, &ch), ADMINAUTH_BAD_HOST);
    assert_int_equal(adminauth_status(ADMINAUTH_BAD_HOST), 403);
    /* No token configured off loopback (config refuses to start so): nothing is admitted. */
    struct adminauth_policy none = policy(false, "", false);
    assert_int_equal(adminauth_check(&none, &ok), ADMINAUTH_BAD_TOKEN);
    assert_int_equal(adminauth_check(&none, &ch), ADMINAUTH_BAD_HOST);
}

static void test_admin_public_opens_the_views_only(void **state)
{
    (void)state;
    struct adminauth_policy p = policy(false, TOKEN, true);
    struct adminauth_req r = {.read_only = true, S(host, "pi:8081")};
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK);
    r.read_only = false;
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_NO_TOKEN);
    /* A wrong token sent to a public view is still refused (it is a mistake worth seeing). */
    r.read_only = true;
    r.authorization = "Bearer wrong-wrong-wrong-wrong";
    r.authorization_len = strlen(r.authorization);
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_BAD_TOKEN);
}

static void test_state_changes_come_from_the_page_itself(void **state)
{
    (void)state;
    struct adminauth_policy p = policy(true, "", false);
    struct adminauth_req r = {.read_only = false, S(host, "127.0.0.1:8081")};
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK); /* curl: neither field */
    struct adminauth_req o = r;
    o.origin = "http://127.0.0.1:8081";
    o.origin_len = strlen(o.origin);
    o.fetch_site = "same-origin";
    o.fetch_site_len = strlen(o.fetch_site);
    assert_int_equal(adminauth_check(&p, &o), ADMINAUTH_OK);
    static const char *const others[] = {"http://evil.example",    "http://127.0.0.1:8082",
                                         "https://127.0.0.1:8081", "null",
                                         "http://127.0.0.1:8081/", "http://127.0.0.1"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        struct adminauth_req x = r;
        x.origin = others[i];
        x.origin_len = strlen(others[i]);
        assert_int_equal(adminauth_check(&p, &x), ADMINAUTH_CROSS_ORIGIN);
    }
    static const char *const sites[] = {"cross-site", "same-site"};
    for (size_t i = 0; i < 2; i++) {
        struct adminauth_req x = r;
        x.fetch_site = sites[i];
        x.fetch_site_len = strlen(sites[i]);
        assert_int_equal(adminauth_check(&p, &x), ADMINAUTH_CROSS_ORIGIN);
    }
    struct adminauth_req typed = r; /* typed into the address bar */
    typed.fetch_site = "none";
    typed.fetch_site_len = 4;
    assert_int_equal(adminauth_check(&p, &typed), ADMINAUTH_OK);
    /* Reading is never refused for its Origin (a GET changes nothing). */
    struct adminauth_req g = r;
    g.read_only = true;
    g.origin = "http://evil.example";
    g.origin_len = strlen(g.origin);
    assert_int_equal(adminauth_check(&p, &g), ADMINAUTH_OK);
    assert_int_equal(adminauth_status(ADMINAUTH_CROSS_ORIGIN), 403);
    assert_non_null(strstr(adminauth_reason(ADMINAUTH_CROSS_ORIGIN), "origin"));
}

static void test_equal_and_loopback(void **state)
{
    (void)state;
    assert_true(adminauth_equal("abc", 3, "abc", 3));
    assert_false(adminauth_equal("abd", 3, "abc", 3));
    assert_false(adminauth_equal("ab", 2, "abc", 3));
    assert_false(adminauth_equal("abcd", 4, "abc", 3));
    assert_false(adminauth_equal("", 0, "abc", 3));
    assert_true(adminauth_equal("", 0, "", 0));

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    static const char *const v4[] = {"127.0.0.1", "127.255.0.9"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(inet_pton(AF_INET, v4[i], &in->sin_addr), 1);
        assert_true(util_addr_is_loopback(&ss));
    }
    static const char *const v4n[] = {"0.0.0.0", "192.168.1.5", "128.0.0.1", "10.127.0.1"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(inet_pton(AF_INET, v4n[i], &in->sin_addr), 1);
        assert_false(util_addr_is_loopback(&ss));
    }
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    static const char *const v6[] = {"::1", "::ffff:127.0.0.2"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(inet_pton(AF_INET6, v6[i], &in6->sin6_addr), 1);
        assert_true(util_addr_is_loopback(&ss));
    }
    static const char *const v6n[] = {"::", "fe80::1", "::ffff:10.0.0.1", "::2"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(inet_pton(AF_INET6, v6n[i], &in6->sin6_addr), 1);
        assert_false(util_addr_is_loopback(&ss));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_is_checked_on_loopback_too),
        cmocka_unit_test(test_off_loopback_every_request_needs_the_token),
        cmocka_unit_test(test_admin_public_opens_the_views_only),
        cmocka_unit_test(test_state_changes_come_from_the_page_itself),
        cmocka_unit_test(test_equal_and_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
