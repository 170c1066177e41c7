/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ngxfile: opening and checking one nginx cache file of a lancache tree (ngxcache.h has the
 * format and the checks). Blocking I/O, no globals: called from the cache's I/O threads and from
 * `cacheparty import`'s workers, never on the loop.
 */
#ifndef CACHEPARTY_NGXFILE_H
#define CACHEPARTY_NGXFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "chunkfile.h"
#include "ngxcache.h"

/* One file, checked. Reusable: ngxfile_open() again after ngxfile_close(). */
struct ngxfile {
    int fd; /* owns while open (-1: closed) */
    struct stat sb;
    struct ngxcache_file f; /* borrows <buf> */
    uint8_t *buf;           /* owns: NGXCACHE_PREFIX_MAX bytes, the file's first ones */
    size_t prefix_len;      /* length of $cacheidentifier$uri at the start of f.key */
    /* The version and type, from the stored head (empty when absent; etag empty too when
     * <hide_etag> was given). */
    char etag[CHUNKFILE_ETAG_MAX + 1];
    char last_modified[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    char content_type[CHUNKFILE_CONTENT_TYPE_MAX + 1];
};

void ngxfile_init(struct ngxfile *nf);
/* Closes the file (the buffer stays for the next open). */
void ngxfile_close(struct ngxfile *nf);
/* Closes and frees. */
void ngxfile_fini(struct ngxfile *nf);

/*
 * Opens <path> (never following a symlink) and checks it for slice size <slice>: a regular file,
 * at least <settle_s> seconds old (by mtime; 0: any), then ngxcache_parse() with its name and
 * ngxcache_slice(), and the head's ETag, Last-Modified and Content-Type within the chunk file's
 * bounds. NGXCACHE_OK leaves it open; any other verdict closes it, with *<absent> (may be NULL)
 * true when there is no such file at all (NGXCACHE_IO then).
 */
enum ngxcache_verdict ngxfile_open(struct ngxfile *nf, const char *path, uint64_t slice,
                                   int64_t settle_s, bool hide_etag, bool *absent);

/*
 * Writing the chunks an nginx file holds as chunk files (chunkfile.h) of shard <shard_dir>:
 * chunks <first>..<last> of object <obj> (first == last unless the file is a 200 holding the
 * whole object), chunk <first> starting at <off0> in <fd>. A chunk that has a file already is
 * left as it is when that file verifies (chunkfile_read_verify: whole, of this key and index),
 * and rewritten from the nginx file when it does not. Nothing is synced: whoever removes nginx
 * files afterwards (the daemon's mover, import) first makes the chunk files durable with one
 * syncfs() per filesystem for a batch of moves, then unlinks each nginx file that is still the
 * (dev, ino) it read. So a kill at any moment leaves the nginx file, or complete chunk files, or
 * both.
 */
struct ngxfile_move {
    int fd;               /* borrowed: the nginx file */
    off_t off0;           /* where chunk <first> starts in it */
    uint64_t first, last; /* the chunks it holds */
    uint64_t chunk_size;
    const char *shard_dir;
    uint8_t obj[16];
    uint64_t seq;            /* tmp name uniqueness (chunkfile_tmp_path) */
    struct chunkfile_meta m; /* the version and fields; index and data_len are set per chunk */
    /* Out: */
    int rc;          /* 0, or -errno of the first failure */
    uint64_t *bytes; /* owns (free): per chunk first..last, its file's bytes on disk (0: not
                        written by this call) */
    ino_t *inos;     /* owns (free): per chunk, the inode of the file it wrote */
};
void ngxfile_move(struct ngxfile_move *mv);

/*
 * The nginx files of a batch of moves removed once their chunks are durable: one syncfs() per
 * filesystem of a shard written (it covers every chunk file there, this batch's and any older
 * one), then each file that is still the (dev, ino) read. Items with <skip> are left. A kill at
 * any moment leaves the nginx files, or complete chunk files, or both.
 */
struct ngxfile_gone {
    const char *path; /* borrowed */
    dev_t dev;
    ino_t ino;
    size_t shard; /* its chunks are in <shard_dirs>[shard] (< CONFIG_MAX_DIRS) */
    bool skip;    /* in: keep it (its move failed, or a PURGE came) */
    /* Out: */
    bool removed;
    int sync_err;   /* its shard's syncfs failed (errno): kept */
    int unlink_err; /* its unlink failed (errno): kept */
};
void ngxfile_remove_durable(char *const *shard_dirs, struct ngxfile_gone *g, size_t n);

/* Whether two open files hold the same version: length, ETag and Last-Modified. */
bool ngxfile_same_version(const struct ngxfile *a, const struct ngxfile *b);

#endif
