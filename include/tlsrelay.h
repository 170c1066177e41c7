/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * tlsrelay: the HTTPS pass-through on [tls] passthrough_listen. TLS is never terminated: the
 * relay reads the client's ClientHello (tlshello), checks its server name exactly as an HTTP Host
 * is checked (IP literal refused, cache-domains lists or allow_unlisted, the resolver, private
 * addresses refused unless allow_private; tls.override skips DNS), connects to that origin's
 * port 443, replays the bytes it read and then moves bytes both ways untouched.
 *
 * Accepting goes through server (same batches, EMFILE back-off, and the same
 * server.max_connections budget: HTTP and TLS connections are counted together).
 *
 * | phase   | waits for                                       | timer                    |
 * |---------|-------------------------------------------------|--------------------------|
 * | HELLO   | a whole ClientHello from the client             | handshake_timeout        |
 * | RESOLVE | the route (resolver_route: override, literal or | handshake_timeout        |
 * |         | look-up), always delivered from the loop        |                          |
 * | CONNECT | the non-blocking connect to the origin (a       | upstream connect_timeout |
 * |         | failed one goes on to the name's next address)  |                          |
 * | RELAY   | bytes either way; half-close passed on          | idle_timeout             |
 * | CLOSED  | nothing: freed before the callback returns      | -                        |
 *
 * Ownership: the module owns every relay (a list, for counting and shutdown); a relay owns its
 * two sockets, its pipes, its resolver query and its watchers. One line per connection goes to the
 * relay's own log ([tls] access, "[tls] access ..." lines) when it ends. Loop thread only.
 */
#ifndef CACHEPARTY_TLSRELAY_H
#define CACHEPARTY_TLSRELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct ev_loop;
struct resolver;
struct config;

/* What every relay borrows; owned by main, which keeps it alive until tlsrelay_fini(). */
struct tlsrelay_ctx {
    struct ev_loop *loop;
    struct resolver *resolver;
    bool has_override; /* [tls] override: every relay goes to override_addr */
    struct sockaddr_storage override_addr;
    void (*on_closed)(void); /* after a relay is freed (server resumes accepting, shutdown) */
};

/*
 * Opens the relay's log (<cfg> [tls] access) and remembers <ctx> (borrowed for life).
 * Returns 0, or -errno when the log cannot be opened (nothing else is started then).
 */
int tlsrelay_init(struct tlsrelay_ctx *ctx, const struct config *cfg)
    __attribute__((warn_unused_result));

/* Takes ownership of the accepted, non-blocking client socket <fd> (server calls it). */
void tlsrelay_accept(int fd, const struct sockaddr_storage *peer);

/* Relays open, in any phase (connections{kind="tls"}, max_connections). */
unsigned tlsrelay_count(void);

/*
 * Shutdown: relays still reading a ClientHello or resolving are closed now; established ones go
 * on until both sides close (main bounds this by server.shutdown_timeout).
 */
void tlsrelay_drain(void);

/* SIGHUP: reopens the log, or opens the new path of <cfg>. Returns 0 or -errno (old one kept). */
int tlsrelay_reconfigure(const struct config *cfg);
/* SIGUSR1: reopens the log file (logrotate). */
void tlsrelay_reopen_log(void);

/* Closes every relay (outcome "shutdown"), then the log. Safe to call when init never ran. */
void tlsrelay_fini(void);

#endif
