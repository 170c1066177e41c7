/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * precond: the preconditions of a GET or HEAD answered from a stored object (RFC 9110 §13),
 * pure: no I/O, no allocation, no clock (the caller passes the time).
 *
 * The order is RFC 9110 §13.2.2's: If-Match (else If-Unmodified-Since) can fail the request
 * (412); then If-None-Match (else If-Modified-Since) can make it a 304; then If-Range decides
 * whether a Range applies. The Range itself is the caller's (range.h): this module only says
 * whether it is honoured.
 *
 * If-Match and If-Unmodified-Since are evaluated too, against the stored validators, although
 * RFC 9111 §4.3.2 calls them not applicable to a cache: a forced cache answers for its origin
 * (the stored version is, to it, the origin's current one), lancache's nginx evaluates them the
 * same way, and forwarding them instead would send to the origin every range request that a
 * downloader (Windows' BITS) guards with If-Unmodified-Since.
 */
#ifndef CACHEPARTY_PRECOND_H
#define CACHEPARTY_PRECOND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request field's value (borrowed); v NULL: the field is absent. */
struct precond_field {
    const char *v;
    size_t len;
};

/* The request's conditional fields, and whether it has a Range (honoured only for GET, by the
 * caller's choice: the caller decides what a Range means for its method). */
struct precond_req {
    struct precond_field if_match;
    struct precond_field if_none_match;
    struct precond_field if_modified_since;
    struct precond_field if_unmodified_since;
    struct precond_field if_range;
    bool has_range;
};

/* The stored object's validators (borrowed, NUL-terminated; "" when the origin sent none). */
struct precond_stored {
    const char *etag;
    const char *last_modified;
    /* The stored response's Date (or when it was received), in seconds; has_date false when not
     * known. It stands in for a missing Last-Modified in If-Modified-Since (RFC 9111 §4.3.2), and
     * tells whether a Last-Modified is a strong validator for If-Range (RFC 9110 §8.8.2.2: the
     * Date at least one second later). */
    bool has_date;
    int64_t date;
};

enum precond_outcome {
    PRECOND_FULL,         /* 200 with the whole object: no Range, or an If-Range that failed */
    PRECOND_RANGE,        /* the Range applies: the caller answers 206, 416 (or 200) by it */
    PRECOND_NOT_MODIFIED, /* 304 */
    PRECOND_FAILED,       /* 412 */
};

/*
 * What the conditional fields of <r> make of an answer from the object <s> (both borrowed), for
 * a GET or HEAD (the only methods answered from the cache). <now> is the current time (seconds
 * since the epoch), for the two-digit years of RFC 850 dates.
 * - If-Match: "*" or a list of entity-tags; fails (412) unless "*" or one of them equals the
 *   stored ETag by the strong comparison (neither weak, the same opaque-tag).
 * - If-Unmodified-Since, only without If-Match: fails when the stored Last-Modified is later than
 *   the date; ignored when it is not a valid HTTP-date (httpdate_parse) or nothing is stored.
 * - If-None-Match: "*" or a list of entity-tags; 304 when "*" or one of them equals the stored
 *   ETag by the weak comparison (W/ prefixes ignored on both sides).
 * - If-Modified-Since, only without If-None-Match: 304 when the stored Last-Modified (else the
 *   stored Date) is not later than the date; ignored when the date is invalid or nothing is stored.
 * - If-Range, only with a Range: an entity-tag (it starts with DQUOTE or W/DQUOTE) must equal the
 *   stored ETag by the strong comparison, so a weak tag never matches; anything else must be a
 *   valid HTTP-date equal to the stored Last-Modified (any of the three formats: the same
 *   instant), and when the stored Date is known it must be at least one second later than that
 *   Last-Modified (else the date is a weak validator, RFC 9110 §8.8.2.2); without a stored Date
 *   the Last-Modified counts as strong. When it does not match, the Range is ignored (FULL).
 * A list member that is not an entity-tag matches only a stored ETag of the same bytes (after
 * W/ is stripped, for the weak comparison); commas inside a quoted opaque-tag do not split.
 */
enum precond_outcome precond_evaluate(const struct precond_req *r, const struct precond_stored *s,
                                      int64_t now);

/* Whether the entity-tag list <v>[0..len) has a member equal to <etag> ("" when none stored:
 * nothing equals it) by the weak comparison (<weak>) or the strong one; "*" always matches (a
 * representation is stored). */
bool precond_etag_list_has(const char *v, size_t len, const char *etag, bool weak);

#endif
