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
 * Storage never asks the origin. A lookup returns an outcome (cache_chunk_get); on a miss the
 * caller starts the fill (fetch.c), and a disk lookup that finds nothing usable hands its chunk
 * to the filler given at start (cache_set_filler). Every later request for a chunk while it fills
 * shares that chunk and reads its bytes as they are committed (waiters are woken once per
 * change, right after the callback that made it: in practice once per loop iteration).
 *
 * Versions: the object's current (length, validators) is remembered; a chunk of another version
 * found on disk is deleted (a miss); a fetch that brings a new version replaces the old one's
 * chunks. A reader also compares every chunk with the head it sent and closes on a mismatch, so
 * no client ever gets bytes of two versions.
 *
 * Ownership: struct chunk is opaque and refcounted, only through cache_chunk_ref() and
 * cache_chunk_unref() (which frees at zero). The memory table holds one ref on each chunk in it;
 * the fill holds one while filling; each reader holds one. Chunk data is immutable once
 * committed: readers may send straight from it.
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
struct chunk; /* opaque: see the reader and filler APIs below */
struct origin_req;
struct objhead;
struct answer;

/*
 * What an object looks like (from the origin's first answer or a chunk file header). The
 * version is (total, etag, last_modified); <head> is the rest of that answer, replayed on every
 * answer (objhead.h). Every chunk of one version carries the same head: the one of the answer
 * that first brought the version into this process (a later fill of the same version adopts it).
 * A struct cache_meta that holds a head owns a ref on it: copy with cache_meta_copy(), drop with
 * cache_meta_clear(); a plain struct assignment moves the ref.
 */
struct cache_meta {
    uint64_t total;
    char etag[CHUNKFILE_ETAG_MAX + 1];
    char last_modified[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    char content_type[CHUNKFILE_CONTENT_TYPE_MAX + 1];
    struct objhead *head; /* owns a ref; NULL only for metas still being built */
};

/* <dst> (holding no ref) becomes a copy of <src>, with a ref of its own on the head. */
void cache_meta_copy(struct cache_meta *dst, const struct cache_meta *src);
/* Drops the head's ref (NULL is fine). */
void cache_meta_clear(struct cache_meta *m);

enum chunk_state {
    CHUNK_S_FILLING, /* a fill is committing bytes (or a disk lookup runs) */
    CHUNK_S_SEALED,  /* complete and verified: in memory or on disk */
    CHUNK_S_FAILED   /* the fill failed; see cache_chunk_fail_cause() */
};

/* Why a fill failed; the client path maps a cause to its answer. */
enum chunk_fail {
    CHUNK_FAIL_NONE = 0,
    CHUNK_FAIL_ORIGIN,    /* origin unreachable, invalid or cut short */
    CHUNK_FAIL_TIMEOUT,   /* origin timeout */
    CHUNK_FAIL_FORBIDDEN, /* origin not allowed (private address) */
    CHUNK_FAIL_PASS,      /* the origin answered something uncacheable: answer the request from
                             that answer (cache_chunk_answer), or else forward it */
    CHUNK_FAIL_CHANGED    /* the object changed at the origin while this chunk filled */
};

struct chunk_waiter;
typedef void chunk_wake_fn(struct chunk_waiter *w);

/* A reader waiting for a chunk to change (more bytes, meta known, sealed, failed). One-shot. */
struct chunk_waiter {
    struct chunk_waiter *next;
    struct chunk_waiter **pprev;
    chunk_wake_fn *cb;
    uint64_t off; /* the byte of the chunk it waits for */
};

/* The cache; NULL with <err> when a cache dir is unusable or holds another chunk_size. */
struct cache *cache_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen);
void cache_free(struct cache **c);
/* A reload: applies the limits that can change live (memory_size, disk_size, min_free, max_age);
 * the dirs and chunk_size cannot (main keeps them). A smaller memory budget evicts as fills need
 * room. */
void cache_reconfigure(struct cache *c, const struct config *cfg);
/* For `cacheparty -t`: checks, without creating or changing anything, that every cache dir that
 * holds a cache was written with the configured chunk_size (the check cache_new makes). Returns
 * 0, or -1 with <err> set to the reason start would give. */
int cache_check_dirs(const struct config *cfg, char *err, size_t errlen);
/* For a writer beside the daemon (`cacheparty import`): creates the cache dirs and their tmp/
 * where missing and checks or writes their chunk_size marker, as cache_new() does, but leaves
 * tmp/ as it is (a running daemon's writes are in it). 0, or -1 with <err>. */
int cache_dirs_prepare(const struct config *cfg, char *err, size_t errlen);
/* Whether lancache tree <dir> can be read (and, for <move>, deleted from): its top directory
 * and one directory of each level. 0, or -1 with one line saying why not in <err>. */
int cache_lancache_check_dir(const char *dir, bool move, char *err, size_t errlen);
/* The shard (index into the cache dirs) of object hash <obj> among <n_dirs> dirs. */
unsigned cache_shard_of(size_t n_dirs, const uint8_t obj[16]);
/* The chunk size, fixed for the cache's life: the one source of it for the fill and readers. */
uint64_t cache_chunk_size(const struct cache *c);

/*
 * The fill layer, as the cache sees it: given once at start (the cache copies <f>). A disk lookup
 * that finds no usable file for a chunk a reader wants calls disk_miss(arg, ck, off, o): <ck> is
 * FILLING, with nothing committed and no filler yet (borrowed: the fill takes its own refs). It
 * is usually in the table; one purged or replaced (?nocache) while readers waited for its lookup
 * is not: it is filled for those readers and not stored. <off> is where in it that reader
 * starts; <o> is the reader's origin (borrowed). It is called from the cache's I/O completion,
 * never from inside a cache_* call. Without a filler, or when every reader so far was a probe
 * (HEAD, no origin), such a chunk fails (CHUNK_FAIL_PASS).
 */
struct cache_filler {
    void (*disk_miss)(void *arg, struct chunk *ck, uint64_t off, const struct origin_req *o);
    void *arg;
};
void cache_set_filler(struct cache *c, const struct cache_filler *f);

/*
 * The object key of <path>[0..path_len) under cache identifier <ident>: "identifier\npath", NUL
 * terminated; an empty path (an absolute-form target without one) counts as "/". The caller owns
 * the result (free); *key_len receives its length without the NUL. Pure (src/cache_key.c).
 */
char *cache_key_build(const char *ident, const char *path, size_t path_len, size_t *key_len);

/* Hash of an object key ("identifier\npath"). */
void cache_obj_hash(const char *key, size_t len, uint8_t out[16]);

/* What cache_chunk_get() found. */
enum cache_lookup {
    CACHE_HIT,     /* sealed in memory */
    CACHE_JOINED,  /* being filled: this reader shares that fill */
    CACHE_LOADING, /* being looked up on disk for an earlier reader: wait on it */
    CACHE_LOOKUP,  /* a disk lookup for this reader: on a disk miss the filler fills it (a probe's
                      fails with CHUNK_FAIL_PASS, unless a later reader gave an origin) */
    CACHE_MISS,    /* in neither tier: a new FILLING chunk nobody fills yet: the caller starts
                      its fill (and counts as the one that started it) */
    CACHE_ABSENT   /* a probe (no origin) found it in neither tier: no chunk */
};

/*
 * A reference to chunk <index> of object <key> in *<out>: from memory, else a disk lookup
 * (verified on the I/O pool; the chunk stays FILLING until it is known), else a new FILLING chunk
 * for the caller to fill. <origin> (borrowed, copied for a disk lookup) is where a disk miss is
 * filled from, and <off> where in the chunk the caller will start reading; a NULL <origin> is a
 * probe (HEAD): a miss is CACHE_ABSENT (*<out> NULL) and a disk miss fails the chunk with
 * CHUNK_FAIL_PASS. A non-zero <refetch> (?nocache=: a cache_refetch_id(), the same for every
 * chunk one request reads) skips both tiers and replaces what the table holds for the chunk
 * (sealed, being looked up on disk, or being filled by an ordinary miss), except a fill that a
 * forced lookup started, which it joins (CACHE_JOINED): concurrent refetches of one chunk share
 * one fill. The first answer a refetch brings replaces the version's stored fields; its other
 * chunks answer with those too. Never calls the filler. Unref with cache_chunk_unref().
 */
enum cache_lookup cache_chunk_get(struct cache *c, const char *key, size_t key_len, uint64_t index,
                                  uint64_t off, const struct origin_req *origin, uint64_t refetch,
                                  struct chunk **out);
/* A new refetch number for one ?nocache= request (never 0). */
uint64_t cache_refetch_id(struct cache *c);
/* Another ref on <ck>; returns it. */
struct chunk *cache_chunk_ref(struct chunk *ck);
/* Drops a ref and clears *<ck>; frees the chunk at zero. */
void cache_chunk_unref(struct chunk **ck);

/* ---- reading a chunk (every accessor borrows <ck>) ---- */
enum chunk_state cache_chunk_state(const struct chunk *ck);
/* Why it failed (CHUNK_FAIL_NONE unless FAILED). */
enum chunk_fail cache_chunk_fail_cause(const struct chunk *ck);
/* The object's meta, once known (NULL before); valid while the ref is held. */
const struct cache_meta *cache_chunk_meta(const struct chunk *ck);
/* Holders of <ck> beyond the table and its filler: the clients reading it (for the dashboard). */
unsigned cache_chunk_readers(const struct chunk *ck);
uint64_t cache_chunk_index(const struct chunk *ck);
/* This chunk's length (the last one is shorter), once its meta is known. */
uint64_t cache_chunk_cap(const struct chunk *ck);
/* Bytes committed from its start (== cap once sealed). */
uint64_t cache_chunk_len(const struct chunk *ck);
/* Whether it is a disk lookup still running (FILLING, no fill yet). */
bool cache_chunk_is_loading(const struct chunk *ck);
/* Whether a fill was started for it (a request that started it and sends no bytes is a MISS). */
bool cache_chunk_is_miss(const struct chunk *ck);
/*
 * <ck> (FILLING) is being filled from the cluster node that owns it (<remote>), or from the
 * origin after all (not <remote>): a remote chunk is kept in memory like any other, but never
 * written to disk (its file is the owner's). <owner_hit>: the owner had its bytes (its answer said
 * HIT), so none of them is a miss here either (nor the rest, should the owner fail mid-chunk
 * and the rest come from elsewhere: an approximation). Once sealed and left by every reader of its
 * fill (one that some reader read: not one fetched ahead that nobody read yet), all of a remote
 * chunk's bytes count as delivered (the owner holds them all): later readers here are hits.
 */
void cache_chunk_set_remote(struct chunk *ck, bool remote, bool owner_hit);
bool cache_chunk_is_remote(const struct chunk *ck);
/*
 * Hit and miss per byte: a byte fetched from the origin is a miss the first time it is delivered
 * to any client, a hit every later time (every copy of the chunk's bytes shares one account; a
 * chunk file of an earlier run counts as delivered). Records that a reader has sent chunk bytes
 * [<off>, <off> + <len>) (committed) to its client; returns how many of them were first
 * deliveries (misses; the rest are hits).
 */
uint64_t cache_chunk_deliver(struct chunk *ck, uint64_t off, uint64_t len);
/* Whether byte <off> of <ck> was delivered to a client already (its next delivery is a hit). */
bool cache_chunk_was_delivered(const struct chunk *ck, uint64_t off);
/*
 * For the head of an answer about to send bytes [<off>, <off> + <len>) of <ck> (meta known, the
 * range within its length): true (X-Upstream-Cache-Status MISS) when byte <off> was neither
 * delivered nor announced new by another answer's head, and then those bytes are announced;
 * false (HIT) otherwise. So of several clients asking for the same new bytes at once, one head
 * says MISS.
 */
bool cache_chunk_head_is_miss(struct chunk *ck, uint64_t off, uint64_t len);
/* How many bytes from offset <off> of <ck> are committed and contiguous (may be sent now). */
uint64_t cache_chunk_avail(const struct chunk *ck, uint64_t off);
/* Where byte <off> of <ck> is (committed: cache_chunk_avail() > 0): in memory at <data>, and
 * then also at <file_off> of the chunk memory file <fd> to send it from by reference (chunkmem.h;
 * <fd> -1 when chunk memory is malloc'd), or in chunk file <fd> at <file_off> (then <data> is
 * NULL). Borrowed, valid while the ref is held. */
struct chunk_bytes {
    const char *data;
    int fd;
    off_t file_off;
};
void cache_chunk_bytes(const struct chunk *ck, uint64_t off, struct chunk_bytes *out);

/* Wake <w>, waiting for byte <off> of <ck>, once when <ck> changes (re-registering moves it).
 * Never called back from inside. */
void cache_chunk_wait(struct chunk *ck, struct chunk_waiter *w, chunk_wake_fn *cb, uint64_t off);
/* Whether a reader waits on <ck> for a byte in [<from>, <to>). */
bool cache_chunk_waited_in(const struct chunk *ck, uint64_t from, uint64_t to);
/* Stop waiting (safe when not waiting). */
void cache_chunk_unwait(struct chunk_waiter *w);

#define CACHE_SPAN_MAX 64 /* chunks one upstream request may fill */

/*
 * When memory is short (a fill waits for it, or it is full): the same chunk from its verified
 * file instead of memory (a ref, with the same miss account), so that a reader blocked on a slow
 * client does not pin memory. NULL otherwise, or when it has no file.
 */
struct chunk *cache_chunk_on_disk(struct cache *c, const struct chunk *ck);

/* Whether chunk <index> is in memory (not failed) or has a file on disk (not verified here). */
bool cache_chunk_exists(struct cache *c, const char *key, size_t key_len, uint64_t index);

/* ---- the filler's API ---- */
/*
 * Read-ahead: new FILLING chunks for the missing chunks <first>..<last> (at most CACHE_SPAN_MAX,
 * stopping before the first chunk in memory, in flight or with a file the disk index knows of),
 * each in the table and joinable at once, a ref on each in <out>[0..n) for the caller, who fills
 * them in order. Returns n (0 if <first> is present).
 */
size_t cache_chunk_span(struct cache *c, const char *key, size_t key_len, uint64_t first,
                        uint64_t last, struct chunk **out);
/* A new FILLING chunk <index> of <key> for a fill of version <m> already running (a ref for
 * it), or NULL when the chunk is in memory, in flight or on disk, or when <m> is not the object's
 * current version (it changed, or was purged, since the fill began). */
struct chunk *cache_chunk_claim(struct cache *c, const char *key, size_t key_len, uint64_t index,
                                const struct cache_meta *m);
/* The cache a chunk belongs to, and its object key (borrowed while the ref is held). */
struct cache *cache_chunk_cache(const struct chunk *ck);
const char *cache_chunk_key(const struct chunk *ck, size_t *len);
/* The filler's handle for the fill now committing into <ck> (opaque to the cache, NULL when
 * none); cleared by the cache when the chunk is sealed or fails. */
void *cache_chunk_filler(const struct chunk *ck);
void cache_chunk_set_filler(struct chunk *ck, void *fill);
/* The status of the origin answer the chunk's bytes came from (206, or 200 when the origin
 * ignored the Range), set by its fill; 0 for a chunk read from disk or not answered yet. For
 * X-Upstream-Status (lancache's $upstream_status). */
int cache_chunk_origin_status(const struct chunk *ck);
void cache_chunk_set_origin_status(struct chunk *ck, int status);
/*
 * Fills in parts: <ck> (FILLING) is filled from <off> on by a fill of its own, at once with the
 * part before <off>, which must then end there; parts join when one reaches the next. At most
 * CACHE_SPLITS_MAX parts besides the one from the chunk's start. cache_chunk_split_at() only where
 * cache_chunk_can_split_at() holds: <off> past the bytes committed from the start, within the
 * chunk, not inside a part nor where one has reached, and a part left. Undone by
 * cache_chunk_unsplit(ck, off) (nothing of that part committed yet; no-op when there is none), and
 * by cache_chunk_set_meta() for a part that turns out to lie past the chunk's end.
 */
#define CACHE_SPLITS_MAX 3
bool cache_chunk_can_split_at(const struct chunk *ck, uint64_t off);
void cache_chunk_split_at(struct chunk *ck, uint64_t off);
void cache_chunk_unsplit(struct chunk *ck, uint64_t off);
/* Whether <ck> is being filled in parts that have not all met yet. */
bool cache_chunk_is_split(const struct chunk *ck);
/* Sets the object's meta on a filling chunk (no memory yet): 0, -EINVAL when the chunk lies
 * beyond the object's end, -EFBIG for an object of too many chunks, or -ESTALE when the chunk's
 * meta, set by the fill of its other part, is another version. */
int cache_chunk_set_meta(struct chunk *ck, const struct cache_meta *m);
/* Allocates the chunk's bytes within the memory budget: 0, or -ENOMEM (then cache_mem_wait). */
int cache_chunk_reserve(struct chunk *ck);
/* Whether its bytes are allocated (cache_chunk_reserve() succeeded, or a disk chunk's file). */
bool cache_chunk_is_reserved(const struct chunk *ck);
void cache_mem_wait(struct cache *c, struct chunk_waiter *w, chunk_wake_fn *cb);
/* Whether <len> bytes at offset <off> may be committed now: the chunk fills, its meta is known,
 * and <off> is where one of its parts has reached (without running into the next part). */
bool cache_chunk_fits(const struct chunk *ck, uint64_t off, size_t len);
/* Commits them (cache_chunk_fits must hold; memory reserved); joins the parts when they meet. */
void cache_chunk_commit(struct chunk *ck, uint64_t off, const char *data, size_t len);
void cache_chunk_seal(struct chunk *ck);
/* Wakes the chunk's waiters (soon, not from inside) though nothing changed: they look again. */
void cache_chunk_poke(struct chunk *ck);
void cache_chunk_failed(struct chunk *ck, enum chunk_fail why);
/* Fails <ck> (FILLING) with CHUNK_FAIL_PASS and the origin's answer <a> (complete; the chunk takes
 * a ref on it): its readers are answered from it instead of sending their requests again. */
void cache_chunk_failed_answer(struct chunk *ck, struct answer *a);
/* The answer <ck> failed with (borrowed while the chunk ref is held), or NULL (for CHUNK_FAIL_PASS:
 * the reader forwards its own request). */
struct answer *cache_chunk_answer(const struct chunk *ck);

/*
 * Removes every chunk of object <key> ("identifier\npath"). At once: its chunks leave memory
 * (readers in flight keep their refs and finish) and lookups (a request for it is a miss, and its
 * files are neither read, nor written, nor moved in from lancache's until the purge is done).
 * Then its chunk files (all in one directory) are unlinked by the I/O pool, one purge at a time
 * in the order asked, never on the loop; then <done>(<arg>, n) runs on the loop, n being the
 * chunks removed (those being filled, plus the files unlinked), or -errno when the directory
 * could not be read. <done> (NULL: none) never runs from inside cache_purge(). The purge returned
 * is the caller's handle until <done> runs: cache_purge_forget() if the caller goes first.
 * Purges queued at cache_free() still run, and call <done>.
 */
typedef void cache_purge_done(void *arg, int removed);
struct cache_purge;
struct cache_purge *cache_purge(struct cache *c, const char *key, size_t key_len,
                                cache_purge_done *done, void *arg);
/* <done> of purge <p> is not called (its caller goes away); the purge goes on. */
void cache_purge_forget(struct cache_purge *p);
/* Purges queued or running. */
size_t cache_purges_pending(const struct cache *c);

/*
 * The inventory of the disk tier (cache_inventory.c; groups as inventory.h defines them). The
 * start-up scan's files join their group once the I/O pool has read their header's key (one job
 * of at most CACHE_INV_READ_BATCH files at a time); listings and purges of a group walk the disk
 * index in bounded steps from a timer, never more than CACHE_INV_STEP entries per step.
 */
#define CACHE_INV_LIST_MAX 200     /* objects a listing shows (the first found) */
#define CACHE_INV_LIST_TTL_MS 5000 /* a listing done is shown that long, then made again */
#define CACHE_INV_PURGES 16        /* purges queued or running at once */
#define CACHE_INV_READ_BATCH 256
#define CACHE_INV_STEP 65536
struct inventory;
/* The groups (owned by the disk index). */
struct inventory *cache_inventory(struct cache *c);
struct cache_inv_status {
    bool complete;          /* the scan is over and every file found has its group */
    uint64_t unread_chunks; /* files whose key is not read yet */
    unsigned purges;        /* purges queued or running */
    uint64_t purged_chunks; /* chunk files removed by purges of groups since start */
    uint64_t index_bytes;   /* memory of the disk index, the inventory included */
};
void cache_inv_status(struct cache *c, struct cache_inv_status *out);

struct cache_inv_obj {
    char *path; /* owns: the object's path (its key less the identifier); NULL: unreadable */
    uint8_t obj[16];
    uint64_t first_index; /* its lowest chunk found */
    unsigned shard;
    uint64_t bytes, chunks, last_ms;
};
struct cache_inv_listing {
    char service[64], prefix[96];
    size_t n;
    struct cache_inv_obj objs[CACHE_INV_LIST_MAX];
    bool truncated;   /* the group holds more objects than these */
    uint64_t done_ms; /* wall clock when it was done */
};
enum cache_inv_list_rc { CACHE_INV_LIST_DONE, CACHE_INV_LIST_PENDING, CACHE_INV_LIST_NONE };
/*
 * The objects of group (<service>, <prefix>): DONE with *<out> (borrowed until the next call of
 * the loop), PENDING when a listing of it was started or runs (ask again), NONE when the group
 * holds nothing. One listing runs at a time: asking for another group starts that one instead.
 */
enum cache_inv_list_rc cache_inv_list(struct cache *c, const char *service, const char *prefix,
                                      const struct cache_inv_listing **out);
/*
 * Purges group (<service>, <prefix>), or with <prefix> NULL every group of <service>: in bounded
 * steps, each object of them as cache_purge() does (its kept answers excepted: they are not
 * chunks), also chunks stored into them while it runs. Returns the chunk files it starts from
 * (in *<chunks>) and the groups (0: nothing stored there), or -EBUSY when CACHE_INV_PURGES run.
 */
int cache_inv_purge(struct cache *c, const char *service, const char *prefix, uint64_t *chunks);

/* The fresh answers that are not objects (anstore.h), within [cache] answers_memory: a purge
 * and a new object version drop the object's entry. Borrowed. */
struct anstore *cache_answers(struct cache *c);
/* Whether a version of object <key> is known (its length and validators in the objver table: it
 * has chunks in memory or on disk that were looked at lately). */
bool cache_object_is_known(struct cache *c, const char *key, size_t key_len);

/* Gauges, read when the counters are exported (the cache's counters are in g_stats, stats.h). */
struct cache_stats {
    uint64_t mem_bytes, mem_chunks;
    uint64_t answers, answer_bytes; /* the fresh answers kept (anstore) */
    uint64_t shards_down;           /* cache dirs switched to pass-through after a disk error */
    uint64_t io_pending;            /* disk jobs queued or running */
    uint64_t disk_bytes, disk_chunks, disk_evictions; /* from the disk index (diskidx) */
    bool disk_scan_done;
    uint64_t mem_limit, disk_limit;    /* memory_size, disk_size (0: none) */
    uint64_t disk_free, disk_fs_bytes; /* the cache dirs' filesystems: free, whole (0: unknown) */
};
void cache_get_stats(const struct cache *c, struct cache_stats *out);
unsigned cache_live_chunks(void);

#endif
