/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_int.h: the definition of struct chunk, private to the cache module (cache*.c) and its
 * unit test. Everyone else sees an opaque struct chunk and the accessors of cache.h.
 */
#ifndef CACHEPARTY_CACHE_INT_H
#define CACHEPARTY_CACHE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"

struct origin_req;
struct store_job;

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
    /* A chunk whose first reader starts deep inside it is filled in two parts at once (see
     * the filler's two-part fills): [0, tail_off) from its start and [tail_off, cap) from the
     * reader's offset. Bytes [tail_off, tail_end) are committed too; when len reaches tail_off the
     * parts join (len = tail_end, tail_off = tail_end = 0). tail_off == 0: one part. Set by the
     * filler through cache_chunk_split_at()/cache_chunk_unsplit(). */
    uint64_t tail_off, tail_end;
    char *data;            /* owns: memory chunk bytes, NULL for a disk chunk */
    int fd;                /* owns: disk chunk file, -1 for a memory chunk */
    off_t body_off;        /* where the body starts in fd */
    bool started_by_fetch; /* a fill was started for it (its first reader is a MISS) */
    bool refetch;          /* that fill was started by a forced lookup (?nocache=) */
    char *key;             /* owns: "identifier\npath" */
    size_t key_len;
    struct chunk *hnext;         /* memory table chain */
    struct chunk *cnext, *cprev; /* CLOCK ring of sealed memory chunks */
    bool in_table;
    bool clock_ref;
    bool notify_pending;
    struct chunk *notify_next;
    struct chunk_waiter *waiters;
    void *filler; /* borrows, while FILLING: the filler's handle (cache_chunk_set_filler) */
    bool loading; /* FILLING while the I/O pool looks it up on disk */
    struct origin_req *origin; /* owns, while loading: where to fetch it on a disk miss */
    uint64_t origin_off;       /* while loading: where in it that reader starts */
    struct store_job *store;   /* its file is being written (the job holds a ref) */
    uint64_t mem;              /* bytes accounted to the memory budget */
    struct answer *answer;     /* ref: the origin's answer it failed with (CHUNK_FAIL_PASS) */
};

#endif
