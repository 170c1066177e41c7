/* SPDX-License-Identifier: BSD-2-Clause */
/* Unit tests of iopool: every job's work runs on a worker thread, its done exactly once on the
 * loop thread, also when the pool is freed with jobs queued; done callbacks may submit more. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "iopool.h"
#include "util.h"

struct tjob {
    struct iojob j;
    int id;
    pthread_t worker;
    bool worked;
    int done_calls;
    bool done_on_loop;
    int chain; /* done submits another job while > 0 */
};

enum { FREEZE_THREADS = 4, FREEZE_ROUNDS = 300 }; /* the pool's workers; stop rounds */

static pthread_t loop_thread;
static struct iopool *pool;
static struct ev_loop *loop;
static int done_total, want_total;
static struct tjob *jobs;

static void work(struct iojob *j)
{
    struct tjob *t = container_of(j, struct tjob, j);
    t->worker = pthread_self();
    struct timespec ts = {0, 200000}; /* 0.2 ms: jobs overlap on the workers */
    nanosleep(&ts, NULL);
    t->worked = true;
}

static void done(struct iojob *j)
{
    struct tjob *t = container_of(j, struct tjob, j);
    t->done_calls++;
    t->done_on_loop = pthread_equal(pthread_self(), loop_thread);
    done_total++;
    if (t->chain > 0) {
        struct tjob *next = t + 1;
        next->chain = t->chain - 1;
        next->j.work = work;
        next->j.done = done;
        iopool_submit(pool, &next->j);
    }
    if (done_total >= want_total)
        ev_break(loop, EVBREAK_ALL);
}

static void on_deadline(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(l, EVBREAK_ALL);
}

static int setup(void **state)
{
    (void)state;
    loop_thread = pthread_self();
    loop = ev_loop_new(EVFLAG_AUTO);
    pool = iopool_new(loop, FREEZE_THREADS);
    done_total = 0;
    jobs = calloc(256, sizeof(*jobs));
    return loop == NULL || pool == NULL || jobs == NULL;
}

static int teardown(void **state)
{
    (void)state;
    iopool_free(&pool);
    ev_loop_destroy(loop);
    free(jobs);
    return 0;
}

/* Runs the loop until want_total done calls, or 30 s (then the assertions fail). */
static void run_until_done(int want)
{
    want_total = want;
    if (done_total >= want)
        return; /* (reaped already, by an earlier turn) */
    ev_timer deadline;
    ev_timer_init(&deadline, on_deadline, 30., 0.);
    ev_timer_start(loop, &deadline);
    ev_run(loop, 0);
    ev_timer_stop(loop, &deadline);
}

static void submit(int i)
{
    jobs[i].id = i;
    jobs[i].j.work = work;
    jobs[i].j.done = done;
    iopool_submit(pool, &jobs[i].j);
}

static void test_every_job_done_once_on_the_loop(void **state)
{
    (void)state;
    for (int i = 0; i < 200; i++)
        submit(i);
    assert_int_equal(iopool_pending(pool), 200);
    run_until_done(200);
    assert_int_equal(done_total, 200);
    assert_int_equal(iopool_pending(pool), 0);
    for (int i = 0; i < 200; i++) {
        assert_true(jobs[i].worked);
        assert_int_equal(jobs[i].done_calls, 1);
        assert_true(jobs[i].done_on_loop);
        assert_false(pthread_equal(jobs[i].worker, loop_thread));
    }
}

static void test_done_may_submit_more(void **state)
{
    (void)state;
    jobs[0].chain = 9;
    submit(0);
    run_until_done(10);
    assert_int_equal(done_total, 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(jobs[i].done_calls, 1);
    assert_int_equal(jobs[10].done_calls, 0);
}

static void test_free_finishes_queued_jobs(void **state)
{
    (void)state;
    for (int i = 0; i < 100; i++)
        submit(i);
    iopool_free(&pool); /* no loop iteration ran: every done runs here, once */
    assert_null(pool);
    assert_int_equal(done_total, 100);
    for (int i = 0; i < 100; i++) {
        assert_true(jobs[i].worked);
        assert_int_equal(jobs[i].done_calls, 1);
        assert_true(jobs[i].done_on_loop);
    }
}

/* A pool of one worker starts its jobs in the order they were submitted, also when they come
 * in bursts between loop turns. */
static atomic_int started;
static int start_seq[256];

static void work_ordered(struct iojob *j)
{
    struct tjob *t = container_of(j, struct tjob, j);
    start_seq[t->id] = atomic_fetch_add(&started, 1);
    t->worked = true;
}

static void test_one_worker_starts_jobs_in_submission_order(void **state)
{
    (void)state;
    iopool_free(&pool);
    pool = iopool_new(loop, 1);
    atomic_store(&started, 0);
    int n = 0;
    for (int burst = 0; burst < 8; burst++) {
        for (int k = 0; k < 1 + burst * 3 && n < 100; k++, n++) {
            jobs[n].id = n;
            jobs[n].j.work = work_ordered;
            jobs[n].j.done = done;
            iopool_submit(pool, &jobs[n].j);
        }
        ev_run(loop, EVRUN_NOWAIT);
    }
    run_until_done(n);
    assert_int_equal(done_total, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(start_seq[i], i);
}

/*
 * The loop never waits for a worker: with every worker stopped wherever a signal finds it
 * (inside the pool's own bookkeeping too), the loop still submits and reaps. Workers run empty
 * jobs as fast as they can, so they are often inside the pool when stopped; a pool whose loop
 * side took a lock a worker holds hangs here (the watchdog then fails the test).
 */
static int freeze_pipe[2], frozen_pipe[2], thawed_pipe[2];
static atomic_int freezes_left;

static void on_freeze(int sig)
{
    (void)sig;
    int saved = errno;
    char c = 'f';
    ssize_t w = write(frozen_pipe[1], &c, 1);
    (void)w;
    while (read(freeze_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    w = write(thawed_pipe[1], &c, 1);
    (void)w;
    errno = saved;
}

static void work_nothing(struct iojob *j)
{
    container_of(j, struct tjob, j)->worked = true;
}

static void done_again(struct iojob *j)
{
    struct tjob *t = container_of(j, struct tjob, j);
    t->done_calls++;
    done_total++;
    if (atomic_load(&freezes_left) > 0)
        iopool_submit(pool, j); /* keeps the workers busy */
}

static bool extra_done;

static void done_extra(struct iojob *j)
{
    container_of(j, struct tjob, j)->done_calls++;
    extra_done = true;
    ev_break(loop, EVBREAK_ALL);
}

static pthread_t dog;
static bool dog_running;

static void *watchdog(void *arg)
{
    (void)arg;
    sleep(60); /* longer than a round's 30 s deadline, which fails the test on its own */
    fprintf(stderr, "test_iopool: hung 60 s (the loop waited for a stopped worker)\n");
    _exit(1);
}

static int setup_freeze(void **state)
{
    if (setup(state) != 0) /* (its pool has FREEZE_THREADS workers) */
        return 1;
    freeze_pipe[0] = freeze_pipe[1] = frozen_pipe[0] = frozen_pipe[1] = -1;
    thawed_pipe[0] = thawed_pipe[1] = -1;
    if (pool == NULL || pipe(freeze_pipe) != 0 || pipe(frozen_pipe) != 0 || pipe(thawed_pipe) != 0)
        return 1;
    struct sigaction sa = {.sa_handler = on_freeze};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 1;
    dog_running = pthread_create(&dog, NULL, watchdog, NULL) == 0;
    return !dog_running;
}

/* Also after a failed assertion: no job is resubmitted any more, every worker stopped in the
 * handler is let go, the pool is freed (its workers joined) before the handler is reset. */
static int teardown_freeze(void **state)
{
    atomic_store(&freezes_left, 0);
    char go[FREEZE_THREADS];
    memset(go, 'g', sizeof(go));
    if (freeze_pipe[1] >= 0 && write(freeze_pipe[1], go, sizeof(go)) != (ssize_t)sizeof(go))
        return 1;
    iopool_free(&pool);
    if (dog_running) {
        pthread_cancel(dog);
        pthread_join(dog, NULL);
        dog_running = false;
    }
    signal(SIGUSR1, SIG_DFL);
    for (int i = 0; i < 2; i++) {
        if (freeze_pipe[i] >= 0)
            close(freeze_pipe[i]);
        if (frozen_pipe[i] >= 0)
            close(frozen_pipe[i]);
        if (thawed_pipe[i] >= 0)
            close(thawed_pipe[i]);
    }
    return teardown(state);
}

static void test_loop_never_waits_for_a_stopped_worker(void **state)
{
    (void)state;
    atomic_store(&freezes_left, FREEZE_ROUNDS);
    for (int i = 0; i < 16; i++) {
        jobs[i].j.work = work_nothing;
        jobs[i].j.done = done_again;
        iopool_submit(pool, &jobs[i].j);
    }
    for (int r = 0; r < FREEZE_ROUNDS; r++) {
        for (int k = 0; k < 20; k++)
            ev_run(loop, EVRUN_NOWAIT); /* the workers take and finish jobs meanwhile */
        for (unsigned t = 0; t < FREEZE_THREADS; t++)
            assert_int_equal(pthread_kill(iopool_thread(pool, t), SIGUSR1), 0);
        char c;
        for (unsigned t = 0; t < FREEZE_THREADS; t++)
            assert_int_equal(read(frozen_pipe[0], &c, 1), 1);
        /* Every worker is stopped: the loop's side must not wait for any of them. */
        int extra = 16 + r % 16;
        jobs[extra].j.work = work_nothing;
        jobs[extra].j.done = done_extra;
        extra_done = false;
        iopool_submit(pool, &jobs[extra].j);
        iopool_reap(pool);
        ev_run(loop, EVRUN_NOWAIT);
        char go[FREEZE_THREADS];
        memset(go, 'g', sizeof(go));
        assert_int_equal(write(freeze_pipe[1], go, FREEZE_THREADS), FREEZE_THREADS);
        for (unsigned t = 0; t < FREEZE_THREADS; t++) /* each handler took its own byte, left */
            assert_int_equal(read(thawed_pipe[0], &c, 1), 1);
        atomic_fetch_sub(&freezes_left, 1);
        if (!extra_done)
            run_until_done(INT32_MAX); /* until the extra job's done breaks it, or the deadline */
        assert_true(extra_done);
    }
    iopool_free(&pool); /* every resubmitted job finishes */
    for (int i = 0; i < 32; i++)
        assert_true(jobs[i].worked);
}

static void test_idle_pool_does_not_keep_the_loop_alive(void **state)
{
    (void)state;
    /* ev_run returns at once: the pool's watcher is unref'd. */
    ev_run(loop, 0);
    assert_int_equal(done_total, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_job_done_once_on_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_done_may_submit_more, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_finishes_queued_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_worker_starts_jobs_in_submission_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_loop_never_waits_for_a_stopped_worker, setup_freeze,
                                        teardown_freeze),
        cmocka_unit_test_setup_teardown(test_idle_pool_does_not_keep_the_loop_alive, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
