/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * pattern: the deterministic object content shared by bench/origin.c (which serves it) and
 * bench/loadgen.c (which verifies it). Header-only (static inline) so each bench program stays one
 * .c file.
 *
 * An object is named by its path (query string excluded); its seed is FNV-1a of that path. The
 * 64-bit little-endian word at index i (bytes 8i..8i+7) is TABLE[i % PAT_TABLE_WORDS] ^ (seed + i),
 * so every word differs from its neighbours, from the same index in other objects and from other
 * offsets of the same object: a proxy that serves the wrong object, the wrong chunk or a shifted
 * range fails verification. Generation and checking cost about one load, one add and one xor per
 * 8 bytes (memory speed, no per-byte arithmetic).
 */
#ifndef CACHEPARTY_BENCH_PATTERN_H
#define CACHEPARTY_BENCH_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Prime, so the table period never lines up with a power-of-two chunk size. */
#define PAT_TABLE_WORDS 8191u

struct pat_table {
    uint64_t w[PAT_TABLE_WORDS];
};

static inline uint64_t pat_splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void pat_table_init(struct pat_table *t)
{
    uint64_t s = 0x6361636865706172ull; /* "cachepar" */
    for (size_t i = 0; i < PAT_TABLE_WORDS; i++) {
        t->w[i] = pat_splitmix(&s);
    }
}

/* Seed of the object named by <path>[0..len): FNV-1a 64 of the path up to '?' (if any). */
static inline uint64_t pat_seed(const char *path, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len && path[i] != '?'; i++) {
        h ^= (unsigned char)path[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t pat_word(const struct pat_table *t, uint64_t seed, uint64_t idx)
{
    return t->w[idx % PAT_TABLE_WORDS] ^ (seed + idx);
}

/* Bytes [off, off+len) of word <idx> into <dst> (little-endian byte order, 0 <= off, len <= 8). */
static inline void pat_word_bytes(uint64_t w, unsigned off, unsigned len, uint8_t *dst)
{
    for (unsigned i = 0; i < len; i++) {
        dst[i] = (uint8_t)(w >> (8 * (off + i)));
    }
}

/* Write bytes [off, off+len) of the object with <seed> to <dst>. */
static inline void pat_fill(const struct pat_table *t, uint64_t seed, uint64_t off, uint8_t *dst,
                            size_t len)
{
    uint64_t idx = off / 8;
    unsigned head = (unsigned)(off % 8);
    if (head != 0 && len > 0) {
        unsigned n = 8 - head;
        if (n > len) {
            n = (unsigned)len;
        }
        pat_word_bytes(pat_word(t, seed, idx), head, n, dst);
        dst += n;
        len -= n;
        idx++;
    }
    uint64_t ti = idx % PAT_TABLE_WORDS;
    while (len >= 8) {
        uint64_t w = t->w[ti] ^ (seed + idx);
        memcpy(dst, &w, 8);
        dst += 8;
        len -= 8;
        idx++;
        if (++ti == PAT_TABLE_WORDS) {
            ti = 0;
        }
    }
    if (len > 0) {
        pat_word_bytes(pat_word(t, seed, idx), 0, (unsigned)len, dst);
    }
}

/*
 * Check that <src>[0..len) equals bytes [off, off+len) of the object with <seed>. Returns true when
 * it does; otherwise false and, when <bad_off> is not NULL, the object offset of the first word
 * that differs (approximately: to the word).
 */
static inline bool pat_check(const struct pat_table *t, uint64_t seed, uint64_t off,
                             const uint8_t *src, size_t len, uint64_t *bad_off)
{
    uint64_t idx = off / 8;
    unsigned head = (unsigned)(off % 8);
    uint8_t tmp[8];
    if (head != 0 && len > 0) {
        unsigned n = 8 - head;
        if (n > len) {
            n = (unsigned)len;
        }
        pat_word_bytes(pat_word(t, seed, idx), head, n, tmp);
        if (memcmp(tmp, src, n) != 0) {
            goto bad;
        }
        src += n;
        len -= n;
        idx++;
    }
    uint64_t ti = idx % PAT_TABLE_WORDS;
    uint64_t diff = 0;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, src, 8);
        diff |= w ^ t->w[ti] ^ (seed + idx);
        src += 8;
        len -= 8;
        idx++;
        if (++ti == PAT_TABLE_WORDS) {
            ti = 0;
        }
        /* Check in blocks of 4 KiB so the loop stays branch-light but still locates a fault. */
        if (diff != 0 && (idx % 512) == 0) {
            goto bad;
        }
    }
    if (diff != 0) {
        goto bad;
    }
    if (len > 0) {
        pat_word_bytes(pat_word(t, seed, idx), 0, (unsigned)len, tmp);
        if (memcmp(tmp, src, len) != 0) {
            goto bad;
        }
    }
    return true;
bad:
    if (bad_off != NULL) {
        *bad_off = idx * 8;
    }
    return false;
}

#endif
