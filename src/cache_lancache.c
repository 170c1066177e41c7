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
#include "ngxfile.h"
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
    if (al > 0 &&
        ((al == ident_len && strncasecmp(o->authority, ident, al) == 0) ||
         (al + 1 == ident_len && ident[al] == '.' && strncasecmp(o->authority, ident, al) == 0))) {
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

/* Opens lancache's file for slice <start> of the object in <dir> into <nf> (the path in <path>):
 * its verdict, *<absent> when there is none; the file's key must be the one asked for. */
static enum ngxcache_verdict open_slice(const struct lc_query *q, const char *dir, uint64_t start,
                                        struct ngxfile *nf, char *path, size_t path_cap,
                                        bool *absent)
{
    char key[NGXCACHE_KEY_MAX];
    *absent = false;
    ssize_t kl = ngxcache_key(q->prefix, q->prefix_len, "", 0, start, q->slice, key, sizeof(key));
    if (kl < 0 || ngxcache_path(dir, key, (size_t)kl, path, path_cap) < 0)
        return NGXCACHE_KEY;
    enum ngxcache_verdict v = ngxfile_open(nf, path, q->slice, q->settle_s, q->hide_etag, absent);
    if (v == NGXCACHE_OK &&
        (nf->f.key_len != (size_t)kl || memcmp(nf->f.key, key, (size_t)kl) != 0)) {
        ngxfile_close(nf);
        v = NGXCACHE_KEY;
    }
    return v;
}

/* Whether every other slice of the object found in <dir> is of <nf>'s version (the slice
 * filter's rule: one ETag, one length). Damaged ones are left to their own lookups. */
static bool siblings_agree(const struct lc_query *q, const char *dir, const struct ngxfile *nf,
                           uint64_t own_start)
{
    char path[PATH_MAX];
    struct ngxfile other;
    ngxfile_init(&other);
    bool agree = true;
    uint64_t n = range_chunk_count(nf->f.total, q->slice);
    for (uint64_t j = 0; j < n && agree; j++) {
        bool absent;
        if (j * q->slice == own_start ||
            open_slice(q, dir, j * q->slice, &other, path, sizeof(path), &absent) != NGXCACHE_OK)
            continue;
        agree = ngxfile_same_version(nf, &other);
    }
    ngxfile_fini(&other);
    return agree;
}

void cache_lc_find(struct lc_query *q)
{
    struct ngxfile nf;
    ngxfile_init(&nf);
    uint64_t start = q->index * q->slice;
    q->why = NGXCACHE_IO;
    for (size_t d = 0; d < q->n_dirs; d++) {
        bool absent;
        uint64_t at = start;
        char path[PATH_MAX];
        enum ngxcache_verdict v = open_slice(q, q->dirs[d], at, &nf, path, sizeof(path), &absent);
        if (absent && start > 0) {
            /* An origin that ignored Range: the whole object as a 200 under the first key. */
            at = 0;
            v = open_slice(q, q->dirs[d], 0, &nf, path, sizeof(path), &absent);
            if (v == NGXCACHE_OK && (nf.f.resp.status != 200 || nf.f.total <= start)) {
                ngxfile_close(&nf);
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
        if (start >= nf.f.total) {
            q->why = NGXCACHE_RANGE; /* the chunk lies past the object's end */
            break;
        }
        if (q->check_siblings && nf.f.total > q->slice && nf.f.resp.status != 200 &&
            !siblings_agree(q, q->dirs[d], &nf, at)) {
            q->why = NGXCACHE_VERSION_DIFFERS;
            break;
        }
        struct cache_meta *m = &q->meta;
        memset(m, 0, sizeof(*m));
        m->total = nf.f.total;
        memcpy(m->etag, nf.etag, sizeof(m->etag));
        memcpy(m->last_modified, nf.last_modified, sizeof(m->last_modified));
        memcpy(m->content_type, nf.content_type, sizeof(m->content_type));
        /* Its fields, as stored by nginx at f.date (the answer's request and response time). */
        if (objhead_from_response(nf.f.head, &nf.f.resp, (double)nf.f.date, (double)nf.f.date,
                                  &m->head) < 0) {
            q->why = NGXCACHE_HEAD;
            break;
        }
        uint64_t off0;
        range_chunk_span(q->index, q->slice, nf.f.total, &off0, &q->data_len);
        q->body_off = (off_t)(nf.f.body_start + (start - nf.f.first));
        q->whole = nf.f.resp.status == 200;
        q->fd = nf.fd;
        nf.fd = -1;
        q->sb = nf.sb;
        q->why = NGXCACHE_OK;
        break;
    }
    ngxfile_fini(&nf);
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

int cache_lancache_check_dir(const char *dir, bool move, char *err, size_t errlen)
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
