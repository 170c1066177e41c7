/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * peers: the other nodes of [cluster] as this node sees them, on the loop: whether each is up,
 * what was asked of it and what it was served, and the requests this node sends them of its own
 * (heartbeats, purges). The ownership of a chunk is computed over the nodes that are up (with
 * this one always among them: peers_live()), so a peer that goes down hands its chunks to the
 * next node of their rank, which may be this node (then it fills them from the origin).
 *
 * Health. A peer is down until its first heartbeat is answered. Every PEERS_CHECK_MS each peer
 * is sent GET /lancache-heartbeat with the peer credential (cluster.h); an answer of 204 whose
 * X-Cacheparty-Cluster is this node's agreement digest (chunk size, node list, secret) within
 * PEERS_TIMEOUT_MS marks it up; PEERS_FALL failures in a row (no answer in time, another
 * status, another digest) mark it down. A peer request that cannot reach the peer or is cut
 * (fetch) marks it down at once (peers_failed); only a heartbeat marks it up again. Every
 * transition is logged once (info); a digest that disagrees once (warning) until it agrees: such
 * a node is never asked, and asks in vain (its peer requests are refused).
 *
 * Heartbeats and purges go out from this node's own address ([cluster] self, port 0) so that the
 * receiving node sees them come from a node's address, on connections of their own (never
 * queued behind fills).
 */
#ifndef CACHEPARTY_PEERS_H
#define CACHEPARTY_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ev_loop;
struct cluster;

#define PEERS_CHECK_MS 1000
#define PEERS_TIMEOUT_MS 3000
#define PEERS_FALL 2
/* The field of a heartbeat's answer carrying the agreement digest. */
#define PEERS_DIGEST_FIELD "X-Cacheparty-Cluster"
/* The field of a peer's refusal (a credential refused, not the owner's own answer). */
#define PEERS_REFUSED_FIELD "X-Cacheparty-Peer-Refused"

/* Starts the health checks of <cl>'s peers (copied: a reload cannot change it), chunk size
 * <chunk_size>. Nothing when <cl> is NULL (no cluster): then peers_live() is 0. */
void peers_start(struct ev_loop *loop, const struct cluster *cl, uint64_t chunk_size);
/* Stops them (shutdown): the requests in flight are cancelled. */
void peers_stop(void);
/* The cluster, or NULL without one. */
const struct cluster *peers_cluster(void);
/* This node's agreement digest ("" without a cluster). */
const char *peers_digest(void);
/* Bit i set: node i is up (this node's bit always). */
uint32_t peers_live(void);
/* Where this node's requests to peers come from (its [cluster] self address, port 0). */
const struct sockaddr_storage *peers_source(void);

/* A request to peer <node> failed: <why> (logged with the transition). Down now. */
void peers_failed(unsigned node, const char *why);
/* <fn>(node) runs at each transition of a peer to down (its heartbeats, or peers_failed),
 * inside that call: it must not act there, only note it (fetch.c moves the fills asking that
 * node in the next loop iteration). One hook; NULL removes it. */
typedef void peers_down_fn(unsigned node);
void peers_set_down_hook(peers_down_fn *fn);
/* Accounting: <bytes> of body received from owner <node> for this node's clients; <bytes> of
 * body sent to peer <node> for its clients; a peer request answered from <node>, and its
 * cache status there (hit). */
void peers_count_asked(unsigned node, uint64_t bytes);
void peers_count_served(unsigned node, uint64_t bytes);
void peers_count_request(unsigned node, bool hit);

/*
 * Sends "PURGE <path>?identifier=<ident>" with the peer credential to every peer (up or not: one
 * that is down now may hold the object), which removes that object's chunks and sends it no
 * further; each answer or failure is counted (purges_sent, purges_failed) and a failure logged.
 * Never waits: the caller's own purge is answered at once. Nothing without a cluster.
 */
void peers_purge_all(const char *ident, const char *path, size_t path_len);

/* One peer, as /status and /metrics show it. */
struct peers_info {
    unsigned index;
    const char *addr;
    bool up;
    bool disagrees;         /* its digest is not ours */
    double since;           /* ev_now() of its last transition (0: never up) */
    uint64_t requests;      /* peer requests sent to it */
    uint64_t requests_hit;  /* of them, answered HIT there */
    uint64_t bytes_asked;   /* body bytes it sent us */
    uint64_t bytes_served;  /* body bytes we sent it */
    uint64_t failures;      /* requests to it that failed (heartbeats included) */
    uint64_t purges_sent;   /* purges it answered */
    uint64_t purges_failed; /* purges it did not answer 200 */
    uint64_t checks;        /* heartbeats sent */
};
typedef void peers_visit_fn(const struct peers_info *pi, void *arg);
/* Calls <fn> for every peer (not this node), in node order. */
void peers_foreach(peers_visit_fn *fn, void *arg);

#endif
