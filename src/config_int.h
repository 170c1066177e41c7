/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * config_int.h: what config.c and config_rules.c share (the [rules] section, config.h).
 */
#ifndef CACHEPARTY_CONFIG_INT_H
#define CACHEPARTY_CONFIG_INT_H

#include <stddef.h>

#include "config.h"

#define CONFIG_RULES_MSG_MAX 256

/* Puts the built-in rules in <cfg> (after dropping any it holds). */
void config_rules_defaults(struct config *cfg);

/* Drops every rule of <cfg>. */
void config_rules_free(struct config *cfg);

/*
 * The [rules] key <name> = <value> on INI line <line> (syntax in config.h). Returns 0, or -1
 * with a message (no FILE:LINE prefix) in <msg>.
 */
int config_rule_set(struct config *cfg, const char *name, const char *value, int line, char *msg,
                    size_t msglen);

#endif
