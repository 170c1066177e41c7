/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tlshello: the SNI of a ClientHello. See tlshello.h.
 *
 * Two layers, both strict about lengths: the record layer (tlshello_parse) gathers the payload of
 * consecutive handshake records into a bounded scratch copy until the ClientHello message is
 * whole; the message layer (parse_client_hello) walks its fields with a cursor that refuses to
 * read past the end it was given. Nothing is kept between calls.
 */
#include "tlshello.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#include "http1.h"

#define REC_HEADER 5
#define REC_MAX_PAYLOAD 16384 /* TLSPlaintext.length limit (RFC 8446 §5.1) */
#define REC_HANDSHAKE 22
#define HS_HEADER 4
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define SNI_HOST_NAME 0

/* A read cursor over [p, end): every take fails once a length would cross <end>. */
struct cur {
    const uint8_t *p;
    const uint8_t *end;
};

static size_t cur_left(const struct cur *c)
{
    return (size_t)(c->end - c->p);
}

static bool take_u8(struct cur *c, size_t *v)
{
    if (cur_left(c) < 1)
        return false;
    *v = c->p[0];
    c->p += 1;
    return true;
}

static bool take_u16(struct cur *c, size_t *v)
{
    if (cur_left(c) < 2)
        return false;
    *v = (size_t)c->p[0] << 8 | c->p[1];
    c->p += 2;
    return true;
}

/* A sub-cursor of <n> bytes; the parent moves past them. */
static bool take_sub(struct cur *c, size_t n, struct cur *sub)
{
    if (cur_left(c) < n)
        return false;
    sub->p = c->p;
    sub->end = c->p + n;
    c->p += n;
    return true;
}

/* The host_name of a server_name entry, checked like an HTTP Host without a port. */
static enum tlshello_result check_name(const uint8_t *name, size_t n, struct tlshello_sni *out)
{
    if (n == 0 || n > TLSHELLO_HOST_MAX + 1 || name[0] == '[')
        return TLSHELLO_MALFORMED;
    if (memchr(name, ':', n) != NULL) {
        /* Only an IPv6 literal may hold a colon (SNI carries no port). */
        char tmp[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        if (n >= sizeof(tmp))
            return TLSHELLO_MALFORMED;
        for (size_t i = 0; i < n; i++) {
            char ch = (char)name[i];
            tmp[i] = ch >= 'A' && ch <= 'F' ? (char)(ch - 'A' + 'a') : ch;
        }
        tmp[n] = '\0';
        if (strlen(tmp) != n || inet_pton(AF_INET6, tmp, &a6) != 1)
            return TLSHELLO_MALFORMED;
        memcpy(out->host, tmp, n + 1);
        out->is_ip = true;
        return TLSHELLO_OK;
    }
    struct h1_authority a;
    if (h1_authority_parse((const char *)name, n, &a) != 0)
        return TLSHELLO_MALFORMED;
    size_t hl = strlen(a.host);
    if (hl > TLSHELLO_HOST_MAX)
        return TLSHELLO_MALFORMED;
    memcpy(out->host, a.host, hl + 1);
    out->is_ip = a.is_ip;
    return TLSHELLO_OK;
}

/* The server_name extension's body (RFC 6066 §3): exactly one host_name entry. */
static enum tlshello_result parse_sni(struct cur *ext, struct tlshello_sni *out)
{
    size_t list_len, type, name_len;
    struct cur list, name;
    if (!take_u16(ext, &list_len) || list_len != cur_left(ext) || list_len == 0)
        return TLSHELLO_MALFORMED;
    if (!take_sub(ext, list_len, &list))
        return TLSHELLO_MALFORMED;
    if (!take_u8(&list, &type) || type != SNI_HOST_NAME)
        return TLSHELLO_MALFORMED;
    if (!take_u16(&list, &name_len) || !take_sub(&list, name_len, &name))
        return TLSHELLO_MALFORMED;
    if (cur_left(&list) != 0) /* a second entry: at most one name, and only host_name exists */
        return TLSHELLO_MALFORMED;
    return check_name(name.p, name_len, out);
}

/* A whole ClientHello body (after the 4-byte handshake header). */
static enum tlshello_result parse_client_hello(struct cur *c, struct tlshello_sni *out)
{
    size_t v, n;
    struct cur skip, exts;
    /* legacy_version, then the 32-byte random */
    if (!take_u16(c, &v) || (v >> 8) != 3 || !take_sub(c, 32, &skip))
        return TLSHELLO_MALFORMED;
    if (!take_u8(c, &n) || n > 32 || !take_sub(c, n, &skip)) /* legacy_session_id */
        return TLSHELLO_MALFORMED;
    if (!take_u16(c, &n) || n < 2 || n % 2 != 0 || !take_sub(c, n, &skip)) /* cipher_suites */
        return TLSHELLO_MALFORMED;
    if (!take_u8(c, &n) || n < 1 || !take_sub(c, n, &skip)) /* compression_methods */
        return TLSHELLO_MALFORMED;
    if (cur_left(c) == 0)
        return TLSHELLO_NO_SNI; /* no extensions at all (allowed before TLS 1.3) */
    if (!take_u16(c, &n) || n != cur_left(c) || !take_sub(c, n, &exts))
        return TLSHELLO_MALFORMED;

    uint8_t seen[65536 / 8];
    memset(seen, 0, sizeof(seen));
    enum tlshello_result r = TLSHELLO_NO_SNI;
    while (cur_left(&exts) > 0) {
        size_t type, len;
        struct cur body;
        if (!take_u16(&exts, &type) || !take_u16(&exts, &len) || !take_sub(&exts, len, &body))
            return TLSHELLO_MALFORMED;
        if (seen[type / 8] & (1u << (type % 8)))
            return TLSHELLO_MALFORMED; /* RFC 8446 §4.2: each extension type at most once */
        seen[type / 8] |= (uint8_t)(1u << (type % 8));
        if (type == EXT_SERVER_NAME) {
            r = parse_sni(&body, out);
            if (r != TLSHELLO_OK)
                return r;
        }
    }
    return r;
}

enum tlshello_result tlshello_parse(const void *buf, size_t len, struct tlshello_sni *out)
{
    const uint8_t *in = buf;
    uint8_t msg[TLSHELLO_MAX_MSG]; /* the handshake message gathered from its records */
    size_t have = 0;               /* bytes of it in <msg> */
    size_t want = 0;               /* its whole length once the header is known, else 0 */
    size_t off = 0;

    if (len > TLSHELLO_MAX_INPUT)
        len = TLSHELLO_MAX_INPUT;
    /* Decide NOT_TLS on the first bytes alone, so a plain-text client is told at once. */
    if (len >= 1 && in[0] != REC_HANDSHAKE)
        return TLSHELLO_NOT_TLS;
    if (len >= 2 && in[1] != 3)
        return TLSHELLO_NOT_TLS;

    for (;;) {
        if (len - off < REC_HEADER)
            break;
        const uint8_t *h = in + off;
        size_t rlen = (size_t)h[3] << 8 | h[4];
        if (h[0] != REC_HANDSHAKE || h[1] != 3)
            return off == 0 ? TLSHELLO_NOT_TLS : TLSHELLO_MALFORMED;
        if (rlen == 0 || rlen > REC_MAX_PAYLOAD)
            return TLSHELLO_MALFORMED;
        size_t avail = len - off - REC_HEADER < rlen ? len - off - REC_HEADER : rlen;
        size_t need = want != 0 ? want - have : sizeof(msg) - have;
        size_t copy = avail < need ? avail : need;
        memcpy(msg + have, h + REC_HEADER, copy);
        have += copy;
        if (want == 0 && have >= HS_HEADER) {
            if (msg[0] != HS_CLIENT_HELLO)
                return TLSHELLO_MALFORMED;
            want = HS_HEADER + ((size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3]);
            if (want > sizeof(msg))
                return TLSHELLO_MALFORMED;
            if (have > want)
                have = want; /* bytes after the message (in the same record) are not ours */
        }
        if (want != 0 && have == want) {
            struct cur c = {msg + HS_HEADER, msg + want};
            out->host[0] = '\0';
            out->is_ip = false;
            return parse_client_hello(&c, out);
        }
        if (avail < rlen)
            break; /* this record is still arriving */
        off += REC_HEADER + rlen;
    }
    return len >= TLSHELLO_MAX_INPUT ? TLSHELLO_MALFORMED : TLSHELLO_NEED_MORE;
}

const char *tlshello_result_name(enum tlshello_result r)
{
    switch (r) {
    case TLSHELLO_NEED_MORE:
        return "need_more";
    case TLSHELLO_OK:
        return "ok";
    case TLSHELLO_NO_SNI:
        return "no_sni";
    case TLSHELLO_MALFORMED:
        return "malformed";
    case TLSHELLO_NOT_TLS:
        return "not_tls";
    }
    return "?";
}
