/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * diskidx: disk usage accounting and eviction for the chunk files of the cache dirs (chunkfile
 * paths "<dir>/ab/cd/<32 hex>.<index>"). It keeps an index (shard, object hash, chunk index) ->
 * (bytes on disk, last use) of every chunk file, found at start by an incremental background
 * scan and kept current by the cache (add/touch/remove), and it unlinks files, least recently
 * used first, to keep the total under disk_size and each filesystem's free space over min_free,
 * and drops files unused for max_age.
 *
 * Recency is a wall-clock time in ms (the same clock as file mtimes): a file's mtime at start,
 * then the time of its last add/touch. touch() writes the mtime back (utimensat) at most once per
 * clock hour per file, so after a restart a file's mtime is less than an hour behind its last use.
 * Eviction is approximate LRU by sampling (as Redis): never-used-since-start files, found by the
 * scan in hash order, need no sorting. Unlinking never disturbs a reader holding the file open.
 *
 * Threading: loop thread only. With a loop, the scan and the eviction run from its watchers in
 * bounded steps (a few ms per loop iteration); without one (tests) nothing runs on its own and
 * the caller drives eviction with diskidx_evict().
 */
#ifndef CACHEPARTY_DISKIDX_H
#define CACHEPARTY_DISKIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct stat;
struct diskidx;

#define DISKIDX_MAX_DIRS 16u          /* shards (cache dirs) */
#define DISKIDX_PERSIST_MS 3600000ull /* touch() rewrites a file's mtime once per clock hour */

/*
 * A new index over the shard directories <dirs>[0..n_dirs) (borrowed: copied), 1 <= n_dirs <=
 * DISKIDX_MAX_DIRS, shard i being dirs[i] (the cache's obj[0] % n_dirs). Limits: <disk_size>
 * bytes in total (0: no limit), <min_free> bytes free on each dir's filesystem (0: no check),
 * <max_age_ms> since the last use (0: no limit).
 * With a <loop> (borrowed; must outlive the index), the background scan of the dirs and the
 * periodic eviction start at once on it; its watchers never keep the loop alive on their own.
 * With <loop> NULL nothing is scanned (stats.scan_done is true at once) and nothing runs by
 * itself: call diskidx_evict(). Never returns NULL; does no I/O beyond a stat() of each dir.
 */
struct diskidx *diskidx_new(struct ev_loop *loop, char *const *dirs, size_t n_dirs,
                            uint64_t disk_size, uint64_t min_free, uint64_t max_age_ms);

/* New limits (a reload), as in diskidx_new(); applied by the next eviction pass. */
void diskidx_set_limits(struct diskidx *d, uint64_t disk_size, uint64_t min_free,
                        uint64_t max_age_ms);

/* Stops the watchers, closes the scan and frees everything; *<d> becomes NULL. NULL is fine. */
void diskidx_free(struct diskidx **d);

/*
 * The chunk file of (<obj>, <index>) was written with <bytes> on disk (diskidx_file_bytes()):
 * it is now the most recently used, replacing any entry for the same chunk, and counts in the
 * inventory's group <group> (inv_intern() on diskidx_inventory(), or INV_UNREAD). <now_ms> is
 * the wall clock in ms (ev_now(loop) * 1000 or util_wall_ms()). O(1), no syscall, never evicts
 * inline: when a limit is exceeded, eviction runs from the loop in the next iteration.
 * Bytes are accounted in 512-byte units, rounded up (at most 128 MiB per file). <index> is
 * below 2^52 (DISKIDX_INDEX_MAX: any chunk of a 2^64-byte object in chunks of 4 KiB or more).
 */
#define DISKIDX_INDEX_MAX ((1ull << 52) - 1u)
void diskidx_add(struct diskidx *d, const uint8_t obj[16], uint64_t index, uint64_t bytes,
                 uint64_t now_ms, uint32_t group);

/*
 * The chunk (<obj>, <index>) was served (from memory or disk): it is now the most recently used.
 * When the file's mtime may be in an earlier clock hour than <now_ms>, it is set to <now_ms>
 * (one utimensat per file per hour; a file found missing is dropped from the index). An unknown
 * chunk is ignored, except while the start-up scan runs: then the file's mtime is set, so the
 * scan sees the use. Never evicts inline.
 */
void diskidx_touch(struct diskidx *d, const uint8_t obj[16], uint64_t index, uint64_t now_ms);

/* Whether (<obj>, <index>) has a file: 1 indexed, 0 not (the start-up scan is over), -1 not
 * known yet (the scan is still running). O(1), no syscall. */
int diskidx_lookup(struct diskidx *d, const uint8_t obj[16], uint64_t index);

/* Whether <bytes> more on shard <shard> keep the total within disk_size and its filesystem over
 * min_free (as last measured): what may be added without making anything be evicted. */
bool diskidx_has_room(const struct diskidx *d, unsigned shard, uint64_t bytes);
/* Whether <bytes> could ever be held: within disk_size (when set), whatever is stored now. */
bool diskidx_fits(const struct diskidx *d, uint64_t bytes);

/* The cache deleted the file of (<obj>, <index>) (damaged, old version, purged): forget it. */
void diskidx_remove(struct diskidx *d, const uint8_t obj[16], uint64_t index);

/*
 * One bounded pass of the policy at <now_ms> (wall clock): refreshes the filesystems' free space
 * (statvfs, at most every 1 s after adds, else every 10 s), drops entries older than max_age
 * (a sweep of a few thousand entries per pass), and unlinks least recently used files while the
 * total exceeds disk_size (then down to 95% of it) or a filesystem has less than min_free free
 * (then up to min_free + 1% of the filesystem). At most DISKIDX_EVICT_BATCH files and about
 * 2 ms per pass. The loop's timer calls it; tests call it with a fake clock.
 * Returns true when work is left for another pass (call again soon), false when within limits.
 */
#define DISKIDX_EVICT_BATCH 64u
bool diskidx_evict(struct diskidx *d, uint64_t now_ms);

/* The bytes a file takes on disk: max(st_size, st_blocks * 512), as nginx's cache counts. */
uint64_t diskidx_file_bytes(const struct stat *sb);

/*
 * Parses a chunk file name "<32 lowercase hex>.<index>" (exactly as chunkfile_path() writes it:
 * decimal index without sign or leading zeros) into <obj> and <*index>. Pure.
 * Returns 0, or -EINVAL for any other name (tmp files, the marker, "." and "..").
 */
int diskidx_parse_name(const char *name, uint8_t obj[16], uint64_t *index)
    __attribute__((warn_unused_result));

/* Moves the entry of (<obj>, <index>) in shard <shard> (the one diskidx_walk() gave: the
 * start-up scan indexes a file in the dir it was found in, which may not be the dir its object
 * hashes to), if there is one and it is in group <from>, to inventory group <group> (the scan's
 * entries are INV_UNREAD until their key is read). */
void diskidx_regroup(struct diskidx *d, unsigned shard, const uint8_t obj[16], uint64_t index,
                     uint32_t from, uint32_t group);

/* The totals per group of the indexed files (owned by the index; valid while it is). */
struct inventory *diskidx_inventory(struct diskidx *d);

/* One entry, as diskidx_walk() shows it (a copy). */
struct diskidx_entry {
    uint8_t obj[16];
    uint64_t index;
    uint64_t bytes;   /* accounted */
    uint64_t last_ms; /* last use */
    uint32_t group;
    unsigned shard;
};
/* Returns false to stop the walk after this entry. Must not add to or remove from the index. */
typedef bool diskidx_entry_fn(const struct diskidx_entry *e, void *arg);

/*
 * Calls <fn> for the entries from position *<cursor> (0: the first), at most <max> of them, in
 * the index's own order, and saves where it stopped in *<cursor>. Returns true when the walk
 * reached the end (*<cursor> is 0 again). Removals between calls move the last entry of a shard
 * into the hole, so a walk may miss an entry moved behind it: a caller that needs all of a
 * group walks again until a whole pass finds none.
 */
bool diskidx_walk(struct diskidx *d, uint64_t *cursor, size_t max, diskidx_entry_fn *fn, void *arg);

/* Bytes the index holds in memory (entries, hash table, inventory). */
size_t diskidx_memory(const struct diskidx *d);

struct diskidx_stats {
    uint64_t bytes;         /* accounted bytes of the indexed files */
    uint64_t chunks;        /* indexed files */
    uint64_t evictions;     /* files unlinked by the policy (disk_size, min_free, max_age) */
    uint64_t expired;       /* of which for max_age */
    uint64_t scanned_files; /* chunk files the start-up scan found */
    uint64_t skipped_files; /* files in ab/cd/ dirs that are not chunk files at their own path */
    uint64_t errors; /* failed opendir/stat/unlink/utimensat/statvfs (logged, rate-limited) */
    bool scan_done;
    uint64_t disk_size;        /* the limit (0: none) */
    uint64_t fs_free, fs_size; /* free (f_bavail) and whole bytes of the dirs' filesystems, each
                                * once, as last measured (statvfs every 1-10 s) */
    unsigned fs_known;         /* filesystems measured */
};
void diskidx_get_stats(const struct diskidx *d, struct diskidx_stats *out);

#endif
