/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_peers: the cluster's health and purges on a real libev loop. This node is 127.0.3.1 of a
 * cluster of two; the other node, 127.0.3.2, is scripted here: a loopback listening socket
 * served by ev watchers on the same loop, which reads each request head, checks its peer
 * credential with cluster_verify (from this node's address: the source binding) and answers as
 * the test says (204 with our digest, 204 with another, 503, nothing). Every test ends with
 * upstream_live() == 0.
 */
#include "peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <ev.h>

#include "cluster.h"
#include "config.h"
#include "log.h"
#include "stats.h"
#include "upstream.h"
#include "util.h"

enum answer {
    ANS_DIGEST,  /* 204 with our digest */
    ANS_OTHER,   /* 204 with another digest */
    ANS_503,     /* 503 */
    ANS_SILENT,  /* nothing */
    ANS_200,     /* 200 (a purge) */
    ANS_REFUSED, /* 403 with X-Cacheparty-Peer-Refused (another secret or node list there) */
};

/* The other node, scripted: up to NODE_CONNS connections at once (a heartbeat and a purge
 * may connect in the same loop iteration), each answered by <ans>. */
#define NODE_CONNS 4

struct node;

struct nconn {
    struct node *n;
    int fd;
    ev_io io;
    char in[4096];
    size_t in_len;
};

struct node {
    struct ev_loop *loop;
    int lfd;
    ev_io lio;
    struct nconn conns[NODE_CONNS];
    enum answer ans;
    bool close_after; /* close each connection after its answer (a pooled socket goes stale) */
    unsigned requests;
    unsigned verified; /* requests whose credential held, from this node's address */
    char last_line[256];
    char last_purge[256];
    struct sockaddr_storage from;
    const struct cluster *cl;
};

static void nconn_drop(struct nconn *k)
{
    if (k->fd >= 0) {
        ev_io_stop(k->n->loop, &k->io);
        close(k->fd);
        k->fd = -1;
    }
    k->in_len = 0;
}

static void node_drop(struct node *n)
{
    for (int i = 0; i < NODE_CONNS; i++)
        nconn_drop(&n->conns[i]);
}

static void on_node_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct nconn *k = container_of(w, struct nconn, io);
    struct node *n = k->n;
    ssize_t r = recv(k->fd, k->in + k->in_len, sizeof(k->in) - 1 - k->in_len, 0);
    if (r <= 0) {
        nconn_drop(k);
        return;
    }
    k->in_len += (size_t)r;
    k->in[k->in_len] = '\0';
    char *end = strstr(k->in, "\r\n\r\n");
    if (end == NULL)
        return;
    n->requests++;
    /* "METHOD TARGET HTTP/1.1", Host, X-Cacheparty-Peer */
    char method[16], target[200], host[100] = "", cred[100] = "";
    assert_int_equal(sscanf(k->in, "%15s %199s", method, target), 2);
    snprintf(n->last_line, sizeof(n->last_line), "%s %s", method, target);
    if (strcmp(method, "PURGE") == 0)
        snprintf(n->last_purge, sizeof(n->last_purge), "%s %s", method, target);
    const char *h = strstr(k->in, "\r\nHost: ");
    if (h != NULL)
        sscanf(h + 8, "%99[^\r]", host);
    const char *c = strstr(k->in, "\r\nX-Cacheparty-Peer: ");
    if (c != NULL)
        sscanf(c + 21, "%99[^\r]", cred);
    unsigned from;
    if (cluster_verify(n->cl, cred, strlen(cred), (const struct sockaddr *)&n->from,
                       (int64_t)ev_now(n->loop), method, host, target, NULL,
                       &from) == CLUSTER_PEER_OK &&
        from == 0)
        n->verified++;
    char out[512], dg[CLUSTER_MAC_HEX + 1];
    int len = 0;
    switch (n->ans) {
    case ANS_DIGEST:
    case ANS_OTHER:
        snprintf(dg, sizeof(dg), "%s", peers_digest());
        if (n->ans == ANS_OTHER)
            dg[0] = dg[0] == '0' ? '1' : '0';
        len = snprintf(out, sizeof(out), "HTTP/1.1 204 No Content\r\n%s: %s\r\n\r\n",
                       PEERS_DIGEST_FIELD, dg);
        break;
    case ANS_503:
        len = snprintf(out, sizeof(out), "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n");
        break;
    case ANS_200:
        len = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npurged 1\n");
        break;
    case ANS_REFUSED:
        len = snprintf(out, sizeof(out),
                       "HTTP/1.1 403 Forbidden\r\n%s: mac\r\nContent-Length: 0\r\n\r\n",
                       PEERS_REFUSED_FIELD);
        break;
    case ANS_SILENT:
        k->in_len = 0;
        return;
    }
    assert_int_equal(send(k->fd, out, (size_t)len, MSG_NOSIGNAL), len);
    k->in_len = 0;
    if (n->close_after)
        nconn_drop(k);
}

static void on_node_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct node *n = container_of(w, struct node, lio);
    socklen_t sl = sizeof(n->from);
    int fd = accept(n->lfd, (struct sockaddr *)&n->from, &sl);
    if (fd < 0)
        return;
    struct nconn *k = &n->conns[0];
    for (int i = 0; i < NODE_CONNS; i++)
        if (n->conns[i].fd < 0) {
            k = &n->conns[i];
            break;
        }
    nconn_drop(k); /* (all taken: the first one goes) */
    k->fd = fd;
    ev_io_init(&k->io, on_node_readable, fd, EV_READ);
    ev_io_start(loop, &k->io);
}

struct fx {
    struct ev_loop *loop;
    struct config *cfg;
    struct cluster cl;
    struct cluster cl2; /* the same cluster, as the other node sees it */
    struct node node;
    ev_timer tick;
};

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

/* Runs the loop until <cond> holds, for at most 30 s of loop time (what takes one or two
 * heartbeats of 1 s, or two heartbeat timeouts of 3 s). */
#define RUN_UNTIL(f, cond)                                                                         \
    do {                                                                                           \
        ev_tstamp until_ = ev_time() + 30;                                                         \
        while (!(cond) && ev_time() < until_)                                                      \
            ev_run((f)->loop, EVRUN_ONCE);                                                         \
        assert_true(cond);                                                                         \
    } while (0)

static int fx_setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    char err[256];
    g_log_level = CFG_LOG_ERROR;
    memset(&g_stats, 0, sizeof(g_stats));
    f->loop = ev_loop_new(EVFLAG_AUTO);
    if (config_load_string("t", "[server]\nlisten=127.0.0.1:1\n", &f->cfg, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    g_cfg = f->cfg;
    /* The other node's socket first: its port is the cluster's. */
    struct node *n = &f->node;
    n->loop = f->loop;
    for (int i = 0; i < NODE_CONNS; i++) {
        n->conns[i].n = n;
        n->conns[i].fd = -1;
    }
    n->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.3.2", &a.sin_addr);
    assert_int_equal(bind(n->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(n->lfd, 8), 0);
    socklen_t sl = sizeof(a);
    getsockname(n->lfd, (struct sockaddr *)&a, &sl);
    unsigned port = ntohs(a.sin_port);
    char nodes[64], self[32];
    snprintf(nodes, sizeof(nodes), "127.0.3.1:%u, 127.0.3.2:%u", port, port);
    snprintf(self, sizeof(self), "127.0.3.1:%u", port);
    assert_int_equal(cluster_parse(&f->cl, nodes, self, "test-peers-secret-0123", err, sizeof(err)),
                     0);
    snprintf(self, sizeof(self), "127.0.3.2:%u", port);
    assert_int_equal(
        cluster_parse(&f->cl2, nodes, self, "test-peers-secret-0123", err, sizeof(err)), 0);
    n->cl = &f->cl2;
    ev_io_init(&n->lio, on_node_accept, n->lfd, EV_READ);
    ev_io_start(f->loop, &n->lio);
    ev_timer_init(&f->tick, on_tick, 0.02, 0.02);
    ev_timer_start(f->loop, &f->tick);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    peers_stop();
    for (int i = 0; i < 2; i++)
        ev_run(f->loop, EVRUN_NOWAIT);
    assert_int_equal(upstream_live(), 0);
    node_drop(&f->node);
    if (f->node.lfd >= 0) {
        ev_io_stop(f->loop, &f->node.lio);
        close(f->node.lfd);
    }
    ev_timer_stop(f->loop, &f->tick);
    ev_loop_destroy(f->loop);
    g_cfg = NULL;
    config_free(&f->cfg);
    free(f);
    return 0;
}

static void on_info(const struct peers_info *pi, void *arg)
{
    *(struct peers_info *)arg = *pi;
}

static struct peers_info peer(void)
{
    struct peers_info pi;
    memset(&pi, 0, sizeof(pi));
    peers_foreach(on_info, &pi);
    return pi;
}

static void test_no_cluster(void **state)
{
    struct fx *f = *state;
    peers_start(f->loop, NULL, 1 << 20);
    assert_null(peers_cluster());
    assert_int_equal(peers_live(), 0);
    assert_null(peers_source());
    peers_failed(1, "x"); /* nothing to fail */
    peers_purge_all("steam", "/a", 2);
    assert_int_equal(upstream_live(), 0);
}

static void test_up_with_our_digest_from_our_address(void **state)
{
    struct fx *f = *state;
    peers_start(f->loop, &f->cl, 1 << 20);
    /* Down until its first heartbeat is answered; this node always live. */
    assert_int_equal(peers_live(), 1u << 0);
    assert_false(peer().up);
    f->node.ans = ANS_DIGEST;
    RUN_UNTIL(f, peer().up);
    assert_int_equal(peers_live(), 3u);
    /* The heartbeat came from this node's address, with a credential that holds. */
    assert_string_equal(f->node.last_line, "GET /lancache-heartbeat");
    assert_true(f->node.verified >= 1);
    assert_int_equal(f->node.verified, f->node.requests);
    assert_false(peer().disagrees);
    /* A failed fill: down at once, back up on the next heartbeat. */
    peers_failed(1, "test");
    assert_int_equal(peers_live(), 1u);
    assert_int_equal(peer().failures, 1);
    RUN_UNTIL(f, peer().up);
    peers_failed(0, "itself"); /* this node is never down */
    assert_int_equal(peers_live(), 3u);
}

static void test_other_digest_never_up(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_OTHER;
    peers_start(f->loop, &f->cl, 1 << 20);
    RUN_UNTIL(f, peer().disagrees);
    assert_false(peer().up);
    assert_int_equal(peers_live(), 1u);
    /* It agrees (a fixed config): up. */
    f->node.ans = ANS_DIGEST;
    RUN_UNTIL(f, peer().up);
    assert_false(peer().disagrees);
    /* Our credential refused there (another secret or node list now): it disagrees, not
     * merely down, from a peer that was up and agreed. */
    f->node.ans = ANS_REFUSED;
    RUN_UNTIL(f, peer().disagrees);
    assert_false(peer().up);
    assert_int_equal(peers_live(), 1u);
}

static void test_down_after_two_failures(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_DIGEST;
    peers_start(f->loop, &f->cl, 1 << 20);
    RUN_UNTIL(f, peer().up);
    f->node.ans = ANS_503;
    unsigned checks = (unsigned)peer().checks;
    /* One failed heartbeat leaves it up; the second takes it down. */
    RUN_UNTIL(f, peer().failures >= 1);
    assert_true(peer().up);
    RUN_UNTIL(f, !peer().up);
    assert_int_equal(peer().failures, 2);
    assert_true(peer().checks >= checks + 2);
}

static void test_purge_sent_on_with_a_credential(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_200;
    peers_start(f->loop, &f->cl, 1 << 20);
    peers_purge_all("steam", "/depot/1/chunk/ab", 17);
    RUN_UNTIL(f, peer().purges_sent == 1);
    assert_int_equal(peer().purges_failed, 0);
    assert_string_equal(f->node.last_purge, "PURGE /depot/1/chunk/ab?identifier=steam");
    assert_int_equal(f->node.verified, f->node.requests);
    /* Refused there: counted as failed. */
    f->node.ans = ANS_503;
    peers_purge_all("steam", "/depot/1/chunk/cd", 17);
    RUN_UNTIL(f, peer().purges_failed == 1);
}

static void test_purges_that_cannot_go_are_counted(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_SILENT;
    peers_start(f->loop, &f->cl, 1 << 20);
    /* An identifier the peer would refuse (an IPv6 literal host's): not sent, counted. */
    peers_purge_all("[::1]:8080", "/a", 2);
    assert_int_equal(peer().purges_failed, 1);
    /* A burst to a peer that does not answer: 16 in flight, the rest refused here. */
    for (int i = 0; i < 20; i++)
        peers_purge_all("steam", "/depot/1/chunk/ab", 17);
    assert_int_equal(peer().purges_failed, 1 + 4);
    assert_int_equal(peer().purges_sent, 0);
}

static void test_silent_peer_down_after_two_timeouts(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_DIGEST;
    peers_start(f->loop, &f->cl, 1 << 20);
    RUN_UNTIL(f, peer().up);
    /* It takes the heartbeats and never answers: each one times out, the second takes it
     * down, and no request of it is left behind. */
    f->node.ans = ANS_SILENT;
    RUN_UNTIL(f, peer().failures >= 1);
    assert_true(peer().up);
    RUN_UNTIL(f, !peer().up);
    assert_int_equal(peer().failures, 2);
    f->node.ans = ANS_DIGEST;
    RUN_UNTIL(f, peer().up);
}

/* A peer's heartbeats over sockets that it closes after each answer (so a pooled one is stale
 * when taken), then a peer that refuses connections: none of it is an origin's traffic. */
static void test_peer_traffic_not_counted_as_origins(void **state)
{
    struct fx *f = *state;
    f->node.ans = ANS_DIGEST;
    f->node.close_after = true;
    peers_start(f->loop, &f->cl, 1 << 20);
    RUN_UNTIL(f, peer().up);
    unsigned checks = (unsigned)peer().checks;
    RUN_UNTIL(f, peer().checks >= checks + 3);
    node_drop(&f->node);
    ev_io_stop(f->loop, &f->node.lio);
    close(f->node.lfd);
    f->node.lfd = -1;
    RUN_UNTIL(f, !peer().up);
    assert_int_equal(g_stats.upstream_requests, 0);
    assert_int_equal(g_stats.upstream_conn_new, 0);
    assert_int_equal(g_stats.upstream_conn_reused, 0);
    assert_int_equal(g_stats.upstream_retries, 0);
    assert_int_equal(g_stats.upstream_connect_failover, 0);
    assert_int_equal(g_stats.upstream_queued, 0);
    assert_int_equal(g_stats.upstream_err_connect, 0);
    assert_int_equal(g_stats.upstream_err_io, 0);
    assert_int_equal(g_stats.upstream_err_timeout, 0);
    assert_int_equal(g_stats.upstream_err_proto, 0);
    assert_int_equal(g_stats.upstream_bytes, 0);
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_no_cluster),
        FX(test_up_with_our_digest_from_our_address),
        FX(test_other_digest_never_up),
        FX(test_down_after_two_failures),
        FX(test_purge_sent_on_with_a_credential),
        FX(test_purges_that_cannot_go_are_counted),
        FX(test_silent_peer_down_after_two_timeouts),
        FX(test_peer_traffic_not_counted_as_origins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
