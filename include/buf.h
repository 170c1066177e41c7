/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * buf: a fixed-capacity byte buffer, start <= pos <= last <= end (like ngx_buf_t).
 * States: unallocated (start == NULL), empty (pos == last), has data (pos < last). Data is read
 * from pos and appended at last; buf_compact() moves the data back to start to make room.
 * A buf never grows: running out of room means back-pressure for the caller.
 * Owns: its memory (buf_alloc / buf_free).
 */
#ifndef CACHEPARTY_BUF_H
#define CACHEPARTY_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

struct buf {
    char *start; /* owns */
    char *pos;   /* first unread byte */
    char *last;  /* one past the last byte written */
    char *end;   /* one past the capacity */
};

void buf_alloc(struct buf *b, size_t cap); /* aborts on OOM (fixed small per-connection sizes) */
void buf_free(struct buf *b);              /* back to unallocated; NULL-safe on empty bufs */

static inline bool buf_is_alloc(const struct buf *b)
{
    return b->start != NULL;
}
static inline size_t buf_len(const struct buf *b)
{
    return (size_t)(b->last - b->pos);
}
static inline size_t buf_room(const struct buf *b)
{
    return (size_t)(b->end - b->last);
}
static inline void buf_reset(struct buf *b)
{
    b->pos = b->last = b->start;
}
/* Drop <n> bytes from the front; resets to start when emptied. */
static inline void buf_consume(struct buf *b, size_t n)
{
    b->pos += n;
    if (b->pos == b->last)
        b->pos = b->last = b->start;
}
/* Move data to the front so that buf_room() is maximal. */
void buf_compact(struct buf *b);
/*
 * Reads from <fd> into the room after <last> (compacting first when there is none), retrying on
 * EINTR. Returns the bytes read (> 0), 0 at end of file, or -errno (-EAGAIN: nothing yet).
 */
ssize_t buf_recv(struct buf *b, int fd);

/* Append up to <len> bytes; returns how many fit (compacts first if needed). */
size_t buf_append(struct buf *b, const void *data, size_t len);

#endif
