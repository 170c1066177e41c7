/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * config_rules: the [rules] section (part of the config module, see config.h for the syntax):
 * the built-in rules, the parser of one rule key, the matcher and the `-t` listing.
 *
 * The built-ins are lancache monolithic's exceptions (the files of its cache.conf.d), each with the
 * nginx location it translates:
 * - lol-releaselisting, lol-version: `location ~ ^.+(releaselisting_.*|.version$)` (League of
 *   Legends' patcher: a cached release listing or version file breaks patching), split in two
 *   so that either can be switched off; the regexes are lancache's, its unescaped '.' included.
 * - gw2-latest64: `location ^~ /latest64` (Guild Wars 2's manifest), a prefix.
 * - wu-trust-lists: `location ~* (authrootstl.cab|pinrulesstl.cab|disallowedcertstl.cab)$`
 *   (Windows Update's certificate trust lists: a stale one hands out an old trust list).
 * - steam-server-status: `location = /server-status` (polled constantly).
 * All five are bypass, on every host as in lancache: they are small files whose whole point is
 * to be current, so revalidating would save a few hundred bytes per request at the price of
 * trusting the origin's validators (which these were not checked to carry); bypass is what
 * lancache does and can never serve a stale one.
 * - blizzard-etag: `proxy_hide_header ETag` ("Battle.net fix"), there on every request. It works
 *   around nginx's slice module, which fails a download when the slices of one file carry
 *   different ETags, as Blizzard's CDN edges send them; the Battle.net agent itself does not
 *   need it. cacheparty also compares the validators of an object's chunks (a change drops the
 *   old version's chunks), so the same CDN would make it drop Blizzard's chunks: hide_etag
 *   removes the ETag from what is compared, stored and sent. Narrowed to the blizzard service;
 *   Blizzard's paths name their content (a hash), so its Length and Last-Modified still tell
 *   versions apart.
 */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "config_int.h"
#include "util.h"

struct builtin_rule {
    const char *name;
    enum cfg_rule_policy policy;
    const char *where;
    const char *pattern;
};

static const struct builtin_rule builtins[] = {
    {"lol-releaselisting", CFG_RULE_BYPASS, "*", "~^.+releaselisting_"},
    {"lol-version", CFG_RULE_BYPASS, "*", "~^.+.version$"},
    {"gw2-latest64", CFG_RULE_BYPASS, "*", "/latest64"},
    {"wu-trust-lists", CFG_RULE_BYPASS, "*",
     "~*(authrootstl.cab|pinrulesstl.cab|disallowedcertstl.cab)$"},
    {"steam-server-status", CFG_RULE_BYPASS, "*", "=/server-status"},
    {"blizzard-etag", CFG_RULE_HIDE_ETAG, "blizzard", "/"},
};

static const char *const policy_names[] = {"off", "bypass", "revalidate", "hide_etag"};

const char *config_rule_policy_name(enum cfg_rule_policy p)
{
    ASSERT((size_t)p < ARRAY_SIZE(policy_names));
    return policy_names[p];
}

__attribute__((format(printf, 3, 4))) static int rbad(char *msg, size_t msglen, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return -1;
}

static void rule_clear(struct cfg_rule *r)
{
    free(r->pattern);
    r->pattern = NULL;
    if (r->re != NULL) {
        regfree(r->re);
        free(r->re);
        r->re = NULL;
    }
}

/* A host for WHERE: "a.b" or "*.a.b", [a-z0-9_-] labels of 1-63 (lowercased already). */
static bool host_ok(const char *s)
{
    const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t label = 0, len = strlen(name);
    if (len == 0 || len > 253 || strchr(name, '.') == NULL)
        return false;
    for (size_t i = 0; i <= len; i++) {
        char c = i < len ? name[i] : '.';
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
        } else if (++label > 63 || !(islower((unsigned char)c) || isdigit((unsigned char)c) ||
                                     c == '-' || c == '_')) {
            return false;
        }
    }
    return true;
}

/* A service name for WHERE: 1-64 of [A-Za-z0-9_-] (a dot would make it a host). */
static bool service_ok(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

/* Sets where/pattern of <r> from the texts. Returns 0 or -1 with <msg>. */
static int rule_fill(struct cfg_rule *r, const char *where, const char *pattern, char *msg,
                     size_t msglen)
{
    char w[sizeof(r->where)];
    if (strlen(where) >= sizeof(w))
        return rbad(msg, msglen, "'%s' is too long for a host", where);
    for (size_t i = 0;; i++) {
        w[i] = (char)tolower((unsigned char)where[i]);
        if (where[i] == '\0')
            break;
    }
    if (strcmp(w, "*") == 0)
        r->where_kind = CFG_WHERE_ANY;
    else if (strchr(w, '.') != NULL && host_ok(w))
        r->where_kind = CFG_WHERE_HOST;
    else if (strchr(w, '.') == NULL && service_ok(w))
        r->where_kind = CFG_WHERE_SERVICE;
    else
        return rbad(msg, msglen, "'%s' is not *, a service name or a host name (a.b or *.a.b)",
                    where);

    enum cfg_rule_path kind;
    size_t skip = 0;
    int flags = REG_EXTENDED | REG_NOSUB;
    if (pattern[0] == '=') {
        kind = CFG_PATH_EXACT;
        skip = 1;
    } else if (pattern[0] == '~') {
        kind = CFG_PATH_REGEX;
        skip = pattern[1] == '*' ? 2 : 1;
        if (skip == 2)
            flags |= REG_ICASE;
    } else {
        kind = CFG_PATH_PREFIX;
    }
    while (skip > 0 && (pattern[skip] == ' ' || pattern[skip] == '\t'))
        skip++; /* "~ RE", "= /p": nginx's location forms have a blank there */
    if (kind != CFG_PATH_REGEX && pattern[skip] != '/')
        return rbad(msg, msglen, "'%s' is not a path pattern (/PREFIX, =PATH, ~REGEX or ~*REGEX)",
                    pattern);
    if (kind == CFG_PATH_REGEX && pattern[skip] == '\0')
        return rbad(msg, msglen, "'%s': empty regular expression", pattern);
    regex_t *re = NULL;
    if (kind == CFG_PATH_REGEX) {
        re = xmalloc(sizeof(*re));
        int rc = regcomp(re, pattern + skip, flags);
        if (rc != 0) {
            char why[128];
            regerror(rc, re, why, sizeof(why));
            free(re);
            return rbad(msg, msglen, "'%s': %s", pattern + skip, why);
        }
    }
    rule_clear(r);
    memcpy(r->where, w, sizeof(w));
    r->pattern = xstrdup(pattern);
    r->kind = kind;
    r->skip = skip;
    r->re = re;
    return 0;
}

void config_rules_defaults(struct config *cfg)
{
    char msg[CONFIG_RULES_MSG_MAX];
    config_rules_free(cfg);
    for (size_t i = 0; i < ARRAY_SIZE(builtins); i++) {
        struct cfg_rule *r = &cfg->rules[cfg->n_rules++];
        memset(r, 0, sizeof(*r));
        snprintf(r->name, sizeof(r->name), "%s", builtins[i].name);
        r->policy = builtins[i].policy;
        r->builtin = true;
        int rc = rule_fill(r, builtins[i].where, builtins[i].pattern, msg, sizeof(msg));
        ASSERT(rc == 0);
    }
}

void config_rules_free(struct config *cfg)
{
    for (size_t i = 0; i < cfg->n_rules; i++)
        rule_clear(&cfg->rules[i]);
    cfg->n_rules = 0;
}

/* The next blank-separated word of *p (at most <len> - 1 bytes), or 0 at the end. */
static size_t next_word(const char **p, char *buf, size_t len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = 0;
    while (s[n] != '\0' && s[n] != ' ' && s[n] != '\t')
        n++;
    *p = s + n;
    if (n >= len)
        n = len - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return n;
}

int config_rule_set(struct config *cfg, const char *name, const char *value, int line, char *msg,
                    size_t msglen)
{
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > CONFIG_RULE_NAME_MAX)
        return rbad(msg, msglen, "rule name '%s': 1 to %d characters", name, CONFIG_RULE_NAME_MAX);
    char lname[CONFIG_RULE_NAME_MAX + 1];
    for (size_t i = 0; i <= nlen; i++) {
        unsigned char c = (unsigned char)name[i];
        if (i < nlen && !isalnum(c) && c != '-' && c != '_')
            return rbad(msg, msglen, "rule name '%s': only letters, digits, '-' and '_'", name);
        lname[i] = (char)tolower(c);
    }
    struct cfg_rule *r = NULL;
    size_t n_user = 0;
    for (size_t i = 0; i < cfg->n_rules; i++) {
        if (strcmp(cfg->rules[i].name, lname) == 0)
            r = &cfg->rules[i];
        if (!cfg->rules[i].builtin)
            n_user++;
    }
    if (r != NULL && r->line != 0) {
        return rbad(msg, msglen, "rule %s: already set on line %d", lname, r->line);
    }

    char word[32];
    const char *p = value;
    if (next_word(&p, word, sizeof(word)) == 0)
        return rbad(msg, msglen, "rule %s: no policy (bypass, revalidate, hide_etag or off)",
                    lname);
    enum cfg_rule_policy policy = CFG_RULE_OFF;
    size_t k;
    for (k = 0; k < ARRAY_SIZE(policy_names); k++)
        if (strcasecmp(word, policy_names[k]) == 0)
            break;
    if (k == ARRAY_SIZE(policy_names))
        return rbad(msg, msglen,
                    "rule %s: '%s' is not a policy (bypass, revalidate, hide_etag or off)", lname,
                    word);
    policy = (enum cfg_rule_policy)k;

    char where[CONFIG_HOST_MAX + 2];
    size_t wlen = next_word(&p, where, sizeof(where));
    while (*p == ' ' || *p == '\t')
        p++;
    const char *pattern = p; /* the rest of the line: a regex may hold blanks */
    if (wlen == 0) {
        if (r == NULL)
            return rbad(msg, msglen,
                        "rule %s: no such built-in rule; a new rule is POLICY WHERE PATTERN",
                        lname);
        r->policy = policy;
        r->line = line;
        return 0;
    }
    if (policy == CFG_RULE_OFF)
        return rbad(msg, msglen, "rule %s: off takes nothing after it", lname);
    if (*pattern == '\0')
        return rbad(msg, msglen, "rule %s: no path pattern after '%s'", lname, where);
    struct cfg_rule fresh;
    memset(&fresh, 0, sizeof(fresh));
    if (rule_fill(&fresh, where, pattern, msg, msglen) != 0) {
        char why[CONFIG_RULES_MSG_MAX];
        snprintf(why, sizeof(why), "%s", msg);
        return rbad(msg, msglen, "rule %s: %s", lname, why);
    }
    if (policy == CFG_RULE_HIDE_ETAG && fresh.where_kind == CFG_WHERE_HOST) {
        rule_clear(&fresh);
        /* the cache key has no host: chunks filled through another host of the object's
         * identifier would keep the ETag, and one object would look like two versions */
        return rbad(msg, msglen,
                    "rule %s: hide_etag applies to * or a service (the cache key has no host), "
                    "not to '%s'",
                    lname, where);
    }
    fresh.policy = policy;
    fresh.line = line;
    memcpy(fresh.name, lname, sizeof(lname));
    if (r != NULL) { /* a built-in replaced, in its place */
        fresh.builtin = true;
        rule_clear(r);
        *r = fresh;
        return 0;
    }
    if (cfg->n_rules == CONFIG_MAX_RULES) {
        rule_clear(&fresh);
        return rbad(msg, msglen, "too many rules (at most %d)", CONFIG_MAX_RULES);
    }
    /* a rule of the INI goes after the INI's earlier ones, before the built-ins */
    memmove(&cfg->rules[n_user + 1], &cfg->rules[n_user],
            (cfg->n_rules - n_user) * sizeof(cfg->rules[0]));
    cfg->rules[n_user] = fresh;
    cfg->n_rules++;
    return 0;
}

static bool path_matches(const struct cfg_rule *r, const char *path, size_t len)
{
    const char *want = r->pattern + r->skip;
    switch (r->kind) {
    case CFG_PATH_EXACT:
        return strlen(want) == len && memcmp(want, path, len) == 0;
    case CFG_PATH_PREFIX: {
        size_t wl = strlen(want);
        return wl <= len && memcmp(want, path, wl) == 0;
    }
    case CFG_PATH_REGEX: {
        /* regexec wants a NUL-terminated string (REG_STARTEND is not everywhere, and
         * sanitizers' interceptors read to the NUL whatever it says) */
        char small[1024];
        char *s = len < sizeof(small) ? small : xmalloc(len + 1);
        memcpy(s, path, len);
        s[len] = '\0';
        bool hit = regexec(r->re, s, 0, NULL, 0) == 0;
        if (s != small)
            free(s);
        return hit;
    }
    }
    return false;
}

const struct cfg_rule *config_rule_for(const struct config *cfg, const char *ident,
                                       const char *host, const char *path, size_t path_len)
{
    if (path_len == 0) {
        path = "/";
        path_len = 1;
    }
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        if (r->policy == CFG_RULE_OFF)
            continue;
        if (r->where_kind == CFG_WHERE_SERVICE &&
            (ident == NULL || strcasecmp(r->where, ident) != 0))
            continue;
        if (r->where_kind == CFG_WHERE_HOST &&
            (host == NULL || !util_host_pattern_match(r->where, host)))
            continue;
        if (path_matches(r, path, path_len))
            return r;
    }
    return NULL;
}

void config_rules_print(const struct config *cfg, FILE *out)
{
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        fprintf(out, "rule %s: %s %s %s (", r->name, config_rule_policy_name(r->policy), r->where,
                r->pattern);
        if (r->line != 0)
            fprintf(out, "%s:%d%s", cfg->path != NULL ? cfg->path : "?", r->line,
                    r->builtin ? ", built in" : "");
        else
            fputs("built in", out);
        fputs(")\n", out);
    }
}
