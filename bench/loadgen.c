/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * loadgen: the benchmark's load generator. One process, one libev loop, N clients, each on its
 * own HTTP/1.1 keep-alive connection with one request outstanding at a time (a closed loop).
 *
 * All clients connect first; when every connection is up (the barrier) they send their first
 * request at the same loop iteration. Per request it records the time the request was sent, the
 * time the first body byte arrived (TTFB) and the time the last body byte arrived, and it checks
 * the status, Content-Length, Content-Range and every body byte against bench/pattern.h. With
 * -v sample it checks the first 64 KiB of every MiB and the last 64 KiB of every body, and drops
 * the other bytes in the kernel (recv MSG_TRUNC) where it can. A failed request closes the
 * connection; the client reconnects and goes on with its next request.
 *
 * Scenarios (-s): big (one object of -B bytes for every client), chunks (the same -k objects of -K
 * bytes, each client in its own seeded random order) and ranges (one object of -A bytes, cut by
 * each client into seeded random pieces of 64 KiB..4 MiB at unaligned offsets and read in a seeded
 * random order as Range requests; every 206 and Content-Range is checked).
 *
 * -f T0_NS (first-hit mode): one client retries connecting every 5 ms and requests the cached
 * chunks in order until a response says X-Upstream-Cache-Status: HIT; it prints the times since
 * T0 (epoch nanoseconds, taken by the harness just before it restarted the proxy).
 *
 * TTFB runs from the request's write, done as soon as the request is made (client_send), to the
 * kernel's arrival time of the first body byte (SO_TIMESTAMPNS), not the time this loop got round
 * to reading it: a loadgen busy verifying other clients' bytes does not inflate it, and
 * a proxy that keeps it busy is not charged for that. Until a response's first body byte is seen,
 * reads are small (LG_FIRST_READ), so that the stamp is that of the first bytes. Without a stamp
 * (never on Linux TCP) the time of the read is used.
 *
 * Output: one line of key=value pairs on stdout (see bench/README.md); diagnostics on stderr.
 * Every loop is bounded: the phase ends at -T seconds at the latest (unfinished requests fail).
 */
#include "pattern.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#define LG_RBUF (256 * 1024)
#define LG_FIRST_READ 4096 /* bytes per read until a response's first body byte is in */
#define LG_HEAD_MAX (32 * 1024)
#define LG_SAMPLE_PERIOD (1024 * 1024)
#define LG_SAMPLE_WIN (64 * 1024)
#define LG_IDLE_TIMEOUT 30.0
#define LG_MAX_RECONNECTS 50
#define LG_RANGE_MIN (64 * 1024)
#define LG_RANGE_MAX (4 * 1024 * 1024)

enum lg_state {
    LG_S_CONNECTING, /* non-blocking connect in progress */
    LG_S_BARRIER,    /* connected, waiting for the others */
    LG_S_RETRY,      /* waiting before a reconnect */
    LG_S_SEND,       /* writing the request */
    LG_S_HEAD,       /* reading the response head */
    LG_S_BODY,       /* Content-Length body */
    LG_S_BODY_EOF,   /* close-delimited body */
    LG_S_CHUNK_SIZE, /* chunked: size line */
    LG_S_CHUNK_DATA, /* chunked: data */
    LG_S_CHUNK_CRLF, /* chunked: CRLF after data */
    LG_S_TRAILER,    /* chunked: trailer lines */
    LG_S_DONE,       /* no more requests */
};

struct lg_req {
    uint32_t obj;   /* index into g_objs */
    bool range;     /* send Range: bytes=first-last */
    uint64_t first; /* object offset of the first body byte */
    uint64_t last;  /* inclusive */
    double ttfb;    /* seconds, request sent -> first body byte */
    double lat;     /* seconds, request sent -> last body byte */
    double t_done;  /* seconds since the barrier */
    uint64_t bytes; /* body bytes received */
    bool done;      /* completed (ok or failed) */
    bool ok;        /* completed and verified */
    bool hit;       /* X-Upstream-Cache-Status: HIT */
};

struct lg_obj {
    char path[128];
    uint64_t size;
    uint64_t seed;
};

struct client {
    ev_io io;       /* interest set only by client_rearm() */
    ev_timer timer; /* idle timeout, or reconnect delay */
    int id;
    int fd;
    enum lg_state state;
    struct lg_req *reqs; /* owns */
    size_t nreq;
    size_t cur; /* index of the request in progress (or next) */
    int reconnects;
    char req_text[512];
    size_t req_len;
    size_t req_off;
    uint8_t *rbuf; /* owns, LG_RBUF bytes: received, unconsumed [rpos, rlen) */
    size_t rpos;
    size_t rlen;
    double t_sent;
    double t_rx; /* when the bytes of the last read arrived (monotonic, from the kernel's stamp) */
    bool got_first;
    bool conn_close;
    bool hit;
    uint64_t expect_len; /* body length the request asks for */
    uint64_t body_got;
    uint64_t chunk_left;
    uint64_t seed;
    uint64_t obj_off; /* object offset of body byte 0 */
};

struct lg_cfg {
    const char *target_name;
    const char *scenario;
    const char *phase;
    const char *host; /* Host header value */
    struct sockaddr_in addr;
    int clients;
    uint64_t big_size;
    int nchunks;
    uint64_t chunk_size;
    uint64_t archive_size;
    uint64_t seed;
    bool sample;
    double deadline;
    bool firsthit;
    int64_t t0_ns;
    const char *prefix;
};

static struct lg_cfg g_cfg;
static struct pat_table g_pat;
static struct lg_obj *g_objs;
static size_t g_nobjs;
static struct client *g_clients;
static struct ev_loop *g_loop;
static double g_t_start; /* barrier release, monotonic seconds */
static bool g_released;
static int g_pending; /* clients not yet at the barrier */
static int g_active;  /* clients not yet DONE */
static uint64_t g_verified_bytes;
static uint64_t g_skipped_bytes; /* sample mode: discarded unread */
static uint8_t g_discard[LG_SAMPLE_PERIOD];
static uint64_t g_reconnects;
static char g_first_error[512];
static double g_first_ok_at = -1;  /* firsthit: epoch seconds since t0 */
static double g_first_hit_at = -1; /* firsthit */
static int g_hit_attempts;
static bool g_deadline_hit;

static void client_rearm(struct client *c);
static void client_next(struct client *c);
static void client_connect(struct client *c);

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xcalloc(size_t n, size_t len)
{
    void *p = calloc(n, len);
    if (p == NULL) {
        die("out of memory");
    }
    return p;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * recv() that also sets c->t_rx: when the last of the bytes read arrived, from the kernel's
 * SO_TIMESTAMPNS stamp (CLOCK_REALTIME, so taken as an age and applied to the monotonic clock),
 * else now.
 */
static ssize_t recv_stamped(struct client *c, void *buf, size_t len)
{
    struct iovec iov = {buf, len};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT);
    double now = mono_now();
    c->t_rx = now;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n > 0 && cm != NULL;
         cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts, real;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            clock_gettime(CLOCK_REALTIME, &real);
            double age =
                (double)(real.tv_sec - ts.tv_sec) + (double)(real.tv_nsec - ts.tv_nsec) / 1e9;
            if (age >= 0 && age < 60)
                c->t_rx = now - age;
        }
    }
    return n;
}

static double since_t0(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    return (double)(ns - g_cfg.t0_ns) / 1e9;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static uint64_t rng_next(uint64_t *s)
{
    return pat_splitmix(s);
}

static uint64_t parse_size(const char *s)
{
    char *e;
    uint64_t v = strtoull(s, &e, 10);
    if (e == s) {
        die("bad size '%s'", s);
    }
    switch (*e) {
    case '\0':
        return v;
    case 'K':
    case 'k':
        return v << 10;
    case 'M':
    case 'm':
        return v << 20;
    case 'G':
    case 'g':
        return v << 30;
    default:
        die("bad size '%s'", s);
    }
}

/* "256M" style path segment for <size> so the origin derives the size from the path. */
static void size_segment(uint64_t size, char *out, size_t cap)
{
    if (size % (1u << 20) == 0) {
        snprintf(out, cap, "%" PRIu64 "M", size >> 20);
    } else if (size % 1024 == 0) {
        snprintf(out, cap, "%" PRIu64 "K", size >> 10);
    } else {
        snprintf(out, cap, "%" PRIu64, size);
    }
}

static void add_obj(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void add_obj(const char *fmt, ...)
{
    struct lg_obj *o = &g_objs[g_nobjs++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->path, sizeof(o->path), fmt, ap);
    va_end(ap);
    o->seed = pat_seed(o->path, strlen(o->path));
}

/* The objects of the scenario and each client's request list. */
static void build_workload(void)
{
    char seg[32];
    const char *pfx = g_cfg.prefix;
    int nclients = g_cfg.clients;
    if (strcmp(g_cfg.scenario, "big") == 0) {
        g_objs = xcalloc(1, sizeof(*g_objs));
        size_segment(g_cfg.big_size, seg, sizeof(seg));
        add_obj("%s/big/%s/object.bin", pfx, seg);
        g_objs[0].size = g_cfg.big_size;
    } else if (strcmp(g_cfg.scenario, "chunks") == 0) {
        g_objs = xcalloc((size_t)g_cfg.nchunks, sizeof(*g_objs));
        size_segment(g_cfg.chunk_size, seg, sizeof(seg));
        for (int i = 0; i < g_cfg.nchunks; i++) {
            add_obj("%s/depot/%s/chunk_%04d", pfx, seg, i);
            g_objs[i].size = g_cfg.chunk_size;
        }
    } else if (strcmp(g_cfg.scenario, "ranges") == 0) {
        g_objs = xcalloc(1, sizeof(*g_objs));
        size_segment(g_cfg.archive_size, seg, sizeof(seg));
        add_obj("%s/archive/%s/data.pak", pfx, seg);
        g_objs[0].size = g_cfg.archive_size;
    } else {
        die("unknown scenario '%s'", g_cfg.scenario);
    }
    g_clients = xcalloc((size_t)nclients, sizeof(*g_clients));
    for (int i = 0; i < nclients; i++) {
        struct client *c = &g_clients[i];
        uint64_t rs = g_cfg.seed ^ ((uint64_t)(i + 1) * 0xd1b54a32d192ed03ull);
        c->id = i;
        c->fd = -1;
        if (strcmp(g_cfg.scenario, "ranges") == 0) {
            uint64_t size = g_objs[0].size;
            size_t cap = (size_t)(size / LG_RANGE_MIN) + 2;
            c->reqs = xcalloc(cap, sizeof(*c->reqs));
            for (uint64_t off = 0; off < size;) {
                uint64_t len =
                    LG_RANGE_MIN + rng_next(&rs) % (uint64_t)(LG_RANGE_MAX - LG_RANGE_MIN + 1);
                if (len > size - off) {
                    len = size - off;
                }
                struct lg_req *r = &c->reqs[c->nreq++];
                r->obj = 0;
                r->range = true;
                r->first = off;
                r->last = off + len - 1;
                off += len;
            }
        } else {
            c->nreq = g_nobjs;
            c->reqs = xcalloc(c->nreq, sizeof(*c->reqs));
            for (size_t k = 0; k < c->nreq; k++) {
                c->reqs[k].obj = (uint32_t)k;
                c->reqs[k].first = 0;
                c->reqs[k].last = g_objs[k].size - 1;
            }
        }
        if (!g_cfg.firsthit) {
            for (size_t k = c->nreq; k > 1; k--) {
                size_t j = (size_t)(rng_next(&rs) % k);
                struct lg_req t = c->reqs[k - 1];
                c->reqs[k - 1] = c->reqs[j];
                c->reqs[j] = t;
            }
        }
        c->rbuf = xcalloc(1, LG_RBUF);
    }
}

static void record_error(struct client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void record_error(struct client *c, const char *fmt, ...)
{
    if (g_first_error[0] != '\0') {
        return;
    }
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *path = c->cur < c->nreq ? g_objs[c->reqs[c->cur].obj].path : "-";
    snprintf(g_first_error, sizeof(g_first_error), "client%d %s: %s", c->id, path, msg);
    fprintf(stderr, "loadgen: %s\n", g_first_error);
}

static void client_close_fd(struct client *c)
{
    ev_io_stop(g_loop, &c->io);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static void client_set_done(struct client *c)
{
    if (c->state == LG_S_DONE) {
        return;
    }
    client_close_fd(c);
    ev_timer_stop(g_loop, &c->timer);
    c->state = LG_S_DONE;
    if (--g_active == 0) {
        ev_break(g_loop, EVBREAK_ALL);
    }
}

static void finish_request(struct client *c, bool ok)
{
    struct lg_req *r = &c->reqs[c->cur];
    double now = mono_now();
    r->done = true;
    r->ok = ok;
    r->hit = c->hit;
    r->bytes = c->body_got;
    r->lat = now - c->t_sent;
    r->t_done = now - g_t_start;
    if (!c->got_first) {
        r->ttfb = r->lat;
    }
    if (g_cfg.firsthit) {
        g_hit_attempts++;
        if (ok && g_first_ok_at < 0) {
            g_first_ok_at = since_t0();
        }
        if (ok && c->hit && g_first_hit_at < 0) {
            g_first_hit_at = since_t0();
            c->cur = c->nreq;
            client_set_done(c);
            return;
        }
    }
    c->cur++;
}

/* Fail the current request, drop the connection and go on with the next request. */
static void client_fail(struct client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void client_fail(struct client *c, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!(g_cfg.firsthit && g_first_ok_at < 0)) {
        record_error(c, "%s", msg);
    }
    client_close_fd(c);
    if (c->cur < c->nreq) {
        finish_request(c, false);
    }
    if (c->state == LG_S_DONE) {
        return;
    }
    if (c->cur >= c->nreq) {
        client_set_done(c);
        return;
    }
    g_reconnects++;
    client_connect(c);
}

static void on_client_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct client *c = (struct client *)(void *)((char *)w - offsetof(struct client, timer));
    (void)loop;
    (void)revents;
    if (c->state == LG_S_RETRY) {
        client_connect(c);
        return;
    }
    client_fail(c, "no progress for %.0f s", LG_IDLE_TIMEOUT);
}

static void client_retry_later(struct client *c, double delay)
{
    client_close_fd(c);
    c->state = LG_S_RETRY;
    ev_timer_stop(g_loop, &c->timer);
    ev_timer_set(&c->timer, delay, 0.);
    ev_timer_start(g_loop, &c->timer);
}

static void client_connect(struct client *c)
{
    client_close_fd(c);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        die("socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)); /* see recv_stamped() */
    c->rpos = c->rlen = 0;
    c->state = LG_S_CONNECTING;
    if (connect(c->fd, (struct sockaddr *)&g_cfg.addr, sizeof(g_cfg.addr)) != 0 &&
        errno != EINPROGRESS) {
        if (g_cfg.firsthit) {
            client_retry_later(c, 0.005);
            return;
        }
        die("connect: %s", strerror(errno));
    }
    ev_timer_stop(g_loop, &c->timer);
    ev_timer_set(&c->timer, LG_IDLE_TIMEOUT, LG_IDLE_TIMEOUT);
    ev_timer_again(g_loop, &c->timer);
    client_rearm(c);
}

static void barrier_arrive(void)
{
    if (--g_pending > 0) {
        return;
    }
    g_released = true;
    g_t_start = mono_now();
    for (int i = 0; i < g_cfg.clients; i++) {
        struct client *c = &g_clients[i];
        if (c->state == LG_S_BARRIER) {
            client_next(c);
        }
    }
}

static void on_connected(struct client *c)
{
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
        if (g_cfg.firsthit) {
            client_retry_later(c, 0.005);
            return;
        }
        if (++c->reconnects > LG_MAX_RECONNECTS) {
            record_error(c, "connect: %s (giving up)", strerror(err));
            while (c->cur < c->nreq) {
                finish_request(c, false);
            }
            if (!g_released) {
                c->state = LG_S_BARRIER;
                client_close_fd(c);
                barrier_arrive();
            }
            client_set_done(c);
            return;
        }
        client_retry_later(c, 0.1);
        return;
    }
    if (!g_released) {
        c->state = LG_S_BARRIER;
        client_rearm(c);
        barrier_arrive();
        return;
    }
    client_next(c);
}

/*
 * Writes what the socket takes of the request; the rest when it is writable (EV_WRITE). Called at
 * once when a request is made, not in the next loop iteration: t_sent is taken just before, so
 * the time a busy loadgen takes to come round to a socket is not charged to the target.
 */
static void client_send(struct client *c)
{
    ssize_t n =
        send(c->fd, c->req_text + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            client_fail(c, "send: %s", strerror(errno));
        } else {
            client_rearm(c);
        }
        return;
    }
    c->req_off += (size_t)n;
    c->state = c->req_off == c->req_len ? LG_S_HEAD : LG_S_SEND;
    if (c->state == LG_S_HEAD) {
        ev_timer_again(g_loop, &c->timer);
    }
    client_rearm(c);
}

/* Send the next request, or finish. */
static void client_next(struct client *c)
{
    if (c->cur >= c->nreq) {
        client_set_done(c);
        return;
    }
    if (c->fd < 0) {
        client_connect(c);
        return;
    }
    struct lg_req *r = &c->reqs[c->cur];
    struct lg_obj *o = &g_objs[r->obj];
    int n;
    if (r->range) {
        n = snprintf(c->req_text, sizeof(c->req_text),
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cacheparty-bench\r\n"
                     "Range: bytes=%" PRIu64 "-%" PRIu64 "\r\n\r\n",
                     o->path, g_cfg.host, r->first, r->last);
    } else {
        n = snprintf(c->req_text, sizeof(c->req_text),
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cacheparty-bench\r\n\r\n", o->path,
                     g_cfg.host);
    }
    c->req_len = (size_t)n;
    c->req_off = 0;
    c->expect_len = r->last - r->first + 1;
    c->obj_off = r->first;
    c->seed = o->seed;
    c->body_got = 0;
    c->got_first = false;
    c->conn_close = false;
    c->hit = false;
    c->t_sent = mono_now();
    c->state = LG_S_SEND;
    client_send(c);
}

static void client_rearm(struct client *c)
{
    int want = 0;
    switch (c->state) {
    case LG_S_CONNECTING:
    case LG_S_SEND:
        want = EV_WRITE;
        break;
    case LG_S_HEAD:
    case LG_S_BODY:
    case LG_S_BODY_EOF:
    case LG_S_CHUNK_SIZE:
    case LG_S_CHUNK_DATA:
    case LG_S_CHUNK_CRLF:
    case LG_S_TRAILER:
        want = EV_READ;
        break;
    case LG_S_BARRIER:
    case LG_S_RETRY:
    case LG_S_DONE:
        want = 0;
        break;
    }
    if (want == 0 || c->fd < 0) {
        ev_io_stop(g_loop, &c->io);
        return;
    }
    if (ev_is_active(&c->io) && c->io.fd == c->fd &&
        (c->io.events & (EV_READ | EV_WRITE)) == want) {
        return;
    }
    ev_io_stop(g_loop, &c->io);
    ev_io_set(&c->io, c->fd, want);
    ev_io_start(g_loop, &c->io);
}

/* Verify body bytes [body_pos, body_pos+len) of the current response (sampled or all). */
static bool verify_piece(struct client *c, uint64_t body_pos, const uint8_t *data, size_t len)
{
    uint64_t bad;
    if (!g_cfg.sample) {
        if (!pat_check(&g_pat, c->seed, c->obj_off + body_pos, data, len, &bad)) {
            record_error(c, "body differs near object offset %" PRIu64, bad);
            return false;
        }
        g_verified_bytes += len;
        return true;
    }
    uint64_t tail = c->expect_len > LG_SAMPLE_WIN ? c->expect_len - LG_SAMPLE_WIN : 0;
    uint64_t pos = body_pos;
    uint64_t end = body_pos + len;
    while (pos < end) {
        uint64_t in_period = pos % LG_SAMPLE_PERIOD;
        uint64_t seg_end;
        bool check;
        if (pos >= tail) {
            seg_end = end;
            check = true;
        } else if (in_period < LG_SAMPLE_WIN) {
            seg_end = pos - in_period + LG_SAMPLE_WIN;
            check = true;
        } else {
            seg_end = pos - in_period + LG_SAMPLE_PERIOD;
            if (seg_end > tail) {
                seg_end = tail;
            }
            check = false;
        }
        if (seg_end > end) {
            seg_end = end;
        }
        if (check) {
            const uint8_t *p = data + (pos - body_pos);
            size_t n = (size_t)(seg_end - pos);
            if (!pat_check(&g_pat, c->seed, c->obj_off + pos, p, n, &bad)) {
                record_error(c, "body differs near object offset %" PRIu64, bad);
                return false;
            }
            g_verified_bytes += n;
        }
        pos = seg_end;
    }
    return true;
}

static const char *head_value(const char *head, size_t len, const char *name, size_t *vlen)
{
    size_t nlen = strlen(name);
    const char *p = memchr(head, '\n', len);
    const char *end = head + len;
    while (p != NULL && p + 1 < end) {
        p++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) {
            break;
        }
        if ((size_t)(eol - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1;
            const char *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t')) {
                v++;
            }
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) {
                ve--;
            }
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

/* Parse and check the response head in rbuf[rpos, rpos+hlen). Returns false after client_fail. */
static bool parse_head(struct client *c, size_t hlen)
{
    char head[LG_HEAD_MAX + 1];
    memcpy(head, c->rbuf + c->rpos, hlen);
    head[hlen] = '\0';
    struct lg_req *r = &c->reqs[c->cur];
    int status = 0;
    if (hlen < 12 || strncmp(head, "HTTP/1.", 7) != 0 || sscanf(head + 9, "%3d", &status) != 1) {
        client_fail(c, "malformed status line");
        return false;
    }
    int want = r->range ? 206 : 200;
    if (status != want) {
        client_fail(c, "status %d, expected %d", status, want);
        return false;
    }
    size_t vlen;
    const char *v = head_value(head, hlen, "X-Upstream-Cache-Status", &vlen);
    c->hit = v != NULL && vlen == 3 && strncasecmp(v, "HIT", 3) == 0;
    v = head_value(head, hlen, "Connection", &vlen);
    c->conn_close = v != NULL && vlen >= 5 && strncasecmp(v, "close", 5) == 0;
    if (strncmp(head, "HTTP/1.0", 8) == 0) {
        v = head_value(head, hlen, "Connection", &vlen);
        c->conn_close = !(v != NULL && vlen == 10 && strncasecmp(v, "keep-alive", 10) == 0);
    }
    if (r->range) {
        v = head_value(head, hlen, "Content-Range", &vlen);
        uint64_t a, b, total;
        if (v == NULL || sscanf(v, "bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &a, &b, &total) != 3) {
            client_fail(c, "206 without a valid Content-Range");
            return false;
        }
        if (a != r->first || b != r->last || total != g_objs[r->obj].size) {
            client_fail(c,
                        "Content-Range %" PRIu64 "-%" PRIu64 "/%" PRIu64 ", asked %" PRIu64
                        "-%" PRIu64 "/%" PRIu64,
                        a, b, total, r->first, r->last, g_objs[r->obj].size);
            return false;
        }
    }
    v = head_value(head, hlen, "Transfer-Encoding", &vlen);
    bool chunked = v != NULL && vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0;
    const char *cl = head_value(head, hlen, "Content-Length", &vlen);
    if (chunked) {
        c->state = LG_S_CHUNK_SIZE;
    } else if (cl != NULL) {
        uint64_t n = strtoull(cl, NULL, 10);
        if (n != c->expect_len) {
            client_fail(c, "Content-Length %" PRIu64 ", expected %" PRIu64, n, c->expect_len);
            return false;
        }
        c->state = LG_S_BODY;
    } else {
        c->state = LG_S_BODY_EOF;
        c->conn_close = true;
    }
    c->rpos += hlen;
    return true;
}

/* Body bytes for the current response. Returns false after client_fail. */
static bool take_body(struct client *c, const uint8_t *p, size_t n)
{
    if (n == 0) {
        return true;
    }
    if (!c->got_first) {
        c->got_first = true;
        c->reqs[c->cur].ttfb = c->t_rx - c->t_sent;
    }
    if (c->body_got + n > c->expect_len) {
        client_fail(c, "body longer than %" PRIu64, c->expect_len);
        return false;
    }
    if (!verify_piece(c, c->body_got, p, n)) {
        client_fail(c, "verification failed");
        return false;
    }
    c->body_got += n;
    return true;
}

/* The current response is complete: record it and send the next request. */
static void response_done(struct client *c)
{
    if (c->body_got != c->expect_len) {
        client_fail(c, "body %" PRIu64 " bytes, expected %" PRIu64, c->body_got, c->expect_len);
        return;
    }
    if (c->rpos != c->rlen) {
        client_fail(c, "%zu unexpected bytes after the response", c->rlen - c->rpos);
        return;
    }
    c->rpos = c->rlen = 0;
    finish_request(c, true);
    if (c->state == LG_S_DONE) {
        return;
    }
    if (c->conn_close) {
        client_close_fd(c);
    }
    client_next(c);
}

/* Consume buffered bytes. Returns false when the client left the reading states. */
static bool consume(struct client *c)
{
    for (;;) {
        uint8_t *p = c->rbuf + c->rpos;
        size_t avail = c->rlen - c->rpos;
        switch (c->state) {
        case LG_S_HEAD: {
            uint8_t *e = memmem(p, avail, "\r\n\r\n", 4);
            if (e == NULL) {
                if (avail >= LG_HEAD_MAX) {
                    client_fail(c, "response head over %d bytes", LG_HEAD_MAX);
                    return false;
                }
                return true;
            }
            if (!parse_head(c, (size_t)(e - p) + 4)) {
                return false;
            }
            if (c->state == LG_S_BODY && c->expect_len == 0) {
                response_done(c);
                return false;
            }
            break;
        }
        case LG_S_BODY:
        case LG_S_BODY_EOF: {
            size_t n = avail;
            if (c->state == LG_S_BODY && n > c->expect_len - c->body_got) {
                n = (size_t)(c->expect_len - c->body_got);
            }
            if (!take_body(c, p, n)) {
                return false;
            }
            c->rpos += n;
            if (c->state == LG_S_BODY && c->body_got == c->expect_len) {
                response_done(c);
                return false;
            }
            if (c->rpos == c->rlen) {
                c->rpos = c->rlen = 0;
            }
            return true;
        }
        case LG_S_CHUNK_SIZE:
        case LG_S_TRAILER: {
            uint8_t *e = memmem(p, avail, "\r\n", 2);
            if (e == NULL) {
                if (avail > 4096) {
                    client_fail(c, "chunk line too long");
                    return false;
                }
                return true;
            }
            size_t llen = (size_t)(e - p);
            c->rpos += llen + 2;
            if (c->state == LG_S_TRAILER) {
                if (llen == 0) {
                    response_done(c);
                    return false;
                }
                break;
            }
            char line[64];
            size_t cl = llen < sizeof(line) - 1 ? llen : sizeof(line) - 1;
            memcpy(line, p, cl);
            line[cl] = '\0';
            char *end;
            c->chunk_left = strtoull(line, &end, 16);
            if (end == line) {
                client_fail(c, "bad chunk size line");
                return false;
            }
            c->state = c->chunk_left == 0 ? LG_S_TRAILER : LG_S_CHUNK_DATA;
            break;
        }
        case LG_S_CHUNK_DATA: {
            size_t n = avail < c->chunk_left ? avail : (size_t)c->chunk_left;
            if (n == 0) {
                return true;
            }
            if (!take_body(c, p, n)) {
                return false;
            }
            c->rpos += n;
            c->chunk_left -= n;
            if (c->chunk_left == 0) {
                c->state = LG_S_CHUNK_CRLF;
            }
            break;
        }
        case LG_S_CHUNK_CRLF:
            if (avail < 2) {
                return true;
            }
            if (p[0] != '\r' || p[1] != '\n') {
                client_fail(c, "missing CRLF after chunk");
                return false;
            }
            c->rpos += 2;
            c->state = LG_S_CHUNK_SIZE;
            break;
        default:
            return false;
        }
    }
}

/*
 * Sample mode: how many body bytes from here on are outside every verified window (0 if the next
 * byte is verified). Those are discarded in the kernel (recv MSG_TRUNC) without a copy.
 */
static uint64_t skippable(const struct client *c)
{
    if (!g_cfg.sample || c->state != LG_S_BODY || c->rpos != c->rlen || !c->got_first) {
        return 0;
    }
    uint64_t pos = c->body_got;
    uint64_t tail = c->expect_len > LG_SAMPLE_WIN ? c->expect_len - LG_SAMPLE_WIN : 0;
    uint64_t in_period = pos % LG_SAMPLE_PERIOD;
    if (pos >= tail || in_period < LG_SAMPLE_WIN) {
        return 0;
    }
    uint64_t next = pos - in_period + LG_SAMPLE_PERIOD;
    return (next < tail ? next : tail) - pos;
}

static void on_client_readable(struct client *c)
{
    /* Bounded: a few reads per wakeup so one fast connection cannot starve the others. */
    for (int i = 0; i < 2; i++) {
        if (c->rpos == c->rlen) {
            c->rpos = c->rlen = 0;
        } else if (c->rlen == LG_RBUF && c->rpos > 0) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        uint64_t skip = skippable(c);
        ssize_t n;
        if (skip > 0) {
            /*
             * TCP: MSG_TRUNC drops the bytes in the kernel and writes nothing. The buffer is
             * there only so that sanitizers' recv interceptors see a valid one (never touched,
             * so it costs no memory); a skip is always shorter than a sample period.
             */
            n = recv(c->fd, g_discard, skip < sizeof(g_discard) ? (size_t)skip : sizeof(g_discard),
                     MSG_DONTWAIT | MSG_TRUNC);
        } else {
            size_t room = LG_RBUF - c->rlen;
            n = recv_stamped(c, c->rbuf + c->rlen,
                             c->got_first || room < LG_FIRST_READ ? room : LG_FIRST_READ);
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            client_fail(c, "recv: %s", strerror(errno));
            return;
        }
        if (n == 0) {
            if (c->state == LG_S_BODY_EOF) {
                c->conn_close = true;
                response_done(c);
                return;
            }
            client_fail(c, "connection closed after %" PRIu64 " of %" PRIu64 " body bytes",
                        c->body_got, c->expect_len);
            return;
        }
        ev_timer_again(g_loop, &c->timer);
        if (skip > 0) {
            c->body_got += (uint64_t)n;
            g_skipped_bytes += (uint64_t)n;
            continue;
        }
        c->rlen += (size_t)n;
        if (!consume(c)) {
            return;
        }
    }
}

static void on_client_io(struct ev_loop *loop, ev_io *w, int revents)
{
    struct client *c = (struct client *)(void *)((char *)w - offsetof(struct client, io));
    (void)loop;
    if (c->state == LG_S_CONNECTING) {
        on_connected(c);
        return;
    }
    if (c->state == LG_S_SEND && (revents & EV_WRITE)) {
        client_send(c);
        return;
    }
    if (revents & EV_READ) {
        on_client_readable(c);
    }
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    g_deadline_hit = true;
    fprintf(stderr, "loadgen: phase deadline of %.0f s reached\n", g_cfg.deadline);
    ev_break(loop, EVBREAK_ALL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
    if (n == 0) {
        return NAN;
    }
    size_t k = (size_t)ceil(p * (double)n);
    return v[k == 0 ? 0 : k - 1];
}

static void report(double cpu0)
{
    double end_wall = mono_now();
    size_t total = 0;
    size_t ok = 0;
    size_t hits = 0;
    uint64_t ok_bytes = 0;
    uint64_t all_bytes = 0;
    double lat_sum = 0;
    double t_last = 0;
    for (int i = 0; i < g_cfg.clients; i++) {
        total += g_clients[i].nreq;
    }
    double *ttfb = xcalloc(total + 1, sizeof(double));
    double finish_sum = 0;
    /* LG_TRACE=FILE: one line per request (for looking into a tail): client, request number,
     * object, first and last byte, sent and done (s since the barrier), TTFB and latency (ms),
     * ok, hit. */
    const char *trace_path = getenv("LG_TRACE");
    FILE *trace = trace_path != NULL ? fopen(trace_path, "w") : NULL;
    for (int i = 0; trace != NULL && i < g_cfg.clients; i++) {
        const struct client *c = &g_clients[i];
        for (size_t k = 0; k < c->nreq; k++) {
            const struct lg_req *r = &c->reqs[k];
            if (r->done)
                fprintf(trace, "%d %zu %u %" PRIu64 " %" PRIu64 " %.6f %.6f %.3f %.3f %d %d\n", i,
                        k, r->obj, r->first, r->last, r->t_done - r->lat, r->t_done, r->ttfb * 1e3,
                        r->lat * 1e3, r->ok, r->hit);
        }
    }
    if (trace != NULL)
        fclose(trace);
    for (int i = 0; i < g_cfg.clients; i++) {
        struct client *c = &g_clients[i];
        double finish = 0;
        for (size_t k = 0; k < c->nreq; k++) {
            struct lg_req *r = &c->reqs[k];
            if (r->done && r->t_done > finish) {
                finish = r->t_done;
            }
            all_bytes += r->bytes;
            if (!r->ok) {
                continue;
            }
            ttfb[ok++] = r->ttfb;
            ok_bytes += r->bytes;
            lat_sum += r->lat;
            hits += r->hit;
            if (r->t_done > t_last) {
                t_last = r->t_done;
            }
        }
        finish_sum += c->state == LG_S_DONE ? finish : end_wall - g_t_start;
    }
    if (g_deadline_hit || t_last == 0) {
        t_last = end_wall - g_t_start;
    }
    qsort(ttfb, ok, sizeof(double), cmp_double);
    double secs = t_last > 0 ? t_last : 1e-9;
    double cpu = cpu_seconds() - cpu0;
    double util = cpu / (end_wall - g_t_start);
    double rps = (double)ok / secs;
    double lat_mean = ok ? lat_sum / (double)ok : NAN;
    double little = rps * lat_mean;
    double ratio = little / g_cfg.clients;
    /* Little's law with N clients holds while all N are busy; clients that finish early lower L.
     * busy_ratio = mean client finish time / phase time is what L/N should be if that explains it.
     */
    double busy = finish_sum / g_cfg.clients / secs;
    uint64_t distinct = 0;
    for (size_t i = 0; i < g_nobjs; i++) {
        distinct += g_objs[i].size;
    }
    printf("target=%s scenario=%s phase=%s clients=%d requests=%zu ok=%zu failed=%zu "
           "bytes=%" PRIu64 " ok_bytes=%" PRIu64 " distinct_bytes=%" PRIu64 " secs=%.3f "
           "mbps=%.1f ttfb_p50_ms=%.2f ttfb_p99_ms=%.2f ttfb_max_ms=%.2f lat_mean_ms=%.2f "
           "rps=%.2f little_l=%.2f little_ratio=%.3f little_flag=%d busy_ratio=%.3f hits=%zu "
           "verify=%s verified_bytes=%" PRIu64 " skipped_bytes=%" PRIu64 " reconnects=%" PRIu64
           " lg_cpu_s=%.2f "
           "lg_util=%.2f lg_saturated=%d deadline_hit=%d",
           g_cfg.target_name, g_cfg.scenario, g_cfg.phase, g_cfg.clients, total, ok, total - ok,
           all_bytes, ok_bytes, distinct, secs, (double)ok_bytes / secs / 1e6,
           pct(ttfb, ok, 0.50) * 1e3, pct(ttfb, ok, 0.99) * 1e3, ok ? ttfb[ok - 1] * 1e3 : NAN,
           lat_mean * 1e3, rps, little, ratio, fabs(ratio - 1) > 0.10, busy, hits,
           g_cfg.sample ? "sample" : "full", g_verified_bytes, g_skipped_bytes, g_reconnects, cpu,
           util, util > 0.90, g_deadline_hit);
    if (g_cfg.firsthit) {
        printf(" first_ok_s=%.3f first_hit_s=%.3f attempts=%d", g_first_ok_at, g_first_hit_at,
               g_hit_attempts);
    }
    printf(" error=\"");
    for (const char *p = g_first_error; *p != '\0'; p++) {
        putchar(*p == '"' ? '\'' : *p);
    }
    printf("\"\n");
    free(ttfb);
}

static void usage(void)
{
    fputs("usage: loadgen -a 127.0.0.1:PORT -H HOST[:PORT] -s big|chunks|ranges [options]\n"
          "  -c N            clients (default 50)\n"
          "  -n NAME         target name for the output line\n"
          "  -p PHASE        phase label (cold, warm, ...)\n"
          "  -B SIZE         big: object size (default 256M)\n"
          "  -k N            chunks: number of objects (default 128)\n"
          "  -K SIZE         chunks: object size (default 1M)\n"
          "  -A SIZE         ranges: archive size (default 256M)\n"
          "  -x PREFIX       path prefix (default none)\n"
          "  -S SEED         random seed (default 1)\n"
          "  -v full|sample  body verification (default full)\n"
          "  -T SECONDS      phase deadline (default 600)\n"
          "  -f T0_NS        firsthit mode: time to the first HIT since T0 (epoch ns)\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *addr = NULL;
    g_cfg.target_name = "target";
    g_cfg.phase = "run";
    g_cfg.scenario = NULL;
    g_cfg.clients = 50;
    g_cfg.big_size = 256u << 20;
    g_cfg.nchunks = 128;
    g_cfg.chunk_size = 1u << 20;
    g_cfg.archive_size = 256u << 20;
    g_cfg.seed = 1;
    g_cfg.deadline = 600;
    g_cfg.prefix = "";
    int opt;
    while ((opt = getopt(argc, argv, "a:H:s:c:n:p:B:k:K:A:x:S:v:T:f:h")) != -1) {
        switch (opt) {
        case 'a':
            addr = optarg;
            break;
        case 'H':
            g_cfg.host = optarg;
            break;
        case 's':
            g_cfg.scenario = optarg;
            break;
        case 'c':
            g_cfg.clients = atoi(optarg);
            break;
        case 'n':
            g_cfg.target_name = optarg;
            break;
        case 'p':
            g_cfg.phase = optarg;
            break;
        case 'B':
            g_cfg.big_size = parse_size(optarg);
            break;
        case 'k':
            g_cfg.nchunks = atoi(optarg);
            break;
        case 'K':
            g_cfg.chunk_size = parse_size(optarg);
            break;
        case 'A':
            g_cfg.archive_size = parse_size(optarg);
            break;
        case 'x':
            g_cfg.prefix = optarg;
            break;
        case 'S':
            g_cfg.seed = strtoull(optarg, NULL, 0);
            break;
        case 'v':
            g_cfg.sample = strcmp(optarg, "sample") == 0;
            if (!g_cfg.sample && strcmp(optarg, "full") != 0) {
                usage();
            }
            break;
        case 'T':
            g_cfg.deadline = atof(optarg);
            break;
        case 'f':
            g_cfg.firsthit = true;
            g_cfg.t0_ns = strtoll(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (addr == NULL || g_cfg.host == NULL || g_cfg.scenario == NULL || optind != argc) {
        usage();
    }
    if (g_cfg.clients < 1 || g_cfg.clients > 10000 || g_cfg.nchunks < 1 || g_cfg.nchunks > 100000 ||
        g_cfg.big_size == 0 || g_cfg.chunk_size == 0 || g_cfg.archive_size == 0 ||
        g_cfg.deadline <= 0) {
        die("option out of range");
    }
    if (g_cfg.firsthit) {
        g_cfg.clients = 1;
        if (strcmp(g_cfg.scenario, "chunks") != 0) {
            die("firsthit mode takes -s chunks");
        }
    }
    const char *colon = strrchr(addr, ':');
    char host[64];
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        die("bad address '%s'", addr);
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    g_cfg.addr.sin_family = AF_INET;
    g_cfg.addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &g_cfg.addr.sin_addr) != 1 ||
        (ntohl(g_cfg.addr.sin_addr.s_addr) >> 24) != 127) {
        die("address must be a 127.0.0.0/8 loopback address: '%s'", addr);
    }
    signal(SIGPIPE, SIG_IGN);
    pat_table_init(&g_pat);
    build_workload();
    g_loop = ev_default_loop(EVFLAG_AUTO);
    g_pending = g_cfg.clients;
    g_active = g_cfg.clients;
    double cpu0 = cpu_seconds();
    g_t_start = mono_now();
    for (int i = 0; i < g_cfg.clients; i++) {
        struct client *c = &g_clients[i];
        ev_io_init(&c->io, on_client_io, -1, EV_WRITE);
        ev_init(&c->timer, on_client_timer);
        client_connect(c);
    }
    ev_timer deadline;
    ev_timer_init(&deadline, on_deadline, g_cfg.deadline, 0.);
    ev_timer_start(g_loop, &deadline);
    ev_run(g_loop, 0);
    for (int i = 0; i < g_cfg.clients; i++) {
        g_reconnects += (uint64_t)g_clients[i].reconnects;
        if (g_clients[i].state != LG_S_DONE && g_clients[i].cur < g_clients[i].nreq) {
            record_error(&g_clients[i], "unfinished at the phase deadline");
        }
    }
    report(cpu0);
    size_t failed = 0;
    for (int i = 0; i < g_cfg.clients; i++) {
        for (size_t k = 0; k < g_clients[i].nreq; k++) {
            failed += !g_clients[i].reqs[k].ok;
        }
    }
    if (g_cfg.firsthit) {
        return g_first_hit_at >= 0 ? 0 : 1;
    }
    return failed == 0 ? 0 : 1;
}
