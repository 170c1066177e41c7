/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * iopool: a small pool of worker threads for blocking disk work (as nginx's aio thread pools),
 * so that a slow disk read or write never stalls the event loop for other clients.
 *
 * A job is a struct iojob embedded in the caller's own structure (container_of). The caller fills
 * work and done and submits it from the loop thread. A worker runs work(job) on its own thread;
 * then done(job) runs on the loop thread (from an ev_async), in no particular order relative to
 * other jobs. work must touch only what the job owns (or data that no one changes while the job
 * is pending: the submitter keeps it alive and immutable until done); done may touch anything on
 * the loop and normally frees the job.
 *
 * Ownership: the pool owns its threads and queues, never the jobs: a submitted job belongs to the
 * pool until done(job) is called, then to done. Every submitted job gets exactly one done call,
 * also at iopool_free() (which first lets the workers finish every queued job).
 *
 * Threading: iopool_submit() and iopool_free() on the loop thread only.
 */
#ifndef CACHEPARTY_IOPOOL_H
#define CACHEPARTY_IOPOOL_H

#include <pthread.h>
#include <stddef.h>

struct ev_loop;
struct iopool;
struct iojob;

typedef void iojob_fn(struct iojob *j);

struct iojob {
    iojob_fn *work;     /* on a worker thread */
    iojob_fn *done;     /* on the loop thread, after work */
    struct iojob *next; /* private to the pool */
};

#define IOPOOL_MAX_THREADS 64u

/* A pool of <threads> workers (1..IOPOOL_MAX_THREADS) delivering completions on <loop>
 * (borrowed; must outlive the pool). Its async watcher never keeps the loop alive by itself.
 * NULL with errno set when a thread cannot be started. */
struct iopool *iopool_new(struct ev_loop *loop, unsigned threads);

/* Queues <j> (work and done set). Never blocks on I/O or on a lock a worker holds; never
 * fails. Jobs start in the order they were submitted (they may finish in any order). */
void iopool_submit(struct iopool *p, struct iojob *j);

/* Jobs submitted and not yet done (their done has not run). */
size_t iopool_pending(const struct iopool *p);

/* Worker <i>'s thread (i below the count given to iopool_new): for tests that stop one. */
pthread_t iopool_thread(const struct iopool *p, unsigned i);

/* Runs the done callbacks of the finished jobs now (they also run from the loop by themselves). */
void iopool_reap(struct iopool *p);

/* Lets the workers finish every queued job, joins them, runs every remaining done callback on the
 * calling thread, frees the pool; *<p> becomes NULL. NULL is fine. */
void iopool_free(struct iopool **p);

#endif
