/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * anstore: the origin's fresh answers that are not objects. A fill's answer that the chunk cache
 * does not store (a 404, a 410, a 5xx, a redirect not followed, a 204...) is delivered to the
 * readers of that fill (answer.h, conn_share.c); when the origin gave it an explicit freshness
 * lifetime, it is also kept here and reused for later requests of the same object (cache key)
 * until it is stale, as RFC 9111 allows a shared cache. An answer belongs to its target URI
 * (RFC 9111 §4): it is kept per object and authority (the Host the fill sent: the hosts of one
 * service share objects, not error answers), and the callers keep and look up only requests
 * without a query, answered without a redirect followed. Pure: no I/O, no ev.h, no clock (callers
 * pass times, in seconds since the epoch).
 *
 * Kept (anstore_put), all of:
 *   - a complete answer whose body the origin framed (never a close-delimited one) and of at most
 *     ANSTORE_BODY_MAX bytes, with a status that is final and not 200, 206 or 304 (objects are the
 *     chunk cache's, and what is not storable as one, such as a 200 of unknown length, is not
 *     kept here either);
 *   - Cache-Control without no-store, no-cache or private (with or without field names), nor
 *     must-understand on a status freshness_status_is_understood does not know;
 *   - no Vary (the cache key has no room for the request fields it names) and no Set-Cookie (a
 *     personal field);
 *   - an explicit freshness lifetime (freshness_lifetime: s-maxage, max-age, Expires) longer than
 *     the answer's age when it arrived; lifetimes count at most ANSTORE_LIFETIME_MAX.
 * Reused (anstore_get) while its current age (RFC 9111 §4.2.3, from the origin's Date and Age and
 * the request's delay) is below its lifetime; a stale entry is dropped when looked up.
 *
 * Bounds: entries (their key, the answer, the stored Date and times) take at most <limit> bytes
 * together, the least recently used going first; a limit of 0 keeps nothing. A new answer for a
 * key replaces the old one.
 *
 * Ownership: the store holds a ref on each answer and objhead it keeps. anstore_get lends them
 * (valid until the store is next called): callers take refs of their own.
 */
#ifndef CACHEPARTY_ANSTORE_H
#define CACHEPARTY_ANSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct answer;
struct objhead;
struct anstore;

#define ANSTORE_BODY_MAX (64u * 1024u)     /* body bytes of one kept answer */
#define ANSTORE_LIFETIME_MAX (24ll * 3600) /* seconds a kept answer is reused at most */

struct anstore_hit {
    struct answer *ans;   /* borrowed */
    struct objhead *head; /* borrowed: its Date (the origin's, else when received) and
                             what its Age is computed from (objhead_age) */
    int64_t age;          /* its current age at the lookup's <now> */
};

struct anstore *anstore_new(size_t limit);
void anstore_free(struct anstore **s);
/* A new byte limit (a reload): entries over it are dropped, least recently used first. */
void anstore_set_limit(struct anstore *s, size_t limit);

/*
 * Keeps the complete answer <a> (a ref is taken) for cache key <key>[0..len) and authority <auth>
 * (NUL-terminated) when the rules above allow, for a request sent at <request_time> and answered
 * at <response_time>. An entry for the key and authority is dropped in any case (the origin's
 * latest answer replaces it). Returns whether <a> was kept.
 */
bool anstore_put(struct anstore *s, const char *key, size_t len, const char *auth, struct answer *a,
                 double request_time, double response_time);
/* A fresh answer for <key>[0..len) and <auth> at <now> into *hit (borrowed); false when none. */
bool anstore_get(struct anstore *s, const char *key, size_t len, const char *auth, int64_t now,
                 struct anstore_hit *hit);
/* Drops the entries for <key>[0..len), every authority's (a purge, a refetch, a new object
 * version). */
void anstore_drop(struct anstore *s, const char *key, size_t len);

unsigned anstore_count(const struct anstore *s);
size_t anstore_bytes(const struct anstore *s);

#endif
