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
           !has_prefix(name, len, "x-upstream-");
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

/* Age's delta-seconds (RFC 9111 §1.2.2): digits only; too large a value is the largest one. */
static bool parse_delta(const char *v, size_t len, int64_t *out)
{
    if (len == 0)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x > (INT32_MAX - 9) / 10 ? INT32_MAX : x * 10 + (v[i] - '0');
    }
    *out = x;
    return true;
}

int objhead_from_response(const char *buf, const struct h1_resp *resp, int64_t request_time,
                          int64_t response_time, struct objhead **out)
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
        if (!objhead_keeps(name, f->name.len) ||
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
        if (!objhead_keeps(buf + f->name.off, f->name.len) ||
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
    int64_t date_value = response_time;
    if (date != NULL && date->value.len <= OBJHEAD_DATE_MAX &&
        httpdate_parse(buf + date->value.off, date->value.len, response_time, &date_value) == 0) {
        memcpy(h->date, buf + date->value.off, date->value.len);
        h->date_len = date->value.len;
    } else {
        date_value = response_time;
        httpdate_format(response_time, h->date);
        h->date_len = HTTPDATE_LEN;
    }
    int64_t age_value = 0;
    if (age == NULL || !parse_delta(buf + age->value.off, age->value.len, &age_value))
        age_value = 0;
    int64_t apparent = response_time > date_value ? response_time - date_value : 0;
    int64_t delay = response_time > request_time ? response_time - request_time : 0;
    int64_t corrected = age_value + delay;
    h->initial_age = apparent > corrected ? apparent : corrected;
    h->response_time = response_time;
    *out = h;
    return 0;
}

struct objhead *objhead_new(const char *text, size_t len, const char *date, size_t date_len,
                            int64_t response_time, int64_t initial_age)
{
    if (len > OBJHEAD_FIELDS_MAX || date_len > OBJHEAD_DATE_MAX || initial_age < 0)
        return NULL;
    struct objhead *h = alloc_head(len);
    if (len > 0)
        memcpy(h->text, text, len);
    if (date_len > 0)
        memcpy(h->date, date, date_len);
    h->date[date_len] = '\0';
    h->date_len = date_len;
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
    int64_t resident = now > h->response_time ? now - h->response_time : 0;
    return h->initial_age + resident;
}

/* Whether the line <l>[0..len) ("Name: value") names a field objhead_write leaves out. */
static bool omitted(const char *l, size_t len, enum objhead_omit omit)
{
    if (omit != OBJHEAD_NO_CONTENT)
        return false;
    const char *colon = memchr(l, ':', len);
    size_t n = colon != NULL ? (size_t)(colon - l) : len;
    return has_prefix(l, n, "content-") && !util_ieq(l, n, "content-location");
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
