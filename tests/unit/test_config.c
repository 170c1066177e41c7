/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_config: the INI grammar of config.c: value parsers, defaults, every key, lists, and the
 * exact "FILE:LINE: message" of each error kind. Also loads the shipped conf/cacheparty.ini and
 * conf/local.ini (tests run from the repository root).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util.h"

#define K ((uint64_t)1 << 10)
#define M ((uint64_t)1 << 20)
#define G ((uint64_t)1 << 30)
#define T ((uint64_t)1 << 40)

/* Loads <text> as "t.ini" and fails the test with the message if it is refused. */
static struct config *load_ok(const char *text)
{
    struct config *cfg = NULL;
    char err[512] = "";

    if (config_load_string("t.ini", text, &cfg, err, sizeof(err)) != 0)
        fail_msg("unexpected config error: %s", err);
    assert_non_null(cfg);
    return cfg;
}

/* Loads <text> as "t.ini" and checks it is refused with exactly <want>. */
static void load_err(const char *text, const char *want)
{
    struct config *cfg = (struct config *)1;
    char err[512] = "";

    assert_int_equal(config_load_string("t.ini", text, &cfg, err, sizeof(err)), -1);
    assert_null(cfg);
    assert_string_equal(err, want);
}

/* ---- value parsers ---- */

static void test_config_parse_size_suffixes(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } cases[] = {
        {"0", 0},
        {"512", 512},
        {"4K", 4 * K},
        {"4k", 4 * K},
        {"4KB", 4 * K},
        {"4kb", 4 * K},
        {"1M", M},
        {"1m", M},
        {"256MB", 256 * M},
        {"10G", 10 * G},
        {"10g", 10 * G},
        {"1000G", 1000 * G},
        {"2T", 2 * T},
        {"2t", 2 * T},
        {"512B", 512},
        {"16777215T", 16777215 * T},
        {"18446744073709551615", UINT64_MAX},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t v = 1;
        assert_int_equal(config_parse_size(cases[i].in, &v), 0);
        assert_true(v == cases[i].want);
    }
}

static void test_config_parse_size_overflow_is_erange(void **state)
{
    uint64_t v = 7;

    (void)state;
    assert_int_equal(config_parse_size("18446744073709551616", &v), -ERANGE);
    assert_int_equal(config_parse_size("16777216T", &v), -ERANGE);
    assert_int_equal(config_parse_size("17179869184G", &v), -ERANGE);
    assert_int_equal(config_parse_size("99999999999999999999999K", &v), -ERANGE);
    assert_true(v == 7);
}

static void test_config_parse_size_invalid_is_einval(void **state)
{
    static const char *const bad[] = {"",    "M",   "-1",  "+1",   "1.5G", "1X",
                                      "1 M", " 1M", "1M ", "1MiB", "1BB",  "0x10"};
    uint64_t v;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        assert_int_equal(config_parse_size(bad[i], &v), -EINVAL);
}

static void test_config_parse_duration_units(void **state)
{
    static const struct {
        const char *in;
        uint64_t want;
    } cases[] = {
        {"0", 0},         {"30", 30000},   {"250ms", 250},
        {"250MS", 250},   {"10s", 10000},  {"10S", 10000},
        {"5m", 300000},   {"2h", 7200000}, {"3650d", 3650ull * 86400000},
        {"1D", 86400000},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint64_t v = 1;
        assert_int_equal(config_parse_duration(cases[i].in, &v), 0);
        assert_true(v == cases[i].want);
    }
}

static void test_config_parse_duration_overflow_is_erange(void **state)
{
    uint64_t v = 7;

    (void)state;
    assert_int_equal(config_parse_duration("18446744073709551616ms", &v), -ERANGE);
    assert_int_equal(config_parse_duration("18446744073709552", &v), -ERANGE);
    assert_int_equal(config_parse_duration("213503982335d", &v), -ERANGE);
    assert_true(v == 7);
    assert_int_equal(config_parse_duration("18446744073709551615ms", &v), 0);
    assert_true(v == UINT64_MAX);
}

static void test_config_parse_duration_invalid_is_einval(void **state)
{
    static const char *const bad[] = {"", "s", "-1s", "1.5s", "10 s", "10x", "10sec", "1h30m"};
    uint64_t v;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        assert_int_equal(config_parse_duration(bad[i], &v), -EINVAL);
}

static void test_config_parse_bool_all_spellings(void **state)
{
    static const char *const yes[] = {"yes", "YES", "true", "True", "on", "ON", "1"};
    static const char *const no[] = {"no", "No", "false", "FALSE", "off", "Off", "0"};
    static const char *const bad[] = {"", "y", "n", "2", "enable", "yes please"};
    bool b;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        b = false;
        assert_int_equal(config_parse_bool(yes[i], &b), 0);
        assert_true(b);
    }
    for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
        b = true;
        assert_int_equal(config_parse_bool(no[i], &b), 0);
        assert_false(b);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        assert_int_equal(config_parse_bool(bad[i], &b), -EINVAL);
}

static void test_config_parse_addr_ipv4(void **state)
{
    struct cfg_addr a;
    const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)&a.ss;

    (void)state;
    assert_int_equal(config_parse_addr("127.0.0.1:8080", &a), 0);
    assert_int_equal(sin->sin_family, AF_INET);
    assert_int_equal(ntohs(sin->sin_port), 8080);
    assert_int_equal(ntohl(sin->sin_addr.s_addr), 0x7f000001);
    assert_int_equal(a.len, sizeof(struct sockaddr_in));
    assert_string_equal(a.text, "127.0.0.1:8080");
    assert_int_equal(config_parse_addr("0.0.0.0:65535", &a), 0);
    assert_int_equal(ntohs(sin->sin_port), 65535);
}

static void test_config_parse_addr_ipv6(void **state)
{
    struct cfg_addr a;
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&a.ss;

    (void)state;
    assert_int_equal(config_parse_addr("[::1]:443", &a), 0);
    assert_int_equal(sin6->sin6_family, AF_INET6);
    assert_int_equal(ntohs(sin6->sin6_port), 443);
    assert_true(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
    assert_int_equal(a.len, sizeof(struct sockaddr_in6));
    assert_string_equal(a.text, "[::1]:443");
    assert_int_equal(config_parse_addr("[2001:db8::1:2]:1", &a), 0);
    assert_int_equal(config_parse_addr("[::ffff:10.0.0.1]:80", &a), 0);
}

static void test_config_parse_addr_invalid_is_einval(void **state)
{
    static const char *const bad[] = {
        "",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "1.2.3:80",
        "1.2.3.256:80",
        "localhost:80",
        "::1:80",
        "[::1]",
        "[::1]80",
        "[1.2.3.4]:80",
        "[]:80",
        "1.2.3.4:80x",
        "1.2.3.4:-1",
        "[::1]:+80",
        " 1.2.3.4:80",
        "010.1.1.1:80",
        "[fe80::1%eth0]:80",
    };
    struct cfg_addr a;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (config_parse_addr(bad[i], &a) != -EINVAL)
            fail_msg("accepted '%s'", bad[i]);
    }
}

static void test_config_parse_hostport_forms(void **state)
{
    struct cfg_hostport hp;

    (void)state;
    assert_int_equal(config_parse_hostport("origin.test", 80, &hp), 0);
    assert_string_equal(hp.host, "origin.test");
    assert_int_equal(hp.port, 80);
    assert_int_equal(config_parse_hostport("origin.test:8080", 80, &hp), 0);
    assert_string_equal(hp.host, "origin.test");
    assert_int_equal(hp.port, 8080);
    assert_int_equal(config_parse_hostport("10.0.0.1", 53, &hp), 0);
    assert_string_equal(hp.host, "10.0.0.1");
    assert_int_equal(hp.port, 53);
    assert_int_equal(config_parse_hostport("[::1]", 443, &hp), 0);
    assert_string_equal(hp.host, "::1");
    assert_int_equal(hp.port, 443);
    assert_int_equal(config_parse_hostport("[2001:db8::5]:5353", 53, &hp), 0);
    assert_string_equal(hp.host, "2001:db8::5");
    assert_int_equal(hp.port, 5353);
    /* default_port 0: the port is required */
    assert_int_equal(config_parse_hostport("a.test", 0, &hp), -EINVAL);
    assert_int_equal(config_parse_hostport("a.test:1", 0, &hp), 0);
}

static void test_config_parse_hostport_invalid_is_einval(void **state)
{
    static const char *const bad[] = {"",        ":80",      "a.test:", "a.test:0", "a.test:99999",
                                      "::1",     "[::1",     "[::1]x",  "[::1]:",   "[]",
                                      "a b",     "a..b",     ".a",      "-a",       "a/b:80",
                                      "[zz]:80", "a.test:8x"};
    struct cfg_hostport hp;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (config_parse_hostport(bad[i], 80, &hp) != -EINVAL)
            fail_msg("accepted '%s'", bad[i]);
    }
}

/* ---- loading: defaults and every key ---- */

static void test_config_load_empty_gives_defaults(void **state)
{
    struct config *cfg = load_ok("; nothing but a comment\n");
    char host[CONFIG_HOST_MAX];

    (void)state;
    assert_string_equal(cfg->path, "t.ini");
    assert_int_equal(cfg->n_listen, 2);
    assert_string_equal(cfg->listen[0].text, "0.0.0.0:80");
    assert_string_equal(cfg->listen[1].text, "[::]:80");
    assert_int_equal(cfg->listen[1].ss.ss_family, AF_INET6);
    assert_true(cfg->has_admin);
    assert_string_equal(cfg->admin_listen.text, "127.0.0.1:8081");
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    assert_string_equal(cfg->hostname, host);
    assert_int_equal(cfg->max_connections, 4096);
    assert_true(cfg->request_timeout_ms == 10000);
    assert_true(cfg->keepalive_timeout_ms == 65000);
    assert_true(cfg->send_timeout_ms == 60000);
    assert_true(cfg->shutdown_timeout_ms == 30000);

    assert_false(cfg->dns_system);
    assert_int_equal(cfg->n_dns, 2);
    assert_string_equal(cfg->dns[0].host, "8.8.8.8");
    assert_int_equal(cfg->dns[0].port, 53);
    assert_string_equal(cfg->dns[1].host, "8.8.4.4");
    assert_int_equal(cfg->dns[1].port, 53);
    assert_false(cfg->has_override);
    assert_true(cfg->connect_timeout_ms == 5000);
    assert_true(cfg->first_byte_timeout_ms == 30000);
    assert_true(cfg->read_timeout_ms == 30000);
    assert_int_equal(cfg->keepalive, 16);
    assert_int_equal(cfg->max_per_origin, 32);
    assert_int_equal(cfg->readahead, 4);
    assert_false(cfg->allow_private);

    assert_int_equal(cfg->n_dirs, 1);
    assert_string_equal(cfg->dirs[0], "/var/cache/cacheparty");
    assert_true(cfg->disk_size == 1000 * G);
    assert_true(cfg->min_free == 10 * G);
    assert_true(cfg->memory_size == 256 * M);
    assert_true(cfg->answers_memory == 4 * M);
    assert_true(cfg->chunk_size == M);
    assert_true(cfg->max_age_ms == 3650ull * 86400000);

    assert_null(cfg->cache_domains);
    assert_false(cfg->allow_unlisted);
    assert_true(cfg->steam_user_agent);

    assert_int_equal(cfg->n_tls_listen, 0);
    assert_true(cfg->handshake_timeout_ms == 10000);
    assert_true(cfg->idle_timeout_ms == 300000);
    assert_false(cfg->has_tls_override);
    assert_null(cfg->tls_access);

    assert_string_equal(cfg->access_log, "/var/log/cacheparty/access.log");
    assert_int_equal(cfg->access_format, CFG_ACCESS_CACHELOG);
    assert_string_equal(cfg->error_log, "-");
    assert_int_equal(cfg->level, CFG_LOG_INFO);
    config_free(&cfg);
    assert_null(cfg);
}

static const char every_key[] = "[server]\n"
                                "listen = 10.1.2.3:8080\n"
                                "admin_listen = [::1]:9000\n"
                                "hostname = cache-01.lan\n"
                                "max_connections = 1000000\n"
                                "request_timeout = 1500ms\n"
                                "keepalive_timeout = 2m\n"
                                "send_timeout = 1h\n"
                                "shutdown_timeout = 0\n"
                                "\n"
                                "[upstream]\n"
                                "dns = 1.1.1.1:5353\n"
                                "override = parent.lan:3128\n"
                                "connect_timeout = 7\n"
                                "first_byte_timeout = 45s\n"
                                "read_timeout = 1d\n"
                                "keepalive = 0\n"
                                "max_per_origin = 1024\n"
                                "readahead = 64\n"
                                "allow_private = yes\n"
                                "\n"
                                "[cache]\n"
                                "dir = /srv/a\n"
                                "disk_size = 2T\n"
                                "min_free = 0\n"
                                "memory_size = 1G\n"
                                "chunk_size = 64M\n"
                                "max_age = 30d\n"
                                "\n"
                                "[domains]\n"
                                "cache_domains = /opt/cache-domains\n"
                                "allow_unlisted = true\n"
                                "steam_user_agent = off\n"
                                "\n"
                                "[tls]\n"
                                "passthrough_listen = 10.1.2.3:443\n"
                                "handshake_timeout = 3s\n"
                                "idle_timeout = 1h\n"
                                "override = 127.0.0.1:4443\n"
                                "access = /var/log/cp/tls.log\n"
                                "\n"
                                "[log]\n"
                                "access = -\n"
                                "access_format = json\n"
                                "error = /var/log/cp/error.log\n"
                                "level = debug\n";

static void test_config_load_every_key_non_default(void **state)
{
    struct config *cfg = load_ok(every_key);

    (void)state;
    assert_int_equal(cfg->n_listen, 1);
    assert_string_equal(cfg->listen[0].text, "10.1.2.3:8080");
    assert_true(cfg->has_admin);
    assert_string_equal(cfg->admin_listen.text, "[::1]:9000");
    assert_int_equal(cfg->admin_listen.ss.ss_family, AF_INET6);
    assert_string_equal(cfg->hostname, "cache-01.lan");
    assert_int_equal(cfg->max_connections, 1000000);
    assert_true(cfg->request_timeout_ms == 1500);
    assert_true(cfg->keepalive_timeout_ms == 120000);
    assert_true(cfg->send_timeout_ms == 3600000);
    assert_true(cfg->shutdown_timeout_ms == 0);

    assert_false(cfg->dns_system);
    assert_int_equal(cfg->n_dns, 1);
    assert_string_equal(cfg->dns[0].host, "1.1.1.1");
    assert_int_equal(cfg->dns[0].port, 5353);
    assert_true(cfg->has_override);
    assert_string_equal(cfg->override.host, "parent.lan");
    assert_int_equal(cfg->override.port, 3128);
    assert_true(cfg->connect_timeout_ms == 7000);
    assert_true(cfg->first_byte_timeout_ms == 45000);
    assert_true(cfg->read_timeout_ms == 86400000);
    assert_int_equal(cfg->keepalive, 0);
    assert_int_equal(cfg->max_per_origin, 1024);
    assert_int_equal(cfg->readahead, 64);
    assert_true(cfg->allow_private);

    assert_int_equal(cfg->n_dirs, 1);
    assert_string_equal(cfg->dirs[0], "/srv/a");
    assert_true(cfg->disk_size == 2 * T);
    assert_true(cfg->min_free == 0);
    assert_true(cfg->memory_size == G);
    assert_true(cfg->chunk_size == 64 * M);
    assert_true(cfg->max_age_ms == 30ull * 86400000);

    assert_string_equal(cfg->cache_domains, "/opt/cache-domains");
    assert_true(cfg->allow_unlisted);
    assert_false(cfg->steam_user_agent);

    assert_int_equal(cfg->n_tls_listen, 1);
    assert_string_equal(cfg->tls_listen[0].text, "10.1.2.3:443");
    assert_true(cfg->handshake_timeout_ms == 3000);
    assert_true(cfg->idle_timeout_ms == 3600000);
    assert_true(cfg->has_tls_override);
    assert_string_equal(cfg->tls_override.host, "127.0.0.1");
    assert_int_equal(cfg->tls_override.port, 4443);
    assert_string_equal(cfg->tls_access, "/var/log/cp/tls.log");

    assert_string_equal(cfg->access_log, "-");
    assert_int_equal(cfg->access_format, CFG_ACCESS_JSON);
    assert_string_equal(cfg->error_log, "/var/log/cp/error.log");
    assert_int_equal(cfg->level, CFG_LOG_DEBUG);
    config_free(&cfg);
}

static void test_config_load_levels_and_formats(void **state)
{
    static const struct {
        const char *text;
        enum cfg_log_level level;
    } cases[] = {{"[log]\nlevel = error\n", CFG_LOG_ERROR},
                 {"[log]\nlevel = warn\n", CFG_LOG_WARN},
                 {"[log]\nlevel = INFO\n", CFG_LOG_INFO},
                 {"[log]\nlevel = debug\n", CFG_LOG_DEBUG}};
    struct config *cfg;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        cfg = load_ok(cases[i].text);
        assert_int_equal(cfg->level, cases[i].level);
        config_free(&cfg);
    }
    cfg = load_ok("[log]\naccess_format = cachelog\n");
    assert_int_equal(cfg->access_format, CFG_ACCESS_CACHELOG);
    config_free(&cfg);
}

static void test_config_load_empty_values_disable(void **state)
{
    struct config *cfg = load_ok("[server]\nadmin_listen =\n"
                                 "[upstream]\noverride =\n"
                                 "[domains]\ncache_domains =\n"
                                 "[tls]\npassthrough_listen =\noverride =\naccess =\n"
                                 "[log]\naccess =\n");

    (void)state;
    assert_false(cfg->has_admin);
    assert_false(cfg->has_override);
    assert_null(cfg->cache_domains);
    assert_int_equal(cfg->n_tls_listen, 0);
    assert_false(cfg->has_tls_override);
    assert_null(cfg->tls_access);
    assert_null(cfg->access_log);
    config_free(&cfg);
}

static void test_config_load_override_default_ports(void **state)
{
    struct config *cfg =
        load_ok("[upstream]\noverride = origin.test\n[tls]\noverride = [::1] ; comment\n");

    (void)state;
    assert_string_equal(cfg->override.host, "origin.test");
    assert_int_equal(cfg->override.port, 80);
    assert_string_equal(cfg->tls_override.host, "::1");
    assert_int_equal(cfg->tls_override.port, 443);
    config_free(&cfg);
}

static void test_config_load_hostname_empty_is_gethostname(void **state)
{
    struct config *cfg = load_ok("[server]\nhostname =\n");
    char host[CONFIG_HOST_MAX];

    (void)state;
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    assert_string_equal(cfg->hostname, host);
    config_free(&cfg);
}

static void test_config_load_names_case_insensitive(void **state)
{
    struct config *cfg = load_ok("[Server]\nMax_Connections = 7\n[LOG]\nLevel = Warn\n");

    (void)state;
    assert_int_equal(cfg->max_connections, 7);
    assert_int_equal(cfg->level, CFG_LOG_WARN);
    config_free(&cfg);
}

static void test_config_load_zero_durations_where_allowed(void **state)
{
    struct config *cfg = load_ok("[server]\nshutdown_timeout = 0\nkeepalive_timeout = 0s\n");

    (void)state;
    assert_true(cfg->shutdown_timeout_ms == 0);
    assert_true(cfg->keepalive_timeout_ms == 0);
    config_free(&cfg);
}

static void test_config_load_range_limits_accepted(void **state)
{
    struct config *cfg = load_ok("[server]\nmax_connections = 1\n"
                                 "[upstream]\nkeepalive = 1024\nmax_per_origin = 1\nreadahead = 1\n"
                                 "[cache]\nchunk_size = 4K\nmemory_size = 16K\ndisk_size = 4K\n");

    (void)state;
    assert_int_equal(cfg->max_connections, 1);
    assert_int_equal(cfg->keepalive, 1024);
    assert_int_equal(cfg->max_per_origin, 1);
    assert_int_equal(cfg->readahead, 1);
    assert_true(cfg->chunk_size == 4 * K);
    assert_true(cfg->memory_size == 16 * K);
    config_free(&cfg);
}

/* ---- lists ---- */

static void test_config_listen_ipv6(void **state)
{
    struct config *cfg = load_ok("[server]\nlisten = [::]:8080, [fe80::1]:81\n");
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)&cfg->listen[1].ss;

    (void)state;
    assert_int_equal(cfg->n_listen, 2);
    assert_int_equal(cfg->listen[0].ss.ss_family, AF_INET6);
    assert_true(IN6_IS_ADDR_UNSPECIFIED(
        &((const struct sockaddr_in6 *)(const void *)&cfg->listen[0].ss)->sin6_addr));
    assert_true(IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr));
    assert_int_equal(ntohs(sin6->sin6_port), 81);
    config_free(&cfg);
}

static void test_config_list_commas_and_spaces(void **state)
{
    struct config *cfg = load_ok("[server]\nlisten = 127.0.0.1:1,127.0.0.1:2 127.0.0.1:3 ,\t"
                                 "127.0.0.1:4,, [::1]:5\n"
                                 "[upstream]\ndns = 9.9.9.9, [2620:fe::fe]:5353 149.112.112.112\n"
                                 "[cache]\ndir = /a,/b /c\n");

    (void)state;
    assert_int_equal(cfg->n_listen, 5);
    assert_string_equal(cfg->listen[0].text, "127.0.0.1:1");
    assert_string_equal(cfg->listen[3].text, "127.0.0.1:4");
    assert_string_equal(cfg->listen[4].text, "[::1]:5");
    assert_int_equal(cfg->n_dns, 3);
    assert_string_equal(cfg->dns[1].host, "2620:fe::fe");
    assert_int_equal(cfg->dns[1].port, 5353);
    assert_string_equal(cfg->dns[2].host, "149.112.112.112");
    assert_int_equal(cfg->n_dirs, 3);
    assert_string_equal(cfg->dirs[0], "/a");
    assert_string_equal(cfg->dirs[1], "/b");
    assert_string_equal(cfg->dirs[2], "/c");
    config_free(&cfg);
}

static void test_config_list_multiline_appends(void **state)
{
    struct config *cfg = load_ok("[server]\n"
                                 "listen = 127.0.0.1:1,\n"
                                 "    127.0.0.1:2   ; a comment\n"
                                 "    ; an indented comment line\n"
                                 "\t[::1]:3\n"
                                 "[cache]\n"
                                 "dir = /a\n"
                                 "  /b\n"
                                 "[tls]\n"
                                 "passthrough_listen =\n"
                                 "  127.0.0.1:443\n");

    (void)state;
    assert_int_equal(cfg->n_listen, 3);
    assert_string_equal(cfg->listen[1].text, "127.0.0.1:2");
    assert_string_equal(cfg->listen[2].text, "[::1]:3");
    assert_int_equal(cfg->n_dirs, 2);
    assert_string_equal(cfg->dirs[1], "/b");
    assert_int_equal(cfg->n_tls_listen, 1);
    assert_string_equal(cfg->tls_listen[0].text, "127.0.0.1:443");
    config_free(&cfg);
}

static void test_config_list_repeat_appends_and_replaces_default(void **state)
{
    struct config *cfg = load_ok("[upstream]\ndns = 1.1.1.1\ndns = 1.0.0.1\n"
                                 "[server]\nlisten = 127.0.0.1:1\n"
                                 "[upstream]\ndns = 9.9.9.9\n"
                                 "[server]\nlisten = 127.0.0.1:2\n");

    (void)state;
    assert_int_equal(cfg->n_dns, 3);
    assert_string_equal(cfg->dns[0].host, "1.1.1.1");
    assert_string_equal(cfg->dns[1].host, "1.0.0.1");
    assert_string_equal(cfg->dns[2].host, "9.9.9.9");
    assert_int_equal(cfg->n_listen, 2);
    assert_string_equal(cfg->listen[1].text, "127.0.0.1:2");
    config_free(&cfg);
}

static void test_config_dns_system_alone(void **state)
{
    struct config *cfg = load_ok("[upstream]\ndns = System\n");

    (void)state;
    assert_true(cfg->dns_system);
    assert_int_equal(cfg->n_dns, 0);
    config_free(&cfg);
}

static void test_config_steam_user_agent_and_steam_hosts(void **state)
{
    (void)state;
    struct config *cfg = load_ok("[domains]\nsteam_user_agent = any\n");
    assert_int_equal(cfg->steam_user_agent, CFG_STEAM_UA_ANY);
    assert_int_equal(cfg->n_steam_hosts, 0);
    config_free(&cfg);
    cfg = load_ok("[domains]\nsteam_user_agent = No\n"
                  "steam_hosts = Mirror.Example.NET. *.steam.example.org,\n"
                  "  mirror.example.net x-y.example.org\n");
    assert_int_equal(cfg->steam_user_agent, CFG_STEAM_UA_NO);
    assert_int_equal(cfg->n_steam_hosts, 3); /* lowercased, trailing dot cut, once each */
    assert_string_equal(cfg->steam_hosts[0], "mirror.example.net");
    assert_string_equal(cfg->steam_hosts[1], "*.steam.example.org");
    assert_string_equal(cfg->steam_hosts[2], "x-y.example.org");
    config_free(&cfg);
    load_err("[domains]\nsteam_user_agent = maybe\n",
             "t.ini:2: [domains] steam_user_agent: 'maybe' is not yes, no or any");
    load_err("[domains]\nsteam_hosts = *.net\n",
             "t.ini:2: [domains] steam_hosts: '*.net' would cover a whole top-level domain");
    load_err("[domains]\nsteam_hosts = localhost\n",
             "t.ini:2: [domains] steam_hosts: 'localhost' needs at least two labels (a host "
             "name, not a top-level domain)");
    static const char *const bad[] = {"*",
                                      "*.",
                                      "a.*.example.org",
                                      "**.example.org",
                                      "a..example.org",
                                      ".example.org",
                                      "a/b.example.org",
                                      "-a.example.org",
                                      "example.org:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "[domains]\nsteam_hosts = %s\n", bad[i]);
        cfg = (struct config *)1;
        char err[512] = "";
        assert_int_equal(config_load_string("t.ini", text, &cfg, err, sizeof(err)), -1);
        if (strstr(err, "is not a host name") == NULL)
            fail_msg("%s: %s", bad[i], err);
    }
}

/* Which rule (by name) applies to <ident>, <host>, <path>; "" for none. */
static const char *rule_of(const struct config *cfg, const char *ident, const char *host,
                           const char *path)
{
    const struct cfg_rule *r = config_rule_for(cfg, ident, host, path, strlen(path));
    return r != NULL ? r->name : "";
}

/* The built-ins translate lancache's locations exactly (its regexes, prefix, exact path). */
static void test_config_rules_builtins_match_as_lancache(void **state)
{
    (void)state;
    struct config *cfg = load_ok("");
    assert_int_equal(cfg->n_rules, 6);
    static const struct {
        const char *ident, *path, *want;
    } cases[] = {
        {"riot", "/releases/live/releaselisting_EUW", "lol-releaselisting"},
        {"x", "/a/releaselisting_", "lol-releaselisting"},
        {"riot", "xreleaselisting_", "lol-releaselisting"}, /* ^.+: one byte before */
        {"riot", "releaselisting_x", ""},
        {"riot", "/releaselisting", ""},
        {"riot", "/releases/live/projects/lol_game_client/releases/0.0.1.7/version", "lol-version"},
        {"riot", "/projects/x.version", "lol-version"},
        {"riot", "/version", ""},       /* ^.+.version$: two bytes before */
        {"riot", "/x.version.bak", ""}, /* $: at the end */
        {"riot", "/X.VERSION", ""},     /* case-sensitive, as ~ */
        {"arenanet", "/latest64", "gw2-latest64"},
        {"arenanet", "/latest64/x", "gw2-latest64"},
        {"arenanet", "/latest6", ""},
        {"arenanet", "/a/latest64", ""}, /* a prefix, from the start */
        {"wsus", "/msdownload/update/v3/static/trustedr/en/authrootstl.cab", "wu-trust-lists"},
        {"wsus", "/x/PinRulesSTL.CAB", "wu-trust-lists"}, /* ~*: any case */
        {"wsus", "/disallowedcertstl.cab", "wu-trust-lists"},
        {"wsus", "/disallowedcertstl.cab.sig", ""},
        {"wsus", "/authrootstl_cab", "wu-trust-lists"}, /* lancache's unescaped '.' */
        {"steam", "/server-status", "steam-server-status"},
        {"steam", "/server-status/", ""},
        {"steam", "/server-statusx", ""},
        {"blizzard", "/tpr/wow/data/ab/cd/abcd", "blizzard-etag"},
        {"Blizzard", "/", "blizzard-etag"}, /* service names in any case */
        {"blizzard.", "/tpr/x", ""},
        {"steam", "/depot/1/chunk/ab", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = rule_of(cfg, cases[i].ident, "h.example", cases[i].path);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("%s %s: rule '%s', want '%s'", cases[i].ident, cases[i].path, got,
                     cases[i].want);
    }
    /* an empty path (absolute-form without one) is "/" */
    assert_string_equal(cfg->rules[5].name, "blizzard-etag");
    const struct cfg_rule *r = config_rule_for(cfg, "blizzard", "h.example", "", 0);
    assert_non_null(r);
    assert_int_equal(r->policy, CFG_RULE_HIDE_ETAG);
    config_free(&cfg);
}

static void test_config_rules_ini_adds_changes_and_switches_off(void **state)
{
    (void)state;
    struct config *cfg =
        load_ok("[rules]\n"
                "Lol-Version = off\n"
                "wu-trust-lists = revalidate\n"
                "gw2-latest64 = hide_etag\n"
                "my-manifest = bypass *.cdn.example.net ~*/manifest[0-9]+\\.json$\n"
                "exact = bypass files.example.org =/a b\n"
                "svc = bypass epicgames /Builds/\n"
                "blizzard-etag = bypass blizzard =/tpr/x\n");
    assert_int_equal(cfg->n_rules, 9);
    /* the INI's new rules first, in file order, then the built-ins in theirs */
    assert_string_equal(cfg->rules[0].name, "my-manifest");
    assert_string_equal(cfg->rules[1].name, "exact");
    assert_string_equal(cfg->rules[2].name, "svc");
    assert_string_equal(cfg->rules[3].name, "lol-releaselisting");
    assert_int_equal(cfg->rules[4].policy, CFG_RULE_OFF);
    assert_int_equal(cfg->rules[4].line, 2);
    assert_int_equal(cfg->rules[5].policy, CFG_RULE_HIDE_ETAG);
    assert_string_equal(cfg->rules[5].pattern, "/latest64"); /* kept */
    assert_string_equal(rule_of(cfg, "riot", "h.example", "/x.version"), "");
    assert_int_equal(cfg->rules[6].policy, CFG_RULE_REVALIDATE);
    assert_string_equal(rule_of(cfg, "x", "a.cdn.example.net", "/y/MANIFEST12.json"),
                        "my-manifest");
    assert_string_equal(rule_of(cfg, "x", "cdn.example.net", "/manifest1.json"), "");
    assert_string_equal(rule_of(cfg, "x", "a.cdn.example.net", "/manifest1xjson"), "");
    assert_string_equal(rule_of(cfg, "x", "files.example.org", "/a b"), "exact");
    assert_string_equal(rule_of(cfg, "x", "a.files.example.org", "/a b"), "");
    assert_string_equal(rule_of(cfg, "epicgames", "h.example", "/Builds/x"), "svc");
    assert_string_equal(rule_of(cfg, "epicgames", "h.example", "/builds/x"), "");
    assert_string_equal(rule_of(cfg, "blizzard", "h.example", "/tpr/x"), "blizzard-etag");
    assert_int_equal(cfg->rules[8].policy, CFG_RULE_BYPASS);
    assert_string_equal(rule_of(cfg, "blizzard", "h.example", "/tpr/y"), "");
    config_free(&cfg);
}

/* Review: nginx's forms carry a blank after the modifier ("location ~ RE", "location = /p"); a
 * rule copied from lancache's config must match as nginx's location does. */
static void test_config_rules_review_blank_after_modifier(void **state)
{
    (void)state;
    struct config *cfg = load_ok("[rules]\n"
                                 "a = bypass * ~ ^/x/.+\\.json$\n"
                                 "b = bypass * ~* (foo|bar)\\.cab$\n"
                                 "c = bypass * = /exact\n");
    assert_string_equal(rule_of(cfg, "x", "h.example", "/x/a.json"), "a");
    assert_string_equal(rule_of(cfg, "x", "h.example", "/y/FOO.cab"), "b");
    assert_string_equal(rule_of(cfg, "x", "h.example", "/exact"), "c");
    assert_string_equal(rule_of(cfg, "x", "h.example", "/exactly"), "");
    config_free(&cfg);
}

/* Review: the cache key has no host, so a host-scoped hide_etag would make one object two
 * versions (chunks filled through the rule's host without the ETag, others with it). */
static void test_config_rules_review_hide_etag_needs_service_or_any(void **state)
{
    (void)state;
    load_err("[rules]\none-edge = hide_etag level3.blizzard.com /\n",
             "t.ini:2: [rules] rule one-edge: hide_etag applies to * or a service (the cache key "
             "has no host), not to 'level3.blizzard.com'");
    load_err("[rules]\nx = hide_etag *.example.net /\n",
             "t.ini:2: [rules] rule x: hide_etag applies to * or a service (the cache key has no "
             "host), not to '*.example.net'");
    struct config *cfg = load_ok("[rules]\nx = hide_etag * /a\ny = hide_etag epicgames /b\n");
    config_free(&cfg);
}

static void test_config_rules_errors_name_the_line(void **state)
{
    (void)state;
    load_err("[rules]\nx = bypass\n",
             "t.ini:2: [rules] rule x: no such built-in rule; a new rule is POLICY WHERE PATTERN");
    load_err("[rules]\nx = cache * /a\n",
             "t.ini:2: [rules] rule x: 'cache' is not a policy (bypass, revalidate, hide_etag or "
             "off)");
    load_err("[rules]\nx = bypass * a\n",
             "t.ini:2: [rules] rule x: 'a' is not a path pattern (/PREFIX, =PATH, ~REGEX or "
             "~*REGEX)");
    load_err("[rules]\nx = bypass *\n", "t.ini:2: [rules] rule x: no path pattern after '*'");
    { /* the message after the pattern is regerror's (the C library's words) */
        struct config *cfg = (struct config *)1;
        char err[512] = "";
        assert_int_equal(
            config_load_string("t.ini", "[rules]\nx = bypass * ~(a\n", &cfg, err, sizeof(err)), -1);
        assert_null(cfg);
        assert_true(strncmp(err, "t.ini:2: [rules] rule x: '(a': ", 31) == 0);
    }
    load_err("[rules]\nx = bypass a..b /a\n",
             "t.ini:2: [rules] rule x: 'a..b' is not *, a service name or a host name (a.b or "
             "*.a.b)");
    load_err("[rules]\nx = off * /a\n", "t.ini:2: [rules] rule x: off takes nothing after it");
    load_err("[rules]\nx = bypass * /a\ny = bypass * /b\nX = off\n",
             "t.ini:4: [rules] rule x: already set on line 2");
    load_err("[rules]\nlol-version = off\nlol-version = bypass\n",
             "t.ini:3: [rules] rule lol-version: already set on line 2");
    load_err("[rules]\na.b = bypass * /a\n",
             "t.ini:2: [rules] rule name 'a.b': only letters, digits, '-' and '_'");
    load_err("[rules]\nx =\n",
             "t.ini:2: [rules] rule x: no policy (bypass, revalidate, hide_etag or off)");
}

static void test_config_list_max_entries_accepted(void **state)
{
    char text[1024];
    size_t off;
    struct config *cfg;

    (void)state;
    off = (size_t)snprintf(text, sizeof(text), "[server]\nlisten =\n");
    for (int i = 1; i <= CONFIG_MAX_ADDRS; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, "  127.0.0.1:%d\n", i);
    cfg = load_ok(text);
    assert_int_equal(cfg->n_listen, CONFIG_MAX_ADDRS);
    config_free(&cfg);
}

/* ---- errors, each with its exact FILE:LINE message ---- */

static void test_config_error_unknown_key_line(void **state)
{
    (void)state;
    load_err("[server]\nlisten = 127.0.0.1:1\n\n; comment\nlsiten = 1\n",
             "t.ini:5: unknown key 'lsiten' in section [server]");
}

static void test_config_error_unknown_section_line(void **state)
{
    (void)state;
    load_err("[server]\nlisten = 127.0.0.1:1\n[sever]\nmax_connections = 5\n",
             "t.ini:4: unknown key 'max_connections' in section [sever] (no such section)");
}

static void test_config_error_key_before_section(void **state)
{
    (void)state;
    load_err("listen = 127.0.0.1:1\n",
             "t.ini:1: unknown key 'listen' in section [] (keys must follow a [section] header)");
}

static void test_config_error_key_in_wrong_section(void **state)
{
    (void)state;
    load_err("[upstream]\nlisten = 127.0.0.1:1\n",
             "t.ini:2: unknown key 'listen' in section [upstream]");
}

static void test_config_error_repeated_scalar_rejected(void **state)
{
    (void)state;
    load_err("[server]\nmax_connections = 5\nsend_timeout = 1s\nmax_connections = 6\n",
             "t.ini:4: [server] max_connections: already set on line 2 (only list keys may "
             "repeat or continue on indented lines)");
    load_err("[server]\nmax_connections = 5\n[upstream]\nkeepalive = 1\n[server]\n"
             "max_connections = 5\n",
             "t.ini:6: [server] max_connections: already set on line 2 (only list keys may "
             "repeat or continue on indented lines)");
}

static void test_config_error_scalar_continuation_rejected(void **state)
{
    (void)state;
    load_err("[log]\nerror = /var/log/a\n   b.log\n",
             "t.ini:3: [log] error: already set on line 2 (only list keys may repeat or "
             "continue on indented lines)");
}

static void test_config_error_bad_values_exact(void **state)
{
    static const struct {
        const char *text;
        const char *err;
    } cases[] = {
        {"[server]\nmax_connections = 0\n",
         "t.ini:2: [server] max_connections: 0 is out of range 1..1000000"},
        {"[server]\nmax_connections = 1000001\n",
         "t.ini:2: [server] max_connections: 1000001 is out of range 1..1000000"},
        {"[server]\nmax_connections = 99999999999999999999\n",
         "t.ini:2: [server] max_connections: 99999999999999999999 is out of range 1..1000000"},
        {"[server]\nmax_connections = 10k\n",
         "t.ini:2: [server] max_connections: '10k' is not a whole number"},
        {"[upstream]\nkeepalive = 1025\n",
         "t.ini:2: [upstream] keepalive: 1025 is out of range 0..1024"},
        {"[upstream]\nmax_per_origin = 0\n",
         "t.ini:2: [upstream] max_per_origin: 0 is out of range 1..1024"},
        {"[upstream]\nreadahead = 65\n", "t.ini:2: [upstream] readahead: 65 is out of range 1..64"},
        {"\n\n[server]\nrequest_timeout = 0\n",
         "t.ini:4: [server] request_timeout: must be greater than 0"},
        {"[server]\nrequest_timeout = 10x\n",
         "t.ini:2: [server] request_timeout: '10x' is not a duration (a number with an "
         "optional unit ms, s, m, h or d; bare = seconds)"},
        {"[server]\nsend_timeout = 99999999999999999999d\n",
         "t.ini:2: [server] send_timeout: '99999999999999999999d' is too large"},
        {"[cache]\nmax_age = 0d\n", "t.ini:2: [cache] max_age: must be greater than 0"},
        {"[cache]\ndisk_size = 1.5T\n",
         "t.ini:2: [cache] disk_size: '1.5T' is not a size (a number with an optional suffix "
         "K, M, G or T)"},
        {"[cache]\ndisk_size = 16777216T\n",
         "t.ini:2: [cache] disk_size: '16777216T' is too large"},
        {"[cache]\nmemory_size = 0\n", "t.ini:2: [cache] memory_size: must be greater than 0"},
        {"[cache]\nanswers_memory = 17M\n", "t.ini:2: [cache] answers_memory: must be at most 16M"},
        {"[cache]\nchunk_size = 3M\n",
         "t.ini:2: [cache] chunk_size: '3M' must be a power of two between 4K and 64M"},
        {"[cache]\nchunk_size = 2K\n",
         "t.ini:2: [cache] chunk_size: '2K' must be a power of two between 4K and 64M"},
        {"[cache]\nchunk_size = 128M\n",
         "t.ini:2: [cache] chunk_size: '128M' must be a power of two between 4K and 64M"},
        {"[upstream]\nallow_private = maybe\n",
         "t.ini:2: [upstream] allow_private: 'maybe' is not a boolean (yes/no, true/false, "
         "on/off, 1/0)"},
        {"[server]\nlisten = 127.0.0.1:80, localhost:80\n",
         "t.ini:2: [server] listen: 'localhost:80' is not a numeric address with a port "
         "1..65535 (a.b.c.d:port or [v6]:port; names are not allowed)"},
        {"[server]\nlisten = 127.0.0.1\n",
         "t.ini:2: [server] listen: '127.0.0.1' is not a numeric address with a port 1..65535 "
         "(a.b.c.d:port or [v6]:port; names are not allowed)"},
        {"[server]\nadmin_listen = [::1]:0\n",
         "t.ini:2: [server] admin_listen: '[::1]:0' is not a numeric address with a port "
         "1..65535 (a.b.c.d:port or [v6]:port; names are not allowed)"},
        {"[server]\nhostname = my cache\n",
         "t.ini:2: [server] hostname: 'my cache' is not a host name (letters, digits, '-', '_' "
         "and dots)"},
        {"[upstream]\noverride = a.test:70000\n",
         "t.ini:2: [upstream] override: 'a.test:70000' is not host[:port] (a name, a.b.c.d or "
         "[v6]; port 1..65535, default 80)"},
        {"[tls]\noverride = ::1\n",
         "t.ini:2: [tls] override: '::1' is not host[:port] (a name, a.b.c.d or [v6]; port "
         "1..65535, default 443)"},
        {"[upstream]\ndns = system 1.1.1.1\n",
         "t.ini:2: [upstream] dns: 'system' must be the only value"},
        {"[upstream]\ndns = 1.1.1.1\n  system\n",
         "t.ini:3: [upstream] dns: 'system' must be the only value"},
        {"[upstream]\ndns = dns.google\n",
         "t.ini:2: [upstream] dns: 'dns.google' is not a numeric resolver address "
         "(a.b.c.d[:port] or [v6][:port]) or 'system'"},
        {"[upstream]\ndns =\n",
         "t.ini:2: [upstream] dns: empty: give resolver addresses or 'system'"},
        {"[log]\nerror =\n", "t.ini:2: [log] error: empty: use - for stderr, or a file path"},
        {"[log]\nlevel = verbose\n",
         "t.ini:2: [log] level: 'verbose' is not one of error, warn, info, debug"},
        {"[log]\naccess_format = combined\n",
         "t.ini:2: [log] access_format: 'combined' is not one of cachelog, json"},
        {"[server]\nlisten = 127.0.0.1:1 [::1]:2 127.0.0.1:1\n",
         "t.ini:2: [server] listen: '127.0.0.1:1' is listed twice"},
        {"[cache]\ndir = /a /b\n  /a\n", "t.ini:3: [cache] dir: '/a' is listed twice"},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        load_err(cases[i].text, cases[i].err);
}

static void test_config_error_too_many_addresses(void **state)
{
    char text[1024];
    size_t off;

    (void)state;
    off = (size_t)snprintf(text, sizeof(text), "[server]\nlisten =\n");
    for (int i = 1; i <= CONFIG_MAX_ADDRS + 1; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, "  127.0.0.1:%d\n", i);
    load_err(text, "t.ini:19: [server] listen: too many addresses (at most 16)");
}

static void test_config_error_whole_file_checks(void **state)
{
    (void)state;
    load_err("[server]\nmax_connections = 5\nlisten =\n",
             "t.ini:3: [server] listen: at least one address is required");
    load_err("[cache]\nchunk_size = 1M\nmemory_size = 3M\n",
             "t.ini:3: [cache] memory_size: 3M is less than 4 x chunk_size (1M)");
    load_err("[cache]\nmemory_size = 8M\n\nchunk_size = 4M\n",
             "t.ini:2: [cache] memory_size: 8M is less than 4 x chunk_size (4M)");
    load_err("[cache]\ndisk_size = 512K\n",
             "t.ini:2: [cache] disk_size: 512K is less than chunk_size (1M)");
    load_err("[cache]\ndir =\n", "t.ini:2: [cache] dir: at least one directory is required");
    load_err("[server]\nlisten = 127.0.0.1:80\nadmin_listen = 127.0.0.1:80\n",
             "t.ini:3: [server] admin_listen: 127.0.0.1:80 is also a listen address");
    load_err("[server]\nlisten = 127.0.0.1:80\n[tls]\npassthrough_listen = 127.0.0.1:80\n",
             "t.ini:4: [tls] passthrough_listen: 127.0.0.1:80 is also a listen address");
    load_err("[server]\nadmin_listen = 127.0.0.1:443\n[tls]\npassthrough_listen = "
             "127.0.0.1:443\n",
             "t.ini:2: [server] admin_listen: 127.0.0.1:443 is also a passthrough_listen "
             "address");
}

static void test_config_error_syntax_line(void **state)
{
    (void)state;
    load_err("[server]\nmax_connections = 5\njust some words\n",
             "t.ini:3: expected '[section]' or 'key = value'");
    load_err("[server]\nmax_connections = 5\n[log\nlevel = info\n",
             "t.ini:3: section header without closing ']'");
}

static void test_config_error_first_one_wins(void **state)
{
    (void)state;
    /* a syntax error before a value error */
    load_err("[server]\nnonsense\nmax_connections = 0\n",
             "t.ini:2: expected '[section]' or 'key = value'");
    /* a value error before a syntax error */
    load_err("[server]\nmax_connections = 0\nnonsense\n",
             "t.ini:2: [server] max_connections: 0 is out of range 1..1000000");
    /* a value error before a whole-file error */
    load_err("[server]\nlisten =\n[log]\nlevel = loud\n",
             "t.ini:4: [log] level: 'loud' is not one of error, warn, info, debug");
}

static void test_config_error_long_line_rejected(void **state)
{
    char text[512];
    char longval[300];

    (void)state;
    memset(longval, 'a', sizeof(longval) - 1);
    longval[sizeof(longval) - 1] = '\0';
    snprintf(text, sizeof(text), "[domains]\n\ncache_domains = /%s\n[log]\nlevel = info\n",
             longval);
    load_err(text, "t.ini:3: line too long (more than 199 characters); continue a list on "
                   "indented lines");
}

static void test_config_error_missing_file_is_line_zero(void **state)
{
    struct config *cfg = (struct config *)1;
    char err[256];

    (void)state;
    assert_int_equal(config_load("/nonexistent/cacheparty.ini", &cfg, err, sizeof(err)), -1);
    assert_null(cfg);
    assert_string_equal(err, "/nonexistent/cacheparty.ini:0: cannot open: No such file or "
                             "directory");
}

static void test_config_error_nul_byte_in_file(void **state)
{
    char path[] = "/tmp/test_config_XXXXXX";
    static const char data[] = "[server]\nmax_connections = 5\0\n";
    struct config *cfg = (struct config *)1;
    char err[256], want[256];
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, sizeof(data) - 1), (int)(sizeof(data) - 1));
    close(fd);
    assert_int_equal(config_load(path, &cfg, err, sizeof(err)), -1);
    assert_null(cfg);
    snprintf(want, sizeof(want), "%s:0: contains a NUL byte", path);
    assert_string_equal(err, want);
    unlink(path);
}

static void test_config_error_null_err_buffer_ok(void **state)
{
    struct config *cfg = NULL;

    (void)state;
    assert_int_equal(config_load_string("t.ini", "[x]\ny = 1\n", &cfg, NULL, 0), -1);
    assert_null(cfg);
}

/* ---- files, summary, free ---- */

static void test_config_file_loads_from_disk(void **state)
{
    char path[] = "/tmp/test_config_XXXXXX";
    static const char data[] = "[server]\r\nlisten = 127.0.0.1:9999\r\n";
    struct config *cfg = NULL;
    char err[256] = "";
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, sizeof(data) - 1), (int)(sizeof(data) - 1));
    close(fd);
    assert_int_equal(config_load(path, &cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg->path, path);
    assert_string_equal(cfg->listen[0].text, "127.0.0.1:9999");
    config_free(&cfg);
    unlink(path);
}

static void test_config_file_default_conf_loads(void **state)
{
    struct config *cfg = NULL;
    char err[512] = "";

    (void)state;
    if (config_load("conf/cacheparty.ini", &cfg, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    /* the shipped file spells out the defaults: same values as an empty file */
    assert_int_equal(cfg->n_listen, 2);
    assert_string_equal(cfg->listen[0].text, "0.0.0.0:80");
    assert_string_equal(cfg->listen[1].text, "[::]:80");
    assert_string_equal(cfg->admin_listen.text, "127.0.0.1:8081");
    assert_int_equal(cfg->n_dns, 2);
    assert_int_equal(cfg->n_dirs, 1);
    assert_string_equal(cfg->dirs[0], "/var/cache/cacheparty");
    assert_true(cfg->disk_size == 1000 * G);
    assert_true(cfg->memory_size == 256 * M);
    assert_true(cfg->chunk_size == M);
    assert_int_equal(cfg->n_tls_listen, 0);
    assert_string_equal(cfg->access_log, "/var/log/cacheparty/access.log");
    assert_string_equal(cfg->error_log, "-");
    assert_int_equal(cfg->level, CFG_LOG_INFO);
    config_free(&cfg);
}

static void test_config_file_local_conf_loads(void **state)
{
    struct config *cfg = NULL;
    char err[512] = "";

    (void)state;
    if (config_load("conf/local.ini", &cfg, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(cfg->n_listen, 1);
    assert_string_equal(cfg->listen[0].text, "127.0.0.1:8080");
    assert_true(cfg->has_admin);
    assert_string_equal(cfg->admin_listen.text, "127.0.0.1:8081");
    assert_true(cfg->dns_system);
    assert_true(cfg->allow_private);
    assert_true(cfg->allow_unlisted);
    assert_int_equal(cfg->n_dirs, 1);
    assert_string_equal(cfg->dirs[0], "./var/cache");
    assert_true(cfg->memory_size == 256 * M);
    assert_true(cfg->disk_size == 10 * G);
    assert_true(cfg->min_free == G);
    assert_int_equal(cfg->n_tls_listen, 1);
    assert_string_equal(cfg->tls_listen[0].text, "127.0.0.1:8443");
    assert_string_equal(cfg->access_log, "./var/log/access.log");
    assert_string_equal(cfg->error_log, "-");
    config_free(&cfg);
}

static void test_config_summary_one_line(void **state)
{
    struct config *cfg = load_ok("[server]\nlisten = 127.0.0.1:8080\nadmin_listen =\n"
                                 "[upstream]\ndns = system\n");
    char buf[512];

    (void)state;
    config_summary(cfg, buf, sizeof(buf));
    assert_string_equal(buf, "t.ini: listen 127.0.0.1:8080, admin off, tls off, 1 cache dir, "
                             "disk 1000G, memory 256M, chunk 1M, dns system, override none");
    config_free(&cfg);

    cfg = load_ok(every_key);
    config_summary(cfg, buf, sizeof(buf));
    assert_string_equal(buf, "t.ini: listen 10.1.2.3:8080, admin [::1]:9000, tls 10.1.2.3:443, "
                             "1 cache dir, disk 2T, memory 1G, chunk 64M, dns 1.1.1.1:5353, "
                             "override parent.lan:3128");
    config_free(&cfg);

    cfg = load_ok("[upstream]\ndns = [::1] 8.8.8.8\n[cache]\ndir = /a /b\nmemory_size = 1000000\n"
                  "chunk_size = 4K\n");
    config_summary(cfg, buf, sizeof(buf));
    assert_string_equal(buf, "t.ini: listen 0.0.0.0:80 [::]:80, admin 127.0.0.1:8081, tls off, "
                             "2 cache dirs, disk 1000G, memory 1000000, chunk 4K, dns [::1] "
                             "8.8.8.8, override none");
    config_free(&cfg);
}

static void test_config_summary_truncates_safely(void **state)
{
    struct config *cfg = load_ok("");
    char buf[16];

    (void)state;
    memset(buf, 'x', sizeof(buf));
    config_summary(cfg, buf, sizeof(buf));
    assert_int_equal(strlen(buf), sizeof(buf) - 1);
    assert_memory_equal(buf, "t.ini: listen 0", sizeof(buf));
    config_summary(cfg, buf, 1);
    assert_string_equal(buf, "");
    config_free(&cfg);
}

static void test_config_free_null_safe(void **state)
{
    struct config *cfg = NULL;

    (void)state;
    config_free(NULL);
    config_free(&cfg);
    assert_null(cfg);
}

/* ---- reload: keys that cannot change live ---- */

/* What config_keep_fixed reported: "[section] name why" lines, one per kept key. */
struct kept_log {
    char lines[16][160];
    size_t n;
};

static void record_kept(const char *section, const char *name, const char *why, void *arg)
{
    struct kept_log *log = arg;

    assert_true(log->n < 16);
    snprintf(log->lines[log->n++], sizeof(log->lines[0]), "[%s] %s %s", section, name, why);
}

static void test_config_reload_keeps_a_fixed_key_with_its_running_value_and_reports_it(void **state)
{
    struct config *cur = load_ok("[server]\nlisten = 127.0.0.1:80\n[cache]\nchunk_size = 1M\n");
    struct config *next = load_ok("[server]\nlisten = 127.0.0.1:81\n[cache]\nchunk_size = 2M\n");
    struct kept_log log = {.n = 0};

    (void)state;
    assert_int_equal(config_keep_fixed(next, cur, record_kept, &log), 2);
    assert_int_equal(next->n_listen, 1);
    assert_string_equal(next->listen[0].text, "127.0.0.1:80");
    assert_int_equal(next->chunk_size, 1 * M);
    assert_int_equal(log.n, 2);
    assert_string_equal(log.lines[0],
                        "[server] listen cannot change live: kept (restart to apply)");
    assert_string_equal(log.lines[1], "[cache] chunk_size cannot change live: kept");
    config_free(&next);
    config_free(&cur);
}

static void
test_config_reload_keeping_chunk_size_refuses_a_memory_size_too_small_for_it(void **state)
{
    struct config *cur = load_ok("[cache]\nchunk_size = 16M\nmemory_size = 64M\n");
    struct config *next = load_ok("[cache]\nchunk_size = 1M\nmemory_size = 8M\n");
    struct config *ok = load_ok("[cache]\nchunk_size = 1M\nmemory_size = 64M\n");
    char err[256];

    (void)state;
    assert_int_equal(config_keep_fixed(next, cur, NULL, NULL), 1);
    assert_int_equal(next->chunk_size, 16 * M);
    assert_int_equal(config_check_kept(next, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "[cache] memory_size: 8M is less than 4 x the running chunk_size"));
    assert_int_equal(config_keep_fixed(ok, cur, NULL, NULL), 1);
    assert_int_equal(config_check_kept(ok, err, sizeof(err)), 0);
    assert_int_equal(config_check_kept(cur, err, sizeof(err)), 0);
    config_free(&ok);
    config_free(&next);
    config_free(&cur);
}

static void test_config_reload_takes_a_live_key(void **state)
{
    struct config *cur = load_ok("[server]\nmax_connections = 10\n[domains]\nallow_unlisted = no\n"
                                 "[log]\naccess = /tmp/a.log\n");
    struct config *next = load_ok("[server]\nmax_connections = 20\n[domains]\n"
                                  "allow_unlisted = yes\n[log]\naccess = /tmp/b.log\n");
    struct kept_log log = {.n = 0};

    (void)state;
    assert_int_equal(config_keep_fixed(next, cur, record_kept, &log), 0);
    assert_int_equal(log.n, 0);
    assert_int_equal(next->max_connections, 20);
    assert_true(next->allow_unlisted);
    assert_string_equal(next->access_log, "/tmp/b.log");
    config_free(&next);
    config_free(&cur);
}

static void test_config_reload_keeps_every_fixed_key_in_file_order(void **state)
{
    struct config *cur = load_ok("[server]\nlisten = 127.0.0.1:80, [::1]:80\nadmin_listen =\n"
                                 "[upstream]\ndns = system\noverride = a.lan:3128\n"
                                 "[cache]\ndir = /c/a /c/b\n"
                                 "[tls]\npassthrough_listen = 127.0.0.1:443\n");
    struct config *next =
        load_ok("[server]\nlisten = 127.0.0.1:80\nadmin_listen = 127.0.0.1:9\n"
                "[upstream]\ndns = 1.1.1.1\n[cache]\ndir = /c/a /c/z\nchunk_size = 64K\n"
                "[tls]\npassthrough_listen = 127.0.0.2:443\noverride = b.lan\n");
    struct kept_log log = {.n = 0};

    (void)state;
    assert_int_equal(config_keep_fixed(next, cur, record_kept, &log), 8);
    assert_int_equal(log.n, 8);
    assert_string_equal(log.lines[0],
                        "[server] listen cannot change live: kept (restart to apply)");
    assert_string_equal(log.lines[1], "[server] admin_listen cannot change live: kept");
    assert_string_equal(log.lines[2],
                        "[upstream] dns cannot change live yet: kept (restart to apply)");
    assert_string_equal(log.lines[3], "[upstream] override cannot change live: kept");
    assert_string_equal(log.lines[4], "[cache] dir cannot change live: kept");
    assert_string_equal(log.lines[5], "[cache] chunk_size cannot change live: kept");
    assert_string_equal(log.lines[6], "[tls] passthrough_listen cannot change live: kept");
    assert_string_equal(log.lines[7], "[tls] override cannot change live: kept");
    assert_int_equal(next->n_listen, 2);
    assert_string_equal(next->listen[1].text, "[::1]:80");
    assert_false(next->has_admin);
    assert_true(next->dns_system);
    assert_int_equal(next->n_dns, 0);
    assert_true(next->has_override);
    assert_string_equal(next->override.host, "a.lan");
    assert_int_equal(next->override.port, 3128);
    assert_int_equal(next->n_dirs, 2);
    assert_string_equal(next->dirs[1], "/c/b");
    assert_int_equal(next->chunk_size, 1 * M);
    assert_string_equal(next->tls_listen[0].text, "127.0.0.1:443");
    assert_false(next->has_tls_override);
    /* and the result is stable: keeping again finds nothing to keep */
    assert_int_equal(config_keep_fixed(next, cur, NULL, NULL), 0);
    config_free(&next);
    config_free(&cur);
}

/* [cluster]: parsed with its self among listen; each refusal at its line; kept on a reload. */
static void test_config_cluster(void **state)
{
    (void)state;
    static const char base[] = "[server]\nlisten = 0.0.0.0:80\n[cluster]\n";
    char text[512];
    snprintf(text, sizeof(text),
             "%snodes = 10.0.0.12:80, 10.0.0.11:80\nself = 10.0.0.11:80\n"
             "secret = a-secret-of-sixteen\n",
             base);
    struct config *cur = load_ok(text);
    assert_true(cur->has_cluster);
    assert_int_equal(cur->cluster.n, 2);
    assert_int_equal(cur->cluster.self, 0);
    assert_string_equal(cur->cluster.nodes[1].addr, "10.0.0.12:80");
    struct config *none = load_ok("[server]\nlisten = 0.0.0.0:80\n");
    assert_false(none->has_cluster);
    assert_null(none->cluster_nodes);

    load_err("[server]\nlisten = 0.0.0.0:80\n[cluster]\nself = 10.0.0.11:80\n",
             "t.ini:4: [cluster] nodes is empty: self and secret are for a cluster (set nodes, "
             "or remove them)");
    snprintf(text, sizeof(text),
             "%snodes = 10.0.0.12:80, 10.0.0.11:80\nself = 10.0.0.13:80\n"
             "secret = a-secret-of-sixteen\n",
             base);
    load_err(text, "t.ini:5: [cluster] self: 10.0.0.13:80 is not one of [cluster] nodes");
    snprintf(text, sizeof(text),
             "%snodes = 10.0.0.12:80, 10.0.0.11:80\nself = 10.0.0.11:80\n"
             "secret = short\n",
             base);
    load_err(text, "t.ini:6: [cluster] secret: 16 to 256 characters, the same on every node "
                   "(have 5)");
    snprintf(text, sizeof(text),
             "%snodes = 10.0.0.12:80 10.0.0.11\nself = 10.0.0.11:80\n"
             "secret = a-secret-of-sixteen\n",
             base);
    load_err(text, "t.ini:4: [cluster] nodes: \"10.0.0.11\" is not an address and port (ip:port "
                   "or [ip6]:port)");
    /* self must be where this node listens */
    load_err("[server]\nlisten = 127.0.0.1:8080\n[cluster]\nnodes = 10.0.0.12:80, 10.0.0.11:80\n"
             "self = 10.0.0.11:80\nsecret = a-secret-of-sixteen\n",
             "t.ini:5: [cluster] self: 10.0.0.11:80 is not one of [server] listen (the other "
             "nodes connect to it)");
    struct config *exact = load_ok("[server]\nlisten = 10.0.0.11:80\n[cluster]\n"
                                   "nodes = 10.0.0.12:80, 10.0.0.11:80\nself = 10.0.0.11:80\n"
                                   "secret = a-secret-of-sixteen\n");
    assert_true(exact->has_cluster);

    /* A reload keeps the running cluster, all of it. */
    snprintf(text, sizeof(text),
             "%snodes = 10.0.0.12:80, 10.0.0.11:80, 10.0.0.13:80\nself = 10.0.0.11:80\n"
             "secret = another-secret-16\n",
             base);
    struct config *next = load_ok(text);
    assert_int_equal(next->cluster.n, 3);
    assert_int_equal(config_keep_fixed(next, cur, NULL, NULL), 2);
    assert_int_equal(next->cluster.n, 2);
    assert_string_equal(next->cluster_nodes, "10.0.0.12:80, 10.0.0.11:80");
    assert_string_equal(next->cluster_secret, "a-secret-of-sixteen");
    assert_memory_equal(next->cluster.secret, "a-secret-of-sixteen", 19);
    assert_int_equal(config_keep_fixed(next, cur, NULL, NULL), 0);
    config_free(&next);
    config_free(&exact);
    config_free(&none);
    config_free(&cur);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_parse_size_suffixes),
        cmocka_unit_test(test_config_parse_size_overflow_is_erange),
        cmocka_unit_test(test_config_parse_size_invalid_is_einval),
        cmocka_unit_test(test_config_parse_duration_units),
        cmocka_unit_test(test_config_parse_duration_overflow_is_erange),
        cmocka_unit_test(test_config_parse_duration_invalid_is_einval),
        cmocka_unit_test(test_config_parse_bool_all_spellings),
        cmocka_unit_test(test_config_parse_addr_ipv4),
        cmocka_unit_test(test_config_parse_addr_ipv6),
        cmocka_unit_test(test_config_parse_addr_invalid_is_einval),
        cmocka_unit_test(test_config_parse_hostport_forms),
        cmocka_unit_test(test_config_parse_hostport_invalid_is_einval),
        cmocka_unit_test(test_config_load_empty_gives_defaults),
        cmocka_unit_test(test_config_load_every_key_non_default),
        cmocka_unit_test(test_config_load_levels_and_formats),
        cmocka_unit_test(test_config_load_empty_values_disable),
        cmocka_unit_test(test_config_load_override_default_ports),
        cmocka_unit_test(test_config_load_hostname_empty_is_gethostname),
        cmocka_unit_test(test_config_load_names_case_insensitive),
        cmocka_unit_test(test_config_load_zero_durations_where_allowed),
        cmocka_unit_test(test_config_load_range_limits_accepted),
        cmocka_unit_test(test_config_listen_ipv6),
        cmocka_unit_test(test_config_list_commas_and_spaces),
        cmocka_unit_test(test_config_list_multiline_appends),
        cmocka_unit_test(test_config_list_repeat_appends_and_replaces_default),
        cmocka_unit_test(test_config_dns_system_alone),
        cmocka_unit_test(test_config_steam_user_agent_and_steam_hosts),
        cmocka_unit_test(test_config_rules_builtins_match_as_lancache),
        cmocka_unit_test(test_config_rules_ini_adds_changes_and_switches_off),
        cmocka_unit_test(test_config_rules_errors_name_the_line),
        cmocka_unit_test(test_config_rules_review_blank_after_modifier),
        cmocka_unit_test(test_config_rules_review_hide_etag_needs_service_or_any),
        cmocka_unit_test(test_config_list_max_entries_accepted),
        cmocka_unit_test(test_config_error_unknown_key_line),
        cmocka_unit_test(test_config_error_unknown_section_line),
        cmocka_unit_test(test_config_error_key_before_section),
        cmocka_unit_test(test_config_error_key_in_wrong_section),
        cmocka_unit_test(test_config_error_repeated_scalar_rejected),
        cmocka_unit_test(test_config_error_scalar_continuation_rejected),
        cmocka_unit_test(test_config_error_bad_values_exact),
        cmocka_unit_test(test_config_error_too_many_addresses),
        cmocka_unit_test(test_config_error_whole_file_checks),
        cmocka_unit_test(test_config_error_syntax_line),
        cmocka_unit_test(test_config_error_first_one_wins),
        cmocka_unit_test(test_config_error_long_line_rejected),
        cmocka_unit_test(test_config_error_missing_file_is_line_zero),
        cmocka_unit_test(test_config_error_nul_byte_in_file),
        cmocka_unit_test(test_config_error_null_err_buffer_ok),
        cmocka_unit_test(test_config_file_loads_from_disk),
        cmocka_unit_test(test_config_file_default_conf_loads),
        cmocka_unit_test(test_config_file_local_conf_loads),
        cmocka_unit_test(test_config_summary_one_line),
        cmocka_unit_test(test_config_summary_truncates_safely),
        cmocka_unit_test(test_config_free_null_safe),
        cmocka_unit_test(
            test_config_reload_keeps_a_fixed_key_with_its_running_value_and_reports_it),
        cmocka_unit_test(
            test_config_reload_keeping_chunk_size_refuses_a_memory_size_too_small_for_it),
        cmocka_unit_test(test_config_reload_takes_a_live_key),
        cmocka_unit_test(test_config_reload_keeps_every_fixed_key_in_file_order),
        cmocka_unit_test(test_config_cluster),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
