/* SPDX-License-Identifier: BSD-2-Clause */
/* Unit tests of iopool: every job's work runs on a worker thread, its done exactly once on the
 * loop thread, also when the pool is freed with jobs queued; done callbacks may submit more. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

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
    if (done_total == want_total)
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
    pool = iopool_new(loop, 4);
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
        cmocka_unit_test_setup_teardown(test_idle_pool_does_not_keep_the_loop_alive, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
