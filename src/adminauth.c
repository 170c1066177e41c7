/* SPDX-License-Identifier: BSD-2-Clause */
/* adminauth: who may use the admin listener (see adminauth.h). */
#include "adminauth.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

bool adminauth_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}

static bool ieq(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    return len == n && strncasecmp(s, lit, n) == 0;
}

/* <host>[0..len) without its port: an IPv6 literal keeps its brackets off. Returns false when
 * the port part is not digits. */
static bool host_part(const char *host, size_t len, const char **h, size_t *hlen, bool *ip6)
{
    *ip6 = false;
    if (len > 0 && host[0] == '[') {
        const char *close = memchr(host, ']', len);
        if (close == NULL)
            return false;
        *h = host + 1;
        *hlen = (size_t)(close - host - 1);
        *ip6 = true;
        size_t rest = len - (size_t)(close - host) - 1;
        if (rest == 0)
            return true;
        if (close[1] != ':')
            return false;
        for (size_t i = 2; i <= rest; i++)
            if (close[i] < '0' || close[i] > '9')
                return false;
        return true;
    }
    const char *colon = memchr(host, ':', len);
    *h = host;
    *hlen = colon != NULL ? (size_t)(colon - host) : len;
    for (size_t i = *hlen + 1; i < len; i++)
        if (host[i] < '0' || host[i] > '9')
            return false;
    return true;
}

bool adminauth_host_is_admin(const struct adminauth_policy *p, const char *host, size_t len)
{
    if (len == 0)
        return true;
    const char *h;
    size_t hlen;
    bool ip6;
    if (!host_part(host, len, &h, &hlen, &ip6) || hlen == 0 || hlen >= 256)
        return false;
    char lit[256];
    memcpy(lit, h, hlen);
    lit[hlen] = '\0';
    unsigned char addr[16];
    if (inet_pton(ip6 ? AF_INET6 : AF_INET, lit, addr) == 1)
        return true;
    if (ip6)
        return false;
    if (lit[hlen - 1] == '.') /* the absolute form of the same name */
        lit[--hlen] = '\0';
    if (ieq(lit, hlen, "localhost"))
        return true;
    for (size_t i = 0; i < p->n_names; i++) {
        size_t nl = strlen(p->names[i]);
        if (nl > 1 && p->names[i][nl - 1] == '.')
            nl--; /* an absolute name: the same host */
        if (hlen == nl && strncasecmp(lit, p->names[i], nl) == 0)
            return true;
    }
    return false;
}

/* The credential sent: the Bearer token, or else the admin cookie. *<present> false when none. */
static void credential(const struct adminauth_req *r, const char **tok, size_t *tlen, bool *present)
{
    *present = false;
    if (r->authorization_len > 7 && strncasecmp(r->authorization, "Bearer ", 7) == 0) {
        *tok = r->authorization + 7;
        *tlen = r->authorization_len - 7;
        while (*tlen > 0 && (**tok == ' ' || **tok == '\t')) {
            (*tok)++;
            (*tlen)--;
        }
        *present = true;
        return;
    }
    if (r->authorization_len > 0) { /* another scheme: a credential, and a wrong one */
        *tok = "";
        *tlen = 0;
        *present = true;
        return;
    }
    const char *c = r->cookie, *end = r->cookie + r->cookie_len;
    size_t nlen = strlen(ADMINAUTH_COOKIE);
    while (c != NULL && c < end) {
        while (c < end && (*c == ' ' || *c == ';'))
            c++;
        const char *semi = memchr(c, ';', (size_t)(end - c));
        const char *stop = semi != NULL ? semi : end;
        if ((size_t)(stop - c) > nlen && memcmp(c, ADMINAUTH_COOKIE, nlen) == 0 && c[nlen] == '=') {
            *tok = c + nlen + 1;
            *tlen = (size_t)(stop - *tok);
            *present = true;
            return;
        }
        c = semi != NULL ? semi + 1 : NULL;
    }
}

static bool same_origin(const struct adminauth_req *r)
{
    if (r->fetch_site_len > 0 && !ieq(r->fetch_site, r->fetch_site_len, "same-origin") &&
        !ieq(r->fetch_site, r->fetch_site_len, "none"))
        return false;
    if (r->origin_len == 0)
        return true;
    /* "http://" + Host, exactly (scheme and host are case-insensitive). */
    return r->host_len > 0 && r->origin_len == 7 + r->host_len &&
           strncasecmp(r->origin, "http://", 7) == 0 &&
           strncasecmp(r->origin + 7, r->host, r->host_len) == 0;
}

enum adminauth_verdict adminauth_check(const struct adminauth_policy *p,
                                       const struct adminauth_req *r)
{
    if (!r->host_is_object && !adminauth_host_is_admin(p, r->host, r->host_len))
        return ADMINAUTH_BAD_HOST;
    const char *tok = NULL;
    size_t tlen = 0;
    bool present;
    credential(r, &tok, &tlen, &present);
    size_t want = strlen(p->token);
    if (present && want > 0 && !adminauth_equal(tok, tlen, p->token, want))
        return ADMINAUTH_BAD_TOKEN;
    bool needed = !p->loopback && !(p->public_views && r->read_only);
    if (needed && (want == 0 || !present))
        return want == 0 ? ADMINAUTH_BAD_TOKEN : ADMINAUTH_NO_TOKEN;
    if (!r->read_only && !same_origin(r))
        return ADMINAUTH_CROSS_ORIGIN;
    return ADMINAUTH_OK;
}

int adminauth_status(enum adminauth_verdict v)
{
    return v == ADMINAUTH_NO_TOKEN || v == ADMINAUTH_BAD_TOKEN ? 401 : 403;
}

const char *adminauth_reason(enum adminauth_verdict v)
{
    switch (v) {
    case ADMINAUTH_OK:
        return "ok";
    case ADMINAUTH_BAD_HOST:
        return "Host is not this admin listener's address or one of [server] admin_names";
    case ADMINAUTH_NO_TOKEN:
        return "admin_token required (Authorization: Bearer TOKEN)";
    case ADMINAUTH_BAD_TOKEN:
        return "wrong admin_token";
    case ADMINAUTH_CROSS_ORIGIN:
        return "a change of state from another origin (Origin / Sec-Fetch-Site)";
    }
    return "refused";
}
