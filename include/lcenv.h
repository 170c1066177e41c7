/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * lcenv: `cacheparty config --from-lancache FILE`, a lancache configuration (a docker-compose
 * `.env`, or a docker-compose.yml's `environment:` in either YAML form) turned into the
 * equivalent cacheparty INI. Every variable it knows becomes a key, or a comment saying why it has
 * no equivalent (and what to do instead); a variable it does not know becomes a comment too. A
 * value cacheparty cannot read is left out with a comment. `${VAR}` references in values are not
 * expanded. Pure: reads text, writes text.
 */
#ifndef CACHEPARTY_LCENV_H
#define CACHEPARTY_LCENV_H

#include <stddef.h>
#include <stdio.h>

/* Converts <text>[0..len) (the file <name>, for the header comment) and writes the INI to
 * <out>. Returns the number of variables read (0: none found, which the caller reports). */
unsigned lcenv_convert(const char *text, size_t len, const char *name, FILE *out);

#endif
