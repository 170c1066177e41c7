/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * answer: one origin answer held whole in memory, so that every client waiting on the fill that
 * got it is answered from it (the fill's answer could not be cached: a 404, a 5xx, a redirect not
 * followed, a 200 of unknown length...) instead of each sending its request again. Pure: no I/O,
 * no ev.h.
 *
 * It holds a copy of the origin's response head (the parsed fields point into the copy) and the
 * body bytes as they arrive, up to a bound given at creation; answer_end() marks the body
 * complete and turns its framing into a Content-Length of the bytes read (the answer is
 * forwarded with that exact length, whatever the origin's framing was). The body buffer grows as
 * bytes come; every live answer's buffer is counted in g_stats.answer_bytes, and all of them
 * together stay within ANSWER_BYTES_MAX: an append that would pass either bound fails (nothing is
 * appended) and the caller gives the sharing up.
 *
 * Ownership: refcounted. answer_new() returns the caller's ref; answer_ref()/answer_unref() (which
 * clears the pointer and frees at zero). Readers only read a complete answer, which no longer
 * changes.
 */
#ifndef CACHEPARTY_ANSWER_H
#define CACHEPARTY_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

struct answer;

/* What all the answers of the process may hold together (their body buffers). */
#define ANSWER_BYTES_MAX (64ull * 1024 * 1024)

/*
 * A new answer for the origin head at <head>, parsed into <resp> (spans into <head>; both
 * borrowed, copied), whose body may grow to <bound> bytes. Never NULL (the head is small: it
 * aborts only when even that cannot be allocated).
 */
struct answer *answer_new(const char *head, const struct h1_resp *resp, size_t bound);
/* Appends body bytes <data>[0..len) (borrowed). False when they would pass the answer's bound or
 * ANSWER_BYTES_MAX, or memory runs out: then nothing was appended. Not after answer_end(). */
bool answer_append(struct answer *a, const char *data, size_t len);
/* The body is complete: the head now frames it by its length (unless it has no body at all:
 * 1xx, 204, 304), and the spare room of the buffer is returned. */
void answer_end(struct answer *a);
bool answer_complete(const struct answer *a);
/* Whether the origin framed the body (a length, chunked, or none at all): a close-delimited body's
 * end cannot be told from a cut connection. */
bool answer_is_framed(const struct answer *a);
/* The memory the answer holds (its head copy and body buffer). */
size_t answer_size(const struct answer *a);

/*
 * Hit and miss per byte, as for objects (cache.h): the answer came from the origin once, so its
 * first delivery to any client is the miss and every later one a hit. answer_announce() is for a
 * client's head: true (MISS) for the first head sent from the answer, false (HIT) after;
 * answer_is_announced() only tells (for a HEAD, which delivers no byte). answer_deliver() records
 * that body bytes [off, off + len) reached a client and returns how many of them no client had had
 * before (clients send an answer from its start, so the bytes delivered are one run from 0).
 */
bool answer_announce(struct answer *a);
bool answer_is_announced(const struct answer *a);
size_t answer_deliver(struct answer *a, size_t off, size_t len);

struct answer *answer_ref(struct answer *a);
void answer_unref(struct answer **a);

/* The head: *<buf> receives the bytes the spans of the result point into (borrowed while a ref
 * is held). */
const struct h1_resp *answer_head(const struct answer *a, const char **buf);
/* The body bytes so far (all of them once complete), borrowed while a ref is held. */
const char *answer_body(const struct answer *a, size_t *len);

/* Live answers (leak checks at exit). */
unsigned answer_live(void);

#endif
