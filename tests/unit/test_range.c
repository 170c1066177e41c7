/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_range: Range parsing against an object length (every form, whitespace, case, empty list
 * elements, multi, unsatisfiable, 0-length objects, 64-bit limits), the parts of several ranges
 * (merging, their order, the 32-part bound, cross-checked against the definition byte by byte),
 * the first-byte hint, chunk arithmetic across
 * boundaries and for the short last chunk (cross-checked byte by byte on small objects),
 * Content-Range formatting and strict parsing, and If-Range matching.
 */
#include "range.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* range_parse on a NUL-terminated literal. */
static enum range_result parse(const char *v, uint64_t total, struct range *r)
{
    r->start = r->end = 0xdead;
    return range_parse(v, strlen(v), total, r);
}

static void expect_ok(const char *v, uint64_t total, uint64_t start, uint64_t end)
{
    struct range r;
    assert_int_equal(parse(v, total, &r), RANGE_OK);
    assert_int_equal(r.start, start);
    assert_int_equal(r.end, end);
}

static void expect_res(const char *v, uint64_t total, enum range_result want)
{
    struct range r;
    assert_int_equal(parse(v, total, &r), want);
    /* Only RANGE_OK writes the range. */
    assert_int_equal(r.start, 0xdead);
    assert_int_equal(r.end, 0xdead);
}

/* ---- range_parse ---- */

static void test_range_parse_closed_range_ok(void **state)
{
    (void)state;
    expect_ok("bytes=0-0", 100, 0, 0);
    expect_ok("bytes=0-99", 100, 0, 99);
    expect_ok("bytes=10-20", 100, 10, 20);
    expect_ok("bytes=99-99", 100, 99, 99); /* the last byte */
}

static void test_range_parse_end_past_total_is_clamped(void **state)
{
    (void)state;
    expect_ok("bytes=0-100", 100, 0, 99);
    expect_ok("bytes=50-18446744073709551615", 100, 50, 99);
    expect_ok("bytes=99-1000", 100, 99, 99);
}

static void test_range_parse_open_range_to_end(void **state)
{
    (void)state;
    expect_ok("bytes=0-", 100, 0, 99);
    expect_ok("bytes=42-", 100, 42, 99);
    expect_ok("bytes=99-", 100, 99, 99);
    expect_ok("bytes=0-", 1, 0, 0);
}

static void test_range_parse_suffix_last_n_bytes(void **state)
{
    (void)state;
    expect_ok("bytes=-1", 100, 99, 99);
    expect_ok("bytes=-10", 100, 90, 99);
    expect_ok("bytes=-100", 100, 0, 99);
}

static void test_range_parse_suffix_larger_than_object_is_whole(void **state)
{
    (void)state;
    expect_ok("bytes=-101", 100, 0, 99);
    expect_ok("bytes=-18446744073709551615", 100, 0, 99);
    expect_ok("bytes=-5", 1, 0, 0);
}

static void test_range_parse_suffix_zero_unsatisfiable(void **state)
{
    (void)state;
    expect_res("bytes=-0", 100, RANGE_UNSATISFIABLE);
    expect_res("bytes=-000", 100, RANGE_UNSATISFIABLE);
    expect_res("bytes=-0", 0, RANGE_UNSATISFIABLE);
}

static void test_range_parse_start_at_or_past_total_unsatisfiable(void **state)
{
    (void)state;
    expect_res("bytes=100-", 100, RANGE_UNSATISFIABLE);
    expect_res("bytes=100-200", 100, RANGE_UNSATISFIABLE);
    expect_res("bytes=18446744073709551615-", 100, RANGE_UNSATISFIABLE);
    expect_res("bytes=18446744073709551615-18446744073709551615", UINT64_MAX, RANGE_UNSATISFIABLE);
}

static void test_range_parse_zero_length_object(void **state)
{
    (void)state;
    expect_res("bytes=0-", 0, RANGE_UNSATISFIABLE);
    expect_res("bytes=0-0", 0, RANGE_UNSATISFIABLE);
    /* RFC 9110: "-n" (n > 0) is satisfiable on an empty representation, yet no 206 can say so. */
    expect_res("bytes=-1", 0, RANGE_NONE);
    expect_res("bytes=-1, 0-5", 0, RANGE_NONE);
    expect_res("bytes=-0, 0-5", 0, RANGE_UNSATISFIABLE);
}

static void test_range_parse_absent_is_none(void **state)
{
    struct range r = {7, 7};
    (void)state;
    assert_int_equal(range_parse(NULL, 0, 100, &r), RANGE_NONE);
    assert_int_equal(range_parse("", 0, 100, &r), RANGE_NONE);
    assert_int_equal(r.start, 7);
    expect_res("   ", 100, RANGE_NONE);
}

static void test_range_parse_unit_case_insensitive(void **state)
{
    (void)state;
    expect_ok("BYTES=1-2", 100, 1, 2);
    expect_ok("Bytes=1-2", 100, 1, 2);
}

static void test_range_parse_bogus_unit_is_none(void **state)
{
    (void)state;
    expect_res("items=0-5", 100, RANGE_NONE);
    expect_res("byte=0-5", 100, RANGE_NONE);
    expect_res("bytesx=0-5", 100, RANGE_NONE);
    expect_res("bytes:0-5", 100, RANGE_NONE);
    expect_res("bytes", 100, RANGE_NONE);
    expect_res("bytes 0-5", 100, RANGE_NONE);
    expect_res("0-5", 100, RANGE_NONE);
}

static void test_range_parse_outer_and_list_whitespace_allowed(void **state)
{
    (void)state;
    expect_ok("  bytes=3-4\t ", 100, 3, 4);
    expect_ok("bytes= 3-4", 100, 3, 4); /* OWS before a list element */
    expect_ok("bytes=3-4 ", 100, 3, 4);
    expect_res("bytes=0-1 , 5-6", 100, RANGE_MULTI);
    expect_res("bytes=0-1,\t5-6", 100, RANGE_MULTI);
}

static void test_range_parse_inner_whitespace_is_none(void **state)
{
    (void)state;
    expect_res("bytes =0-5", 100, RANGE_NONE);
    expect_res("bytes=0 -5", 100, RANGE_NONE);
    expect_res("bytes=0- 5", 100, RANGE_NONE);
    expect_res("bytes=- 5", 100, RANGE_NONE);
    expect_res("bytes=1 2-5", 100, RANGE_NONE);
}

static void test_range_parse_empty_list_elements_ignored(void **state)
{
    (void)state;
    expect_ok("bytes=,0-5", 100, 0, 5);
    expect_ok("bytes=0-5,", 100, 0, 5);
    expect_ok("bytes= , ,0-5, ,", 100, 0, 5);
    expect_res("bytes=", 100, RANGE_NONE);
    expect_res("bytes=,", 100, RANGE_NONE);
    expect_res("bytes= , ", 100, RANGE_NONE);
}

static void test_range_parse_syntax_errors_are_none(void **state)
{
    (void)state;
    expect_res("bytes=-", 100, RANGE_NONE);
    expect_res("bytes=--5", 100, RANGE_NONE);
    expect_res("bytes=5", 100, RANGE_NONE);
    expect_res("bytes=a-5", 100, RANGE_NONE);
    expect_res("bytes=5-a", 100, RANGE_NONE);
    expect_res("bytes=5-6-7", 100, RANGE_NONE);
    expect_res("bytes=+5-6", 100, RANGE_NONE);
    expect_res("bytes=0x5-6", 100, RANGE_NONE);
    expect_res("bytes=-5-", 100, RANGE_NONE);
    expect_res("bytes=5-4", 100, RANGE_NONE); /* last < first */
    expect_res("bytes=200-100", 100, RANGE_NONE);
    expect_res("bytes=0-5;x", 100, RANGE_NONE);
}

static void test_range_parse_overflow_is_none(void **state)
{
    (void)state;
    expect_res("bytes=18446744073709551616-", 100, RANGE_NONE);
    expect_res("bytes=0-18446744073709551616", 100, RANGE_NONE);
    expect_res("bytes=-18446744073709551616", 100, RANGE_NONE);
    expect_res("bytes=99999999999999999999999999999-", 100, RANGE_NONE);
    /* Leading zeros do not overflow. */
    expect_ok("bytes=000000000000000000000000000001-0000000000000000000000000002", 100, 1, 2);
}

static void test_range_parse_huge_total(void **state)
{
    (void)state;
    expect_ok("bytes=0-", UINT64_MAX, 0, UINT64_MAX - 1);
    expect_ok("bytes=-1", UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 1);
    expect_ok("bytes=18446744073709551614-", UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 1);
}

static void test_range_parse_multi(void **state)
{
    (void)state;
    expect_res("bytes=0-1,5-6", 100, RANGE_MULTI);
    expect_res("bytes=0-1,0-1", 100, RANGE_MULTI);
    expect_res("bytes=-5,0-", 100, RANGE_MULTI);
    /* One satisfiable range among unsatisfiable ones is still several ranges. */
    expect_res("bytes=0-1,500-600", 100, RANGE_MULTI);
    /* None satisfiable: 416. */
    expect_res("bytes=100-,200-300,-0", 100, RANGE_UNSATISFIABLE);
    /* One invalid element spoils the whole header. */
    expect_res("bytes=0-1,x", 100, RANGE_NONE);
    expect_res("bytes=0-1,5-4", 100, RANGE_NONE);
}

static void test_range_parse_not_nul_terminated(void **state)
{
    struct range r;
    const char v[] = "bytes=1-2XYZ";
    (void)state;
    assert_int_equal(range_parse(v, 9, 100, &r), RANGE_OK);
    assert_int_equal(r.start, 1);
    assert_int_equal(r.end, 2);
    assert_int_equal(range_parse(v, 8, 100, &r), RANGE_OK); /* "bytes=1-" */
    assert_int_equal(r.end, 99);
}

/* ---- range_parse_set ---- */

/* The parts of <v> for <total> as "a-b,c-d" in <buf> (RANGE_OK), or the result's name. */
static const char *set_str(const char *v, uint64_t total, char *buf, size_t cap)
{
    struct range_set s;
    memset(&s, 0xa5, sizeof(s));
    enum range_result res = range_parse_set(v, strlen(v), total, &s);
    if (res != RANGE_OK) {
        assert_int_equal(s.n, 0);
        return res == RANGE_NONE ? "NONE" : res == RANGE_MULTI ? "MULTI" : "UNSAT";
    }
    assert_true(s.n >= 1 && s.n <= RANGE_SET_MAX);
    size_t off = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < s.n; i++) {
        assert_true(s.r[i].start <= s.r[i].end && s.r[i].end < total);
        int k = snprintf(buf + off, cap - off, "%s%llu-%llu", i ? "," : "",
                         (unsigned long long)s.r[i].start, (unsigned long long)s.r[i].end);
        assert_true(k > 0 && (size_t)k < cap - off);
        off += (size_t)k;
    }
    return buf;
}

static void expect_set(const char *v, uint64_t total, const char *want)
{
    char buf[4096];
    assert_string_equal(set_str(v, total, buf, sizeof(buf)), want);
}

static void test_range_parse_set_one_range_is_one_part(void **state)
{
    (void)state;
    expect_set("bytes=10-20", 100, "10-20");
    expect_set("bytes=-10", 100, "90-99");
    expect_set("bytes=50-", 100, "50-99");
}

static void test_range_parse_set_disjoint_ranges_keep_the_order_asked(void **state)
{
    (void)state;
    expect_set("bytes=0-9,20-29", 100, "0-9,20-29");
    expect_set("bytes=50-59,0-9,20-29", 100, "50-59,0-9,20-29");
    expect_set("bytes=-10,0-9", 100, "90-99,0-9");
    expect_set("bytes=0-0,99-99", 100, "0-0,99-99");
}

static void test_range_parse_set_overlapping_and_touching_ranges_merge(void **state)
{
    (void)state;
    expect_set("bytes=0-99,50-149", 1000, "0-149");
    expect_set("bytes=0-99,100-199", 1000, "0-199"); /* touching: one part */
    expect_set("bytes=100-199,0-99", 1000, "0-199");
    expect_set("bytes=0-9,0-9", 1000, "0-9");       /* the same twice */
    expect_set("bytes=10-20,12-15", 1000, "10-20"); /* inside */
    expect_set("bytes=12-15,10-20", 1000, "10-20");
    expect_set("bytes=0-99,101-199", 1000, "0-99,101-199"); /* a gap of one byte stays */
    expect_set("bytes=0-99,50-149,100-199", 1000, "0-199");
}

static void test_range_parse_set_merged_part_stands_where_its_first_range_stood(void **state)
{
    (void)state;
    /* A later range joins an earlier part where that part stands. */
    expect_set("bytes=200-299,0-99,250-400", 1000, "200-400,0-99");
    expect_set("bytes=200-299,0-99,50-150", 1000, "200-299,0-150");
    /* A later range joining two parts makes one part, at the place of the earlier. */
    expect_set("bytes=500-599,0-99,90-510", 1000, "0-599");
    expect_set("bytes=700-799,500-599,0-99,90-510", 1000, "700-799,0-599");
    expect_set("bytes=700-799,0-99,500-599,90-510,800-900", 1000, "700-900,0-599");
    /* Three parts joined by one range. */
    expect_set("bytes=40-49,0-9,20-29,5-45,90-99", 100, "0-49,90-99");
}

static void test_range_parse_set_unsatisfiable_ranges_dropped(void **state)
{
    (void)state;
    expect_set("bytes=0-9,2000-2999,-10", 1000, "0-9,990-999");
    expect_set("bytes=1000-,0-9", 1000, "0-9"); /* one left: a plain 206 */
    expect_set("bytes=-0,5-6", 1000, "5-6");
    expect_set("bytes=1000-,2000-2999,-0", 1000, "UNSAT");
    /* Ends past the object are clamped, then merged. */
    expect_set("bytes=990-5000,0-9", 1000, "990-999,0-9");
    expect_set("bytes=990-5000,995-", 1000, "990-999");
    expect_set("bytes=-2000,0-9", 1000, "0-999");
}

static void test_range_parse_set_invalid_or_absent_is_none(void **state)
{
    (void)state;
    expect_set("bytes=0-1,x", 100, "NONE");
    expect_set("bytes=0-1,5-4", 100, "NONE");
    expect_set("bytes=", 100, "NONE");
    expect_set("bytes=,,", 100, "NONE");
    expect_set("items=0-1,3-4", 100, "NONE");
    expect_set("bytes=0-1, 3 -4", 100, "NONE");
    expect_set("bytes=-5,0-", 0, "NONE"); /* a suffix on a 0-length object, as range_parse */
    expect_set("bytes=0-,5-", 0, "UNSAT");
    struct range_set s;
    assert_int_equal(range_parse_set(NULL, 0, 100, &s), RANGE_NONE);
    assert_int_equal(s.n, 0);
}

static void test_range_parse_set_whitespace_and_empty_elements(void **state)
{
    (void)state;
    expect_set(" bytes=0-1 ,\t5-6 , ,8-9 ", 100, "0-1,5-6,8-9");
    expect_set("BYTES=,0-1,,5-6,", 100, "0-1,5-6");
}

/* "bytes=" then <n> disjoint ranges of 2 bytes, 10 apart, from <first> on, then <tail>. */
static void many(char *buf, size_t cap, unsigned n, uint64_t first, const char *tail)
{
    size_t off = (size_t)snprintf(buf, cap, "bytes=");
    for (unsigned i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%llu-%llu", i ? "," : "",
                                (unsigned long long)(first + 10 * i),
                                (unsigned long long)(first + 10 * i + 1));
    snprintf(buf + off, cap - off, "%s", tail);
    assert_true(off < cap - 64);
}

static void test_range_parse_set_at_most_32_parts(void **state)
{
    char v[16384];
    struct range_set s;
    (void)state;
    many(v, sizeof(v), RANGE_SET_MAX, 0, "");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_OK);
    assert_int_equal(s.n, RANGE_SET_MAX);
    assert_int_equal(s.r[31].start, 310);
    assert_int_equal(s.r[31].end, 311);
    many(v, sizeof(v), RANGE_SET_MAX + 1, 0, "");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_MULTI);
    assert_int_equal(s.n, 0);
    /* 33 ranges asked, 32 after merging: answered. */
    many(v, sizeof(v), RANGE_SET_MAX + 1, 0, ",0-15");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_OK);
    assert_int_equal(s.n, RANGE_SET_MAX);
    assert_int_equal(s.r[0].start, 0);
    assert_int_equal(s.r[0].end, 15);
    assert_int_equal(s.r[1].start, 20);
    /* ... and 33 unsatisfiable among them do not count. */
    many(v, sizeof(v), RANGE_SET_MAX + 1, 0, "");
    assert_int_equal(range_parse_set(v, strlen(v), 312, &s), RANGE_OK);
    assert_int_equal(s.n, RANGE_SET_MAX);
}

static void test_range_parse_set_bridged_back_under_32_within_the_work_bound(void **state)
{
    char v[16384];
    struct range_set s;
    (void)state;
    /* RANGE_SET_WORK disjoint ranges, then one that joins them all: one part. */
    many(v, sizeof(v), RANGE_SET_WORK, 0, ",0-");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.r[0].start, 0);
    assert_int_equal(s.r[0].end, 99999);
    /* One more before the bridge: the bound is passed, the whole object (documented). */
    many(v, sizeof(v), RANGE_SET_WORK + 1, 0, ",0-");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_MULTI);
    /* ... but an invalid element after it still makes the header invalid. */
    many(v, sizeof(v), RANGE_SET_WORK + 1, 0, ",x");
    assert_int_equal(range_parse_set(v, strlen(v), 100000, &s), RANGE_NONE);
}

static void test_range_parse_set_many_touching_ranges_are_one_part(void **state)
{
    char v[32768];
    struct range_set s;
    size_t off = (size_t)snprintf(v, sizeof(v), "bytes=");
    (void)state;
    /* 2000 ranges of 5 bytes, each touching the one before: (the order asked: descending) */
    for (unsigned i = 2000; i-- > 0;)
        off += (size_t)snprintf(v + off, sizeof(v) - off, "%u-%u,", 5 * i, 5 * i + 4);
    assert_true(off < sizeof(v) - 1);
    assert_int_equal(range_parse_set(v, off, 10000, &s), RANGE_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.r[0].start, 0);
    assert_int_equal(s.r[0].end, 9999);
}

static void test_range_parse_set_huge_total(void **state)
{
    (void)state;
    expect_set("bytes=0-0,-1", UINT64_MAX, "0-0,18446744073709551614-18446744073709551614");
    expect_set("bytes=18446744073709551613-,0-0,18446744073709551612-18446744073709551612",
               UINT64_MAX, "18446744073709551612-18446744073709551614,0-0");
}

/* A small deterministic generator (xorshift) for the cross-check. */
static uint32_t rnd_next(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/*
 * Against the definition, byte by byte, on small objects: the parts are the maximal runs of bytes
 * some satisfiable range covers, ordered by the first range-spec (in the list) that covers a
 * byte of the run.
 */
static void test_range_parse_set_matches_the_definition(void **state)
{
    (void)state;
    uint32_t x = 20261201;
    for (int iter = 0; iter < 20000; iter++) {
        enum { T_MAX = 48, SPECS_MAX = 8 };
        uint64_t total = 1 + rnd_next(&x) % T_MAX;
        unsigned nspec = 1 + rnd_next(&x) % SPECS_MAX;
        int first_spec[T_MAX]; /* per byte: the first spec covering it, -1 none */
        char v[512];
        size_t off = (size_t)snprintf(v, sizeof(v), "bytes=");
        for (uint64_t b = 0; b < total; b++)
            first_spec[b] = -1;
        for (unsigned k = 0; k < nspec; k++) {
            uint64_t a = rnd_next(&x) % (T_MAX + 4), len = 1 + rnd_next(&x) % 16;
            uint64_t s, e;
            if (rnd_next(&x) % 5 == 0) { /* a suffix */
                off += (size_t)snprintf(v + off, sizeof(v) - off, "%s-%llu", k ? "," : "",
                                        (unsigned long long)len);
                s = len >= total ? 0 : total - len;
                e = total - 1;
            } else {
                off += (size_t)snprintf(v + off, sizeof(v) - off, "%s%llu-%llu", k ? "," : "",
                                        (unsigned long long)a, (unsigned long long)(a + len - 1));
                s = a;
                e = a + len - 1 < total ? a + len - 1 : total - 1;
            }
            for (uint64_t b = s; b <= e && b < total; b++)
                if (first_spec[b] < 0)
                    first_spec[b] = (int)k;
        }
        /* The runs, each with its order key. */
        struct {
            uint64_t s, e;
            int key;
        } runs[T_MAX];
        unsigned nr = 0;
        for (uint64_t b = 0; b < total; b++) {
            if (first_spec[b] < 0)
                continue;
            if (nr > 0 && runs[nr - 1].e + 1 == b) {
                runs[nr - 1].e = b;
                if (first_spec[b] < runs[nr - 1].key)
                    runs[nr - 1].key = first_spec[b];
            } else {
                runs[nr].s = runs[nr].e = b;
                runs[nr++].key = first_spec[b];
            }
        }
        char want[1024] = "UNSAT", got[1024];
        size_t wo = 0;
        for (int key = 0; key < (int)nspec; key++) {
            for (unsigned i = 0; i < nr; i++) {
                if (runs[i].key != key)
                    continue;
                wo +=
                    (size_t)snprintf(want + wo, sizeof(want) - wo, "%s%llu-%llu", wo ? "," : "",
                                     (unsigned long long)runs[i].s, (unsigned long long)runs[i].e);
            }
        }
        const char *g = set_str(v, total, got, sizeof(got));
        if (strcmp(g, want) != 0)
            fail_msg("%s (total %llu): got %s, want %s", v, (unsigned long long)total, g, want);
    }
}

static uint64_t first_byte(const char *v)
{
    return range_first_byte(v, strlen(v));
}

static void test_range_first_byte_is_the_lowest_asked(void **state)
{
    (void)state;
    assert_int_equal(first_byte("bytes=1000-1999"), 1000);
    assert_int_equal(first_byte("bytes=1000-"), 1000);
    assert_int_equal(first_byte("bytes=500-599,0-99"), 0);
    assert_int_equal(first_byte("bytes=700-799,1000-1099"), 700);
    assert_int_equal(first_byte("bytes=1000-1099,700-799"), 700);
    assert_int_equal(first_byte("bytes=5000-5099,1000-1099,90-1010"), 90); /* merged */
    assert_int_equal(first_byte(" bytes=,700-799 ,800-801"), 700);
}

static void test_range_first_byte_zero_when_it_needs_the_length(void **state)
{
    (void)state;
    assert_int_equal(first_byte("bytes=-100"), 0);
    assert_int_equal(first_byte("bytes=500-599,-100"), 0);
    assert_int_equal(first_byte("bytes=500-599, -100"), 0);
    assert_int_equal(first_byte("bytes=500-599,x"), 0); /* invalid */
    assert_int_equal(first_byte("items=500-599"), 0);
    assert_int_equal(range_first_byte(NULL, 0), 0);
}

/* ---- chunk arithmetic ---- */

static void test_range_chunk_count_rounds_up(void **state)
{
    (void)state;
    assert_int_equal(range_chunk_count(0, 10), 0);
    assert_int_equal(range_chunk_count(1, 10), 1);
    assert_int_equal(range_chunk_count(10, 10), 1);
    assert_int_equal(range_chunk_count(11, 10), 2);
    assert_int_equal(range_chunk_count(UINT64_MAX, 1), UINT64_MAX);
    assert_int_equal(range_chunk_count(UINT64_MAX, UINT64_MAX), 1);
    assert_int_equal(range_chunk_count(UINT64_MAX, 1ull << 20), (UINT64_MAX >> 20) + 1);
}

static void test_range_chunks_within_one_chunk(void **state)
{
    uint64_t f, l;
    (void)state;
    range_chunks(0, 0, 1024, &f, &l);
    assert_int_equal(f, 0);
    assert_int_equal(l, 0);
    range_chunks(1024, 2047, 1024, &f, &l);
    assert_int_equal(f, 1);
    assert_int_equal(l, 1);
}

static void test_range_chunks_across_boundaries(void **state)
{
    uint64_t f, l;
    (void)state;
    range_chunks(1023, 1024, 1024, &f, &l);
    assert_int_equal(f, 0);
    assert_int_equal(l, 1);
    range_chunks(1000, 5000, 1024, &f, &l);
    assert_int_equal(f, 0);
    assert_int_equal(l, 4);
    range_chunks(0, UINT64_MAX, 1ull << 20, &f, &l);
    assert_int_equal(f, 0);
    assert_int_equal(l, UINT64_MAX >> 20);
}

static void test_range_chunk_span_full_and_short_last(void **state)
{
    uint64_t off, len;
    (void)state;
    range_chunk_span(0, 1024, 2500, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 1024);
    range_chunk_span(1, 1024, 2500, &off, &len);
    assert_int_equal(off, 1024);
    assert_int_equal(len, 1024);
    range_chunk_span(2, 1024, 2500, &off, &len);
    assert_int_equal(off, 2048);
    assert_int_equal(len, 452);
    /* An exact multiple: the last chunk is full. */
    range_chunk_span(1, 1024, 2048, &off, &len);
    assert_int_equal(off, 1024);
    assert_int_equal(len, 1024);
    /* A 1-byte object. */
    range_chunk_span(0, 1024, 1, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 1);
    /* The last chunk of the largest object. */
    range_chunk_span(UINT64_MAX >> 20, 1ull << 20, UINT64_MAX, &off, &len);
    assert_int_equal(off, (UINT64_MAX >> 20) << 20);
    assert_int_equal(len, (1ull << 20) - 1);
}

static void test_range_chunk_slice_first_middle_last(void **state)
{
    uint64_t off, len;
    (void)state;
    /* [1000, 3000] over 1024-byte chunks: 0 [1000,1023], 1 whole, 2 [2048, 3000]. */
    range_chunk_slice(0, 1024, 1000, 3000, &off, &len);
    assert_int_equal(off, 1000);
    assert_int_equal(len, 24);
    range_chunk_slice(1, 1024, 1000, 3000, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 1024);
    range_chunk_slice(2, 1024, 1000, 3000, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 953);
    /* Inside one chunk. */
    range_chunk_slice(3, 1024, 3100, 3199, &off, &len);
    assert_int_equal(off, 3100 - 3072);
    assert_int_equal(len, 100);
    /* The very last byte of the address space with a huge chunk size. */
    range_chunk_slice(0, UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 1, &off, &len);
    assert_int_equal(off, UINT64_MAX - 1);
    assert_int_equal(len, 1);
    range_chunk_slice(1, UINT64_MAX, UINT64_MAX, UINT64_MAX, &off, &len);
    assert_int_equal(off, 0);
    assert_int_equal(len, 1);
}

/*
 * Every range of small objects against several chunk sizes: the slices of the chunks of
 * range_chunks() are within their spans, contiguous, and cover exactly [start, end].
 */
static void test_range_chunk_slices_tile_every_range(void **state)
{
    static const uint64_t sizes[] = {1, 2, 3, 7, 8, 16};
    (void)state;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint64_t cs = sizes[s];
        for (uint64_t total = 1; total <= 20; total++) {
            for (uint64_t a = 0; a < total; a++) {
                for (uint64_t b = a; b < total; b++) {
                    uint64_t f, l, next = a;
                    range_chunks(a, b, cs, &f, &l);
                    assert_true(l < range_chunk_count(total, cs));
                    for (uint64_t i = f; i <= l; i++) {
                        uint64_t soff, slen, coff, clen;
                        range_chunk_slice(i, cs, a, b, &soff, &slen);
                        range_chunk_span(i, cs, total, &coff, &clen);
                        assert_true(slen > 0);
                        assert_true(soff + slen <= clen);
                        assert_int_equal(coff + soff, next);
                        next += slen;
                    }
                    assert_int_equal(next, b + 1);
                }
            }
        }
    }
}

/* ---- Content-Range ---- */

static void test_range_content_range_formats(void **state)
{
    char buf[RANGE_CONTENT_RANGE_MAX];
    (void)state;
    assert_int_equal(range_content_range(buf, sizeof(buf), 0, 99, 100), 14);
    assert_string_equal(buf, "bytes 0-99/100");
    int n = range_content_range(buf, sizeof(buf), UINT64_MAX - 2, UINT64_MAX - 1, UINT64_MAX);
    assert_string_equal(buf,
                        "bytes 18446744073709551613-18446744073709551614/18446744073709551615");
    assert_int_equal(n, (int)strlen(buf));
    assert_true((size_t)n < RANGE_CONTENT_RANGE_MAX);
}

static void test_range_content_range_too_small_is_enospc(void **state)
{
    char buf[8];
    (void)state;
    assert_int_equal(range_content_range(buf, sizeof(buf), 0, 99, 100), -ENOSPC);
    char exact[15];
    assert_int_equal(range_content_range(exact, 14, 0, 99, 100), -ENOSPC); /* no room for NUL */
    assert_int_equal(range_content_range(exact, sizeof(exact), 0, 99, 100), 14);
    assert_int_equal(range_content_range_unsatisfied(buf, 4, 100), -ENOSPC);
}

static void test_range_content_range_unsatisfied_formats(void **state)
{
    char buf[RANGE_CONTENT_RANGE_MAX];
    (void)state;
    assert_int_equal(range_content_range_unsatisfied(buf, sizeof(buf), 100), 11);
    assert_string_equal(buf, "bytes */100");
    range_content_range_unsatisfied(buf, sizeof(buf), 0);
    assert_string_equal(buf, "bytes */0");
}

static enum range_result pcr(const char *v, uint64_t *a, uint64_t *b, uint64_t *t)
{
    *a = *b = *t = 0xdead;
    return range_parse_content_range(v, strlen(v), a, b, t);
}

static void test_range_parse_content_range_ok(void **state)
{
    uint64_t a, b, t;
    (void)state;
    assert_int_equal(pcr("bytes 0-99/100", &a, &b, &t), RANGE_OK);
    assert_int_equal(a, 0);
    assert_int_equal(b, 99);
    assert_int_equal(t, 100);
    assert_int_equal(pcr(" Bytes 5-5/6 ", &a, &b, &t), RANGE_OK);
    assert_int_equal(a, 5);
    assert_int_equal(b, 5);
    assert_int_equal(t, 6);
    assert_int_equal(pcr("bytes 0-18446744073709551614/18446744073709551615", &a, &b, &t),
                     RANGE_OK);
    assert_int_equal(b, UINT64_MAX - 1);
    assert_int_equal(t, UINT64_MAX);
}

static void test_range_parse_content_range_unsatisfied_total(void **state)
{
    uint64_t a, b, t;
    (void)state;
    assert_int_equal(pcr("bytes */1234", &a, &b, &t), RANGE_UNSATISFIABLE);
    assert_int_equal(t, 1234);
    assert_int_equal(a, 0xdead);
    assert_int_equal(b, 0xdead);
}

static void test_range_parse_content_range_invalid(void **state)
{
    static const char *const bad[] = {
        "",
        "bytes",
        "bytes ",
        "bytes 0-99/*", /* unknown length */
        "bytes */*",
        "bytes 0-99",
        "bytes 0-/100",
        "bytes -99/100",
        "bytes 5-4/100",   /* a > b */
        "bytes 0-100/100", /* b >= total */
        "bytes 0-0/0",
        "bytes  0-99/100", /* two SP */
        "bytes=0-99/100",
        "bytes\t0-99/100",
        "items 0-99/100",
        "bytes 0 -99/100",
        "bytes 0-99 /100",
        "bytes 0-99/ 100",
        "bytes 0-99/100x",
        "bytes 0-99/100,",
        "bytes 0-99/18446744073709551616", /* overflow */
        "bytes 18446744073709551616-1/2",
        "bytes * /100",
        "bytes *100",
    };
    uint64_t a, b, t;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pcr(bad[i], &a, &b, &t) != RANGE_NONE)
            fail_msg("accepted Content-Range \"%s\"", bad[i]);
        assert_int_equal(t, 0xdead);
    }
    assert_int_equal(range_parse_content_range(NULL, 0, &a, &b, &t), RANGE_NONE);
}

/* ---- If-Range ---- */

static bool ifr(const char *v, const char *etag, const char *lm)
{
    return range_if_range_matches(v, strlen(v), etag, lm);
}

static void test_range_if_range_matches_strong_etag(void **state)
{
    (void)state;
    assert_true(ifr("\"abc\"", "\"abc\"", NULL));
    assert_true(ifr(" \"abc\" ", "\"abc\"", "Tue, 01 Jan 2030 00:00:00 GMT"));
    assert_true(ifr("\"\"", "\"\"", NULL));
    assert_false(ifr("\"abd\"", "\"abc\"", NULL));
    assert_false(ifr("\"abc\"", "\"abcd\"", NULL));
    assert_false(ifr("\"abc\"", "\"ABC\"", NULL)); /* byte for byte */
    assert_false(ifr("\"abc\"", NULL, NULL));
    assert_false(ifr("\"abc\"", "", NULL));
}

static void test_range_if_range_weak_etag_never_matches(void **state)
{
    (void)state;
    assert_false(ifr("W/\"abc\"", "W/\"abc\"", NULL));
    assert_false(ifr("W/\"abc\"", "\"abc\"", NULL));
    assert_false(ifr("\"abc\"", "W/\"abc\"", NULL));
}

static void test_range_if_range_malformed_etag_never_matches(void **state)
{
    (void)state;
    assert_false(ifr("\"abc", "\"abc", NULL));
    assert_false(ifr("\"a\"c\"", "\"a\"c\"", NULL));
    assert_false(ifr("\"a c\"", "\"a c\"", NULL)); /* SP is no etagc */
    assert_false(ifr("\"", "\"", NULL));
}

static void test_range_if_range_matches_exact_date(void **state)
{
    const char *lm = "Tue, 01 Jan 2030 00:00:00 GMT";
    (void)state;
    assert_true(ifr("Tue, 01 Jan 2030 00:00:00 GMT", "\"x\"", lm));
    assert_true(ifr("  Tue, 01 Jan 2030 00:00:00 GMT\t", NULL, lm));
    assert_false(ifr("Tue, 01 Jan 2030 00:00:01 GMT", NULL, lm));
    assert_false(ifr("Tue, 01 Jan 2030 00:00:00 GM", NULL, lm));
    assert_false(ifr("tue, 01 jan 2030 00:00:00 gmt", NULL, lm));
    /* An equivalent date in another format is not the same string: no match (safe: 200 full). */
    assert_false(ifr("Tuesday, 01-Jan-30 00:00:00 GMT", NULL, lm));
    assert_false(ifr(lm, "\"x\"", NULL));
    assert_false(ifr(lm, NULL, ""));
}

static void test_range_if_range_empty_never_matches(void **state)
{
    (void)state;
    assert_false(ifr("", "\"x\"", "Tue, 01 Jan 2030 00:00:00 GMT"));
    assert_false(ifr("  ", "\"x\"", ""));
    assert_false(range_if_range_matches(NULL, 0, "\"x\"", "d"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_parse_closed_range_ok),
        cmocka_unit_test(test_range_parse_end_past_total_is_clamped),
        cmocka_unit_test(test_range_parse_open_range_to_end),
        cmocka_unit_test(test_range_parse_suffix_last_n_bytes),
        cmocka_unit_test(test_range_parse_suffix_larger_than_object_is_whole),
        cmocka_unit_test(test_range_parse_suffix_zero_unsatisfiable),
        cmocka_unit_test(test_range_parse_start_at_or_past_total_unsatisfiable),
        cmocka_unit_test(test_range_parse_zero_length_object),
        cmocka_unit_test(test_range_parse_absent_is_none),
        cmocka_unit_test(test_range_parse_unit_case_insensitive),
        cmocka_unit_test(test_range_parse_bogus_unit_is_none),
        cmocka_unit_test(test_range_parse_outer_and_list_whitespace_allowed),
        cmocka_unit_test(test_range_parse_inner_whitespace_is_none),
        cmocka_unit_test(test_range_parse_empty_list_elements_ignored),
        cmocka_unit_test(test_range_parse_syntax_errors_are_none),
        cmocka_unit_test(test_range_parse_overflow_is_none),
        cmocka_unit_test(test_range_parse_huge_total),
        cmocka_unit_test(test_range_parse_multi),
        cmocka_unit_test(test_range_parse_not_nul_terminated),
        cmocka_unit_test(test_range_parse_set_one_range_is_one_part),
        cmocka_unit_test(test_range_parse_set_disjoint_ranges_keep_the_order_asked),
        cmocka_unit_test(test_range_parse_set_overlapping_and_touching_ranges_merge),
        cmocka_unit_test(test_range_parse_set_merged_part_stands_where_its_first_range_stood),
        cmocka_unit_test(test_range_parse_set_unsatisfiable_ranges_dropped),
        cmocka_unit_test(test_range_parse_set_invalid_or_absent_is_none),
        cmocka_unit_test(test_range_parse_set_whitespace_and_empty_elements),
        cmocka_unit_test(test_range_parse_set_at_most_32_parts),
        cmocka_unit_test(test_range_parse_set_bridged_back_under_32_within_the_work_bound),
        cmocka_unit_test(test_range_parse_set_many_touching_ranges_are_one_part),
        cmocka_unit_test(test_range_parse_set_huge_total),
        cmocka_unit_test(test_range_parse_set_matches_the_definition),
        cmocka_unit_test(test_range_first_byte_is_the_lowest_asked),
        cmocka_unit_test(test_range_first_byte_zero_when_it_needs_the_length),
        cmocka_unit_test(test_range_chunk_count_rounds_up),
        cmocka_unit_test(test_range_chunks_within_one_chunk),
        cmocka_unit_test(test_range_chunks_across_boundaries),
        cmocka_unit_test(test_range_chunk_span_full_and_short_last),
        cmocka_unit_test(test_range_chunk_slice_first_middle_last),
        cmocka_unit_test(test_range_chunk_slices_tile_every_range),
        cmocka_unit_test(test_range_content_range_formats),
        cmocka_unit_test(test_range_content_range_too_small_is_enospc),
        cmocka_unit_test(test_range_content_range_unsatisfied_formats),
        cmocka_unit_test(test_range_parse_content_range_ok),
        cmocka_unit_test(test_range_parse_content_range_unsatisfied_total),
        cmocka_unit_test(test_range_parse_content_range_invalid),
        cmocka_unit_test(test_range_if_range_matches_strong_etag),
        cmocka_unit_test(test_range_if_range_weak_etag_never_matches),
        cmocka_unit_test(test_range_if_range_malformed_etag_never_matches),
        cmocka_unit_test(test_range_if_range_matches_exact_date),
        cmocka_unit_test(test_range_if_range_empty_never_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
