/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_log: struct log_file, the one way the logs open and reopen their file: "-" is the given
 * standard stream (never closed), a path is appended to, and a reopen after a rename moves on to
 * a new file only once it is open. Files live in a fresh directory under /tmp.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

struct fixture {
    char dir[64];
    char path[128];
    char rotated[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    snprintf(f->dir, sizeof(f->dir), "/tmp/cp_test_log.XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/a.log", f->dir);
    snprintf(f->rotated, sizeof(f->rotated), "%s/a.log.1", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    unlink(f->path);
    unlink(f->rotated);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The whole content of <path> ("" when absent). */
static const char *slurp(const char *path)
{
    static char buf[256];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : 0;

    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void put(const struct log_file *lf, const char *s)
{
    assert_int_equal(write(lf->fd, s, strlen(s)), (ssize_t)strlen(s));
}

static void test_log_file_appends_to_its_path(void **state)
{
    struct fixture *f = *state;
    struct log_file lf = LOG_FILE_CLOSED;
    int fd = open(f->path, O_WRONLY | O_CREAT, 0644);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, "old\n", 4), 4);
    close(fd);
    assert_int_equal(log_file_open(&lf, f->path, STDOUT_FILENO), 0);
    assert_false(lf.is_std);
    assert_string_equal(lf.path, f->path);
    put(&lf, "new\n");
    assert_string_equal(slurp(f->path), "old\nnew\n");
    log_file_close(&lf);
    assert_int_equal(lf.fd, -1);
    assert_null(lf.path);
}

static void test_log_file_reopen_after_rename_writes_a_new_file(void **state)
{
    struct fixture *f = *state;
    struct log_file lf = LOG_FILE_CLOSED;

    assert_int_equal(log_file_open(&lf, f->path, STDOUT_FILENO), 0);
    put(&lf, "one\n");
    assert_int_equal(rename(f->path, f->rotated), 0);
    assert_int_equal(log_file_reopen(&lf), 0);
    put(&lf, "two\n");
    assert_string_equal(slurp(f->rotated), "one\n");
    assert_string_equal(slurp(f->path), "two\n");
    log_file_close(&lf);
}

static void test_log_file_failed_reopen_keeps_the_old_file(void **state)
{
    struct fixture *f = *state;
    struct log_file lf = LOG_FILE_CLOSED;

    assert_int_equal(log_file_open(&lf, f->path, STDOUT_FILENO), 0);
    int old = lf.fd;
    assert_int_equal(rename(f->path, f->rotated), 0);
    assert_int_equal(rmdir(f->dir), -1); /* not empty: a.log.1 is there */
    assert_int_equal(chmod(f->dir, 0500), 0);
    int rc = log_file_reopen(&lf);
    assert_int_equal(chmod(f->dir, 0700), 0);
    if (geteuid() != 0) { /* root may create files in a read-only directory */
        assert_int_equal(rc, -EACCES);
        assert_int_equal(lf.fd, old);
    }
    put(&lf, "still\n");
    log_file_close(&lf);
    if (geteuid() != 0)
        assert_string_equal(slurp(f->rotated), "still\n");
}

static void test_log_file_dash_is_a_copy_of_the_standard_stream_which_stays_open(void **state)
{
    struct log_file lf = LOG_FILE_CLOSED;
    int std = dup(STDERR_FILENO);

    (void)state;
    assert_true(std >= 0);
    assert_int_equal(log_file_open(&lf, "-", std), 0);
    assert_true(lf.fd >= 0 && lf.fd != std);
    assert_true(lf.is_std);
    int fd = lf.fd;
    assert_int_equal(log_file_reopen(&lf), 0); /* "-" is never reopened */
    assert_int_equal(lf.fd, fd);
    log_file_close(&lf);
    assert_int_equal(lf.fd, -1);
    assert_true(fcntl(fd, F_GETFD) < 0);   /* our copy is closed */
    assert_true(fcntl(std, F_GETFD) >= 0); /* the stream itself is still open */
    close(std);
}

static void test_log_file_dash_on_a_closed_standard_stream_is_refused(void **state)
{
    struct log_file lf = LOG_FILE_CLOSED;
    int std = dup(STDERR_FILENO);

    (void)state;
    assert_true(std >= 0);
    close(std); /* a stream closed when the daemon started */
    assert_int_equal(log_file_open(&lf, "-", std), -EBADF);
    assert_int_equal(lf.fd, -1);
    assert_null(lf.path);
}

static void test_log_file_open_failure_leaves_it_closed(void **state)
{
    struct log_file lf = LOG_FILE_CLOSED;

    (void)state;
    assert_int_equal(log_file_open(&lf, "/nonexistent-dir/x.log", STDOUT_FILENO), -ENOENT);
    assert_int_equal(lf.fd, -1);
    assert_null(lf.path);
    assert_int_equal(log_file_reopen(&lf), 0); /* closed: nothing to reopen */
    assert_int_equal(log_file_open(&lf, NULL, STDOUT_FILENO), 0);
    assert_int_equal(lf.fd, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_log_file_appends_to_its_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_file_reopen_after_rename_writes_a_new_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_log_file_failed_reopen_keeps_the_old_file, setup,
                                        teardown),
        cmocka_unit_test(test_log_file_dash_is_a_copy_of_the_standard_stream_which_stays_open),
        cmocka_unit_test(test_log_file_dash_on_a_closed_standard_stream_is_refused),
        cmocka_unit_test(test_log_file_open_failure_leaves_it_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
