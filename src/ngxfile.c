/* SPDX-License-Identifier: BSD-2-Clause */
/* ngxfile: one nginx cache file opened and checked (see ngxfile.h). */
#include "ngxfile.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "diskidx.h"
#include "http1.h"
#include "range.h"
#include "util.h"

void ngxfile_init(struct ngxfile *nf)
{
    memset(nf, 0, sizeof(*nf));
    nf->fd = -1;
    nf->buf = xmalloc(NGXCACHE_PREFIX_MAX);
}

void ngxfile_close(struct ngxfile *nf)
{
    if (nf->fd >= 0)
        close(nf->fd);
    nf->fd = -1;
}

void ngxfile_fini(struct ngxfile *nf)
{
    ngxfile_close(nf);
    free(nf->buf);
    nf->buf = NULL;
}

/* A field of the stored head into <out> (empty when absent); false when it does not fit. */
static bool head_value(const struct ngxcache_file *f, const char *name, char *out, size_t cap)
{
    const struct h1_field *fl = h1_find(f->head, f->resp.fields, f->resp.n_fields, name);
    out[0] = '\0';
    if (fl == NULL)
        return true;
    if (fl->value.len >= cap)
        return false;
    memcpy(out, f->head + fl->value.off, fl->value.len);
    out[fl->value.len] = '\0';
    return true;
}

enum ngxcache_verdict ngxfile_open(struct ngxfile *nf, const char *path, uint64_t slice,
                                   int64_t settle_s, bool hide_etag, bool *absent)
{
    ngxfile_close(nf);
    if (absent != NULL)
        *absent = false;
    /* O_NOATIME: reading (the loop's sendfile) must not dirty the inode, or it could wait for
     * the journal behind a move's syncfs. Only the file's owner may ask for it. */
    nf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOATIME);
    if (nf->fd < 0 && errno == EPERM)
        nf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (nf->fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            if (absent != NULL)
                *absent = true;
            return NGXCACHE_IO;
        }
        return errno == ELOOP ? NGXCACHE_NOT_FILE : NGXCACHE_IO;
    }
    enum ngxcache_verdict v = NGXCACHE_OK;
    if (fstat(nf->fd, &nf->sb) < 0) {
        v = NGXCACHE_IO;
        goto out;
    }
    if (!S_ISREG(nf->sb.st_mode)) {
        v = NGXCACHE_NOT_FILE;
        goto out;
    }
    if (settle_s > 0 && (int64_t)time(NULL) - (int64_t)nf->sb.st_mtime < settle_s) {
        v = NGXCACHE_YOUNG;
        goto out;
    }
    size_t want =
        nf->sb.st_size < (off_t)NGXCACHE_PREFIX_MAX ? (size_t)nf->sb.st_size : NGXCACHE_PREFIX_MAX;
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(nf->fd, nf->buf + got, want - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < want) {
        v = NGXCACHE_IO;
        goto out;
    }
    const char *slash = strrchr(path, '/');
    const char *name = slash != NULL ? slash + 1 : path;
    v = ngxcache_parse(nf->buf, got, (uint64_t)nf->sb.st_size, name, &nf->f);
    if (v == NGXCACHE_OK)
        v = ngxcache_slice(&nf->f, slice, &nf->prefix_len);
    if (v != NGXCACHE_OK)
        goto out;
    if (!(hide_etag || head_value(&nf->f, "ETag", nf->etag, sizeof(nf->etag))) ||
        !head_value(&nf->f, "Last-Modified", nf->last_modified, sizeof(nf->last_modified)) ||
        !head_value(&nf->f, "Content-Type", nf->content_type, sizeof(nf->content_type)))
        v = NGXCACHE_HEAD;
    if (hide_etag)
        nf->etag[0] = '\0';
out:
    if (v != NGXCACHE_OK)
        ngxfile_close(nf);
    return v;
}

bool ngxfile_same_version(const struct ngxfile *a, const struct ngxfile *b)
{
    return a->f.total == b->f.total && strcmp(a->etag, b->etag) == 0 &&
           strcmp(a->last_modified, b->last_modified) == 0;
}

void ngxfile_move(struct ngxfile_move *mv)
{
    uint64_t n = mv->last - mv->first + 1;
    mv->bytes = xcalloc(n, sizeof(*mv->bytes));
    mv->inos = xcalloc(n, sizeof(*mv->inos));
    mv->rc = 0;
    char *body = xmalloc(mv->chunk_size);
    char path[PATH_MAX], tmp[PATH_MAX];
    for (uint64_t i = 0; i < n && mv->rc == 0; i++) {
        uint64_t index = mv->first + i, off, len;
        range_chunk_span(index, mv->chunk_size, mv->m.total, &off, &len);
        if (chunkfile_path(path, sizeof(path), mv->shard_dir, mv->obj, index) < 0 ||
            chunkfile_tmp_path(tmp, sizeof(tmp), mv->shard_dir, mv->obj, index, mv->seq) < 0) {
            mv->rc = -ENAMETOOLONG;
            break;
        }
        struct stat sb;
        if (stat(path, &sb) == 0) {
            /* There already (a fill stored it, or an earlier move): kept when it verifies, since
             * the nginx file may go once this returns; rewritten from it when it does not. */
            struct chunkfile_info info;
            size_t blen;
            off_t boff;
            if (chunkfile_read_verify(AT_FDCWD, path, mv->m.key, mv->m.key_len, mv->chunk_size,
                                      index, &info, body, mv->chunk_size, &blen, &boff) == 0)
                continue;
        }
        mv->rc = util_pread_exact(mv->fd, body, (size_t)len,
                                  mv->off0 + (off_t)((index - mv->first) * mv->chunk_size));
        if (mv->rc == -ENODATA)
            mv->rc = -EIO; /* shorter than checked: changed under us */
        if (mv->rc < 0)
            break;
        mv->m.index = index;
        mv->m.data_len = (uint32_t)len;
        mv->rc = chunkfile_write_tmp(AT_FDCWD, tmp, &mv->m, body, (size_t)len, false);
        if (mv->rc == 0)
            mv->rc = chunkfile_commit(AT_FDCWD, tmp, path);
        if (mv->rc == 0 && stat(path, &sb) == 0) {
            mv->bytes[i] = diskidx_file_bytes(&sb);
            mv->inos[i] = sb.st_ino;
        }
    }
    free(body);
}

void ngxfile_remove_durable(char *const *shard_dirs, struct ngxfile_gone *g, size_t n)
{
    int err[CONFIG_MAX_DIRS] = {0};
    bool done[CONFIG_MAX_DIRS] = {false};
    for (size_t i = 0; i < n; i++) {
        size_t s = g[i].shard;
        ASSERT(s < CONFIG_MAX_DIRS);
        g[i].removed = false;
        g[i].sync_err = g[i].unlink_err = 0;
        if (g[i].skip || done[s])
            continue;
        int fd = open(shard_dirs[s], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        err[s] = fd < 0 || syncfs(fd) < 0 ? (errno != 0 ? errno : EIO) : 0;
        if (fd >= 0)
            close(fd);
        done[s] = true;
    }
    for (size_t i = 0; i < n; i++) {
        struct stat now;
        if (g[i].skip)
            continue;
        if (err[g[i].shard] != 0) {
            g[i].sync_err = err[g[i].shard];
            continue;
        }
        if (lstat(g[i].path, &now) < 0 || now.st_dev != g[i].dev || now.st_ino != g[i].ino)
            continue; /* gone, or another file by now: not ours to remove */
        g[i].removed = unlink(g[i].path) == 0;
        g[i].unlink_err = g[i].removed ? 0 : errno;
    }
}
