/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache: memory table, CLOCK eviction, memory budget, disk tier, versions. See cache.h.
 *
 * Chunk lifecycle:
 * | phase           | who moves it there                      | refs held by                  |
 * |-----------------|-----------------------------------------|-------------------------------|
 * | FILLING, no meta| cache_chunk_get() on a miss             | table, fetch, first reader    |
 * | FILLING + meta  | cache_chunk_set_meta() (fetch's head)   | + data allocated in budget    |
 * | SEALED (memory) | cache_chunk_seal(): written to disk     | table (+ readers)             |
 * | SEALED (disk)   | cache_chunk_get() found a verified file | readers only (not in table)   |
 * | FAILED          | cache_chunk_failed(): out of the table  | readers until they notice     |
 * | freed           | last cache_chunk_unref()                | -                             |
 * Memory is returned when the last ref goes; eviction only drops the table's ref, and only of
 * sealed chunks nobody else holds. Waiters are woken from a zero-delay timer, once per loop
 * iteration per chunk, never inside the call that changed the chunk.
 * Disk I/O here is synchronous (pread/pwrite of one chunk at a time on the loop thread).
 * TODO(#4): move disk reads and writes to an I/O thread pool once measured on a slow disk.
 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include <ev.h>

#include "config.h"
#include "diskidx.h"
#include "fetch.h"
#include "log.h"
#include "range.h"
#include "util.h"

#define CACHE_MAGIC 0xcac4e001u
#define CHUNK_MAGIC 0xc4c4e002u
#define CACHE_OBJ_SLOTS 65536u
#define CACHE_VERIFIED_SLOTS 65536u
#define CACHE_MARKER "cacheparty.cache"
#define CACHE_MARKER_VERSION 1
#define CACHE_VERIFY_BUF (256 * 1024)
#define CACHE_MAX_CHUNKS (1ull << 26) /* an object of more chunks is not cached */

struct objver {
    uint8_t obj[16];
    uint64_t total;
    uint64_t vhash; /* XXH3-64 of ETag "\0" Last-Modified */
    bool used;
};

struct verified {
    uint8_t obj[16];
    uint64_t index;
    dev_t dev;
    ino_t ino;
    off_t size;
    bool used;
};

struct cache {
    unsigned magic;
    struct ev_loop *loop;
    uint64_t chunk_size;
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
    ev_timer notify_timer;
    struct chunk_waiter *mem_waiters;
    bool mem_notify;
    struct objver *objs;       /* owns, CACHE_OBJ_SLOTS */
    struct verified *verified; /* owns, CACHE_VERIFIED_SLOTS */
    char *vbuf;                /* owns: verification read buffer */
    struct diskidx *didx;      /* owns: disk usage, LRU and eviction of the chunk files */
    struct cache_stats st;
};

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

static struct objver *objver_slot(struct cache *c, const uint8_t obj[16])
{
    return &c->objs[load64(obj + 8) & (CACHE_OBJ_SLOTS - 1)];
}

/* The remembered version of <obj>, or NULL. */
static const struct objver *objver_get(struct cache *c, const uint8_t obj[16])
{
    struct objver *v = objver_slot(c, obj);
    return v->used && memcmp(v->obj, obj, 16) == 0 ? v : NULL;
}

static void objver_set(struct cache *c, const uint8_t obj[16], const struct cache_meta *m)
{
    struct objver *v = objver_slot(c, obj);
    memcpy(v->obj, obj, 16);
    v->total = m->total;
    v->vhash = version_hash(m);
    v->used = true;
}

static bool objver_matches(const struct objver *v, const struct cache_meta *m)
{
    return v->total == m->total && v->vhash == version_hash(m);
}

/* ---- waking waiters ------------------------------------------------------------------------ */

static void chunk_ref(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ck->refs++;
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
    if (!ev_is_active(&c->notify_timer))
        ev_timer_start(c->loop, &c->notify_timer);
}

static void mem_notify(struct cache *c)
{
    if (c->mem_waiters == NULL)
        return;
    c->mem_notify = true;
    if (!ev_is_active(&c->notify_timer))
        ev_timer_start(c->loop, &c->notify_timer);
}

static void wake_list(struct chunk_waiter **head)
{
    /* Detach first: callbacks may wait again (they then join the live list, not this one). */
    struct chunk_waiter *list = *head;
    *head = NULL;
    if (list != NULL)
        list->pprev = &list;
    while (list != NULL) {
        struct chunk_waiter *w = list;
        list = w->next;
        if (list != NULL)
            list->pprev = &list;
        w->next = NULL;
        w->pprev = NULL;
        w->cb(w);
    }
}

static void on_notify(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct cache *c = container_of(t, struct cache, notify_timer);
    while (c->notify != NULL || c->mem_notify) {
        if (c->mem_notify) {
            c->mem_notify = false;
            wake_list(&c->mem_waiters);
        }
        struct chunk *ck = c->notify;
        if (ck == NULL)
            continue;
        c->notify = ck->notify_next;
        ck->notify_pending = false;
        wake_list(&ck->waiters);
        cache_chunk_unref(&ck);
    }
}

void cache_chunk_wait(struct chunk *ck, struct chunk_waiter *w, chunk_wake_fn *cb)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    cache_chunk_unwait(w); /* waiting again (e.g. driven by another event meanwhile) */
    w->cb = cb;
    w->next = ck->waiters;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &ck->waiters;
    ck->waiters = w;
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
        c->st.evictions++;
        table_remove(c, ck); /* frees it: refs was 1 */
    }
    return c->mem_used + need <= c->budget;
}

static void chunk_release_mem(struct chunk *ck)
{
    struct cache *c = ck->cache;
    free(ck->data);
    ck->data = NULL;
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
        if (ck->refs == 1 && ck->in_table && ck->state == CHUNK_S_SEALED && ck->data != NULL)
            mem_notify(ck->cache);
        return;
    }
    ASSERT(!ck->in_table && ck->waiters == NULL && !ck->notify_pending && ck->fetch == NULL);
    chunk_release_mem(ck);
    if (ck->fd >= 0)
        close(ck->fd);
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

/* A miss: a FILLING chunk in the table (its ref plus the caller's), for a fetch to fill. */
static struct chunk *chunk_new_filling(struct cache *c, const char *key, size_t key_len,
                                       const uint8_t obj[16], uint64_t index)
{
    struct chunk *ck = chunk_new(c, key, key_len, obj, index);
    ck->state = CHUNK_S_FILLING;
    ck->started_by_fetch = true;
    table_insert(c, ck);
    c->st.misses++;
    return ck;
}

/* ---- disk tier ----------------------------------------------------------------------------- */

static const char *shard_dir(const struct cache *c, const uint8_t obj[16])
{
    return c->dirs[obj[0] % c->n_dirs];
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

static void integrity_failure(struct cache *c, const char *path, const char *why,
                              const uint8_t obj[16], uint64_t index)
{
    diskidx_remove(c->didx, obj, index);
    c->st.integrity_failures++;
    log_warn("cache: %s: %s: deleted, will refetch", path, why);
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("cache: cannot delete %s: %s", path, strerror(errno));
}

/* Streams the body through XXH3; true if it matches. */
static bool body_verifies(struct cache *c, int fd, off_t off, uint64_t len, uint64_t want)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    while (len > 0) {
        size_t n = len < CACHE_VERIFY_BUF ? (size_t)len : CACHE_VERIFY_BUF;
        ssize_t r = pread(fd, c->vbuf, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        XXH3_64bits_update(&st, c->vbuf, (size_t)r);
        off += r;
        len -= (uint64_t)r;
    }
    return XXH3_64bits_digest(&st) == want;
}

/* A verified SEALED disk chunk, or NULL (missing, damaged: deleted, or another version). */
static struct chunk *disk_load(struct cache *c, const char *key, size_t key_len,
                               const uint8_t obj[16], uint64_t index)
{
    char path[PATH_MAX];
    if (chunkfile_path(path, sizeof(path), shard_dir(c, obj), obj, index) < 0)
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ELOOP) /* a symlink where a chunk file belongs */
            integrity_failure(c, path, "a symbolic link", obj, index);
        else if (errno != ENOENT)
            /* Out of descriptors, permissions...: a miss for now, never a reason to delete. */
            log_warn("cache: cannot open %s: %s (served as a miss)", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    uint8_t hdr[CHUNKFILE_HDR_MAX];
    struct chunkfile_meta m;
    uint64_t body_hash = 0;
    size_t hdr_len = 0;
    const char *why = NULL;
    ssize_t n = -1;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        why = "not a regular file";
        goto bad;
    }
    n = pread(fd, hdr, sizeof(hdr), 0);
    if (n <= 0 || chunkfile_header_parse(hdr, (size_t)n, &m, &body_hash, &hdr_len) != 0) {
        why = "bad header";
        goto bad;
    }
    if (m.key_len != key_len || memcmp(m.key, key, key_len) != 0) {
        why = "another key's file";
        goto bad;
    }
    if (m.chunk_size != c->chunk_size || m.index != index) {
        why = "wrong chunk size or index";
        goto bad;
    }
    if ((uint64_t)sb.st_size != hdr_len + m.data_len) {
        why = "wrong length (truncated or extended)";
        goto bad;
    }
    struct cache_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.total = m.total;
    memcpy(meta.etag, m.etag, m.etag_len);
    memcpy(meta.last_modified, m.last_modified, m.last_modified_len);
    memcpy(meta.content_type, m.content_type, m.content_type_len);
    const struct objver *v = objver_get(c, obj);
    if (v != NULL && !objver_matches(v, &meta)) {
        /* An older version of an object the origin has since changed. */
        log_info("cache: %s: stale version: deleted", path);
        unlink(path);
        diskidx_remove(c->didx, obj, index);
        close(fd);
        return NULL;
    }
    struct verified *vs = verified_slot(c, obj, index);
    bool known = vs->used && memcmp(vs->obj, obj, 16) == 0 && vs->index == index &&
                 vs->dev == sb.st_dev && vs->ino == sb.st_ino && vs->size == sb.st_size;
    if (!known) {
        if (!body_verifies(c, fd, (off_t)hdr_len, m.data_len, body_hash)) {
            why = "body checksum mismatch";
            goto bad;
        }
        verified_mark(c, obj, index, &sb);
    }
    if (v == NULL)
        objver_set(c, obj, &meta);
    struct chunk *ck = chunk_new(c, key, key_len, obj, index);
    ck->state = CHUNK_S_SEALED;
    ck->meta = meta;
    ck->meta_known = true;
    ck->cap = ck->len = m.data_len;
    ck->fd = fd;
    ck->body_off = (off_t)hdr_len;
    c->st.disk_hits++;
    diskidx_touch(c->didx, obj, index, util_wall_ms());
    return ck;
bad:
    close(fd);
    integrity_failure(c, path, why, obj, index);
    return NULL;
}

static void disk_store(struct cache *c, struct chunk *ck)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    const char *dir = shard_dir(c, ck->obj);
    if (chunkfile_path(path, sizeof(path), dir, ck->obj, ck->index) < 0 ||
        chunkfile_tmp_path(tmp, sizeof(tmp), dir, ck->obj, ck->index, ++c->tmp_seq) < 0)
        return;
    struct chunkfile_meta m;
    memset(&m, 0, sizeof(m));
    m.chunk_size = c->chunk_size;
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
    int rc = chunkfile_write(AT_FDCWD, tmp, path, &m, ck->data, ck->cap, false);
    if (rc < 0) {
        c->st.disk_write_errors++;
        if (c->st.disk_write_errors < 10 || c->st.disk_write_errors % 1000 == 0)
            log_warn("cache: cannot store %s: %s (kept in memory only; %llu such errors)", path,
                     strerror(-rc), (unsigned long long)c->st.disk_write_errors);
        return;
    }
    c->st.disk_writes++;
    /* What we just wrote needs no verification on its first read. */
    struct stat sb;
    if (stat(path, &sb) == 0) {
        diskidx_add(c->didx, ck->obj, ck->index, diskidx_file_bytes(&sb), util_wall_ms());
        verified_mark(c, ck->obj, ck->index, &sb);
    }
}

/* ---- the API ------------------------------------------------------------------------------ */

struct chunk *cache_chunk_get(struct cache *c, const char *key, size_t key_len, uint64_t index,
                              const struct fetch_origin *origin, bool force, bool *created)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    *created = false;
    struct chunk *ck = table_find(c, obj, index);
    if (ck != NULL && (force || ck->state == CHUNK_S_FAILED)) {
        table_remove(c, ck);
        ck = NULL;
    }
    if (ck != NULL) {
        chunk_ref(ck);
        ck->clock_ref = true;
        if (ck->state == CHUNK_S_SEALED) {
            c->st.mem_hits++;
            diskidx_touch(c->didx, obj, index, util_wall_ms()); /* keep its file recent too */
        } else
            c->st.coalesced++; /* joined a fetch in flight */
        return ck;
    }
    if (!force) {
        ck = disk_load(c, key, key_len, obj, index);
        if (ck != NULL)
            return ck;
    }
    if (origin == NULL)
        return NULL;
    ck = chunk_new_filling(c, key, key_len, obj, index);
    *created = true;
    fetch_start(&ck, 1, origin);
    return ck;
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
        return -EFBIG; /* an absurd length from the origin: not cached */
    if (ck->meta_known)
        return 0;
    const struct objver *v = objver_get(c, ck->obj);
    if (v != NULL && !objver_matches(v, m)) {
        log_info("cache: object changed at the origin (length or validators): dropping the old "
                 "version's chunks");
        drop_old_version(c, ck->obj, v->total, m, ck);
    }
    objver_set(c, ck->obj, m);
    ck->meta = *m;
    uint64_t off;
    range_chunk_span(ck->index, c->chunk_size, m->total, &off, &ck->cap);
    ck->meta_known = true;
    chunk_notify(ck);
    return 0;
}

int cache_chunk_reserve(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    struct cache *c = ck->cache;
    ASSERT(ck->state == CHUNK_S_FILLING && ck->meta_known);
    if (ck->data != NULL)
        return 0;
    if (!evict_for(c, ck->cap))
        return -ENOMEM;
    ck->data = malloc(ck->cap);
    if (ck->data == NULL)
        return -ENOMEM;
    ck->mem = ck->cap;
    c->mem_used += ck->cap;
    c->st.mem_chunks++;
    return 0;
}

struct chunk *cache_chunk_on_disk(struct cache *c, const struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    if (ck->state != CHUNK_S_SEALED || ck->data == NULL)
        return NULL;
    /* Only when memory is short: sending from memory is cheaper than from the file. */
    if (c->mem_waiters == NULL && c->mem_used + c->chunk_size <= c->budget)
        return NULL;
    return disk_load(c, ck->key, ck->key_len, ck->obj, ck->index);
}

bool cache_chunk_exists(struct cache *c, const char *key, size_t key_len, uint64_t index)
{
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    struct chunk *ck = table_find(c, obj, index);
    if (ck != NULL)
        return ck->state != CHUNK_S_FAILED;
    char path[PATH_MAX];
    struct stat sb;
    return chunkfile_path(path, sizeof(path), shard_dir(c, obj), obj, index) == 0 &&
           stat(path, &sb) == 0;
}

int cache_fetch_span(struct cache *c, const char *key, size_t key_len, uint64_t first,
                     uint64_t last, const struct fetch_origin *origin)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    struct chunk *cks[CACHE_SPAN_MAX];
    size_t n = 0;
    for (uint64_t i = first; i <= last && n < CACHE_SPAN_MAX; i++) {
        struct chunk *old = table_find(c, obj, i);
        if (old != NULL && old->state != CHUNK_S_FAILED)
            break; /* present or in flight: the span stops before it */
        if (old != NULL)
            table_remove(c, old);
        cks[n++] = chunk_new_filling(c, key, key_len, obj, i);
    }
    if (n == 0)
        return 0;
    c->st.readahead += n;
    fetch_start(cks, n, origin);
    for (size_t i = 0; i < n; i++)
        cache_chunk_unref(&cks[i]); /* the table and the fetch hold them */
    return (int)n;
}

void cache_chunk_commit(struct chunk *ck, const char *data, size_t len)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->state == CHUNK_S_FILLING && ck->data != NULL && ck->len + len <= ck->cap);
    memcpy(ck->data + ck->len, data, len);
    ck->len += len;
    chunk_notify(ck);
}

void cache_chunk_seal(struct chunk *ck)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    struct cache *c = ck->cache;
    ASSERT(ck->state == CHUNK_S_FILLING && ck->len == ck->cap);
    ck->state = CHUNK_S_SEALED;
    ck->fetch = NULL;
    if (ck->in_table)
        ring_add(c, ck);
    disk_store(c, ck);
    chunk_notify(ck);
}

void cache_chunk_failed(struct chunk *ck, enum chunk_fail why)
{
    CHECK_OBJ(ck, CHUNK_MAGIC);
    ASSERT(ck->state == CHUNK_S_FILLING);
    ck->state = CHUNK_S_FAILED;
    ck->fail = why;
    ck->fetch = NULL;
    chunk_notify(ck);
    table_remove(ck->cache, ck);
}

int cache_purge(struct cache *c, const char *key, size_t key_len)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    int removed = 0;
    /* Memory: every index up to the length known for the object. Sealed chunks also have a
     * file (counted below); chunks still filling are counted here. */
    const struct objver *v = objver_get(c, obj);
    for (size_t b = 0; b < c->n_buckets; b++) {
        struct chunk *ck = c->buckets[b];
        while (ck != NULL) {
            struct chunk *next = ck->hnext;
            if (memcmp(ck->obj, obj, 16) == 0) {
                if (ck->state != CHUNK_S_SEALED)
                    removed++;
                table_remove(c, ck);
            }
            ck = next;
        }
    }
    /* Disk: the object's chunk files all live in <shard>/ab/cd/, named <32 hex>.<index>. */
    char path[PATH_MAX], prefix[40];
    if (chunkfile_path(path, sizeof(path), shard_dir(c, obj), obj, 0) < 0)
        return -ENAMETOOLONG;
    char *slash = strrchr(path, '/');
    ASSERT(slash != NULL);
    snprintf(prefix, sizeof(prefix), "%.32s.", slash + 1);
    *slash = '\0';
    DIR *d = opendir(path);
    if (d == NULL && errno != ENOENT)
        return -errno;
    if (d != NULL) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            uint8_t fobj[16];
            uint64_t fidx;
            if (strncmp(de->d_name, prefix, 33) != 0 || unlinkat(dirfd(d), de->d_name, 0) != 0)
                continue;
            removed++;
            if (diskidx_parse_name(de->d_name, fobj, &fidx) == 0)
                diskidx_remove(c->didx, fobj, fidx);
        }
        closedir(d);
    }
    if (v != NULL)
        memset(objver_slot(c, obj), 0, sizeof(struct objver));
    c->st.purged += (uint64_t)removed;
    return removed;
}

void cache_get_stats(const struct cache *c, struct cache_stats *out)
{
    *out = c->st;
    out->mem_bytes = c->mem_used;
    struct diskidx_stats ds;
    diskidx_get_stats(c->didx, &ds);
    out->disk_bytes = ds.bytes;
    out->disk_chunks = ds.chunks;
    out->disk_evictions = ds.evictions;
    out->disk_scan_done = ds.scan_done;
}

/* ---- start and stop ------------------------------------------------------------------------ */

/* Creates <dir>/tmp, empties it, and checks or writes the chunk_size marker. */
static int prepare_dir(const char *dir, uint64_t chunk_size, char *err, size_t errlen)
{
    char p[PATH_MAX];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cache dir %s: %s", dir, strerror(errno));
        return -1;
    }
    snprintf(p, sizeof(p), "%s/%s", dir, CACHE_MARKER);
    FILE *f = fopen(p, "re");
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
    } else {
        f = fopen(p, "we");
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

struct cache *cache_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->n_dirs; i++)
        if (prepare_dir(cfg->dirs[i], cfg->chunk_size, err, errlen) < 0)
            return NULL;
    struct cache *c = xcalloc(1, sizeof(*c));
    c->magic = CACHE_MAGIC;
    c->loop = loop;
    c->chunk_size = cfg->chunk_size;
    c->budget = cfg->memory_size;
    c->n_dirs = cfg->n_dirs;
    c->dirs = xcalloc(cfg->n_dirs, sizeof(*c->dirs));
    for (size_t i = 0; i < cfg->n_dirs; i++)
        c->dirs[i] = xstrdup(cfg->dirs[i]);
    size_t want = (size_t)(2 * (cfg->memory_size / cfg->chunk_size));
    c->n_buckets = 1024;
    while (c->n_buckets < want)
        c->n_buckets <<= 1;
    c->buckets = xcalloc(c->n_buckets, sizeof(*c->buckets));
    c->objs = xcalloc(CACHE_OBJ_SLOTS, sizeof(*c->objs));
    c->verified = xcalloc(CACHE_VERIFIED_SLOTS, sizeof(*c->verified));
    c->vbuf = xmalloc(CACHE_VERIFY_BUF);
    ev_timer_init(&c->notify_timer, on_notify, 0., 0.);
    c->didx = diskidx_new(loop, c->dirs, c->n_dirs, cfg->disk_size, cfg->min_free, cfg->max_age_ms);
    return c;
}

void cache_reconfigure(struct cache *c, const struct config *cfg)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    c->budget = cfg->memory_size;
    diskidx_set_limits(c->didx, cfg->disk_size, cfg->min_free, cfg->max_age_ms);
    mem_notify(c); /* a larger budget may let waiting fills go on */
}

void cache_free(struct cache **cp)
{
    struct cache *c = *cp;
    if (c == NULL)
        return;
    CHECK_OBJ(c, CACHE_MAGIC);
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
    ev_timer_stop(c->loop, &c->notify_timer);
    diskidx_free(&c->didx);
    for (size_t i = 0; i < c->n_dirs; i++)
        free(c->dirs[i]);
    free(c->dirs);
    free(c->buckets);
    free(c->objs);
    free(c->verified);
    free(c->vbuf);
    c->magic = 0;
    free(c);
    *cp = NULL;
}
