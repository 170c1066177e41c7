/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * adminauth: who may use the admin listener (pure: no I/O, no loop).
 *
 * Three checks, in this order, for every request:
 * 1. Host (DNS rebinding): a browser that a page on the LAN or the Internet points at a name
 *    resolving to the admin address sends that name as Host. Accepted: no Host at all (HTTP/1.0
 *    tools), an IP literal (with or without port: a literal is never rebound), "localhost", or
 *    one of [server] admin_names; any other Host is refused (403), on loopback too. Except where
 *    the Host names the object, not the admin (a PURGE without ?identifier=, mapped to a cache
 *    identifier as a client request is): a rebound name can only name its own objects there.
 * 2. Credential: when admin_listen is not a loopback address (util_addr_is_loopback),
 *    every request needs [server] admin_token, as "Authorization: Bearer TOKEN" or as the
 *    cookie "cacheparty_admin=TOKEN" that the dashboard's login sets; compared in constant time
 *    (no early exit on the first byte that differs, nor on the length). With admin_public = yes a
 *    read-only request (GET or HEAD) needs none. Missing or wrong: 401. On loopback no credential
 *    is asked (the machine's own users), but a token sent anyway must be right.
 * 3. Origin (CSRF) for requests that change state (anything but GET and HEAD): a browser sends
 *    Origin (and Sec-Fetch-Site) with them; when present they must say the request comes from
 *    the admin page itself: Origin "http://HOST" with the request's own Host, Sec-Fetch-Site
 *    "same-origin" or "none". Tools like curl send neither and pass. A cross-site form or fetch:
 *    403. (A PURGE from another site's script also needs a CORS preflight, which is never
 *    answered: that is a second wall, not the one relied on.)
 * A GET never changes state (admin.c's routing): checks 1 and 2 cover it.
 */
#ifndef CACHEPARTY_ADMINAUTH_H
#define CACHEPARTY_ADMINAUTH_H

#include <stdbool.h>
#include <stddef.h>

#define ADMINAUTH_COOKIE "cacheparty_admin"

enum adminauth_verdict {
    ADMINAUTH_OK,
    ADMINAUTH_BAD_HOST,    /* 403: Host is a name that is not the admin's */
    ADMINAUTH_NO_TOKEN,    /* 401: a credential is required and none was sent */
    ADMINAUTH_BAD_TOKEN,   /* 401: the credential sent is wrong */
    ADMINAUTH_CROSS_ORIGIN /* 403: a state change from another origin */
};

/* The policy, from the configuration. Strings are borrowed for the policy's use. */
struct adminauth_policy {
    bool loopback;            /* admin_listen is a loopback address */
    const char *token;        /* admin_token, "" when not set */
    bool public_views;        /* admin_public */
    const char *const *names; /* admin_names: host names (no port) the admin is reached by */
    size_t n_names;
};

/* What of one request the checks read: each value borrowed, <len> 0 (and ptr NULL) when the
 * field is absent. */
struct adminauth_req {
    bool read_only;      /* GET or HEAD */
    bool host_is_object; /* the Host names the object (PURGE without ?identifier=) */
    const char *host;
    size_t host_len;
    const char *authorization;
    size_t authorization_len;
    const char *cookie; /* the Cookie field's value (a browser sends one) */
    size_t cookie_len;
    const char *origin;
    size_t origin_len;
    const char *fetch_site; /* Sec-Fetch-Site */
    size_t fetch_site_len;
};

enum adminauth_verdict adminauth_check(const struct adminauth_policy *p,
                                       const struct adminauth_req *r);

/* Check 1 alone: whether <host>[0..len) names the admin listener (no Host, an IP literal,
 * localhost, an admin_names entry). A PURGE whose Host does not picks its identifier from that
 * Host only (never from its User-Agent: a rebound name must not reach a service's objects). */
bool adminauth_host_is_admin(const struct adminauth_policy *p, const char *host, size_t len);

/* Status code (401/403) and a one-line reason for a verdict other than ADMINAUTH_OK. */
int adminauth_status(enum adminauth_verdict v);
const char *adminauth_reason(enum adminauth_verdict v);

/* Compares <a>[0..alen) with <b>[0..blen) in time that depends only on <blen> (the secret's
 * length), never on where they differ. */
bool adminauth_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
