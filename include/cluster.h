/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cluster: the nodes of [cluster], which of them owns a chunk, and the peer credential. Pure: no
 * I/O, no loop, no global state; the caller passes the time.
 *
 * Nodes: [cluster] nodes lists every node's HTTP address, "ip:port" (IPv4, or IPv6 in brackets),
 * the same set on every node in any order; [cluster] self is this node's entry. The nodes are
 * kept sorted by their canonical address (inet_ntop form), so a node's index is the same on every
 * node whatever order the lists were written in. 2 to CLUSTER_MAX_NODES nodes.
 *
 * Ownership (rendezvous hashing): chunk <index> of the object whose cache key is <key> belongs to
 * the live node with the highest score xxh64(<key> "\n" <index as 8 bytes LE>, that node's seed),
 * a node's seed being xxh64 of its canonical address. A node that leaves moves only its own
 * chunks, each to the node that scores next on it; a node that joins takes only the chunks it
 * now scores highest on. cluster_rank() orders every node by score: the failover order.
 *
 * Peer credential: a request from one node to another carries
 *     X-Cacheparty-Peer: <from> <time> <mac>
 * <from> is the sender's index, <time> the sender's clock in Unix seconds, <mac> the lowercase
 * hex HMAC-SHA-256, keyed by [cluster] secret, of
 *     "cacheparty-peer\n" <from> "\n" <time> "\n" <method> "\n" <host> "\n" <target> "\n" <range>
 * (<range> the request's Range value, empty without one). The receiver accepts it when the
 * connection comes from node <from>'s address (not its own), <time> is within CLUSTER_PEER_SKEW
 * seconds of its own clock, and the mac matches (compared in constant time). Without the secret
 * a LAN client cannot make one; one it captured works only from the node's own address, within
 * the window, and for that same request.
 *
 * Agreement: cluster_digest() is the HMAC-SHA-256, keyed by the secret, of the chunk size and the
 * sorted node list: two nodes with equal digests agree on all three.
 */
#ifndef CACHEPARTY_CLUSTER_H
#define CACHEPARTY_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CLUSTER_MAX_NODES 32
#define CLUSTER_ADDR_MAX 56 /* "[" IPv6 "]:" port, NUL */
#define CLUSTER_SECRET_MIN 16
#define CLUSTER_SECRET_MAX 256
#define CLUSTER_PEER_SKEW 300
#define CLUSTER_MAC_HEX 64
/* The longest X-Cacheparty-Peer value: index, time, mac and two spaces. */
#define CLUSTER_PEER_MAX (2 + 1 + 20 + 1 + CLUSTER_MAC_HEX + 1)

struct cluster_node {
    char addr[CLUSTER_ADDR_MAX]; /* canonical "ip:port" / "[ip6]:port" */
    struct sockaddr_storage sa;  /* its address and port */
    socklen_t sa_len;
    uint64_t seed; /* xxh64 of addr */
};

struct cluster {
    struct cluster_node nodes[CLUSTER_MAX_NODES]; /* sorted by addr */
    unsigned n;
    unsigned self; /* index of this node */
    uint8_t secret[CLUSTER_SECRET_MAX];
    size_t secret_len;
};

/*
 * Parses [cluster] nodes (addresses separated by commas and/or blanks), self (one of them) and
 * secret (CLUSTER_SECRET_MIN to CLUSTER_SECRET_MAX bytes) into <out>. Returns 0, or -1 with a
 * message in <err> (an address that is not "ip:port", a duplicate, too few or too many nodes,
 * self not listed, a short secret).
 */
int cluster_parse(struct cluster *out, const char *nodes, const char *self, const char *secret,
                  char *err, size_t err_cap);

/* The owner of chunk <index> of <key>[0, key_len): the node of the highest score among those
 * whose bit is set in <live> (bit i: node i); CLUSTER_NONE when no bit is set. */
#define CLUSTER_NONE UINT32_MAX
uint32_t cluster_owner(const struct cluster *cl, const char *key, size_t key_len, uint64_t index,
                       uint32_t live);
/* Every node's index, highest score first, into <order>[0, cl->n). */
void cluster_rank(const struct cluster *cl, const char *key, size_t key_len, uint64_t index,
                  unsigned *order);

/* The node whose address (ip and port: <with_port>; else the ip alone) is <sa>, or -1. */
int cluster_node_of(const struct cluster *cl, const struct sockaddr *sa, bool with_port);

/*
 * The X-Cacheparty-Peer value (NUL-terminated, at most CLUSTER_PEER_MAX bytes with the NUL) for
 * a request this node sends at <now> (Unix seconds). <range> may be NULL (no Range).
 */
void cluster_sign(const struct cluster *cl, int64_t now, const char *method, const char *host,
                  const char *target, const char *range, char *out, size_t cap);

enum cluster_verdict {
    CLUSTER_PEER_OK,
    CLUSTER_PEER_SYNTAX,  /* not "<from> <time> <mac>" */
    CLUSTER_PEER_ADDRESS, /* not from node <from>'s address, or from this node */
    CLUSTER_PEER_TIME,    /* outside the window */
    CLUSTER_PEER_MAC,     /* not made with the secret for this request */
};
/*
 * Checks the X-Cacheparty-Peer value <v>[0, len) of a request from <src> (its ip is compared, not
 * its port: a node connects from any port) received at <now>. On CLUSTER_PEER_OK, *from is the
 * sender's index.
 */
enum cluster_verdict cluster_verify(const struct cluster *cl, const char *v, size_t len,
                                    const struct sockaddr *src, int64_t now, const char *method,
                                    const char *host, const char *target, const char *range,
                                    unsigned *from);
const char *cluster_verdict_name(enum cluster_verdict v);
/* Whether <ident>[0, len) may be the identifier of a peer's PURGE ("?identifier=ID"): 1 to 127
 * characters of [A-Za-z0-9._:-]. The sender checks it before sending, the receiver on receipt. */
bool cluster_purge_ident_ok(const char *ident, size_t len);

/* HMAC-SHA-256 (RFC 2104) of <msg>[0, len) under <key>[0, key_len), as 64 lowercase hex digits
 * and a NUL. */
void cluster_hmac(const void *key, size_t key_len, const void *msg, size_t len,
                  char out[CLUSTER_MAC_HEX + 1]);

/* The agreement digest of <cl> and <chunk_size>, as 64 lowercase hex digits and a NUL. */
void cluster_digest(const struct cluster *cl, uint64_t chunk_size, char out[CLUSTER_MAC_HEX + 1]);

#endif
