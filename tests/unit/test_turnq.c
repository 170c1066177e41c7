/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_turnq: the loop iteration's send budget of turnq.h: turns start while it lasts, a
 * response's first bytes start whatever is left, turns past it are queued once each and taken
 * oldest first in the next iteration, one put off again goes behind the others, and a node taken
 * off (its owner closed) leaves the queue whole.
 */
#include "turnq.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define BUDGET 1000

/* <q> with its budget spent and <n> nodes put off, in order. */
static void put_off(struct turnq *q, struct turnq_node *nodes, int n)
{
    turnq_init(q, BUDGET);
    turnq_sent(q, BUDGET);
    for (int i = 0; i < n; i++) {
        assert_false(turnq_take_turn(q, &nodes[i], false));
        assert_true(nodes[i].queued);
    }
    assert_int_equal(q->n, (size_t)n);
}

static void test_turns_start_while_the_budget_lasts(void **state)
{
    (void)state;
    struct turnq q;
    struct turnq_node a = {0}, b = {0};
    turnq_init(&q, BUDGET);
    assert_true(turnq_take_turn(&q, &a, false));
    turnq_sent(&q, BUDGET - 1);
    assert_true(turnq_take_turn(&q, &b, false)); /* one byte left: a turn may start */
    turnq_sent(&q, 600);                         /* and overrun it by the rest of a turn */
    assert_false(turnq_take_turn(&q, &a, false));
    assert_true(a.queued);
    assert_int_equal(q.n, 1);
    /* The next iteration: the budget is whole, the one put off is there to be taken first. */
    assert_int_equal(turnq_new_iteration(&q), 1);
    assert_ptr_equal(turnq_pop(&q), &a);
    assert_false(a.queued);
    assert_true(turnq_take_turn(&q, &a, false));
    assert_null(turnq_pop(&q));
}

static void test_first_bytes_are_never_put_off(void **state)
{
    (void)state;
    struct turnq q;
    struct turnq_node a = {0};
    turnq_init(&q, BUDGET);
    turnq_sent(&q, 10 * BUDGET);
    assert_true(turnq_take_turn(&q, &a, true));
    assert_false(a.queued);
    assert_int_equal(q.n, 0);
    assert_false(turnq_take_turn(&q, &a, false)); /* its next turn is */
    assert_true(a.queued);
}

static void test_put_off_once_and_taken_in_order(void **state)
{
    (void)state;
    struct turnq q;
    struct turnq_node n[4];
    memset(n, 0, sizeof(n));
    put_off(&q, n, 4);
    /* Asked again in the same iteration (woken by a read, a chunk's bytes): kept in its place,
     * not queued twice, and still not started. */
    assert_false(turnq_take_turn(&q, &n[1], false));
    assert_false(turnq_take_turn(&q, &n[1], true));
    assert_int_equal(q.n, 4);
    assert_int_equal(turnq_new_iteration(&q), 4);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(turnq_pop(&q), &n[i]);
    assert_null(turnq_pop(&q));
    assert_int_equal(q.n, 0);
    assert_true(TAILQ_EMPTY(&q.nodes));
    assert_ptr_equal(q.nodes.tqh_last, &q.nodes.tqh_first); /* (both ends) */
}

static void test_put_off_again_goes_behind(void **state)
{
    (void)state;
    struct turnq q;
    struct turnq_node n[3];
    memset(n, 0, sizeof(n));
    put_off(&q, n, 3);
    size_t k = turnq_new_iteration(&q);
    assert_int_equal(k, 3);
    /* The caller takes k: the first spends the budget, the two others are put off again. */
    struct turnq_node *t = turnq_pop(&q);
    assert_ptr_equal(t, &n[0]);
    assert_true(turnq_take_turn(&q, t, false));
    turnq_sent(&q, BUDGET);
    for (size_t i = 1; i < k; i++) {
        t = turnq_pop(&q);
        assert_ptr_equal(t, &n[i]);
        assert_false(turnq_take_turn(&q, t, false));
    }
    /* Taken k, so the loop ends with them queued for the iteration after, in the same order. */
    assert_int_equal(turnq_new_iteration(&q), 2);
    assert_ptr_equal(turnq_pop(&q), &n[1]);
    assert_ptr_equal(turnq_pop(&q), &n[2]);
    assert_null(turnq_pop(&q));
}

static void test_remove_keeps_the_queue_whole(void **state)
{
    (void)state;
    struct turnq q;
    struct turnq_node n[4], other = {0};
    memset(n, 0, sizeof(n));
    put_off(&q, n, 4);
    turnq_remove(&q, &n[1]);  /* middle */
    turnq_remove(&q, &n[3]);  /* tail */
    turnq_remove(&q, &n[3]);  /* twice: nothing */
    turnq_remove(&q, &other); /* never queued: nothing */
    assert_int_equal(q.n, 2);
    assert_false(n[1].queued);
    assert_false(turnq_take_turn(&q, &n[3], false)); /* queued again, behind n[2] */
    turnq_remove(&q, &n[0]);                         /* head */
    assert_int_equal(turnq_new_iteration(&q), 2);
    assert_ptr_equal(turnq_pop(&q), &n[2]);
    assert_ptr_equal(turnq_pop(&q), &n[3]);
    assert_null(turnq_pop(&q));
    assert_int_equal(q.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_start_while_the_budget_lasts),
        cmocka_unit_test(test_first_bytes_are_never_put_off),
        cmocka_unit_test(test_put_off_once_and_taken_in_order),
        cmocka_unit_test(test_put_off_again_goes_behind),
        cmocka_unit_test(test_remove_keeps_the_queue_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
