/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * freshness: what an origin's response head says about storing and reusing it (RFC 9111 §3, §4.2.1,
 * §5.2.2), for a shared cache. Pure: no I/O, no allocation, no clock (callers pass times, in
 * seconds since the epoch).
 *
 * cacheparty stores objects (200 and 206 answers) whatever their Cache-Control says: its caching is
 * forced, as lancache's. This module serves the other answers, which it keeps only as the origin
 * allows (anstore.h): their Cache-Control directives and their explicit freshness lifetime.
 *
 * Cache-Control is read from every Cache-Control field of the head, as one list (RFC 9110 §5.3).
 * Directive names are case-insensitive; an argument is a token or a quoted-string. A delta-seconds
 * argument ("max-age=3600", or quoted "3600", which recipients accept) larger than 2^31 counts as
 * 2^31 (RFC 9111 §1.2.2); anything else is invalid. A directive that appears twice with different
 * arguments, or with an invalid one, makes the response's freshness invalid, and invalid freshness
 * counts as stale (RFC 9111 §4.2.1: "consider responses that have invalid freshness information to
 * be stale"). no-cache and private count with or without a field-name list (a cache that does not
 * honour the list must treat the whole response so).
 */
#ifndef CACHEPARTY_FRESHNESS_H
#define CACHEPARTY_FRESHNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "http1.h"

#define FRESHNESS_DELTA_MAX 2147483648ll /* 2^31: the largest delta-seconds a cache uses */

struct freshness_cc {
    bool no_store, no_cache, private_, must_understand, public_;
    int64_t max_age;  /* -1: absent */
    int64_t s_maxage; /* -1: absent */
    bool invalid;     /* a max-age or s-maxage that is malformed or given twice differently */
};

/* The Cache-Control directives of response <resp> (spans into <buf>). */
void freshness_cc_parse(const char *buf, const struct h1_resp *resp, struct freshness_cc *out);

/*
 * The explicit freshness lifetime of response <resp> (spans into <buf>), whose Cache-Control
 * freshness_cc_parse made <cc> (parsed once by the caller, who also decides storability), for a
 * shared cache, in
 * seconds (RFC 9111 §4.2.1): s-maxage, else max-age, else Expires minus <date_value> (the
 * response's Date, or when it was received; 0 when Expires is not later). An invalid Cache-Control
 * argument or an Expires that is not a valid HTTP-date gives 0 (stale). Returns -1 when the
 * response gives no explicit lifetime. <now> is for the two-digit years of RFC 850 dates.
 */
int64_t freshness_lifetime(const char *buf, const struct h1_resp *resp,
                           const struct freshness_cc *cc, int64_t date_value, int64_t now);

/* Whether <status> is one a cache understands for `must-understand` (RFC 9111 §5.2.2.3): the
 * final status codes RFC 9110 §15 defines. */
bool freshness_status_is_understood(int status);

#endif
