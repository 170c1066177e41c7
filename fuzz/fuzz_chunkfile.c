/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: chunk file headers as read back from a disk that may hold anything
 * (chunkfile_header_parse), and the whole-file verification (chunkfile_read_verify) on a file
 * holding the input. A header that parses must satisfy the stored-metadata rules and rebuild to
 * the same bytes; a file that verifies must hold exactly header + data_len bytes whose hash
 * matches.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunkfile.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void cleanup(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t hdr[CHUNKFILE_HDR_MAX];
    static uint8_t body[1 << 16];
    struct chunkfile_meta m;
    uint64_t bh;
    size_t hl = 0;
    int rc = chunkfile_header_parse(data, size, &m, &bh, &hl);

    if (rc == 0) {
        ASSERT(hl >= CHUNKFILE_HDR_MIN && hl <= CHUNKFILE_HDR_MAX && hl <= size);
        ASSERT(chunkfile_meta_is_valid(&m));
        size_t k = chunkfile_header_build(&m, bh, hdr, sizeof(hdr));
        if (m.version == CHUNKFILE_VERSION) {
            ASSERT(k == hl && memcmp(hdr, data, hl) == 0); /* the same bytes again */
        } else {
            /* A version 1 header is rebuilt as version 2: the same fields, and nothing else. */
            ASSERT(m.version == 1 && m.date_len == 0 && m.fields_len == 0 && k > hl);
            struct chunkfile_meta m2;
            uint64_t bh2;
            size_t hl2;
            ASSERT(chunkfile_header_parse(hdr, k, &m2, &bh2, &hl2) == 0 && hl2 == k && bh2 == bh);
            ASSERT(m2.version == CHUNKFILE_VERSION && m2.index == m.index && m2.total == m.total &&
                   m2.key_len == m.key_len && memcmp(m2.key, m.key, m.key_len) == 0 &&
                   m2.etag_len == m.etag_len && m2.content_type_len == m.content_type_len);
        }
    } else {
        ASSERT(rc == -EAGAIN || rc == -EBADMSG);
        if (rc == -EAGAIN)
            ASSERT(hl >= CHUNKFILE_HDR_MIN && hl <= CHUNKFILE_HDR_MAX);
    }

    /*
     * The same bytes as a file on disk: for every header that parses (truncated, extended and
     * altered bodies) and one other input in 16 (file I/O is what makes this target slow).
     */
    if (rc != 0 && (size == 0 || data[size - 1] % 16 != 0))
        return 0;
    if (path[0] == '\0') {
        snprintf(path, sizeof(path), "/tmp/cp-fuzz-chunkfile.%d", (int)getpid());
        atexit(cleanup);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT(fd >= 0);
    ASSERT(write(fd, data, size) == (ssize_t)size);
    close(fd);
    const char *key = rc == 0 ? m.key : "k\n/p";
    size_t key_len = rc == 0 ? m.key_len : 4;
    uint64_t cs = rc == 0 ? m.chunk_size : 1;
    uint64_t idx = rc == 0 ? m.index : 0;
    struct chunkfile_info info;
    size_t blen = 0;
    off_t boff = 0;
    int v = chunkfile_read_verify(AT_FDCWD, path, key, key_len, cs, idx, &info, body, sizeof(body),
                                  &blen, &boff);
    if (v == 0) {
        ASSERT(rc == 0);
        ASSERT((size_t)boff == hl && hl + blen == size && blen == m.data_len);
        ASSERT(chunkfile_body_hash(body, blen) == bh);
        ASSERT(memcmp(body, data + hl, blen) == 0);
    } else {
        ASSERT(v == -EBADMSG || v == -ENOBUFS);
    }
    return 0;
}
