/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_inventory: the group of a key (Steam depots, two directory segments elsewhere, the query
 * left out, names cut), totals per group through add/sub/use, ids freed when a group empties
 * and reused, the full table's INV_OTHER, and the memory bound at the limit.
 */
#include "inventory.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void group_of(const char *key, char *s, char *p)
{
    inv_group_of_key(key, strlen(key), s, p);
}

static void test_group_of_key(void **state)
{
    (void)state;
    char s[INV_SERVICE_MAX], p[INV_PREFIX_MAX];
    group_of("steam\n/depot/1091501/chunk/0a1b2c", s, p);
    assert_string_equal(s, "steam");
    assert_string_equal(p, "/depot/1091501/");
    group_of("steam\n/depot/77/manifest/5/5", s, p);
    assert_string_equal(p, "/depot/77/");
    group_of("steam\n/depot/x1/chunk/a", s, p); /* not a depot number: two segments */
    assert_string_equal(p, "/depot/x1/");
    group_of("steam\n/depot/12", s, p); /* no slash after the id: the name is the object */
    assert_string_equal(p, "/depot/");
    group_of("blizzard\n/tpr/wow/data/ab/cd/0011", s, p);
    assert_string_equal(s, "blizzard");
    assert_string_equal(p, "/tpr/wow/");
    group_of("epicgames\n/Builds/Org/o-1/x.chunk?token=1/2/3", s, p);
    assert_string_equal(p, "/Builds/Org/");
    group_of("riot\n/file.bin", s, p);
    assert_string_equal(p, "/");
    group_of("riot\n/a/file.bin?x=/y/z/", s, p);
    assert_string_equal(p, "/a/");
    group_of("origin.example:8080\n", s, p);
    assert_string_equal(s, "origin.example:8080");
    assert_string_equal(p, "/");
    group_of("nokey", s, p);
    assert_string_equal(s, "*");
    assert_string_equal(p, "/");
    /* Cut to fit, NUL-terminated. */
    char key[400];
    memset(key, 'a', 100);
    key[100] = '\n';
    key[101] = '/';
    memset(key + 102, 'b', 200);
    strcpy(key + 302, "/c");
    inv_group_of_key(key, strlen(key), s, p);
    assert_int_equal(strlen(s), INV_SERVICE_MAX - 1);
    assert_int_equal(strlen(p), INV_PREFIX_MAX - 1);
    /* Steam's rule is for the steam service only. */
    group_of("other\n/depot/1/chunk/a", s, p);
    assert_string_equal(p, "/depot/1/");
}

struct seen {
    size_t n;
    uint64_t bytes;
};

static void on_group(const struct inv_group *g, void *arg)
{
    struct seen *sn = arg;
    sn->n++;
    sn->bytes += g->bytes;
}

static void test_totals_and_reuse(void **state)
{
    (void)state;
    struct inventory *inv = inv_new();
    assert_int_equal(inv_count(inv), 0);
    uint64_t made = inv_made(inv); /* the fixed groups */
    uint32_t a = inv_intern(inv, "steam", "/depot/1/");
    uint32_t b = inv_intern(inv, "steam", "/depot/2/");
    assert_true(a >= INV_FIRST && b >= INV_FIRST && a != b);
    assert_true(inv_made(inv) > made);
    made = inv_made(inv);
    assert_int_equal(inv_intern(inv, "steam", "/depot/1/"), a);
    assert_int_equal(inv_made(inv), made); /* found, not made */
    assert_int_equal(inv_find(inv, "steam", "/depot/2/"), b);
    assert_int_equal(inv_find(inv, "steam", "/depot/3/"), 0);
    /* An interned group holding nothing is not seen by inv_foreach: the first chunk it gets
     * makes it new to a walk (a purge flags it then), the next ones do not. */
    struct seen s0 = {0, 0};
    inv_foreach(inv, on_group, &s0);
    inv_add(inv, a, 1000, 50);
    struct seen s1 = {0, 0};
    inv_foreach(inv, on_group, &s1);
    assert_int_equal(s1.n, s0.n + 1);
    assert_true(inv_made(inv) > made);
    made = inv_made(inv);
    inv_add(inv, a, 500, 40); /* an older time keeps the last use */
    assert_int_equal(inv_made(inv), made);
    inv_add(inv, b, 7, 60);
    inv_add(inv, INV_UNREAD, 9, 0);
    inv_use(inv, a, 70);
    struct inv_group *g = inv_get(inv, a);
    assert_non_null(g);
    assert_int_equal(g->bytes, 1500);
    assert_int_equal(g->chunks, 2);
    assert_int_equal(g->last_ms, 70);
    assert_int_equal(inv_count(inv), 3);
    struct seen sn = {0, 0};
    inv_foreach(inv, on_group, &sn);
    assert_int_equal(sn.n, 3);
    assert_int_equal(sn.bytes, 1516);
    /* b empties: freed, its name gone, its id reused by the next new group. */
    inv_sub(inv, b, 7);
    assert_null(inv_get(inv, b));
    assert_int_equal(inv_find(inv, "steam", "/depot/2/"), 0);
    assert_int_equal(inv_count(inv), 2);
    made = inv_made(inv);
    uint32_t c = inv_intern(inv, "blizzard", "/tpr/wow/");
    assert_int_equal(c, b);
    assert_true(inv_made(inv) > made); /* a reused id is a new group too */
    inv_add(inv, c, 3, 80);
    g = inv_get(inv, c);
    assert_string_equal(g->service, "blizzard");
    assert_int_equal(g->bytes, 3);
    assert_int_equal(g->last_ms, 80);
    /* The fixed groups are never freed. */
    inv_sub(inv, INV_UNREAD, 9);
    assert_null(inv_get(inv, INV_UNREAD));
    inv_add(inv, INV_UNREAD, 1, 0);
    assert_non_null(inv_get(inv, INV_UNREAD));
    inv_free(&inv);
    assert_null(inv);
    inv_free(&inv);
}

static void test_full_table_and_memory_bound(void **state)
{
    (void)state;
    struct inventory *inv = inv_new();
    char prefix[32];
    uint32_t last = 0;
    for (unsigned i = 0; i < INV_GROUPS_MAX - INV_FIRST; i++) {
        snprintf(prefix, sizeof(prefix), "/depot/%u/", i);
        last = inv_intern(inv, "steam", prefix);
        assert_true(last >= INV_FIRST && last < INV_GROUPS_MAX);
        inv_add(inv, last, 1, i);
    }
    assert_int_equal(inv_count(inv), INV_GROUPS_MAX - INV_FIRST);
    assert_int_equal(inv_intern(inv, "steam", "/depot/new/"), INV_OTHER);
    /* Every name still found after the table grew. */
    for (unsigned i = 0; i < INV_GROUPS_MAX - INV_FIRST; i += 997) {
        snprintf(prefix, sizeof(prefix), "/depot/%u/", i);
        uint32_t id = inv_find(inv, "steam", prefix);
        assert_true(id != 0);
        assert_int_equal(inv_get(inv, id)->last_ms, i);
    }
    /* The bound inventory.h states: under 16 MiB with every id in use. */
    assert_true(inv_memory(inv) < 16u << 20);
    /* One freed: its id is the next one handed out. */
    inv_sub(inv, last, 1);
    assert_int_equal(inv_intern(inv, "steam", "/depot/new/"), last);
    inv_free(&inv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_of_key),
        cmocka_unit_test(test_totals_and_reuse),
        cmocka_unit_test(test_full_table_and_memory_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
