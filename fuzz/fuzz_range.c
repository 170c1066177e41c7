/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: Range, Content-Range and If-Range parsing and the chunk arithmetic (range.c).
 * The first 16 bytes give the object length and the chunk size; the rest is the header value.
 * Invariants: a RANGE_OK range lies inside the object, its chunks cover it exactly, and the
 * Content-Range we would print parses back to the same numbers; the parts of several ranges lie
 * inside the object, never touch each other, and agree with range_parse.
 */
#include <stdint.h>
#include <string.h>

#include "range.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 16)
        return 0;
    uint64_t total = get64(data);
    uint64_t cs = get64(data + 8);
    const char *v = (const char *)data + 16;
    size_t len = size - 16;
    struct range r;
    char cr[RANGE_CONTENT_RANGE_MAX];

    /* Small totals reach the edge cases; huge ones the overflow checks. */
    if (data[0] & 0x80)
        total &= 0xffff;
    cs = (cs & 0xfffff) + 1;

    enum range_result pr = range_parse(v, len, total, &r);
    switch (pr) {
    case RANGE_OK: {
        ASSERT(total > 0 && r.start <= r.end && r.end < total);
        uint64_t first, last, covered = 0;
        range_chunks(r.start, r.end, cs, &first, &last);
        ASSERT(first <= last && last < range_chunk_count(total, cs));
        if (last - first < 4096) {
            for (uint64_t i = first; i <= last; i++) {
                uint64_t off, l, soff, sl;
                range_chunk_span(i, cs, total, &off, &l);
                ASSERT(l > 0 && off + l <= total);
                range_chunk_slice(i, cs, r.start, r.end, &soff, &sl);
                ASSERT(sl > 0 && soff + sl <= l);
                covered += sl;
            }
            ASSERT(covered == r.end - r.start + 1);
        }
        int k = range_content_range(cr, sizeof(cr), r.start, r.end, total);
        ASSERT(k > 0 && (size_t)k < sizeof(cr));
        uint64_t a, b, t;
        ASSERT(range_parse_content_range(cr, (size_t)k, &a, &b, &t) == RANGE_OK);
        ASSERT(a == r.start && b == r.end && t == total);
        break;
    }
    case RANGE_UNSATISFIABLE: {
        int k = range_content_range_unsatisfied(cr, sizeof(cr), total);
        ASSERT(k > 0 && (size_t)k < sizeof(cr));
        break;
    }
    case RANGE_NONE:
    case RANGE_MULTI:
        break;
    }

    /* The parts of several ranges: inside the object, none touching another, at most
     * RANGE_SET_MAX, and the same answer as range_parse wherever that one is not "several". */
    struct range_set set;
    enum range_result sr = range_parse_set(v, len, total, &set);
    if (sr == RANGE_OK) {
        ASSERT(set.n >= 1 && set.n <= RANGE_SET_MAX);
        for (unsigned i = 0; i < set.n; i++) {
            ASSERT(set.r[i].start <= set.r[i].end && set.r[i].end < total);
            for (unsigned j = 0; j < i; j++)
                ASSERT(set.r[j].end + 1 < set.r[i].start || set.r[i].end + 1 < set.r[j].start);
        }
    } else {
        ASSERT(set.n == 0);
    }
    if (pr == RANGE_OK)
        ASSERT(sr == RANGE_OK && set.n == 1 && set.r[0].start == r.start && set.r[0].end == r.end);
    else if (pr == RANGE_MULTI)
        ASSERT(sr == RANGE_OK || sr == RANGE_MULTI);
    else
        ASSERT(sr == pr);
    (void)range_first_byte(v, len);

    uint64_t a, b, t;
    if (range_parse_content_range(v, len, &a, &b, &t) == RANGE_OK)
        ASSERT(a <= b && b < t);
    (void)range_if_range_matches(v, len, "\"etag\"", "Wed, 21 Oct 2015 07:28:00 GMT");
    return 0;
}
