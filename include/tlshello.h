/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tlshello: the server name (SNI) of a TLS ClientHello, read from the bytes a client sent so far,
 * without terminating TLS. Pure: no I/O, no allocation, no ev.h; the caller owns the bytes and
 * calls again with more of them (every call parses from the first byte, so the input may grow
 * by any amount between calls: one byte, one TCP segment, one record).
 *
 * What is accepted (everything else is TLSHELLO_MALFORMED, or TLSHELLO_NOT_TLS when the first
 * record header is not a TLS handshake record at all):
 * - records of type handshake (22), version 3.x, length 1 .. 16384, carrying one ClientHello
 *   message that may be fragmented across several records (bytes after the message are ignored);
 * - a ClientHello of at most TLSHELLO_MAX_MSG bytes (header included) whose session id,
 *   cipher suites, compression methods and extensions have lengths that add up exactly, with no
 *   extension type given twice;
 * - a server_name extension holding exactly one entry, of type host_name, whose name is a
 *   host name by the same rules as an HTTP Host (h1_authority_parse: labels of letters, digits,
 *   '-', '_', no empty label, one trailing dot allowed, at most 253 characters) and contains no
 *   port. A name that is an IPv4 literal (any inet_aton spelling) or an IPv6 literal is returned
 *   with is_ip set: refusing it is policy, the caller's.
 * Input beyond TLSHELLO_MAX_INPUT bytes is never looked at: a ClientHello not complete within it
 * is TLSHELLO_MALFORMED, so NEED_MORE is returned only while len < TLSHELLO_MAX_INPUT.
 */
#ifndef CACHEPARTY_TLSHELLO_H
#define CACHEPARTY_TLSHELLO_H

#include <stdbool.h>
#include <stddef.h>

#define TLSHELLO_MAX_MSG (16 * 1024) /* ClientHello handshake message, 4-byte header included */
#define TLSHELLO_MAX_INPUT                                                                         \
    (18 * 1024)               /* bytes a caller needs to buffer, record headers included           \
                               */
#define TLSHELLO_HOST_MAX 253 /* host name length, trailing dot removed */

enum tlshello_result {
    TLSHELLO_NEED_MORE = 0, /* a valid prefix: call again with more bytes */
    TLSHELLO_OK,            /* a ClientHello with a valid server name: see struct tlshello_sni */
    TLSHELLO_NO_SNI,        /* a valid ClientHello without a server_name extension */
    TLSHELLO_MALFORMED,     /* TLS records, but not a ClientHello we accept */
    TLSHELLO_NOT_TLS,       /* the first bytes are not a TLS handshake record (e.g. plain HTTP) */
};

struct tlshello_sni {
    char host[TLSHELLO_HOST_MAX + 1]; /* lowercased, one trailing dot removed, NUL-terminated */
    bool is_ip;                       /* an IPv4 or IPv6 literal (IPv6 without brackets) */
};

/*
 * Parses <buf>[0..len) (borrowed, not modified) as the start of a TLS connection. On
 * TLSHELLO_OK, *out holds the name; on any other result *out is unspecified. <out> is owned by
 * the caller. Never reads beyond min(len, TLSHELLO_MAX_INPUT).
 */
enum tlshello_result tlshello_parse(const void *buf, size_t len, struct tlshello_sni *out);

/* A short lowercase name of <r> ("need_more", "ok", "no_sni", "malformed", "not_tls"). */
const char *tlshello_result_name(enum tlshello_result r);

#endif
