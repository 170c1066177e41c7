/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * config: owns the INI grammar (docs/interfaces.md, "Configuration") and the config snapshots.
 *
 * One table (cfg_keys) lists every key: section, name, parser, field, range and default text.
 * Defaults are applied by running each key's own parser on its default text, so a default can
 * never disagree with the validation. inih drives the parse through our own line reader, which
 * counts physical lines: that gives every handler call its line number (libinih 55 is built
 * without INI_HANDLER_LINENO) and lets the whole-file checks point at the key they concern.
 *
 * Choices (documented for users in conf/cacheparty.ini):
 * - Section and key names match case-insensitively.
 * - A scalar key given twice, or continued on an indented line, is an error. A list key (listen,
 *   dns, dir, passthrough_listen) may be repeated or continued: the first occurrence in the file
 *   replaces the default, later ones append.
 * - Sizes: digits, then optional K M G T (binary, any case), then an optional B ("1MB" = "1M",
 *   "512B" = 512). No fractions, no spaces. Durations: digits, then optional ms s m h d (any
 *   case); bare = seconds. Only shutdown_timeout (close at once) and keepalive_timeout (no
 *   keep-alive) may be 0.
 * - Lines are at most ini_max_line - 1 (199) characters; a longer one is an error, not a silent
 *   truncation. First error wins; its message is "FILE:LINE: ..." (LINE 0 = whole file).
 */
#include "config.h"
#include "config_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "util.h"

const struct config *g_cfg;
const struct domains *g_domains;

#define CONFIG_FILE_MAX (1u << 20) /* a config file larger than this is refused */
#define CONFIG_MSG_MAX 320
#define CONFIG_TOKEN_MAX (CONFIG_HOST_MAX + 16)

struct cfg_key;

/*
 * Parses <val> into the field(s) of <key>. <append> is true when a list key is seen again in the
 * file (repeat or continuation line). Returns 0, or -1 with a message (no FILE:LINE prefix) in msg.
 */
typedef int cfg_parse_fn(struct config *cfg, const struct cfg_key *key, const char *val,
                         bool append, char *msg, size_t msglen);

struct cfg_key {
    const char *section;
    const char *name;
    cfg_parse_fn *parse;
    size_t off;   /* offsetof the field in struct config (generic parsers only) */
    size_t off2;  /* offsetof its count or has_ flag, where it has one */
    uint64_t min; /* numeric minimum; for host:port keys, the default port */
    uint64_t max; /* numeric maximum (uint keys only) */
    bool list;    /* may be repeated / continued: values append */
    const char *def;
    /* NULL: a reload applies the key. Otherwise the key cannot change on reload: a reload keeps
     * the running value and reports this text, the rest of "[section] name ..." (see
     * config_keep_fixed). */
    const char *fixed;
};

static cfg_parse_fn parse_uint, parse_duration, parse_size, parse_chunk, parse_bool, parse_steam_ua,
    parse_steam_hosts, parse_addr_list, parse_addr_opt, parse_hostname, parse_dns,
    parse_hostport_opt, parse_dirs, parse_migrate, parse_path_opt, parse_path, parse_level,
    parse_format, parse_admin_token, parse_admin_names, parse_cluster;

/*
 * Every key, in the order of conf/cacheparty.ini (which documents each). Fields left out are 0:
 * .min 0 allows 0, .off is unused by parsers that know their field.
 */
static const struct cfg_key cfg_keys[] = {
    {.section = "server",
     .name = "listen",
     .parse = parse_addr_list,
     .off = offsetof(struct config, listen),
     .off2 = offsetof(struct config, n_listen),
     .list = true,
     .def = "0.0.0.0:80, [::]:80",
     .fixed = "cannot change live: kept (restart to apply)"},
    {.section = "server",
     .name = "admin_listen",
     .parse = parse_addr_opt,
     .off = offsetof(struct config, admin_listen),
     .off2 = offsetof(struct config, has_admin),
     .def = "127.0.0.1:8081",
     .fixed = "cannot change live: kept"},
    {.section = "server", .name = "admin_token", .parse = parse_admin_token, .def = ""},
    {.section = "server",
     .name = "admin_public",
     .parse = parse_bool,
     .off = offsetof(struct config, admin_public),
     .def = "no"},
    {.section = "server",
     .name = "admin_names",
     .parse = parse_admin_names,
     .list = true,
     .def = ""},
    {.section = "server",
     .name = "dashboard_chart_js",
     .parse = parse_path_opt,
     .off = offsetof(struct config, dashboard_chart_js),
     .def = "",
     .fixed = "cannot change live: kept (restart to apply)"},
    {.section = "server", .name = "hostname", .parse = parse_hostname, .def = ""},
    {.section = "server",
     .name = "max_connections",
     .parse = parse_uint,
     .off = offsetof(struct config, max_connections),
     .min = 1,
     .max = 1000000,
     .def = "4096"},
    {.section = "server",
     .name = "request_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, request_timeout_ms),
     .min = 1,
     .def = "10s"},
    {.section = "server",
     .name = "keepalive_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, keepalive_timeout_ms),
     .def = "65s"},
    {.section = "server",
     .name = "send_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, send_timeout_ms),
     .min = 1,
     .def = "60s"},
    {.section = "server",
     .name = "shutdown_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, shutdown_timeout_ms),
     .def = "30s"},

    {.section = "upstream",
     .name = "dns",
     .parse = parse_dns,
     .list = true,
     .def = "8.8.8.8 8.8.4.4",
     .fixed = "cannot change live yet: kept (restart to apply)"},
    {.section = "upstream",
     .name = "override",
     .parse = parse_hostport_opt,
     .off = offsetof(struct config, override),
     .off2 = offsetof(struct config, has_override),
     .min = 80,
     .def = "",
     .fixed = "cannot change live: kept"},
    {.section = "upstream",
     .name = "connect_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, connect_timeout_ms),
     .min = 1,
     .def = "5s"},
    {.section = "upstream",
     .name = "first_byte_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, first_byte_timeout_ms),
     .min = 1,
     .def = "30s"},
    {.section = "upstream",
     .name = "read_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, read_timeout_ms),
     .min = 1,
     .def = "30s"},
    {.section = "upstream",
     .name = "keepalive",
     .parse = parse_uint,
     .off = offsetof(struct config, keepalive),
     .max = 1024,
     .def = "16"},
    {.section = "upstream",
     .name = "max_per_origin",
     .parse = parse_uint,
     .off = offsetof(struct config, max_per_origin),
     .min = 1,
     .max = 1024,
     .def = "32"},
    {.section = "upstream",
     .name = "readahead",
     .parse = parse_uint,
     .off = offsetof(struct config, readahead),
     .min = 1,
     .max = 64,
     .def = "4"},
    {.section = "upstream",
     .name = "allow_private",
     .parse = parse_bool,
     .off = offsetof(struct config, allow_private),
     .def = "no"},

    {.section = "cache",
     .name = "dir",
     .parse = parse_dirs,
     .off = offsetof(struct config, dirs),
     .off2 = offsetof(struct config, n_dirs),
     .list = true,
     .def = "/var/cache/cacheparty",
     .fixed = "cannot change live: kept"},
    {.section = "cache",
     .name = "disk_size",
     .parse = parse_size,
     .off = offsetof(struct config, disk_size),
     .min = 1,
     .def = "1000G"},
    {.section = "cache",
     .name = "min_free",
     .parse = parse_size,
     .off = offsetof(struct config, min_free),
     .def = "10G"},
    {.section = "cache",
     .name = "memory_size",
     .parse = parse_size,
     .off = offsetof(struct config, memory_size),
     .min = 1,
     .def = "256M"},
    {.section = "cache",
     .name = "answers_memory",
     .parse = parse_size,
     .off = offsetof(struct config, answers_memory),
     /* (kept answers count in ANSWER_BYTES_MAX too: most of it stays for sharing) */
     .max = 16ull * 1024 * 1024,
     .def = "4M"},
    {.section = "cache",
     .name = "chunk_size",
     .parse = parse_chunk,
     .off = offsetof(struct config, chunk_size),
     .def = "1M",
     .fixed = "cannot change live: kept"},
    {.section = "cache",
     .name = "max_age",
     .parse = parse_duration,
     .off = offsetof(struct config, max_age_ms),
     .min = 1,
     .def = "3650d"},
    {.section = "cache",
     .name = "lancache_dir",
     .parse = parse_dirs,
     .off = offsetof(struct config, lancache_dirs),
     .off2 = offsetof(struct config, n_lancache_dirs),
     .list = true,
     .def = "",
     .fixed = "cannot change live: kept"},
    {.section = "cache",
     .name = "lancache_slice_size",
     .parse = parse_size,
     .off = offsetof(struct config, lancache_slice_size),
     .min = 1,
     .def = "1M",
     .fixed = "cannot change live: kept"},
    {.section = "cache",
     .name = "lancache_settle",
     .parse = parse_duration,
     .off = offsetof(struct config, lancache_settle_ms),
     .def = "600s"},
    {.section = "cache", .name = "lancache_migrate", .parse = parse_migrate, .def = "move"},

    {.section = "domains",
     .name = "cache_domains",
     .parse = parse_path_opt,
     .off = offsetof(struct config, cache_domains),
     .def = ""},
    {.section = "domains",
     .name = "allow_unlisted",
     .parse = parse_bool,
     .off = offsetof(struct config, allow_unlisted),
     .def = "no"},
    {.section = "domains", .name = "steam_user_agent", .parse = parse_steam_ua, .def = "yes"},
    {.section = "domains",
     .name = "steam_hosts",
     .parse = parse_steam_hosts,
     .list = true,
     .def = ""},

    {.section = "tls",
     .name = "passthrough_listen",
     .parse = parse_addr_list,
     .off = offsetof(struct config, tls_listen),
     .off2 = offsetof(struct config, n_tls_listen),
     .list = true,
     .def = "",
     .fixed = "cannot change live: kept"},
    {.section = "tls",
     .name = "handshake_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, handshake_timeout_ms),
     .min = 1,
     .def = "10s"},
    {.section = "tls",
     .name = "idle_timeout",
     .parse = parse_duration,
     .off = offsetof(struct config, idle_timeout_ms),
     .min = 1,
     .def = "300s"},
    {.section = "tls",
     .name = "override",
     .parse = parse_hostport_opt,
     .off = offsetof(struct config, tls_override),
     .off2 = offsetof(struct config, has_tls_override),
     .min = 443,
     .def = "",
     .fixed = "cannot change live: kept"},
    {.section = "tls",
     .name = "access",
     .parse = parse_path_opt,
     .off = offsetof(struct config, tls_access),
     .def = ""},

    {.section = "cluster",
     .name = "nodes",
     .parse = parse_cluster,
     .off = offsetof(struct config, cluster_nodes),
     .def = "",
     .fixed = "cannot change live: kept (restart every node with the same list)"},
    {.section = "cluster",
     .name = "self",
     .parse = parse_cluster,
     .off = offsetof(struct config, cluster_self),
     .def = "",
     .fixed = "cannot change live: kept (restart to apply)"},
    {.section = "cluster",
     .name = "secret",
     .parse = parse_cluster,
     .off = offsetof(struct config, cluster_secret),
     .def = "",
     .fixed = "cannot change live: kept (restart every node with the same secret)"},

    {.section = "log",
     .name = "access",
     .parse = parse_path_opt,
     .off = offsetof(struct config, access_log),
     .def = "/var/log/cacheparty/access.log"},
    {.section = "log", .name = "access_format", .parse = parse_format, .def = "cachelog"},
    {.section = "log",
     .name = "error",
     .parse = parse_path,
     .off = offsetof(struct config, error_log),
     .def = "-"},
    {.section = "log", .name = "level", .parse = parse_level, .def = "info"},
};

/* State of one load. Lives on the stack of load_text(); borrows <text> and <name>. */
struct load_ctx {
    struct config *cfg;                /* being built; owned by load_text() */
    const char *name;                  /* FILE in messages */
    const char *text;                  /* the whole input */
    const char *pos;                   /* reader cursor into text */
    int line;                          /* physical line last handed to inih */
    int line_of[ARRAY_SIZE(cfg_keys)]; /* line where each key was first set; 0 = default */
    bool failed;                       /* first error recorded: later ones are ignored */
    int err_line;
    char err[CONFIG_MSG_MAX]; /* message without the FILE:LINE prefix */
};

/* ---- small helpers ---- */

static void *field(struct config *cfg, size_t off)
{
    return (char *)cfg + off;
}

__attribute__((format(printf, 3, 4))) static int bad(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return -1;
}

__attribute__((format(printf, 3, 4))) static void fail_at(struct load_ctx *ctx, int line,
                                                          const char *fmt, ...)
{
    va_list ap;
    if (ctx->failed)
        return;
    ctx->failed = true;
    ctx->err_line = line;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof(ctx->err), fmt, ap);
    va_end(ap);
}

static bool is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t';
}

/*
 * Copies the next comma/space separated token of *p into buf and advances *p.
 * Returns 1 for a token, 0 at the end, -1 when the token does not fit (buf holds its start).
 * A ';' after a blank starts a comment: libinih 55 strips inline comments from key lines but
 * not from continuation lines, so lists (the only keys that continue) strip them here.
 */
static int next_token(const char **p, char *buf, size_t len)
{
    const char *s = *p;
    size_t n = 0;

    while (*s != '\0' && is_sep(*s))
        s++;
    if (*s == '\0' || (*s == ';' && s > *p && (s[-1] == ' ' || s[-1] == '\t'))) {
        *p = s;
        return 0;
    }
    while (s[n] != '\0' && !is_sep(s[n]))
        n++;
    *p = s + n;
    if (n >= len) {
        snprintf(buf, len, "%.*s", (int)(len - 1), s);
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 1;
}

/* Decimal digits at s. Returns 0, -EINVAL (no digit) or -ERANGE; *end is after the digits. */
static int parse_dec(const char *s, const char **end, uint64_t *out)
{
    uint64_t v = 0;
    bool overflow = false;
    const char *p = s;

    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
        p++;
    }
    *end = p;
    if (p == s)
        return -EINVAL;
    *out = v;
    return overflow ? -ERANGE : 0;
}

static int parse_port(const char *s, uint16_t *out)
{
    const char *end;
    uint64_t v;

    if (parse_dec(s, &end, &v) != 0 || *end != '\0' || v < 1 || v > 65535)
        return -EINVAL;
    *out = (uint16_t)v;
    return 0;
}

/* A host name as written in a config: letters, digits, '-', '_' and non-empty dot-separated labels.
 */
static bool is_host_name(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len >= CONFIG_HOST_MAX || s[0] == '.' || s[0] == '-' || strstr(s, "..") != NULL)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            return false;
    }
    return true;
}

/* Formats a size with the largest exact binary suffix ("256M", "1000G", "1500"). */
static void fmt_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "TGMK";

    for (int i = 0; i < 4; i++) {
        uint64_t unit = (uint64_t)1 << (10 * (4 - i));
        if (v >= unit && v % unit == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", v / unit, units[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

static bool addr_equal(const struct cfg_addr *a, const struct cfg_addr *b)
{
    return a->len == b->len && memcmp(&a->ss, &b->ss, a->len) == 0;
}

/* ---- exported value parsers ---- */

int config_parse_size(const char *s, uint64_t *out)
{
    const char *end;
    uint64_t v = 0, mult = 1;
    int rc = parse_dec(s, &end, &v);

    if (rc == -EINVAL)
        return rc;
    switch (tolower((unsigned char)*end)) {
    case 'k':
        mult = (uint64_t)1 << 10;
        end++;
        break;
    case 'm':
        mult = (uint64_t)1 << 20;
        end++;
        break;
    case 'g':
        mult = (uint64_t)1 << 30;
        end++;
        break;
    case 't':
        mult = (uint64_t)1 << 40;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0')
        return -EINVAL;
    if (rc == -ERANGE || v > UINT64_MAX / mult)
        return -ERANGE;
    *out = v * mult;
    return 0;
}

int config_parse_duration(const char *s, uint64_t *out_ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"", 1000},       {"ms", 1},          {"s", 1000},
                 {"m", 60 * 1000}, {"h", 3600 * 1000}, {"d", 86400 * 1000}};
    const char *end;
    uint64_t v = 0;
    int rc = parse_dec(s, &end, &v);

    if (rc == -EINVAL)
        return rc;
    for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
        if (strcasecmp(end, units[i].unit) != 0)
            continue;
        if (rc == -ERANGE || v > UINT64_MAX / units[i].ms)
            return -ERANGE;
        *out_ms = v * units[i].ms;
        return 0;
    }
    return -EINVAL;
}

int config_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};

    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

int config_parse_addr(const char *s, struct cfg_addr *out)
{
    char host[INET6_ADDRSTRLEN];
    const char *port;
    size_t hlen;
    uint16_t p;

    memset(out, 0, sizeof(*out));
    if (strlen(s) >= sizeof(out->text))
        return -EINVAL;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -EINVAL;
        hlen = (size_t)(close - s - 1);
        port = close + 2;
        if (hlen == 0 || hlen >= sizeof(host))
            return -EINVAL;
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        if (parse_port(port, &p) != 0)
            return -EINVAL;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)&out->ss;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
            return -EINVAL;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(p);
        out->len = sizeof(*sin6);
    } else {
        const char *colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL)
            return -EINVAL;
        hlen = (size_t)(colon - s);
        port = colon + 1;
        if (hlen == 0 || hlen >= sizeof(host))
            return -EINVAL;
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        if (parse_port(port, &p) != 0)
            return -EINVAL;
        struct sockaddr_in *sin = (struct sockaddr_in *)(void *)&out->ss;
        if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
            return -EINVAL;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(p);
        out->len = sizeof(*sin);
    }
    snprintf(out->text, sizeof(out->text), "%s", s);
    return 0;
}

/* default_port 0 means the port is required. */
int config_parse_hostport(const char *s, uint16_t default_port, struct cfg_hostport *out)
{
    const char *port = NULL;
    size_t hlen;

    memset(out, 0, sizeof(*out));
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        struct in6_addr a6;
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return -EINVAL;
        hlen = (size_t)(close - s - 1);
        if (hlen == 0 || hlen >= sizeof(out->host))
            return -EINVAL;
        memcpy(out->host, s + 1, hlen);
        out->host[hlen] = '\0';
        if (inet_pton(AF_INET6, out->host, &a6) != 1)
            return -EINVAL;
        if (close[1] == ':')
            port = close + 2;
    } else {
        const char *colon = strchr(s, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL)
            return -EINVAL; /* a bare IPv6 address: must be bracketed */
        hlen = colon != NULL ? (size_t)(colon - s) : strlen(s);
        if (hlen == 0 || hlen >= sizeof(out->host))
            return -EINVAL;
        memcpy(out->host, s, hlen);
        out->host[hlen] = '\0';
        if (!is_host_name(out->host))
            return -EINVAL;
        if (colon != NULL)
            port = colon + 1;
    }
    if (port != NULL)
        return parse_port(port, &out->port);
    if (default_port == 0)
        return -EINVAL;
    out->port = default_port;
    return 0;
}

/* ---- key parsers (cfg_parse_fn) ---- */

static int parse_uint(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                      char *msg, size_t msglen)
{
    const char *end;
    uint64_t v = 0;
    int rc = parse_dec(val, &end, &v);

    (void)append;
    if (rc == -EINVAL || *end != '\0')
        return bad(msg, msglen, "'%s' is not a whole number", val);
    if (rc == -ERANGE || v < key->min || v > key->max)
        return bad(msg, msglen, "%s is out of range %" PRIu64 "..%" PRIu64, val, key->min,
                   key->max);
    *(unsigned *)field(cfg, key->off) = (unsigned)v;
    return 0;
}

static int parse_duration(struct config *cfg, const struct cfg_key *key, const char *val,
                          bool append, char *msg, size_t msglen)
{
    uint64_t ms = 0;
    int rc = config_parse_duration(val, &ms);

    (void)append;
    if (rc == -ERANGE)
        return bad(msg, msglen, "'%s' is too large", val);
    if (rc != 0)
        return bad(msg, msglen,
                   "'%s' is not a duration (a number with an optional unit ms, s, m, h or d; "
                   "bare = seconds)",
                   val);
    if (ms < key->min)
        return bad(msg, msglen, "must be greater than 0");
    *(uint64_t *)field(cfg, key->off) = ms;
    return 0;
}

static int size_value(const char *val, uint64_t *out, char *msg, size_t msglen)
{
    int rc = config_parse_size(val, out);

    if (rc == -ERANGE)
        return bad(msg, msglen, "'%s' is too large", val);
    if (rc != 0)
        return bad(msg, msglen,
                   "'%s' is not a size (a number with an optional suffix K, M, G or T)", val);
    return 0;
}

static int parse_size(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                      char *msg, size_t msglen)
{
    uint64_t v = 0;

    (void)append;
    if (size_value(val, &v, msg, msglen) != 0)
        return -1;
    if (v < key->min)
        return bad(msg, msglen, "must be greater than 0");
    if (key->max != 0 && v > key->max) {
        char m[32];
        fmt_size(key->max, m, sizeof(m));
        return bad(msg, msglen, "must be at most %s", m);
    }
    *(uint64_t *)field(cfg, key->off) = v;
    return 0;
}

static int parse_chunk(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                       char *msg, size_t msglen)
{
    uint64_t v = 0;

    (void)append;
    if (size_value(val, &v, msg, msglen) != 0)
        return -1;
    if (v < ((uint64_t)4 << 10) || v > ((uint64_t)64 << 20) || (v & (v - 1)) != 0)
        return bad(msg, msglen, "'%s' must be a power of two between 4K and 64M", val);
    *(uint64_t *)field(cfg, key->off) = v;
    return 0;
}

static int parse_bool(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                      char *msg, size_t msglen)
{
    (void)append;
    if (config_parse_bool(val, field(cfg, key->off)) != 0)
        return bad(msg, msglen, "'%s' is not a boolean (yes/no, true/false, on/off, 1/0)", val);
    return 0;
}

static int parse_steam_ua(struct config *cfg, const struct cfg_key *key, const char *val,
                          bool append, char *msg, size_t msglen)
{
    bool on = false;

    (void)key;
    (void)append;
    if (strcasecmp(val, "any") == 0) {
        cfg->steam_user_agent = CFG_STEAM_UA_ANY;
        return 0;
    }
    if (config_parse_bool(val, &on) != 0)
        return bad(msg, msglen, "'%s' is not yes, no or any", val);
    cfg->steam_user_agent = on ? CFG_STEAM_UA_YES : CFG_STEAM_UA_NO;
    return 0;
}

/*
 * A steam_hosts entry: a host name of at least two labels, or "*." and one (subdomains only).
 * Lowercased in place, one trailing dot removed. Returns NULL or why it is refused.
 */
static const char *steam_host_check(char *tok)
{
    size_t len = strlen(tok);
    const char *name = tok;

    if (len > 0 && tok[len - 1] == '.')
        tok[--len] = '\0';
    for (char *p = tok; *p != '\0'; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strncmp(tok, "*.", 2) == 0)
        name += 2;
    if (!is_host_name(name) || strchr(name, '*') != NULL || name[strlen(name) - 1] == '-')
        return "is not a host name or \"*.\" and a host name";
    if (strchr(name, '.') == NULL)
        return name == tok ? "needs at least two labels (a host name, not a top-level domain)"
                           : "would cover a whole top-level domain";
    return NULL;
}

static int parse_steam_hosts(struct config *cfg, const struct cfg_key *key, const char *val,
                             bool append, char *msg, size_t msglen)
{
    char tok[CONFIG_TOKEN_MAX];
    const char *p = val;
    const char *why;
    int rc;

    (void)key;
    if (!append) {
        for (size_t i = 0; i < cfg->n_steam_hosts; i++)
            free(cfg->steam_hosts[i]);
        cfg->n_steam_hosts = 0;
    }
    while ((rc = next_token(&p, tok, sizeof(tok))) != 0) {
        if (rc < 0)
            return bad(msg, msglen, "'%s...' is too long", tok);
        char as_given[CONFIG_TOKEN_MAX];
        memcpy(as_given, tok, sizeof(as_given));
        if ((why = steam_host_check(tok)) != NULL)
            return bad(msg, msglen, "'%s' %s", as_given, why);
        bool dup = false;
        for (size_t i = 0; i < cfg->n_steam_hosts && !dup; i++)
            dup = strcmp(cfg->steam_hosts[i], tok) == 0;
        if (dup)
            continue;
        if (cfg->n_steam_hosts == CONFIG_MAX_STEAM_HOSTS)
            return bad(msg, msglen, "too many host names (at most %d)", CONFIG_MAX_STEAM_HOSTS);
        cfg->steam_hosts[cfg->n_steam_hosts++] = xstrdup(tok);
    }
    return 0;
}

static int addr_error(const char *tok, char *msg, size_t msglen)
{
    return bad(msg, msglen,
               "'%s' is not a numeric address with a port 1..65535 (a.b.c.d:port or "
               "[v6]:port; names are not allowed)",
               tok);
}

static int parse_addr_list(struct config *cfg, const struct cfg_key *key, const char *val,
                           bool append, char *msg, size_t msglen)
{
    struct cfg_addr *arr = field(cfg, key->off);
    size_t *n = field(cfg, key->off2);
    char tok[CONFIG_TOKEN_MAX];
    const char *p = val;
    int rc;

    if (!append)
        *n = 0;
    while ((rc = next_token(&p, tok, sizeof(tok))) != 0) {
        struct cfg_addr a;
        if (rc < 0 || config_parse_addr(tok, &a) != 0)
            return addr_error(tok, msg, msglen);
        for (size_t i = 0; i < *n; i++) {
            if (addr_equal(&arr[i], &a))
                return bad(msg, msglen, "'%s' is listed twice", tok);
        }
        if (*n == CONFIG_MAX_ADDRS)
            return bad(msg, msglen, "too many addresses (at most %d)", CONFIG_MAX_ADDRS);
        arr[(*n)++] = a;
    }
    return 0;
}

static int parse_addr_opt(struct config *cfg, const struct cfg_key *key, const char *val,
                          bool append, char *msg, size_t msglen)
{
    bool *has = field(cfg, key->off2);

    (void)append;
    *has = false;
    if (val[0] == '\0')
        return 0;
    if (config_parse_addr(val, field(cfg, key->off)) != 0)
        return addr_error(val, msg, msglen);
    *has = true;
    return 0;
}

static int parse_hostname(struct config *cfg, const struct cfg_key *key, const char *val,
                          bool append, char *msg, size_t msglen)
{
    (void)key;
    (void)append;
    if (val[0] != '\0') {
        if (!is_host_name(val))
            return bad(msg, msglen, "'%s' is not a host name (letters, digits, '-', '_' and dots)",
                       val);
        snprintf(cfg->hostname, sizeof(cfg->hostname), "%s", val);
        return 0;
    }
    if (gethostname(cfg->hostname, sizeof(cfg->hostname)) != 0)
        cfg->hostname[0] = '\0';
    cfg->hostname[sizeof(cfg->hostname) - 1] = '\0';
    if (!is_host_name(cfg->hostname))
        snprintf(cfg->hostname, sizeof(cfg->hostname), "cacheparty");
    return 0;
}

static int parse_admin_token(struct config *cfg, const struct cfg_key *key, const char *val,
                             bool append, char *msg, size_t msglen)
{
    (void)key;
    (void)append;
    size_t n = strlen(val);
    if (n == 0) {
        cfg->admin_token[0] = '\0';
        return 0;
    }
    if (n < CONFIG_ADMIN_TOKEN_MIN || n > CONFIG_ADMIN_TOKEN_MAX)
        return bad(msg, msglen,
                   "a token of %zu characters: %d to %d are needed (try: head -c 24 "
                   "/dev/urandom | base64)",
                   n, CONFIG_ADMIN_TOKEN_MIN, CONFIG_ADMIN_TOKEN_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)val[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == ',' || ch == ';' || ch == '\\')
            return bad(msg, msglen,
                       "character %zu of the token is not allowed (visible ASCII, not '\"', "
                       "',', ';' or '\\')",
                       i + 1);
    }
    memcpy(cfg->admin_token, val, n + 1);
    return 0;
}

static int parse_admin_names(struct config *cfg, const struct cfg_key *key, const char *val,
                             bool append, char *msg, size_t msglen)
{
    char tok[CONFIG_TOKEN_MAX];
    const char *p = val;
    int rc;

    (void)key;
    if (!append) {
        for (size_t i = 0; i < cfg->n_admin_names; i++)
            free(cfg->admin_names[i]);
        cfg->n_admin_names = 0;
    }
    while ((rc = next_token(&p, tok, sizeof(tok))) != 0) {
        if (rc < 0)
            return bad(msg, msglen, "'%s...' is too long", tok);
        if (!is_host_name(tok))
            return bad(msg, msglen,
                       "'%s' is not a host name (letters, digits, '-', '_' and dots; no port)",
                       tok);
        for (char *c = tok; *c != '\0'; c++)
            *c = (char)tolower((unsigned char)*c);
        size_t tl = strlen(tok);
        if (tl > 1 && tok[tl - 1] == '.') /* the absolute form names the same host */
            tok[tl - 1] = '\0';
        bool dup = false;
        for (size_t i = 0; i < cfg->n_admin_names && !dup; i++)
            dup = strcmp(cfg->admin_names[i], tok) == 0;
        if (dup)
            continue;
        if (cfg->n_admin_names == CONFIG_MAX_ADMIN_NAMES)
            return bad(msg, msglen, "too many names (at most %d)", CONFIG_MAX_ADMIN_NAMES);
        cfg->admin_names[cfg->n_admin_names++] = xstrdup(tok);
    }
    return 0;
}

static int parse_dns(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                     char *msg, size_t msglen)
{
    char tok[CONFIG_TOKEN_MAX];
    const char *p = val;
    int rc;

    (void)key;
    if (!append) {
        cfg->n_dns = 0;
        cfg->dns_system = false;
    }
    while ((rc = next_token(&p, tok, sizeof(tok))) != 0) {
        struct cfg_hostport hp;
        unsigned char buf[sizeof(struct in6_addr)];
        if (rc > 0 && strcasecmp(tok, "system") == 0) {
            if (cfg->dns_system || cfg->n_dns > 0)
                return bad(msg, msglen, "'system' must be the only value");
            cfg->dns_system = true;
            continue;
        }
        if (cfg->dns_system)
            return bad(msg, msglen, "'system' must be the only value");
        if (rc < 0 || config_parse_hostport(tok, 53, &hp) != 0 ||
            inet_pton(strchr(hp.host, ':') != NULL ? AF_INET6 : AF_INET, hp.host, buf) != 1)
            return bad(msg, msglen,
                       "'%s' is not a numeric resolver address (a.b.c.d[:port] or "
                       "[v6][:port]) or 'system'",
                       tok);
        if (cfg->n_dns == CONFIG_MAX_ADDRS)
            return bad(msg, msglen, "too many resolvers (at most %d)", CONFIG_MAX_ADDRS);
        cfg->dns[cfg->n_dns++] = hp;
    }
    if (!cfg->dns_system && cfg->n_dns == 0)
        return bad(msg, msglen, "empty: give resolver addresses or 'system'");
    return 0;
}

static int parse_hostport_opt(struct config *cfg, const struct cfg_key *key, const char *val,
                              bool append, char *msg, size_t msglen)
{
    bool *has = field(cfg, key->off2);

    (void)append;
    *has = false;
    if (val[0] == '\0')
        return 0;
    if (config_parse_hostport(val, (uint16_t)key->min, field(cfg, key->off)) != 0)
        return bad(msg, msglen,
                   "'%s' is not host[:port] (a name, a.b.c.d or [v6]; port 1..65535, "
                   "default %" PRIu64 ")",
                   val, key->min);
    *has = true;
    return 0;
}

/* A list of directories: char *[CONFIG_MAX_DIRS] at key->off, its count (size_t) at key->off2. */
static int parse_dirs(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                      char *msg, size_t msglen)
{
    char tok[CONFIG_TOKEN_MAX];
    const char *p = val;
    char **dirs = field(cfg, key->off);
    size_t *n = field(cfg, key->off2);
    int rc;

    if (!append) {
        for (size_t i = 0; i < *n; i++) {
            free(dirs[i]);
            dirs[i] = NULL;
        }
        *n = 0;
    }
    while ((rc = next_token(&p, tok, sizeof(tok))) != 0) {
        if (rc < 0)
            return bad(msg, msglen, "'%s...' is too long", tok);
        for (size_t i = 0; i < *n; i++) {
            if (strcmp(dirs[i], tok) == 0)
                return bad(msg, msglen, "'%s' is listed twice", tok);
        }
        if (*n == CONFIG_MAX_DIRS)
            return bad(msg, msglen, "too many directories (at most %d)", CONFIG_MAX_DIRS);
        dirs[(*n)++] = xstrdup(tok);
    }
    return 0;
}

static int parse_migrate(struct config *cfg, const struct cfg_key *key, const char *val,
                         bool append, char *msg, size_t msglen)
{
    static const char *const names[] = {"off", "copy", "move"};
    (void)key;
    (void)append;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (strcasecmp(val, names[i]) == 0) {
            cfg->lancache_migrate = (enum cfg_migrate)i;
            return 0;
        }
    return bad(msg, msglen, "'%s' is not move, copy or off", val);
}

static int parse_path_opt(struct config *cfg, const struct cfg_key *key, const char *val,
                          bool append, char *msg, size_t msglen)
{
    char **dst = field(cfg, key->off);

    (void)append;
    (void)msg;
    (void)msglen;
    free(*dst);
    *dst = val[0] != '\0' ? xstrdup(val) : NULL;
    return 0;
}

/* The [cluster] strings, checked together once the file is read (check_whole). */
static int parse_cluster(struct config *cfg, const struct cfg_key *key, const char *val,
                         bool append, char *msg, size_t msglen)
{
    return parse_path_opt(cfg, key, val, append, msg, msglen);
}

static int parse_path(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                      char *msg, size_t msglen)
{
    char **dst = field(cfg, key->off);

    (void)append;
    if (val[0] == '\0')
        return bad(msg, msglen, "empty: use - for stderr, or a file path");
    free(*dst);
    *dst = xstrdup(val);
    return 0;
}

static int parse_level(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                       char *msg, size_t msglen)
{
    static const char *const names[] = {[CFG_LOG_ERROR] = "error",
                                        [CFG_LOG_WARN] = "warn",
                                        [CFG_LOG_INFO] = "info",
                                        [CFG_LOG_DEBUG] = "debug"};

    (void)key;
    (void)append;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (strcasecmp(val, names[i]) == 0) {
            cfg->level = (enum cfg_log_level)i;
            return 0;
        }
    }
    return bad(msg, msglen, "'%s' is not one of error, warn, info, debug", val);
}

static int parse_format(struct config *cfg, const struct cfg_key *key, const char *val, bool append,
                        char *msg, size_t msglen)
{
    (void)key;
    (void)append;
    if (strcasecmp(val, "cachelog") == 0)
        cfg->access_format = CFG_ACCESS_CACHELOG;
    else if (strcasecmp(val, "json") == 0)
        cfg->access_format = CFG_ACCESS_JSON;
    else
        return bad(msg, msglen, "'%s' is not one of cachelog, json", val);
    return 0;
}

/* ---- loading ---- */

static size_t find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
        if (strcasecmp(cfg_keys[i].section, section) == 0 &&
            strcasecmp(cfg_keys[i].name, name) == 0)
            return i;
    }
    return ARRAY_SIZE(cfg_keys);
}

static bool is_section(const char *section)
{
    for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
        if (strcasecmp(cfg_keys[i].section, section) == 0)
            return true;
    }
    return false;
}

/* ini_reader: hands inih one physical line per call and counts them. */
static char *read_line(char *str, int num, void *stream)
{
    struct load_ctx *ctx = stream;
    const char *nl;
    size_t len;

    ASSERT(num > 1);
    if (*ctx->pos == '\0')
        return NULL;
    nl = strchr(ctx->pos, '\n');
    len = nl != NULL ? (size_t)(nl - ctx->pos) : strlen(ctx->pos);
    ctx->line++;
    if (len > (size_t)num - 1) {
        fail_at(ctx, ctx->line,
                "line too long (more than %d characters); continue a list on indented lines",
                num - 1);
        str[0] = '\0'; /* inih sees a blank line */
    } else {
        memcpy(str, ctx->pos, len);
        str[len] = '\0';
    }
    ctx->pos += len + (nl != NULL ? 1 : 0);
    return str;
}

/* ini_handler: one call per key line and per continuation line. Returns 0 on error. */
static int on_ini_key(void *user, const char *section, const char *name, const char *value)
{
    struct load_ctx *ctx = user;
    char msg[CONFIG_MSG_MAX];
    size_t k;
    const struct cfg_key *key;

    if (ctx->failed)
        return 1; /* the first error is the one reported */
    if (strcasecmp(section, "rules") == 0) {
        if (config_rule_set(ctx->cfg, name, value, ctx->line, msg, sizeof(msg)) != 0) {
            fail_at(ctx, ctx->line, "[rules] %s", msg);
            return 0;
        }
        return 1;
    }
    k = find_key(section, name);
    if (k == ARRAY_SIZE(cfg_keys)) {
        fail_at(ctx, ctx->line, "unknown key '%s' in section [%s]%s", name, section,
                section[0] == '\0'    ? " (keys must follow a [section] header)"
                : is_section(section) ? ""
                                      : " (no such section)");
        return 0;
    }
    key = &cfg_keys[k];
    if (ctx->line_of[k] != 0 && !key->list) {
        fail_at(ctx, ctx->line,
                "[%s] %s: already set on line %d (only list keys may repeat or continue on "
                "indented lines)",
                key->section, key->name, ctx->line_of[k]);
        return 0;
    }
    if (key->parse(ctx->cfg, key, value, ctx->line_of[k] != 0, msg, sizeof(msg)) != 0) {
        fail_at(ctx, ctx->line, "[%s] %s: %s", key->section, key->name, msg);
        return 0;
    }
    if (ctx->line_of[k] == 0)
        ctx->line_of[k] = ctx->line;
    return 1;
}

static void apply_defaults(struct config *cfg)
{
    char msg[CONFIG_MSG_MAX];

    config_rules_defaults(cfg);
    for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
        int rc = cfg_keys[i].parse(cfg, &cfg_keys[i], cfg_keys[i].def, false, msg, sizeof(msg));
        ASSERT(rc == 0);
    }
}

/* The line where a key was set, or 0 when it kept its default. */
static int line_of(const struct load_ctx *ctx, const char *section, const char *name)
{
    size_t k = find_key(section, name);

    ASSERT(k < ARRAY_SIZE(cfg_keys));
    return ctx->line_of[k];
}

static bool addr_in(const struct cfg_addr *a, const struct cfg_addr *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (addr_equal(a, &list[i]))
            return true;
    }
    return false;
}

/* Whether [server] listen has <sa>'s port on its address or on a wildcard one of its family. */
static bool listens_on(const struct config *cfg, const struct sockaddr_storage *sa)
{
    for (size_t i = 0; i < cfg->n_listen; i++) {
        const struct sockaddr_storage *l = &cfg->listen[i].ss;
        if (l->ss_family == AF_INET && sa->ss_family == AF_INET) {
            const struct sockaddr_in *x = (const void *)l, *y = (const void *)sa;
            if (x->sin_port == y->sin_port && (x->sin_addr.s_addr == htonl(INADDR_ANY) ||
                                               x->sin_addr.s_addr == y->sin_addr.s_addr))
                return true;
        } else if (l->ss_family == AF_INET6) {
            const struct sockaddr_in6 *x = (const void *)l;
            bool any = IN6_IS_ADDR_UNSPECIFIED(&x->sin6_addr);
            if (sa->ss_family == AF_INET6) {
                const struct sockaddr_in6 *y = (const void *)sa;
                if (x->sin6_port == y->sin6_port &&
                    (any || memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(y->sin6_addr)) == 0))
                    return true;
            }
        }
    }
    return false;
}

/* [cluster]: the three keys together, and self among the listen addresses. */
static void check_cluster(struct load_ctx *ctx)
{
    struct config *cfg = ctx->cfg;
    cfg->has_cluster = false;
    if (cfg->cluster_nodes == NULL) {
        if (cfg->cluster_self != NULL || cfg->cluster_secret != NULL)
            fail_at(ctx, line_of(ctx, "cluster", cfg->cluster_self != NULL ? "self" : "secret"),
                    "[cluster] nodes is empty: self and secret are for a cluster (set nodes, or "
                    "remove them)");
        return;
    }
    char err[CONFIG_MSG_MAX];
    if (cluster_parse(&cfg->cluster, cfg->cluster_nodes, cfg->cluster_self, cfg->cluster_secret,
                      err, sizeof(err)) < 0) {
        const char *key = strncmp(err, "[cluster] self", 14) == 0     ? "self"
                          : strncmp(err, "[cluster] secret", 16) == 0 ? "secret"
                                                                      : "nodes";
        int line = line_of(ctx, "cluster", key);
        fail_at(ctx, line != 0 ? line : line_of(ctx, "cluster", "nodes"), "%s", err);
        return;
    }
    const struct cluster_node *me = &cfg->cluster.nodes[cfg->cluster.self];
    if (!listens_on(cfg, &me->sa)) {
        fail_at(ctx, line_of(ctx, "cluster", "self"),
                "[cluster] self: %s is not one of [server] listen (the other nodes connect to it)",
                me->addr);
        return;
    }
    cfg->has_cluster = true;
}

/* Checks that involve several keys or the absence of one. */
static void check_whole(struct load_ctx *ctx)
{
    const struct config *cfg = ctx->cfg;
    char a[32], b[32];

    if (cfg->n_listen == 0)
        fail_at(ctx, line_of(ctx, "server", "listen"),
                "[server] listen: at least one address is required");
    if (cfg->has_admin && !util_addr_is_loopback(&cfg->admin_listen.ss) &&
        cfg->admin_token[0] == '\0')
        fail_at(ctx, line_of(ctx, "server", "admin_listen"),
                "[server] admin_listen: %s is not a loopback address: set [server] admin_token "
                "(every request off loopback then needs it) or listen on 127.0.0.1",
                cfg->admin_listen.text);
    if (cfg->has_admin && addr_in(&cfg->admin_listen, cfg->listen, cfg->n_listen))
        fail_at(ctx, line_of(ctx, "server", "admin_listen"),
                "[server] admin_listen: %s is also a listen address", cfg->admin_listen.text);
    if (cfg->has_admin && addr_in(&cfg->admin_listen, cfg->tls_listen, cfg->n_tls_listen))
        fail_at(ctx, line_of(ctx, "server", "admin_listen"),
                "[server] admin_listen: %s is also a passthrough_listen address",
                cfg->admin_listen.text);
    for (size_t i = 0; i < cfg->n_tls_listen; i++) {
        if (addr_in(&cfg->tls_listen[i], cfg->listen, cfg->n_listen))
            fail_at(ctx, line_of(ctx, "tls", "passthrough_listen"),
                    "[tls] passthrough_listen: %s is also a listen address",
                    cfg->tls_listen[i].text);
    }
    if (cfg->n_dirs == 0)
        fail_at(ctx, line_of(ctx, "cache", "dir"),
                "[cache] dir: at least one directory is required");
    if (cfg->memory_size / 4 < cfg->chunk_size) {
        int line = line_of(ctx, "cache", "memory_size");
        fmt_size(cfg->memory_size, a, sizeof(a));
        fmt_size(cfg->chunk_size, b, sizeof(b));
        fail_at(ctx, line != 0 ? line : line_of(ctx, "cache", "chunk_size"),
                "[cache] memory_size: %s is less than 4 x chunk_size (%s)", a, b);
    }
    if (cfg->disk_size < cfg->chunk_size) {
        int line = line_of(ctx, "cache", "disk_size");
        fmt_size(cfg->disk_size, a, sizeof(a));
        fmt_size(cfg->chunk_size, b, sizeof(b));
        fail_at(ctx, line != 0 ? line : line_of(ctx, "cache", "chunk_size"),
                "[cache] disk_size: %s is less than chunk_size (%s)", a, b);
    }
    if (cfg->n_lancache_dirs > 0 && cfg->lancache_slice_size != cfg->chunk_size) {
        int line = line_of(ctx, "cache", "lancache_slice_size");
        fmt_size(cfg->lancache_slice_size, a, sizeof(a));
        fmt_size(cfg->chunk_size, b, sizeof(b));
        fail_at(ctx, line != 0 ? line : line_of(ctx, "cache", "lancache_dir"),
                "[cache] lancache_slice_size: lancache's slices (%s, its CACHE_SLICE_SIZE) must be "
                "the chunk_size (%s): set chunk_size = %s to serve that cache",
                a, b, a);
    }
    for (size_t i = 0; i < cfg->n_lancache_dirs; i++)
        for (size_t j = 0; j < cfg->n_dirs; j++)
            if (strcmp(cfg->lancache_dirs[i], cfg->dirs[j]) == 0)
                fail_at(ctx, line_of(ctx, "cache", "lancache_dir"),
                        "[cache] lancache_dir: %s is also a cache dir", cfg->dirs[j]);
}

/* The text of line <n> (1-based) starts with '[' after blanks: a broken section header. */
static bool line_is_section(const char *text, int n)
{
    const char *p = text;

    for (int i = 1; i < n && p != NULL; i++) {
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    if (p == NULL)
        return false;
    while (*p == ' ' || *p == '\t')
        p++;
    return *p == '[';
}

static void set_err(char *err, size_t errlen, const char *name, int line, const char *msg)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s:%d: %s", name, line, msg);
}

static int load_text(const char *name, const char *text, struct config **out, char *err,
                     size_t errlen)
{
    struct load_ctx ctx;
    int rc;

    memset(&ctx, 0, sizeof(ctx));
    ctx.name = name;
    ctx.text = text;
    ctx.pos = text;
    ctx.cfg = xcalloc(1, sizeof(*ctx.cfg));
    ctx.cfg->path = xstrdup(name);
    apply_defaults(ctx.cfg);

    rc = ini_parse_stream(read_line, &ctx, on_ini_key, &ctx);
    if (rc < 0) {
        ctx.failed = false;
        fail_at(&ctx, 0, "cannot parse (out of memory)");
    } else if (rc > 0 && (!ctx.failed || rc < ctx.err_line)) {
        /* inih refused a line before any error of ours: a syntax error */
        ctx.failed = false;
        fail_at(&ctx, rc, "%s",
                line_is_section(text, rc) ? "section header without closing ']'"
                                          : "expected '[section]' or 'key = value'");
    }
    if (!ctx.failed)
        check_whole(&ctx);
    if (!ctx.failed)
        check_cluster(&ctx);
    if (ctx.failed) {
        set_err(err, errlen, name, ctx.err_line, ctx.err);
        config_free(&ctx.cfg);
        *out = NULL;
        return -1;
    }
    *out = ctx.cfg;
    return 0;
}

int config_load_string(const char *name, const char *text, struct config **out, char *err,
                       size_t errlen)
{
    ASSERT(name != NULL && text != NULL && out != NULL);
    return load_text(name, text, out, err, errlen);
}

int config_load(const char *path, struct config **out, char *err, size_t errlen)
{
    char msg[CONFIG_MSG_MAX];
    char *buf = NULL;
    size_t len = 0, cap = 0;
    FILE *f;
    int rc;

    ASSERT(path != NULL && out != NULL);
    *out = NULL;
    f = fopen(path, "re");
    if (f == NULL) {
        snprintf(msg, sizeof(msg), "cannot open: %s", strerror(errno));
        set_err(err, errlen, path, 0, msg);
        return -1;
    }
    for (;;) {
        size_t n;
        if (len + 1 >= cap) {
            cap = cap != 0 ? cap * 2 : 4096;
            buf = xrealloc(buf, cap);
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0 || len > CONFIG_FILE_MAX)
            break;
    }
    buf[len] = '\0';
    if (ferror(f))
        snprintf(msg, sizeof(msg), "cannot read: %s", strerror(errno));
    else if (len > CONFIG_FILE_MAX)
        snprintf(msg, sizeof(msg), "file too large (more than %u bytes)", CONFIG_FILE_MAX);
    else if (strlen(buf) != len)
        snprintf(msg, sizeof(msg), "contains a NUL byte");
    else
        msg[0] = '\0';
    fclose(f);
    if (msg[0] != '\0') {
        set_err(err, errlen, path, 0, msg);
        free(buf);
        return -1;
    }
    rc = load_text(path, buf, out, err, errlen);
    free(buf);
    return rc;
}

void config_free(struct config **cfg)
{
    struct config *c;

    if (cfg == NULL || *cfg == NULL)
        return;
    c = *cfg;
    for (size_t i = 0; i < c->n_dirs; i++)
        free(c->dirs[i]);
    for (size_t i = 0; i < c->n_lancache_dirs; i++)
        free(c->lancache_dirs[i]);
    for (size_t i = 0; i < c->n_steam_hosts; i++)
        free(c->steam_hosts[i]);
    for (size_t i = 0; i < c->n_admin_names; i++)
        free(c->admin_names[i]);
    free(c->dashboard_chart_js);
    config_rules_free(c);
    free(c->cache_domains);
    free(c->tls_access);
    free(c->cluster_nodes);
    free(c->cluster_self);
    free(c->cluster_secret);
    free(c->access_log);
    free(c->error_log);
    free(c->path);
    free(c);
    *cfg = NULL;
}

/* ---- reload: keys that cannot change live ---- */

static const void *cfield(const struct config *cfg, size_t off)
{
    return (const char *)cfg + off;
}

/*
 * Keeps in <n> the running value <o> of one key, where the two differ. Returns true when they
 * differed (and <n> now holds the running value). One function per kind of value, found from the
 * key's parser: the ones for generic parsers use the key's .off/.off2, the others the fields
 * their parser writes.
 */
typedef bool cfg_keep_fn(struct config *n, const struct config *o, const struct cfg_key *key);

static bool keep_u64(struct config *n, const struct config *o, const struct cfg_key *key)
{
    uint64_t *dst = field(n, key->off);
    const uint64_t *src = cfield(o, key->off);

    if (*dst == *src)
        return false;
    *dst = *src;
    return true;
}

static bool keep_unsigned(struct config *n, const struct config *o, const struct cfg_key *key)
{
    unsigned *dst = field(n, key->off);
    const unsigned *src = cfield(o, key->off);

    if (*dst == *src)
        return false;
    *dst = *src;
    return true;
}

static bool keep_bool(struct config *n, const struct config *o, const struct cfg_key *key)
{
    bool *dst = field(n, key->off);
    const bool *src = cfield(o, key->off);

    if (*dst == *src)
        return false;
    *dst = *src;
    return true;
}

/* Address lists compare by the text of each address, in order. */
static bool keep_addr_list(struct config *n, const struct config *o, const struct cfg_key *key)
{
    struct cfg_addr *dst = field(n, key->off);
    const struct cfg_addr *src = cfield(o, key->off);
    size_t *nd = field(n, key->off2);
    const size_t *ns = cfield(o, key->off2);
    bool same = *nd == *ns;

    for (size_t i = 0; same && i < *nd; i++)
        same = strcmp(dst[i].text, src[i].text) == 0;
    if (same)
        return false;
    memcpy(dst, src, sizeof(*dst) * CONFIG_MAX_ADDRS);
    *nd = *ns;
    return true;
}

static bool keep_addr_opt(struct config *n, const struct config *o, const struct cfg_key *key)
{
    struct cfg_addr *dst = field(n, key->off);
    const struct cfg_addr *src = cfield(o, key->off);
    bool *hd = field(n, key->off2);
    const bool *hs = cfield(o, key->off2);

    if (*hd == *hs && (!*hd || strcmp(dst->text, src->text) == 0))
        return false;
    *hd = *hs;
    *dst = *src;
    return true;
}

static bool keep_hostport_opt(struct config *n, const struct config *o, const struct cfg_key *key)
{
    struct cfg_hostport *dst = field(n, key->off);
    const struct cfg_hostport *src = cfield(o, key->off);
    bool *hd = field(n, key->off2);
    const bool *hs = cfield(o, key->off2);

    if (*hd == *hs && (!*hd || (strcmp(dst->host, src->host) == 0 && dst->port == src->port)))
        return false;
    *hd = *hs;
    *dst = *src;
    return true;
}

static bool keep_dirs(struct config *n, const struct config *o, const struct cfg_key *key)
{
    char **nd = field(n, key->off);
    size_t *nn = field(n, key->off2);
    char *const *od = cfield(o, key->off);
    const size_t *on = cfield(o, key->off2);
    bool same = *nn == *on;

    for (size_t i = 0; same && i < *nn; i++)
        same = strcmp(nd[i], od[i]) == 0;
    if (same)
        return false;
    for (size_t i = 0; i < *nn; i++) {
        free(nd[i]);
        nd[i] = NULL;
    }
    for (size_t i = 0; i < *on; i++)
        nd[i] = xstrdup(od[i]);
    *nn = *on;
    return true;
}

static bool keep_dns(struct config *n, const struct config *o, const struct cfg_key *key)
{
    (void)key;
    if (n->dns_system == o->dns_system && n->n_dns == o->n_dns &&
        memcmp(n->dns, o->dns, sizeof(n->dns[0]) * n->n_dns) == 0)
        return false;
    n->dns_system = o->dns_system;
    memcpy(n->dns, o->dns, sizeof(n->dns));
    n->n_dns = o->n_dns;
    return true;
}

/* Strings that may be NULL (path keys). */
static bool keep_path(struct config *n, const struct config *o, const struct cfg_key *key)
{
    char **dst = field(n, key->off);
    char *const *src = cfield(o, key->off);

    if ((*dst == NULL && *src == NULL) || (*dst != NULL && *src != NULL && strcmp(*dst, *src) == 0))
        return false;
    free(*dst);
    *dst = *src != NULL ? xstrdup(*src) : NULL;
    return true;
}

/* A [cluster] string, and with it the cluster parsed from the running three. */
static bool keep_cluster(struct config *n, const struct config *o, const struct cfg_key *key)
{
    bool changed = keep_path(n, o, key);
    n->has_cluster = o->has_cluster;
    n->cluster = o->cluster;
    return changed;
}

static cfg_keep_fn *keep_fn_of(const struct cfg_key *key)
{
    static const struct {
        cfg_parse_fn *parse;
        cfg_keep_fn *keep;
    } kinds[] = {
        {parse_uint, keep_unsigned},     {parse_duration, keep_u64},
        {parse_size, keep_u64},          {parse_chunk, keep_u64},
        {parse_bool, keep_bool},         {parse_addr_list, keep_addr_list},
        {parse_addr_opt, keep_addr_opt}, {parse_hostport_opt, keep_hostport_opt},
        {parse_dirs, keep_dirs},         {parse_dns, keep_dns},
        {parse_path_opt, keep_path},     {parse_path, keep_path},
        {parse_cluster, keep_cluster},
    };

    for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
        if (kinds[i].parse == key->parse)
            return kinds[i].keep;
    }
    WRONG("a key that cannot change live has a parser without a keep function");
}

int config_check_kept(const struct config *cfg, char *err, size_t errlen)
{
    char a[32], b[32];

    /* The rules of validate() that tie a live key to a fixed one (the others only tie fixed keys
     * to each other, which the running snapshot already satisfied). */
    if (cfg->memory_size / 4 < cfg->chunk_size) {
        fmt_size(cfg->memory_size, a, sizeof(a));
        fmt_size(cfg->chunk_size, b, sizeof(b));
        snprintf(err, errlen,
                 "[cache] memory_size: %s is less than 4 x the running chunk_size (%s)", a, b);
        return -1;
    }
    if (cfg->disk_size < cfg->chunk_size) {
        fmt_size(cfg->disk_size, a, sizeof(a));
        fmt_size(cfg->chunk_size, b, sizeof(b));
        snprintf(err, errlen, "[cache] disk_size: %s is less than the running chunk_size (%s)", a,
                 b);
        return -1;
    }
    return 0;
}

unsigned config_keep_fixed(struct config *next, const struct config *cur, config_kept_fn *kept,
                           void *arg)
{
    unsigned n = 0;

    ASSERT(next != NULL && cur != NULL);
    for (size_t i = 0; i < ARRAY_SIZE(cfg_keys); i++) {
        const struct cfg_key *key = &cfg_keys[i];
        if (key->fixed == NULL || !keep_fn_of(key)(next, cur, key))
            continue;
        n++;
        if (kept != NULL)
            kept(key->section, key->name, key->fixed, arg);
    }
    return n;
}

/* Appends printf output to buf[*off..len), never overflowing; *off saturates at len. */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t len, size_t *off,
                                                         const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*off >= len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len - *off)
        *off = len;
    else
        *off += (size_t)n;
}

static void append_hostport(char *buf, size_t len, size_t *off, const struct cfg_hostport *hp,
                            uint16_t default_port)
{
    bool v6 = strchr(hp->host, ':') != NULL;

    append(buf, len, off, v6 ? "[%s]" : "%s", hp->host);
    if (hp->port != default_port)
        append(buf, len, off, ":%u", (unsigned)hp->port);
}

void config_summary(const struct config *cfg, char *buf, size_t len)
{
    char mem[32], chunk[32], disk[32];
    size_t off = 0;

    ASSERT(cfg != NULL && buf != NULL);
    if (len == 0)
        return;
    buf[0] = '\0';
    fmt_size(cfg->memory_size, mem, sizeof(mem));
    fmt_size(cfg->chunk_size, chunk, sizeof(chunk));
    fmt_size(cfg->disk_size, disk, sizeof(disk));
    append(buf, len, &off, "%s: listen", cfg->path);
    for (size_t i = 0; i < cfg->n_listen; i++)
        append(buf, len, &off, " %s", cfg->listen[i].text);
    append(buf, len, &off, ", admin %s", cfg->has_admin ? cfg->admin_listen.text : "off");
    append(buf, len, &off, ", tls");
    for (size_t i = 0; i < cfg->n_tls_listen; i++)
        append(buf, len, &off, " %s", cfg->tls_listen[i].text);
    if (cfg->n_tls_listen == 0)
        append(buf, len, &off, " off");
    append(buf, len, &off, ", %zu cache dir%s, disk %s, memory %s, chunk %s, dns", cfg->n_dirs,
           cfg->n_dirs == 1 ? "" : "s", disk, mem, chunk);
    if (cfg->dns_system)
        append(buf, len, &off, " system");
    for (size_t i = 0; i < cfg->n_dns; i++) {
        append(buf, len, &off, " ");
        append_hostport(buf, len, &off, &cfg->dns[i], 53);
    }
    append(buf, len, &off, ", override ");
    if (cfg->has_override)
        append_hostport(buf, len, &off, &cfg->override, 0);
    else
        append(buf, len, &off, "none");
    if (cfg->has_cluster)
        append(buf, len, &off, "; cluster of %u nodes, self %s", cfg->cluster.n,
               cfg->cluster.nodes[cfg->cluster.self].addr);
}
