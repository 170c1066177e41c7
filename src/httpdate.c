/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * httpdate: HTTP-date parsing and formatting. See httpdate.h.
 * The calendar is the proleptic Gregorian one, computed here (no gmtime/timegm: no locale, no
 * time zone, no time_t width in the way). A cursor walks the value; each piece of a format is
 * one call that either advances it or fails.
 */
#include "httpdate.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define YEAR_MIN 1
#define YEAR_MAX 9999
#define DAY_S 86400

static const char *const wkday[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const weekday[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                       "Thursday", "Friday", "Saturday"};
static const char *const month_name[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
/* Days of the year before each month, in a common year. */
static const int month_start[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Leap years in [1, y] (y >= 0). */
static int64_t leaps_through(int64_t y)
{
    return y / 4 - y / 100 + y / 400;
}

/* Days from 1970-01-01 to 1 January of year <y> (y >= 1; negative before 1970). */
static int64_t days_before_year(int64_t y)
{
    return 365 * (y - 1970) + leaps_through(y - 1) - leaps_through(1969);
}

/* Days from 1970-01-01 to <y>-<m>-<d> (a valid date). */
static int64_t days_from_date(int64_t y, int m, int d)
{
    return days_before_year(y) + month_start[m - 1] + (m > 2 && is_leap(y) ? 1 : 0) + d - 1;
}

static int64_t time_of(int64_t y, int m, int d, int hh, int mm, int ss)
{
    return days_from_date(y, m, d) * DAY_S + hh * 3600 + mm * 60 + ss;
}

/* The calendar date of day <days> after 1970-01-01. */
static void date_of(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t yr = 1970 + days / 366; /* never past the year (a year has at most 366 days) */
    if (days < 0)
        yr = 1970 + days / 365 - 1;
    while (days_before_year(yr + 1) <= days)
        yr++;
    while (days_before_year(yr) > days)
        yr--;
    int64_t doy = days - days_before_year(yr);
    int mo = 12;
    while (mo > 1 && doy < month_start[mo - 1] + (mo > 2 && is_leap(yr) ? 1 : 0))
        mo--;
    *y = yr;
    *m = mo;
    *d = (int)(doy - month_start[mo - 1] - (mo > 2 && is_leap(yr) ? 1 : 0)) + 1;
}

/* ---- parsing ---- */

struct cur {
    const char *p;
    size_t len;
    size_t i;
};

/* The literal <s> next. */
static bool lit(struct cur *c, const char *s)
{
    size_t n = strlen(s);
    if (c->len - c->i < n || memcmp(c->p + c->i, s, n) != 0)
        return false;
    c->i += n;
    return true;
}

/* Exactly <n> digits next, into *v. */
static bool digits(struct cur *c, size_t n, int *v)
{
    if (c->len - c->i < n)
        return false;
    int x = 0;
    for (size_t k = 0; k < n; k++) {
        char ch = c->p[c->i + k];
        if (ch < '0' || ch > '9')
            return false;
        x = x * 10 + (ch - '0');
    }
    c->i += n;
    *v = x;
    return true;
}

/* One of <names>[0..n) next (none is a prefix of another); its index in *which. */
static bool name(struct cur *c, const char *const *names, int n, int *which)
{
    for (int k = 0; k < n; k++) {
        if (lit(c, names[k])) {
            *which = k;
            return true;
        }
    }
    return false;
}

static bool month(struct cur *c, int *m)
{
    int k;
    if (!name(c, month_name, 12, &k))
        return false;
    *m = k + 1;
    return true;
}

/* time-of-day = hour ":" minute ":" second */
static bool time_of_day(struct cur *c, int *hh, int *mm, int *ss)
{
    return digits(c, 2, hh) && lit(c, ":") && digits(c, 2, mm) && lit(c, ":") && digits(c, 2, ss) &&
           *hh <= 23 && *mm <= 59 && *ss <= 60;
}

static bool valid_date(int64_t y, int m, int d)
{
    return y >= YEAR_MIN && y <= YEAR_MAX && m >= 1 && m <= 12 && d >= 1 && d <= month_days(y, m);
}

/* Floor division (C's rounds towards zero). */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* The year of an rfc850-date's <yy>: the latest year ending in those digits whose date is not
 * more than 50 years after <now>. */
static int64_t rfc850_year(int yy, int m, int d, int hh, int mm, int ss, int64_t now)
{
    int64_t nday = floor_div(now, DAY_S), ny;
    int nm, nd;
    date_of(nday, &ny, &nm, &nd);
    /* now + 50 years: the same day and time (29 February of a common year: 1 March) */
    int64_t ly = ny + 50;
    int64_t lday = nd <= month_days(ly, nm) ? days_from_date(ly, nm, nd) : days_from_date(ly, 3, 1);
    int64_t limit = lday * DAY_S + (now - nday * DAY_S);
    int64_t y = ny - ny % 100 + yy + 100;
    while (y > 100 && (!valid_date(y, m, d) || time_of(y, m, d, hh, mm, ss) > limit))
        y -= 100;
    return y;
}

static int parse(struct cur *c, int64_t now, int64_t *out)
{
    int wd = 0, d = 0, m = 0, hh = 0, mm = 0, ss = 0, y4 = 0;
    int64_t y;
    size_t start = c->i;
    if (name(c, weekday, 7, &wd) && lit(c, ", ")) {
        /* rfc850-date: day-name-l "," SP date2 SP time-of-day SP GMT; date2 = day "-" month "-"
         * 2DIGIT */
        int yy = 0;
        if (!(digits(c, 2, &d) && lit(c, "-") && month(c, &m) && lit(c, "-") && digits(c, 2, &yy) &&
              lit(c, " ") && time_of_day(c, &hh, &mm, &ss) && lit(c, " GMT")))
            return -EINVAL;
        if (d < 1 || d > 31)
            return -EINVAL;
        y = rfc850_year(yy, m, d, hh, mm, ss, now);
    } else {
        c->i = start;
        if (!name(c, wkday, 7, &wd))
            return -EINVAL;
        if (lit(c, ", ")) {
            /* IMF-fixdate: day-name "," SP day SP month SP year SP time-of-day SP GMT */
            if (!(digits(c, 2, &d) && lit(c, " ") && month(c, &m) && lit(c, " ") &&
                  digits(c, 4, &y4) && lit(c, " ") && time_of_day(c, &hh, &mm, &ss) &&
                  lit(c, " GMT")))
                return -EINVAL;
        } else if (lit(c, " ")) {
            /* asctime-date: day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP
             * year */
            if (!(month(c, &m) && lit(c, " ")))
                return -EINVAL;
            if (lit(c, " ")) {
                if (!digits(c, 1, &d))
                    return -EINVAL;
            } else if (!digits(c, 2, &d)) {
                return -EINVAL;
            }
            if (!(lit(c, " ") && time_of_day(c, &hh, &mm, &ss) && lit(c, " ") && digits(c, 4, &y4)))
                return -EINVAL;
        } else {
            return -EINVAL;
        }
        y = y4;
    }
    (void)wd; /* any of the seven: recipients do not check it against the date */
    if (c->i != c->len || !valid_date(y, m, d))
        return -EINVAL;
    *out = time_of(y, m, d, hh, mm, ss);
    return 0;
}

int httpdate_parse(const char *v, size_t len, int64_t now, int64_t *out)
{
    if (v == NULL)
        return -EINVAL;
    while (len > 0 && (v[0] == ' ' || v[0] == '\t')) {
        v++;
        len--;
    }
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    struct cur c = {v, len, 0};
    return parse(&c, now, out);
}

/* ---- formatting ---- */

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

void httpdate_format(int64_t t, char out[HTTPDATE_LEN + 1])
{
    int64_t lo = days_before_year(YEAR_MIN) * DAY_S;
    int64_t hi = days_before_year(YEAR_MAX + 1) * DAY_S - 1;
    if (t < lo)
        t = lo;
    if (t > hi)
        t = hi;
    int64_t days = floor_div(t, DAY_S);
    int64_t sod = t - days * DAY_S;
    int64_t y;
    int m, d;
    date_of(days, &y, &m, &d);
    int wd = (int)(((days % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
    /* "Sun, 06 Nov 1994 08:49:37 GMT" */
    memcpy(out, wkday[wd], 3);
    memcpy(out + 3, ", ", 2);
    put2(out + 5, d);
    out[7] = ' ';
    memcpy(out + 8, month_name[m - 1], 3);
    out[11] = ' ';
    put2(out + 12, (int)(y / 100));
    put2(out + 14, (int)(y % 100));
    out[16] = ' ';
    put2(out + 17, (int)(sod / 3600));
    out[19] = ':';
    put2(out + 20, (int)(sod / 60 % 60));
    out[22] = ':';
    put2(out + 23, (int)(sod % 60));
    memcpy(out + 25, " GMT", 4);
    out[HTTPDATE_LEN] = '\0';
}
