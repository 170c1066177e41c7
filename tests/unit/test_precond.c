/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_precond: the conditional requests answered from a stored object, as RFC 9110 §13 orders
 * them: If-Match and If-Unmodified-Since (412), If-None-Match (lists, "*", weak comparison) and
 * If-Modified-Since (three date formats, later, earlier, equal, invalid, the stored Date standing
 * in for a missing Last-Modified), If-Range (strong entity-tags, dates and their strength).
 */
#include "precond.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define NOW 1796169600 /* Wed, 02 Dec 2026 00:00:00 GMT */
#define LM "Tue, 15 Nov 1994 12:45:26 GMT"
#define LM_T 784903526
#define ETAG "\"abc\""

static struct precond_field f(const char *v)
{
    struct precond_field pf = {v, v != NULL ? strlen(v) : 0};
    return pf;
}

/* A request with no conditional fields and no Range. */
static struct precond_req req0(void)
{
    struct precond_req r;
    memset(&r, 0, sizeof(r));
    return r;
}

static struct precond_stored stored(const char *etag, const char *lm)
{
    struct precond_stored s = {etag, lm, false, 0};
    return s;
}

static enum precond_outcome ims(const char *date, const struct precond_stored *s)
{
    struct precond_req r = req0();
    r.if_modified_since = f(date);
    return precond_evaluate(&r, s, NOW);
}

static void test_no_conditionals_send_the_whole_object_or_the_range(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    struct precond_req r = req0();
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FULL);
    r.has_range = true;
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_RANGE);
}

static void test_if_modified_since_in_the_three_formats(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    assert_int_equal(ims(LM, &s), PRECOND_NOT_MODIFIED);
    assert_int_equal(ims("Tuesday, 15-Nov-94 12:45:26 GMT", &s), PRECOND_NOT_MODIFIED);
    assert_int_equal(ims("Tue Nov 15 12:45:26 1994", &s), PRECOND_NOT_MODIFIED);
}

static void test_if_modified_since_later_earlier_and_invalid(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    /* later than Last-Modified: not modified since */
    assert_int_equal(ims("Tue, 15 Nov 1994 12:45:27 GMT", &s), PRECOND_NOT_MODIFIED);
    assert_int_equal(ims("Sat, 01 Jan 2000 00:00:00 GMT", &s), PRECOND_NOT_MODIFIED);
    assert_int_equal(ims("Wed, 16-Nov-94 00:00:00 GMT", &s), PRECOND_FULL); /* a short name */
    assert_int_equal(ims("Wednesday, 16-Nov-94 00:00:00 GMT", &s), PRECOND_NOT_MODIFIED);
    /* earlier: modified since */
    assert_int_equal(ims("Tue, 15 Nov 1994 12:45:25 GMT", &s), PRECOND_FULL);
    assert_int_equal(ims("Mon Nov 14 12:45:26 1994", &s), PRECOND_FULL);
    /* invalid dates are ignored */
    assert_int_equal(ims("yesterday", &s), PRECOND_FULL);
    assert_int_equal(ims("tue, 15 nov 1994 12:45:26 gmt", &s), PRECOND_FULL);
    assert_int_equal(ims(LM ", " LM, &s), PRECOND_FULL);
    assert_int_equal(ims("", &s), PRECOND_FULL);
}

static void test_if_modified_since_without_a_usable_last_modified(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, "");
    assert_int_equal(ims(LM, &s), PRECOND_FULL);
    s = stored(ETAG, "not a date");
    assert_int_equal(ims("Sat, 01 Jan 2000 00:00:00 GMT", &s), PRECOND_FULL);
    /* RFC 9111 §4.3.2: the stored Date stands in */
    s = stored(ETAG, "");
    s.has_date = true;
    s.date = LM_T;
    assert_int_equal(ims(LM, &s), PRECOND_NOT_MODIFIED);
    assert_int_equal(ims("Tue, 15 Nov 1994 12:45:25 GMT", &s), PRECOND_FULL);
    /* ... but not over a Last-Modified */
    s = stored(ETAG, "Wed, 16 Nov 1994 00:00:00 GMT");
    s.has_date = true;
    s.date = LM_T;
    assert_int_equal(ims(LM, &s), PRECOND_FULL);
}

static enum precond_outcome inm(const char *v, const char *etag)
{
    struct precond_req r = req0();
    r.if_none_match = f(v);
    struct precond_stored s = stored(etag, LM);
    return precond_evaluate(&r, &s, NOW);
}

static void test_if_none_match_lists_star_and_weak_comparison(void **state)
{
    (void)state;
    assert_int_equal(inm(ETAG, ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm("\"x\", " ETAG, ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm(ETAG ",\"x\"", ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm("\"x\" , " ETAG " ,\"y\"", ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm(",, " ETAG, ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm("*", ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm(" * ", ""), PRECOND_NOT_MODIFIED); /* a representation is stored */
    /* weak comparison: W/ ignored on either side */
    assert_int_equal(inm("W/" ETAG, ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm(ETAG, "W/" ETAG), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm("\"x\", W/" ETAG, "W/" ETAG), PRECOND_NOT_MODIFIED);
    /* no match */
    assert_int_equal(inm("\"x\"", ETAG), PRECOND_FULL);
    assert_int_equal(inm("\"ab\"", ETAG), PRECOND_FULL);
    assert_int_equal(inm("\"abcd\"", ETAG), PRECOND_FULL);
    assert_int_equal(inm("\"ABC\"", ETAG), PRECOND_FULL); /* opaque-tags are case-sensitive */
    assert_int_equal(inm("w/" ETAG, ETAG), PRECOND_FULL);
    assert_int_equal(inm("", ETAG), PRECOND_FULL);
    assert_int_equal(inm("W/", ETAG), PRECOND_FULL);
    assert_int_equal(inm(ETAG, ""), PRECOND_FULL); /* nothing stored to match */
    assert_int_equal(inm("**", ETAG), PRECOND_FULL);
    /* a comma inside a quoted tag does not split it */
    assert_int_equal(inm("\"a,b\"", "\"a,b\""), PRECOND_NOT_MODIFIED);
    assert_int_equal(inm("\"a,b\"", "\"b\""), PRECOND_FULL);
    assert_int_equal(inm("\"x\", \"a,b\"", "\"a,b\""), PRECOND_NOT_MODIFIED);
}

static void test_if_none_match_takes_precedence_over_if_modified_since(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    struct precond_req r = req0();
    r.if_none_match = f("\"other\"");
    r.if_modified_since = f(LM); /* would be a 304 alone */
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FULL);
    r.if_none_match = f(ETAG);
    r.if_modified_since = f("Mon, 01 Jan 1900 00:00:00 GMT"); /* would be a 200 alone */
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_NOT_MODIFIED);
}

static void test_a_304_wins_over_the_range(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    struct precond_req r = req0();
    r.has_range = true;
    r.if_none_match = f(ETAG);
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_NOT_MODIFIED);
    r = req0();
    r.has_range = true;
    r.if_modified_since = f(LM);
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_NOT_MODIFIED);
}

static enum precond_outcome if_match(const char *v, const char *etag)
{
    struct precond_req r = req0();
    r.if_match = f(v);
    struct precond_stored s = stored(etag, LM);
    return precond_evaluate(&r, &s, NOW);
}

static void test_if_match_uses_the_strong_comparison(void **state)
{
    (void)state;
    assert_int_equal(if_match(ETAG, ETAG), PRECOND_FULL);
    assert_int_equal(if_match("\"x\", " ETAG, ETAG), PRECOND_FULL);
    assert_int_equal(if_match("*", ETAG), PRECOND_FULL);
    assert_int_equal(if_match("*", ""), PRECOND_FULL);
    assert_int_equal(if_match("\"x\"", ETAG), PRECOND_FAILED);
    assert_int_equal(if_match("W/" ETAG, ETAG), PRECOND_FAILED);
    assert_int_equal(if_match(ETAG, "W/" ETAG), PRECOND_FAILED);
    assert_int_equal(if_match("W/" ETAG, "W/" ETAG), PRECOND_FAILED);
    assert_int_equal(if_match(ETAG, ""), PRECOND_FAILED);
    assert_int_equal(if_match("abc", "abc"), PRECOND_FAILED); /* not entity-tags */
}

static void test_if_unmodified_since_only_without_if_match(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    struct precond_req r = req0();
    r.if_unmodified_since = f("Tue, 15 Nov 1994 12:45:25 GMT"); /* modified after it */
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FAILED);
    r.if_unmodified_since = f(LM);
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FULL);
    r.if_unmodified_since = f("Tue Nov 15 12:45:26 1994");
    r.has_range = true; /* the resumed download it guards */
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_RANGE);
    r.if_unmodified_since = f("never");
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_RANGE);
    /* If-Match replaces it */
    r.if_unmodified_since = f("Mon, 01 Jan 1900 00:00:00 GMT");
    r.if_match = f(ETAG);
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_RANGE);
    /* no Last-Modified stored: ignored */
    s = stored(ETAG, "");
    r = req0();
    r.if_unmodified_since = f("Mon, 01 Jan 1900 00:00:00 GMT");
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FULL);
}

static void test_a_412_wins_over_a_304(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    struct precond_req r = req0();
    r.if_match = f("\"x\"");
    r.if_none_match = f(ETAG);
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FAILED);
}

static enum precond_outcome if_range(const char *v, const struct precond_stored *s)
{
    struct precond_req r = req0();
    r.has_range = true;
    r.if_range = f(v);
    return precond_evaluate(&r, s, NOW);
}

static void test_if_range_entity_tags_compare_strongly(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    assert_int_equal(if_range(ETAG, &s), PRECOND_RANGE);
    assert_int_equal(if_range(" " ETAG " ", &s), PRECOND_RANGE);
    assert_int_equal(if_range("\"x\"", &s), PRECOND_FULL);
    assert_int_equal(if_range("W/" ETAG, &s), PRECOND_FULL);      /* a weak tag never matches */
    assert_int_equal(if_range(ETAG ", \"x\"", &s), PRECOND_FULL); /* one tag, not a list */
    assert_int_equal(if_range("*", &s), PRECOND_FULL);
    s = stored("W/" ETAG, LM);
    assert_int_equal(if_range("W/" ETAG, &s), PRECOND_FULL);
    assert_int_equal(if_range(ETAG, &s), PRECOND_FULL);
    s = stored("", LM);
    assert_int_equal(if_range(ETAG, &s), PRECOND_FULL);
    /* If-Range without a Range is ignored */
    s = stored(ETAG, LM);
    struct precond_req r = req0();
    r.if_range = f("\"x\"");
    assert_int_equal(precond_evaluate(&r, &s, NOW), PRECOND_FULL);
}

static void test_if_range_dates_must_equal_a_strong_last_modified(void **state)
{
    (void)state;
    struct precond_stored s = stored(ETAG, LM);
    /* no stored Date: the Last-Modified counts as strong */
    assert_int_equal(if_range(LM, &s), PRECOND_RANGE);
    assert_int_equal(if_range("Tuesday, 15-Nov-94 12:45:26 GMT", &s), PRECOND_RANGE);
    assert_int_equal(if_range("Tue Nov 15 12:45:26 1994", &s), PRECOND_RANGE);
    assert_int_equal(if_range("Tue, 15 Nov 1994 12:45:27 GMT", &s), PRECOND_FULL); /* later */
    assert_int_equal(if_range("Tue, 15 Nov 1994 12:45:25 GMT", &s), PRECOND_FULL);
    assert_int_equal(if_range("garbage", &s), PRECOND_FULL);
    /* a Date at least one second after the Last-Modified makes it strong */
    s.has_date = true;
    s.date = LM_T + 1;
    assert_int_equal(if_range(LM, &s), PRECOND_RANGE);
    /* a Date in the same second: weak, so no match (RFC 9110 §8.8.2.2) */
    s.date = LM_T;
    assert_int_equal(if_range(LM, &s), PRECOND_FULL);
    /* no Last-Modified stored */
    s = stored(ETAG, "");
    assert_int_equal(if_range(LM, &s), PRECOND_FULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_conditionals_send_the_whole_object_or_the_range),
        cmocka_unit_test(test_if_modified_since_in_the_three_formats),
        cmocka_unit_test(test_if_modified_since_later_earlier_and_invalid),
        cmocka_unit_test(test_if_modified_since_without_a_usable_last_modified),
        cmocka_unit_test(test_if_none_match_lists_star_and_weak_comparison),
        cmocka_unit_test(test_if_none_match_takes_precedence_over_if_modified_since),
        cmocka_unit_test(test_a_304_wins_over_the_range),
        cmocka_unit_test(test_if_match_uses_the_strong_comparison),
        cmocka_unit_test(test_if_unmodified_since_only_without_if_match),
        cmocka_unit_test(test_a_412_wins_over_a_304),
        cmocka_unit_test(test_if_range_entity_tags_compare_strongly),
        cmocka_unit_test(test_if_range_dates_must_equal_a_strong_last_modified),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
