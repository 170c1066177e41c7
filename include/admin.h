/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * admin: the admin listener ([server] admin_listen, never reachable on `listen`).
 *   GET /metrics  Prometheus text exposition (version 0.0.4) of the counters and gauges
 *   GET /status   the same values as one JSON object (names without the cacheparty_ prefix)
 *   PURGE /PATH   with Host: (mapped to a cache identifier like a client request) or
 *                 ?identifier=ID: removes every chunk of that object; 200 with the count
 * Anything else: 404 (unknown path) or 405. One small request/response per connection turn,
 * keep-alive allowed; bounded buffers; request heads parsed by http1 (same strict rules).
 * Owns: the listening socket and its connections.
 */
#ifndef CACHEPARTY_ADMIN_H
#define CACHEPARTY_ADMIN_H

#include <stddef.h>

struct ev_loop;
struct cfg_addr;
struct cache;

struct admin_ctx {
    struct ev_loop *loop;
    struct cache *cache;
};

/* Listens on <addr>. Returns 0, or -1 with a reason in <err>. <ctx> is borrowed for life. */
int admin_start(struct admin_ctx *ctx, const struct cfg_addr *addr, char *err, size_t errlen);
/* Closes the listener and every admin connection. */
void admin_stop(void);
/* Open admin connections (for connections{kind="admin"}). */
unsigned admin_conn_count(void);

#endif
