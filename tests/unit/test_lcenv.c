/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_lcenv: lancache's settings turned into cacheparty's INI: lancache's documented defaults
 * (the .env of lancachenet/docker-compose), a full .env with every variable it knows, the two
 * YAML forms of a docker-compose `environment:`, quoting, `export`, trailing comments, the last of
 * a repeated variable, values cacheparty cannot read, and unknown variables. Every output is
 * loaded back with config_load_string: it must be a valid configuration, and no line is longer
 * than an INI line may be.
 */
#include "lcenv.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

static char *convert(const char *text, unsigned *n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    *n = lcenv_convert(text, strlen(text), "test.env", f);
    fclose(f);
    return buf;
}

/* The INI must load (with a listen of its own and no admin or access log, so that nothing is
 * looked up on this machine), and every line fit the INI's 199 characters. */
static struct config *load(const char *ini)
{
    for (const char *p = ini; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t l = nl != NULL ? (size_t)(nl - p) : strlen(p);
        assert_true(l <= 199);
        p += l + (nl != NULL);
    }
    char *full = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&full, &len);
    fprintf(f, "[server]\nlisten = 127.0.0.1:1\nadmin_listen =\n[log]\naccess =\n%s", ini);
    fclose(f);
    struct config *cfg = NULL;
    char err[512];
    int rc = config_load_string("conv.ini", full, &cfg, err, sizeof(err));
    if (rc != 0)
        fail_msg("does not load: %s\n%s", err, full);
    free(full);
    return cfg;
}

static const char defaults[] = "## See the \"Settings\" section in README.md for more details\n"
                               "USE_GENERIC_CACHE=true\n"
                               "LANCACHE_IP=10.0.39.1\n"
                               "DNS_BIND_IP=10.0.39.1\n"
                               "UPSTREAM_DNS=8.8.8.8\n"
                               "CACHE_ROOT=./lancache\n"
                               "CACHE_DISK_SIZE=2000g\n"
                               "MIN_FREE_DISK=10g\n"
                               "CACHE_INDEX_SIZE=500m\n"
                               "CACHE_MAX_AGE=3650d\n"
                               "TZ=Europe/London\n";

static void test_lcenv_documented_defaults(void **state)
{
    (void)state;
    unsigned n;
    char *ini = convert(defaults, &n);
    assert_int_equal(n, 10);
    struct config *cfg = load(ini);
    assert_int_equal(cfg->disk_size, 2000ull << 30);
    assert_int_equal(cfg->min_free, 10ull << 30);
    assert_int_equal(cfg->max_age_ms, 3650ull * 86400 * 1000);
    assert_int_equal(cfg->chunk_size, 1u << 20);
    assert_int_equal(cfg->lancache_slice_size, 1u << 20);
    assert_int_equal(cfg->n_lancache_dirs, 1);
    assert_string_equal(cfg->lancache_dirs[0], "./lancache/cache/cache");
    assert_int_equal(cfg->lancache_migrate, CFG_MIGRATE_COPY);
    assert_int_equal(cfg->lancache_settle_ms, 0);
    assert_true(cfg->allow_unlisted);
    assert_int_equal(cfg->n_dns, 1);
    /* Every other variable is a comment saying what to do instead. */
    assert_non_null(strstr(ini, "; LANCACHE_IP=10.0.39.1: "));
    assert_non_null(strstr(ini, "\n;   cacheparty dns --ip 10.0.39.1\n"));
    assert_non_null(strstr(ini, "; DNS_BIND_IP=10.0.39.1: no equivalent"));
    assert_non_null(strstr(ini, "; CACHE_INDEX_SIZE=500m: no equivalent"));
    assert_non_null(strstr(ini, "; TZ=Europe/London: no equivalent"));
    assert_non_null(strstr(ini, "(lancache's default)"));
    config_free(&cfg);
    free(ini);
}

static void test_lcenv_full_env(void **state)
{
    (void)state;
    static const char env[] = "export UPSTREAM_DNS=\"1.1.1.1;9.9.9.9\"\n"
                              "LANCACHE_IP='10.0.0.5 10.0.0.6'   # two addresses\n"
                              "CACHE_DISK_SIZE=1000000m\n"
                              "CACHE_DISK_SIZE=3t\n" /* the last one wins */
                              "MIN_FREE_DISK=50G\n"
                              "CACHE_MAX_AGE=2w\n"
                              "CACHE_SLICE_SIZE=2m\n"
                              "CACHE_ROOT=/srv/lancache\n"
                              "USE_GENERIC_CACHE=false\n"
                              "NGINX_LOG_FORMAT=cachelog-json\n"
                              "CACHE_DOMAINS_REPO=https://github.com/uklans/cache-domains.git\n"
                              "CACHE_DOMAINS_BRANCH=master\n"
                              "NOFETCH=true\n"
                              "STEAMCACHE_IP=10.0.0.7\n"
                              "DISABLE_RIOT=true\n"
                              "NGINX_WORKER_PROCESSES=8\n"
                              "LOGFILE_RETENTION=3560\n"
                              "BEAT_TIME=1h\n"
                              "CACHE_MEM_SIZE=250m\n"
                              "SOMETHING_NEW=42\n"
                              "# a comment\n"
                              "not a variable\n";
    unsigned n;
    char *ini = convert(env, &n);
    assert_int_equal(n, 19);
    struct config *cfg = load(ini);
    assert_int_equal(cfg->n_dns, 2);
    assert_int_equal(cfg->disk_size, 3ull << 40);
    assert_int_equal(cfg->min_free, 50ull << 30);
    assert_int_equal(cfg->max_age_ms, 14ull * 86400 * 1000);
    assert_int_equal(cfg->chunk_size, 2u << 20);
    assert_int_equal(cfg->lancache_slice_size, 2u << 20);
    assert_string_equal(cfg->lancache_dirs[0], "/srv/lancache/cache/cache");
    assert_false(cfg->allow_unlisted);
    assert_int_equal(cfg->access_format, CFG_ACCESS_JSON);
    assert_non_null(strstr(ini, "\n;   cacheparty dns --ip 10.0.0.5 --ip 10.0.0.6\n"));
    assert_non_null(strstr(ini, "--service-ip steam=ADDR"));
    assert_non_null(strstr(ini, "--skip riot"));
    assert_non_null(
        strstr(ini, "; CACHE_DOMAINS_REPO=https://github.com/uklans/cache-domains.git:"));
    assert_non_null(strstr(ini, "; NOFETCH=true: no equivalent needed"));
    assert_non_null(strstr(ini, "; SOMETHING_NEW=42: unknown to cacheparty"));
    assert_null(strstr(ini, "not a variable"));
    config_free(&cfg);
    free(ini);
}

static void test_lcenv_docker_compose_forms(void **state)
{
    (void)state;
    static const char yml[] = "services:\n"
                              "  monolithic:\n"
                              "    image: lancachenet/monolithic:latest\n"
                              "    environment:\n"
                              "      - CACHE_DISK_SIZE=500g\n"
                              "      - \"UPSTREAM_DNS=8.8.8.8\"\n"
                              "  dns:\n"
                              "    environment:\n"
                              "      CACHE_MAX_AGE: \"30d\"\n"
                              "      USE_GENERIC_CACHE: 'true'\n";
    unsigned n;
    char *ini = convert(yml, &n);
    assert_int_equal(n, 4);
    struct config *cfg = load(ini);
    assert_int_equal(cfg->disk_size, 500ull << 30);
    assert_int_equal(cfg->max_age_ms, 30ull * 86400 * 1000);
    assert_true(cfg->allow_unlisted);
    assert_int_equal(cfg->n_lancache_dirs, 0);
    config_free(&cfg);
    free(ini);
}

static void test_lcenv_values_it_cannot_read(void **state)
{
    (void)state;
    static const char env[] = "CACHE_DISK_SIZE=lots\nCACHE_MAX_AGE=forever\nCACHE_SLICE_SIZE=x\n"
                              "USE_GENERIC_CACHE=maybe\nNGINX_LOG_FORMAT=combined\n";
    unsigned n;
    char *ini = convert(env, &n);
    assert_int_equal(n, 5);
    assert_non_null(strstr(ini, "; CACHE_DISK_SIZE=lots: not a size cacheparty reads"));
    assert_non_null(strstr(ini, "; CACHE_MAX_AGE=forever: not a time cacheparty reads"));
    assert_non_null(strstr(ini, "; USE_GENERIC_CACHE=maybe: not a boolean"));
    assert_non_null(strstr(ini, "not a format cacheparty writes"));
    struct config *cfg = load(ini); /* still loads: the defaults stay */
    assert_int_equal(cfg->disk_size, 1000ull << 30);
    config_free(&cfg);
    free(ini);
    ini = convert("", &n);
    assert_int_equal(n, 0);
    free(ini);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lcenv_documented_defaults),
        cmocka_unit_test(test_lcenv_full_env),
        cmocka_unit_test(test_lcenv_docker_compose_forms),
        cmocka_unit_test(test_lcenv_values_it_cannot_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
