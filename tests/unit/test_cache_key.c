/* SPDX-License-Identifier: BSD-2-Clause */
/* test_cache_key: the object key format of cache_key_build(), "identifier\npath". */
#include "cache.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_cache_key_is_identifier_newline_path(void **state)
{
    size_t len = 0;
    char *key = cache_key_build("steam", "/depot/1/chunk/ab", 17, &len);

    (void)state;
    assert_string_equal(key, "steam\n/depot/1/chunk/ab");
    assert_int_equal(len, strlen(key));
    free(key);
}

static void test_cache_key_takes_only_path_len_bytes(void **state)
{
    const char head[] = "GET /a/b?x=1 HTTP/1.1";
    size_t len = 0;
    char *key = cache_key_build("blizzard", head + 4, 4, &len);

    (void)state;
    assert_string_equal(key, "blizzard\n/a/b");
    assert_int_equal(len, 13);
    free(key);
}

static void test_cache_key_empty_path_is_root(void **state)
{
    size_t len = 0;
    char *key = cache_key_build("example.org", NULL, 0, &len);
    char *root = cache_key_build("example.org", "/", 1, &len);

    (void)state;
    assert_string_equal(key, "example.org\n/");
    assert_string_equal(key, root);
    assert_int_equal(len, strlen("example.org\n/"));
    free(key);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_key_is_identifier_newline_path),
        cmocka_unit_test(test_cache_key_takes_only_path_len_bytes),
        cmocka_unit_test(test_cache_key_empty_path_is_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
