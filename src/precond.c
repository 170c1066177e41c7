/* SPDX-License-Identifier: BSD-2-Clause */
/* precond: conditional requests answered from a stored object. See precond.h. Pure. */
#include "precond.h"

#include <string.h>

#include "httpdate.h"
#include "util.h"

static bool is_weak(const char *t, size_t len)
{
    return len >= 2 && t[0] == 'W' && t[1] == '/';
}

/* A strong entity-tag: DQUOTE *etagc DQUOTE, etagc = %x21 / %x23-7E / obs-text. */
static bool is_strong_tag(const char *t, size_t len)
{
    if (len < 2 || t[0] != '"' || t[len - 1] != '"')
        return false;
    for (size_t i = 1; i + 1 < len; i++) {
        unsigned char ch = (unsigned char)t[i];
        if (ch == '"' || ch < 0x21 || ch == 0x7f)
            return false;
    }
    return true;
}

/* Whether member <m>[0..mlen) equals <etag>[0..elen). */
static bool tag_equal(const char *m, size_t mlen, const char *etag, size_t elen, bool weak)
{
    if (weak) {
        if (is_weak(m, mlen)) {
            m += 2;
            mlen -= 2;
        }
        if (is_weak(etag, elen)) {
            etag += 2;
            elen -= 2;
        }
    } else if (!is_strong_tag(m, mlen) || !is_strong_tag(etag, elen)) {
        return false;
    }
    return mlen > 0 && mlen == elen && memcmp(m, etag, mlen) == 0;
}

bool precond_etag_list_has(const char *v, size_t len, const char *etag, bool weak)
{
    if (v == NULL)
        return false;
    util_trim_ows(&v, &len);
    if (len == 1 && v[0] == '*')
        return true;
    size_t elen = etag != NULL ? strlen(etag) : 0;
    if (elen == 0)
        return false;
    size_t i = 0;
    while (i < len) {
        while (i < len && (util_is_ows(v[i]) || v[i] == ','))
            i++;
        size_t s = i;
        bool quoted = false;
        while (i < len && (quoted || v[i] != ',')) {
            if (v[i] == '"')
                quoted = !quoted;
            i++;
        }
        const char *m = v + s;
        size_t mlen = i - s;
        util_trim_ows(&m, &mlen);
        if (mlen > 0 && tag_equal(m, mlen, etag, elen, weak))
            return true;
    }
    return false;
}

/* The date of field <f>, if it is a valid HTTP-date. */
static bool field_date(const struct precond_field *f, int64_t now, int64_t *t)
{
    return f->v != NULL && httpdate_parse(f->v, f->len, now, t) == 0;
}

static bool if_range_holds(const struct precond_field *f, const struct precond_stored *s,
                           bool has_lm, int64_t lm, int64_t now)
{
    const char *v = f->v;
    size_t len = f->len;
    util_trim_ows(&v, &len);
    if ((len > 0 && v[0] == '"') || (len > 2 && is_weak(v, len) && v[2] == '"')) {
        size_t elen = s->etag != NULL ? strlen(s->etag) : 0;
        return tag_equal(v, len, s->etag, elen, false);
    }
    int64_t t;
    if (!has_lm || httpdate_parse(v, len, now, &t) != 0 || t != lm)
        return false;
    return !s->has_date || s->date >= lm + 1;
}

enum precond_outcome precond_evaluate(const struct precond_req *r, const struct precond_stored *s,
                                      int64_t now)
{
    int64_t lm = 0, t = 0;
    bool has_lm = s->last_modified != NULL && s->last_modified[0] != '\0' &&
                  httpdate_parse(s->last_modified, strlen(s->last_modified), now, &lm) == 0;

    if (r->if_match.v != NULL) {
        if (!precond_etag_list_has(r->if_match.v, r->if_match.len, s->etag, false))
            return PRECOND_FAILED;
    } else if (has_lm && field_date(&r->if_unmodified_since, now, &t) && lm > t) {
        return PRECOND_FAILED;
    }

    if (r->if_none_match.v != NULL) {
        if (precond_etag_list_has(r->if_none_match.v, r->if_none_match.len, s->etag, true))
            return PRECOND_NOT_MODIFIED;
    } else if (field_date(&r->if_modified_since, now, &t)) {
        if ((has_lm && lm <= t) || (!has_lm && s->has_date && s->date <= t))
            return PRECOND_NOT_MODIFIED;
    }

    if (!r->has_range)
        return PRECOND_FULL;
    if (r->if_range.v == NULL)
        return PRECOND_RANGE;
    return if_range_holds(&r->if_range, s, has_lm, lm, now) ? PRECOND_RANGE : PRECOND_FULL;
}
