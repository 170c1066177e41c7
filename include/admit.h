/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * admit: which hosts the proxy serves, and under which cache identifier. The one place that
 * decides it, for the four ways a host name reaches the proxy (enum admit_kind). Pure: no I/O,
 * no ev.h, no allocation; it reads the configuration and the cache-domains lists it is given.
 *
 * The rules, in order (the first that applies decides):
 * 1. An IP-literal host ("10.0.0.1", "[::1]") is refused unless allow_private (ADMIT_R_IP_LITERAL):
 *    an address typed by a client could reach any machine of the LAN.
 * 2. With steam_user_agent = any, a User-Agent containing DOMAINS_STEAM_UA is allowed as
 *    "steam", whatever the host (lancache's rule; poisonable: see admit_is_steam_host).
 * 3. A host of the cache-domains lists is allowed; its identifier is the service's name.
 * 4. With steam_user_agent = yes (or any), a User-Agent containing DOMAINS_STEAM_UA and a host
 *    of Steam's content hosts (admit_is_steam_host) is allowed as "steam".
 * 5. With allow_unlisted, any other host is allowed; its identifier is its authority as sent
 *    (lowercased, with ":port" if one was given), or "<authority>." when that is the name of a
 *    service, so that an unlisted host named like a service never shares that service's cache.
 * 6. Else the host is refused (ADMIT_R_UNLISTED).
 *
 * The four kinds, and what each caller does with a refusal:
 * - ADMIT_REQUEST: a client's HTTP request (conn). Refused: 403.
 * - ADMIT_REDIRECT: the target of a redirect an origin answered a fill with (fetch), checked
 *   with the User-Agent of the request that started the fill. Refused: the redirect is not
 *   followed and the client gets it as it is, uncached. The identifier is not used: the object
 *   keeps the identifier of the request that named it.
 * - ADMIT_TLS: the server name of a TLS ClientHello (tlsrelay). A ClientHello has no
 *   User-Agent, so rules 2 and 4 never apply (a Steam host on :443 must be listed, or
 *   allow_unlisted). The identifier is not used (nothing is cached). Refused: the connection is
 *   closed, outcome ip_literal or unlisted.
 * - ADMIT_PURGE: PURGE by Host on the admin listener (admin). The identifier is the one a GET
 *   with that Host and User-Agent would have, so a purge names exactly the object such a request
 *   reads. Refused: 404 (no object can have an identifier from that host), with a hint to give
 *   ?identifier=.
 *
 * Decisions where the four copies this replaces differed:
 * - PURGE now applies rule 1 too. Before, a PURGE with an IP-literal Host and allow_private = no
 *   computed an identifier from the address although no request could be served (or cached)
 *   under it; now it answers 404 like any host without an identifier (?identifier= still
 *   reaches objects stored while allow_private was on).
 * - PURGE of a refused host stays 404 where a request gets 403: the admin listener forbids
 *   nothing, it reports that the host names no cached object. The status belongs to the
 *   caller; the decision (allow, reason) is the same for every kind.
 * - Redirects checked the lists and the Steam rule, then allow_unlisted, without the
 *   service-name rule of 5. That rule changes only the identifier, never the decision, so the
 *   answer is unchanged; they now go through the same function.
 * - TLS checked the lists only, without the Steam rules. That is intended (no User-Agent) and kept:
 * for ADMIT_TLS any User-Agent given is ignored.
 */
#ifndef CACHEPARTY_ADMIT_H
#define CACHEPARTY_ADMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "http1.h"

struct config;
struct domains;

enum admit_kind {
    ADMIT_REQUEST,  /* a client's HTTP request */
    ADMIT_REDIRECT, /* a redirect target of a fill */
    ADMIT_TLS,      /* a TLS server name */
    ADMIT_PURGE,    /* PURGE by Host */
};

#define ADMIT_REASONS(X)                                                                           \
    X(ADMIT_R_OK, "ok")                                                                            \
    X(ADMIT_R_IP_LITERAL, "ip_literal") /* rule 1 */                                               \
    X(ADMIT_R_UNLISTED, "unlisted")     /* rule 6 */

enum admit_reason {
#define ADMIT_RX(r, name) r,
    ADMIT_REASONS(ADMIT_RX)
#undef ADMIT_RX
};

struct admit_result {
    bool allow;
    enum admit_reason reason;
    /* allow: the cache identifier, borrowed from the domains (live until they are freed), a
     * static string, the <auth> given, or <own> below; NULL when refused. */
    const char *ident;
    char own[sizeof(((struct h1_authority *)0)->ident) + 1]; /* "<authority>." (rule 5) */
};

/*
 * Decides <auth> (a parsed authority, borrowed) of <kind> under <cfg> (allow_private,
 * allow_unlisted and steam_user_agent are read) and the lists <d> (NULL: none configured). The
 * User-Agent is <user_agent>[0..ua_len) (NULL when the request has none; ignored for ADMIT_TLS).
 * Fills <out>; out->ident may point into <out> or <auth>: keep both in place while it is used.
 */
void admit_host(const struct config *cfg, const struct domains *d, const struct h1_authority *auth,
                const char *user_agent, size_t ua_len, enum admit_kind kind,
                struct admit_result *out);

/*
 * Whether <host> (lowercase, no port, no trailing dot) is one of the names Steam fetches content
 * from: the built-in list (admit_steam_builtin) or cfg->steam_hosts; "*.x" covers the
 * subdomains of x, never x. The cache key has no host: a name here lets any client that sends
 * the Steam User-Agent store bytes under Steam's paths, so the built-in list holds only names
 * that carry Steam content alone and wildcards under Valve's own domains (admit.c says where
 * each was found).
 */
bool admit_is_steam_host(const struct config *cfg, const char *host);

/* The built-in list of Steam content hosts: *names (static) and the count. */
size_t admit_steam_builtin(const char *const **names);

/* The short name of <reason> ("ok", "ip_literal", "unlisted"). */
const char *admit_reason_name(enum admit_reason reason);

#endif
