/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * origin: the benchmark's fake CDN origin. One process, one libev loop, HTTP/1.1 keep-alive.
 *
 * Any path and any Host are served. The object size comes from the first path segment that is a
 * number with an optional binary suffix (/big/256M/x -> 256 MiB; no such segment -> 1 MiB); the
 * content is bench/pattern.h's deterministic pattern for the path, so clients can verify every
 * byte. Single ranges (a-b, a-, -n) get 206 with Content-Range, unsatisfiable ones 416, several
 * ranges the full 200. Every response carries a strong ETag and Cache-Control: no-cache (which the
 * proxies under test are configured to ignore, as lancache does).
 *
 * Each response waits <delay> before its head (first-byte latency) and its body is paced by a
 * token bucket refilled from ev_timer wakeups to <rate> bytes/s per response.
 *
 * Counters (requests, bytes, statuses, connections) are served as "key value" lines on
 * GET /__stats (not counted themselves) and written to the -S file at exit.
 *
 * Connection phases: READ_HEAD (wait for a request head) -> DELAY (first-byte timer) -> SEND (head
 * then paced body; the io watcher is stopped while the bucket is empty) -> READ_HEAD again, or
 * closed. The loop stops on SIGINT/SIGTERM or after -t seconds, whichever comes first.
 */
#include "pattern.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ev.h>

#define ORIGIN_IN_MAX 16384
#define ORIGIN_HEAD_MAX 1024
#define ORIGIN_BLOCK (256 * 1024)
#define ORIGIN_MIN_SEND (32 * 1024)
#define ORIGIN_BURST (64 * 1024)
#define ORIGIN_IDLE_TIMEOUT 300.0
#define ORIGIN_DEFAULT_SIZE (1024 * 1024)

enum oconn_state {
    OCONN_S_READ_HEAD, /* waiting for a complete request head */
    OCONN_S_DELAY,     /* first-byte delay timer running */
    OCONN_S_SEND,      /* sending head and body; paced */
};

struct oconn {
    ev_io io;       /* fd readiness; interest set only by oconn_rearm() */
    ev_timer timer; /* idle timeout, first-byte delay or pacing wakeup */
    int fd;
    enum oconn_state state;
    bool keepalive;
    bool paced_wait; /* token bucket empty: timer armed, write interest off */
    char in[ORIGIN_IN_MAX];
    size_t in_len;
    char head[ORIGIN_HEAD_MAX];
    size_t head_len;
    size_t head_off;
    uint64_t seed;
    uint64_t body_off; /* next object offset to generate */
    uint64_t body_end; /* exclusive */
    uint64_t body_sent;
    ev_tstamp rate_t0;
    uint8_t *buf; /* owns: generated body bytes not yet sent, [buf_pos, buf_len) */
    size_t buf_pos;
    size_t buf_len;
    bool stats_reply; /* the head buffer holds a /__stats reply (no pattern body) */
    char *text;       /* owns: a /__stats body */
    size_t text_len;
    size_t text_off;
};

struct origin_stats {
    uint64_t requests;
    uint64_t head_requests;
    uint64_t range_requests;
    uint64_t status_200;
    uint64_t status_206;
    uint64_t status_416;
    uint64_t status_400;
    uint64_t body_bytes;
    uint64_t responses_done;
    uint64_t responses_aborted;
    uint64_t conns_accepted;
    uint64_t conns_open;
    uint64_t conns_peak;
    uint64_t inflight;
    uint64_t inflight_peak;
};

static struct pat_table g_pat;
static struct origin_stats g_st;
static double g_delay = 0.050;
static double g_rate = 100e6;
static struct ev_loop *g_loop;

static void oconn_rearm(struct oconn *c);
static void oconn_close(struct oconn *c);
static int oconn_step_read(struct oconn *c);

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("origin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static uint64_t parse_size(const char *s, size_t len, bool *ok)
{
    uint64_t v = 0;
    size_t i = 0;
    *ok = false;
    if (len == 0) {
        return 0;
    }
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10) {
            return 0;
        }
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0) {
        return 0;
    }
    if (i + 1 == len) {
        switch (s[i]) {
        case 'k':
        case 'K':
            v <<= 10;
            break;
        case 'm':
        case 'M':
            v <<= 20;
            break;
        case 'g':
        case 'G':
            v <<= 30;
            break;
        default:
            return 0;
        }
    } else if (i != len) {
        return 0;
    }
    *ok = true;
    return v;
}

/* Size of the object named by <path>[0..len): the first all-numeric path segment. */
static uint64_t object_size(const char *path, size_t len)
{
    size_t i = 0;
    while (i < len && path[i] != '?') {
        while (i < len && path[i] == '/') {
            i++;
        }
        size_t start = i;
        while (i < len && path[i] != '/' && path[i] != '?') {
            i++;
        }
        bool ok;
        uint64_t v = parse_size(path + start, i - start, &ok);
        if (ok && v <= (UINT64_C(64) << 30)) {
            return v;
        }
    }
    return ORIGIN_DEFAULT_SIZE;
}

/* Find header <name> in the head lines [p, end); returns its trimmed value or NULL. */
static const char *find_header(const char *p, const char *end, const char *name, size_t *vlen)
{
    size_t nlen = strlen(name);
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL) {
            eol = end;
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
        p = eol + 1;
    }
    return NULL;
}

/*
 * Parse "bytes=a-b" against <size>. Returns 1 for a satisfiable single range (first/last set),
 * 0 to serve the whole object (absent, malformed or several ranges), -1 for unsatisfiable.
 */
static int parse_range(const char *v, size_t len, uint64_t size, uint64_t *first, uint64_t *last)
{
    char tmp[128];
    if (len >= sizeof(tmp) || len < 7 || strncasecmp(v, "bytes=", 6) != 0) {
        return 0;
    }
    memcpy(tmp, v + 6, len - 6);
    tmp[len - 6] = '\0';
    if (strchr(tmp, ',') != NULL) {
        return 0;
    }
    char *dash = strchr(tmp, '-');
    if (dash == NULL) {
        return 0;
    }
    *dash = '\0';
    char *a = tmp;
    char *b = dash + 1;
    char *e;
    if (*a == '\0') {
        if (*b == '\0') {
            return 0;
        }
        uint64_t n = strtoull(b, &e, 10);
        if (*e != '\0') {
            return 0;
        }
        if (n == 0 || size == 0) {
            return -1;
        }
        *first = n >= size ? 0 : size - n;
        *last = size - 1;
        return 1;
    }
    uint64_t f = strtoull(a, &e, 10);
    if (*e != '\0') {
        return 0;
    }
    uint64_t l = size == 0 ? 0 : size - 1;
    if (*b != '\0') {
        l = strtoull(b, &e, 10);
        if (*e != '\0' || l < f) {
            return 0;
        }
        if (size > 0 && l >= size) {
            l = size - 1;
        }
    }
    if (f >= size) {
        return -1;
    }
    *first = f;
    *last = l;
    return 1;
}

static size_t stats_text(char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "requests %" PRIu64 "\nhead_requests %" PRIu64 "\nrange_requests %" PRIu64
                     "\nstatus_200 %" PRIu64 "\nstatus_206 %" PRIu64 "\nstatus_416 %" PRIu64
                     "\nstatus_400 %" PRIu64 "\nbody_bytes %" PRIu64 "\nresponses_done %" PRIu64
                     "\nresponses_aborted %" PRIu64 "\nconns_accepted %" PRIu64
                     "\nconns_open %" PRIu64 "\nconns_peak %" PRIu64 "\ninflight_peak %" PRIu64
                     "\ndelay_ms %.3f\nrate_bps %.0f\n",
                     g_st.requests, g_st.head_requests, g_st.range_requests, g_st.status_200,
                     g_st.status_206, g_st.status_416, g_st.status_400, g_st.body_bytes,
                     g_st.responses_done, g_st.responses_aborted, g_st.conns_accepted,
                     g_st.conns_open, g_st.conns_peak, g_st.inflight_peak, g_delay * 1e3, g_rate);
    return n < 0 ? 0 : ((size_t)n >= cap ? cap - 1 : (size_t)n);
}

static void oconn_set_head(struct oconn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void oconn_set_head(struct oconn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->head, sizeof(c->head), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(c->head)) {
        die("response head too long");
    }
    c->head_len = (size_t)n;
    c->head_off = 0;
}

/* Build the response to the request head in c->in[0..head_end). Returns false on a bad request. */
static bool oconn_prepare(struct oconn *c, size_t head_end)
{
    const char *p = c->in;
    const char *end = c->in + head_end;
    const char *eol = memchr(p, '\n', head_end);
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    if (sp1 == NULL) {
        return false;
    }
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(eol - target));
    if (sp2 == NULL) {
        return false;
    }
    size_t tlen = (size_t)(sp2 - target);
    const char *ver = sp2 + 1;
    bool http10 = strncmp(ver, "HTTP/1.0", 8) == 0;
    bool is_head = (size_t)(sp1 - p) == 4 && strncmp(p, "HEAD", 4) == 0;
    bool is_get = (size_t)(sp1 - p) == 3 && strncmp(p, "GET", 3) == 0;
    if (!is_head && !is_get) {
        return false;
    }
    /* Absolute-form: keep the path only. */
    if (tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
        const char *slash = memchr(target + 7, '/', tlen - 7);
        if (slash == NULL) {
            return false;
        }
        tlen -= (size_t)(slash - target);
        target = slash;
    }
    size_t vlen;
    const char *conn = find_header(eol + 1, end, "Connection", &vlen);
    c->keepalive = !http10;
    if (conn != NULL && vlen == 5 && strncasecmp(conn, "close", 5) == 0) {
        c->keepalive = false;
    } else if (conn != NULL && vlen == 10 && strncasecmp(conn, "keep-alive", 10) == 0) {
        c->keepalive = true;
    }
    const char *ka = c->keepalive ? "keep-alive" : "close";

    if (tlen == 8 && strncmp(target, "/__stats", 8) == 0) {
        char tmp[2048];
        size_t n = stats_text(tmp, sizeof(tmp));
        c->text = malloc(n);
        if (c->text == NULL) {
            die("out of memory");
        }
        memcpy(c->text, tmp, n);
        c->text_len = n;
        c->text_off = 0;
        c->stats_reply = true;
        oconn_set_head(c,
                       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                       "Cache-Control: no-store\r\nConnection: %s\r\n\r\n",
                       n, ka);
        c->body_off = c->body_end = 0;
        return true;
    }

    g_st.requests++;
    if (is_head) {
        g_st.head_requests++;
    }
    uint64_t size = object_size(target, tlen);
    c->seed = pat_seed(target, tlen);
    uint64_t first = 0;
    uint64_t last = size == 0 ? 0 : size - 1;
    const char *rv = find_header(eol + 1, end, "Range", &vlen);
    int r = rv != NULL ? parse_range(rv, vlen, size, &first, &last) : 0;
    const char *common = "Server: cacheparty-bench-origin\r\n"
                         "Accept-Ranges: bytes\r\n"
                         "Last-Modified: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
                         "Cache-Control: no-cache\r\n";
    if (rv != NULL) {
        g_st.range_requests++;
    }
    if (r < 0) {
        g_st.status_416++;
        oconn_set_head(c,
                       "HTTP/1.1 416 Range Not Satisfiable\r\n%sContent-Range: bytes */%" PRIu64
                       "\r\nContent-Length: 0\r\nConnection: %s\r\n\r\n",
                       common, size, ka);
        c->body_off = c->body_end = 0;
        return true;
    }
    char etag[64];
    snprintf(etag, sizeof(etag), "\"%016" PRIx64 "-%" PRIx64 "\"", c->seed, size);
    if (r > 0) {
        g_st.status_206++;
        oconn_set_head(c,
                       "HTTP/1.1 206 Partial Content\r\n%sETag: %s\r\n"
                       "Content-Type: application/octet-stream\r\n"
                       "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n"
                       "Content-Length: %" PRIu64 "\r\nConnection: %s\r\n\r\n",
                       common, etag, first, last, size, last - first + 1, ka);
        c->body_off = first;
        c->body_end = last + 1;
    } else {
        g_st.status_200++;
        oconn_set_head(c,
                       "HTTP/1.1 200 OK\r\n%sETag: %s\r\nContent-Type: application/octet-stream\r\n"
                       "Content-Length: %" PRIu64 "\r\nConnection: %s\r\n\r\n",
                       common, etag, size, ka);
        c->body_off = 0;
        c->body_end = size;
    }
    if (is_head) {
        c->body_end = c->body_off;
    }
    return true;
}

/* Returns false when the connection was closed (and freed). */
static bool oconn_finish_response(struct oconn *c)
{
    if (!c->stats_reply) {
        g_st.responses_done++;
        g_st.inflight--;
    }
    free(c->text);
    c->text = NULL;
    c->stats_reply = false;
    if (!c->keepalive) {
        oconn_close(c);
        return false;
    }
    c->state = OCONN_S_READ_HEAD;
    ev_timer_stop(g_loop, &c->timer);
    ev_timer_set(&c->timer, ORIGIN_IDLE_TIMEOUT, 0.);
    ev_timer_start(g_loop, &c->timer);
    /* A pipelined request may already be buffered. */
    if (oconn_step_read(c) < 0) {
        return false;
    }
    oconn_rearm(c);
    return true;
}

/* Try to send; returns false when the connection was closed. */
static bool oconn_send(struct oconn *c)
{
    for (;;) {
        if (c->head_off < c->head_len) {
            ssize_t n = send(c->fd, c->head + c->head_off, c->head_len - c->head_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    return true;
                }
                if (!c->stats_reply) {
                    g_st.responses_aborted++;
                    g_st.inflight--;
                }
                oconn_close(c);
                return false;
            }
            c->head_off += (size_t)n;
            continue;
        }
        if (c->stats_reply) {
            if (c->text_off < c->text_len) {
                ssize_t n = send(c->fd, c->text + c->text_off, c->text_len - c->text_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK) {
                        return true;
                    }
                    oconn_close(c);
                    return false;
                }
                c->text_off += (size_t)n;
                continue;
            }
            return oconn_finish_response(c);
        }
        if (c->buf_pos == c->buf_len) {
            uint64_t left = c->body_end - c->body_off;
            if (left == 0) {
                return oconn_finish_response(c);
            }
            size_t want = left < ORIGIN_BLOCK ? (size_t)left : ORIGIN_BLOCK;
            if (g_rate > 0) {
                double allowed = g_rate * (ev_time() - c->rate_t0) + ORIGIN_BURST;
                double avail = allowed - (double)c->body_sent;
                size_t need = want < ORIGIN_MIN_SEND ? want : ORIGIN_MIN_SEND;
                if (avail < (double)need) {
                    double wait = ((double)need - avail) / g_rate;
                    c->paced_wait = true;
                    ev_timer_stop(g_loop, &c->timer);
                    ev_timer_set(&c->timer, wait, 0.);
                    ev_timer_start(g_loop, &c->timer);
                    oconn_rearm(c);
                    return true;
                }
                if (avail < (double)want) {
                    want = (size_t)avail;
                }
            }
            if (c->buf == NULL) {
                c->buf = malloc(ORIGIN_BLOCK);
                if (c->buf == NULL) {
                    die("out of memory");
                }
            }
            pat_fill(&g_pat, c->seed, c->body_off, c->buf, want);
            c->body_off += want;
            c->buf_pos = 0;
            c->buf_len = want;
        }
        ssize_t n =
            send(c->fd, c->buf + c->buf_pos, c->buf_len - c->buf_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return true;
            }
            g_st.responses_aborted++;
            g_st.inflight--;
            oconn_close(c);
            return false;
        }
        c->buf_pos += (size_t)n;
        c->body_sent += (uint64_t)n;
        g_st.body_bytes += (uint64_t)n;
    }
}

static void oconn_start_send(struct oconn *c)
{
    c->state = OCONN_S_SEND;
    c->paced_wait = false;
    c->rate_t0 = ev_time();
    c->body_sent = 0;
    c->buf_pos = c->buf_len = 0;
    ev_timer_stop(g_loop, &c->timer);
    oconn_rearm(c);
}

/*
 * READ_HEAD step: start the response to one complete buffered head. Returns 1 if it did, 0 if the
 * head is incomplete, -1 if the connection was closed (and freed).
 */
static int oconn_step_read(struct oconn *c)
{
    char *hend = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (hend == NULL) {
        if (c->in_len == sizeof(c->in)) {
            g_st.status_400++;
            oconn_close(c);
            return -1;
        }
        return 0;
    }
    size_t head_end = (size_t)(hend - c->in) + 4;
    if (!oconn_prepare(c, head_end)) {
        g_st.status_400++;
        oconn_close(c);
        return -1;
    }
    memmove(c->in, c->in + head_end, c->in_len - head_end);
    c->in_len -= head_end;
    ev_timer_stop(g_loop, &c->timer);
    if (c->stats_reply) {
        oconn_start_send(c);
        return 1;
    }
    g_st.inflight++;
    if (g_st.inflight > g_st.inflight_peak) {
        g_st.inflight_peak = g_st.inflight;
    }
    if (g_delay > 0) {
        c->state = OCONN_S_DELAY;
        ev_timer_set(&c->timer, g_delay, 0.);
        ev_timer_start(g_loop, &c->timer);
        oconn_rearm(c);
    } else {
        oconn_start_send(c);
    }
    return 1;
}

static void oconn_rearm(struct oconn *c)
{
    int want = 0;
    if (c->state == OCONN_S_READ_HEAD) {
        want = EV_READ;
    } else if (c->state == OCONN_S_SEND && !c->paced_wait) {
        want = EV_WRITE;
    }
    if (want == 0) {
        ev_io_stop(g_loop, &c->io);
        return;
    }
    if (ev_is_active(&c->io) && (c->io.events & (EV_READ | EV_WRITE)) == want) {
        return;
    }
    ev_io_stop(g_loop, &c->io);
    ev_io_set(&c->io, c->fd, want);
    ev_io_start(g_loop, &c->io);
}

static void oconn_close(struct oconn *c)
{
    ev_io_stop(g_loop, &c->io);
    ev_timer_stop(g_loop, &c->timer);
    close(c->fd);
    c->fd = -1;
    g_st.conns_open--;
    free(c->buf);
    free(c->text);
    free(c);
}

static void on_conn_io(struct ev_loop *loop, ev_io *w, int revents)
{
    struct oconn *c = (struct oconn *)(void *)((char *)w - offsetof(struct oconn, io));
    (void)loop;
    if ((revents & EV_READ) && c->state == OCONN_S_READ_HEAD) {
        ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            oconn_close(c);
            return;
        }
        if (n > 0) {
            c->in_len += (size_t)n;
            oconn_step_read(c);
        }
        return;
    }
    if ((revents & EV_WRITE) && c->state == OCONN_S_SEND) {
        oconn_send(c);
    }
}

static void on_conn_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct oconn *c = (struct oconn *)(void *)((char *)w - offsetof(struct oconn, timer));
    (void)loop;
    (void)revents;
    switch (c->state) {
    case OCONN_S_READ_HEAD:
        oconn_close(c); /* idle keep-alive timeout */
        break;
    case OCONN_S_DELAY:
        oconn_start_send(c);
        break;
    case OCONN_S_SEND:
        c->paced_wait = false;
        if (oconn_send(c)) {
            oconn_rearm(c);
        }
        break;
    }
}

static void on_listen_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct oconn *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            die("out of memory");
        }
        c->fd = fd;
        c->state = OCONN_S_READ_HEAD;
        ev_io_init(&c->io, on_conn_io, fd, EV_READ);
        ev_timer_init(&c->timer, on_conn_timer, ORIGIN_IDLE_TIMEOUT, 0.);
        ev_timer_start(loop, &c->timer);
        oconn_rearm(c);
        g_st.conns_accepted++;
        g_st.conns_open++;
        if (g_st.conns_open > g_st.conns_peak) {
            g_st.conns_peak = g_st.conns_open;
        }
    }
}

static void on_stop(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

static void on_lifetime(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    fprintf(stderr, "origin: lifetime limit reached, exiting\n");
    ev_break(loop, EVBREAK_ALL);
}

/* "50ms", "0.2s", "1m" or a bare number of milliseconds. */
static double parse_duration(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || v < 0) {
        die("bad duration '%s'", s);
    }
    if (*e == '\0' || strcmp(e, "ms") == 0) {
        return v / 1e3;
    }
    if (strcmp(e, "s") == 0) {
        return v;
    }
    if (strcmp(e, "us") == 0) {
        return v / 1e6;
    }
    if (strcmp(e, "m") == 0) {
        return v * 60;
    }
    die("bad duration '%s'", s);
}

/* Bytes per second: a bare number, or with a decimal suffix k, M, G (100M = 100e6); 0 = unlimited.
 */
static double parse_rate(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || v < 0) {
        die("bad rate '%s'", s);
    }
    if (*e == 'k' || *e == 'K') {
        v *= 1e3;
        e++;
    } else if (*e == 'M') {
        v *= 1e6;
        e++;
    } else if (*e == 'G') {
        v *= 1e9;
        e++;
    }
    if (strcmp(e, "") != 0 && strcmp(e, "B/s") != 0) {
        die("bad rate '%s'", s);
    }
    return v;
}

static int listen_on(const char *spec, unsigned *port_out)
{
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof(host)) {
        die("bad listen address '%s' (want ADDR:PORT)", spec);
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        die("bad listen address '%s'", spec);
    }
    if ((ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
        die("refusing to listen on non-loopback address %s", host);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        die("socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        die("bind %s: %s", spec, strerror(errno));
    }
    if (listen(fd, 4096) != 0) {
        die("listen: %s", strerror(errno));
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *port_out = ntohs(sa.sin_port);
    return fd;
}

/* Write the objects named by <paths> as files under <dir> (for the static-file ceiling). */
static int write_objects(const char *dir, char **paths, int n)
{
    uint8_t *buf = malloc(1 << 20);
    if (buf == NULL) {
        die("out of memory");
    }
    for (int i = 0; i < n; i++) {
        const char *path = paths[i];
        char file[4096];
        if (snprintf(file, sizeof(file), "%s%s", dir, path) >= (int)sizeof(file)) {
            die("path too long");
        }
        /* mkdir -p of the parent directories */
        for (char *s = file + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
            *s = '\0';
            if (mkdir(file, 0755) != 0 && errno != EEXIST) {
                die("mkdir %s: %s", file, strerror(errno));
            }
            *s = '/';
        }
        uint64_t size = object_size(path, strlen(path));
        uint64_t seed = pat_seed(path, strlen(path));
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            die("open %s: %s", file, strerror(errno));
        }
        for (uint64_t off = 0; off < size;) {
            size_t len = size - off < (1u << 20) ? (size_t)(size - off) : (1u << 20);
            pat_fill(&g_pat, seed, off, buf, len);
            if (write(fd, buf, len) != (ssize_t)len) {
                die("write %s: %s", file, strerror(errno));
            }
            off += len;
        }
        close(fd);
    }
    free(buf);
    return 0;
}

static void usage(void)
{
    fputs("usage: origin [-l 127.0.0.1:PORT] [-d DELAY] [-r RATE] [-P PORTFILE] [-S STATSFILE]\n"
          "              [-t MAX_SECONDS]\n"
          "       origin -w DIR PATH...   write the objects as files under DIR and exit\n"
          "  DELAY: first-byte delay, e.g. 50ms (default), 0.2s, 0\n"
          "  RATE:  per-response bytes/s, e.g. 100M (default), 25000000, 0 = unlimited\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *listen_spec = "127.0.0.1:0";
    const char *portfile = NULL;
    const char *statsfile = NULL;
    const char *writedir = NULL;
    double lifetime = 3600;
    int opt;
    while ((opt = getopt(argc, argv, "l:d:r:P:S:t:w:h")) != -1) {
        switch (opt) {
        case 'l':
            listen_spec = optarg;
            break;
        case 'd':
            g_delay = parse_duration(optarg);
            break;
        case 'r':
            g_rate = parse_rate(optarg);
            break;
        case 'P':
            portfile = optarg;
            break;
        case 'S':
            statsfile = optarg;
            break;
        case 't':
            lifetime = atof(optarg);
            break;
        case 'w':
            writedir = optarg;
            break;
        default:
            usage();
        }
    }
    pat_table_init(&g_pat);
    if (writedir != NULL) {
        return write_objects(writedir, argv + optind, argc - optind);
    }
    if (optind != argc) {
        usage();
    }
    signal(SIGPIPE, SIG_IGN);
    unsigned port;
    int lfd = listen_on(listen_spec, &port);
    g_loop = ev_default_loop(EVFLAG_AUTO);
    ev_io lw;
    ev_io_init(&lw, on_listen_readable, lfd, EV_READ);
    ev_io_start(g_loop, &lw);
    ev_signal sint;
    ev_signal sterm;
    ev_signal_init(&sint, on_stop, SIGINT);
    ev_signal_init(&sterm, on_stop, SIGTERM);
    ev_signal_start(g_loop, &sint);
    ev_signal_start(g_loop, &sterm);
    ev_timer life;
    ev_timer_init(&life, on_lifetime, lifetime, 0.);
    ev_timer_start(g_loop, &life);
    if (portfile != NULL) {
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%u\n", port) < 0 || fclose(f) != 0 ||
            rename(tmp, portfile) != 0) {
            die("cannot write %s", portfile);
        }
    }
    fprintf(stderr, "origin: listening on 127.0.0.1:%u delay=%.0fms rate=%.0fB/s\n", port,
            g_delay * 1e3, g_rate);
    ev_run(g_loop, 0);
    if (statsfile != NULL) {
        char tmp[2048];
        size_t n = stats_text(tmp, sizeof(tmp));
        FILE *f = fopen(statsfile, "w");
        if (f != NULL) {
            fwrite(tmp, 1, n, f);
            fclose(f);
        }
    }
    return 0;
}
