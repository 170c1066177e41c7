/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * cache_lancache: finding a chunk in lancache's nginx cache trees and writing it into the cache
 * (see cache_int.h). Runs on the I/O threads, blocking; the loop side is in cache.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cache_int.h"
#include "iopool.h"
#include "log.h"
#include "stats.h"
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
    *absent = true; /* no key (too long for nginx too) or no path: no file either */
    path[0] = '\0';
    ssize_t kl = ngxcache_key(q->prefix, q->prefix_len, "", 0, start, q->slice, key, sizeof(key));
    if (kl < 0 || ngxcache_path(dir, key, (size_t)kl, path, path_cap) < 0)
        return NGXCACHE_IO;
    *absent = false;
    enum ngxcache_verdict v = ngxfile_open(nf, path, q->slice, q->settle_s, q->hide_etag, absent);
    if (v == NGXCACHE_OK &&
        (nf->f.key_len != (size_t)kl || memcmp(nf->f.key, key, (size_t)kl) != 0)) {
        ngxfile_close(nf);
        v = NGXCACHE_KEY;
    }
    return v;
}

/* Whether the object's other slices found in <dir> are of <nf>'s version (the slice filter's
 * rule: one ETag, one length): all of them for an object of up to 2 * CACHE_LC_SIBLINGS slices,
 * else the CACHE_LC_SIBLINGS on either side of <own_start> (each slice is also checked against
 * the version the cache learnt when its own lookup accepts it, so a later one of another version
 * is refused then). Damaged ones are left to their own lookups. */
static bool siblings_agree(const struct lc_query *q, const char *dir, const struct ngxfile *nf,
                           uint64_t own_start)
{
    char path[PATH_MAX];
    struct ngxfile other;
    ngxfile_init(&other);
    bool agree = true;
    uint64_t n = range_chunk_count(nf->f.total, q->slice), own = own_start / q->slice;
    uint64_t lo = own > CACHE_LC_SIBLINGS ? own - CACHE_LC_SIBLINGS : 0;
    uint64_t hi = n - own > CACHE_LC_SIBLINGS ? own + CACHE_LC_SIBLINGS : n - 1;
    if (n <= 2 * CACHE_LC_SIBLINGS) {
        lo = 0;
        hi = n - 1;
    }
    for (uint64_t j = lo; j <= hi && agree; j++) {
        bool absent;
        if (j == own ||
            open_slice(q, dir, j * q->slice, &other, path, sizeof(path), &absent) != NGXCACHE_OK)
            continue;
        agree = ngxfile_same_version(nf, &other);
    }
    ngxfile_fini(&other);
    return agree;
}

/* Reads [off, off + len) of <fd> into the page cache (the bytes are dropped). */
static void warm_pages(int fd, off_t off, uint64_t len)
{
    static _Thread_local char scratch[UTIL_IO_STEP];
    while (len > 0) {
        size_t n = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
        ssize_t r = pread(fd, scratch, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return; /* (the loop's sendfile will say what is wrong) */
        off += r;
        len -= (uint64_t)r;
    }
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
            if (v != NGXCACHE_OK || nf.f.resp.status != 200 || nf.f.total <= start) {
                ngxfile_close(&nf);
                continue; /* a first slice only (or one its own lookup refuses): not this one */
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
        q->n_chunks = q->whole ? range_chunk_count(nf.f.total, q->slice) : 1;
        /* The loop sends it with sendfile: its pages are read here, on the I/O thread, so that
         * the loop does not wait for the disk (as for a chunk file of ours, read whole here). A
         * read, not readahead(), which may return before the pages are in. */
        warm_pages(nf.fd, q->body_off, q->data_len);
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
    if (stat(dir, &sb) < 0) {
        snprintf(err, errlen, "lancache_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "lancache_dir %s: not a directory", dir);
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
    /* And one file (nginx writes them owner-only: readable directories are not enough). */
    DIR *d = check[2] != NULL ? opendir(check[2]) : NULL;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char f[PATH_MAX];
        snprintf(f, sizeof(f), "%s/%s", check[2], e->d_name);
        int fd = open(f, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        int e_open = fd < 0 ? errno : 0;
        if (fd >= 0)
            close(fd);
        if (e_open == EACCES || e_open == EPERM) {
            snprintf(err, errlen,
                     "lancache_dir %s: cannot read its files (%s: %s): nginx keeps its cache "
                     "owner-only; see the README's \"Switching from lancache\"",
                     dir, f, strerror(e_open));
            closedir(d);
            return -1;
        }
        break;
    }
    if (d != NULL)
        closedir(d);
    return 0;
}

/* ---- the loop side -------------------------------------------------------------------------- */

/* The counter of each reason a lancache file is refused for (NULL: OK). */
static uint64_t *const lc_skip_stat[NGXCACHE_N_VERDICTS] = {
    [NGXCACHE_NOT_FILE] = &g_stats.lancache_skip_not_file,
    [NGXCACHE_TEMP] = &g_stats.lancache_skip_temp,
    [NGXCACHE_NAME] = &g_stats.lancache_skip_name,
    [NGXCACHE_YOUNG] = &g_stats.lancache_skip_young,
    [NGXCACHE_SHORT] = &g_stats.lancache_skip_short,
    [NGXCACHE_LAYOUT] = &g_stats.lancache_skip_layout,
    [NGXCACHE_VERSION] = &g_stats.lancache_skip_version,
    [NGXCACHE_OFFSETS] = &g_stats.lancache_skip_offsets,
    [NGXCACHE_CRC] = &g_stats.lancache_skip_crc,
    [NGXCACHE_VARY] = &g_stats.lancache_skip_vary,
    [NGXCACHE_MD5] = &g_stats.lancache_skip_md5,
    [NGXCACHE_KEY] = &g_stats.lancache_skip_key,
    [NGXCACHE_HEAD] = &g_stats.lancache_skip_head,
    [NGXCACHE_STATUS] = &g_stats.lancache_skip_status,
    [NGXCACHE_RANGE] = &g_stats.lancache_skip_range,
    [NGXCACHE_LENGTH] = &g_stats.lancache_skip_length,
    [NGXCACHE_CHUNKED] = &g_stats.lancache_skip_chunked,
    [NGXCACHE_VERSION_DIFFERS] = &g_stats.lancache_skip_version_differs,
    [NGXCACHE_IO] = &g_stats.lancache_skip_io,
};

/* Whether this is the first time (<path>, <what>) is seen (a bounded memory of hashes: one
 * forgotten may be seen again, once). <mark>: remember it. */
static bool lc_first(struct cache *c, const char *path, uint64_t what, bool mark)
{
    uint64_t h = XXH3_64bits_withSeed(path, strlen(path), what) | 1u;
    uint64_t *slot = &c->lc_logged[h % CACHE_LC_LOGGED];
    if (*slot == h)
        return false;
    if (mark)
        *slot = h;
    return true;
}

enum { LC_ONCE_REFUSED, LC_ONCE_TOO_BIG, LC_ONCE_UNLINK };

/* Counts a refused lancache file, and logs it the first time (per path). */
static void lc_refused(struct cache *c, enum ngxcache_verdict why, const char *path)
{
    ASSERT((unsigned)why < NGXCACHE_N_VERDICTS && lc_skip_stat[why] != NULL);
    (*lc_skip_stat[why])++;
    if (!lc_first(c, path, LC_ONCE_REFUSED, true))
        return;
    log_warn("cache: lancache file %s not used (%s: %s): the slice is fetched from the origin",
             path, ngxcache_verdict_name(why), ngxcache_verdict_text(why));
}

/* ---- moving adopted files into the cache ----------------------------------------------------
 * An adopted file is queued (by path and inode, not held open) and moved later by the lc_io
 * thread, at idle priority, in batches: each file's chunks are written, then (move) the
 * filesystem of the batch's chunk files is synced once and only then are the nginx files that
 * are still the ones read removed. So serving never waits for a move, a kill at any moment loses
 * nothing, and a sync is paid per batch rather than per slice. A file whose move fails stays. */

struct lc_pending {
    struct lc_pending *next;
    uint8_t obj[16];
    uint64_t index; /* the chunk asked for (a whole-object 200 moves all of them) */
    unsigned shard;
    bool hide_etag;
    dev_t dev;
    ino_t ino;
    char *key; /* owns: the object key */
    size_t key_len;
    char *path;         /* owns: the nginx file */
    uint64_t n_chunks;  /* chunks it holds (a whole-object 200: all of them): the room it needs */
    atomic_bool purged; /* a PURGE of the object came while the batch ran (set by the loop,
                           read by the mover before each step) */
    /* Out (the mover's): */
    uint64_t first, last;
    uint64_t *bytes; /* owns: per chunk, the file's bytes on disk (0: not written) */
    ino_t *inos;     /* owns: per chunk, the inode of the file written */
    int rc;
    bool removed;
    int unlink_err; /* errno of a failed unlink of the nginx file (0: none) */
};

struct lc_batch {
    struct iojob j;
    struct cache *c;
    struct lc_pending *items; /* owns */
    uint64_t chunk_size;
    bool remove;
    char **dirs;       /* borrowed: the cache's (fixed for its life) */
    atomic_bool *stop; /* borrowed: the cache's lc_stop */
};

static uint64_t lc_hash(const uint8_t obj[16], uint64_t index)
{
    uint64_t h = XXH3_64bits_withSeed(obj, 16, index);
    return h != 0 ? h : 1;
}

static bool lc_set_has(const struct cache *c, uint64_t h)
{
    for (size_t i = h % CACHE_LC_SET; c->lc_set[i] != 0; i = (i + 1) % CACHE_LC_SET)
        if (c->lc_set[i] == h)
            return true;
    return false;
}

static void lc_set_add(struct cache *c, uint64_t h)
{
    size_t i = h % CACHE_LC_SET;
    while (c->lc_set[i] != 0)
        i = (i + 1) % CACHE_LC_SET;
    c->lc_set[i] = h;
}

/* Removes <h> keeping every probe chain whole (linear probing's backward shift). */
static void lc_set_del(struct cache *c, uint64_t h)
{
    size_t i = h % CACHE_LC_SET;
    while (c->lc_set[i] != h) {
        if (c->lc_set[i] == 0)
            return;
        i = (i + 1) % CACHE_LC_SET;
    }
    c->lc_set[i] = 0;
    for (size_t j = (i + 1) % CACHE_LC_SET; c->lc_set[j] != 0; j = (j + 1) % CACHE_LC_SET) {
        uint64_t v = c->lc_set[j];
        size_t home = v % CACHE_LC_SET;
        /* Moves back into the hole when its home is not between the hole and it (cyclically). */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            c->lc_set[i] = v;
            c->lc_set[j] = 0;
            i = j;
        }
    }
}

static void lc_pending_free(struct lc_pending *p)
{
    free(p->key);
    free(p->path);
    free(p->bytes);
    free(p->inos);
    free(p);
}

/* One file of a batch, on the mover: reopened, checked to be the file adopted, its chunks
 * written (not synced). */
static void lc_move_one(const struct lc_batch *b, struct lc_pending *p, struct ngxfile *nf)
{
    p->rc = -ENOENT;
    if (ngxfile_open(nf, p->path, b->chunk_size, 0, p->hide_etag, NULL) != NGXCACHE_OK)
        return; /* gone (moved by an import), or changed: it is looked up anew when asked */
    if (nf->sb.st_dev != p->dev || nf->sb.st_ino != p->ino) {
        ngxfile_close(nf);
        return;
    }
    struct objhead *head = NULL;
    if (objhead_from_response(nf->f.head, &nf->f.resp, (double)nf->f.date, (double)nf->f.date,
                              &head) < 0) {
        ngxfile_close(nf);
        return;
    }
    struct ngxfile_move mv;
    memset(&mv, 0, sizeof(mv));
    mv.fd = nf->fd;
    mv.off0 = (off_t)nf->f.body_start;
    mv.first = nf->f.first / b->chunk_size;
    mv.last = nf->f.last / b->chunk_size;
    mv.chunk_size = b->chunk_size;
    mv.shard_dir = b->dirs[p->shard];
    memcpy(mv.obj, p->obj, 16);
    mv.seq = ((uint64_t)1 << 63) | (p->index << 16) | (uint64_t)(uintptr_t)p % 65521u;
    mv.m.chunk_size = b->chunk_size;
    mv.m.total = nf->f.total;
    mv.m.key = p->key;
    mv.m.key_len = p->key_len;
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
    p->first = mv.first;
    p->last = mv.last;
    p->bytes = mv.bytes;
    p->inos = mv.inos;
    p->rc = mv.rc;
    objhead_unref(&head);
    ngxfile_close(nf);
}

static void on_lc_batch_work(struct iojob *j)
{
    struct lc_batch *b = container_of(j, struct lc_batch, j);
    static _Thread_local bool idle;
    if (!idle) { /* what the loop and the lookups leave: serving never slows down for a move */
        struct sched_param sp = {0};
        (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
        (void)syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0 /* this thread */,
                      3 << 13 /* IOPRIO_CLASS_IDLE */);
        idle = true;
    }
    struct ngxfile nf;
    ngxfile_init(&nf);
    for (struct lc_pending *p = b->items; p != NULL; p = p->next) {
        if (atomic_load(b->stop) || atomic_load(&p->purged)) {
            p->rc = -ECANCELED; /* shutting down (moved another time), or purged */
            continue;
        }
        lc_move_one(b, p, &nf);
    }
    ngxfile_fini(&nf);
    if (!b->remove)
        return;
    /* Every chunk file of the batch durable, then the nginx files go (a PURGE leaves
     * lancache's file, whenever it comes). */
    struct ngxfile_gone g[CACHE_LC_BATCH];
    size_t n = 0;
    for (struct lc_pending *p = b->items; p != NULL && n < CACHE_LC_BATCH; p = p->next)
        g[n++] = (struct ngxfile_gone){.path = p->path,
                                       .dev = p->dev,
                                       .ino = p->ino,
                                       .shard = p->shard,
                                       .skip = p->rc != 0 || atomic_load(&p->purged)};
    ngxfile_remove_durable(b->dirs, g, n);
    n = 0;
    for (struct lc_pending *p = b->items; p != NULL && n < CACHE_LC_BATCH; p = p->next, n++) {
        if (g[n].sync_err != 0)
            p->rc = -EIO;
        p->removed = g[n].removed;
        p->unlink_err = g[n].unlink_err;
    }
}

static void lc_pump(struct cache *c);

static void on_lc_batch_done(struct iojob *j)
{
    struct lc_batch *b = container_of(j, struct lc_batch, j);
    struct cache *c = b->c;
    uint64_t now = util_wall_ms();
    unsigned unlink_failed = 0;
    while (b->items != NULL) {
        struct lc_pending *p = b->items;
        b->items = p->next;
        /* Every chunk file written is indexed, also of a move that failed later (it is complete
         * and in place: unindexed, it would never be evicted). Those of an object purged
         * meanwhile go, as the PURGE meant. */
        for (uint64_t i = 0; p->bytes != NULL && i <= p->last - p->first; i++) {
            if (p->bytes[i] == 0)
                continue;
            if (atomic_load(&p->purged)) {
                /* Ours written before the PURGE was seen: removed, if still the file written (a
                 * fill may have stored the chunk anew since). */
                char path[PATH_MAX];
                struct stat sb;
                if (chunkfile_path(path, sizeof(path), c->dirs[p->shard], p->obj, p->first + i) ==
                        0 &&
                    stat(path, &sb) == 0 && sb.st_ino == p->inos[i] && unlink(path) == 0)
                    g_stats.cache_purged++;
                continue;
            }
            diskidx_add(c->didx, p->obj, p->first + i, p->bytes[i], now,
                        cache_inv_group(c, p->key, p->key_len));
            g_stats.lancache_migrated++;
            g_stats.cache_disk_writes++;
        }
        g_stats.lancache_removed += p->removed;
        if (p->unlink_err != 0)
            (void)lc_first(c, p->path, LC_ONCE_UNLINK, true);
        if (p->unlink_err != 0 && unlink_failed++ == 0)
            log_warn("cache: cannot remove lancache file %s after moving it: %s (lancache_migrate "
                     "= move needs write access to its directory; the file stays)",
                     p->path, strerror(p->unlink_err));
        if (p->rc < 0 && p->rc != -ENOENT && p->rc != -ECANCELED) {
            g_stats.cache_disk_write_errors++;
            log_warn("cache: cannot move lancache file %s into the cache: %s (it stays, served "
                     "from it)",
                     p->path, strerror(-p->rc));
            if (cache_shard_error(-p->rc, SHARD_STORE))
                cache_shard_fail(c, p->shard, SHARD_STORE, -p->rc);
        }
        lc_pending_free(p);
    }
    if (unlink_failed > 1)
        log_warn("cache: %u more lancache files of the same batch could not be removed",
                 unlink_failed - 1);
    g_stats.lancache_unlink_failed += unlink_failed;
    free(b);
    c->lc_batch = NULL;
    lc_pump(c);
}

/* The room <p>'s move takes: its chunks the disk index does not hold yet (none for a file
 * queued again after its move, or left beside chunks of ours). */
static uint64_t lc_need(struct cache *c, const struct lc_pending *p, uint64_t per_chunk)
{
    bool whole = p->index == UINT64_MAX;
    uint64_t first = whole ? 0 : p->index, n = whole ? p->n_chunks : 1, missing = 0;
    for (uint64_t i = 0; i < n; i++)
        missing += diskidx_lookup(c->didx, p->obj, first + i) != 1;
    return missing * per_chunk;
}

/* Sends the next batch to the mover, when none runs and there is room for it. */
static void lc_pump(struct cache *c)
{
    if (c->lc_batch != NULL || c->closing || c->lc_head == NULL || c->lc_io == NULL)
        return;
    if (c->lc_migrate == CFG_MIGRATE_OFF) { /* switched off by a reload: nothing more moves */
        while (c->lc_head != NULL) {
            struct lc_pending *p = c->lc_head;
            c->lc_head = p->next;
            lc_set_del(c, lc_hash(p->obj, p->index));
            lc_pending_free(p);
        }
        c->lc_tail = NULL;
        c->lc_queued = 0;
        return;
    }
    struct lc_batch *b = xcalloc(1, sizeof(*b));
    b->c = c;
    b->chunk_size = c->chunk_size;
    b->remove = c->lc_migrate == CFG_MIGRATE_MOVE;
    b->dirs = c->dirs;
    b->stop = &c->lc_stop;
    struct lc_pending **tail = &b->items;
    unsigned n = 0;
    /* The room a batch takes is reserved whole: the disk index learns of its files only when it
     * is done, and a move must never make the cache evict. */
    uint64_t reserved = 0, per_chunk = c->chunk_size + CHUNKFILE_HDR_MAX;
    while (c->lc_head != NULL && n < CACHE_LC_BATCH) {
        struct lc_pending *p = c->lc_head;
        uint64_t need = lc_need(c, p, per_chunk);
        if (cache_shard_down(c, p->shard, SHARD_STORE)) {
            c->lc_head = p->next; /* a full or failed dir: served in place, moved another time */
        } else if (!diskidx_fits(c->didx, need)) {
            /* A whole-object 200 larger than the cache can ever hold: served in place only. */
            c->lc_head = p->next;
            if (lc_first(c, p->path, LC_ONCE_TOO_BIG, true))
                log_warn("cache: lancache file %s holds %llu chunks, more than disk_size holds: "
                         "served in place, never moved",
                         p->path, (unsigned long long)p->n_chunks);
        } else if (!diskidx_has_room(c->didx, p->shard, reserved + need)) {
            if (g_stats.lancache_paused == 0)
                log_warn("cache: moving lancache's files paused: the cache is at disk_size or "
                         "min_free (a move never evicts); their slices are served in place");
            g_stats.lancache_paused = 1;
            break;
        } else {
            c->lc_head = p->next;
            p->next = NULL;
            *tail = p;
            tail = &p->next;
            n++;
            reserved += need;
            lc_set_del(c, lc_hash(p->obj, p->index));
            c->lc_queued--;
            continue;
        }
        lc_set_del(c, lc_hash(p->obj, p->index));
        c->lc_queued--;
        lc_pending_free(p);
    }
    if (c->lc_head == NULL)
        c->lc_tail = NULL;
    if (n == 0) {
        free(b);
        return;
    }
    if (g_stats.lancache_paused != 0 && n > 0) {
        log_info("cache: moving lancache's files resumed");
        g_stats.lancache_paused = 0;
    }
    c->lc_batch = b;
    b->j.work = on_lc_batch_work;
    b->j.done = on_lc_batch_done;
    iopool_submit(c->lc_io, &b->j);
}

/* Queues the move of lancache chunk <ck> (just sealed from the file of <q>, holding <n_chunks>
 * chunks). */
static void lc_enqueue(struct cache *c, const struct chunk *ck, const struct lc_query *q,
                       uint64_t n_chunks)
{
    if (c->lc_migrate == CFG_MIGRATE_OFF || c->closing || c->lc_io == NULL)
        return;
    if (cache_purge_holds(c, ck->obj))
        return; /* the purge would race its chunk files: a later request queues it */
    /* One entry per file: a whole-object 200 is one file for all its chunks. */
    uint64_t index = q->whole ? UINT64_MAX : ck->index;
    uint64_t h = lc_hash(ck->obj, index);
    if (lc_set_has(c, h))
        return; /* queued already */
    if (c->lc_queued >= CACHE_LC_QUEUE) {
        lc_pump(c);
        return; /* a later request queues it */
    }
    struct lc_pending *p = xcalloc(1, sizeof(*p));
    memcpy(p->obj, ck->obj, 16);
    p->index = index;
    p->shard = cache_shard_of(c->n_dirs, ck->obj);
    p->hide_etag = q->hide_etag;
    p->dev = q->sb.st_dev;
    p->ino = q->sb.st_ino;
    p->key = xstrndup(ck->key, ck->key_len);
    p->key_len = ck->key_len;
    p->path = xstrdup(q->path);
    p->n_chunks = n_chunks;
    if (c->lc_tail != NULL)
        c->lc_tail->next = p;
    else
        c->lc_head = p;
    c->lc_tail = p;
    c->lc_queued++;
    lc_set_add(c, h);
    lc_pump(c);
}

void cache_lc_purge(struct cache *c, const uint8_t obj[16])
{
    if (c->lc_batch != NULL)
        for (struct lc_pending *p = c->lc_batch->items; p != NULL; p = p->next)
            if (memcmp(p->obj, obj, 16) == 0)
                atomic_store(&p->purged, true);
    struct lc_pending **pp = &c->lc_head, *prev = NULL;
    while (*pp != NULL) {
        struct lc_pending *p = *pp;
        if (memcmp(p->obj, obj, 16) != 0) {
            prev = p;
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        lc_set_del(c, lc_hash(p->obj, p->index));
        c->lc_queued--;
        lc_pending_free(p);
    }
    c->lc_tail = prev;
}

void cache_lc_fini_queue(struct cache *c)
{
    while (c->lc_head != NULL) {
        struct lc_pending *p = c->lc_head;
        c->lc_head = p->next;
        lc_pending_free(p);
    }
    c->lc_tail = NULL;
    c->lc_queued = 0;
    free(c->lc_set);
    c->lc_set = NULL;
}

/* Turns a lancache file found for <ck> into a SEALED disk chunk sending from it; false when it
 * was refused (then counted and logged) or there was none. */
bool cache_lc_accept(struct cache *c, struct lc_query *q, struct chunk *ck)
{
    if (q->why != NGXCACHE_OK) {
        if (q->any)
            lc_refused(c, q->why, q->path);
        return false;
    }
    const struct objver *v = cache_objver_get(c, ck->obj);
    if (v != NULL && !cache_objver_matches(v, &q->meta)) {
        lc_refused(c, NGXCACHE_VERSION_DIFFERS, q->path);
        return false;
    }
    ck->state = CHUNK_S_SEALED;
    cache_chunk_take_meta(ck, &q->meta, cache_objver_set(c, ck->obj, &q->meta, 0));
    cache_objver_find(c, ck->obj)->lancache = true;
    cache_meta_clear(&q->meta);
    ck->meta_known = true;
    ck->cap = ck->len = q->data_len;
    ck->fd = q->fd;
    q->fd = -1;
    ck->body_off = q->body_off;
    ASSERT(ck->seen == NULL); /* bytes cached before: a hit */
    ck->seen = cache_seen_tab_find(&c->seen, ck->obj, ck->index);
    g_stats.lancache_served++;
    lc_enqueue(c, ck, q, q->n_chunks);
    return true;
}

void cache_lc_leftover(struct lc_query *q)
{
    struct ngxfile nf;
    ngxfile_init(&nf);
    q->why = NGXCACHE_IO;
    for (size_t d = 0; d < q->n_dirs && q->why != NGXCACHE_OK; d++) {
        bool absent;
        char path[PATH_MAX];
        if (open_slice(q, q->dirs[d], q->index * q->slice, &nf, path, sizeof(path), &absent) !=
            NGXCACHE_OK)
            continue; /* none, or one a lookup would refuse: left as it is */
        snprintf(q->path, sizeof(q->path), "%s", path);
        q->sb = nf.sb;
        q->whole = nf.f.resp.status == 200;
        /* The room its move needs: none for the slice of ours that is there (a whole file's
         * other chunks may not be). */
        q->n_chunks = q->whole ? range_chunk_count(nf.f.total, q->slice) : 0;
        memset(&q->meta, 0, sizeof(q->meta));
        q->meta.total = nf.f.total;
        memcpy(q->meta.etag, nf.etag, sizeof(q->meta.etag));
        memcpy(q->meta.last_modified, nf.last_modified, sizeof(q->meta.last_modified));
        q->why = NGXCACHE_OK;
        ngxfile_close(&nf);
    }
    ngxfile_fini(&nf);
}

void cache_lc_leftover_queue(struct cache *c, struct lc_query *q, struct chunk *ck)
{
    if (q->why != NGXCACHE_OK || c->lc_migrate != CFG_MIGRATE_MOVE)
        return;
    /* Only a file of the version ours is (another one is not the same object's: it stays), and
     * not one that could not be removed before (no write access: it would come back each
     * time). */
    const struct cache_meta *m = cache_chunk_meta(ck);
    if (m == NULL || m->total != q->meta.total || strcmp(m->etag, q->meta.etag) != 0 ||
        strcmp(m->last_modified, q->meta.last_modified) != 0 ||
        !lc_first(c, q->path, LC_ONCE_UNLINK, false))
        return;
    lc_enqueue(c, ck, q, q->n_chunks);
}

/* Says, once at start, when lancache's filesystem holds more than disk_size lets the cache take
 * (the used space of its filesystem: an estimate, exact for a volume of its own). */
void cache_lc_size_warning(const struct config *cfg)
{
    for (size_t i = 0; i < cfg->n_lancache_dirs; i++) {
        struct statvfs vs;
        if (statvfs(cfg->lancache_dirs[i], &vs) < 0)
            continue;
        uint64_t used = (uint64_t)(vs.f_blocks - vs.f_bfree) * vs.f_frsize;
        if (used > cfg->disk_size)
            log_warn("cache: lancache_dir %s: its filesystem holds %llu MiB, more than disk_size "
                     "(%llu MiB): moving pauses at disk_size and the rest is served in place",
                     cfg->lancache_dirs[i], (unsigned long long)(used >> 20),
                     (unsigned long long)(cfg->disk_size >> 20));
    }
}
