/* SPDX-License-Identifier: BSD-2-Clause */
/* log: the error log file and level gate. See log.h. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

int g_log_level = CFG_LOG_INFO;

static FILE *log_fp;   /* owns; NULL = stderr */
static char *log_path; /* owns; NULL = stderr */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

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
    FILE *fp = fopen(log_path, "ae");
    if (fp == NULL) {
        int e = errno;
        log_err("cannot open error log %s: %s", log_path, strerror(e));
        return -e;
    }
    setvbuf(fp, NULL, _IOLBF, 0);
    if (log_fp != NULL)
        fclose(log_fp);
    log_fp = fp;
    return 0;
}

void log_close(void)
{
    if (log_fp != NULL)
        fclose(log_fp);
    log_fp = NULL;
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
    FILE *fp = log_fp ? log_fp : stderr;
    fwrite(line, 1, n, fp);
    if (fp == stderr)
        fflush(fp);
}
