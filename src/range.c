/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * range: Range / Content-Range / If-Range parsing, the merging of several ranges into the parts
 * of an answer, and chunk arithmetic. See range.h.
 * Pure: no I/O, no allocation, no global state. Every number from the wire goes through
 * parse_u64(), which refuses anything that does not fit in 64 bits, so no arithmetic here can
 * overflow; chunk products (index * chunk_size) are asserted against the object length first.
 */
#include "range.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Parses 1*DIGIT at <p>[*i..len) into <*val>, advancing *i. Returns false when there is no digit
 * or the value does not fit in uint64_t (leading zeros are fine).
 */
static bool parse_u64(const char *p, size_t len, size_t *i, uint64_t *val)
{
    size_t j = *i;
    uint64_t v = 0;
    if (j >= len || !is_digit(p[j]))
        return false;
    for (; j < len && is_digit(p[j]); j++) {
        unsigned d = (unsigned)(p[j] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *i = j;
    *val = v;
    return true;
}

/* Case-insensitive "bytes" at the start of <p>[0..len). */
static bool has_bytes_unit(const char *p, size_t len)
{
    return len >= 5 && util_ieq(p, 5, "bytes");
}

/* What one range-spec says about an object of a given length. */
enum spec {
    SPEC_INVALID,
    SPEC_SAT,          /* satisfiable: the range is set */
    SPEC_UNSAT,        /* a >= total, or "-0" */
    SPEC_EMPTY_SUFFIX, /* "-n", n > 0, on a 0-length object: satisfiable yet inexpressible */
};

/* One range-spec <p>[0..len) (already trimmed, non-empty); sets *out when SPEC_SAT. */
static enum spec parse_spec(const char *p, size_t len, uint64_t total, struct range *out)
{
    size_t i = 0;
    uint64_t a, b;

    if (p[0] == '-') {
        /* suffix-range: the last b bytes */
        i = 1;
        if (!parse_u64(p, len, &i, &b) || i != len)
            return SPEC_INVALID;
        if (b == 0)
            return SPEC_UNSAT;
        if (total == 0)
            return SPEC_EMPTY_SUFFIX;
        out->start = b >= total ? 0 : total - b;
        out->end = total - 1;
        return SPEC_SAT;
    }
    if (!parse_u64(p, len, &i, &a) || i >= len || p[i] != '-')
        return SPEC_INVALID;
    i++;
    if (i == len) {
        b = UINT64_MAX; /* "a-": to the end */
    } else if (!parse_u64(p, len, &i, &b) || i != len || b < a) {
        return SPEC_INVALID;
    }
    if (a >= total)
        return SPEC_UNSAT;
    out->start = a;
    out->end = b < total - 1 ? b : total - 1;
    return SPEC_SAT;
}

/* Strips OWS and the "bytes=" unit from a Range value: false when absent or of another unit. */
static bool range_specs(const char **v, size_t *len)
{
    if (*v == NULL || *len == 0)
        return false;
    util_trim_ows(v, len);
    if (!has_bytes_unit(*v, *len) || *len < 6 || (*v)[5] != '=')
        return false;
    *v += 6;
    *len -= 6;
    return true;
}

/*
 * The next element of the 1#range-spec list [*v, *v + *len), trimmed, into [*e, *e + *elen), and
 * moves past it; false when no element is left. Elements are separated by OWS "," OWS; empty
 * elements are skipped (RFC 9110 §5.6.1.2).
 */
static bool next_spec(const char **v, size_t *len, const char **e, size_t *elen)
{
    while (*len > 0) {
        const char *comma = memchr(*v, ',', *len);
        size_t n = comma ? (size_t)(comma - *v) : *len;
        size_t step = comma ? n + 1 : n;
        *e = *v;
        *elen = n;
        util_trim_ows(e, elen);
        *v += step;
        *len -= step;
        if (*elen > 0)
            return true;
    }
    return false;
}

enum range_result range_parse(const char *v, size_t len, uint64_t total, struct range *out)
{
    if (!range_specs(&v, &len))
        return RANGE_NONE;
    size_t n_specs = 0, n_sat = 0;
    bool empty_suffix = false;
    struct range first = {0, 0};
    const char *e;
    size_t elen;
    while (next_spec(&v, &len, &e, &elen)) {
        struct range r = {0, 0};
        switch (parse_spec(e, elen, total, &r)) {
        case SPEC_INVALID:
            return RANGE_NONE;
        case SPEC_SAT:
            if (n_sat++ == 0)
                first = r;
            break;
        case SPEC_UNSAT:
            break;
        case SPEC_EMPTY_SUFFIX:
            empty_suffix = true;
            break;
        }
        n_specs++;
    }
    if (n_specs == 0)
        return RANGE_NONE; /* "bytes=" or only commas: invalid */
    if (empty_suffix)
        return RANGE_NONE; /* see range.h */
    if (n_sat == 0)
        return RANGE_UNSATISFIABLE;
    if (n_specs > 1)
        return RANGE_MULTI;
    *out = first;
    return RANGE_OK;
}

/* Whether <a> and <b> overlap or touch. Ends are below UINT64_MAX (clamped to total - 1), so
 * end + 1 does not overflow. */
static bool touches(const struct range *a, const struct range *b)
{
    return a->start <= b->end + 1 && b->start <= a->end + 1;
}

/*
 * Adds <r> to the parts <w>[0..*n) (in the order asked, none touching another): merged into
 * every part it touches, which become one, at the place of the earliest of them; else appended.
 * Returns false when it would be a new part and <w> already holds RANGE_SET_WORK.
 */
static bool merge(struct range *w, size_t *n, struct range r)
{
    size_t j = 0, into = 0;
    bool merged = false;
    for (size_t i = 0; i < *n; i++) {
        /* <r> touches w[i] iff it touches the part grown so far: parts never touch each other,
         * and the grown part is w[into] and <r> without a gap. */
        if (!touches(&w[i], &r)) {
            w[j++] = w[i];
            continue;
        }
        struct range *to = merged ? &w[into] : &r;
        if (w[i].start < to->start)
            to->start = w[i].start;
        if (w[i].end > to->end)
            to->end = w[i].end;
        if (!merged) {
            into = j;
            w[j++] = r;
            merged = true;
        }
    }
    *n = j;
    if (merged)
        return true;
    if (*n == RANGE_SET_WORK)
        return false;
    w[(*n)++] = r;
    return true;
}

/* range_parse_set(); *suffix (when not NULL) says whether a range-spec was "-n". */
static enum range_result parse_set(const char *v, size_t len, uint64_t total, struct range_set *out,
                                   bool *suffix)
{
    struct range w[RANGE_SET_WORK];
    size_t nw = 0, n_specs = 0;
    bool any_sat = false, empty_suffix = false, overflow = false;
    const char *e;
    size_t elen;

    out->n = 0;
    if (suffix != NULL)
        *suffix = false;
    if (!range_specs(&v, &len))
        return RANGE_NONE;
    while (next_spec(&v, &len, &e, &elen)) {
        struct range r = {0, 0};
        if (e[0] == '-' && suffix != NULL)
            *suffix = true;
        switch (parse_spec(e, elen, total, &r)) {
        case SPEC_INVALID:
            return RANGE_NONE;
        case SPEC_SAT:
            any_sat = true;
            /* Past the bound, the rest is still read: an invalid element makes it RANGE_NONE. */
            if (!overflow && !merge(w, &nw, r))
                overflow = true;
            break;
        case SPEC_UNSAT:
            break;
        case SPEC_EMPTY_SUFFIX:
            empty_suffix = true;
            break;
        }
        n_specs++;
    }
    if (n_specs == 0 || empty_suffix)
        return RANGE_NONE; /* as range_parse */
    if (!any_sat)
        return RANGE_UNSATISFIABLE;
    if (overflow || nw > RANGE_SET_MAX)
        return RANGE_MULTI;
    memcpy(out->r, w, nw * sizeof(w[0]));
    out->n = (unsigned)nw;
    return RANGE_OK;
}

enum range_result range_parse_set(const char *v, size_t len, uint64_t total, struct range_set *out)
{
    return parse_set(v, len, total, out, NULL);
}

uint64_t range_first_byte(const char *v, size_t len)
{
    struct range_set s;
    bool suffix;
    if (parse_set(v, len, UINT64_MAX, &s, &suffix) != RANGE_OK || suffix)
        return 0;
    uint64_t low = s.r[0].start;
    for (unsigned i = 1; i < s.n; i++)
        low = s.r[i].start < low ? s.r[i].start : low;
    return low;
}

uint64_t range_chunk_count(uint64_t total, uint64_t chunk_size)
{
    ASSERT(chunk_size > 0);
    return total / chunk_size + (total % chunk_size != 0);
}

void range_chunks(uint64_t start, uint64_t end, uint64_t chunk_size, uint64_t *first,
                  uint64_t *last)
{
    ASSERT(chunk_size > 0);
    ASSERT(start <= end);
    *first = start / chunk_size;
    *last = end / chunk_size;
}

void range_chunk_span(uint64_t index, uint64_t chunk_size, uint64_t total, uint64_t *off,
                      uint64_t *len)
{
    ASSERT(index < range_chunk_count(total, chunk_size));
    /* index < ceil(total / chunk_size), so index * chunk_size < total: no overflow. */
    *off = index * chunk_size;
    uint64_t rest = total - *off;
    *len = rest < chunk_size ? rest : chunk_size;
}

void range_chunk_slice(uint64_t index, uint64_t chunk_size, uint64_t start, uint64_t end,
                       uint64_t *off, uint64_t *len)
{
    uint64_t first, last;
    range_chunks(start, end, chunk_size, &first, &last);
    ASSERT(index >= first && index <= last);
    /* first <= index <= end / chunk_size, so index * chunk_size <= end: no overflow. */
    uint64_t cbeg = index * chunk_size;
    uint64_t cend = cbeg + (chunk_size - 1);
    if (cend < cbeg)
        cend = UINT64_MAX; /* a huge chunk_size: the chunk reaches past any 64-bit offset */
    uint64_t s = start > cbeg ? start : cbeg;
    uint64_t e = end < cend ? end : cend;
    *off = s - cbeg;
    *len = e - s + 1;
}

static int finish_fmt(int n, size_t cap)
{
    ASSERT(n >= 0);
    return (size_t)n < cap ? n : -ENOSPC;
}

int range_content_range(char *out, size_t cap, uint64_t start, uint64_t end, uint64_t total)
{
    ASSERT(start <= end && end < total);
    int n = snprintf(out, cap, "bytes %llu-%llu/%llu", (unsigned long long)start,
                     (unsigned long long)end, (unsigned long long)total);
    return finish_fmt(n, cap);
}

int range_content_range_unsatisfied(char *out, size_t cap, uint64_t total)
{
    int n = snprintf(out, cap, "bytes */%llu", (unsigned long long)total);
    return finish_fmt(n, cap);
}

enum range_result range_parse_content_range(const char *v, size_t len, uint64_t *a, uint64_t *b,
                                            uint64_t *total)
{
    if (v == NULL)
        return RANGE_NONE;
    util_trim_ows(&v, &len);
    if (!has_bytes_unit(v, len) || len < 6 || v[5] != ' ')
        return RANGE_NONE;
    size_t i = 6;
    uint64_t ra, rb, rt;
    if (i < len && v[i] == '*') {
        i++;
        if (i >= len || v[i] != '/')
            return RANGE_NONE;
        i++;
        if (!parse_u64(v, len, &i, &rt) || i != len)
            return RANGE_NONE;
        *total = rt;
        return RANGE_UNSATISFIABLE;
    }
    if (!parse_u64(v, len, &i, &ra) || i >= len || v[i] != '-')
        return RANGE_NONE;
    i++;
    if (!parse_u64(v, len, &i, &rb) || i >= len || v[i] != '/')
        return RANGE_NONE;
    i++;
    /* An unknown length ("*" after the slash) fails here: parse_u64 wants a digit. */
    if (!parse_u64(v, len, &i, &rt) || i != len)
        return RANGE_NONE;
    if (ra > rb || rb >= rt)
        return RANGE_NONE;
    *a = ra;
    *b = rb;
    *total = rt;
    return RANGE_OK;
}

/* Whether <p>[0..len) is a strong entity-tag: DQUOTE *etagc DQUOTE (RFC 9110 §8.8.3). */
static bool is_strong_etag(const char *p, size_t len)
{
    if (len < 2 || p[0] != '"' || p[len - 1] != '"')
        return false;
    for (size_t i = 1; i + 1 < len; i++) {
        unsigned char c = (unsigned char)p[i];
        /* etagc = %x21 / %x23-7E / obs-text */
        if (!(c == 0x21 || (c >= 0x23 && c <= 0x7e) || c >= 0x80))
            return false;
    }
    return true;
}

bool range_if_range_matches(const char *v, size_t len, const char *etag, const char *last_modified)
{
    if (v == NULL)
        return false;
    util_trim_ows(&v, &len);
    if (len == 0)
        return false;
    if (v[0] == '"' || (len >= 2 && v[0] == 'W' && v[1] == '/')) {
        /* An entity-tag. Weak tags never match (strong comparison); neither does a weak stored
         * tag, which is_strong_etag() refuses too. */
        if (!is_strong_etag(v, len) || etag == NULL)
            return false;
        size_t elen = strlen(etag);
        return is_strong_etag(etag, elen) && elen == len && memcmp(v, etag, len) == 0;
    }
    if (last_modified == NULL)
        return false;
    size_t lmlen = strlen(last_modified);
    return lmlen > 0 && lmlen == len && memcmp(v, last_modified, len) == 0;
}
