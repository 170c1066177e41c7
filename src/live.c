/* SPDX-License-Identifier: BSD-2-Clause */
/* live: the dashboard's samples and tables (see live.h). */
#include "live.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "log.h"
#include "stats.h"
#include "util.h"

/* ---- tables ------------------------------------------------------------------------------- */

void live_table_init(struct live_table *t, size_t cap, bool totals)
{
    t->e = xcalloc(cap, sizeof(*t->e));
    t->n = 0;
    t->cap = cap;
    t->totals = totals;
    t->n_slots = 4;
    while (t->n_slots < 2 * cap)
        t->n_slots *= 2;
    t->slots = xcalloc(t->n_slots, sizeof(*t->slots));
}

void live_table_fini(struct live_table *t)
{
    free(t->e);
    free(t->slots);
    t->e = NULL;
    t->slots = NULL;
    t->n = t->cap = t->n_slots = 0;
}

/* FNV-1a of a name: the slot its entry is looked up by. */
static size_t name_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

/* The slot holding <name>'s entry, or the empty slot where it would go. Slots hold entry
 * index + 1 (0: empty); linear probing, at most half full. */
static uint32_t *slot_of(const struct live_table *t, const char *name, size_t len)
{
    size_t mask = t->n_slots - 1;
    for (size_t i = name_hash(name, len) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->slots[i];
        if (v == 0)
            return &t->slots[i];
        const struct live_entry *e = &t->e[v - 1];
        if (strncmp(e->name, name, len) == 0 && e->name[len] == '\0')
            return &t->slots[i];
    }
}

/* Removes <name>'s slot, keeping every probe chain whole (backward shift). */
static void slot_del(struct live_table *t, const char *name)
{
    size_t mask = t->n_slots - 1;
    uint32_t *s = slot_of(t, name, strlen(name));
    if (*s == 0)
        return;
    size_t i = (size_t)(s - t->slots);
    t->slots[i] = 0;
    for (size_t j = (i + 1) & mask; t->slots[j] != 0; j = (j + 1) & mask) {
        const struct live_entry *e = &t->e[t->slots[j] - 1];
        size_t home = name_hash(e->name, strlen(e->name)) & mask;
        bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            t->slots[i] = t->slots[j];
            t->slots[j] = 0;
            i = j;
        }
    }
}

/* The rank an entry keeps its place by: what it served since the first start (services) or
 * since this start (clients: their total_bytes stays 0, bytes counts). */
static uint64_t rank(const struct live_entry *e)
{
    return e->total_bytes > e->bytes ? e->total_bytes : e->bytes;
}

struct live_entry *live_table_add(struct live_table *t, const char *name, size_t len,
                                  uint64_t bytes, uint64_t hit, uint64_t now_ms)
{
    if (len >= LIVE_NAME_MAX)
        len = LIVE_NAME_MAX - 1;
    if (memchr(name, '\0', len) != NULL)
        len = strlen(name);
    uint32_t *slot = slot_of(t, name, len);
    struct live_entry *e = *slot != 0 ? &t->e[*slot - 1] : NULL;
    if (e == NULL && t->n < t->cap) {
        e = &t->e[t->n++];
        memset(e, 0, sizeof(*e));
    } else if (e == NULL) {
        /* Space-saving: the smallest place, and its count as a floor. */
        e = &t->e[0];
        for (size_t i = 1; i < t->n; i++)
            if (rank(&t->e[i]) < rank(e))
                e = &t->e[i];
        uint64_t floor = rank(e);
        slot_del(t, e->name);
        slot = slot_of(t, name, len); /* (the deletion may have moved the empty slot) */
        memset(e, 0, sizeof(*e));
        e->bytes = e->floor = floor;
        if (t->totals)
            e->total_bytes = floor;
    }
    if (*slot == 0) {
        memcpy(e->name, name, len);
        e->name[len] = '\0';
        *slot = (uint32_t)(e - t->e) + 1;
    }
    e->bytes += bytes;
    e->hit += hit;
    if (t->totals) {
        e->total_bytes += bytes;
        e->total_hit += hit;
    }
    e->last_ms = now_ms;
    return e;
}

static int by_rank(const void *a, const void *b)
{
    uint64_t x = rank(a), y = rank(b);
    return x < y ? 1
           : x > y
               ? -1
               : strcmp(((const struct live_entry *)a)->name, ((const struct live_entry *)b)->name);
}

void live_table_sort(struct live_table *t)
{
    qsort(t->e, t->n, sizeof(*t->e), by_rank);
    memset(t->slots, 0, t->n_slots * sizeof(*t->slots)); /* the entries moved: index anew */
    for (size_t i = 0; i < t->n; i++)
        *slot_of(t, t->e[i].name, strlen(t->e[i].name)) = (uint32_t)i + 1;
}

int live_state_write(const struct live_table *t, const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return -errno;
    fprintf(f, "cacheparty-live 1\n");
    for (size_t i = 0; i < t->n; i++)
        fprintf(f, "%s %" PRIu64 " %" PRIu64 "\n", t->e[i].name, t->e[i].total_bytes,
                t->e[i].total_hit);
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        (void)unlink(tmp);
    return rc;
}

int live_state_read(struct live_table *t, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    char line[LIVE_NAME_MAX + 64];
    int rc = 0;
    if (fgets(line, sizeof(line), f) == NULL || strcmp(line, "cacheparty-live 1\n") != 0)
        rc = -EINVAL;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        char name[LIVE_NAME_MAX];
        uint64_t bytes, hit;
        if (sscanf(line, "%127s %" SCNu64 " %" SCNu64, name, &bytes, &hit) != 3 || hit > bytes) {
            rc = -EINVAL; /* what was read so far stays */
            break;
        }
        struct live_entry *e = live_table_add(t, name, strlen(name), 0, 0, 0);
        e->total_bytes = bytes;
        e->total_hit = hit;
    }
    fclose(f);
    return rc;
}

/* ---- the daemon's --------------------------------------------------------------------------- */

static struct {
    struct ev_loop *loop;
    ev_timer tick;
    bool started;
    struct live_sample ring[LIVE_RING];
    size_t head, n; /* next slot; samples held */
    struct live_table clients, services;
    char *state_path; /* owns */
    unsigned ticks;
} lv;

void live_now(struct live_sample *s)
{
    stats_refresh();
    s->t_ms = util_wall_ms();
    s->bytes_hit = g_stats.bytes_hit;
    s->bytes_miss = g_stats.bytes_miss;
    s->bytes_bypass = g_stats.bytes_bypass;
    s->upstream_bytes = g_stats.upstream_bytes;
    s->requests = g_stats.requests;
    s->connections = (uint32_t)g_stats.conn_open;
    s->fetches = (uint32_t)g_stats.fetches_inflight;
}

static void save(void)
{
    if (lv.state_path == NULL)
        return;
    int rc = live_state_write(&lv.services, lv.state_path);
    if (rc < 0)
        log_warn("live: cannot write %s: %s (totals per service not kept)", lv.state_path,
                 strerror(-rc));
}

static void on_live_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    live_now(&lv.ring[lv.head]);
    lv.head = (lv.head + 1) % LIVE_RING;
    if (lv.n < LIVE_RING)
        lv.n++;
    if (++lv.ticks % (LIVE_SAVE_S / LIVE_TICK_S) == 0)
        save();
}

void live_start(struct ev_loop *loop, const char *state_path)
{
    ASSERT(!lv.started);
    lv.loop = loop;
    live_table_init(&lv.clients, LIVE_CLIENTS, false);
    live_table_init(&lv.services, LIVE_SERVICES, true);
    lv.state_path = state_path != NULL ? xstrdup(state_path) : NULL;
    if (lv.state_path != NULL) {
        int rc = live_state_read(&lv.services, lv.state_path);
        if (rc < 0 && rc != -ENOENT)
            log_warn("live: cannot read %s: %s (totals per service start again)", lv.state_path,
                     strerror(-rc));
    }
    live_now(&lv.ring[0]);
    lv.head = 1;
    lv.n = 1;
    ev_timer_init(&lv.tick, on_live_tick, LIVE_TICK_S, LIVE_TICK_S);
    ev_timer_start(loop, &lv.tick);
    ev_unref(loop); /* the sampling alone keeps no loop running */
    lv.started = true;
}

void live_stop(void)
{
    if (!lv.started)
        return;
    save();
    ev_ref(lv.loop);
    ev_timer_stop(lv.loop, &lv.tick);
    live_table_fini(&lv.clients);
    live_table_fini(&lv.services);
    free(lv.state_path);
    lv.state_path = NULL;
    lv.started = false;
}

void live_account(const char *ident, size_t ident_len, const char *client, uint64_t bytes,
                  uint64_t hit)
{
    if (!lv.started || bytes == 0)
        return;
    uint64_t now = (uint64_t)(ev_now(lv.loop) * 1000.0);
    live_table_add(&lv.services, ident, ident_len, bytes, hit, now);
    live_table_add(&lv.clients, client, strlen(client), bytes, hit, now);
}

void live_samples(live_sample_fn *fn, void *arg)
{
    size_t first = (lv.head + LIVE_RING - lv.n) % LIVE_RING;
    for (size_t i = 0; i < lv.n; i++)
        fn(&lv.ring[(first + i) % LIVE_RING], arg);
}

static void visit(struct live_table *t, live_entry_fn *fn, void *arg)
{
    live_table_sort(t);
    for (size_t i = 0; i < t->n; i++)
        fn(&t->e[i], arg);
}

void live_clients(live_entry_fn *fn, void *arg)
{
    if (lv.started)
        visit(&lv.clients, fn, arg);
}

void live_services(live_entry_fn *fn, void *arg)
{
    if (lv.started)
        visit(&lv.services, fn, arg);
}
