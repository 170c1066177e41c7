/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * domains: a uklans/cache-domains checkout -> host matcher -> cache identifier (docs/interfaces.md,
 * "The cache-domains lists", "Cache identifier and key"), and the overrides of `cacheparty dns`.
 *
 * A struct domains is built once by domains_load() and immutable afterwards: every lookup is
 * read-only, allocation-free and O(labels of the host). It owns all of its strings; names it
 * returns stay valid until domains_free(). A reload loads a new one and swaps the pointer.
 * Pure module: files are read only inside domains_load(); no ev.h.
 *
 * Matching rules (the lists' syntax is documented at domains_load):
 * - "name" matches that host only; "*.name" matches its subdomains only, on a label boundary
 *   ("*.steamcontent.com" matches "a.steamcontent.com", never "steamcontent.com",
 *   "evilsteamcontent.com" or "steamcontent.com.evil.net").
 * - The most specific entry wins: an exact name beats any wildcard, a longer wildcard beats a
 *   shorter one. The same entry listed by two services belongs to the first service in
 *   cache_domains.json (later copies are ignored and not counted).
 * - Hosts are compared byte for byte: the caller passes the authority's host lowercased, with one
 *   trailing dot removed and without a port (h1_authority_parse). "A.Steamcontent.com" or
 *   "a.steamcontent.com." never match. Hosts with empty labels never match.
 */
#ifndef CACHEPARTY_DOMAINS_H
#define CACHEPARTY_DOMAINS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct domains;

#define DOMAINS_STEAM_UA "Valve/Steam HTTP Client 1.0"
#define DOMAINS_STEAM_ID "steam"
#define DOMAINS_NAME_MAX 253 /* longest host name, without the trailing dot */

/*
 * Reads <dir>/cache_domains.json ({"cache_domains":[{"name":..., "domain_files":[...]}, ...]};
 * other members are ignored) and each listed file, relative to <dir>. <dir> is borrowed.
 * List files: one host per line; '#' starts a comment (whole line or after a name); blank lines
 * are skipped; surrounding whitespace is trimmed; names are lowercased and one trailing dot is
 * removed. Labels are 1-63 characters of [a-z0-9_-], names at most 253. '*' is allowed only as a
 * leading "*." label, and never over a single label ("*.com" is refused: it would admit a whole
 * top-level domain). Service names are 1-64 characters of [A-Za-z0-9._-] and unique; domain file
 * paths must be relative and must not contain "..". Sizes are bounded (cache_domains.json 1 MiB,
 * each list 16 MiB, JSON nesting 32 levels). A list line that is not a valid name is skipped,
 * never fatal (one bad line in a community list must not stop the cache): it is logged as a
 * warning "FILE:LINE: invalid name "...": reason: line skipped" (the first 20 of a load one by
 * one) and counted (domains_skipped_lines).
 * Returns a new struct domains (free with domains_free) or NULL with <err> set to
 * "FILE:LINE: message" (LINE 0 when the file cannot be opened or read; a JSON syntax error, as
 * libjansson words it, ends with " (column C)").
 */
struct domains *domains_load(const char *dir, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* How many list lines the load skipped as malformed; *<first> (if not NULL) receives the first
 * one's "FILE:LINE: message" ("" if none), borrowed from <d>. */
size_t domains_skipped_lines(const struct domains *d, const char **first);

/* Frees *d and sets it to NULL. NULL-safe. Invalidates every name returned from it. */
void domains_free(struct domains **d);

/*
 * The name of the service whose lists match <host> (see the rules above), or NULL. <host> is
 * borrowed, NUL-terminated. <d> may be NULL (no lists configured: nothing matches). The result is
 * owned by <d>. No allocation.
 */
const char *domains_match(const struct domains *d, const char *host);

/*
 * Whether <name> is, ignoring case, the name of a service of <d> or DOMAINS_STEAM_ID: the
 * identifier an unlisted host of that name would share with the service. <d> may be NULL.
 */
bool domains_is_service(const struct domains *d, const char *name);

/*
 * The identifier of an unlisted host when <allow_unlisted> (admit.h, rule 5): <ident> itself (its
 * authority as sent, see h1_authority), or "<ident>." written to <own> when <ident> is a
 * service's name (an unlisted host named "steam" must not share the steam service's cache; no
 * host's identifier ends with a dot). <own> has room for strlen(ident) + 2. NULL when
 * !<allow_unlisted>. The proxy decides admission through admit_host() (admit.h).
 */
const char *domains_cache_identifier(const struct domains *d, const char *ident,
                                     bool allow_unlisted, char *own, size_t own_len);

/*
 * For `cacheparty -t`: the number of services in cache_domains.json and of distinct entries
 * loaded ("x" and "*.x" count as two; duplicates once). <d> may be NULL (both 0). Either output
 * pointer may be NULL.
 */
void domains_counts(const struct domains *d, size_t *services, size_t *names);

/* `cacheparty dns --format`; the command line's default is DOMAINS_DNS_DNSMASQ. */
enum domains_dns_format {
    DOMAINS_DNS_DNSMASQ = 0, /* address=/name/IP (covers subdomains too) */
    DOMAINS_DNS_UNBOUND,     /* server: local-zone redirect for wildcards, local-data */
    DOMAINS_DNS_HOSTS,       /* "IP name"; wildcards listed in comments, not expressible */
    DOMAINS_DNS_RPZ,         /* a BIND response-policy zone file, names relative to the zone */
};

/* "dnsmasq" | "unbound" | "hosts" | "rpz" (exact, lowercase) -> *out. Returns 0 or -EINVAL. */
int domains_dns_format_parse(const char *s, enum domains_dns_format *out)
    __attribute__((warn_unused_result));

/* The name of <fmt> as accepted by domains_dns_format_parse. */
const char *domains_dns_format_name(enum domains_dns_format fmt);

/*
 * Writes DNS overrides pointing every name of <d> at each of the <n_ip> addresses <ip> (IPv4 ->
 * A, IPv6 -> AAAA records; both families may be mixed, as lancache-dns's LANCACHE_IP; a repeated
 * address counts once; at most 16) to <out>, in the syntax of <fmt>. A redirected name never
 * lets a record type through that it has no address for (an AAAA when every --ip is IPv4): the
 * resolver answers it with no data itself, except in the hosts format, which cannot say so (its
 * header comment warns). Services come in cache_domains.json order, names in list file
 * order, each name once; the output is a function of the lists and arguments only.
 * Per format (what each resolver can express; each entry writes only what broader lines do not
 * already say):
 * - dnsmasq (>= 2.86): "address=/x/IP" + "local=/x/" answer x and every name below it (local=:
 *   the other record types with no data, never forwarded); "address=/\*.x/" only the names
 *   below x; "server=/\*.x/#" sends the names below an exact name x to the standard servers.
 *   The longest match decides, "*.x" beating "x" below x: every rule of the lists can be said.
 * - unbound: "local-zone: \"x.\" redirect" + its local-data for a wildcard whose base x is
 *   listed too (with the same target), "local-data: \"x. A IP\"" (a transparent zone: x only)
 *   per other exact name; a wildcard whose base is not listed that way, or an entry with another
 *   target inside a redirect zone, cannot be said: a comment line, not redirected.
 * - hosts: "IP name" per exact name; each wildcard gets a "# skipped wildcard" comment line.
 * - rpz: $TTL, SOA, NS, then "name A IP" and "*.x A IP" relative to the zone's origin (load it
 *   as zone "rpz.cacheparty", or any name), and below every name the zone holds under a
 *   wildcard (where a DNS wildcard stops) the wildcard's record written out: exactly the lists.
 * <d>, <ip> and <out> are borrowed. Returns 0; -EINVAL if an <ip> is not a numeric IPv4/IPv6
 * address or is unspecified (0.0.0.0, ::), or there are none or more than 16; -ENOENT if <d> is
 * NULL (no lists configured);
 * -EIO if writing to <out> failed. Nothing is written on -EINVAL or -ENOENT.
 */
int domains_dns_export(const struct domains *d, const char *const *ip, size_t n_ip,
                       enum domains_dns_format fmt, FILE *out) __attribute__((warn_unused_result));

/* A service's own choice in an export (lancache-dns's <SERVICE>CACHE_IP and DISABLE_<SERVICE>):
 * its names point at its own addresses <ip>[0..n_ip) instead of the export's, or (skip) are
 * left out: never redirected, also where a broader entry of another service would cover them. */
struct domains_dns_service {
    const char *name; /* a service of the lists, any case */
    bool skip;
    const char *ip[16];
    size_t n_ip;
};

struct domains_dns_opts {
    const char *const *ip; /* every other service's addresses */
    size_t n_ip;
    const struct domains_dns_service *services; /* each service at most once */
    size_t n_services;
    enum domains_dns_format fmt;
};

/*
 * domains_dns_export with per-service choices. Every format redirects exactly the names of the
 * lists, each to its service's addresses, as far as the format can say it (what it cannot is a
 * comment line, and not redirected): dnsmasq (>= 2.86) and rpz can say every rule; unbound's
 * local zones cannot say "the names below x, without x" (a wildcard whose base is not listed
 * with the same addresses), nor a different target inside such a zone; hosts has no wildcards.
 * Returns domains_dns_export's codes, and -ESRCH when a service named in <o> is not in <d>.
 */
int domains_dns_export_opts(const struct domains *d, const struct domains_dns_opts *o, FILE *out)
    __attribute__((warn_unused_result));

#endif
