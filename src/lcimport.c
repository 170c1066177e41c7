/* SPDX-License-Identifier: BSD-2-Clause */
/* lcimport: `cacheparty import DIR` (see lcimport.h). */
#include "lcimport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <mntent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "admit.h"
#include "cache.h"
#include "config.h"
#include "diskidx.h"
#include "domains.h"
#include "http1.h"
#include "ngxcache.h"
#include "ngxfile.h"
#include "objhead.h"
#include "range.h"
#include "util.h"

#define IMPORT_SAMPLE 64             /* files read by the first pass to learn the tree's form */
#define IMPORT_MEMO_MIN 1024u        /* objects remembered (grows): their slices' verdict */
#define IMPORT_PROGRESS_MS 200       /* how often the progress is looked at */
#define IMPORT_MAX_SLICES (1u << 18) /* slices of one object, at most (256 GiB at 1 MiB) */

/* Reasons of our own, beyond ngxcache's verdicts. */
enum imp_reason {
    IMP_URI = NGXCACHE_N_VERDICTS, /* a $uri requests may spell several ways */
    IMP_UNLISTED,                  /* a host the daemon would not cache */
    IMP_BYPASS,                    /* a bypass rule: never served from the cache */
    IMP_ROOM,                      /* disk_size or min_free reached */
    IMP_WRITE,                     /* a chunk file could not be written */
    IMP_N
};

static const char *reason_name(unsigned r)
{
    static const char *const own[] = {"uri", "unlisted", "bypass", "no_room", "write_error"};
    return r < NGXCACHE_N_VERDICTS ? ngxcache_verdict_name((enum ngxcache_verdict)r)
                                   : own[r - NGXCACHE_N_VERDICTS];
}

/* An object's slices checked once: <hash> (md5 of $cacheidentifier$uri) -> they agree or not. */
struct memo_slot {
    uint8_t hash[16];
    bool used, agree;
};

struct imp {
    const struct config *cfg;
    const struct domains *d;
    const struct lcimport_opts *o;
    char **l2; /* owns: the ab/cd directories */
    size_t n_l2, cap_l2;
    uint64_t files, bytes; /* the first pass's counts */
    pthread_mutex_t mu;    /* everything below */
    size_t next;           /* the next ab/cd to take */
    unsigned running;
    uint64_t done_files, done_bytes;
    uint64_t adopted, chunks, adopted_bytes, present, removed, temp_removed;
    uint64_t skipped[IMP_N];
    int64_t room;  /* bytes disk_size still allows */
    uint64_t seq;  /* tmp names */
    int write_err; /* the first one (errno) */
    struct memo_slot *memo;
    size_t memo_cap, memo_used;
    struct remover *rm; /* the nginx files' removal (below) */
    size_t batch;       /* files per removal batch (at most IMPORT_BATCH) */
};

/* ---- the first pass ----------------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* "<dir>/<name>" into <out>; false when it does not fit. */
static bool join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

static bool is_level_name(const char *n)
{
    static const char hex[] = "0123456789abcdef";
    return strlen(n) == 2 && strchr(hex, n[0]) != NULL && strchr(hex, n[1]) != NULL &&
           n[0] != '\0' && n[1] != '\0';
}

struct sample {
    unsigned seen, parsed;
    uint64_t slice;   /* from the first key with a range */
    unsigned noslice; /* keys without "bytes=" */
    unsigned other;   /* slice windows of another size than <slice> */
};

/* Learns the slice size and key form from one file's key. */
static void sample_file(struct sample *s, const char *path, uint8_t *buf)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat sb;
    ssize_t n =
        fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? pread(fd, buf, NGXCACHE_PREFIX_MAX, 0) : -1;
    close(fd);
    if (n <= 0)
        return;
    s->seen++;
    const char *name = strrchr(path, '/') + 1;
    struct ngxcache_file f;
    if (ngxcache_parse(buf, (size_t)n, (uint64_t)sb.st_size, name, &f) != NGXCACHE_OK)
        return;
    s->parsed++;
    const char *at = NULL;
    for (size_t i = f.key_len; i >= 6; i--)
        if (memcmp(f.key + i - 6, "bytes=", 6) == 0) {
            at = f.key + i - 6;
            break;
        }
    unsigned long long a, b;
    char tail[64];
    size_t tl = at != NULL ? (size_t)(f.key + f.key_len - at) : 0;
    if (at == NULL || tl >= sizeof(tail)) {
        s->noslice++;
        return;
    }
    memcpy(tail, at, tl);
    tail[tl] = '\0';
    if (sscanf(tail, "bytes=%llu-%llu", &a, &b) != 2 || b < a) {
        s->noslice++;
        return;
    }
    if (s->slice == 0)
        s->slice = b - a + 1;
    else if (s->slice != b - a + 1)
        s->other++;
}

/* Walks the tree: the ab/cd directories, the count of files and bytes, the sample. Returns 0, or
 * -1 with the reason it is not an nginx levels=2:2 tree. */
static int first_pass(struct imp *im, struct sample *s, char *err, size_t errlen)
{
    uint8_t *buf = xmalloc(NGXCACHE_PREFIX_MAX);
    int rc = 0;
    DIR *top = opendir(im->o->dir);
    if (top == NULL) {
        errf(err, errlen, "%s: %s", im->o->dir, strerror(errno));
        free(buf);
        return -1;
    }
    struct dirent *e1;
    unsigned foreign = 0;
    while (rc == 0 && (e1 = readdir(top)) != NULL) {
        if (strcmp(e1->d_name, ".") == 0 || strcmp(e1->d_name, "..") == 0)
            continue;
        char p1[PATH_MAX];
        struct stat sb;
        if (!is_level_name(e1->d_name) || !join(p1, sizeof(p1), im->o->dir, e1->d_name) ||
            lstat(p1, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
            foreign++;
            continue;
        }
        DIR *mid = opendir(p1);
        if (mid == NULL) {
            errf(err, errlen, "%s: %s", p1, strerror(errno));
            rc = -1;
            break;
        }
        struct dirent *e2;
        while (rc == 0 && (e2 = readdir(mid)) != NULL) {
            if (strcmp(e2->d_name, ".") == 0 || strcmp(e2->d_name, "..") == 0)
                continue;
            char p2[PATH_MAX];
            if (!is_level_name(e2->d_name) || !join(p2, sizeof(p2), p1, e2->d_name) ||
                lstat(p2, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
                errf(err, errlen,
                     "%s is not a directory of two hex digits: not nginx's levels=2:2 "
                     "layout (lancache's), refusing the tree",
                     p2);
                rc = -1;
                break;
            }
            DIR *leaf = opendir(p2);
            if (leaf == NULL) {
                errf(err, errlen, "%s: %s", p2, strerror(errno));
                rc = -1;
                break;
            }
            if (im->n_l2 == im->cap_l2) {
                im->cap_l2 = im->cap_l2 ? 2 * im->cap_l2 : 256;
                im->l2 = xrealloc(im->l2, im->cap_l2 * sizeof(*im->l2));
            }
            im->l2[im->n_l2++] = xstrdup(p2);
            struct dirent *e3;
            while ((e3 = readdir(leaf)) != NULL) {
                if (strcmp(e3->d_name, ".") == 0 || strcmp(e3->d_name, "..") == 0)
                    continue;
                char p3[PATH_MAX];
                if (!join(p3, sizeof(p3), p2, e3->d_name) || lstat(p3, &sb) < 0)
                    continue;
                im->files++;
                if (S_ISREG(sb.st_mode))
                    im->bytes += (uint64_t)sb.st_size;
                if (S_ISREG(sb.st_mode) && s->parsed < IMPORT_SAMPLE)
                    sample_file(s, p3, buf);
            }
            closedir(leaf);
        }
        closedir(mid);
    }
    closedir(top);
    free(buf);
    if (rc == 0 && foreign > 0 && im->n_l2 == 0) {
        errf(err, errlen,
             "%s holds no directory of two hex digits: not an nginx cache with levels=2:2 "
             "(give lancache's cache directory, the one holding ab/cd/<md5> files)",
             im->o->dir);
        rc = -1;
    }
    return rc;
}

/* What the cache dirs hold now (their chunk files' bytes on disk). */
static uint64_t cache_usage(const struct config *cfg)
{
    uint64_t total = 0;
    for (size_t i = 0; i < cfg->n_dirs; i++) {
        DIR *top = opendir(cfg->dirs[i]);
        if (top == NULL)
            continue;
        struct dirent *e1;
        while ((e1 = readdir(top)) != NULL) {
            if (!is_level_name(e1->d_name))
                continue;
            char p1[PATH_MAX];
            DIR *mid = join(p1, sizeof(p1), cfg->dirs[i], e1->d_name) ? opendir(p1) : NULL;
            if (mid == NULL)
                continue;
            struct dirent *e2;
            while ((e2 = readdir(mid)) != NULL) {
                if (!is_level_name(e2->d_name))
                    continue;
                char p2[PATH_MAX];
                DIR *leaf = join(p2, sizeof(p2), p1, e2->d_name) ? opendir(p2) : NULL;
                if (leaf == NULL)
                    continue;
                struct dirent *e3;
                while ((e3 = readdir(leaf)) != NULL) {
                    uint8_t obj[16];
                    uint64_t index;
                    struct stat sb;
                    if (diskidx_parse_name(e3->d_name, obj, &index) == 0 &&
                        fstatat(dirfd(leaf), e3->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
                        total += diskidx_file_bytes(&sb);
                }
                closedir(leaf);
            }
            closedir(mid);
        }
        closedir(top);
    }
    return total;
}

/* ---- one file ----------------------------------------------------------------------------- */

static void count(struct imp *im, unsigned reason, uint64_t bytes)
{
    pthread_mutex_lock(&im->mu);
    im->skipped[reason]++;
    im->done_files++;
    im->done_bytes += bytes;
    pthread_mutex_unlock(&im->mu);
}

/* Whether <uri> is a path requests spell one way: nginx's $uri of it is itself, and every byte
 * is one a client sends unescaped (RFC 3986 pchar and '/', no '%'). */
static bool uri_is_plain(const char *uri, size_t len)
{
    static const char extra[] = "-._~!$&'()*+,;=:@/";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)uri[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              (ch != '\0' && strchr(extra, ch) != NULL)))
            return false;
    }
    char again[NGXCACHE_KEY_MAX];
    ssize_t n = ngxcache_uri(uri, len, again, sizeof(again));
    return n == (ssize_t)len && memcmp(again, uri, len) == 0;
}

/* The verdict remembered for the object whose $cacheidentifier$uri hashes to <h>: 1 agree, 0
 * disagree, -1 unknown. Under im->mu. */
static int memo_get(struct imp *im, const uint8_t h[16])
{
    if (im->memo_cap == 0)
        return -1;
    size_t i =
        (size_t)(((uint64_t)h[0] << 24 | (uint64_t)h[1] << 16 | h[2] << 8 | h[3]) % im->memo_cap);
    while (im->memo[i].used) {
        if (memcmp(im->memo[i].hash, h, 16) == 0)
            return im->memo[i].agree ? 1 : 0;
        i = (i + 1) % im->memo_cap;
    }
    return -1;
}

static void memo_put(struct imp *im, const uint8_t h[16], bool agree)
{
    if (memo_get(im, h) >= 0)
        return;
    if (2 * (im->memo_used + 1) > im->memo_cap) {
        struct memo_slot *old = im->memo;
        size_t old_cap = im->memo_cap;
        im->memo_cap = old_cap ? 2 * old_cap : IMPORT_MEMO_MIN;
        im->memo = xcalloc(im->memo_cap, sizeof(*im->memo));
        im->memo_used = 0;
        for (size_t j = 0; j < old_cap; j++)
            if (old[j].used)
                memo_put(im, old[j].hash, old[j].agree);
        free(old);
    }
    size_t i =
        (size_t)(((uint64_t)h[0] << 24 | (uint64_t)h[1] << 16 | h[2] << 8 | h[3]) % im->memo_cap);
    while (im->memo[i].used)
        i = (i + 1) % im->memo_cap;
    memcpy(im->memo[i].hash, h, 16);
    im->memo[i].agree = agree;
    im->memo[i].used = true;
    im->memo_used++;
}

/* Whether every slice of <nf>'s object in the tree is of its version (read once per object;
 * <hide_etag>: the ETag is not part of the version, as for <nf>). */
static bool object_agrees(struct imp *im, const struct ngxfile *nf, struct ngxfile *other,
                          bool hide_etag)
{
    uint8_t h[16];
    cache_obj_hash(nf->f.key, nf->prefix_len, h);
    pthread_mutex_lock(&im->mu);
    int known = memo_get(im, h);
    pthread_mutex_unlock(&im->mu);
    if (known >= 0)
        return known == 1;
    uint64_t slice = im->cfg->chunk_size;
    uint64_t n = range_chunk_count(nf->f.total, slice);
    bool agree = true;
    for (uint64_t j = 0; j < n && agree; j++) {
        char key[NGXCACHE_KEY_MAX], path[PATH_MAX];
        ssize_t kl =
            ngxcache_key(nf->f.key, nf->prefix_len, "", 0, j * slice, slice, key, sizeof(key));
        if (kl < 0 || j * slice == nf->f.first ||
            ngxcache_path(im->o->dir, key, (size_t)kl, path, sizeof(path)) < 0)
            continue;
        if (ngxfile_open(other, path, slice, 0, hide_etag, NULL) == NGXCACHE_OK)
            agree = ngxfile_same_version(nf, other);
        ngxfile_close(other);
    }
    pthread_mutex_lock(&im->mu);
    memo_put(im, h, agree);
    pthread_mutex_unlock(&im->mu);
    return agree;
}

/* The free space of the filesystem <path> is on (or will be, for a dir not made yet: its nearest
 * existing parent's). */
static bool free_space(const char *path, uint64_t *avail)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (;;) {
        struct statvfs vs;
        if (statvfs(p, &vs) == 0) {
            *avail = (uint64_t)vs.f_bavail * vs.f_frsize;
            return true;
        }
        char *slash = strrchr(p, '/');
        if (errno != ENOENT || slash == NULL)
            return false;
        if (slash == p)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
}

/*
 * The nginx files whose chunks are all in the cache, removed in batches by
 * ngxfile_remove_durable (one syncfs per cache filesystem, then each file still the one read).
 * A kill before the sync leaves the nginx files, which the next run finds present and removes.
 *
 * A worker hands each full batch to the remover, a thread of its own, and goes on reading: the
 * sync (the disk writing the chunks back) and the freeing of the removed files' blocks (trimmed
 * at the next journal commit on a filesystem mounted with -o discard) overlap the copying
 * instead of stopping a worker. At most IMPORT_QUEUE batches wait (a worker waits for a slot
 * beyond), so memory stays bounded whatever the tree's size. Without the thread (it could not
 * be started) each worker removes its own batches.
 *
 * The batch size (struct imp's batch): a sync per IMPORT_BATCH files, so the disk writes the
 * chunks back in few long runs, as `cp -r` and one `sync` would; on a tree whose filesystem is
 * mounted with -o discard, a sync per IMPORT_BATCH_DISCARD files, so the trims of the files
 * removed come in small steps beside the copying instead of in long stalls of the disk
 * (measured: bench/README.md, issue 18).
 */
#define IMPORT_BATCH 256
#define IMPORT_BATCH_DISCARD 64
#define IMPORT_QUEUE 4

struct gone_batch {
    struct ngxfile_gone items[IMPORT_BATCH]; /* each path owned (xstrdup) */
    size_t n;
};

/* Whether the filesystem <dir> is on is mounted with the discard option (its longest mount
 * point that is a prefix of its real path, in /proc/self/mounts). */
static bool mount_discards(const char *dir)
{
    char real[PATH_MAX];
    if (realpath(dir, real) == NULL)
        return false;
    FILE *f = setmntent("/proc/self/mounts", "r");
    if (f == NULL)
        return false;
    struct mntent m, *e;
    char buf[4096];
    size_t best = 0;
    bool discard = false;
    while ((e = getmntent_r(f, &m, buf, sizeof(buf))) != NULL) {
        size_t n = strlen(e->mnt_dir);
        bool under = strncmp(real, e->mnt_dir, n) == 0 &&
                     (real[n] == '/' || real[n] == '\0' || (n == 1 && e->mnt_dir[0] == '/'));
        if (under && n >= best) {
            best = n;
            discard = hasmntopt(e, "discard") != NULL;
        }
    }
    endmntent(f);
    return discard;
}

struct remover {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a batch queued, a slot freed, or closing */
    struct gone_batch *q[IMPORT_QUEUE];
    size_t head, n;
    bool running, closing;
    pthread_t th;
};

static void gone_flush(struct imp *im, struct gone_batch *g)
{
    ngxfile_remove_durable(im->cfg->dirs, g->items, g->n);
    uint64_t removed = 0;
    for (size_t i = 0; i < g->n; i++) {
        removed += g->items[i].removed;
        free((char *)g->items[i].path);
    }
    g->n = 0;
    pthread_mutex_lock(&im->mu);
    im->removed += removed;
    pthread_mutex_unlock(&im->mu);
}

static void *remover_main(void *arg)
{
    struct imp *im = arg;
    struct remover *r = im->rm;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->n == 0 && !r->closing)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->n == 0)
            break; /* closing, and nothing left */
        struct gone_batch *g = r->q[r->head];
        r->head = (r->head + 1) % IMPORT_QUEUE;
        r->n--;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        gone_flush(im, g);
        free(g);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* <g> (owned, maybe empty) removed: by the remover when it runs, else here. */
static void gone_hand_over(struct imp *im, struct gone_batch *g)
{
    struct remover *r = im->rm;
    if (g->n == 0 || !r->running) {
        gone_flush(im, g);
        free(g);
        return;
    }
    pthread_mutex_lock(&r->mu);
    while (r->n == IMPORT_QUEUE)
        pthread_cond_wait(&r->cv, &r->mu);
    r->q[(r->head + r->n) % IMPORT_QUEUE] = g;
    r->n++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void gone_add(struct imp *im, struct gone_batch **g, const char *path,
                     const struct ngxfile *nf, size_t shard)
{
    if ((*g)->n == im->batch) {
        gone_hand_over(im, *g);
        *g = xcalloc(1, sizeof(**g));
    }
    (*g)->items[(*g)->n++] = (struct ngxfile_gone){
        .path = xstrdup(path), .dev = nf->sb.st_dev, .ino = nf->sb.st_ino, .shard = shard};
}

static void remover_start(struct imp *im, struct remover *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    im->rm = r;
    r->running =
        !im->o->copy && !im->o->dry_run && pthread_create(&r->th, NULL, remover_main, im) == 0;
}

/* After the workers: the queued batches removed, the thread ended. */
static void remover_stop(struct imp *im)
{
    struct remover *r = im->rm;
    if (r->running) {
        pthread_mutex_lock(&r->mu);
        r->closing = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        r->running = false;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void import_file(struct imp *im, const char *path, const char *name, struct ngxfile *nf,
                        struct ngxfile *other, struct gone_batch **gone)
{
    const struct config *cfg = im->cfg;
    uint64_t slice = cfg->chunk_size;
    struct stat sb;
    if (lstat(path, &sb) < 0)
        return; /* gone meanwhile (a running daemon moved it) */
    uint64_t size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
    if (ngxcache_is_temp_name(name, strlen(name))) {
        bool unlinked = !im->o->dry_run && !im->o->copy && unlink(path) == 0;
        pthread_mutex_lock(&im->mu);
        im->temp_removed += unlinked;
        pthread_mutex_unlock(&im->mu);
        count(im, NGXCACHE_TEMP, size);
        return;
    }
    bool absent;
    enum ngxcache_verdict v =
        ngxfile_open(nf, path, slice, (int64_t)(cfg->lancache_settle_ms / 1000), false, &absent);
    if (absent)
        return;
    if (v != NGXCACHE_OK) {
        count(im, v, size);
        return;
    }
    /* $cacheidentifier and $uri: the identifier ends at the path's first '/'. */
    const char *key = nf->f.key;
    const char *slash = memchr(key, '/', nf->prefix_len);
    if (slash == NULL || slash == key) {
        count(im, NGXCACHE_KEY, size);
        goto out;
    }
    char id[300];
    size_t id_len = (size_t)(slash - key);
    if (id_len >= sizeof(id)) {
        count(im, NGXCACHE_KEY, size);
        goto out;
    }
    memcpy(id, key, id_len);
    id[id_len] = '\0';
    const char *uri = slash;
    size_t uri_len = nf->prefix_len - id_len;
    if (!uri_is_plain(uri, uri_len)) {
        count(im, IMP_URI, size);
        goto out;
    }
    /* The identifier the daemon gives a request lancache keyed so. */
    struct h1_authority auth;
    struct admit_result ar;
    const char *ident = id, *host = "";
    if (!domains_is_service(im->d, id)) {
        if (h1_authority_parse(id, id_len, &auth) < 0) {
            count(im, IMP_UNLISTED, size);
            goto out;
        }
        admit_host(cfg, im->d, &auth, NULL, 0, ADMIT_REQUEST, &ar);
        if (!ar.allow) {
            count(im, IMP_UNLISTED, size);
            goto out;
        }
        ident = ar.ident;
        host = auth.host;
    }
    const struct cfg_rule *rule = config_rule_for(cfg, ident, host, uri, uri_len);
    if (rule != NULL && rule->policy == CFG_RULE_BYPASS) {
        count(im, IMP_BYPASS, size);
        goto out;
    }
    bool hide_etag = rule != NULL && rule->policy == CFG_RULE_HIDE_ETAG;
    if (hide_etag)
        nf->etag[0] = '\0';
    if (range_chunk_count(nf->f.total, slice) > IMPORT_MAX_SLICES) {
        count(im, NGXCACHE_RANGE, size); /* no object of a game is so large: a hostile total */
        goto out;
    }
    if (nf->f.resp.status == 206 && nf->f.total > slice &&
        !object_agrees(im, nf, other, hide_etag)) {
        count(im, NGXCACHE_VERSION_DIFFERS, size);
        goto out;
    }
    struct objhead *head = NULL;
    if (objhead_from_response(nf->f.head, &nf->f.resp, (double)nf->f.date, (double)nf->f.date,
                              &head) < 0) {
        count(im, NGXCACHE_HEAD, size);
        goto out;
    }
    size_t klen;
    char *ckey = cache_key_build(ident, uri, uri_len, &klen);
    uint8_t obj[16];
    cache_obj_hash(ckey, klen, obj);
    size_t shard = cache_shard_of(cfg->n_dirs, obj);
    const char *shard_dir = cfg->dirs[shard];
    uint64_t first = nf->f.first / slice, last = nf->f.last / slice;
    bool all_there = true;
    for (uint64_t i = first; i <= last && all_there; i++) {
        char p[PATH_MAX];
        struct stat csb;
        all_there = chunkfile_path(p, sizeof(p), shard_dir, obj, i) == 0 && stat(p, &csb) == 0;
    }
    /* All there (an earlier run's, or the daemon's): no room needed; the move below still
     * verifies each of them (one that does not is rewritten) before the nginx file may go. */
    if (all_there && im->o->dry_run) {
        pthread_mutex_lock(&im->mu);
        im->present++;
        im->done_files++;
        im->done_bytes += size;
        pthread_mutex_unlock(&im->mu);
        goto out_key;
    }
    uint64_t need = nf->f.body_len + (last - first + 1) * CHUNKFILE_HDR_MIN;
    uint64_t avail;
    bool fs_room = all_there || cfg->min_free == 0 ||
                   (free_space(shard_dir, &avail) && avail >= cfg->min_free + need);
    pthread_mutex_lock(&im->mu);
    bool room = all_there || (fs_room && im->room >= (int64_t)need);
    if (room && !all_there)
        im->room -= (int64_t)need;
    uint64_t seq = ++im->seq;
    pthread_mutex_unlock(&im->mu);
    if (!room) {
        count(im, IMP_ROOM, size);
        goto out_key;
    }
    if (im->o->dry_run) {
        pthread_mutex_lock(&im->mu);
        im->adopted++;
        im->chunks += last - first + 1;
        im->adopted_bytes += nf->f.body_len;
        im->done_files++;
        im->done_bytes += size;
        pthread_mutex_unlock(&im->mu);
        goto out_key;
    }
    struct ngxfile_move mv;
    memset(&mv, 0, sizeof(mv));
    mv.fd = nf->fd;
    mv.off0 = (off_t)nf->f.body_start;
    mv.first = first;
    mv.last = last;
    mv.chunk_size = slice;
    mv.shard_dir = shard_dir;
    memcpy(mv.obj, obj, 16);
    mv.seq = ((uint64_t)getpid() << 32) | seq;
    mv.m.chunk_size = slice;
    mv.m.total = nf->f.total;
    mv.m.key = ckey;
    mv.m.key_len = klen;
    mv.m.etag = nf->etag;
    mv.m.etag_len = strlen(nf->etag);
    mv.m.last_modified = nf->last_modified;
    mv.m.last_modified_len = strlen(nf->last_modified);
    mv.m.content_type = nf->content_type;
    mv.m.content_type_len = strlen(nf->content_type);
    mv.m.date = head->date;
    mv.m.date_len = head->date_len;
    mv.m.fields = head->text;
    mv.m.fields_len = head->len;
    mv.m.response_time = head->response_time;
    mv.m.initial_age = head->initial_age;
    ngxfile_move(&mv);
    if (mv.rc == 0 && !im->o->copy)
        gone_add(im, gone, path, nf, shard);
    uint64_t written = 0;
    for (uint64_t i = 0; i <= last - first; i++)
        written += mv.bytes != NULL && mv.bytes[i] > 0;
    free(mv.bytes);
    free(mv.inos);
    pthread_mutex_lock(&im->mu);
    if (mv.rc < 0) {
        im->skipped[IMP_WRITE]++;
        if (im->write_err == 0)
            im->write_err = -mv.rc;
        if (!all_there && written == 0)
            im->room += (int64_t)need; /* nothing of it is on disk */
    } else if (all_there && written == 0) {
        im->present++;
    } else {
        im->adopted++;
        im->chunks += written;
        im->adopted_bytes += nf->f.body_len;
    }
    im->done_files++;
    im->done_bytes += size;
    pthread_mutex_unlock(&im->mu);
out_key:
    free(ckey);
    objhead_unref(&head);
out:
    ngxfile_close(nf);
}

static void *worker(void *arg)
{
    struct imp *im = arg;
    struct ngxfile nf, other;
    ngxfile_init(&nf);
    ngxfile_init(&other);
    struct gone_batch *gone = xcalloc(1, sizeof(*gone));
    for (;;) {
        pthread_mutex_lock(&im->mu);
        size_t k = im->next < im->n_l2 ? im->next++ : SIZE_MAX;
        pthread_mutex_unlock(&im->mu);
        if (k == SIZE_MAX)
            break;
        DIR *dir = opendir(im->l2[k]);
        if (dir == NULL)
            continue;
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[PATH_MAX];
            if (join(path, sizeof(path), im->l2[k], e->d_name))
                import_file(im, path, e->d_name, &nf, &other, &gone);
        }
        closedir(dir);
    }
    gone_hand_over(im, gone);
    ngxfile_fini(&nf);
    ngxfile_fini(&other);
    pthread_mutex_lock(&im->mu);
    im->running--;
    pthread_mutex_unlock(&im->mu);
    return NULL;
}

/* ---- progress and report ------------------------------------------------------------------ */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fmt_bytes(uint64_t b, char *out, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(out, cap, "%.1f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(out, cap, "%.1f MiB", (double)b / (double)(1ull << 20));
}

static void progress(const struct imp *im, uint64_t files, uint64_t bytes, double elapsed, bool tty)
{
    char done[32], total[32];
    fmt_bytes(bytes, done, sizeof(done));
    fmt_bytes(im->bytes, total, sizeof(total));
    double rate = elapsed > 0 ? (double)bytes / elapsed : 0;
    double eta = rate > 0 ? (double)(im->bytes > bytes ? im->bytes - bytes : 0) / rate : 0;
    unsigned pct = im->files > 0 ? (unsigned)(files * 100 / im->files) : 100;
    FILE *p = im->o->progress;
    if (tty) {
        char bar[21];
        for (unsigned i = 0; i < 20; i++)
            bar[i] = i < pct / 5 ? '#' : '.';
        bar[20] = '\0';
        fprintf(p, "\r[%s] %3u%%  %" PRIu64 "/%" PRIu64 " files  %s/%s  %.1f MiB/s  ETA %u:%02u  ",
                bar, pct, files, im->files, done, total, rate / (1 << 20), (unsigned)eta / 60,
                (unsigned)eta % 60);
    } else {
        fprintf(p,
                "import: %u%% %" PRIu64 "/%" PRIu64 " files, %s of %s, %.1f MiB/s, ETA %u:%02u\n",
                pct, files, im->files, done, total, rate / (1 << 20), (unsigned)eta / 60,
                (unsigned)eta % 60);
    }
    fflush(p);
}

static void report(const struct imp *im, double elapsed)
{
    FILE *out = im->o->out;
    const char *what = im->o->dry_run ? "would adopt" : "adopted";
    char b[32];
    fmt_bytes(im->adopted_bytes, b, sizeof(b));
    fprintf(out,
            "import: %s %" PRIu64 " files (%" PRIu64 " chunks, %s) in %.1f s; already in the "
            "cache: %" PRIu64 "; lancache files removed: %" PRIu64
            "; temporary files removed: %" PRIu64 "\n",
            what, im->adopted, im->chunks, b, elapsed, im->present, im->removed, im->temp_removed);
    uint64_t n = 0;
    for (unsigned r = 0; r < IMP_N; r++)
        n += im->skipped[r];
    fprintf(out, "import: skipped %" PRIu64 " files", n);
    for (unsigned r = 0; r < IMP_N; r++)
        if (im->skipped[r] > 0)
            fprintf(out, " %s=%" PRIu64, reason_name(r), im->skipped[r]);
    fprintf(out, "\n");
    if (im->skipped[IMP_ROOM] > 0)
        fprintf(out,
                "import: disk_size or min_free reached: %" PRIu64 " files left in the tree "
                "(a lancache_dir serves them in place)\n",
                im->skipped[IMP_ROOM]);
}

int lcimport_run(const struct config *cfg, const struct domains *d, const struct lcimport_opts *o)
{
    char err[1024];
    struct stat sb;
    if (stat(o->dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "cacheparty import: %s: %s\n", o->dir,
                errno != 0 && !S_ISDIR(sb.st_mode) ? strerror(errno) : "not a directory");
        return 1;
    }
    if (cache_lancache_check_dir(o->dir, !o->copy && !o->dry_run, err, sizeof(err)) < 0) {
        fprintf(stderr, "cacheparty import: %s\n", err);
        return 1;
    }
    int lock = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "cacheparty import: %s: %s\n", o->dir,
                errno == EWOULDBLOCK ? "another import runs on this tree" : strerror(errno));
        if (lock >= 0)
            close(lock);
        return 1;
    }
    if (!o->dry_run && cache_dirs_prepare(cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "cacheparty import: %s\n", err);
        close(lock);
        return 1;
    }
    struct imp im;
    memset(&im, 0, sizeof(im));
    im.cfg = cfg;
    im.d = d;
    im.o = o;
    pthread_mutex_init(&im.mu, NULL);
    struct sample s;
    memset(&s, 0, sizeof(s));
    int rc = 0;
    double t0 = mono_s();
    if (first_pass(&im, &s, err, sizeof(err)) < 0) {
        fprintf(stderr, "cacheparty import: %s\n", err);
        rc = 1;
        goto done;
    }
    char total[32];
    fmt_bytes(im.bytes, total, sizeof(total));
    fprintf(o->out, "import: tree %s: %" PRIu64 " files, %s", o->dir, im.files, total);
    if (s.parsed > 0 && s.slice > 0)
        fprintf(o->out, "; slice size %" PRIu64 " bytes, key $cacheidentifier$uri$slice_range",
                s.slice);
    fprintf(o->out, "\n");
    if (s.seen > 0 && s.parsed == 0) {
        fprintf(stderr,
                "cacheparty import: %s: none of the first %u files is an nginx cache file "
                "(version 5): not a lancache cache, refusing it\n",
                o->dir, s.seen);
        rc = 1;
        goto done;
    }
    if (s.parsed > 0 && s.slice == 0) {
        fprintf(stderr,
                "cacheparty import: %s: its keys have no slice range (lancache with slice 0, or "
                "::noslice): cacheparty can only use $cacheidentifier$uri$slice_range keys\n",
                o->dir);
        rc = 1;
        goto done;
    }
    if (s.slice != 0 && s.slice != cfg->chunk_size) {
        fprintf(stderr,
                "cacheparty import: %s was written with %" PRIu64 "-byte slices, chunk_size is "
                "%" PRIu64 ": set chunk_size (on a new cache dir) to lancache's CACHE_SLICE_SIZE\n",
                o->dir, s.slice, cfg->chunk_size);
        rc = 1;
        goto done;
    }
    uint64_t used = cache_usage(cfg);
    im.room = cfg->disk_size > used ? (int64_t)(cfg->disk_size - used) : 0;
    if (im.bytes > (uint64_t)im.room)
        fprintf(o->out,
                "import: the tree is larger than disk_size leaves room for: what does not fit "
                "stays in it\n");
    unsigned jobs = o->jobs < 1 ? 1 : o->jobs > 64 ? 64 : o->jobs;
    pthread_t th[64];
    im.batch = mount_discards(o->dir) ? IMPORT_BATCH_DISCARD : IMPORT_BATCH;
    struct remover rm;
    remover_start(&im, &rm);
    im.running = jobs;
    unsigned started = 0;
    for (; started < jobs; started++)
        if (pthread_create(&th[started], NULL, worker, &im) != 0)
            break;
    pthread_mutex_lock(&im.mu);
    im.running -= jobs - started;
    pthread_mutex_unlock(&im.mu);
    if (started == 0) {
        remover_stop(&im);
        fprintf(stderr, "cacheparty import: cannot start a worker thread\n");
        rc = 2;
        goto done;
    }
    bool tty = isatty(fileno(o->progress)) == 1;
    unsigned tenth = 0;
    for (;;) {
        pthread_mutex_lock(&im.mu);
        unsigned running = im.running;
        uint64_t files = im.done_files, bytes = im.done_bytes;
        pthread_mutex_unlock(&im.mu);
        if (running == 0)
            break;
        unsigned now_tenth = im.files > 0 ? (unsigned)(files * 10 / im.files) : 0;
        if (tty || now_tenth > tenth)
            progress(&im, files, bytes, mono_s() - t0, tty);
        tenth = now_tenth;
        struct timespec ts = {0, IMPORT_PROGRESS_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    remover_stop(&im);
    progress(&im, im.done_files, im.done_bytes, mono_s() - t0, tty);
    if (tty)
        fprintf(o->progress, "\n");
    report(&im, mono_s() - t0);
    if (im.skipped[IMP_WRITE] > 0) {
        fprintf(stderr, "cacheparty import: %" PRIu64 " files could not be written: %s\n",
                im.skipped[IMP_WRITE], strerror(im.write_err));
        rc = 2;
    }
done:
    for (size_t i = 0; i < im.n_l2; i++)
        free(im.l2[i]);
    free(im.l2);
    free(im.memo);
    pthread_mutex_destroy(&im.mu);
    close(lock);
    return rc;
}
