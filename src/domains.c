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
 * JSON. A small recursive-descent reader (RFC 8259 grammar, nesting and size bounded) builds a
 * throw-away tree whose nodes carry their line; a schema walk over it reports "FILE:LINE: ...".
 *
 * Ownership: struct domains owns services[] and their strings, pool, entries and slots. Every
 * string it hands out points into it (or is static) and dies with domains_free().
 */
#include "domains.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define DOMAINS_MAGIC 0x646f6d73u
#define DOMAINS_JSON_FILE "cache_domains.json"
#define DOMAINS_JSON_MAX ((size_t)1 << 20)
#define DOMAINS_LIST_MAX ((size_t)16 << 20)
#define DOMAINS_JSON_DEPTH 32
#define DOMAINS_SERVICE_MAX 64
#define DOMAINS_LABEL_MAX 63
#define DOMAINS_FNV_OFFSET 0xcbf29ce484222325ull
#define DOMAINS_FNV_PRIME 0x100000001b3ull

struct dom_entry {
    uint64_t hash; /* name_hash() of the name (the base, for a wildcard) */
    uint32_t off;  /* name = pool + off, NUL-terminated */
    uint32_t svc;  /* index in services[] */
    uint16_t len;
    bool wild; /* "*.name": subdomains of name only */
};

struct domains {
    unsigned magic;
    char **services; /* owns: the names, in cache_domains.json order */
    size_t n_services;
    char *pool; /* owns: the entries' names */
    size_t pool_len, pool_cap;
    struct dom_entry *entries; /* owns: load order, deduplicated */
    size_t n_entries, cap_entries;
    uint32_t *slots; /* owns: entry index + 1, 0 = empty; n_slots is a power of two */
    size_t n_slots;
};

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

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jnode {
    enum jtype type;
    int line;           /* where the value starts */
    char *key;          /* owns: the member name inside an object, else NULL */
    char *str;          /* owns: J_STR, NUL-terminated (\u0000 is refused) */
    struct jnode *kids; /* owns: J_ARR elements, J_OBJ members (key set) */
    size_t n_kids, cap_kids;
};

struct jparser {
    const char *p, *end;
    int line;
    int err_line;
    char msg[160];
};

static int jfail(struct jparser *jp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int jfail(struct jparser *jp, const char *fmt, ...)
{
    va_list ap;

    if (jp->err_line == 0) {
        jp->err_line = jp->line;
        va_start(ap, fmt);
        vsnprintf(jp->msg, sizeof(jp->msg), fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void jnode_fini(struct jnode *n)
{
    for (size_t i = 0; i < n->n_kids; i++)
        jnode_fini(&n->kids[i]);
    free(n->kids);
    free(n->key);
    free(n->str);
    memset(n, 0, sizeof(*n));
}

/* Appends <kid> to <n> (takes its contents). */
static void jnode_add(struct jnode *n, const struct jnode *kid)
{
    if (n->n_kids == n->cap_kids) {
        n->cap_kids = n->cap_kids ? n->cap_kids * 2 : 4;
        n->kids = xrealloc(n->kids, n->cap_kids * sizeof(*n->kids));
    }
    n->kids[n->n_kids++] = *kid;
}

static void jskip_ws(struct jparser *jp)
{
    while (jp->p < jp->end) {
        char c = *jp->p;

        if (c == '\n')
            jp->line++;
        else if (c != ' ' && c != '\t' && c != '\r')
            return;
        jp->p++;
    }
}

static int junexpected(struct jparser *jp, const char *what)
{
    unsigned char c;

    if (jp->p >= jp->end)
        return jfail(jp, "unexpected end of file, expected %s", what);
    c = (unsigned char)*jp->p;
    if (c > 0x20 && c < 0x7f)
        return jfail(jp, "unexpected '%c', expected %s", c, what);
    return jfail(jp, "unexpected byte 0x%02x, expected %s", c, what);
}

static int jhex4(struct jparser *jp, unsigned *out)
{
    unsigned v = 0;

    if (jp->end - jp->p < 4)
        return jfail(jp, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = *jp->p++;

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return jfail(jp, "bad \\u escape");
    }
    *out = v;
    return 0;
}

/* A growable byte string for decoding JSON strings. */
struct sbuf {
    char *s;
    size_t len, cap;
};

static void sbuf_put(struct sbuf *b, const char *s, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        while (b->len + len + 1 > b->cap)
            b->cap = b->cap ? b->cap * 2 : 32;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, len);
    b->len += len;
    b->s[b->len] = '\0';
}

static void sbuf_put_utf8(struct sbuf *b, unsigned cp)
{
    char u[4];

    if (cp < 0x80) {
        u[0] = (char)cp;
        sbuf_put(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        sbuf_put(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        sbuf_put(b, u, 3);
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        sbuf_put(b, u, 4);
    }
}

/* Decodes the string at jp->p (on its opening quote) into *out (owned by the caller). */
static int jstring(struct jparser *jp, char **out)
{
    struct sbuf b = {0};

    sbuf_put(&b, "", 0);
    jp->p++;
    for (;;) {
        unsigned char c;
        unsigned cp, lo;

        if (jp->p >= jp->end) {
            jfail(jp, "unterminated string");
            goto fail;
        }
        c = (unsigned char)*jp->p++;
        if (c == '"')
            break;
        if (c < 0x20) {
            jfail(jp, "control character in a string (unterminated string?)");
            goto fail;
        }
        if (c != '\\') {
            sbuf_put(&b, (const char *)&c, 1);
            continue;
        }
        if (jp->p >= jp->end) {
            jfail(jp, "unterminated string");
            goto fail;
        }
        c = (unsigned char)*jp->p++;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            break;
        case 'b':
            c = '\b';
            break;
        case 'f':
            c = '\f';
            break;
        case 'n':
            c = '\n';
            break;
        case 'r':
            c = '\r';
            break;
        case 't':
            c = '\t';
            break;
        case 'u':
            if (jhex4(jp, &cp) != 0)
                goto fail;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                jfail(jp, "lone low surrogate in \\u escape");
                goto fail;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u') {
                    jfail(jp, "lone high surrogate in \\u escape");
                    goto fail;
                }
                jp->p += 2;
                if (jhex4(jp, &lo) != 0)
                    goto fail;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    jfail(jp, "lone high surrogate in \\u escape");
                    goto fail;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                jfail(jp, "\\u0000 is not allowed in strings");
                goto fail;
            }
            sbuf_put_utf8(&b, cp);
            continue;
        default:
            jfail(jp, "bad escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
            goto fail;
        }
        sbuf_put(&b, (const char *)&c, 1);
    }
    *out = b.s;
    return 0;
fail:
    free(b.s);
    return -1;
}

static bool jdigit(const struct jparser *jp)
{
    return jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9';
}

/* Checks the number grammar; the value itself is never needed. */
static int jnumber(struct jparser *jp)
{
    if (*jp->p == '-')
        jp->p++;
    if (!jdigit(jp))
        return junexpected(jp, "a digit");
    if (*jp->p == '0') {
        jp->p++;
    } else {
        while (jdigit(jp))
            jp->p++;
    }
    if (jp->p < jp->end && *jp->p == '.') {
        jp->p++;
        if (!jdigit(jp))
            return junexpected(jp, "a digit");
        while (jdigit(jp))
            jp->p++;
    }
    if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
        jp->p++;
        if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
            jp->p++;
        if (!jdigit(jp))
            return junexpected(jp, "a digit");
        while (jdigit(jp))
            jp->p++;
    }
    return 0;
}

static int jliteral(struct jparser *jp, const char *word)
{
    size_t len = strlen(word);

    if ((size_t)(jp->end - jp->p) < len || memcmp(jp->p, word, len) != 0)
        return junexpected(jp, "a value");
    jp->p += len;
    return 0;
}

static int jvalue(struct jparser *jp, struct jnode *n, int depth);

/* An array or an object: jp->p is on its opening bracket. */
static int jcontainer(struct jparser *jp, struct jnode *n, int depth)
{
    bool obj = *jp->p == '{';
    char close = obj ? '}' : ']';

    if (depth >= DOMAINS_JSON_DEPTH)
        return jfail(jp, "nesting deeper than %d levels", DOMAINS_JSON_DEPTH);
    n->type = obj ? J_OBJ : J_ARR;
    jp->p++;
    jskip_ws(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        return 0;
    }
    for (;;) {
        struct jnode kid = {0};
        char *key = NULL;

        jskip_ws(jp);
        if (obj) {
            if (jp->p >= jp->end || *jp->p != '"')
                return junexpected(jp, "a member name");
            if (jstring(jp, &key) != 0)
                return -1;
            jskip_ws(jp);
            if (jp->p >= jp->end || *jp->p != ':') {
                free(key);
                return junexpected(jp, "':'");
            }
            jp->p++;
        }
        if (jvalue(jp, &kid, depth + 1) != 0) {
            jnode_fini(&kid);
            free(key);
            return -1;
        }
        kid.key = key;
        jnode_add(n, &kid);
        jskip_ws(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            return 0;
        }
        return junexpected(jp, obj ? "',' or '}'" : "',' or ']'");
    }
}

static int jvalue(struct jparser *jp, struct jnode *n, int depth)
{
    jskip_ws(jp);
    n->line = jp->line;
    if (jp->p >= jp->end)
        return junexpected(jp, "a value");
    switch (*jp->p) {
    case '{':
    case '[':
        return jcontainer(jp, n, depth);
    case '"':
        n->type = J_STR;
        return jstring(jp, &n->str);
    case 't':
        n->type = J_BOOL;
        return jliteral(jp, "true");
    case 'f':
        n->type = J_BOOL;
        return jliteral(jp, "false");
    case 'n':
        n->type = J_NULL;
        return jliteral(jp, "null");
    default:
        if (*jp->p == '-' || (*jp->p >= '0' && *jp->p <= '9')) {
            n->type = J_NUM;
            return jnumber(jp);
        }
        return junexpected(jp, "a value");
    }
}

/* Parses <text>[0..len) into *root. Returns 0, or -1 with jp->err_line and jp->msg set. */
static int jparse(struct jparser *jp, const char *text, size_t len, struct jnode *root)
{
    memset(jp, 0, sizeof(*jp));
    jp->p = text;
    jp->end = text + len;
    jp->line = 1;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        jp->p += 3;
    if (jvalue(jp, root, 0) != 0)
        return -1;
    jskip_ws(jp);
    if (jp->p != jp->end)
        return jfail(jp, "unexpected data after the top-level value");
    return 0;
}

/*
 * The member <key> of object <obj>, or NULL. A known member given twice is an error: *dup is
 * set and the second occurrence is returned (for its line).
 */
static const struct jnode *jmember(const struct jnode *obj, const char *key, bool *dup)
{
    const struct jnode *found = NULL;

    *dup = false;
    for (size_t i = 0; i < obj->n_kids; i++) {
        if (strcmp(obj->kids[i].key, key) != 0)
            continue;
        if (found != NULL) {
            *dup = true;
            return &obj->kids[i];
        }
        found = &obj->kids[i];
    }
    return found;
}

/* ---- the table ---- */

/* FNV-1a from the last byte to the first (see the file comment). */
static uint64_t name_hash(const char *s, size_t len)
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

static const struct dom_entry *lookup(const struct domains *d, const char *s, size_t len,
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
    uint64_t h = name_hash(name, len);
    struct dom_entry *e;

    ASSERT(len > 0 && len <= DOMAINS_NAME_MAX);
    if (lookup(d, name, len, h, wild) != NULL)
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
            set_err(err, errlen, path, line, "invalid name \"%s\": %s", shown, bad);
            free(text);
            return -1;
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
                        const struct jnode *svc, size_t idx, char *err, size_t errlen)
{
    const struct jnode *name, *files;
    char path[PATH_MAX];
    bool dup;

    if (svc->type != J_OBJ) {
        set_err(err, errlen, json_path, svc->line, "cache_domains[%zu] must be an object", idx);
        return -1;
    }
    name = jmember(svc, "name", &dup);
    if (dup) {
        set_err(err, errlen, json_path, name->line, "duplicate member \"name\"");
        return -1;
    }
    if (name == NULL || name->type != J_STR) {
        set_err(err, errlen, json_path, name ? name->line : svc->line,
                "cache_domains[%zu]: \"name\" must be a string", idx);
        return -1;
    }
    if (!service_name_is_valid(name->str)) {
        set_err(err, errlen, json_path, name->line,
                "cache_domains[%zu]: service name must be 1-%d characters of A-Z a-z 0-9 . _ -",
                idx, DOMAINS_SERVICE_MAX);
        return -1;
    }
    for (size_t i = 0; i < d->n_services; i++) {
        if (strcmp(d->services[i], name->str) == 0) {
            set_err(err, errlen, json_path, name->line, "duplicate service \"%s\"", name->str);
            return -1;
        }
    }
    files = jmember(svc, "domain_files", &dup);
    if (dup) {
        set_err(err, errlen, json_path, files->line,
                "service \"%s\": duplicate member "
                "\"domain_files\"",
                name->str);
        return -1;
    }
    if (files == NULL || files->type != J_ARR) {
        set_err(err, errlen, json_path, files ? files->line : svc->line,
                "service \"%s\": \"domain_files\" must be an array of file names", name->str);
        return -1;
    }
    d->services[d->n_services++] = xstrdup(name->str);
    for (size_t i = 0; i < files->n_kids; i++) {
        const struct jnode *f = &files->kids[i];

        if (f->type != J_STR) {
            set_err(err, errlen, json_path, f->line,
                    "service \"%s\": \"domain_files\" must be an array of file names", name->str);
            return -1;
        }
        if (!file_path_is_valid(f->str)) {
            set_err(err, errlen, json_path, f->line,
                    "service \"%s\": domain file must be a relative path without \"..\"",
                    name->str);
            return -1;
        }
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, f->str) >= sizeof(path)) {
            set_err(err, errlen, json_path, f->line, "service \"%s\": path too long", name->str);
            return -1;
        }
        if (load_list(d, path, (uint32_t)(d->n_services - 1), err, errlen) != 0)
            return -1;
    }
    return 0;
}

struct domains *domains_load(const char *dir, char *err, size_t errlen)
{
    struct domains *d = NULL;
    struct jparser jp;
    struct jnode root = {0};
    const struct jnode *list;
    char dirbuf[PATH_MAX], json_path[PATH_MAX + sizeof(DOMAINS_JSON_FILE) + 1];
    size_t dirlen, len;
    char *text = NULL;
    bool dup;
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
    if (jparse(&jp, text, len, &root) != 0) {
        set_err(err, errlen, json_path, jp.err_line, "%s", jp.msg);
        goto fail;
    }
    if (root.type != J_OBJ) {
        set_err(err, errlen, json_path, root.line, "the top level must be an object");
        goto fail;
    }
    list = jmember(&root, "cache_domains", &dup);
    if (dup) {
        set_err(err, errlen, json_path, list->line, "duplicate member \"cache_domains\"");
        goto fail;
    }
    if (list == NULL || list->type != J_ARR) {
        set_err(err, errlen, json_path, list ? list->line : root.line,
                "\"cache_domains\" must be an array of services");
        goto fail;
    }
    d = xcalloc(1, sizeof(*d));
    d->magic = DOMAINS_MAGIC;
    d->services = xcalloc(list->n_kids + 1, sizeof(*d->services));
    for (size_t i = 0; i < list->n_kids; i++) {
        if (load_service(d, dirbuf, json_path, &list->kids[i], i, err, errlen) != 0)
            goto fail;
    }
    jnode_fini(&root);
    free(text);
    return d;
fail:
    domains_free(&d);
    jnode_fini(&root);
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
            e = lookup(d, host + i + 1, len - i - 1, h, true);
            if (e != NULL)
                best = e;
        }
        h ^= c;
        h *= DOMAINS_FNV_PRIME;
    }
    e = lookup(d, host, len, h, false);
    if (e != NULL)
        best = e;
    return best != NULL ? d->services[best->svc] : NULL;
}

const char *domains_identify(const struct domains *d, const char *host, const char *user_agent,
                             size_t ua_len, bool steam_ua_rule)
{
    static const char zone[] = "." DOMAINS_STEAM_ZONE;
    const char *id = domains_match(d, host);
    size_t len;

    if (id != NULL)
        return id;
    if (!steam_ua_rule || user_agent == NULL ||
        memmem(user_agent, ua_len, DOMAINS_STEAM_UA, sizeof(DOMAINS_STEAM_UA) - 1) == NULL)
        return NULL;
    len = host_len(host);
    if (len <= sizeof(zone) - 1 || memcmp(host + len - (sizeof(zone) - 1), zone, sizeof(zone) - 1))
        return NULL;
    return DOMAINS_STEAM_ID;
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

const char *domains_cache_identifier(const struct domains *d, const char *host, const char *ident,
                                     const char *user_agent, size_t ua_len, bool steam_ua_rule,
                                     bool allow_unlisted, char *own, size_t own_len)
{
    const char *id = domains_identify(d, host, user_agent, ua_len, steam_ua_rule);
    if (id != NULL || !allow_unlisted)
        return id;
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

/* ---- DNS export ---- */

static const char *const dns_format_names[] = {
    [DOMAINS_DNS_DNSMASQ] = "dnsmasq",
    [DOMAINS_DNS_UNBOUND] = "unbound",
    [DOMAINS_DNS_HOSTS] = "hosts",
    [DOMAINS_DNS_RPZ] = "rpz",
};

int domains_dns_format_parse(const char *s, enum domains_dns_format *out)
{
    for (size_t i = 0; s != NULL && i < ARRAY_SIZE(dns_format_names); i++) {
        if (strcmp(s, dns_format_names[i]) == 0) {
            *out = (enum domains_dns_format)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *domains_dns_format_name(enum domains_dns_format fmt)
{
    ASSERT((size_t)fmt < ARRAY_SIZE(dns_format_names));
    return dns_format_names[fmt];
}

/*
 * True if a strict ancestor of <name> (a suffix starting after one of its dots) is listed: as a
 * wildcard base, or also as an exact name unless <wild_only>.
 */
static bool ancestor_listed(const struct domains *d, const char *name, size_t len, bool wild_only)
{
    for (size_t i = 0; i < len; i++) {
        const char *s = name + i + 1;
        size_t slen = len - i - 1;
        uint64_t h;

        if (name[i] != '.')
            continue;
        h = name_hash(s, slen);
        if (lookup(d, s, slen, h, true) != NULL)
            return true;
        if (!wild_only && lookup(d, s, slen, h, false) != NULL)
            return true;
    }
    return false;
}

/* The line for entry <e> in <fmt>, or nothing when another line already covers it. */
static void dns_entry(const struct domains *d, const struct dom_entry *e, const char *ip,
                      const char *rr, enum domains_dns_format fmt, FILE *out)
{
    const char *name = d->pool + e->off;
    bool twin = !e->wild && lookup(d, name, e->len, e->hash, true) != NULL;

    switch (fmt) {
    case DOMAINS_DNS_DNSMASQ:
        /* address=/x/ answers x and all below it: one line per topmost listed name. */
        if (twin || ancestor_listed(d, name, e->len, false))
            return;
        fprintf(out, "address=/%s/%s\n", name, ip);
        return;
    case DOMAINS_DNS_UNBOUND:
        /* A redirect zone answers its apex and all below; unbound refuses local-data below a
         * redirect zone's apex, so names under a listed wildcard are left to the zone. */
        if (twin || ancestor_listed(d, name, e->len, true))
            return;
        if (e->wild)
            fprintf(out, "    local-zone: \"%s.\" redirect\n", name);
        fprintf(out, "    local-data: \"%s. %s %s\"\n", name, rr, ip);
        return;
    case DOMAINS_DNS_HOSTS:
        if (e->wild)
            fprintf(out, "# skipped wildcard *.%s (a hosts file cannot express it)\n", name);
        else
            fprintf(out, "%s %s\n", ip, name);
        return;
    case DOMAINS_DNS_RPZ:
        fprintf(out, "%s%s %s %s\n", e->wild ? "*." : "", name, rr, ip);
        return;
    }
    WRONG("bad dns format");
}

int domains_dns_export(const struct domains *d, const char *ip, enum domains_dns_format fmt,
                       FILE *out)
{
    static const unsigned char zero[16];
    unsigned char addr[16];
    char canon[INET6_ADDRSTRLEN];
    const char *rr, *comment;
    size_t svc = SIZE_MAX;
    int af;

    if (ip == NULL)
        return -EINVAL;
    af = inet_pton(AF_INET, ip, addr) == 1 ? AF_INET : AF_INET6;
    if (af == AF_INET6 && inet_pton(AF_INET6, ip, addr) != 1)
        return -EINVAL;
    if (memcmp(addr, zero, af == AF_INET ? 4 : 16) == 0)
        return -EINVAL;
    if (inet_ntop(af, addr, canon, sizeof(canon)) == NULL)
        return -EINVAL;
    if ((size_t)fmt >= ARRAY_SIZE(dns_format_names))
        return -EINVAL;
    if (d == NULL)
        return -ENOENT;
    CHECK_OBJ(d, DOMAINS_MAGIC);
    rr = af == AF_INET ? "A" : "AAAA";
    comment = fmt == DOMAINS_DNS_RPZ ? ";" : "#";

    fprintf(out, "%s generated by cacheparty dns --ip %s --format %s\n", comment, canon,
            dns_format_names[fmt]);
    if (fmt == DOMAINS_DNS_UNBOUND)
        fprintf(out, "server:\n");
    if (fmt == DOMAINS_DNS_RPZ) {
        fprintf(out, "; named.conf: response-policy { zone \"rpz.cacheparty\"; }; and\n"
                     "; zone \"rpz.cacheparty\" { type primary; file \"db.rpz.cacheparty\"; };\n"
                     "$TTL 60\n"
                     "@ IN SOA localhost. root.localhost. 1 3600 600 86400 60\n"
                     "@ IN NS localhost.\n");
    }
    for (size_t i = 0; i < d->n_entries; i++) {
        const struct dom_entry *e = &d->entries[i];

        if (e->svc != svc) {
            svc = e->svc;
            fprintf(out, "%s%s %s\n", fmt == DOMAINS_DNS_UNBOUND ? "    " : "", comment,
                    d->services[svc]);
        }
        dns_entry(d, e, canon, rr, fmt, out);
    }
    if (fflush(out) != 0 || ferror(out))
        return -EIO;
    return 0;
}
