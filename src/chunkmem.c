/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * chunkmem: blocks of chunk memory in slots of one memfd, or from malloc (see chunkmem.h).
 *
 * Slot i covers [i * slot, (i + 1) * slot) of the file. Free slots are a stack (the most
 * recently released first); slots never used come after them, and the file grows (ftruncate:
 * sparse, no pages) in doubling steps to cover them. A block maps only its own length (rounded
 * to a page) of its slot, so the address space used is the held bytes, not the slots (32-bit
 * systems). A release unmaps the block and punches its whole slot out of the file. A slot whose
 * punch fails is never used again (its pages would still be the ones sockets may refer to), and
 * from then on every new block is malloc'd: counted (errors_total{kind="chunk_memory"}) and
 * logged once.
 */
#include "chunkmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "stats.h"
#include "util.h"

struct chunkmem {
    size_t max_block;
    int fd;       /* owns: the memory file, -1 for the malloc kind */
    size_t slot;  /* bytes per slot (a multiple of the PMD size) */
    size_t page;  /* the page size */
    size_t *free; /* owns: stack of free slot indices */
    size_t n_free, cap_free;
    size_t next;       /* slots [next, ...) were never used */
    size_t file_slots; /* slots the file's size covers */
    size_t held;
    size_t held_in_file;
    size_t max_mapped; /* blocks in the file at once, at most */
    bool broken;       /* a punch failed: no block goes in the file any more */
    bool told_full;    /* max_mapped was reached once (logged) */
    bool told_write;   /* a write to the file failed once (logged) */
};

/* The number at the start of kernel file <path>, or 0 when it cannot be read. */
static unsigned long long kernel_number(const char *path)
{
    unsigned long long v = 0;
    FILE *f = fopen(path, "re");
    if (f != NULL) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* The largest page a shared-memory file may be made of: the PMD size (transparent huge pages),
 * from the kernel when it says, else what a PMD maps with this page size (at least 2 MiB). */
static size_t pmd_size(size_t page)
{
    unsigned long long x = kernel_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    size_t v = x > 0 && x <= (1ULL << 30) ? (size_t)x : page * (page / sizeof(void *));
    return v < (size_t)2 << 20 ? (size_t)2 << 20 : v;
}

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

/* What a block of <len> bytes maps (at least a page: mmap takes no empty mapping). */
static size_t map_len(const struct chunkmem *m, size_t len)
{
    return round_up(len > 0 ? len : 1, m->page);
}

static int punch(int fd, off_t off, size_t len)
{
    int r;
    do {
        r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)len);
    } while (r < 0 && errno == EINTR);
    return r;
}

/* The memory file, or -1 with <why> set (the malloc kind is used then). */
static int open_file(size_t slot, const char **why)
{
    int fd = memfd_create("cacheparty-chunks", MFD_CLOEXEC);
    if (fd < 0) {
        *why = "memfd_create";
        return -1;
    }
    /* A first slot, and a hole punched in it: what every release will do. */
    if (ftruncate(fd, (off_t)slot) < 0) {
        *why = "ftruncate";
    } else if (punch(fd, 0, slot) < 0) {
        *why = "fallocate(FALLOC_FL_PUNCH_HOLE)";
    } else {
        return fd;
    }
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* A quarter of what the kernel lets a process map (vm.max_map_count, 65530 by default). */
static size_t default_max_mapped(void)
{
    unsigned long long v = kernel_number("/proc/sys/vm/max_map_count");
    return (size_t)((v >= 64 ? v : 65530) / 4);
}

struct chunkmem *chunkmem_new(size_t max_block, bool by_ref, size_t max_mapped)
{
    ASSERT(max_block > 0);
    struct chunkmem *m = xcalloc(1, sizeof(*m));
    m->max_block = max_block;
    long pg = sysconf(_SC_PAGESIZE);
    m->page = pg > 0 ? (size_t)pg : 4096;
    m->fd = -1;
    m->max_mapped = max_mapped > 0 ? max_mapped : default_max_mapped();
    if (by_ref) {
        size_t slot = round_up(round_up(max_block, m->page), pmd_size(m->page));
        const char *why = NULL;
        m->fd = open_file(slot, &why);
        if (m->fd >= 0) {
            m->slot = slot;
            m->file_slots = 1;
        } else {
            log_info("chunk memory: no memory file (%s: %s): chunk bytes are copied to clients",
                     why, strerror(errno));
        }
    }
    return m;
}

void chunkmem_free(struct chunkmem **mp)
{
    struct chunkmem *m = *mp;
    if (m == NULL)
        return;
    ASSERT(m->held == 0);
    if (m->fd >= 0)
        close(m->fd);
    free(m->free);
    free(m);
    *mp = NULL;
}

int chunkmem_fd(const struct chunkmem *m)
{
    return m->fd;
}

size_t chunkmem_slot_size(const struct chunkmem *m)
{
    return m->slot;
}

size_t chunkmem_held(const struct chunkmem *m)
{
    return m->held;
}

size_t chunkmem_held_in_file(const struct chunkmem *m)
{
    return m->held_in_file;
}

/* A slot index to use, growing the file when every used slot is held; -1 when it cannot. */
static int take_slot(struct chunkmem *m, size_t *out)
{
    if (m->n_free > 0) {
        *out = m->free[--m->n_free];
        return 0;
    }
    if (m->next == m->file_slots) {
        size_t want = m->file_slots < 16 ? 16 : m->file_slots * 2;
        if (want > (size_t)(INT64_MAX / 2) / m->slot ||
            ftruncate(m->fd, (off_t)want * (off_t)m->slot) < 0)
            return -1;
        m->file_slots = want;
    }
    *out = m->next++;
    return 0;
}

static void give_slot(struct chunkmem *m, size_t slot)
{
    if (m->n_free == m->cap_free) {
        m->cap_free = m->cap_free < 16 ? 16 : m->cap_free * 2;
        m->free = xrealloc(m->free, m->cap_free * sizeof(*m->free));
    }
    m->free[m->n_free++] = slot;
}

/* Whether a block of <len> bytes goes in the file. */
static bool in_file(struct chunkmem *m, size_t len)
{
    if (m->fd < 0 || m->broken || len < CHUNKMEM_REF_MIN)
        return false;
    if (m->held_in_file < m->max_mapped)
        return true;
    if (!m->told_full) {
        m->told_full = true;
        log_info("chunk memory: %zu chunks held by reference, the most allowed (a quarter of "
                 "vm.max_map_count): more are copied to clients",
                 m->max_mapped);
    }
    return false;
}

int chunkmem_get(struct chunkmem *m, size_t len, struct chunkmem_block *b)
{
    ASSERT(len <= m->max_block);
    memset(b, 0, sizeof(*b));
    size_t slot;
    if (in_file(m, len) && take_slot(m, &slot) == 0) {
        off_t off = (off_t)slot * (off_t)m->slot;
        void *p = mmap(NULL, map_len(m, len), PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, off);
        if (p != MAP_FAILED) {
            b->data = p;
            b->off = off;
            b->len = len;
            b->slot = slot;
            b->in_file = true;
            m->held++;
            m->held_in_file++;
            return 0;
        }
        give_slot(m, slot); /* (nothing was written to it) */
    }
    /* Too short, no file, too many mappings, or the file could not give one: malloc'd. */
    b->data = malloc(len > 0 ? len : 1);
    if (b->data == NULL)
        return -ENOMEM;
    b->len = len;
    m->held++;
    return 0;
}

void chunkmem_write(struct chunkmem *m, const struct chunkmem_block *b, size_t off, const void *src,
                    size_t len)
{
    ASSERT(off <= b->len && len <= b->len - off);
    const char *p = src;
    while (b->in_file && len > 0) {
        ssize_t n = pwrite(m->fd, p, len, b->off + (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* (No page for it, ENOMEM: the copy below takes one as a fault, as a malloc'd
             * block's first write does, or the process fails as it would there.) */
            g_stats.chunkmem_errors++;
            if (!m->told_write)
                log_err("chunk memory: a write to its file failed (%s): copied through the "
                        "mapping instead (counted in errors_total{kind=\"chunk_memory\"})",
                        n < 0 ? strerror(errno) : "nothing written");
            m->told_write = true;
            break;
        }
        p += n;
        off += (size_t)n;
        len -= (size_t)n;
    }
    if (len > 0)
        memcpy(b->data + off, p, len);
}

void chunkmem_put(struct chunkmem *m, struct chunkmem_block *b)
{
    if (b->data == NULL)
        return;
    ASSERT(m->held > 0);
    m->held--;
    if (!b->in_file) {
        free(b->data);
    } else {
        ASSERT(m->held_in_file > 0);
        m->held_in_file--;
        munmap(b->data, map_len(m, b->len));
        if (punch(m->fd, b->off, m->slot) == 0) {
            give_slot(m, b->slot);
        } else {
            g_stats.chunkmem_errors++;
            if (!m->broken)
                log_err("chunk memory: releasing a slot failed (%s): it is not used again, and "
                        "chunk bytes are copied to clients from now on",
                        strerror(errno));
            m->broken = true;
        }
    }
    memset(b, 0, sizeof(*b));
}
