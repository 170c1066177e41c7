/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * server: the listening sockets and connection admission. Accepts clients in batches, hands each
 * socket to conn_new(), and applies back-pressure: at max_connections, or when accept() fails for
 * lack of descriptors (EMFILE/ENFILE), it stops accepting (the kernel backlog holds the rest)
 * until a connection closes or a short back-off passes. Parses nothing.
 * The TLS relay's listeners (passthrough_listen) are accepted the same way and share the budget:
 * max_connections bounds HTTP plus TLS connections (conn_count() + tlsrelay_count()).
 * Owns: the listening sockets and their watchers.
 */
#ifndef CACHEPARTY_SERVER_H
#define CACHEPARTY_SERVER_H

#include <stddef.h>

struct conn_ctx;
struct cfg_addr;

/* Binds and listens on every address; returns 0, or -1 with a reason in <err>. */
int server_start(struct conn_ctx *ctx, const struct cfg_addr *addrs, size_t n, char *err,
                 size_t errlen);
/* Also listens on the TLS relay's addresses (after server_start); accepted sockets go to
 * tlsrelay_accept(). Returns 0, or -1 with a reason in <err> (every listener closed then). */
int server_start_tls(const struct cfg_addr *addrs, size_t n, char *err, size_t errlen);
/*
 * A non-blocking, close-on-exec listening TCP socket bound to <addr> (SO_REUSEADDR, IPv6-only
 * for IPv6). Returns the fd, or -1 with "<what> ADDR: reason" in <err>. Shared with admin.
 */
int server_listen_socket(const struct cfg_addr *addr, int backlog, const char *what, char *err,
                         size_t errlen);

/* Client connections open, HTTP and TLS alike: the one budget max_connections bounds (each costs
 * descriptors). */
unsigned server_conn_count(void);
/* Called when a connection (HTTP or TLS) was freed: resume accepting if it was paused. */
void server_conn_closed(void);
/* Stop accepting and close the listening sockets (shutdown). */
void server_stop(void);

#endif
