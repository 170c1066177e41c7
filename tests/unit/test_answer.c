/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_answer: an origin answer held to share (answer.h): the head copied (its fields readable
 * after the origin's buffer is gone), the body appended up to its bound and never past it, the
 * framing turned into the exact length read at the end (none kept for a bodiless status), the
 * process-wide byte gauge (g_stats.answer_bytes) and ANSWER_BYTES_MAX, and the refcount.
 */
#include "answer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"
#include "stats.h"

static struct h1_resp g_resp;
static char g_head[1024];

/* Parses <text> (a response head) from a buffer of ours, which the caller may then clobber. */
static const struct h1_resp *parse(const char *text)
{
    size_t n = strlen(text);
    assert_true(n < sizeof(g_head));
    memcpy(g_head, text, n);
    assert_int_equal(h1_resp_parse(g_head, n, H1_M_GET, &g_resp), (ssize_t)n);
    return &g_resp;
}

static const char *field(const struct answer *a, const char *name, size_t *len)
{
    const char *buf;
    const struct h1_resp *r = answer_head(a, &buf);
    const struct h1_field *f = h1_find(buf, r->fields, r->n_fields, name);
    if (f == NULL)
        return NULL;
    *len = f->value.len;
    return buf + f->value.off;
}

static void test_answer_new_copies_the_head(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 404 Not Found\r\nX-Custom: abc\r\n"
                                    "Content-Length: 5\r\n\r\n");
    struct answer *a = answer_new(g_head, r, 100);
    memset(g_head, 'z', sizeof(g_head)); /* the origin's buffer is reused */
    memset(&g_resp, 0, sizeof(g_resp));
    size_t len;
    const char *v = field(a, "X-Custom", &len);
    assert_non_null(v);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "abc", 3);
    const char *buf;
    assert_int_equal(answer_head(a, &buf)->status, 404);
    assert_false(answer_complete(a));
    answer_unref(&a);
    assert_null(a);
    assert_int_equal(answer_live(), 0);
}

static void test_answer_append_up_to_the_bound_and_never_past(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    assert_int_equal(r->framing, H1_BODY_CLOSE);
    struct answer *a = answer_new(g_head, r, 10);
    assert_true(answer_append(a, "01234", 5));
    assert_true(answer_append(a, "5678", 4));
    assert_false(answer_append(a, "9A", 2)); /* 11 > 10: nothing appended */
    assert_true(answer_append(a, "9", 1));
    assert_false(answer_append(a, "A", 1));
    size_t len;
    const char *b = answer_body(a, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(b, "0123456789", 10);
    answer_unref(&a);
}

static void test_answer_end_frames_by_the_length_read(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_int_equal(r->framing, H1_BODY_CHUNKED);
    struct answer *a = answer_new(g_head, r, 1 << 20);
    assert_true(answer_append(a, "hello", 5));
    answer_end(a);
    assert_true(answer_complete(a));
    const char *buf;
    const struct h1_resp *h = answer_head(a, &buf);
    assert_int_equal(h->framing, H1_BODY_LENGTH);
    assert_int_equal(h->content_length, 5);
    size_t len;
    assert_memory_equal(answer_body(a, &len), "hello", 5);
    assert_int_equal(len, 5);
    assert_int_equal(g_stats.answer_bytes, 5); /* the spare room returned */
    answer_unref(&a);
    assert_int_equal(g_stats.answer_bytes, 0);
}

static void test_answer_end_keeps_no_body_for_bodiless_status(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n");
    assert_int_equal(r->framing, H1_BODY_NONE);
    struct answer *a = answer_new(g_head, r, 100);
    answer_end(a);
    const char *buf;
    assert_int_equal(answer_head(a, &buf)->framing, H1_BODY_NONE);
    size_t len;
    answer_body(a, &len);
    assert_int_equal(len, 0);
    answer_unref(&a);
}

static void test_answer_empty_body_is_length_zero(void **state)
{
    (void)state;
    const struct h1_resp *r =
        parse("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    struct answer *a = answer_new(g_head, r, 100);
    assert_true(answer_append(a, "", 0));
    answer_end(a);
    const char *buf;
    const struct h1_resp *h = answer_head(a, &buf);
    assert_int_equal(h->framing, H1_BODY_LENGTH);
    assert_int_equal(h->content_length, 0);
    assert_int_equal(g_stats.answer_bytes, 0);
    answer_unref(&a);
}

static void test_answer_refs_free_at_the_last(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n");
    struct answer *a = answer_new(g_head, r, 100);
    assert_true(answer_append(a, "abc", 3));
    answer_end(a);
    struct answer *b = answer_ref(a);
    assert_ptr_equal(a, b);
    answer_unref(&a);
    assert_null(a);
    assert_int_equal(answer_live(), 1);
    size_t len;
    assert_memory_equal(answer_body(b, &len), "abc", 3);
    answer_unref(&b);
    assert_int_equal(answer_live(), 0);
    answer_unref(&b); /* NULL: nothing */
}

static void test_answer_gauge_counts_buffers_and_all_answers_are_bounded(void **state)
{
    (void)state;
    const struct h1_resp *r = parse("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
    size_t piece = 1 << 20;
    char *data = calloc(1, piece);
    assert_non_null(data);
    struct answer *as[80];
    size_t n = 0;
    /* 1 MiB answers until the process-wide bound refuses one */
    for (; n < 80; n++) {
        as[n] = answer_new(g_head, r, piece);
        if (!answer_append(as[n], data, piece))
            break;
        assert_true(g_stats.answer_bytes <= ANSWER_BYTES_MAX);
    }
    assert_true(n < 80);
    assert_int_equal(n, ANSWER_BYTES_MAX / piece);
    assert_int_equal(g_stats.answer_bytes, n * piece);
    for (size_t i = 0; i <= n; i++)
        answer_unref(&as[i]);
    assert_int_equal(g_stats.answer_bytes, 0);
    assert_int_equal(answer_live(), 0);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answer_new_copies_the_head),
        cmocka_unit_test(test_answer_append_up_to_the_bound_and_never_past),
        cmocka_unit_test(test_answer_end_frames_by_the_length_read),
        cmocka_unit_test(test_answer_end_keeps_no_body_for_bodiless_status),
        cmocka_unit_test(test_answer_empty_body_is_length_zero),
        cmocka_unit_test(test_answer_refs_free_at_the_last),
        cmocka_unit_test(test_answer_gauge_counts_buffers_and_all_answers_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
