/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_purge: purges of objects (see cache.h), their files unlinked off the loop.
 *
 * A purge does its memory side at once on the loop (cache_purge_mem: the chunks leave the table,
 * the object's pending stores and lancache moves are cancelled) and joins a FIFO of purges. The
 * first purge of the FIFO runs on the cache's I/O pool: it reads the object's directory and
 * unlinks each of its chunk files (a 4 GiB object is 4,096 files: seconds of unlinks on a slow
 * disk, which on the loop stalled every client). One at a time, so that the other workers stay
 * free for loads and stores, and in order, so that a purge is done only after every earlier one.
 *
 * While a purge of an object is queued or running, its files are neither read (lookups miss),
 * nor written (a chunk sealed then is stored when the last purge of it is done), nor moved in
 * from lancache's: no file can take a purged one's name before it is unlinked, so the worker
 * unlinks names without any lock, and whatever it unlinked is dropped from the disk index when it
 * is done (entries the start-up scan made meanwhile too). cache_purge_holds() answers from a count
 * per obj[15] first: no walk of the FIFO unless a purge of a like object is there.
 *
 * Threading: loop thread, except on_purge_work (which touches only its purge's directory, prefix
 * and results).
 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anstore.h"
#include "cache_int.h"
#include "chunkfile.h"
#include "diskidx.h"
#include "iopool.h"
#include "log.h"
#include "stats.h"
#include "util.h"

struct cache_purge {
    struct iojob j;
    struct cache *c;
    uint8_t obj[16];
    cache_purge_done *done; /* NULL: none, or forgotten */
    void *arg;
    int filling;   /* chunks being filled that it dropped */
    bool deferred; /* a store of the object was put off while this purge was the first of it */
    bool by_key;   /* asked by key (cache_purge): a listing that may show the object goes */
    TAILQ_ENTRY(cache_purge) link;
    /* In (set before it is queued): */
    char dir[PATH_MAX]; /* "<shard>/ab/cd" */
    char prefix[34];    /* "<32 hex>." */
    /* Out (the worker's): */
    int err;        /* errno: the directory could not be read (or named) */
    uint64_t *gone; /* owns: the indexes of the chunk files unlinked */
    size_t n_gone, cap_gone;
    unsigned failed; /* files that could not be unlinked */
    int fail_err;    /* the first one's errno */
};

static unsigned mark_of(const uint8_t obj[16])
{
    return obj[15] % CACHE_PURGE_MARKS;
}

/* The first purge of <obj> in the FIFO, or NULL. */
static struct cache_purge *first_of(const struct cache *c, const uint8_t obj[16])
{
    if (c->purge_marks[mark_of(obj)] == 0)
        return NULL;
    struct cache_purge *p;
    TAILQ_FOREACH(p, &c->purges, link)
    if (memcmp(p->obj, obj, 16) == 0)
        return p;
    return NULL;
}

bool cache_purge_holds(const struct cache *c, const uint8_t obj[16])
{
    return first_of(c, obj) != NULL;
}

void cache_purge_defer_store(struct cache *c, const uint8_t obj[16])
{
    struct cache_purge *p = first_of(c, obj);
    ASSERT(p != NULL);
    p->deferred = true;
}

size_t cache_purges_pending(const struct cache *c)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    return c->n_purges;
}

void cache_purge_forget(struct cache_purge *p)
{
    p->done = NULL;
}

static void gone_add(struct cache_purge *p, uint64_t index)
{
    if (p->n_gone == p->cap_gone) {
        p->cap_gone = p->cap_gone < 64 ? 64 : p->cap_gone * 2;
        p->gone = xrealloc(p->gone, p->cap_gone * sizeof(*p->gone));
    }
    p->gone[p->n_gone++] = index;
}

static void on_purge_work(struct iojob *j)
{
    struct cache_purge *p = container_of(j, struct cache_purge, j);
    if (p->err != 0)
        return;
    DIR *d = opendir(p->dir);
    if (d == NULL) {
        if (errno != ENOENT) /* (none: nothing was ever stored in it) */
            p->err = errno;
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, p->prefix, sizeof(p->prefix) - 1) != 0)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) != 0) {
            if (errno != ENOENT && p->failed++ == 0)
                p->fail_err = errno;
            continue;
        }
        uint8_t obj[16];
        uint64_t index;
        if (diskidx_parse_name(de->d_name, obj, &index) == 0)
            gone_add(p, index); /* (another name with its prefix: removed, not a chunk) */
    }
    closedir(d);
}

/* Puts the first purge on the I/O pool, unless one runs there. */
static void purge_next(struct cache *c)
{
    struct cache_purge *p = TAILQ_FIRST(&c->purges);
    if (p == NULL || c->purge_running)
        return;
    c->purge_running = true;
    iopool_submit(c->io, &p->j);
}

static void on_purge_done(struct iojob *j)
{
    struct cache_purge *p = container_of(j, struct cache_purge, j);
    struct cache *c = p->c;
    ASSERT(c->closing || p == TAILQ_FIRST(&c->purges)); /* (at cache_free: in any order) */
    TAILQ_REMOVE(&c->purges, p, link);
    c->n_purges--;
    c->purge_marks[mark_of(p->obj)]--;
    c->purge_running = false;
    for (size_t i = 0; i < p->n_gone; i++)
        diskidx_remove(c->didx, p->obj, p->gone[i]);
    g_stats.cache_purged += p->n_gone;
    if (p->failed > 0)
        log_warn("cache: purge: %u chunk file%s %s%s* could not be removed: %s", p->failed,
                 p->failed == 1 ? "" : "s", p->dir, p->prefix, strerror(p->fail_err));
    if (p->deferred) {
        /* Its sealed chunks are stored when no purge of the object is left. */
        struct cache_purge *next = first_of(c, p->obj);
        if (next != NULL)
            next->deferred = true;
        else
            cache_store_deferred(c, p->obj);
    }
    int n = p->err != 0 ? -p->err : p->filling + (int)p->n_gone;
    if (n > 0 && p->by_key)
        cache_inv_listing_void(c); /* it may show the object (a group purge voids it once) */
    if (!c->closing)
        purge_next(c); /* (at cache_free every purge is on the pool already) */
    if (p->done != NULL)
        p->done(p->arg, n);
    free(p->gone);
    free(p);
}

struct cache_purge *cache_purge_obj(struct cache *c, const uint8_t obj[16], cache_purge_done *done,
                                    void *arg)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    ASSERT(!c->closing); /* (the I/O pool may be gone) */
    struct cache_purge *p = xcalloc(1, sizeof(*p));
    p->c = c;
    memcpy(p->obj, obj, 16);
    p->done = done;
    p->arg = arg;
    p->j.work = on_purge_work;
    p->j.done = on_purge_done;
    p->filling = cache_purge_mem(c, obj);
    /* The object's chunk files all live in <shard>/ab/cd/, named <32 hex>.<index>. */
    char path[PATH_MAX];
    if (chunkfile_path(path, sizeof(path), cache_shard_dir(c, obj), obj, 0) < 0) {
        p->err = ENAMETOOLONG;
    } else {
        char *slash = strrchr(path, '/');
        ASSERT(slash != NULL);
        snprintf(p->prefix, sizeof(p->prefix), "%.32s.", slash + 1);
        *slash = '\0';
        snprintf(p->dir, sizeof(p->dir), "%s", path);
    }
    TAILQ_INSERT_TAIL(&c->purges, p, link);
    c->n_purges++;
    c->purge_marks[mark_of(obj)]++;
    purge_next(c);
    return p;
}

struct cache_purge *cache_purge(struct cache *c, const char *key, size_t key_len,
                                cache_purge_done *done, void *arg)
{
    CHECK_OBJ(c, CACHE_MAGIC);
    uint8_t obj[16];
    cache_obj_hash(key, key_len, obj);
    anstore_drop(c->answers, key, key_len); /* (not counted: it is no chunk) */
    struct cache_purge *p = cache_purge_obj(c, obj, done, arg);
    p->by_key = true;
    return p;
}

void cache_purge_flush(struct cache *c)
{
    struct cache_purge *p;
    TAILQ_FOREACH(p, &c->purges, link)
    if (p != TAILQ_FIRST(&c->purges) || !c->purge_running)
        iopool_submit(c->io, &p->j);
    c->purge_running = true;
}
