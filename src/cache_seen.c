/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_seen: which bytes of a chunk were already delivered to a client (part of the cache
 * module, see cache_int.h). A byte fetched from the origin is a miss the first time it is sent
 * to any client and a hit every later time; this is the bookkeeping behind that rule.
 *
 * A record (struct chunk_seen) holds the delivered bytes of one fill of one chunk as a sorted
 * set of at most CACHE_SEEN_RUNS disjoint runs [start, end) of chunk offsets, so any order of
 * delivery (readers starting mid-chunk, the two parts of a two-part fill) is exact to the byte.
 * A pattern needing more runs merges the two closest runs: the bytes between them count as
 * delivered (their later deliveries as hits), the only inexact case.
 * A second set holds the bytes that an answer's head announced as new (X-Upstream-Cache-Status
 * MISS, written before any byte is sent): of several clients asking for the same new bytes at
 * once, the first head says MISS and the others HIT, as the access log will mostly say too.
 * Records are refcounted: every struct chunk holding those bytes (the memory chunk, a copy of it
 * read from its file) shares one. A chunk evicted from memory before all its bytes were
 * delivered leaves its record in the cache's table of kept records (struct cache_seen_tab, by
 * object and index), where a later load of its file finds it; without a record a loaded file
 * counts as all delivered. The table is bounded (CACHE_SEEN_KEPT_MAX, oldest dropped first);
 * a record leaves it once complete, or when a new fill of its chunk starts.
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"
#include "util.h"

#define SEEN_MAGIC 0x5ee4e003u
#define SEEN_BUCKETS 4096u /* power of two */

static size_t seen_bucket(const uint8_t obj[16], uint64_t index)
{
    uint64_t h;
    memcpy(&h, obj, sizeof(h));
    h ^= index * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & (SEEN_BUCKETS - 1);
}

struct chunk_seen *cache_seen_new(const uint8_t obj[16], uint64_t index)
{
    struct chunk_seen *s = xcalloc(1, sizeof(*s));
    s->magic = SEEN_MAGIC;
    s->refs = 1;
    memcpy(s->obj, obj, 16);
    s->index = index;
    return s;
}

struct chunk_seen *cache_seen_ref(struct chunk_seen *s)
{
    if (s != NULL) {
        CHECK_OBJ(s, SEEN_MAGIC);
        s->refs++;
    }
    return s;
}

void cache_seen_unref(struct chunk_seen **sp)
{
    struct chunk_seen *s = *sp;
    if (s == NULL)
        return;
    *sp = NULL;
    CHECK_OBJ(s, SEEN_MAGIC);
    ASSERT(s->refs > 0);
    if (--s->refs > 0)
        return;
    ASSERT(s->tab == NULL);
    s->magic = 0;
    free(s);
}

/* Bytes of [a, b) that <r> covers. */
static uint64_t covered(const struct seen_runs *r, uint64_t a, uint64_t b)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < r->n; i++) {
        uint64_t lo = r->start[i] > a ? r->start[i] : a;
        uint64_t hi = r->end[i] < b ? r->end[i] : b;
        if (lo < hi)
            n += hi - lo;
    }
    return n;
}

static bool runs_have(const struct seen_runs *r, uint64_t off)
{
    for (unsigned i = 0; i < r->n; i++)
        if (off >= r->start[i] && off < r->end[i])
            return true;
    return false;
}

/* Adds [a, b) (not empty) to <r>. */
static void runs_add(struct seen_runs *r, uint64_t a, uint64_t b)
{
    ASSERT(a < b && b <= UINT32_MAX);
    /* Insert [a, b), absorbing the runs it overlaps or touches (the runs are sorted). */
    uint32_t ns[CACHE_SEEN_RUNS + 1], ne[CACHE_SEEN_RUNS + 1];
    unsigned m = 0;
    bool placed = false;
    for (unsigned i = 0; i < r->n; i++) {
        if (r->end[i] < a) {
            ns[m] = r->start[i];
            ne[m++] = r->end[i];
        } else if (r->start[i] > b) {
            if (!placed) {
                ns[m] = (uint32_t)a;
                ne[m++] = (uint32_t)b;
                placed = true;
            }
            ns[m] = r->start[i];
            ne[m++] = r->end[i];
        } else {
            a = r->start[i] < a ? r->start[i] : a;
            b = r->end[i] > b ? r->end[i] : b;
        }
    }
    if (!placed) {
        ns[m] = (uint32_t)a;
        ne[m++] = (uint32_t)b;
    }
    if (m > CACHE_SEEN_RUNS) {
        /* Too scattered: join the two runs with the smallest gap between them. */
        unsigned best = 0;
        for (unsigned i = 1; i + 1 < m; i++)
            if (ns[i + 1] - ne[i] < ns[best + 1] - ne[best])
                best = i;
        ne[best] = ne[best + 1];
        memmove(&ns[best + 1], &ns[best + 2], (m - best - 2) * sizeof(ns[0]));
        memmove(&ne[best + 1], &ne[best + 2], (m - best - 2) * sizeof(ne[0]));
        m--;
    }
    memcpy(r->start, ns, m * sizeof(ns[0]));
    memcpy(r->end, ne, m * sizeof(ne[0]));
    r->n = m;
}

uint64_t cache_seen_mark(struct chunk_seen *s, uint64_t off, uint64_t len)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    if (len == 0)
        return 0;
    uint64_t fresh = len - covered(&s->done, off, off + len);
    if (fresh > 0)
        runs_add(&s->done, off, off + len);
    return fresh;
}

bool cache_seen_has(const struct chunk_seen *s, uint64_t off)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    return runs_have(&s->done, off);
}

bool cache_seen_tell(struct chunk_seen *s, uint64_t off, uint64_t len)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    if (len == 0 || runs_have(&s->done, off) || runs_have(&s->told, off))
        return false;
    runs_add(&s->told, off, off + len);
    return true;
}

bool cache_seen_is_untouched(const struct chunk_seen *s)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    return s->done.n == 0 && s->told.n == 0;
}

bool cache_seen_is_complete(const struct chunk_seen *s, uint64_t cap)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    return s->done.n == 1 && s->done.start[0] == 0 && s->done.end[0] >= cap;
}

/* ---- the table of kept records ---- */

void cache_seen_tab_init(struct cache_seen_tab *t)
{
    memset(t, 0, sizeof(*t));
    t->buckets = xcalloc(SEEN_BUCKETS, sizeof(*t->buckets));
}

void cache_seen_tab_fini(struct cache_seen_tab *t)
{
    while (t->oldest != NULL)
        cache_seen_tab_remove(t, t->oldest);
    free(t->buckets);
    t->buckets = NULL;
}

static struct chunk_seen *tab_find(const struct cache_seen_tab *t, const uint8_t obj[16],
                                   uint64_t index)
{
    for (struct chunk_seen *s = t->buckets[seen_bucket(obj, index)]; s != NULL; s = s->hnext)
        if (s->index == index && memcmp(s->obj, obj, 16) == 0)
            return s;
    return NULL;
}

void cache_seen_tab_remove(struct cache_seen_tab *t, struct chunk_seen *s)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    ASSERT(s->tab == t);
    struct chunk_seen **pp = &t->buckets[seen_bucket(s->obj, s->index)];
    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    s->hnext = NULL;
    if (s->newer != NULL)
        s->newer->older = s->older;
    else
        t->newest = s->older;
    if (s->older != NULL)
        s->older->newer = s->newer;
    else
        t->oldest = s->newer;
    s->newer = s->older = NULL;
    s->tab = NULL;
    t->count--;
    cache_seen_unref(&s);
}

void cache_seen_tab_keep(struct cache_seen_tab *t, struct chunk_seen *s)
{
    CHECK_OBJ(s, SEEN_MAGIC);
    if (s->tab != NULL)
        return;                                 /* already kept */
    cache_seen_tab_forget(t, s->obj, s->index); /* an older record of the chunk: stale */
    while (t->count >= CACHE_SEEN_KEPT_MAX)
        cache_seen_tab_remove(t, t->oldest); /* its bytes will count as delivered */
    size_t b = seen_bucket(s->obj, s->index);
    s->hnext = t->buckets[b];
    t->buckets[b] = s;
    s->older = t->newest;
    s->newer = NULL;
    if (t->newest != NULL)
        t->newest->newer = s;
    else
        t->oldest = s;
    t->newest = s;
    s->tab = t;
    t->count++;
    cache_seen_ref(s);
}

struct chunk_seen *cache_seen_tab_find(struct cache_seen_tab *t, const uint8_t obj[16],
                                       uint64_t index)
{
    return cache_seen_ref(tab_find(t, obj, index));
}

void cache_seen_tab_forget(struct cache_seen_tab *t, const uint8_t obj[16], uint64_t index)
{
    struct chunk_seen *s = tab_find(t, obj, index);
    if (s != NULL)
        cache_seen_tab_remove(t, s);
}
