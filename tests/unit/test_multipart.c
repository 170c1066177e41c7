/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_multipart: the multipart/byteranges writers. Part heads and the tail byte for byte (first
 * part without the leading CRLF, no Content-Type line for an object without one), heads that do
 * not fit, boundaries from random bytes, and mp_body_length against a body assembled from the
 * writers and the object's bytes.
 */
#include "multipart.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define B "0123456789abcdef0123456789abcdef"

static char g_out[65536];

static void test_mp_part_head_first_has_no_leading_crlf(void **state)
{
    (void)state;
    size_t n = mp_part_head(g_out, sizeof(g_out), B, true, "application/octet-stream", 0, 99, 8000);
    const char *want = "--" B "\r\n"
                       "Content-Type: application/octet-stream\r\n"
                       "Content-Range: bytes 0-99/8000\r\n"
                       "\r\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(g_out, want, n);
}

static void test_mp_part_head_later_parts_start_with_crlf(void **state)
{
    (void)state;
    size_t n = mp_part_head(g_out, sizeof(g_out), B, false, "text/plain", 7000, 7999, 8000);
    const char *want = "\r\n--" B "\r\n"
                       "Content-Type: text/plain\r\n"
                       "Content-Range: bytes 7000-7999/8000\r\n"
                       "\r\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(g_out, want, n);
}

static void test_mp_part_head_without_content_type_has_no_type_line(void **state)
{
    (void)state;
    size_t n = mp_part_head(g_out, sizeof(g_out), "x", false, "", 5, 5, 6);
    const char *want = "\r\n--x\r\nContent-Range: bytes 5-5/6\r\n\r\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(g_out, want, n);
}

static void test_mp_part_head_too_small_returns_zero(void **state)
{
    (void)state;
    size_t need = mp_part_head(g_out, sizeof(g_out), B, true, "a/b", 0, 9, 10);
    assert_true(need > 0);
    assert_int_equal(mp_part_head(g_out, need, B, true, "a/b", 0, 9, 10), 0); /* no room: NUL */
    assert_int_equal(mp_part_head(g_out, need + 1, B, true, "a/b", 0, 9, 10), need);
    assert_int_equal(mp_part_head(g_out, 0, B, true, "a/b", 0, 9, 10), 0);
}

static void test_mp_part_head_max_bounds_the_longest(void **state)
{
    (void)state;
    char ct[129], bd[MP_BOUNDARY_MAX + 1];
    memset(ct, 'c', sizeof(ct) - 1);
    ct[sizeof(ct) - 1] = '\0';
    memset(bd, 'b', sizeof(bd) - 1);
    bd[sizeof(bd) - 1] = '\0';
    size_t n = mp_part_head(g_out, sizeof(g_out), bd, false, ct, UINT64_MAX - 2, UINT64_MAX - 1,
                            UINT64_MAX);
    assert_true(n > 0);
    assert_true(n + 1 <= MP_PART_HEAD_MAX(strlen(ct)));
}

static void test_mp_tail_closes_the_body(void **state)
{
    (void)state;
    size_t n = mp_tail(g_out, sizeof(g_out), B);
    const char *want = "\r\n--" B "--\r\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(g_out, want, n);
    assert_int_equal(mp_tail(g_out, n, B), 0);
}

static void test_mp_boundary_make_is_hex_of_the_random_bytes(void **state)
{
    (void)state;
    unsigned char rnd[MP_BOUNDARY_RANDOM];
    char a[MP_BOUNDARY_LEN + 1], b[MP_BOUNDARY_LEN + 1];
    for (size_t i = 0; i < sizeof(rnd); i++)
        rnd[i] = (unsigned char)(i * 17 + 0x0f);
    mp_boundary_make(a, rnd);
    assert_int_equal(strlen(a), MP_BOUNDARY_LEN);
    assert_string_equal(a, "0f2031425364758697a8b9cadbecfd0e");
    rnd[15] ^= 1;
    mp_boundary_make(b, rnd);
    assert_string_not_equal(a, b);
}

/* Byte <i> of a made-up object. */
static char obj_byte(uint64_t i)
{
    return (char)((i * 131 + 7) & 0xff);
}

static void test_mp_body_length_is_the_assembled_length(void **state)
{
    (void)state;
    const struct range parts[] = {{500, 999}, {0, 9}, {7000, 7999}, {99999, 99999}};
    const char *cts[] = {"application/octet-stream", ""};
    for (size_t t = 0; t < 2; t++) {
        for (unsigned n = 1; n <= 4; n++) {
            size_t off = 0;
            for (unsigned i = 0; i < n; i++) {
                size_t k = mp_part_head(g_out + off, sizeof(g_out) - off, B, i == 0, cts[t],
                                        parts[i].start, parts[i].end, 100000);
                assert_true(k > 0);
                off += k;
                for (uint64_t b = parts[i].start; b <= parts[i].end; b++)
                    g_out[off++] = obj_byte(b);
            }
            size_t k = mp_tail(g_out + off, sizeof(g_out) - off, B);
            assert_true(k > 0);
            off += k;
            assert_int_equal(mp_body_length(B, cts[t], parts, n, 100000), off);
        }
    }
    /* The digits of the numbers count: a longer total, a longer body. */
    assert_int_equal(
        mp_body_length(B, "", parts, 2, 1000000) - mp_body_length(B, "", parts, 2, 100000), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mp_part_head_first_has_no_leading_crlf),
        cmocka_unit_test(test_mp_part_head_later_parts_start_with_crlf),
        cmocka_unit_test(test_mp_part_head_without_content_type_has_no_type_line),
        cmocka_unit_test(test_mp_part_head_too_small_returns_zero),
        cmocka_unit_test(test_mp_part_head_max_bounds_the_longest),
        cmocka_unit_test(test_mp_tail_closes_the_body),
        cmocka_unit_test(test_mp_boundary_make_is_hex_of_the_random_bytes),
        cmocka_unit_test(test_mp_body_length_is_the_assembled_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
