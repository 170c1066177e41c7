/* SPDX-License-Identifier: BSD-2-Clause */
/* answer: an origin answer held whole to share among the waiters of one fill. See answer.h. */
#include "answer.h"

#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "util.h"

#define ANSWER_MAGIC 0xa45e4001u
#define ANSWER_FIRST_ROOM (16 * 1024) /* most uncacheable bodies (error pages) fit in this */

struct answer {
    unsigned magic;
    unsigned refs;
    char *head;          /* owns: the head bytes the spans of <resp> point into */
    struct h1_resp resp; /* the origin's head; framed by the body's length once complete */
    char *body;          /* owns: <len> body bytes, room for <room> */
    size_t len, room;    /* (room is what g_stats.answer_bytes counts for this answer) */
    size_t head_len;     /* bytes of <head> */
    size_t bound;        /* the body may not grow past it */
    bool complete;
    bool framed;      /* the origin's framing was not close-delimited */
    bool announced;   /* a head from it was sent (answer_announce) */
    size_t delivered; /* body bytes [0, delivered) reached a client */
};

static unsigned live_answers;

unsigned answer_live(void)
{
    return live_answers;
}

static size_t span_end(const struct h1_span *s)
{
    return (size_t)s->off + s->len;
}

struct answer *answer_new(const char *head, const struct h1_resp *resp, size_t bound)
{
    /* The spans are offsets into the head: copying up to the last one keeps them valid. */
    size_t n = span_end(&resp->reason);
    for (unsigned i = 0; i < resp->n_fields; i++) {
        size_t e = span_end(&resp->fields[i].name), v = span_end(&resp->fields[i].value);
        if (v > e)
            e = v;
        if (e > n)
            n = e;
    }
    struct answer *a = xcalloc(1, sizeof(*a));
    a->magic = ANSWER_MAGIC;
    a->refs = 1;
    a->head = xmalloc(n + 1);
    memcpy(a->head, head, n);
    a->head[n] = '\0';
    a->head_len = n + 1;
    a->resp = *resp;
    a->framed = resp->framing != H1_BODY_CLOSE;
    a->bound = bound;
    live_answers++;
    return a;
}

/* Makes room for <want> body bytes in all: the buffer doubles, within both bounds. */
static bool grow(struct answer *a, size_t want)
{
    size_t room = a->room > 0 ? a->room : ANSWER_FIRST_ROOM;
    while (room < want)
        room = room > a->bound / 2 ? a->bound : room * 2;
    if (room > a->bound)
        room = a->bound;
    if (g_stats.answer_bytes - a->room + room > ANSWER_BYTES_MAX)
        return false;
    char *p = realloc(a->body, room);
    if (p == NULL)
        return false; /* (a budgeted allocation: the caller gives the sharing up) */
    g_stats.answer_bytes += room - a->room;
    a->body = p;
    a->room = room;
    return true;
}

bool answer_append(struct answer *a, const char *data, size_t len)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    ASSERT(!a->complete);
    if (len > a->bound - a->len)
        return false;
    if (a->len + len > a->room && !grow(a, a->len + len))
        return false;
    if (len > 0)
        memcpy(a->body + a->len, data, len);
    a->len += len;
    return true;
}

void answer_end(struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    ASSERT(!a->complete);
    a->complete = true;
    if (a->resp.framing != H1_BODY_NONE) {
        a->resp.framing = H1_BODY_LENGTH;
        a->resp.content_length = a->len;
    }
    if (a->len == 0) {
        free(a->body);
        a->body = NULL;
        g_stats.answer_bytes -= a->room;
        a->room = 0;
    } else if (a->room > a->len) {
        char *p = realloc(a->body, a->len);
        if (p != NULL) {
            g_stats.answer_bytes -= a->room - a->len;
            a->body = p;
            a->room = a->len;
        }
    }
}

bool answer_complete(const struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    return a->complete;
}

bool answer_is_framed(const struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    return a->framed;
}

size_t answer_size(const struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    return sizeof(*a) + a->head_len + a->room;
}

bool answer_announce(struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    bool first = !a->announced;
    a->announced = true;
    return first;
}

bool answer_is_announced(const struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    return a->announced;
}

size_t answer_deliver(struct answer *a, size_t off, size_t len)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    ASSERT(off <= a->len && len <= a->len - off);
    size_t end = off + len;
    if (end <= a->delivered)
        return 0;
    size_t fresh = end - (off > a->delivered ? off : a->delivered);
    a->delivered = end;
    return fresh;
}

struct answer *answer_ref(struct answer *a)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    a->refs++;
    return a;
}

void answer_unref(struct answer **ap)
{
    struct answer *a = *ap;
    if (a == NULL)
        return;
    *ap = NULL;
    CHECK_OBJ(a, ANSWER_MAGIC);
    ASSERT(a->refs > 0);
    if (--a->refs > 0)
        return;
    g_stats.answer_bytes -= a->room;
    free(a->body);
    free(a->head);
    a->magic = 0;
    live_answers--;
    free(a);
}

const struct h1_resp *answer_head(const struct answer *a, const char **buf)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    *buf = a->head;
    return &a->resp;
}

const char *answer_body(const struct answer *a, size_t *len)
{
    CHECK_OBJ(a, ANSWER_MAGIC);
    *len = a->len;
    return a->body;
}
