/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fetch: fills one cache chunk from the origin. It resolves the origin (unless an override
 * address is configured), refuses private addresses without allow_private, sends
 * "GET path Range: bytes=a-b" built afresh (Host, User-Agent, the client's other fields a fill
 * forwards, Accept-Encoding: identity, X-LanCache-Processed-By: struct origin_req), checks the
 * answer (206 with the matching Content-Range, or one that ends early, whose rest is asked
 * next; or 200 from an origin without range support, whose body is skipped to the chunk), sets
 * the object's meta, commits body bytes into the chunk as they arrive and seals it. Redirects
 * (301/302/303/307/308) are followed here, at most FETCH_MAX_REDIRECTS hops (more: 502), each
 * target host checked like a client's (authority syntax, IP literals, the cache-domains lists
 * or allow_unlisted, private addresses), and the bytes are stored under the original key; a
 * target that fails the checks (or is https) fails the chunk with CHUNK_FAIL_PASS. Any other
 * status also fails it with CHUNK_FAIL_PASS: with the answer itself, read into memory (up to
 * 1 MiB, or the chunk size when larger), so that every reader waiting on the fill is answered
 * from that one origin request (cache_chunk_answer); a longer body (or a 206/416, which answers
 * the fill's own Range) without it, and its readers forward their own requests uncached. A
 * chunked 200 (an origin that ignores Range, without a length) is read the same way and,
 * complete within that bound, stored as the object.
 *
 * Fill policy is decided here and nowhere else: which bytes to ask the origin for and when (runs
 * of chunks, read-ahead and its cap, splitting a run for a reader waiting behind it, two-part
 * fills and their head parts, origins that ignore Range, resuming a cut answer). The client path
 * only says what it does: it starts the fill of a chunk its lookup missed (fetch_start_at), says
 * where it waits (fetch_want) and that it reads on (fetch_sequential); the cache hands its disk
 * misses here through the filler fetch_module_init() registers. The chunk size comes from the
 * cache.
 *
 * Lifecycle: fetch_start() (holds a chunk ref) -> RESOLVE -> WAIT_HEAD -> BODY (MEMORY while a
 * chunk waits for room; DRAIN_PASS / DRAIN_REDIRECT for a short answer read away) -> DONE: the
 * chunk is sealed or failed, the ref dropped, the fetch freed (the state table is in fetch.c).
 * Its log lines say "fetch#<id>"; at debug level, its transitions and "fetch#<id> up#<id>". It does
 * not depend on any client: a fetch whose readers all left still completes and is stored.
 * fetch_cancel_all() ends them at shutdown.
 */
#ifndef CACHEPARTY_FETCH_H
#define CACHEPARTY_FETCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "origin.h"

struct ev_loop;
struct resolver;
struct upool;
struct cache;
struct chunk;

/* The loop-wide context the fetches use; set once by main. */

struct fetch_ctx {
    struct ev_loop *loop;
    struct resolver *resolver;
    struct upool *upool;
    bool has_override;
    struct sockaddr_storage override_addr;
    struct cache *cache; /* the cache whose disk misses the fetches fill (may be NULL) */
};

#define FETCH_MAX_REDIRECTS 5

/* Sets the context (borrowed for the process's life) and registers as <cache>'s filler. */
void fetch_module_init(struct fetch_ctx *ctx);
/*
 * Starts filling <cks>[0..n) (FILLING, no meta yet, consecutive indices of one object) with one
 * upstream range request; the fetch takes a ref on each.
 */
void fetch_start(struct chunk **cks, size_t n, const struct origin_req *o);
/*
 * Starts filling one chunk (FILLING, nothing committed) for a reader that starts at byte <off>
 * of it. When <off> is FETCH_TWO_PART_MIN or more, the chunk is filled in two parts by two
 * upstream requests: one from <off> to the chunk's end, at once (the reader's first byte comes
 * one origin round trip after its request, not after the bytes before it have streamed by),
 * and the head part [0, off) once that request is answered, or as soon as a reader waits for a
 * byte before <off> (fetch_want; the chunk's waiters are woken when it becomes two-part, so
 * that those who came earlier ask too). So the origin gets the request a reader waits for
 * first, alone, and none for the head part when the first answer fails the chunk. Every byte is
 * still fetched once. Otherwise as fetch_start(&ck, 1, o).
 */
#define FETCH_TWO_PART_MIN (64 * 1024)
void fetch_start_at(struct chunk *ck, uint64_t off, const struct origin_req *o);
/*
 * A reader waits for byte <off> of <ck>, a chunk being filled: makes it come sooner when it can.
 * - Before the chunk's head part (fetch_start_at) is asked: it is asked now; or, when <off> is
 *   FETCH_TWO_PART_MIN or more into it and the chunk can take another part (CACHE_SPLITS_MAX),
 *   only the piece from <off> to the head part's end is, and the rest stays held back.
 * - <off> lies FETCH_TWO_PART_MIN or more past the next byte of a request not answered yet that
 *   is to bring it: that request is cut at <off>, and a new one asks from <off> to its end now.
 *   A request already out asked for more than it keeps: it is closed unanswered and asked again
 *   for the bytes it keeps (never twice for one byte), and so only when no other reader waits
 *   for one of those, and only when its origin has a connection slot free besides its own
 *   (otherwise both requests would wait behind others for one).
 * - Nothing of <ck> arrived yet and its run will not reach it for a while (while the run's
 *   bytes flow, FETCH_SPLIT_GAP chunks or more ahead of the one filling; before they flow, any
 *   chunk after the first): the run is cut before <ck> and a new fetch starts at <ck> for the
 *   rest, so the reader waits one origin round trip, not the run ahead of it. When <off> is deep
 *   enough, <ck> is filled in two parts (as fetch_start_at), the new fetch from <off> on.
 * Returns whether it started a request. It only starts requests (never calls back): <ck> is
 * still FILLING when it returns, so the reader can wait on it then.
 */
#define FETCH_SPLIT_GAP 2
bool fetch_want(struct chunk *ck, uint64_t off);

/*
 * A reader reads the object on from <ck> (its current chunk, taken filling) to object byte <end>
 * (inclusive), for a request to <o> (borrowed); <force> for ?nocache=. Read-ahead for a cold
 * object: when <ck> is being filled, starts up to [upstream] readahead parallel fetches (each one
 * range request for a run of up to CACHE_SPAN_MAX chunks) for the missing chunks after it, up to
 * <end>, so one download runs at several origin connections' speed; not for ?nocache=1, nor for
 * an origin that ignores ranges (the fetch running brings the whole object), nor while
 * FETCH_READAHEAD_MAX_FETCHES fetches or more run. Chunks fetched ahead are stored even if the
 * reader leaves: another will want them.
 */
#define FETCH_READAHEAD_MAX_FETCHES 32
void fetch_sequential(struct chunk *ck, uint64_t end, const struct origin_req *o, bool force);

/*
 * A reader of object <key>[0..key_len) (borrowed) of <cache> will read the chunks <idx>[0..n)
 * later, in that order, each after the one before (the first chunks of the next parts of a
 * multi-range answer): starts now the fills of those among the first [upstream] readahead of
 * them that are in neither tier nor in flight, one chunk each, so that the parts come in
 * parallel instead of one origin round trip after another. Not for <force> (?nocache=1), nor
 * for an origin that ignores ranges, nor while FETCH_READAHEAD_MAX_FETCHES fetches or more run.
 * Called again as the reader moves on, it keeps that many ahead of it. Fetches started here are
 * stored even if the reader leaves.
 */
void fetch_ahead(struct cache *cache, const char *key, size_t key_len, const uint64_t *idx,
                 size_t n, const struct origin_req *o, bool force);

/* Fails and frees every running fetch (shutdown). */
void fetch_cancel_all(void);
unsigned fetch_live(void);
/* The id of the fetch filling <ck> ("fetch#<id>" in the log), 0 when none. */
unsigned fetch_id_of(const struct chunk *ck);

/* One fetch in flight, as fetch_foreach() shows it (borrowed: valid during the call). */
struct fetch_info {
    unsigned id;
    const char *state; /* RESOLVE, WAIT_HEAD, BODY... */
    const char *host;  /* the origin's */
    const char *key;   /* the object: "identifier\npath" (NULL: not known any more) */
    size_t key_len;
    uint64_t first, pos, last; /* object bytes: asked from, next to come, last asked */
    uint64_t total;            /* the object's length (0: not known yet) */
    unsigned readers;          /* clients holding the chunks it still fills */
    double started_at;         /* ev_now() at its start */
    double byte_at;            /* ev_now() of its last body byte (started_at before the first) */
};
typedef void fetch_visit_fn(const struct fetch_info *fi, void *arg);
/* Calls <fn> for every fetch in flight, newest first. */
void fetch_foreach(fetch_visit_fn *fn, void *arg);

#endif
