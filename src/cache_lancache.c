/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_lancache: finding a chunk in lancache's nginx cache trees and writing it into the cache
 * (see cache_int.h). Runs on the I/O threads, blocking; the loop side is in cache.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"
#include "diskidx.h"
#include "objhead.h"
#include "origin.h"
#include "range.h"
#include "util.h"

bool cache_lc_prepare(struct lc_query *q, const char *key, size_t key_len,
                      const struct origin_req *o, uint64_t index)
{
    memset(q, 0, sizeof(*q));
    q->fd = -1;
    q->why = NGXCACHE_IO; /* (not looked up yet: nothing found) */
    q->index = index;
    q->hide_etag = o->hide_etag;
    const char *nl = memchr(key, '\n', key_len);
    if (nl == NULL)
        return false;
    const char *ident = key;
    size_t ident_len = (size_t)(nl - key);
    /* A host of no service: lancache's map default is $http_host, the Host header as sent
     * (ours is lowercased, and a host named like a service has a '.' added). */
    size_t al = o->authority != NULL ? strlen(o->authority) : 0;
    if (al > 0 && ((al == ident_len && strncasecmp(o->authority, ident, al) == 0) ||
                   (al + 1 == ident_len && ident[al] == '.' &&
                    strncasecmp(o->authority, ident, al) == 0))) {
        ident = o->authority;
        ident_len = al;
    }
    const char *path = nl + 1;
    size_t path_len = key_len - (size_t)(path - key);
    q->prefix = xmalloc(ident_len + NGXCACHE_KEY_MAX);
    memcpy(q->prefix, ident, ident_len);
    ssize_t ul = ngxcache_uri(path, path_len, q->prefix + ident_len, NGXCACHE_KEY_MAX - 64);
    if (ul < 0) {
        free(q->prefix);
        q->prefix = NULL;
        return false;
    }
    q->prefix_len = ident_len + (size_t)ul;
    return true;
}

void cache_lc_fini(struct lc_query *q)
{
    if (q->fd >= 0)
        close(q->fd);
    q->fd = -1;
    cache_meta_clear(&q->meta);
    free(q->prefix);
    q->prefix = NULL;
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

/* A checked file: its fd (owned), stat, parse and version (head not made). */
struct lc_file {
    int fd;
    struct stat sb;
    struct ngxcache_file f;
    char etag[CHUNKFILE_ETAG_MAX + 1];
    char last_modified[CHUNKFILE_LAST_MODIFIED_MAX + 1];
    char content_type[CHUNKFILE_CONTENT_TYPE_MAX + 1];
};

/*
 * Opens and checks lancache's file for slice <start> of the object in <dir>: NGXCACHE_OK with
 * <lf> filled (lf->fd open), or why not (lf->fd closed); *absent when there is no file at all.
 * <buf> holds NGXCACHE_PREFIX_MAX bytes (the file's parse borrows it).
 */
static enum ngxcache_verdict check_file(const struct lc_query *q, const char *dir, uint64_t start,
                                        uint8_t *buf, char *path, size_t path_cap,
                                        struct lc_file *lf, bool *absent)
{
    char key[NGXCACHE_KEY_MAX];
    *absent = false;
    lf->fd = -1;
    if (q->prefix_len + 64 > sizeof(key))
        return NGXCACHE_KEY;
    ssize_t kl = ngxcache_key(q->prefix, q->prefix_len, "", 0, start, q->slice, key, sizeof(key));
    if (kl < 0 || ngxcache_path(dir, key, (size_t)kl, path, path_cap) < 0)
        return NGXCACHE_KEY;
    lf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (lf->fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            *absent = true;
            return NGXCACHE_IO;
        }
        return errno == ELOOP ? NGXCACHE_NOT_FILE : NGXCACHE_IO;
    }
    enum ngxcache_verdict v = NGXCACHE_OK;
    if (fstat(lf->fd, &lf->sb) < 0) {
        v = NGXCACHE_IO;
        goto out;
    }
    if (!S_ISREG(lf->sb.st_mode)) {
        v = NGXCACHE_NOT_FILE;
        goto out;
    }
    if (q->settle_s > 0 && (int64_t)time(NULL) - (int64_t)lf->sb.st_mtime < q->settle_s) {
        v = NGXCACHE_YOUNG;
        goto out;
    }
    size_t want = lf->sb.st_size < (off_t)NGXCACHE_PREFIX_MAX ? (size_t)lf->sb.st_size
                                                               : NGXCACHE_PREFIX_MAX;
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(lf->fd, buf + got, want - got, (off_t)got);
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
    const char *name = strrchr(path, '/') + 1;
    v = ngxcache_parse(buf, got, (uint64_t)lf->sb.st_size, name, &lf->f);
    if (v != NGXCACHE_OK)
        goto out;
    if (lf->f.key_len != (size_t)kl || memcmp(lf->f.key, key, (size_t)kl) != 0) {
        v = NGXCACHE_KEY;
        goto out;
    }
    v = ngxcache_slice(&lf->f, q->slice, NULL);
    if (v != NGXCACHE_OK)
        goto out;
    if (!(q->hide_etag || head_value(&lf->f, "ETag", lf->etag, sizeof(lf->etag))) ||
        !head_value(&lf->f, "Last-Modified", lf->last_modified, sizeof(lf->last_modified)) ||
        !head_value(&lf->f, "Content-Type", lf->content_type, sizeof(lf->content_type)))
        v = NGXCACHE_HEAD;
    if (q->hide_etag)
        lf->etag[0] = '\0';
out:
    if (v != NGXCACHE_OK) {
        close(lf->fd);
        lf->fd = -1;
    }
    return v;
}

static bool same_version(const struct lc_file *a, const struct lc_file *b)
{
    return a->f.total == b->f.total && strcmp(a->etag, b->etag) == 0 &&
           strcmp(a->last_modified, b->last_modified) == 0;
}

/* Whether every other slice of the object found in <dir> is of <lf>'s version (the slice filter's
 * rule: one ETag, one length). Damaged ones are left to their own lookups. <buf> is another
 * NGXCACHE_PREFIX_MAX bytes than the one <lf> borrows. */
static bool siblings_agree(const struct lc_query *q, const char *dir, const struct lc_file *lf,
                           uint64_t own_start, uint8_t *buf)
{
    char path[PATH_MAX];
    uint64_t n = range_chunk_count(lf->f.total, q->slice);
    for (uint64_t j = 0; j < n; j++) {
        if (j * q->slice == own_start)
            continue;
        struct lc_file other;
        bool absent;
        if (check_file(q, dir, j * q->slice, buf, path, sizeof(path), &other, &absent) !=
            NGXCACHE_OK)
            continue;
        bool same = same_version(lf, &other);
        close(other.fd);
        if (!same)
            return false;
    }
    return true;
}

void cache_lc_find(struct lc_query *q)
{
    uint8_t *buf = xmalloc(NGXCACHE_PREFIX_MAX);
    uint64_t start = q->index * q->slice;
    q->why = NGXCACHE_IO;
    for (size_t d = 0; d < q->n_dirs; d++) {
        struct lc_file lf;
        bool absent;
        uint64_t at = start;
        char path[PATH_MAX];
        enum ngxcache_verdict v = check_file(q, q->dirs[d], at, buf, path, sizeof(path), &lf,
                                             &absent);
        if (absent && start > 0) {
            /* An origin that ignored Range: the whole object as a 200 under the first key. */
            at = 0;
            v = check_file(q, q->dirs[d], 0, buf, path, sizeof(path), &lf, &absent);
            if (v == NGXCACHE_OK && (lf.f.resp.status != 200 || lf.f.total <= start)) {
                close(lf.fd);
                continue; /* a first slice only: this one is not there */
            }
        }
        if (absent)
            continue;
        q->any = true;
        q->why = v;
        snprintf(q->path, sizeof(q->path), "%s", path);
        if (v != NGXCACHE_OK)
            break; /* counted and logged by the loop; never served */
        if (start >= lf.f.total) {
            q->why = NGXCACHE_RANGE; /* the chunk lies past the object's end */
            close(lf.fd);
            break;
        }
        if (q->check_siblings && lf.f.total > q->slice && lf.f.resp.status != 200) {
            uint8_t *other = xmalloc(NGXCACHE_PREFIX_MAX);
            bool agree = siblings_agree(q, q->dirs[d], &lf, at, other);
            free(other);
            if (!agree) {
                q->why = NGXCACHE_VERSION_DIFFERS;
                close(lf.fd);
                break;
            }
        }
        struct cache_meta *m = &q->meta;
        memset(m, 0, sizeof(*m));
        m->total = lf.f.total;
        memcpy(m->etag, lf.etag, sizeof(m->etag));
        memcpy(m->last_modified, lf.last_modified, sizeof(m->last_modified));
        memcpy(m->content_type, lf.content_type, sizeof(m->content_type));
        /* Its fields, as stored by nginx at lf.f.date (the answer's request and response time). */
        if (objhead_from_response(lf.f.head, &lf.f.resp, (double)lf.f.date, (double)lf.f.date,
                                  &m->head) < 0) {
            q->why = NGXCACHE_HEAD;
            close(lf.fd);
            break;
        }
        uint64_t off0;
        range_chunk_span(q->index, q->slice, lf.f.total, &off0, &q->data_len);
        q->body_off = (off_t)(lf.f.body_start + (start - lf.f.first));
        q->whole = lf.f.resp.status == 200;
        q->fd = lf.fd;
        q->sb = lf.sb;
        q->why = NGXCACHE_OK;
        break;
    }
    free(buf);
}

/* fsync of the directory holding <path>: the rename into it is durable. */
static int sync_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return -EINVAL;
    *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static int read_exact(int fd, char *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO; /* shorter than checked: changed under us */
        got += (size_t)r;
    }
    return 0;
}

void cache_lc_migrate(struct lc_move *mv)
{
    uint64_t n = mv->last - mv->first + 1;
    mv->bytes = xcalloc(n, sizeof(*mv->bytes));
    mv->rc = 0;
    char *body = xmalloc(mv->chunk_size);
    char path[PATH_MAX], tmp[PATH_MAX];
    bool durable = mv->remove;
    for (uint64_t i = 0; i < n && mv->rc == 0; i++) {
        uint64_t index = mv->first + i, off, len;
        range_chunk_span(index, mv->chunk_size, mv->m.total, &off, &len);
        if (chunkfile_path(path, sizeof(path), mv->shard_dir, mv->obj, index) < 0 ||
            chunkfile_tmp_path(tmp, sizeof(tmp), mv->shard_dir, mv->obj, index, mv->seq) < 0) {
            mv->rc = -ENAMETOOLONG;
            break;
        }
        struct stat sb;
        if (stat(path, &sb) == 0)
            continue; /* there already (a fill stored it, or an earlier move) */
        mv->rc = read_exact(mv->fd, body, (size_t)len,
                            mv->off0 + (off_t)((index - mv->first) * mv->chunk_size));
        if (mv->rc < 0)
            break;
        mv->m.index = index;
        mv->m.data_len = (uint32_t)len;
        mv->rc = chunkfile_write_tmp(AT_FDCWD, tmp, &mv->m, body, (size_t)len, durable);
        if (mv->rc == 0)
            mv->rc = chunkfile_commit(AT_FDCWD, tmp, path);
        if (mv->rc == 0 && durable)
            mv->rc = sync_parent(path);
        if (mv->rc == 0 && stat(path, &sb) == 0)
            mv->bytes[i] = diskidx_file_bytes(&sb);
    }
    free(body);
    if (mv->rc != 0 || !mv->remove)
        return;
    /* Every chunk is durable in the cache: the nginx file goes, if it is still the one read. */
    struct stat now;
    if (lstat(mv->ngx_path, &now) == 0 && now.st_dev == mv->dev && now.st_ino == mv->ino)
        mv->removed = unlink(mv->ngx_path) == 0;
}

/* The first subdirectory of <dir> named by two lowercase hex digits, into <out>; false if none. */
static bool first_level(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strlen(n) == 2 && isxdigit((unsigned char)n[0]) && isxdigit((unsigned char)n[1]) &&
            !isupper((unsigned char)n[0]) && !isupper((unsigned char)n[1])) {
            snprintf(out, cap, "%s/%s", dir, n);
            struct stat sb;
            found = stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
        }
    }
    closedir(d);
    return found;
}

int cache_lc_check_dir(const char *dir, bool move, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "lancache_dir %s: %s", dir,
                 errno == 0 || S_ISDIR(sb.st_mode) ? "not a directory" : strerror(errno));
        return -1;
    }
    /* The top and, when there are any, one directory of each level (nginx makes them all with
     * the same owner and mode). */
    char l1[PATH_MAX], l2[PATH_MAX];
    const char *check[3] = {dir, NULL, NULL};
    if (first_level(dir, l1, sizeof(l1))) {
        check[1] = l1;
        if (first_level(l1, l2, sizeof(l2)))
            check[2] = l2;
    }
    for (size_t i = 0; i < 3 && check[i] != NULL; i++) {
        if (access(check[i], R_OK | X_OK) < 0) {
            snprintf(err, errlen,
                     "lancache_dir %s: cannot read %s (%s): nginx keeps its cache owner-only; "
                     "see the README's \"Switching from lancache\"",
                     dir, check[i], strerror(errno));
            return -1;
        }
        if (move && access(check[i], W_OK) < 0) {
            snprintf(err, errlen,
                     "lancache_dir %s: lancache_migrate = move cannot delete from %s (%s): give "
                     "cacheparty write access, or set lancache_migrate = copy or off",
                     dir, check[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}
