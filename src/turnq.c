/* SPDX-License-Identifier: BSD-2-Clause */
/* turnq: a loop iteration's send budget and the turns put off to the next one. See turnq.h. */
#include "turnq.h"

#include "util.h"

void turnq_init(struct turnq *q, uint64_t budget)
{
    ASSERT(budget > 0);
    q->head = q->tail = NULL;
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
    n->next = NULL;
    n->prev = q->tail;
    if (q->tail != NULL)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
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
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        q->head = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    else
        q->tail = n->prev;
    n->next = n->prev = NULL;
    n->queued = false;
    ASSERT(q->n > 0);
    q->n--;
}

struct turnq_node *turnq_pop(struct turnq *q)
{
    struct turnq_node *n = q->head;
    if (n != NULL)
        turnq_remove(q, n);
    return n;
}
