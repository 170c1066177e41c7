/* LDFLAGS: -Wl,--wrap=pwrite,--wrap=pwrite64 */
/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_chunkmem: chunk memory blocks (chunkmem.h): the malloc kind and the memory-file kind,
 * slots (a multiple of the PMD size, reused after a release), the file growing past its first
 * slots, short blocks and blocks past the mapping limit malloc'd, empty blocks, and the property a
 * by-reference send relies on: bytes a TCP socket queued from a block by sendfile arrive as they
 * were when sent, after the block was released and its slot was reused and overwritten by the next
 * block; chunkmem_write puts bytes in the file without mapping its pages into the process, through
 * short and interrupted writes, and a write that fails is counted and its bytes copied through the
 * mapping (pwrite() is wrapped, --wrap, to make it so).
 */
#include "chunkmem.h"

#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "stats.h"

/* ---- pwrite() fault injection ---- */

static size_t g_pw_max;  /* cap each pwrite() at this many bytes; 0: no cap */
static int g_pw_eintr;   /* fail this many calls with EINTR first */
static int g_pw_fail_at; /* from this call (1-based) on, fail with g_pw_errno; 0: never */
static int g_pw_errno;   /* errno of the failing calls */
static int g_pw_calls;   /* pwrite() calls since the last reset */

static void pw_reset(void)
{
    g_pw_max = 0;
    g_pw_eintr = g_pw_fail_at = g_pw_errno = g_pw_calls = 0;
}

/* pwrite() and pwrite64() (what _FILE_OFFSET_BITS=64 makes of it on 32-bit systems). */
ssize_t __real_pwrite(int fd, const void *buf, size_t count, off_t off);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t count, off_t off);
ssize_t __real_pwrite64(int fd, const void *buf, size_t count, off_t off);
ssize_t __wrap_pwrite64(int fd, const void *buf, size_t count, off_t off);

static bool pw_fault(size_t *count)
{
    g_pw_calls++;
    if (g_pw_eintr > 0) {
        g_pw_eintr--;
        errno = EINTR;
        return true;
    }
    if (g_pw_fail_at != 0 && g_pw_calls >= g_pw_fail_at) {
        errno = g_pw_errno;
        return true;
    }
    if (g_pw_max != 0 && *count > g_pw_max)
        *count = g_pw_max;
    return false;
}

ssize_t __wrap_pwrite(int fd, const void *buf, size_t count, off_t off)
{
    return pw_fault(&count) ? -1 : __real_pwrite(fd, buf, count, off);
}

ssize_t __wrap_pwrite64(int fd, const void *buf, size_t count, off_t off)
{
    return pw_fault(&count) ? -1 : __real_pwrite64(fd, buf, count, off);
}

#define MIB ((size_t)1 << 20)

/* The memory-file kind, or the test is skipped (a system without memfd or hole punching). */
static void need_file(struct chunkmem *m)
{
    if (chunkmem_fd(m) < 0) {
        chunkmem_free(&m);
        skip();
    }
}

static void test_malloc_kind_has_no_file_and_gives_blocks(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(MIB, false, 0);
    assert_int_equal(chunkmem_fd(m), -1);
    assert_int_equal(chunkmem_slot_size(m), 0);
    struct chunkmem_block a, b;
    assert_int_equal(chunkmem_get(m, MIB, &a), 0);
    assert_int_equal(chunkmem_get(m, 10, &b), 0);
    assert_non_null(a.data);
    assert_non_null(b.data);
    assert_int_equal(a.len, MIB);
    memset(a.data, 'a', MIB);
    memset(b.data, 'b', 10);
    assert_int_equal(chunkmem_held(m), 2);
    chunkmem_put(m, &a);
    assert_null(a.data);
    chunkmem_put(m, &a); /* a cleared block: nothing */
    chunkmem_put(m, &b);
    assert_int_equal(chunkmem_held(m), 0);
    chunkmem_free(&m);
    assert_null(m);
    chunkmem_free(&m);
}

static void test_file_kind_slots_are_whole_pmds_and_reused(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(MIB + 1, true, 0);
    need_file(m);
    size_t slot = chunkmem_slot_size(m);
    assert_true(slot >= MIB + 1);
    assert_int_equal(slot % (2 * MIB), 0);
    struct chunkmem_block a, b, c;
    assert_int_equal(chunkmem_get(m, MIB + 1, &a), 0);
    assert_int_equal(chunkmem_get(m, MIB, &b), 0);
    assert_int_equal(a.off % (off_t)slot, 0);
    assert_int_equal(b.off % (off_t)slot, 0);
    assert_true(a.off != b.off);
    memset(a.data, 'a', MIB + 1);
    memset(b.data, 'b', MIB);
    off_t a_off = a.off;
    chunkmem_put(m, &a);
    /* The slot released last is the next one given, with new (zeroed) pages. */
    assert_int_equal(chunkmem_get(m, CHUNKMEM_REF_MIN, &c), 0);
    assert_true(c.in_file);
    assert_int_equal(c.off, a_off);
    for (size_t i = 0; i < CHUNKMEM_REF_MIN; i++)
        assert_int_equal(c.data[i], 0);
    assert_int_equal(b.data[MIB - 1], 'b');
    chunkmem_put(m, &b);
    chunkmem_put(m, &c);
    assert_int_equal(chunkmem_held(m), 0);
    chunkmem_free(&m);
}

/* The kB of the mapping that starts at <addr> the process has page table entries for (Rss in
 * /proc/self/smaps), or -1 when that cannot be read (qemu-user, no /proc). */
static long mapped_kib(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (f == NULL)
        return -1;
    char line[512];
    bool in = false;
    long kib = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in = lo == (unsigned long)(uintptr_t)addr;
        } else if (in && sscanf(line, "Rss: %ld kB", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib;
}

static void test_write_fills_the_file_without_mapping_its_pages(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(MIB, true, 0);
    need_file(m);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct chunkmem_block b, c;
    assert_int_equal(chunkmem_get(m, 100, &c), 0);
    assert_int_equal(chunkmem_get(m, MIB, &b), 0);
    assert_false(c.in_file);
    assert_true(b.in_file);
    char *src = malloc(3 * page), *back = malloc(3 * page);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < 3 * page; i++)
        src[i] = (char)('a' + i % 23);
    /* Bytes [page + 10, 3 * page + 1), and the block's last byte. */
    size_t len = 2 * page - 9;
    chunkmem_write(m, &b, page + 10, src, len);
    chunkmem_write(m, &b, MIB - 1, "z", 1);
    chunkmem_write(m, &c, 90, src, 10);
    /* In the file, and not one page of them in the process's page tables. */
    long before = mapped_kib(b.data);
    assert_int_equal(pread(chunkmem_fd(m), back, len + 2, b.off + (off_t)page + 9),
                     (ssize_t)len + 2);
    assert_int_equal(back[0], 0);
    assert_memory_equal(back + 1, src, len);
    assert_int_equal(back[len + 1], 0);
    /* The mapping reads the same bytes (what a copy to a client sends). */
    assert_memory_equal(b.data + page + 10, src, len);
    assert_int_equal(b.data[page + 9], 0);
    assert_int_equal(b.data[MIB - 2], 0);
    assert_int_equal(b.data[MIB - 1], 'z');
    assert_memory_equal(c.data + 90, src, 10);
    long after = mapped_kib(b.data);
    free(src);
    free(back);
    chunkmem_put(m, &c);
    chunkmem_put(m, &b);
    chunkmem_free(&m);
    if (before < 0 || after <= 0)
        skip(); /* (this system does not say what a mapping holds) */
    assert_int_equal(before, 0);
}

/* Writes <len> bytes of a pattern at <off> of a new block in the file, pwrite() capped at
 * <max> bytes, the first <eintr> calls interrupted and the calls from <fail_at> on failing with
 * ENOMEM; checks them in the file and through the mapping; with <all_by_pwrite>, also that none
 * went through the mapping (where smaps says). Returns the pwrite() calls made. */
static int write_under_faults(size_t len, size_t off, size_t max, int eintr, int fail_at,
                              bool all_by_pwrite)
{
    struct chunkmem *m = chunkmem_new(MIB, true, 0);
    need_file(m);
    pw_reset();
    g_pw_max = max;
    g_pw_eintr = eintr;
    g_pw_fail_at = fail_at;
    g_pw_errno = ENOMEM;
    struct chunkmem_block b;
    assert_int_equal(chunkmem_get(m, MIB, &b), 0);
    assert_true(b.in_file);
    char *src = malloc(len), *back = malloc(len);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < len; i++)
        src[i] = (char)('A' + i % 29);
    chunkmem_write(m, &b, off, src, len);
    int calls = g_pw_calls;
    pw_reset();
    assert_true(calls > 0);
    long kib = mapped_kib(b.data);
    if (all_by_pwrite && kib >= 0)
        assert_int_equal(kib, 0);
    if (!all_by_pwrite)
        assert_true(kib != 0);
    assert_int_equal(pread(chunkmem_fd(m), back, len, b.off + (off_t)off), (ssize_t)len);
    assert_memory_equal(back, src, len);
    assert_memory_equal(b.data + off, src, len);
    free(src);
    free(back);
    chunkmem_put(m, &b);
    chunkmem_free(&m);
    return calls;
}

static void test_write_completes_short_and_interrupted_writes(void **state)
{
    (void)state;
    memset(&g_stats, 0, sizeof(g_stats));
    /* 2 interrupted, then 101 of at most 1000 bytes. */
    assert_int_equal(write_under_faults(100 * 1000 + 7, 333, 1000, 2, 0, true), 2 + 101);
    assert_int_equal(g_stats.chunkmem_errors, 0);
}

static void test_a_failed_write_is_counted_and_copied_through_the_mapping(void **state)
{
    (void)state;
    memset(&g_stats, 0, sizeof(g_stats));
    /* Two steps written, then ENOMEM: the rest through the mapping, counted once. */
    assert_int_equal(write_under_faults(5 * 4096 + 1, 17, 4096, 0, 3, false), 3);
    assert_int_equal(g_stats.chunkmem_errors, 1);
}

static void test_file_grows_past_its_first_slots(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(64 * 1024, true, 0);
    need_file(m);
    enum { N = 40 };
    struct chunkmem_block b[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(chunkmem_get(m, 64 * 1024, &b[i]), 0);
        memset(b[i].data, 'A' + i % 26, 64 * 1024);
        for (int j = 0; j < i; j++)
            assert_true(b[j].off != b[i].off);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(b[i].data[0], 'A' + i % 26);
        assert_int_equal(b[i].data[64 * 1024 - 1], 'A' + i % 26);
        chunkmem_put(m, &b[i]);
    }
    assert_int_equal(chunkmem_held(m), 0);
    chunkmem_free(&m);
}

static void test_short_blocks_and_blocks_past_the_mapping_limit_are_malloced(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(MIB, true, 2);
    need_file(m);
    struct chunkmem_block s, a, b, c, d;
    assert_int_equal(chunkmem_get(m, CHUNKMEM_REF_MIN - 1, &s), 0);
    assert_false(s.in_file);
    assert_int_equal(chunkmem_get(m, MIB, &a), 0);
    assert_int_equal(chunkmem_get(m, MIB, &b), 0);
    assert_true(a.in_file && b.in_file);
    assert_int_equal(chunkmem_held_in_file(m), 2);
    assert_int_equal(chunkmem_get(m, MIB, &c), 0); /* the limit: malloc'd, still usable */
    assert_false(c.in_file);
    memset(c.data, 'c', MIB);
    assert_int_equal(chunkmem_held(m), 4);
    chunkmem_put(m, &a);
    assert_int_equal(chunkmem_get(m, MIB, &d), 0); /* room again */
    assert_true(d.in_file);
    chunkmem_put(m, &s);
    chunkmem_put(m, &b);
    chunkmem_put(m, &c);
    chunkmem_put(m, &d);
    assert_int_equal(chunkmem_held(m), 0);
    assert_int_equal(chunkmem_held_in_file(m), 0);
    chunkmem_free(&m);
}

static void test_empty_blocks(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        struct chunkmem *m = chunkmem_new(MIB, kind == 1, 0);
        struct chunkmem_block b;
        assert_int_equal(chunkmem_get(m, 0, &b), 0);
        assert_non_null(b.data);
        assert_int_equal(b.len, 0);
        chunkmem_put(m, &b);
        chunkmem_free(&m);
    }
}

/* A connected TCP pair on loopback: *<tx> sends, *<rx> receives. */
static void tcp_pair(int *tx, int *rx)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
    *tx = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*tx >= 0);
    assert_int_equal(connect(*tx, (struct sockaddr *)&a, sizeof(a)), 0);
    *rx = accept(l, NULL, NULL);
    assert_true(*rx >= 0);
    close(l);
}

static void test_bytes_queued_by_reference_survive_release_and_reuse(void **state)
{
    (void)state;
    struct chunkmem *m = chunkmem_new(MIB, true, 0);
    need_file(m);
    int fd = chunkmem_fd(m);
    int tx, rx;
    tcp_pair(&tx, &rx);
    /* Small enough to sit whole in the two socket buffers while nobody reads. */
    enum { LEN = CHUNKMEM_REF_MIN };
    struct chunkmem_block a;
    assert_int_equal(chunkmem_get(m, LEN, &a), 0);
    assert_true(a.in_file);
    for (size_t i = 0; i < LEN; i++)
        a.data[i] = (char)('a' + i % 23);
    off_t pos = a.off;
    size_t sent = 0;
    while (sent < LEN) {
        ssize_t k = sendfile(tx, fd, &pos, LEN - sent);
        assert_true(k > 0);
        sent += (size_t)k;
    }
    off_t a_off = a.off;
    chunkmem_put(m, &a);
    /* The same slot, written over while the socket still holds the bytes sent from it. */
    struct chunkmem_block b;
    assert_int_equal(chunkmem_get(m, LEN, &b), 0);
    assert_int_equal(b.off, a_off);
    memset(b.data, 'X', LEN);
    static char got[LEN];
    size_t n = 0;
    while (n < LEN) {
        ssize_t k = recv(rx, got + n, LEN - n, 0);
        assert_true(k > 0);
        n += (size_t)k;
    }
    for (size_t i = 0; i < LEN; i++)
        if (got[i] != (char)('a' + i % 23))
            fail_msg("byte %zu is %d after the slot was reused", i, got[i]);
    assert_int_equal(b.data[LEN - 1], 'X');
    chunkmem_put(m, &b);
    close(tx);
    close(rx);
    chunkmem_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malloc_kind_has_no_file_and_gives_blocks),
        cmocka_unit_test(test_file_kind_slots_are_whole_pmds_and_reused),
        cmocka_unit_test(test_write_fills_the_file_without_mapping_its_pages),
        cmocka_unit_test(test_write_completes_short_and_interrupted_writes),
        cmocka_unit_test(test_a_failed_write_is_counted_and_copied_through_the_mapping),
        cmocka_unit_test(test_file_grows_past_its_first_slots),
        cmocka_unit_test(test_short_blocks_and_blocks_past_the_mapping_limit_are_malloced),
        cmocka_unit_test(test_empty_blocks),
        cmocka_unit_test(test_bytes_queued_by_reference_survive_release_and_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
