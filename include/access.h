/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * access: the access log, one line per client request, as lancache monolithic's nginx writes it:
 * its "cachelog" format byte for byte (the dashboards that parse it keep working), or its
 * "cachelog-json" format, one JSON object per line.
 *
 *   [IDENT] CLIENT_IP / XFF - - [DD/Mon/YYYY:HH:MM:SS +ZZZZ] "METHOD URI PROTO" STATUS BYTES
 *   "REFERER" "USER_AGENT" "CACHE_STATUS" "HOST" "RANGE"
 *
 * (nginx's '[$cacheidentifier] $remote_addr / $http_x_forwarded_for - $remote_user [$time_local]
 * "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
 * "$upstream_cache_status" "$host" "$http_range"'.) Every value is written as nginx's default
 * escaping writes it: '"', '\', control bytes and bytes >= 0x7F as \xHH (uppercase hex), so every
 * line is ASCII and keeps its fields; an absent value is "-", a field present but empty is
 * written empty. HOST is lowercased and without its port ($host). Each value is cut at a bound
 * (ACCESS_FIELD_MAX output bytes; the request line ACCESS_REQUEST_MAX), never inside an escape.
 *
 * The JSON object has monolithic's 17 keys in its order: timestamp ("$msec", seconds with
 * milliseconds, a string), time_local, cache_identifier, remote_addr, forwarded_for,
 * remote_user, status (a string), bytes_sent (a number), referer, user_agent,
 * upstream_cache_status, host, http_range, method, path (the request-target as sent), proto,
 * scheme; an absent value is "" (as nginx's escape=json writes it). Strings are escaped as
 * nginx's escape=json does ('"', '\', control bytes as \n, \r, \t, \b, \f or \u00XX), and
 * bytes that are not valid UTF-8, which nginx passes raw, as \u00XX (each byte as the Latin-1
 * character of its value), so that every line is valid JSON.
 *
 * Lines are appended to a buffer that access_flush() writes (main calls it once per loop
 * iteration, and it is flushed when full), so logging never issues one write per request. Owns:
 * the file descriptor and the buffer.
 */
#ifndef CACHEPARTY_ACCESS_H
#define CACHEPARTY_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* A borrowed byte string; p == NULL means absent ("-"), len == 0 with p set is empty. */
struct access_str {
    const char *p;
    size_t len;
};

struct access_entry {
    struct access_str ident;         /* cache identifier; the raw Host when there is none */
    struct access_str client;        /* client IP, no port */
    struct access_str forwarded_for; /* X-Forwarded-For as sent */
    struct access_str method;        /* the request line's three parts, as sent */
    struct access_str target;
    struct access_str proto;       /* "HTTP/1.1" */
    struct access_str request_uri; /* nginx's $request_uri: the target's path and query (the
                                      JSON "path"; NULL: the target) */
    int status;
    uint64_t bytes; /* body bytes sent */
    struct access_str referer;
    struct access_str user_agent;
    const char *cache_status; /* "HIT", "MISS", "BYPASS" or NULL (not proxied: "-") */
    struct access_str host;   /* the request's host, as sent (lowercased, port cut when written) */
    struct access_str range;
};

#define ACCESS_FIELD_MAX 2048   /* output bytes of one value (escapes included) */
#define ACCESS_REQUEST_MAX 8192 /* output bytes of the request line */

/* Opens <path> ("-" = stdout, NULL = off). Returns 0 or -errno (logging then stays off). */
int access_open(const char *path, enum cfg_access_format fmt);
/* Flushes and reopens the same path (after logrotate's rename). */
int access_reopen(void);
/* Flushes and closes. */
void access_close(void);
/* Formats one line into the buffer. No-op when off. */
void access_log(const struct access_entry *e, uint64_t wall_ms);
/* Writes the buffered lines. */
void access_flush(void);
/* Formats one cachelog line (no newline) into <out>; returns its length. Pure; for tests. */
size_t access_format_cachelog(const struct access_entry *e, uint64_t wall_ms, char *out,
                              size_t cap);
size_t access_format_json(const struct access_entry *e, uint64_t wall_ms, char *out, size_t cap);

#endif
