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

#define ACCESS_BUF (128 * 1024)
#define ACCESS_LINE (32 * 1024) /* more than every value at its bound, and the fixed text */

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

static const char hexdig[] = "0123456789ABCDEF";

/* A value as nginx's default access-log escaping writes it, at most <max> output bytes: '"',
 * '\', control bytes and bytes >= 0x7F as \xHH; absent "-", empty nothing. */
static void wesc(struct w *w, struct access_str s, size_t max)
{
    if (s.p == NULL) {
        wc(w, '-');
        return;
    }
    size_t out = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        bool esc = ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f;
        if (out + (esc ? 4 : 1) > max)
            break;
        if (esc) {
            wc(w, '\\');
            wc(w, 'x');
            wc(w, hexdig[ch >> 4]);
            wc(w, hexdig[ch & 15]);
            out += 4;
        } else {
            wc(w, (char)ch);
            out++;
        }
    }
}

/* $host: <s> lowercased, without its port ("[v6]:port" keeps the brackets), into <low> (at
 * most ACCESS_FIELD_MAX bytes), one trailing dot dropped as nginx does. Absent or empty: p NULL. */
static struct access_str host_of(struct access_str s, char *low)
{
    if (s.p == NULL || s.len == 0)
        return (struct access_str){NULL, 0}; /* (nginx's $host is then the server name) */
    size_t n = s.len;
    if (s.p[0] == '[') {
        const char *rb = memchr(s.p, ']', s.len);
        if (rb != NULL)
            n = (size_t)(rb - s.p) + 1;
    } else {
        const char *colon = memchr(s.p, ':', s.len);
        if (colon != NULL)
            n = (size_t)(colon - s.p);
    }
    if (n > 1 && s.p[n - 1] == '.')
        n--; /* (nginx drops a trailing dot: a name, not a different host) */
    if (n > ACCESS_FIELD_MAX)
        n = ACCESS_FIELD_MAX;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)(s.p[i] >= 'A' && s.p[i] <= 'Z' ? s.p[i] - 'A' + 'a' : s.p[i]);
    return (struct access_str){low, n};
}

/* The request line "METHOD TARGET PROTO" (nginx's $request), escaped, within its bound. */
static void wrequest(struct w *w, const struct access_entry *e)
{
    if (e->method.p == NULL) {
        wc(w, '-');
        return;
    }
    char line[ACCESS_REQUEST_MAX];
    size_t n = 0;
    const struct access_str parts[3] = {e->method, e->target, e->proto};
    for (int i = 0; i < 3; i++) {
        if (i > 0 && n < sizeof(line))
            line[n++] = ' ';
        size_t k = parts[i].len < sizeof(line) - n ? parts[i].len : sizeof(line) - n;
        if (k > 0)
            memcpy(line + n, parts[i].p, k);
        n += k;
    }
    wesc(w, (struct access_str){line, n}, ACCESS_REQUEST_MAX);
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
    wesc(&w, e->ident, ACCESS_FIELD_MAX);
    ws(&w, "] ");
    wesc(&w, e->client, ACCESS_FIELD_MAX);
    ws(&w, " / ");
    wesc(&w, e->forwarded_for, ACCESS_FIELD_MAX);
    ws(&w, " - - [");
    ws(&w, t);
    ws(&w, "] \"");
    wrequest(&w, e);
    snprintf(num, sizeof(num), "\" %03d %llu \"", e->status, (unsigned long long)e->bytes);
    ws(&w, num);
    wesc(&w, e->referer, ACCESS_FIELD_MAX);
    ws(&w, "\" \"");
    wesc(&w, e->user_agent, ACCESS_FIELD_MAX);
    ws(&w, "\" \"");
    ws(&w, e->cache_status ? e->cache_status : "-");
    ws(&w, "\" \"");
    char low[ACCESS_FIELD_MAX];
    wesc(&w, host_of(e->host, low), ACCESS_FIELD_MAX);
    ws(&w, "\" \"");
    wesc(&w, e->range, ACCESS_FIELD_MAX);
    wc(&w, '"');
    return w.len;
}

/* The length of the valid UTF-8 sequence at <p>[0..n) (RFC 3629: no overlong form, no
 * surrogate, at most U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t k;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return k;
}

/* "key":"value" as nginx's escape=json writes it (absent: ""), bytes that are not UTF-8 as
 * \u00XX, at most <max> output bytes for the value; a ',' after unless <last>. */
static void wjs(struct w *w, const char *key, struct access_str s, size_t max, bool last)
{
    wc(w, '"');
    ws(w, key);
    ws(w, "\":\"");
    const unsigned char *p = (const unsigned char *)s.p;
    size_t out = 0;
    for (size_t i = 0; p != NULL && i < s.len;) {
        unsigned char ch = p[i];
        char esc[8];
        size_t k = 1;
        const char *rep = NULL;
        if (ch == '"')
            rep = "\\\"";
        else if (ch == '\\')
            rep = "\\\\";
        else if (ch == '\n')
            rep = "\\n";
        else if (ch == '\r')
            rep = "\\r";
        else if (ch == '\t')
            rep = "\\t";
        else if (ch == '\b')
            rep = "\\b";
        else if (ch == '\f')
            rep = "\\f";
        else if (ch < 0x20 || (ch >= 0x80 && (k = utf8_len(p + i, s.len - i)) == 0)) {
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
            rep = esc;
            k = 1;
        }
        size_t len = rep != NULL ? strlen(rep) : k;
        if (out + len > max)
            break;
        if (rep != NULL)
            ws(w, rep);
        else
            for (size_t j = 0; j < k; j++)
                wc(w, (char)p[i + j]);
        out += len;
        i += k;
    }
    wc(w, '"');
    if (!last)
        wc(w, ',');
}

size_t access_format_json(const struct access_entry *e, uint64_t wall_ms, char *out, size_t cap)
{
    struct w w = {out, 0, cap};
    char t[40], num[64], low[ACCESS_FIELD_MAX];
    time_str(wall_ms, t, sizeof(t));
    wc(&w, '{');
    snprintf(num, sizeof(num), "%llu.%03u", (unsigned long long)(wall_ms / 1000),
             (unsigned)(wall_ms % 1000));
    wjs(&w, "timestamp", (struct access_str){num, strlen(num)}, ACCESS_FIELD_MAX, false);
    wjs(&w, "time_local", (struct access_str){t, strlen(t)}, ACCESS_FIELD_MAX, false);
    wjs(&w, "cache_identifier", e->ident, ACCESS_FIELD_MAX, false);
    wjs(&w, "remote_addr", e->client, ACCESS_FIELD_MAX, false);
    wjs(&w, "forwarded_for", e->forwarded_for, ACCESS_FIELD_MAX, false);
    wjs(&w, "remote_user", (struct access_str){NULL, 0}, ACCESS_FIELD_MAX, false);
    snprintf(num, sizeof(num), "\"status\":\"%03d\",\"bytes_sent\":%llu,", e->status,
             (unsigned long long)e->bytes);
    ws(&w, num);
    wjs(&w, "referer", e->referer, ACCESS_FIELD_MAX, false);
    wjs(&w, "user_agent", e->user_agent, ACCESS_FIELD_MAX, false);
    const char *cs = e->cache_status;
    wjs(&w, "upstream_cache_status", (struct access_str){cs, cs ? strlen(cs) : 0}, ACCESS_FIELD_MAX,
        false);
    wjs(&w, "host", host_of(e->host, low), ACCESS_FIELD_MAX, false);
    wjs(&w, "http_range", e->range, ACCESS_FIELD_MAX, false);
    wjs(&w, "method", e->method, ACCESS_FIELD_MAX, false);
    wjs(&w, "path", e->request_uri.p != NULL ? e->request_uri : e->target, ACCESS_REQUEST_MAX,
        false);
    wjs(&w, "proto", e->proto, ACCESS_FIELD_MAX, false);
    wjs(&w, "scheme", (struct access_str){"http", 4}, ACCESS_FIELD_MAX, true);
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
