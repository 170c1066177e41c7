/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * dashboard: the admin listener's page (GET /), src/dashboard.html as it is, built into the
 * binary by the Makefile (build/gen/dashboard_page.c). It loads nothing from outside the daemon:
 * its data from /api/live and /api/history, its chart library from /static/chart.js (Debian's
 * libjs-chart.js when installed; without it the page shows its tables only).
 */
#ifndef CACHEPARTY_DASHBOARD_H
#define CACHEPARTY_DASHBOARD_H

#include <stddef.h>

extern const unsigned char dashboard_html[];
extern const size_t dashboard_html_len;

#endif
