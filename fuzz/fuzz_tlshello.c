/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * fuzz_tlshello: libFuzzer target for the ClientHello parser (tlshello.h). Every input is parsed
 * whole and, to reach the "more bytes arrive later" paths, as every prefix a reader would have
 * seen when the bytes came in two pieces split where the first input byte says. Checks the
 * contract: NEED_MORE only below TLSHELLO_MAX_INPUT, a returned name is NUL-terminated, at most
 * TLSHELLO_HOST_MAX long, lowercase, and a prefix never decides differently from the whole once
 * decided (a decision does not depend on bytes after it).
 */
#include "tlshello.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size, enum tlshello_result *r)
{
    struct tlshello_sni sni;
    *r = tlshello_parse(data, size, &sni);
    if (*r == TLSHELLO_NEED_MORE && size >= TLSHELLO_MAX_INPUT)
        abort();
    if (*r == TLSHELLO_OK) {
        size_t n = strnlen(sni.host, sizeof(sni.host));
        if (n == 0 || n > TLSHELLO_HOST_MAX)
            abort();
        for (size_t i = 0; i < n; i++)
            if (sni.host[i] >= 'A' && sni.host[i] <= 'Z')
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum tlshello_result whole, part;
    check(data, size, &whole);
    if (size > 1) {
        size_t cut = 1 + (size_t)data[0] * (size - 1) / 256;
        check(data, cut, &part);
        if (part != TLSHELLO_NEED_MORE && part != whole)
            abort();
    }
    return 0;
}
