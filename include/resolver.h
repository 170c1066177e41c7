/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * resolver: host name -> addresses through c-ares driven by the libev loop, with a TTL cache and
 * coalescing (concurrent lookups of one name share one DNS query).
 *
 * Servers come from [upstream] dns (never the LAN's resolver unless dns = system). Results are
 * cached for their TTL (clamped to 1 s .. 1 h); failures for RESOLVER_NEG_TTL_MS.
 * Lifecycle: resolver_new() -> resolver_query()* / resolver_route()* -> resolver_free(). A
 * query's or route's callback fires exactly once, never before resolver_query() or
 * resolver_route() returns, unless it is cancelled first; an answer known at once (cached, a
 * literal, an override) asked from a loop callback comes in the same loop iteration, right after
 * that callback.
 * Owns: the c-ares channel, its socket watchers, the cache entries, the queries, the table of
 * addresses marked dead (address health, below).
 */
#ifndef CACHEPARTY_RESOLVER_H
#define CACHEPARTY_RESOLVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ev_loop;
struct config;
struct resolver;
struct resolver_query;

#define RESOLVER_MAX_ADDRS 8
#define RESOLVER_NEG_TTL_MS 2000

/*
 * Completion: <err> is 0 with n >= 1 addresses (IPv4 first, port set to the query's port), or
 * -ENOENT (no such name / no address), -ETIMEDOUT, -EIO (other DNS failure). <addrs> is borrowed
 * for the duration of the call. The query is freed after the callback returns.
 */
typedef void resolver_fn(void *arg, int err, const struct sockaddr_storage *addrs, size_t n);

/*
 * A route's completion: <err> is 0 with <addrs>[0..n) (1 <= n <= RESOLVER_MAX_ADDRS, borrowed
 * for the duration of the call) the addresses to try, in order (see resolver_route), or
 * <addrs> NULL, n 0 and <err> one of resolver_fn's errors, -EACCES (every address the name
 * resolves to is private, and not allow_private) or -EINVAL (<host> was said to be an IP
 * literal and is not one).
 */
typedef void resolver_route_fn(void *arg, int err, const struct sockaddr_storage *addrs, size_t n);

/* NULL on failure with a reason in <err>. Borrows <loop> and <cfg> (only read here). */
struct resolver *resolver_new(struct ev_loop *loop, const struct config *cfg, char *err,
                              size_t errlen);
/* Cancels every query without calling back, frees everything, sets *r = NULL. */
void resolver_free(struct resolver **r);

/* Start a lookup of <host> (a name, not a literal). Never NULL. */
struct resolver_query *resolver_query(struct resolver *r, const char *host, uint16_t port,
                                      resolver_fn *cb, void *arg);
/*
 * Where an origin <host>:<port> is reached, checked: the <override> address when not NULL
 * (as is: the operator chose it); else, when <host_is_ip>, the literal's address (as is: the
 * caller's admission decided on IP literals, see admit.h); else every address of a look-up
 * (resolver_query) that passes the private-address check (resolver_acceptable with
 * <allow_private>), IPv4 before IPv6 and in the DNS answer's order, those marked dead
 * (resolver_mark_dead) after all the others (resolver_order). The caller tries them in that
 * order (upstream does, see upstream.h).
 * Always asynchronous: even an answer known at once is delivered from the loop, never before
 * resolver_route() returns. <host> and <override> are borrowed (copied). Returns the handle,
 * never NULL; resolver_cancel() cancels it and <cb> then never fires. The handle is freed after
 * <cb> returns.
 */
struct resolver_query *resolver_route(struct resolver *r, const char *host, bool host_is_ip,
                                      uint16_t port, const struct sockaddr_storage *override,
                                      bool allow_private, resolver_route_fn *cb, void *arg);

/* Cancel a pending query: its callback will not fire. Sets *q = NULL. NULL-safe. */
void resolver_cancel(struct resolver_query **q);

/*
 * The address of an IP-literal host (IPv6 without brackets, or IPv4 in any spelling inet_aton
 * accepts) with <port>. Returns 0, or -EINVAL when <host> is not a literal. Pure.
 */
int resolver_literal(const char *host, uint16_t port, struct sockaddr_storage *out);

/*
 * True for addresses an origin must not have unless allow_private: unspecified, loopback,
 * RFC 1918 private, CGNAT 100.64/10, link-local, multicast, broadcast, documentation and other
 * special-purpose ranges, IPv6 ULA/link-local/multicast, and IPv4-mapped/NAT64 forms of those.
 * Pure.
 */
bool resolver_addr_is_private(const struct sockaddr *sa);

/*
 * Copies to <out> (room for <n>) the addresses of <addrs>[0..n) that an origin may have: those
 * that are not private (resolver_addr_is_private), or with <allow_private> all of them, in
 * their order. Returns how many (0: every one is private). Pure.
 */
size_t resolver_acceptable(const struct sockaddr_storage *addrs, size_t n, bool allow_private,
                           struct sockaddr_storage *out);

/*
 * Address health: an address (IP and port) whose connect failed (refused, unreachable, timed
 * out) is marked dead for RESOLVER_DEAD_MS, during which routes list it after every other
 * address of its name, so the next requests go elsewhere at once; it is still tried last, so a
 * name whose every address failed recovers as soon as one answers. A successful connect clears
 * the mark (resolver_mark_alive). At most RESOLVER_DEAD_MAX addresses are remembered; when the
 * table is full, the mark that ends soonest is forgotten. <now_ms> is util_now_ms() (a
 * parameter, for tests). Marking changes no answer in the DNS cache.
 */
#define RESOLVER_DEAD_MS 20000
#define RESOLVER_DEAD_MAX 64
void resolver_mark_dead(struct resolver *r, const struct sockaddr_storage *addr, uint64_t now_ms);
void resolver_mark_alive(struct resolver *r, const struct sockaddr_storage *addr);
/* Whether <addr> is marked dead at <now_ms>. */
bool resolver_is_dead(const struct resolver *r, const struct sockaddr_storage *addr,
                      uint64_t now_ms);
/* Reorders <addrs>[0..n) (n <= RESOLVER_MAX_ADDRS) in place: the addresses not marked dead at
 * <now_ms> first, then the dead ones, each group in its original order. */
void resolver_order(const struct resolver *r, struct sockaddr_storage *addrs, size_t n,
                    uint64_t now_ms);

#endif
