/* SPDX-License-Identifier: BSD-2-Clause */
/* log: the error log file and level gate. See log.h. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

int g_log_level = CFG_LOG_INFO;

static struct log_file log_out = LOG_FILE_CLOSED; /* closed = stderr */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int log_file_open(struct log_file *lf, const char *path, int std_fd)
{
    log_file_close(lf);
    if (path == NULL)
        return 0;
    if (strcmp(path, "-") == 0) {
        /* A copy of the standard stream, so that a stream closed at start is refused here
         * (EBADF) rather than writing into whatever descriptor takes its number later. */
        lf->fd = fcntl(std_fd, F_DUPFD_CLOEXEC, 3);
        if (lf->fd < 0)
            return -errno;
        lf->is_std = true;
    } else {
        lf->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (lf->fd < 0)
            return -errno;
    }
    lf->path = xstrdup(path);
    return 0;
}

int log_file_reopen(struct log_file *lf)
{
    if (lf->path == NULL || lf->is_std)
        return 0;
    int fd = open(lf->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    if (lf->fd >= 0)
        close(lf->fd);
    lf->fd = fd;
    return 0;
}

void log_file_close(struct log_file *lf)
{
    if (lf->fd >= 0)
        close(lf->fd); /* (for "-": our copy of the stream) */
    lf->fd = -1;
    lf->is_std = false;
    free(lf->path);
    lf->path = NULL;
}

/* The error log path wanted; kept when it could not be opened, so that a reopen tries again. */
static char *log_path; /* owns; NULL = stderr */

int log_open(const char *path)
{
    log_close();
    if (path == NULL || strcmp(path, "-") == 0)
        return 0;
    log_path = xstrdup(path);
    return log_reopen();
}

int log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int rc = log_out.path != NULL ? log_file_reopen(&log_out)
                                  : log_file_open(&log_out, log_path, STDERR_FILENO);
    if (rc < 0)
        log_err("cannot open error log %s: %s", log_path, strerror(-rc));
    return rc;
}

void log_close(void)
{
    log_file_close(&log_out);
    free(log_path);
    log_path = NULL;
}

void log_write(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    if (level < 0 || level >= (int)ARRAY_SIZE(level_names))
        level = CFG_LOG_ERROR;
    int k = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                     level_names[level]);
    if (k > 0)
        n += (size_t)k;
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k < sizeof(line) - n - 1 ? (size_t)k : sizeof(line) - n - 2;
    line[n++] = '\n';
    int fd = log_out.fd >= 0 ? log_out.fd : STDERR_FILENO;
    int saved = errno;
    const char *p = line;
    while (n > 0) {
        ssize_t k2 = write(fd, p, n);
        if (k2 < 0 && errno == EINTR)
            continue;
        if (k2 <= 0)
            break; /* nowhere left to say so */
        p += k2;
        n -= (size_t)k2;
    }
    errno = saved;
}
