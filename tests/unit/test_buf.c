/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_buf: the fixed-capacity byte buffer of buf.h: the start <= pos <= last <= end invariant
 * through alloc, append, consume, compact and reset, and append beyond the capacity returning
 * the partial count (a buf never grows).
 */
#include "buf.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* The documented invariant, checked after every operation. */
static void check_inv(const struct buf *b)
{
    assert_non_null(b->start);
    assert_true(b->start <= b->pos);
    assert_true(b->pos <= b->last);
    assert_true(b->last <= b->end);
    assert_int_equal(buf_len(b), (size_t)(b->last - b->pos));
    assert_int_equal(buf_room(b), (size_t)(b->end - b->last));
}

static void test_buf_alloc_is_empty_with_full_room(void **state)
{
    struct buf b = {0};
    (void)state;
    assert_false(buf_is_alloc(&b));
    buf_alloc(&b, 16);
    assert_true(buf_is_alloc(&b));
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start);
    assert_ptr_equal(b.last, b.start);
    assert_int_equal(b.end - b.start, 16);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_room(&b), 16);
    buf_free(&b);
}

static void test_buf_free_clears_all_pointers_and_twice_is_safe(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_free(&b);
    assert_null(b.start);
    assert_null(b.pos);
    assert_null(b.last);
    assert_null(b.end);
    assert_false(buf_is_alloc(&b));
    buf_free(&b); /* NULL-safe on an unallocated buf */
    assert_false(buf_is_alloc(&b));
    /* An unallocated buf can be allocated again. */
    buf_alloc(&b, 4);
    assert_int_equal(buf_room(&b), 4);
    buf_free(&b);
}

static void test_buf_append_fits_copies_bytes(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 16);
    assert_int_equal(buf_append(&b, "hello", 5), 5);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 5);
    assert_int_equal(buf_room(&b), 11);
    assert_memory_equal(b.pos, "hello", 5);
    assert_int_equal(buf_append(&b, " world", 6), 6);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 11);
    assert_memory_equal(b.pos, "hello world", 11);
    buf_free(&b);
}

static void test_buf_append_zero_bytes_changes_nothing(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 4);
    assert_int_equal(buf_append(&b, "x", 0), 0);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_room(&b), 4);
    buf_free(&b);
}

static void test_buf_append_exact_capacity_fills_buffer(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    assert_int_equal(buf_append(&b, "01234567", 8), 8);
    check_inv(&b);
    assert_int_equal(buf_room(&b), 0);
    assert_int_equal(buf_len(&b), 8);
    /* Full: nothing more fits. */
    assert_int_equal(buf_append(&b, "8", 1), 0);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 8);
    assert_memory_equal(b.pos, "01234567", 8);
    buf_free(&b);
}

static void test_buf_append_beyond_capacity_returns_partial_count(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    assert_int_equal(buf_append(&b, "abc", 3), 3);
    assert_int_equal(buf_append(&b, "defghijkl", 9), 5);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 8);
    assert_int_equal(buf_room(&b), 0);
    assert_memory_equal(b.pos, "abcdefgh", 8);
    /* The buffer never grew. */
    assert_int_equal(b.end - b.start, 8);
    buf_free(&b);
}

static void test_buf_append_larger_than_empty_buffer_returns_capacity(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 4);
    assert_int_equal(buf_append(&b, "0123456789", 10), 4);
    check_inv(&b);
    assert_memory_equal(b.pos, "0123", 4);
    buf_free(&b);
}

static void test_buf_consume_partial_advances_pos(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 16);
    buf_append(&b, "abcdef", 6);
    buf_consume(&b, 2);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 4);
    assert_ptr_equal(b.pos, b.start + 2);
    assert_memory_equal(b.pos, "cdef", 4);
    /* Consuming does not give back room at the end by itself. */
    assert_int_equal(buf_room(&b), 10);
    buf_consume(&b, 0);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 4);
    buf_free(&b);
}

static void test_buf_consume_all_resets_to_start(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcdef", 6);
    buf_consume(&b, 2);
    buf_consume(&b, 4);
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start);
    assert_ptr_equal(b.last, b.start);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_room(&b), 8);
    buf_free(&b);
}

static void test_buf_compact_moves_data_to_start(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcdefgh", 8);
    buf_consume(&b, 5);
    assert_int_equal(buf_room(&b), 0);
    buf_compact(&b);
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start);
    assert_int_equal(buf_len(&b), 3);
    assert_int_equal(buf_room(&b), 5);
    assert_memory_equal(b.pos, "fgh", 3);
    buf_free(&b);
}

static void test_buf_compact_at_start_or_empty_is_noop(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_compact(&b); /* empty */
    check_inv(&b);
    assert_int_equal(buf_room(&b), 8);
    buf_append(&b, "abc", 3);
    char *last = b.last;
    buf_compact(&b); /* data already at start */
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start);
    assert_ptr_equal(b.last, last);
    assert_memory_equal(b.pos, "abc", 3);
    buf_free(&b);
}

static void test_buf_append_compacts_when_tail_room_is_short(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcdef", 6);
    buf_consume(&b, 4); /* "ef" at offset 4, room 2 */
    assert_int_equal(buf_room(&b), 2);
    assert_int_equal(buf_append(&b, "1234", 4), 4);
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start);
    assert_int_equal(buf_len(&b), 6);
    assert_memory_equal(b.pos, "ef1234", 6);
    buf_free(&b);
}

static void test_buf_append_fitting_tail_does_not_compact(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcd", 4);
    buf_consume(&b, 2);
    assert_int_equal(buf_append(&b, "xy", 2), 2);
    check_inv(&b);
    assert_ptr_equal(b.pos, b.start + 2);
    assert_memory_equal(b.pos, "cdxy", 4);
    buf_free(&b);
}

static void test_buf_append_after_consume_partial_count_uses_compacted_room(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcdefgh", 8);
    buf_consume(&b, 3); /* 5 bytes held, 3 free only after compaction */
    assert_int_equal(buf_append(&b, "12345", 5), 3);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 8);
    assert_memory_equal(b.pos, "defgh123", 8);
    buf_free(&b);
}

static void test_buf_reset_empties_keeping_capacity(void **state)
{
    struct buf b = {0};
    (void)state;
    buf_alloc(&b, 8);
    buf_append(&b, "abcdef", 6);
    buf_consume(&b, 1);
    buf_reset(&b);
    check_inv(&b);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_room(&b), 8);
    assert_ptr_equal(b.pos, b.start);
    buf_free(&b);
}

static void test_buf_append_consume_cycle_keeps_byte_order(void **state)
{
    struct buf b = {0};
    char out[4096];
    size_t out_len = 0;
    unsigned char next_in = 0;
    (void)state;
    buf_alloc(&b, 37);
    /* Push a byte sequence through in odd-sized pieces; what comes out is what went in. */
    for (int round = 0; round < 200; round++) {
        char piece[23];
        size_t want = (size_t)(round % 23) + 1;
        for (size_t i = 0; i < want; i++)
            piece[i] = (char)(next_in + i);
        size_t n = buf_append(&b, piece, want);
        assert_true(n <= want);
        next_in = (unsigned char)(next_in + n);
        check_inv(&b);
        size_t take = buf_len(&b) > (size_t)(round % 7) + 1 ? (size_t)(round % 7) + 1 : buf_len(&b);
        if (out_len + take > sizeof(out))
            break;
        memcpy(out + out_len, b.pos, take);
        out_len += take;
        buf_consume(&b, take);
        check_inv(&b);
    }
    for (size_t i = 0; i < out_len; i++)
        assert_int_equal((unsigned char)out[i], (unsigned char)i);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_alloc_is_empty_with_full_room),
        cmocka_unit_test(test_buf_free_clears_all_pointers_and_twice_is_safe),
        cmocka_unit_test(test_buf_append_fits_copies_bytes),
        cmocka_unit_test(test_buf_append_zero_bytes_changes_nothing),
        cmocka_unit_test(test_buf_append_exact_capacity_fills_buffer),
        cmocka_unit_test(test_buf_append_beyond_capacity_returns_partial_count),
        cmocka_unit_test(test_buf_append_larger_than_empty_buffer_returns_capacity),
        cmocka_unit_test(test_buf_consume_partial_advances_pos),
        cmocka_unit_test(test_buf_consume_all_resets_to_start),
        cmocka_unit_test(test_buf_compact_moves_data_to_start),
        cmocka_unit_test(test_buf_compact_at_start_or_empty_is_noop),
        cmocka_unit_test(test_buf_append_compacts_when_tail_room_is_short),
        cmocka_unit_test(test_buf_append_fitting_tail_does_not_compact),
        cmocka_unit_test(test_buf_append_after_consume_partial_count_uses_compacted_room),
        cmocka_unit_test(test_buf_reset_empties_keeping_capacity),
        cmocka_unit_test(test_buf_append_consume_cycle_keeps_byte_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
