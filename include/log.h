/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * log: the error log. Level-gated macros evaluate their arguments only when the level is on
 * (Redis serverLog). Output is one line per message, "YYYY-mm-ddTHH:MM:SS.mmmZ LEVEL message",
 * to stderr (journald) by default or to a file that log_reopen() reopens (SIGUSR1/SIGHUP).
 * Also the one way every log of the daemon (error, access, TLS access) opens and reopens its
 * file: struct log_file.
 * Owns: the error log's descriptor. Not thread-safe: loop thread only.
 */
#ifndef CACHEPARTY_LOG_H
#define CACHEPARTY_LOG_H

#include <stdbool.h>

#include "config.h"

/*
 * A log file by its configured path: "-" means a standard stream (a close-on-exec copy of the
 * <std_fd> given to log_file_open, so the stream itself is never closed, and one closed at start
 * is refused with -EBADF), any other path a file opened for appending (created 0644,
 * close-on-exec). Reopening after logrotate's rename opens the path again and swaps the
 * descriptor only once the new one is open, so a failed reopen keeps writing to the old file.
 */
struct log_file {
    int fd;      /* owns; -1 = closed */
    bool is_std; /* "-": <fd> is a copy of the standard stream (never reopened) */
    char *path;  /* owns; NULL = closed */
};
#define LOG_FILE_CLOSED                                                                            \
    {                                                                                              \
        -1, false, NULL                                                                            \
    }

/* Opens <path> into <lf>, closing what <lf> held first; NULL <path> just closes. Returns 0, or
 * -errno with <lf> closed. */
int log_file_open(struct log_file *lf, const char *path, int std_fd)
    __attribute__((warn_unused_result));
/* Opens the same path again (a no-op for "-" and when closed). Returns 0, or -errno with the old
 * descriptor kept. */
int log_file_reopen(struct log_file *lf) __attribute__((warn_unused_result));
void log_file_close(struct log_file *lf);

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
