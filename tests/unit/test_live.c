/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_live: the dashboard's tables: exact counts while a table is not full, the space-saving
 * rule once it is (a newcomer takes the smallest place and its count as a floor; whoever served
 * more than the smallest entry stays), ranking by lifetime totals for services, names cut at
 * LIVE_NAME_MAX, the state file's round trip and its refusals.
 */
#include "live.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static struct live_entry *find(struct live_table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0)
            return &t->e[i];
    return NULL;
}

static void add(struct live_table *t, const char *name, uint64_t bytes, uint64_t hit)
{
    live_table_add(t, name, strlen(name), bytes, hit, 1000);
}

static void test_exact_until_full(void **state)
{
    (void)state;
    struct live_table t;
    live_table_init(&t, 4, false);
    add(&t, "10.0.0.1", 100, 40);
    add(&t, "10.0.0.2", 50, 0);
    add(&t, "10.0.0.1", 20, 20);
    live_table_add(&t, "10.0.0.3xyz", 8, 5, 0, 2000); /* the name is its first 8 bytes */
    assert_int_equal(t.n, 3);
    struct live_entry *e = find(&t, "10.0.0.1");
    assert_non_null(e);
    assert_int_equal(e->bytes, 120);
    assert_int_equal(e->hit, 60);
    assert_int_equal(e->floor, 0);
    assert_int_equal(e->total_bytes, 0); /* clients keep no totals */
    e = find(&t, "10.0.0.3");
    assert_non_null(e);
    assert_int_equal(e->bytes, 5);
    assert_int_equal(e->last_ms, 2000);
    live_table_sort(&t);
    assert_string_equal(t.e[0].name, "10.0.0.1");
    assert_string_equal(t.e[1].name, "10.0.0.2");
    assert_string_equal(t.e[2].name, "10.0.0.3");
    live_table_fini(&t);
}

static void test_space_saving_once_full(void **state)
{
    (void)state;
    struct live_table t;
    live_table_init(&t, 3, false);
    add(&t, "a", 1000, 0);
    add(&t, "b", 10, 0);
    add(&t, "c", 500, 0);
    add(&t, "d", 7, 7); /* takes b's place: 10 + 7, floor 10 */
    assert_int_equal(t.n, 3);
    assert_null(find(&t, "b"));
    struct live_entry *d = find(&t, "d");
    assert_non_null(d);
    assert_int_equal(d->bytes, 17);
    assert_int_equal(d->floor, 10);
    assert_int_equal(d->hit, 7);
    assert_true(d->bytes - d->floor <= 7); /* its own bytes are within [bytes-floor, bytes] */
    /* The big ones never lose their place to small newcomers. */
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof(name), "n%d", i);
        add(&t, name, 1, 0);
    }
    assert_non_null(find(&t, "a"));
    assert_non_null(find(&t, "c"));
    assert_int_equal(find(&t, "a")->bytes, 1000);
    live_table_fini(&t);

    /* Names at the limit are cut, and still found again. */
    live_table_init(&t, 2, false);
    char longname[LIVE_NAME_MAX + 40];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    add(&t, longname, 1, 0);
    add(&t, longname, 2, 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(strlen(t.e[0].name), LIVE_NAME_MAX - 1);
    assert_int_equal(t.e[0].bytes, 3);
    live_table_fini(&t);
}

static void test_services_rank_by_totals_and_persist(void **state)
{
    (void)state;
    char path[] = "/tmp/test_live.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct live_table t;
    live_table_init(&t, 3, true);
    add(&t, "steam", 5000, 4000);
    add(&t, "blizzard", 300, 100);
    add(&t, "dl.example.org:8080", 20, 0);
    assert_int_equal(find(&t, "steam")->total_bytes, 5000);
    assert_int_equal(live_state_write(&t, path), 0);
    live_table_fini(&t);

    /* The next start: totals back, this run's bytes from zero. */
    live_table_init(&t, 3, true);
    assert_int_equal(live_state_read(&t, path), 0);
    assert_int_equal(t.n, 3);
    struct live_entry *s = find(&t, "steam");
    assert_non_null(s);
    assert_int_equal(s->bytes, 0);
    assert_int_equal(s->total_bytes, 5000);
    assert_int_equal(s->total_hit, 4000);
    add(&t, "blizzard", 10, 10);
    assert_int_equal(find(&t, "blizzard")->bytes, 10);
    assert_int_equal(find(&t, "blizzard")->total_bytes, 310);
    /* Ranked by totals: a newcomer takes the smallest lifetime's place, not steam's. */
    add(&t, "epicgames", 1, 0);
    assert_non_null(find(&t, "steam"));
    assert_non_null(find(&t, "blizzard"));
    assert_null(find(&t, "dl.example.org:8080"));
    assert_int_equal(find(&t, "epicgames")->total_bytes, 21);
    live_table_sort(&t);
    assert_string_equal(t.e[0].name, "steam");
    live_table_fini(&t);

    /* Refused: another header, a line that does not parse, hits over bytes. */
    static const char *const bad[] = {"other 1\nsteam 1 0\n", "cacheparty-live 1\nsteam x 0\n",
                                      "cacheparty-live 1\nsteam 5 6\n"};
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        live_table_init(&t, 3, true);
        assert_int_equal(live_state_read(&t, path), -22);
        live_table_fini(&t);
    }
    assert_int_equal(unlink(path), 0);
    live_table_init(&t, 3, true);
    assert_int_equal(live_state_read(&t, path), -2); /* none yet: ENOENT */
    assert_int_equal(t.n, 0);
    live_table_fini(&t);
}

/* Many names through a small table, sorted now and then: every entry is found again by its
 * name (its index stays right across replacements and sorts), the counts add up to every byte. */
static void test_index_stays_right(void **state)
{
    (void)state;
    struct live_table t;
    live_table_init(&t, 16, false);
    uint64_t total = 0, seed = 12345;
    for (int i = 0; i < 20000; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        char name[32];
        snprintf(name, sizeof(name), "10.0.%u.%u", (unsigned)(seed >> 40) % 8,
                 (unsigned)(seed >> 20) % 64);
        uint64_t b = 1 + (seed >> 33) % 1000;
        struct live_entry *e = live_table_add(&t, name, strlen(name), b, 0, 0);
        total += b;
        assert_string_equal(e->name, name);
        if (i % 997 == 0)
            live_table_sort(&t);
        for (size_t k = 0; k < t.n; k++) {
            struct live_entry *f = live_table_add(&t, t.e[k].name, strlen(t.e[k].name), 0, 0, 0);
            assert_ptr_equal(f, &t.e[k]);
        }
    }
    assert_int_equal(t.n, 16);
    uint64_t sum = 0;
    for (size_t k = 0; k < t.n; k++)
        sum += t.e[k].bytes;
    assert_int_equal(sum, total);
    live_table_fini(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_until_full),
        cmocka_unit_test(test_space_saving_once_full),
        cmocka_unit_test(test_services_rank_by_totals_and_persist),
        cmocka_unit_test(test_index_stays_right),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
