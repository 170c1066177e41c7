/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * peers: health and accounting of the other cluster nodes. See peers.h.
 *
 * One struct peer per node (this node's entry unused). A heartbeat is one upstream request, of a
 * pool of this module's own (the fills' pool may have every slot of a node busy: a heartbeat
 * must not wait behind them); the check timer bounds it to PEERS_TIMEOUT_MS. A purge is one
 * upstream request of that pool too, in a list of its own, each freed when it ends.
 */
#include "peers.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "cluster.h"
#include "config.h"
#include "http1.h"
#include "log.h"
#include "upool.h"
#include "upstream.h"
#include "util.h"

#define PEER_REQ_MAX 2048
/* Purges in flight per peer at most (and at most half of max_per_origin, the slots its pool
 * gives one address): a burst of purges never holds a heartbeat back long enough to take a
 * peer down. */
#define PEERS_PURGES_PER_PEER 16

struct peer {
    bool up;
    bool disagrees;
    unsigned fails; /* heartbeats failed in a row */
    double since;
    struct upstream *hb; /* owns: the heartbeat in flight */
    bool hb_ok;          /* its head said 204 with our digest */
    bool hb_other;       /* its head had another digest, or refused our credential */
    char hb_refused[16]; /* the reason it gave (X-Cacheparty-Peer-Refused), or "" */
    ev_tstamp hb_at;
    struct peers_info st; /* the counters (addr, index, up filled in at each visit) */
};

struct purge {
    struct purge *next, **pprev;
    unsigned node;
    struct upstream *up; /* owns */
    int status;
};

static struct ev_loop *ploop;
static struct upool *ppool;       /* owns: its own, so that checks never queue behind fills */
static const struct cluster *pcl; /* &cl_copy, or NULL */
static struct cluster cl_copy;    /* (a reload frees the config; the cluster stays fixed) */
static char digest[CLUSTER_MAC_HEX + 1];
static struct peer peers[CLUSTER_MAX_NODES];
static struct sockaddr_storage src;
static ev_timer check_timer;
static struct purge *purges;

const struct cluster *peers_cluster(void)
{
    return pcl;
}

const char *peers_digest(void)
{
    return digest;
}

const struct sockaddr_storage *peers_source(void)
{
    return pcl != NULL ? &src : NULL;
}

uint32_t peers_live(void)
{
    if (pcl == NULL)
        return 0;
    uint32_t live = 1u << pcl->self;
    for (unsigned i = 0; i < pcl->n; i++)
        if (peers[i].up)
            live |= 1u << i;
    return live;
}

static peers_down_fn *down_hook;

void peers_set_down_hook(peers_down_fn *fn)
{
    down_hook = fn;
}

static void set_up(unsigned node, bool up, const char *why)
{
    struct peer *p = &peers[node];
    if (p->up == up)
        return;
    p->up = up;
    p->since = ev_now(ploop);
    if (up)
        log_info("cluster: peer %s is up", pcl->nodes[node].addr);
    else
        log_info("cluster: peer %s is down (%s): its chunks go to the next node of their rank",
                 pcl->nodes[node].addr, why);
    if (!up && down_hook != NULL)
        down_hook(node);
}

void peers_failed(unsigned node, const char *why)
{
    if (pcl == NULL || node >= pcl->n || node == pcl->self)
        return;
    peers[node].st.failures++;
    set_up(node, false, why);
}

void peers_count_asked(unsigned node, uint64_t bytes)
{
    if (pcl != NULL && node < pcl->n)
        peers[node].st.bytes_asked += bytes;
}

void peers_count_served(unsigned node, uint64_t bytes)
{
    if (pcl != NULL && node < pcl->n)
        peers[node].st.bytes_served += bytes;
}

void peers_count_request(unsigned node, bool hit)
{
    if (pcl == NULL || node >= pcl->n)
        return;
    peers[node].st.requests++;
    if (hit)
        peers[node].st.requests_hit++;
}

/* A request head to node <node>: <method> <target>, Host <host>, signed. */
static size_t peer_head(unsigned node, const char *method, const char *host, const char *target,
                        char *out, size_t cap)
{
    char cred[CLUSTER_PEER_MAX];
    cluster_sign(pcl, (int64_t)ev_now(ploop), method, host, target, NULL, cred, sizeof(cred));
    (void)node;
    int n = snprintf(out, cap,
                     "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cacheparty-peer\r\n"
                     "X-Cacheparty-Peer: %s\r\n\r\n",
                     method, target, host, cred);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static struct upstream *peer_request(unsigned node, const char *head, size_t len,
                                     const struct upstream_sink *sink, void *arg)
{
    struct upstream_req ur;
    memset(&ur, 0, sizeof(ur));
    ur.addrs = &pcl->nodes[node].sa;
    ur.n_addrs = 1;
    ur.head = head;
    ur.head_len = len;
    ur.method = H1_M_GET;
    ur.src = &src;
    return upstream_start(ploop, ppool, &ur, sink, arg);
}

/* ---- heartbeats ---------------------------------------------------------------------------- */

static unsigned peer_index(const struct peer *p)
{
    return (unsigned)(p - peers);
}

static void hb_result(struct peer *p, bool ok, const char *why)
{
    unsigned node = peer_index(p);
    if (ok) {
        p->fails = 0;
        if (p->disagrees)
            log_info("cluster: peer %s agrees now", pcl->nodes[node].addr);
        p->disagrees = false;
        set_up(node, true, NULL);
        return;
    }
    p->st.failures++;
    if (p->hb_other) {
        if (!p->disagrees && p->hb_refused[0] == '\0')
            log_warn("cluster: peer %s has another chunk size, node list or secret (its digest "
                     "differs): not used",
                     pcl->nodes[node].addr);
        else if (!p->disagrees)
            log_warn("cluster: peer %s refuses our credential (%s: %s): not used",
                     pcl->nodes[node].addr, p->hb_refused,
                     strcmp(p->hb_refused, "time") == 0 ? "the clocks differ by more than 300 s"
                     : strcmp(p->hb_refused, "address") == 0
                         ? "it does not see our connections come from our address"
                     : strcmp(p->hb_refused, "mac") == 0 ? "another node list or secret there"
                                                         : "it does not read our credential");
        p->disagrees = true;
        set_up(node, false, "it disagrees");
        return;
    }
    if (++p->fails >= PEERS_FALL)
        set_up(node, false, why);
}

static void hb_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    struct peer *p = arg;
    const struct h1_field *f = h1_find(buf, resp->fields, resp->n_fields, PEERS_DIGEST_FIELD);
    bool same = f != NULL && f->value.len == CLUSTER_MAC_HEX &&
                memcmp(buf + f->value.off, digest, CLUSTER_MAC_HEX) == 0;
    p->hb_ok = resp->status == 204 && same;
    /* Another digest, or our credential refused there (another secret or node list): the
     * nodes disagree, which no retry mends. */
    const struct h1_field *r = resp->status == 403
                                   ? h1_find(buf, resp->fields, resp->n_fields, PEERS_REFUSED_FIELD)
                                   : NULL;
    p->hb_other = (resp->status == 204 && !same) || r != NULL;
    p->hb_refused[0] = '\0';
    if (r != NULL) {
        size_t n =
            r->value.len < sizeof(p->hb_refused) - 1 ? r->value.len : sizeof(p->hb_refused) - 1;
        memcpy(p->hb_refused, buf + r->value.off, n);
        p->hb_refused[n] = '\0';
        for (size_t i = 0; i < n; i++) /* (logged: letters only) */
            if (!((p->hb_refused[i] >= 'a' && p->hb_refused[i] <= 'z') ||
                  (p->hb_refused[i] >= 'A' && p->hb_refused[i] <= 'Z')))
                p->hb_refused[i] = '?';
    }
}

static size_t hb_body(void *arg, const char *data, size_t len)
{
    (void)arg;
    (void)data;
    return len;
}

static void hb_done(void *arg, enum up_err err)
{
    struct peer *p = arg;
    p->hb = NULL;
    hb_result(p, err == UP_OK && p->hb_ok,
              err == UP_OK ? "heartbeat refused" : upstream_strerror(err));
}

static const struct upstream_sink hb_sink = {hb_head, hb_body, hb_done};

static void on_check_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)t;
    (void)revents;
    ev_tstamp now = ev_now(ploop);
    for (unsigned i = 0; i < pcl->n; i++) {
        struct peer *p = &peers[i];
        if (i == pcl->self)
            continue;
        if (p->hb != NULL) {
            if (now - p->hb_at < (double)PEERS_TIMEOUT_MS / 1000.0)
                continue;
            upstream_cancel(&p->hb);
            hb_result(p, false, "heartbeat timeout");
        }
        char head[PEER_REQ_MAX];
        size_t n =
            peer_head(i, "GET", pcl->nodes[i].addr, "/lancache-heartbeat", head, sizeof(head));
        ASSERT(n > 0);
        p->hb_ok = p->hb_other = false;
        p->hb_at = now;
        p->st.checks++;
        p->hb = peer_request(i, head, n, &hb_sink, p);
    }
}

/* ---- purges -------------------------------------------------------------------------------- */

static void purge_free(struct purge *pu)
{
    upstream_cancel(&pu->up);
    *pu->pprev = pu->next;
    if (pu->next != NULL)
        pu->next->pprev = pu->pprev;
    free(pu);
}

static void purge_head(void *arg, const char *buf, const struct h1_resp *resp)
{
    (void)buf;
    struct purge *pu = arg;
    pu->status = resp->status;
}

static void purge_done(void *arg, enum up_err err)
{
    struct purge *pu = arg;
    pu->up = NULL;
    struct peer *p = &peers[pu->node];
    if (err == UP_OK && pu->status == 200) {
        p->st.purges_sent++;
    } else {
        p->st.purges_failed++;
        log_warn("cluster: purge not done by peer %s: %s", pcl->nodes[pu->node].addr,
                 err != UP_OK ? upstream_strerror(err) : "refused");
    }
    purge_free(pu);
}

static const struct upstream_sink purge_sink = {purge_head, hb_body, purge_done};

void peers_purge_all(const char *ident, const char *path, size_t path_len)
{
    if (pcl == NULL)
        return;
    const char *why = path_len > PEER_REQ_MAX / 2 ? "its path is too long to send"
                      : !cluster_purge_ident_ok(ident, strlen(ident))
                          ? "its identifier cannot be sent"
                          : NULL;
    if (why != NULL) {
        /* (not sent: each peer keeps the object; counted, and said) */
        for (unsigned i = 0; i < pcl->n; i++)
            if (i != pcl->self)
                peers[i].st.purges_failed++;
        log_warn("cluster: purge of %.*s [%s] not sent to the peers: %s",
                 (int)(path_len < 200 ? path_len : 200), path, ident, why);
        return;
    }
    char target[PEER_REQ_MAX];
    snprintf(target, sizeof(target), "%.*s?identifier=%s", (int)path_len, path, ident);
    /* Half of the slots the pool gives one address at most, per peer: a burst of purges to a
     * slow peer never holds its heartbeats back (nor another peer's purges). */
    unsigned cap = g_cfg->max_per_origin / 2 < PEERS_PURGES_PER_PEER ? g_cfg->max_per_origin / 2
                                                                     : PEERS_PURGES_PER_PEER;
    for (unsigned i = 0; i < pcl->n; i++) {
        if (i == pcl->self)
            continue;
        unsigned in_flight = 0;
        for (const struct purge *pu = purges; pu != NULL; pu = pu->next)
            in_flight += pu->node == i;
        if (in_flight >= (cap > 0 ? cap : 1)) {
            peers[i].st.purges_failed++;
            log_warn("cluster: purge of %.*s [%s] not sent to peer %s: %u purges in flight there",
                     (int)(path_len < 200 ? path_len : 200), path, ident, pcl->nodes[i].addr,
                     in_flight);
            continue;
        }
        char head[PEER_REQ_MAX + 512];
        size_t n = peer_head(i, "PURGE", pcl->nodes[i].addr, target, head, sizeof(head));
        if (n == 0) {
            peers[i].st.purges_failed++;
            continue;
        }
        struct purge *pu = xcalloc(1, sizeof(*pu));
        pu->node = i;
        pu->next = purges;
        if (purges != NULL)
            purges->pprev = &pu->next;
        pu->pprev = &purges;
        purges = pu;
        pu->up = peer_request(i, head, n, &purge_sink, pu);
    }
}

/* ---- life ---------------------------------------------------------------------------------- */

void peers_start(struct ev_loop *loop, const struct cluster *cl, uint64_t chunk_size)
{
    ploop = loop;
    memset(peers, 0, sizeof(peers));
    if (cl == NULL)
        return;
    ppool = upool_new(loop);
    cl_copy = *cl;
    pcl = cl = &cl_copy;
    cluster_digest(cl, chunk_size, digest);
    src = cl->nodes[cl->self].sa;
    for (unsigned i = 0; i < cl->n; i++) {
        peers[i].st.index = i;
        peers[i].st.addr = cl->nodes[i].addr;
    }
    ev_timer_init(&check_timer, on_check_timer, 0., (double)PEERS_CHECK_MS / 1000.0);
    ev_timer_start(loop, &check_timer);
    ev_unref(loop); /* (the checks alone do not keep the loop running) */
    log_info("cluster: node %u of %u (%s), chunk size %llu", cl->self + 1, cl->n,
             cl->nodes[cl->self].addr, (unsigned long long)chunk_size);
}

void peers_stop(void)
{
    if (pcl == NULL)
        return;
    if (ev_is_active(&check_timer)) {
        ev_ref(ploop);
        ev_timer_stop(ploop, &check_timer);
    }
    for (unsigned i = 0; i < pcl->n; i++)
        upstream_cancel(&peers[i].hb);
    while (purges != NULL)
        purge_free(purges);
    upool_free(&ppool);
}

void peers_foreach(peers_visit_fn *fn, void *arg)
{
    if (pcl == NULL)
        return;
    for (unsigned i = 0; i < pcl->n; i++) {
        if (i == pcl->self)
            continue;
        struct peers_info pi = peers[i].st;
        pi.up = peers[i].up;
        pi.disagrees = peers[i].disagrees;
        pi.since = peers[i].since;
        fn(&pi, arg);
    }
}
