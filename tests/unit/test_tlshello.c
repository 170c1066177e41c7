/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_tlshello: the ClientHello parser of tlshello.h. A real OpenSSL 3 ClientHello (captured
 * from Python's ssl module, SNI "Cdn.Example.TEST") is parsed whole, byte by byte and split
 * into records of every size; synthetic hellos built field by field exercise each length check,
 * the SNI rules (one host_name, host syntax as for HTTP, IP literals flagged) and the bounds.
 */
#include "tlshello.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* OpenSSL 3.0 ClientHello, one record, server_hostname "Cdn.Example.TEST". */
static const uint8_t real_hello[] = {
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0xbd, 0x77, 0x86, 0x0e, 0x78,
    0x8c, 0x1d, 0x27, 0x7a, 0xf1, 0xeb, 0xcd, 0x1a, 0x2c, 0x4f, 0x9c, 0xaa, 0x58, 0x9a, 0x02, 0xec,
    0x3c, 0x50, 0xd1, 0x48, 0xf6, 0xf4, 0x17, 0xa4, 0x15, 0x66, 0x4d, 0x20, 0x73, 0xd1, 0x64, 0xb5,
    0x9b, 0x06, 0x7a, 0x0f, 0x63, 0x9f, 0x7b, 0xd5, 0xa7, 0x26, 0xb1, 0xa2, 0x4a, 0x04, 0xdb, 0x6c,
    0xaf, 0x1c, 0x46, 0x30, 0xb1, 0xa2, 0x7f, 0x29, 0x2b, 0x5b, 0xe9, 0x83, 0x00, 0x24, 0x13, 0x02,
    0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0xc0, 0x2b, 0xc0, 0x2f, 0xcc, 0xa9, 0xcc, 0xa8,
    0xc0, 0x24, 0xc0, 0x28, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x9f, 0x00, 0x9e, 0x00, 0x6b, 0x00, 0x67,
    0x00, 0xff, 0x01, 0x00, 0x01, 0x8f, 0x00, 0x00, 0x00, 0x15, 0x00, 0x13, 0x00, 0x00, 0x10, 0x43,
    0x64, 0x6e, 0x2e, 0x45, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x54, 0x45, 0x53, 0x54, 0x00,
    0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16, 0x00, 0x14, 0x00, 0x1d, 0x00,
    0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03, 0x01,
    0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00,
    0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08,
    0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03,
    0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x05, 0x04,
    0x03, 0x04, 0x03, 0x03, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24,
    0x00, 0x1d, 0x00, 0x20, 0x84, 0x92, 0x60, 0x07, 0xdd, 0x96, 0xbf, 0xb0, 0xb0, 0x4a, 0x49, 0x59,
    0xd2, 0xd3, 0x8f, 0x3f, 0xa6, 0x49, 0x72, 0x8d, 0xe8, 0x6a, 0x61, 0xa2, 0xeb, 0xa9, 0xbe, 0xdd,
    0xff, 0xa5, 0x49, 0x02, 0x00, 0x15, 0x00, 0xdd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00,
};

/* ---- builders --------------------------------------------------------------------------- */

struct bld {
    uint8_t b[40000];
    size_t n;
};

static void put(struct bld *w, const void *p, size_t n)
{
    assert_true(w->n + n <= sizeof(w->b));
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put8(struct bld *w, unsigned v)
{
    uint8_t x = (uint8_t)v;
    put(w, &x, 1);
}

static void put16(struct bld *w, unsigned v)
{
    put8(w, v >> 8);
    put8(w, v & 0xff);
}

/* An extension: type, then body. */
static void put_ext(struct bld *w, unsigned type, const void *body, size_t n)
{
    put16(w, type);
    put16(w, (unsigned)n);
    put(w, body, n);
}

/* A server_name extension body with one entry of <type> and <name>. */
static size_t sni_body(uint8_t *out, unsigned type, const char *name, size_t nlen)
{
    out[0] = (uint8_t)((nlen + 3) >> 8);
    out[1] = (uint8_t)((nlen + 3) & 0xff);
    out[2] = (uint8_t)type;
    out[3] = (uint8_t)(nlen >> 8);
    out[4] = (uint8_t)(nlen & 0xff);
    memcpy(out + 5, name, nlen);
    return nlen + 5;
}

/* A ClientHello handshake message (header included) with extensions <ext>[0..ext_len), or none
 * at all when <ext> is NULL. */
static void hello_msg(struct bld *m, const uint8_t *ext, size_t ext_len)
{
    struct bld body = {.n = 0};
    uint8_t random[32];
    memset(random, 0xab, sizeof(random));
    put16(&body, 0x0303);
    put(&body, random, 32);
    put8(&body, 32); /* session id */
    put(&body, random, 32);
    put16(&body, 4); /* two cipher suites */
    put16(&body, 0x1301);
    put16(&body, 0xc02f);
    put8(&body, 1); /* compression: null */
    put8(&body, 0);
    if (ext != NULL) {
        put16(&body, (unsigned)ext_len);
        put(&body, ext, ext_len);
    }
    m->n = 0;
    put8(m, 1);
    put8(m, (unsigned)(body.n >> 16));
    put16(m, (unsigned)(body.n & 0xffff));
    put(m, body.b, body.n);
}

/* Wraps <msg> into handshake records of at most <frag> payload bytes. */
static void records(struct bld *out, const struct bld *msg, size_t frag)
{
    out->n = 0;
    for (size_t off = 0; off < msg->n; off += frag) {
        size_t k = msg->n - off < frag ? msg->n - off : frag;
        put8(out, 22);
        put16(out, 0x0301);
        put16(out, (unsigned)k);
        put(out, msg->b + off, k);
    }
}

/* A complete single-record hello whose only extensions are <pre>, then SNI <name>. */
static void hello_with_name(struct bld *out, const char *name)
{
    uint8_t sni[600];
    struct bld ext = {.n = 0}, msg;
    uint8_t sv[] = {0x02, 0x03, 0x04};
    put_ext(&ext, 43, sv, sizeof(sv)); /* supported_versions, before the name */
    put_ext(&ext, 0, sni, sni_body(sni, 0, name, strlen(name)));
    put_ext(&ext, 10, "\x00\x02\x00\x1d", 4); /* supported_groups, after it */
    hello_msg(&msg, ext.b, ext.n);
    records(out, &msg, 16384);
}

static enum tlshello_result parse(const struct bld *w, struct tlshello_sni *sni)
{
    return tlshello_parse(w->b, w->n, sni);
}

/* ---- the real hello --------------------------------------------------------------------- */

static void test_tlshello_parse_real_hello_returns_lowercased_name(void **state)
{
    struct tlshello_sni sni;
    (void)state;
    assert_int_equal(tlshello_parse(real_hello, sizeof(real_hello), &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "cdn.example.test");
    assert_false(sni.is_ip);
}

static void test_tlshello_parse_every_prefix_needs_more(void **state)
{
    struct tlshello_sni sni;
    (void)state;
    for (size_t n = 0; n < sizeof(real_hello); n++)
        assert_int_equal(tlshello_parse(real_hello, n, &sni), TLSHELLO_NEED_MORE);
}

static void test_tlshello_parse_trailing_bytes_ignored(void **state)
{
    struct tlshello_sni sni;
    struct bld w = {.n = 0};
    (void)state;
    put(&w, real_hello, sizeof(real_hello));
    put(&w, "\x14\x03\x03\x00\x01\x01", 6); /* a following record (change_cipher_spec) */
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "cdn.example.test");
}

static void test_tlshello_parse_real_hello_refragmented_every_size(void **state)
{
    struct bld msg = {.n = 0}, w;
    struct tlshello_sni sni;
    (void)state;
    put(&msg, real_hello + 5, sizeof(real_hello) - 5); /* the message without its record */
    for (size_t frag = 1; frag <= msg.n; frag++) {
        records(&w, &msg, frag);
        assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
        assert_string_equal(sni.host, "cdn.example.test");
        /* and every proper prefix of the record stream is still incomplete */
        if (frag == 1 || frag == 3 || frag == 100) {
            for (size_t n = 0; n < w.n; n++)
                assert_int_equal(tlshello_parse(w.b, n, &sni), TLSHELLO_NEED_MORE);
        }
    }
}

/* ---- names ------------------------------------------------------------------------------ */

static void test_tlshello_parse_trailing_dot_removed(void **state)
{
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    hello_with_name(&w, "Steam.Content.Example.");
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "steam.content.example");
}

static void test_tlshello_parse_ipv4_literal_flagged(void **state)
{
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    hello_with_name(&w, "127.0.0.1");
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "127.0.0.1");
    assert_true(sni.is_ip);
    hello_with_name(&w, "10.1"); /* inet_aton spelling, as for HTTP */
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_true(sni.is_ip);
}

static void test_tlshello_parse_ipv6_literal_flagged(void **state)
{
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    hello_with_name(&w, "::1");
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "::1");
    assert_true(sni.is_ip);
    hello_with_name(&w, "FE80::AB");
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_string_equal(sni.host, "fe80::ab");
}

static void test_tlshello_parse_bad_names_malformed(void **state)
{
    static const char *const bad[] = {
        "a..b",        "a.b..", ".a.b",   "a b.example", "a/b",         "example.org:443",
        "[::1]",       "x:y",   "::1:zz", "a\x01.b",     "caf\xc3\xa9", "a@b",
        "1.2.3.4:443", ".",     "a.b\\",  "\"a\"",
    };
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hello_with_name(&w, bad[i]);
        assert_int_equal(parse(&w, &sni), TLSHELLO_MALFORMED);
    }
}

static void test_tlshello_parse_nul_in_name_malformed(void **state)
{
    uint8_t sni[64];
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    put_ext(&ext, 0, sni, sni_body(sni, 0, "good.example\0evil.org", 21));
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_name_length_limits(void **state)
{
    char name[300];
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    /* 253 characters: labels of 63 + dots */
    memset(name, 'a', sizeof(name));
    for (size_t i = 63; i < 253; i += 64)
        name[i] = '.';
    name[253] = '\0';
    hello_with_name(&w, name);
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_int_equal(strlen(sni.host), 253);
    name[253] = '.'; /* 253 + the trailing dot: still fine */
    name[254] = '\0';
    hello_with_name(&w, name);
    assert_int_equal(parse(&w, &sni), TLSHELLO_OK);
    assert_int_equal(strlen(sni.host), 253);
    name[253] = 'a'; /* 254 characters */
    hello_with_name(&w, name);
    assert_int_equal(parse(&w, &sni), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_empty_name_malformed(void **state)
{
    struct bld w;
    struct tlshello_sni sni;
    (void)state;
    hello_with_name(&w, "");
    assert_int_equal(parse(&w, &sni), TLSHELLO_MALFORMED);
}

/* ---- the server_name extension ---------------------------------------------------------- */

static void test_tlshello_parse_no_extensions_no_sni(void **state)
{
    struct bld msg, w;
    struct tlshello_sni sni;
    (void)state;
    hello_msg(&msg, NULL, 0);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &sni), TLSHELLO_NO_SNI);
}

static void test_tlshello_parse_extensions_without_sni(void **state)
{
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni sni;
    (void)state;
    put_ext(&ext, 43, "\x02\x03\x04", 3);
    put_ext(&ext, 0xff01, "\x00", 1);
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &sni), TLSHELLO_NO_SNI);
    hello_msg(&msg, ext.b, 0); /* an empty extension block */
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &sni), TLSHELLO_NO_SNI);
}

static void test_tlshello_parse_non_host_name_type_malformed(void **state)
{
    uint8_t sni[64];
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    put_ext(&ext, 0, sni, sni_body(sni, 1, "a.example", 9));
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_two_names_malformed(void **state)
{
    uint8_t body[64] = {0, 24, 0, 0, 9};
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    memcpy(body + 5, "a.example", 9);
    body[14] = 0;
    body[15] = 0;
    body[16] = 9;
    memcpy(body + 17, "b.example", 9);
    body[1] = 24; /* two entries of 12 bytes */
    put_ext(&ext, 0, body, 26);
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_sni_length_mismatches_malformed(void **state)
{
    uint8_t sni[64];
    struct tlshello_sni s;
    (void)state;
    size_t n = sni_body(sni, 0, "a.example", 9);
    /* list length one too long / too short, name length one too long / too short, empty ext */
    static const struct {
        size_t at;
        int delta;
    } cases[] = {{1, +1}, {1, -1}, {4, +1}, {4, -1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t b[64];
        struct bld ext = {.n = 0}, msg, w;
        memcpy(b, sni, n);
        b[cases[i].at] = (uint8_t)(b[cases[i].at] + cases[i].delta);
        put_ext(&ext, 0, b, n);
        hello_msg(&msg, ext.b, ext.n);
        records(&w, &msg, 16384);
        assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
    }
    struct bld ext = {.n = 0}, msg, w;
    put_ext(&ext, 0, sni, 0); /* the server's empty form, not a client's */
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_duplicate_extension_malformed(void **state)
{
    uint8_t sni[64];
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    put_ext(&ext, 0, sni, sni_body(sni, 0, "a.example", 9));
    put_ext(&ext, 0, sni, sni_body(sni, 0, "b.example", 9));
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
    ext.n = 0;
    put_ext(&ext, 10, "\x00\x02\x00\x1d", 4);
    put_ext(&ext, 10, "\x00\x02\x00\x1d", 4);
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_extension_overruns_malformed(void **state)
{
    struct bld w;
    struct tlshello_sni s;
    (void)state;
    hello_with_name(&w, "a.example");
    /* the extensions block length (just before the first extension) off by one either way */
    size_t ext_len_at = 5 + 4 + 2 + 32 + 1 + 32 + 2 + 4 + 1 + 1;
    for (int d = -1; d <= 1; d += 2) {
        struct bld v = w;
        v.b[ext_len_at + 1] = (uint8_t)(v.b[ext_len_at + 1] + d);
        assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
    }
    /* the first extension's own length beyond the block */
    struct bld v = w;
    v.b[ext_len_at + 2 + 3] = 0xff;
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
}

/* ---- the message and record layers ------------------------------------------------------ */

static void test_tlshello_parse_body_field_lengths_checked(void **state)
{
    struct bld w;
    struct tlshello_sni s;
    (void)state;
    hello_with_name(&w, "a.example");
    size_t sid = 5 + 4 + 2 + 32, cs = sid + 1 + 32, cm = cs + 2 + 4;
    struct bld v = w;
    v.b[sid] = 33; /* session id longer than 32 */
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
    v = w;
    v.b[cs + 1] = 3; /* odd cipher suites length */
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
    v = w;
    v.b[cs + 1] = 0; /* no cipher suite */
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
    v = w;
    v.b[cm] = 0; /* no compression method */
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
    v = w;
    v.b[9] = 2; /* legacy_version 2.x */
    assert_int_equal(parse(&v, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_truncated_message_malformed(void **state)
{
    struct bld msg, w;
    struct tlshello_sni s;
    uint8_t sni[64];
    struct bld ext = {.n = 0};
    (void)state;
    put_ext(&ext, 0, sni, sni_body(sni, 0, "a.example", 9));
    hello_msg(&msg, ext.b, ext.n);
    /* the message claims fewer bytes than its fields need: the cursor stops at its end */
    for (size_t cut = 1; cut < msg.n - 4; cut += 7) {
        struct bld m = msg;
        size_t len = msg.n - 4 - cut;
        m.b[1] = (uint8_t)(len >> 16);
        m.b[2] = (uint8_t)(len >> 8);
        m.b[3] = (uint8_t)len;
        m.n = msg.n - cut;
        records(&w, &m, 16384);
        enum tlshello_result r = parse(&w, &s);
        assert_true(r == TLSHELLO_MALFORMED || r == TLSHELLO_NO_SNI);
    }
}

static void test_tlshello_parse_not_tls(void **state)
{
    struct tlshello_sni s;
    (void)state;
    assert_int_equal(tlshello_parse("GET / HTTP/1.1\r\n", 16, &s), TLSHELLO_NOT_TLS);
    assert_int_equal(tlshello_parse("G", 1, &s), TLSHELLO_NOT_TLS);
    assert_int_equal(tlshello_parse("\x16\x02", 2, &s), TLSHELLO_NOT_TLS);
    /* SSLv2-compatible hello */
    assert_int_equal(tlshello_parse("\x80\x2e\x01\x03\x01", 5, &s), TLSHELLO_NOT_TLS);
    assert_int_equal(tlshello_parse("\x16", 1, &s), TLSHELLO_NEED_MORE);
    assert_int_equal(tlshello_parse("", 0, &s), TLSHELLO_NEED_MORE);
}

static void test_tlshello_parse_bad_records_malformed(void **state)
{
    struct tlshello_sni s;
    struct bld msg = {.n = 0}, w;
    (void)state;
    /* a zero-length handshake record, and one over 2^14 */
    assert_int_equal(tlshello_parse("\x16\x03\x01\x00\x00", 5, &s), TLSHELLO_MALFORMED);
    assert_int_equal(tlshello_parse("\x16\x03\x01\x40\x01", 5, &s), TLSHELLO_MALFORMED);
    /* a handshake message other than ClientHello (ServerHello) */
    assert_int_equal(tlshello_parse("\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9, &s),
                     TLSHELLO_MALFORMED);
    /* a second record of another type before the message is whole */
    put(&msg, real_hello + 5, sizeof(real_hello) - 5);
    records(&w, &msg, 100);
    w.b[105] = 21; /* the second record's type: alert */
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_oversized_message_malformed(void **state)
{
    struct tlshello_sni s;
    (void)state;
    /* claims 16 KiB of body (+4 header > TLSHELLO_MAX_MSG): refused on the header alone */
    assert_int_equal(tlshello_parse("\x16\x03\x01\x00\x04\x01\x00\x40\x00", 9, &s),
                     TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_largest_message_in_two_records(void **state)
{
    /* A hello of exactly TLSHELLO_MAX_MSG bytes, padded by an extension: it needs two records. */
    static uint8_t pad[TLSHELLO_MAX_MSG];
    uint8_t sni[64];
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    put_ext(&ext, 0, sni, sni_body(sni, 0, "big.example", 11));
    hello_msg(&msg, ext.b, ext.n);
    size_t padlen = TLSHELLO_MAX_MSG - msg.n - 4;
    put_ext(&ext, 21, pad, padlen);
    hello_msg(&msg, ext.b, ext.n);
    assert_int_equal(msg.n, TLSHELLO_MAX_MSG);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_OK);
    assert_string_equal(s.host, "big.example");
    /* one byte more is refused */
    put_ext(&ext, 22, pad, 0);
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 16384);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_parse_input_bound_malformed(void **state)
{
    /* A legal message split into 1-byte records needs far more than TLSHELLO_MAX_INPUT bytes:
     * refused once the bound is reached, never NEED_MORE beyond it. */
    static uint8_t pad[8000];
    uint8_t sni[64];
    struct bld ext = {.n = 0}, msg, w;
    struct tlshello_sni s;
    (void)state;
    put_ext(&ext, 21, pad, 4000);
    put_ext(&ext, 0, sni, sni_body(sni, 0, "late.example", 12));
    hello_msg(&msg, ext.b, ext.n);
    records(&w, &msg, 1);
    assert_true(w.n > TLSHELLO_MAX_INPUT);
    assert_int_equal(tlshello_parse(w.b, TLSHELLO_MAX_INPUT - 1, &s), TLSHELLO_NEED_MORE);
    assert_int_equal(tlshello_parse(w.b, TLSHELLO_MAX_INPUT, &s), TLSHELLO_MALFORMED);
    assert_int_equal(parse(&w, &s), TLSHELLO_MALFORMED);
}

static void test_tlshello_result_names(void **state)
{
    (void)state;
    assert_string_equal(tlshello_result_name(TLSHELLO_OK), "ok");
    assert_string_equal(tlshello_result_name(TLSHELLO_NO_SNI), "no_sni");
    assert_string_equal(tlshello_result_name(TLSHELLO_NOT_TLS), "not_tls");
    assert_string_equal(tlshello_result_name(TLSHELLO_MALFORMED), "malformed");
    assert_string_equal(tlshello_result_name(TLSHELLO_NEED_MORE), "need_more");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tlshello_parse_real_hello_returns_lowercased_name),
        cmocka_unit_test(test_tlshello_parse_every_prefix_needs_more),
        cmocka_unit_test(test_tlshello_parse_trailing_bytes_ignored),
        cmocka_unit_test(test_tlshello_parse_real_hello_refragmented_every_size),
        cmocka_unit_test(test_tlshello_parse_trailing_dot_removed),
        cmocka_unit_test(test_tlshello_parse_ipv4_literal_flagged),
        cmocka_unit_test(test_tlshello_parse_ipv6_literal_flagged),
        cmocka_unit_test(test_tlshello_parse_bad_names_malformed),
        cmocka_unit_test(test_tlshello_parse_nul_in_name_malformed),
        cmocka_unit_test(test_tlshello_parse_name_length_limits),
        cmocka_unit_test(test_tlshello_parse_empty_name_malformed),
        cmocka_unit_test(test_tlshello_parse_no_extensions_no_sni),
        cmocka_unit_test(test_tlshello_parse_extensions_without_sni),
        cmocka_unit_test(test_tlshello_parse_non_host_name_type_malformed),
        cmocka_unit_test(test_tlshello_parse_two_names_malformed),
        cmocka_unit_test(test_tlshello_parse_sni_length_mismatches_malformed),
        cmocka_unit_test(test_tlshello_parse_duplicate_extension_malformed),
        cmocka_unit_test(test_tlshello_parse_extension_overruns_malformed),
        cmocka_unit_test(test_tlshello_parse_body_field_lengths_checked),
        cmocka_unit_test(test_tlshello_parse_truncated_message_malformed),
        cmocka_unit_test(test_tlshello_parse_not_tls),
        cmocka_unit_test(test_tlshello_parse_bad_records_malformed),
        cmocka_unit_test(test_tlshello_parse_oversized_message_malformed),
        cmocka_unit_test(test_tlshello_parse_largest_message_in_two_records),
        cmocka_unit_test(test_tlshello_parse_input_bound_malformed),
        cmocka_unit_test(test_tlshello_result_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
