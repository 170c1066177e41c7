/* SPDX-License-Identifier: BSD-2-Clause */
/* stats: the counters table. See stats.h. */
#include "stats.h"

#include "util.h"

struct stats g_stats;
uint64_t g_stats_status[STATS_STATUS_MAX];

static const struct stats_field fields[] = {
#define STATS_X(name, kind, help) {#name, #kind, help, offsetof(struct stats, name)},
    STATS_FIELDS(STATS_X)
#undef STATS_X
};

const struct stats_field *stats_fields(size_t *n)
{
    *n = ARRAY_SIZE(fields);
    return fields;
}
