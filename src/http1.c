/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * http1: HTTP/1.x heads, chunked framing and authorities. Pure: no I/O, no ev.h, no allocation.
 *
 * A head is parsed in two passes over bytes the caller owns:
 *  1. scan_head(): strict line-by-line pre-validation (RFC 9112) that also finds the end of the
 *     head. It runs on whatever prefix the caller has, so garbage (a TLS ClientHello, a bare LF)
 *     is refused before the head completes, and it never refuses a prefix of a valid head.
 *  2. run_parser(): http-parser fills the spans through callbacks and is paused at
 *     headers-complete, so it never looks at a body. Content-Length lines are recorded by h1
 *     itself and never shown to it: 2.9 refuses repeated identical values and lists ("5, 5")
 *     that RFC 9110 section 8.6 lets a recipient accept. A request method it does not know (any
 *     token is a method) is parsed behind a stand-in request line so the caller can answer 405.
 * The semantic rules (Host, body framing, keep-alive) then run over the recorded fields.
 *
 * Leading empty lines before a request-line are skipped (RFC 9112 section 2.2) and counted in
 * the returned head length. Every span is an offset into the caller's buffer; nothing here
 * outlives a call except a struct h1_chunked, which its caller owns.
 */
#include "http1.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "util.h"

/* Character classes of ctab[]. */
enum {
    C_TCHAR = 0x01,  /* token: methods, field names */
    C_VALUE = 0x02,  /* field value, reason phrase: HTAB, SP, VCHAR, obs-text */
    C_TARGET = 0x04, /* request-target: VCHAR, obs-text */
    C_HOST = 0x08,   /* reg-name as nginx accepts it: letters, digits, '-', '_', '.' */
    C_HEX = 0x10,
};

static const unsigned char ctab[256] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  2,  0,  0,  0,  0,  0,  0,  /* 0x00 */
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x10 */
    2,  7,  6,  7,  7,  7,  7,  7,  6,  6,  7,  7,  6,  15, 15, 6,  /* 0x20 */
    31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 6,  6,  6,  6,  6,  6,  /* 0x30 */
    6,  31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15, /* 0x40 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 6,  6,  6,  7,  15, /* 0x50 */
    7,  31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15, /* 0x60 */
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 6,  7,  6,  7,  0,  /* 0x70 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0x80 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0x90 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xa0 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xb0 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xc0 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xd0 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xe0 */
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  /* 0xf0 */
};

enum {
    CHUNK_LINE_MAX = 4096,     /* chunk-size line before its CRLF, extensions included */
    CHUNK_TRAILER_MAX = 16384, /* whole trailer section */
};

/* Pre-validation outcome; each parser maps it to its own error codes. */
enum perr { PE_OK = 0, PE_MORE, PE_BAD, PE_TARGET, PE_VERSION, PE_FIELDS, PE_SIZE };

/* What scan_head() learnt about a head. */
struct scan {
    size_t start;          /* first byte of the start line (after skipped empty lines) */
    size_t line1_end;      /* first byte after the start line's CRLF */
    size_t head_len;       /* through the blank line */
    unsigned n_fields;     /* field lines */
    struct h1_span method; /* request */
    struct h1_span target; /* request */
    int minor;             /* HTTP/1.<minor> */
    int status;            /* response */
    struct h1_span reason; /* response */
    unsigned n_cl;
    struct h1_span cl[H1_MAX_FIELDS]; /* whole Content-Length lines, CRLF included */
};

/* http-parser callback context: parser->data. */
struct pctx {
    const char *buf;
    struct h1_field *fields; /* borrows the caller's array of H1_MAX_FIELDS */
    unsigned n;
    bool in_value;         /* the last field callback was a value: a name starts a new field */
    bool complete;         /* headers-complete seen */
    bool standin;          /* the request line fed is not in <buf>: ignore the URL */
    struct h1_span url;    /* request-target as http-parser saw it */
    struct h1_span status; /* reason phrase */
};

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c | 0x20) : c;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (unsigned char)(c | 0x20);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static struct h1_span mkspan(size_t off, size_t len)
{
    struct h1_span s = {(uint32_t)off, (uint32_t)len};
    return s;
}

static bool name_is(const char *buf, const struct h1_field *f, const char *name, size_t len)
{
    return f->name.len == len && strncasecmp(buf + f->name.off, name, len) == 0;
}

static enum perr bad(const char **why, const char *reason)
{
    *why = reason;
    return PE_BAD;
}

/*
 * Next element of the comma-separated list <v>[0..len) from *pos: OWS trimmed, empty elements
 * skipped (RFC 9110 section 5.6.1). Returns false when the list is exhausted.
 */
static bool list_next(const char *v, size_t len, size_t *pos, const char **el, size_t *el_len)
{
    size_t i = *pos;

    for (;;) {
        size_t s, e;

        while (i < len && (util_is_ows(v[i]) || v[i] == ','))
            i++;
        if (i == len) {
            *pos = i;
            return false;
        }
        s = i;
        while (i < len && v[i] != ',')
            i++;
        e = i;
        while (e > s && util_is_ows(v[e - 1]))
            e--;
        if (e > s) {
            *pos = i;
            *el = v + s;
            *el_len = e - s;
            return true;
        }
    }
}

static bool list_has_n(const char *v, size_t len, const char *tok, size_t tok_len)
{
    size_t pos = 0, el_len;
    const char *el;

    while (list_next(v, len, &pos, &el, &el_len))
        if (el_len == tok_len && strncasecmp(el, tok, tok_len) == 0)
            return true;
    return false;
}

bool h1_list_has(const char *v, size_t len, const char *token)
{
    return list_has_n(v, len, token, strlen(token));
}

/*
 * Parse a Content-Length value into *cl: digits, or a list of identical digit strings. Values
 * above INT64_MAX are refused so that callers may convert to off_t. *seen says whether an
 * earlier field already set *cl, which this one must then equal.
 */
static bool cl_parse(const char *v, size_t len, uint64_t *cl, bool *seen)
{
    size_t pos = 0, el_len;
    const char *el;
    bool any = false;

    while (list_next(v, len, &pos, &el, &el_len)) {
        uint64_t x = 0;

        for (size_t i = 0; i < el_len; i++) {
            if (!is_digit(el[i]) || x > ((uint64_t)INT64_MAX - (uint64_t)(el[i] - '0')) / 10)
                return false;
            x = x * 10 + (uint64_t)(el[i] - '0');
        }
        if (*seen && x != *cl)
            return false;
        *cl = x;
        *seen = true;
        any = true;
    }
    return any;
}

/* "HTTP/1.x" or a prefix of it (<complete> false). Sets *minor when complete and supported. */
static enum perr check_version(const char *v, size_t n, bool complete, int *minor, const char **why)
{
    static const char pat[] = "HTTP/#.#";

    if (n > sizeof(pat) - 1)
        return bad(why, "bad HTTP version");
    for (size_t k = 0; k < n; k++)
        if (pat[k] == '#' ? !is_digit(v[k]) : v[k] != pat[k])
            return bad(why, "bad HTTP version");
    if (!complete)
        return PE_OK;
    if (n != sizeof(pat) - 1)
        return bad(why, "bad HTTP version");
    if (v[5] != '1' || v[7] > '1') {
        *why = "HTTP version not supported";
        return PE_VERSION;
    }
    *minor = v[7] - '0';
    return PE_OK;
}

/*
 * Request line at buf[off..off+n) without its CRLF; <complete> false when the CRLF has not
 * arrived yet, and then only what is already certain fails.
 */
static enum perr check_req_line(const char *buf, size_t off, size_t n, bool complete,
                                struct scan *sc, const char **why)
{
    const unsigned char *l = (const unsigned char *)buf + off;
    size_t i = 0, t0, j;

    while (i < n && (ctab[l[i]] & C_TCHAR))
        i++;
    if (i == n) {
        if (complete)
            return bad(why, "bad request line");
        goto partial;
    }
    if (i == 0 || l[i] != ' ')
        return bad(why, "bad method");
    t0 = i + 1;
    j = t0;
    while (j < n && (ctab[l[j]] & C_TARGET))
        j++;
    if (j - t0 > H1_MAX_TARGET) {
        *why = "request-target too long";
        return PE_TARGET;
    }
    if (j == n) {
        if (complete)
            return bad(why, "no HTTP version");
        goto partial;
    }
    if (j == t0 || l[j] != ' ')
        return bad(why, "bad request-target");
    /* The same bound as for a partial line, so that no prefix of an accepted line fails. */
    if (j > H1_MAX_TARGET + 64) {
        *why = "request line too long";
        return PE_TARGET;
    }
    sc->method = mkspan(off, i);
    sc->target = mkspan(off + t0, j - t0);
    return check_version((const char *)l + j + 1, n - j - 1, complete, &sc->minor, why);

partial:
    /* An endless method or target: say 414 now rather than 431 at the head limit. */
    if (n > H1_MAX_TARGET + 64) {
        *why = "request line too long";
        return PE_TARGET;
    }
    return PE_OK;
}

/* Status line "HTTP/1.x SSS[ reason]", same conventions as check_req_line(). */
static enum perr check_status_line(const char *buf, size_t off, size_t n, bool complete,
                                   struct scan *sc, const char **why)
{
    const unsigned char *l = (const unsigned char *)buf + off;
    enum perr e;

    e = check_version((const char *)l, n < 8 ? n : 8, complete || n >= 8, &sc->minor, why);
    if (e != PE_OK || !complete)
        return e;
    if (n < 12 || l[8] != ' ' || !is_digit((char)l[9]) || !is_digit((char)l[10]) ||
        !is_digit((char)l[11]))
        return bad(why, "bad status line");
    sc->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    if (sc->status < 100 || sc->status > 599)
        return bad(why, "bad status code");
    if (n == 12) {
        sc->reason = mkspan(off + 12, 0);
        return PE_OK;
    }
    if (l[12] != ' ')
        return bad(why, "bad status line");
    for (size_t k = 13; k < n; k++)
        if (!(ctab[l[k]] & C_VALUE))
            return bad(why, "control byte in reason phrase");
    sc->reason = mkspan(off + 13, n - 13);
    return PE_OK;
}

/* A field line l[0..n), n > 0, without its CRLF. *colon receives the name's length. */
static enum perr check_field_line(const char *line, size_t n, size_t *colon, const char **why)
{
    const unsigned char *l = (const unsigned char *)line;
    size_t i = 0;

    while (i < n && (ctab[l[i]] & C_TCHAR))
        i++;
    if (i == 0)
        return bad(why, util_is_ows(line[0]) ? "obs-fold or leading whitespace" : "bad field name");
    if (i == n)
        return bad(why, "field line without colon");
    if (l[i] != ':')
        return bad(why, util_is_ows(line[i]) ? "whitespace before colon" : "bad field name");
    for (size_t k = i + 1; k < n; k++)
        if (!(ctab[l[k]] & C_VALUE))
            return bad(why, "control byte in field value");
    *colon = i;
    return PE_OK;
}

/*
 * Validate the head at the start of buf[0..len), at most <max> bytes of it. Returns PE_OK with
 * <sc> filled when the head is complete, PE_MORE when more bytes could still make it valid, or
 * an error with *why set.
 */
static enum perr scan_head(const char *buf, size_t len, size_t max, bool req, struct scan *sc,
                           const char **why)
{
    size_t lim = len < max ? len : max;
    size_t pos = 0, eol, n;
    const char *nl;
    enum perr e;

    sc->n_fields = 0;
    sc->n_cl = 0;
    if (req) {
        while (pos + 1 < lim && buf[pos] == '\r' && buf[pos + 1] == '\n')
            pos += 2;
    }
    sc->start = pos;

    nl = memchr(buf + pos, '\n', lim - pos);
    if (nl == NULL) {
        /* A CR at the very end may be the start of the CRLF; any other is caught as a bad byte. */
        n = lim - pos;
        if (n > 0 && buf[lim - 1] == '\r')
            n--;
        e = req ? check_req_line(buf, pos, n, false, sc, why)
                : check_status_line(buf, pos, n, false, sc, why);
        if (e != PE_OK)
            return e;
        goto incomplete;
    }
    eol = (size_t)(nl - buf);
    if (eol == pos || buf[eol - 1] != '\r')
        return bad(why, "bare LF");
    e = req ? check_req_line(buf, pos, eol - 1 - pos, true, sc, why)
            : check_status_line(buf, pos, eol - 1 - pos, true, sc, why);
    if (e != PE_OK)
        return e;
    pos = eol + 1;
    sc->line1_end = pos;

    for (;;) {
        size_t colon;

        nl = memchr(buf + pos, '\n', lim - pos);
        if (nl == NULL) {
            n = lim - pos;
            if (n > 0 && buf[lim - 1] == '\r')
                n--;
            if (memchr(buf + pos, '\r', n) != NULL)
                return bad(why, "bare CR");
            goto incomplete;
        }
        eol = (size_t)(nl - buf);
        /* pos > 0 here, and buf[pos - 1] is an LF, so an empty "\n" line fails this too. */
        if (buf[eol - 1] != '\r')
            return bad(why, "bare LF");
        if (eol - 1 == pos) {
            sc->head_len = eol + 1;
            return PE_OK;
        }
        if (++sc->n_fields > H1_MAX_FIELDS) {
            *why = "too many header fields";
            return PE_FIELDS;
        }
        e = check_field_line(buf + pos, eol - 1 - pos, &colon, why);
        if (e != PE_OK)
            return e;
        if (colon == 14 && strncasecmp(buf + pos, "content-length", 14) == 0)
            sc->cl[sc->n_cl++] = mkspan(pos, eol + 1 - pos);
        pos = eol + 1;
    }

incomplete:
    if (len >= max) {
        *why = "head too large";
        return PE_SIZE;
    }
    return PE_MORE;
}

/* Record the piece <at>[0..n) into <s>; pieces of one span must be contiguous in the buffer. */
static int span_add(struct h1_span *s, const char *base, const char *at, size_t n)
{
    size_t off = (size_t)(at - base);

    if (s->len == 0) {
        *s = mkspan(off, n);
        return 0;
    }
    if ((size_t)s->off + s->len != off)
        return -1;
    s->len += (uint32_t)n;
    return 0;
}

static int cb_url(http_parser *p, const char *at, size_t n)
{
    struct pctx *ctx = p->data;

    return n == 0 || ctx->standin ? 0 : span_add(&ctx->url, ctx->buf, at, n);
}

static int cb_status(http_parser *p, const char *at, size_t n)
{
    struct pctx *ctx = p->data;

    return n == 0 ? 0 : span_add(&ctx->status, ctx->buf, at, n);
}

static int cb_field(http_parser *p, const char *at, size_t n)
{
    struct pctx *ctx = p->data;

    if (ctx->n == 0 || ctx->in_value) {
        if (ctx->n == H1_MAX_FIELDS)
            return -1;
        ctx->fields[ctx->n].name = mkspan(0, 0);
        ctx->fields[ctx->n].value = mkspan(0, 0);
        ctx->n++;
        ctx->in_value = false;
    }
    return span_add(&ctx->fields[ctx->n - 1].name, ctx->buf, at, n);
}

static int cb_value(http_parser *p, const char *at, size_t n)
{
    struct pctx *ctx = p->data;

    if (ctx->n == 0)
        return -1;
    ctx->in_value = true;
    /*
     * http-parser reports an empty value only when it sees the next line's first byte, which
     * may come after a Content-Length line that we recorded ourselves: keep no empty piece.
     */
    if (n == 0)
        return 0;
    return span_add(&ctx->fields[ctx->n - 1].value, ctx->buf, at, n);
}

static int cb_headers_complete(http_parser *p)
{
    struct pctx *ctx = p->data;

    ctx->complete = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings h1_settings = {
    .on_url = cb_url,
    .on_status = cb_status,
    .on_header_field = cb_field,
    .on_header_value = cb_value,
    .on_headers_complete = cb_headers_complete,
};

/* Record a Content-Length line (its CRLF included) as a field, bypassing http-parser. */
static int add_cl_field(struct pctx *ctx, struct h1_span line)
{
    const char *l = ctx->buf + line.off;
    size_t s = 15, e = line.len - 2; /* after "content-length:", before CRLF */
    struct h1_field *f;

    if (ctx->n == H1_MAX_FIELDS)
        return -1;
    while (s < e && util_is_ows(l[s]))
        s++;
    while (e > s && util_is_ows(l[e - 1]))
        e--;
    f = &ctx->fields[ctx->n++];
    f->name = mkspan(line.off, 14);
    f->value = mkspan(line.off + s, e - s);
    ctx->in_value = true;
    return 0;
}

/* Feed one segment; false when http-parser failed (paused at headers-complete is success). */
static bool feed(http_parser *p, const struct pctx *ctx, const char *data, size_t n)
{
    enum http_errno err;

    /* A zero length would tell http-parser that the connection hit EOF. */
    if (n == 0)
        return true;
    http_parser_execute(p, &h1_settings, data, n);
    err = HTTP_PARSER_ERRNO(p);
    return err == HPE_OK || (err == HPE_PAUSED && ctx->complete);
}

/*
 * Run http-parser over a pre-validated head, skipping its Content-Length lines (added by hand in
 * their place). <standin> replaces the request line with one http-parser accepts. Returns 0, or
 * the http_errno that stopped it.
 */
static int run_parser(http_parser *p, enum http_parser_type type, const char *buf,
                      const struct scan *sc, struct pctx *ctx, bool standin)
{
    static const char *const standin_line[2] = {"GET / HTTP/1.0\r\n", "GET / HTTP/1.1\r\n"};
    size_t pos = sc->start;

    http_parser_init(p, type);
    p->data = ctx;
    ctx->standin = standin;
    if (standin) {
        if (!feed(p, ctx, standin_line[sc->minor], strlen(standin_line[sc->minor])))
            return (int)HTTP_PARSER_ERRNO(p);
        pos = sc->line1_end;
    }
    for (unsigned i = 0; i <= sc->n_cl && !ctx->complete; i++) {
        size_t end = i < sc->n_cl ? sc->cl[i].off : sc->head_len;

        if (!feed(p, ctx, buf + pos, end - pos))
            return (int)HTTP_PARSER_ERRNO(p);
        if (i < sc->n_cl) {
            if (add_cl_field(ctx, sc->cl[i]) != 0)
                return HPE_UNKNOWN;
            pos = (size_t)sc->cl[i].off + sc->cl[i].len;
        }
    }
    if (!ctx->complete)
        return HPE_UNKNOWN;
    /* Values: http-parser keeps trailing OWS; an absent value points just past the colon. */
    for (unsigned i = 0; i < ctx->n; i++) {
        struct h1_field *f = &ctx->fields[i];

        if (f->value.len == 0)
            f->value.off = f->name.off + f->name.len + 1;
        while (f->value.len > 0 && util_is_ows(buf[f->value.off + f->value.len - 1]))
            f->value.len--;
    }
    return ctx->n == sc->n_fields ? 0 : HPE_UNKNOWN;
}

/*
 * The host part and optional port of an authority into <out>; *has_port says whether a port
 * was given. See h1_authority_parse().
 */
static int parse_authority(const char *s, size_t len, struct h1_authority *out, bool *has_port)
{
    size_t hl, rl, il;
    const char *rest;

    *has_port = false;
    if (len == 0)
        return -EINVAL;
    out->port = 80;
    if (s[0] == '[') {
        const char *rb = memchr(s, ']', len);
        struct in6_addr a6;

        if (rb == NULL)
            return -EINVAL;
        il = (size_t)(rb - s) - 1;
        if (il == 0 || il >= INET6_ADDRSTRLEN)
            return -EINVAL;
        for (size_t i = 0; i < il; i++) {
            char c = s[1 + i];

            if (!(ctab[(unsigned char)c] & C_HEX) && c != ':' && c != '.')
                return -EINVAL;
            out->host[i] = lower(c);
        }
        out->host[il] = '\0';
        if (inet_pton(AF_INET6, out->host, &a6) != 1)
            return -EINVAL;
        out->is_ip = true;
        out->ident[0] = '[';
        memcpy(out->ident + 1, out->host, il);
        out->ident[il + 1] = ']';
        hl = il + 2;
        il += 2;
    } else {
        const char *colon = memchr(s, ':', len);
        struct in_addr a4;
        bool dot = true; /* a leading dot is an empty label */

        hl = colon != NULL ? (size_t)(colon - s) : len;
        il = hl;
        if (il > 0 && s[il - 1] == '.')
            il--;
        if (il == 0 || il > 253)
            return -EINVAL;
        for (size_t i = 0; i < il; i++) {
            char c = s[i];

            if (!(ctab[(unsigned char)c] & C_HOST))
                return -EINVAL;
            if (c == '.' && dot)
                return -EINVAL;
            dot = c == '.';
            out->host[i] = lower(c);
        }
        if (dot)
            return -EINVAL;
        out->host[il] = '\0';
        out->is_ip = inet_aton(out->host, &a4) != 0;
        memcpy(out->ident, out->host, il);
    }
    out->ident[il] = '\0';

    rest = s + hl;
    rl = len - hl;
    if (rl > 0) {
        unsigned port = 0;

        if (rest[0] != ':' || rl < 2 || rl > 6)
            return -EINVAL;
        for (size_t i = 1; i < rl; i++) {
            if (!is_digit(rest[i]))
                return -EINVAL;
            port = port * 10 + (unsigned)(rest[i] - '0');
        }
        if (port == 0 || port > 65535)
            return -EINVAL;
        out->port = (uint16_t)port;
        memcpy(out->ident + il, rest, rl);
        out->ident[il + rl] = '\0';
        *has_port = true;
    }
    return 0;
}

static ssize_t req_fail(enum perr e, const char *reason, const char **why)
{
    if (why != NULL)
        *why = reason;
    switch (e) {
    case PE_TARGET:
        return -414;
    case PE_VERSION:
        return -505;
    case PE_FIELDS:
    case PE_SIZE:
        return -431;
    default:
        return -400;
    }
}

/*
 * Split the request-target into path/path_only (and, for absolute-form, the authority), per
 * its form. Returns NULL or the reason to answer 400.
 */
static const char *req_target(const char *buf, struct h1_req *req)
{
    const char *t = buf + req->target.off;
    size_t tl = req->target.len, end;
    struct http_parser_url u;
    struct h1_authority a;
    bool has_port = false;

    if (req->method == H1_M_CONNECT) {
        if (t[0] == '/' || parse_authority(t, tl, &a, &has_port) != 0 || !has_port)
            return "bad CONNECT target";
        req->path = req->path_only = mkspan(req->target.off + tl, 0);
        return NULL;
    }
    if (tl == 1 && t[0] == '*') {
        if (req->method_s.len != 7 || memcmp(buf + req->method_s.off, "OPTIONS", 7) != 0)
            return "asterisk-form without OPTIONS";
        req->path = req->path_only = mkspan(req->target.off + tl, 0);
        return NULL;
    }
    http_parser_url_init(&u);
    if (http_parser_parse_url(t, tl, 0, &u) != 0)
        return "bad request-target";
    if (t[0] != '/') {
        size_t a0, a1;

        if (!(u.field_set & (1 << UF_SCHEMA)) || !(u.field_set & (1 << UF_HOST)) ||
            !util_ieq(t + u.field_data[UF_SCHEMA].off, u.field_data[UF_SCHEMA].len, "http"))
            return "absolute-form without http scheme";
        if (u.field_set & (1 << UF_USERINFO))
            return "userinfo in request-target";
        a0 = u.field_data[UF_SCHEMA].off + u.field_data[UF_SCHEMA].len;
        if (tl - a0 < 3 || memcmp(t + a0, "://", 3) != 0)
            return "bad absolute-form";
        a0 += 3;
        a1 = a0;
        while (a1 < tl && t[a1] != '/' && t[a1] != '?' && t[a1] != '#')
            a1++;
        if (parse_authority(t + a0, a1 - a0, &a, &has_port) != 0)
            return "bad authority in request-target";
        req->absolute_form = true;
        req->authority = mkspan(req->target.off + a0, a1 - a0);
        /* Without a path, path_only is empty and path holds "?query" or nothing: see http1.h. */
        req->path_only = mkspan(req->target.off + a1, 0);
    }
    if (u.field_set & (1 << UF_PATH))
        req->path_only =
            mkspan(req->target.off + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len);
    end = (size_t)req->path_only.off + req->path_only.len;
    if (u.field_set & (1 << UF_QUERY))
        end = req->target.off + u.field_data[UF_QUERY].off + u.field_data[UF_QUERY].len;
    req->path = mkspan(req->path_only.off, end - req->path_only.off);
    return NULL;
}

static enum h1_method map_method(unsigned m)
{
    switch (m) {
    case HTTP_GET:
        return H1_M_GET;
    case HTTP_HEAD:
        return H1_M_HEAD;
    case HTTP_CONNECT:
        return H1_M_CONNECT;
    default:
        return H1_M_OTHER;
    }
}

ssize_t h1_req_parse(const char *buf, size_t len, struct h1_req *req, const char **why)
{
    struct scan sc;
    struct pctx ctx;
    http_parser p;
    const char *w = NULL;
    const struct h1_field *host = NULL;
    struct h1_authority a;
    unsigned n_host = 0;
    bool standin = false, has_cl = false, conn_close = false, conn_ka = false;
    uint64_t cl = 0;
    enum perr e;
    int rc;

    e = scan_head(buf, len, H1_MAX_HEAD, true, &sc, &w);
    if (e == PE_MORE)
        return 0;
    if (e != PE_OK)
        return req_fail(e, w, why);

    memset(&ctx, 0, sizeof(ctx));
    ctx.buf = buf;
    ctx.fields = req->fields;
    rc = run_parser(&p, HTTP_REQUEST, buf, &sc, &ctx, false);
    if (rc == HPE_INVALID_METHOD) {
        memset(&ctx, 0, sizeof(ctx));
        ctx.buf = buf;
        ctx.fields = req->fields;
        standin = true;
        rc = run_parser(&p, HTTP_REQUEST, buf, &sc, &ctx, true);
    }
    if (rc != 0 || p.http_major != 1 || p.http_minor != sc.minor ||
        (!standin && (ctx.url.off != sc.target.off || ctx.url.len != sc.target.len)))
        return req_fail(PE_BAD, "refused by http-parser", why);

    req->method = standin ? H1_M_OTHER : map_method(p.method);
    req->method_s = sc.method;
    req->target = sc.target;
    req->authority = mkspan(0, 0);
    req->absolute_form = false;
    req->version_minor = p.http_minor;
    req->has_te = false;
    req->n_fields = ctx.n;
    w = req_target(buf, req);
    if (w != NULL)
        return req_fail(PE_BAD, w, why);

    for (unsigned i = 0; i < req->n_fields; i++) {
        const struct h1_field *f = &req->fields[i];
        const char *v = buf + f->value.off;

        if (name_is(buf, f, "host", 4)) {
            host = f;
            n_host++;
        } else if (name_is(buf, f, "content-length", 14)) {
            if (!cl_parse(v, f->value.len, &cl, &has_cl))
                return req_fail(PE_BAD, "bad Content-Length", why);
        } else if (name_is(buf, f, "transfer-encoding", 17)) {
            req->has_te = true;
        } else if (name_is(buf, f, "connection", 10)) {
            conn_close |= h1_list_has(v, f->value.len, "close");
            conn_ka |= h1_list_has(v, f->value.len, "keep-alive");
        }
    }

    if (n_host > 1)
        return req_fail(PE_BAD, "duplicate Host", why);
    if (host != NULL) {
        if (h1_authority_parse(buf + host->value.off, host->value.len, &a) != 0)
            return req_fail(PE_BAD, "bad Host", why);
        if (!req->absolute_form)
            req->authority = host->value;
    } else if (req->version_minor == 1) {
        return req_fail(PE_BAD, "missing Host", why);
    } else if (!req->absolute_form && !h1_is_heartbeat(buf, req)) {
        return req_fail(PE_BAD, "HTTP/1.0 without Host", why);
    }

    if (req->has_te && has_cl)
        return req_fail(PE_BAD, "Transfer-Encoding with Content-Length", why);
    if ((req->method == H1_M_GET || req->method == H1_M_HEAD) && !h1_is_heartbeat(buf, req)) {
        if (req->has_te)
            return req_fail(PE_BAD, "Transfer-Encoding on GET/HEAD", why);
        if (cl > 0)
            return req_fail(PE_BAD, "body on GET/HEAD", why);
    }
    req->content_length = cl;
    req->has_body = req->has_te || cl > 0;
    req->keep_alive = req->version_minor == 1 ? !conn_close : conn_ka && !conn_close;
    return (ssize_t)sc.head_len;
}

bool h1_is_heartbeat(const char *buf, const struct h1_req *req)
{
    static const char hb[] = "/lancache-heartbeat";
    return req->path_only.len == sizeof(hb) - 1 &&
           memcmp(buf + req->path_only.off, hb, sizeof(hb) - 1) == 0;
}

ssize_t h1_resp_parse(const char *buf, size_t len, enum h1_method method, struct h1_resp *resp)
{
    struct scan sc;
    struct pctx ctx;
    http_parser p;
    const char *w = NULL;
    bool has_cl = false, has_te = false, te_chunked = false, conn_close = false, conn_ka = false;
    unsigned te_codings = 0;
    uint64_t cl = 0;
    enum perr e;

    e = scan_head(buf, len, H1_MAX_RESP_HEAD, false, &sc, &w);
    if (e == PE_MORE)
        return 0;
    if (e == PE_SIZE)
        return -E2BIG;
    if (e != PE_OK)
        return -EPROTO;

    memset(&ctx, 0, sizeof(ctx));
    ctx.buf = buf;
    ctx.fields = resp->fields;
    if (run_parser(&p, HTTP_RESPONSE, buf, &sc, &ctx, false) != 0 || p.http_major != 1 ||
        p.http_minor != sc.minor || (int)p.status_code != sc.status)
        return -EPROTO;
    if (sc.status == 101)
        return -EPROTO;

    resp->status = sc.status;
    resp->version_minor = sc.minor;
    resp->reason = ctx.status.len > 0 ? ctx.status : sc.reason;
    resp->n_fields = ctx.n;
    resp->content_length = 0;

    for (unsigned i = 0; i < resp->n_fields; i++) {
        const struct h1_field *f = &resp->fields[i];
        const char *v = buf + f->value.off, *el;
        size_t pos = 0, el_len;

        if (name_is(buf, f, "content-length", 14)) {
            if (!cl_parse(v, f->value.len, &cl, &has_cl))
                return -EPROTO;
        } else if (name_is(buf, f, "transfer-encoding", 17)) {
            has_te = true;
            while (list_next(v, f->value.len, &pos, &el, &el_len)) {
                te_codings++;
                te_chunked = el_len == 7 && strncasecmp(el, "chunked", 7) == 0;
            }
        } else if (name_is(buf, f, "connection", 10)) {
            conn_close |= h1_list_has(v, f->value.len, "close");
            conn_ka |= h1_list_has(v, f->value.len, "keep-alive");
        }
    }

    if (method == H1_M_HEAD || sc.status < 200 || sc.status == 204 || sc.status == 304) {
        resp->framing = H1_BODY_NONE;
    } else if (has_te) {
        /*
         * Only "chunked" alone: we cannot undo another transfer coding, and passing its bytes on
         * as the body (the TE field is hop-by-hop) would corrupt the object.
         */
        if (has_cl || te_codings != 1 || !te_chunked)
            return -EPROTO;
        resp->framing = H1_BODY_CHUNKED;
    } else if (has_cl) {
        resp->framing = H1_BODY_LENGTH;
    } else {
        resp->framing = H1_BODY_CLOSE;
    }
    if (has_cl)
        resp->content_length = cl;
    /* RFC 9112 section 6.1: Transfer-Encoding in a 1.0 message means close after it. */
    resp->keep_alive = (sc.minor == 1 ? !conn_close : conn_ka && !conn_close) &&
                       resp->framing != H1_BODY_CLOSE && !(has_te && sc.minor == 0);
    return (ssize_t)sc.head_len;
}

/* Decoder states; CH_SIZE0 (0) is a fresh chunk-size line. */
enum ch_state {
    CH_SIZE0 = 0, /* first hex digit of a chunk size */
    CH_SIZE,      /* more hex digits, or ';' / BWS / CR */
    CH_EXT,       /* chunk extensions, ignored up to CR */
    CH_SIZE_LF,   /* LF ending the size line */
    CH_DATA,      /* <remaining> data bytes, handed to the caller */
    CH_DATA_CR,   /* CRLF after the data */
    CH_DATA_LF,
    CH_TRAILER0, /* start of a trailer line, or CR of the final CRLF */
    CH_TRAILER,  /* inside a trailer line, ignored up to CR */
    CH_TRAILER_LF,
    CH_END_LF, /* LF of the final CRLF */
    CH_DONE,
    CH_ERROR, /* sticky */
};

void h1_chunked_init(struct h1_chunked *c)
{
    memset(c, 0, sizeof(*c));
    c->state = CH_SIZE0;
}

int h1_chunked_parse(struct h1_chunked *c, const char *in, size_t len, size_t *framing,
                     size_t *avail)
{
    size_t i = 0;

    *framing = 0;
    *avail = 0;
    if (c->state == CH_ERROR)
        return -EPROTO;
    while (i < len && c->state != CH_DONE) {
        unsigned char ch;
        int d;

        if (c->state == CH_DATA) {
            size_t left = len - i;

            *framing = i;
            *avail = (uint64_t)left < c->remaining ? left : (size_t)c->remaining;
            return 0;
        }
        ch = (unsigned char)in[i++];
        switch (c->state) {
        case CH_SIZE0:
        case CH_SIZE:
            d = hexval(ch);
            if (d >= 0) {
                if (c->remaining > (UINT64_MAX >> 4))
                    goto fail;
                c->remaining = c->remaining << 4 | (uint64_t)d;
                c->state = CH_SIZE;
            } else if (c->state == CH_SIZE0) {
                goto fail;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
                break;
            } else if (ch == ';' || util_is_ows((char)ch)) {
                c->state = CH_EXT;
            } else {
                goto fail;
            }
            if (++c->ext_len > CHUNK_LINE_MAX)
                goto fail;
            break;
        case CH_EXT:
            if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (!(ctab[ch] & C_VALUE) || ++c->ext_len > CHUNK_LINE_MAX)
                goto fail;
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                goto fail;
            c->ext_len = 0;
            c->state = c->remaining > 0 ? CH_DATA : CH_TRAILER0;
            break;
        case CH_DATA_CR:
            if (ch != '\r')
                goto fail;
            c->state = CH_DATA_LF;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                goto fail;
            c->state = CH_SIZE0;
            break;
        case CH_TRAILER0:
        case CH_TRAILER:
            if (ch == '\r')
                c->state = c->state == CH_TRAILER0 ? CH_END_LF : CH_TRAILER_LF;
            else if (ctab[ch] & C_VALUE)
                c->state = CH_TRAILER;
            else
                goto fail;
            if (++c->ext_len > CHUNK_TRAILER_MAX)
                goto fail;
            break;
        case CH_TRAILER_LF:
            if (ch != '\n' || ++c->ext_len > CHUNK_TRAILER_MAX)
                goto fail;
            c->state = CH_TRAILER0;
            break;
        case CH_END_LF:
            if (ch != '\n')
                goto fail;
            c->state = CH_DONE;
            c->done = true;
            break;
        default:
            goto fail;
        }
    }
    *framing = i;
    return 0;

fail:
    c->state = CH_ERROR;
    return -EPROTO;
}

void h1_chunked_take(struct h1_chunked *c, size_t n)
{
    if (n == 0)
        return;
    ASSERT(c->state == CH_DATA);
    ASSERT(n <= c->remaining);
    c->remaining -= n;
    if (c->remaining == 0)
        c->state = CH_DATA_CR;
}

const struct h1_field *h1_find(const char *buf, const struct h1_field *fields, unsigned n,
                               const char *name)
{
    size_t len = strlen(name);

    for (unsigned i = 0; i < n; i++)
        if (name_is(buf, &fields[i], name, len))
            return &fields[i];
    return NULL;
}

bool h1_is_hop_by_hop(const char *buf, const struct h1_field *fields, unsigned n,
                      const struct h1_field *f)
{
    static const char *const hop[] = {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
    };
    const char *name = buf + f->name.off;

    for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
        if (util_ieq(name, f->name.len, hop[i]))
            return true;
    for (unsigned i = 0; i < n; i++)
        if (name_is(buf, &fields[i], "connection", 10) &&
            list_has_n(buf + fields[i].value.off, fields[i].value.len, name, f->name.len))
            return true;
    return false;
}

int h1_authority_parse(const char *s, size_t len, struct h1_authority *out)
{
    bool has_port;

    return parse_authority(s, len, out, &has_port);
}

const char *h1_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 303:
        return "See Other";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 416:
        return "Range Not Satisfiable";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 508:
        return "Loop Detected";
    default:
        return "Unknown";
    }
}
