/* SPDX-License-Identifier: BSD-2-Clause */
/* buf: fixed-capacity byte buffers. See buf.h. */
#include "buf.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "util.h"

void buf_alloc(struct buf *b, size_t cap)
{
    ASSERT(b->start == NULL);
    b->start = xmalloc(cap);
    b->pos = b->last = b->start;
    b->end = b->start + cap;
}

void buf_free(struct buf *b)
{
    free(b->start);
    b->start = b->pos = b->last = b->end = NULL;
}

void buf_compact(struct buf *b)
{
    ASSERT(b->start <= b->pos && b->pos <= b->last && b->last <= b->end);
    if (b->pos == b->start)
        return;
    size_t n = buf_len(b);
    memmove(b->start, b->pos, n);
    b->pos = b->start;
    b->last = b->start + n;
}

ssize_t buf_recv(struct buf *b, int fd)
{
    if (buf_room(b) == 0)
        buf_compact(b);
    ssize_t n;
    do {
        n = recv(fd, b->last, buf_room(b), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    b->last += n;
    return n;
}

size_t buf_append(struct buf *b, const void *data, size_t len)
{
    if (buf_room(b) < len)
        buf_compact(b);
    size_t n = buf_room(b) < len ? buf_room(b) : len;
    memcpy(b->last, data, n);
    b->last += n;
    return n;
}
