/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * upool: per-origin-address connection accounting and idle keep-alive sockets.
 *
 * An origin (one IP:port) is created on first use and freed when it has no busy slot, no idle
 * socket and no waiter. A busy slot is one upstream request in progress (connecting or talking);
 * at most [upstream] max_per_origin per origin. Requests beyond that wait in FIFO order and are
 * handed the slot of the next request that finishes. Idle sockets (at most [upstream] keepalive
 * per origin) are watched: data or EOF while idle, or UPOOL_IDLE_TIMEOUT, closes them.
 * Owns: origins, idle sockets, their watchers. Borrows g_cfg for the limits.
 */
#ifndef CACHEPARTY_UPOOL_H
#define CACHEPARTY_UPOOL_H

#include <stdbool.h>
#include <sys/socket.h>

struct ev_loop;
struct upool;
struct origin;

#define UPOOL_IDLE_TIMEOUT 30.0 /* seconds an idle origin socket is kept */

struct upool_wait;
typedef void upool_wait_fn(struct upool_wait *w);

/* A waiter for a busy slot, embedded in its owner. */
struct upool_wait {
    struct upool_wait *next;
    struct upool_wait **pprev;
    struct origin *origin; /* borrows while queued */
    upool_wait_fn *cb;     /* fires with the slot taken; deferred, never inside upool calls */
};

struct upool *upool_new(struct ev_loop *loop);
/* Closes idle sockets and frees origins; every slot must have been released. Sets *p = NULL. */
void upool_free(struct upool **p);

/* The origin for <addr> (created if new). Valid while the caller holds a slot or a wait. */
struct origin *upool_origin(struct upool *p, const struct sockaddr_storage *addr);
/* Takes a busy slot if the origin is under max_per_origin. */
bool upool_slot_try(struct origin *o);
/* Whether upool_slot_try() would take a slot now (under max_per_origin, nobody queued). */
bool upool_has_room(const struct origin *o);
/* Queues <w> for a slot; w->cb fires later with the slot taken. */
void upool_wait(struct origin *o, struct upool_wait *w, upool_wait_fn *cb);
/*
 * Leaves the queue (no callback). Safe on a waiter that is not queued. Returns true when the
 * slot had already been granted (callback pending): the caller then holds it and must release it.
 */
bool upool_wait_cancel(struct upool *p, struct upool_wait *w);
/* An idle socket of the origin (ownership passes to the caller), or -1. Needs a held slot. */
int upool_take_idle(struct origin *o);
/*
 * Gives back a busy slot. <fd> >= 0 is a clean keep-alive socket to keep idle (or close if the
 * pool is full or shutting down); -1 when the socket was closed or is not reusable.
 * The origin may be freed by this call.
 */
void upool_release(struct origin *o, int fd);
/* Logging name "a.b.c.d:port". */
const char *upool_origin_name(const struct origin *o);
/* Stop keeping idle sockets (shutdown): closes the current ones. */
void upool_drain(struct upool *p);

#endif
