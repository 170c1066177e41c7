/* SPDX-License-Identifier: BSD-2-Clause */
/* lcenv: a lancache configuration as cacheparty's INI (see lcenv.h). */
#include "lcenv.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "util.h"

#define LCENV_VARS_MAX 256
#define LCENV_VALUE_MAX 1024

struct var {
    char name[64];
    char value[LCENV_VALUE_MAX];
};

/* One line: "KEY=VALUE", "export KEY=VALUE", "- KEY=VALUE" or "KEY: VALUE" (YAML mapping), with
 * optional quotes around the value. False for anything else (comments, other YAML). */
static bool parse_line(const char *p, const char *end, struct var *v)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p < end && *p == '-') {
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
    }
    if (end - p > 7 && memcmp(p, "export ", 7) == 0)
        p += 7;
    if (p < end && (*p == '"' || *p == '\'')) /* - "KEY=VALUE" */
        p++;
    const char *k = p;
    while (p < end && (isupper((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_'))
        p++;
    size_t kl = (size_t)(p - k);
    if (kl == 0 || kl >= sizeof(v->name) || isdigit((unsigned char)k[0]) || p == end)
        return false;
    if (*p == '=') {
        p++;
    } else if (*p == ':' && p + 1 < end && (p[1] == ' ' || p[1] == '\t')) {
        p += 2;
    } else {
        return false;
    }
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    const char *e = end;
    while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        e--;
    /* A trailing comment after blanks (.env and YAML both allow it unquoted). */
    if (p < e && *p != '"' && *p != '\'') {
        for (const char *c = p; c < e; c++)
            if (*c == '#' && c > p && (c[-1] == ' ' || c[-1] == '\t')) {
                e = c;
                while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
                    e--;
                break;
            }
    }
    if (p < e && (*p == '"' || *p == '\'')) {
        const char *close = memchr(p + 1, *p, (size_t)(e - p - 1));
        if (close != NULL) { /* "value" # a comment: the text between the quotes */
            e = close;
            p++;
        }
    } else if (e > p && (e[-1] == '"' || e[-1] == '\'')) {
        e--; /* the closing quote of - "KEY=VALUE" */
    }
    size_t vl = (size_t)(e - p);
    if (vl >= sizeof(v->value))
        return false;
    memcpy(v->name, k, kl);
    v->name[kl] = '\0';
    memcpy(v->value, p, vl);
    v->value[vl] = '\0';
    return true;
}

/* An nginx size ("1000000m", "2000g", "500k", "512") as ours ("1000000M"), or false. */
static bool size_of(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s);
    if (n == 0 || n + 1 > cap)
        return false;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)toupper((unsigned char)s[i]);
    out[n] = '\0';
    uint64_t v;
    return config_parse_size(out, &v) == 0 && v > 0;
}

/* An nginx time ("3650d", "1y", "2w", "6M", "12h") as ours (days, hours...), or false. */
static bool time_of(const char *s, char *out, size_t cap)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || !isdigit((unsigned char)s[0]))
        return false;
    unsigned long long days = 0;
    if (strcmp(end, "y") == 0)
        days = v * 365;
    else if (strcmp(end, "M") == 0)
        days = v * 30;
    else if (strcmp(end, "w") == 0)
        days = v * 7;
    if (days > 0) {
        snprintf(out, cap, "%llud", days);
    } else {
        snprintf(out, cap, "%s", s);
        uint64_t ms;
        if (config_parse_duration(out, &ms) != 0 || ms == 0)
            return false;
    }
    return true;
}

static const struct var *find(const struct var *vars, unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(vars[i].name, name) == 0)
            return &vars[i];
    return NULL;
}

/* A list value ("8.8.8.8 8.8.4.4", "1.1.1.1;9.9.9.9", "a,b") with single spaces. */
static void list_of(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    bool gap = false;
    for (; *s != '\0' && o + 2 < cap; s++) {
        if (*s == ' ' || *s == ';' || *s == ',' || *s == '\t') {
            gap = o > 0;
            continue;
        }
        if (gap)
            out[o++] = ' ';
        gap = false;
        out[o++] = *s;
    }
    out[o] = '\0';
}

/* Writes a comment, wrapped into lines of at most about 96 characters (an INI line holds 199). */
__attribute__((format(printf, 2, 3))) static void note(FILE *out, const char *fmt, ...)
{
    char text[4 * LCENV_VALUE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    const char *p = text;
    while (*p != '\0') {
        size_t n = strlen(p);
        if (n > 94) {
            n = 94;
            while (n > 40 && p[n] != ' ')
                n--;
            if (p[n] != ' ')
                n = 94; /* one long word: cut it */
        }
        fprintf(out, "; %.*s\n", (int)n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
}

struct known {
    const char *name;
    const char *comment; /* no equivalent: why, and what instead (NULL: handled in code) */
};

static const struct known notes[] = {
    {"CACHE_INDEX_SIZE", "no equivalent: cacheparty has no fixed-size index to reserve; "
                         "[cache] memory_size is the RAM for recent chunks and downloads"},
    {"CACHE_MEM_SIZE", "no equivalent (the old name of CACHE_INDEX_SIZE): cacheparty has no "
                       "fixed-size index; [cache] memory_size is the RAM for recent chunks"},
    {"DNS_BIND_IP", "no equivalent: cacheparty runs no DNS server; load the output of "
                    "`cacheparty dns --ip ADDR` into your resolver (dnsmasq, Pi-hole, unbound, "
                    "BIND): see the README's \"Point your LAN at it\""},
    {"CACHE_DOMAINS_REPO", "no equivalent: cacheparty never downloads the lists; clone them "
                           "yourself and set [domains] cache_domains to the checkout"},
    {"CACHE_DOMAINS_BRANCH", "no equivalent: check out that branch of your clone of the lists"},
    {"NOFETCH", "no equivalent needed: cacheparty never fetches the lists"},
    {"TZ", "no equivalent: cacheparty's logs are in UTC"},
    {"NGINX_WORKER_PROCESSES", "no equivalent: cacheparty is one process with one event loop"},
    {"LOGFILE_RETENTION", "no equivalent: rotate /var/log/cacheparty with logrotate "
                          "(conf/logrotate, installed by `make install`)"},
    {"BEAT_TIME", "no equivalent: lancache's log heartbeat; cacheparty answers "
                  "/lancache-heartbeat itself"},
    {"SUPERVISORD_LOGLEVEL", "no equivalent: there is no supervisord; see [log] level"},
    {"LANCACHE_DNSDOMAIN", "no equivalent: cacheparty runs no DNS server"},
};

unsigned lcenv_convert(const char *text, size_t len, const char *name, FILE *out)
{
    struct var *vars = xcalloc(LCENV_VARS_MAX, sizeof(*vars));
    unsigned n = 0;
    const char *p = text, *end = text + len;
    while (p < end && n < LCENV_VARS_MAX) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        struct var v;
        if (parse_line(p, le, &v)) {
            struct var *old = NULL;
            for (unsigned i = 0; i < n; i++)
                if (strcmp(vars[i].name, v.name) == 0)
                    old = &vars[i];
            if (old != NULL)
                *old = v; /* the last one wins, as in a shell */
            else
                vars[n++] = v;
        }
        p = nl != NULL ? nl + 1 : end;
    }
    char a[LCENV_VALUE_MAX + 16], b[LCENV_VALUE_MAX + 16];
    const struct var *x;
    note(out,
         "cacheparty configuration converted from lancache's %s by `cacheparty config "
         "--from-lancache`. Check it with `cacheparty -t -c FILE`.",
         name);
    fprintf(out, "\n[upstream]\n");
    if ((x = find(vars, n, "UPSTREAM_DNS")) != NULL) {
        list_of(x->value, a, sizeof(a));
        note(out, "UPSTREAM_DNS=%s", x->value);
        fprintf(out, "dns = %s\n", a);
    }
    fprintf(out, "\n[cache]\n");
    static const struct {
        const char *var, *key;
        bool time;
    } plain[] = {{"CACHE_DISK_SIZE", "disk_size", false},
                 {"MIN_FREE_DISK", "min_free", false},
                 {"CACHE_MAX_AGE", "max_age", true}};
    for (size_t i = 0; i < ARRAY_SIZE(plain); i++) {
        if ((x = find(vars, n, plain[i].var)) == NULL)
            continue;
        if (plain[i].time ? time_of(x->value, a, sizeof(a)) : size_of(x->value, a, sizeof(a))) {
            note(out, "%s=%s", plain[i].var, x->value);
            fprintf(out, "%s = %s\n", plain[i].key, a);
        } else {
            note(out, "%s=%s: not a %s cacheparty reads: set %s by hand", plain[i].var, x->value,
                 plain[i].time ? "time" : "size", plain[i].key);
        }
    }
    x = find(vars, n, "CACHE_SLICE_SIZE");
    const char *slice = x != NULL ? x->value : "1m";
    if (size_of(slice, b, sizeof(b))) {
        note(out,
             "CACHE_SLICE_SIZE=%s%s: chunks of lancache's slice size, so that its files can "
             "be served and moved",
             slice, x != NULL ? "" : " (lancache's default)");
        fprintf(out, "chunk_size = %s\nlancache_slice_size = %s\n", b, b);
    } else {
        note(out, "CACHE_SLICE_SIZE=%s: not a size cacheparty reads", slice);
    }
    if ((x = find(vars, n, "CACHE_ROOT")) != NULL) {
        note(out,
             "CACHE_ROOT=%s: monolithic mounts $CACHE_ROOT/cache at /data/cache, and nginx's "
             "cache is /data/cache/cache in it. A relative CACHE_ROOT is relative to the "
             "docker-compose directory: make it absolute. lancache_settle = 0 is for a "
             "stopped lancache. Try copy first: move removes each nginx file once it is in "
             "cacheparty's cache (see the README's \"Switching from lancache\").",
             x->value);
        fprintf(out,
                "lancache_dir = %s/cache/cache\nlancache_settle = 0\nlancache_migrate = copy\n",
                x->value);
    }
    fprintf(out, "\n[domains]\n");
    if ((x = find(vars, n, "USE_GENERIC_CACHE")) != NULL) {
        bool on = false;
        if (config_parse_bool(x->value, &on) == 0) {
            note(out, "USE_GENERIC_CACHE=%s: hosts of no service are %s", x->value,
                 on ? "cached too" : "not cached");
            fprintf(out, "allow_unlisted = %s\n", on ? "yes" : "no");
        } else {
            note(out, "USE_GENERIC_CACHE=%s: not a boolean: set allow_unlisted by hand", x->value);
        }
    }
    note(out, "the lists: clone uklans/cache-domains and set cache_domains = /path/to/the/clone");
    if ((x = find(vars, n, "NGINX_LOG_FORMAT")) != NULL) {
        bool json = strcasecmp(x->value, "cachelog-json") == 0;
        if (json || strcasecmp(x->value, "cachelog") == 0) {
            fprintf(out, "\n[log]\n");
            note(out, "NGINX_LOG_FORMAT=%s", x->value);
            fprintf(out, "access_format = %s\n", json ? "json" : "cachelog");
        } else {
            fprintf(out, "\n");
            note(out,
                 "NGINX_LOG_FORMAT=%s: not a format cacheparty writes (cachelog, "
                 "cachelog-json)",
                 x->value);
        }
    }
    /* Everything else, as comments. */
    bool header = false;
    static const char *const mapped[] = {"UPSTREAM_DNS",      "CACHE_DISK_SIZE",  "MIN_FREE_DISK",
                                         "CACHE_MAX_AGE",     "CACHE_SLICE_SIZE", "CACHE_ROOT",
                                         "USE_GENERIC_CACHE", "NGINX_LOG_FORMAT"};
    for (unsigned i = 0; i < n; i++) {
        bool done = false;
        for (size_t m = 0; m < ARRAY_SIZE(mapped) && !done; m++)
            done = strcmp(vars[i].name, mapped[m]) == 0;
        if (done)
            continue;
        if (!header)
            fprintf(out, "\n; Variables without a key here:\n");
        header = true;
        const char *nm = vars[i].name, *val = vars[i].value;
        size_t nl = strlen(nm);
        const char *why = NULL;
        for (size_t k = 0; k < ARRAY_SIZE(notes); k++)
            if (strcmp(notes[k].name, nm) == 0)
                why = notes[k].comment;
        if (strcmp(nm, "LANCACHE_IP") == 0) {
            list_of(val, a, sizeof(a));
            size_t o = 0;
            b[0] = '\0';
            for (char *t = strtok(a, " "); t != NULL && o + 8 < sizeof(b); t = strtok(NULL, " ")) {
                int w = snprintf(b + o, sizeof(b) - o, " --ip %s", t);
                if (w < 0 || (size_t)w >= sizeof(b) - o)
                    break;
                o += (size_t)w;
            }
            note(out,
                 "LANCACHE_IP=%s: the addresses clients are sent to ([server] listen takes "
                 "every address by default); the DNS overrides for them:",
                 val);
            fprintf(out, ";   cacheparty dns%s\n", b);
        } else if (nl > 8 && strncmp(nm, "DISABLE_", 8) == 0) {
            snprintf(b, sizeof(b), "%s", nm + 8);
            for (char *c = b; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            note(out, "%s=%s: `cacheparty dns --skip %s` leaves the service out", nm, val, b);
        } else if (why == NULL && nl > 8 && strcmp(nm + nl - 8, "CACHE_IP") == 0) {
            snprintf(b, sizeof(b), "%.*s", (int)(nl - 8), nm);
            for (char *c = b; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            note(out, "%s=%s: `cacheparty dns --service-ip %s=ADDR` for each address", nm, val, b);
        } else if (why != NULL) {
            note(out, "%s=%s: %s", nm, val, why);
        } else {
            note(out, "%s=%s: unknown to cacheparty (not a lancache setting it knows)", nm, val);
        }
    }
    free(vars);
    return n;
}
