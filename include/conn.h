/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn: one client (downstream) HTTP/1.1 connection: its state machine, keep-alive, pipelining
 * (one request at a time, answered in order), timeouts, and writing to the client with
 * back-pressure. It asks the resolver and upstream for what it forwards; it never talks to an
 * origin socket itself.
 *
 * Lifecycle: conn_new() on accept -> ... -> conn_close() (stops watchers, queues) -> freed by the
 * reaper (an ev_prepare) after the current loop iteration, so no callback up the stack ever sees
 * a freed conn. The module keeps a list of all live conns for draining at shutdown.
 */
#ifndef CACHEPARTY_CONN_H
#define CACHEPARTY_CONN_H

#include <stdbool.h>
#include <sys/socket.h>

struct ev_loop;
struct resolver;
struct upool;
struct cache;

/* What every connection borrows; owned by main. */
struct conn_ctx {
    struct ev_loop *loop;
    struct resolver *resolver;
    struct upool *upool;
    struct cache *cache; /* the chunk cache; NULL: forward everything uncached */
    bool has_override;   /* [upstream] override: every request goes to override_addr */
    struct sockaddr_storage override_addr;
    void (*on_closed)(void); /* after a conn is freed (server re-enables accepting) */
};

/* Starts the module (the reaper). */
void conn_module_init(struct conn_ctx *ctx);
/* Frees every remaining conn at once and stops the reaper. */
void conn_module_fini(void);

/* Takes ownership of the accepted, non-blocking <fd>. */
void conn_new(struct conn_ctx *ctx, int fd, const struct sockaddr_storage *peer);

/* Number of live connections. */
unsigned conn_count(void);

/* Graceful drain: idle connections close now, busy ones after their current response. */
void conn_drain_all(void);

#endif
