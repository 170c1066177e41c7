/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_admit: the admission table. Every rule of admit.h (IP literal and allow_private, the
 * cache-domains lists, the Steam User-Agent rule, allow_unlisted and the identifier of unlisted
 * hosts, with the service-name rule) for every kind (request, redirect, TLS, purge), including
 * the cases where the four copies it replaced answered differently. Lists: the shipped sample
 * conf/cache-domains (tests run from the repository root).
 */
#include "admit.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "domains.h"
#include "http1.h"
#include "util.h"

#define SAMPLE_DIR "conf/cache-domains"
#define STEAM_UA "Valve/Steam HTTP Client 1.0 (4)"

static struct domains *g_sample;

static const enum admit_kind all_kinds[] = {ADMIT_REQUEST, ADMIT_REDIRECT, ADMIT_TLS, ADMIT_PURGE};
static const char *const kind_names[] = {"request", "redirect", "tls", "purge"};

static int sample_setup(void **state)
{
    (void)state;
    char err[256];
    g_sample = domains_load(SAMPLE_DIR, err, sizeof(err));
    if (g_sample == NULL) {
        fprintf(stderr, "sample lists: %s\n", err);
        return -1;
    }
    return 0;
}

static int sample_teardown(void **state)
{
    (void)state;
    domains_free(&g_sample);
    return 0;
}

struct rules {
    bool allow_private, allow_unlisted, steam_ua;
    bool lists; /* the sample lists, else none */
};

struct admit_case {
    struct rules rules;
    const char *authority; /* as a Host field */
    const char *ua;        /* NULL: no User-Agent */
    bool allow;
    enum admit_reason reason;
    const char *ident; /* when allowed */
};

/* Runs <c> as <kind> and checks the verdict. */
static void run_case(const struct admit_case *c, enum admit_kind kind)
{
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.allow_private = c->rules.allow_private;
    cfg.allow_unlisted = c->rules.allow_unlisted;
    cfg.steam_user_agent = c->rules.steam_ua;
    struct h1_authority auth;
    assert_int_equal(h1_authority_parse(c->authority, strlen(c->authority), &auth), 0);
    struct admit_result res;
    memset(&res, 0x5a, sizeof(res));
    admit_host(&cfg, c->rules.lists ? g_sample : NULL, &auth, c->ua, c->ua ? strlen(c->ua) : 0,
               kind, &res);
    if (res.allow != c->allow || res.reason != c->reason)
        fail_msg("%s %s (ua %s): allow %d reason %s, want %d %s", kind_names[kind], c->authority,
                 c->ua ? c->ua : "-", res.allow, admit_reason_name(res.reason), c->allow,
                 admit_reason_name(c->reason));
    if (!c->allow) {
        assert_null(res.ident);
        return;
    }
    assert_non_null(res.ident);
    if (strcmp(res.ident, c->ident) != 0)
        fail_msg("%s %s: identifier %s, want %s", kind_names[kind], c->authority, res.ident,
                 c->ident);
}

static void run_cases_every_kind(const struct admit_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < ARRAY_SIZE(all_kinds); k++)
            run_case(&cases[i], all_kinds[k]);
}

static const struct rules LISTS = {false, false, true, true};
static const struct rules LISTS_OPEN = {false, true, true, true};
static const struct rules PRIVATE_OPEN = {true, true, true, true};
static const struct rules PRIVATE_LISTS = {true, false, true, true};

static void test_admit_ip_literal_refused_for_every_kind_unless_allow_private(void **state)
{
    (void)state;
    static const struct admit_case cases[] = {
        {LISTS, "10.0.0.1", NULL, false, ADMIT_R_IP_LITERAL, NULL},
        {LISTS_OPEN, "10.0.0.1:8080", NULL, false, ADMIT_R_IP_LITERAL, NULL},
        {LISTS_OPEN, "[::1]", STEAM_UA, false, ADMIT_R_IP_LITERAL, NULL},
        {LISTS_OPEN, "93.184.216.34", NULL, false, ADMIT_R_IP_LITERAL, NULL}, /* public too */
        /* allow_private: an address is a host like any other (lists, then allow_unlisted) */
        {PRIVATE_OPEN, "10.0.0.1", NULL, true, ADMIT_R_OK, "10.0.0.1"},
        {PRIVATE_OPEN, "127.0.0.1:8080", NULL, true, ADMIT_R_OK, "127.0.0.1:8080"},
        {PRIVATE_LISTS, "10.0.0.1", NULL, false, ADMIT_R_UNLISTED, NULL},
    };
    run_cases_every_kind(cases, ARRAY_SIZE(cases));
}

static void test_admit_listed_host_gets_its_service_for_every_kind(void **state)
{
    (void)state;
    static const struct admit_case cases[] = {
        {LISTS, "dist.blizzard.com", NULL, true, ADMIT_R_OK, "blizzard"},
        {LISTS, "Dist.Blizzard.COM.:8080", NULL, true, ADMIT_R_OK, "blizzard"},
        {LISTS, "lancache.steamcontent.com", NULL, true, ADMIT_R_OK, "steam"},
        {LISTS, "a.b.download.epicgames.com", "curl/8", true, ADMIT_R_OK, "epicgames"},
        {LISTS_OPEN, "l3cdn.riotgames.com", NULL, true, ADMIT_R_OK, "riot"},
    };
    run_cases_every_kind(cases, ARRAY_SIZE(cases));
}

static void test_admit_unlisted_refused_unless_allow_unlisted_for_every_kind(void **state)
{
    (void)state;
    static const struct admit_case cases[] = {
        {LISTS, "example.org", NULL, false, ADMIT_R_UNLISTED, NULL},
        {LISTS, "evildist.blizzard.com", NULL, false, ADMIT_R_UNLISTED, NULL},
        {{false, false, true, false}, "dist.blizzard.com", NULL, false, ADMIT_R_UNLISTED, NULL},
        /* the identifier of an unlisted host: its authority as sent, normalised, with a port */
        {LISTS_OPEN, "example.org", NULL, true, ADMIT_R_OK, "example.org"},
        {LISTS_OPEN, "Example.ORG.:8080", NULL, true, ADMIT_R_OK, "example.org:8080"},
        {{false, true, true, false}, "example.org", NULL, true, ADMIT_R_OK, "example.org"},
    };
    run_cases_every_kind(cases, ARRAY_SIZE(cases));
}

static void test_admit_unlisted_host_named_like_a_service_gets_a_dotted_identifier(void **state)
{
    (void)state;
    static const struct admit_case cases[] = {
        {LISTS_OPEN, "riot", NULL, true, ADMIT_R_OK, "riot."},
        {LISTS_OPEN, "steam", NULL, true, ADMIT_R_OK, "steam."},
        {{false, true, true, false}, "steam", NULL, true, ADMIT_R_OK, "steam."}, /* no lists */
        {LISTS_OPEN, "riot:8080", NULL, true, ADMIT_R_OK, "riot:8080"}, /* not a service name */
        {LISTS, "riot", NULL, false, ADMIT_R_UNLISTED, NULL},
    };
    run_cases_every_kind(cases, ARRAY_SIZE(cases));
}

/* The Steam rule needs a User-Agent: HTTP kinds have one, a ClientHello never does. */
static void test_admit_steam_user_agent_rule_for_http_kinds_never_for_tls(void **state)
{
    (void)state;
    static const struct rules NOLISTS = {false, false, true, false};
    static const struct rules RULE_OFF = {false, false, false, false};
    static const struct admit_case with_ua = {
        NOLISTS, "cache1.steamcontent.com", STEAM_UA, true, ADMIT_R_OK, "steam"};
    static const enum admit_kind http_kinds[] = {ADMIT_REQUEST, ADMIT_REDIRECT, ADMIT_PURGE};
    for (size_t k = 0; k < ARRAY_SIZE(http_kinds); k++)
        run_case(&with_ua, http_kinds[k]);
    static const struct admit_case tls = {NOLISTS, "cache1.steamcontent.com", STEAM_UA,
                                          false,   ADMIT_R_UNLISTED,          NULL};
    run_case(&tls, ADMIT_TLS);

    static const struct admit_case refused[] = {
        {NOLISTS, "cache1.steamcontent.com", NULL, false, ADMIT_R_UNLISTED, NULL},
        {NOLISTS, "cache1.steamcontent.com", "curl/8.0", false, ADMIT_R_UNLISTED, NULL},
        {NOLISTS, "steamcontent.com", STEAM_UA, false, ADMIT_R_UNLISTED, NULL}, /* bare name */
        {NOLISTS, "evilsteamcontent.com", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
        {NOLISTS, "steamcontent.com.evil.net", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
        {RULE_OFF, "cache1.steamcontent.com", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
        {{true, false, true, false}, "127.0.0.1", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
    };
    run_cases_every_kind(refused, ARRAY_SIZE(refused));
    /* with allow_unlisted, TLS admits the host anyway (under its own name) */
    static const struct admit_case tls_open = {
        {false, true, true, false}, "cache1.steamcontent.com", STEAM_UA, true, ADMIT_R_OK,
        "cache1.steamcontent.com"};
    run_case(&tls_open, ADMIT_TLS);
}

/* Where the four copies differed: a redirect decides as a request does (it had no
 * service-name rule, which never changed the decision), a purge applies the IP-literal rule
 * (it had none), TLS ignores the User-Agent. */
static void test_admit_former_differences_now_answer_alike(void **state)
{
    (void)state;
    static const struct admit_case purge_ip = {LISTS_OPEN, "192.168.1.5",      NULL,
                                               false,      ADMIT_R_IP_LITERAL, NULL};
    run_case(&purge_ip, ADMIT_PURGE);
    run_case(&purge_ip, ADMIT_REQUEST);
    static const struct admit_case redirect_service = {LISTS_OPEN, "wsus",     NULL,
                                                       true,       ADMIT_R_OK, "wsus."};
    run_case(&redirect_service, ADMIT_REDIRECT);
    run_case(&redirect_service, ADMIT_REQUEST);
    static const struct admit_case purge_unlisted = {LISTS, "unlisted.example", NULL,
                                                     false, ADMIT_R_UNLISTED,   NULL};
    run_case(&purge_unlisted, ADMIT_PURGE);
    run_case(&purge_unlisted, ADMIT_REQUEST);
}

static void test_admit_reason_names(void **state)
{
    (void)state;
    assert_string_equal(admit_reason_name(ADMIT_R_OK), "ok");
    assert_string_equal(admit_reason_name(ADMIT_R_IP_LITERAL), "ip_literal");
    assert_string_equal(admit_reason_name(ADMIT_R_UNLISTED), "unlisted");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admit_ip_literal_refused_for_every_kind_unless_allow_private),
        cmocka_unit_test(test_admit_listed_host_gets_its_service_for_every_kind),
        cmocka_unit_test(test_admit_unlisted_refused_unless_allow_unlisted_for_every_kind),
        cmocka_unit_test(test_admit_unlisted_host_named_like_a_service_gets_a_dotted_identifier),
        cmocka_unit_test(test_admit_steam_user_agent_rule_for_http_kinds_never_for_tls),
        cmocka_unit_test(test_admit_former_differences_now_answer_alike),
        cmocka_unit_test(test_admit_reason_names),
    };
    return cmocka_run_group_tests(tests, sample_setup, sample_teardown);
}
