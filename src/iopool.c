/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * iopool: worker threads for blocking disk work. See iopool.h.
 *
 * The loop thread never takes a lock a worker holds. A worker that holds one can be preempted
 * there (by a kernel thread writing back, by a mover at idle priority on the same core), and a
 * loop that then waited for it stalled every client with it (the loop was seen blocked 1-3 ms on
 * the pool's one mutex while lancache files were moved, bench/README "Issue 18").
 *
 * - Submitted jobs: the loop pushes each onto <incoming>, a lock-free stack, then posts <jobs>,
 *   a semaphore counting jobs not yet taken (sem_post never blocks). A worker waits on <jobs>;
 *   each count it takes stands for a job pushed before it, and under <ready_mu> (a mutex only
 *   workers take) it pops the oldest: when its FIFO <ready> is empty it takes the whole of
 *   <incoming> at once and reverses it, so jobs start in the order they were submitted.
 * - Finished jobs: a worker pushes each onto <finished>, a lock-free stack (LIFO), and signals
 *   the loop's ev_async (thread-safe; libev coalesces the signals). The loop takes the whole
 *   stack with one atomic exchange and runs the done callbacks.
 * - Stopping: the loop posts one count per worker with no job behind it; a worker that finds
 *   no job after a count exits. Every job was pushed before those counts, so each runs first.
 *
 * Both stacks are pushed by compare-and-swap and emptied only by exchange (never popped one by
 * one), so no ABA case arises.
 */
#include "iopool.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "log.h"
#include "util.h"

#define IOPOOL_MAGIC 0x10900102u

struct iopool {
    unsigned magic;
    struct ev_loop *loop;
    ev_async async;
    sem_t jobs;                       /* jobs pushed and not yet taken, plus stop counts */
    _Atomic(struct iojob *) incoming; /* pushed by the loop (LIFO); taken whole by a worker */
    _Atomic(struct iojob *) finished; /* pushed by workers (LIFO); taken whole by the loop */
    pthread_mutex_t ready_mu;         /* workers only: guards ready */
    struct iojob *ready;              /* under ready_mu: taken from incoming, oldest first */
    bool stopping;                    /* loop thread */
    size_t pending;                   /* loop thread: submitted, done not yet run */
    unsigned n_threads;
    pthread_t threads[IOPOOL_MAX_THREADS];
};

static void push(_Atomic(struct iojob *) *stack, struct iojob *j)
{
    struct iojob *top = atomic_load_explicit(stack, memory_order_relaxed);
    do
        j->next = top;
    while (!atomic_compare_exchange_weak_explicit(stack, &top, j, memory_order_release,
                                                  memory_order_relaxed));
}

/* The oldest job not taken yet, or NULL (a stop count). */
static struct iojob *take(struct iopool *p)
{
    pthread_mutex_lock(&p->ready_mu);
    if (p->ready == NULL) {
        struct iojob *j = atomic_exchange_explicit(&p->incoming, NULL, memory_order_acquire);
        while (j != NULL) { /* newest first: reversed into submission order */
            struct iojob *next = j->next;
            j->next = p->ready;
            p->ready = j;
            j = next;
        }
    }
    struct iojob *j = p->ready;
    if (j != NULL)
        p->ready = j->next;
    pthread_mutex_unlock(&p->ready_mu);
    return j;
}

static void *worker(void *arg)
{
    struct iopool *p = arg;
    for (;;) {
        while (sem_wait(&p->jobs) < 0) {
            int e = errno;
            ASSERT(e == EINTR);
        }
        struct iojob *j = take(p);
        if (j == NULL)
            break; /* stopping, and nothing left to do */
        j->work(j);
        push(&p->finished, j);
        ev_async_send(p->loop, &p->async);
    }
    return NULL;
}

void iopool_reap(struct iopool *p)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    struct iojob *j = atomic_exchange_explicit(&p->finished, NULL, memory_order_acquire);
    while (j != NULL) {
        struct iojob *next = j->next;
        ASSERT(p->pending > 0);
        p->pending--;
        j->next = NULL;
        j->done(j); /* may free j, may submit new jobs */
        j = next;
    }
}

static void on_async(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop;
    (void)revents;
    iopool_reap(container_of(w, struct iopool, async));
}

static void stop_workers(struct iopool *p)
{
    p->stopping = true;
    for (unsigned i = 0; i < p->n_threads; i++) {
        int rc = sem_post(&p->jobs);
        ASSERT(rc == 0);
    }
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
}

struct iopool *iopool_new(struct ev_loop *loop, unsigned threads)
{
    ASSERT(threads >= 1 && threads <= IOPOOL_MAX_THREADS);
    struct iopool *p = xcalloc(1, sizeof(*p));
    p->magic = IOPOOL_MAGIC;
    p->loop = loop;
    int rc = sem_init(&p->jobs, 0, 0);
    ASSERT(rc == 0);
    atomic_init(&p->incoming, NULL);
    atomic_init(&p->finished, NULL);
    pthread_mutex_init(&p->ready_mu, NULL);
    ev_async_init(&p->async, on_async);
    ev_async_start(loop, &p->async);
    ev_unref(loop); /* pending disk work alone does not keep the daemon running */
    for (unsigned i = 0; i < threads; i++) {
        rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc != 0) {
            log_err("iopool: cannot start a worker thread: %s", strerror(rc));
            iopool_free(&p);
            errno = rc;
            return NULL;
        }
        p->n_threads++;
    }
    return p;
}

void iopool_submit(struct iopool *p, struct iojob *j)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    ASSERT(j->work != NULL && j->done != NULL);
    ASSERT(!p->stopping);
    p->pending++;
    push(&p->incoming, j);
    int rc = sem_post(&p->jobs);
    ASSERT(rc == 0);
}

size_t iopool_pending(const struct iopool *p)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    return p->pending;
}

pthread_t iopool_thread(const struct iopool *p, unsigned i)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    ASSERT(i < p->n_threads);
    return p->threads[i];
}

void iopool_free(struct iopool **pp)
{
    struct iopool *p = *pp;
    if (p == NULL)
        return;
    CHECK_OBJ(p, IOPOOL_MAGIC);
    stop_workers(p);
    /* Every queued job ran; their done callbacks may submit no more (asserted in submit). */
    iopool_reap(p);
    ASSERT(p->pending == 0);
    ev_ref(p->loop);
    ev_async_stop(p->loop, &p->async);
    pthread_mutex_destroy(&p->ready_mu);
    sem_destroy(&p->jobs);
    p->magic = 0;
    free(p);
    *pp = NULL;
}
