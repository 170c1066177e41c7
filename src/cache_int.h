/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_int.h: the definition of struct chunk, private to the cache module (cache*.c) and its
 * unit test. Everyone else sees an opaque struct chunk and the accessors of cache.h.
 */
#ifndef CACHEPARTY_CACHE_INT_H
#define CACHEPARTY_CACHE_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cache.h"
#include "chunkfile.h"
#include "ngxcache.h"

struct origin_req;
struct store_job;
struct cache_seen_tab;

/* ---- delivered bytes (cache_seen.c) ---- */

#define CACHE_SEEN_RUNS 8         /* runs of delivered bytes a record holds exactly */
#define CACHE_SEEN_KEPT_MAX 16384 /* records of evicted chunks kept for their files */

/* A set of chunk offsets: runs [start, end), sorted, disjoint and not touching. */
struct seen_runs {
    unsigned n; /* runs in use */
    uint32_t start[CACHE_SEEN_RUNS], end[CACHE_SEEN_RUNS];
};

/* Which bytes of one fill of a chunk were delivered to a client at least once (refcounted:
 * shared by every struct chunk holding those bytes). */
struct chunk_seen {
    unsigned magic;
    unsigned refs; /* chunks holding it, and the table while kept there */
    uint8_t obj[16];
    uint64_t index;
    struct seen_runs done;            /* delivered */
    struct seen_runs told;            /* announced as new by an answer's head (MISS) */
    struct cache_seen_tab *tab;       /* kept in it (NULL: not) */
    struct chunk_seen *hnext;         /* tab's chain */
    struct chunk_seen *newer, *older; /* tab's age list */
};

/* The records of chunks evicted before all their bytes were delivered, by (obj, index). */
struct cache_seen_tab {
    struct chunk_seen **buckets; /* owns the array; each record holds a ref for the table */
    struct chunk_seen *newest, *oldest;
    size_t count;
};

/* A record of chunk (<obj>, <index>) with nothing delivered (a ref). */
struct chunk_seen *cache_seen_new(const uint8_t obj[16], uint64_t index);
/* Another ref on <s> (NULL allowed); returns it. */
struct chunk_seen *cache_seen_ref(struct chunk_seen *s);
/* Drops a ref and clears *<s>; frees the record at zero. */
void cache_seen_unref(struct chunk_seen **s);
/* Marks chunk bytes [<off>, <off> + <len>) delivered; returns how many of them were not before
 * (first deliveries). */
uint64_t cache_seen_mark(struct chunk_seen *s, uint64_t off, uint64_t len);
/* Whether byte <off> was delivered. */
bool cache_seen_has(const struct chunk_seen *s, uint64_t off);
/* The head of an answer sending chunk bytes [<off>, <off> + <len>): true (MISS) when byte <off>
 * was neither delivered nor announced by another head, and then those bytes are announced;
 * false (HIT) otherwise. */
bool cache_seen_tell(struct chunk_seen *s, uint64_t off, uint64_t len);
/* Whether every byte of a chunk of length <cap> was delivered. */
bool cache_seen_is_complete(const struct chunk_seen *s, uint64_t cap);
void cache_seen_tab_init(struct cache_seen_tab *t);
/* Drops every kept record. */
void cache_seen_tab_fini(struct cache_seen_tab *t);
/* Keeps <s> (the table takes a ref of its own), replacing an older record of its chunk and
 * dropping the oldest records beyond CACHE_SEEN_KEPT_MAX. No-op when kept already. */
void cache_seen_tab_keep(struct cache_seen_tab *t, struct chunk_seen *s);
/* The kept record of (<obj>, <index>) (a ref, it stays kept), or NULL. */
struct chunk_seen *cache_seen_tab_find(struct cache_seen_tab *t, const uint8_t obj[16],
                                       uint64_t index);
/* Drops <s> (kept in <t>) from the table. */
void cache_seen_tab_remove(struct cache_seen_tab *t, struct chunk_seen *s);
/* Drops the kept record of (<obj>, <index>), if any (a new fill of it starts). */
void cache_seen_tab_forget(struct cache_seen_tab *t, const uint8_t obj[16], uint64_t index);

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
    int origin_status;     /* that fill's origin answer status (206, 200), 0: none yet */
    uint64_t refetch_id;   /* that lookup's cache_refetch_id (0: not forced) */
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
    /* ref: which of its bytes were delivered once (shared with the other chunks holding the
     * same bytes, see cache_seen.c); NULL: all of them (a file of an earlier run). */
    struct chunk_seen *seen;
    bool evicted;          /* left the table by eviction (its record is kept for its file) */
    struct answer *answer; /* ref: the origin's answer it failed with (CHUNK_FAIL_PASS) */
};

/* ---- lancache's files (cache_lancache.c) ----
 * On a miss of both tiers, the chunk's slice file in lancache's trees ([cache] lancache_dir) is
 * looked up, checked (ngxcache.h) and, when it passes, served in place as a disk chunk whose
 * bytes are in the nginx file; then it is written into the cache as a chunk file (copy, move)
 * and, with move, the nginx file is removed once that chunk file is durable. The lookups and the
 * copies run on the I/O threads: nothing here touches loop objects. */
/* One lookup of chunk <index> of an object in lancache's trees. */
struct lc_query {
    /* In: */
    char *const *dirs; /* borrowed from the cache (fixed for its life) */
    size_t n_dirs;
    uint64_t slice;   /* lancache's slice size == the chunk size */
    int64_t settle_s; /* files younger than this are not adopted */
    char *prefix;     /* owns: $cacheidentifier$uri of the object */
    size_t prefix_len;
    uint64_t index;
    bool hide_etag;      /* the ETag is not part of the version (a hide_etag rule) */
    bool check_siblings; /* the object's version is unknown: the other slices must agree */
    /* Out: */
    enum ngxcache_verdict why; /* NGXCACHE_OK: found and usable */
    bool any;                  /* some file was there (why says what was wrong when not OK) */
    char path[PATH_MAX];       /* the file found (or refused) */
    int fd;                    /* owns, when found: the nginx file */
    struct stat sb;
    off_t body_off;         /* where the chunk's first byte is in <fd> */
    uint64_t data_len;      /* the chunk's length */
    bool whole;             /* a 200 holding the whole object: every chunk of it is in this file */
    struct cache_meta meta; /* the version and its stored head (a ref) */
};

/* Sets up <q> for chunk <index> of object <key> ("identifier\npath") asked through <o>:
 * lancache's $cacheidentifier is the identifier, or for a host of no service the Host header as
 * sent. False when the path has no $uri (nginx would refuse it). */
bool cache_lc_prepare(struct lc_query *q, const char *key, size_t key_len,
                      const struct origin_req *o, uint64_t index);
/* Looks the chunk up (blocking: an I/O thread). */
void cache_lc_find(struct lc_query *q);
/* Releases what <q> holds (fd, head, prefix). */
void cache_lc_fini(struct lc_query *q);

#endif
