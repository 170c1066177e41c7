/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: cache_domains.json through domains_load (libjansson's check, then the schema
 * walk over the checked text, domains.c). The input is the JSON file; a private directory holds
 * it and one list, "a.txt". Invariants: a load either succeeds (and its lookups run) or fails
 * with "PATH:LINE: message" naming a file of that directory; nothing leaks or crashes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "domains.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], json_path[96], list_path[96];

static void cleanup(void)
{
    unlink(json_path);
    unlink(list_path);
    rmdir(dir);
}

static void write_all(const char *path, const void *p, size_t len)
{
    FILE *f = fopen(path, "wb");

    ASSERT(f != NULL);
    ASSERT(fwrite(p, 1, len, f) == len);
    ASSERT(fclose(f) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char list[] = "a.example.com\n*.b.example.com\n";
    char err[512];
    struct domains *d;

    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "%s/cp_fuzz_domains_XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        ASSERT(mkdtemp(dir) != NULL);
        snprintf(json_path, sizeof(json_path), "%s/cache_domains.json", dir);
        snprintf(list_path, sizeof(list_path), "%s/a.txt", dir);
        write_all(list_path, list, sizeof(list) - 1);
        atexit(cleanup);
    }
    write_all(json_path, data, size);
    d = domains_load(dir, err, sizeof(err));
    if (d != NULL) {
        size_t services, names;

        (void)domains_match(d, "a.example.com");
        (void)domains_match(d, "x.b.example.com");
        domains_counts(d, &services, &names);
        ASSERT(names <= 2 || services > 0);
        domains_free(&d);
        return 0;
    }
    /* "<dir>/FILE:LINE: message" (FILE may itself hold ':'). */
    ASSERT(strncmp(err, dir, strlen(dir)) == 0 && err[strlen(dir)] == '/');
    {
        const char *p = err + strlen(dir);
        bool form = false;

        while (!form && (p = strchr(p + 1, ':')) != NULL) {
            size_t digits = strspn(p + 1, "0123456789");

            form = digits > 0 && strncmp(p + 1 + digits, ": ", 2) == 0;
        }
        ASSERT(form || strlen(err) == sizeof(err) - 1); /* or cut short: a long file name */
    }
    return 0;
}
