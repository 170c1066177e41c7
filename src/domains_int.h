/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * domains_int: the layout of struct domains, shared by domains.c (loading, lookups) and
 * domains_dns.c (the `cacheparty dns` export). Private to the domains module.
 * Layout: see the comment at the top of domains.c.
 */
#ifndef CACHEPARTY_DOMAINS_INT_H
#define CACHEPARTY_DOMAINS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "domains.h"

#define DOMAINS_MAGIC 0x646f6d73u

struct dom_entry {
    uint64_t hash; /* domains_name_hash() of the name (the base, for a wildcard) */
    uint32_t off;  /* name = pool + off, NUL-terminated */
    uint32_t svc;  /* index in services[] */
    uint16_t len;
    bool wild; /* "*.name": subdomains of name only */
};

struct domains {
    unsigned magic;
    char **services; /* owns: the names, in cache_domains.json order */
    size_t n_services;
    char *pool; /* owns: the entries' names */
    size_t pool_len, pool_cap;
    struct dom_entry *entries; /* owns: load order, deduplicated */
    size_t n_entries, cap_entries;
    uint32_t *slots; /* owns: entry index + 1, 0 = empty; n_slots is a power of two */
    size_t n_slots;
    size_t n_skipped;     /* malformed list lines skipped */
    char first_skip[512]; /* "FILE:LINE: message" of the first ("" if none) */
};

/* The FNV-1a hash of <s>[0..len), taken from the last byte to the first. */
uint64_t domains_name_hash(const char *s, size_t len);

/* The entry (<s>[0..len), <wild>) of <d> whose hash is <h>, or NULL. Borrowed from <d>. */
const struct dom_entry *domains_entry_find(const struct domains *d, const char *s, size_t len,
                                           uint64_t h, bool wild);

#endif
