/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_int.h: the definition of struct chunk, private to the cache module (cache*.c) and its
 * unit test. Everyone else sees an opaque struct chunk and the accessors of cache.h.
 */
#ifndef CACHEPARTY_CACHE_INT_H
#define CACHEPARTY_CACHE_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sys/queue.h>

#include <ev.h>

#include "cache.h"
#include "chunkfile.h"
#include "chunkmem.h"
#include "config.h"
#include "ngxcache.h"

struct origin_req;
struct store_job;
struct cache_seen_tab;

/* ---- delivered bytes (cache_seen.c) ---- */

#define CACHE_SEEN_RUNS 8         /* runs of delivered bytes a record holds exactly */
#define CACHE_SEEN_KEPT_MAX 16384 /* records of evicted chunks kept for their files */

/* A set of chunk offsets: runs [start, end), sorted, disjoint and not touching. */
struct seen_runs {
    unsigned n; /* runs in use */
    uint32_t start[CACHE_SEEN_RUNS], end[CACHE_SEEN_RUNS];
};

/* Which bytes of one fill of a chunk were delivered to a client at least once (refcounted:
 * shared by every struct chunk holding those bytes). */
struct chunk_seen {
    unsigned magic;
    unsigned refs; /* chunks holding it, and the table while kept there */
    uint8_t obj[16];
    uint64_t index;
    struct seen_runs done;            /* delivered */
    struct seen_runs told;            /* announced as new by an answer's head (MISS) */
    struct cache_seen_tab *tab;       /* kept in it (NULL: not) */
    struct chunk_seen *hnext;         /* tab's chain */
    struct chunk_seen *newer, *older; /* tab's age list */
};

/* The records of chunks evicted before all their bytes were delivered, by (obj, index). */
struct cache_seen_tab {
    struct chunk_seen **buckets; /* owns the array; each record holds a ref for the table */
    struct chunk_seen *newest, *oldest;
    size_t count;
};

/* A record of chunk (<obj>, <index>) with nothing delivered (a ref). */
struct chunk_seen *cache_seen_new(const uint8_t obj[16], uint64_t index);
/* Another ref on <s> (NULL allowed); returns it. */
struct chunk_seen *cache_seen_ref(struct chunk_seen *s);
/* Drops a ref and clears *<s>; frees the record at zero. */
void cache_seen_unref(struct chunk_seen **s);
/* Marks chunk bytes [<off>, <off> + <len>) delivered; returns how many of them were not before
 * (first deliveries). */
uint64_t cache_seen_mark(struct chunk_seen *s, uint64_t off, uint64_t len);
/* Whether byte <off> was delivered. */
bool cache_seen_has(const struct chunk_seen *s, uint64_t off);
/* The head of an answer sending chunk bytes [<off>, <off> + <len>): true (MISS) when byte <off>
 * was neither delivered nor announced by another head, and then those bytes are announced;
 * false (HIT) otherwise. */
bool cache_seen_tell(struct chunk_seen *s, uint64_t off, uint64_t len);
/* Whether no byte was delivered nor announced yet. */
bool cache_seen_is_untouched(const struct chunk_seen *s);
/* Whether every byte of a chunk of length <cap> was delivered. */
bool cache_seen_is_complete(const struct chunk_seen *s, uint64_t cap);
void cache_seen_tab_init(struct cache_seen_tab *t);
/* Drops every kept record. */
void cache_seen_tab_fini(struct cache_seen_tab *t);
/* Keeps <s> (the table takes a ref of its own), replacing an older record of its chunk and
 * dropping the oldest records beyond CACHE_SEEN_KEPT_MAX. No-op when kept already. */
void cache_seen_tab_keep(struct cache_seen_tab *t, struct chunk_seen *s);
/* The kept record of (<obj>, <index>) (a ref, it stays kept), or NULL. */
struct chunk_seen *cache_seen_tab_find(struct cache_seen_tab *t, const uint8_t obj[16],
                                       uint64_t index);
/* Drops <s> (kept in <t>) from the table. */
void cache_seen_tab_remove(struct cache_seen_tab *t, struct chunk_seen *s);
/* Drops the kept record of (<obj>, <index>), if any (a new fill of it starts). */
void cache_seen_tab_forget(struct cache_seen_tab *t, const uint8_t obj[16], uint64_t index);

struct chunk {
    unsigned magic;
    unsigned refs;       /* only through cache_chunk_ref()/cache_chunk_unref() */
    struct cache *cache; /* borrows */
    uint8_t obj[16];     /* object hash */
    uint64_t index;
    enum chunk_state state;
    enum chunk_fail fail;
    bool meta_known; /* meta and cap are set */
    struct cache_meta meta;
    uint64_t cap; /* this chunk's length (the last chunk is shorter) */
    uint64_t len; /* bytes committed from its start (== cap once sealed) */
    /* A chunk whose readers start deep inside it is filled in parts at once (see the filler's
     * two-part fills): [0, part_off[0]) from its start, and part i from part_off[i] on, for the
     * reader who starts there. Bytes [part_off[i], part_end[i]) are committed too; parts join when
     * one reaches the next (len reaching part_off[0]: len = part_end[0]). Ascending, disjoint,
     * never touching; n_parts == 0: one part. Set by the filler through cache_chunk_split_at()
     * and cache_chunk_unsplit(). */
    uint64_t part_off[CACHE_SPLITS_MAX], part_end[CACHE_SPLITS_MAX];
    unsigned n_parts;
    struct chunkmem_block mem_block; /* owns: memory chunk bytes (data NULL for a disk chunk) */
    int fd;                          /* owns: disk chunk file, -1 for a memory chunk */
    off_t body_off;                  /* where the body starts in fd */
    bool started_by_fetch;           /* a fill was started for it (its first reader is a MISS) */
    bool refetch;                    /* that fill was started by a forced lookup (?nocache=) */
    int origin_status;               /* that fill's origin answer status (206, 200), 0: none yet */
    uint64_t refetch_id;             /* that lookup's cache_refetch_id (0: not forced) */
    char *key;                       /* owns: "identifier\npath" */
    size_t key_len;
    struct chunk *hnext;         /* memory table chain */
    struct chunk *cnext, *cprev; /* CLOCK ring of sealed memory chunks */
    bool in_table;
    bool clock_ref;
    bool notify_pending;
    struct chunk *notify_next;
    struct chunk_waiter *waiters;
    struct chunk_waiter *waking; /* those being woken now (wake_list), still waiting for it */
    void *filler; /* borrows, while FILLING: the filler's handle (cache_chunk_set_filler) */
    bool loading; /* FILLING while the I/O pool looks it up on disk */
    struct origin_req *origin; /* owns, while loading: where to fetch it on a disk miss */
    uint64_t origin_off;       /* while loading: where in it that reader starts */
    struct store_job *store;   /* its file is being written (the job holds a ref) */
    uint64_t mem;              /* bytes accounted to the memory budget */
    /* ref: which of its bytes were delivered once (shared with the other chunks holding the
     * same bytes, see cache_seen.c); NULL: all of them (a file of an earlier run). */
    struct chunk_seen *seen;
    bool evicted;          /* left the table by eviction (its record is kept for its file) */
    bool remote;           /* filled from the cluster node that owns it: memory only, no file */
    bool store_deferred;   /* sealed while a purge of its object was queued: stored after it */
    struct answer *answer; /* ref: the origin's answer it failed with (CHUNK_FAIL_PASS) */
};

/* ---- lancache's files (cache_lancache.c) ----
 * On a miss of both tiers, the chunk's slice file in lancache's trees ([cache] lancache_dir) is
 * looked up, checked (ngxcache.h) and, when it passes, served in place as a disk chunk whose
 * bytes are in the nginx file; then it is written into the cache as a chunk file (copy, move)
 * and, with move, the nginx file is removed once that chunk file is durable. The lookups and the
 * copies run on the I/O threads: nothing here touches loop objects. */
/* One lookup of chunk <index> of an object in lancache's trees. */
struct lc_query {
    /* In: */
    char *const *dirs; /* borrowed from the cache (fixed for its life) */
    size_t n_dirs;
    uint64_t slice;   /* lancache's slice size == the chunk size */
    int64_t settle_s; /* files younger than this are not adopted */
    char *prefix;     /* owns: $cacheidentifier$uri of the object */
    size_t prefix_len;
    uint64_t index;
    bool hide_etag;      /* the ETag is not part of the version (a hide_etag rule) */
    bool check_siblings; /* the object's version is unknown: the other slices must agree */
    /* Out: */
    enum ngxcache_verdict why; /* NGXCACHE_OK: found and usable */
    bool any;                  /* some file was there (why says what was wrong when not OK) */
    char path[PATH_MAX];       /* the file found (or refused) */
    int fd;                    /* owns, when found: the nginx file */
    struct stat sb;
    off_t body_off;         /* where the chunk's first byte is in <fd> */
    uint64_t data_len;      /* the chunk's length */
    bool whole;             /* a 200 holding the whole object: every chunk of it is in this file */
    uint64_t n_chunks;      /* the chunks the file holds (1, or all of a whole object's) */
    struct cache_meta meta; /* the version and its stored head (a ref) */
};

/* Sets up <q> for chunk <index> of object <key> ("identifier\npath") asked through <o>:
 * lancache's $cacheidentifier is the identifier, or for a host of no service the Host header as
 * sent. False when the path has no $uri (nginx would refuse it). */
bool cache_lc_prepare(struct lc_query *q, const char *key, size_t key_len,
                      const struct origin_req *o, uint64_t index);
/* Looks the chunk up (blocking: an I/O thread). */
void cache_lc_find(struct lc_query *q);
/* Releases what <q> holds (fd, head, prefix). */
void cache_lc_fini(struct lc_query *q);

/* ---- the cache object (cache.c; cache_lancache.c uses it too) ---- */

struct lc_pending;
struct cache_inv;
struct anstore;
struct diskidx;
struct iopool;

#define CACHE_MAGIC 0xcac4e001u
#define CACHE_LC_LOGGED 4096       /* refused lancache files logged once (by path hash) */
#define CACHE_PURGE_MARKS 256      /* purge marks, by obj[15] */
#define CACHE_DROP_STEP (8u << 20) /* bytes of purged chunks released per loop turn, about */
#define CACHE_LC_QUEUE 4096        /* adopted files waiting to be moved, at most */
#define CACHE_LC_SET 8192          /* slots of the set of those (twice the queue) */
#define CACHE_LC_BATCH 64          /* files moved between two syncs */
#define CACHE_LC_SIBLINGS 32       /* slices on either side a lookup compares versions with */

struct objver {
    uint8_t obj[16];
    uint64_t total;
    uint64_t vhash; /* XXH3-64 of ETag "\0" Last-Modified */
    bool used;
    struct objhead *head; /* owns a ref: the version's stored head (see struct cache_meta) */
    uint64_t renewed_by;  /* the refetch (cache_refetch_id) that stored <head>, 0: none */
    uint64_t last_use;    /* c->objver_clock when last looked up or set (LRU in its set) */
    bool lancache;        /* the version came from lancache's files: a chunk without a file of
                             ours may be in them (read-ahead leaves it to its reader's lookup) */
};

struct verified {
    uint8_t obj[16];
    uint64_t index;
    dev_t dev;
    ino_t ino;
    off_t size;
    bool used;
};

/* A cache dir switched (partly) to pass-through after a disk error: a full or read-only
 * filesystem stops the stores only (its files still read fine); read errors stop the loads. */
enum shard_op { SHARD_STORE, SHARD_LOAD };
struct shard_state {
    bool down[2];       /* by enum shard_op */
    double retry_at[2]; /* ev_tstamp */
};

struct cache {
    unsigned magic;
    struct ev_loop *loop;
    struct anstore *answers; /* owns: the fresh answers that are not objects */
    uint64_t chunk_size;
    struct chunkmem *mem; /* owns: where memory chunks' bytes live */
    uint64_t budget;
    uint64_t mem_used;
    char **dirs; /* owns */
    size_t n_dirs;
    uint64_t tmp_seq;
    struct chunk **buckets;
    size_t n_buckets;   /* power of two */
    struct chunk *ring; /* CLOCK ring of sealed chunks in the table; the hand */
    size_t ring_count;
    struct chunk *notify; /* chunks with woken waiters pending */
    ev_timer notify_ev;   /* never started: fed as a pending event by notify_soon() */
    struct chunk_waiter *mem_waiters;
    bool mem_notify;
    struct objver *objs;        /* owns, CACHE_OBJ_SLOTS */
    uint64_t objver_clock;      /* ticks once per objver lookup or update */
    uint64_t objver_head_bytes; /* bytes of the heads the slots hold (at most budget / 16) */
    uint64_t refetch_seq;       /* the last cache_refetch_id() */
    struct verified *verified;  /* owns, CACHE_VERIFIED_SLOTS */
    struct diskidx *didx;       /* owns: disk usage, LRU and eviction of the chunk files */
    struct iopool *io;          /* owns: disk reads and writes */
    struct iopool *lc_io;       /* owns: lancache moves, one thread at idle priority (NULL: no
                                   lancache_dir) */
    pthread_mutex_t disk_mu;    /* renames into place and deletions of damaged files (workers) */
    bool closing;               /* cache_free() runs: no new disk work */
    struct shard_state *shards; /* owns, one per dir */
    struct store_job *stores;   /* pending stores (each owned by the pool until done) */
    struct cache_filler filler; /* where disk misses go (none: they fail) */
    struct cache_seen_tab seen; /* delivered-byte records of evicted chunks (cache_seen.c) */
    struct cache_stats st;
    /* lancache's trees ([cache] lancache_dir, cache_lancache.c) */
    char **lc_dirs; /* owns */
    size_t n_lc_dirs;
    int64_t lc_settle_s;
    enum cfg_migrate lc_migrate;
    uint64_t lc_logged[CACHE_LC_LOGGED];  /* hashes of the refused files already logged */
    struct lc_pending *lc_head, *lc_tail; /* owns: adopted files waiting to be moved (FIFO) */
    size_t lc_queued;
    uint64_t *lc_set; /* owns, CACHE_LC_SET: (obj, index) hashes of the queued ones, 0 empty */
    struct lc_batch *lc_batch; /* the batch on lc_io (owned by the pool until done), or NULL */
    atomic_bool lc_stop;       /* cache_free(): the mover leaves its batch at the next file */
    struct cache_inv *inv;     /* owns: the inventory's reads, listings and purges */
    /* purged chunks whose memory is released a few at a time (cache.c: munmap and a punch each) */
    struct chunk **drops; /* owns a ref of each of [drop_pos, n_drops) */
    size_t n_drops, cap_drops, drop_pos;
    ev_timer drop_ev;
    /* purges (cache_purge.c) */
    TAILQ_HEAD(cache_purge_q, cache_purge) purges; /* owns: queued, the first one on <io> */
    size_t n_purges;
    bool purge_running;                      /* the first one is on <io> */
    uint32_t purge_marks[CACHE_PURGE_MARKS]; /* purges queued by obj[15]: a quick "none" */
};

/* Purges object <obj> as cache_purge() does (cache_purge.c). */
struct cache_purge *cache_purge_obj(struct cache *c, const uint8_t obj[16], cache_purge_done *done,
                                    void *arg);
/* Whether a purge of <obj> is queued or running: its files are neither read nor written. */
bool cache_purge_holds(const struct cache *c, const uint8_t obj[16]);
/* A sealed chunk of <obj> was not stored (cache_purge_holds): store it when the purges are done. */
void cache_purge_defer_store(struct cache *c, const uint8_t obj[16]);
/* cache_free(): every purge still queued goes to the I/O pool (its end lets them finish). */
void cache_purge_flush(struct cache *c);
/* The memory side of a purge (cache.c): drops the object's chunks from the table, cancels its
 * pending stores and lancache moves, forgets its version. Returns the chunks being filled. */
int cache_purge_mem(struct cache *c, const uint8_t obj[16]);
/* Stores the sealed chunks of <obj> in the table whose store a purge put off (cache.c). */
void cache_store_deferred(struct cache *c, const uint8_t obj[16]);
/* The shard directory holding <obj>'s chunk files (cache.c). */
const char *cache_shard_dir(const struct cache *c, const uint8_t obj[16]);
/* The inventory (cache_inventory.c): the group id of key <key> for diskidx_add (made when new);
 * the start (after the disk index and the I/O pool) and the end (after the I/O pool is freed). */
uint32_t cache_inv_group(struct cache *c, const char *key, size_t key_len);
void cache_inv_start(struct cache *c);
void cache_inv_free(struct cache *c);
/* Drops the listing made or being made (it may show objects removed since). */
void cache_inv_listing_void(struct cache *c);

/* The remembered version of object <obj> (cache.c): found (a lookup, it becomes the most recent
 * of its set), or NULL. */
struct objver *cache_objver_find(struct cache *c, const uint8_t obj[16]);
const struct objver *cache_objver_get(struct cache *c, const uint8_t obj[16]);
/* Whether <m> is version <v> (length and validators). */
bool cache_objver_matches(const struct objver *v, const struct cache_meta *m);
/* Records <m> as object <obj>'s version (a refetch <refetch> renews its head); returns the head
 * every chunk of the version answers with (borrowed). */
struct objhead *cache_objver_set(struct cache *c, const uint8_t obj[16], const struct cache_meta *m,
                                 uint64_t refetch);
/* <ck> takes <m> as its meta, with its own ref on <head>. */
void cache_chunk_take_meta(struct chunk *ck, const struct cache_meta *m, struct objhead *head);
/* Shards switched to pass-through after disk errors (see struct shard_state). */
bool cache_shard_down(struct cache *c, unsigned shard, enum shard_op op);
bool cache_shard_error(int err, enum shard_op op);
void cache_shard_fail(struct cache *c, unsigned shard, enum shard_op op, int err);

/* The loop side of lancache's files (cache_lancache.c). */
/* Turns lancache file <q> found for <ck> (FILLING, looked up) into a SEALED disk chunk sending from
 * it, and queues its move; false when it was refused (then counted and logged) or none. */
bool cache_lc_accept(struct cache *c, struct lc_query *q, struct chunk *ck);
/* At start: says when lancache's filesystem holds more than disk_size. */
void cache_lc_size_warning(const struct config *cfg);
/* Drops the moves still queued (cache_free). */
void cache_lc_fini_queue(struct cache *c);
/* PURGE of object <obj>: its queued moves are dropped, and the chunk files the running batch
 * writes for it are deleted when it is done (never indexed). */
void cache_lc_purge(struct cache *c, const uint8_t obj[16]);
/* A chunk of ours just loaded whole (<q> its lancache lookup, not run): with move, a nginx file
 * of that slice still there (left by a copy run, or a kill between a move's rename and unlink)
 * is looked up on the I/O thread (cache_lc_leftover) and queued for the mover, which verifies
 * our chunk file again before the nginx file goes. */
void cache_lc_leftover(struct lc_query *q);
void cache_lc_leftover_queue(struct cache *c, struct lc_query *q, struct chunk *ck);

#endif
