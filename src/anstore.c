/* SPDX-License-Identifier: BSD-2-Clause */
/* anstore: fresh answers that are not objects, kept while fresh. See anstore.h. */
#include "anstore.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <xxhash.h>

#include "answer.h"
#include "freshness.h"
#include "http1.h"
#include "objhead.h"
#include "util.h"

#define ANSTORE_MAGIC 0xa5707e01u
#define ANSTORE_FIRST_BUCKETS 64u

struct entry {
    struct entry *hnext;    /* the bucket's chain */
    TAILQ_ENTRY(entry) lru; /* the LRU list: head most recently used */
    uint64_t hash;
    struct answer *ans;   /* ref */
    struct objhead *head; /* ref: Date and times (Age) */
    int64_t lifetime;     /* seconds, at most ANSTORE_LIFETIME_MAX */
    size_t bytes;         /* what it counts against the limit */
    size_t key_len, auth_len;
    char key[]; /* owns: the key, then the authority */
};

struct anstore {
    unsigned magic;
    size_t limit, bytes;
    unsigned count;
    size_t n_buckets;                  /* a power of two */
    struct entry **buckets;            /* owns the entries */
    TAILQ_HEAD(entry_list, entry) lru; /* borrows */
};

struct anstore *anstore_new(size_t limit)
{
    struct anstore *s = xcalloc(1, sizeof(*s));
    s->magic = ANSTORE_MAGIC;
    s->limit = limit;
    s->n_buckets = ANSTORE_FIRST_BUCKETS;
    s->buckets = xcalloc(s->n_buckets, sizeof(*s->buckets));
    TAILQ_INIT(&s->lru);
    return s;
}

static uint64_t key_hash(const char *key, size_t len)
{
    return XXH3_64bits(key, len);
}

static bool key_is(const struct entry *e, uint64_t h, const char *key, size_t len)
{
    return e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0;
}

/* The slot of the entry for <key> and <auth>, or of the NULL at the end of its bucket. */
static struct entry **slot_of(struct anstore *s, const char *key, size_t len, const char *auth,
                              size_t alen, uint64_t h)
{
    struct entry **pp = &s->buckets[h & (s->n_buckets - 1)];
    while (*pp != NULL && !(key_is(*pp, h, key, len) && (*pp)->auth_len == alen &&
                            memcmp((*pp)->key + len, auth, alen) == 0))
        pp = &(*pp)->hnext;
    return pp;
}

/* Removes the entry at *<pp> (a bucket slot) and frees it. */
static void remove_at(struct anstore *s, struct entry **pp)
{
    struct entry *e = *pp;
    *pp = e->hnext;
    TAILQ_REMOVE(&s->lru, e, lru);
    s->bytes -= e->bytes;
    s->count--;
    answer_unref(&e->ans);
    objhead_unref(&e->head);
    free(e);
}

static void remove_entry(struct anstore *s, struct entry *e)
{
    struct entry **pp = slot_of(s, e->key, e->key_len, e->key + e->key_len, e->auth_len, e->hash);
    ASSERT(*pp == e);
    remove_at(s, pp);
}

/* Drops least recently used entries until <extra> more bytes fit. */
static void shrink_to(struct anstore *s, size_t extra)
{
    while (!TAILQ_EMPTY(&s->lru) && s->bytes + extra > s->limit)
        remove_entry(s, TAILQ_LAST(&s->lru, entry_list));
}

static void grow_buckets(struct anstore *s)
{
    size_t n = s->n_buckets * 2;
    struct entry **b = xcalloc(n, sizeof(*b));
    for (size_t i = 0; i < s->n_buckets; i++) {
        struct entry *e = s->buckets[i];
        while (e != NULL) {
            struct entry *next = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = n;
}

void anstore_free(struct anstore **sp)
{
    struct anstore *s = *sp;
    if (s == NULL)
        return;
    *sp = NULL;
    CHECK_OBJ(s, ANSTORE_MAGIC);
    while (!TAILQ_EMPTY(&s->lru))
        remove_entry(s, TAILQ_FIRST(&s->lru));
    free(s->buckets);
    s->magic = 0;
    free(s);
}

void anstore_set_limit(struct anstore *s, size_t limit)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    s->limit = limit;
    shrink_to(s, 0);
}

void anstore_drop(struct anstore *s, const char *key, size_t len)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    if (s->count == 0)
        return;
    uint64_t h = key_hash(key, len);
    struct entry **pp = &s->buckets[h & (s->n_buckets - 1)];
    while (*pp != NULL) {
        if (key_is(*pp, h, key, len))
            remove_at(s, pp); /* (every authority's entry for the object) */
        else
            pp = &(*pp)->hnext;
    }
}

/* Whether the head <buf>/<resp> of a complete answer may be kept (anstore.h's rules, but for
 * the lifetime). */
static bool keepable(const char *buf, const struct h1_resp *resp, const struct freshness_cc *cc)
{
    int st = resp->status;
    if (st < 200 || st == 200 || st == 206 || st == 304 || st > 599)
        return false;
    if (cc->no_store || cc->no_cache || cc->private_)
        return false;
    if (cc->must_understand && !freshness_status_is_understood(st))
        return false;
    return h1_find(buf, resp->fields, resp->n_fields, "Vary") == NULL &&
           h1_find(buf, resp->fields, resp->n_fields, "Set-Cookie") == NULL;
}

bool anstore_put(struct anstore *s, const char *key, size_t len, const char *auth, struct answer *a,
                 double request_time, double response_time)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    size_t alen = strlen(auth);
    uint64_t h = key_hash(key, len);
    struct entry **old = slot_of(s, key, len, auth, alen, h);
    if (*old != NULL)
        remove_at(s, old);
    if (!answer_complete(a) || !answer_is_framed(a))
        return false;
    size_t body_len;
    (void)answer_body(a, &body_len);
    const char *buf;
    const struct h1_resp *resp = answer_head(a, &buf);
    struct freshness_cc cc;
    freshness_cc_parse(buf, resp, &cc);
    if (body_len > ANSTORE_BODY_MAX || !keepable(buf, resp, &cc))
        return false;
    struct objhead *head;
    if (objhead_from_response(buf, resp, request_time, response_time, &head) < 0)
        return false; /* (fields past OBJHEAD_FIELDS_MAX: not kept) */
    int64_t now = (int64_t)response_time;
    int64_t life = freshness_lifetime(buf, resp, &cc, head->date_value, now);
    if (life > ANSTORE_LIFETIME_MAX)
        life = ANSTORE_LIFETIME_MAX;
    size_t bytes = sizeof(struct entry) + len + alen + answer_size(a) + sizeof(*head) + head->len;
    if (life <= objhead_age(head, now) || bytes > s->limit) {
        objhead_unref(&head);
        return false; /* no explicit lifetime, stale already, or larger than the whole store */
    }
    shrink_to(s, bytes);
    if (s->count >= s->n_buckets)
        grow_buckets(s);
    struct entry *e = xcalloc(1, sizeof(*e) + len + alen);
    e->hash = h;
    e->ans = answer_ref(a);
    e->head = head;
    e->lifetime = life;
    e->bytes = bytes;
    e->key_len = len;
    e->auth_len = alen;
    memcpy(e->key, key, len);
    memcpy(e->key + len, auth, alen);
    struct entry **pp = slot_of(s, key, len, auth, alen, h);
    ASSERT(*pp == NULL);
    *pp = e;
    TAILQ_INSERT_HEAD(&s->lru, e, lru);
    s->bytes += bytes;
    s->count++;
    return true;
}

bool anstore_get(struct anstore *s, const char *key, size_t len, const char *auth, int64_t now,
                 struct anstore_hit *hit)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    if (s->count == 0)
        return false;
    struct entry **pp = slot_of(s, key, len, auth, strlen(auth), key_hash(key, len));
    struct entry *e = *pp;
    if (e == NULL)
        return false;
    int64_t age = objhead_age(e->head, now);
    if (age >= e->lifetime) {
        remove_at(s, pp); /* stale: the next request goes to the origin */
        return false;
    }
    TAILQ_REMOVE(&s->lru, e, lru);
    TAILQ_INSERT_HEAD(&s->lru, e, lru);
    hit->ans = e->ans;
    hit->head = e->head;
    hit->age = age;
    return true;
}

unsigned anstore_count(const struct anstore *s)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    return s->count;
}

size_t anstore_bytes(const struct anstore *s)
{
    CHECK_OBJ(s, ANSTORE_MAGIC);
    return s->bytes;
}
