/* SPDX-License-Identifier: BSD-2-Clause */
/* util: always-on assertion sink, aborting allocators, clocks, small string helpers. */
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void util_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "cacheparty: assertion failed: %s at %s:%d (%s)\n", expr, file, line, func);
    fflush(stderr);
    abort();
}

static void *oom(size_t len)
{
    fprintf(stderr, "cacheparty: out of memory allocating %zu bytes\n", len);
    abort();
}

void *xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    return p ? p : oom(len);
}

void *xcalloc(size_t n, size_t len)
{
    void *p = calloc(n ? n : 1, len ? len : 1);
    return p ? p : oom(n * len);
}

void *xrealloc(void *p, size_t len)
{
    void *q = realloc(p, len ? len : 1);
    return q ? q : oom(len);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t len)
{
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

uint64_t util_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t util_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int util_pread_exact(int fd, void *buf, size_t len, off_t off)
{
    char *b = buf;
    while (len > 0) {
        ssize_t n = pread(fd, b, len < UTIL_IO_STEP ? len : UTIL_IO_STEP, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ENODATA;
        b += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

bool util_ieq(const char *a, size_t alen, const char *b)
{
    return strlen(b) == alen && strncasecmp(a, b, alen) == 0;
}

int util_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    fl = fcntl(fd, F_GETFD);
    if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
        return -errno;
    return 0;
}

_Static_assert(UTIL_ADDR_TEXT_MAX >= INET6_ADDRSTRLEN + sizeof("[]:65535") - 1,
               "UTIL_ADDR_TEXT_MAX holds any address with brackets and a port");

void util_addr_ip(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "-";

    ASSERT(cap > 0);
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, ip,
                  sizeof(ip));
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, ip,
                  sizeof(ip));
    snprintf(out, cap, "%s", ip);
}

bool util_addr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)ss;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

void util_addr_text(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];

    ASSERT(cap > 0);
    util_addr_ip(ss, ip, sizeof(ip));
    if (ss->ss_family == AF_INET)
        snprintf(out, cap, "%s:%u", ip,
                 ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port));
    else if (ss->ss_family == AF_INET6)
        snprintf(out, cap, "[%s]:%u", ip,
                 ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port));
    else
        snprintf(out, cap, "-");
}

bool util_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return false;
}

void util_trim_ows(const char **p, size_t *len)
{
    while (*len > 0 && util_is_ows(**p)) {
        (*p)++;
        (*len)--;
    }
    while (*len > 0 && util_is_ows((*p)[*len - 1]))
        (*len)--;
}

bool util_host_pattern_match(const char *pat, const char *host)
{
    if (pat[0] != '*')
        return strcmp(pat, host) == 0;
    size_t pl = strlen(pat) - 1, hl = strlen(host); /* pl: ".x" */
    return hl > pl && memcmp(host + hl - pl, pat + 1, pl) == 0;
}
