/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * live: what the dashboard shows beyond the counters (loop thread only; fixed memory):
 * - the last hour of the counters: a ring of LIVE_RING samples, one every LIVE_TICK_S, each the
 *   cumulative values at that instant (rates are differences of two samples);
 * - per service (cache identifier): body bytes served and, of them, hits (per byte, as
 *   response_bytes_total), for the LIVE_SERVICES busiest; totals also since the first start,
 *   kept in a small state file (written every LIVE_SAVE_S and at exit, read at start);
 * - per client address: the same for the LIVE_CLIENTS busiest.
 * Both tables are "space-saving" summaries: an address or service not in a full table takes
 * the place of the one with the fewest bytes and starts from that count (its <floor>, an upper
 * bound of what it is credited beyond its own bytes). So every one that served more than the
 * smallest entry is in the table, and counts are exact while the table is not full (at a LAN
 * party of up to LIVE_CLIENTS machines, always).
 * Memory: LIVE_RING * sizeof(struct live_sample) + (LIVE_CLIENTS + LIVE_SERVICES) entries,
 * about 160 KiB, whatever the traffic.
 */
#ifndef CACHEPARTY_LIVE_H
#define CACHEPARTY_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;

#define LIVE_TICK_S 2
#define LIVE_RING 1800 /* one hour */
#define LIVE_CLIENTS 256
#define LIVE_SERVICES 128
#define LIVE_NAME_MAX 128 /* an address or identifier, NUL included (longer ones are cut) */
#define LIVE_SAVE_S 60

struct live_sample {
    uint64_t t_ms;                                /* wall clock */
    uint64_t bytes_hit, bytes_miss, bytes_bypass; /* response_bytes_total */
    uint64_t upstream_bytes;                      /* upstream_bytes_total */
    uint64_t requests;                            /* client requests */
    uint32_t connections;                         /* client connections open */
    uint32_t fetches;                             /* fills in flight */
};

struct live_entry {
    char name[LIVE_NAME_MAX];
    uint64_t bytes; /* served (floor included) */
    uint64_t hit;   /* of them, hits */
    uint64_t floor; /* inherited on taking a full table's smallest place (0: exact) */
    uint64_t last_ms;
    /* Services only: since the first start (the state file), this run's included. */
    uint64_t total_bytes, total_hit;
};

/* Starts sampling on <loop>; <state_path> (NULL: none) is where service totals persist. Reads
 * it (a missing or unreadable file: totals from zero, one log line when unreadable). */
void live_start(struct ev_loop *loop, const char *state_path);
/* Saves the totals and stops. */
void live_stop(void);

/* <bytes> body bytes sent to <client> for service <ident>, <hit> of them hits. */
void live_account(const char *ident, size_t ident_len, const char *client, uint64_t bytes,
                  uint64_t hit);

/* The samples, oldest first: calls <fn> for each (at most LIVE_RING). */
typedef void live_sample_fn(const struct live_sample *s, void *arg);
void live_samples(live_sample_fn *fn, void *arg);
/* The newest sample taken now (not stored): for rates over the last tick. */
void live_now(struct live_sample *out);

/* The tables, busiest first. */
typedef void live_entry_fn(const struct live_entry *e, void *arg);
void live_clients(live_entry_fn *fn, void *arg);
void live_services(live_entry_fn *fn, void *arg);

/* For the tests: one table of <cap> entries, used as the daemon's are. */
struct live_table {
    struct live_entry *e; /* owns */
    size_t n, cap;
    bool totals;     /* keeps total_bytes/total_hit (services), ranks by them */
    uint32_t *slots; /* owns: name hash -> entry index + 1 (open addressing, half full) */
    size_t n_slots;
};
void live_table_init(struct live_table *t, size_t cap, bool totals);
void live_table_fini(struct live_table *t);
struct live_entry *live_table_add(struct live_table *t, const char *name, size_t len,
                                  uint64_t bytes, uint64_t hit, uint64_t now_ms);
/* Sorts the entries by bytes, most first. */
void live_table_sort(struct live_table *t);
/* The state file: "cacheparty-live 1\n" then "IDENT BYTES HIT\n" per service. */
int live_state_write(const struct live_table *t, const char *path);
int live_state_read(struct live_table *t, const char *path);

#endif
