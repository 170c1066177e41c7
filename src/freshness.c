/* SPDX-License-Identifier: BSD-2-Clause */
/* freshness: Cache-Control and the explicit freshness lifetime of a response. See freshness.h. */
#include "freshness.h"

#include <string.h>

#include "httpdate.h"
#include "util.h"

/* A delta-seconds argument <v>[0..len) (digits only), capped at FRESHNESS_DELTA_MAX. */
static bool parse_delta(const char *v, size_t len, int64_t *out)
{
    if (len == 0)
        return false;
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        if (n < FRESHNESS_DELTA_MAX)
            n = n * 10 + (v[i] - '0');
    }
    *out = n < FRESHNESS_DELTA_MAX ? n : FRESHNESS_DELTA_MAX;
    return true;
}

/* Sets *<slot> from argument <v>[0..len) (NULL: none), or marks the directives invalid. */
static void set_delta(struct freshness_cc *cc, int64_t *slot, const char *v, size_t len)
{
    int64_t n;
    if (v == NULL || !parse_delta(v, len, &n)) {
        cc->invalid = true;
        return;
    }
    if (*slot >= 0 && *slot != n)
        cc->invalid = true; /* (RFC 9111 §4.2.1: conflicting duplicates) */
    *slot = n;
}

/* One directive: name <n>[0..nlen), argument <v>[0..vlen) (quotes removed; NULL: none). */
static void directive(struct freshness_cc *cc, const char *n, size_t nlen, const char *v,
                      size_t vlen)
{
    if (util_ieq(n, nlen, "max-age"))
        set_delta(cc, &cc->max_age, v, vlen);
    else if (util_ieq(n, nlen, "s-maxage"))
        set_delta(cc, &cc->s_maxage, v, vlen);
    else if (util_ieq(n, nlen, "no-store"))
        cc->no_store = true;
    else if (util_ieq(n, nlen, "no-cache"))
        cc->no_cache = true;
    else if (util_ieq(n, nlen, "private"))
        cc->private_ = true;
    else if (util_ieq(n, nlen, "must-understand"))
        cc->must_understand = true;
    else if (util_ieq(n, nlen, "public"))
        cc->public_ = true;
}

/* Reads the list <p>[0..len) of one field value. */
static void parse_list(struct freshness_cc *cc, const char *p, size_t len)
{
    const char *end = p + len;
    while (p < end) {
        while (p < end && (*p == ',' || util_is_ows(*p)))
            p++;
        const char *n = p;
        while (p < end && *p != ',' && *p != '=' && !util_is_ows(*p))
            p++;
        size_t nlen = (size_t)(p - n);
        while (p < end && util_is_ows(*p))
            p++;
        const char *v = NULL;
        size_t vlen = 0;
        bool bad = false;
        if (p < end && *p == '=') {
            p++;
            while (p < end && util_is_ows(*p))
                p++;
            if (p < end && *p == '"') {
                /* A quoted-string: a quoted-pair's backslash makes the argument unusable as a
                 * number, which is all an argument is used for here. */
                v = ++p;
                while (p < end && *p != '"') {
                    if (*p == '\\') {
                        bad = true;
                        if (++p == end)
                            break;
                    }
                    p++;
                }
                vlen = (size_t)(p - v);
                if (p < end)
                    p++; /* the closing quote */
                else
                    bad = true;
            } else {
                v = p;
                while (p < end && *p != ',' && !util_is_ows(*p))
                    p++;
                vlen = (size_t)(p - v);
            }
        }
        while (p < end && *p != ',')
            if (!util_is_ows(*p++))
                bad = true; /* text after the directive: as if malformed */
        if (nlen == 0)
            continue;
        if (bad && v != NULL) {
            v = ""; /* an argument that parses as nothing (invalid for a delta) */
            vlen = 0;
        }
        directive(cc, n, nlen, v, vlen);
    }
}

void freshness_cc_parse(const char *buf, const struct h1_resp *resp, struct freshness_cc *out)
{
    memset(out, 0, sizeof(*out));
    out->max_age = -1;
    out->s_maxage = -1;
    for (unsigned i = 0; i < resp->n_fields; i++) {
        const struct h1_field *f = &resp->fields[i];
        if (util_ieq(buf + f->name.off, f->name.len, "Cache-Control"))
            parse_list(out, buf + f->value.off, f->value.len);
    }
}

int64_t freshness_lifetime(const char *buf, const struct h1_resp *resp,
                           const struct freshness_cc *cc, int64_t date_value, int64_t now)
{
    if (cc->invalid)
        return 0;
    if (cc->s_maxage >= 0)
        return cc->s_maxage;
    if (cc->max_age >= 0)
        return cc->max_age;
    const struct h1_field *ex = h1_find(buf, resp->fields, resp->n_fields, "Expires");
    if (ex == NULL)
        return -1;
    int64_t t;
    if (httpdate_parse(buf + ex->value.off, ex->value.len, now, &t) != 0 || t <= date_value)
        return 0; /* (RFC 9111 §5.3: an invalid Expires, "0" among them, is in the past) */
    int64_t d = t - date_value;
    return d < FRESHNESS_DELTA_MAX ? d : FRESHNESS_DELTA_MAX;
}

bool freshness_status_is_understood(int status)
{
    if (status >= 200 && status <= 206)
        return true;
    if (status >= 300 && status <= 308)
        return status != 306; /* (306 is reserved) */
    if (status >= 400 && status <= 417)
        return true;
    if (status == 421 || status == 422 || status == 426)
        return true;
    return status >= 500 && status <= 505;
}
