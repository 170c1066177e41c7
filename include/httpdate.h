/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * httpdate: HTTP-dates (RFC 9110 §5.6.7), pure: no I/O, no allocation, no clock (the caller
 * passes the time where one is needed). Times are seconds since 1970-01-01T00:00:00Z in an
 * int64_t, so that no platform's time_t width changes a result.
 */
#ifndef CACHEPARTY_HTTPDATE_H
#define CACHEPARTY_HTTPDATE_H

#include <stddef.h>
#include <stdint.h>

/* Length of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), without its NUL. */
#define HTTPDATE_LEN 29

/*
 * Parses the HTTP-date <v>[0..len) (borrowed; need not be NUL-terminated) in any of its three
 * formats, with leading and trailing OWS ignored and nothing else around it:
 *   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
 *   rfc850-date  "Sunday, 06-Nov-94 08:49:37 GMT"
 *   asctime-date "Sun Nov  6 08:49:37 1994" (the day as 2DIGIT or SP DIGIT)
 * Names are case-sensitive, as the grammar says. The day name must be one of the seven but need
 * not be the date's weekday (recipients do not check it). Fields are range-checked: the day must
 * exist in its month and year (29 February only in leap years), hour 00-23, minute 00-59,
 * second 00-60 (a leap second counts as the next second); years 0001-9999. An rfc850-date's
 * two-digit year is the latest year with those digits that is not more than 50 years after
 * <now> (RFC 9110: "more than 50 years in the future" means the most recent such year in the past).
 * Returns 0 with *out set, or -EINVAL (*out untouched) for anything else, lists of dates included.
 */
int httpdate_parse(const char *v, size_t len, int64_t now, int64_t *out)
    __attribute__((warn_unused_result));

/*
 * Writes <t> as an IMF-fixdate and a NUL to <out> (HTTPDATE_LEN + 1 bytes). A time before year
 * 0001 or after 9999 is written as the nearest one of those bounds.
 */
void httpdate_format(int64_t t, char out[HTTPDATE_LEN + 1]);

#endif
