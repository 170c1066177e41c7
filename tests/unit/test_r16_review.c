/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Review of issue 16 (stored fields): what a chunk file read back from the disk may make the
 * daemon send. chunkfile_header_parse only checks lengths and an XXH3 (not a MAC), so the
 * stored fields text, Date and times of a version 2 file reach objhead_new and then every
 * client verbatim. These tests fail until objhead_new (or load_file) refuses what
 * objhead_from_response could never have made, and objhead_age cannot overflow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "objhead.h"

#define T0 784111777 /* Sun, 06 Nov 1994 08:49:37 GMT */
#define T0_DATE "Sun, 06 Nov 1994 08:49:37 GMT"

/* What a forged (or buggy-writer) version 2 file would hand objhead_new. */
static struct objhead *from_disk(const char *text, const char *date)
{
    return objhead_new(text, strlen(text), date, strlen(date), T0, 0);
}

static void test_r16_stored_text_must_be_field_lines_objhead_keeps(void **state)
{
    (void)state;
    /* Framing fields: a second Content-Length / a Transfer-Encoding desynchronises the client. */
    struct objhead *h = from_disk("Content-Length: 1\r\n", T0_DATE);
    assert_null(h);
    objhead_unref(&h);
    h = from_disk("Transfer-Encoding: chunked\r\n", T0_DATE);
    assert_null(h);
    objhead_unref(&h);
    /* An empty line ends the head early: the rest becomes body bytes (response splitting). */
    h = from_disk("X-A: 1\r\n\r\nHTTP/1.1 200 OK\r\n", T0_DATE);
    assert_null(h);
    objhead_unref(&h);
    /* A last line without CRLF glues itself to the Connection/X-LanCache field after it. */
    h = from_disk("X-A: 1", T0_DATE);
    assert_null(h);
    objhead_unref(&h);
    /* Fields the cache never stores (Set-Cookie: personal). */
    h = from_disk("Set-Cookie: a=b\r\n", T0_DATE);
    assert_null(h);
    objhead_unref(&h);
    /* A well-formed text is still accepted. */
    h = from_disk("Content-Encoding: gzip\r\nX-A: 1\r\n", T0_DATE);
    assert_non_null(h);
    objhead_unref(&h);
}

static void test_r16_stored_date_must_be_an_http_date(void **state)
{
    (void)state;
    /* An empty Date ("Date: \r\n" on every answer) or one carrying CR LF (header injection). */
    struct objhead *h = from_disk("", "");
    assert_null(h);
    objhead_unref(&h);
    h = from_disk("", "x\r\nSet-Cookie: a=b");
    assert_null(h);
    objhead_unref(&h);
}

static void test_r16_age_never_overflows(void **state)
{
    (void)state;
    /* initial_age is only checked >= 0 on the way in; response_time not at all. RFC 9111 §5.1:
     * an overflowing age is sent as 2147483648. (Signed overflow: UB, UBSan aborts here.) */
    struct objhead *h = objhead_new("", 0, T0_DATE, strlen(T0_DATE), -1, INT64_MAX);
    if (h == NULL)
        return; /* refused on the way in: fine too */
    int64_t age = objhead_age(h, 1);
    assert_true(age >= 0 && age <= 2147483648ll);
    objhead_unref(&h);
    h = objhead_new("", 0, T0_DATE, strlen(T0_DATE), INT64_MIN, 0);
    if (h != NULL) {
        age = objhead_age(h, T0);
        assert_true(age >= 0 && age <= 2147483648ll);
        objhead_unref(&h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_r16_stored_text_must_be_field_lines_objhead_keeps),
        cmocka_unit_test(test_r16_stored_date_must_be_an_http_date),
        cmocka_unit_test(test_r16_age_never_overflows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
