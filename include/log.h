/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * log: the error log. Level-gated macros evaluate their arguments only when the level is on
 * (Redis serverLog). Output is one line per message, "YYYY-mm-ddTHH:MM:SS.mmmZ LEVEL message",
 * to stderr (journald) by default or to a file that log_reopen() reopens (SIGUSR1/SIGHUP).
 * Owns: the log FILE. Not thread-safe: loop thread only.
 */
#ifndef CACHEPARTY_LOG_H
#define CACHEPARTY_LOG_H

#include "config.h"

extern int g_log_level; /* enum cfg_log_level */

/* Open <path> ("-" or NULL = stderr) for appending. Returns 0 or -errno (keeps stderr). */
int log_open(const char *path);
/* Reopen the current file (after logrotate's rename). Returns 0 or -errno. */
int log_reopen(void);
void log_close(void);

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                           \
    do {                                                                                           \
        if (g_log_level >= (lvl))                                                                  \
            log_write((lvl), __VA_ARGS__);                                                         \
    } while (0)
#define log_err(...) log_at(CFG_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(CFG_LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(CFG_LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(CFG_LOG_DEBUG, __VA_ARGS__)

#endif
