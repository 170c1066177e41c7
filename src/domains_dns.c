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
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

#define DNS_IPS_MAX 16 /* addresses one export may point the names at */

struct dns_ips;
static int export_all(const struct domains *d, const struct domains_dns_opts *o,
                      const struct dns_ips *def, const struct dns_ips *own,
                      const struct dns_ips **tgt, bool v6, FILE *out);

/* The addresses of a target, canonical, each with its record type. */
struct dns_ips {
    char canon[DNS_IPS_MAX][INET6_ADDRSTRLEN];
    const char *rr[DNS_IPS_MAX];
    size_t n;
};

/* One export: where each service's names go (NULL: left out, never redirected). */
struct dns_ctx {
    const struct domains *d;
    const struct dns_ips **tgt; /* per service */
    enum domains_dns_format fmt;
    FILE *out;
};

/* The entry of the nearest strict ancestor wildcard of <name> ("*.m" with <name> below m), or
 * NULL: the entry that decides <name>'s subdomains and <name> itself when neither is listed. */
static const struct dom_entry *nearest_wild_above(const struct domains *d, const char *name,
                                                  size_t len)
{
    for (size_t i = 0; i < len; i++) { /* longest suffix first: the nearest ancestor */
        if (name[i] != '.')
            continue;
        const char *s = name + i + 1;
        size_t slen = len - i - 1;
        const struct dom_entry *e =
            domains_entry_find(d, s, slen, domains_name_hash(s, slen), true);
        if (e != NULL)
            return e;
    }
    return NULL;
}

static const struct dns_ips *tgt_of(const struct dns_ctx *x, const struct dom_entry *e)
{
    return e != NULL ? x->tgt[e->svc] : NULL;
}

/* dnsmasq lines: <name> ("x" covers x and below, "*.x" the names below only) -> <t>, or "use the
 * standard servers" when <t> is NULL. */
static void dm_line(const struct dns_ctx *x, bool wild, const char *name, const struct dns_ips *t)
{
    const char *w = wild ? "*." : "";
    if (t == NULL) {
        fprintf(x->out, "server=/%s%s/#\n", w, name);
        return;
    }
    for (size_t i = 0; i < t->n; i++)
        fprintf(x->out, "address=/%s%s/%s\n", w, name, t->canon[i]);
    fprintf(x->out, "local=/%s%s/\n", w, name);
}

/*
 * dnsmasq: "address=/x/" answers x and every name below it; the "*.x" form (dnsmasq >= 2.86)
 * only the names below; the longest match decides, and "*.x" beats "x" below x. "server=/x/#"
 * sends x (and below) to the standard servers: an exception inside a broader rule. local=/x/
 * makes dnsmasq answer the other record types itself, with no data, instead of forwarding them
 * (an AAAA without an IPv6 --ip: a dual-stack client would get the real CDN's IPv6 address).
 * Each entry writes only what its broader neighbours do not already say.
 */
static void dns_dnsmasq(const struct dns_ctx *x, const struct dom_entry *e, const char *name)
{
    const struct domains *d = x->d;
    const struct dns_ips *t = tgt_of(x, e);
    const struct dns_ips *up = tgt_of(x, nearest_wild_above(d, name, e->len));
    if (!e->wild) {
        const struct dom_entry *tw = domains_entry_find(d, name, e->len, e->hash, true);
        const struct dns_ips *below = tw != NULL ? tgt_of(x, tw) : up;
        if (t == below) { /* one "/x/" line says it for x and below, unless a broader one does */
            if (t != up)
                dm_line(x, false, name, t);
            return;
        }
        if (t != up) /* x itself */
            dm_line(x, false, name, t);
        if (tw == NULL && (t != NULL || up != NULL)) /* below x: what x's line would hide */
            dm_line(x, true, name, up);
        return; /* (a listed "*.x" of another target writes its own line) */
    }
    const struct dom_entry *ex = domains_entry_find(d, name, e->len, e->hash, false);
    if (ex != NULL) {
        if (tgt_of(x, ex) != t) /* x's "/x/" line (if any) would cover below x wrongly */
            dm_line(x, true, name, t);
        return;
    }
    if (t != up)
        dm_line(x, true, name, t);
}

/* Whether <s>[0..len) is a zone of unbound's output: a wildcard "*.z" whose base z is listed
 * too, with the same target (or both left out). Returns the wildcard's entry or NULL. */
static const struct dom_entry *ub_zone_at(const struct dns_ctx *x, const char *s, size_t len)
{
    uint64_t h = domains_name_hash(s, len);
    const struct dom_entry *w = domains_entry_find(x->d, s, len, h, true);
    const struct dom_entry *ex = domains_entry_find(x->d, s, len, h, false);
    return w != NULL && ex != NULL && tgt_of(x, w) == tgt_of(x, ex) ? w : NULL;
}

/* The innermost zone strictly above <name> (an ancestor), or NULL. Zones nest in unbound: the
 * most specific local-zone decides. */
static const struct dom_entry *ub_zone_above(const struct dns_ctx *x, const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++) { /* the longest suffix first: the innermost */
        if (name[i] != '.')
            continue;
        const struct dom_entry *z = ub_zone_at(x, name + i + 1, len - i - 1);
        if (z != NULL)
            return z;
    }
    return NULL;
}

static void ub_data(const struct dns_ctx *x, const char *name, const struct dns_ips *t)
{
    for (size_t i = 0; i < t->n; i++)
        fprintf(x->out, "    local-data: \"%s. %s %s\"\n", name, t->rr[i], t->canon[i]);
}

/*
 * unbound: a "redirect" local-zone answers its apex and every name below it with the apex's
 * data; a "transparent" one inside it sends its apex and the names below back to normal
 * resolution; local-data of an exact name outside any zone (a transparent zone of its own)
 * answers that name only, and its other record types with no data. Zones nest, the most
 * specific deciding. What cannot be said: the names below x without x (a wildcard whose base
 * is not listed with the same target), and an entry inside a zone whose target differs that is
 * not itself a zone (an exact name there would take the names below it along). Those are a
 * comment line (use the rpz output, which unbound loads as it is).
 */
static void dns_unbound(const struct dns_ctx *x, const struct dom_entry *e, const char *name)
{
    const struct domains *d = x->d;
    const struct dns_ips *t = tgt_of(x, e);
    const struct dom_entry *above = ub_zone_above(x, name, e->len);
    const struct dns_ips *ta = tgt_of(x, above); /* NULL: normal resolution there */
    if (ub_zone_at(x, name, e->len) != NULL) {
        if (!e->wild || t == ta)
            return; /* written once, by the wildcard; or the zone above says the same */
        if (t != NULL) {
            fprintf(x->out, "    local-zone: \"%s.\" redirect\n", name);
            ub_data(x, name, t);
        } else {
            fprintf(x->out, "    local-zone: \"%s.\" transparent\n", name);
        }
        return;
    }
    if (above != NULL) {
        if (t != ta)
            fprintf(x->out, "    # %s%s: not expressible inside the zone %s (use the rpz format)\n",
                    e->wild ? "*." : "", name, d->pool + above->off);
        return;
    }
    if (t == NULL)
        return;
    if (e->wild) {
        fprintf(x->out,
                "    # *.%s: unbound cannot redirect the names below %s without %s itself "
                "(use the rpz format)\n",
                name, name, name);
        return;
    }
    ub_data(x, name, t);
}

/* The lines for entry <e>, or nothing when another line already says it. */
static void dns_entry(const struct dns_ctx *x, const struct dom_entry *e)
{
    const char *name = x->d->pool + e->off;
    const struct dns_ips *t = tgt_of(x, e);

    switch (x->fmt) {
    case DOMAINS_DNS_DNSMASQ:
        dns_dnsmasq(x, e, name);
        return;
    case DOMAINS_DNS_UNBOUND:
        dns_unbound(x, e, name);
        return;
    case DOMAINS_DNS_HOSTS:
        if (t == NULL)
            return;
        if (e->wild) {
            fprintf(x->out, "# skipped wildcard *.%s (a hosts file cannot express it)\n", name);
            return;
        }
        for (size_t i = 0; i < t->n; i++)
            fprintf(x->out, "%s %s\n", t->canon[i], name);
        return;
    case DOMAINS_DNS_RPZ:
        /* RPZ's own precedence is the lists' (an exact name beats a wildcard, a longer wildcard
         * a shorter one): every redirected entry as it is; a left-out one that a broader entry
         * would redirect passes through. */
        if (t == NULL) {
            if (tgt_of(x, nearest_wild_above(x->d, name, e->len)) != NULL)
                fprintf(x->out, "%s%s CNAME rpz-passthru.\n", e->wild ? "*." : "", name);
            return;
        }
        for (size_t i = 0; i < t->n; i++)
            fprintf(x->out, "%s%s %s %s\n", e->wild ? "*." : "", name, t->rr[i], t->canon[i]);
        return;
    }
    WRONG("bad dns format");
}

static void rpz_rule(const struct dns_ctx *x, bool wild, const char *name, size_t len,
                     const struct dns_ips *t)
{
    for (size_t i = 0; i < t->n; i++)
        fprintf(x->out, "%s%.*s %s %s\n", wild ? "*." : "", (int)len, name, t->rr[i], t->canon[i]);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * RPZ is a DNS zone: a wildcard "*.d" answers only the names below d that are not in the zone
 * and not below a name that is. Every listed name below a wildcard, and every name between it
 * and the wildcard's base (an empty non-terminal), would stop "*.d" there. So each such name N
 * that is not listed itself gets the record "*.d" would have given it, and "*.N" (unless
 * listed) the record for the names below it: what the lists say, written out.
 */
static void rpz_fill_wildcard_gaps(const struct dns_ctx *x)
{
    const struct domains *d = x->d;
    size_t n = 0, cap = 0;
    const char **nodes = NULL;
    for (size_t i = 0; i < d->n_entries; i++) {
        const struct dom_entry *e = &d->entries[i];
        const char *name = d->pool + e->off;
        for (size_t k = 0; k < e->len; k = k + 1) { /* the name and each ancestor */
            if (k > 0 && name[k - 1] != '.')
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                nodes = xrealloc(nodes, cap * sizeof(*nodes));
            }
            nodes[n++] = name + k;
        }
    }
    qsort(nodes, n, sizeof(*nodes), cmp_str);
    bool header = false;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(nodes[i], nodes[i - 1]) == 0)
            continue;
        const char *node = nodes[i];
        size_t len = strlen(node);
        const struct dom_entry *w = nearest_wild_above(d, node, len);
        const struct dns_ips *t = tgt_of(x, w);
        if (t == NULL)
            continue; /* no wildcard above it (or one left out): nothing to fill */
        uint64_t h = domains_name_hash(node, len);
        bool exact = domains_entry_find(d, node, len, h, false) != NULL;
        bool wild = domains_entry_find(d, node, len, h, true) != NULL;
        if (exact && wild)
            continue;
        if (!header) {
            fprintf(x->out, "; names below the wildcards above that the zone holds (a wildcard "
                            "stops at them): as the wildcard says\n");
            header = true;
        }
        if (!exact)
            rpz_rule(x, false, node, len, t);
        if (!wild)
            rpz_rule(x, true, node, len, t);
    }
    free(nodes);
}

/* Parses <n_ip> addresses into <ips> (canonical, each once). Returns 0 or -EINVAL. */
static int parse_ips(const char *const *ip, size_t n_ip, struct dns_ips *ips, bool *v6)
{
    static const unsigned char zero[16];
    if (ip == NULL || n_ip == 0 || n_ip > DNS_IPS_MAX)
        return -EINVAL;
    ips->n = 0;
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
        if (inet_ntop(af, addr, ips->canon[ips->n], sizeof(ips->canon[0])) == NULL)
            return -EINVAL;
        ips->rr[ips->n] = af == AF_INET ? "A" : "AAAA";
        *v6 = *v6 || af == AF_INET6;
        bool dup = false;
        for (size_t j = 0; j < ips->n; j++)
            dup = dup || strcmp(ips->canon[j], ips->canon[ips->n]) == 0;
        if (!dup)
            ips->n++;
    }
    return 0;
}

int domains_dns_export(const struct domains *d, const char *const *ip, size_t n_ip,
                       enum domains_dns_format fmt, FILE *out)
{
    struct domains_dns_opts o = {ip, n_ip, NULL, 0, fmt};
    return domains_dns_export_opts(d, &o, out);
}

int domains_dns_export_opts(const struct domains *d, const struct domains_dns_opts *o, FILE *out)
{
    struct dns_ips ips;
    bool v6 = false;
    int rc = parse_ips(o->ip, o->n_ip, &ips, &v6);
    if (rc < 0)
        return rc;
    if ((size_t)o->fmt >= ARRAY_SIZE(dns_format_names))
        return -EINVAL;
    struct dns_ips *own = NULL;
    if (o->n_services > 0) {
        own = xcalloc(o->n_services, sizeof(*own));
        for (size_t i = 0; i < o->n_services; i++) {
            if (!o->services[i].skip &&
                (rc = parse_ips(o->services[i].ip, o->services[i].n_ip, &own[i], &v6)) < 0) {
                free(own);
                return rc;
            }
        }
    }
    if (d == NULL) {
        free(own);
        return -ENOENT;
    }
    CHECK_OBJ(d, DOMAINS_MAGIC);
    const struct dns_ips **tgt = xcalloc(d->n_services > 0 ? d->n_services : 1, sizeof(*tgt));
    for (size_t s = 0; s < d->n_services; s++)
        tgt[s] = &ips;
    for (size_t i = 0; i < o->n_services; i++) {
        size_t s;
        for (s = 0; s < d->n_services; s++)
            if (strcasecmp(d->services[s], o->services[i].name) == 0)
                break;
        if (s == d->n_services) {
            free(tgt);
            free(own);
            return -ESRCH;
        }
        tgt[s] = o->services[i].skip ? NULL : &own[i];
    }
    rc = export_all(d, o, &ips, own, tgt, v6, out);
    free(tgt);
    free(own);
    return rc;
}

static int export_all(const struct domains *d, const struct domains_dns_opts *o,
                      const struct dns_ips *def, const struct dns_ips *own,
                      const struct dns_ips **tgt, bool v6, FILE *out)
{
    enum domains_dns_format fmt = o->fmt;
    const char *comment = fmt == DOMAINS_DNS_RPZ ? ";" : "#";
    struct dns_ctx x = {d, tgt, fmt, out};
    size_t svc = SIZE_MAX;

    fprintf(out, "%s generated by cacheparty dns", comment);
    for (size_t i = 0; i < def->n; i++)
        fprintf(out, " --ip %s", def->canon[i]);
    for (size_t i = 0; i < o->n_services; i++) {
        if (o->services[i].skip)
            fprintf(out, " --skip %s", o->services[i].name);
        for (size_t k = 0; !o->services[i].skip && k < own[i].n; k++)
            fprintf(out, " --service-ip %s=%s", o->services[i].name, own[i].canon[k]);
    }
    fprintf(out, " --format %s\n", dns_format_names[fmt]);
    if (fmt == DOMAINS_DNS_HOSTS && !v6)
        fprintf(out, "# a hosts file cannot stop the AAAA queries of these names from being "
                     "answered elsewhere:\n# a dual-stack client may bypass the cache. Prefer "
                     "the dnsmasq format, or give an IPv6 --ip too.\n");
    if (fmt == DOMAINS_DNS_UNBOUND)
        fprintf(out, "server:\n");
    if (fmt == DOMAINS_DNS_RPZ) {
        fprintf(out,
                "; named.conf: response-policy { zone \"rpz.cacheparty\"; }; and\n"
                "; zone \"rpz.cacheparty\" { type primary; file \"db.rpz.cacheparty\"; };\n"
                "; unbound.conf: rpz: name: \"rpz.cacheparty\" zonefile: \"db.rpz.cacheparty\"\n"
                "$TTL 60\n"
                "@ IN SOA localhost. root.localhost. 1 3600 600 86400 60\n"
                "@ IN NS localhost.\n");
    }
    for (size_t i = 0; i < d->n_entries; i++) {
        const struct dom_entry *e = &d->entries[i];

        if (e->svc != svc) {
            svc = e->svc;
            fprintf(out, "%s%s %s%s\n", fmt == DOMAINS_DNS_UNBOUND ? "    " : "", comment,
                    d->services[svc], tgt[svc] == NULL ? " (left out)" : "");
        }
        dns_entry(&x, e);
    }
    if (fmt == DOMAINS_DNS_RPZ)
        rpz_fill_wildcard_gaps(&x);
    if (fflush(out) != 0 || ferror(out))
        return -EIO;
    return 0;
}
