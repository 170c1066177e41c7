/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * iopool: worker threads for blocking disk work. See iopool.h.
 *
 * One mutex guards both queues: <todo> (FIFO of submitted jobs) and <finished> (jobs whose work
 * ran, LIFO). A worker sleeps on <cv> while <todo> is empty; after a job's work it moves the job
 * to <finished> and signals the loop's ev_async (libev coalesces the signals: one callback
 * drains every finished job). Jobs are few and large (a chunk read or write each), so one lock
 * is no contention point.
 */
#include "iopool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "log.h"
#include "util.h"

#define IOPOOL_MAGIC 0x10900101u

struct iopool {
    unsigned magic;
    struct ev_loop *loop;
    ev_async async;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct iojob *todo_head, *todo_tail; /* under mu */
    struct iojob *finished;              /* under mu */
    bool stopping;                       /* under mu: workers exit once todo is empty */
    size_t pending;                      /* loop thread: submitted, done not yet run */
    unsigned n_threads;
    pthread_t threads[IOPOOL_MAX_THREADS];
};

static void *worker(void *arg)
{
    struct iopool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->todo_head == NULL && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        struct iojob *j = p->todo_head;
        if (j == NULL)
            break; /* stopping, and nothing left to do */
        p->todo_head = j->next;
        if (p->todo_head == NULL)
            p->todo_tail = NULL;
        pthread_mutex_unlock(&p->mu);

        j->work(j);

        pthread_mutex_lock(&p->mu);
        j->next = p->finished;
        p->finished = j;
        ev_async_send(p->loop, &p->async);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void iopool_reap(struct iopool *p)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    pthread_mutex_lock(&p->mu);
    struct iojob *j = p->finished;
    p->finished = NULL;
    pthread_mutex_unlock(&p->mu);
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

struct iopool *iopool_new(struct ev_loop *loop, unsigned threads)
{
    ASSERT(threads >= 1 && threads <= IOPOOL_MAX_THREADS);
    struct iopool *p = xcalloc(1, sizeof(*p));
    p->magic = IOPOOL_MAGIC;
    p->loop = loop;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    ev_async_init(&p->async, on_async);
    ev_async_start(loop, &p->async);
    ev_unref(loop); /* pending disk work alone does not keep the daemon running */
    for (unsigned i = 0; i < threads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker, p);
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
    j->next = NULL;
    p->pending++;
    pthread_mutex_lock(&p->mu);
    ASSERT(!p->stopping);
    if (p->todo_tail != NULL)
        p->todo_tail->next = j;
    else
        p->todo_head = j;
    p->todo_tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

size_t iopool_pending(const struct iopool *p)
{
    CHECK_OBJ(p, IOPOOL_MAGIC);
    return p->pending;
}

void iopool_free(struct iopool **pp)
{
    struct iopool *p = *pp;
    if (p == NULL)
        return;
    CHECK_OBJ(p, IOPOOL_MAGIC);
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    /* Every queued job ran; their done callbacks may submit no more (asserted in submit). */
    iopool_reap(p);
    ASSERT(p->pending == 0);
    ev_ref(p->loop);
    ev_async_stop(p->loop, &p->async);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    p->magic = 0;
    free(p);
    *pp = NULL;
}
