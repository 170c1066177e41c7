/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_adminauth_review: review repros for adminauth (issue 19), fixed and kept: names that
 * config accepts for [server] admin_names but that the Host check could never match.
 */
#include "adminauth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* config's is_host_name() takes names up to CONFIG_HOST_MAX - 1 (255) characters; host_ok()
 * refuses every Host of 64 characters or more before it compares with admin_names. */
static void test_a_long_admin_name_is_accepted(void **state)
{
    (void)state;
    static const char name[] = "cacheparty-admin.lan-party-2026.gymnasium-north-wing.example.org";
    static const char *const names[] = {name};
    assert_true(strlen(name) >= 64);
    struct adminauth_policy p = {.loopback = true, .token = "", .names = names, .n_names = 1};
    struct adminauth_req r = {.read_only = true, .host = name, .host_len = strlen(name)};
    assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK);
}

/* config keeps a trailing dot of an admin_names entry ("cache.lan."), host_ok() strips the one
 * of the Host: neither "cache.lan" nor "cache.lan." then ever matches. */
static void test_an_admin_name_with_a_trailing_dot(void **state)
{
    (void)state;
    static const char *const names[] = {"cache.lan."};
    struct adminauth_policy p = {.loopback = true, .token = "", .names = names, .n_names = 1};
    static const char *const hosts[] = {"cache.lan", "cache.lan.", "cache.lan:8081"};
    for (size_t i = 0; i < 3; i++) {
        struct adminauth_req r = {
            .read_only = true, .host = hosts[i], .host_len = strlen(hosts[i])};
        assert_int_equal(adminauth_check(&p, &r), ADMINAUTH_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_long_admin_name_is_accepted),
        cmocka_unit_test(test_an_admin_name_with_a_trailing_dot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
