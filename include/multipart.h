/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * multipart: the framing of a multipart/byteranges body (RFC 9110 §14.6), pure (no I/O, no
 * allocation). The body of an answer with the parts p[0..n) (n >= 2) of an object of <total>
 * bytes is, for each part in order, its head (mp_part_head) then its bytes, and after the last
 * part the tail (mp_tail):
 *
 *   --BOUNDARY CRLF                       (CRLF --BOUNDARY CRLF for every part but the first)
 *   Content-Type: TYPE CRLF               (the object's stored type; no line when it has none)
 *   Content-Range: bytes A-B/TOTAL CRLF
 *   CRLF
 *   ...bytes A..B of the object...
 *   CRLF --BOUNDARY-- CRLF                (the tail)
 *
 * The body has no preamble; the tail's final CRLF is its epilogue. mp_body_length() gives the
 * exact length of the whole, so the answer carries a Content-Length. The boundary is made from
 * random bytes the caller supplies (mp_boundary_make), per answer, so no object can contain it
 * by design.
 */
#ifndef CACHEPARTY_MULTIPART_H
#define CACHEPARTY_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "range.h"

/* Random bytes a boundary is made of, and its length: two hex digits a byte. */
#define MP_BOUNDARY_RANDOM 16
#define MP_BOUNDARY_LEN (2 * MP_BOUNDARY_RANDOM)
/* Longest boundary the writers take (RFC 2046 §5.1.1). */
#define MP_BOUNDARY_MAX 70
/* Longest part head for a Content-Type of <ct_len> bytes and a boundary of at most
 * MP_BOUNDARY_MAX. */
#define MP_PART_HEAD_MAX(ct_len) ((ct_len) + MP_BOUNDARY_MAX + 128)

/*
 * Writes the boundary made of <rnd>[0..MP_BOUNDARY_RANDOM) (borrowed) to <out>: MP_BOUNDARY_LEN
 * lowercase hex digits and a NUL (MP_BOUNDARY_LEN + 1 bytes).
 */
void mp_boundary_make(char *out, const unsigned char *rnd);

/*
 * Writes the head of a part covering the object bytes [start, end] (start <= end < total,
 * asserted) to <out> (cap bytes): the delimiter (with its leading CRLF unless <first>), then
 * Content-Type: <content_type> (NUL-terminated, borrowed; no line when "") and Content-Range,
 * then the empty line. <boundary>: NUL-terminated, 1 to MP_BOUNDARY_MAX characters (asserted).
 * Returns the length written (no NUL), or 0 when it does not fit in <cap> (<out> then holds
 * a truncated head). MP_PART_HEAD_MAX(strlen(content_type)) + 1 always suffices.
 */
size_t mp_part_head(char *out, size_t cap, const char *boundary, bool first,
                    const char *content_type, uint64_t start, uint64_t end, uint64_t total);

/* Writes the closing delimiter and the final CRLF to <out>. Returns as mp_part_head. */
size_t mp_tail(char *out, size_t cap, const char *boundary);

/*
 * The exact length of the multipart body of the parts <parts>[0..n) (borrowed; n >= 1, each
 * inside the object of <total> bytes, asserted) of an object whose Content-Type is
 * <content_type>, with <boundary>: every part head, every part's bytes and the tail.
 */
uint64_t mp_body_length(const char *boundary, const char *content_type, const struct range *parts,
                        unsigned n, uint64_t total);

#endif
