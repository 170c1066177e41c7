#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""bench/cluster.py: more than one box (issue 20), measured as ratios.

Three cacheparty nodes on 127.0.3.1-3 (one port, as boxes of a LAN) with Debian's HAProxy in
front (conf/haproxy.cfg from `defaults` on, as tests/it/n01_haproxy.py runs it), in three
layouts, and one node alone as the baseline:

  single    one node, the clients connected to it directly;
  hash      HAProxy path hashing (the shipped recipe), nodes without [cluster];
  rr        HAProxy `balance roundrobin`, nodes without [cluster] (each fills on its own);
  cluster   HAProxy `balance roundrobin`, nodes with [cluster] (each chunk asked of its owner).

Per layout, on fresh cache dirs: the `chunks` scenario (N objects of 1 MiB, each client in its
own order) cold then warm, and the `ranges` scenario (unaligned ranges of one archive) cold then
warm, each through bench/loadgen (keep-alive, every body verified by sample). Reported: origin
bytes / unique bytes (the origin's own count against loadgen's distinct bytes), bytes stored per
node max / min (cacheparty_cache_bytes{tier="disk"}), throughput as a ratio to `single`, and
Little's law per row.

This machine has two cores: the nodes and HAProxy share core 0, the origin and loadgen core 1.
So three nodes cannot serve more than one would here: the throughput ratios show what the front
and the peer hop cost on one core, not what three boxes give (each its own CPU and link).
Loopback only; bounded (each loadgen phase has a deadline).
Usage: bench/cluster.py [--chunks N] [--clients C] [--archive SIZE] [--layouts a,b,...]
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
import harness as H  # noqa: E402
from n01_haproxy import Haproxy  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
CP = os.path.join(ROOT, BUILD, "cacheparty")
ORIGIN = os.path.join(ROOT, BUILD, "bench", "origin")
LOADGEN = os.path.join(ROOT, BUILD, "bench", "loadgen")
HOST = "dl.bench.example"
ADDRS = ["127.0.3.1", "127.0.3.2", "127.0.3.3"]
SECRET = "bench-cluster-secret-0123456789"


def wait_port(addr, port, proc):
    for _ in range(400):
        if proc.poll() is not None:
            raise SystemExit("exited during startup")
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.025)
    raise SystemExit("not listening on %s:%d" % (addr, port))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def origin_bytes(oport):
    m = re.search(r"^body_bytes (\d+)$", get("http://127.0.0.1:%d/__stats" % oport), re.M)
    return int(m.group(1))


def metric(aport, name):
    for line in get("http://127.0.0.1:%d/metrics" % aport).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


class Node:
    def __init__(self, tmp, i, port, oport, cluster):
        self.dir = os.path.join(tmp, "node%d" % (i + 1))
        os.makedirs(os.path.join(self.dir, "cache"))
        self.addr, self.port, self.aport = ADDRS[i], port, H.free_port()
        ini = os.path.join(self.dir, "cp.ini")
        with open(ini, "w") as f:
            f.write("[server]\nlisten = %s:%d\nadmin_listen = 127.0.0.1:%d\nhostname = bn%d\n"
                    "[upstream]\ndns = 127.0.0.1:9\noverride = 127.0.0.1:%d\n"
                    "[cache]\ndir = %s\nchunk_size = 1M\nmemory_size = 256M\n"
                    "[domains]\nallow_unlisted = yes\n[log]\naccess =\nlevel = warn\n"
                    % (self.addr, port, self.aport, i + 1, oport,
                       os.path.join(self.dir, "cache")))
            if cluster:
                f.write("[cluster]\nnodes = %s\nself = %s:%d\nsecret = %s\n" % (
                    ", ".join("%s:%d" % (a, port) for a in ADDRS), self.addr, port, SECRET))
        self.proc = subprocess.Popen(["taskset", "-c", "0", CP, "-c", ini],
                                     stdout=open(os.path.join(self.dir, "cp.log"), "w"),
                                     stderr=subprocess.STDOUT)
        wait_port(self.addr, port, self.proc)

    def peers_up(self):
        return sum(v == 1 for k, v in self.metrics_all().items()
                   if k.startswith("cacheparty_cluster_peer_up"))

    def metrics_all(self):
        out = {}
        for line in get("http://127.0.0.1:%d/metrics" % self.aport).splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def settle(self):
        for _ in range(600):
            m = self.metrics_all()
            if m.get("cacheparty_inflight_fetches") == 0 and \
                    m.get("cacheparty_cache_disk_io_pending") == 0:
                return
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def loadgen(port, addr, scenario, phase, prefix, a):
    args = ["taskset", "-c", "1", LOADGEN, "-a", "%s:%d" % (addr, port), "-H", HOST, "-s",
            scenario, "-c", str(a.clients), "-n", "cp", "-p", phase, "-x", prefix, "-v",
            "sample", "-T", "300"]
    args += ["-k", str(a.chunks), "-K", "1M"] if scenario == "chunks" else ["-A", a.archive]
    line = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
    if kv.get("failed") != "0":
        raise SystemExit("loadgen failed: " + line)
    return kv


def run_layout(name, a, oport):
    tmp = tempfile.mkdtemp(prefix="cp-clusterbench.")
    port = H.free_port()
    nodes, front = [], None
    try:
        n = 1 if name == "single" else 3
        for i in range(n):
            nodes.append(Node(tmp, i, port, oport, name == "cluster"))
        if name == "cluster":
            for _ in range(200):
                if all(nd.peers_up() == 2 for nd in nodes):
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("peers not up")
        if name == "single":
            addr, fport = ADDRS[0], port
        else:
            edit = None
            if name in ("rr", "cluster"):
                def edit(t):
                    return t.replace("    balance uri path-only\n", "    balance roundrobin\n",
                                     1).replace("    hash-type consistent\n", "", 1)
            front = Haproxy(tmp, ADDRS, port, H.free_port(), edit=edit)
            os.sched_setaffinity(front.proc.pid, {0})
            for i in range(3):
                front.wait_state("cp%d" % (i + 1), "UP", backend="cacheparty")
            addr, fport = "127.0.0.1", front.port
        rows = []
        for scenario in ("chunks", "ranges"):
            prefix = "/%s-%s" % (name, scenario)
            for phase in ("cold", "warm"):
                o0 = origin_bytes(oport)
                kv = loadgen(fport, addr, scenario, phase, prefix, a)
                for nd in nodes:
                    nd.settle()
                kv["origin"] = origin_bytes(oport) - o0
                rows.append((scenario, phase, kv))
        stored = [nd.metrics_all().get('cacheparty_cache_bytes{tier="disk"}', 0) for nd in nodes]
        return rows, stored
    finally:
        if front is not None:
            front.stop()
        for nd in nodes:
            nd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--archive", default="192M")
    ap.add_argument("--layouts", default="single,hash,rr,cluster")
    a = ap.parse_args()
    oport = H.free_port()
    origin = subprocess.Popen(["taskset", "-c", "1", ORIGIN, "-l", "127.0.0.1:%d" % oport,
                               "-d", "20ms", "-r", "0", "-t", "3600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", oport, origin)
        res = {}
        for name in a.layouts.split(","):
            res[name] = run_layout(name, a, oport)
        base = {(s, p): float(kv["mbps"]) for s, p, kv in res.get("single", ([], []))[0]}
        print("commit %s; %d clients; chunks %d x 1 MiB; ranges of one %s archive; nodes and "
              "HAProxy on core 0, origin and loadgen on core 1" % (
                  subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip(),
                  a.clients, a.chunks, a.archive))
        print("%-8s %-7s %-5s %12s %10s %9s %10s %8s %8s %6s" % (
            "layout", "set", "phase", "origin/uniq", "MB/s", "x single", "ttfb p50", "L/N",
            "busy", "fail"))
        for name, (rows, stored) in res.items():
            for s, p, kv in rows:
                uniq = int(kv["distinct_bytes"])
                # (a ranges phase touches part of the archive: the unique bytes are the chunks
                # its ranges touch, at most the archive; loadgen counts the archive)
                mb = float(kv["mbps"])
                print("%-8s %-7s %-5s %12.3f %10.1f %9s %10s %8s %8s %6s" % (
                    name, s, p, kv["origin"] / uniq, mb,
                    "%.2f" % (mb / base[(s, p)]) if (s, p) in base else "-",
                    kv["ttfb_p50_ms"], kv["little_ratio"], kv["busy_ratio"], kv["failed"]))
            if len(stored) > 1:
                print("%-8s stored per node (MiB): %s, max/min %.2f" % (
                    name, ", ".join("%.0f" % (x / 2**20) for x in stored),
                    max(stored) / max(1, min(stored))))
    finally:
        origin.terminate()
        origin.wait(10)


if __name__ == "__main__":
    main()
