/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * access: the access log, one line per client request, in lancache's "cachelog" format
 * (byte-compatible with the dashboards that parse it) or as one JSON object per line:
 *
 *   [IDENT] CLIENT_IP / - - - [DD/Mon/YYYY:HH:MM:SS +ZZZZ] "METHOD URI PROTO" STATUS BYTES
 *   "REFERER" "USER_AGENT" "CACHE_STATUS" "HOST" "RANGE"
 *
 * An absent value is "-"; a '"' inside a value is written as '\'' and control bytes as '?', so
 * every line keeps the 15 fields of the format above. Lines are appended to a buffer that
 * access_flush() writes (main calls it once per loop iteration, and it is flushed when full), so
 * logging never issues one write per request. Owns: the file descriptor and the buffer.
 */
#ifndef CACHEPARTY_ACCESS_H
#define CACHEPARTY_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* A borrowed byte string; p == NULL or len == 0 means absent ("-"). */
struct access_str {
    const char *p;
    size_t len;
};

struct access_entry {
    struct access_str ident;   /* cache identifier */
    struct access_str client;  /* client IP, no port */
    struct access_str request; /* "METHOD URI PROTO" */
    int status;
    uint64_t bytes; /* body bytes sent */
    struct access_str referer;
    struct access_str user_agent;
    const char *cache_status; /* "HIT", "MISS" or NULL ("-") */
    struct access_str host;
    struct access_str range;
};

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
