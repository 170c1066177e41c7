/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * config: the INI file (inih) -> an immutable struct config snapshot.
 *
 * Owns: every string and array inside struct config. A snapshot is never mutated after
 * config_load() returns it; a reload builds a new snapshot and main publishes it.
 *
 * The running configuration is one snapshot in two pointers: g_cfg (this file's struct) and
 * g_domains (the cache-domains lists it names, NULL when none). main sets both, together, at start
 * and on each accepted reload (SIGHUP), from the loop thread between two callbacks, so no
 * callback ever sees one pointer new and the other old. The rule for reading it:
 * - Read the snapshot once per unit of work (a request, a fetch, a TLS connection) or copy what
 *   you need at construction and take a reconfigure call (cache_reconfigure,
 *   tlsrelay_reconfigure). Two callbacks of one request may see two snapshots: that is allowed,
 *   so keep any decision that needs two settings to agree inside one callback.
 * - A snapshot, and the domains set beside it, lives until exit: main never frees one a callback
 *   up the stack may still read, so a pointer or string borrowed from it stays valid.
 * - Keys that cannot change on reload (listen addresses, cache dirs, chunk_size, resolvers,
 *   overrides) are marked in the key table of config.c; config_keep_fixed() carries their running
 *   values into the new snapshot, so within one process they never change.
 * Sizes take binary suffixes K M G T (1M = 1048576); durations ms s m h d (bare number = seconds),
 * stored here in milliseconds. Lists are separated by commas or spaces. IPv6 is "[addr]:port".
 * Unknown sections or keys, and bad values, are errors reported as "FILE:LINE: message".
 * Pure module: no ev.h, no sockets opened (addresses are parsed numerically, names are kept as
 * text).
 */
#ifndef CACHEPARTY_CONFIG_H
#define CACHEPARTY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <regex.h>
#include <stdio.h>
#include <sys/socket.h>

#include "cluster.h"

#define CONFIG_MAX_ADDRS 16       /* per address list (listen, passthrough_listen, dns) */
#define CONFIG_MAX_DIRS 16        /* cache dirs */
#define CONFIG_HOST_MAX 256       /* host names, incl. NUL */
#define CONFIG_ADMIN_TOKEN_MIN 16 /* admin_token: characters, at least */
#define CONFIG_ADMIN_TOKEN_MAX 256
#define CONFIG_MAX_ADMIN_NAMES 16
#define CONFIG_DEFAULT_PATH SYSCONFDIR_STR "/cacheparty/cacheparty.ini"
#ifndef SYSCONFDIR_STR
#define SYSCONFDIR_STR "/etc"
#endif

/* A numeric socket address with the text it was written as ("0.0.0.0:80", "[::]:80"). */
struct cfg_addr {
    struct sockaddr_storage ss;
    socklen_t len;
    char text[80];
};

/* host[:port] where host may be a name (upstream.dns, upstream.override, tls.override). */
struct cfg_hostport {
    char host[CONFIG_HOST_MAX]; /* without brackets for IPv6 literals */
    uint16_t port;
};

enum cfg_log_level { CFG_LOG_ERROR = 0, CFG_LOG_WARN, CFG_LOG_INFO, CFG_LOG_DEBUG };
enum cfg_access_format { CFG_ACCESS_CACHELOG = 0, CFG_ACCESS_JSON };
/* [domains] steam_user_agent: off; Steam's content hosts (built-in list + steam_hosts); any host.
 */
enum cfg_steam_ua { CFG_STEAM_UA_NO = 0, CFG_STEAM_UA_YES, CFG_STEAM_UA_ANY };
/* [cache] lancache_migrate: serve lancache's files in place only, copy them into our chunks, or
 * move them (the nginx file removed once our chunk is durable). */
enum cfg_migrate { CFG_MIGRATE_OFF = 0, CFG_MIGRATE_COPY, CFG_MIGRATE_MOVE };
#define CONFIG_MAX_STEAM_HOSTS 64 /* [domains] steam_hosts entries */

/*
 * [rules]: per-path policies. One key per rule, named by the rule:
 *     NAME = POLICY WHERE PATTERN      a new rule, or a built-in replaced
 *     NAME = POLICY                    a built-in with another policy
 *     NAME = off                       a rule switched off
 * POLICY: bypass (forwarded, never stored or served from the cache: lancache's
 * proxy_cache_bypass + proxy_no_cache), revalidate (every request asks the origin first with
 * the stored validators: conn_pass.c, "Revalidation"), hide_etag (cached; the origin's
 * ETag is neither stored nor sent, as lancache's proxy_hide_header ETag). WHERE: "*" (every
 * request), a service name (no dot: the cache identifier, any case) or a host ("a.b", or "*.a.b"
 * for its subdomains). PATTERN, matched against the path without the query, as nginx's location
 * forms: "=PATH" exactly, "~RE" / "~*RE" a POSIX extended regex (regex(7); "~*" ignores case) found
 * anywhere in the path, else a prefix that starts with "/". The first rule that applies decides:
 * the INI's own rules in file order, then the built-ins (config_rules.c) in their order. NAME: 1-48
 * characters of [a-z0-9_-], any case.
 */
#define CONFIG_MAX_RULES 64
#define CONFIG_RULE_NAME_MAX 48
enum cfg_rule_policy { CFG_RULE_OFF = 0, CFG_RULE_BYPASS, CFG_RULE_REVALIDATE, CFG_RULE_HIDE_ETAG };
enum cfg_rule_path { CFG_PATH_PREFIX = 0, CFG_PATH_EXACT, CFG_PATH_REGEX };

struct cfg_rule {
    char name[CONFIG_RULE_NAME_MAX + 1]; /* lowercase */
    enum cfg_rule_policy policy;         /* CFG_RULE_OFF: switched off, never applies */
    char where[CONFIG_HOST_MAX + 2];     /* "*", a service name, "a.b" or "*.a.b" (lowercase) */
    enum { CFG_WHERE_ANY = 0, CFG_WHERE_SERVICE, CFG_WHERE_HOST } where_kind;
    char *pattern; /* owns: as written ("/p", "=/p", "~re", "~*re") */
    enum cfg_rule_path kind;
    size_t skip;  /* bytes of <pattern> before the path or regex ("=", "~", "~*") */
    regex_t *re;  /* owns: CFG_PATH_REGEX compiled (REG_EXTENDED | REG_NOSUB [| REG_ICASE]) */
    bool builtin; /* one of the built-in defaults (possibly changed by the INI) */
    int line;     /* INI line that set it; 0: as built in */
};

struct config {
    char *path; /* the file it was loaded from */

    /* [server] */
    struct cfg_addr listen[CONFIG_MAX_ADDRS];
    size_t n_listen; /* >= 1 */
    bool has_admin;  /* admin_listen non-empty */
    struct cfg_addr admin_listen;
    /* admin_token: "" when not set (then admin_listen must be loopback); visible ASCII without
     * '"', ',', ';', '\\' (it travels as it is in a header and a cookie). */
    char admin_token[CONFIG_ADMIN_TOKEN_MAX + 1];
    bool admin_public;                         /* read-only views without the token */
    char *admin_names[CONFIG_MAX_ADMIN_NAMES]; /* owns: host names (lowercase, no port) */
    size_t n_admin_names;
    char *dashboard_chart_js; /* owns: the chart library's file; NULL: Debian's libjs-chart.js */
    char hostname[CONFIG_HOST_MAX]; /* default gethostname() */
    unsigned max_connections;       /* >= 1 */
    uint64_t request_timeout_ms;
    uint64_t keepalive_timeout_ms;
    uint64_t send_timeout_ms;
    uint64_t shutdown_timeout_ms;

    /* [upstream] */
    bool dns_system;                           /* dns = system: /etc/resolv.conf */
    struct cfg_hostport dns[CONFIG_MAX_ADDRS]; /* numeric hosts only; port default 53 */
    size_t n_dns;
    bool has_override;
    struct cfg_hostport override; /* port default 80 */
    uint64_t connect_timeout_ms;
    uint64_t first_byte_timeout_ms;
    uint64_t read_timeout_ms;
    unsigned keepalive;      /* idle connections kept per origin (0 = none) */
    unsigned max_per_origin; /* >= 1 */
    unsigned readahead;      /* >= 1 */
    bool allow_private;

    /* [cache] */
    char *dirs[CONFIG_MAX_DIRS];
    size_t n_dirs; /* >= 1 */
    uint64_t disk_size;
    uint64_t min_free;
    uint64_t memory_size;
    uint64_t answers_memory; /* [cache] answers_memory: the fresh non-object answers kept */
    uint64_t chunk_size;     /* power of two, 4K .. 64M */
    uint64_t max_age_ms;
    /* lancache's cache trees served in place and moved into ours (cache_lancache.c) */
    char *lancache_dirs[CONFIG_MAX_DIRS];
    size_t n_lancache_dirs;
    uint64_t lancache_slice_size; /* must equal chunk_size when there is a lancache_dir */
    uint64_t lancache_settle_ms;  /* a younger nginx file is not adopted (nginx may write it) */
    enum cfg_migrate lancache_migrate;

    /* [domains] */
    char *cache_domains; /* NULL when empty */
    bool allow_unlisted;
    enum cfg_steam_ua steam_user_agent;
    /* steam_hosts: names ("a.b") and wildcards ("*.a.b", subdomains only), lowercase, without a
     * trailing dot, each once; added to admit.c's built-in list of Steam content hosts */
    char *steam_hosts[CONFIG_MAX_STEAM_HOSTS];
    size_t n_steam_hosts;

    /* [rules]: the INI's rules first (file order), then the built-ins */
    struct cfg_rule rules[CONFIG_MAX_RULES];
    size_t n_rules;

    /* [tls] */
    struct cfg_addr tls_listen[CONFIG_MAX_ADDRS];
    size_t n_tls_listen; /* 0 = disabled */
    uint64_t handshake_timeout_ms;
    uint64_t idle_timeout_ms;
    bool has_tls_override;
    struct cfg_hostport tls_override; /* port default 443 */
    char *tls_access;                 /* NULL = off, "-" = stdout */

    /* [cluster] (all three cannot change live) */
    char *cluster_nodes;  /* owns: the list as written; NULL: no cluster */
    char *cluster_self;   /* owns */
    char *cluster_secret; /* owns */
    bool has_cluster;     /* nodes set: <cluster> parsed from the three */
    struct cluster cluster;

    /* [log] */
    char *access_log; /* NULL = off, "-" = stdout */
    enum cfg_access_format access_format;
    char *error_log; /* "-" = stderr */
    enum cfg_log_level level;
};

struct domains;

/* The running snapshot (see the rule above). Read-only outside main. */
extern const struct config *g_cfg;
extern const struct domains *g_domains;

/*
 * Load and validate <path>. On success returns 0 and *out owns a new snapshot (free with
 * config_free). On failure returns -1, *out is NULL and <err> holds "FILE:LINE: message"
 * (LINE is 0 for a file that cannot be opened or a whole-file check, e.g. missing listen).
 */
int config_load(const char *path, struct config **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Same, from an in-memory string; <name> is used as FILE in messages. For tests. */
int config_load_string(const char *name, const char *text, struct config **out, char *err,
                       size_t errlen) __attribute__((warn_unused_result));

/* Frees *cfg and sets it to NULL. NULL-safe. */
void config_free(struct config **cfg);

/*
 * Reload: for every key the key table marks as not changeable live whose value differs between
 * <next> (just loaded) and <cur> (running), puts the running value back into <next> and calls
 * <kept> (if not NULL) with the key's section, name and why: the rest of the warning, e.g.
 * "cannot change live: kept (restart to apply)". Keys are visited in file order. Returns how many
 * were kept.
 */
typedef void config_kept_fn(const char *section, const char *name, const char *why, void *arg);
unsigned config_keep_fixed(struct config *next, const struct config *cur, config_kept_fn *kept,
                           void *arg);
/*
 * After config_keep_fixed(): whether <cfg> still meets the rules that tie a key changeable live
 * to a kept one (memory_size at least 4 x chunk_size, disk_size at least chunk_size). Returns 0,
 * or -1 with <err> set: the reload must then be refused, since the file was valid only with the
 * chunk_size it asked for.
 */
int config_check_kept(const struct config *cfg, char *err, size_t errlen);

/* One-line human summary (for -t). Writes at most <len> bytes including NUL. */
void config_summary(const struct config *cfg, char *buf, size_t len);

/* Value parsers, exported for tests. Each returns 0 or -EINVAL (or -ERANGE on overflow). */
int config_parse_size(const char *s, uint64_t *out);        /* "1M", "1000G", "512" */
int config_parse_duration(const char *s, uint64_t *out_ms); /* "10s", "250ms", "3650d", "30" */
int config_parse_bool(const char *s, bool *out);            /* yes/no true/false on/off 1/0 */
int config_parse_addr(const char *s, struct cfg_addr *out); /* numeric "1.2.3.4:80", "[::1]:80" */
int config_parse_hostport(const char *s, uint16_t default_port, struct cfg_hostport *out);

/*
 * The rule that applies to a request for <path>[0..path_len) (without the query; "" means "/")
 * of host <host> (lowercase, no port) under cache identifier <ident>, or NULL (the first
 * enabled rule that matches, see [rules] above). No allocation for paths under 1 KiB; regexec is
 * reentrant.
 */
const struct cfg_rule *config_rule_for(const struct config *cfg, const char *ident,
                                       const char *host, const char *path, size_t path_len);

/* The name of <p>: "off", "bypass", "revalidate", "hide_etag". */
const char *config_rule_policy_name(enum cfg_rule_policy p);

/* For `cacheparty -t`: one line per rule, in the order they are tried: "rule NAME: POLICY WHERE
 * PATTERN (built in|FILE:LINE[, built in])". */
void config_rules_print(const struct config *cfg, FILE *out);

#endif
