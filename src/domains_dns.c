/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * domains_dns: `cacheparty dns`, the loaded lists written as DNS overrides in four resolvers'
 * syntaxes (see domains_dns_export in domains.h). Reads struct domains (domains_int.h), never
 * changes it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "domains.h"
#include "domains_int.h"
#include "util.h"

static const char *const dns_format_names[] = {
    [DOMAINS_DNS_DNSMASQ] = "dnsmasq",
    [DOMAINS_DNS_UNBOUND] = "unbound",
    [DOMAINS_DNS_HOSTS] = "hosts",
    [DOMAINS_DNS_RPZ] = "rpz",
};

int domains_dns_format_parse(const char *s, enum domains_dns_format *out)
{
    for (size_t i = 0; s != NULL && i < ARRAY_SIZE(dns_format_names); i++) {
        if (strcmp(s, dns_format_names[i]) == 0) {
            *out = (enum domains_dns_format)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *domains_dns_format_name(enum domains_dns_format fmt)
{
    ASSERT((size_t)fmt < ARRAY_SIZE(dns_format_names));
    return dns_format_names[fmt];
}

/*
 * True if a strict ancestor of <name> (a suffix starting after one of its dots) is listed: as a
 * wildcard base, or also as an exact name unless <wild_only>.
 */
static bool ancestor_listed(const struct domains *d, const char *name, size_t len, bool wild_only)
{
    for (size_t i = 0; i < len; i++) {
        const char *s = name + i + 1;
        size_t slen = len - i - 1;
        uint64_t h;

        if (name[i] != '.')
            continue;
        h = domains_name_hash(s, slen);
        if (domains_entry_find(d, s, slen, h, true) != NULL)
            return true;
        if (!wild_only && domains_entry_find(d, s, slen, h, false) != NULL)
            return true;
    }
    return false;
}

#define DNS_IPS_MAX 16 /* addresses one export may point the names at */

/* The addresses of an export, canonical, each with its record type. */
struct dns_ips {
    char canon[DNS_IPS_MAX][INET6_ADDRSTRLEN];
    const char *rr[DNS_IPS_MAX];
    size_t n;
};

/* The lines for entry <e> in <fmt> (one per address), or nothing when another line already
 * covers it. */
static void dns_entry(const struct domains *d, const struct dom_entry *e, const struct dns_ips *ips,
                      enum domains_dns_format fmt, FILE *out)
{
    const char *name = d->pool + e->off;
    bool twin = !e->wild && domains_entry_find(d, name, e->len, e->hash, true) != NULL;

    switch (fmt) {
    case DOMAINS_DNS_DNSMASQ:
        /* address=/x/ answers x and all below it: one line per topmost listed name. local=/x/
         * makes dnsmasq answer the other record types of x (AAAA without an IPv6 address)
         * itself, with no data, instead of forwarding them: a dual-stack client would get the
         * real CDN's IPv6 address and bypass the cache (dnsmasq >= 2.86 forwards them). */
        if (twin || ancestor_listed(d, name, e->len, false))
            return;
        for (size_t i = 0; i < ips->n; i++)
            fprintf(out, "address=/%s/%s\n", name, ips->canon[i]);
        fprintf(out, "local=/%s/\n", name);
        return;
    case DOMAINS_DNS_UNBOUND:
        /* A redirect zone answers its apex and all below; unbound refuses local-data below a
         * redirect zone's apex, so names under a listed wildcard are left to the zone. Types
         * without local-data get no data (redirect zones, and the transparent zone unbound makes
         * for an exact name's local-data), never a forwarded answer. */
        if (twin || ancestor_listed(d, name, e->len, true))
            return;
        if (e->wild)
            fprintf(out, "    local-zone: \"%s.\" redirect\n", name);
        for (size_t i = 0; i < ips->n; i++)
            fprintf(out, "    local-data: \"%s. %s %s\"\n", name, ips->rr[i], ips->canon[i]);
        return;
    case DOMAINS_DNS_HOSTS:
        if (e->wild) {
            fprintf(out, "# skipped wildcard *.%s (a hosts file cannot express it)\n", name);
            return;
        }
        for (size_t i = 0; i < ips->n; i++)
            fprintf(out, "%s %s\n", ips->canon[i], name);
        return;
    case DOMAINS_DNS_RPZ:
        for (size_t i = 0; i < ips->n; i++)
            fprintf(out, "%s%s %s %s\n", e->wild ? "*." : "", name, ips->rr[i], ips->canon[i]);
        return;
    }
    WRONG("bad dns format");
}

int domains_dns_export(const struct domains *d, const char *const *ip, size_t n_ip,
                       enum domains_dns_format fmt, FILE *out)
{
    static const unsigned char zero[16];
    struct dns_ips ips;
    const char *comment;
    size_t svc = SIZE_MAX;
    bool v6 = false;

    if (ip == NULL || n_ip == 0 || n_ip > DNS_IPS_MAX)
        return -EINVAL;
    ips.n = 0;
    for (size_t i = 0; i < n_ip; i++) {
        unsigned char addr[16];
        int af;
        if (ip[i] == NULL)
            return -EINVAL;
        af = inet_pton(AF_INET, ip[i], addr) == 1 ? AF_INET : AF_INET6;
        if (af == AF_INET6 && inet_pton(AF_INET6, ip[i], addr) != 1)
            return -EINVAL;
        if (memcmp(addr, zero, af == AF_INET ? 4 : 16) == 0)
            return -EINVAL;
        if (inet_ntop(af, addr, ips.canon[ips.n], sizeof(ips.canon[0])) == NULL)
            return -EINVAL;
        ips.rr[ips.n] = af == AF_INET ? "A" : "AAAA";
        v6 = v6 || af == AF_INET6;
        bool dup = false;
        for (size_t j = 0; j < ips.n; j++)
            dup = dup || strcmp(ips.canon[j], ips.canon[ips.n]) == 0;
        if (!dup)
            ips.n++;
    }
    if ((size_t)fmt >= ARRAY_SIZE(dns_format_names))
        return -EINVAL;
    if (d == NULL)
        return -ENOENT;
    CHECK_OBJ(d, DOMAINS_MAGIC);
    comment = fmt == DOMAINS_DNS_RPZ ? ";" : "#";

    fprintf(out, "%s generated by cacheparty dns", comment);
    for (size_t i = 0; i < ips.n; i++)
        fprintf(out, " --ip %s", ips.canon[i]);
    fprintf(out, " --format %s\n", dns_format_names[fmt]);
    if (fmt == DOMAINS_DNS_HOSTS && !v6)
        fprintf(out, "# a hosts file cannot stop the AAAA queries of these names from being "
                     "answered elsewhere:\n# a dual-stack client may bypass the cache. Prefer "
                     "the dnsmasq format, or give an IPv6 --ip too.\n");
    if (fmt == DOMAINS_DNS_UNBOUND)
        fprintf(out, "server:\n");
    if (fmt == DOMAINS_DNS_RPZ) {
        fprintf(out, "; named.conf: response-policy { zone \"rpz.cacheparty\"; }; and\n"
                     "; zone \"rpz.cacheparty\" { type primary; file \"db.rpz.cacheparty\"; };\n"
                     "$TTL 60\n"
                     "@ IN SOA localhost. root.localhost. 1 3600 600 86400 60\n"
                     "@ IN NS localhost.\n");
    }
    for (size_t i = 0; i < d->n_entries; i++) {
        const struct dom_entry *e = &d->entries[i];

        if (e->svc != svc) {
            svc = e->svc;
            fprintf(out, "%s%s %s\n", fmt == DOMAINS_DNS_UNBOUND ? "    " : "", comment,
                    d->services[svc]);
        }
        dns_entry(d, e, &ips, fmt, out);
    }
    if (fflush(out) != 0 || ferror(out))
        return -EIO;
    return 0;
}
