/* SPDX-License-Identifier: BSD-2-Clause */
/* cluster: nodes, rendezvous ownership and the peer credential (see cluster.h). Pure. */
#include "cluster.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "util.h"

/* ---- nodes ------------------------------------------------------------------------------- */

/* "ip:port" or "[ip6]:port" at <s>[0, len) into <node> (canonical addr, sockaddr, seed). */
static bool parse_node(const char *s, size_t len, struct cluster_node *node)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *colon;
    size_t hlen;
    bool v6 = len > 0 && s[0] == '[';
    if (v6) {
        const char *close = memchr(s, ']', len);
        if (close == NULL || close + 1 >= s + len || close[1] != ':')
            return false;
        hlen = (size_t)(close - s - 1);
        if (hlen >= sizeof(host))
            return false;
        memcpy(host, s + 1, hlen);
        colon = close + 1;
    } else {
        colon = memchr(s, ':', len);
        if (colon == NULL)
            return false;
        hlen = (size_t)(colon - s);
        if (hlen >= sizeof(host) || memchr(colon + 1, ':', (size_t)(s + len - colon - 1)) != NULL)
            return false;
        memcpy(host, s, hlen);
    }
    host[hlen] = '\0';
    const char *p = colon + 1, *end = s + len;
    if (p == end || end - p > 5)
        return false;
    unsigned port = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        port = port * 10 + (unsigned)(*p - '0');
    }
    if (port == 0 || port > 65535)
        return false;
    memset(node, 0, sizeof(*node));
    char canon[INET6_ADDRSTRLEN];
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&node->sa;
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
            return false;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        node->sa_len = sizeof(*a);
        inet_ntop(AF_INET6, &a->sin6_addr, canon, sizeof(canon));
        snprintf(node->addr, sizeof(node->addr), "[%s]:%u", canon, port);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&node->sa;
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
            return false;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        node->sa_len = sizeof(*a);
        inet_ntop(AF_INET, &a->sin_addr, canon, sizeof(canon));
        snprintf(node->addr, sizeof(node->addr), "%s:%u", canon, port);
    }
    node->seed = XXH64(node->addr, strlen(node->addr), 0);
    return true;
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const struct cluster_node *)a)->addr, ((const struct cluster_node *)b)->addr);
}

static bool is_sep(char ch)
{
    return ch == ',' || ch == ' ' || ch == '\t';
}

int cluster_parse(struct cluster *out, const char *nodes, const char *self, const char *secret,
                  char *err, size_t err_cap)
{
    memset(out, 0, sizeof(*out));
    const char *p = nodes;
    for (;;) {
        while (*p != '\0' && is_sep(*p))
            p++;
        if (*p == '\0')
            break;
        const char *start = p;
        while (*p != '\0' && !is_sep(*p))
            p++;
        size_t len = (size_t)(p - start);
        if (out->n == CLUSTER_MAX_NODES) {
            snprintf(err, err_cap, "[cluster] nodes: more than %d nodes", CLUSTER_MAX_NODES);
            return -1;
        }
        if (!parse_node(start, len, &out->nodes[out->n])) {
            snprintf(err, err_cap,
                     "[cluster] nodes: \"%.*s\" is not an address and port (ip:port or "
                     "[ip6]:port)",
                     (int)(len > 80 ? 80 : len), start);
            return -1;
        }
        for (unsigned i = 0; i < out->n; i++) {
            if (strcmp(out->nodes[i].addr, out->nodes[out->n].addr) == 0) {
                snprintf(err, err_cap, "[cluster] nodes: %s is listed twice", out->nodes[i].addr);
                return -1;
            }
        }
        out->n++;
    }
    /* A peer's credential is tied to its IP address, whatever port it connects from. */
    for (unsigned i = 1; i < out->n; i++) {
        struct cluster head = *out;
        head.n = i;
        int j = cluster_node_of(&head, (const struct sockaddr *)&out->nodes[i].sa, false);
        if (j >= 0) {
            snprintf(err, err_cap,
                     "[cluster] nodes: %s and %s have the same address: nodes need one each",
                     out->nodes[j].addr, out->nodes[i].addr);
            return -1;
        }
    }
    if (out->n < 2) {
        snprintf(err, err_cap,
                 "[cluster] nodes: a cluster needs at least two nodes (leave it empty for one)");
        return -1;
    }
    qsort(out->nodes, out->n, sizeof(out->nodes[0]), cmp_node);
    struct cluster_node me;
    if (self == NULL || !parse_node(self, strlen(self), &me)) {
        snprintf(err, err_cap, "[cluster] self: \"%s\" is not an address and port (ip:port)",
                 self != NULL ? self : "");
        return -1;
    }
    out->self = CLUSTER_NONE;
    for (unsigned i = 0; i < out->n; i++)
        if (strcmp(out->nodes[i].addr, me.addr) == 0)
            out->self = i;
    if (out->self == CLUSTER_NONE) {
        snprintf(err, err_cap, "[cluster] self: %s is not one of [cluster] nodes", me.addr);
        return -1;
    }
    size_t slen = secret != NULL ? strlen(secret) : 0;
    if (slen < CLUSTER_SECRET_MIN || slen > CLUSTER_SECRET_MAX) {
        snprintf(err, err_cap,
                 "[cluster] secret: %d to %d characters, the same on every node (have %zu)",
                 CLUSTER_SECRET_MIN, CLUSTER_SECRET_MAX, slen);
        return -1;
    }
    memcpy(out->secret, secret, slen);
    out->secret_len = slen;
    return 0;
}

/* ---- ownership --------------------------------------------------------------------------- */

static uint64_t score(const struct cluster_node *node, const char *key, size_t key_len,
                      uint64_t index)
{
    uint8_t idx[8];
    for (unsigned i = 0; i < 8; i++)
        idx[i] = (uint8_t)(index >> (8 * i));
    XXH64_state_t st;
    XXH64_reset(&st, node->seed);
    XXH64_update(&st, key, key_len);
    XXH64_update(&st, "\n", 1);
    XXH64_update(&st, idx, sizeof(idx));
    return XXH64_digest(&st);
}

uint32_t cluster_owner(const struct cluster *cl, const char *key, size_t key_len, uint64_t index,
                       uint32_t live)
{
    uint32_t best = CLUSTER_NONE;
    uint64_t best_score = 0;
    for (unsigned i = 0; i < cl->n; i++) {
        if ((live & (1u << i)) == 0)
            continue;
        uint64_t s = score(&cl->nodes[i], key, key_len, index);
        /* ties (as good as never) go to the lower index, the same on every node */
        if (best == CLUSTER_NONE || s > best_score) {
            best = i;
            best_score = s;
        }
    }
    return best;
}

void cluster_rank(const struct cluster *cl, const char *key, size_t key_len, uint64_t index,
                  unsigned *order)
{
    uint64_t s[CLUSTER_MAX_NODES];
    for (unsigned i = 0; i < cl->n; i++) {
        s[i] = score(&cl->nodes[i], key, key_len, index);
        order[i] = i;
    }
    /* insertion sort: at most CLUSTER_MAX_NODES */
    for (unsigned i = 1; i < cl->n; i++) {
        unsigned o = order[i], j = i;
        while (j > 0 && (s[order[j - 1]] < s[o] || (s[order[j - 1]] == s[o] && order[j - 1] > o))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = o;
    }
}

int cluster_node_of(const struct cluster *cl, const struct sockaddr *sa, bool with_port)
{
    for (unsigned i = 0; i < cl->n; i++) {
        const struct sockaddr *n = (const struct sockaddr *)&cl->nodes[i].sa;
        if (n->sa_family == AF_INET && sa->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const void *)n, *b = (const void *)sa;
            if (a->sin_addr.s_addr == b->sin_addr.s_addr &&
                (!with_port || a->sin_port == b->sin_port))
                return (int)i;
        } else if (n->sa_family == AF_INET6 && sa->sa_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)n, *b = (const void *)sa;
            if (memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0 &&
                (!with_port || a->sin6_port == b->sin6_port))
                return (int)i;
        } else if (n->sa_family == AF_INET && sa->sa_family == AF_INET6) {
            /* a v4 node seen through a dual-stack socket: ::ffff:a.b.c.d */
            const struct sockaddr_in *a = (const void *)n;
            const struct sockaddr_in6 *b = (const void *)sa;
            if (IN6_IS_ADDR_V4MAPPED(&b->sin6_addr) &&
                memcmp(&b->sin6_addr.s6_addr[12], &a->sin_addr, 4) == 0 &&
                (!with_port || a->sin_port == b->sin6_port))
                return (int)i;
        }
    }
    return -1;
}

/* ---- HMAC-SHA-256 (RFC 2104) ------------------------------------------------------------- */

struct hmac {
    SHA2_CTX inner;
    uint8_t okey[SHA256_BLOCK_LENGTH];
};

static void hmac_init(struct hmac *h, const uint8_t *key, size_t key_len)
{
    uint8_t k[SHA256_BLOCK_LENGTH] = {0}, ikey[SHA256_BLOCK_LENGTH];
    if (key_len > sizeof(k)) {
        SHA2_CTX c;
        SHA256Init(&c);
        SHA256Update(&c, key, key_len);
        SHA256Final(k, &c);
    } else {
        memcpy(k, key, key_len);
    }
    for (size_t i = 0; i < sizeof(k); i++) {
        ikey[i] = k[i] ^ 0x36;
        h->okey[i] = k[i] ^ 0x5c;
    }
    SHA256Init(&h->inner);
    SHA256Update(&h->inner, ikey, sizeof(ikey));
}

static void hmac_add(struct hmac *h, const void *p, size_t len)
{
    SHA256Update(&h->inner, p, len);
}

static void hmac_hex(struct hmac *h, char out[CLUSTER_MAC_HEX + 1])
{
    uint8_t ih[SHA256_DIGEST_LENGTH], mac[SHA256_DIGEST_LENGTH];
    SHA256Final(ih, &h->inner);
    SHA2_CTX o;
    SHA256Init(&o);
    SHA256Update(&o, h->okey, sizeof(h->okey));
    SHA256Update(&o, ih, sizeof(ih));
    SHA256Final(mac, &o);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(mac); i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[CLUSTER_MAC_HEX] = '\0';
}

void cluster_hmac(const void *key, size_t key_len, const void *msg, size_t len,
                  char out[CLUSTER_MAC_HEX + 1])
{
    struct hmac h;
    hmac_init(&h, key, key_len);
    hmac_add(&h, msg, len);
    hmac_hex(&h, out);
}

static void peer_mac(const struct cluster *cl, unsigned from, int64_t t, const char *method,
                     const char *host, const char *target, const char *range,
                     char out[CLUSTER_MAC_HEX + 1])
{
    char head[64];
    int n = snprintf(head, sizeof(head), "cacheparty-peer\n%u\n%" PRId64 "\n", from, t);
    struct hmac h;
    hmac_init(&h, cl->secret, cl->secret_len);
    hmac_add(&h, head, (size_t)n);
    const char *parts[] = {method, host, target, range != NULL ? range : ""};
    for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
        if (i > 0)
            hmac_add(&h, "\n", 1);
        hmac_add(&h, parts[i], strlen(parts[i]));
    }
    hmac_hex(&h, out);
}

void cluster_sign(const struct cluster *cl, int64_t now, const char *method, const char *host,
                  const char *target, const char *range, char *out, size_t cap)
{
    char mac[CLUSTER_MAC_HEX + 1];
    peer_mac(cl, cl->self, now, method, host, target, range, mac);
    snprintf(out, cap, "%u %" PRId64 " %s", cl->self, now, mac);
}

/* Decimal digits at <p>[*i, len) into <v> (at most 19). */
static bool parse_dec(const char *p, size_t len, size_t *i, int64_t *v)
{
    size_t j = *i;
    int64_t x = 0;
    while (j < len && p[j] >= '0' && p[j] <= '9' && j - *i < 19)
        x = x * 10 + (p[j++] - '0');
    if (j == *i || (j < len && p[j] >= '0' && p[j] <= '9'))
        return false;
    *i = j;
    *v = x;
    return true;
}

enum cluster_verdict cluster_verify(const struct cluster *cl, const char *v, size_t len,
                                    const struct sockaddr *src, int64_t now, const char *method,
                                    const char *host, const char *target, const char *range,
                                    unsigned *from)
{
    size_t i = 0;
    int64_t f, t;
    if (!parse_dec(v, len, &i, &f) || i >= len || v[i++] != ' ' || !parse_dec(v, len, &i, &t) ||
        i >= len || v[i++] != ' ' || len - i != CLUSTER_MAC_HEX)
        return CLUSTER_PEER_SYNTAX;
    if (f >= (int64_t)cl->n)
        return CLUSTER_PEER_SYNTAX;
    int node = cluster_node_of(cl, src, false);
    if (node < 0 || node != (int)f || (unsigned)f == cl->self)
        return CLUSTER_PEER_ADDRESS;
    if (t < now - CLUSTER_PEER_SKEW || t > now + CLUSTER_PEER_SKEW)
        return CLUSTER_PEER_TIME;
    char mac[CLUSTER_MAC_HEX + 1];
    peer_mac(cl, (unsigned)f, t, method, host, target, range, mac);
    unsigned diff = 0;
    for (size_t k = 0; k < CLUSTER_MAC_HEX; k++)
        diff |= (unsigned)(uint8_t)(mac[k] ^ v[i + k]);
    if (diff != 0)
        return CLUSTER_PEER_MAC;
    *from = (unsigned)f;
    return CLUSTER_PEER_OK;
}

bool cluster_purge_ident_ok(const char *ident, size_t len)
{
    if (len == 0 || len >= 128)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = ident[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-' || ch == '_' || ch == ':'))
            return false;
    }
    return true;
}

const char *cluster_verdict_name(enum cluster_verdict v)
{
    switch (v) {
    case CLUSTER_PEER_OK:
        return "ok";
    case CLUSTER_PEER_SYNTAX:
        return "syntax";
    case CLUSTER_PEER_ADDRESS:
        return "address";
    case CLUSTER_PEER_TIME:
        return "time";
    case CLUSTER_PEER_MAC:
        return "mac";
    }
    return "?";
}

void cluster_digest(const struct cluster *cl, uint64_t chunk_size, char out[CLUSTER_MAC_HEX + 1])
{
    char head[64];
    int n = snprintf(head, sizeof(head), "cacheparty-cluster\n%" PRIu64 "\n", chunk_size);
    struct hmac h;
    hmac_init(&h, cl->secret, cl->secret_len);
    hmac_add(&h, head, (size_t)n);
    for (unsigned i = 0; i < cl->n; i++) {
        hmac_add(&h, cl->nodes[i].addr, strlen(cl->nodes[i].addr));
        hmac_add(&h, "\n", 1);
    }
    hmac_hex(&h, out);
}
