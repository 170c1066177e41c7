/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ngxcache: nginx's proxy_cache files as lancache writes them (docs/lancache-format.md), read so
 * that a lancache cache can be served and moved into cacheparty's own chunks. Pure: no I/O, no
 * ev.h; the caller reads the file and passes its first bytes and its size.
 *
 * A file is [binary header][ "\nKEY: " key "\n" ][the origin's response head][body]. The binary
 * header is nginx's C struct (version 5, nginx 1.11.10 and later) in the writer's native layout:
 * 336 bytes on 64-bit targets and on 32-bit ones with a 64-bit time_t, 308 bytes with a 32-bit
 * time_t. The layout is told by where "\nKEY: " sits; both are little-endian here (every Pi and
 * PC target). The 336-byte layout is checked against files of Debian's nginx 1.22 on x86_64; the
 * 308-byte one follows the ABI rules and was not checked against files of a 32-bit nginx.
 *
 * lancache's key is $cacheidentifier $uri $slice_range, with nothing between them: the identifier
 * (a cache-domains service name, "steam" for the Steam agent, else the Host header as sent), the
 * decoded and normalised path, then "bytes=S-E", the whole slice window (S a multiple of the
 * slice size, E = S + slice - 1) whatever the object's length. The file's name is md5(key) in
 * lowercase hex, under <hex[30..32]>/<hex[28..30]>/ (levels=2:2).
 *
 * A file is trusted only when every check below holds (ngxcache_parse, then ngxcache_slice); the
 * first that fails is the reason it is skipped (enum ngxcache_verdict).
 */
#ifndef CACHEPARTY_NGXCACHE_H
#define CACHEPARTY_NGXCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

#define NGXCACHE_FORMAT 5u
#define NGXCACHE_HDR_64 336u /* sizeof the header struct: LP64, and ILP32 with a 64-bit time_t */
#define NGXCACHE_HDR_32 308u /* ILP32 with a 32-bit time_t */
#define NGXCACHE_PREFIX_MAX 65535u /* body_start is a u16: the most a caller must read */
#define NGXCACHE_NAME_LEN 32u      /* md5 in hex */
#define NGXCACHE_KEY_MAX 8192u     /* longer keys are not looked up (nginx: proxy_buffer_size) */
/* Room for ngxcache_path() beyond strlen(dir): "/ab/cd/" + 32 hex + NUL. */
#define NGXCACHE_PATH_EXTRA 40u

/* Why a file is not adopted (0: it is). The names (ngxcache_verdict_name) are metric labels. */
#define NGXCACHE_VERDICTS(X)                                                                       \
    X(OK, "ok", "adoptable")                                                                       \
    X(NOT_FILE, "not_file", "not a regular file (a symbolic link, a directory...)")                \
    X(TEMP, "temp", "an nginx temporary file (a fill that never finished)")                        \
    X(NAME, "name", "not an nginx cache file name (32 hex digits under ab/cd/)")                   \
    X(YOUNG, "young", "younger than lancache_settle (nginx may still be writing it)")              \
    X(SHORT, "short", "shorter than its header")                                                   \
    X(LAYOUT, "layout", "no KEY line where nginx's header ends (not an nginx cache file)")         \
    X(VERSION, "version", "an nginx cache format other than version 5")                            \
    X(OFFSETS, "offsets", "header_start or body_start inconsistent with the key and the file")     \
    X(CRC, "crc", "the key's crc32 differs from the header's (a damaged header)")                  \
    X(VARY, "vary", "a Vary variant (stored under another name than md5 of its key)")              \
    X(MD5, "md5", "the name is not the md5 of the key (damaged, or another file)")                 \
    X(KEY, "key", "the key is not lancache's $cacheidentifier$uri$slice_range form")               \
    X(HEAD, "head", "the stored response head does not parse")                                     \
    X(STATUS, "status", "a status lancache does not cache (only 200 and 206 are)")                 \
    X(RANGE, "range", "the Content-Range disagrees with the key's slice")                          \
    X(LENGTH, "length", "the body's length disagrees with the head (truncated or extended)")       \
    X(CHUNKED, "chunked", "a 200 stored without a Content-Length (chunked)")                       \
    X(VERSION_DIFFERS, "version_differs",                                                          \
      "its ETag, Last-Modified or length differ from the object's other slices")                   \
    X(IO, "io", "could not be read")

enum ngxcache_verdict {
#define NGXCACHE_ENUM(e, name, text) NGXCACHE_##e,
    NGXCACHE_VERDICTS(NGXCACHE_ENUM)
#undef NGXCACHE_ENUM
        NGXCACHE_N_VERDICTS
};

/* A short lower_snake name for <v> ("ok", "temp"...), and one line saying what it means. */
const char *ngxcache_verdict_name(enum ngxcache_verdict v);
const char *ngxcache_verdict_text(enum ngxcache_verdict v);

/* What a file holds. Every pointer borrows the buffer given to ngxcache_parse. */
struct ngxcache_file {
    unsigned hdr_size;                      /* NGXCACHE_HDR_64 or NGXCACHE_HDR_32 */
    int64_t valid_sec, last_modified, date; /* date: when nginx stored it (epoch s) */
    const char *key;                        /* not NUL-terminated */
    size_t key_len;
    size_t header_start, body_start;
    uint64_t body_len;   /* file size - body_start */
    struct h1_resp resp; /* the stored head, spans relative to <head> */
    const char *head;    /* buf + header_start */
    size_t head_len;     /* body_start - header_start */
    /* From the head, once ngxcache_slice accepted it: the object's bytes this file holds. */
    uint64_t first, last; /* inclusive */
    uint64_t total;       /* the object's length */
};

/*
 * Parses the first <n> bytes of a file of <file_size> bytes named <name> (the last path
 * component, NULL: not checked) into <out>. <n> must cover the head: min(file_size,
 * NGXCACHE_PREFIX_MAX) bytes are always enough (body_start never exceeds that). Checks, in this
 * order: the name (32 lowercase hex digits, not a temporary "<name>.0000000001"), the size, the
 * layout and version, the offsets, the key's crc32, vary_len 0, md5(key) == name, and that the
 * head parses as one HTTP/1.x response head ending exactly at body_start.
 */
enum ngxcache_verdict ngxcache_parse(const uint8_t *buf, size_t n, uint64_t file_size,
                                     const char *name, struct ngxcache_file *out);

/*
 * The slice checks for slice size <slice>: the key ends in "bytes=S-E" with S a multiple of
 * <slice> and E = S + slice - 1; then a 206 needs exactly one "Content-Range: bytes a-b/T" with
 * a == S and b == min(E, T - 1), a Content-Length (if any) and a body of b - a + 1 bytes; a 200
 * is taken only under the S == 0 key, with a Content-Length (not chunked) equal to the body's
 * length: the whole object. Sets out->first, last, total; *prefix_len (may be NULL) receives the
 * length of the key before "bytes=" ($cacheidentifier$uri).
 */
enum ngxcache_verdict ngxcache_slice(struct ngxcache_file *f, uint64_t slice, size_t *prefix_len);

/* Whether <name>[0..len) is a temporary file of nginx's: 32 hex digits, '.', 10 digits. */
bool ngxcache_is_temp_name(const char *name, size_t len);

/*
 * $uri of a request path <path>[0..len) (no query) as nginx makes it: %XX decoded, "//" merged,
 * "." and ".." segments resolved. Writes at most <cap> bytes to <out>; returns the length, or -1
 * when nginx would refuse the path (a bad escape, ".." above the root, a NUL, not starting with
 * '/') or it does not fit.
 */
ssize_t ngxcache_uri(const char *path, size_t len, char *out, size_t cap);

/* lancache's key "<ident><uri>bytes=<S>-<S+slice-1>" into <out> (at most <cap> bytes, no NUL);
 * returns its length, or -1 when it does not fit. */
ssize_t ngxcache_key(const char *ident, size_t ident_len, const char *uri, size_t uri_len,
                     uint64_t start, uint64_t slice, char *out, size_t cap);

/* The name of the file of <key>: md5 in 32 lowercase hex digits and a NUL. */
void ngxcache_name(const char *key, size_t key_len, char out[NGXCACHE_NAME_LEN + 1]);

/* "<dir>/<hex[30..32]>/<hex[28..30]>/<hex>" for <key>; -1 when it does not fit <cap>. */
int ngxcache_path(const char *dir, const char *key, size_t key_len, char *out, size_t cap);

#endif
