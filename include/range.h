/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * range: byte ranges, pure (no I/O, no allocation). Parses a client's Range header against a known
 * object length (RFC 9110 §14.1-14.2) into one range or the merged parts of several, an origin's
 * Content-Range (§14.4), answers If-Range (§13.1.5), formats Content-Range, and maps object byte
 * ranges onto fixed-size chunks.
 * All byte ranges here are inclusive [start, end] with start <= end, as on the wire.
 * Chunk i of an object of <total> bytes covers [i * chunk_size, min((i + 1) * chunk_size, total));
 * only the last chunk is shorter. A 0-length object has no chunks.
 */
#ifndef CACHEPARTY_RANGE_H
#define CACHEPARTY_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Result of range_parse() and range_parse_content_range(). */
enum range_result {
    RANGE_OK,            /* one satisfiable range: 206 */
    RANGE_NONE,          /* no usable Range (absent, other unit, invalid syntax): 200 full */
    RANGE_MULTI,         /* range_parse: several ranges, at least one satisfiable;
                          * range_parse_set: too many parts. Either way: may be answered 200 full */
    RANGE_UNSATISFIABLE, /* no satisfiable range: 416 with Content-Range: bytes * / TOTAL */
};

/* An inclusive byte range [start, end], start <= end. */
struct range {
    uint64_t start;
    uint64_t end;
};

/* Longest Content-Range value range_content_range() writes, plus its NUL. */
#define RANGE_CONTENT_RANGE_MAX 72

/*
 * Parses the Range header value <v>[0..len) (borrowed; need not be NUL-terminated; NULL with len 0
 * means absent) for an object of <total> bytes. Grammar of RFC 9110 §14.1: a case-insensitive
 * unit "bytes", "=", then a comma list of "a-b", "a-", "-n" whose elements may be separated by
 * OWS around commas (empty elements are ignored); no other whitespace is allowed except leading
 * and trailing OWS of the whole value. A number that does not fit in uint64_t, or a-b with b < a,
 * makes the header invalid.
 * Returns:
 *  RANGE_OK: <*out> is the one range, end clamped to total - 1; "-n" with n >= total is the whole.
 *  RANGE_NONE: absent, not "bytes", or invalid. Also a suffix range on a 0-length object, which
 *    RFC 9110 counts as satisfiable but no 206 can express: answer 200 with the (empty) object.
 *  RANGE_MULTI: more than one range and at least one satisfiable (<*out> untouched).
 *  RANGE_UNSATISFIABLE: every range has a >= total or is "-0" (so any int range on total == 0).
 */
enum range_result range_parse(const char *v, size_t len, uint64_t total, struct range *out)
    __attribute__((warn_unused_result));

/* Most parts range_parse_set() gives (after merging); more: the whole object (200). */
#define RANGE_SET_MAX 32
/* Most disjoint ranges range_parse_set() keeps apart while it reads the list (see there). */
#define RANGE_SET_WORK (2 * RANGE_SET_MAX)

/* The parts of a ranged answer, in the order they are sent. */
struct range_set {
    unsigned n; /* 1..RANGE_SET_MAX after RANGE_OK, else 0 */
    struct range r[RANGE_SET_MAX];
};

/*
 * Parses the Range value <v>[0..len) (borrowed; as range_parse: same grammar, NULL with len 0 is
 * absent) for an object of <total> bytes into the parts of the answer (RFC 9110 §14.2, §14.6):
 * unsatisfiable range-specs are dropped; satisfiable ones (ends clamped to total - 1, "-n" the
 * last n bytes) that overlap or touch (a-b and b+1-c) are merged. A gap, even of one byte, is
 * never filled. So the parts are the pieces of the union of the ranges asked, no two of them
 * overlapping or touching, and their order is the order asked: each part stands where the first
 * range-spec that is a piece of it stood in the list. A later range that overlaps an earlier
 * part joins that part where it stands; one that joins several parts makes one part of them, at
 * the place of the earliest. Examples (total 1000):
 *   "bytes=500-599,0-99"          -> 500-599, 0-99
 *   "bytes=0-99,50-149,100-199"   -> 0-199
 *   "bytes=200-299,0-99,250-400"  -> 200-400, 0-99
 *   "bytes=500-599,0-99,90-510"   -> 0-599
 *   "bytes=0-9,2000-2999,-10"     -> 0-9, 990-999
 * Returns:
 *  RANGE_OK: <out> holds out->n parts, 1 to RANGE_SET_MAX (1: a plain 206; more: multipart).
 *  RANGE_NONE: as range_parse (absent, not "bytes", invalid anywhere in the list, or a suffix
 *    range on a 0-length object).
 *  RANGE_UNSATISFIABLE: as range_parse: no range-spec is satisfiable (416).
 *  RANGE_MULTI: more than RANGE_SET_MAX parts, or more than RANGE_SET_WORK disjoint ranges at
 *    some point while reading the list (later ranges that would have joined them are not waited
 *    for): answer with the whole object, as RFC 9110 §14.2 allows. Bounds the work to
 *    RANGE_SET_WORK steps a range-spec.
 * out->n is 0 unless RANGE_OK.
 */
enum range_result range_parse_set(const char *v, size_t len, uint64_t total, struct range_set *out)
    __attribute__((warn_unused_result));

/*
 * The lowest byte the Range value <v>[0..len) (borrowed) asks for, told without the object's
 * length (the parts range_parse_set() gives for an object of UINT64_MAX bytes): 0 when a
 * range-spec is a suffix ("-n", which needs the length), or when the value gives no parts
 * (absent, invalid, too many parts). A hint: the chunk to look up first, so that a cold ranged
 * request fetches a chunk it needs before it knows the length. Not the first part's start: when
 * the parts are out of order, that one may lie past the object's end (then dropped) and its
 * fetch answered 416, while the lowest byte lies in the object whenever any range does.
 */
uint64_t range_first_byte(const char *v, size_t len);

/* Number of chunks of an object of <total> bytes: ceil(total / chunk_size). <chunk_size> > 0. */
uint64_t range_chunk_count(uint64_t total, uint64_t chunk_size);

/*
 * The chunk indexes [*first, *last] that hold the object bytes [start, end].
 * Requires start <= end and chunk_size > 0 (asserted).
 */
void range_chunks(uint64_t start, uint64_t end, uint64_t chunk_size, uint64_t *first,
                  uint64_t *last);

/*
 * The object bytes chunk <index> covers: *off = index * chunk_size, *len = chunk_size, or less for
 * the last chunk. Requires index < range_chunk_count(total, chunk_size) (asserted).
 */
void range_chunk_span(uint64_t index, uint64_t chunk_size, uint64_t total, uint64_t *off,
                      uint64_t *len);

/*
 * The part of chunk <index> that the client range [start, end] needs: *off is the offset within
 * the chunk, *len the byte count (> 0). Requires start <= end and that chunk <index> overlaps
 * [start, end], i.e. it lies in range_chunks(start, end) (asserted). The range must already be
 * clamped to the object (range_parse does), so the slice never passes the object's end.
 */
void range_chunk_slice(uint64_t index, uint64_t chunk_size, uint64_t start, uint64_t end,
                       uint64_t *off, uint64_t *len);

/*
 * Writes "bytes START-END/TOTAL" and a NUL to <out> (cap bytes; RANGE_CONTENT_RANGE_MAX always
 * suffices). Requires start <= end < total (asserted). Returns the length without the NUL, or
 * -ENOSPC when <cap> is too small (then <out> holds a truncated string if cap > 0).
 */
int range_content_range(char *out, size_t cap, uint64_t start, uint64_t end, uint64_t total);

/* Writes "bytes * /TOTAL" (without the space) for a 416. Returns as range_content_range(). */
int range_content_range_unsatisfied(char *out, size_t cap, uint64_t total);

/*
 * Parses an origin's Content-Range value <v>[0..len) (borrowed) strictly: case-insensitive
 * "bytes", one SP, then "A-B/TOTAL" with A <= B < TOTAL, or "* /TOTAL" (without the space);
 * leading and trailing OWS are ignored, nothing else is.
 * Returns RANGE_OK with *a, *b, *total set; RANGE_UNSATISFIABLE for "* /TOTAL" (only *total set);
 * RANGE_NONE for anything else, including an unknown length ("A-B/" then "*": uncacheable for us).
 */
enum range_result range_parse_content_range(const char *v, size_t len, uint64_t *a, uint64_t *b,
                                            uint64_t *total) __attribute__((warn_unused_result));

/*
 * Whether the If-Range value <v>[0..len) (borrowed) matches the stored validators, so that the
 * Range is honoured (RFC 9110 §13.1.5). An entity-tag uses the strong comparison: a weak tag
 * (W/"...") on either side never matches; otherwise it must equal <etag> byte for byte. Anything
 * else is taken as an HTTP-date and must equal <last_modified> byte for byte. <etag> and
 * <last_modified> are NUL-terminated, borrowed, and may be NULL or "" when not stored (no match).
 * An absent If-Range is the caller's business (it then honours Range unconditionally).
 */
bool range_if_range_matches(const char *v, size_t len, const char *etag, const char *last_modified);

#endif
