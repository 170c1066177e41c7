/* SPDX-License-Identifier: BSD-2-Clause */
/* turnq: a loop iteration's send budget and the turns put off to the next one. See turnq.h. */
#include "turnq.h"

#include "util.h"

void turnq_init(struct turnq *q, uint64_t budget)
{
    ASSERT(budget > 0);
    TAILQ_INIT(&q->nodes);
    q->n = 0;
    q->budget = budget;
    q->sent = 0;
}

size_t turnq_new_iteration(struct turnq *q)
{
    q->sent = 0;
    return q->n;
}

bool turnq_take_turn(struct turnq *q, struct turnq_node *n, bool first_bytes)
{
    if (n->queued)
        return false; /* its place is kept: taken first in the next iteration */
    if (first_bytes || q->sent < q->budget)
        return true;
    TAILQ_INSERT_TAIL(&q->nodes, n, link);
    n->queued = true;
    q->n++;
    return false;
}

void turnq_sent(struct turnq *q, uint64_t bytes)
{
    q->sent += bytes;
}

void turnq_remove(struct turnq *q, struct turnq_node *n)
{
    if (!n->queued)
        return;
    TAILQ_REMOVE(&q->nodes, n, link);
    n->queued = false;
    ASSERT(q->n > 0);
    q->n--;
}

struct turnq_node *turnq_pop(struct turnq *q)
{
    struct turnq_node *n = TAILQ_FIRST(&q->nodes);
    if (n != NULL)
        turnq_remove(q, n);
    return n;
}
