/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * util: the few macros the project allows (ASSERT, WRONG, CHECK_OBJ, container_of, ARRAY_SIZE),
 * aborting small allocators, and time helpers. Asserts are always on, release builds included:
 * they guard invariants, never anything a peer or the disk can cause.
 */
#ifndef CACHEPARTY_UTIL_H
#define CACHEPARTY_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

void util_assert_fail(const char *expr, const char *file, int line, const char *func)
    __attribute__((noreturn));

#define ASSERT(e)                                                                                  \
    do {                                                                                           \
        if (!(e))                                                                                  \
            util_assert_fail(#e, __FILE__, __LINE__, __func__);                                    \
    } while (0)
#define WRONG(msg) util_assert_fail("WRONG: " msg, __FILE__, __LINE__, __func__)
#define CHECK_OBJ(p, m)                                                                            \
    do {                                                                                           \
        ASSERT((p) != NULL);                                                                       \
        ASSERT((p)->magic == (m));                                                                 \
    } while (0)

#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * The most bytes one read or write system call of the disk threads moves. A kernel without full
 * preemption (measured on preempt=none; Debian's default, voluntary, has only a few more points)
 * keeps a thread in a system call until its end before one woken on the same core gets it: a
 * 1 MiB write into the page cache was one stretch of 1-3 ms there, during which the loop, woken
 * by a client, waited (bench/README, issue 18). A step returns to user space, where the loop
 * takes the core at once.
 */
#define UTIL_IO_STEP ((size_t)64 * 1024)

/* pread() exactly <len> bytes at <off> into <buf>, in steps of UTIL_IO_STEP, retrying EINTR.
 * Returns 0, -ENODATA when the file ends first, or -errno. */
int util_pread_exact(int fd, void *buf, size_t len, off_t off);

/* Allocators for small fixed objects: log and abort on failure (never NULL). */
void *xmalloc(size_t len);
void *xcalloc(size_t n, size_t len);
void *xrealloc(void *p, size_t len);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t len);

/* Monotonic and wall clocks in milliseconds. */
uint64_t util_now_ms(void);
uint64_t util_wall_ms(void);

/* Case-insensitive compare of <a>[0..alen) with the NUL-terminated <b>. */
bool util_ieq(const char *a, size_t alen, const char *b);

/* Whether <host> is the name <pat>, or a name below x when <pat> is "*.x" (on a label boundary,
 * never x itself). Both lowercase, without a trailing dot. */
bool util_host_pattern_match(const char *pat, const char *host);

/* HTTP's optional whitespace (RFC 9110 §5.6.3): space or tab. */
static inline bool util_is_ows(char c)
{
    return c == ' ' || c == '\t';
}
/* Strips leading and trailing OWS from [*p, *p + *len). */
void util_trim_ows(const char **p, size_t *len);

struct sockaddr_storage;

/* Room for util_addr_text's longest output, "[v6 address]:65535", with its NUL. */
#define UTIL_ADDR_TEXT_MAX 56
/*
 * The address of <ss> as text: "1.2.3.4:80" for IPv4, "[::1]:80" for IPv6, "-" for any other
 * family. util_addr_ip writes the address alone ("1.2.3.4", "::1"). Both always NUL-terminate
 * <out> (cut to <cap>).
 */
void util_addr_text(const struct sockaddr_storage *ss, char *out, size_t cap);
/* Whether <a> and <b> are the same family, address and port (the rest is ignored). */
bool util_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
void util_addr_ip(const struct sockaddr_storage *ss, char *out, size_t cap);
/* Whether <ss> is a loopback address: 127.0.0.0/8, ::1 or IPv4-mapped 127.0.0.0/8. */
bool util_addr_is_loopback(const struct sockaddr_storage *ss);

/* Set O_NONBLOCK and FD_CLOEXEC on <fd>. Returns 0 or -errno. */
int util_set_nonblock(int fd);

#endif
