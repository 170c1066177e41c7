/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_ngxcache: nginx proxy_cache files as lancache writes them: two files written by Debian's
 * nginx 1.22 on x86_64 with lancache's configuration (fixtures_ngxcache.h), and files built here
 * in the 64-bit layout those have and in the 32-bit time_t layout, which follows the ABI rules
 * (not checked against files of a 32-bit nginx). Every check of ngxcache_parse and ngxcache_slice
 * is driven to its verdict, and $uri normalisation, the key and the md5 path are checked against
 * nginx's rules and known md5 values.
 */
#include "ngxcache.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "fixtures_ngxcache.h"

#define SLICE (1024u * 1024u)

struct spec {
    unsigned hdr; /* 336 or 308 */
    uint64_t version;
    const char *key;
    const char *head; /* status line, fields, blank line */
    size_t body_len;
    int crc_delta;    /* added to the right crc32 */
    int header_delta; /* added to the right header_start */
    int body_delta;   /* added to the right body_start */
    uint8_t vary_len;
    long size_delta; /* bytes added to (or cut from) the end of the file */
};

static void put(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A file as nginx writes it (calloc'd; *len its length). */
static uint8_t *build(const struct spec *s, size_t *len)
{
    bool w64 = s->hdr == NGXCACHE_HDR_64;
    unsigned word = w64 ? 8 : 4;
    size_t kl = strlen(s->key), hl = strlen(s->head);
    size_t header_start = s->hdr + 6 + kl + 1;
    size_t body_start = header_start + hl;
    size_t n = body_start + s->body_len;
    uint8_t *b = calloc(1, n + 64);
    put(b, s->version, word);
    put(b + (w64 ? 8 : 4), 0x7dd88a7e, word);   /* valid_sec */
    put(b + (w64 ? 32 : 16), 0x65920080, word); /* last_modified */
    put(b + (w64 ? 40 : 20), 0x6560aa00, word); /* date */
    uLong crc = crc32(0L, (const Bytef *)s->key, (uInt)kl);
    put(b + (w64 ? 48 : 24), (uint32_t)(crc + (uLong)(long)s->crc_delta), 4);
    put(b + (w64 ? 54 : 30), (uint64_t)((long)header_start + s->header_delta), 2);
    put(b + (w64 ? 56 : 32), (uint64_t)((long)body_start + s->body_delta), 2);
    b[w64 ? 187 : 163] = s->vary_len;
    memcpy(b + s->hdr, "\nKEY: ", 6);
    memcpy(b + s->hdr + 6, s->key, kl);
    b[s->hdr + 6 + kl] = '\n';
    memcpy(b + header_start, s->head, hl);
    for (size_t i = 0; i < s->body_len; i++)
        b[body_start + i] = (uint8_t)(i * 7);
    *len = (size_t)((long)n + s->size_delta);
    return b;
}

static const char steam_key[] = "steam/depot/1091501/chunk/"
                                "3e5c1a2b3e5c1a2b3e5c1a2b3e5c1a2b3e5c1a2bbytes=0-1048575";
static const char head206[] = "HTTP/1.1 206 Partial Content\r\n"
                              "Content-Type: application/x-steam-chunk\r\n"
                              "Content-Length: 102400\r\n"
                              "Content-Range: bytes 0-102399/102400\r\n"
                              "ETag: \"abc\"\r\n"
                              "\r\n";

static struct spec base(void)
{
    struct spec s = {0};
    s.hdr = NGXCACHE_HDR_64;
    s.version = 5;
    s.key = steam_key;
    s.head = head206;
    s.body_len = 102400;
    return s;
}

/* ngxcache_parse then, when it passes, ngxcache_slice; the name is md5(key) unless given. */
static enum ngxcache_verdict verdict_named(const struct spec *s, const char *name,
                                           struct ngxcache_file *f)
{
    size_t len;
    uint8_t *b = build(s, &len);
    char nm[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(s->key, strlen(s->key), nm);
    enum ngxcache_verdict v = ngxcache_parse(b, len, len, name != NULL ? name : nm, f);
    if (v == NGXCACHE_OK)
        v = ngxcache_slice(f, SLICE, NULL);
    free(b);
    return v;
}

static enum ngxcache_verdict verdict(const struct spec *s)
{
    struct ngxcache_file f;
    return verdict_named(s, NULL, &f);
}

static void test_ngxcache_adopts_a_short_steam_slice_64(void **state)
{
    (void)state;
    struct spec s = base();
    size_t len;
    uint8_t *b = build(&s, &len);
    char nm[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(steam_key, strlen(steam_key), nm);
    struct ngxcache_file f;
    assert_int_equal(ngxcache_parse(b, len, len, nm, &f), NGXCACHE_OK);
    assert_int_equal(f.hdr_size, 336);
    assert_int_equal(f.valid_sec, 0x7dd88a7e);
    assert_int_equal(f.last_modified, 0x65920080);
    assert_int_equal(f.date, 0x6560aa00);
    assert_int_equal(f.key_len, strlen(steam_key));
    assert_memory_equal(f.key, steam_key, f.key_len);
    assert_int_equal(f.header_start, 336 + 6 + strlen(steam_key) + 1);
    assert_int_equal(f.resp.status, 206);
    size_t prefix;
    assert_int_equal(ngxcache_slice(&f, SLICE, &prefix), NGXCACHE_OK);
    assert_int_equal(prefix, strlen(steam_key) - strlen("bytes=0-1048575"));
    assert_int_equal(f.first, 0);
    assert_int_equal(f.last, 102399);
    assert_int_equal(f.total, 102400);
    assert_int_equal(f.body_len, 102400);
    /* The whole prefix is enough; so is anything up to body_start. */
    assert_int_equal(ngxcache_parse(b, f.body_start, len, nm, &f), NGXCACHE_OK);
    assert_int_equal(ngxcache_parse(b, f.body_start - 1, len, nm, &f), NGXCACHE_OFFSETS);
    free(b);
}

static void test_ngxcache_reads_the_32_bit_time_t_layout(void **state)
{
    (void)state;
    struct spec s = base();
    s.hdr = NGXCACHE_HDR_32;
    struct ngxcache_file f;
    assert_int_equal(verdict_named(&s, NULL, &f), NGXCACHE_OK);
    assert_int_equal(f.hdr_size, 308);
    assert_int_equal(f.valid_sec, 0x7dd88a7e);
    assert_int_equal(f.date, 0x6560aa00);
    assert_int_equal(f.total, 102400);
    s.version = 4;
    assert_int_equal(verdict(&s), NGXCACHE_VERSION);
}

static void test_ngxcache_middle_slice_of_a_large_object(void **state)
{
    (void)state;
    struct spec s = base();
    s.key = "dl.blizzard.example/tpr/a/bbytes=1048576-2097151";
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 1048576\r\n"
             "Content-Range: bytes 1048576-2097151/3145728\r\n\r\n";
    s.body_len = SLICE;
    struct ngxcache_file f;
    assert_int_equal(verdict_named(&s, NULL, &f), NGXCACHE_OK);
    assert_int_equal(f.first, SLICE);
    assert_int_equal(f.last, 2 * SLICE - 1);
    assert_int_equal(f.total, 3 * SLICE);
    /* The last slice of that object, short, still under the full window. */
    s.key = "dl.blizzard.example/tpr/a/bbytes=2097152-3145727";
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n"
             "Content-Range: bytes 2097152-2097161/2097162\r\n\r\n";
    s.body_len = 10;
    assert_int_equal(verdict_named(&s, NULL, &f), NGXCACHE_OK);
    assert_int_equal(f.last, 2097161);
}

static void test_ngxcache_whole_object_200_only_under_the_first_key(void **state)
{
    (void)state;
    struct spec s = base();
    s.key = "example.org:8080/big.binbytes=0-1048575";
    s.head = "HTTP/1.0 200 OK\r\nContent-Length: 3146317\r\n\r\n";
    s.body_len = 3146317;
    struct ngxcache_file f;
    assert_int_equal(verdict_named(&s, NULL, &f), NGXCACHE_OK);
    assert_int_equal(f.first, 0);
    assert_int_equal(f.last, 3146316);
    assert_int_equal(f.total, 3146317);
    s.key = "example.org:8080/big.binbytes=1048576-2097151";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    /* chunked: no authoritative length */
    s.key = "example.org:8080/big.binbytes=0-1048575";
    s.head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    s.body_len = 100;
    assert_int_equal(verdict(&s), NGXCACHE_CHUNKED);
    /* a 200 whose body is shorter than its Content-Length */
    s.head = "HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_LENGTH);
}

static void test_ngxcache_damaged_files(void **state)
{
    (void)state;
    struct spec s = base();
    s.size_delta = -1; /* truncated body */
    assert_int_equal(verdict(&s), NGXCACHE_LENGTH);
    s = base();
    s.size_delta = 5; /* extended */
    assert_int_equal(verdict(&s), NGXCACHE_LENGTH);
    s = base();
    s.crc_delta = 1; /* a bit flip in the header's crc32 */
    assert_int_equal(verdict(&s), NGXCACHE_CRC);
    s = base();
    s.header_delta = 1;
    assert_int_equal(verdict(&s), NGXCACHE_OFFSETS);
    s = base();
    s.body_delta = 3;
    assert_int_equal(verdict(&s), NGXCACHE_HEAD);
    s = base();
    s.body_len = 10;
    s.body_delta = 1000; /* past the end of the file */
    assert_int_equal(verdict(&s), NGXCACHE_OFFSETS);
    s.body_delta = -(int)strlen(head206) - 1; /* before header_start */
    assert_int_equal(verdict(&s), NGXCACHE_OFFSETS);
    s = base();
    s.version = 3;
    assert_int_equal(verdict(&s), NGXCACHE_VERSION);
    s = base();
    s.vary_len = 15;
    assert_int_equal(verdict(&s), NGXCACHE_VARY);
    /* a bit flip in the KEY: crc32 and md5 both differ; the crc is checked first */
    size_t len;
    s = base();
    uint8_t *b = build(&s, &len);
    char nm[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(steam_key, strlen(steam_key), nm);
    b[336 + 6 + 3] ^= 0x01;
    struct ngxcache_file f;
    assert_int_equal(ngxcache_parse(b, len, len, nm, &f), NGXCACHE_CRC);
    b[336 + 6 + 3] ^= 0x01;
    b[336 + 1] = 'X'; /* "\nXEY: " */
    assert_int_equal(ngxcache_parse(b, len, len, nm, &f), NGXCACHE_LAYOUT);
    assert_int_equal(ngxcache_parse(b, 100, 100, nm, &f), NGXCACHE_SHORT);
    free(b);
}

static void test_ngxcache_names(void **state)
{
    (void)state;
    struct spec s = base();
    struct ngxcache_file f;
    char nm[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(steam_key, strlen(steam_key), nm);
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%s.0000000001", nm);
    assert_true(ngxcache_is_temp_name(tmp, strlen(tmp)));
    assert_false(ngxcache_is_temp_name(nm, strlen(nm)));
    assert_int_equal(verdict_named(&s, tmp, &f), NGXCACHE_TEMP);
    assert_int_equal(verdict_named(&s, "d41d8cd98f00b204e9800998ecf8427E", &f), NGXCACHE_NAME);
    assert_int_equal(verdict_named(&s, "abc", &f), NGXCACHE_NAME);
    /* Another key's name: a Vary secondary has vary_len set, a foreign file just differs. */
    assert_int_equal(verdict_named(&s, "d41d8cd98f00b204e9800998ecf8427e", &f), NGXCACHE_MD5);
    /* md5 test vectors (RFC 1321) and the levels=2:2 path: the last two digits first. */
    ngxcache_name("", 0, nm);
    assert_string_equal(nm, "d41d8cd98f00b204e9800998ecf8427e");
    ngxcache_name("abc", 3, nm);
    assert_string_equal(nm, "900150983cd24fb0d6963f7d28e17f72");
    char p[128];
    assert_int_equal(ngxcache_path("/c", "abc", 3, p, sizeof(p)), 0);
    assert_string_equal(p, "/c/72/7f/900150983cd24fb0d6963f7d28e17f72");
    assert_int_equal(ngxcache_path("/c", "abc", 3, p, 20), -1);
}

static void test_ngxcache_slice_checks(void **state)
{
    (void)state;
    struct spec s = base();
    s.key = "steam/depot/1/chunk/abytes=0-1048574"; /* not a whole window */
    assert_int_equal(verdict(&s), NGXCACHE_KEY);
    s.key = "steam/depot/1/chunk/abytes=512-1049087"; /* not on a slice boundary */
    assert_int_equal(verdict(&s), NGXCACHE_KEY);
    s.key = "steam/depot/1/chunk/a::noslice";
    assert_int_equal(verdict(&s), NGXCACHE_KEY);
    s.key = "bytes=0-1048575"; /* no identifier and path */
    assert_int_equal(verdict(&s), NGXCACHE_KEY);
    s.key = "steam/bytes=0-1/chunk/abytes=0-1048575x";
    assert_int_equal(verdict(&s), NGXCACHE_KEY);
    /* the word in the path itself: the last one is the window */
    s.key = "steam/bytes=0-1/chunk/abytes=0-1048575";
    assert_int_equal(verdict(&s), NGXCACHE_OK);
    /* Content-Range against the key */
    s = base();
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 102400\r\n"
             "Content-Range: bytes 1-102400/102401\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 102400\r\n"
             "Content-Range: bytes 0-102399/*\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 102400\r\n"
             "Content-Range: bytes 0-102399/102400\r\nContent-Range: bytes 0-102399/102400\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    /* a slice that ends before the window although the object goes on */
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 102400\r\n"
             "Content-Range: bytes 0-102399/5000000\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Length: 102399\r\n"
             "Content-Range: bytes 0-102399/102400\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_LENGTH);
    s.head = "HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=x\r\n"
             "Content-Length: 102400\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_RANGE);
    s.head = "HTTP/1.1 404 Not Found\r\nContent-Length: 102400\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_STATUS);
    s.head = "HTTP/1.1 301 Moved\r\nLocation: /x\r\nContent-Length: 102400\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_STATUS);
    s.head = "garbage\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_HEAD);
    /* Two heads: the first ends before body_start */
    s.head = "HTTP/1.1 404 Not Found\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    assert_int_equal(verdict(&s), NGXCACHE_HEAD);
}

static void expect_uri(const char *in, const char *want)
{
    char out[256];
    ssize_t n = ngxcache_uri(in, strlen(in), out, sizeof(out));
    if (want == NULL) {
        assert_int_equal(n, -1);
        return;
    }
    assert_true(n >= 0);
    out[n] = '\0';
    assert_string_equal(out, want);
}

static void test_ngxcache_uri_as_nginx(void **state)
{
    (void)state;
    expect_uri("/depot/1/chunk/abc", "/depot/1/chunk/abc");
    expect_uri("", "/");
    expect_uri("/a%20b/%41", "/a b/A");
    expect_uri("/a%2fb", "/a/b");
    expect_uri("/a%252F", "/a%2F"); /* decoded once */
    expect_uri("//a///b//", "/a/b/");
    expect_uri("/a/./b", "/a/b");
    expect_uri("/a/.", "/a/");
    expect_uri("/a/b/../c", "/a/c");
    expect_uri("/a/b/..", "/a/");
    expect_uri("/a/%2e%2e/c", "/c");
    expect_uri("/a/.../c", "/a/.../c");
    expect_uri("/a/.b/..c", "/a/.b/..c");
    expect_uri("/+x", "/+x");
    expect_uri("/..", NULL);
    expect_uri("/../a", NULL);
    expect_uri("/a/../../b", NULL);
    expect_uri("/a%2", NULL);
    expect_uri("/a%zz", NULL);
    expect_uri("/a%00b", NULL);
    expect_uri("a", NULL);
    char out[4];
    assert_int_equal(ngxcache_uri("/abcdef", 7, out, sizeof(out)), -1);
}

static void test_ngxcache_key(void **state)
{
    (void)state;
    char k[128];
    ssize_t n = ngxcache_key("steam", 5, "/depot/1/chunk/a", 16, 2 * SLICE, SLICE, k, sizeof(k));
    assert_true(n > 0);
    k[n] = '\0';
    assert_string_equal(k, "steam/depot/1/chunk/abytes=2097152-3145727");
    assert_int_equal(ngxcache_key("steam", 5, "/x", 2, 0, SLICE, k, 10), -1);
    for (int v = 0; v <= NGXCACHE_N_VERDICTS; v++) {
        assert_non_null(ngxcache_verdict_name((enum ngxcache_verdict)v));
        assert_non_null(ngxcache_verdict_text((enum ngxcache_verdict)v));
    }
    assert_string_equal(ngxcache_verdict_name(NGXCACHE_TEMP), "temp");
}

/* Files written by Debian's nginx (fixtures_ngxcache.h). */
static void test_ngxcache_real_nginx_files(void **state)
{
    (void)state;
    static const char key[] = "steam/depot/1091501/chunk/3e5c1a2b9f0d4c6e8a7b5c3d1e2f4a6b8c0d2e4f/"
                              "size/700bytes=0-1048575";
    char nm[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(key, strlen(key), nm);
    assert_string_equal(nm, "349762eb43f39fc00a23615b8bee2b69"); /* its name on disk */
    char path[128];
    assert_int_equal(ngxcache_path("/c", key, strlen(key), path, sizeof(path)), 0);
    assert_string_equal(path, "/c/69/2b/349762eb43f39fc00a23615b8bee2b69");
    struct ngxcache_file f;
    size_t n = sizeof(ngx_steam);
    assert_int_equal(ngxcache_parse(ngx_steam, n, n, nm, &f), NGXCACHE_OK);
    assert_int_equal(f.hdr_size, 336);
    assert_int_equal(f.date, 1796253300);
    assert_int_equal(f.valid_sec, 1796253300 + 3650ll * 86400); /* lancache: 3650d */
    assert_int_equal(f.last_modified, -1);                      /* the origin sent none */
    assert_int_equal(f.header_start, 433);
    assert_int_equal(f.body_start, 602);
    assert_int_equal(f.key_len, strlen(key));
    assert_memory_equal(f.key, key, f.key_len);
    assert_int_equal(f.resp.status, 206);
    assert_int_equal(f.resp.version_minor, 1);
    size_t prefix;
    assert_int_equal(ngxcache_slice(&f, 1024 * 1024, &prefix), NGXCACHE_OK);
    assert_int_equal(prefix, strlen(key) - strlen("bytes=0-1048575"));
    assert_int_equal(f.first, 0);
    assert_int_equal(f.last, 699);
    assert_int_equal(f.total, 700);
    assert_int_equal(f.body_len, 700);
    /* Any byte of the KEY line changed, or the file cut short anywhere: never adopted. */
    uint8_t copy[sizeof(ngx_steam)];
    for (size_t i = 336; i < f.header_start; i++) {
        memcpy(copy, ngx_steam, n);
        copy[i] ^= 0x20;
        struct ngxcache_file g;
        enum ngxcache_verdict v = ngxcache_parse(copy, n, n, nm, &g);
        if (v == NGXCACHE_OK)
            v = ngxcache_slice(&g, 1024 * 1024, NULL);
        assert_int_not_equal(v, NGXCACHE_OK);
    }
    for (size_t len = 0; len < n; len++) {
        struct ngxcache_file g;
        enum ngxcache_verdict v = ngxcache_parse(ngx_steam, len, len, nm, &g);
        if (v == NGXCACHE_OK)
            v = ngxcache_slice(&g, 1024 * 1024, NULL);
        assert_int_not_equal(v, NGXCACHE_OK);
    }
    /* The short last slice of a two-slice object on a host with a port. */
    n = sizeof(ngx_last);
    assert_int_equal(ngxcache_parse(ngx_last, n, n, "ff786883ff9bbed5e4a3e08d5b297e8a", &f),
                     NGXCACHE_OK);
    assert_int_equal(ngxcache_slice(&f, 1024 * 1024, &prefix), NGXCACHE_OK);
    assert_int_equal(f.first, 1048576);
    assert_int_equal(f.last, 1048599);
    assert_int_equal(f.total, 1048600);
    assert_int_equal(f.body_len, 24);
    assert_memory_equal(f.key, "dl.example.org:8080/tpr/x/size/1048600", prefix);
    /* Under a slice size of 2 MiB, its key is not a window. */
    assert_int_equal(ngxcache_slice(&f, 2 * 1024 * 1024, NULL), NGXCACHE_KEY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngxcache_adopts_a_short_steam_slice_64),
        cmocka_unit_test(test_ngxcache_reads_the_32_bit_time_t_layout),
        cmocka_unit_test(test_ngxcache_middle_slice_of_a_large_object),
        cmocka_unit_test(test_ngxcache_whole_object_200_only_under_the_first_key),
        cmocka_unit_test(test_ngxcache_damaged_files),
        cmocka_unit_test(test_ngxcache_names),
        cmocka_unit_test(test_ngxcache_slice_checks),
        cmocka_unit_test(test_ngxcache_uri_as_nginx),
        cmocka_unit_test(test_ngxcache_key),
        cmocka_unit_test(test_ngxcache_real_nginx_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
