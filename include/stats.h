/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * stats: the process-wide counters table (g_stats), written by the loop thread only.
 * One X-macro list yields the struct fields and their names for export. Counters only count:
 * no logic lives here. Every handled failure bumps one of these.
 */
#ifndef CACHEPARTY_STATS_H
#define CACHEPARTY_STATS_H

#include <stddef.h>
#include <stdint.h>

/* X(name, kind, help): kind is "counter" or "gauge". */
#define STATS_FIELDS(X)                                                                            \
    X(conn_accepted, counter, "client connections accepted")                                       \
    X(conn_open, gauge, "client connections open")                                                 \
    X(accept_paused, counter, "times accepting paused (max_connections or EMFILE)")                \
    X(requests, counter, "client requests parsed or refused")                                      \
    X(resp_1xx, counter, "responses 1xx")                                                          \
    X(resp_2xx, counter, "responses 2xx")                                                          \
    X(resp_3xx, counter, "responses 3xx")                                                          \
    X(resp_4xx, counter, "responses 4xx")                                                          \
    X(resp_5xx, counter, "responses 5xx")                                                          \
    X(bytes_hit, counter, "response body bytes served from cache")                                 \
    X(bytes_miss, counter, "response body bytes served from an origin fetch")                      \
    X(bytes_bypass, counter, "response body bytes served uncached (bypass)")                       \
    X(client_bad_request, counter, "requests refused as malformed (400/414/431/505)")              \
    X(client_timeout, counter, "client connections closed by a timeout")                           \
    X(client_reset, counter, "client connections lost mid-response")                               \
    X(loops, counter, "requests refused as loops (508)")                                           \
    X(forbidden, counter, "requests refused as not allowed (403)")                                 \
    X(upstream_requests, counter, "requests sent to origins")                                      \
    X(upstream_bytes, counter, "response body bytes received from origins")                        \
    X(upstream_conn_new, counter, "origin connections opened")                                     \
    X(upstream_conn_reused, counter, "origin requests on a pooled keep-alive connection")          \
    X(upstream_retries, counter, "requests retried after a pooled connection failed")              \
    X(upstream_queued, counter, "requests that waited for max_per_origin")                         \
    X(upstream_err_connect, counter, "origin connect failures")                                    \
    X(upstream_err_timeout, counter, "origin timeouts")                                            \
    X(upstream_err_proto, counter, "invalid origin responses")                                     \
    X(upstream_err_io, counter, "origin connections lost mid-response")                            \
    X(fetches, counter, "cache fills started (one upstream request for a run of chunks)")          \
    X(fetch_resumed, counter, "cache fills resumed after an origin fault mid-body")                \
    X(fetch_failed, counter, "cache fills that failed for good")                                   \
    X(fetch_split, counter, "runs cut so that a reader deep inside gets its own fetch")            \
    X(fetch_two_part, counter, "chunks filled in two parts for a reader starting deep inside")     \
    X(dns_queries, counter, "DNS queries sent")                                                    \
    X(dns_cache_hits, counter, "name lookups answered from the DNS cache")                         \
    X(dns_failures, counter, "name lookups that failed")                                           \
    X(tls_accepted, counter, "TLS connections accepted on passthrough_listen")                     \
    X(tls_relayed, counter, "TLS connections connected to their origin and relayed")               \
    X(tls_bytes_up, counter, "TLS bytes relayed from clients to origins")                          \
    X(tls_bytes_down, counter, "TLS bytes relayed from origins to clients")                        \
    X(tls_refused_no_sni, counter, "TLS connections refused: ClientHello without a server name")   \
    X(tls_refused_not_tls, counter, "TLS connections refused: not a TLS handshake")                \
    X(tls_refused_malformed, counter, "TLS connections refused: malformed or oversized hello")     \
    X(tls_refused_ip_literal, counter, "TLS connections refused: IP-literal server name")          \
    X(tls_refused_unlisted, counter, "TLS connections refused: name not in the lists")             \
    X(tls_refused_private, counter, "TLS connections refused: name resolves to a private address") \
    X(tls_refused_resolve, counter, "TLS connections refused: name lookup failed")                 \
    X(tls_refused_timeout, counter, "TLS connections closed by handshake_timeout")                 \
    X(tls_refused_connect, counter, "TLS connections whose origin connect failed or timed out")    \
    X(tls_refused_eof, counter, "TLS connections closed by the client before a whole hello")       \
    X(tls_refused_loop, counter, "TLS connections refused: the relay connected to itself")         \
    X(tls_refused_overload, counter, "TLS connections refused: no pipe or buffer available")       \
    X(tls_idle_timeout, counter, "relayed TLS connections closed by idle_timeout")                 \
    X(tls_errors, counter, "relayed TLS connections ended by an I/O error on either side")

struct stats {
#define STATS_X(name, kind, help) uint64_t name;
    STATS_FIELDS(STATS_X)
#undef STATS_X
};

extern struct stats g_stats;

/* Responses by status code (100..599; index = status), for requests_total{status}. */
#define STATS_STATUS_MAX 600
extern uint64_t g_stats_status[STATS_STATUS_MAX];

struct stats_field {
    const char *name;
    const char *kind;
    const char *help;
    size_t offset;
};

/* The field table, in declaration order; *n receives its length. */
const struct stats_field *stats_fields(size_t *n);

#endif
