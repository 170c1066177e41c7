#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""policy_sim.py: the memory tier's eviction policy (CLOCK, as src/cache.c implements it) against
LRU, on chunk-access traces shaped like the bench's scenarios and a LAN party (issue 4:
"measure against LRU on the bench's access pattern"). Deterministic (seeded); prints a table of
memory-tier hit ratios.

CLOCK as in cache.c: a chunk enters the ring unreferenced when its fill seals; a hit sets its
reference bit; to make room the hand skips (and clears) referenced chunks and evicts the first
unreferenced one. (Chunks pinned by readers are not modelled: both policies see the same trace.)
LRU: the least recently used chunk goes first.

Traces (chunk ids; memory in chunks):
  chunks   the bench's chunks scenario: C clients each fetch the same 128 one-chunk objects in
           their own random order, interleaved request by request.
  ranges   the bench's ranges scenario: C clients read random ranges of 64 KiB-4 MiB over a
           256-chunk archive (1 MiB chunks), interleaved.
  big      C clients download one 64-chunk object sequentially, starting at staggered times.
  party    a LAN party: a library of games (Zipf popularity) of 200-2000 chunks; clients
           download whole games one after another, interleaved chunk by chunk, plus a patch set
           (small hot objects every client fetches often): the scan a big game makes must not
           flush the hot patches.
Usage: bench/policy_sim.py [--seed N]"""

import argparse
import collections
import random


class LRU:
    def __init__(self, cap):
        self.cap = cap
        self.d = collections.OrderedDict()

    def access(self, k):
        if k in self.d:
            self.d.move_to_end(k)
            return True
        self.d[k] = True
        if len(self.d) > self.cap:
            self.d.popitem(last=False)
        return False


class Clock:
    """The ring as a deque whose left end is the hand: new chunks go in at the right end, just
    behind the hand (ring_add appends at the tail), unreferenced."""

    def __init__(self, cap):
        self.cap = cap
        self.ring = collections.deque()
        self.ref = {}  # id -> referenced bit

    def access(self, k):
        if k in self.ref:
            self.ref[k] = True
            return True
        while len(self.ring) >= self.cap:
            h = self.ring.popleft()
            if self.ref[h]:
                self.ref[h] = False  # second chance: the hand moves past it
                self.ring.append(h)
            else:
                del self.ref[h]
        self.ring.append(k)
        self.ref[k] = False
        return False


class S3FIFO:
    """S3-FIFO (Yang et al., SOSP'23), for comparison: a small FIFO (10%) admits new chunks; one
    re-used there moves to the main FIFO (CLOCK-like, 2-bit frequency), one not is evicted and
    remembered in a ghost FIFO; a chunk found in the ghost goes straight to main."""

    def __init__(self, cap):
        self.small_cap = max(1, cap // 10)
        self.main_cap = cap - self.small_cap
        self.small, self.main = collections.deque(), collections.deque()
        self.freq = {}
        self.where = {}
        self.ghost = collections.OrderedDict()

    def access(self, k):
        if k in self.where:
            self.freq[k] = min(3, self.freq[k] + 1)
            return True
        if k in self.ghost:
            del self.ghost[k]
            self.insert_main(k)
        else:
            while len(self.small) >= self.small_cap:
                self.evict_small()
            self.small.append(k)
            self.where[k] = "s"
            self.freq[k] = 0
        return False

    def insert_main(self, k):
        while len(self.main) >= self.main_cap:
            self.evict_main()
        self.main.append(k)
        self.where[k] = "m"
        self.freq[k] = 0

    def evict_small(self):
        k = self.small.popleft()
        if self.freq[k] > 0:
            self.insert_main(k)
        else:
            del self.where[k]
            del self.freq[k]
            self.ghost[k] = True
            if len(self.ghost) > self.main_cap:
                self.ghost.popitem(last=False)

    def evict_main(self):
        while True:
            k = self.main.popleft()
            if self.freq[k] > 0:
                self.freq[k] -= 1
                self.main.append(k)
                continue
            del self.where[k]
            del self.freq[k]
            return


def interleave(rng, streams):
    """Round-robin with random picks over the live per-client streams."""
    live = [iter(s) for s in streams]
    while live:
        i = rng.randrange(len(live))
        try:
            yield next(live[i])
        except StopIteration:
            live.pop(i)


def trace_chunks(rng, clients=50):
    objs = list(range(128))
    streams = []
    for _ in range(clients):
        order = objs[:]
        rng.shuffle(order)
        streams.append(("c", o) for o in order)
    return list(interleave(rng, streams)), 128


def trace_ranges(rng, clients=20, per_client=40):
    total = 256  # chunks of 1 MiB

    def client():
        for _ in range(per_client):
            length = rng.randint(64 * 1024, 4 * 1024 * 1024)
            start = rng.randrange(0, total * 1048576 - length)
            for c in range(start // 1048576, (start + length - 1) // 1048576 + 1):
                yield ("r", c)
    return list(interleave(rng, [list(client()) for _ in range(clients)])), total


def trace_big(rng, clients=50, chunks=64):
    streams = [[("b", c) for c in range(chunks)] for _ in range(clients)]
    # staggered starts: client i begins after i * 3 requests of the others
    out, live, t = [], [], 0
    pending = collections.deque(iter(s) for s in streams)
    while pending or live:
        if pending and t % 3 == 0:
            live.append(pending.popleft())
        t += 1
        if not live:
            continue
        i = rng.randrange(len(live))
        try:
            out.append(next(live[i]))
        except StopIteration:
            live.pop(i)
    return out, chunks


def trace_party(rng, clients=30, games=40, downloads=3, patches=20, patch_rate=0.15):
    sizes = [rng.randint(200, 2000) for _ in range(games)]
    weights = [1.0 / (i + 1) for i in range(games)]  # Zipf s=1
    distinct = set()

    def client():
        for _ in range(downloads):
            g = rng.choices(range(games), weights)[0]
            for c in range(sizes[g]):
                if rng.random() < patch_rate:
                    p = ("p", rng.randrange(patches))
                    distinct.add(p)
                    yield p
                distinct.add(("g", g, c))
                yield ("g", g, c)
    out = list(interleave(rng, [list(client()) for _ in range(clients)]))
    return out, len(distinct)


def hit_ratio(policy, trace):
    hits = sum(1 for k in trace if policy.access(k))
    return hits / len(trace)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for name, fn in (("chunks", trace_chunks), ("ranges", trace_ranges), ("big", trace_big),
                     ("party", trace_party)):
        trace, distinct = fn(random.Random(args.seed))
        for frac in (0.1, 0.25, 0.5):
            cap = max(4, int(distinct * frac))
            # the best any policy can do: every access after a chunk's first one hits
            best = 1 - distinct / len(trace)
            lru = hit_ratio(LRU(cap), trace)
            clk = hit_ratio(Clock(cap), trace)
            s3 = hit_ratio(S3FIFO(cap), trace)
            rows.append((name, len(trace), distinct, cap, lru, clk, s3, best))
    print("%-7s %8s %8s %7s %7s %7s %8s %7s %7s" % ("trace", "accesses", "distinct", "memory",
                                                     "LRU", "CLOCK", "S3-FIFO", "ideal",
                                                     "CLK/LRU"))
    for name, n, distinct, cap, lru, clk, s3, best in rows:
        ratio = clk / lru if lru > 0 else float("inf")
        print("%-7s %8d %8d %7d %6.1f%% %6.1f%% %7.1f%% %6.1f%% %7.2f" % (
            name, n, distinct, cap, 100 * lru, 100 * clk, 100 * s3, 100 * best, ratio))


if __name__ == "__main__":
    main()
