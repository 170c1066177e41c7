#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The module include graph of src/ has no cycle and only points down the layer order below.

A module is a .c file, its header and every file that shares its name up to the first '_':
conn.c, conn_cache.c, conn_int.h and include/conn.h are the module conn; cache.h is cache. The
graph has an edge A -> B when a file of A has `#include "b.h"` (or "b_something.h") and B is
another module; system headers (<...>) are not looked at. Files read: src/*.c, src/*.h,
include/*.h.

The check fails when
  - the graph has a cycle (modules that include each other, directly or through others), or
  - a module includes a module of a higher layer than its own (same layer is fine), or
  - a module is in no layer (a new module must be placed: add it to the line it belongs to).

Reading the output. On success one line: "layers: N modules, E edges, no cycle, all downward".
On failure, one block per problem, each edge with the includes that make it:
  cycle: cache <-> fetch
    cache -> fetch src/cache.c:40 #include "fetch.h"
    fetch -> cache src/fetch.c:38 #include "cache.h"
  upward: cache (layer 3 core) -> fetch (layer 4 fill)
    src/cache.c:40 #include "fetch.h"
  layers: 2 problem(s); the order is at the top of tests/check_layers.py
A cycle is listed by its modules ("a <-> b", or "among a, b, c" for longer ones) and every edge
between them; to break it, remove one of those edges. Layers are numbered from 0 (the first
line of LAYERS).
An upward edge is a lower module reaching into a higher one: move the code, pass a callback or
an interface down, or (if the order itself is wrong) move a module to another line below.

Usage: python3 tests/check_layers.py [--allow A->B ...] [--root DIR]
  --allow A->B  ignore the edge A -> B (a known exemption while it is being removed; make
                check-layers LAYERS_ALLOW="cache->fetch" passes each word as --allow). An
                allowed edge that no longer exists is reported, so the exemption can go.
Exit status 0 when the graph is clean, 1 when it is not, 2 on bad usage.
"""

import argparse
import os
import re
import sys

# The layer order, lowest first: a module may include modules of its own line and of earlier
# lines, never of a later line. Derived from today's includes: each module sits on the lowest
# line its role allows (access, the access log, needs only log and config, so it is base; tlsrelay
# needs no cache and sits beside conn as the other client-side relay; main wires everything).
LAYERS = """
base:      util cluster stats config buf log access live turnq
protocol:  httpdate http1 adminauth objhead range multipart precond forward chunkfile chunkmem ngxcache ngxfile inventory diskidx iopool domains tlshello origin admit answer freshness anstore
origin:    resolver upool upstream peers
core:      cache
fill:      fetch
client:    conn tlsrelay
front:     server admin dashboard lcimport lcenv
program:   main
"""

# Edges exempted for good (none): known exemptions go on the command line (--allow), so that
# they show where the check is run.
ALLOW = []

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def module_of(filename):
    """conn_cache.c -> conn, conn_int.h -> conn, cache.h -> cache."""
    stem = os.path.basename(filename).rsplit(".", 1)[0]
    return stem.split("_", 1)[0]


def parse_layers(text):
    order = {}
    names = []
    for line in text.strip().splitlines():
        name, mods = line.split(":", 1)
        names.append(name.strip())
        for m in mods.split():
            if m in order:
                raise SystemExit("check_layers: %s is listed twice in LAYERS" % m)
            order[m] = len(names) - 1
    return order, names


def read_graph(root):
    """{module: {module: [(path, lineno, text), ...]}} and the set of modules that have a .c."""
    files = []
    for sub, exts in (("src", (".c", ".h")), ("include", (".h",))):
        d = os.path.join(root, sub)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(exts):
                files.append(os.path.join(sub, f))
    modules = {module_of(f) for f in files if f.endswith(".c")}
    edges = {}
    for rel in files:
        src = module_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                dst = module_of(m.group(1))
                if dst == src or dst not in modules:
                    continue
                edges.setdefault(src, {}).setdefault(dst, []).append(
                    (rel, n, line.strip()))
    return modules, edges


def cycles(modules, edges):
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--allow", action="append", default=[], metavar="A->B")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()

    allow = set()
    for e in ALLOW + args.allow:
        parts = [p.strip() for p in e.split("->")]
        if len(parts) != 2 or not all(parts):
            print("check_layers: --allow wants A->B, got %r" % e, file=sys.stderr)
            return 2
        allow.add(tuple(parts))

    order, layer_names = parse_layers(LAYERS)
    modules, edges = read_graph(args.root)
    for a, b in sorted(allow):
        if b in edges.get(a, {}):
            del edges[a][b]
        else:
            print("note: allowed edge %s -> %s does not exist any more: drop the exemption" % (a, b))

    problems = []
    for m in sorted(modules - set(order)):
        problems.append("unplaced: module %s is in no layer (add it to LAYERS in "
                        "tests/check_layers.py)" % m)

    def evidence(a, b, indent):
        return ["%s%s:%d %s" % (indent, f, n, t) for f, n, t in edges[a][b]]

    for comp in cycles(modules, edges):
        block = ["cycle: " + (" <-> ".join(comp) if len(comp) == 2 else "among " + ", ".join(comp))]
        for a in comp:
            for b in sorted(edges.get(a, {})):
                if b in comp:
                    width = max(len(x) for x in comp) * 2 + 4
                    first = "%s -> %s" % (a, b)
                    for i, ev in enumerate(evidence(a, b, "")):
                        block.append("    %-*s %s" % (width, first if i == 0 else "", ev))
        problems.append("\n".join(block))

    for a in sorted(edges):
        for b in sorted(edges[a]):
            if a in order and b in order and order[b] > order[a]:
                block = ["upward: %s (layer %d %s) -> %s (layer %d %s)"
                         % (a, order[a], layer_names[order[a]], b, order[b], layer_names[order[b]])]
                block += evidence(a, b, "    ")
                problems.append("\n".join(block))

    if problems:
        print("\n".join(problems))
        print("layers: %d problem(s); the order is at the top of tests/check_layers.py"
              % len(problems))
        return 1
    n_edges = sum(len(v) for v in edges.values())
    print("layers: %d modules, %d edges, no cycle, all downward" % (len(modules), n_edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
