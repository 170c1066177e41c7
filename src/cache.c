/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache: memory table, CLOCK eviction, memory budget, disk tier, versions. See cache.h.
 *
 * Chunk lifecycle:
 * | phase           | who moves it there                      | refs held by                  |
 * |-----------------|-----------------------------------------|-------------------------------|
 * | FILLING, no meta| cache_chunk_get() on a miss             | table, fill, first reader     |
 * | FILLING + meta  | cache_chunk_set_meta() (fill's head)    | + data allocated in budget    |
 * | SEALED (memory) | cache_chunk_seal(): written to disk     | table (+ readers)             |
 * | SEALED (disk)   | cache_chunk_get() found a verified file | readers only (not in table)   |
 * | FAILED          | cache_chunk_failed(): out of the table  | readers until they notice     |
 * | freed           | last cache_chunk_unref()                | -                             |
 * Memory is returned when the last ref goes; eviction only drops the table's ref, and only of
 * sealed chunks nobody else holds. Waiters are woken from a pending event of the highest priority
 * (notify_soon), at most once per callback that changed the chunk, never inside that call.
 * A disk lookup is a FILLING chunk with <loading> set (in the table, so that concurrent readers
 * share it) until the I/O pool answers: then it becomes a sealed disk chunk (out of the table),
 * or it goes to the filler (cache_set_filler), which fills it as any miss.
 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include <ev.h>

#include "answer.h"
#include "anstore.h"
#include "config.h"
#include "cache_int.h"
#include "diskidx.h"
#include "iopool.h"
#include "log.h"
#include "ngxfile.h"
#include "objhead.h"
#include "origin.h"
#include "range.h"
#include "stats.h"
#include "util.h"

#define CHUNK_MAGIC 0xc4c4e002u
#define CACHE_OBJ_SLOTS 65536u /* remembered object versions: sets of CACHE_OBJ_WAYS, LRU */
#define CACHE_OBJ_WAYS 4u

/* A stored head must fit its chunk file. */
_Static_assert(OBJHEAD_FIELDS_MAX == CHUNKFILE_FIELDS_MAX, "stored fields bound");
_Static_assert(OBJHEAD_DATE_MAX == CHUNKFILE_DATE_MAX, "stored Date bound");
#define CACHE_VERIFIED_SLOTS 65536u
#define CACHE_MARKER "cacheparty.cache"
#define CACHE_MARKER_VERSION 1
#define CACHE_VERIFY_BUF UTIL_IO_STEP /* on a worker's stack; one read each (util.h) */
#define CACHE_IO_THREADS 4u
#define CACHE_SHARD_RETRY_S 30
#define CACHE_MAX_CHUNKS (1ull << 26) /* an object of more chunks is not cached */

static unsigned live_chunks;

unsigned cache_live_chunks(void)
{
    return live_chunks;
}

void cache_obj_hash(const char *key, size_t len, uint8_t out[16])
{
    chunkfile_key_hash(key, len, out);
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static size_t bucket_of(const struct cache *c, const uint8_t obj[16], uint64_t index)
{
    uint64_t h = load64(obj) ^ (index * 0x9e3779b97f4a7c15ull);
    return (size_t)(h ^ (h >> 29)) & (c->n_buckets - 1);
}

static uint64_t version_hash(const struct cache_meta *m)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, m->etag, strlen(m->etag) + 1);
    XXH3_64bits_update(&st, m->last_modified, strlen(m->last_modified));
    return XXH3_64bits_digest(&st);
}

/* The first of <obj>'s CACHE_OBJ_WAYS slots. */
static struct objver *objver_set_of(struct cache *c, const uint8_t obj[16])
{
    size_t sets = CACHE_OBJ_SLOTS / CACHE_OBJ_WAYS;
    return &c->objs[(load64(obj + 8) & (sets - 1)) * CACHE_OBJ_WAYS];
}

/* The slot remembering <obj>, or NULL (a lookup: counts as a use). */
struct objver *cache_objver_find(struct cache *c, const uint8_t obj[16])
{
    struct objver *set = objver_set_of(c, obj);
    for (unsigned i = 0; i < CACHE_OBJ_WAYS; i++)
        if (set[i].used && memcmp(set[i].obj, obj, 16) == 0) {
            set[i].last_use = ++c->objver_clock;
            return &set[i];
        }
    return NULL;
}

static void objver_drop_head(struct cache *c, struct objver *v)
{
    if (v->head != NULL)
        c->objver_head_bytes -= sizeof(*v->head) + v->head->len;
    objhead_unref(&v->head);
    v->renewed_by = 0;
}

/* Forgets slot <v> (its head ref dropped). */
static void objver_clear(struct cache *c, struct objver *v)
{
    objver_drop_head(c, v);
    memset(v, 0, sizeof(*v));
}

/* The remembered version of <obj>, or NULL. */
const struct objver *cache_objver_get(struct cache *c, const uint8_t obj[16])
{
    return cache_objver_find(c, obj);
}

bool cache_objver_matches(const struct objver *v, const struct cache_meta *m)
{
    return v->total == m->total && v->vhash == version_hash(m);
}

/*
 * Remembers <m> as the current version of <obj> (in its slot, else a free one of its set, else
 * the set's least recently used). Returns the head every chunk of that version is to carry: the
 * one remembered for it before, else <m>'s; <refetch> (a cache_refetch_id, 0: none) replaces a
 * head stored before that refetch began with <m>'s, once: every chunk one refetching request
 * reads answers with one set of fields. Heads are kept within a budget (budget / 16 bytes);
 * past it <m>'s is returned and not remembered. Borrowed: valid until the next objver_*.
 */
struct objhead *cache_objver_set(struct cache *c, const uint8_t obj[16], const struct cache_meta *m,
                                 uint64_t refetch)
{
    struct objver *v = cache_objver_find(c, obj);
    if (v == NULL) {
        struct objver *set = objver_set_of(c, obj);
        v = &set[0];
        for (unsigned i = 0; i < CACHE_OBJ_WAYS; i++) {
            if (!set[i].used) {
                v = &set[i];
                break;
            }
            if (set[i].last_use < v->last_use)
                v = &set[i];
        }
        objver_clear(c, v);
    }
    bool same = v->used && cache_objver_matches(v, m);
    bool renew = refetch != 0 && v->renewed_by != refetch;
    if (!same)
        v->lancache = false;
    if (!same || v->head == NULL || (renew && m->head != NULL)) {
        objver_drop_head(c, v);
        if (m->head != NULL &&
            c->objver_head_bytes + sizeof(*m->head) + m->head->len <= c->budget / 16) {
            v->head = objhead_ref(m->head);
            c->objver_head_bytes += sizeof(*m->head) + m->head->len;
            v->renewed_by = refetch;
        }
    }
    memcpy(v->obj, obj, 16);
    v->total = m->total;
    v->vhash = version_hash(m);
    v->used = true;
    v->last_use = ++c->objver_clock;
    return v->head != NULL ? v->head : m->head;
}

uint64_t cache_refetch_id(struct cache *c)
{
    return ++c->refetch_seq;
}

void cache_meta_copy(struct cache_meta *dst, const struct cache_meta *src)
{
    *dst = *src;
    if (dst->head != NULL)
        objhead_ref(dst->head);
}

void cache_meta_clear(struct cache_meta *m)
{
    objhead_unref(&m->head);
}

/* <ck>'s meta becomes <m> with the version's head <head> (a ref of its own). */
void cache_chunk_take_meta(struct chunk *ck, const struct cache_meta *m, struct objhead *head)
{
    cache_meta_clear(&ck->meta);
    ck->meta = *m;
    ck->meta.head = head != NULL ? objhead_ref(head) : NULL;
}

/* ---- waking waiters ------------------------------------------------------------------------ */

static void chunk_ref(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ck->refs++;
}

struct chunk *cache_chunk_ref(struct chunk *ck)
{
    chunk_ref(ck);
    return ck;
}

/*
 * Runs on_notify() in the current loop iteration, right after the callback running now and before
 * any watcher of lower priority (the clients' I/O): the notify watcher is fed as a pending event
 * of the highest priority, never invoked from inside the call that changed a chunk. A waiting
 * client thus sends a head or bytes one callback after they arrive, not after every other
 * client's turn in this iteration.
 */
static void notify_soon(struct cache *c)
{
    if (!ev_is_pending(&c->notify_ev))
        ev_feed_event(c->loop, &c->notify_ev, EV_TIMER);
}

static void chunk_notify(struct chunk *ck)
{
    struct cache *c = ck->cache;
    if (ck->notify_pending || ck->waiters == NULL)
        return;
    ck->notify_pending = true;
    chunk_ref(ck);
    ck->notify_next = c->notify;
    c->notify = ck;
    notify_soon(c);
}

static void mem_notify(struct cache *c)
{
    if (c->mem_waiters == NULL)
        return;
    c->mem_notify = true;
    notify_soon(c);
}

/* Wakes every waiter of *<head> once. They are moved to *<waking> first, and each is unlinked
 * from it as it is called: callbacks may wait again (they then join the live list, not this one),
 * and the ones not called yet are still seen as waiting (cache_chunk_waited_in). */
static void wake_list(struct chunk_waiter **head, struct chunk_waiter **waking)
{
    ASSERT(*waking == NULL);
    *waking = *head;
    *head = NULL;
    if (*waking != NULL)
        (*waking)->pprev = waking;
    while (*waking != NULL) {
        struct chunk_waiter *w = *waking;
        *waking = w->next;
        if (*waking != NULL)
            (*waking)->pprev = waking;
        w->next = NULL;
        w->pprev = NULL;
        w->cb(w);
    }
}

static void on_notify(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct cache *c = container_of(t, struct cache, notify_ev);
    while (c->notify != NULL || c->mem_notify) {
        if (c->mem_notify) {
            c->mem_notify = false;
            struct chunk_waiter *waking = NULL;
            wake_list(&c->mem_waiters, &waking);
        }
        struct chunk *ck = c->notify;
        if (ck == NULL)
            continue;
        c->notify = ck->notify_next;
        ck->notify_pending = false;
        wake_list(&ck->waiters, &ck->waking);
        cache_chunk_unref(&ck);
    }
}

void cache_chunk_wait(struct chunk *ck, struct chunk_waiter *w, chunk_wake_fn *cb, uint64_t off)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    cache_chunk_unwait(w); /* waiting again (e.g. driven by another event meanwhile) */
    w->cb = cb;
    w->off = off;
    w->next = ck->waiters;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &ck->waiters;
    ck->waiters = w;
}

bool cache_chunk_waited_in(const struct chunk *ck, uint64_t from, uint64_t to)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    for (const struct chunk_waiter *w = ck->waiters; w != NULL; w = w->next)
        if (w->off >= from && w->off < to)
            return true;
    for (const struct chunk_waiter *w = ck->waking; w != NULL; w = w->next)
        if (w->off >= from && w->off < to)
            return true;
    return false;
}

void cache_chunk_unwait(struct chunk_waiter *w)
{
    if (w->pprev == NULL)
        return;
    *w->pprev = w->next;
    if (w->next != NULL)
        w->next->pprev = w->pprev;
    w->next = NULL;
    w->pprev = NULL;
}

void cache_mem_wait(struct cache *c, struct chunk_waiter *w, chunk_wake_fn *cb)
{
    ASSERT(w->pprev == NULL);
    w->cb = cb;
    w->next = c->mem_waiters;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &c->mem_waiters;
    c->mem_waiters = w;
}

/* ---- memory table and CLOCK ------------------------------------------------------------------ */

static struct chunk *table_find(struct cache *c, const uint8_t obj[16], uint64_t index)
{
    for (struct chunk *ck = c->buckets[bucket_of(c, obj, index)]; ck; ck = ck->hnext)
        if (ck->index == index && memcmp(ck->obj, obj, 16) == 0)
            return ck;
    return NULL;
}

static void ring_add(struct cache *c, struct chunk *ck)
{
    if (c->ring == NULL) {
        ck->cnext = ck->cprev = ck;
        c->ring = ck;
    } else {
        ck->cnext = c->ring;
        ck->cprev = c->ring->cprev;
        ck->cprev->cnext = ck;
        c->ring->cprev = ck;
    }
    c->ring_count++;
}

static void ring_del(struct cache *c, struct chunk *ck)
{
    if (ck->cnext == NULL)
        return;
    if (ck->cnext == ck) {
        c->ring = NULL;
    } else {
        ck->cprev->cnext = ck->cnext;
        ck->cnext->cprev = ck->cprev;
        if (c->ring == ck)
            c->ring = ck->cnext;
    }
    ck->cnext = ck->cprev = NULL;
    c->ring_count--;
}

/* Drops the table's ref (the chunk lives on while readers hold it). */
static void table_remove(struct cache *c, struct chunk *ck)
{
    if (!ck->in_table)
        return;
    struct chunk **pp = &c->buckets[bucket_of(c, ck->obj, ck->index)];
    while (*pp != ck)
        pp = &(*pp)->hnext;
    *pp = ck->hnext;
    ck->hnext = NULL;
    ck->in_table = false;
    ring_del(c, ck);
    cache_chunk_unref(&ck);
}

static void table_insert(struct cache *c, struct chunk *ck)
{
    size_t b = bucket_of(c, ck->obj, ck->index);
    ck->hnext = c->buckets[b];
    c->buckets[b] = ck;
    ck->in_table = true;
    chunk_ref(ck);
}

/* Evicts sealed chunks nobody reads until <need> more bytes fit. Returns whether they do. */
static bool evict_for(struct cache *c, uint64_t need)
{
    size_t steps = 2 * c->ring_count + 1;
    while (c->mem_used + need > c->budget && c->ring != NULL && steps-- > 0) {
        struct chunk *ck = c->ring;
        c->ring = ck->cnext;
        if (ck->refs > 1)
            continue;
        if (ck->clock_ref) {
            ck->clock_ref = false;
            continue;
        }
        g_stats.cache_evictions++;
        ck->evicted = true;
        table_remove(c, ck); /* frees it: refs was 1 */
    }
    return c->mem_used + need <= c->budget;
}

static void chunk_release_mem(struct chunk *ck)
{
    struct cache *c = ck->cache;
    chunkmem_put(c->mem, &ck->mem_block);
    if (ck->mem > 0) {
        c->mem_used -= ck->mem;
        c->st.mem_chunks--;
        ck->mem = 0;
        mem_notify(c);
    }
}

void cache_chunk_unref(struct chunk **ckp)
{
    struct chunk *ck = *ckp;
    if (ck == NULL)
        return;
    *ckp = NULL;
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->refs > 0);
    if (--ck->refs > 0) {
        /* Only the table holds it now: it can be evicted, so a fill waiting for memory may
         * go on. */
        if (ck->refs == 1 && ck->in_table && ck->state == CHUNK_S_SEALED &&
            ck->mem_block.data != NULL)
            mem_notify(ck->cache);
        /* A chunk passed on from its owner, read here and whose readers are all done: its
         * owner has every byte of it, so a later delivery here is a hit whether or not this
         * node sent that byte before (another node may have). Not one that nobody read yet
         * (fetched ahead of its reader): its first reader's bytes are that download's misses,
         * as for a chunk this node fills itself. */
        if (ck->refs == 1 && ck->in_table && ck->state == CHUNK_S_SEALED && ck->remote &&
            ck->seen != NULL && !cache_seen_is_untouched(ck->seen))
            cache_seen_unref(&ck->seen);
        return;
    }
    ASSERT(!ck->in_table && ck->waiters == NULL && ck->waking == NULL && !ck->notify_pending &&
           ck->filler == NULL);
    /* Evicted before all its bytes were delivered: a later load of its file takes the record. */
    if (ck->seen != NULL && ck->evicted && ck->state == CHUNK_S_SEALED && !ck->remote &&
        !cache_seen_is_complete(ck->seen, ck->cap))
        cache_seen_tab_keep(&ck->cache->seen, ck->seen);
    cache_seen_unref(&ck->seen);
    chunk_release_mem(ck);
    if (ck->fd >= 0)
        close(ck->fd);
    cache_meta_clear(&ck->meta);
    answer_unref(&ck->answer);
    free(ck->origin);
    free(ck->key);
    ck->magic = 0;
    live_chunks--;
    free(ck);
}

static struct chunk *chunk_new(struct cache *c, const char *key, size_t key_len,
                               const uint8_t obj[16], uint64_t index)
{
    struct chunk *ck = xcalloc(1, sizeof(*ck));
    ck->magic = CHUNK_MAGIC;
    ck->refs = 1;
    ck->cache = c;
    memcpy(ck->obj, obj, 16);
    ck->index = index;
    ck->fd = -1;
    ck->key = xstrndup(key, key_len);
    ck->key_len = key_len;
    live_chunks++;
    return ck;
}

/* <ck> is to be filled from the origin: none of its bytes was delivered yet. */
static void chunk_fresh_bytes(struct chunk *ck)
{
    cache_seen_unref(&ck->seen);
    ck->seen = cache_seen_new(ck->obj, ck->index);
    cache_seen_tab_forget(&ck->cache->seen, ck->obj, ck->index);
}

/* A miss: a FILLING chunk in the table (its ref plus the caller's), for a fill to start. */
static struct chunk *chunk_new_filling(struct cache *c, const char *key, size_t key_len,
                                       const uint8_t obj[16], uint64_t index)
{
    struct chunk *ck = chunk_new(c, key, key_len, obj, index);
    ck->state = CHUNK_S_FILLING;
    ck->started_by_fetch = true;
    chunk_fresh_bytes(ck);
    table_insert(c, ck);
    g_stats.cache_misses++;
    return ck;
}

/* ---- disk tier ----------------------------------------------------------------------------- */
/*
 * Disk work runs on the I/O pool (iopool.h), never on the loop: a load job opens, checks and (the
 * first time) verifies a chunk file; a store job writes a sealed chunk's file. Both hold a chunk
 * ref, taken and dropped on the loop; a worker reads only the job's own copy of the key and
 * paths, and (store) the sealed chunk's bytes and meta, which never change while it is sealed.
 * Renames into place and deletions of damaged files happen under <disk_mu>, so that a PURGE
 * (which marks the object's pending stores cancelled under the same lock before it deletes the
 * files) never lets a chunk file reappear after it, and a load never deletes a file that a store
 * has just put in place of the damaged one it read.
 */

enum load_result {
    LOAD_OK,
    LOAD_MISSING, /* no file */
    LOAD_ERROR,   /* cannot open or read now (descriptors, permissions, EIO): a miss, kept */
    LOAD_BAD,     /* damaged: deleted (why says how) */
    LOAD_OLD,     /* of an earlier format (no stored fields): deleted, refetched */
    LOAD_UNKNOWN  /* not verified earlier and verification not allowed here */
};

struct load_job {
    struct iojob j;
    struct cache *c;  /* loop side */
    struct chunk *ck; /* a ref; loop side */
    unsigned shard;
    /* In: */
    char path[PATH_MAX];
    const char *key; /* the chunk's key (a copy owned by key_own for a pool job) */
    size_t key_len;
    char *key_own;
    uint64_t chunk_size, index;
    bool known; /* this file (dev, ino, size) verified earlier in this process */
    dev_t dev;
    ino_t ino;
    off_t size;
    /* Out: */
    enum load_result res;
    int err; /* errno of LOAD_ERROR */
    const char *why;
    int fd;
    struct stat sb;
    struct cache_meta meta;
    uint64_t data_len;
    size_t hdr_len;
    bool verified_now;
    bool deleted;        /* LOAD_BAD: the damaged file was deleted (not replaced meanwhile) */
    bool skip_own;       /* the disk index knows there is no chunk file: only lancache's */
    bool no_own;         /* a purge holds the object: its chunk file is never read (lancache's) */
    struct lc_query *lc; /* owns: the lancache lookup on a miss (NULL: none) */
    bool lc_leftover;    /* with move: when ours loads, look for a nginx file left of the slice */
};

struct store_job {
    struct iojob j;
    struct cache *c;
    struct chunk *ck; /* a ref: its bytes, key and meta are immutable while it is sealed */
    unsigned shard;
    bool cancelled; /* written by the loop under c->disk_mu (a PURGE came first: do not put the
                     * file in place); the worker reads it under the lock, the loop without */
    struct store_job *next, **pprev; /* c->stores: every pending store (loop side) */
    int rc;
    bool have_sb;
    struct stat sb;
    char path[PATH_MAX], tmp[PATH_MAX];
};

unsigned cache_shard_of(size_t n_dirs, const uint8_t obj[16])
{
    return obj[0] % (unsigned)n_dirs;
}

static unsigned shard_of(const struct cache *c, const uint8_t obj[16])
{
    return cache_shard_of(c->n_dirs, obj);
}

const char *cache_shard_dir(const struct cache *c, const uint8_t obj[16])
{
    return c->dirs[shard_of(c, obj)];
}

static void shards_recount(struct cache *c)
{
    c->st.shards_down = 0;
    for (size_t i = 0; i < c->n_dirs; i++)
        if (c->shards[i].down[SHARD_STORE] || c->shards[i].down[SHARD_LOAD])
            c->st.shards_down++;
}

/* Whether <op> is switched off on the shard after a disk error (retried after a while). */
bool cache_shard_down(struct cache *c, unsigned shard, enum shard_op op)
{
    struct shard_state *ss = &c->shards[shard];
    if (!ss->down[op])
        return false;
    if (ev_now(c->loop) < ss->retry_at[op])
        return true;
    ss->down[op] = false; /* try again; the next error switches it back */
    shards_recount(c);
    log_info("cache: retrying %s cache dir %s after the earlier error",
             op == SHARD_STORE ? "writes to" : "reads from", c->dirs[shard]);
    return false;
}

/* A disk error that says the shard's filesystem is unusable for <op> (full, failing,
 * read-only). */
bool cache_shard_error(int err, enum shard_op op)
{
    if (op == SHARD_LOAD)
        return err == EIO;
    return err == ENOSPC || err == EIO || err == EROFS || err == EDQUOT;
}

void cache_shard_fail(struct cache *c, unsigned shard, enum shard_op op, int err)
{
    struct shard_state *ss = &c->shards[shard];
    ss->retry_at[op] = ev_now(c->loop) + CACHE_SHARD_RETRY_S;
    if (ss->down[op])
        return;
    ss->down[op] = true;
    shards_recount(c);
    if (op == SHARD_STORE)
        log_err("cache: cache dir %s: %s: serving new chunks without storing them (retry in %d s)",
                c->dirs[shard], strerror(err), CACHE_SHARD_RETRY_S);
    else
        log_err("cache: cache dir %s: %s: serving its chunks from the origin (retry in %d s)",
                c->dirs[shard], strerror(err), CACHE_SHARD_RETRY_S);
}

static struct verified *verified_slot(struct cache *c, const uint8_t obj[16], uint64_t index)
{
    uint64_t h = load64(obj + 4) ^ (index * 0x9e3779b97f4a7c15ull);
    return &c->verified[(h ^ (h >> 31)) & (CACHE_VERIFIED_SLOTS - 1)];
}

/* Remembers that the file <sb> of (obj, index) verified (or was just written by us). */
static void verified_mark(struct cache *c, const uint8_t obj[16], uint64_t index,
                          const struct stat *sb)
{
    struct verified *vs = verified_slot(c, obj, index);
    memcpy(vs->obj, obj, 16);
    vs->index = index;
    vs->dev = sb->st_dev;
    vs->ino = sb->st_ino;
    vs->size = sb->st_size;
    vs->used = true;
}

/* Fills a load job's input for chunk (<obj>, <index>) of <key> (borrowed by the job). */
static int load_prepare(struct cache *c, struct load_job *lj, const char *key, size_t key_len,
                        const uint8_t obj[16], uint64_t index)
{
    memset(lj, 0, sizeof(*lj));
    lj->c = c;
    lj->shard = shard_of(c, obj);
    if (chunkfile_path(lj->path, sizeof(lj->path), c->dirs[lj->shard], obj, index) < 0)
        return -1;
    lj->key = key;
    lj->key_len = key_len;
    lj->chunk_size = c->chunk_size;
    lj->index = index;
    lj->fd = -1;
    const struct verified *vs = verified_slot(c, obj, index);
    if (vs->used && memcmp(vs->obj, obj, 16) == 0 && vs->index == index) {
        lj->known = true;
        lj->dev = vs->dev;
        lj->ino = vs->ino;
        lj->size = vs->size;
    }
    return 0;
}

/* Streams the body through XXH3: 0 when it matches, -EBADMSG when not (or the file ends
 * early), -errno when it cannot be read. */
static int body_verifies(int fd, off_t off, uint64_t len, uint64_t want)
{
    char buf[CACHE_VERIFY_BUF];
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    while (len > 0) {
        size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        int rc = util_pread_exact(fd, buf, n, off);
        if (rc < 0)
            return rc == -ENODATA ? -EBADMSG : rc;
        XXH3_64bits_update(&st, buf, n);
        off += (off_t)n;
        len -= n;
    }
    return XXH3_64bits_digest(&st) == want ? 0 : -EBADMSG;
}

/* Deletes the damaged file <lj->path> if it is still the one read (a store may have replaced
 * it meanwhile). Returns whether it did. */
static bool load_delete_bad(struct load_job *lj)
{
    struct stat now;
    bool deleted = false;
    pthread_mutex_lock(&lj->c->disk_mu);
    if (lstat(lj->path, &now) == 0 && now.st_dev == lj->sb.st_dev && now.st_ino == lj->sb.st_ino)
        deleted = unlink(lj->path) == 0;
    pthread_mutex_unlock(&lj->c->disk_mu);
    return deleted;
}

/*
 * Opens and checks the chunk file: header, key, chunk size and index, length, and the body's
 * checksum unless this very file verified earlier (<may_verify> false: LOAD_UNKNOWN instead).
 * Blocking: runs on a worker, or on the loop only for a file known to be verified and hot.
 */
static void load_file(struct load_job *lj, bool may_verify)
{
    uint8_t hdr[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta m;
    uint64_t body_hash = 0;
    ssize_t n;
    lj->fd = open(lj->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (lj->fd < 0) {
        lj->err = errno;
        if (errno == ELOOP) { /* a symlink where a chunk file belongs */
            lj->why = "a symbolic link";
            if (lstat(lj->path, &lj->sb) == 0)
                lj->deleted = load_delete_bad(lj);
            lj->res = LOAD_BAD;
        } else {
            lj->res = errno == ENOENT ? LOAD_MISSING : LOAD_ERROR;
        }
        return;
    }
    if (fstat(lj->fd, &lj->sb) < 0 || !S_ISREG(lj->sb.st_mode)) {
        lj->why = "not a regular file";
        goto bad;
    }
    n = pread(lj->fd, hdr, sizeof(hdr), 0);
    if (n < 0) {
        lj->err = errno; /* EIO, EINTR...: not the file's fault */
        goto error;
    }
    if (n <= 0 || chunkfile_header_parse(hdr, (size_t)n, &m, &body_hash, &lj->hdr_len) != 0) {
        lj->why = "bad header";
        goto bad;
    }
    if (m.key_len != lj->key_len || memcmp(m.key, lj->key, lj->key_len) != 0) {
        lj->why = "another key's file";
        goto bad;
    }
    if (m.chunk_size != lj->chunk_size || m.index != lj->index) {
        lj->why = "wrong chunk size or index";
        goto bad;
    }
    if ((uint64_t)lj->sb.st_size != lj->hdr_len + m.data_len) {
        lj->why = "wrong length (truncated or extended)";
        goto bad;
    }
    memset(&lj->meta, 0, sizeof(lj->meta));
    lj->meta.total = m.total;
    memcpy(lj->meta.etag, m.etag, m.etag_len);
    memcpy(lj->meta.last_modified, m.last_modified, m.last_modified_len);
    memcpy(lj->meta.content_type, m.content_type, m.content_type_len);
    lj->data_len = m.data_len;
    if (m.version < CHUNKFILE_VERSION) {
        /* Written before the stored response fields: an answer from it would lack the origin's
         * fields. A miss: deleted here, refetched and stored anew (with them) by the filler. */
        lj->res = LOAD_OLD;
        lj->deleted = load_delete_bad(lj);
        goto out;
    }
    if (!(lj->known && lj->dev == lj->sb.st_dev && lj->ino == lj->sb.st_ino &&
          lj->size == lj->sb.st_size)) {
        if (!may_verify) {
            lj->res = LOAD_UNKNOWN;
            goto out;
        }
        int rc = body_verifies(lj->fd, (off_t)lj->hdr_len, m.data_len, body_hash);
        if (rc == -EBADMSG) {
            lj->why = "body checksum mismatch";
            goto bad;
        }
        if (rc < 0) {
            lj->err = -rc;
            goto error;
        }
        lj->verified_now = true;
    }
    lj->meta.head =
        objhead_new(m.fields, m.fields_len, m.date, m.date_len, m.response_time, m.initial_age);
    if (lj->meta.head == NULL) {
        lj->why = "bad stored fields";
        goto bad;
    }
    lj->res = LOAD_OK;
    return;
bad:
    lj->res = LOAD_BAD;
    lj->deleted = load_delete_bad(lj);
    goto out;
error:
    lj->res = LOAD_ERROR;
out:
    close(lj->fd);
    lj->fd = -1;
}

/* Turns a loaded file into a SEALED disk chunk <ck> (or deletes it: another version). */
static bool load_accept(struct cache *c, struct load_job *lj, struct chunk *ck)
{
    const struct objver *v = cache_objver_get(c, ck->obj);
    if (v != NULL && !cache_objver_matches(v, &lj->meta)) {
        /* An older version of an object the origin has since changed. */
        log_info("cache: %s: stale version: deleted", lj->path);
        if (load_delete_bad(lj))
            diskidx_remove(c->didx, ck->obj, ck->index);
        close(lj->fd);
        lj->fd = -1;
        return false;
    }
    if (lj->verified_now)
        verified_mark(c, ck->obj, ck->index, &lj->sb);
    ck->state = CHUNK_S_SEALED;
    cache_chunk_take_meta(ck, &lj->meta, cache_objver_set(c, ck->obj, &lj->meta, 0));
    cache_meta_clear(&lj->meta);
    ck->meta_known = true;
    ck->cap = ck->len = lj->data_len;
    ck->fd = lj->fd;
    lj->fd = -1;
    ck->body_off = (off_t)lj->hdr_len;
    /* Its bytes count as delivered, unless its memory chunk was evicted with some not yet. */
    ASSERT(ck->seen == NULL);
    ck->seen = cache_seen_tab_find(&c->seen, ck->obj, ck->index);
    g_stats.cache_disk_hits++;
    diskidx_touch(c->didx, ck->obj, ck->index, util_wall_ms());
    return true;
}

/* Counts and logs what a load found wrong (the file is already deleted). */
static void load_report(struct cache *c, const struct load_job *lj, const struct chunk *ck)
{
    if (lj->res == LOAD_BAD) {
        if (lj->deleted)
            diskidx_remove(c->didx, ck->obj, ck->index);
        g_stats.cache_integrity_failures++;
        log_warn("cache: %s: %s: deleted, will refetch", lj->path, lj->why);
    } else if (lj->res == LOAD_OLD) {
        static bool told;
        if (lj->deleted)
            diskidx_remove(c->didx, ck->obj, ck->index);
        g_stats.cache_old_format++;
        if (!told)
            log_info("cache: chunk files of an earlier format (without the origin's response "
                     "fields) found, %s the first: each is refetched once, when first asked",
                     lj->path);
        told = true;
    } else if (lj->res == LOAD_ERROR) {
        /* Out of descriptors, permissions...: a miss for now, never a reason to delete. */
        log_warn("cache: cannot read %s: %s (served as a miss)", lj->path, strerror(lj->err));
        if (cache_shard_error(lj->err, SHARD_LOAD))
            cache_shard_fail(c, lj->shard, SHARD_LOAD, lj->err);
    }
}

static void on_load_work(struct iojob *j)
{
    struct load_job *lj = container_of(j, struct load_job, j);
    if (lj->skip_own)
        lj->res = LOAD_MISSING;
    else
        load_file(lj, true);
    /* Ours, whole: with move, a nginx file of the slice still there is queued to go. */
    if (lj->lc != NULL && lj->res == LOAD_OK && lj->lc_leftover)
        cache_lc_leftover(lj->lc);
    /* No usable chunk file of ours (none, damaged, or of the earlier format: deleted then):
     * lancache's, if it has one. A read error is not a miss: the shard is switched off. */
    if (lj->lc == NULL || lj->res == LOAD_OK || lj->res == LOAD_ERROR || lj->res == LOAD_UNKNOWN)
        return;
    bool missing = lj->res == LOAD_MISSING;
    cache_lc_find(lj->lc);
    /* Nothing there: a move may have put its chunk file in place meanwhile (the disk index
     * learns of it only when the move is done). */
    if (!lj->lc->any && missing && !lj->no_own)
        load_file(lj, true);
}

/* The chunk stays in FILLING until here; it becomes a sealed disk chunk or the filler's. */
static void on_load_done(struct iojob *j)
{
    struct load_job *lj = container_of(j, struct load_job, j);
    struct cache *c = lj->c;
    struct chunk *ck = lj->ck;
    ASSERT(ck->loading && ck->state == CHUNK_S_FILLING);
    ck->loading = false;
    load_report(c, lj, ck);
    bool found = lj->res == LOAD_OK && load_accept(c, lj, ck);
    if (found && lj->lc != NULL && lj->lc_leftover && !c->closing)
        cache_lc_leftover_queue(c, lj->lc, ck);
    if (!found && lj->res != LOAD_OK && lj->lc != NULL && !c->closing)
        found = cache_lc_accept(c, lj->lc, ck);
    if (found) {
        table_remove(c, ck); /* disk chunks live with their readers only */
        chunk_notify(ck);
    } else if (c->closing || (!ck->in_table && ck->refs == 1)) {
        /* Shutting down, or purged/replaced while looked up with no reader left: not fetched
         * (a chunk out of the table would not be stored). */
        cache_chunk_failed(ck, CHUNK_FAIL_ORIGIN);
    } else if (ck->origin != NULL && c->filler.disk_miss != NULL) {
        ck->started_by_fetch = true;
        chunk_fresh_bytes(ck);
        g_stats.cache_misses++;
        c->filler.disk_miss(c->filler.arg, ck, ck->origin_off, ck->origin);
    } else {
        cache_chunk_failed(ck, CHUNK_FAIL_PASS); /* a probe (HEAD): forwarded */
    }
    free(ck->origin);
    ck->origin = NULL;
    cache_meta_clear(&lj->meta);
    if (lj->lc != NULL) {
        cache_lc_fini(lj->lc);
        free(lj->lc);
    }
    free(lj->key_own);
    free(lj);
    cache_chunk_unref(&ck);
}

/* A load job for (<obj>, <index>) of <key>, or NULL (no path for it: a miss). */
static struct load_job *load_job_new(struct cache *c, const char *key, size_t key_len,
                                     const uint8_t obj[16], uint64_t index)
{
    struct load_job *lj = xmalloc(sizeof(*lj));
    if (load_prepare(c, lj, key, key_len, obj, index) < 0) {
        free(lj);
        return NULL;
    }
    return lj;
}

/* Starts job <lj> for <ck> (FILLING, in the table): it stays FILLING until its file is known. */
static void disk_load_start(struct cache *c, struct chunk *ck, struct load_job *lj)
{
    lj->key_own = xstrndup(ck->key, ck->key_len);
    lj->key = lj->key_own;
    lj->ck = ck;
    chunk_ref(ck);
    ck->loading = true;
    lj->j.work = on_load_work;
    lj->j.done = on_load_done;
    iopool_submit(c->io, &lj->j);
}

/* Whether (<obj>, <index>) may have a file: false only when the disk index knows it has none. */
static bool disk_may_have(struct cache *c, const uint8_t obj[16], uint64_t index)
{
    if (cache_purge_holds(c, obj) || cache_shard_down(c, shard_of(c, obj), SHARD_LOAD))
        return false; /* (a purged file not unlinked yet is never read) */
    return diskidx_lookup(c->didx, obj, index) != 0;
}

static void on_store_work(struct iojob *j)
{
    struct store_job *sj = container_of(j, struct store_job, j);
    const struct chunk *ck = sj->ck;
    struct chunkfile_meta m;
    memset(&m, 0, sizeof(m));
    m.chunk_size = sj->c->chunk_size;
    m.index = ck->index;
    m.total = ck->meta.total;
    m.data_len = (uint32_t)ck->cap;
    m.key = ck->key;
    m.key_len = ck->key_len;
    m.etag = ck->meta.etag;
    m.etag_len = strlen(ck->meta.etag);
    m.last_modified = ck->meta.last_modified;
    m.last_modified_len = strlen(ck->meta.last_modified);
    m.content_type = ck->meta.content_type;
    m.content_type_len = strlen(ck->meta.content_type);
    const struct objhead *h = ck->meta.head;
    if (h != NULL) {
        m.date = h->date;
        m.date_len = h->date_len;
        m.fields = h->text;
        m.fields_len = h->len;
        m.response_time = h->response_time;
        m.initial_age = h->initial_age;
    }
    /* A block in the memory file is read with pread(), never through its mapping (chunkmem.h). */
    if (ck->mem_block.in_file)
        sj->rc = chunkfile_write_tmp_from(AT_FDCWD, sj->tmp, &m, chunkmem_fd(sj->c->mem),
                                          ck->mem_block.off, ck->cap, false);
    else
        sj->rc = chunkfile_write_tmp(AT_FDCWD, sj->tmp, &m, ck->mem_block.data, ck->cap, false);
    if (sj->rc < 0)
        return;
    pthread_mutex_lock(&sj->c->disk_mu);
    if (sj->cancelled) {
        (void)unlink(sj->tmp);
        sj->rc = -ECANCELED;
    } else {
        sj->rc = chunkfile_commit(AT_FDCWD, sj->tmp, sj->path);
        sj->have_sb = sj->rc == 0 && stat(sj->path, &sj->sb) == 0;
    }
    pthread_mutex_unlock(&sj->c->disk_mu);
}

static void on_store_done(struct iojob *j)
{
    struct store_job *sj = container_of(j, struct store_job, j);
    struct cache *c = sj->c;
    struct chunk *ck = sj->ck;
    ck->store = NULL;
    *sj->pprev = sj->next;
    if (sj->next != NULL)
        sj->next->pprev = sj->pprev;
    /* Set after the rename: PURGE deleted the file again. Only the loop writes it, so the loop
     * reads it without <disk_mu>, which a worker may hold across a slow rename. */
    bool cancelled = sj->cancelled;
    if (sj->rc == 0 && !cancelled) {
        g_stats.cache_disk_writes++;
        /* What we just wrote needs no verification on its first read. */
        if (sj->have_sb) {
            diskidx_add(c->didx, ck->obj, ck->index, diskidx_file_bytes(&sj->sb), util_wall_ms(),
                        cache_inv_group(c, ck->key, ck->key_len));
            verified_mark(c, ck->obj, ck->index, &sj->sb);
        }
    } else if (sj->rc == -ENODATA && ck->mem_block.in_file) {
        /* The memory file could not be read back (chunkfile_write_tmp_from): not the disk's. */
        g_stats.chunkmem_errors++;
        if (g_stats.chunkmem_errors < 10 || g_stats.chunkmem_errors % 1000 == 0)
            log_err("cache: cannot store %s: chunk memory could not be read back (kept in memory "
                    "only; %llu chunk memory errors)",
                    sj->path, (unsigned long long)g_stats.chunkmem_errors);
    } else if (sj->rc != 0 && sj->rc != -ECANCELED) {
        g_stats.cache_disk_write_errors++;
        if (g_stats.cache_disk_write_errors < 10 || g_stats.cache_disk_write_errors % 1000 == 0)
            log_warn("cache: cannot store %s: %s (kept in memory only; %llu such errors)", sj->path,
                     strerror(-sj->rc), (unsigned long long)g_stats.cache_disk_write_errors);
        if (cache_shard_error(-sj->rc, SHARD_STORE))
            cache_shard_fail(c, sj->shard, SHARD_STORE, -sj->rc);
    }
    free(sj);
    cache_chunk_unref(&ck);
}

/* Writes sealed chunk <ck> to its file from the I/O pool (after the purges of its object). */
static void disk_store(struct cache *c, struct chunk *ck)
{
    unsigned shard = shard_of(c, ck->obj);
    if (c->closing || cache_shard_down(c, shard, SHARD_STORE))
        return;
    if (cache_purge_holds(c, ck->obj)) {
        /* Its name may be unlinked any moment: stored once the purge is done, if still held. */
        ck->store_deferred = true;
        cache_purge_defer_store(c, ck->obj);
        return;
    }
    struct store_job *sj = xcalloc(1, sizeof(*sj));
    if (chunkfile_path(sj->path, sizeof(sj->path), c->dirs[shard], ck->obj, ck->index) < 0 ||
        chunkfile_tmp_path(sj->tmp, sizeof(sj->tmp), c->dirs[shard], ck->obj, ck->index,
                           ++c->tmp_seq) < 0) {
        free(sj);
        return;
    }
    sj->c = c;
    sj->ck = ck;
    sj->shard = shard;
    chunk_ref(ck);
    ck->store = sj;
    sj->next = c->stores;
    if (sj->next != NULL)
        sj->next->pprev = &sj->next;
    sj->pprev = &c->stores;
    c->stores = sj;
    sj->j.work = on_store_work;
    sj->j.done = on_store_done;
    iopool_submit(c->io, &sj->j);
}

/* Adds the lancache lookup of a miss to <lj> (NULL: the disk index knows of no chunk file; then a
 * job for lancache's files alone). Returns the job, or NULL when there is nothing to look up. */
static struct load_job *lc_attach(struct cache *c, struct load_job *lj, const char *key,
                                  size_t key_len, const uint8_t obj[16], uint64_t index,
                                  const struct origin_req *origin)
{
    struct lc_query *q = xmalloc(sizeof(*q));
    if (!cache_lc_prepare(q, key, key_len, origin, index)) {
        free(q);
        return lj;
    }
    q->dirs = c->lc_dirs;
    q->n_dirs = c->n_lc_dirs;
    q->slice = c->chunk_size;
    q->settle_s = c->lc_settle_s;
    q->check_siblings = cache_objver_get(c, obj) == NULL;
    if (lj != NULL && c->lc_migrate == CFG_MIGRATE_MOVE)
        lj->lc_leftover = true; /* ours may be there, and a nginx file the move has to remove */
    if (lj == NULL) {
        lj = load_job_new(c, key, key_len, obj, index);
        if (lj == NULL) {
            cache_lc_fini(q);
            free(q);
            return NULL;
        }
        lj->skip_own = true;
        lj->no_own = cache_purge_holds(c, obj); /* (its file may not be unlinked yet) */
    }
    lj->lc = q;
    return lj;
}

/* ---- the API ------------------------------------------------------------------------------ */

enum cache_lookup cache_chunk_get(struct cache *c, const char *key, size_t key_len, uint64_t index,
                                  uint64_t off, const struct origin_req *origin, uint64_t refetch,
                                  struct chunk **out)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    bool force = refetch != 0;
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    *out = NULL;
    struct chunk *ck = table_find(c, obj, index);
    /* A forced lookup replaces what is stored, a disk lookup and a fill started by an ordinary
     * miss (it may have been asked long ago, of the version the refetch is meant to replace),
     * but joins a refetch running for the chunk: concurrent refetches share one fill. */
    bool refetching = ck != NULL && ck->refetch && ck->state == CHUNK_S_FILLING && !ck->loading;
    if (ck != NULL && ((force && !refetching) || ck->state == CHUNK_S_FAILED)) {
        table_remove(c, ck);
        ck = NULL;
    }
    if (ck != NULL) {
        chunk_ref(ck);
        ck->clock_ref = true;
        *out = ck;
        if (ck->loading) {
            if (origin != NULL && ck->origin == NULL) {
                /* A probe (HEAD) started the lookup: this reader's request fetches on a miss. */
                ck->origin = origin_req_dup(origin);
                ck->origin_off = off;
                return CACHE_LOOKUP;
            }
            return CACHE_LOADING;
        }
        if (ck->state == CHUNK_S_SEALED) {
            g_stats.cache_mem_hits++;
            diskidx_touch(c->didx, obj, index, util_wall_ms()); /* keep its file recent too */
            return CACHE_HIT;
        }
        g_stats.cache_coalesced++; /* joined a fetch in flight */
        return CACHE_JOINED;
    }
    struct load_job *lj =
        !force && disk_may_have(c, obj, index) ? load_job_new(c, key, key_len, obj, index) : NULL;
    if (!force && origin != NULL && c->n_lc_dirs > 0)
        lj = lc_attach(c, lj, key, key_len, obj, index, origin);
    if (lj != NULL) {
        /* Looked up on disk by the I/O pool; readers wait on it as on a fetch. */
        ck = chunk_new(c, key, key_len, obj, index);
        ck->state = CHUNK_S_FILLING;
        table_insert(c, ck);
        if (origin != NULL) {
            ck->origin = origin_req_dup(origin);
            ck->origin_off = off;
        }
        disk_load_start(c, ck, lj);
        *out = ck;
        return CACHE_LOOKUP;
    }
    if (origin == NULL)
        return CACHE_ABSENT;
    *out = chunk_new_filling(c, key, key_len, obj, index);
    (*out)->refetch = force;
    (*out)->refetch_id = refetch;
    return CACHE_MISS;
}

/* Drops the memory chunks of <obj> that are not of version <m> (the origin changed it). */
static void drop_old_version(struct cache *c, const uint8_t obj[16], uint64_t old_total,
                             const struct cache_meta *m, const struct chunk *keep)
{
    uint64_t vh = version_hash(m);
    /* By index when that is shorter, else over the whole table: never more steps than either
     * (the old length came from the origin and may be absurd). */
    uint64_t n = range_chunk_count(old_total, c->chunk_size);
    if (n <= c->n_buckets) {
        for (uint64_t i = 0; i < n; i++) {
            struct chunk *ck = table_find(c, obj, i);
            if (ck != NULL && ck != keep && ck->meta_known &&
                !(ck->meta.total == m->total && version_hash(&ck->meta) == vh))
                table_remove(c, ck);
        }
        return;
    }
    for (size_t b = 0; b < c->n_buckets; b++) {
        struct chunk *ck = c->buckets[b];
        while (ck != NULL) {
            struct chunk *next = ck->hnext;
            if (memcmp(ck->obj, obj, 16) == 0 && ck != keep && ck->meta_known &&
                !(ck->meta.total == m->total && version_hash(&ck->meta) == vh))
                table_remove(c, ck);
            ck = next;
        }
    }
}

int cache_chunk_set_meta(struct chunk *ck, const struct cache_meta *m)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    struct cache *c = ck->cache;
    ASSERT(ck->state == CHUNK_S_FILLING);
    if (m->total == 0 || ck->index >= range_chunk_count(m->total, c->chunk_size))
        return -EINVAL;
    if (range_chunk_count(m->total, c->chunk_size) > CACHE_MAX_CHUNKS)
        return -EFBIG;  /* an absurd length from the origin: not cached */
    if (ck->meta_known) /* set by the fetch of its other part: the same version, or nothing */
        return ck->meta.total == m->total && strcmp(ck->meta.etag, m->etag) == 0 &&
                       strcmp(ck->meta.last_modified, m->last_modified) == 0
                   ? 0
                   : -ESTALE;
    const struct objver *v = cache_objver_get(c, ck->obj);
    if (v != NULL && !cache_objver_matches(v, m)) {
        log_info("cache: object changed at the origin (length or validators): dropping the old "
                 "version's chunks");
        drop_old_version(c, ck->obj, v->total, m, ck);
    }
    anstore_drop(c->answers, ck->key, ck->key_len); /* an object now: its latest answer */
    cache_chunk_take_meta(ck, m, cache_objver_set(c, ck->obj, m, ck->refetch_id));
    uint64_t off;
    range_chunk_span(ck->index, c->chunk_size, m->total, &off, &ck->cap);
    while (ck->n_parts > 0 && ck->part_off[ck->n_parts - 1] >= ck->cap)
        ck->n_parts--; /* its reader starts past the end: one part fewer after all */
    ck->meta_known = true;
    chunk_notify(ck);
    return 0;
}

int cache_chunk_reserve(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    struct cache *c = ck->cache;
    ASSERT(ck->state == CHUNK_S_FILLING && ck->meta_known);
    if (ck->mem_block.data != NULL)
        return 0;
    if (!evict_for(c, ck->cap))
        return -ENOMEM;
    if (chunkmem_get(c->mem, (size_t)ck->cap, &ck->mem_block) < 0)
        return -ENOMEM;
    ck->mem = ck->cap;
    c->mem_used += ck->cap;
    c->st.mem_chunks++;
    return 0;
}

struct chunk *cache_chunk_on_disk(struct cache *c, const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    if (ck->state != CHUNK_S_SEALED || ck->mem_block.data == NULL)
        return NULL;
    /* Only when memory is short: sending from memory is cheaper than from the file. */
    if (c->mem_waiters == NULL && c->mem_used + c->chunk_size <= c->budget)
        return NULL;
    /* Only a file this process wrote or verified, whose store finished: an open and a header
     * read of a hot file, done here on the loop (never a body verification). */
    if (ck->store != NULL || ck->store_deferred || cache_purge_holds(c, ck->obj) ||
        cache_shard_down(c, shard_of(c, ck->obj), SHARD_LOAD))
        return NULL; /* (held: the file there is the purged one) */
    struct load_job lj;
    if (load_prepare(c, &lj, ck->key, ck->key_len, ck->obj, ck->index) < 0 || !lj.known)
        return NULL;
    load_file(&lj, false);
    load_report(c, &lj, ck);
    if (lj.res != LOAD_OK)
        return NULL;
    struct chunk *dk = chunk_new(c, ck->key, ck->key_len, ck->obj, ck->index);
    if (!load_accept(c, &lj, dk)) {
        cache_meta_clear(&lj.meta);
        cache_chunk_unref(&dk);
        return NULL;
    }
    dk->started_by_fetch = ck->started_by_fetch; /* same bytes, same account */
    cache_seen_unref(&dk->seen);
    dk->seen = cache_seen_ref(ck->seen);
    return dk;
}

/* Whether chunk <index> of object <obj> has a file (cache_chunk_exists), the table aside. Before
 * the start-up scan has seen it, the filesystem is asked when <ask_fs> (a stat() on the loop:
 * once per lookup, never once per chunk of a span), else the answer is no. */
static bool chunk_on_disk(struct cache *c, const uint8_t obj[16], uint64_t index, bool ask_fs)
{
    if (cache_purge_holds(c, obj) || cache_shard_down(c, shard_of(c, obj), SHARD_LOAD))
        return false; /* (a purged file not unlinked yet is as good as gone) */
    int known = diskidx_lookup(c->didx, obj, index);
    bool have = known == 1;
    if (known < 0 && ask_fs) {
        /* The start-up scan has not seen it yet: ask the filesystem (as the scan itself does). */
        char path[PATH_MAX];
        struct stat sb;
        have = chunkfile_path(path, sizeof(path), cache_shard_dir(c, obj), obj, index) == 0 &&
               stat(path, &sb) == 0;
    }
    if (!have && c->n_lc_dirs > 0) {
        /* Not ours: in lancache's files, perhaps, when the object's version came from them. */
        const struct objver *v = cache_objver_find(c, obj);
        have = v != NULL && v->lancache;
    }
    return have;
}

bool cache_chunk_exists(struct cache *c, const char *key, size_t key_len, uint64_t index)
{
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    struct chunk *ck = table_find(c, obj, index);
    if (ck != NULL)
        return ck->state != CHUNK_S_FAILED;
    return chunk_on_disk(c, obj, index, true);
}

size_t cache_chunk_span(struct cache *c, const char *key, size_t key_len, uint64_t first,
                        uint64_t last, struct chunk **out)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    size_t n = 0;
    for (uint64_t i = first; i <= last && n < CACHE_SPAN_MAX; i++) {
        struct chunk *old = table_find(c, obj, i);
        if (old != NULL && old->state != CHUNK_S_FAILED)
            break; /* present or in flight: the span stops before it */
        if (old == NULL && chunk_on_disk(c, obj, i, false))
            break; /* its file is read when asked, not fetched again */
        if (old != NULL)
            table_remove(c, old);
        out[n++] = chunk_new_filling(c, key, key_len, obj, i);
    }
    g_stats.cache_readahead += n;
    return n;
}

/* The part of <ck> whose committed bytes end at <off>: 0 for the one from its start, i + 1 for
 * part_off[i]'s; -1 when none does. */
static int part_ending_at(const struct chunk *ck, uint64_t off)
{
    if (off == ck->len)
        return 0;
    for (unsigned i = 0; i < ck->n_parts; i++)
        if (ck->part_end[i] == off)
            return (int)i + 1;
    return -1;
}

bool cache_chunk_fits(const struct chunk *ck, uint64_t off, size_t len)
{
    if (ck->state != CHUNK_S_FILLING || !ck->meta_known || off + len > ck->cap)
        return false;
    int p = part_ending_at(ck, off);
    if (p < 0)
        return false;
    uint64_t limit = (unsigned)p < ck->n_parts ? ck->part_off[p] : ck->cap; /* the next part */
    return off + len <= limit;
}

static void part_remove(struct chunk *ck, unsigned i)
{
    memmove(&ck->part_off[i], &ck->part_off[i + 1], (ck->n_parts - i - 1) * sizeof(uint64_t));
    memmove(&ck->part_end[i], &ck->part_end[i + 1], (ck->n_parts - i - 1) * sizeof(uint64_t));
    ck->n_parts--;
}

struct chunk *cache_chunk_claim(struct cache *c, const char *key, size_t key_len, uint64_t index,
                                const struct cache_meta *m)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    const struct objver *v = cache_objver_get(c, obj);
    if (v == NULL || !cache_objver_matches(v, m))
        return NULL; /* purged, or another version is the object's now */
    struct chunk *old = table_find(c, obj, index);
    if (old != NULL && old->state != CHUNK_S_FAILED)
        return NULL;
    if (old != NULL)
        table_remove(c, old);
    else if (cache_chunk_exists(c, key, key_len, index))
        return NULL;
    g_stats.cache_readahead++;
    return chunk_new_filling(c, key, key_len, obj, index);
}

void cache_chunk_commit(struct chunk *ck, uint64_t off, const char *data, size_t len)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(cache_chunk_fits(ck, off, len) && ck->mem_block.data != NULL);
    chunkmem_write(ck->cache->mem, &ck->mem_block, (size_t)off, data, len);
    int p = part_ending_at(ck, off);
    if (p == 0)
        ck->len += len;
    else
        ck->part_end[p - 1] += len;
    /* Parts that meet join. */
    if (ck->n_parts > 0 && ck->len == ck->part_off[0]) {
        ck->len = ck->part_end[0];
        part_remove(ck, 0);
    } else if (p > 0 && (unsigned)p < ck->n_parts && ck->part_end[p - 1] == ck->part_off[p]) {
        ck->part_end[p - 1] = ck->part_end[p];
        part_remove(ck, (unsigned)p);
    }
    chunk_notify(ck);
}

uint64_t cache_chunk_avail(const struct chunk *ck, uint64_t off)
{
    if (off < ck->len)
        return ck->len - off;
    for (unsigned i = 0; i < ck->n_parts; i++)
        if (off >= ck->part_off[i] && off < ck->part_end[i])
            return ck->part_end[i] - off;
    return 0;
}

void cache_chunk_poke(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    chunk_notify(ck);
}

void cache_chunk_seal(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    struct cache *c = ck->cache;
    ASSERT(ck->state == CHUNK_S_FILLING && ck->len == ck->cap);
    ck->state = CHUNK_S_SEALED;
    ck->filler = NULL;
    if (ck->in_table) {
        ring_add(c, ck);
        if (!ck->remote)       /* (a chunk of another node's: its file is the owner's) */
            disk_store(c, ck); /* not a chunk purged, replaced or of an old version meanwhile */
    }
    chunk_notify(ck);
}

void cache_chunk_failed(struct chunk *ck, enum chunk_fail why)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->state == CHUNK_S_FILLING);
    ck->state = CHUNK_S_FAILED;
    ck->fail = why;
    ck->filler = NULL;
    chunk_notify(ck);
    table_remove(ck->cache, ck);
}

void cache_chunk_failed_answer(struct chunk *ck, struct answer *a)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->answer == NULL && answer_complete(a));
    ck->answer = answer_ref(a);
    cache_chunk_failed(ck, CHUNK_FAIL_PASS);
}

struct answer *cache_chunk_answer(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->answer;
}

/* ---- accessors ----------------------------------------------------------------------------- */

uint64_t cache_chunk_size(const struct cache *c)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    return c->chunk_size;
}

void cache_set_filler(struct cache *c, const struct cache_filler *f)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    c->filler = *f;
}

enum chunk_state cache_chunk_state(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->state;
}

enum chunk_fail cache_chunk_fail_cause(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->fail;
}

const struct cache_meta *cache_chunk_meta(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->meta_known ? &ck->meta : NULL;
}

unsigned cache_chunk_readers(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    unsigned others = (ck->in_table ? 1u : 0u) + (ck->filler != NULL ? 1u : 0u);
    return ck->refs > others ? ck->refs - others : 0;
}

uint64_t cache_chunk_index(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->index;
}

uint64_t cache_chunk_cap(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->cap;
}

uint64_t cache_chunk_len(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->len;
}

bool cache_chunk_is_loading(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->loading;
}

bool cache_chunk_is_miss(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->started_by_fetch;
}

uint64_t cache_chunk_deliver(struct chunk *ck, uint64_t off, uint64_t len)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(off + len <= ck->cap);
    if (ck->seen == NULL)
        return 0;
    uint64_t fresh = cache_seen_mark(ck->seen, off, len);
    if (fresh > 0 && ck->seen->tab != NULL && cache_seen_is_complete(ck->seen, ck->cap))
        cache_seen_tab_remove(ck->seen->tab, ck->seen); /* nothing left to remember */
    return fresh;
}

bool cache_chunk_was_delivered(const struct chunk *ck, uint64_t off)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->seen == NULL || cache_seen_has(ck->seen, off);
}

bool cache_chunk_head_is_miss(struct chunk *ck, uint64_t off, uint64_t len)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(off < ck->cap && len <= ck->cap - off);
    return ck->seen != NULL && cache_seen_tell(ck->seen, off, len);
}

void cache_chunk_bytes(const struct chunk *ck, uint64_t off, struct chunk_bytes *out)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(off <= ck->cap);
    if (ck->mem_block.data != NULL) {
        out->data = ck->mem_block.data + off;
        out->fd = ck->mem_block.in_file ? chunkmem_fd(ck->cache->mem) : -1;
        out->file_off = ck->mem_block.in_file ? ck->mem_block.off + (off_t)off : 0;
    } else {
        out->data = NULL;
        out->fd = ck->fd;
        out->file_off = ck->body_off + (off_t)off;
    }
}

struct cache *cache_chunk_cache(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->cache;
}

const char *cache_chunk_key(const struct chunk *ck, size_t *len)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    *len = ck->key_len;
    return ck->key;
}

void *cache_chunk_filler(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->filler;
}

void cache_chunk_set_filler(struct chunk *ck, void *fill)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(fill == NULL || ck->state == CHUNK_S_FILLING);
    ck->filler = fill;
}

void cache_chunk_set_remote(struct chunk *ck, bool remote, bool owner_hit)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->state == CHUNK_S_FILLING);
    ck->remote = remote;
    if (remote && owner_hit) {
        /* The owner had them: every byte is a hit, here as there. */
        ck->started_by_fetch = false;
        cache_seen_unref(&ck->seen);
    }
}

bool cache_chunk_is_remote(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->remote;
}

int cache_chunk_origin_status(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->origin_status;
}

void cache_chunk_set_origin_status(struct chunk *ck, int status)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ck->origin_status = status;
}

bool cache_chunk_can_split_at(const struct chunk *ck, uint64_t off)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    if (ck->state != CHUNK_S_FILLING || ck->n_parts == CACHE_SPLITS_MAX || off <= ck->len ||
        (ck->meta_known && off >= ck->cap))
        return false;
    for (unsigned i = 0; i < ck->n_parts; i++)
        if (off >= ck->part_off[i] && off <= ck->part_end[i])
            return false; /* inside a part, or where one reached (it goes on there) */
    return true;
}

void cache_chunk_split_at(struct chunk *ck, uint64_t off)
{
    ASSERT(cache_chunk_can_split_at(ck, off));
    unsigned i = 0;
    while (i < ck->n_parts && ck->part_off[i] < off)
        i++;
    memmove(&ck->part_off[i + 1], &ck->part_off[i], (ck->n_parts - i) * sizeof(uint64_t));
    memmove(&ck->part_end[i + 1], &ck->part_end[i], (ck->n_parts - i) * sizeof(uint64_t));
    ck->part_off[i] = ck->part_end[i] = off;
    ck->n_parts++;
}

void cache_chunk_unsplit(struct chunk *ck, uint64_t off)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    for (unsigned i = 0; i < ck->n_parts; i++) {
        if (ck->part_off[i] == off) {
            ASSERT(ck->part_end[i] == off); /* nothing of it committed */
            part_remove(ck, i);
            return;
        }
    }
}

bool cache_chunk_is_split(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->n_parts != 0;
}

bool cache_chunk_is_reserved(const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    return ck->mem_block.data != NULL;
}

/* Releases purged chunks' memory, CACHE_DROP_STEP bytes a turn: a purge of an object held in
 * memory would otherwise unmap and punch each of its chunks on the spot (75 ms for 512 MiB on
 * the bench VM), stalling every client. They still count against the budget until then. */
static void on_drop(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct cache *c = container_of(w, struct cache, drop_ev);
    uint64_t bytes = 0;
    while (c->drop_pos < c->n_drops && bytes < CACHE_DROP_STEP) {
        struct chunk *ck = c->drops[c->drop_pos];
        c->drops[c->drop_pos++] = NULL;
        bytes += ck->mem;
        cache_chunk_unref(&ck); /* (the last ref: out of the table, nobody reading) */
    }
    if (c->drop_pos == c->n_drops)
        c->drop_pos = c->n_drops = 0;
    else
        ev_timer_start(c->loop, &c->drop_ev); /* (the next turn) */
}

/* Keeps <ck> (about to leave the table, nobody reading) until on_drop releases it. */
static void drop_later(struct cache *c, struct chunk *ck)
{
    if (c->n_drops == c->cap_drops) {
        c->cap_drops = c->cap_drops < 64 ? 64 : c->cap_drops * 2;
        c->drops = xrealloc(c->drops, c->cap_drops * sizeof(*c->drops));
    }
    chunk_ref(ck);
    c->drops[c->n_drops++] = ck;
    if (!ev_is_active(&c->drop_ev))
        ev_timer_start(c->loop, &c->drop_ev);
}

static void drops_flush(struct cache *c)
{
    ev_timer_stop(c->loop, &c->drop_ev);
    while (c->drop_pos < c->n_drops)
        cache_chunk_unref(&c->drops[c->drop_pos++]);
    free(c->drops);
    c->drops = NULL;
    c->n_drops = c->cap_drops = c->drop_pos = 0;
}

int cache_purge_mem(struct cache *c, const uint8_t obj[16])
{
    CHECK_OBJ(c, CACHE_MAGIC);
    int filling = 0;
    /* Every chunk of the object in the table. Sealed chunks also have a file (counted when it is
     * unlinked); chunks still filling are counted here. */
    for (size_t b = 0; b < c->n_buckets; b++) {
        struct chunk *ck = c->buckets[b];
        while (ck != NULL) {
            struct chunk *next = ck->hnext;
            if (memcmp(ck->obj, obj, 16) == 0) {
                if (ck->state != CHUNK_S_SEALED && !ck->loading)
                    filling++; /* no file yet (a lookup's file is counted with the files) */
                if (ck->refs == 1 && ck->mem > 0)
                    drop_later(c, ck); /* (else its readers release it, each in its turn) */
                table_remove(c, ck);
            }
            ck = next;
        }
    }
    /* Pending stores of the object (in the table or not: replaced, old version) must not put
     * their file in place after the purge lists the directory, nor must its lancache moves. */
    cache_lc_purge(c, obj);
    pthread_mutex_lock(&c->disk_mu);
    for (struct store_job *sj = c->stores; sj != NULL; sj = sj->next)
        if (memcmp(sj->ck->obj, obj, 16) == 0)
            sj->cancelled = true;
    pthread_mutex_unlock(&c->disk_mu);
    if (cache_objver_get(c, obj) != NULL)
        objver_clear(c, cache_objver_find(c, obj));
    return filling;
}

void cache_store_deferred(struct cache *c, const uint8_t obj[16])
{
    CHECK_OBJ(c, CACHE_MAGIC);
    for (size_t b = 0; b < c->n_buckets; b++)
        for (struct chunk *ck = c->buckets[b]; ck != NULL; ck = ck->hnext)
            if (ck->store_deferred && memcmp(ck->obj, obj, 16) == 0) {
                ck->store_deferred = false;
                if (ck->state == CHUNK_S_SEALED && ck->store == NULL)
                    disk_store(c, ck);
            }
}

bool cache_object_is_known(struct cache *c, const char *key, size_t key_len)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    return cache_objver_get(c, obj) != NULL;
}

struct anstore *cache_answers(struct cache *c)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    return c->answers;
}

void cache_get_stats(const struct cache *c, struct cache_stats *out)
{
    *out = c->st;
    out->mem_bytes = c->mem_used;
    out->answers = anstore_count(c->answers);
    out->answer_bytes = anstore_bytes(c->answers);
    out->io_pending = (c->io != NULL ? iopool_pending(c->io) : 0) +
                      (c->lc_io != NULL ? iopool_pending(c->lc_io) : 0);
    struct diskidx_stats ds;
    diskidx_get_stats(c->didx, &ds);
    out->disk_bytes = ds.bytes;
    out->disk_chunks = ds.chunks;
    out->disk_evictions = ds.evictions;
    out->disk_scan_done = ds.scan_done;
    out->mem_limit = c->budget;
    out->disk_limit = ds.disk_size;
    out->disk_free = ds.fs_free;
    out->disk_fs_bytes = ds.fs_size;
}

/* ---- start and stop ------------------------------------------------------------------------ */

/* Checks <dir>'s chunk_size marker, if it has one (*<found>). Returns 0, or -1 with <err> set when
 * the marker is not ours or names another chunk size. */
static int check_marker(const char *dir, uint64_t chunk_size, bool *found, char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, CACHE_MARKER);
    FILE *f = fopen(p, "re");
    *found = f != NULL;
    if (f != NULL) {
        unsigned version = 0;
        unsigned long long cs = 0;
        int k = fscanf(f, "cacheparty cache v%u chunk_size %llu", &version, &cs);
        fclose(f);
        if (k != 2 || version != CACHE_MARKER_VERSION) {
            snprintf(err, errlen, "cache dir %s: unrecognised %s (another program's cache?)", dir,
                     CACHE_MARKER);
            return -1;
        }
        if (cs != chunk_size) {
            snprintf(err, errlen,
                     "cache dir %s was written with chunk_size %llu, configured %llu: refusing "
                     "to misread it (set chunk_size back, or empty the directory)",
                     dir, cs, (unsigned long long)chunk_size);
            return -1;
        }
    }
    return 0;
}

int cache_check_dirs(const struct config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_dirs; i++) {
        bool found;
        if (check_marker(cfg->dirs[i], cfg->chunk_size, &found, err, errlen) < 0)
            return -1;
    }
    for (size_t i = 0; i < cfg->n_lancache_dirs; i++)
        if (cache_lancache_check_dir(cfg->lancache_dirs[i],
                                     cfg->lancache_migrate == CFG_MIGRATE_MOVE, err, errlen) < 0)
            return -1;
    return 0;
}

/* Creates <dir>/tmp, empties it (<clean>), and checks or writes the chunk_size marker. */
static int prepare_dir(const char *dir, uint64_t chunk_size, bool clean, char *err, size_t errlen)
{
    char p[PATH_MAX];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cache dir %s: %s", dir, strerror(errno));
        return -1;
    }
    bool found;
    if (check_marker(dir, chunk_size, &found, err, errlen) < 0)
        return -1;
    snprintf(p, sizeof(p), "%s/%s", dir, CACHE_MARKER);
    if (!found) {
        FILE *f = fopen(p, "we");
        if (f == NULL || fprintf(f, "cacheparty cache v%u chunk_size %llu\n", CACHE_MARKER_VERSION,
                                 (unsigned long long)chunk_size) < 0) {
            snprintf(err, errlen, "cache dir %s: cannot write %s: %s", dir, CACHE_MARKER,
                     strerror(errno));
            if (f != NULL)
                fclose(f);
            return -1;
        }
        if (fclose(f) != 0) {
            snprintf(err, errlen, "cache dir %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    snprintf(p, sizeof(p), "%s/tmp", dir);
    if (mkdir(p, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cache dir %s: %s", p, strerror(errno));
        return -1;
    }
    if (!clean)
        return 0;
    DIR *d = opendir(p);
    if (d == NULL) {
        snprintf(err, errlen, "cache dir %s: %s", p, strerror(errno));
        return -1;
    }
    unsigned removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    if (removed > 0)
        log_info("cache: removed %u unfinished chunk files from %s", removed, p);
    return 0;
}

int cache_dirs_prepare(const struct config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_dirs; i++)
        if (prepare_dir(cfg->dirs[i], cfg->chunk_size, false, err, errlen) < 0)
            return -1;
    return 0;
}

struct cache *cache_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_dirs; i++)
        if (prepare_dir(cfg->dirs[i], cfg->chunk_size, true, err, errlen) < 0)
            return NULL;
    for (size_t i = 0; i < cfg->n_lancache_dirs; i++)
        if (cache_lancache_check_dir(cfg->lancache_dirs[i],
                                     cfg->lancache_migrate == CFG_MIGRATE_MOVE, err, errlen) < 0)
            return NULL;
    cache_lc_size_warning(cfg);
    struct cache *c = xcalloc(1, sizeof(*c));
    c->magic = CACHE_MAGIC;
    c->loop = loop;
    c->chunk_size = cfg->chunk_size;
    c->mem = chunkmem_new((size_t)cfg->chunk_size, true, 0);
    c->budget = cfg->memory_size;
    c->answers = anstore_new((size_t)cfg->answers_memory);
    c->n_dirs = cfg->n_dirs;
    c->dirs = xcalloc(cfg->n_dirs, sizeof(*c->dirs));
    for (size_t i = 0; i < cfg->n_dirs; i++)
        c->dirs[i] = xstrdup(cfg->dirs[i]);
    size_t want = (size_t)(2 * (cfg->memory_size / cfg->chunk_size));
    c->n_buckets = 1024;
    while (c->n_buckets < want)
        c->n_buckets <<= 1;
    c->buckets = xcalloc(c->n_buckets, sizeof(*c->buckets));
    TAILQ_INIT(&c->purges);
    c->objs = xcalloc(CACHE_OBJ_SLOTS, sizeof(*c->objs));
    c->verified = xcalloc(CACHE_VERIFIED_SLOTS, sizeof(*c->verified));
    c->shards = xcalloc(cfg->n_dirs, sizeof(*c->shards));
    cache_seen_tab_init(&c->seen);
    pthread_mutex_init(&c->disk_mu, NULL);
    c->io = iopool_new(loop, CACHE_IO_THREADS);
    if (c->io == NULL) {
        snprintf(err, errlen, "cannot start the disk I/O threads: %s", strerror(errno));
        cache_seen_tab_fini(&c->seen);
        chunkmem_free(&c->mem);
        anstore_free(&c->answers);
        free(c->shards);
        free(c->verified);
        free(c->objs);
        free(c->buckets);
        for (size_t i = 0; i < c->n_dirs; i++)
            free(c->dirs[i]);
        free(c->dirs);
        free(c);
        return NULL;
    }
    ev_timer_init(&c->notify_ev, on_notify, 0., 0.);
    ev_timer_init(&c->drop_ev, on_drop, 0., 0.);
    ev_set_priority(&c->notify_ev, EV_MAXPRI);
    c->didx = diskidx_new(loop, c->dirs, c->n_dirs, cfg->disk_size, cfg->min_free, cfg->max_age_ms);
    c->n_lc_dirs = cfg->n_lancache_dirs;
    c->lc_dirs = xcalloc(c->n_lc_dirs + 1, sizeof(*c->lc_dirs));
    for (size_t i = 0; i < c->n_lc_dirs; i++)
        c->lc_dirs[i] = xstrdup(cfg->lancache_dirs[i]);
    c->lc_settle_s = (int64_t)(cfg->lancache_settle_ms / 1000);
    c->lc_migrate = cfg->lancache_migrate;
    if (c->n_lc_dirs > 0) {
        c->lc_set = xcalloc(CACHE_LC_SET, sizeof(*c->lc_set));
        c->lc_io = iopool_new(loop, 1);
        if (c->lc_io == NULL)
            log_warn("cache: no thread for moving lancache's files (%s): they are served in "
                     "place only",
                     strerror(errno));
    }
    cache_inv_start(c);
    return c;
}

void cache_reconfigure(struct cache *c, const struct config *cfg)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    c->budget = cfg->memory_size;
    anstore_set_limit(c->answers, (size_t)cfg->answers_memory);
    diskidx_set_limits(c->didx, cfg->disk_size, cfg->min_free, cfg->max_age_ms);
    c->lc_settle_s = (int64_t)(cfg->lancache_settle_ms / 1000);
    c->lc_migrate = cfg->lancache_migrate;
    mem_notify(c); /* a larger budget may let waiting fills go on */
}

void cache_free(struct cache **cp)
{
    struct cache *c = *cp;
    if (c == NULL)
        return;
    CHECK_OBJ(c, CACHE_MAGIC);
    /* Pending stores finish (their chunks are complete); pending loads fail their chunks. */
    c->closing = true;
    drops_flush(c);
    atomic_store(&c->lc_stop, true);
    iopool_free(&c->lc_io);
    cache_lc_fini_queue(c);
    cache_purge_flush(c); /* (a purge answered must not leave its files for the next run) */
    iopool_free(&c->io);
    ASSERT(TAILQ_EMPTY(&c->purges));
    cache_inv_free(c);
    pthread_mutex_destroy(&c->disk_mu);
    for (size_t b = 0; b < c->n_buckets; b++)
        while (c->buckets[b] != NULL)
            table_remove(c, c->buckets[b]);
    while (c->notify != NULL) {
        struct chunk *ck = c->notify;
        c->notify = ck->notify_next;
        ck->notify_pending = false;
        ck->waiters = NULL;
        cache_chunk_unref(&ck);
    }
    ev_clear_pending(c->loop, &c->notify_ev);
    cache_seen_tab_fini(&c->seen);
    chunkmem_free(&c->mem);
    anstore_free(&c->answers);
    diskidx_free(&c->didx);
    for (size_t i = 0; i < c->n_dirs; i++)
        free(c->dirs[i]);
    free(c->dirs);
    for (size_t i = 0; i < c->n_lc_dirs; i++)
        free(c->lc_dirs[i]);
    free(c->lc_dirs);
    free(c->buckets);
    for (size_t i = 0; i < CACHE_OBJ_SLOTS; i++)
        objver_clear(c, &c->objs[i]);
    free(c->objs);
    free(c->verified);
    free(c->shards);
    c->magic = 0;
    free(c);
    *cp = NULL;
}
