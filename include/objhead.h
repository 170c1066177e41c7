/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * objhead: the stored response of one object version, the part of the origin's answer that is
 * replayed on every answer from the cache: its end-to-end fields, its Date and what the Age of a
 * later answer is computed from (RFC 9111 §4.2.3). Pure: no I/O, no ev.h, no clock (callers pass
 * times, in seconds since the epoch).
 *
 * Kept from the origin's head, in its order: every field but
 *   - hop-by-hop ones: Connection and the fields it names, Keep-Alive, TE, Trailer,
 *     Transfer-Encoding, Upgrade, Proxy-* (h1_is_hop_by_hop, plus the Proxy- prefix);
 *   - framing, recomputed per answer: Content-Length, Content-Range;
 *   - Set-Cookie (a personal field in a shared object);
 *   - the fields cacheparty writes itself: X-LanCache-*, X-Upstream-*, Date and Age (Date is
 *     kept apart, Age computed);
 *   - ETag, Last-Modified, Content-Type and Accept-Ranges: the cache keeps the first three as the
 *     object's meta (cache.h) and writes them, with Accept-Ranges, itself.
 * Their text (names and values as sent) is at most OBJHEAD_FIELDS_MAX bytes, in lines
 * "Name: value\r\n".
 *
 * Ownership: a struct objhead is immutable once made and refcounted (objhead_ref/objhead_unref:
 * the last unref frees it). Whoever stores a pointer to one holds a ref. Refs are taken and
 * dropped by one thread at a time (the loop; an I/O thread only makes a new one and hands it
 * over).
 */
#ifndef CACHEPARTY_OBJHEAD_H
#define CACHEPARTY_OBJHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

#define OBJHEAD_FIELDS_MAX (16u * 1024u) /* stored field text per object version */
#define OBJHEAD_DATE_MAX 64u             /* the Date as sent (an IMF-fixdate is 29) */
#define OBJHEAD_AGE_MAX 2147483648ll     /* RFC 9111 §1.2.2: the largest Age sent */
#define OBJHEAD_TIME_MAX 253402300799ll  /* 9999-12-31T23:59:59Z: the last HTTP-date */

struct objhead {
    unsigned refs;
    int64_t response_time; /* when the answer arrived (RFC 9111's response_time) */
    int64_t initial_age;   /* corrected_initial_age (§4.2.3), 0..OBJHEAD_AGE_MAX */
    bool origin_aged;      /* the origin's answer had an Age (an upstream cache gave it); not
                              stored on disk */
    char date[OBJHEAD_DATE_MAX + 1]; /* the origin's Date as sent, else ours at response_time */
    size_t date_len;
    int64_t date_value; /* <date> parsed (seconds since the epoch), for the conditionals */
    size_t len;         /* bytes of text */
    char text[];        /* owns: the kept fields, "Name: value\r\n" each; NUL after */
};

/* Whether a response field named <name>[0..len) may be stored (the rules above; Connection's
 * list is checked by objhead_from_response, not here). */
bool objhead_keeps(const char *name, size_t len);

/*
 * The stored response for origin head <resp> (spans into <buf>) of a request sent at
 * <request_time> and answered at <response_time> (unrounded: the request's delay counts whole
 * seconds of their difference): kept fields (a Content-Digest or Content-MD5 only from a 200:
 * a 206's is of its part), the origin's Date (when it has a
 * valid one that fits, else ours at response_time: RFC 9110 §6.6.1) and the corrected initial
 * age from the origin's Date and Age. Returns 0 with *out (a ref for the caller), or -E2BIG when
 * the kept fields exceed OBJHEAD_FIELDS_MAX (the object is then not storable).
 */
int objhead_from_response(const char *buf, const struct h1_resp *resp, double request_time,
                          double response_time, struct objhead **out)
    __attribute__((warn_unused_result));

/*
 * An objhead from stored parts (a chunk file): <text>[0..len) (borrowed, copied; lines as
 * objhead_from_response writes them), <date>[0..date_len), the two times. NULL unless the text is
 * such lines ("token: value" CRLF, values without control characters but HTAB, names that
 * objhead_keeps allows), the Date an HTTP-date and the times within their bounds (0 <=
 * initial_age <= OBJHEAD_AGE_MAX, 0 <= response_time <= OBJHEAD_TIME_MAX): a file that says
 * otherwise was not written by us. A ref for the caller.
 */
struct objhead *objhead_new(const char *text, size_t len, const char *date, size_t date_len,
                            int64_t response_time, int64_t initial_age);

struct objhead *objhead_ref(struct objhead *h);
/* Drops a ref and clears *<h> (NULL is fine). */
void objhead_unref(struct objhead **h);

/* The Age of an answer from <h> at <now> (§4.2.3: corrected initial age + resident time), at
 * most OBJHEAD_AGE_MAX. */
int64_t objhead_age(const struct objhead *h, int64_t now);

/* What objhead_write leaves out. */
enum objhead_omit {
    OBJHEAD_ALL = 0,
    /* A 304, 412 or 416: no representation follows, so no Content-* field but Content-Location
     * (RFC 9110 §15.4.5 keeps it on a 304; the 412 and 416 bodies are our own text). */
    OBJHEAD_NO_CONTENT = 1,
    /* A 206: no Content-Digest or Content-MD5 (they describe another content than the part). */
    OBJHEAD_PART = 2,
};

/* Appends the stored fields of <h> to <out>[0..cap) per <omit>. Returns the bytes written, or
 * SIZE_MAX when they do not fit (nothing useful is in <out> then). */
size_t objhead_write(const struct objhead *h, enum objhead_omit omit, char *out, size_t cap);

/* Whether two stored heads say the same (text, Date and times). */
bool objhead_equal(const struct objhead *a, const struct objhead *b);

#endif
