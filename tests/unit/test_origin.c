/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_origin: origin_req_dup copies every string of a struct origin_req into its one
 * allocation (NUL-terminated, lengths kept), so the copy outlives the request it was made from;
 * absent strings stay NULL.
 */
#include "origin.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_origin_req_dup_copies_every_string(void **state)
{
    (void)state;
    /* Borrowed from one buffer, as a request's are, and not NUL-terminated where they end. */
    char buf[] = "/path?q=1UAgentchain-a, chain-bX-Foo: 1\r\nAccept-Language: de\r\nTAIL";
    struct origin_req o = {
        .host = "origin.example",
        .host_is_ip = false,
        .port = 8080,
        .authority = "origin.example:8080",
        .path = buf,
        .path_len = 9,
        .user_agent = buf + 9,
        .ua_len = 6,
        .processed_by = buf + 15,
        .processed_by_len = 16,
        .fields = buf + 31,
        .fields_len = 31,
    };
    struct origin_req *d = origin_req_dup(&o);
    memset(buf, 'x', sizeof(buf) - 1); /* the copy must not borrow */
    assert_string_equal(d->host, "origin.example");
    assert_false(d->host_is_ip);
    assert_int_equal(d->port, 8080);
    assert_string_equal(d->authority, "origin.example:8080");
    assert_string_equal(d->path, "/path?q=1");
    assert_int_equal(d->path_len, 9);
    assert_string_equal(d->user_agent, "UAgent");
    assert_int_equal(d->ua_len, 6);
    assert_string_equal(d->processed_by, "chain-a, chain-b");
    assert_int_equal(d->processed_by_len, 16);
    assert_string_equal(d->fields, "X-Foo: 1\r\nAccept-Language: de\r\n");
    assert_int_equal(d->fields_len, 31);
    free(d);
}

static void test_origin_req_dup_absent_strings_stay_null(void **state)
{
    (void)state;
    struct origin_req o = {
        .host = "192.0.2.1",
        .host_is_ip = true,
        .port = 80,
        .authority = "192.0.2.1",
        .path = "/",
        .path_len = 1,
    };
    struct origin_req *d = origin_req_dup(&o);
    assert_true(d->host_is_ip);
    assert_string_equal(d->path, "/");
    assert_null(d->user_agent);
    assert_null(d->processed_by);
    assert_null(d->fields);
    assert_int_equal(d->fields_len, 0);
    free(d);
    /* fields present but empty (a request with nothing to forward): an empty string */
    o.fields = "";
    d = origin_req_dup(&o);
    assert_non_null(d->fields);
    assert_string_equal(d->fields, "");
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_origin_req_dup_copies_every_string),
        cmocka_unit_test(test_origin_req_dup_absent_strings_stay_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
