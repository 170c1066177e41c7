/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: nginx proxy_cache files as found in a lancache tree, which may hold anything
 * (ngxcache_parse, ngxcache_slice), and $uri normalisation (ngxcache_uri). A file that parses has
 * its key, head and body inside the input, and a slice that passes covers exactly its body; a
 * normalised path starts with '/', holds no "//", "/./" or "/../", and normalises to itself.
 */
#include <stdint.h>
#include <string.h>

#include "ngxcache.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ngxcache_file f;
    enum ngxcache_verdict v = ngxcache_parse(data, size, size, NULL, &f);
    if (v == NGXCACHE_OK) {
        ASSERT(f.hdr_size == NGXCACHE_HDR_64 || f.hdr_size == NGXCACHE_HDR_32);
        ASSERT((const uint8_t *)f.key > data && (const uint8_t *)f.key + f.key_len < data + size);
        ASSERT(f.header_start == f.hdr_size + 6 + f.key_len + 1);
        ASSERT(f.header_start < f.body_start && f.body_start <= size);
        ASSERT(f.body_len == size - f.body_start);
        char name[NGXCACHE_NAME_LEN + 1];
        ngxcache_name(f.key, f.key_len, name);
        struct ngxcache_file g;
        ASSERT(ngxcache_parse(data, size, size, name, &g) == NGXCACHE_OK);
        static const uint64_t slices[] = {1, 512, 1024 * 1024};
        for (size_t i = 0; i < sizeof(slices) / sizeof(slices[0]); i++) {
            size_t prefix = 0;
            g = f;
            if (ngxcache_slice(&g, slices[i], &prefix) != NGXCACHE_OK)
                continue;
            ASSERT(prefix > 0 && prefix < g.key_len);
            ASSERT(g.first <= g.last && g.last < g.total);
            ASSERT(g.last - g.first + 1 == g.body_len);
            ASSERT(g.first % slices[i] == 0);
            ASSERT(g.resp.status == 206 || (g.resp.status == 200 && g.first == 0));
        }
    } else {
        ASSERT(v < NGXCACHE_N_VERDICTS);
    }

    static char out[1 << 16], again[1 << 16];
    ssize_t n = ngxcache_uri((const char *)data, size, out, sizeof(out));
    if (n >= 0) {
        ASSERT(n > 0 && out[0] == '/');
        for (ssize_t i = 0; i + 1 < n; i++)
            ASSERT(!(out[i] == '/' && out[i + 1] == '/'));
        ASSERT(memmem(out, (size_t)n, "/./", 3) == NULL &&
               memmem(out, (size_t)n, "/../", 4) == NULL);
        if (memchr(out, '%', (size_t)n) == NULL) {
            ssize_t m = ngxcache_uri(out, (size_t)n, again, sizeof(again));
            ASSERT(m == n && memcmp(out, again, (size_t)n) == 0);
        }
    }
    return 0;
}
