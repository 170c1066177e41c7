/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_cluster: the node list (canonical addresses, sorted whatever the order written, every
 * refusal), rendezvous ownership (a node that leaves moves exactly its own chunks and each to
 * the node ranked next; one that joins takes only chunks it now owns; the spread), HMAC-SHA-256
 * against RFC 4231's vectors, the peer credential (a round trip, and each refusal: address,
 * self, time, mac, syntax) and the agreement digest.
 */
#include "cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char SECRET[] = "sixteen-or-more-characters";

static void parse_ok(struct cluster *cl, const char *nodes, const char *self)
{
    char err[256] = "";
    int rc = cluster_parse(cl, nodes, self, SECRET, err, sizeof(err));
    if (rc != 0)
        fail_msg("cluster_parse(%s): %s", nodes, err);
}

static void parse_fails(const char *nodes, const char *self, const char *secret, const char *want)
{
    struct cluster cl;
    char err[256] = "";
    assert_int_equal(cluster_parse(&cl, nodes, self, secret, err, sizeof(err)), -1);
    if (strstr(err, want) == NULL)
        fail_msg("%s: got \"%s\", wanted \"%s\"", nodes, err, want);
}

static void test_parse(void **state)
{
    (void)state;
    struct cluster a, b;
    parse_ok(&a, "10.0.0.13:80, 10.0.0.11:80 10.0.0.12:8080,[2001:DB8::1]:80", "10.0.0.11:80");
    assert_int_equal(a.n, 4);
    assert_string_equal(a.nodes[0].addr, "10.0.0.11:80");
    assert_string_equal(a.nodes[1].addr, "10.0.0.12:8080");
    assert_string_equal(a.nodes[2].addr, "10.0.0.13:80");
    assert_string_equal(a.nodes[3].addr, "[2001:db8::1]:80"); /* canonical form */
    assert_int_equal(a.self, 0);
    /* Another order, another self: the same indices. */
    parse_ok(&b, "[2001:db8::1]:80\t10.0.0.12:8080,10.0.0.13:80,,10.0.0.11:80", "[2001:db8::1]:80");
    for (unsigned i = 0; i < a.n; i++)
        assert_string_equal(a.nodes[i].addr, b.nodes[i].addr);
    assert_int_equal(b.self, 3);

    parse_fails("10.0.0.1:80", "10.0.0.1:80", SECRET, "at least two");
    parse_fails("", "10.0.0.1:80", SECRET, "at least two");
    parse_fails("10.0.0.1:80 10.0.0.1:80", "10.0.0.1:80", SECRET, "twice");
    parse_fails("10.0.0.1:80 10.0.0.2:80 10.0.0.1:81", "10.0.0.1:80", SECRET, "same address");
    parse_fails("[::1]:80 [0:0::1]:81", "[::1]:80", SECRET, "same address");
    parse_fails("10.0.0.1:80 10.0.0.2", "10.0.0.1:80", SECRET, "not an address");
    parse_fails("10.0.0.1:80 cache.lan:80", "10.0.0.1:80", SECRET, "not an address");
    parse_fails("10.0.0.1:80 10.0.0.2:0", "10.0.0.1:80", SECRET, "not an address");
    parse_fails("10.0.0.1:80 10.0.0.2:65536", "10.0.0.1:80", SECRET, "not an address");
    parse_fails("10.0.0.1:80 2001:db8::1:80", "10.0.0.1:80", SECRET, "not an address");
    parse_fails("10.0.0.1:80 10.0.0.2:80", "10.0.0.3:80", SECRET, "not one of");
    parse_fails("10.0.0.1:80 10.0.0.2:80", "", SECRET, "[cluster] self");
    parse_fails("10.0.0.1:80 10.0.0.2:80", "10.0.0.1:80", "short", "16 to 256");
    char many[40 * 24] = "";
    for (int i = 0; i < CLUSTER_MAX_NODES + 1; i++) {
        char one[24];
        snprintf(one, sizeof(one), "10.0.1.%d:80 ", i + 1);
        strcat(many, one);
    }
    parse_fails(many, "10.0.1.1:80", SECRET, "more than");
}

#define N_KEYS 3000
#define N_IDX 10

static void key_of(int k, char *out, size_t cap)
{
    snprintf(out, cap, "steam\n/depot/%d/chunk/%040x", k % 97, k * 2654435761u);
}

static void test_ownership(void **state)
{
    (void)state;
    struct cluster cl, four;
    parse_ok(&cl, "10.0.0.11:80 10.0.0.12:80 10.0.0.13:80", "10.0.0.11:80");
    parse_ok(&four, "10.0.0.11:80 10.0.0.12:80 10.0.0.13:80 10.0.0.14:80", "10.0.0.11:80");
    unsigned count[3] = {0}, moved = 0, taken = 0;
    const uint32_t all = 7, without_1 = 7 & ~2u;
    for (int k = 0; k < N_KEYS; k++) {
        char key[96];
        key_of(k, key, sizeof(key));
        size_t len = strlen(key);
        for (uint64_t i = 0; i < N_IDX; i++) {
            uint32_t o = cluster_owner(&cl, key, len, i, all);
            assert_true(o < 3);
            count[o]++;
            unsigned rank[CLUSTER_MAX_NODES];
            cluster_rank(&cl, key, len, i, rank);
            assert_int_equal(rank[0], o);
            assert_true(rank[1] != rank[0] && rank[2] != rank[0] && rank[1] != rank[2]);
            /* Node 1 leaves: only its chunks move, each to the one ranked next. */
            uint32_t o2 = cluster_owner(&cl, key, len, i, without_1);
            if (o == 1) {
                assert_int_equal(o2, rank[1]);
                moved++;
            } else {
                assert_int_equal(o2, o);
            }
            assert_int_equal(cluster_owner(&cl, key, len, i, 1u << 2), 2); /* the only live one */
            /* A fourth node joins: a chunk moves only to it. The first three are at the same
             * indices in both lists (sorted), so the same seeds. */
            uint32_t o4 = cluster_owner(&four, key, len, i, 15);
            if (o4 != o) {
                assert_int_equal(o4, 3);
                taken++;
            }
        }
    }
    assert_int_equal(cluster_owner(&cl, "k", 1, 0, 0), CLUSTER_NONE);
    unsigned total = N_KEYS * N_IDX;
    for (unsigned n = 0; n < 3; n++) /* about a third each: within 5 % of it */
        assert_true(count[n] > total / 3 - total / 20 && count[n] < total / 3 + total / 20);
    assert_int_equal(moved, count[1]);
    assert_true(taken > total / 4 - total / 20 && taken < total / 4 + total / 20);
    /* The index matters: the chunks of one object spread. */
    unsigned owners = 0;
    for (uint64_t i = 0; i < 16; i++)
        owners |= 1u << cluster_owner(&cl, "steam\n/big", 10, i, all);
    assert_int_equal(owners, 7);
}

static void test_hmac_rfc4231(void **state)
{
    (void)state;
    char out[CLUSTER_MAC_HEX + 1];
    /* Test case 2 */
    cluster_hmac("Jefe", 4, "what do ya want for nothing?", 28, out);
    assert_string_equal(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* Test case 1: key 20 x 0x0b, "Hi There" */
    unsigned char key[131];
    memset(key, 0x0b, 20);
    cluster_hmac(key, 20, "Hi There", 8, out);
    assert_string_equal(out, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* Test case 6: a key longer than the block (131 x 0xaa) is hashed first */
    memset(key, 0xaa, sizeof(key));
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    cluster_hmac(key, sizeof(key), m, strlen(m), out);
    assert_string_equal(out, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static struct sockaddr_in v4(const char *ip, unsigned port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return a;
}

static void test_peer_credential(void **state)
{
    (void)state;
    struct cluster a, b;
    parse_ok(&a, "127.0.3.1:80 127.0.3.2:80 127.0.3.3:80", "127.0.3.1:80");
    parse_ok(&b, "127.0.3.3:80 127.0.3.2:80 127.0.3.1:80", "127.0.3.2:80");
    char v[CLUSTER_PEER_MAX];
    const char *path = "/depot/1/chunk/ab", *host = "cache1.steamcontent.com";
    cluster_sign(&a, 1700000000, "GET", host, path, "bytes=0-1048575", v, sizeof(v));
    assert_true(strlen(v) < CLUSTER_PEER_MAX);
    struct sockaddr_in from_a = v4("127.0.3.1", 41234), from_c = v4("127.0.3.3", 5000),
                       lan = v4("10.1.2.3", 5000), from_b = v4("127.0.3.2", 6000);
    unsigned from = 99;
    size_t len = strlen(v);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000100, "GET", host,
                                    path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_OK);
    assert_int_equal(from, 0);
    /* From another address: a LAN client, or another node replaying it. */
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&lan, 1700000000, "GET", host,
                                    path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_ADDRESS);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_c, 1700000000, "GET", host,
                                    path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_ADDRESS);
    /* A node never takes a peer request from itself. */
    char vb[CLUSTER_PEER_MAX];
    cluster_sign(&b, 1700000000, "GET", host, path, NULL, vb, sizeof(vb));
    assert_int_equal(cluster_verify(&b, vb, strlen(vb), (struct sockaddr *)&from_b, 1700000000,
                                    "GET", host, path, NULL, &from),
                     CLUSTER_PEER_ADDRESS);
    /* Out of the window, either way. */
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a,
                                    1700000000 + CLUSTER_PEER_SKEW + 1, "GET", host, path,
                                    "bytes=0-1048575", &from),
                     CLUSTER_PEER_TIME);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a,
                                    1700000000 - CLUSTER_PEER_SKEW - 1, "GET", host, path,
                                    "bytes=0-1048575", &from),
                     CLUSTER_PEER_TIME);
    /* Another request, range, host or method: the mac does not match. */
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000000, "GET", host,
                                    "/depot/1/chunk/ac", "bytes=0-1048575", &from),
                     CLUSTER_PEER_MAC);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000000, "GET", host,
                                    path, "bytes=1048576-2097151", &from),
                     CLUSTER_PEER_MAC);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000000, "GET", host,
                                    path, NULL, &from),
                     CLUSTER_PEER_MAC);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000000, "GET",
                                    "cache2.steamcontent.com", path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_MAC);
    assert_int_equal(cluster_verify(&b, v, len, (struct sockaddr *)&from_a, 1700000000, "PURGE",
                                    host, path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_MAC);
    /* Another secret. */
    struct cluster other;
    char err[128];
    assert_int_equal(cluster_parse(&other, "127.0.3.1:80 127.0.3.2:80 127.0.3.3:80", "127.0.3.2:80",
                                   "another-secret-of-16", err, sizeof(err)),
                     0);
    assert_int_equal(cluster_verify(&other, v, len, (struct sockaddr *)&from_a, 1700000000, "GET",
                                    host, path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_MAC);
    /* A flipped digit of the mac. */
    char bad[CLUSTER_PEER_MAX];
    memcpy(bad, v, len + 1);
    bad[len - 1] = bad[len - 1] == '0' ? '1' : '0';
    assert_int_equal(cluster_verify(&b, bad, len, (struct sockaddr *)&from_a, 1700000000, "GET",
                                    host, path, "bytes=0-1048575", &from),
                     CLUSTER_PEER_MAC);
    /* Syntax. */
    const char *junk[] = {
        "",
        "0",
        "0 1700000000",
        "0 1700000000 abc",
        "x 1 abc",
        "7 1700000000 0000000000000000000000000000000000000000000000000000000000000000",
        "0  1700000000 0000000000000000000000000000000000000000000000000000000000000000",
        "00000000000000000000000 1 "
        "0000000000000000000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
        assert_int_equal(cluster_verify(&b, junk[i], strlen(junk[i]), (struct sockaddr *)&from_a,
                                        1700000000, "GET", host, path, NULL, &from),
                         CLUSTER_PEER_SYNTAX);
    assert_string_equal(cluster_verdict_name(CLUSTER_PEER_MAC), "mac");
}

static void test_node_of_and_digest(void **state)
{
    (void)state;
    struct cluster a, b;
    parse_ok(&a, "127.0.3.1:80 127.0.3.2:81", "127.0.3.1:80");
    parse_ok(&b, "127.0.3.2:81,127.0.3.1:80", "127.0.3.2:81");
    struct sockaddr_in x = v4("127.0.3.2", 81), y = v4("127.0.3.2", 9999);
    assert_int_equal(cluster_node_of(&a, (struct sockaddr *)&x, true), 1);
    assert_int_equal(cluster_node_of(&a, (struct sockaddr *)&y, true), -1);
    assert_int_equal(cluster_node_of(&a, (struct sockaddr *)&y, false), 1);
    struct sockaddr_in6 m;
    memset(&m, 0, sizeof(m));
    m.sin6_family = AF_INET6;
    m.sin6_port = htons(80);
    assert_int_equal(inet_pton(AF_INET6, "::ffff:127.0.3.1", &m.sin6_addr), 1);
    assert_int_equal(cluster_node_of(&a, (struct sockaddr *)&m, true), 0);
    char da[CLUSTER_MAC_HEX + 1], db[CLUSTER_MAC_HEX + 1], dc[CLUSTER_MAC_HEX + 1];
    cluster_digest(&a, 1 << 20, da);
    cluster_digest(&b, 1 << 20, db);
    assert_string_equal(da, db); /* self differs, the cluster does not */
    cluster_digest(&a, 1 << 21, dc);
    assert_string_not_equal(da, dc);
    struct cluster c;
    parse_ok(&c, "127.0.3.1:80 127.0.3.2:81 127.0.3.3:80", "127.0.3.1:80");
    cluster_digest(&c, 1 << 20, dc);
    assert_string_not_equal(da, dc);
    char err[128];
    assert_int_equal(cluster_parse(&c, "127.0.3.1:80 127.0.3.2:81", "127.0.3.1:80",
                                   "another-secret-of-16", err, sizeof(err)),
                     0);
    cluster_digest(&c, 1 << 20, dc);
    assert_string_not_equal(da, dc);
}

static void test_purge_ident(void **state)
{
    (void)state;
    assert_true(cluster_purge_ident_ok("steam", 5));
    assert_true(cluster_purge_ident_ok("dl.example.org:8080", 19));
    assert_false(cluster_purge_ident_ok("", 0));
    assert_false(cluster_purge_ident_ok("[::1]:80", 8)); /* an IPv6 literal host's */
    assert_false(cluster_purge_ident_ok("a&b=c", 5));
    char longer[129];
    memset(longer, 'a', sizeof(longer));
    assert_true(cluster_purge_ident_ok(longer, 127));
    assert_false(cluster_purge_ident_ok(longer, 128));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purge_ident),     cmocka_unit_test(test_parse),
        cmocka_unit_test(test_ownership),       cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_peer_credential), cmocka_unit_test(test_node_of_and_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
