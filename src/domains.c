/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * domains: owns one load of a uklans/cache-domains checkout: the service names, a pool of the
 * listed names, the entries in load order and a hash index over them. Immutable once loaded.
 *
 * Layout. entries[] keeps load order (services in cache_domains.json order, then their files,
 * then lines), deduplicated on (name, wildcard) with the first occurrence kept: the DNS export
 * walks it. A wildcard "*.x" is stored as its base "x" with wild set. slots[] is an open
 * addressing index (linear probing, load <= 1/2) of entry index + 1, 0 = empty.
 * The hash is FNV-1a taken from the LAST byte to the first, so one right-to-left pass over a host
 * yields the hash of every suffix that starts on a label boundary: a lookup hashes the host once
 * and probes once per label, without allocating.
 *
 * JSON. libjansson checks cache_domains.json (size and nesting bounded here) and reports syntax
 * errors with line and column; a schema walk over the checked text then reports "FILE:LINE: ..."
 * with the line of the value at fault (see struct jspan for why it reads the text itself).
 *
 * Ownership: struct domains owns services[] and their strings, pool, entries and slots. Every
 * string it hands out points into it (or is static) and dies with domains_free().
 */
#include "domains.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "domains_int.h"
#include "log.h"
#include "util.h"

#define DOMAINS_SKIPS_LOGGED 20 /* malformed lines logged one by one per load; the rest counted */

#define DOMAINS_JSON_FILE "cache_domains.json"
#define DOMAINS_JSON_MAX ((size_t)1 << 20)
#define DOMAINS_LIST_MAX ((size_t)16 << 20)
#define DOMAINS_JSON_DEPTH 32
#define DOMAINS_SERVICE_MAX 64
#define DOMAINS_LABEL_MAX 63
#define DOMAINS_FNV_OFFSET 0xcbf29ce484222325ull
#define DOMAINS_FNV_PRIME 0x100000001b3ull

/* ---- errors and files ---- */

static void set_err(char *err, size_t errlen, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void set_err(char *err, size_t errlen, const char *file, int line, const char *fmt, ...)
{
    char msg[320];
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s:%d: %s", file, line, msg);
}

/* The text of a read_file() error. */
static const char *read_strerror(int rc)
{
    if (rc == -EFBIG)
        return "file too large";
    if (rc == -EINVAL)
        return "not a regular file";
    return strerror(-rc);
}

/*
 * Reads the regular file <path> whole into *out (owned by the caller, NUL-terminated).
 * Returns 0, -EFBIG when it is longer than <max>, -EINVAL when it is not a regular file, or
 * another -errno.
 */
static int read_file(const char *path, size_t max, char **out, size_t *out_len)
{
    struct stat st;
    size_t cap, len = 0;
    char *buf;
    int fd, rc;

    /* O_NONBLOCK: a FIFO in the checkout must not hang the load (it is refused below). */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    cap = (size_t)st.st_size + 1;
    buf = xmalloc(cap + 1);
    for (;;) {
        ssize_t n;

        if (len == cap) {
            /* The file grew since fstat: read on, up to one byte past the limit. */
            if (cap > max) {
                free(buf);
                close(fd);
                return -EFBIG;
            }
            cap = cap > max / 2 ? max + 1 : cap * 2;
            buf = xrealloc(buf, cap + 1);
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            free(buf);
            close(fd);
            return rc;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
}

/* Writes <s>[0..len) into <dst> for an error message: printable ASCII, at most 60 bytes. */
static void quote_for_msg(char *dst, size_t dstlen, const char *s, size_t len)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 5 < dstlen; i++) {
        unsigned char c = (unsigned char)s[i];

        if (i == 60) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            dst[o++] = (char)c;
        } else {
            snprintf(dst + o, dstlen - o, "\\x%02x", c);
            o += 4;
        }
    }
    dst[o] = '\0';
}

/* ---- JSON ---- */

/*
 * The first offset in <text> of a bracket that opens level DOMAINS_JSON_DEPTH + 1, or <len>.
 * Strings are skipped as JSON reads them. On text that is not valid JSON the answer holds up to
 * its first error only: json_check() compares the two.
 */
static size_t too_deep_at(const char *text, size_t len)
{
    int depth = 0;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];

        if (c == '"') {
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\')
                    i++;
            }
        } else if (c == '{' || c == '[') {
            if (++depth > DOMAINS_JSON_DEPTH)
                return i;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return len;
}

static int line_at(const char *text, size_t off)
{
    int line = 1;

    for (size_t i = 0; i < off; i++)
        line += text[i] == '\n';
    return line;
}

/* Copies <s> into <dst> for an error message: bytes outside printable ASCII become \xNN. */
static void printable(char *dst, size_t dstlen, const char *s)
{
    size_t o = 0;

    for (; *s != '\0' && o + 5 < dstlen; s++) {
        unsigned char c = (unsigned char)*s;

        if (c >= 0x20 && c < 0x7f)
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, dstlen - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

/*
 * Checks that <text>[0..len) is one JSON value (RFC 8259, UTF-8, strings without \u0000) nested
 * at most DOMAINS_JSON_DEPTH levels. libjansson does the checking (its own nesting cap,
 * JSON_PARSER_MAX_DEPTH, is far above ours and keeps its recursion bounded). Two things are
 * checked here as well: the nesting, and NUL bytes, which jansson 2.14 lets pass after a number
 * ("[1\0]") although no JSON text holds one. Of those and a syntax error, the one earlier in the
 * text is reported. Returns 0, or -1 with <err> set to "FILE:LINE: message (column C)".
 */
static int json_check(const char *json_path, const char *text, size_t len, char *err, size_t errlen)
{
    size_t deep = too_deep_at(text, len);
    const char *nul = memchr(text, '\0', len);
    size_t bad = nul != NULL && (size_t)(nul - text) < deep ? (size_t)(nul - text) : deep;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    char msg[sizeof(je.text) * 4];

    json_decref(root);
    if (bad < len && (root != NULL || je.position < 0 || (size_t)je.position > bad)) {
        if (bad == deep)
            set_err(err, errlen, json_path, line_at(text, bad), "nesting deeper than %d levels",
                    DOMAINS_JSON_DEPTH);
        else
            set_err(err, errlen, json_path, line_at(text, bad), "NUL byte");
        return -1;
    }
    if (root != NULL)
        return 0;
    printable(msg, sizeof(msg), je.text);
    if (je.column > 0)
        set_err(err, errlen, json_path, je.line, "%s (column %d)", msg, je.column);
    else
        set_err(err, errlen, json_path, je.line, "%s", msg);
    return -1;
}

/*
 * The schema walk reads the checked text through spans, because jansson's values carry no
 * position (every schema error names the line of the value at fault) and jansson keeps the
 * last of two equal member names silently (a known member given twice is an error here). The
 * text is valid JSON by then, so a walk only skips whitespace, strings and brackets; the value of
 * every string it needs is decoded by jansson (jspan_string). The walk still takes nothing on
 * trust: where the text is not what it expects (jansson and the walk would disagree on what JSON
 * is), a step fails with -EILSEQ at the line it reached and the load fails with "unexpected
 * text" there.
 */
struct jspan {
    const char *p; /* borrows: the value's first byte, in the checked text */
    size_t len;    /* 0: no value (an absent member) */
    int line;      /* where the value starts (absent: where the object does) */
};

/* A cursor over the members or elements of one object or array. */
struct jcursor {
    const char *p, *end; /* borrows: between the brackets */
    int line;
    bool obj;
    size_t n; /* members or elements read so far */
};

static bool jspan_is(const struct jspan *v, char first)
{
    return v->len > 0 && v->p[0] == first;
}

static void jc_skip_ws(struct jcursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) {
        c->line += *c->p == '\n';
        c->p++;
    }
}

/* A byte of a number or of true, false, null. */
static bool is_scalar_byte(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || ch == 'E' || ch == '+' ||
           ch == '-' || ch == '.';
}

/*
 * The value at c->p -> *v; c->p moves past it. False when the text there is not one value
 * (c->p and c->line are then where the walk stopped).
 */
static bool jc_value(struct jcursor *c, struct jspan *v)
{
    int depth = 0;

    v->p = c->p;
    v->line = c->line;
    do {
        char ch;

        if (c->p == c->end)
            return false;
        ch = *c->p++;
        if (ch == '"') {
            while (c->p < c->end && *c->p != '"')
                c->p += *c->p == '\\' && c->end - c->p > 1 ? 2 : 1;
            if (c->p == c->end)
                return false;
            c->p++;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            /* the bracket that closes the value must match its first one */
            if (--depth < 0 || (depth == 0 && *v->p != (ch == '}' ? '{' : '[')))
                return false;
        } else if (ch == '\n') {
            c->line++;
        } else if (depth == 0) {
            if (!is_scalar_byte(ch))
                return false;
            while (c->p < c->end && is_scalar_byte(*c->p))
                c->p++;
        }
    } while (depth > 0);
    v->len = (size_t)(c->p - v->p);
    return true;
}

/* A cursor on the whole text, at its one value. */
static void jc_text(struct jcursor *c, const char *text, size_t len)
{
    c->p = text;
    c->end = text + len;
    c->line = 1;
    c->obj = false;
    c->n = 0;
    jc_skip_ws(c);
}

/* A cursor inside the object or array <v> (a span jc_value() gave). */
static void jc_open(struct jcursor *c, const struct jspan *v)
{
    ASSERT(jspan_is(v, '{') || jspan_is(v, '['));
    ASSERT(v->len >= 2);
    c->obj = v->p[0] == '{';
    c->p = v->p + 1;
    c->end = v->p + v->len - 1;
    c->line = v->line;
    c->n = 0;
}

/*
 * The next member (*key, *val) or element (*val) of <c>'s container. Returns 1, 0 after the
 * last, or -EILSEQ when the text at c->line is not a member or an element.
 */
static int jc_next(struct jcursor *c, struct jspan *key, struct jspan *val)
{
    jc_skip_ws(c);
    if (c->p == c->end)
        return 0;
    if (c->n > 0) {
        if (*c->p != ',')
            return -EILSEQ;
        c->p++;
        jc_skip_ws(c);
    }
    if (c->obj) {
        if (!jc_value(c, key) || !jspan_is(key, '"'))
            return -EILSEQ;
        jc_skip_ws(c);
        if (c->p == c->end || *c->p != ':')
            return -EILSEQ;
        c->p++;
        jc_skip_ws(c);
    }
    if (!jc_value(c, val))
        return -EILSEQ;
    c->n++;
    return 1;
}

/*
 * The value of the string <v> -> *out (owned by the caller; no NUL inside). Returns 0, -EINVAL
 * when <v> is not a string (or no value), -EILSEQ when jansson cannot decode it, or -ENOMEM.
 */
static int jspan_string(const struct jspan *v, char **out)
{
    json_error_t je;
    json_t *j;

    if (!jspan_is(v, '"'))
        return -EINVAL;
    j = json_loadb(v->p, v->len, JSON_DECODE_ANY, &je);
    if (j == NULL)
        return json_error_code(&je) == json_error_out_of_memory ? -ENOMEM : -EILSEQ;
    if (!json_is_string(j)) {
        json_decref(j);
        return -EILSEQ;
    }
    *out = xstrdup(json_string_value(j));
    json_decref(j);
    return 0;
}

/*
 * The member <key> of the object <obj> -> *out (absent: no value, at the line of <obj>).
 * Returns 0; -EEXIST when <key> is given twice (*out is the second occurrence, for its line);
 * or -EILSEQ or -ENOMEM (out->line is where the walk stopped).
 */
static int jmember(const struct jspan *obj, const char *key, struct jspan *out)
{
    struct jcursor c;
    struct jspan k, v;
    bool found = false;
    int rc;

    out->p = NULL;
    out->len = 0;
    out->line = obj->line;
    jc_open(&c, obj);
    while ((rc = jc_next(&c, &k, &v)) > 0) {
        char *name;
        bool same;

        rc = jspan_string(&k, &name); /* a string: jc_next() saw to that */
        if (rc != 0) {
            out->line = k.line;
            return rc;
        }
        same = strcmp(name, key) == 0;
        free(name);
        if (!same)
            continue;
        *out = v;
        if (found)
            return -EEXIST;
        found = true;
    }
    if (rc < 0)
        out->line = c.line;
    return rc;
}

/* The error of a walk step that failed with <rc> (-EILSEQ or -ENOMEM) at <line>. */
static void walk_err(char *err, size_t errlen, const char *json_path, int line, int rc)
{
    set_err(err, errlen, json_path, line, "%s",
            rc == -ENOMEM ? "out of memory" : "unexpected text");
}

/* ---- the table ---- */

/* FNV-1a from the last byte to the first (see the file comment). */
uint64_t domains_name_hash(const char *s, size_t len)
{
    uint64_t h = DOMAINS_FNV_OFFSET;

    while (len-- > 0) {
        h ^= (unsigned char)s[len];
        h *= DOMAINS_FNV_PRIME;
    }
    return h;
}

static size_t slot_of(uint64_t h)
{
    return (size_t)(h ^ (h >> 29));
}

const struct dom_entry *domains_entry_find(const struct domains *d, const char *s, size_t len,
                                           uint64_t h, bool wild)
{
    size_t mask;

    if (d->n_slots == 0)
        return NULL;
    mask = d->n_slots - 1;
    for (size_t i = slot_of(h) & mask;; i = (i + 1) & mask) {
        const struct dom_entry *e;
        uint32_t v = d->slots[i];

        if (v == 0)
            return NULL;
        e = &d->entries[v - 1];
        if (e->hash == h && e->wild == wild && e->len == len &&
            memcmp(d->pool + e->off, s, len) == 0)
            return e;
    }
}

static void slot_insert(uint32_t *slots, size_t n_slots, uint64_t h, uint32_t v)
{
    size_t mask = n_slots - 1;
    size_t i = slot_of(h) & mask;

    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = v;
}

/* Adds (<name>[0..len), <wild>) for service <svc> unless already listed. Returns 0 or -ENOSPC. */
static int add_entry(struct domains *d, const char *name, size_t len, bool wild, uint32_t svc)
{
    uint64_t h = domains_name_hash(name, len);
    struct dom_entry *e;

    ASSERT(len > 0 && len <= DOMAINS_NAME_MAX);
    if (domains_entry_find(d, name, len, h, wild) != NULL)
        return 0; /* first service wins */
    if (d->pool_len + len + 1 > UINT32_MAX || d->n_entries >= UINT32_MAX / 4)
        return -ENOSPC;
    if ((d->n_entries + 1) * 2 > d->n_slots) {
        size_t n = d->n_slots ? d->n_slots * 2 : 64;
        uint32_t *slots = xcalloc(n, sizeof(*slots));

        for (size_t i = 0; i < d->n_entries; i++)
            slot_insert(slots, n, d->entries[i].hash, (uint32_t)i + 1);
        free(d->slots);
        d->slots = slots;
        d->n_slots = n;
    }
    if (d->n_entries == d->cap_entries) {
        d->cap_entries = d->cap_entries ? d->cap_entries * 2 : 64;
        d->entries = xrealloc(d->entries, d->cap_entries * sizeof(*d->entries));
    }
    while (d->pool_len + len + 1 > d->pool_cap) {
        d->pool_cap = d->pool_cap ? d->pool_cap * 2 : 4096;
        d->pool = xrealloc(d->pool, d->pool_cap);
    }
    memcpy(d->pool + d->pool_len, name, len);
    d->pool[d->pool_len + len] = '\0';
    e = &d->entries[d->n_entries];
    e->hash = h;
    e->off = (uint32_t)d->pool_len;
    e->svc = svc;
    e->len = (uint16_t)len;
    e->wild = wild;
    d->pool_len += len + 1;
    slot_insert(d->slots, d->n_slots, h, (uint32_t)d->n_entries + 1);
    d->n_entries++;
    return 0;
}

/* ---- list files ---- */

/* Checks a lowercased name without "*." and trailing dot. Returns NULL or the reason. */
static const char *name_check(const char *s, size_t len, char *why, size_t whylen)
{
    size_t label = 0;

    if (len > DOMAINS_NAME_MAX) {
        snprintf(why, whylen, "name longer than %d characters", DOMAINS_NAME_MAX);
        return why;
    }
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)s[i] : '.';

        if (c == '.') {
            if (label == 0)
                return "empty label";
            label = 0;
            continue;
        }
        if (++label > DOMAINS_LABEL_MAX) {
            snprintf(why, whylen, "label longer than %d characters", DOMAINS_LABEL_MAX);
            return why;
        }
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')
            continue;
        if (c == '*')
            return "'*' is allowed only as a leading \"*.\" label";
        if (c >= 0x20 && c < 0x7f)
            snprintf(why, whylen, "invalid character '%c'", c);
        else
            snprintf(why, whylen, "invalid byte 0x%02x", c);
        return why;
    }
    return NULL;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Loads the list <path> for service <svc>. Returns 0 or -1 with <err> set. */
size_t domains_skipped_lines(const struct domains *d, const char **first)
{
    if (first != NULL)
        *first = d->first_skip;
    return d->n_skipped;
}

static int load_list(struct domains *d, const char *path, uint32_t svc, char *err, size_t errlen)
{
    char *text, *p, *end;
    size_t len;
    int line = 0, rc;

    rc = read_file(path, DOMAINS_LIST_MAX, &text, &len);
    if (rc != 0) {
        set_err(err, errlen, path, 0, "cannot read domain file of service \"%s\": %s",
                d->services[svc], read_strerror(rc));
        return -1;
    }
    p = text;
    end = text + len;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    while (p < end) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *s = p, *e = eol != NULL ? eol : end, *hash;
        char why[64], shown[256];
        const char *bad;
        bool wild = false;

        p = eol != NULL ? eol + 1 : end;
        line++;
        hash = memchr(s, '#', (size_t)(e - s));
        if (hash != NULL)
            e = hash;
        while (s < e && is_space(*s))
            s++;
        while (e > s && is_space(e[-1]))
            e--;
        if (s == e)
            continue;
        quote_for_msg(shown, sizeof(shown), s, (size_t)(e - s));
        for (char *c = s; c < e; c++) {
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        }
        if (e[-1] == '.')
            e--;
        if (e - s >= 2 && s[0] == '*' && s[1] == '.') {
            wild = true;
            s += 2;
        }
        bad = name_check(s, (size_t)(e - s), why, sizeof(why));
        if (bad == NULL && wild && memchr(s, '.', (size_t)(e - s)) == NULL)
            bad = "a wildcard over a single label (a top-level domain) is refused";
        if (bad != NULL) {
            /* A community list with one bad line must not stop the cache: the line goes. */
            char msg[sizeof(d->first_skip)];
            set_err(msg, sizeof(msg), path, line, "invalid name \"%s\": %s", shown, bad);
            if (d->n_skipped == 0)
                snprintf(d->first_skip, sizeof(d->first_skip), "%s", msg);
            if (d->n_skipped < DOMAINS_SKIPS_LOGGED)
                log_warn("%s: line skipped", msg);
            else if (d->n_skipped == DOMAINS_SKIPS_LOGGED)
                log_warn("%s: more malformed lines skipped, not logged one by one", path);
            d->n_skipped++;
            continue;
        }
        if (add_entry(d, s, (size_t)(e - s), wild, svc) != 0) {
            set_err(err, errlen, path, line, "too many names");
            free(text);
            return -1;
        }
    }
    free(text);
    return 0;
}

/* ---- cache_domains.json ---- */

static bool service_name_is_valid(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len > DOMAINS_SERVICE_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A domain file must stay inside the checkout: relative, no ".." component. */
static bool file_path_is_valid(const char *s)
{
    if (s[0] == '\0' || s[0] == '/')
        return false;
    for (const char *c = s; *c != '\0';) {
        size_t n = strcspn(c, "/");

        if (n == 2 && c[0] == '.' && c[1] == '.')
            return false;
        c += n;
        if (*c == '/')
            c++;
    }
    return true;
}

/* Walks one element of "cache_domains". Returns 0 or -1 with <err> set. */
static int load_service(struct domains *d, const char *dir, const char *json_path,
                        const struct jspan *svc, size_t idx, char *err, size_t errlen)
{
    struct jspan name_v, files_v, f_v, k;
    struct jcursor c;
    char *name = NULL, *file = NULL;
    char path[PATH_MAX];
    int rc;

    if (!jspan_is(svc, '{')) {
        set_err(err, errlen, json_path, svc->line, "cache_domains[%zu] must be an object", idx);
        return -1;
    }
    rc = jmember(svc, "name", &name_v);
    if (rc == 0)
        rc = jspan_string(&name_v, &name);
    if (rc == -EEXIST)
        set_err(err, errlen, json_path, name_v.line, "duplicate member \"name\"");
    else if (rc == -EINVAL)
        set_err(err, errlen, json_path, name_v.line,
                "cache_domains[%zu]: \"name\" must be a string", idx);
    else if (rc < 0)
        walk_err(err, errlen, json_path, name_v.line, rc);
    if (rc < 0)
        return -1;
    if (!service_name_is_valid(name)) {
        set_err(err, errlen, json_path, name_v.line,
                "cache_domains[%zu]: service name must be 1-%d characters of A-Z a-z 0-9 . _ -",
                idx, DOMAINS_SERVICE_MAX);
        goto fail;
    }
    for (size_t i = 0; i < d->n_services; i++) {
        if (strcmp(d->services[i], name) == 0) {
            set_err(err, errlen, json_path, name_v.line, "duplicate service \"%s\"", name);
            goto fail;
        }
    }
    rc = jmember(svc, "domain_files", &files_v);
    if (rc == -EEXIST) {
        set_err(err, errlen, json_path, files_v.line,
                "service \"%s\": duplicate member \"domain_files\"", name);
        goto fail;
    }
    if (rc < 0) {
        walk_err(err, errlen, json_path, files_v.line, rc);
        goto fail;
    }
    if (!jspan_is(&files_v, '[')) {
        set_err(err, errlen, json_path, files_v.line,
                "service \"%s\": \"domain_files\" must be an array of file names", name);
        goto fail;
    }
    d->services[d->n_services++] = xstrdup(name);
    jc_open(&c, &files_v);
    while ((rc = jc_next(&c, &k, &f_v)) > 0) {
        rc = jspan_string(&f_v, &file);
        if (rc == -EINVAL) {
            set_err(err, errlen, json_path, f_v.line,
                    "service \"%s\": \"domain_files\" must be an array of file names", name);
            goto fail;
        }
        if (rc < 0) {
            walk_err(err, errlen, json_path, f_v.line, rc);
            goto fail;
        }
        if (!file_path_is_valid(file)) {
            set_err(err, errlen, json_path, f_v.line,
                    "service \"%s\": domain file must be a relative path without \"..\"", name);
            goto fail;
        }
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path)) {
            set_err(err, errlen, json_path, f_v.line, "service \"%s\": path too long", name);
            goto fail;
        }
        free(file);
        file = NULL;
        if (load_list(d, path, (uint32_t)(d->n_services - 1), err, errlen) != 0)
            goto fail;
    }
    if (rc < 0) {
        walk_err(err, errlen, json_path, c.line, rc);
        goto fail;
    }
    free(name);
    return 0;
fail:
    free(file);
    free(name);
    return -1;
}

struct domains *domains_load(const char *dir, char *err, size_t errlen)
{
    struct domains *d = NULL;
    struct jcursor c;
    struct jspan root, list, k, svc;
    char dirbuf[PATH_MAX], json_path[PATH_MAX + sizeof(DOMAINS_JSON_FILE) + 1];
    size_t dirlen, len;
    char *text = NULL;
    const char *json;
    int rc;

    ASSERT(dir != NULL);
    dirlen = strlen(dir);
    while (dirlen > 1 && dir[dirlen - 1] == '/')
        dirlen--;
    if (dirlen == 0 || dirlen >= sizeof(dirbuf)) {
        set_err(err, errlen, dir, 0, "bad cache_domains directory");
        return NULL;
    }
    memcpy(dirbuf, dir, dirlen);
    dirbuf[dirlen] = '\0';
    if (strcmp(dirbuf, "/") == 0)
        dirbuf[0] = '\0'; /* "/" + "/file" would double the slash */
    snprintf(json_path, sizeof(json_path), "%s/%s", dirbuf, DOMAINS_JSON_FILE);

    rc = read_file(json_path, DOMAINS_JSON_MAX, &text, &len);
    if (rc != 0) {
        set_err(err, errlen, json_path, 0, "cannot read: %s", read_strerror(rc));
        return NULL;
    }
    json = text;
    if (len >= 3 && memcmp(json, "\xef\xbb\xbf", 3) == 0) {
        json += 3; /* a UTF-8 byte order mark, which jansson would refuse */
        len -= 3;
    }
    if (json_check(json_path, json, len, err, errlen) != 0)
        goto fail;
    jc_text(&c, json, len);
    if (!jc_value(&c, &root)) {
        walk_err(err, errlen, json_path, c.line, -EILSEQ);
        goto fail;
    }
    if (!jspan_is(&root, '{')) {
        set_err(err, errlen, json_path, root.line, "the top level must be an object");
        goto fail;
    }
    rc = jmember(&root, "cache_domains", &list);
    if (rc == -EEXIST) {
        set_err(err, errlen, json_path, list.line, "duplicate member \"cache_domains\"");
        goto fail;
    }
    if (rc < 0) {
        walk_err(err, errlen, json_path, list.line, rc);
        goto fail;
    }
    if (!jspan_is(&list, '[')) {
        set_err(err, errlen, json_path, list.line,
                "\"cache_domains\" must be an array of services");
        goto fail;
    }
    jc_open(&c, &list);
    while ((rc = jc_next(&c, &k, &svc)) > 0)
        continue;
    if (rc < 0) {
        walk_err(err, errlen, json_path, c.line, rc);
        goto fail;
    }
    d = xcalloc(1, sizeof(*d));
    d->magic = DOMAINS_MAGIC;
    d->services = xcalloc(c.n + 1, sizeof(*d->services));
    /* The same walk again: it ends as the one above did. */
    jc_open(&c, &list);
    while (jc_next(&c, &k, &svc) > 0) {
        if (load_service(d, dirbuf, json_path, &svc, c.n - 1, err, errlen) != 0)
            goto fail;
    }
    free(text);
    return d;
fail:
    domains_free(&d);
    free(text);
    return NULL;
}

void domains_free(struct domains **dp)
{
    struct domains *d;

    if (dp == NULL || *dp == NULL)
        return;
    d = *dp;
    CHECK_OBJ(d, DOMAINS_MAGIC);
    for (size_t i = 0; i < d->n_services; i++)
        free(d->services[i]);
    free(d->services);
    free(d->pool);
    free(d->entries);
    free(d->slots);
    d->magic = 0;
    free(d);
    *dp = NULL;
}

/* ---- lookups ---- */

/* strlen(<host>) if it is 1..253 bytes with no empty label, else 0. */
static size_t host_len(const char *host)
{
    size_t len;

    if (host == NULL)
        return 0;
    len = strnlen(host, DOMAINS_NAME_MAX + 1);
    if (len == 0 || len > DOMAINS_NAME_MAX || host[0] == '.' || host[len - 1] == '.' ||
        memmem(host, len, "..", 2) != NULL)
        return 0;
    return len;
}

const char *domains_match(const struct domains *d, const char *host)
{
    const struct dom_entry *best = NULL, *e;
    uint64_t h = DOMAINS_FNV_OFFSET;
    size_t len;

    if (d == NULL)
        return NULL;
    CHECK_OBJ(d, DOMAINS_MAGIC);
    len = host_len(host);
    if (len == 0)
        return NULL;
    for (size_t i = len; i-- > 0;) {
        unsigned char c = (unsigned char)host[i];

        if (c == '.') {
            /* h is the hash of host[i+1..]: "*.<that suffix>" covers host. Suffixes come
             * shortest first, so the last hit is the most specific wildcard. */
            e = domains_entry_find(d, host + i + 1, len - i - 1, h, true);
            if (e != NULL)
                best = e;
        }
        h ^= c;
        h *= DOMAINS_FNV_PRIME;
    }
    e = domains_entry_find(d, host, len, h, false);
    if (e != NULL)
        best = e;
    return best != NULL ? d->services[best->svc] : NULL;
}

bool domains_is_service(const struct domains *d, const char *name)
{
    if (strcasecmp(name, DOMAINS_STEAM_ID) == 0)
        return true;
    if (d == NULL)
        return false;
    CHECK_OBJ(d, DOMAINS_MAGIC);
    for (size_t i = 0; i < d->n_services; i++)
        if (strcasecmp(d->services[i], name) == 0)
            return true;
    return false;
}

const char *domains_cache_identifier(const struct domains *d, const char *ident,
                                     bool allow_unlisted, char *own, size_t own_len)
{
    if (!allow_unlisted)
        return NULL;
    if (!domains_is_service(d, ident))
        return ident;
    int n = snprintf(own, own_len, "%s.", ident);
    return n > 0 && (size_t)n < own_len ? own : NULL;
}

void domains_counts(const struct domains *d, size_t *services, size_t *names)
{
    if (d != NULL)
        CHECK_OBJ(d, DOMAINS_MAGIC);
    if (services != NULL)
        *services = d != NULL ? d->n_services : 0;
    if (names != NULL)
        *names = d != NULL ? d->n_entries : 0;
}
