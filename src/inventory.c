/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * inventory: totals per group of what the disk tier holds. See inventory.h.
 *
 * Memory: a dense array of groups indexed by id, grown by doubling up to INV_GROUPS_MAX, and a
 * hash table of u32 chain heads (one per slot of the array) over (service, prefix). Freed ids go
 * on a free list (through hnext) and are reused first. No allocation per add, sub or use.
 */
#include "inventory.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define INV_MAGIC 0x1a7e0c01u
#define INV_CAP_MIN 64u
#define INV_NIL UINT32_MAX

struct inventory {
    unsigned magic;
    struct inv_group *g; /* owns: [0, cap) */
    uint32_t cap;        /* slots (a power of two) */
    uint32_t used;       /* slots ever handed out: ids < used */
    uint32_t live;       /* groups that hold something */
    uint32_t free_head;  /* freed ids (chained through hnext), INV_NIL: none */
    uint32_t *heads;     /* owns: [cap] hash chains of named groups, INV_NIL at the end */
    uint64_t made;       /* groups made, or that began to hold chunks (inv_made) */
};

static void copy_cut(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

void inv_group_of_key(const char *key, size_t key_len, char *service, char *prefix)
{
    const char *nl = memchr(key, '\n', key_len);
    if (nl == NULL) {
        copy_cut(service, INV_SERVICE_MAX, "*", 1);
        copy_cut(prefix, INV_PREFIX_MAX, "/", 1);
        return;
    }
    copy_cut(service, INV_SERVICE_MAX, key, (size_t)(nl - key));
    const char *p = nl + 1;
    size_t len = key_len - (size_t)(p - key);
    const char *q = memchr(p, '?', len);
    if (q != NULL)
        len = (size_t)(q - p);
    if (len == 0 || p[0] != '/') {
        copy_cut(prefix, INV_PREFIX_MAX, "/", 1);
        return;
    }
    /* Steam: "/depot/<digits>/..." is the depot. */
    if (strcmp(service, "steam") == 0 && len > 7 && memcmp(p, "/depot/", 7) == 0) {
        size_t i = 7;
        while (i < len && p[i] >= '0' && p[i] <= '9')
            i++;
        if (i > 7 && i < len && p[i] == '/') {
            copy_cut(prefix, INV_PREFIX_MAX, p, i + 1);
            return;
        }
    }
    /* Else up to two directory segments: the end of the second "/" after the first, never the
     * last segment (the object's own name). */
    size_t end = 1, dirs = 0;
    for (size_t i = 1; i < len && dirs < 2; i++)
        if (p[i] == '/') {
            end = i + 1;
            dirs++;
        }
    copy_cut(prefix, INV_PREFIX_MAX, p, end);
}

static uint32_t name_hash(const char *service, const char *prefix)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over service "\n" prefix */
    for (const char *s = service; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
    for (const char *s = prefix; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static void set_fixed(struct inventory *inv, uint32_t id, const char *service, const char *prefix)
{
    struct inv_group *g = &inv->g[id];
    memset(g, 0, sizeof(*g));
    g->id = id;
    inv->made++;
    copy_cut(g->service, sizeof(g->service), service, strlen(service));
    copy_cut(g->prefix, sizeof(g->prefix), prefix, strlen(prefix));
    g->hnext = INV_NIL;
}

struct inventory *inv_new(void)
{
    struct inventory *inv = xcalloc(1, sizeof(*inv));
    inv->magic = INV_MAGIC;
    inv->cap = INV_CAP_MIN;
    inv->g = xcalloc(inv->cap, sizeof(*inv->g));
    inv->heads = xmalloc(inv->cap * sizeof(*inv->heads));
    for (uint32_t i = 0; i < inv->cap; i++)
        inv->heads[i] = INV_NIL;
    inv->free_head = INV_NIL;
    set_fixed(inv, INV_UNREAD, "", "(not read yet)");
    set_fixed(inv, INV_OTHER, "*", "(other groups)");
    set_fixed(inv, INV_UNREADABLE, "*", "(unreadable)");
    inv->used = INV_FIRST;
    return inv;
}

void inv_free(struct inventory **inv)
{
    if (*inv == NULL)
        return;
    CHECK_OBJ(*inv, INV_MAGIC);
    free((*inv)->g);
    free((*inv)->heads);
    (*inv)->magic = 0;
    free(*inv);
    *inv = NULL;
}

static bool holds(const struct inv_group *g)
{
    return g->chunks > 0;
}

/* Doubles the table and rebuilds the hash chains (at most 10 times in a table's life). */
static void grow(struct inventory *inv)
{
    uint32_t cap = inv->cap * 2;
    inv->g = xrealloc(inv->g, cap * sizeof(*inv->g));
    memset(inv->g + inv->cap, 0, (cap - inv->cap) * sizeof(*inv->g));
    free(inv->heads);
    inv->heads = xmalloc(cap * sizeof(*inv->heads));
    for (uint32_t i = 0; i < cap; i++)
        inv->heads[i] = INV_NIL;
    inv->cap = cap;
    for (uint32_t id = INV_FIRST; id < inv->used; id++) {
        struct inv_group *g = &inv->g[id];
        if (g->id != id)
            continue; /* a freed id: its hnext links the free list */
        uint32_t b = name_hash(g->service, g->prefix) & (cap - 1);
        g->hnext = inv->heads[b];
        inv->heads[b] = id;
    }
}

uint32_t inv_find(const struct inventory *inv, const char *service, const char *prefix)
{
    CHECK_OBJ(inv, INV_MAGIC);
    char s[INV_SERVICE_MAX], p[INV_PREFIX_MAX];
    copy_cut(s, sizeof(s), service, strlen(service));
    copy_cut(p, sizeof(p), prefix, strlen(prefix));
    uint32_t b = name_hash(s, p) & (inv->cap - 1);
    for (uint32_t id = inv->heads[b]; id != INV_NIL; id = inv->g[id].hnext)
        if (strcmp(inv->g[id].service, s) == 0 && strcmp(inv->g[id].prefix, p) == 0)
            return id;
    return 0;
}

uint32_t inv_intern(struct inventory *inv, const char *service, const char *prefix)
{
    uint32_t id = inv_find(inv, service, prefix);
    if (id != 0)
        return id;
    if (inv->free_head != INV_NIL) {
        id = inv->free_head;
        inv->free_head = inv->g[id].hnext;
    } else if (inv->used < INV_GROUPS_MAX) {
        if (inv->used == inv->cap)
            grow(inv);
        id = inv->used++;
    } else {
        return INV_OTHER;
    }
    struct inv_group *g = &inv->g[id];
    memset(g, 0, sizeof(*g));
    g->id = id;
    inv->made++;
    copy_cut(g->service, sizeof(g->service), service, strlen(service));
    copy_cut(g->prefix, sizeof(g->prefix), prefix, strlen(prefix));
    uint32_t b = name_hash(g->service, g->prefix) & (inv->cap - 1);
    g->hnext = inv->heads[b];
    inv->heads[b] = id;
    return id;
}

uint64_t inv_made(const struct inventory *inv)
{
    CHECK_OBJ(inv, INV_MAGIC);
    return inv->made;
}

struct inv_group *inv_get(struct inventory *inv, uint32_t id)
{
    CHECK_OBJ(inv, INV_MAGIC);
    if (id >= inv->used || inv->g[id].id != id || !holds(&inv->g[id]))
        return NULL;
    return &inv->g[id];
}

/* The group of id <id>, which must be a fixed one or interned and not freed. */
static struct inv_group *group_at(struct inventory *inv, uint32_t id)
{
    CHECK_OBJ(inv, INV_MAGIC);
    ASSERT(id < inv->used && inv->g[id].id == id);
    return &inv->g[id];
}

void inv_add(struct inventory *inv, uint32_t id, uint64_t bytes, uint64_t now_ms)
{
    struct inv_group *g = group_at(inv, id);
    if (!holds(g)) {
        inv->live++;
        inv->made++; /* (visible now: made, or interned earlier and empty until now) */
    }
    g->chunks++;
    g->bytes += bytes;
    if (now_ms > g->last_ms)
        g->last_ms = now_ms;
}

void inv_sub(struct inventory *inv, uint32_t id, uint64_t bytes)
{
    struct inv_group *g = group_at(inv, id);
    ASSERT(g->chunks > 0 && g->bytes >= bytes);
    g->chunks--;
    g->bytes -= bytes;
    if (holds(g))
        return;
    inv->live--;
    g->last_ms = 0;
    g->purging = false;
    if (id < INV_FIRST)
        return;
    /* Unlink it from its chain and put its id on the free list. */
    uint32_t b = name_hash(g->service, g->prefix) & (inv->cap - 1);
    uint32_t *pp = &inv->heads[b];
    while (*pp != id) {
        ASSERT(*pp != INV_NIL);
        pp = &inv->g[*pp].hnext;
    }
    *pp = g->hnext;
    g->id = INV_NIL;
    g->hnext = inv->free_head;
    inv->free_head = id;
}

void inv_use(struct inventory *inv, uint32_t id, uint64_t now_ms)
{
    struct inv_group *g = group_at(inv, id);
    if (now_ms > g->last_ms)
        g->last_ms = now_ms;
}

void inv_foreach(const struct inventory *inv, inv_group_fn *fn, void *arg)
{
    CHECK_OBJ(inv, INV_MAGIC);
    for (uint32_t id = 0; id < inv->used; id++)
        if (inv->g[id].id == id && holds(&inv->g[id]))
            fn(&inv->g[id], arg);
}

size_t inv_count(const struct inventory *inv)
{
    CHECK_OBJ(inv, INV_MAGIC);
    return inv->live;
}

size_t inv_memory(const struct inventory *inv)
{
    CHECK_OBJ(inv, INV_MAGIC);
    return sizeof(*inv) + (size_t)inv->cap * (sizeof(*inv->g) + sizeof(*inv->heads));
}
