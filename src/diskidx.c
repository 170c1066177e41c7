/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * diskidx: chunk file accounting and eviction. See diskidx.h.
 *
 * Memory: per shard, a dense array of 32-byte entries (object hash, index, last use ms << 22 |
 * 512-byte units) in pages of 4096, a removal moving the last entry into the hole. A linear
 * hashing table finds them: u32 bucket heads and a u32 chain link per entry, values
 * (shard << 28 | position) + 1, load about 1, growing by one bucket split per insert (never a
 * bulk rehash). 32 + 4 + ~4 = ~40 bytes per file: a million take about 40 MiB. No allocation
 * per lookup.
 * Eviction: approximate LRU. Each pick samples a few random entries of its domain (every shard
 * for disk_size, one filesystem's shards for min_free) into a pool of the 16 oldest seen, then
 * takes the pool's oldest still valid (Redis's eviction pool); a domain of at most 64 entries is
 * searched exactly. Candidates are validated by their stamp, so a touch since is never evicted.
 * Pacing: the scan reads at most 512 directory entries or 2 ms per step, from an ev_idle (full
 * speed while the loop is idle) and a 50 ms timer (progress under load); the policy runs from one
 * repeating timer: 1 s after adds, 10 s when idle, about 1 ms after a limit was crossed, and each
 * pass stops after 64 unlinks or 2 ms. Watchers are unref'd: they never keep the loop alive.
 * Threading: loop thread only. Owns its entries, the scan's open DIRs and its watchers.
 */
#include "diskidx.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "chunkfile.h"
#include "inventory.h"
#include "log.h"
#include "util.h"

#define DISKIDX_MAGIC 0xd15c1d01u
#define DISKIDX_PAGE_SHIFT 12u
#define DISKIDX_PAGE (1u << DISKIDX_PAGE_SHIFT)
#define DISKIDX_POS_BITS 28u
#define DISKIDX_POS_MAX ((1u << DISKIDX_POS_BITS) - 1u) /* entries per shard */
#define DISKIDX_UNITS_BITS 22u /* of which the low 18 count, the high 4 hold group bits */
#define DISKIDX_UNITS_USED 18u
#define DISKIDX_UNITS_MAX ((1ull << DISKIDX_UNITS_USED) - 1u) /* 128 MiB per file */
#define DISKIDX_GLO_SHIFT DISKIDX_UNITS_USED                  /* group bits 0..3 in meta */
#define DISKIDX_GLO_MASK (15ull << DISKIDX_GLO_SHIFT)
#define DISKIDX_INDEX_BITS 52u /* group bits 4..15 above them in index */
#define DISKIDX_INDEX_MASK DISKIDX_INDEX_MAX
#define DISKIDX_STAMP_MAX ((1ull << (64u - DISKIDX_UNITS_BITS)) - 1u) /* ms: year 2109 */
#define DISKIDX_BUCKETS_MIN 1024u
#define DISKIDX_SAMPLES 16u
#define DISKIDX_POOL 16u
#define DISKIDX_EXACT_MAX 64u
#define DISKIDX_PICK_ROUNDS 4u
#define DISKIDX_SWEEP_BATCH 4096u
#define DISKIDX_STEP_NS 2000000ull /* per scan step or policy pass */
#define DISKIDX_SCAN_ENTRIES 512u
#define DISKIDX_SCAN_PERIOD 0.05 /* s: scan steps under load */
#define DISKIDX_SOON 0.001       /* s: a limit was crossed */
#define DISKIDX_BUSY_MS 1000u    /* statvfs and policy period after adds */
#define DISKIDX_IDLE_MS 10000u   /* ... without adds */
#define DISKIDX_LOG_GAP_MS 10000u

/* A chunk file. Its inventory group (16 bits) is kept in bits the other fields never use: the
 * chunk index is below 2^52 (an object of at most 2^64 bytes in chunks of at least 4 KiB), a
 * file takes under 2^18 units (chunks are at most 64 MiB and a header). */
struct dentry {
    uint8_t obj[16];
    uint64_t index; /* group bits 4..15 << 52 | chunk index */
    uint64_t meta;  /* last use ms << 22 | group bits 0..3 << 18 | 512-byte units */
};

/* Entries and their hash chain links, side by side (no padding). */
struct page {
    struct dentry e[DISKIDX_PAGE];
    uint32_t next[DISKIDX_PAGE]; /* the next entry's value in the bucket chain, 0 at the end */
};

struct shard {
    char *dir;           /* owns */
    struct page **pages; /* owns: each page owned; NULL past the last (one spare kept) */
    size_t n_pages;      /* length of pages[] */
    uint32_t n;          /* entries: positions 0..n-1 */
    size_t fs;           /* index in diskidx.fs */
};

/* An eviction candidate: a copy, validated against the table before use. */
struct cand {
    uint8_t obj[16];
    uint64_t index;
    uint64_t stamp;
    unsigned shard;
};

struct pool {
    struct cand c[DISKIDX_POOL]; /* oldest first */
    size_t n;
};

struct fsinfo {
    dev_t dev;
    uint32_t shards; /* bit per shard on this filesystem */
    uint64_t avail;  /* bytes (f_bavail) at the last statvfs, adjusted by adds and unlinks since */
    uint64_t size;
    bool known; /* avail and size came from statvfs */
    bool low;   /* evicting until avail >= min_free + size / 100 */
    struct pool pool;
};

struct scan {
    size_t shard;   /* being scanned (n_shards: done) */
    DIR *dirs[3];   /* owns: the open levels, shard root, ab/, ab/cd/ */
    unsigned depth; /* open levels */
    uint8_t ab, cd; /* names of the open levels 1 and 2 */
    uint64_t start_ns;
};

struct diskidx {
    unsigned magic;
    struct ev_loop *loop; /* borrows; NULL: driven by the caller */
    struct shard shards[DISKIDX_MAX_DIRS];
    size_t n_shards;
    struct fsinfo fs[DISKIDX_MAX_DIRS];
    size_t n_fs;
    uint64_t disk_size, min_free, max_age_ms;
    uint32_t *heads;   /* owns: bucket chains, entry values ((shard << 28 | pos) + 1), 0 = end */
    size_t n_heads;    /* allocated; live buckets: level_mask + 1 + split */
    size_t level_mask; /* 2^level - 1 */
    size_t split;      /* next bucket to split */
    size_t used;
    uint64_t units; /* sum over entries */
    bool over_size; /* evicting until bytes <= 95% of disk_size */
    struct pool pool;
    uint64_t rng;
    size_t sweep_shard;
    uint32_t sweep_pos;
    uint64_t statvfs_ms; /* wall clock of the last refresh */
    bool statvfs_done;
    uint64_t writes; /* adds since the last statvfs */
    uint64_t adds;   /* adds since the last timer pass */
    uint64_t err_log_ms;
    uint64_t err_quiet; /* errors not logged since the last line */
    bool err_logged;
    bool full_logged;
    struct inventory *inv; /* owns: totals per group of the entries */
    struct scan scan;
    bool scanning; /* the scan watchers are started */
    bool kicked;   /* tick armed at DISKIDX_SOON */
    ev_timer tick;
    ev_idle scan_idle;
    ev_timer scan_timer;
    struct diskidx_stats st;
};

/* ---- small helpers ----------------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t stamp_of(const struct dentry *e)
{
    return e->meta >> DISKIDX_UNITS_BITS;
}

static uint64_t units_of(const struct dentry *e)
{
    return e->meta & DISKIDX_UNITS_MAX;
}

static uint64_t index_of(const struct dentry *e)
{
    return e->index & DISKIDX_INDEX_MASK;
}

static uint32_t group_of(const struct dentry *e)
{
    return (uint32_t)(e->index >> DISKIDX_INDEX_BITS) << 4 |
           (uint32_t)((e->meta & DISKIDX_GLO_MASK) >> DISKIDX_GLO_SHIFT);
}

static void set_group(struct dentry *e, uint32_t group)
{
    ASSERT(group < INV_GROUPS_MAX);
    e->index = index_of(e) | (uint64_t)(group >> 4) << DISKIDX_INDEX_BITS;
    e->meta = (e->meta & ~DISKIDX_GLO_MASK) | (uint64_t)(group & 15u) << DISKIDX_GLO_SHIFT;
}

/* The meta of a last use at <stamp_ms> and <units>, keeping the group bits of <old>. */
static uint64_t pack(uint64_t stamp_ms, uint64_t units, uint64_t old)
{
    if (stamp_ms > DISKIDX_STAMP_MAX)
        stamp_ms = DISKIDX_STAMP_MAX;
    return stamp_ms << DISKIDX_UNITS_BITS | (old & DISKIDX_GLO_MASK) | units;
}

static uint64_t to_units(uint64_t bytes)
{
    uint64_t u = bytes / 512u + (bytes % 512u != 0);
    return u > DISKIDX_UNITS_MAX ? DISKIDX_UNITS_MAX : u;
}

static uint64_t rng_next(struct diskidx *d)
{
    uint64_t x = d->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    d->rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

static void report(struct diskidx *d, const char *what, const char *path, int err)
{
    d->st.errors++;
    uint64_t now = mono_ns() / 1000000u;
    if (d->err_logged && now - d->err_log_ms < DISKIDX_LOG_GAP_MS) {
        d->err_quiet++;
        return;
    }
    if (d->err_quiet > 0)
        log_warn("disk index: %s %s: %s (%llu more errors not logged)", what, path, strerror(err),
                 (unsigned long long)d->err_quiet);
    else
        log_warn("disk index: %s %s: %s", what, path, strerror(err));
    d->err_logged = true;
    d->err_log_ms = now;
    d->err_quiet = 0;
}

uint64_t diskidx_file_bytes(const struct stat *sb)
{
    uint64_t size = sb->st_size > 0 ? (uint64_t)sb->st_size : 0;
    uint64_t blocks = sb->st_blocks > 0 ? (uint64_t)sb->st_blocks * 512u : 0;
    return size > blocks ? size : blocks;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Two lowercase hex digits and nothing else ("ab"). */
static bool parse_hex_dir(const char *name, uint8_t *out)
{
    int hi = hexval(name[0]);
    if (hi < 0)
        return false;
    int lo = hexval(name[1]);
    if (lo < 0 || name[2] != '\0')
        return false;
    *out = (uint8_t)(hi << 4 | lo);
    return true;
}

int diskidx_parse_name(const char *name, uint8_t obj[16], uint64_t *index)
{
    uint8_t h[16];
    for (size_t i = 0; i < 16; i++) {
        int hi = hexval(name[2 * i]);
        if (hi < 0)
            return -EINVAL;
        int lo = hexval(name[2 * i + 1]);
        if (lo < 0)
            return -EINVAL;
        h[i] = (uint8_t)(hi << 4 | lo);
    }
    const char *p = name + 32;
    if (*p++ != '.' || *p < '0' || *p > '9' || (*p == '0' && p[1] != '\0'))
        return -EINVAL;
    uint64_t v = 0;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10u)
            return -EINVAL;
        v = v * 10u + digit;
    }
    memcpy(obj, h, 16);
    *index = v;
    return 0;
}

/* ---- the table ----------------------------------------------------------------------------- */

static uint64_t key_hash(unsigned shard, const uint8_t obj[16], uint64_t index)
{
    uint64_t h = load64(obj) ^ (load64(obj + 8) * 0xff51afd7ed558ccdull) ^
                 (index * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)shard << 58);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 32);
}

static uint32_t val_of(unsigned shard, uint32_t pos)
{
    return ((uint32_t)shard << DISKIDX_POS_BITS | pos) + 1u;
}

static unsigned val_shard(uint32_t v)
{
    return (v - 1u) >> DISKIDX_POS_BITS;
}

static uint32_t val_pos(uint32_t v)
{
    return (v - 1u) & DISKIDX_POS_MAX;
}

static struct dentry *entry_at(struct diskidx *d, unsigned shard, uint32_t pos)
{
    struct shard *sh = &d->shards[shard];
    ASSERT(pos < sh->n);
    return &sh->pages[pos >> DISKIDX_PAGE_SHIFT]->e[pos & (DISKIDX_PAGE - 1u)];
}

/* The chain link stored with the entry <v>. */
static uint32_t *next_of(struct diskidx *d, uint32_t v)
{
    uint32_t pos = val_pos(v);
    ASSERT(pos < d->shards[val_shard(v)].n);
    return &d->shards[val_shard(v)]
                .pages[pos >> DISKIDX_PAGE_SHIFT]
                ->next[pos & (DISKIDX_PAGE - 1u)];
}

/* Linear hashing: buckets below <split> were split into the next level already. */
static size_t bucket_of(const struct diskidx *d, uint64_t h)
{
    size_t b = (size_t)h & d->level_mask;
    return b < d->split ? (size_t)h & (2 * d->level_mask + 1) : b;
}

/*
 * Looks (<shard>, <obj>, <index>) up. True with *<link> the location holding its value (a bucket
 * head or the previous entry's link); false with *<link> its bucket's head. Valid until the next
 * insert.
 */
static bool find(struct diskidx *d, unsigned shard, const uint8_t obj[16], uint64_t index,
                 uint32_t **link)
{
    uint32_t *at = &d->heads[bucket_of(d, key_hash(shard, obj, index))];
    *link = at;
    for (uint32_t v = *at; v != 0; at = next_of(d, v), v = *at) {
        if (val_shard(v) != shard)
            continue;
        const struct dentry *e = entry_at(d, shard, val_pos(v));
        if (index_of(e) == index && memcmp(e->obj, obj, 16) == 0) {
            *link = at;
            return true;
        }
    }
    return false;
}

/* The location holding <v> in its chain. */
static uint32_t *link_of(struct diskidx *d, uint32_t v)
{
    const struct dentry *e = entry_at(d, val_shard(v), val_pos(v));
    uint32_t *link;
    bool found = find(d, val_shard(v), e->obj, index_of(e), &link);
    ASSERT(found && *link == v);
    return link;
}

/* Splits one bucket (the table grows by one bucket per insert past load 1: no bulk rehash). */
static void split_one(struct diskidx *d)
{
    size_t lo = d->split, hi = d->split + d->level_mask + 1;
    if (hi >= d->n_heads) {
        /* Never read past the live buckets: only the pointer array is copied (or remapped). */
        d->n_heads *= 2;
        d->heads = xrealloc(d->heads, d->n_heads * sizeof(*d->heads));
    }
    uint32_t v = d->heads[lo];
    d->heads[lo] = 0;
    d->heads[hi] = 0;
    while (v != 0) {
        uint32_t *nx = next_of(d, v);
        uint32_t after = *nx;
        const struct dentry *e = entry_at(d, val_shard(v), val_pos(v));
        size_t b = (size_t)key_hash(val_shard(v), e->obj, index_of(e)) & (2 * d->level_mask + 1);
        ASSERT(b == lo || b == hi);
        *nx = d->heads[b];
        d->heads[b] = v;
        v = after;
    }
    if (++d->split == d->level_mask + 1) {
        d->level_mask = 2 * d->level_mask + 1;
        d->split = 0;
    }
}

/* Inserts a new entry (the key must be absent). Returns false when the shard is full. */
static bool entry_insert(struct diskidx *d, unsigned shard, const uint8_t obj[16], uint64_t index,
                         uint64_t meta, uint32_t group)
{
    ASSERT(index <= DISKIDX_INDEX_MASK);
    struct shard *sh = &d->shards[shard];
    if (sh->n >= DISKIDX_POS_MAX - 1u) {
        if (!d->full_logged)
            log_warn("disk index: %s holds %u chunk files: more are not accounted", sh->dir, sh->n);
        d->full_logged = true;
        d->st.errors++;
        return false;
    }
    uint32_t pos = sh->n;
    size_t page = pos >> DISKIDX_PAGE_SHIFT;
    if (page >= sh->n_pages) {
        size_t n = sh->n_pages ? 2 * sh->n_pages : 4;
        sh->pages = xrealloc(sh->pages, n * sizeof(*sh->pages));
        memset(sh->pages + sh->n_pages, 0, (n - sh->n_pages) * sizeof(*sh->pages));
        sh->n_pages = n;
    }
    if (sh->pages[page] == NULL)
        sh->pages[page] = xmalloc(sizeof(struct page));
    uint32_t *head;
    bool found = find(d, shard, obj, index, &head);
    ASSERT(!found);
    sh->n++;
    struct dentry *e = entry_at(d, shard, pos);
    memcpy(e->obj, obj, 16);
    e->index = index;
    e->meta = meta;
    set_group(e, group);
    inv_add(d->inv, group, units_of(e) * 512u, stamp_of(e));
    uint32_t v = val_of(shard, pos);
    *next_of(d, v) = *head;
    *head = v;
    d->used++;
    d->units += units_of(e);
    if (d->used > d->level_mask + 1 + d->split)
        split_one(d);
    return true;
}

/* Removes the entry at (<shard>, <pos>), whose value is stored at <link>. */
static void entry_delete(struct diskidx *d, unsigned shard, uint32_t pos, uint32_t *link)
{
    struct shard *sh = &d->shards[shard];
    struct dentry *e = entry_at(d, shard, pos);
    uint32_t v = val_of(shard, pos);
    ASSERT(*link == v);
    d->units -= units_of(e);
    inv_sub(d->inv, group_of(e), units_of(e) * 512u);
    *link = *next_of(d, v);
    uint32_t last = sh->n - 1;
    if (pos != last) {
        /* The last entry moves into the hole; whatever pointed at it points here now. */
        uint32_t lv = val_of(shard, last);
        uint32_t *ll = link_of(d, lv);
        *ll = v;
        *e = *entry_at(d, shard, last);
        *next_of(d, v) = *next_of(d, lv);
    }
    sh->n--;
    d->used--;
    if ((sh->n & (DISKIDX_PAGE - 1u)) == 0) {
        /* Keep the page being filled and one spare. */
        for (size_t p = (sh->n >> DISKIDX_PAGE_SHIFT) + 2; p < sh->n_pages; p++) {
            free(sh->pages[p]);
            sh->pages[p] = NULL;
        }
    }
}

static struct fsinfo *fs_of(struct diskidx *d, unsigned shard)
{
    return &d->fs[d->shards[shard].fs];
}

static uint64_t bytes_of(const struct diskidx *d)
{
    return d->units * 512u;
}

static void fs_gain(struct diskidx *d, unsigned shard, uint64_t bytes)
{
    fs_of(d, shard)->avail += bytes;
}

static void fs_spend(struct diskidx *d, unsigned shard, uint64_t bytes)
{
    struct fsinfo *fs = fs_of(d, shard);
    fs->avail = fs->avail > bytes ? fs->avail - bytes : 0;
}

/* ---- the policy ---------------------------------------------------------------------------- */

static bool over_limits(const struct diskidx *d, unsigned shard)
{
    if (d->disk_size > 0 && bytes_of(d) > d->disk_size)
        return true;
    const struct fsinfo *fs = &d->fs[d->shards[shard].fs];
    return d->min_free > 0 && fs->known && fs->avail < d->min_free;
}

bool diskidx_has_room(const struct diskidx *d, unsigned shard, uint64_t bytes)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    ASSERT(shard < d->n_shards);
    if (d->disk_size > 0 && bytes_of(d) + bytes > d->disk_size)
        return false;
    const struct fsinfo *fs = &d->fs[d->shards[shard].fs];
    return !(d->min_free > 0 && fs->known && fs->avail < d->min_free + bytes);
}

bool diskidx_fits(const struct diskidx *d, uint64_t bytes)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    return d->disk_size == 0 || bytes <= d->disk_size;
}

/* Runs the policy soon (from the loop) when a limit is crossed. */
static void kick(struct diskidx *d, unsigned shard)
{
    if (d->loop == NULL || d->kicked || !over_limits(d, shard))
        return;
    d->kicked = true;
    d->tick.repeat = DISKIDX_SOON;
    ev_timer_again(d->loop, &d->tick);
}

static int entry_path(const struct diskidx *d, char *out, size_t cap, unsigned shard,
                      const uint8_t obj[16], uint64_t index)
{
    return chunkfile_path(out, cap, d->shards[shard].dir, obj, index);
}

/* Unlinks the file of the entry and drops the entry (also when unlink fails: never retried). */
static void evict_entry(struct diskidx *d, unsigned shard, uint32_t pos, bool expired)
{
    const struct dentry *e = entry_at(d, shard, pos);
    uint64_t bytes = units_of(e) * 512u;
    uint32_t *link;
    bool found = find(d, shard, e->obj, index_of(e), &link);
    ASSERT(found);
    char path[PATH_MAX];
    if (entry_path(d, path, sizeof(path), shard, e->obj, index_of(e)) < 0) {
        report(d, "cannot evict", d->shards[shard].dir, ENAMETOOLONG);
    } else if (unlink(path) == 0) {
        d->st.evictions++;
        if (expired)
            d->st.expired++;
        fs_gain(d, shard, bytes);
    } else if (errno != ENOENT) {
        report(d, "cannot evict", path, errno);
    }
    entry_delete(d, shard, pos, link);
}

struct budget {
    unsigned left;
    uint64_t deadline_ns;
};

static bool budget_ok(const struct budget *b)
{
    return b->left > 0 && mono_ns() < b->deadline_ns;
}

static void pool_offer(struct pool *p, unsigned shard, const struct dentry *e)
{
    uint64_t stamp = stamp_of(e);
    for (size_t i = 0; i < p->n; i++)
        if (p->c[i].shard == shard && p->c[i].index == index_of(e) &&
            memcmp(p->c[i].obj, e->obj, 16) == 0)
            return;
    size_t at = 0;
    while (at < p->n && p->c[at].stamp <= stamp)
        at++;
    if (at == DISKIDX_POOL)
        return;
    size_t n = p->n < DISKIDX_POOL ? p->n : DISKIDX_POOL - 1;
    memmove(&p->c[at + 1], &p->c[at], (n - at) * sizeof(p->c[0]));
    struct cand *c = &p->c[at];
    memcpy(c->obj, e->obj, 16);
    c->index = index_of(e);
    c->stamp = stamp;
    c->shard = shard;
    if (p->n < DISKIDX_POOL)
        p->n++;
}

/*
 * The least recently used entry (approximately) among the shards in <mask>, into (*<shard>,
 * *<pos>). Returns false when those shards hold nothing.
 */
static bool pick(struct diskidx *d, uint32_t mask, struct pool *p, unsigned *shard, uint32_t *pos)
{
    uint64_t total = 0;
    for (unsigned s = 0; s < d->n_shards; s++)
        if (mask & (1u << s))
            total += d->shards[s].n;
    if (total == 0)
        return false;
    if (total <= DISKIDX_EXACT_MAX) {
        bool have = false;
        uint64_t best = 0;
        for (unsigned s = 0; s < d->n_shards; s++) {
            if (!(mask & (1u << s)))
                continue;
            for (uint32_t i = 0; i < d->shards[s].n; i++) {
                uint64_t st = stamp_of(entry_at(d, s, i));
                if (!have || st < best) {
                    have = true;
                    best = st;
                    *shard = s;
                    *pos = i;
                }
            }
        }
        return true;
    }
    for (unsigned round = 0; round < DISKIDX_PICK_ROUNDS; round++) {
        for (unsigned k = 0; k < DISKIDX_SAMPLES; k++) {
            uint64_t r = rng_next(d) % total;
            for (unsigned s = 0; s < d->n_shards; s++) {
                if (!(mask & (1u << s)))
                    continue;
                if (r < d->shards[s].n) {
                    pool_offer(p, s, entry_at(d, s, (uint32_t)r));
                    break;
                }
                r -= d->shards[s].n;
            }
        }
        while (p->n > 0) {
            struct cand c = p->c[0];
            p->n--;
            memmove(&p->c[0], &p->c[1], p->n * sizeof(p->c[0]));
            uint32_t *link;
            if (!find(d, c.shard, c.obj, c.index, &link))
                continue; /* gone since it was sampled */
            uint32_t at = val_pos(*link);
            if (stamp_of(entry_at(d, c.shard, at)) != c.stamp)
                continue; /* used since: no longer a candidate at that age */
            *shard = c.shard;
            *pos = at;
            return true;
        }
    }
    return false;
}

static void refresh_free(struct diskidx *d, uint64_t now_ms)
{
    uint64_t gap = d->writes > 0 ? DISKIDX_BUSY_MS : DISKIDX_IDLE_MS;
    if (d->statvfs_done && now_ms >= d->statvfs_ms && now_ms - d->statvfs_ms < gap)
        return;
    d->statvfs_done = true;
    d->statvfs_ms = now_ms;
    d->writes = 0;
    for (size_t f = 0; f < d->n_fs; f++) {
        struct fsinfo *fs = &d->fs[f];
        const char *dir = NULL;
        for (unsigned s = 0; s < d->n_shards && dir == NULL; s++)
            if (fs->shards & (1u << s))
                dir = d->shards[s].dir;
        struct statvfs sv;
        if (statvfs(dir, &sv) < 0) {
            report(d, "cannot statvfs", dir, errno);
            fs->known = false;
            continue;
        }
        fs->avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        fs->size = (uint64_t)sv.f_blocks * sv.f_frsize;
        fs->known = true;
    }
}

/* Evicts entries unused for max_age, examining at most DISKIDX_SWEEP_BATCH of them. */
static bool sweep_expired(struct diskidx *d, uint64_t now_ms, struct budget *b)
{
    if (d->max_age_ms == 0 || d->used == 0)
        return false;
    size_t looked = 0, limit = d->used < DISKIDX_SWEEP_BATCH ? d->used : DISKIDX_SWEEP_BATCH;
    while (looked < limit) {
        if (d->sweep_shard >= d->n_shards) {
            d->sweep_shard = 0;
            d->sweep_pos = 0;
        }
        unsigned s = (unsigned)d->sweep_shard;
        if (d->sweep_pos >= d->shards[s].n) {
            d->sweep_shard++;
            d->sweep_pos = 0;
            continue;
        }
        looked++;
        uint64_t st = stamp_of(entry_at(d, s, d->sweep_pos));
        if (now_ms > st && now_ms - st > d->max_age_ms) {
            if (!budget_ok(b))
                return true;
            evict_entry(d, s, d->sweep_pos, true); /* the last entry moved here */
            b->left--;
        } else {
            d->sweep_pos++;
        }
    }
    return false;
}

bool diskidx_evict(struct diskidx *d, uint64_t now_ms)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    refresh_free(d, now_ms);
    struct budget b = {.left = DISKIDX_EVICT_BATCH, .deadline_ns = mono_ns() + DISKIDX_STEP_NS};
    bool more = sweep_expired(d, now_ms, &b);
    unsigned shard;
    uint32_t pos;
    uint32_t all = (uint32_t)((1ull << d->n_shards) - 1u);
    if (d->disk_size > 0) {
        uint64_t low = d->disk_size - d->disk_size / 20u;
        if (bytes_of(d) > d->disk_size)
            d->over_size = true;
        while (d->over_size) {
            if (bytes_of(d) <= low) {
                d->over_size = false;
            } else if (!budget_ok(&b)) {
                more = true;
                break;
            } else if (!pick(d, all, &d->pool, &shard, &pos)) {
                d->over_size = false;
            } else {
                evict_entry(d, shard, pos, false);
                b.left--;
            }
        }
    }
    for (size_t f = 0; f < d->n_fs && d->min_free > 0; f++) {
        struct fsinfo *fs = &d->fs[f];
        if (!fs->known)
            continue;
        if (fs->avail < d->min_free)
            fs->low = true;
        while (fs->low) {
            if (fs->avail >= d->min_free + fs->size / 100u) {
                fs->low = false;
            } else if (!budget_ok(&b)) {
                more = true;
                break;
            } else if (!pick(d, fs->shards, &fs->pool, &shard, &pos)) {
                fs->low = false; /* nothing of ours left there: the rest is not ours to free */
            } else {
                evict_entry(d, shard, pos, false);
                b.left--;
            }
        }
    }
    return more;
}

/* ---- the API ------------------------------------------------------------------------------- */

static unsigned shard_of(const struct diskidx *d, const uint8_t obj[16])
{
    return obj[0] % (unsigned)d->n_shards;
}

void diskidx_add(struct diskidx *d, const uint8_t obj[16], uint64_t index, uint64_t bytes,
                 uint64_t now_ms, uint32_t group)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    unsigned s = shard_of(d, obj);
    uint64_t units = to_units(bytes);
    uint32_t *link;
    if (find(d, s, obj, index, &link)) {
        struct dentry *e = entry_at(d, s, val_pos(*link));
        uint64_t stamp = stamp_of(e) > now_ms ? stamp_of(e) : now_ms;
        fs_gain(d, s, units_of(e) * 512u); /* the file it replaced */
        d->units -= units_of(e);
        /* The new group counts it first: the old one may be freed, never the new one. */
        inv_add(d->inv, group, units * 512u, stamp);
        inv_sub(d->inv, group_of(e), units_of(e) * 512u);
        e->meta = pack(stamp, units, 0);
        set_group(e, group);
        d->units += units;
    } else if (!entry_insert(d, s, obj, index, pack(now_ms, units, 0), group)) {
        return;
    }
    fs_spend(d, s, units * 512u);
    d->writes++;
    d->adds++;
    kick(d, s);
}

static int set_mtime(const struct diskidx *d, unsigned shard, const uint8_t obj[16], uint64_t index,
                     uint64_t now_ms, char *path, size_t cap)
{
    if (entry_path(d, path, cap, shard, obj, index) < 0)
        return -ENAMETOOLONG;
    struct timespec ts[2] = {
        {.tv_sec = 0, .tv_nsec = UTIME_OMIT},
        {.tv_sec = (time_t)(now_ms / 1000u), .tv_nsec = (long)(now_ms % 1000u) * 1000000L}};
    return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

void diskidx_touch(struct diskidx *d, const uint8_t obj[16], uint64_t index, uint64_t now_ms)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    unsigned s = shard_of(d, obj);
    uint32_t *link;
    char path[PATH_MAX];
    if (!find(d, s, obj, index, &link)) {
        /* Not scanned yet: leave the use where the scan will read it. */
        if (!d->st.scan_done) {
            int rc = set_mtime(d, s, obj, index, now_ms, path, sizeof(path));
            if (rc < 0 && rc != -ENOENT)
                report(d, "cannot set the mtime of", path, -rc);
        }
        return;
    }
    uint32_t pos = val_pos(*link);
    struct dentry *e = entry_at(d, s, pos);
    uint64_t old = stamp_of(e);
    if (now_ms <= old)
        return;
    e->meta = pack(now_ms, units_of(e), e->meta);
    inv_use(d->inv, group_of(e), now_ms);
    /* The file's mtime is at least the start of the hour of its stamp (set by the write, the
     * scan, or the last touch that crossed an hour): keep it so. */
    if (now_ms / DISKIDX_PERSIST_MS == old / DISKIDX_PERSIST_MS)
        return;
    int rc = set_mtime(d, s, obj, index, now_ms, path, sizeof(path));
    if (rc == -ENOENT)
        entry_delete(d, s, pos, link); /* deleted behind our back */
    else if (rc < 0)
        report(d, "cannot set the mtime of", path, -rc);
}

int diskidx_lookup(struct diskidx *d, const uint8_t obj[16], uint64_t index)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    uint32_t *link;
    if (find(d, shard_of(d, obj), obj, index, &link))
        return 1;
    return d->st.scan_done ? 0 : -1;
}

void diskidx_remove(struct diskidx *d, const uint8_t obj[16], uint64_t index)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    unsigned s = shard_of(d, obj);
    uint32_t *link;
    if (find(d, s, obj, index, &link))
        entry_delete(d, s, val_pos(*link), link);
}

void diskidx_get_stats(const struct diskidx *d, struct diskidx_stats *out)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    *out = d->st;
    out->bytes = bytes_of(d);
    out->chunks = d->used;
    out->disk_size = d->disk_size;
    out->fs_free = out->fs_size = 0;
    out->fs_known = 0;
    for (size_t f = 0; f < d->n_fs; f++)
        if (d->fs[f].known) {
            out->fs_free += d->fs[f].avail;
            out->fs_size += d->fs[f].size;
            out->fs_known++;
        }
}

void diskidx_regroup(struct diskidx *d, unsigned shard, const uint8_t obj[16], uint64_t index,
                     uint32_t from, uint32_t group)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    unsigned s = shard;
    uint32_t *link;
    if (s >= d->n_shards || !find(d, s, obj, index, &link))
        return;
    struct dentry *e = entry_at(d, s, val_pos(*link));
    uint32_t old = group_of(e);
    if (old != from || old == group)
        return; /* stored anew since (its group is known) */
    /* Added to the new group first: the old one may be freed, never the new one. */
    inv_add(d->inv, group, units_of(e) * 512u, stamp_of(e));
    set_group(e, group);
    inv_sub(d->inv, old, units_of(e) * 512u);
}

bool diskidx_walk(struct diskidx *d, uint64_t *cursor, size_t max, diskidx_entry_fn *fn, void *arg)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    unsigned s = (unsigned)(*cursor >> 32);
    uint32_t pos = (uint32_t)*cursor;
    for (size_t seen = 0; s < d->n_shards; s++, pos = 0) {
        for (; pos < d->shards[s].n; pos++) {
            if (seen++ == max) {
                *cursor = (uint64_t)s << 32 | pos;
                return false;
            }
            const struct dentry *e = entry_at(d, s, pos);
            struct diskidx_entry de = {.index = index_of(e),
                                       .bytes = units_of(e) * 512u,
                                       .last_ms = stamp_of(e),
                                       .group = group_of(e),
                                       .shard = s};
            memcpy(de.obj, e->obj, 16);
            if (!fn(&de, arg)) {
                *cursor = (uint64_t)s << 32 | (pos + 1u);
                return false;
            }
        }
    }
    *cursor = 0;
    return true;
}

struct inventory *diskidx_inventory(struct diskidx *d)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    return d->inv;
}

size_t diskidx_memory(const struct diskidx *d)
{
    CHECK_OBJ(d, DISKIDX_MAGIC);
    size_t n = sizeof(*d) + d->n_heads * sizeof(*d->heads) + inv_memory(d->inv);
    for (unsigned s = 0; s < d->n_shards; s++) {
        const struct shard *sh = &d->shards[s];
        n += sh->n_pages * sizeof(*sh->pages);
        for (size_t p = 0; p < sh->n_pages; p++)
            n += sh->pages[p] != NULL ? sizeof(struct page) : 0;
    }
    return n;
}

/* ---- the start-up scan --------------------------------------------------------------------- */

static uint64_t wall_ms(struct ev_loop *loop)
{
    ev_tstamp now = ev_now(loop);
    return now > 0 ? (uint64_t)(now * 1000.0) : 0;
}

static void scan_stop_watchers(struct diskidx *d)
{
    if (!d->scanning)
        return;
    d->scanning = false;
    ev_ref(d->loop);
    ev_idle_stop(d->loop, &d->scan_idle);
    ev_ref(d->loop);
    ev_timer_stop(d->loop, &d->scan_timer);
}

static void scan_close(struct diskidx *d)
{
    while (d->scan.depth > 0)
        closedir(d->scan.dirs[--d->scan.depth]);
}

static void scan_finish(struct diskidx *d)
{
    scan_close(d);
    scan_stop_watchers(d);
    d->st.scan_done = true;
    log_info("disk index: %llu chunk files, %llu MiB, found in %.1f s (%llu other files skipped)",
             (unsigned long long)d->st.scanned_files, (unsigned long long)(bytes_of(d) >> 20),
             (double)(mono_ns() - d->scan.start_ns) / 1e9, (unsigned long long)d->st.skipped_files);
    for (unsigned s = 0; s < d->n_shards; s++)
        kick(d, s);
}

/* One leaf entry <name> of <dir> (shard/ab/cd/). */
static void scan_file(struct diskidx *d, DIR *dir, const char *name, uint64_t now_ms)
{
    struct scan *sc = &d->scan;
    uint8_t obj[16];
    uint64_t index;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return;
    if (diskidx_parse_name(name, obj, &index) < 0 || obj[0] != sc->ab || obj[1] != sc->cd ||
        index > DISKIDX_INDEX_MASK) {
        d->st.skipped_files++;
        return;
    }
    struct stat sb;
    if (fstatat(dirfd(dir), name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
        int e = errno;
        char path[PATH_MAX];
        if (e != ENOENT && entry_path(d, path, sizeof(path), (unsigned)sc->shard, obj, index) == 0)
            report(d, "cannot stat", path, e); /* ENOENT: deleted since (evicted, purged) */
        return;
    }
    if (!S_ISREG(sb.st_mode)) {
        d->st.skipped_files++;
        return;
    }
    d->st.scanned_files++;
    unsigned s = (unsigned)sc->shard; /* where it is, even if another shard should hold it */
    uint32_t *link;
    if (find(d, s, obj, index, &link))
        return; /* added or touched since start: that entry is newer */
    uint64_t mtime = sb.st_mtim.tv_sec < 0 ? 0
                                           : (uint64_t)sb.st_mtim.tv_sec * 1000u +
                                                 (uint64_t)sb.st_mtim.tv_nsec / 1000000u;
    if (mtime > now_ms)
        mtime = now_ms;
    uint64_t units = to_units(diskidx_file_bytes(&sb));
    if (entry_insert(d, s, obj, index, pack(mtime, units, 0), INV_UNREAD))
        kick(d, s);
}

/* Opens <name> under the current level (or the shard root when none is open). */
static void scan_descend(struct diskidx *d, const char *name, uint8_t b)
{
    struct scan *sc = &d->scan;
    int fd;
    if (sc->depth == 0)
        fd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    else
        fd = openat(dirfd(sc->dirs[sc->depth - 1]), name,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (sc->depth == 0) {
            log_warn("disk index: cannot scan %s: %s", name, strerror(e));
            d->st.errors++;
            sc->shard++;
        } else if (e != ENOENT && e != ENOTDIR) {
            report(d, "cannot scan", name, e);
        }
        return;
    }
    if (sc->depth == 1)
        sc->ab = b;
    else if (sc->depth == 2)
        sc->cd = b;
    sc->dirs[sc->depth++] = dir;
}

/* At most DISKIDX_SCAN_ENTRIES directory entries and DISKIDX_STEP_NS. */
static void scan_step(struct diskidx *d)
{
    struct scan *sc = &d->scan;
    uint64_t deadline = mono_ns() + DISKIDX_STEP_NS;
    uint64_t now_ms = wall_ms(d->loop);
    for (unsigned work = 0; work < DISKIDX_SCAN_ENTRIES && mono_ns() < deadline; work++) {
        if (sc->depth == 0) {
            if (sc->shard >= d->n_shards) {
                scan_finish(d);
                return;
            }
            scan_descend(d, d->shards[sc->shard].dir, 0);
            continue;
        }
        DIR *dir = sc->dirs[sc->depth - 1];
        errno = 0;
        struct dirent *de = readdir(dir);
        if (de == NULL) {
            if (errno != 0)
                report(d, "cannot read a directory of", d->shards[sc->shard].dir, errno);
            closedir(dir);
            sc->dirs[--sc->depth] = NULL;
            if (sc->depth == 0)
                sc->shard++;
            continue;
        }
        if (sc->depth == 3) {
            scan_file(d, dir, de->d_name, now_ms);
            continue;
        }
        /* Levels ab/ and cd/; tmp/, the marker and anything else are not ours to count. */
        uint8_t b;
        if (parse_hex_dir(de->d_name, &b) && (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN))
            scan_descend(d, de->d_name, b);
    }
}

static void on_scan_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)loop;
    (void)revents;
    struct diskidx *d = container_of(w, struct diskidx, scan_idle);
    CHECK_OBJ(d, DISKIDX_MAGIC);
    scan_step(d);
}

static void on_scan_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct diskidx *d = container_of(w, struct diskidx, scan_timer);
    CHECK_OBJ(d, DISKIDX_MAGIC);
    scan_step(d);
}

static void on_tick_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct diskidx *d = container_of(w, struct diskidx, tick);
    CHECK_OBJ(d, DISKIDX_MAGIC);
    bool more = diskidx_evict(d, wall_ms(loop));
    d->kicked = more;
    w->repeat = more ? DISKIDX_SOON : (d->adds > 0 ? DISKIDX_BUSY_MS : DISKIDX_IDLE_MS) / 1e3;
    d->adds = 0;
    ev_timer_again(loop, w);
}

/* ---- start and stop ------------------------------------------------------------------------ */

struct diskidx *diskidx_new(struct ev_loop *loop, char *const *dirs, size_t n_dirs,
                            uint64_t disk_size, uint64_t min_free, uint64_t max_age_ms)
{
    ASSERT(n_dirs >= 1 && n_dirs <= DISKIDX_MAX_DIRS);
    struct diskidx *d = xcalloc(1, sizeof(*d));
    d->magic = DISKIDX_MAGIC;
    d->loop = loop;
    d->n_shards = n_dirs;
    d->disk_size = disk_size;
    d->min_free = min_free;
    d->max_age_ms = max_age_ms;
    d->rng = 0x9e3779b97f4a7c15ull;
    d->level_mask = DISKIDX_BUCKETS_MIN - 1;
    d->n_heads = 2 * DISKIDX_BUCKETS_MIN;
    d->heads = xcalloc(d->n_heads, sizeof(*d->heads));
    d->inv = inv_new();
    for (unsigned s = 0; s < n_dirs; s++) {
        d->shards[s].dir = xstrdup(dirs[s]);
        /* Shards on one filesystem share its free space (a dir that cannot be stat()ed gets
         * its own entry; statvfs will report it). */
        struct stat sb;
        bool have = stat(dirs[s], &sb) == 0;
        size_t f = 0;
        while (have && f < d->n_fs && d->fs[f].dev != sb.st_dev)
            f++;
        if (!have || f == d->n_fs) {
            f = d->n_fs++;
            d->fs[f].dev = have ? sb.st_dev : 0;
        }
        d->fs[f].shards |= 1u << s;
        d->shards[s].fs = f;
    }
    if (loop == NULL) {
        d->st.scan_done = true;
        return d;
    }
    d->scan.start_ns = mono_ns();
    ev_idle_init(&d->scan_idle, on_scan_idle);
    ev_idle_start(loop, &d->scan_idle);
    ev_unref(loop);
    ev_timer_init(&d->scan_timer, on_scan_timer, DISKIDX_SCAN_PERIOD, DISKIDX_SCAN_PERIOD);
    ev_timer_start(loop, &d->scan_timer);
    ev_unref(loop);
    d->scanning = true;
    /* The first pass (free space at start) right away, then periodic. */
    ev_timer_init(&d->tick, on_tick_timer, 0., DISKIDX_IDLE_MS / 1e3);
    ev_timer_start(loop, &d->tick);
    ev_unref(loop);
    return d;
}

void diskidx_set_limits(struct diskidx *d, uint64_t disk_size, uint64_t min_free,
                        uint64_t max_age_ms)
{
    d->disk_size = disk_size;
    d->min_free = min_free;
    d->max_age_ms = max_age_ms;
}

void diskidx_free(struct diskidx **dp)
{
    struct diskidx *d = *dp;
    if (d == NULL)
        return;
    CHECK_OBJ(d, DISKIDX_MAGIC);
    if (d->loop != NULL) {
        scan_stop_watchers(d);
        ev_ref(d->loop);
        ev_timer_stop(d->loop, &d->tick);
    }
    scan_close(d);
    for (unsigned s = 0; s < d->n_shards; s++) {
        struct shard *sh = &d->shards[s];
        for (size_t p = 0; p < sh->n_pages; p++)
            free(sh->pages[p]);
        free(sh->pages);
        free(sh->dir);
    }
    free(d->heads);
    inv_free(&d->inv);
    d->magic = 0;
    free(d);
    *dp = NULL;
}
