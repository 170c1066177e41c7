/* SPDX-License-Identifier: BSD-2-Clause */
/* server: listeners, accept, admission (max_connections, EMFILE back-off). See server.h. */
#include "server.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "stats.h"
#include "tlsrelay.h"
#include "util.h"

#define SERVER_BACKLOG 1024
#define SERVER_ACCEPT_BATCH 64
#define SERVER_EMFILE_BACKOFF 0.1 /* seconds */

struct listener {
    ev_io io;
    struct cfg_addr addr;
    void (*on_conn)(int fd, const struct sockaddr_storage *peer); /* takes the fd */
};

static struct listener listeners[2 * CONFIG_MAX_ADDRS]; /* listen, then passthrough_listen */
static size_t n_listeners;
static struct conn_ctx *server_ctx;
static ev_timer backoff;
static bool paused;
static bool stopped;

unsigned server_conn_count(void)
{
    return conn_count() + tlsrelay_count();
}

static void http_conn(int fd, const struct sockaddr_storage *peer)
{
    conn_new(server_ctx, fd, peer);
}

static void accept_pause(void)
{
    if (paused)
        return;
    paused = true;
    g_stats.accept_paused++;
    for (size_t i = 0; i < n_listeners; i++)
        ev_io_stop(server_ctx->loop, &listeners[i].io);
}

static void accept_resume(void)
{
    if (!paused || stopped)
        return;
    paused = false;
    for (size_t i = 0; i < n_listeners; i++)
        ev_io_start(server_ctx->loop, &listeners[i].io);
}

static void on_backoff(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    if (server_conn_count() < g_cfg->max_connections)
        accept_resume();
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    struct listener *l = container_of(w, struct listener, io);
    for (int i = 0; i < SERVER_ACCEPT_BATCH; i++) {
        if (server_conn_count() >= g_cfg->max_connections) {
            log_warn("max_connections (%u) reached: not accepting", g_cfg->max_connections);
            accept_pause();
            return;
        }
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(w->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                return;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                log_warn("accept: %s: pausing for %.0f ms", strerror(errno),
                         SERVER_EMFILE_BACKOFF * 1000);
                accept_pause();
                ev_timer_stop(loop, &backoff);
                ev_timer_set(&backoff, SERVER_EMFILE_BACKOFF, 0.);
                ev_timer_start(loop, &backoff);
                return;
            }
            log_warn("accept: %s", strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        l->on_conn(fd, &peer);
    }
}

int server_listen_socket(const struct cfg_addr *addr, int backlog, const char *what, char *err,
                         size_t errlen)
{
    int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: socket: %s", what, addr->text, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 || listen(fd, backlog) < 0) {
        snprintf(err, errlen, "%s %s: %s", what, addr->text, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int add_listeners(const struct cfg_addr *addrs, size_t n, const char *what,
                         void (*on_conn)(int, const struct sockaddr_storage *), char *err,
                         size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const struct cfg_addr *a = &addrs[i];
        ASSERT(n_listeners < ARRAY_SIZE(listeners));
        int fd = server_listen_socket(a, SERVER_BACKLOG, what, err, errlen);
        if (fd < 0) {
            server_stop();
            return -1;
        }
        struct listener *l = &listeners[n_listeners++];
        l->addr = *a;
        l->on_conn = on_conn;
        ev_io_init(&l->io, on_accept, fd, EV_READ);
        if (!paused)
            ev_io_start(server_ctx->loop, &l->io);
        log_info("listening on %s%s", a->text, on_conn == http_conn ? "" : " (TLS passthrough)");
    }
    return 0;
}

int server_start(struct conn_ctx *ctx, const struct cfg_addr *addrs, size_t n, char *err,
                 size_t errlen)
{
    server_ctx = ctx;
    ev_init(&backoff, on_backoff);
    stopped = false;
    paused = false;
    return add_listeners(addrs, n, "listen", http_conn, err, errlen);
}

int server_start_tls(const struct cfg_addr *addrs, size_t n, char *err, size_t errlen)
{
    ASSERT(server_ctx != NULL);
    return add_listeners(addrs, n, "passthrough_listen", tlsrelay_accept, err, errlen);
}

void server_conn_closed(void)
{
    if (paused && !ev_is_active(&backoff) && server_conn_count() < g_cfg->max_connections)
        accept_resume();
}

void server_stop(void)
{
    stopped = true;
    if (server_ctx == NULL)
        return;
    ev_timer_stop(server_ctx->loop, &backoff);
    for (size_t i = 0; i < n_listeners; i++) {
        ev_io_stop(server_ctx->loop, &listeners[i].io);
        close(listeners[i].io.fd);
    }
    n_listeners = 0;
}
