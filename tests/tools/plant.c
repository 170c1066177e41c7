/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * plant: writes chunk files into a cache dir as the daemon writes them, without a daemon or an
 * origin, for the tests that need a large stored set (it/b26_bounds: 100,000 objects). Each
 * object is one chunk of BODY bytes (a repeated byte), key "SERVICE\nPATH":
 *   object i of N is "steam\n/depot/<1000 + i % DEPOTS>/chunk/<40 hex of i>" for i < N * 3/4,
 *   then "blizzard\n/tpr/game<i % 16>/data/<i>" for the rest.
 * Usage: plant DIR N DEPOTS [BODY=256] [CHUNK_SIZE=1048576]
 * Prints "planted N files, B bytes" on stdout; exit 1 with a message on the first failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunkfile.h"

static unsigned long arg(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s) {
        fprintf(stderr, "plant: bad %s: %s\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: plant DIR N DEPOTS [BODY] [CHUNK_SIZE]\n");
        return 2;
    }
    const char *dir = argv[1];
    unsigned long n = arg(argv[2], "N"), depots = arg(argv[3], "DEPOTS");
    unsigned long body_len = argc > 4 ? arg(argv[4], "BODY") : 256;
    unsigned long chunk_size = argc > 5 ? arg(argv[5], "CHUNK_SIZE") : 1048576;
    if (depots == 0 || body_len == 0 || body_len > chunk_size) {
        fprintf(stderr, "plant: DEPOTS and BODY must be > 0, BODY <= CHUNK_SIZE\n");
        return 2;
    }
    char *body = malloc(body_len);
    if (body == NULL)
        return 1;
    memset(body, 'p', body_len);
    static const char fields[] = "Content-Type: application/octet-stream\r\n";
    uint64_t bytes = 0;
    for (unsigned long i = 0; i < n; i++) {
        char key[256], path[4096], tmp[4200];
        int kl =
            i < n / 4 * 3
                ? snprintf(key, sizeof(key), "steam\n/depot/%lu/chunk/%040lx", 1000 + i % depots, i)
                : snprintf(key, sizeof(key), "blizzard\n/tpr/game%lu/data/%lu", i % 16, i);
        uint8_t hash[16];
        chunkfile_key_hash(key, (size_t)kl, hash);
        if (chunkfile_path(path, sizeof(path), dir, hash, 0) < 0) {
            fprintf(stderr, "plant: path too long under %s\n", dir);
            return 1;
        }
        snprintf(tmp, sizeof(tmp), "%s.plant.tmp", path);
        if (chunkfile_mkdirs(AT_FDCWD, path) < 0) {
            fprintf(stderr, "plant: cannot make the directories of %s\n", path);
            return 1;
        }
        struct chunkfile_meta m = {.chunk_size = chunk_size,
                                   .index = 0,
                                   .total = body_len,
                                   .data_len = (uint32_t)body_len,
                                   .key = key,
                                   .key_len = (size_t)kl,
                                   .content_type = "application/octet-stream",
                                   .content_type_len = 24,
                                   .fields = fields,
                                   .fields_len = sizeof(fields) - 1};
        int rc = chunkfile_write(AT_FDCWD, tmp, path, &m, body, body_len, false);
        if (rc < 0) {
            fprintf(stderr, "plant: %s: %s\n", path, strerror(-rc));
            return 1;
        }
        bytes += body_len;
    }
    printf("planted %lu files, %" PRIu64 " body bytes\n", n, bytes);
    free(body);
    return 0;
}
