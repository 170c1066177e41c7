/* SPDX-License-Identifier: BSD-2-Clause */
/* test_util: the small shared helpers of util.c (address text, case-insensitive compare). */
#include "util.h"

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
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *s = (struct sockaddr_in *)(void *)&ss;

    memset(&ss, 0, sizeof(ss));
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)(void *)&ss;

    memset(&ss, 0, sizeof(ss));
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
    return ss;
}

static void test_util_addr_text_ipv4_is_ip_colon_port(void **state)
{
    struct sockaddr_storage ss = v4("192.168.1.20", 80);
    char out[UTIL_ADDR_TEXT_MAX], ip[UTIL_ADDR_TEXT_MAX];

    (void)state;
    util_addr_text(&ss, out, sizeof(out));
    util_addr_ip(&ss, ip, sizeof(ip));
    assert_string_equal(out, "192.168.1.20:80");
    assert_string_equal(ip, "192.168.1.20");
}

static void test_util_addr_text_ipv6_is_bracketed(void **state)
{
    struct sockaddr_storage ss = v6("2001:db8::1", 443);
    char out[UTIL_ADDR_TEXT_MAX], ip[UTIL_ADDR_TEXT_MAX];

    (void)state;
    util_addr_text(&ss, out, sizeof(out));
    util_addr_ip(&ss, ip, sizeof(ip));
    assert_string_equal(out, "[2001:db8::1]:443");
    assert_string_equal(ip, "2001:db8::1");
}

static void test_util_addr_text_longest_ipv6_fits(void **state)
{
    struct sockaddr_storage ss = v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    char out[UTIL_ADDR_TEXT_MAX];

    (void)state;
    util_addr_text(&ss, out, sizeof(out));
    assert_string_equal(out, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
}

static void test_util_addr_text_other_family_is_dash(void **state)
{
    struct sockaddr_storage ss;
    char out[UTIL_ADDR_TEXT_MAX], ip[UTIL_ADDR_TEXT_MAX];

    (void)state;
    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_UNIX;
    util_addr_text(&ss, out, sizeof(out));
    util_addr_ip(&ss, ip, sizeof(ip));
    assert_string_equal(out, "-");
    assert_string_equal(ip, "-");
}

static void test_util_addr_text_cuts_to_cap_and_terminates(void **state)
{
    struct sockaddr_storage ss = v4("10.0.0.1", 8080);
    char out[8];

    (void)state;
    memset(out, 'x', sizeof(out));
    util_addr_text(&ss, out, sizeof(out));
    assert_string_equal(out, "10.0.0.");
}

static void test_util_ieq_ignores_case_and_needs_equal_length(void **state)
{
    (void)state;
    assert_true(util_ieq("Host", 4, "host"));
    assert_false(util_ieq("Hos", 3, "host"));
    assert_false(util_ieq("Hostx", 5, "host"));
}

static void test_util_addr_equal_compares_family_address_and_port_only(void **state)
{
    (void)state;
    struct sockaddr_storage a, b, c6, d6;
    memset(&a, 0, sizeof(a));
    struct sockaddr_in *x = (struct sockaddr_in *)&a;
    x->sin_family = AF_INET;
    x->sin_port = htons(80);
    inet_pton(AF_INET, "127.0.0.2", &x->sin_addr);
    memset(&b, 0xa5, sizeof(b)); /* bytes past the address differ: ignored */
    memcpy(&b, &a, sizeof(struct sockaddr_in));
    assert_true(util_addr_equal(&a, &b));
    ((struct sockaddr_in *)&b)->sin_port = htons(81);
    assert_false(util_addr_equal(&a, &b));
    memset(&c6, 0, sizeof(c6));
    struct sockaddr_in6 *y = (struct sockaddr_in6 *)&c6;
    y->sin6_family = AF_INET6;
    y->sin6_port = htons(80);
    inet_pton(AF_INET6, "::1", &y->sin6_addr);
    d6 = c6;
    assert_true(util_addr_equal(&c6, &d6));
    assert_false(util_addr_equal(&a, &c6)); /* another family */
    inet_pton(AF_INET6, "::2", &((struct sockaddr_in6 *)&d6)->sin6_addr);
    assert_false(util_addr_equal(&c6, &d6));
}

/* An exact read across several steps gives every byte; one past the file's end is -ENODATA. */
static void test_util_pread_exact_reads_all_or_says_the_file_ended(void **state)
{
    (void)state;
    FILE *tf = tmpfile(); /* (already unlinked) */
    assert_non_null(tf);
    int fd = fileno(tf);
    size_t len = 3 * UTIL_IO_STEP + 123;
    char *in = malloc(len), *out = malloc(len + 1);
    assert_non_null(in);
    assert_non_null(out);
    for (size_t i = 0; i < len; i++)
        in[i] = (char)(i * 31 + 7);
    assert_int_equal(write(fd, in, len), (ssize_t)len);
    assert_int_equal(util_pread_exact(fd, out, len - 10, 10), 0);
    assert_memory_equal(out, in + 10, len - 10);
    assert_int_equal(util_pread_exact(fd, out, len + 1, 0), -ENODATA);
    assert_int_equal(util_pread_exact(-1, out, 1, 0), -EBADF);
    assert_int_equal(util_pread_exact(fd, out, 0, (off_t)len + 5), 0);
    fclose(tf);
    free(in);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_util_addr_text_ipv4_is_ip_colon_port),
        cmocka_unit_test(test_util_addr_text_ipv6_is_bracketed),
        cmocka_unit_test(test_util_addr_text_longest_ipv6_fits),
        cmocka_unit_test(test_util_addr_equal_compares_family_address_and_port_only),
        cmocka_unit_test(test_util_addr_text_other_family_is_dash),
        cmocka_unit_test(test_util_addr_text_cuts_to_cap_and_terminates),
        cmocka_unit_test(test_util_ieq_ignores_case_and_needs_equal_length),
        cmocka_unit_test(test_util_pread_exact_reads_all_or_says_the_file_ended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
