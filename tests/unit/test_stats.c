/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_stats: the export tables of stats.h. stats_export() visits each family once, in the order
 * /metrics and /status print them, with samples from g_stats, g_stats_status and the providers.
 */
#include "stats.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* What one export produced, as "family{label=value} N" lines ("family N" unlabelled). */
struct recorder {
    char fams[128][96];
    char types[128][8];
    size_t n_fams;
    char lines[256][160];
    size_t n_lines;
    const char *label; /* of the current family */
};

static void on_family(const struct stats_family *fam, void *arg)
{
    struct recorder *r = arg;

    assert_true(r->n_fams < 128);
    snprintf(r->fams[r->n_fams], sizeof(r->fams[0]), "%s", fam->name);
    snprintf(r->types[r->n_fams], sizeof(r->types[0]), "%s", fam->type);
    r->n_fams++;
    r->label = fam->label;
    assert_non_null(fam->help);
}

static void on_sample(const char *label_value, uint64_t value, void *arg)
{
    struct recorder *r = arg;
    char fam[96];

    assert_true(r->n_lines < 256);
    assert_true((label_value == NULL) == (r->label == NULL));
    memcpy(fam, r->fams[r->n_fams - 1], sizeof(fam));
    if (label_value != NULL)
        snprintf(r->lines[r->n_lines], sizeof(r->lines[0]), "%s{%s=%s} %llu", fam, r->label,
                 label_value, (unsigned long long)value);
    else
        snprintf(r->lines[r->n_lines], sizeof(r->lines[0]), "%s %llu", fam,
                 (unsigned long long)value);
    r->n_lines++;
}

static bool has_line(const struct recorder *r, const char *line)
{
    for (size_t i = 0; i < r->n_lines; i++) {
        if (strcmp(r->lines[i], line) == 0)
            return true;
    }
    return false;
}

static size_t family_index(const struct recorder *r, const char *name)
{
    for (size_t i = 0; i < r->n_fams; i++) {
        if (strcmp(r->fams[i], name) == 0)
            return i;
    }
    fail_msg("family %s not exported", name);
    return 0;
}

static void record(struct recorder *r)
{
    memset(r, 0, sizeof(*r));
    stats_export(on_family, on_sample, r);
}

static void test_stats_every_family_is_exported_once_with_a_valid_name(void **state)
{
    static struct recorder r;

    (void)state;
    record(&r);
    for (size_t i = 0; i < r.n_fams; i++) {
        for (const char *p = r.fams[i]; *p != '\0'; p++)
            assert_true((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_');
        for (size_t k = i + 1; k < r.n_fams; k++)
            assert_string_not_equal(r.fams[i], r.fams[k]);
        assert_true(strcmp(r.types[i], "counter") == 0 || strcmp(r.types[i], "gauge") == 0);
    }
}

static void test_stats_every_listed_family_has_its_fields(void **state)
{
    static struct recorder r;

    (void)state;
    memset(g_stats_status, 0, sizeof(g_stats_status));
    record(&r);
    /* requests_total has no sample before a response; every other family has at least one */
    for (size_t i = 1; i < r.n_fams; i++) {
        size_t len = strlen(r.fams[i]);
        bool found = false;
        for (size_t k = 0; k < r.n_lines && !found; k++)
            found = strncmp(r.lines[k], r.fams[i], len) == 0 &&
                    (r.lines[k][len] == ' ' || r.lines[k][len] == '{');
        assert_true(found);
    }
}

static void test_stats_listed_families_come_first_in_table_order(void **state)
{
    static struct recorder r;

    (void)state;
    record(&r);
    assert_string_equal(r.fams[0], "requests_total");
    assert_string_equal(r.fams[1], "response_bytes_total");
    assert_true(family_index(&r, "tls_refused_total") < family_index(&r, "conn_accepted_total"));
}

static void test_stats_field_in_a_labelled_family_is_a_sample_with_its_label(void **state)
{
    static struct recorder r;

    (void)state;
    memset(&g_stats, 0, sizeof(g_stats));
    g_stats.bytes_hit = 5;
    g_stats.cache_disk_write_errors = 7;
    g_stats.loops = 2;
    record(&r);
    assert_true(has_line(&r, "response_bytes_total{cache=hit} 5"));
    assert_true(has_line(&r, "response_bytes_total{cache=miss} 0"));
    assert_true(has_line(&r, "errors_total{kind=disk_write} 7"));
    assert_true(has_line(&r, "errors_total{kind=loop} 2"));
    /* and not again on its own */
    assert_false(has_line(&r, "bytes_hit_total 5"));
    memset(&g_stats, 0, sizeof(g_stats));
}

static void test_stats_other_fields_are_exported_alone_counters_with_total(void **state)
{
    static struct recorder r;

    (void)state;
    memset(&g_stats, 0, sizeof(g_stats));
    g_stats.fetches = 3;
    g_stats.conn_open = 4;
    g_stats.requests = 9;
    record(&r);
    assert_true(has_line(&r, "fetches_total 3"));
    assert_true(has_line(&r, "conn_open 4"));
    assert_true(has_line(&r, "client_requests_total 9")); /* a family name of its own */
    memset(&g_stats, 0, sizeof(g_stats));
}

static void test_stats_status_family_has_one_sample_per_code_answered(void **state)
{
    static struct recorder r;

    (void)state;
    memset(g_stats_status, 0, sizeof(g_stats_status));
    g_stats_status[200] = 11;
    g_stats_status[404] = 1;
    record(&r);
    assert_string_equal(r.lines[0], "requests_total{status=200} 11");
    assert_string_equal(r.lines[1], "requests_total{status=404} 1");
    assert_string_equal(r.lines[2], "response_bytes_total{cache=hit} 0");
    memset(g_stats_status, 0, sizeof(g_stats_status));
}

static unsigned provider_calls;

static void provide(struct stats *st, void *arg)
{
    provider_calls++;
    st->cache_mem_bytes = *(const uint64_t *)arg;
}

static void test_stats_providers_write_their_gauges_before_each_export(void **state)
{
    static struct recorder r;
    static uint64_t mem = 4096;

    (void)state;
    stats_provider_add(provide, &mem);
    record(&r);
    assert_int_equal(provider_calls, 1);
    assert_true(has_line(&r, "cache_bytes{tier=memory} 4096"));
    mem = 8192;
    record(&r);
    assert_int_equal(provider_calls, 2);
    assert_true(has_line(&r, "cache_bytes{tier=memory} 8192"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_every_family_is_exported_once_with_a_valid_name),
        cmocka_unit_test(test_stats_every_listed_family_has_its_fields),
        cmocka_unit_test(test_stats_listed_families_come_first_in_table_order),
        cmocka_unit_test(test_stats_field_in_a_labelled_family_is_a_sample_with_its_label),
        cmocka_unit_test(test_stats_other_fields_are_exported_alone_counters_with_total),
        cmocka_unit_test(test_stats_status_family_has_one_sample_per_code_answered),
        cmocka_unit_test(test_stats_providers_write_their_gauges_before_each_export),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
