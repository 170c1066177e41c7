/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache: the chunk cache. An object (cache key "identifier\npath") is cut into chunks of
 * [cache] chunk_size bytes; chunk i holds bytes [i*chunk_size, (i+1)*chunk_size) of the object.
 *
 * Tiers:
 * - memory: a table (object hash, index) -> struct chunk holding in-flight (FILLING) and recently
 *   filled (SEALED) chunks, within [cache] memory_size; sealed chunks nobody reads are evicted
 *   by CLOCK. A fill waits for memory rather than exceeding the budget (back-pressure).
 * - disk: one immutable file per chunk under the shard dir chosen by the object hash (chunkfile
 *   format: key, object length, validators, body hash). A file is verified whole (header, key,
 *   length, checksum) the first time this process serves it, then sent with sendfile. A file
 *   that does not verify is deleted, counted, and treated as a miss. Disk reads and writes run on
 *   a small I/O thread pool (iopool.h), never on the loop. A dir whose filesystem fails is
 *   switched partly to pass-through for a while: full or read-only (ENOSPC, EDQUOT, EROFS, EIO
 *   on a write): new chunks are served without being stored; EIO on a read: its chunks are
 *   fetched from the origin.
 * A miss starts one fetch (fetch.c) for the chunk; every later request for it while it fills
 * shares that chunk and reads its bytes as they are committed (waiters are woken once per
 * change, right after the callback that made it: in practice once per loop iteration).
 *
 * Versions: the object's current (length, validators) is remembered; a chunk of another version
 * found on disk is deleted (a miss); a fetch that brings a new version replaces the old one's
 * chunks. A reader also compares every chunk with the head it sent and closes on a mismatch, so
 * no client ever gets bytes of two versions.
 *
 * Ownership: struct chunk is refcounted. The memory table holds one ref on each chunk in it; the
 * fetch holds one while filling; each reader holds one. cache_chunk_unref() frees at zero.
 * Chunk data is immutable once committed: readers may send straight from it.
 */
#ifndef CACHEPARTY_CACHE_H
#define CACHEPARTY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chunkfile.h"

struct ev_loop;
struct config;
struct cache;
struct chunk;
struct fetch_origin;
struct store_job;

/* What an object looks like (from the origin's first answer or a chunk file header). */
struct cache_meta {
    uint64_t total;
    char etag[CHUNKFILE_ETAG_MAX + 1];
    char last_modified[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    char content_type[CHUNKFILE_CONTENT_TYPE_MAX + 1];
};

enum chunk_state {
    CHUNK_S_FILLING, /* a fetch is committing bytes */
    CHUNK_S_SEALED,  /* complete and verified: in memory (data) or on disk (fd) */
    CHUNK_S_FAILED   /* the fetch failed; see fail */
};

enum chunk_fail {
    CHUNK_FAIL_NONE = 0,
    CHUNK_FAIL_502,    /* origin unreachable, invalid or cut short */
    CHUNK_FAIL_504,    /* origin timeout */
    CHUNK_FAIL_403,    /* origin not allowed (private address) */
    CHUNK_FAIL_PASS,   /* the origin answered something uncacheable: forward the request */
    CHUNK_FAIL_CHANGED /* the object changed at the origin while this chunk filled */
};

struct chunk_waiter;
typedef void chunk_wake_fn(struct chunk_waiter *w);

/* A reader waiting for a chunk to change (more bytes, meta known, sealed, failed). One-shot. */
struct chunk_waiter {
    struct chunk_waiter *next;
    struct chunk_waiter **pprev;
    chunk_wake_fn *cb;
};

struct chunk {
    unsigned magic;
    unsigned refs;
    struct cache *cache; /* borrows */
    uint8_t obj[16];     /* object hash */
    uint64_t index;
    enum chunk_state state;
    enum chunk_fail fail;
    bool meta_known; /* meta and cap are set */
    struct cache_meta meta;
    uint64_t cap; /* this chunk's length (the last chunk is shorter) */
    uint64_t len; /* bytes committed from its start (== cap once sealed) */
    /* A chunk whose first reader starts deep inside it is filled in two parts at once (see
     * fetch_start_at): [0, tail_off) from its start and [tail_off, cap) from the reader's
     * offset. Bytes [tail_off, tail_end) are committed too; when len reaches tail_off the parts
     * join (len = tail_end, tail_off = tail_end = 0). tail_off == 0: one part. */
    uint64_t tail_off, tail_end;
    char *data;            /* owns: memory chunk bytes, NULL for a disk chunk */
    int fd;                /* owns: disk chunk file, -1 for a memory chunk */
    off_t body_off;        /* where the body starts in fd */
    bool started_by_fetch; /* a fetch was started for it (its first reader is a MISS) */
    /* Private to cache.c / fetch.c. */
    char *key; /* owns: "identifier\npath" */
    size_t key_len;
    struct chunk *hnext;         /* memory table chain */
    struct chunk *cnext, *cprev; /* CLOCK ring of sealed memory chunks */
    bool in_table;
    bool clock_ref;
    bool notify_pending;
    struct chunk *notify_next;
    struct chunk_waiter *waiters;
    struct fetch *fetch;         /* while FILLING */
    bool loading;                /* FILLING while the I/O pool looks it up on disk */
    struct fetch_origin *origin; /* owns, while loading: where to fetch it on a disk miss */
    uint64_t origin_off;         /* while loading: where in it that reader starts */
    struct store_job *store;     /* its file is being written (the job holds a ref) */
    uint64_t mem;                /* bytes accounted to the memory budget */
};

/* The cache; NULL with <err> when a cache dir is unusable or holds another chunk_size. */
struct cache *cache_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen);
void cache_free(struct cache **c);
/* A reload: applies the limits that can change live (memory_size, disk_size, min_free, max_age);
 * the dirs and chunk_size cannot (main keeps them). A smaller memory budget evicts as fills need
 * room. */
void cache_reconfigure(struct cache *c, const struct config *cfg);

/*
 * The object key of <path>[0..path_len) under cache identifier <ident>: "identifier\npath", NUL
 * terminated; an empty path (an absolute-form target without one) counts as "/". The caller owns
 * the result (free); *key_len receives its length without the NUL. Pure (src/cache_key.c).
 */
char *cache_key_build(const char *ident, const char *path, size_t path_len, size_t *key_len);

/* Hash of an object key ("identifier\npath"). */
void cache_obj_hash(const char *key, size_t len, uint8_t out[16]);

/*
 * A reference to chunk <index> of object <key>: from memory, else from disk (verified), else a
 * new FILLING chunk whose fetch starts at once from <origin> (borrowed, copied), unless <origin>
 * is NULL (probe only: then NULL is returned on a miss). <off> is where in the chunk the caller
 * will start reading (a fetch started for it brings that byte first: fetch_start_at). <force>
 * skips both tiers (?nocache=1). *<created> tells whether this call started the fetch. Unref
 * with cache_chunk_unref().
 */
struct chunk *cache_chunk_get(struct cache *c, const char *key, size_t key_len, uint64_t index,
                              uint64_t off, const struct fetch_origin *origin, bool force,
                              bool *created);
void cache_chunk_unref(struct chunk **ck);

/* How many bytes from offset <off> of <ck> are committed and contiguous (may be sent now). */
uint64_t cache_chunk_avail(const struct chunk *ck, uint64_t off);

/* Wake <w> once when <ck> changes (re-registering moves it). Never called back from inside. */
void cache_chunk_wait(struct chunk *ck, struct chunk_waiter *w, chunk_wake_fn *cb);
/* Stop waiting (safe when not waiting). */
void cache_chunk_unwait(struct chunk_waiter *w);

#define CACHE_SPAN_MAX 64 /* chunks one upstream request may fill */

/*
 * When memory is short (a fill waits for it, or it is full): the same chunk from its verified
 * file instead of memory (a ref), so that a reader blocked on a slow client does not pin memory.
 * NULL otherwise, or when it has no file.
 */
struct chunk *cache_chunk_on_disk(struct cache *c, const struct chunk *ck);

/* Whether chunk <index> is in memory (not failed) or has a file on disk (not verified here). */
bool cache_chunk_exists(struct cache *c, const char *key, size_t key_len, uint64_t index);

/*
 * Read-ahead: starts one fetch for the missing chunks <first>..<last> (at most CACHE_SPAN_MAX,
 * stopping before the first chunk already in memory or in flight): one upstream range request
 * whose bytes fill the chunks in order, each joinable while it fills. Returns how many chunks
 * the fetch covers (0 if <first> is present).
 */
int cache_fetch_span(struct cache *c, const char *key, size_t key_len, uint64_t first,
                     uint64_t last, const struct fetch_origin *origin);

/* Used by fetch.c. */
/* A new FILLING chunk <index> of <key> for a fetch of version <m> already running (a ref for
 * it), or NULL when the chunk is in memory, in flight or on disk, or when <m> is not the object's
 * current version (it changed, or was purged, since the fetch began). */
struct chunk *cache_chunk_claim(struct cache *c, const char *key, size_t key_len, uint64_t index,
                                const struct cache_meta *m);
/* Sets the object's meta on a filling chunk (no memory yet): 0, -EINVAL when the chunk lies
 * beyond the object's end, or -ESTALE when the chunk's meta, set by the fetch of its other part,
 * is another version. */
int cache_chunk_set_meta(struct chunk *ck, const struct cache_meta *m);
/* Allocates the chunk's bytes within the memory budget: 0, or -ENOMEM (then cache_mem_wait). */
int cache_chunk_reserve(struct chunk *ck);
void cache_mem_wait(struct cache *c, struct chunk_waiter *w, chunk_wake_fn *cb);
/* Whether <len> bytes at offset <off> may be committed now: the chunk fills, its meta is known,
 * and <off> is the end of either part (len, without running into the tail, or tail_end). */
bool cache_chunk_fits(const struct chunk *ck, uint64_t off, size_t len);
/* Commits them (cache_chunk_fits must hold; memory reserved); joins the parts when they meet. */
void cache_chunk_commit(struct chunk *ck, uint64_t off, const char *data, size_t len);
void cache_chunk_seal(struct chunk *ck);
/* Wakes the chunk's waiters (soon, not from inside) though nothing changed: they look again. */
void cache_chunk_poke(struct chunk *ck);
void cache_chunk_failed(struct chunk *ck, enum chunk_fail why);

/*
 * Removes every chunk of object <key> ("identifier\npath"): from memory (readers in flight keep
 * their refs and finish) and from disk (all chunk files of the object share one directory).
 * Returns how many chunks were removed (memory and disk counted once per index), or -errno.
 */
int cache_purge(struct cache *c, const char *key, size_t key_len);

/* Gauges, read when the counters are exported (the cache's counters are in g_stats, stats.h). */
struct cache_stats {
    uint64_t mem_bytes, mem_chunks;
    uint64_t shards_down; /* cache dirs switched to pass-through after a disk error */
    uint64_t io_pending;  /* disk jobs queued or running */
    uint64_t disk_bytes, disk_chunks, disk_evictions; /* from the disk index (diskidx) */
    bool disk_scan_done;
};
void cache_get_stats(const struct cache *c, struct cache_stats *out);
unsigned cache_live_chunks(void);

#endif
