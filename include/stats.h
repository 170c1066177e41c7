/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * stats: the process-wide counters table (g_stats), written by the loop thread only.
 * One X-macro list yields the struct fields and how each is exported (family, label, help), and
 * a second one the order of the families, so that /metrics and /status are rendered from these
 * tables alone. Counters only count: no logic lives here. Every handled failure bumps one of
 * these.
 */
#ifndef CACHEPARTY_STATS_H
#define CACHEPARTY_STATS_H

#include <stddef.h>
#include <stdint.h>

/*
 * X(name, type, family, label, help), one row per field of struct stats:
 *  name    the field (g_stats.name).
 *  type    counter (only grows) or gauge (goes up and down). A gauge that its owner does not keep
 *          current is written by a provider (stats_provider_add) just before each export.
 *  family  NULL: exported alone as NAME_total (counter) or NAME (gauge). Otherwise the name it is
 *          exported under: a family of STATS_FAMILIES (one sample of it), or a name of its own.
 *  label   in a labelled family, this field's value of the family's label; NULL otherwise.
 *  help    what it counts: the HELP of a family of its own.
 * Within a family, samples come in the order of this list.
 */
#define STATS_FIELDS(X)                                                                            \
    X(conn_accepted, counter, NULL, NULL, "client connections accepted")                           \
    X(conn_open, gauge, NULL, NULL, "client connections open")                                     \
    X(accept_paused, counter, NULL, NULL, "times accepting paused (max_connections or EMFILE)")    \
    X(requests, counter, "client_requests_total", NULL, "client requests parsed or refused")       \
    X(resp_1xx, counter, NULL, NULL, "responses 1xx")                                              \
    X(resp_2xx, counter, NULL, NULL, "responses 2xx")                                              \
    X(resp_3xx, counter, NULL, NULL, "responses 3xx")                                              \
    X(resp_4xx, counter, NULL, NULL, "responses 4xx")                                              \
    X(resp_5xx, counter, NULL, NULL, "responses 5xx")                                              \
    X(bytes_hit, counter, "response_bytes_total", "hit",                                           \
      "response body bytes that some client had been sent before (saved the uplink)")              \
    X(bytes_miss, counter, "response_bytes_total", "miss",                                         \
      "response body bytes sent for the first time since their fetch from an origin")              \
    X(bytes_bypass, counter, "response_bytes_total", "bypass",                                     \
      "response body bytes served uncached (bypass)")                                              \
    X(upstream_requests, counter, "upstream_requests_total", NULL, "requests sent to origins")     \
    X(upstream_bytes, counter, "upstream_bytes_total", NULL,                                       \
      "response body bytes received from origins")                                                 \
    X(upstream_conn_new, counter, NULL, NULL, "origin connections opened")                         \
    X(upstream_conn_reused, counter, NULL, NULL,                                                   \
      "origin requests on a pooled keep-alive connection")                                         \
    X(upstream_retries, counter, NULL, NULL, "requests retried after a pooled connection failed")  \
    X(upstream_queued, counter, NULL, NULL, "requests that waited for max_per_origin")             \
    X(upstream_connect_failover, counter, NULL, NULL,                                              \
      "origin connects that failed and went on to the next address of the name")                   \
    X(upstream_err_connect, counter, "errors_total", "upstream_connect",                           \
      "origin connect failures")                                                                   \
    X(upstream_err_timeout, counter, "errors_total", "upstream_timeout", "origin timeouts")        \
    X(upstream_err_proto, counter, "errors_total", "upstream_proto", "invalid origin responses")   \
    X(upstream_err_io, counter, "errors_total", "upstream_io",                                     \
      "origin connections lost mid-response")                                                      \
    X(client_bad_request, counter, "errors_total", "client_bad_request",                           \
      "requests refused as malformed (400/414/431/505)")                                           \
    X(client_timeout, counter, "errors_total", "client_timeout",                                   \
      "client connections closed by a timeout")                                                    \
    X(client_reset, counter, "errors_total", "client_reset",                                       \
      "client connections lost mid-response")                                                      \
    X(forbidden, counter, "errors_total", "forbidden", "requests refused as not allowed (403)")    \
    X(loops, counter, "errors_total", "loop", "requests refused as loops (508)")                   \
    X(cluster_peer_refused, counter, "errors_total", "peer_refused",                               \
      "requests with a cluster peer credential that fails (403)")                                  \
    X(fetches, counter, NULL, NULL,                                                                \
      "cache fills started (one upstream request for a run of chunks)")                            \
    X(fetch_resumed, counter, NULL, NULL, "cache fills resumed after an origin fault mid-body")    \
    X(fetch_failed, counter, NULL, NULL, "cache fills that failed for good")                       \
    X(fetch_short, counter, NULL, NULL,                                                            \
      "cache fills continued after a 206 that ended before the range asked")                       \
    X(fetch_split, counter, NULL, NULL,                                                            \
      "runs cut so that a reader deep inside gets its own fetch")                                  \
    X(fetch_two_part, counter, NULL, NULL,                                                         \
      "chunk parts (besides the first) asked for readers starting deep inside")                    \
    X(fetch_peer, counter, NULL, NULL,                                                             \
      "cache fills asked of the cluster node that owns their chunks")                              \
    X(fetch_peer_fallback, counter, NULL, NULL,                                                    \
      "cache fills that went on to the next node or the origin after their node failed")           \
    X(answers_shared, counter, NULL, NULL,                                                         \
      "requests answered from an uncacheable origin answer shared by the waiters of one fill")     \
    X(answer_fallbacks, counter, NULL, NULL,                                                       \
      "uncacheable answers too large to share: their waiters forwarded their own requests")        \
    X(fetch_chunked_stored, counter, NULL, NULL,                                                   \
      "chunked 200 answers of origins that ignore Range, read whole and stored")                   \
    X(answer_bytes, gauge, NULL, NULL, "bytes of uncacheable origin answers held to share")        \
    X(fresh_answers_kept, counter, NULL, NULL,                                                     \
      "uncacheable origin answers kept for reuse because the origin gave them a freshness "        \
      "lifetime")                                                                                  \
    X(fresh_answers_reused, counter, NULL, NULL,                                                   \
      "requests answered from a kept fresh answer (no origin request)")                            \
    X(fresh_answers, gauge, NULL, NULL, "fresh uncacheable answers kept for reuse")                \
    X(domains_lines_skipped, gauge, NULL, NULL,                                                    \
      "lines of the loaded cache-domains lists skipped as malformed")                              \
    X(fresh_answer_bytes, gauge, NULL, NULL,                                                       \
      "memory of the fresh answers kept, within [cache] answers_memory")                           \
    X(dns_queries, counter, NULL, NULL, "DNS queries sent")                                        \
    X(dns_cache_hits, counter, NULL, NULL, "name lookups answered from the DNS cache")             \
    X(dns_failures, counter, "errors_total", "dns", "name lookups that failed")                    \
    X(tls_accepted, counter, NULL, NULL, "TLS connections accepted on passthrough_listen")         \
    X(tls_relayed, counter, NULL, NULL, "TLS connections connected to their origin and relayed")   \
    X(tls_bytes_up, counter, "tls_bytes_total", "up", "TLS bytes relayed from clients to origins") \
    X(tls_bytes_down, counter, "tls_bytes_total", "down",                                          \
      "TLS bytes relayed from origins to clients")                                                 \
    X(tls_refused_no_sni, counter, "tls_refused_total", "no_sni",                                  \
      "TLS connections refused: ClientHello without a server name")                                \
    X(tls_refused_not_tls, counter, "tls_refused_total", "not_tls",                                \
      "TLS connections refused: not a TLS handshake")                                              \
    X(tls_refused_malformed, counter, "tls_refused_total", "malformed",                            \
      "TLS connections refused: malformed or oversized hello")                                     \
    X(tls_refused_ip_literal, counter, "tls_refused_total", "ip_literal",                          \
      "TLS connections refused: IP-literal server name")                                           \
    X(tls_refused_unlisted, counter, "tls_refused_total", "unlisted",                              \
      "TLS connections refused: name not in the lists")                                            \
    X(tls_refused_private, counter, "tls_refused_total", "private",                                \
      "TLS connections refused: name resolves to a private address")                               \
    X(tls_refused_resolve, counter, "tls_refused_total", "resolve",                                \
      "TLS connections refused: name lookup failed")                                               \
    X(tls_refused_timeout, counter, "tls_refused_total", "timeout",                                \
      "TLS connections closed by handshake_timeout")                                               \
    X(tls_refused_connect, counter, "tls_refused_total", "connect",                                \
      "TLS connections whose origin connect failed or timed out")                                  \
    X(tls_refused_eof, counter, "tls_refused_total", "eof",                                        \
      "TLS connections closed by the client before a whole hello")                                 \
    X(tls_refused_loop, counter, "tls_refused_total", "loop",                                      \
      "TLS connections refused: the relay connected to itself")                                    \
    X(tls_refused_overload, counter, "tls_refused_total", "overload",                              \
      "TLS connections refused: no pipe or buffer available")                                      \
    X(tls_idle_timeout, counter, NULL, NULL, "relayed TLS connections closed by idle_timeout")     \
    X(tls_errors, counter, NULL, NULL,                                                             \
      "relayed TLS connections ended by an I/O error on either side")                              \
    X(conn_http, gauge, "connections", "http", "HTTP client connections open")                     \
    X(conn_tls, gauge, "connections", "tls", "TLS relay connections open")                         \
    X(conn_admin, gauge, "connections", "admin", "admin connections open")                         \
    X(fetches_inflight, gauge, "inflight_fetches", NULL, "origin fetches running")                 \
    X(cache_mem_hits, counter, "cache_hits_total", "memory", "chunk lookups answered from memory") \
    X(cache_disk_hits, counter, "cache_hits_total", "disk",                                        \
      "chunk lookups answered from a chunk file")                                                  \
    X(cache_misses, counter, "cache_misses_total", NULL, "chunk lookups that started a fetch")     \
    X(cache_coalesced, counter, "coalesced_total", NULL,                                           \
      "chunk requests that joined a fetch in flight")                                              \
    X(cache_readahead, counter, "readahead_chunks_total", NULL,                                    \
      "chunks fetched ahead of their readers")                                                     \
    X(cache_evictions, counter, "evictions_total", "memory", "chunks evicted from memory")         \
    X(cache_disk_evictions, counter, "evictions_total", "disk",                                    \
      "chunk files evicted (from the disk index)")                                                 \
    X(cache_integrity_failures, counter, "integrity_failures_total", NULL,                         \
      "chunk files that failed verification")                                                      \
    X(cache_old_format, counter, "cache_old_format_chunks_total", NULL,                            \
      "chunk files of an earlier format deleted when first asked, to be refetched")                \
    X(cache_disk_writes, counter, "cache_disk_writes_total", NULL, "chunk files written")          \
    X(cache_disk_write_errors, counter, "errors_total", "disk_write",                              \
      "chunk files that could not be written")                                                     \
    X(cache_purged, counter, "cache_purged_chunks_total", NULL, "chunks removed by PURGE")         \
    X(chunkmem_errors, counter, "errors_total", "chunk_memory",                                    \
      "chunk memory slots that could not be released, and writes to its file that failed")         \
    X(sent_mem_copy, counter, "sent_bytes_total", "memory_copy",                                   \
      "cached body bytes sent to clients as copies of chunk memory")                               \
    X(sent_mem_ref, counter, "sent_bytes_total", "memory_reference",                               \
      "cached body bytes sent to clients by reference to chunk memory")                            \
    X(sent_file, counter, "sent_bytes_total", "file", "cached body bytes sent from chunk files")   \
    X(send_turns_put_off, counter, "send_turns_put_off_total", NULL,                               \
      "turns of a response under way put off to the next loop iteration (its budget was spent)")   \
    X(cache_mem_bytes, gauge, "cache_bytes", "memory", "bytes of chunk memory in use")             \
    X(cache_disk_bytes, gauge, "cache_bytes", "disk",                                              \
      "bytes of chunk files (from the disk index)")                                                \
    X(cache_mem_chunks, gauge, "cache_chunks", "memory", "chunks in memory")                       \
    X(cache_disk_chunks, gauge, "cache_chunks", "disk", "chunk files (from the disk index)")       \
    X(cache_mem_limit, gauge, "cache_limit_bytes", "memory", "memory_size")                        \
    X(cache_disk_limit, gauge, "cache_limit_bytes", "disk", "disk_size (0: none)")                 \
    X(cache_disk_free, gauge, "cache_disk_free_bytes", NULL,                                       \
      "free bytes of the cache dirs' filesystems")                                                 \
    X(cache_disk_fs, gauge, "cache_disk_fs_bytes", NULL, "size of the cache dirs' filesystems")    \
    X(cache_io_pending, gauge, "cache_disk_io_pending", NULL, "disk jobs queued or running")       \
    X(cache_dirs_down, gauge, "cache_dirs_down", NULL,                                             \
      "cache dirs in pass-through after a disk error")                                             \
    X(lancache_served, counter, "lancache_slices_total", "served",                                 \
      "chunks served from lancache's files")                                                       \
    X(lancache_migrated, counter, "lancache_slices_total", "migrated",                             \
      "chunks written into the cache from lancache's files")                                       \
    X(lancache_removed, counter, "lancache_slices_total", "removed",                               \
      "lancache files removed once moved (lancache_migrate = move)")                               \
    X(lancache_unlink_failed, counter, "lancache_slices_total", "not_removed",                     \
      "lancache files moved that could not be removed (no write access to their directory)")       \
    X(lancache_paused, gauge, "lancache_move_paused", NULL,                                        \
      "1 while moving lancache's files waits for room under disk_size or min_free")                \
    X(lancache_skip_not_file, counter, "lancache_skipped_total", "not_file",                       \
      "lancache not regular files (symlinks, directories)")                                        \
    X(lancache_skip_temp, counter, "lancache_skipped_total", "temp",                               \
      "lancache nginx temporary files")                                                            \
    X(lancache_skip_name, counter, "lancache_skipped_total", "name",                               \
      "lancache names that are not nginx cache file names")                                        \
    X(lancache_skip_young, counter, "lancache_skipped_total", "young",                             \
      "lancache files younger than lancache_settle")                                               \
    X(lancache_skip_short, counter, "lancache_skipped_total", "short",                             \
      "lancache files shorter than their header")                                                  \
    X(lancache_skip_layout, counter, "lancache_skipped_total", "layout",                           \
      "lancache files without nginx's KEY line")                                                   \
    X(lancache_skip_version, counter, "lancache_skipped_total", "version",                         \
      "lancache files of another nginx cache format")                                              \
    X(lancache_skip_offsets, counter, "lancache_skipped_total", "offsets",                         \
      "lancache files whose header offsets disagree")                                              \
    X(lancache_skip_crc, counter, "lancache_skipped_total", "crc",                                 \
      "lancache files whose key crc32 differs")                                                    \
    X(lancache_skip_vary, counter, "lancache_skipped_total", "vary", "lancache Vary variants")     \
    X(lancache_skip_md5, counter, "lancache_skipped_total", "md5",                                 \
      "lancache files not named md5 of their key")                                                 \
    X(lancache_skip_key, counter, "lancache_skipped_total", "key",                                 \
      "lancache keys not in lancache's slice form")                                                \
    X(lancache_skip_head, counter, "lancache_skipped_total", "head",                               \
      "lancache unparsable stored heads")                                                          \
    X(lancache_skip_status, counter, "lancache_skipped_total", "status",                           \
      "lancache statuses lancache does not cache")                                                 \
    X(lancache_skip_range, counter, "lancache_skipped_total", "range",                             \
      "lancache Content-Ranges that disagree with the key")                                        \
    X(lancache_skip_length, counter, "lancache_skipped_total", "length",                           \
      "lancache bodies of the wrong length")                                                       \
    X(lancache_skip_chunked, counter, "lancache_skipped_total", "chunked",                         \
      "lancache 200s stored without a length")                                                     \
    X(lancache_skip_version_differs, counter, "lancache_skipped_total", "version_differs",         \
      "lancache slices of another version than the object's")                                      \
    X(lancache_skip_io, counter, "lancache_skipped_total", "io",                                   \
      "lancache files that could not be read")

/*
 * F(name, type, label, source, help): the families exported first, in this order, before the
 * fields of STATS_FIELDS whose family is not listed here (each alone, in field order).
 *  name    the family (cacheparty_NAME in /metrics, "NAME" in /status).
 *  type    counter or gauge: every field in it has this type.
 *  label   the label's name ("tier"), or NULL for a family of one unlabelled sample.
 *  source  FIELDS: the fields of STATS_FIELDS that name this family. STATUS: g_stats_status,
 *          one sample per status code answered at least once, labelled by the code.
 *  help    its HELP text.
 */
#define STATS_FAMILIES(F)                                                                          \
    F(requests_total, counter, "status", STATUS, "client responses by status code")                \
    F(response_bytes_total, counter, "cache", FIELDS,                                              \
      "response body bytes sent to clients: hit, miss (first delivery) or bypass")                 \
    F(upstream_requests_total, counter, NULL, FIELDS, "requests sent to origins")                  \
    F(upstream_bytes_total, counter, NULL, FIELDS, "response body bytes received from origins")    \
    F(coalesced_total, counter, NULL, FIELDS, "chunk requests that joined a fetch in flight")      \
    F(inflight_fetches, gauge, NULL, FIELDS, "origin fetches running")                             \
    F(connections, gauge, "kind", FIELDS, "open connections by listener")                          \
    F(cache_bytes, gauge, "tier", FIELDS, "bytes held by the cache, by tier")                      \
    F(cache_chunks, gauge, "tier", FIELDS, "chunks held by the cache, by tier")                    \
    F(evictions_total, counter, "tier", FIELDS, "chunks evicted, by tier")                         \
    F(integrity_failures_total, counter, NULL, FIELDS,                                             \
      "cached chunk files that failed verification (deleted, refetched)")                          \
    F(errors_total, counter, "kind", FIELDS, "handled failures, by kind")                          \
    F(cache_hits_total, counter, "tier", FIELDS, "chunk lookups answered from the cache, by tier") \
    F(cache_misses_total, counter, NULL, FIELDS, "chunk lookups that started a fetch")             \
    F(cache_disk_writes_total, counter, NULL, FIELDS, "chunk files written")                       \
    F(cache_limit_bytes, gauge, "tier", FIELDS,                                                    \
      "the configured limit by tier: memory_size, disk_size (0: none)")                            \
    F(cache_disk_free_bytes, gauge, NULL, FIELDS,                                                  \
      "free bytes on the cache dirs' filesystems (each once; statvfs, every 1-10 s)")              \
    F(cache_disk_fs_bytes, gauge, NULL, FIELDS, "size of the cache dirs' filesystems (each once)") \
    F(cache_disk_io_pending, gauge, NULL, FIELDS,                                                  \
      "chunk file reads and writes queued or running on the I/O threads")                          \
    F(cache_dirs_down, gauge, NULL, FIELDS,                                                        \
      "cache dirs switched to pass-through after a disk error (ENOSPC, EIO)")                      \
    F(cache_purged_chunks_total, counter, NULL, FIELDS, "chunks removed by PURGE")                 \
    F(sent_bytes_total, counter, "from", FIELDS,                                                   \
      "cached body bytes sent to clients, by where they were sent from")                           \
    F(readahead_chunks_total, counter, NULL, FIELDS,                                               \
      "chunks fetched ahead of their readers (read-ahead runs)")                                   \
    F(tls_bytes_total, counter, "direction", FIELDS,                                               \
      "bytes relayed by the TLS passthrough (up: client to origin, down: origin to client)")       \
    F(tls_refused_total, counter, "reason", FIELDS,                                                \
      "TLS connections closed before or instead of being relayed, by reason")                      \
    F(lancache_slices_total, counter, "result", FIELDS,                                            \
      "lancache's slices: served in place, migrated into the cache, nginx files removed")          \
    F(lancache_skipped_total, counter, "reason", FIELDS,                                           \
      "lancache files not adopted (never served), by reason")

struct stats {
#define STATS_X(name, type, family, label, help) uint64_t name;
    STATS_FIELDS(STATS_X)
#undef STATS_X
};

extern struct stats g_stats;

/* Responses by status code (100..599; index = status), for requests_total{status}. */
#define STATS_STATUS_MAX 600
extern uint64_t g_stats_status[STATS_STATUS_MAX];

/* One exported family, as stats_export() hands it out: borrowed, valid during the call only. */
struct stats_family {
    const char *name;  /* without the cacheparty_ prefix */
    const char *type;  /* "counter" or "gauge" */
    const char *label; /* the label's name, or NULL: exactly one sample, without a label */
    const char *help;
};

typedef void stats_family_fn(const struct stats_family *fam, void *arg);
/* <label_value> is NULL in an unlabelled family. */
typedef void stats_sample_fn(const char *label_value, uint64_t value, void *arg);

/*
 * Brings the provided gauges up to date (stats_refresh), then visits every family in export
 * order: <fam> once per family, then <sample> once per sample of it. A labelled family whose
 * samples are all absent (requests_total before any response) is still visited, without samples.
 */
void stats_export(stats_family_fn *fam, stats_sample_fn *sample, void *arg);

/*
 * A provider writes into <st> the gauges its module does not keep current in g_stats (memory in
 * use, jobs queued, connections open), reading them from their owner. Registered at start (at
 * most STATS_MAX_PROVIDERS); called, in registration order, by stats_refresh().
 */
#define STATS_MAX_PROVIDERS 8
typedef void stats_provider_fn(struct stats *st, void *arg);
void stats_provider_add(stats_provider_fn *fn, void *arg);
void stats_refresh(void);

#endif
