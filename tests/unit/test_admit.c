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
    bool allow_private, allow_unlisted;
    enum cfg_steam_ua steam_ua;
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

/* steam_hosts of the next run_case (tests that extend the built-in list set them) */
static char *g_steam_hosts[4];
static size_t g_n_steam_hosts;

/* Runs <c> as <kind> and checks the verdict. */
static void run_case(const struct admit_case *c, enum admit_kind kind)
{
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    memcpy(cfg.steam_hosts, g_steam_hosts, sizeof(g_steam_hosts));
    cfg.n_steam_hosts = g_n_steam_hosts;
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

/* Every built-in Steam content host (a wildcard by a subdomain of it) is "steam" with the
 * Steam agent, as a request, a redirect target and a purge; never as TLS, never without the
 * agent, never with steam_user_agent = no. */
static void test_admit_every_builtin_steam_host_is_steam(void **state)
{
    (void)state;
    static const struct rules NOLISTS = {false, false, CFG_STEAM_UA_YES, false};
    static const struct rules OPEN = {false, true, CFG_STEAM_UA_YES, false};
    static const struct rules OFF = {false, false, CFG_STEAM_UA_NO, false};
    static const enum admit_kind http_kinds[] = {ADMIT_REQUEST, ADMIT_REDIRECT, ADMIT_PURGE};
    const char *const *names;
    size_t n = admit_steam_builtin(&names);
    assert_true(n >= 40);
    for (size_t i = 0; i < n; i++) {
        char host[300];
        const char *base = names[i][0] == '*' ? names[i] + 2 : NULL;
        snprintf(host, sizeof(host), "%s%s", base != NULL ? "cache7-fra2." : "",
                 base != NULL ? base : names[i]);
        struct admit_case c = {NOLISTS, host, STEAM_UA, true, ADMIT_R_OK, "steam"};
        for (size_t k = 0; k < ARRAY_SIZE(http_kinds); k++)
            run_case(&c, http_kinds[k]);
        c.allow = false;
        c.reason = ADMIT_R_UNLISTED;
        c.ident = NULL;
        run_case(&c, ADMIT_TLS);
        c.ua = "Mozilla/5.0";
        run_case(&c, ADMIT_REQUEST);
        c.ua = STEAM_UA;
        c.rules = OFF;
        run_case(&c, ADMIT_REQUEST);
        if (base != NULL) { /* a wildcard covers subdomains only */
            struct admit_case bare = {NOLISTS, base, STEAM_UA, false, ADMIT_R_UNLISTED, NULL};
            if (!admit_is_steam_host(&(struct config){0}, base))
                run_case(&bare, ADMIT_REQUEST);
        } else { /* an exact name covers itself only: under allow_unlisted, its own name */
            char sub[320];
            snprintf(sub, sizeof(sub), "x.%s", names[i]);
            struct admit_case below = {OPEN, sub, STEAM_UA, true, ADMIT_R_OK, sub};
            if (!admit_is_steam_host(&(struct config){0}, sub))
                run_case(&below, ADMIT_REQUEST);
        }
    }
}

/* Another customer's name under the CDN domain of a built-in host, a look-alike, or an unrelated
 * host: never "steam" under yes (403 with allow_unlisted = no, its own name with yes); any of
 * them "steam" under any, even a listed host of another service. */
static void test_admit_steam_agent_on_other_hosts_only_under_any(void **state)
{
    (void)state;
    static const char *const others[] = {
        "f3b7q2p4.ssl.hwcdn.net",
        "ssl.hwcdn.net",
        "other.akamaized.net",
        "akamaized.net",
        "x.akamaihd.net",
        "steampipe.akamaized.net.evil.com",
        "evil-steampipe.akamaized.net",
        "www.example.org",
        "steam.qtlglb.com",
        "comcast.net",
        "valve.net",
        "steamstatic.com",
    };
    static const struct rules YES = {false, false, CFG_STEAM_UA_YES, true};
    static const struct rules YES_OPEN = {false, true, CFG_STEAM_UA_YES, true};
    static const struct rules ANY = {false, false, CFG_STEAM_UA_ANY, true};
    for (size_t i = 0; i < ARRAY_SIZE(others); i++) {
        struct admit_case no = {YES, others[i], STEAM_UA, false, ADMIT_R_UNLISTED, NULL};
        run_case(&no, ADMIT_REQUEST);
        struct admit_case own = {YES_OPEN, others[i], STEAM_UA, true, ADMIT_R_OK, others[i]};
        run_case(&own, ADMIT_REQUEST);
        struct admit_case any = {ANY, others[i], STEAM_UA, true, ADMIT_R_OK, "steam"};
        run_case(&any, ADMIT_REQUEST);
        run_case(&any, ADMIT_PURGE);
        struct admit_case any_tls = {ANY, others[i], STEAM_UA, false, ADMIT_R_UNLISTED, NULL};
        run_case(&any_tls, ADMIT_TLS);
        struct admit_case any_no_ua = {ANY, others[i], "curl/8", false, ADMIT_R_UNLISTED, NULL};
        run_case(&any_no_ua, ADMIT_REQUEST);
    }
    /* any: the agent comes before the lists (lancache's map); yes: the lists first */
    static const struct admit_case cases[] = {
        {ANY, "level3.blizzard.com", STEAM_UA, true, ADMIT_R_OK, "steam"},
        {ANY, "level3.blizzard.com", NULL, true, ADMIT_R_OK, "blizzard"},
        {YES, "level3.blizzard.com", STEAM_UA, true, ADMIT_R_OK, "blizzard"},
        /* the IP-literal rule stays first */
        {ANY, "10.1.2.3", STEAM_UA, false, ADMIT_R_IP_LITERAL, NULL},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        run_case(&cases[i], ADMIT_REQUEST);
}

/* steam_hosts adds names and wildcards to the built-in list. */
static void test_admit_steam_hosts_extend_the_builtin_list(void **state)
{
    (void)state;
    static const struct rules YES = {false, false, CFG_STEAM_UA_YES, false};
    g_steam_hosts[0] = "mirror.example.net";
    g_steam_hosts[1] = "*.steam.example.org";
    g_n_steam_hosts = 2;
    static const struct admit_case cases[] = {
        {YES, "mirror.example.net", STEAM_UA, true, ADMIT_R_OK, "steam"},
        {YES, "a.steam.example.org", STEAM_UA, true, ADMIT_R_OK, "steam"},
        {YES, "steam.example.org", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
        {YES, "x.mirror.example.net", STEAM_UA, false, ADMIT_R_UNLISTED, NULL},
        {YES, "mirror.example.net", "curl/8", false, ADMIT_R_UNLISTED, NULL},
        {YES, "cache1.steamcontent.com", STEAM_UA, true, ADMIT_R_OK, "steam"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        run_case(&cases[i], ADMIT_REQUEST);
    g_n_steam_hosts = 0;
    static const struct admit_case gone = {YES,   "mirror.example.net", STEAM_UA,
                                           false, ADMIT_R_UNLISTED,     NULL};
    run_case(&gone, ADMIT_REQUEST);
}

/* The agent is found anywhere in the field, case-sensitively, within its length. */
static void test_admit_steam_agent_variants(void **state)
{
    (void)state;
    static const struct rules YES = {false, false, CFG_STEAM_UA_YES, false};
    static const char with_nul[] = "x\0Valve/Steam HTTP Client 1.0";
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.steam_user_agent = CFG_STEAM_UA_YES;
    struct h1_authority auth;
    assert_int_equal(h1_authority_parse("c.steamcontent.com", 18, &auth), 0);
    struct admit_result res;
    admit_host(&cfg, NULL, &auth, with_nul, sizeof(with_nul) - 1, ADMIT_REQUEST, &res);
    assert_true(res.allow);
    admit_host(&cfg, NULL, &auth, DOMAINS_STEAM_UA, sizeof(DOMAINS_STEAM_UA) - 2, ADMIT_REQUEST,
               &res);
    assert_false(res.allow);
    static const struct admit_case cases[] = {
        {YES, "c.steamcontent.com", "Mozilla/5.0 Valve/Steam HTTP Client 1.0 (c)", true, ADMIT_R_OK,
         "steam"},
        {YES, "c.steamcontent.com", DOMAINS_STEAM_UA, true, ADMIT_R_OK, "steam"},
        {YES, "c.steamcontent.com", "Valve/Steam HTTP Client 1.1", false, ADMIT_R_UNLISTED, NULL},
        {YES, "c.steamcontent.com", "valve/steam http client 1.0", false, ADMIT_R_UNLISTED, NULL},
        {YES, "c.steamcontent.com", "", false, ADMIT_R_UNLISTED, NULL},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        run_case(&cases[i], ADMIT_REQUEST);
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
        cmocka_unit_test(test_admit_every_builtin_steam_host_is_steam),
        cmocka_unit_test(test_admit_steam_agent_on_other_hosts_only_under_any),
        cmocka_unit_test(test_admit_steam_hosts_extend_the_builtin_list),
        cmocka_unit_test(test_admit_steam_agent_variants),
        cmocka_unit_test(test_admit_reason_names),
    };
    return cmocka_run_group_tests(tests, sample_setup, sample_teardown);
}
