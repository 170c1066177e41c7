/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * lcimport: `cacheparty import DIR`, a whole lancache tree moved (or copied) into the cache dirs
 * at once, by the rules the daemon applies to each slice it serves from a lancache_dir
 * (ngxfile.h), offline or beside a running daemon.
 *
 * - The tree must be nginx's levels=2:2 layout ("ab/cd/<md5>"). A first pass counts its files and
 *   bytes and reads the first of them: it reports lancache's slice size and key form, and refuses
 *   (exit 1) a tree it does not understand, a slice size other than chunk_size, or a key form
 *   without $slice_range.
 * - Each file is checked (ngxfile_open and the rest of the daemon's checks) and its object's
 *   cacheparty key derived from its lancache key: $cacheidentifier is a service's name, or a Host
 *   (then admitted as a request would be: a host of no service needs allow_unlisted); $uri must
 *   be a path requests spell one way only (no escapes, no dot segments), since the daemon keys the
 *   path as sent. A bypass rule leaves the object out; hide_etag drops its ETag. A 206 of a larger
 *   object is adopted only when the object's other slices in the tree agree on its version. A
 *   file that fails is left in place and counted by reason.
 * - Writing goes through ngxfile_move: a chunk file that exists already is kept (a second run
 *   adopts nothing new), and with move (the default) the nginx files are removed in batches of
 *   256 per worker after one syncfs() of each cache filesystem made their chunks durable (and
 *   only a file still the one read), so a kill at any moment loses nothing and a new run
 *   resumes. Temporary nginx files (unfinished fills) are removed with move. Nothing is written
 *   past disk_size (counting what the cache dirs hold at the start) or under min_free.
 * - Beside a running daemon: the daemon serves what import wrote as soon as a client asks (its
 *   lookup of the slice in a lancache_dir finds the nginx file gone and our chunk file there),
 *   but counts those files against disk_size only after its next start. Do not start or restart
 *   the daemon while an import runs (its start empties the tmp/ dirs import writes through). Two
 *   imports of one tree at once are refused (a lock on the tree).
 */
#ifndef CACHEPARTY_LCIMPORT_H
#define CACHEPARTY_LCIMPORT_H

#include <stdbool.h>
#include <stdio.h>

struct config;
struct domains;

struct lcimport_opts {
    const char *dir; /* the tree */
    bool dry_run;    /* check and count, write and remove nothing */
    bool copy;       /* keep the nginx files (default: move) */
    unsigned jobs;   /* worker threads, 1..64 */
    FILE *out;       /* the report (stdout) */
    FILE *progress;  /* the progress (stderr): a bar on a terminal, else a line per tenth */
};

/* Runs the import of <o> under <cfg> and the lists <d> (NULL: none). Returns the exit status: 0
 * done (files may have been skipped), 1 refused (the tree, the options), 2 write errors. */
int lcimport_run(const struct config *cfg, const struct domains *d, const struct lcimport_opts *o);

#endif
