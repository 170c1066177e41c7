/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * inventory: what the disk tier holds, as totals per group. A group is a service (the cache
 * identifier) and a prefix of its paths: for Steam ("steam") "/depot/<id>/"; for every other
 * service the path's first two directory segments ("/tpr/wow/", "/Builds/Org/"; a file at the
 * root: "/"). Each group has its stored bytes, chunk files and last use.
 *
 * diskidx keeps the group id of every chunk file in that file's index entry (inv_* is called on
 * each add, remove, eviction and touch), so the inventory costs nothing per object: its memory
 * is the group table, at most INV_GROUPS_MAX groups of sizeof(struct inv_group) bytes plus the
 * hash index (inv_memory()): under 16 MiB at the limit, whatever the object count.
 *
 * Group ids: 1..INV_GROUPS_MAX-1, reused once a group holds nothing. INV_UNREAD (0) holds the
 * files found by the start-up scan whose key (in the chunk file's header) is not read yet;
 * INV_OTHER those of groups that did not fit in a full table; INV_UNREADABLE those whose
 * header could not be read. Pure: no I/O, no loop; loop thread only.
 */
#ifndef CACHEPARTY_INVENTORY_H
#define CACHEPARTY_INVENTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INV_GROUPS_MAX 65536u /* ids fit in 16 bits */
#define INV_SERVICE_MAX 64u   /* bytes of a service name, NUL included (longer ones are cut) */
#define INV_PREFIX_MAX 96u    /* bytes of a prefix, NUL included (longer ones are cut) */
#define INV_UNREAD 0u
#define INV_OTHER 1u
#define INV_UNREADABLE 2u
#define INV_FIRST 3u /* the first id of a named group */

struct inventory;

struct inv_group {
    uint32_t id;
    char service[INV_SERVICE_MAX]; /* "" for INV_UNREAD, "*" for INV_OTHER and INV_UNREADABLE */
    char prefix[INV_PREFIX_MAX];
    uint64_t bytes;   /* on disk, as diskidx accounts them */
    uint64_t chunks;  /* chunk files */
    uint64_t last_ms; /* wall clock of the last add or use (0: none) */
    uint32_t hnext;   /* private: hash chain */
    bool purging;     /* a purge of it runs (set by the cache) */
};

/* An empty inventory (the three fixed groups). Never returns NULL. */
struct inventory *inv_new(void);
/* Frees it; *<inv> becomes NULL. NULL is fine. */
void inv_free(struct inventory **inv);

/*
 * The group of a cache key "identifier\npath" (cache_key_build): the service into
 * <service>[INV_SERVICE_MAX] and the prefix into <prefix>[INV_PREFIX_MAX], both NUL-terminated
 * and cut to fit. The path's query ("?...") is not part of it. A key without "\n" is
 * <service> "*" and <prefix> "/". Pure.
 */
void inv_group_of_key(const char *key, size_t key_len, char *service, char *prefix);

/* The id of group (<service>, <prefix>) (NUL-terminated; cut as inv_group_of_key cuts), made when
 * new: INV_OTHER when the table is full. Never 0. */
uint32_t inv_intern(struct inventory *inv, const char *service, const char *prefix);
/* How many times a group was made by inv_intern or began to hold chunks (inv_add to an empty
 * one: a group interned while its chunk went away stays empty, unflagged, until then; struct
 * inv_group's flags start false): unchanged means no group is new to inv_foreach since. */
uint64_t inv_made(const struct inventory *inv);
/* The id of that group, or 0 when there is none. */
uint32_t inv_find(const struct inventory *inv, const char *service, const char *prefix);
/* The group with id <id>, or NULL when that id holds nothing. */
struct inv_group *inv_get(struct inventory *inv, uint32_t id);

/* A chunk file of <bytes> joined group <id> (an id inv_intern returned, or a fixed one), used at
 * <now_ms> (0: keeps the last use). */
void inv_add(struct inventory *inv, uint32_t id, uint64_t bytes, uint64_t now_ms);
/* A chunk file of <bytes> left group <id>; a named group left empty is freed (its id reused). */
void inv_sub(struct inventory *inv, uint32_t id, uint64_t bytes);
/* A chunk file of group <id> was used at <now_ms>. */
void inv_use(struct inventory *inv, uint32_t id, uint64_t now_ms);

/* Calls <fn> for every group that holds something (the fixed ones included), in id order. */
typedef void inv_group_fn(const struct inv_group *g, void *arg);
void inv_foreach(const struct inventory *inv, inv_group_fn *fn, void *arg);

/* Groups that hold something (fixed ones included). */
size_t inv_count(const struct inventory *inv);
/* Bytes the inventory holds in memory. */
size_t inv_memory(const struct inventory *inv);

#endif
