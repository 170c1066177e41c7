/* LDFLAGS: -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_domains: the cache-domains matcher. Loads the shipped sample conf/cache-domains (tests run
 * from the repository root) and lists written to mkdtemp directories under /tmp (removed by each
 * test's teardown): exact and wildcard matches on label boundaries, look-alike hosts, precedence,
 * the Steam User-Agent rule, every JSON and list error with its "FILE:LINE: message", counts, the
 * four DNS export formats (exact text) and a 10k-name list matched 1M times without allocating
 * (malloc/calloc/realloc are wrapped to count calls).
 */
#include "domains.h"

#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util.h"

#define SAMPLE_DIR "conf/cache-domains"

/* ---- allocation counter ---- */

void *__real_malloc(size_t len);
void *__real_calloc(size_t n, size_t len);
void *__real_realloc(void *p, size_t len);
void *__wrap_malloc(size_t len);
void *__wrap_calloc(size_t n, size_t len);
void *__wrap_realloc(void *p, size_t len);

static size_t g_allocs;

void *__wrap_malloc(size_t len)
{
    g_allocs++;
    return __real_malloc(len);
}

void *__wrap_calloc(size_t n, size_t len)
{
    g_allocs++;
    return __real_calloc(n, len);
}

void *__wrap_realloc(void *p, size_t len)
{
    g_allocs++;
    return __real_realloc(p, len);
}

/* ---- fixtures ---- */

static struct domains *g_sample;

static int sample_setup(void **state)
{
    char err[512] = "";

    (void)state;
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

struct tmp {
    char dir[64];
};

static int tmp_setup(void **state)
{
    struct tmp *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "/tmp/cp_domains_XXXXXX");
    if (mkdtemp(t->dir) == NULL) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int tmp_teardown(void **state)
{
    struct tmp *t = *state;
    int rc = nftw(t->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);

    free(t);
    return rc;
}

/* Writes <len> bytes of <text> to <dir>/<name> (SIZE_MAX: strlen). */
static void write_file_len(const char *dir, const char *name, const char *text, size_t len)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    if (len == SIZE_MAX)
        len = strlen(text);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    write_file_len(dir, name, text, SIZE_MAX);
}

/* A one-service cache_domains.json naming "svc" with the list "list.txt" = <list>. */
static void write_one_service(const char *dir, const char *list)
{
    write_file(dir, "cache_domains.json",
               "{\"cache_domains\": [{\"name\": \"svc\", \"domain_files\": [\"list.txt\"]}]}\n");
    write_file(dir, "list.txt", list);
}

static struct domains *load_ok(const char *dir)
{
    char err[512] = "";
    struct domains *d = domains_load(dir, err, sizeof(err));

    if (d == NULL)
        fail_msg("unexpected load error: %s", err);
    return d;
}

/* Checks that loading <dir> fails with "<dir>/<want>" (printf format after the dir). */
static void load_err(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void load_err(const char *dir, const char *fmt, ...)
{
    char err[512] = "", want[512], tail[400];
    struct domains *d;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(tail, sizeof(tail), fmt, ap);
    va_end(ap);
    snprintf(want, sizeof(want), "%s/%s", dir, tail);
    d = domains_load(dir, err, sizeof(err));
    assert_null(d);
    assert_string_equal(err, want);
}

/* A JSON file <json> in <dir> must be refused with "cache_domains.json:<want>". */
static void json_err(const char *dir, const char *json, const char *want)
{
    write_file(dir, "cache_domains.json", json);
    load_err(dir, "cache_domains.json:%s", want);
}

/* A list <list> loads, its malformed line skipped and counted, the first reported as
 * "list.txt:<want>". */
static void list_err(const char *dir, const char *list, const char *want)
{
    char full[512];
    const char *first;
    write_one_service(dir, list);
    struct domains *d = load_ok(dir);
    snprintf(full, sizeof(full), "%s/list.txt:%s", dir, want);
    assert_int_equal(domains_skipped_lines(d, &first), 1);
    assert_string_equal(first, full);
    domains_free(&d);
}

static void match_is(const struct domains *d, const char *host, const char *want)
{
    const char *got = domains_match(d, host);

    if (want == NULL && got != NULL)
        fail_msg("%s: matched \"%s\", want no match", host ? host : "(null)", got);
    if (want != NULL && (got == NULL || strcmp(got, want) != 0))
        fail_msg("%s: matched %s, want \"%s\"", host ? host : "(null)", got ? got : "nothing",
                 want);
}

/* ---- the sample lists ---- */

static void test_domains_load_sample_counts(void **state)
{
    size_t services = 0, names = 0;

    (void)state;
    domains_counts(g_sample, &services, &names);
    assert_int_equal(services, 5);
    assert_int_equal(names, 8 + 7 + 5 + 12 + 6);
}

static void test_domains_is_service(void **state)
{
    (void)state;
    assert_true(domains_is_service(g_sample, "blizzard"));
    assert_true(domains_is_service(g_sample, "WSUS"));
    assert_true(domains_is_service(g_sample, "steam"));
    assert_true(domains_is_service(NULL, "steam")); /* the Steam user-agent rule's name */
    assert_false(domains_is_service(NULL, "blizzard"));
    assert_false(domains_is_service(g_sample, "blizzard."));
    assert_false(domains_is_service(g_sample, "level3.blizzard.com"));
    assert_false(domains_is_service(g_sample, "blizzard:8080"));
}

static void test_domains_cache_identifier(void **state)
{
    char own[16];

    (void)state;
    /* unlisted: 403 (NULL), or its own authority */
    assert_null(domains_cache_identifier(g_sample, "example.org", false, own, sizeof(own)));
    assert_string_equal(
        domains_cache_identifier(g_sample, "example.org:8080", true, own, sizeof(own)),
        "example.org:8080");
    /* unlisted and named like a service: never the service's keys */
    assert_string_equal(domains_cache_identifier(g_sample, "riot", true, own, sizeof(own)),
                        "riot.");
    assert_string_equal(domains_cache_identifier(NULL, "steam", true, own, sizeof(own)), "steam.");
    /* no room for the dot: refused rather than shared */
    assert_null(domains_cache_identifier(g_sample, "riot", true, own, 5));
}

static void test_domains_match_exact_names(void **state)
{
    (void)state;
    match_is(g_sample, "lancache.steamcontent.com", "steam");
    match_is(g_sample, "level3.blizzard.com", "blizzard");
    match_is(g_sample, "epicgames-download1.akamaized.net", "epicgames");
    match_is(g_sample, "riotgamespatcher-a.akamaihd.net", "riot");
    match_is(g_sample, "amupdatedl.microsoft.com", "wsus");
    match_is(g_sample, "download.epicgames.com", "epicgames");
    match_is(g_sample, "dl.delivery.mp.microsoft.com", "wsus");
}

static void test_domains_match_wildcard_subdomains(void **state)
{
    (void)state;
    match_is(g_sample, "cache1-fra1.steamcontent.com", "steam");
    match_is(g_sample, "a.b.c.steamcontent.com", "steam");
    match_is(g_sample, "eu.cdn.blizzard.com", "blizzard");
    match_is(g_sample, "x.y.download.epicgames.com", "epicgames");
    match_is(g_sample, "lol.dyn.riotcdn.net", "riot");
    match_is(g_sample, "7.tlu.dl.delivery.mp.microsoft.com", "wsus");
    match_is(g_sample, "a.windowsupdate.com", "wsus");
}

static void test_domains_match_wildcard_not_bare_domain(void **state)
{
    (void)state;
    match_is(g_sample, "steamcontent.com", NULL);
    match_is(g_sample, "cdn.blizzard.com", NULL);
    match_is(g_sample, "dyn.riotcdn.net", NULL);
    match_is(g_sample, "windowsupdate.com", NULL);
    match_is(g_sample, "update.microsoft.com", NULL);
}

static void test_domains_match_lookalikes_refused(void **state)
{
    static const char *const hosts[] = {
        "evilsteamcontent.com",
        "xsteamcontent.com",
        "steamcontent.com.evil.net",
        "lancache.steamcontent.com.evil.net",
        "lancache.steamcontent.co",
        "steamcontent",
        "com",
        "xlevel3.blizzard.com",
        "level3.blizzard.com.evil",
        "evil-level3.blizzard.com",
        "blizzard.com",
        "cdnxblizzard.com",
        "eu.cdnxblizzard.com",
        "cdn.blizzard.com.evil.net",
        "xdyn.riotcdn.net",
        "a.xdyn.riotcdn.net",
        "riotgamespatcher-a.akamaihd.ne",
        "example.com",
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(hosts); i++)
        match_is(g_sample, hosts[i], NULL);
}

/* The caller lowercases and strips the trailing dot (h1_authority_parse): this module does not. */
static void test_domains_match_host_not_normalised_no_match(void **state)
{
    char long_host[300];

    (void)state;
    match_is(g_sample, "LEVEL3.blizzard.com", NULL);
    match_is(g_sample, "lancache.SteamContent.com", NULL);
    match_is(g_sample, "lancache.steamcontent.com.", NULL);
    match_is(g_sample, "A.STEAMCONTENT.COM", NULL);
    match_is(g_sample, ".steamcontent.com", NULL);
    match_is(g_sample, "a..steamcontent.com", NULL);
    match_is(g_sample, ".lancache.steamcontent.com", NULL);
    match_is(g_sample, "", NULL);
    match_is(g_sample, NULL, NULL);
    memset(long_host, 'a', sizeof(long_host));
    strcpy(long_host + sizeof(long_host) - 20, ".steamcontent.com");
    match_is(g_sample, long_host, NULL);
}

static void test_domains_match_null_domains_no_match(void **state)
{
    (void)state;
    match_is(NULL, "lancache.steamcontent.com", NULL);
    match_is(NULL, "a.steamcontent.com", NULL);
}

static void test_domains_match_most_specific_then_first_service(void **state)
{
    struct tmp *t = *state;
    struct domains *d;
    size_t services, names;

    write_file(t->dir, "cache_domains.json",
               "{\"cache_domains\": [\n"
               "  {\"name\": \"a\", \"domain_files\": [\"a.txt\"]},\n"
               "  {\"name\": \"b\", \"domain_files\": [\"b.txt\", \"a.txt\"]},\n"
               "  {\"name\": \"c\", \"domain_files\": []}\n"
               "]}\n");
    write_file(t->dir, "a.txt", "*.example.com\ndup.example.org\n");
    write_file(t->dir, "b.txt",
               "dup.example.org\nx.example.com\n*.deep.example.com\n*.example.com\n");
    d = load_ok(t->dir);
    match_is(d, "dup.example.org", "a");    /* same entry twice: first service */
    match_is(d, "y.example.com", "a");      /* same wildcard twice: first service */
    match_is(d, "x.example.com", "b");      /* exact beats a wildcard */
    match_is(d, "z.x.example.com", "a");    /* x.example.com is exact only */
    match_is(d, "y.deep.example.com", "b"); /* longer wildcard beats a shorter one */
    match_is(d, "a.b.y.deep.example.com", "b");
    match_is(d, "deep.example.com", "a"); /* bare deep.example.com: only *.example.com */
    domains_counts(d, &services, &names);
    assert_int_equal(services, 3);
    assert_int_equal(names, 4);
    domains_free(&d);
    assert_null(d);
}

static void test_domains_counts_null_is_zero(void **state)
{
    size_t services = 7, names = 7;

    (void)state;
    domains_counts(NULL, &services, &names);
    assert_int_equal(services, 0);
    assert_int_equal(names, 0);
    domains_counts(g_sample, NULL, NULL);
    domains_free(NULL);
}

/* ---- list syntax ---- */

static void test_domains_load_list_normalises_entries(void **state)
{
    struct tmp *t = *state;
    struct domains *d;
    size_t names;

    write_one_service(t->dir, "\xef\xbb\xbf# a comment\r\n"
                              "\r\n"
                              "  Lancache.SteamContent.COM.  # trailing comment\r\n"
                              "\t*.Dyn.RiotCDN.net.\t\n"
                              "   # indented comment\n"
                              "under_score-1.example.org\n"
                              "single\n"
                              "last.example.net");
    d = load_ok(t->dir);
    match_is(d, "lancache.steamcontent.com", "svc");
    match_is(d, "x.dyn.riotcdn.net", "svc");
    match_is(d, "dyn.riotcdn.net", NULL);
    match_is(d, "under_score-1.example.org", "svc");
    match_is(d, "single", "svc");
    match_is(d, "last.example.net", "svc");
    domains_counts(d, NULL, &names);
    assert_int_equal(names, 5);
    domains_free(&d);
}

static void test_domains_load_list_errors_file_line(void **state)
{
    struct tmp *t = *state;
    char label64[80], name254[300], line[320];

    /* the good lines around a bad one are kept; every bad one is counted, the first reported */
    write_one_service(t->dir, "ok.example.com\nbad host.example.com\n*.good.example.net\n"
                              "a..b\n*.com\n");
    struct domains *d = load_ok(t->dir);
    const char *first;
    assert_int_equal(domains_skipped_lines(d, &first), 3);
    assert_non_null(strstr(first, "list.txt:2: invalid name \"bad host.example.com\""));
    match_is(d, "ok.example.com", "svc");
    match_is(d, "x.good.example.net", "svc");
    match_is(d, "com", NULL);
    domains_free(&d);
    write_one_service(t->dir, "ok.example.com\n");
    d = load_ok(t->dir);
    assert_int_equal(domains_skipped_lines(d, &first), 0);
    assert_string_equal(first, "");
    domains_free(&d);

    list_err(t->dir, "ok.example.com\n# comment\n\nbad host.example.com\n",
             "4: invalid name \"bad host.example.com\": invalid character ' '");
    list_err(t->dir, "a.*.example.com\n",
             "1: invalid name \"a.*.example.com\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, "ok.com\n*\n",
             "2: invalid name \"*\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, "**.example.com\n",
             "1: invalid name \"**.example.com\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, "*.*.example.com\n",
             "1: invalid name \"*.*.example.com\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, "example*.com\n",
             "1: invalid name \"example*.com\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, "a..example.com\n", "1: invalid name \"a..example.com\": empty label");
    list_err(t->dir, ".example.com\n", "1: invalid name \".example.com\": empty label");
    list_err(t->dir, "example.com..\n", "1: invalid name \"example.com..\": empty label");
    list_err(t->dir, "*.\n",
             "1: invalid name \"*.\": '*' is allowed only as a leading \"*.\" label");
    list_err(t->dir, ".\n", "1: invalid name \".\": empty label");
    list_err(t->dir, "*.com\n",
             "1: invalid name \"*.com\": a wildcard over a single label (a top-level domain) is "
             "refused");
    list_err(t->dir, "ex\x01mple.com\n", "1: invalid name \"ex\\x01mple.com\": invalid byte 0x01");
    list_err(t->dir, "h\xc3\xa9.example.com\n",
             "1: invalid name \"h\\xc3\\xa9.example.com\": invalid byte 0xc3");
    list_err(t->dir, "http://example.com/\n",
             "1: invalid name \"http://example.com/\": invalid character ':'");

    memset(label64, 'a', 64);
    strcpy(label64 + 64, ".com\n");
    snprintf(line, sizeof(line), "1: invalid name \"%.60s...\": label longer than 63 characters",
             label64);
    list_err(t->dir, label64, line);

    for (size_t i = 0; i < 254; i += 2)
        memcpy(name254 + i, "a.", 2);
    name254[253] = 'b';
    name254[254] = '\n';
    name254[255] = '\0';
    snprintf(line, sizeof(line), "1: invalid name \"%.60s...\": name longer than 253 characters",
             name254);
    list_err(t->dir, name254, line);
}

/* ---- cache_domains.json ---- */

static void test_domains_load_json_unknown_members_ignored(void **state)
{
    struct tmp *t = *state;
    struct domains *d;

    write_file(
        t->dir, "cache_domains.json",
        "\xef\xbb\xbf{\n"
        "  \"version\": 2, \"other\": null,\n"
        "  \"cache_domains\": [\n"
        "    {\"name\": \"svc\", \"description\": \"tab\\t quote\\\" \\u00e9\\ud83d\\ude00 \\/\",\n"
        "     \"notes\": \"x\", \"mixed_content\": true, \"n\": [-0.5e+3, 0, 12, 1E2, false],\n"
        "     \"deep\": {\"a\": {\"b\": [[], {}]}},\n"
        "     \"domain_files\": [\"sub/list.txt\"]}\n"
        "  ]\n"
        "}\n");
    {
        char sub[128];

        snprintf(sub, sizeof(sub), "%s/sub", t->dir);
        assert_int_equal(mkdir(sub, 0700), 0);
    }
    write_file(t->dir, "sub/list.txt", "a.example.com\n");
    d = load_ok(t->dir);
    match_is(d, "a.example.com", "svc");
    domains_free(&d);
}

static void test_domains_load_json_syntax_errors(void **state)
{
    struct tmp *t = *state;
    char deep[200];
    size_t o = 0;

    json_err(t->dir, "", "1: unexpected token near end of file");
    json_err(t->dir, "{\"cache_domains\": [\n  {\"name\": \"a\",\n",
             "3: string or '}' expected near end of file");
    json_err(t->dir, "{\"cache_domains\": [\n  {\"name\": \"a",
             "2: premature end of input near '\"a' (column 13)");
    json_err(t->dir, "{\"cache_domains\": [\n  {\"name\": \"a\n\"}]}",
             "2: unexpected newline near '\"a' (column 13)");
    json_err(t->dir, "{\"cache_domains\": []}\n}", "2: end of file expected near '}' (column 1)");
    json_err(t->dir, "{\"cache_domains\": [1,]}", "1: unexpected token near ']' (column 22)");
    json_err(t->dir, "{\"cache_domains\": [], }", "1: string or '}' expected near '}' (column 23)");
    json_err(t->dir, "{\"cache_domains\" []}", "1: ':' expected near '[' (column 18)");
    json_err(t->dir, "{'cache_domains': []}", "1: string or '}' expected near ''' (column 2)");
    json_err(t->dir, "{\"a\": tru}", "1: invalid token near 'tru' (column 9)");
    json_err(t->dir, "{\"a\": 01}", "1: invalid token near '0' (column 7)");
    json_err(t->dir, "{\"a\": -}", "1: invalid token near '-' (column 7)");
    json_err(t->dir, "{\"a\": 1.}", "1: invalid token near '1.' (column 8)");
    json_err(t->dir, "{\"a\": 1e}", "1: invalid token near '1e' (column 8)");
    json_err(t->dir, "{\"a\": \"\\x\"}", "1: invalid escape near '\"\\x' (column 9)");
    json_err(t->dir, "{\"a\": \"\\u12\"}", "1: invalid escape near '\"\\u12\"' (column 12)");
    json_err(t->dir, "{\"a\": \"\\u00", "1: invalid escape near '\"\\u00' (column 11)");
    json_err(t->dir, "{\"a\": \"\\ud800\"}",
             "1: invalid Unicode '\\uD800' near '\"\\ud800\"' (column 14)");
    json_err(t->dir, "{\"a\": \"\\ud800\\u0041\"}",
             "1: invalid Unicode '\\uD800\\u0041' near '\"\\ud800\\u0041\"' (column 20)");
    json_err(t->dir, "{\"a\": \"\\udc00\"}",
             "1: invalid Unicode '\\uDC00' near '\"\\udc00\"' (column 14)");
    json_err(t->dir, "{\"a\": \"\\u0000\"}",
             "1: \\u0000 is not allowed without JSON_ALLOW_NUL near '\"\\u0000\"' (column 14)");
    json_err(t->dir, "{\"a\": [1 2]}", "1: ']' expected near '2' (column 10)");
    json_err(t->dir, "\x01", "1: invalid token near '\\x01' (column 1)");

    o += (size_t)snprintf(deep + o, sizeof(deep) - o, "{\"a\": ");
    for (int i = 0; i < 40; i++)
        deep[o++] = '[';
    deep[o] = '\0';
    json_err(t->dir, deep, "1: nesting deeper than 32 levels");
}

static void test_domains_load_json_walk_reads_escapes_and_ignores_repeats(void **state)
{
    struct tmp *t = *state;
    struct domains *d;

    /* Brackets, commas and escaped quotes inside strings, a repeated unknown member and
     * escaped member names: the walk finds "name" and "domain_files" all the same. */
    write_file(t->dir, "cache_domains.json",
               "{\"x\": \"]}[{,\\\"\", \"x\": 1, \"cache_\\u0064omains\": [\n"
               "  {\"n\\u0061me\": \"svc\", \"y\": [\"{\", {\"z\": \"\\\\\"}],\n"
               "   \"domain_files\": [\"list.txt\"]}]}\n");
    write_file(t->dir, "list.txt", "a.example.com\n");
    d = load_ok(t->dir);
    match_is(d, "a.example.com", "svc");
    domains_free(&d);
}

static void test_domains_load_json_nesting_and_encoding_refused(void **state)
{
    struct tmp *t = *state;
    char deep[200];
    size_t o = 0;

    /* Valid JSON, but nested 33 levels deep (the 33rd bracket is on line 2). */
    o += (size_t)snprintf(deep + o, sizeof(deep) - o, "{\"a\":\n");
    for (int i = 0; i < 32; i++)
        deep[o++] = '[';
    for (int i = 0; i < 32; i++)
        deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = '\0';
    json_err(t->dir, deep, "2: nesting deeper than 32 levels");
    /* 32 levels are fine (no cache_domains, so the schema error comes next). */
    o = 0;
    o += (size_t)snprintf(deep + o, sizeof(deep) - o, "{\"a\":");
    for (int i = 0; i < 31; i++)
        deep[o++] = '[';
    for (int i = 0; i < 31; i++)
        deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = '\0';
    json_err(t->dir, deep, "1: \"cache_domains\" must be an array of services");
    /* A syntax error before the nesting gets too deep is the one reported. */
    o = 0;
    o += (size_t)snprintf(deep + o, sizeof(deep) - o, "{\"a\" [");
    for (int i = 0; i < 40; i++)
        deep[o++] = '[';
    deep[o] = '\0';
    json_err(t->dir, deep, "1: ':' expected near '[' (column 6)");
    /* No NUL byte anywhere (jansson alone would let one pass after a number). */
    write_file_len(t->dir, "cache_domains.json", "{\"a\": 1\0, \"cache_domains\": []}", 30);
    load_err(t->dir, "cache_domains.json:1: NUL byte");
    write_file_len(t->dir, "cache_domains.json", "{\"a\" 1\0}", 8);
    load_err(t->dir, "cache_domains.json:1: ':' expected near '1' (column 6)");
    /* Strings must be UTF-8. */
    json_err(t->dir, "{\"a\": \"\xff\"}", "1: unable to decode byte 0xff near '\"' (column 7)");
}

static void test_domains_load_json_schema_errors(void **state)
{
    struct tmp *t = *state;

    write_file(t->dir, "a.txt", "a.example.com\n");
    json_err(t->dir, "[]", "1: the top level must be an object");
    json_err(t->dir, "{}", "1: \"cache_domains\" must be an array of services");
    json_err(t->dir, "{\n\"cache_domains\":\n {}}",
             "3: \"cache_domains\" must be an array of services");
    json_err(t->dir, "{\"cache_domains\": [], \"cache_domains\": []}",
             "1: duplicate member \"cache_domains\"");
    json_err(t->dir, "{\"cache_domains\": [\n\"steam\"]}", "2: cache_domains[0] must be an object");
    json_err(t->dir, "{\"cache_domains\": [\n{\"domain_files\": []}]}",
             "2: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\"cache_domains\": [\n{\"name\":\n 5, \"domain_files\": []}]}",
             "3: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"st eam\", \"domain_files\": []}]}",
             "1: cache_domains[0]: service name must be 1-64 characters of A-Z a-z 0-9 . _ -");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"\", \"domain_files\": []}]}",
             "1: cache_domains[0]: service name must be 1-64 characters of A-Z a-z 0-9 . _ -");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"a\", \"name\": \"b\"}]}",
             "1: duplicate member \"name\"");
    json_err(t->dir,
             "{\"cache_domains\": [\n{\"name\": \"a\", \"domain_files\": []},\n"
             "{\"name\": \"a\", \"domain_files\": []}]}",
             "3: duplicate service \"a\"");
    json_err(t->dir, "{\"cache_domains\": [\n  {\"name\": \"steam\",\n   \"description\": \"x\"}]}",
             "2: service \"steam\": \"domain_files\" must be an array of file names");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"steam\",\n \"domain_files\": \"a.txt\"}]}",
             "2: service \"steam\": \"domain_files\" must be an array of file names");
    json_err(t->dir,
             "{\"cache_domains\": [{\"name\": \"steam\",\n \"domain_files\": [\"a.txt\",\n 3]}]}",
             "3: service \"steam\": \"domain_files\" must be an array of file names");
    json_err(t->dir,
             "{\"cache_domains\": [{\"name\": \"s\", \"domain_files\": [\"a.txt\"], "
             "\"domain_files\": []}]}",
             "1: service \"s\": duplicate member \"domain_files\"");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"s\", \"domain_files\": [\"../a.txt\"]}]}",
             "1: service \"s\": domain file must be a relative path without \"..\"");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"s\", \"domain_files\": [\"x/../../a\"]}]}",
             "1: service \"s\": domain file must be a relative path without \"..\"");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"s\", \"domain_files\": [\"/etc/hosts\"]}]}",
             "1: service \"s\": domain file must be a relative path without \"..\"");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"s\", \"domain_files\": [\"\"]}]}",
             "1: service \"s\": domain file must be a relative path without \"..\"");
}

/* ---- the schema walk over checked text ---- */

/* Loads <dir> (with "list.txt" = a.example.com) and checks that a.example.com is "svc". */
static void load_svc_ok(const char *dir, const char *json)
{
    struct domains *d;

    write_file(dir, "cache_domains.json", json);
    write_file(dir, "list.txt", "a.example.com\n");
    d = load_ok(dir);
    match_is(d, "a.example.com", "svc");
    domains_free(&d);
}

static void test_domains_load_json_walk_passes_deep_nesting_and_keeps_lines(void **state)
{
    struct tmp *t = *state;
    char json[512];
    size_t o = 0;

    /* Root, list and service are 3 levels; 28 brackets, one a line, and an object make 32. */
    o += (size_t)snprintf(json + o, sizeof(json) - o, "{\"cache_domains\": [{\"deep\":\n");
    for (int i = 0; i < 28; i++)
        o += (size_t)snprintf(json + o, sizeof(json) - o, "[\n");
    o += (size_t)snprintf(json + o, sizeof(json) - o, "{\"k\": 1}");
    for (int i = 0; i < 28; i++)
        json[o++] = ']';
    json[o] = '\0';
    snprintf(json + o, sizeof(json) - o, ",\n\"name\": 5}]}");
    json_err(t->dir, json, "31: cache_domains[0]: \"name\" must be a string");
    snprintf(json + o, sizeof(json) - o,
             ",\n\"name\": \"svc\", \"domain_files\": [\"list.txt\"]}]}");
    load_svc_ok(t->dir, json);
}

static void test_domains_load_json_walk_reads_escapes_before_closing_quotes(void **state)
{
    struct tmp *t = *state;
    struct domains *d;

    /* A backslash, then a quote, right before the closing quote: "\\", "\"", "x\\\"", "\\\\". */
    write_file(t->dir, "q\"t.txt", "q.example.com\n");
    write_file(t->dir, "b\\s.txt", "b.example.com\n");
    write_file(t->dir, "cache_domains.json",
               "{\"a\": \"\\\\\", \"b\": \"\\\"\", \"c\": \"x\\\\\\\"\", \"d\": \"\\\\\\\\\",\n"
               " \"cache_domains\": [{\"e\\\\\": \"\\\\\\\"]}\", \"name\": \"svc\",\n"
               " \"domain_files\": [\"q\\\"t.txt\", \"b\\\\s.txt\"]}]}\n");
    d = load_ok(t->dir);
    match_is(d, "q.example.com", "svc");
    match_is(d, "b.example.com", "svc");
    domains_free(&d);
    json_err(t->dir,
             "{\"cache_domains\": [{\"name\": \"svc\", \"x\": \"\\\\\",\n"
             " \"domain_files\": [\"q\\\"t.txt\", \"b\\\\s.txt\",\n 7]}]}",
             "3: service \"svc\": \"domain_files\" must be an array of file names");
}

static void test_domains_load_json_walk_reads_numbers_next_to_brackets(void **state)
{
    struct tmp *t = *state;

    load_svc_ok(t->dir,
                "{\"n\":[1],\"m\":[-0.5e+3,[2]],\"o\":{\"k\":-1},\"cache_domains\":[{\"p\":0,"
                "\"name\":\"svc\",\"q\":1E2,\"domain_files\":[\"list.txt\"],\"r\":[[0]]}],"
                "\"s\":3}");
    json_err(t->dir, "1", "1: the top level must be an object");
    json_err(t->dir, "{\"cache_domains\":2}", "1: \"cache_domains\" must be an array of services");
    json_err(t->dir, "{\"cache_domains\":[0]}", "1: cache_domains[0] must be an object");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":5}]}",
             "1: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":\"s\",\"domain_files\":[1]}]}",
             "1: service \"s\": \"domain_files\" must be an array of file names");
    json_err(t->dir, "{\"cache_domains\":[\n{\"name\":\"a\",\"domain_files\":[]},\n-1.5e-2]}",
             "3: cache_domains[1] must be an object");
}

static void test_domains_load_json_walk_reads_literals_as_member_values(void **state)
{
    struct tmp *t = *state;

    load_svc_ok(t->dir, "{\"t\":true,\"f\":false,\"z\":null,\"cache_domains\":[{\"a\":[true,false,"
                        "null],\"name\":\"svc\",\"b\":{\"c\":null},\"domain_files\":[\"list.txt\"],"
                        "\"d\":true}]}");
    json_err(t->dir, "null", "1: the top level must be an object");
    json_err(t->dir, "{\"cache_domains\":null}",
             "1: \"cache_domains\" must be an array of services");
    json_err(t->dir, "{\"cache_domains\":[true]}", "1: cache_domains[0] must be an object");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":true}]}",
             "1: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":null}]}",
             "1: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":\"s\",\"domain_files\":null}]}",
             "1: service \"s\": \"domain_files\" must be an array of file names");
    json_err(t->dir, "{\"cache_domains\":[{\"name\":\"s\",\n\"domain_files\":\n[false]}]}",
             "3: service \"s\": \"domain_files\" must be an array of file names");
}

static void test_domains_load_json_walk_counts_lines_across_all_whitespace(void **state)
{
    struct tmp *t = *state;

#define WS " \t\r\n" /* one line each */
    load_svc_ok(t->dir, WS "{" WS "\"cache_domains\"" WS ":" WS "[" WS "{" WS "\"name\"" WS ":" WS
                           "\"svc\"" WS "," WS "\"domain_files\"" WS ":" WS "[" WS "\"list.txt\"" WS
                           "]" WS "}" WS "]" WS "}" WS);
    json_err(t->dir,
             WS "{" WS "\"cache_domains\"" WS ":" WS "[" WS "{" WS "\"name\"" WS ":" WS "\"svc\"" WS
                "," WS "\"domain_files\"" WS ":" WS "true" WS "}" WS "]" WS "}" WS,
             "13: service \"svc\": \"domain_files\" must be an array of file names");
#undef WS
    /* Lines end at \n only, in jansson's errors and in the walk's alike. */
    json_err(t->dir, "{\"cache_domains\":\r[\r\n{\"name\":\r\n\t5}]}",
             "3: cache_domains[0]: \"name\" must be a string");
    json_err(t->dir, "{\r\n\"a\":\r\n tru}", "3: invalid token near 'tru' (column 4)");
}

static void test_domains_load_json_walk_decodes_escaped_member_names(void **state)
{
    struct tmp *t = *state;
    size_t services = 9, names = 9;
    struct domains *d;

    load_svc_ok(t->dir, "{\"\\u0063ache_domains\": [{\"\\u006e\\u0061\\u006d\\u0065\": \"svc\","
                        " \"domain\\u005Ffiles\": [\"list.txt\"]}]}");
    json_err(t->dir, "{\"cache_domains\": [{\"name\": \"a\",\n\"n\\u0061me\": \"b\"}]}",
             "2: duplicate member \"name\"");
    json_err(t->dir, "{\"cache_domains\": [],\n \"cache\\u005fdomains\": []}",
             "2: duplicate member \"cache_domains\"");
    /* Names that only look like known ones are unknown members. */
    json_err(t->dir, "{\"cache_domains\": [{\"nam\\u00e9\": \"svc\", \"domain_files\": []}]}",
             "1: cache_domains[0]: \"name\" must be a string");
    write_file(t->dir, "cache_domains.json",
               "{\"\\ud83d\\ude00\": 1, \"cache_domains \": 2, \"\\\"cache_domains\\\"\": 3,\n"
               " \"cache_domains\": []}");
    d = load_ok(t->dir);
    domains_counts(d, &services, &names);
    assert_int_equal(services, 0);
    assert_int_equal(names, 0);
    domains_free(&d);
}

static void test_domains_load_file_errors(void **state)
{
    struct tmp *t = *state;
    char big[96], sub[128];
    char *huge;

    load_err(t->dir, "cache_domains.json:0: cannot read: No such file or directory");
    write_file(t->dir, "cache_domains.json",
               "{\"cache_domains\": [{\"name\": \"steam\", \"domain_files\": [\"nope.txt\"]}]}");
    load_err(t->dir, "nope.txt:0: cannot read domain file of service \"steam\": No such file or "
                     "directory");
    snprintf(sub, sizeof(sub), "%s/nope.txt", t->dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    load_err(t->dir, "nope.txt:0: cannot read domain file of service \"steam\": Is a directory");
    snprintf(sub, sizeof(sub), "%s/fifo.txt", t->dir);
    assert_int_equal(mkfifo(sub, 0600), 0);
    write_file(t->dir, "cache_domains.json",
               "{\"cache_domains\": [{\"name\": \"steam\", \"domain_files\": [\"fifo.txt\"]}]}");
    load_err(t->dir,
             "fifo.txt:0: cannot read domain file of service \"steam\": not a regular file");

    huge = malloc(((size_t)1 << 20) + 2);
    assert_non_null(huge);
    memset(huge, ' ', ((size_t)1 << 20) + 1);
    memcpy(huge, "{}", 2);
    write_file_len(t->dir, "cache_domains.json", huge, ((size_t)1 << 20) + 1);
    free(huge);
    load_err(t->dir, "cache_domains.json:0: cannot read: file too large");

    /* A trailing slash on the directory does not double in messages. */
    snprintf(big, sizeof(big), "%s/", t->dir);
    {
        char err[512] = "", want[512];

        snprintf(want, sizeof(want), "%s/cache_domains.json:0: cannot read: file too large",
                 t->dir);
        assert_null(domains_load(big, err, sizeof(err)));
        assert_string_equal(err, want);
    }
    /* A NULL or short error buffer is fine. */
    assert_null(domains_load(t->dir, NULL, 0));
    {
        char err[8];

        assert_null(domains_load(t->dir, err, sizeof(err)));
        assert_int_equal(strlen(err), sizeof(err) - 1);
    }
}

/* ---- DNS export ---- */

static const char tiny_json[] = "{\"cache_domains\": [\n"
                                "  {\"name\": \"alpha\", \"domain_files\": [\"a.txt\"]},\n"
                                "  {\"name\": \"beta\", \"domain_files\": [\"b.txt\"]}\n"
                                "]}\n";
static const char tiny_a[] = "*.example.com\nwww.example.com\nexample.com\ndl.example.org\n";
static const char tiny_b[] =
    "dl.example.org\ncdn.example.net\neu.cdn.example.net\n*.x.cdn.example.net\n";

static struct domains *load_tiny(const char *dir)
{
    write_file(dir, "cache_domains.json", tiny_json);
    write_file(dir, "a.txt", tiny_a);
    write_file(dir, "b.txt", tiny_b);
    return load_ok(dir);
}

/* Runs the export into memory and compares with <want>. */
static void export_n_is(const struct domains *d, const char *const *ips, size_t n,
                        enum domains_dns_format fmt, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(domains_dns_export(d, ips, n, fmt, f), 0);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(text, want);
    free(text);
}

static void export_is(const struct domains *d, const char *ip, enum domains_dns_format fmt,
                      const char *want)
{
    export_n_is(d, &ip, 1, fmt, want);
}

static void test_domains_dns_export_dnsmasq(void **state)
{
    struct tmp *t = *state;
    struct domains *d = load_tiny(t->dir);

    export_is(d, "10.0.0.2", DOMAINS_DNS_DNSMASQ,
              "# generated by cacheparty dns --ip 10.0.0.2 --format dnsmasq\n"
              "# alpha\n"
              "address=/example.com/10.0.0.2\n"
              "local=/example.com/\n"
              "address=/dl.example.org/10.0.0.2\n"
              "local=/dl.example.org/\n"
              "server=/*.dl.example.org/#\n"
              "# beta\n"
              "address=/cdn.example.net/10.0.0.2\n"
              "local=/cdn.example.net/\n"
              "server=/*.cdn.example.net/#\n"
              "address=/eu.cdn.example.net/10.0.0.2\n"
              "local=/eu.cdn.example.net/\n"
              "server=/*.eu.cdn.example.net/#\n"
              "address=/*.x.cdn.example.net/10.0.0.2\n"
              "local=/*.x.cdn.example.net/\n");
    /* several addresses, both families, a repeat counted once (canonical forms compared) */
    static const char *const two[] = {"10.0.0.2", "fd00::2", "10.0.0.3", "fd00:0::2"};
    export_n_is(d, two, 4, DOMAINS_DNS_DNSMASQ,
                "# generated by cacheparty dns --ip 10.0.0.2 --ip fd00::2 --ip 10.0.0.3 "
                "--format dnsmasq\n"
                "# alpha\n"
                "address=/example.com/10.0.0.2\n"
                "address=/example.com/fd00::2\n"
                "address=/example.com/10.0.0.3\n"
                "local=/example.com/\n"
                "address=/dl.example.org/10.0.0.2\n"
                "address=/dl.example.org/fd00::2\n"
                "address=/dl.example.org/10.0.0.3\n"
                "local=/dl.example.org/\n"
                "server=/*.dl.example.org/#\n"
                "# beta\n"
                "address=/cdn.example.net/10.0.0.2\n"
                "address=/cdn.example.net/fd00::2\n"
                "address=/cdn.example.net/10.0.0.3\n"
                "local=/cdn.example.net/\n"
                "server=/*.cdn.example.net/#\n"
                "address=/eu.cdn.example.net/10.0.0.2\n"
                "address=/eu.cdn.example.net/fd00::2\n"
                "address=/eu.cdn.example.net/10.0.0.3\n"
                "local=/eu.cdn.example.net/\n"
                "server=/*.eu.cdn.example.net/#\n"
                "address=/*.x.cdn.example.net/10.0.0.2\n"
                "address=/*.x.cdn.example.net/fd00::2\n"
                "address=/*.x.cdn.example.net/10.0.0.3\n"
                "local=/*.x.cdn.example.net/\n");
    export_n_is(d, two, 2, DOMAINS_DNS_RPZ,
                "; generated by cacheparty dns --ip 10.0.0.2 --ip fd00::2 --format rpz\n"
                "; named.conf: response-policy { zone \"rpz.cacheparty\"; }; and\n"
                "; zone \"rpz.cacheparty\" { type primary; file \"db.rpz.cacheparty\"; };\n"
                "; unbound.conf: rpz: name: \"rpz.cacheparty\" zonefile: \"db.rpz.cacheparty\"\n"
                "$TTL 60\n"
                "@ IN SOA localhost. root.localhost. 1 3600 600 86400 60\n"
                "@ IN NS localhost.\n"
                "; alpha\n"
                "*.example.com A 10.0.0.2\n"
                "*.example.com AAAA fd00::2\n"
                "www.example.com A 10.0.0.2\n"
                "www.example.com AAAA fd00::2\n"
                "example.com A 10.0.0.2\n"
                "example.com AAAA fd00::2\n"
                "dl.example.org A 10.0.0.2\n"
                "dl.example.org AAAA fd00::2\n"
                "; beta\n"
                "cdn.example.net A 10.0.0.2\n"
                "cdn.example.net AAAA fd00::2\n"
                "eu.cdn.example.net A 10.0.0.2\n"
                "eu.cdn.example.net AAAA fd00::2\n"
                "*.x.cdn.example.net A 10.0.0.2\n"
                "*.x.cdn.example.net AAAA fd00::2\n"
                "; names below the wildcards above that the zone holds (a wildcard stops at "
                "them): as the wildcard says\n"
                "*.www.example.com A 10.0.0.2\n"
                "*.www.example.com AAAA fd00::2\n");
    domains_free(&d);
}

static void test_domains_dns_export_unbound(void **state)
{
    struct tmp *t = *state;
    struct domains *d = load_tiny(t->dir);

    export_is(d, "10.0.0.2", DOMAINS_DNS_UNBOUND,
              "# generated by cacheparty dns --ip 10.0.0.2 --format unbound\n"
              "server:\n"
              "    # alpha\n"
              "    local-zone: \"example.com.\" redirect\n"
              "    local-data: \"example.com. A 10.0.0.2\"\n"
              "    local-data: \"dl.example.org. A 10.0.0.2\"\n"
              "    # beta\n"
              "    local-data: \"cdn.example.net. A 10.0.0.2\"\n"
              "    local-data: \"eu.cdn.example.net. A 10.0.0.2\"\n"
              "    # *.x.cdn.example.net: unbound cannot redirect the names below "
              "x.cdn.example.net without x.cdn.example.net itself (use the rpz format)\n");
    export_is(d, "fd00:0::0002", DOMAINS_DNS_UNBOUND,
              "# generated by cacheparty dns --ip fd00::2 --format unbound\n"
              "server:\n"
              "    # alpha\n"
              "    local-zone: \"example.com.\" redirect\n"
              "    local-data: \"example.com. AAAA fd00::2\"\n"
              "    local-data: \"dl.example.org. AAAA fd00::2\"\n"
              "    # beta\n"
              "    local-data: \"cdn.example.net. AAAA fd00::2\"\n"
              "    local-data: \"eu.cdn.example.net. AAAA fd00::2\"\n"
              "    # *.x.cdn.example.net: unbound cannot redirect the names below "
              "x.cdn.example.net without x.cdn.example.net itself (use the rpz format)\n");
    domains_free(&d);
}

static void test_domains_dns_export_hosts(void **state)
{
    struct tmp *t = *state;
    struct domains *d = load_tiny(t->dir);

    export_is(d, "192.168.1.10", DOMAINS_DNS_HOSTS,
              "# generated by cacheparty dns --ip 192.168.1.10 --format hosts\n"
              "# a hosts file cannot stop the AAAA queries of these names from being answered "
              "elsewhere:\n# a dual-stack client may bypass the cache. Prefer the dnsmasq format, "
              "or give an IPv6 --ip too.\n"
              "# alpha\n"
              "# skipped wildcard *.example.com (a hosts file cannot express it)\n"
              "192.168.1.10 www.example.com\n"
              "192.168.1.10 example.com\n"
              "192.168.1.10 dl.example.org\n"
              "# beta\n"
              "192.168.1.10 cdn.example.net\n"
              "192.168.1.10 eu.cdn.example.net\n"
              "# skipped wildcard *.x.cdn.example.net (a hosts file cannot express it)\n");
    domains_free(&d);
}

static void test_domains_dns_export_rpz(void **state)
{
    struct tmp *t = *state;
    struct domains *d = load_tiny(t->dir);

    export_is(d, "10.0.0.2", DOMAINS_DNS_RPZ,
              "; generated by cacheparty dns --ip 10.0.0.2 --format rpz\n"
              "; named.conf: response-policy { zone \"rpz.cacheparty\"; }; and\n"
              "; zone \"rpz.cacheparty\" { type primary; file \"db.rpz.cacheparty\"; };\n"
              "; unbound.conf: rpz: name: \"rpz.cacheparty\" zonefile: \"db.rpz.cacheparty\"\n"
              "$TTL 60\n"
              "@ IN SOA localhost. root.localhost. 1 3600 600 86400 60\n"
              "@ IN NS localhost.\n"
              "; alpha\n"
              "*.example.com A 10.0.0.2\n"
              "www.example.com A 10.0.0.2\n"
              "example.com A 10.0.0.2\n"
              "dl.example.org A 10.0.0.2\n"
              "; beta\n"
              "cdn.example.net A 10.0.0.2\n"
              "eu.cdn.example.net A 10.0.0.2\n"
              "*.x.cdn.example.net A 10.0.0.2\n"
              "; names below the wildcards above that the zone holds (a wildcard stops at "
              "them): as the wildcard says\n"
              "*.www.example.com A 10.0.0.2\n");
    domains_free(&d);
}

/* RPZ is a zone: a listed name below a wildcard stops the wildcard there, so the names below it
 * get the wildcard's record written out; a service left out passes through. */
static void test_domains_dns_export_rpz_fills_wildcard_gaps_and_per_service(void **state)
{
    struct tmp *t = *state;
    write_file(t->dir, "cache_domains.json",
               "{\"cache_domains\":[{\"name\":\"o\",\"domain_files\":[\"o.txt\"]},"
               "{\"name\":\"i\",\"domain_files\":[\"i.txt\"]}]}");
    write_file(t->dir, "o.txt", "*.cdn.example.net\n");
    write_file(t->dir, "i.txt", "a.b.cdn.example.net\n");
    struct domains *d = load_ok(t->dir);
    static const char *const ip[] = {"10.0.0.2"};
    struct domains_dns_service svc[] = {{"I", false, {"10.0.0.7"}, 1}};
    struct domains_dns_opts o = {ip, 1, svc, 1, DOMAINS_DNS_RPZ};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(domains_dns_export_opts(d, &o, f), 0);
    assert_int_equal(fclose(f), 0);
    const char *body = strstr(text, "; o\n");
    assert_non_null(body);
    assert_string_equal(body, "; o\n"
                              "*.cdn.example.net A 10.0.0.2\n"
                              "; i\n"
                              "a.b.cdn.example.net A 10.0.0.7\n"
                              "; names below the wildcards above that the zone holds (a wildcard "
                              "stops at them): as the wildcard says\n"
                              "*.a.b.cdn.example.net A 10.0.0.2\n"
                              "b.cdn.example.net A 10.0.0.2\n"
                              "*.b.cdn.example.net A 10.0.0.2\n");
    free(text);
    /* left out: it passes through (the wildcard would take it) */
    svc[0].skip = true;
    text = NULL;
    f = open_memstream(&text, &len);
    assert_int_equal(domains_dns_export_opts(d, &o, f), 0);
    assert_int_equal(fclose(f), 0);
    assert_non_null(strstr(text, "; i (left out)\na.b.cdn.example.net CNAME rpz-passthru.\n"));
    free(text);
    /* a service that is not in the lists */
    struct domains_dns_service nosuch[] = {{"zz", true, {0}, 0}};
    o.services = nosuch;
    f = open_memstream(&text, &len);
    assert_int_equal(domains_dns_export_opts(d, &o, f), -ESRCH);
    fclose(f);
    free(text);
    domains_free(&d);
}

static void test_domains_dns_export_bad_ip_einval(void **state)
{
    static const char *const bad[] = {
        "",
        "10.0.0",
        "10.0.0.256",
        "010.0.0.1",
        "not-an-ip",
        "10.0.0.1 ",
        "0.0.0.0",
        "::",
        "fe80::1%eth0",
        "[::1]",
        "1.2.3.4:53",
        "::1::2",
        "lancache.example.com",
    };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    (void)state;
    assert_non_null(f);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (domains_dns_export(g_sample, &bad[i], 1, DOMAINS_DNS_DNSMASQ, f) != -EINVAL)
            fail_msg("ip \"%s\" accepted", bad[i]);
        /* one bad address among good ones refuses the whole export */
        const char *mixed[] = {"10.0.0.1", bad[i]};
        if (domains_dns_export(g_sample, mixed, 2, DOMAINS_DNS_DNSMASQ, f) != -EINVAL)
            fail_msg("ip \"%s\" accepted after a good one", bad[i]);
    }
    const char *good = "10.0.0.1", *none = NULL;
    const char *many[17];
    for (size_t i = 0; i < 17; i++)
        many[i] = "10.0.0.1";
    assert_int_equal(domains_dns_export(g_sample, NULL, 1, DOMAINS_DNS_HOSTS, f), -EINVAL);
    assert_int_equal(domains_dns_export(g_sample, &none, 1, DOMAINS_DNS_HOSTS, f), -EINVAL);
    assert_int_equal(domains_dns_export(g_sample, &good, 0, DOMAINS_DNS_HOSTS, f), -EINVAL);
    assert_int_equal(domains_dns_export(g_sample, many, 17, DOMAINS_DNS_HOSTS, f), -EINVAL);
    assert_int_equal(domains_dns_export(g_sample, &good, 1, (enum domains_dns_format)42, f),
                     -EINVAL);
    assert_int_equal(domains_dns_export(NULL, &good, 1, DOMAINS_DNS_HOSTS, f), -ENOENT);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(len, 0); /* nothing written */
    free(text);
}

static void test_domains_dns_export_write_error_eio(void **state)
{
    FILE *f = fopen("/dev/full", "w");

    (void)state;
    if (f == NULL)
        skip();
    const char *ip = "10.0.0.1";
    assert_int_equal(domains_dns_export(g_sample, &ip, 1, DOMAINS_DNS_RPZ, f), -EIO);
    fclose(f);
}

static void test_domains_dns_export_sample_every_format(void **state)
{
    (void)state;
    for (int fmt = DOMAINS_DNS_DNSMASQ; fmt <= DOMAINS_DNS_RPZ; fmt++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        assert_non_null(f);
        const char *ip = "10.1.2.3";
        assert_int_equal(domains_dns_export(g_sample, &ip, 1, fmt, f), 0);
        assert_int_equal(fclose(f), 0);
        assert_non_null(strstr(text, "steamcontent.com"));
        free(text);
    }
}

static void test_domains_dns_format_parse_names(void **state)
{
    enum domains_dns_format fmt = DOMAINS_DNS_HOSTS;

    (void)state;
    assert_int_equal(domains_dns_format_parse("dnsmasq", &fmt), 0);
    assert_int_equal(fmt, DOMAINS_DNS_DNSMASQ);
    assert_int_equal(domains_dns_format_parse("unbound", &fmt), 0);
    assert_int_equal(fmt, DOMAINS_DNS_UNBOUND);
    assert_int_equal(domains_dns_format_parse("hosts", &fmt), 0);
    assert_int_equal(fmt, DOMAINS_DNS_HOSTS);
    assert_int_equal(domains_dns_format_parse("rpz", &fmt), 0);
    assert_int_equal(fmt, DOMAINS_DNS_RPZ);
    assert_int_equal(domains_dns_format_parse("DNSMASQ", &fmt), -EINVAL);
    assert_int_equal(domains_dns_format_parse("bind", &fmt), -EINVAL);
    assert_int_equal(domains_dns_format_parse("", &fmt), -EINVAL);
    assert_int_equal(domains_dns_format_parse(NULL, &fmt), -EINVAL);
    assert_int_equal(fmt, DOMAINS_DNS_RPZ);
    for (int i = DOMAINS_DNS_DNSMASQ; i <= DOMAINS_DNS_RPZ; i++) {
        assert_int_equal(domains_dns_format_parse(domains_dns_format_name(i), &fmt), 0);
        assert_int_equal(fmt, i);
    }
}

/* ---- scale ---- */

#define BIG_NAMES 10000
#define BIG_MATCHES 1000000

static void test_domains_match_10k_names_1m_lookups_no_alloc(void **state)
{
    struct tmp *t = *state;
    static char hosts[8][64];
    static const char *const want[8] = {"one", "two", "one", "two", NULL, NULL, NULL, "two"};
    struct domains *d;
    size_t names, allocs, hits = 0;
    char *list;
    size_t o = 0, cap = (size_t)BIG_NAMES * 40;

    list = malloc(cap);
    assert_non_null(list);
    write_file(t->dir, "cache_domains.json",
               "{\"cache_domains\": [{\"name\": \"one\", \"domain_files\": [\"1.txt\"]},\n"
               "{\"name\": \"two\", \"domain_files\": [\"2.txt\"]}]}\n");
    for (int i = 0; i < BIG_NAMES / 2; i++) {
        o += (size_t)snprintf(list + o, cap - o,
                              i % 10 == 0 ? "*.w%d.one.example\n" : "h%d.one.example\n", i);
    }
    write_file(t->dir, "1.txt", list);
    o = 0;
    for (int i = 0; i < BIG_NAMES / 2; i++) {
        o += (size_t)snprintf(list + o, cap - o,
                              i % 10 == 0 ? "*.w%d.two.example.net\n" : "h%d.two.example.net\n", i);
    }
    write_file(t->dir, "2.txt", list);
    free(list);

    d = load_ok(t->dir);
    domains_counts(d, NULL, &names);
    assert_int_equal(names, BIG_NAMES);

    snprintf(hosts[0], sizeof(hosts[0]), "h4321.one.example");
    snprintf(hosts[1], sizeof(hosts[1]), "a.b.w4990.two.example.net");
    snprintf(hosts[2], sizeof(hosts[2]), "x.w0.one.example");
    snprintf(hosts[3], sizeof(hosts[3]), "h1.two.example.net");
    snprintf(hosts[4], sizeof(hosts[4]), "h4320.one.example"); /* *.w4320 only */
    snprintf(hosts[5], sizeof(hosts[5]), "h99999.one.example");
    snprintf(hosts[6], sizeof(hosts[6]), "w10.two.example.net");
    snprintf(hosts[7], sizeof(hosts[7]), "cdn.h4999.two.example.net.w10.two.example.net");
    for (size_t i = 0; i < ARRAY_SIZE(hosts); i++)
        match_is(d, hosts[i], want[i]);

    allocs = g_allocs;
    for (size_t i = 0; i < BIG_MATCHES; i++) {
        if (domains_match(d, hosts[i % ARRAY_SIZE(hosts)]) != NULL)
            hits++;
    }
    assert_int_equal(g_allocs, allocs);
    assert_int_equal(hits, BIG_MATCHES / 8 * 5);
    domains_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domains_load_sample_counts),
        cmocka_unit_test(test_domains_is_service),
        cmocka_unit_test(test_domains_cache_identifier),
        cmocka_unit_test(test_domains_match_exact_names),
        cmocka_unit_test(test_domains_match_wildcard_subdomains),
        cmocka_unit_test(test_domains_match_wildcard_not_bare_domain),
        cmocka_unit_test(test_domains_match_lookalikes_refused),
        cmocka_unit_test(test_domains_match_host_not_normalised_no_match),
        cmocka_unit_test(test_domains_match_null_domains_no_match),
        cmocka_unit_test_setup_teardown(test_domains_match_most_specific_then_first_service,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test(test_domains_counts_null_is_zero),
        cmocka_unit_test_setup_teardown(test_domains_load_list_normalises_entries, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_list_errors_file_line, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_unknown_members_ignored, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_syntax_errors, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(
            test_domains_load_json_walk_reads_escapes_and_ignores_repeats, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_nesting_and_encoding_refused,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_schema_errors, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(
            test_domains_load_json_walk_passes_deep_nesting_and_keeps_lines, tmp_setup,
            tmp_teardown),
        cmocka_unit_test_setup_teardown(
            test_domains_load_json_walk_reads_escapes_before_closing_quotes, tmp_setup,
            tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_walk_reads_numbers_next_to_brackets,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_walk_reads_literals_as_member_values,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(
            test_domains_load_json_walk_counts_lines_across_all_whitespace, tmp_setup,
            tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_json_walk_decodes_escaped_member_names,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_load_file_errors, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_dns_export_dnsmasq, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_dns_export_unbound, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_dns_export_hosts, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_domains_dns_export_rpz, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(
            test_domains_dns_export_rpz_fills_wildcard_gaps_and_per_service, tmp_setup,
            tmp_teardown),
        cmocka_unit_test(test_domains_dns_export_bad_ip_einval),
        cmocka_unit_test(test_domains_dns_export_write_error_eio),
        cmocka_unit_test(test_domains_dns_export_sample_every_format),
        cmocka_unit_test(test_domains_dns_format_parse_names),
        cmocka_unit_test_setup_teardown(test_domains_match_10k_names_1m_lookups_no_alloc, tmp_setup,
                                        tmp_teardown),
    };

    return cmocka_run_group_tests(tests, sample_setup, sample_teardown);
}
