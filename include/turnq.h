/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * turnq: a loop iteration's budget of body bytes sent, and the queue of turns put off to the next
 * iteration once it is spent (conn.c keeps one for its client connections).
 *
 * Each client with bytes to send takes a turn of up to a fixed size (CONN_SEND_TURN) when its
 * socket is writable. Without a bound per iteration, an iteration in which 50 clients can write
 * sends 50 turns before the loop polls again, and a request that arrives meanwhile, or an origin's
 * answer, waits for all of them (bench/README.md, "Issue 21"). With one, once <budget> bytes went
 * out in an iteration, a response already under way does not start another turn: it is queued and
 * taken first in the next iteration, in the order responses were put off. A response's first bytes
 * are never put off (its time to first byte is what the client sees), so an iteration sends about
 * <budget> bytes plus one turn, plus first bytes. (An iteration runs from one turnq_new_iteration()
 * to the next: conn.c calls it before the loop polls, so between two polls up to twice that.)
 *
 * Intrusive (a node lives in its owner, zeroed before first use; its links are the queue's) and
 * for one thread. The caller starts each iteration with turnq_new_iteration(), takes that many
 * nodes with turnq_pop() and lets their owners try again; one put off again then goes to the back,
 * for the iteration after.
 */
#ifndef CACHEPARTY_TURNQ_H
#define CACHEPARTY_TURNQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct turnq_node {
    TAILQ_ENTRY(turnq_node) link;
    bool queued;
};

struct turnq {
    TAILQ_HEAD(, turnq_node) nodes; /* oldest first */
    size_t n;                       /* nodes queued */
    uint64_t budget;                /* bytes an iteration may send before turns are put off */
    uint64_t sent;                  /* bytes sent in this iteration */
};

void turnq_init(struct turnq *q, uint64_t budget);
/* A new iteration: the budget is whole again. Returns how many nodes are queued now: the turns
 * put off in the last iteration, to be taken (turnq_pop) before anything else. */
size_t turnq_new_iteration(struct turnq *q);
/* Takes a turn for <n>'s owner if it may start one now: a node not queued may, for a response's
 * first bytes always, else while the budget lasts; true. Otherwise <n> is queued at the back, or
 * keeps its place if it already was queued (a queued node gets false whatever the budget: it goes
 * first in the next iteration), and false. */
bool turnq_take_turn(struct turnq *q, struct turnq_node *n, bool first_bytes);
/* Counts <bytes> sent in this iteration. */
void turnq_sent(struct turnq *q, uint64_t bytes);
/* The oldest queued node, taken off the queue; NULL when none is. */
struct turnq_node *turnq_pop(struct turnq *q);
/* Takes <n> off the queue if it is on it (its owner goes away). */
void turnq_remove(struct turnq *q, struct turnq_node *n);

#endif
