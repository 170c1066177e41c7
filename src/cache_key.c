/* SPDX-License-Identifier: BSD-2-Clause */
/* cache_key: the object key format, "identifier\npath". See cache_key_build() in cache.h. */
#include "cache.h"

#include <string.h>

#include "util.h"

char *cache_key_build(const char *ident, const char *path, size_t path_len, size_t *key_len)
{
    ASSERT(ident != NULL && key_len != NULL && (path != NULL || path_len == 0));
    if (path_len == 0) {
        path = "/";
        path_len = 1;
    }
    size_t ilen = strlen(ident);
    size_t len = ilen + 1 + path_len;
    char *key = xmalloc(len + 1);
    memcpy(key, ident, ilen);
    key[ilen] = '\n';
    memcpy(key + ilen + 1, path, path_len);
    key[len] = '\0';
    *key_len = len;
    return key;
}
