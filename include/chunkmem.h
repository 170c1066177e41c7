/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * chunkmem: the memory that chunk bytes live in while a chunk is in memory (cache.c owns one).
 *
 * Blocks are slots of one shared-memory file (memfd_create), each mapped while it is held, so
 * that a reader can hand committed bytes to a socket by reference (sendfile from chunkmem_fd()
 * at the block's offset) instead of copying them into it: the socket then queues references to
 * the block's pages. Bytes queued that way stay as they were after the block is released and its
 * slot is given to another chunk: a release punches the slot out of the file
 * (FALLOC_FL_PUNCH_HOLE), so the next holder of the slot writes to new pages while the queued
 * references keep the old ones alive until the socket lets go of them. A slot is a whole
 * multiple of the largest page the file can be made of (a PMD: 2 MiB with 4 KiB pages), so a
 * release never covers part of a page, which the kernel would zero in place rather than drop.
 *
 * Blocks shorter than CHUNKMEM_REF_MIN come from malloc (copying them costs less than a
 * sendfile), and so does every block once <max_mapped> blocks of the file are held: each held
 * block is a mapping of its own, and a process has a limited number (vm.max_map_count). Where no
 * such file can be made (memfd or hole punching not supported), when asked so, or after a
 * release failed to punch its slot, every block comes from malloc. A block says which it is.
 *
 * The file's pages are the process's memory like malloc'd ones (shared memory in
 * /proc/meminfo): the cache's memory budget counts held blocks. Pages a socket still refers to
 * after a release are the kernel's, held as long as the socket holds those bytes; a reference
 * holds the whole page (folio) it points into, so with huge pages for shared memory
 * (shmem_enabled) and chunks of 2 MiB or more that can be up to a huge page per socket more
 * than the bytes themselves.
 *
 * Used from one thread at a time (the loop's); the I/O pool only reads blocks it was handed (a
 * block in the file with pread() from chunkmem_fd(), which leaves the process's page tables as
 * they were, as chunkmem_write does).
 */
#ifndef CACHEPARTY_CHUNKMEM_H
#define CACHEPARTY_CHUNKMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct chunkmem;

#define CHUNKMEM_REF_MIN (64 * 1024)

/* One block: <len> bytes at <data>; when <in_file>, they are at <off> of chunkmem_fd() (slot
 * <slot>), else malloc'd. */
struct chunkmem_block {
    char *data;
    off_t off;
    size_t len;
    size_t slot;
    bool in_file;
};

/* An allocator of blocks of at most <max_block> bytes (> 0); with <by_ref> false, or when the
 * system cannot give a memory file whose holes can be punched, the malloc kind (one log line
 * says why). At most <max_mapped> blocks are in the file at once (0: a quarter of
 * vm.max_map_count). Never NULL. */
struct chunkmem *chunkmem_new(size_t max_block, bool by_ref, size_t max_mapped);
/* Every block must have been released. NULL-safe; clears *<m>. */
void chunkmem_free(struct chunkmem **m);
/* The memory file to send blocks from by reference (those <in_file>), or -1 (malloc kind).
 * The same for <m>'s whole life: an I/O thread may read it (and pread the file). */
int chunkmem_fd(const struct chunkmem *m);
/* The size of a slot in the memory file (0 for the malloc kind). */
size_t chunkmem_slot_size(const struct chunkmem *m);
/* A block of <len> (<= max_block) bytes, contents unspecified. 0, or -ENOMEM (no
 * memory, no mapping, or the file cannot grow) with <b> cleared. */
int chunkmem_get(struct chunkmem *m, size_t len, struct chunkmem_block *b)
    __attribute__((warn_unused_result));
/* Copies <src>[0..len) to bytes [off, off + len) of <b>. A block in the file is written with
 * pwrite(): the kernel copies into the file's pages through its own mapping, so the process's
 * page tables gain nothing, and of a new page only what the write leaves is zeroed (a write
 * through <data> would fault each page in, zeroed whole, then copy). Where pwrite() fails
 * (counted in errors_total{kind="chunk_memory"}, logged once) the rest is copied through
 * <data>, as a malloc'd block's bytes are. */
void chunkmem_write(struct chunkmem *m, const struct chunkmem_block *b, size_t off, const void *src,
                    size_t len);
/* Releases <b> (a block of <m>, or a cleared one: nothing to do) and clears it. */
void chunkmem_put(struct chunkmem *m, struct chunkmem_block *b);
/* Blocks held now, and of them those in the file (for tests). */
size_t chunkmem_held(const struct chunkmem *m);
size_t chunkmem_held_in_file(const struct chunkmem *m);

#endif
