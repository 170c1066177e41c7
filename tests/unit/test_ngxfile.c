/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_ngxfile: one nginx cache file opened and checked from disk, and written as chunk files:
 * the two files Debian's nginx wrote (fixtures_ngxcache.h) under their md5 names in a levels=2:2
 * tree; what is not a regular file of that name (a symlink, a directory, a FIFO, another name), a
 * file younger than the settle time, one cut short; the move's chunk files verified by
 * chunkfile_read_verify() byte for byte, an existing chunk file left as it is. Each test runs in
 * its own mkdtemp() directory under /tmp.
 */
#include "ngxfile.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixtures_ngxcache.h"

#define SLICE (1024u * 1024u)

static const char steam_key[] =
    "steam/depot/1091501/chunk/3e5c1a2b9f0d4c6e8a7b5c3d1e2f4a6b8c0d2e4f/"
    "size/700bytes=0-1048575";
static const char last_key[] = "dl.example.org:8080/tpr/x/size/1048600bytes=1048576-2097151";

struct fx {
    char dir[64];
};

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_ngxfile.XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    nftw(fx->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static void mkdirs_for(const char *path)
{
    char d[4096];
    snprintf(d, sizeof(d), "%s", path);
    for (char *s = strchr(d + 1, '/'); s != NULL; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(d, 0755) < 0)
            assert_int_equal(errno, EEXIST);
        *s = '/';
    }
}

static void write_file(const char *path, const void *data, size_t len)
{
    mkdirs_for(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

/* The file of <key> in the tree <dir>, as nginx names it. */
static void tree_path(const struct fx *fx, const char *key, char *out, size_t cap)
{
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/lc", fx->dir);
    assert_int_equal(ngxcache_path(dir, key, strlen(key), out, cap), 0);
}

static void test_real_files_open_with_their_fields(void **state)
{
    struct fx *fx = *state;
    char p[256];
    struct ngxfile nf;
    ngxfile_init(&nf);
    tree_path(fx, steam_key, p, sizeof(p));
    write_file(p, ngx_steam, sizeof(ngx_steam));
    bool absent = true;
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, &absent), NGXCACHE_OK);
    assert_false(absent);
    assert_true(nf.fd >= 0);
    assert_int_equal(nf.f.total, 700);
    assert_int_equal(nf.f.body_len, 700);
    assert_int_equal(nf.prefix_len, strlen(steam_key) - strlen("bytes=0-1048575"));
    ngxfile_close(&nf);
    assert_int_equal(nf.fd, -1);

    tree_path(fx, last_key, p, sizeof(p));
    write_file(p, ngx_last, sizeof(ngx_last));
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_OK);
    assert_string_equal(nf.etag, "\"cd795e85-100018\"");
    assert_int_equal(nf.f.first, 1048576);
    assert_int_equal(nf.f.last, 1048599);
    struct ngxfile again;
    ngxfile_init(&again);
    assert_int_equal(ngxfile_open(&again, p, SLICE, 0, false, NULL), NGXCACHE_OK);
    assert_true(ngxfile_same_version(&nf, &again));
    ngxfile_fini(&again);
    /* A blizzard-etag rule: the version is known by its length and Last-Modified only. */
    ngxfile_close(&nf);
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, true, NULL), NGXCACHE_OK);
    assert_string_equal(nf.etag, "");
    /* Another slice size: its key is not one of its windows. */
    ngxfile_close(&nf);
    assert_int_equal(ngxfile_open(&nf, p, 2 * SLICE, 0, false, NULL), NGXCACHE_KEY);
    assert_int_equal(nf.fd, -1);
    ngxfile_fini(&nf);
}

static void test_what_is_not_such_a_file_is_refused(void **state)
{
    struct fx *fx = *state;
    char p[256], other[300];
    struct ngxfile nf;
    ngxfile_init(&nf);
    tree_path(fx, steam_key, p, sizeof(p));
    bool absent = false;
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, &absent), NGXCACHE_IO);
    assert_true(absent);

    /* A symlink to a good file, under the good name. */
    snprintf(other, sizeof(other), "%s/elsewhere", fx->dir);
    write_file(other, ngx_steam, sizeof(ngx_steam));
    mkdirs_for(p);
    assert_int_equal(symlink(other, p), 0);
    absent = true;
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, &absent), NGXCACHE_NOT_FILE);
    assert_false(absent);
    assert_int_equal(unlink(p), 0);
    /* A directory, and a FIFO (never blocks). */
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_NOT_FILE);
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_NOT_FILE);
    assert_int_equal(unlink(p), 0);
    /* The good bytes under another md5 name, and under a name that is none. */
    char wrong[300];
    snprintf(wrong, sizeof(wrong), "%s/lc/00/00/0123456789abcdef0123456789abcdef", fx->dir);
    write_file(wrong, ngx_steam, sizeof(ngx_steam));
    assert_int_equal(ngxfile_open(&nf, wrong, SLICE, 0, false, NULL), NGXCACHE_MD5);
    snprintf(wrong, sizeof(wrong), "%s/lc/00/00/notanmd5name", fx->dir);
    write_file(wrong, ngx_steam, sizeof(ngx_steam));
    assert_int_equal(ngxfile_open(&nf, wrong, SLICE, 0, false, NULL), NGXCACHE_NAME);
    /* Cut short by one byte, and a byte more than its Content-Range says. */
    write_file(p, ngx_steam, sizeof(ngx_steam) - 1);
    assert_int_not_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_OK);
    uint8_t longer[sizeof(ngx_steam) + 1];
    memcpy(longer, ngx_steam, sizeof(ngx_steam));
    longer[sizeof(ngx_steam)] = 'x';
    write_file(p, longer, sizeof(longer));
    assert_int_not_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_OK);
    assert_int_equal(nf.fd, -1);
    ngxfile_fini(&nf);
}

static void test_a_young_file_waits_for_the_settle_time(void **state)
{
    struct fx *fx = *state;
    char p[256];
    struct ngxfile nf;
    ngxfile_init(&nf);
    tree_path(fx, steam_key, p, sizeof(p));
    write_file(p, ngx_steam, sizeof(ngx_steam));
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 600, false, NULL), NGXCACHE_YOUNG);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 601}, {.tv_sec = time(NULL) - 601}};
    assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 600, false, NULL), NGXCACHE_OK);
    ngxfile_fini(&nf);
}

static void move_of(struct ngxfile_move *mv, const struct ngxfile *nf, const char *shard,
                    const uint8_t obj[16], const char *ckey)
{
    memset(mv, 0, sizeof(*mv));
    mv->fd = nf->fd;
    mv->off0 = (off_t)nf->f.body_start;
    mv->first = nf->f.first / SLICE;
    mv->last = nf->f.last / SLICE;
    mv->chunk_size = SLICE;
    mv->shard_dir = shard;
    memcpy(mv->obj, obj, 16);
    mv->seq = 7;
    mv->m.chunk_size = SLICE;
    mv->m.total = nf->f.total;
    mv->m.key = ckey;
    mv->m.key_len = strlen(ckey);
    mv->m.etag = nf->etag;
    mv->m.etag_len = strlen(nf->etag);
    mv->m.last_modified = nf->last_modified;
    mv->m.last_modified_len = strlen(nf->last_modified);
    mv->m.content_type = nf->content_type;
    mv->m.content_type_len = strlen(nf->content_type);
    mv->m.fields = "";
    mv->m.fields_len = 0;
}

static void test_move_writes_verified_chunk_files_and_keeps_existing_ones(void **state)
{
    struct fx *fx = *state;
    char p[256], shard[128], tmpd[160];
    snprintf(shard, sizeof(shard), "%s/shard", fx->dir);
    snprintf(tmpd, sizeof(tmpd), "%s/tmp", shard);
    assert_int_equal(mkdir(shard, 0755), 0);
    assert_int_equal(mkdir(tmpd, 0755), 0);
    struct ngxfile nf;
    ngxfile_init(&nf);
    tree_path(fx, last_key, p, sizeof(p));
    write_file(p, ngx_last, sizeof(ngx_last));
    assert_int_equal(ngxfile_open(&nf, p, SLICE, 0, false, NULL), NGXCACHE_OK);
    static const char ckey[] = "dl.example.org:8080/tpr/x/size/1048600";
    uint8_t obj[16];
    chunkfile_key_hash(ckey, strlen(ckey), obj);
    struct ngxfile_move mv;
    move_of(&mv, &nf, shard, obj, ckey);
    ngxfile_move(&mv);
    assert_int_equal(mv.rc, 0);
    assert_int_equal(mv.first, 1);
    assert_int_equal(mv.last, 1);
    assert_true(mv.bytes[0] > 0);
    free(mv.bytes);
    free(mv.inos);
    /* The chunk file holds the body bytes nginx stored, and the version. */
    char cpath[256];
    assert_int_equal(chunkfile_path(cpath, sizeof(cpath), shard, obj, 1), 0);
    struct chunkfile_info info;
    uint8_t body[64];
    size_t blen;
    off_t boff;
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, cpath, ckey, strlen(ckey), SLICE, 1, &info,
                                           body, sizeof(body), &blen, &boff),
                     0);
    assert_int_equal(blen, 24);
    assert_memory_equal(body, ngx_last + nf.f.body_start, 24);
    assert_int_equal(info.total, 1048600);
    assert_int_equal(info.data_len, 24);
    assert_string_equal(info.etag, "\"cd795e85-100018\"");
    /* The nginx file is never touched by the move; its tmp file is gone. */
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    char tmp[256];
    assert_int_equal(chunkfile_tmp_path(tmp, sizeof(tmp), shard, obj, 1, 7), 0);
    assert_int_equal(stat(tmp, &sb), -1);
    /* Moved again: the chunk file there is left as it is (same inode), nothing written. */
    struct stat before;
    assert_int_equal(stat(cpath, &before), 0);
    move_of(&mv, &nf, shard, obj, ckey);
    ngxfile_move(&mv);
    assert_int_equal(mv.rc, 0);
    assert_int_equal(mv.bytes[0], 0);
    free(mv.bytes);
    free(mv.inos);
    assert_int_equal(stat(cpath, &sb), 0);
    assert_int_equal(sb.st_ino, before.st_ino);
    /* One of ours that does not verify (a bit flipped in its body) is rewritten from the nginx
     * file: the nginx file may go once the move returns. */
    int fd = open(cpath, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, sb.st_size - 1), 1);
    close(fd);
    assert_int_not_equal(chunkfile_read_verify(AT_FDCWD, cpath, ckey, strlen(ckey), SLICE, 1, &info,
                                               body, sizeof(body), &blen, &boff),
                         0);
    move_of(&mv, &nf, shard, obj, ckey);
    ngxfile_move(&mv);
    assert_int_equal(mv.rc, 0);
    assert_true(mv.bytes[0] > 0);
    free(mv.bytes);
    free(mv.inos);
    assert_int_equal(chunkfile_read_verify(AT_FDCWD, cpath, ckey, strlen(ckey), SLICE, 1, &info,
                                           body, sizeof(body), &blen, &boff),
                     0);
    assert_memory_equal(body, ngx_last + nf.f.body_start, 24);
    /* A shard without its tmp directory: the failure is reported, nothing is left. */
    assert_int_equal(unlink(cpath), 0);
    assert_int_equal(rmdir(tmpd), 0);
    move_of(&mv, &nf, shard, obj, ckey);
    ngxfile_move(&mv);
    assert_true(mv.rc < 0);
    free(mv.bytes);
    free(mv.inos);
    assert_int_equal(stat(cpath, &sb), -1);
    ngxfile_fini(&nf);
}

/* The removal after a batch of moves: the file still the one read goes; one replaced since, one
 * skipped and one whose shard cannot be synced stay. */
static void test_remove_durable_removes_only_the_files_read(void **state)
{
    struct fx *fx = *state;
    char shard[128], gone[160], replaced[160], kept[160], lost[160];
    snprintf(shard, sizeof(shard), "%s/shard", fx->dir);
    assert_int_equal(mkdir(shard, 0755), 0);
    snprintf(gone, sizeof(gone), "%s/a", fx->dir);
    snprintf(replaced, sizeof(replaced), "%s/b", fx->dir);
    snprintf(kept, sizeof(kept), "%s/c", fx->dir);
    snprintf(lost, sizeof(lost), "%s/d", fx->dir);
    const char *paths[] = {gone, replaced, kept, lost};
    struct stat sb[4];
    for (size_t i = 0; i < 4; i++) {
        write_file(paths[i], "x", 1);
        assert_int_equal(lstat(paths[i], &sb[i]), 0);
    }
    /* b replaced by another file of the same name after it was read */
    char tmp[200];
    snprintf(tmp, sizeof(tmp), "%s.new", replaced);
    write_file(tmp, "y", 1);
    assert_int_equal(rename(tmp, replaced), 0);
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/no-such-shard", fx->dir);
    char *dirs[2] = {shard, missing};
    struct ngxfile_gone g[4];
    for (size_t i = 0; i < 4; i++)
        g[i] = (struct ngxfile_gone){
            .path = paths[i], .dev = sb[i].st_dev, .ino = sb[i].st_ino, .shard = i == 3};
    g[2].skip = true;
    ngxfile_remove_durable(dirs, g, 4);
    struct stat now;
    assert_true(g[0].removed);
    assert_int_equal(lstat(gone, &now), -1);
    assert_false(g[1].removed);
    assert_int_equal(lstat(replaced, &now), 0);
    assert_false(g[2].removed);
    assert_int_equal(lstat(kept, &now), 0);
    assert_false(g[3].removed);
    assert_int_equal(g[3].sync_err, ENOENT);
    assert_int_equal(lstat(lost, &now), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_real_files_open_with_their_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_what_is_not_such_a_file_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_young_file_waits_for_the_settle_time, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_move_writes_verified_chunk_files_and_keeps_existing_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_durable_removes_only_the_files_read, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
