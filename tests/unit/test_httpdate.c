/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_httpdate: the three HTTP-date formats, leap years, day and month names, out-of-range
 * fields, whatever surrounds a date, RFC 850's two-digit years against the current time, and
 * IMF-fixdate formatting (exact strings, and parse(format(t)) == t over five centuries).
 */
#include "httpdate.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define NOW 1796169600   /* Wed, 02 Dec 2026 00:00:00 GMT */
#define T_1994 784111777 /* Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example */

/* httpdate_parse of a NUL-terminated literal at NOW; -EINVAL leaves *t at -42. */
static int parse_at(const char *v, int64_t now, int64_t *t)
{
    *t = -42;
    return httpdate_parse(v, strlen(v), now, t);
}

static int64_t ok(const char *v)
{
    int64_t t;
    if (parse_at(v, NOW, &t) != 0)
        fail_msg("refused: \"%s\"", v);
    return t;
}

static void refused(const char *v)
{
    int64_t t;
    if (parse_at(v, NOW, &t) != -EINVAL)
        fail_msg("accepted: \"%s\" as %lld", v, (long long)t);
    assert_int_equal(t, -42);
}

static void test_parse_reads_the_three_formats_as_one_instant(void **state)
{
    (void)state;
    assert_int_equal(ok("Sun, 06 Nov 1994 08:49:37 GMT"), T_1994);
    assert_int_equal(ok("Sunday, 06-Nov-94 08:49:37 GMT"), T_1994);
    assert_int_equal(ok("Sun Nov  6 08:49:37 1994"), T_1994);
    assert_int_equal(ok("Sun Nov 06 08:49:37 1994"), T_1994); /* 2DIGIT day */
    assert_int_equal(ok("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
    assert_int_equal(ok("Wed, 31 Dec 1969 23:59:59 GMT"), -1);
    assert_int_equal(ok("Fri, 31 Dec 9999 23:59:59 GMT"), 253402300799LL);
    assert_int_equal(ok("Mon, 01 Jan 0001 00:00:00 GMT"), -62135596800LL);
    assert_int_equal(ok("Mon, 01 Jan 1900 00:00:00 GMT"), -2208988800LL);
}

static void test_parse_ignores_surrounding_ows_only(void **state)
{
    (void)state;
    assert_int_equal(ok("  Sun, 06 Nov 1994 08:49:37 GMT\t"), T_1994);
    assert_int_equal(ok("\tSun Nov  6 08:49:37 1994 "), T_1994);
    refused("Sun, 06 Nov 1994 08:49:37 GMT x");
    refused("Sun, 06 Nov 1994 08:49:37 GMT,");
    refused("Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT"); /* a list */
    refused("Sun, 06 Nov 1994 08:49:37 GMTX");
    refused("Sun Nov  6 08:49:37 19945");
    refused("Sunday, 06-Nov-94 08:49:37 GMT;");
    refused("x Sun, 06 Nov 1994 08:49:37 GMT");
    refused("");
    refused("   ");
    int64_t t = -42;
    assert_int_equal(httpdate_parse(NULL, 0, NOW, &t), -EINVAL);
    /* not NUL-terminated: only <len> bytes are read */
    assert_int_equal(httpdate_parse("Sun, 06 Nov 1994 08:49:37 GMTjunk", 29, NOW, &t), 0);
    assert_int_equal(t, T_1994);
}

static void test_parse_refuses_other_spacing_and_zones(void **state)
{
    (void)state;
    refused("Sun, 06 Nov 1994 08:49:37 UTC");
    refused("Sun, 06 Nov 1994 08:49:37 +0000");
    refused("Sun, 06 Nov 1994 08:49:37");
    refused("Sun,06 Nov 1994 08:49:37 GMT");
    refused("Sun, 06  Nov 1994 08:49:37 GMT");
    refused("Sun, 6 Nov 1994 08:49:37 GMT"); /* IMF-fixdate days are 2DIGIT */
    refused("Sun, 06 Nov 94 08:49:37 GMT");  /* and years 4DIGIT */
    refused("Sun, 06 Nov 1994 8:49:37 GMT");
    refused("Sun, 06 Nov 1994 08:49 GMT");
    refused("Sun, 06 Nov 1994 08-49-37 GMT");
    refused("Sun Nov 6 08:49:37 1994"); /* asctime: one digit takes a leading SP */
    refused("Sun Nov  6 08:49:37 1994 GMT");
    refused("Sunday, 06-Nov-1994 08:49:37 GMT");
    refused("Sunday, 06 Nov 94 08:49:37 GMT");
    refused("Sunday 06-Nov-94 08:49:37 GMT");
}

static void test_parse_refuses_bad_day_and_month_names(void **state)
{
    (void)state;
    refused("Sin, 06 Nov 1994 08:49:37 GMT");
    refused("sun, 06 Nov 1994 08:49:37 GMT"); /* names are case-sensitive */
    refused("SUN, 06 Nov 1994 08:49:37 GMT");
    refused("Sun, 06 nov 1994 08:49:37 GMT");
    refused("Sun, 06 Nox 1994 08:49:37 GMT");
    refused("Sun, 06 November 1994 08:49:37 GMT");
    refused("Sunday, 06 Nov 1994 08:49:37 GMT"); /* a long name with IMF-fixdate */
    refused("Sun, 06-Nov-94 08:49:37 GMT");      /* a short name with rfc850-date */
    refused("Sundy, 06-Nov-94 08:49:37 GMT");
    refused("sunday, 06-Nov-94 08:49:37 GMT");
    refused("Sun Nox  6 08:49:37 1994");
    refused("Su Nov  6 08:49:37 1994");
    /* Any of the seven names goes: recipients do not check the weekday. */
    assert_int_equal(ok("Mon, 06 Nov 1994 08:49:37 GMT"), T_1994);
    assert_int_equal(ok("Friday, 06-Nov-94 08:49:37 GMT"), T_1994);
}

static void test_parse_knows_leap_years(void **state)
{
    (void)state;
    assert_int_equal(ok("Thu, 29 Feb 2024 12:00:00 GMT"), 1709208000);
    assert_int_equal(ok("Fri, 01 Mar 2024 00:00:00 GMT"), 1709251200);
    assert_int_equal(ok("Tue, 29 Feb 2000 00:00:00 GMT"), 951782400); /* divisible by 400 */
    assert_int_equal(ok("Tue, 31 Dec 2024 23:59:59 GMT"), 1735689599);
    refused("Wed, 29 Feb 2023 00:00:00 GMT");
    refused("Mon, 29 Feb 2100 00:00:00 GMT"); /* divisible by 100 only */
    refused("Mon, 29 Feb 1900 00:00:00 GMT");
    refused("Thu, 30 Feb 2024 00:00:00 GMT");
    refused("Thu Feb 30 00:00:00 2024");
}

static void test_parse_refuses_out_of_range_fields(void **state)
{
    (void)state;
    refused("Sun, 00 Nov 1994 08:49:37 GMT");
    refused("Sun, 32 Jan 1994 08:49:37 GMT");
    refused("Sun, 31 Apr 1994 08:49:37 GMT");
    refused("Sun, 31 Nov 1994 08:49:37 GMT");
    refused("Sun, 06 Nov 1994 24:00:00 GMT");
    refused("Sun, 06 Nov 1994 08:60:37 GMT");
    refused("Sun, 06 Nov 1994 08:49:61 GMT");
    refused("Sun, 06 Nov 0000 08:49:37 GMT");
    refused("Sunday, 00-Nov-94 08:49:37 GMT");
    refused("Sunday, 31-Nov-94 08:49:37 GMT");
    refused("Sun Nov  0 08:49:37 1994");
    refused("Sun Nov 31 08:49:37 1994");
    assert_int_equal(ok("Sun, 31 Jan 1994 23:59:59 GMT") + 1, ok("Sun, 01 Feb 1994 00:00:00 GMT"));
    /* a leap second: the next second */
    assert_int_equal(ok("Sat, 31 Dec 2016 23:59:60 GMT"), ok("Sun, 01 Jan 2017 00:00:00 GMT"));
}

static int64_t rfc850_at(const char *v, int64_t now)
{
    int64_t t;
    if (parse_at(v, now, &t) != 0)
        fail_msg("refused: \"%s\"", v);
    return t;
}

/* RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is the most recent year
 * in the past with those digits. */
static void test_parse_rfc850_two_digit_years_around_now(void **state)
{
    (void)state;
    assert_int_equal(rfc850_at("Friday, 01-Jan-99 00:00:00 GMT", NOW), 915148800);    /* 1999 */
    assert_int_equal(rfc850_at("Thursday, 01-Jan-26 00:00:00 GMT", NOW), 1767225600); /* 2026 */
    assert_int_equal(rfc850_at("Saturday, 01-Jan-00 00:00:00 GMT", NOW), 946684800);  /* 2000 */
    /* 2076-11-06 is less than 50 years after 2026-12-02 ... */
    assert_int_equal(rfc850_at("Friday, 06-Nov-76 08:49:37 GMT", NOW), 3371878177LL);
    /* ... 2076-12-03 is more: 1976 */
    assert_int_equal(rfc850_at("Friday, 03-Dec-76 00:00:00 GMT", NOW), 218419200);
    /* exactly 50 years after is not more than 50 years */
    assert_int_equal(rfc850_at("Wednesday, 02-Dec-76 00:00:00 GMT", NOW),
                     rfc850_at("Wed, 02 Dec 2076 00:00:00 GMT", NOW));
    assert_int_equal(rfc850_at("Wednesday, 02-Dec-76 00:00:01 GMT", NOW),
                     rfc850_at("Thu, 02 Dec 1976 00:00:01 GMT", NOW));
    /* in 2090, "10" is 2110 (20 years ahead), not 2010 */
    assert_int_equal(rfc850_at("Wednesday, 01-Jan-10 00:00:00 GMT", 3799958400LL), 4417977600LL);
    /* 29 February exists only in some centuries: 2000, not 2100 */
    assert_int_equal(rfc850_at("Tuesday, 29-Feb-00 00:00:00 GMT", 4417977600LL),
                     rfc850_at("Tue, 29 Feb 2000 00:00:00 GMT", NOW));
}

static void fmt(int64_t t, const char *want)
{
    char out[HTTPDATE_LEN + 1];
    memset(out, 'x', sizeof(out));
    httpdate_format(t, out);
    assert_string_equal(out, want);
    assert_int_equal(strlen(out), HTTPDATE_LEN);
}

static void test_format_writes_imf_fixdate(void **state)
{
    (void)state;
    fmt(T_1994, "Sun, 06 Nov 1994 08:49:37 GMT");
    fmt(0, "Thu, 01 Jan 1970 00:00:00 GMT");
    fmt(-1, "Wed, 31 Dec 1969 23:59:59 GMT");
    fmt(951782400, "Tue, 29 Feb 2000 00:00:00 GMT");
    fmt(1709208000, "Thu, 29 Feb 2024 12:00:00 GMT");
    fmt(1735689599, "Tue, 31 Dec 2024 23:59:59 GMT");
    fmt(NOW, "Wed, 02 Dec 2026 00:00:00 GMT");
    fmt(253402300799LL, "Fri, 31 Dec 9999 23:59:59 GMT");
    fmt(-62135596800LL, "Mon, 01 Jan 0001 00:00:00 GMT");
    /* outside the 4-digit years: the nearest bound */
    fmt(INT64_MAX, "Fri, 31 Dec 9999 23:59:59 GMT");
    fmt(INT64_MIN, "Mon, 01 Jan 0001 00:00:00 GMT");
}

static void test_format_then_parse_is_the_identity(void **state)
{
    (void)state;
    char out[HTTPDATE_LEN + 1];
    /* 1800 to 2300 in steps of 1 day 1 h 1 min 1 s, so every weekday, month day and time move */
    for (int64_t t = -5364662400LL; t < 10413792000LL; t += 90061) {
        httpdate_format(t, out);
        int64_t back;
        if (httpdate_parse(out, strlen(out), NOW, &back) != 0 || back != t)
            fail_msg("%lld -> \"%s\" -> %lld", (long long)t, out, (long long)back);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_reads_the_three_formats_as_one_instant),
        cmocka_unit_test(test_parse_ignores_surrounding_ows_only),
        cmocka_unit_test(test_parse_refuses_other_spacing_and_zones),
        cmocka_unit_test(test_parse_refuses_bad_day_and_month_names),
        cmocka_unit_test(test_parse_knows_leap_years),
        cmocka_unit_test(test_parse_refuses_out_of_range_fields),
        cmocka_unit_test(test_parse_rfc850_two_digit_years_around_now),
        cmocka_unit_test(test_format_writes_imf_fixdate),
        cmocka_unit_test(test_format_then_parse_is_the_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
