/* SPDX-License-Identifier: BSD-2-Clause */
/* stats: the counters table, its gauge providers and its export order. See stats.h. */
#include "stats.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

struct stats g_stats;
uint64_t g_stats_status[STATS_STATUS_MAX];

enum stats_source { STATS_SRC_FIELDS, STATS_SRC_STATUS };

struct stats_field {
    const char *name;
    const char *type;
    const char *family; /* NULL: its own */
    const char *label;
    const char *help;
    size_t offset;
};

static const struct stats_field fields[] = {
#define STATS_X(name, type, family, label, help)                                                   \
    {#name, #type, family, label, help, offsetof(struct stats, name)},
    STATS_FIELDS(STATS_X)
#undef STATS_X
};

struct stats_family_row {
    struct stats_family fam;
    enum stats_source source;
};

static const struct stats_family_row families[] = {
#define STATS_F(name, type, label, source, help) {{#name, #type, label, help}, STATS_SRC_##source},
    STATS_FAMILIES(STATS_F)
#undef STATS_F
};

static struct {
    stats_provider_fn *fn;
    void *arg;
} providers[STATS_MAX_PROVIDERS];
static size_t n_providers;

void stats_provider_add(stats_provider_fn *fn, void *arg)
{
    ASSERT(fn != NULL && n_providers < STATS_MAX_PROVIDERS);
    providers[n_providers].fn = fn;
    providers[n_providers].arg = arg;
    n_providers++;
}

void stats_refresh(void)
{
    for (size_t i = 0; i < n_providers; i++)
        providers[i].fn(&g_stats, providers[i].arg);
}

static uint64_t field_value(const struct stats_field *f)
{
    uint64_t v;
    memcpy(&v, (const char *)&g_stats + f->offset, sizeof(v));
    return v;
}

static bool is_listed(const char *family)
{
    for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
        if (strcmp(families[i].fam.name, family) == 0)
            return true;
    }
    return false;
}

void stats_export(stats_family_fn *fam, stats_sample_fn *sample, void *arg)
{
    stats_refresh();
    for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
        const struct stats_family_row *r = &families[i];
        fam(&r->fam, arg);
        if (r->source == STATS_SRC_STATUS) {
            ASSERT(r->fam.label != NULL);
            for (int s = 0; s < STATS_STATUS_MAX; s++) {
                char v[16];
                if (g_stats_status[s] == 0)
                    continue;
                snprintf(v, sizeof(v), "%d", s);
                sample(v, g_stats_status[s], arg);
            }
            continue;
        }
        for (size_t k = 0; k < ARRAY_SIZE(fields); k++) {
            const struct stats_field *f = &fields[k];
            if (f->family == NULL || strcmp(f->family, r->fam.name) != 0)
                continue;
            ASSERT(strcmp(f->type, r->fam.type) == 0);
            ASSERT((f->label == NULL) == (r->fam.label == NULL));
            sample(f->label, field_value(f), arg);
        }
    }
    /* Every other field, alone, so that nothing is hidden. */
    for (size_t k = 0; k < ARRAY_SIZE(fields); k++) {
        const struct stats_field *f = &fields[k];
        bool counter = strcmp(f->type, "counter") == 0;
        char name[96];
        struct stats_family own = {name, f->type, NULL, f->help};
        if (f->family != NULL && is_listed(f->family))
            continue;
        ASSERT(f->label == NULL);
        if (f->family != NULL)
            snprintf(name, sizeof(name), "%s", f->family);
        else
            snprintf(name, sizeof(name), "%s%s", f->name, counter ? "_total" : "");
        fam(&own, arg);
        sample(NULL, field_value(f), arg);
    }
}
