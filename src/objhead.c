/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * objhead: the stored response of an object version. See objhead.h.
 */
#include "objhead.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "httpdate.h"
#include "util.h"

static bool has_prefix(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && util_ieq(name, n, prefix);
}

/* A digest of the message content (RFC 9530's Content-Digest, RFC 1864's Content-MD5): true of
 * the bytes of one answer only, unlike Repr-Digest or Digest (of the whole representation). */
static bool is_content_digest(const char *name, size_t len)
{
    return util_ieq(name, len, "content-digest") || util_ieq(name, len, "content-md5");
}

bool objhead_keeps(const char *name, size_t len)
{
    static const char *const drop[] = {
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-range",
        "set-cookie",
        "set-cookie2",
        "date",
        "age",
        "etag",
        "last-modified",
        "content-type",
        "accept-ranges",
    };
    for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
        if (util_ieq(name, len, drop[i]))
            return false;
    return !has_prefix(name, len, "proxy-") && !has_prefix(name, len, "x-lancache-") &&
           !has_prefix(name, len, "x-upstream-") && !has_prefix(name, len, "x-cacheparty-");
}

static struct objhead *alloc_head(size_t len)
{
    struct objhead *h = xmalloc(sizeof(*h) + len + 1);
    memset(h, 0, sizeof(*h));
    h->refs = 1;
    h->len = len;
    h->text[len] = '\0';
    return h;
}

/* Age's delta-seconds (RFC 9111 §1.2.2): digits only; too large a value is OBJHEAD_AGE_MAX
 * (§1.2.2: 2^31 stands for any larger one). */
static bool parse_delta(const char *v, size_t len, int64_t *out)
{
    if (len == 0)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x > OBJHEAD_AGE_MAX / 10 ? OBJHEAD_AGE_MAX : x * 10 + (v[i] - '0');
        if (x > OBJHEAD_AGE_MAX)
            x = OBJHEAD_AGE_MAX;
    }
    *out = x;
    return true;
}

/* Whether response field <name> of an answer of <status> is stored: objhead_keeps, and a digest
 * of the content only from a 200 (a 206's describes its part alone). */
static bool stored(const char *name, size_t len, int status)
{
    return objhead_keeps(name, len) && (status == 200 || !is_content_digest(name, len));
}

int objhead_from_response(const char *buf, const struct h1_resp *resp, double request_time,
                          double response_time, struct objhead **out)
{
    size_t len = 0;
    const struct h1_field *date = NULL, *age = NULL;
    for (unsigned i = 0; i < resp->n_fields; i++) {
        const struct h1_field *f = &resp->fields[i];
        const char *name = buf + f->name.off;
        if (util_ieq(name, f->name.len, "date"))
            date = date != NULL ? date : f;
        else if (util_ieq(name, f->name.len, "age"))
            age = age != NULL ? age : f;
        if (!stored(name, f->name.len, resp->status) ||
            h1_is_hop_by_hop(buf, resp->fields, resp->n_fields, f))
            continue;
        len += f->name.len + 2 + f->value.len + 2;
        if (len > OBJHEAD_FIELDS_MAX)
            return -E2BIG;
    }
    struct objhead *h = alloc_head(len);
    char *p = h->text;
    for (unsigned i = 0; i < resp->n_fields; i++) {
        const struct h1_field *f = &resp->fields[i];
        if (!stored(buf + f->name.off, f->name.len, resp->status) ||
            h1_is_hop_by_hop(buf, resp->fields, resp->n_fields, f))
            continue;
        memcpy(p, buf + f->name.off, f->name.len);
        p += f->name.len;
        *p++ = ':';
        *p++ = ' ';
        memcpy(p, buf + f->value.off, f->value.len);
        p += f->value.len;
        *p++ = '\r';
        *p++ = '\n';
    }
    ASSERT(p == h->text + len);

    /* RFC 9111 §4.2.3, with date_value our own response_time when the origin sent no Date. */
    int64_t rt = (int64_t)response_time, date_value = rt;
    if (date != NULL && date->value.len <= OBJHEAD_DATE_MAX &&
        httpdate_parse(buf + date->value.off, date->value.len, rt, &date_value) == 0) {
        memcpy(h->date, buf + date->value.off, date->value.len);
        h->date_len = date->value.len;
    } else {
        date_value = rt;
        httpdate_format(rt, h->date);
        h->date_len = HTTPDATE_LEN;
    }
    int64_t age_value = 0;
    h->origin_aged = age != NULL && parse_delta(buf + age->value.off, age->value.len, &age_value);
    if (!h->origin_aged)
        age_value = 0;
    h->date_value = date_value;
    int64_t apparent = rt > date_value ? rt - date_value : 0;
    /* (whole seconds of the unrounded times: a fill across a second boundary took no second) */
    int64_t delay = response_time > request_time ? (int64_t)(response_time - request_time) : 0;
    int64_t corrected = age_value + delay;
    h->initial_age = apparent > corrected ? apparent : corrected;
    if (h->initial_age > OBJHEAD_AGE_MAX)
        h->initial_age = OBJHEAD_AGE_MAX;
    h->response_time = rt;
    *out = h;
    return 0;
}

/* A token character (RFC 9110 §5.6.2). */
static bool tchar(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Whether <text>[0..len) is what objhead_from_response writes: lines "token: value\r\n" of
 * fields objhead_keeps allows, values of visible characters, SP and HTAB (obs-text too). */
static bool text_is_fields(const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *name = p;
        while (p < end && tchar((unsigned char)*p))
            p++;
        size_t nlen = (size_t)(p - name);
        if (nlen == 0 || end - p < 2 || p[0] != ':' || p[1] != ' ' || !objhead_keeps(name, nlen))
            return false;
        p += 2;
        while (p < end && *p != '\r') {
            unsigned char ch = (unsigned char)*p++;
            if (ch < 0x20 ? ch != '\t' : ch == 0x7f)
                return false;
        }
        if (end - p < 2 || p[1] != '\n')
            return false;
        p += 2;
    }
    return true;
}

struct objhead *objhead_new(const char *text, size_t len, const char *date, size_t date_len,
                            int64_t response_time, int64_t initial_age)
{
    int64_t d;
    if (len > OBJHEAD_FIELDS_MAX || date_len > OBJHEAD_DATE_MAX || initial_age < 0 ||
        initial_age > OBJHEAD_AGE_MAX || response_time < 0 || response_time > OBJHEAD_TIME_MAX ||
        !text_is_fields(text, len) || httpdate_parse(date, date_len, response_time, &d) != 0)
        return NULL;
    struct objhead *h = alloc_head(len);
    if (len > 0)
        memcpy(h->text, text, len);
    if (date_len > 0)
        memcpy(h->date, date, date_len);
    h->date[date_len] = '\0';
    h->date_len = date_len;
    h->date_value = d;
    h->response_time = response_time;
    h->initial_age = initial_age;
    return h;
}

struct objhead *objhead_ref(struct objhead *h)
{
    ASSERT(h->refs > 0);
    h->refs++;
    return h;
}

void objhead_unref(struct objhead **hp)
{
    struct objhead *h = *hp;
    if (h == NULL)
        return;
    *hp = NULL;
    ASSERT(h->refs > 0);
    if (--h->refs == 0)
        free(h);
}

int64_t objhead_age(const struct objhead *h, int64_t now)
{
    /* (initial_age and response_time are bounded on the way in, so neither sum overflows) */
    int64_t resident = now > h->response_time ? now - h->response_time : 0;
    if (resident > OBJHEAD_AGE_MAX)
        resident = OBJHEAD_AGE_MAX;
    int64_t age = h->initial_age + resident;
    return age > OBJHEAD_AGE_MAX ? OBJHEAD_AGE_MAX : age;
}

/* Whether the line <l>[0..len) ("Name: value") names a field objhead_write leaves out. */
static bool omitted(const char *l, size_t len, enum objhead_omit omit)
{
    const char *colon = memchr(l, ':', len);
    size_t n = colon != NULL ? (size_t)(colon - l) : len;
    switch (omit) {
    case OBJHEAD_NO_CONTENT:
        return has_prefix(l, n, "content-") && !util_ieq(l, n, "content-location");
    case OBJHEAD_PART:
        return is_content_digest(l, n);
    case OBJHEAD_ALL:
        break;
    }
    return false;
}

size_t objhead_write(const struct objhead *h, enum objhead_omit omit, char *out, size_t cap)
{
    size_t w = 0;
    const char *p = h->text, *end = h->text + h->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl != NULL ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        if (!omitted(p, n, omit)) {
            if (n > cap - w)
                return SIZE_MAX;
            memcpy(out + w, p, n);
            w += n;
        }
        p += n;
    }
    return w;
}

bool objhead_equal(const struct objhead *a, const struct objhead *b)
{
    return a->len == b->len && memcmp(a->text, b->text, a->len) == 0 &&
           a->date_len == b->date_len && memcmp(a->date, b->date, a->date_len) == 0 &&
           a->response_time == b->response_time && a->initial_age == b->initial_age;
}
