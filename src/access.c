/* SPDX-License-Identifier: BSD-2-Clause */
/* access: the lancache-compatible access log. See access.h. */
#include "access.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define ACCESS_BUF (64 * 1024)
#define ACCESS_LINE 16384
#define ACCESS_FIELD_MAX 2048 /* longer values are cut, keeping lines bounded and valid */

static struct log_file access_file = LOG_FILE_CLOSED;
static enum cfg_access_format access_fmt;
static char access_buf[ACCESS_BUF];
static size_t access_len;

struct w {
    char *p;
    size_t len, cap;
};

static void wc(struct w *w, char ch)
{
    if (w->len < w->cap)
        w->p[w->len++] = ch;
}

static void ws(struct w *w, const char *s)
{
    while (*s)
        wc(w, *s++);
}

/* A value inside quotes of the cachelog line. */
static void wq(struct w *w, struct access_str s)
{
    if (s.p == NULL || s.len == 0) {
        wc(w, '-');
        return;
    }
    for (size_t i = 0; i < s.len && i < ACCESS_FIELD_MAX; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        wc(w, ch == '"' ? '\'' : (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch);
    }
}

/* A value outside quotes (identifier, client): no spaces either. */
static void wtok(struct w *w, struct access_str s)
{
    if (s.p == NULL || s.len == 0) {
        wc(w, '-');
        return;
    }
    for (size_t i = 0; i < s.len && i < 512; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        wc(w, (ch <= 0x20 || ch == 0x7f || ch == '"' || ch == ']') ? '?' : (char)ch);
    }
}

static void time_str(uint64_t wall_ms, char *out, size_t cap)
{
    static time_t cached_sec = -1;
    static char cached[40];
    time_t sec = (time_t)(wall_ms / 1000);
    if (sec != cached_sec) {
        struct tm tm;
        localtime_r(&sec, &tm);
        strftime(cached, sizeof(cached), "%d/%b/%Y:%H:%M:%S %z", &tm);
        cached_sec = sec;
    }
    snprintf(out, cap, "%s", cached);
}

size_t access_format_cachelog(const struct access_entry *e, uint64_t wall_ms, char *out, size_t cap)
{
    struct w w = {out, 0, cap};
    char t[40], num[48];
    time_str(wall_ms, t, sizeof(t));
    wc(&w, '[');
    wtok(&w, e->ident);
    ws(&w, "] ");
    wtok(&w, e->client);
    ws(&w, " / - - - [");
    ws(&w, t);
    ws(&w, "] \"");
    wq(&w, e->request);
    snprintf(num, sizeof(num), "\" %03d %llu \"", e->status, (unsigned long long)e->bytes);
    ws(&w, num);
    wq(&w, e->referer);
    ws(&w, "\" \"");
    wq(&w, e->user_agent);
    ws(&w, "\" \"");
    ws(&w, e->cache_status ? e->cache_status : "-");
    ws(&w, "\" \"");
    wq(&w, e->host);
    ws(&w, "\" \"");
    wq(&w, e->range);
    wc(&w, '"');
    return w.len;
}

static void wjs(struct w *w, const char *key, struct access_str s, bool last)
{
    wc(w, '"');
    ws(w, key);
    ws(w, "\":");
    if (s.p == NULL || s.len == 0) {
        ws(w, "null");
    } else {
        wc(w, '"');
        for (size_t i = 0; i < s.len && i < ACCESS_FIELD_MAX; i++) {
            unsigned char ch = (unsigned char)s.p[i];
            if (ch == '"' || ch == '\\') {
                wc(w, '\\');
                wc(w, (char)ch);
            } else if (ch < 0x20 || ch == 0x7f) {
                char esc[8];
                snprintf(esc, sizeof(esc), "\\u%04x", ch);
                ws(w, esc);
            } else {
                wc(w, (char)ch); /* bytes >= 0x80 pass as they are */
            }
        }
        wc(w, '"');
    }
    if (!last)
        wc(w, ',');
}

size_t access_format_json(const struct access_entry *e, uint64_t wall_ms, char *out, size_t cap)
{
    struct w w = {out, 0, cap};
    char t[40], num[64];
    time_str(wall_ms, t, sizeof(t));
    wc(&w, '{');
    wjs(&w, "identifier", e->ident, false);
    wjs(&w, "client", e->client, false);
    wjs(&w, "time", (struct access_str){t, strlen(t)}, false);
    wjs(&w, "request", e->request, false);
    snprintf(num, sizeof(num), "\"status\":%d,\"bytes\":%llu,", e->status,
             (unsigned long long)e->bytes);
    ws(&w, num);
    wjs(&w, "referer", e->referer, false);
    wjs(&w, "user_agent", e->user_agent, false);
    const char *cs = e->cache_status ? e->cache_status : "-";
    wjs(&w, "cache_status", (struct access_str){cs, strlen(cs)}, false);
    wjs(&w, "host", e->host, false);
    wjs(&w, "range", e->range, true);
    wc(&w, '}');
    return w.len;
}

int access_open(const char *path, enum cfg_access_format fmt)
{
    access_close();
    access_fmt = fmt;
    int rc = log_file_open(&access_file, path, STDOUT_FILENO);
    if (rc < 0) {
        log_err("cannot open access log %s: %s", path, strerror(-rc));
        errno = -rc;
    }
    return rc;
}

int access_reopen(void)
{
    if (access_file.path == NULL)
        return 0;
    access_flush();
    int rc = log_file_reopen(&access_file);
    if (rc < 0)
        log_err("cannot reopen access log %s: %s (keeping the old file)", access_file.path,
                strerror(-rc));
    return rc;
}

void access_close(void)
{
    if (access_file.fd >= 0)
        access_flush();
    log_file_close(&access_file);
    access_len = 0;
}

void access_flush(void)
{
    size_t off = 0;
    while (access_file.fd >= 0 && off < access_len) {
        ssize_t n = write(access_file.fd, access_buf + off, access_len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            log_err("access log write: %s: %zu bytes dropped", strerror(errno), access_len - off);
            break;
        }
        off += (size_t)n;
    }
    access_len = 0;
}

void access_log(const struct access_entry *e, uint64_t wall_ms)
{
    if (access_file.fd < 0)
        return;
    if (ACCESS_BUF - access_len < ACCESS_LINE + 1)
        access_flush();
    char *p = access_buf + access_len;
    size_t n = access_fmt == CFG_ACCESS_JSON ? access_format_json(e, wall_ms, p, ACCESS_LINE)
                                             : access_format_cachelog(e, wall_ms, p, ACCESS_LINE);
    p[n] = '\n';
    access_len += n + 1;
}
