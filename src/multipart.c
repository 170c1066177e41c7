/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * multipart: the multipart/byteranges framing. See multipart.h. Every piece is written by one
 * format function that also measures it (snprintf into nothing), so the length mp_body_length
 * promises is the length the writers write.
 */
#include "multipart.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

void mp_boundary_make(char *out, const unsigned char *rnd)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < MP_BOUNDARY_RANDOM; i++) {
        out[2 * i] = hex[rnd[i] >> 4];
        out[2 * i + 1] = hex[rnd[i] & 0xf];
    }
    out[MP_BOUNDARY_LEN] = '\0';
}

static void check_boundary(const char *boundary)
{
    size_t n = strnlen(boundary, MP_BOUNDARY_MAX + 1);
    ASSERT(n > 0 && n <= MP_BOUNDARY_MAX);
}

/* Formats a part head into <out> (NULL with cap 0 measures); returns the length it needs. */
static size_t part_head(char *out, size_t cap, const char *boundary, bool first, const char *ct,
                        uint64_t start, uint64_t end, uint64_t total)
{
    check_boundary(boundary);
    ASSERT(start <= end && end < total);
    bool has_ct = ct[0] != '\0';
    int n = snprintf(out, cap, "%s--%s\r\n%s%s%sContent-Range: bytes %llu-%llu/%llu\r\n\r\n",
                     first ? "" : "\r\n", boundary, has_ct ? "Content-Type: " : "", ct,
                     has_ct ? "\r\n" : "", (unsigned long long)start, (unsigned long long)end,
                     (unsigned long long)total);
    ASSERT(n > 0);
    return (size_t)n;
}

static size_t tail(char *out, size_t cap, const char *boundary)
{
    check_boundary(boundary);
    int n = snprintf(out, cap, "\r\n--%s--\r\n", boundary);
    ASSERT(n > 0);
    return (size_t)n;
}

size_t mp_part_head(char *out, size_t cap, const char *boundary, bool first,
                    const char *content_type, uint64_t start, uint64_t end, uint64_t total)
{
    size_t n = part_head(out, cap, boundary, first, content_type, start, end, total);
    return n < cap ? n : 0;
}

size_t mp_tail(char *out, size_t cap, const char *boundary)
{
    size_t n = tail(out, cap, boundary);
    return n < cap ? n : 0;
}

uint64_t mp_body_length(const char *boundary, const char *content_type, const struct range *parts,
                        unsigned n, uint64_t total)
{
    ASSERT(n >= 1);
    uint64_t len = tail(NULL, 0, boundary);
    for (unsigned i = 0; i < n; i++) {
        len +=
            part_head(NULL, 0, boundary, i == 0, content_type, parts[i].start, parts[i].end, total);
        len += parts[i].end - parts[i].start + 1;
    }
    return len;
}
