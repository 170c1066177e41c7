/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * conn_int.h: struct conn, the responder interface and the service API shared by conn.c (the
 * connection state machine, I/O, timers, keep-alive, local responses, the access log) and its
 * two responders, conn_pass.c (forwarded uncached) and conn_cache.c (served from the chunk
 * cache). Private to them and their unit tests.
 */
#ifndef CACHEPARTY_CONN_INT_H
#define CACHEPARTY_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

#include "admit.h"
#include "buf.h"
#include "cache.h"
#include "chunkfile.h"
#include "conn.h"
#include "forward.h"
#include "http1.h"
#include "turnq.h"

struct answer;
struct conn_parts;
struct resolver_query;
struct upstream;

#define CONN_MAGIC 0xc0cc0cc0u
#define CONN_INBUF (H1_MAX_HEAD + 4096)
#define CONN_OUTBUF (64 * 1024)
#define CONN_UPHEAD (H1_MAX_HEAD + 1024) /* upstream request head scratch */
#define CONN_SEND_TURN (1024 * 1024) /* cached bytes one client sends per loop turn (fairness) */
/* Body bytes one loop iteration sends before responses already under way wait for the next one
 * (turnq.h): about 1 ms of sends on the bench host, so that a request or an origin's answer that
 * arrives meanwhile is not held behind a turn of every other client. */
#define CONN_LOOP_SEND (4 * 1024 * 1024)
/* Chunk-memory bytes given to one send(). Within one call the kernel queues the data as segments
 * of up to 64 KiB (loopback, TSO) and, after 16 new segments, processes the ACKs that arrived
 * meanwhile before it goes on; a 1 MiB send always crossed that point, and the warm `big` bench
 * then cost the proxy core 1.8x the CPU per byte (bench/README.md, "Warm big"). 15 segments'
 * worth per call stays under it. */
#define CONN_SEND_MAX (15 * 64 * 1024)
/* Chunk-memory bytes go to a client by reference (sendfile from the chunk memory file, see
 * chunkmem.h) rather than copied, in a turn whose first send of chunk memory in that file finds the
 * client's socket still holding at least this many bytes not acknowledged yet (SIOCOUTQ: not sent,
 * or in flight; on a long fast path a client that keeps up can pass it too, at no cost). A client
 * that far behind leaves what we send waiting in the kernel: a copy would cost the proxy a copy
 * into memory nobody touches soon (cold coalesced downloads, whose readers lag) and keep the bytes
 * twice. Clients that keep up get copies: on loopback, references for every send made warm hits
 * slower where the receiving side was the limit (bench/README.md, "Issue 21"). Decided once per
 * turn; malloc'd chunk memory (chunkmem.h) is always copied. */
#define CONN_BYREF_QUEUE (512 * 1024)
/* Lingering close (as nginx's): after a response that closes the connection, our side is shut
 * down and what the client still sends is read and dropped for at most this long / this much, so
 * that unread request bytes do not make the kernel answer with a reset that destroys the
 * response before the client reads it. */
#define CONN_LINGER_S 2.0
#define CONN_LINGER_MAX (256 * 1024)

/* The states (conn.c's table says what each waits for; RESOLVE..STREAM belong to the pass
 * responder, CACHE_HEAD and CACHE_BODY to the cache responder, SHARE to the share responder). */
#define CONN_STATES(X)                                                                             \
    X(CONN_S_READ_HEAD)                                                                            \
    X(CONN_S_RESOLVE)                                                                              \
    X(CONN_S_UPSTREAM)                                                                             \
    X(CONN_S_STREAM)                                                                               \
    X(CONN_S_CACHE_HEAD)                                                                           \
    X(CONN_S_CACHE_BODY)                                                                           \
    X(CONN_S_SHARE)                                                                                \
    X(CONN_S_FLUSH)                                                                                \
    X(CONN_S_LINGER)                                                                               \
    X(CONN_S_CLOSING)

enum conn_state {
#define CONN_SX(s) s,
    CONN_STATES(CONN_SX)
#undef CONN_SX
};

struct conn {
    unsigned magic;
    unsigned id;
    enum conn_state state;
    struct conn_ctx *ctx; /* borrows */
    int fd;               /* owns */
    ev_io io;
    unsigned io_events;
    ev_timer timer;
    ev_tstamp deadline;   /* when the timer should act; 0 = none */
    bool deadline_send;   /* the deadline is send_timeout's (bytes the client does not take) */
    ev_tstamp idle_since; /* READ_HEAD with nothing buffered: since when */
    ev_tstamp head_since; /* READ_HEAD with a partial head: since the first byte */
    ev_tstamp last_write; /* last time the client took bytes */
    size_t lingered;      /* CONN_S_LINGER: bytes read and dropped */
    bool peer_fin;        /* the client's EOF was read (peer_eof is also set to stop reading) */
    char peer[64];
    char peer_ip[48];
    struct sockaddr_storage peer_sa; /* the client's address */
    struct conn *next, **pprev;      /* all live conns */
    struct conn *reap_next;
    struct conn *kick_next;
    bool kicked;
    struct turnq_node turn; /* put off to the next loop iteration (conn_take_turn) */
    struct buf in;          /* owns */
    struct buf out;         /* owns; allocated while a response is in progress or pending */
    bool peer_eof;
    bool draining; /* shutdown: close after the current response */
    unsigned served;

    /* The current request. */
    char *req_head; /* owns: copy of the head that the spans of <req> point into */
    struct h1_req req;
    struct h1_authority auth;
    struct admit_result adm; /* the request's admission (its identifier may point into it) */
    const char *ident;       /* cache identifier: adm.ident (see admit.h) */
    bool head_req;
    bool keep_alive; /* keep the connection after this response */
    bool bypass;     /* forwarded uncached: a bypass rule or Authorization (BYPASS) */
    bool hide_etag;  /* a hide_etag rule: the origin's ETag is neither stored nor sent */
    const struct cfg_rule *rule; /* the [rules] rule that applies (borrowed from g_cfg), or NULL */
    /* A revalidate rule (conn_pass.c, "Revalidation"): the stored copy is served only after the
     * origin was asked with its validators. */
    bool reval;               /* the rule applies to this request */
    bool reval_done;          /* the origin was asked (or need not be): serve what is stored */
    bool reval_pending;       /* the pass path's request is the conditional one */
    const char *reval_status; /* "REVALIDATED" | "STALE" for the answer and the log; NULL */
    int reval_upstream;       /* the origin's status for it (X-Upstream-Status); 0: none */
    char reval_etag[CHUNKFILE_ETAG_MAX + 1]; /* the stored validators it sends */
    char reval_lm[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    unsigned from_peer; /* a cluster node's request (its credential held): 1 + its index; 0 */
    bool proxied;       /* went (or was going) upstream: has an identifier */
    bool logged;        /* the access log line is written */
    bool local_resp;    /* answered by the proxy itself (cache status "-") */
    int status;
    enum fwd_body body; /* pass: framing towards the client */
    uint64_t body_bytes;
    uint64_t hit_bytes;                /* of them, hits (per byte, as response_bytes_total) */
    uint64_t live_bytes, live_hit;     /* of those, already handed to live (conn_live_account) */
    const struct conn_responder *resp; /* answering the current request; NULL: none (yet) */

    /* The pass-through path (conn_pass.c). */
    struct resolver_query *rq; /* owns while RESOLVE */
    struct upstream *up;       /* owns while UPSTREAM/STREAM */

    /* The cache path (conn_cache.c). */
    bool cached;         /* served from the chunk cache */
    bool force;          /* ?nocache= other than empty or 0: refetch and re-store (BYPASS) */
    uint64_t refetch_id; /* with force: this request's cache_refetch_id */
    bool first_miss;     /* this request started the fetch of its first chunk */
    bool sent_new;       /* an object byte it sent was that byte's first delivery: a MISS */
    bool sent_bytes;     /* it sent object bytes (else first_miss says MISS or HIT) */
    bool ra_pending;     /* the current chunk was filling when taken: read ahead once it fetches */
    bool ck_created;     /* get_chunk started a fill or disk lookup of the current chunk */
    bool blocked_write;  /* the socket took less than offered: wait for EV_WRITE */
    char *objkey;        /* owns: "identifier\npath" */
    size_t objkey_len;
    char *chain;       /* owns: the X-LanCache-Processed-By fields joined, when several */
    char *fill_fields; /* owns: the fields a fill forwards (fwd_fill_fields), once made */
    size_t fill_fields_len;
    struct chunk *ck;        /* ref: the chunk being sent or waited for */
    struct chunk_waiter ckw; /* waiting on ck */
    struct cache_meta sent;  /* the version the response head promised */
    uint64_t pos;            /* next object byte to send */
    uint64_t end;            /* last object byte to send (inclusive) */
    struct conn_parts *mp;   /* owns: a multipart answer's parts (pos, end: the current one) */

    /* The shared-answer path (conn_share.c). */
    struct answer *shared; /* ref: the fill's uncacheable answer this request is answered from */
    bool shared_force;     /* the request was a refetch (?nocache=): its answer says BYPASS */
    struct objhead *shared_head; /* ref: when <shared> is a kept fresh answer (anstore.h), its
                                    Date and times; NULL: the answer of the fill it waited on */
};

extern const char *const conn_state_names[];

/*
 * A way of answering an admitted request. conn.c calls begin() once the request is handed to it,
 * step() from the driver in the responder's states (CONN_STATES above) and whenever the driver
 * runs (after I/O, a kick), and reset() once the request ends, however it ends (response done,
 * local response, cut, hand-over, close). A responder moves the request on with the service
 * API below; it ends it with conn_response_done(), conn_local_response(), conn_response_cut()
 * or conn_close(). A third way of answering is a new responder (its own file and states), not
 * a new branch in conn.c.
 */
struct conn_responder {
    const char *name;
    /* Takes the current request: sets the responder's first state and starts its work. */
    void (*begin)(struct conn *c);
    /* One step in the responder's states; true if it made progress (the driver steps again). */
    bool (*step)(struct conn *c);
    /* Drops the responder's state of the current request (watchers, queries, refs). */
    void (*reset)(struct conn *c);
};

extern const struct conn_responder conn_pass_responder;  /* conn_pass.c */
extern const struct conn_responder conn_cache_responder; /* conn_cache.c */
extern const struct conn_responder conn_share_responder; /* conn_share.c */

/* ---- the service API of conn.c, for the responders ---- */

/* The one setter of c->state: asserts that the transition is legal, logs it at debug level. */
void conn_set_state(struct conn *c, enum conn_state st);
void conn_close(struct conn *c);
/* Steps while progress is made, writes what is queued, recomputes interest and timer. */
void conn_drive(struct conn *c);
/* Watcher interest and the timer, recomputed from the state and buffers (after a responder
 * changed <out> from a callback of its own, outside the driver). */
void conn_update_io(struct conn *c);
void conn_update_timer(struct conn *c);
/* Our Date (RFC 9110 §6.6.1) for an answer made now: an IMF-fixdate, static storage, the same
 * string within one second. */
const char *conn_date(const struct conn *c);
/* The X-LanCache-Processed-By value of this request's response: our hostname, then the
 * request's own X-LanCache-Processed-By after a comma when it had one (as monolithic's
 * "$hostname,$http_x_lancache_processed_by"; an incoming chain longer than 1 KiB is left out).
 * A static buffer, valid until the next call. */
const char *conn_processed_by(const struct conn *c);
/* Queues a proxy-made response (with our Date) and finishes the request. */
void conn_local_response(struct conn *c, int status, bool close_after, const char *extra);
/* The response is fully queued: next request, or close once flushed. */
void conn_response_done(struct conn *c);
/* The response was cut short after its head went out: log it, close once <out> is written. */
void conn_response_cut(struct conn *c);
/* The current responder gives the request to <to> (reset, then to->begin): the cache path
 * forwards an answer it cannot cache through the pass path. */
void conn_hand_over(struct conn *c, const struct conn_responder *to);
void conn_out_ensure(struct conn *c);
/* Takes a turn of cached or shared body bytes for <c> in this loop iteration (turnq.h): true for
 * a response's first bytes, and while the iteration's CONN_LOOP_SEND lasts. Otherwise <c> is put
 * off (counted in send_turns_put_off) and the reaper drives it first in the next iteration, not
 * EV_WRITE: the caller returns without sending (and without blocked_write). */
bool conn_take_turn(struct conn *c);
/* Counts <n> body bytes sent in this iteration. */
void conn_turn_sent(uint64_t n);
/* Hands the body bytes sent since the last call to live (per service and client): at the end
 * of each request, and every CONN_LIVE_STEP bytes of a long one (<all>: whatever the amount). */
#define CONN_LIVE_STEP (8u << 20)
void conn_live_account(struct conn *c, bool all);
/* Counts body bytes sent (cacheparty_response_bytes_total{cache}): not a peer's request's,
 * whose bytes its node counts for its client (and the peers module as served to it). */
void conn_count_bytes(const struct conn *c, uint64_t miss, uint64_t hit, uint64_t bypass);

/* conn_cache.c: conn_cache_responder's functions. */
/* Starts serving the current request from the cache. */
void conn_cache_begin(struct conn *c);
/* One step in CONN_S_CACHE_HEAD / CONN_S_CACHE_BODY; true if it made progress. */
bool conn_cache_step(struct conn *c);
/* Drops the cache path's state of the current request. */
void conn_cache_reset(struct conn *c);
/* Whether the request served from the cache counts as a MISS (its access log line): one of its
 * bytes was a first delivery, or, when it sent none, it started the fill it looked up. */
bool conn_cache_is_miss(const struct conn *c);

#endif
