/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_inventory: the loop side of the disk tier's inventory (see cache.h and inventory.h).
 *
 * Three kinds of work, all from one timer, each step bounded:
 * - reads: the start-up scan indexes files as INV_UNREAD; a walk of the disk index collects up to
 *   CACHE_INV_READ_BATCH of them into one I/O job that reads each file's header key
 *   (chunkfile_read_key) and its group; back on the loop each joins its group (if still unread:
 *   a fill may have stored it anew meanwhile). One job at a time, on the cache's I/O pool.
 * - a listing: walks the index for the entries of one group, gathers its objects (at most
 *   CACHE_INV_LIST_MAX), then one I/O job reads one header of each for its path.
 * - purges: walks the index for entries of the groups being purged and purges their objects
 *   (cache_purge_obj), at most CACHE_INV_PURGE_OBJS per step; a pass that finds none ends them,
 *   and so does the CACHE_INV_PURGE_PASSES-th pass (files that cannot be unlinked, or stored as
 *   fast as they go), with a warning.
 *   Chunks in memory only (being filled) are found once, at the start, in the memory table.
 * Threading: loop thread, except the jobs' work functions (which touch only their job).
 */
#include "cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "cache_int.h"
#include "chunkfile.h"
#include "diskidx.h"
#include "inventory.h"
#include "iopool.h"
#include "log.h"
#include "stats.h"
#include "util.h"

#define CACHE_INV_MAGIC 0x1a7e0c02u
#define CACHE_INV_PURGE_OBJS 32u
#define CACHE_INV_PURGE_PASSES 4u /* passes of the index after which purges stop, files left */
#define CACHE_INV_BUSY 0.001      /* s: the timer while work is left */
#define CACHE_INV_IDLE 1.0        /* s: while there is none (the scan may add unread files) */
#define CACHE_INV_HASH 512u       /* slots of a listing's object set (> 2 * CACHE_INV_LIST_MAX) */

struct read_item {
    uint8_t obj[16];
    uint64_t index;
    unsigned shard;
    uint32_t group; /* in: the group it must still have; out: unused */
    bool ok;
    char service[INV_SERVICE_MAX], prefix[INV_PREFIX_MAX]; /* out */
    char *path;                                            /* out, listings: owns */
};

struct read_job {
    struct iojob j;
    struct cache *c;
    char *const *dirs; /* borrowed from the cache (fixed for its life) */
    bool listing;      /* a listing's paths, else the scan's groups */
    uint64_t list_gen;
    size_t n;
    struct read_item items[]; /* n */
};

enum list_state { LIST_IDLE, LIST_WALK, LIST_READ, LIST_DONE };

struct purge {
    char service[INV_SERVICE_MAX];
    char prefix[INV_PREFIX_MAX]; /* "" for the whole service */
};

struct cache_inv {
    unsigned magic;
    struct cache *c;
    ev_timer tick;
    /* reads */
    uint64_t read_cursor;
    bool read_busy;
    /* the listing */
    enum list_state list_state;
    uint32_t list_group;
    uint64_t list_cursor;
    uint64_t list_gen;                  /* a new listing makes the read job of an older one void */
    uint16_t list_slot[CACHE_INV_HASH]; /* 1 + position in listing.objs, 0 empty */
    struct cache_inv_listing listing;
    /* purges */
    struct purge purges[CACHE_INV_PURGES];
    unsigned n_purges;
    uint64_t purge_cursor;
    bool purge_found;      /* this pass found an entry to purge */
    uint64_t flagged_made; /* inv_made() when the groups were last flagged */
    unsigned purge_passes; /* whole passes of the index done by the purges running */
    uint64_t purged;
};

static char *const *cache_dirs(struct cache *c)
{
    return c->dirs;
}

uint32_t cache_inv_group(struct cache *c, const char *key, size_t key_len)
{
    char service[INV_SERVICE_MAX], prefix[INV_PREFIX_MAX];
    inv_group_of_key(key, key_len, service, prefix);
    return inv_intern(diskidx_inventory(c->didx), service, prefix);
}

struct inventory *cache_inventory(struct cache *c)
{
    return diskidx_inventory(c->didx);
}

static void kick(struct cache_inv *ci)
{
    if (ci->c->loop == NULL)
        return;
    ci->tick.repeat = CACHE_INV_BUSY;
    ev_timer_again(ci->c->loop, &ci->tick);
}

/* ---- the I/O side ---------------------------------------------------------------------------- */

static void on_read_work(struct iojob *j)
{
    struct read_job *rj = container_of(j, struct read_job, j);
    char *key = xmalloc(CHUNKFILE_KEY_MAX + 1);
    for (size_t i = 0; i < rj->n; i++) {
        struct read_item *it = &rj->items[i];
        char path[PATH_MAX];
        size_t key_len = 0;
        it->ok = chunkfile_path(path, sizeof(path), rj->dirs[it->shard], it->obj, it->index) == 0 &&
                 chunkfile_read_key(path, key, CHUNKFILE_KEY_MAX + 1, &key_len) == 0;
        if (it->ok) {
            uint8_t h[16];
            cache_obj_hash(key, key_len, h);
            it->ok = memcmp(h, it->obj, 16) == 0; /* a file at another key's name is foreign */
        }
        if (!it->ok)
            continue;
        inv_group_of_key(key, key_len, it->service, it->prefix);
        if (rj->listing) {
            const char *nl = memchr(key, '\n', key_len);
            it->path = nl != NULL ? xstrndup(nl + 1, key_len - (size_t)(nl + 1 - key)) : NULL;
        }
    }
    free(key);
}

static void on_read_done(struct iojob *j)
{
    struct read_job *rj = container_of(j, struct read_job, j);
    struct cache *c = rj->c;
    struct cache_inv *ci = c->inv;
    if (!rj->listing) {
        struct inventory *inv = diskidx_inventory(c->didx);
        for (size_t i = 0; i < rj->n; i++) {
            struct read_item *it = &rj->items[i];
            uint32_t to = it->ok ? inv_intern(inv, it->service, it->prefix) : INV_UNREADABLE;
            diskidx_regroup(c->didx, it->shard, it->obj, it->index, INV_UNREAD, to);
        }
        if (ci != NULL)
            ci->read_busy = false;
    } else if (ci != NULL && rj->list_gen == ci->list_gen && ci->list_state == LIST_READ) {
        for (size_t i = 0; i < rj->n && i < ci->listing.n; i++) {
            ci->listing.objs[i].path = rj->items[i].path;
            rj->items[i].path = NULL;
        }
        ci->listing.done_ms = util_wall_ms();
        ci->list_state = LIST_DONE;
    }
    for (size_t i = 0; i < rj->n; i++)
        free(rj->items[i].path);
    free(rj);
    if (ci != NULL && !c->closing)
        kick(ci);
}

static struct read_job *read_job_new(struct cache *c, size_t cap, bool listing)
{
    struct read_job *rj = xcalloc(1, sizeof(*rj) + cap * sizeof(rj->items[0]));
    rj->c = c;
    rj->dirs = cache_dirs(c);
    rj->listing = listing;
    rj->j.work = on_read_work;
    rj->j.done = on_read_done;
    return rj;
}

/* ---- reads of the scan's files ------------------------------------------------------------- */

struct read_walk {
    struct read_job *rj;
};

static bool on_read_entry(const struct diskidx_entry *e, void *arg)
{
    struct read_walk *w = arg;
    if (e->group != INV_UNREAD)
        return true;
    struct read_item *it = &w->rj->items[w->rj->n++];
    memcpy(it->obj, e->obj, 16);
    it->index = e->index;
    it->shard = e->shard;
    it->group = INV_UNREAD;
    return w->rj->n < CACHE_INV_READ_BATCH;
}

/* Returns true when files are left to read. */
static bool read_step(struct cache_inv *ci)
{
    struct cache *c = ci->c;
    struct inv_group *unread = inv_get(diskidx_inventory(c->didx), INV_UNREAD);
    if (unread == NULL || c->io == NULL)
        return false;
    if (ci->read_busy)
        return true;
    struct read_walk w = {read_job_new(c, CACHE_INV_READ_BATCH, false)};
    (void)diskidx_walk(c->didx, &ci->read_cursor, CACHE_INV_STEP, on_read_entry, &w);
    if (w.rj->n == 0) {
        free(w.rj);
        return true; /* the next step walks on (or again from the start) */
    }
    ci->read_busy = true;
    iopool_submit(c->io, &w.rj->j);
    return true;
}

/* ---- listings -------------------------------------------------------------------------------- */

static void listing_clear(struct cache_inv *ci)
{
    for (size_t i = 0; i < ci->listing.n; i++)
        free(ci->listing.objs[i].path);
    memset(&ci->listing, 0, sizeof(ci->listing));
    memset(ci->list_slot, 0, sizeof(ci->list_slot));
    ci->list_state = LIST_IDLE;
    ci->list_cursor = 0;
    ci->list_gen++;
}

static bool on_list_entry(const struct diskidx_entry *e, void *arg)
{
    struct cache_inv *ci = arg;
    if (e->group != ci->list_group)
        return true;
    struct cache_inv_listing *l = &ci->listing;
    size_t h = (size_t)(e->obj[2] | e->obj[3] << 8) % CACHE_INV_HASH;
    while (ci->list_slot[h] != 0 && memcmp(l->objs[ci->list_slot[h] - 1].obj, e->obj, 16) != 0)
        h = (h + 1) % CACHE_INV_HASH;
    struct cache_inv_obj *o;
    if (ci->list_slot[h] != 0) {
        o = &l->objs[ci->list_slot[h] - 1];
        if (e->index < o->first_index)
            o->first_index = e->index;
    } else if (l->n < CACHE_INV_LIST_MAX) {
        o = &l->objs[l->n++];
        ci->list_slot[h] = (uint16_t)l->n;
        memcpy(o->obj, e->obj, 16);
        o->first_index = e->index;
        o->shard = e->shard;
    } else {
        l->truncated = true;
        return true;
    }
    o->bytes += e->bytes;
    o->chunks++;
    if (e->last_ms > o->last_ms)
        o->last_ms = e->last_ms;
    return true;
}

static bool list_step(struct cache_inv *ci)
{
    struct cache *c = ci->c;
    if (ci->list_state != LIST_WALK)
        return false;
    if (!diskidx_walk(c->didx, &ci->list_cursor, CACHE_INV_STEP, on_list_entry, ci))
        return true;
    struct read_job *rj = read_job_new(c, ci->listing.n, true);
    rj->list_gen = ci->list_gen;
    for (size_t i = 0; i < ci->listing.n; i++) {
        struct read_item *it = &rj->items[i];
        memcpy(it->obj, ci->listing.objs[i].obj, 16);
        it->index = ci->listing.objs[i].first_index;
        it->shard = ci->listing.objs[i].shard;
    }
    rj->n = ci->listing.n;
    ci->list_state = LIST_READ;
    if (c->io != NULL) {
        iopool_submit(c->io, &rj->j);
    } else {
        on_read_work(&rj->j);
        on_read_done(&rj->j);
    }
    return false;
}

void cache_inv_listing_void(struct cache *c)
{
    if (c->inv != NULL && c->inv->list_state != LIST_IDLE)
        listing_clear(c->inv);
}

enum cache_inv_list_rc cache_inv_list(struct cache *c, const char *service, const char *prefix,
                                      const struct cache_inv_listing **out)
{
    struct cache_inv *ci = c->inv;
    CHECK_OBJ(ci, CACHE_INV_MAGIC);
    struct inventory *inv = diskidx_inventory(c->didx);
    uint32_t id = inv_find(inv, service, prefix);
    if (id == 0 || inv_get(inv, id) == NULL)
        return CACHE_INV_LIST_NONE;
    struct cache_inv_listing *l = &ci->listing;
    bool same = ci->list_state != LIST_IDLE && ci->list_group == id &&
                strcmp(l->service, inv_get(inv, id)->service) == 0 &&
                strcmp(l->prefix, inv_get(inv, id)->prefix) == 0;
    if (same && ci->list_state == LIST_DONE &&
        util_wall_ms() - l->done_ms <= CACHE_INV_LIST_TTL_MS) {
        *out = l;
        return CACHE_INV_LIST_DONE;
    }
    if (same && ci->list_state != LIST_DONE)
        return CACHE_INV_LIST_PENDING;
    listing_clear(ci);
    ci->list_group = id;
    snprintf(l->service, sizeof(l->service), "%s", inv_get(inv, id)->service);
    snprintf(l->prefix, sizeof(l->prefix), "%s", inv_get(inv, id)->prefix);
    ci->list_state = LIST_WALK;
    kick(ci);
    return CACHE_INV_LIST_PENDING;
}

/* ---- purges ---------------------------------------------------------------------------------- */

static bool purge_matches(const struct purge *p, const struct inv_group *g)
{
    return strcmp(p->service, g->service) == 0 &&
           (p->prefix[0] == '\0' || strcmp(p->prefix, g->prefix) == 0);
}

struct purge_walk {
    struct cache_inv *ci;
    uint8_t objs[CACHE_INV_PURGE_OBJS][16];
    size_t n;
};

static bool on_purge_entry(const struct diskidx_entry *e, void *arg)
{
    struct purge_walk *w = arg;
    struct inv_group *g = inv_get(diskidx_inventory(w->ci->c->didx), e->group);
    if (g == NULL || !g->purging || cache_purge_holds(w->ci->c, e->obj))
        return true; /* (a purge of it is queued: its entries go when it is done) */
    for (size_t i = 0; i < w->n; i++)
        if (memcmp(w->objs[i], e->obj, 16) == 0)
            return true;
    memcpy(w->objs[w->n++], e->obj, 16);
    return w->n < CACHE_INV_PURGE_OBJS;
}

static void on_flag_group(const struct inv_group *g, void *arg)
{
    struct cache_inv *ci = arg;
    for (unsigned i = 0; i < ci->n_purges && g->id >= INV_FIRST; i++)
        if (purge_matches(&ci->purges[i], g))
            inv_get(diskidx_inventory(ci->c->didx), g->id)->purging = true;
}

static void on_unflag_group(const struct inv_group *g, void *arg)
{
    struct cache_inv *ci = arg;
    inv_get(diskidx_inventory(ci->c->didx), g->id)->purging = false;
}

/* Flags the groups of the purges running, when a group was made since they were last. */
static void flag_groups(struct cache_inv *ci)
{
    struct inventory *inv = diskidx_inventory(ci->c->didx);
    if (inv_made(inv) == ci->flagged_made)
        return;
    inv_foreach(inv, on_flag_group, ci);
    ci->flagged_made = inv_made(inv);
}

/* One object of a group purge is done: <arg> is the inventory. */
static void on_purged(void *arg, int n)
{
    struct cache_inv *ci = arg;
    if (n > 0)
        ci->purged += (uint64_t)n;
}

static bool purge_step(struct cache_inv *ci)
{
    struct cache *c = ci->c;
    if (ci->n_purges == 0)
        return false;
    /* A step's objects at most are queued for their unlinks at once, and a pass starts when
     * those of the last one are done: what it finds is what they left. */
    size_t queued = cache_purges_pending(c);
    if (queued >= CACHE_INV_PURGE_OBJS || (queued > 0 && ci->purge_cursor == 0))
        return true;
    /* Groups made since (chunks stored while it runs) are purged too. */
    flag_groups(ci);
    struct purge_walk w = {.ci = ci};
    bool end = diskidx_walk(c->didx, &ci->purge_cursor, CACHE_INV_STEP, on_purge_entry, &w);
    if (w.n > 0)
        ci->purge_found = true;
    for (size_t i = 0; i < w.n; i++)
        (void)cache_purge_obj(c, w.objs[i], on_purged, ci);
    /* Files of the start-up scan not read yet may belong to the groups: they are purged once
     * read, so a purge runs (and counts no pass) until every file has its group. */
    bool unread = inv_get(diskidx_inventory(c->didx), INV_UNREAD) != NULL;
    bool clean = end && ci->purge_cursor == 0 && w.n == 0 && !ci->purge_found && !unread;
    if (end && !clean && !unread && ++ci->purge_passes >= CACHE_INV_PURGE_PASSES) {
        /* Files that cannot be unlinked, or a service storing as fast as it is purged: stop. */
        log_warn("cache: purge of %u group%s stopped after %u passes with chunk files left "
                 "(unremovable, or stored while it ran); %llu removed since start",
                 ci->n_purges, ci->n_purges == 1 ? "" : "s", ci->purge_passes,
                 (unsigned long long)ci->purged);
        clean = true;
    } else if (clean) {
        log_info("cache: purge of %u group%s done (%llu chunk files removed since start)",
                 ci->n_purges, ci->n_purges == 1 ? "" : "s", (unsigned long long)ci->purged);
    }
    if (clean) {
        ci->n_purges = 0;
        ci->purge_passes = 0;
        inv_foreach(diskidx_inventory(c->didx), on_unflag_group, ci);
        return false;
    }
    if (end)
        ci->purge_found = false; /* another pass: entries moved behind the cursor */
    return true;
}

/* Purges the memory-only chunks (being filled) of the groups of <p>, by their keys. */
static void purge_memory(struct cache *c, const struct purge *p)
{
    for (size_t b = 0; b < c->n_buckets; b++) {
        struct chunk *ck = c->buckets[b];
        while (ck != NULL) {
            struct chunk *next = ck->hnext;
            struct inv_group g;
            if (ck->key != NULL)
                inv_group_of_key(ck->key, ck->key_len, g.service, g.prefix);
            if (ck->key != NULL && purge_matches(p, &g)) {
                uint8_t obj[16];
                memcpy(obj, ck->obj, 16);
                /* (It may free <next>: start the bucket again.) */
                (void)cache_purge_obj(c, obj, on_purged, c->inv);
                next = c->buckets[b];
            }
            ck = next;
        }
    }
}

struct purge_count {
    const struct purge *p;
    unsigned groups;
    uint64_t chunks;
};

static void on_count_group(const struct inv_group *g, void *arg)
{
    struct purge_count *pc = arg;
    if (g->id >= INV_FIRST && purge_matches(pc->p, g)) {
        pc->groups++;
        pc->chunks += g->chunks;
    }
}

int cache_inv_purge(struct cache *c, const char *service, const char *prefix, uint64_t *chunks)
{
    struct cache_inv *ci = c->inv;
    CHECK_OBJ(ci, CACHE_INV_MAGIC);
    if (ci->n_purges == CACHE_INV_PURGES)
        return -EBUSY;
    struct purge *p = &ci->purges[ci->n_purges];
    snprintf(p->service, sizeof(p->service), "%s", service);
    snprintf(p->prefix, sizeof(p->prefix), "%s", prefix != NULL ? prefix : "");
    struct purge_count pc = {.p = p};
    inv_foreach(diskidx_inventory(c->didx), on_count_group, &pc);
    *chunks = pc.chunks;
    purge_memory(c, p);
    if (pc.groups == 0)
        return 0;
    ci->n_purges++;
    inv_foreach(diskidx_inventory(c->didx), on_flag_group, ci);
    ci->flagged_made = inv_made(diskidx_inventory(c->didx));
    ci->purge_found = false;
    ci->purge_cursor = 0;
    ci->purge_passes = 0;
    if (ci->list_state != LIST_IDLE)
        listing_clear(ci); /* it would show what goes */
    kick(ci);
    return (int)pc.groups;
}

/* ---- the timer, start and end ---------------------------------------------------------------- */

static void on_inv_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct cache_inv *ci = container_of(w, struct cache_inv, tick);
    CHECK_OBJ(ci, CACHE_INV_MAGIC);
    if (ci->c->closing)
        return;
    bool more = purge_step(ci);
    more |= list_step(ci);
    struct inv_group *unread = inv_get(diskidx_inventory(ci->c->didx), INV_UNREAD);
    if (unread != NULL)
        more |= read_step(ci) && !ci->read_busy;
    w->repeat = more ? CACHE_INV_BUSY : CACHE_INV_IDLE;
    ev_timer_again(loop, w);
}

void cache_inv_status(struct cache *c, struct cache_inv_status *out)
{
    struct cache_inv *ci = c->inv;
    CHECK_OBJ(ci, CACHE_INV_MAGIC);
    struct diskidx_stats ds;
    diskidx_get_stats(c->didx, &ds);
    const struct inv_group *unread = inv_get(diskidx_inventory(c->didx), INV_UNREAD);
    out->unread_chunks = unread != NULL ? unread->chunks : 0;
    out->complete = ds.scan_done && out->unread_chunks == 0;
    out->purges = ci->n_purges;
    out->purged_chunks = ci->purged;
    out->index_bytes = diskidx_memory(c->didx);
}

void cache_inv_start(struct cache *c)
{
    struct cache_inv *ci = xcalloc(1, sizeof(*ci));
    ci->magic = CACHE_INV_MAGIC;
    ci->c = c;
    c->inv = ci;
    if (c->loop == NULL)
        return;
    ev_timer_init(&ci->tick, on_inv_tick, 0., CACHE_INV_IDLE);
    ev_timer_again(c->loop, &ci->tick);
    ev_unref(c->loop); /* never keeps the loop alive by itself */
}

void cache_inv_free(struct cache *c)
{
    struct cache_inv *ci = c->inv;
    if (ci == NULL)
        return;
    CHECK_OBJ(ci, CACHE_INV_MAGIC);
    if (c->loop != NULL) {
        ev_ref(c->loop);
        ev_timer_stop(c->loop, &ci->tick);
    }
    listing_clear(ci);
    ci->magic = 0;
    free(ci);
    c->inv = NULL;
}
