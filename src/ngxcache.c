/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ngxcache: reading nginx's proxy_cache files (see ngxcache.h; the format in
 * docs/lancache-format.md). md5 from libmd, crc32 from zlib.
 */
#include "ngxcache.h"

#include <inttypes.h>
#include <md5.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "range.h"

static const char *const verdict_names[] = {
#define NGXCACHE_NAME_OF(e, name, text) name,
    NGXCACHE_VERDICTS(NGXCACHE_NAME_OF)
#undef NGXCACHE_NAME_OF
};
static const char *const verdict_texts[] = {
#define NGXCACHE_TEXT_OF(e, name, text) text,
    NGXCACHE_VERDICTS(NGXCACHE_TEXT_OF)
#undef NGXCACHE_TEXT_OF
};

const char *ngxcache_verdict_name(enum ngxcache_verdict v)
{
    return (unsigned)v < NGXCACHE_N_VERDICTS ? verdict_names[v] : "?";
}

const char *ngxcache_verdict_text(enum ngxcache_verdict v)
{
    return (unsigned)v < NGXCACHE_N_VERDICTS ? verdict_texts[v] : "?";
}

/* Where the fields of nginx's header struct are, per layout (ngxcache.h). */
struct layout {
    unsigned size;
    unsigned word; /* ngx_uint_t and time_t: 8, or 4 */
    unsigned valid_sec, last_modified, date, crc32, header_start, body_start, vary_len;
};
static const struct layout layouts[] = {
    {NGXCACHE_HDR_64, 8, 8, 32, 40, 48, 54, 56, 187},
    {NGXCACHE_HDR_32, 4, 4, 16, 20, 24, 30, 32, 163},
};

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i > 0; i--)
        v = (v << 8) | p[i - 1];
    return v;
}

static int64_t le_time(const uint8_t *p, unsigned word)
{
    uint64_t v = le(p, word);
    if (word == 4)
        return (int64_t)(int32_t)(uint32_t)v;
    return (int64_t)v;
}

static const char key_marker[] = "\nKEY: ";
#define MARKER_LEN (sizeof(key_marker) - 1)

static bool is_lower_hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
}

static bool is_hex_name(const char *s, size_t len)
{
    if (len != NGXCACHE_NAME_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_lower_hex(s[i]))
            return false;
    return true;
}

bool ngxcache_is_temp_name(const char *name, size_t len)
{
    if (len != NGXCACHE_NAME_LEN + 11 || !is_hex_name(name, NGXCACHE_NAME_LEN) ||
        name[NGXCACHE_NAME_LEN] != '.')
        return false;
    for (size_t i = NGXCACHE_NAME_LEN + 1; i < len; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    return true;
}

void ngxcache_name(const char *key, size_t key_len, char out[NGXCACHE_NAME_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    MD5_CTX ctx;
    uint8_t d[16];
    MD5Init(&ctx);
    MD5Update(&ctx, (const uint8_t *)key, key_len);
    MD5Final(d, &ctx);
    for (unsigned i = 0; i < 16; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[NGXCACHE_NAME_LEN] = '\0';
}

int ngxcache_path(const char *dir, const char *key, size_t key_len, char *out, size_t cap)
{
    char name[NGXCACHE_NAME_LEN + 1];
    ngxcache_name(key, key_len, name);
    int n = snprintf(out, cap, "%s/%.2s/%.2s/%s", dir, name + 30, name + 28, name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The layout whose KEY line is at its end and whose header_start agrees with the key. */
static const struct layout *find_layout(const uint8_t *buf, size_t n, const char **key,
                                        size_t *key_len, bool *any_marker)
{
    *any_marker = false;
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        const struct layout *l = &layouts[i];
        if (n < l->size + MARKER_LEN || memcmp(buf + l->size, key_marker, MARKER_LEN) != 0)
            continue;
        *any_marker = true;
        const uint8_t *k = buf + l->size + MARKER_LEN;
        const uint8_t *lf = memchr(k, '\n', n - (l->size + MARKER_LEN));
        if (lf == NULL)
            continue;
        size_t klen = (size_t)(lf - k);
        if (le(buf + l->header_start, 2) != l->size + MARKER_LEN + klen + 1)
            continue;
        *key = (const char *)k;
        *key_len = klen;
        return l;
    }
    return NULL;
}

enum ngxcache_verdict ngxcache_parse(const uint8_t *buf, size_t n, uint64_t file_size,
                                     const char *name, struct ngxcache_file *out)
{
    memset(out, 0, sizeof(*out));
    if (name != NULL) {
        size_t nl = strlen(name);
        if (ngxcache_is_temp_name(name, nl))
            return NGXCACHE_TEMP;
        if (!is_hex_name(name, nl))
            return NGXCACHE_NAME;
    }
    if (n > file_size)
        n = (size_t)file_size;
    if (file_size < NGXCACHE_HDR_32 + MARKER_LEN || n < NGXCACHE_HDR_32 + MARKER_LEN)
        return NGXCACHE_SHORT;
    bool any_marker;
    const struct layout *l = find_layout(buf, n, &out->key, &out->key_len, &any_marker);
    if (l == NULL)
        return any_marker ? NGXCACHE_OFFSETS : NGXCACHE_LAYOUT;
    if (le(buf, l->word) != NGXCACHE_FORMAT)
        return NGXCACHE_VERSION;
    out->hdr_size = l->size;
    out->valid_sec = le_time(buf + l->valid_sec, l->word);
    out->last_modified = le_time(buf + l->last_modified, l->word);
    out->date = le_time(buf + l->date, l->word);
    out->header_start = (size_t)le(buf + l->header_start, 2);
    out->body_start = (size_t)le(buf + l->body_start, 2);
    if (out->body_start <= out->header_start || out->body_start > file_size || out->body_start > n)
        return NGXCACHE_OFFSETS;
    if (crc32(0L, (const Bytef *)out->key, (uInt)out->key_len) != le(buf + l->crc32, 4))
        return NGXCACHE_CRC;
    if (buf[l->vary_len] != 0)
        return NGXCACHE_VARY;
    if (name != NULL) {
        char want[NGXCACHE_NAME_LEN + 1];
        ngxcache_name(out->key, out->key_len, want);
        if (memcmp(want, name, NGXCACHE_NAME_LEN) != 0)
            return NGXCACHE_MD5;
    }
    out->head = (const char *)buf + out->header_start;
    out->head_len = out->body_start - out->header_start;
    out->body_len = file_size - out->body_start;
    ssize_t hl = h1_resp_parse(out->head, out->head_len, H1_M_GET, &out->resp);
    if (hl <= 0 || (size_t)hl != out->head_len)
        return NGXCACHE_HEAD;
    return NGXCACHE_OK;
}

/* Parses "S-E" of <s>[0..len) strictly (decimal digits only). */
static bool parse_window(const char *s, size_t len, uint64_t *start, uint64_t *end)
{
    uint64_t v[2] = {0, 0};
    unsigned which = 0;
    size_t digits = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == '-' && which == 0 && digits > 0) {
            which = 1;
            digits = 0;
            continue;
        }
        if (ch < '0' || ch > '9' || v[which] > (UINT64_MAX - 9) / 10)
            return false;
        v[which] = v[which] * 10 + (uint64_t)(ch - '0');
        digits++;
    }
    if (which != 1 || digits == 0)
        return false;
    *start = v[0];
    *end = v[1];
    return true;
}

static unsigned count_fields(const struct ngxcache_file *f, const char *name)
{
    unsigned c = 0;
    size_t nl = strlen(name);
    for (unsigned i = 0; i < f->resp.n_fields; i++) {
        const struct h1_field *fl = &f->resp.fields[i];
        if (fl->name.len == nl && strncasecmp(f->head + fl->name.off, name, nl) == 0)
            c++;
    }
    return c;
}

enum ngxcache_verdict ngxcache_slice(struct ngxcache_file *f, uint64_t slice, size_t *prefix_len)
{
    static const char tag[] = "bytes=";
    const size_t tl = sizeof(tag) - 1;
    /* The last "bytes=" is the slice range's: the path before it may hold the word too. */
    const char *at = NULL;
    for (size_t i = f->key_len; i >= tl; i--)
        if (memcmp(f->key + i - tl, tag, tl) == 0) {
            at = f->key + i - tl;
            break;
        }
    uint64_t s, e;
    if (at == NULL || at == f->key || slice == 0 ||
        !parse_window(at + tl, (size_t)(f->key + f->key_len - at) - tl, &s, &e) || s % slice != 0 ||
        s > UINT64_MAX - slice || e != s + slice - 1)
        return NGXCACHE_KEY;
    if (prefix_len != NULL)
        *prefix_len = (size_t)(at - f->key);
    const struct h1_resp *r = &f->resp;
    if (r->status == 206) {
        if (count_fields(f, "Content-Range") != 1)
            return NGXCACHE_RANGE;
        const struct h1_field *cr = h1_find(f->head, r->fields, r->n_fields, "Content-Range");
        uint64_t a, b, total;
        if (range_parse_content_range(f->head + cr->value.off, cr->value.len, &a, &b, &total) !=
                RANGE_OK ||
            a != s || b != (e < total - 1 ? e : total - 1))
            return NGXCACHE_RANGE;
        if (r->framing == H1_BODY_CHUNKED)
            return NGXCACHE_CHUNKED;
        if ((r->framing == H1_BODY_LENGTH && r->content_length != b - a + 1) ||
            f->body_len != b - a + 1)
            return NGXCACHE_LENGTH;
        f->first = a;
        f->last = b;
        f->total = total;
        return NGXCACHE_OK;
    }
    if (r->status == 200) {
        if (s != 0)
            return NGXCACHE_RANGE;
        if (r->framing != H1_BODY_LENGTH)
            return NGXCACHE_CHUNKED;
        if (count_fields(f, "Content-Range") != 0)
            return NGXCACHE_RANGE;
        if (r->content_length == 0 || f->body_len != r->content_length)
            return NGXCACHE_LENGTH;
        f->first = 0;
        f->last = r->content_length - 1;
        f->total = r->content_length;
        return NGXCACHE_OK;
    }
    return NGXCACHE_STATUS;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

ssize_t ngxcache_uri(const char *path, size_t len, char *out, size_t cap)
{
    if (len == 0) { /* cacheparty's key: an empty path is "/" */
        path = "/";
        len = 1;
    }
    if (path[0] != '/')
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = path[i];
        if (ch == '%') {
            int hi = i + 2 < len ? hexval(path[i + 1]) : -1;
            int lo = i + 2 < len ? hexval(path[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            ch = (char)(hi * 16 + lo);
            i += 2;
            if (ch == '\0')
                return -1;
        } else if (ch == '\0') {
            return -1;
        }
        if (ch == '/' && o > 0 && out[o - 1] == '/')
            continue; /* merge_slashes */
        if (o >= cap)
            return -1;
        out[o++] = ch;
        /* A finished "/." or "/.." segment (at a '/' just written) is resolved now. */
        if (ch == '/' && o >= 3 && out[o - 2] == '.' && out[o - 3] == '/') {
            o -= 2; /* "/./" -> "/" */
        } else if (ch == '/' && o >= 4 && out[o - 2] == '.' && out[o - 3] == '.' &&
                   out[o - 4] == '/') {
            if (o == 4)
                return -1; /* above the root */
            o -= 4;        /* back to the '/' before the ".." */
            while (o > 0 && out[o - 1] != '/')
                o--;
        }
    }
    /* A path ending in "/." or "/..". */
    if (o >= 2 && out[o - 1] == '.' && out[o - 2] == '/') {
        o -= 1;
    } else if (o >= 3 && out[o - 1] == '.' && out[o - 2] == '.' && out[o - 3] == '/') {
        if (o == 3)
            return -1;
        o -= 3;
        while (o > 0 && out[o - 1] != '/')
            o--;
    }
    return (ssize_t)o;
}

ssize_t ngxcache_key(const char *ident, size_t ident_len, const char *uri, size_t uri_len,
                     uint64_t start, uint64_t slice, char *out, size_t cap)
{
    char win[64];
    int wl = snprintf(win, sizeof(win), "bytes=%" PRIu64 "-%" PRIu64, start, start + slice - 1);
    if (wl <= 0 || ident_len + uri_len + (size_t)wl > cap)
        return -1;
    memcpy(out, ident, ident_len);
    memcpy(out + ident_len, uri, uri_len);
    memcpy(out + ident_len + uri_len, win, (size_t)wl);
    return (ssize_t)(ident_len + uri_len + (size_t)wl);
}
