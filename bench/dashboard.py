#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""bench/dashboard.py: what watching the dashboard costs the proxy (issue 19).

The bench's warm `chunks` phase (loadgen -s chunks: 128 objects of 1 MiB, 10 keep-alive clients,
each in its own order, every byte of 64 KiB per MiB verified) is run in rounds, alternately with
no dashboard open and with 10 pollers doing what the page does (GET /api/live every 2 s,
/status every 4 s, /api/history and /api/inventory every 20 s, each poller a process of its
own); per condition: the proxy's CPU seconds per GB served, its MB/s, its peak RSS (VmHWM, reset
before each round), the bytes the pollers moved, and Little's law of the load (L = rps x mean
latency against the 10 clients: loadgen's little_ratio, median, and whether loadgen saturated
its core). Also the page's own transfer size (/, /static/chart.js and one answer of each
endpoint).

The proxy runs on core 0; the origin, loadgen and the pollers on core 1. Loopback only; every
round bounded (loadgen -T), the pollers stopped by the harness.
Usage: bench/dashboard.py [--rounds N] [--seconds S]   (defaults 6 rounds of at least 10 s)
"""

import argparse
import http.client
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
from harness import free_port  # noqa: E402
BUILD = os.environ.get("BUILD", "build")
CP = os.path.join(ROOT, BUILD, "cacheparty")
ORIGIN = os.path.join(ROOT, BUILD, "bench", "origin")
LOADGEN = os.path.join(ROOT, BUILD, "bench", "loadgen")
HOST = "dash.example.net"
CLK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])  # utime + stime


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers={"Host": "127.0.0.1:%d" % port})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def poller(port, stop, out):
    os.sched_setaffinity(0, {1})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    n, moved, tick, t0 = 0, 0, 0, time.monotonic()
    while not stop.is_set():
        # The page's own rates (src/dashboard.html): live every tick of 2 s, /status every
        # second tick, history and inventory every tenth.
        paths = ["/api/live"] + (["/status"] if tick % 2 == 0 else []) + \
            (["/api/history", "/api/inventory"] if tick % 10 == 0 else [])
        tick += 1
        for p in paths:
            c.request("GET", p, headers={"Host": "127.0.0.1:%d" % port})
            r = c.getresponse()
            moved += len(r.read())
            n += 1
        stop.wait(max(0.0, t0 + 2.0 * tick - time.monotonic()))
    out.put((n, moved))


def loadgen(port, seconds):
    """Warm chunks phases back to back for at least <seconds>; returns (bytes, wall seconds,
    Little's ratios, loadgen saturated)."""
    total, t0, little, sat = 0, time.monotonic(), [], False
    while time.monotonic() - t0 < seconds:
        line = subprocess.run(
            ["taskset", "-c", "1", LOADGEN, "-a", "127.0.0.1:%d" % port, "-H", HOST, "-s",
             "chunks", "-c", "10", "-n", "cacheparty", "-p", "warm", "-k", "128", "-K", "1M",
             "-v", "sample", "-T", "60"], capture_output=True, text=True, check=True).stdout
        kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if kv.get("failed") != "0":
            raise SystemExit("loadgen failed: " + line)
        total += int(kv["bytes"])
        little.append(float(kv["little_ratio"]))
        sat = sat or kv.get("lg_saturated") == "1"
    return total, time.monotonic() - t0, little, sat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cp-dashbench.")
    procs = []
    try:
        oport, port, aport = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(["taskset", "-c", "1", ORIGIN, "-l", "127.0.0.1:%d" % oport,
                                       "-d", "0", "-r", "0", "-t", "3600"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        ini = os.path.join(tmp, "cp.ini")
        with open(ini, "w") as f:
            f.write("[server]\nlisten = 127.0.0.1:%d\nadmin_listen = 127.0.0.1:%d\n"
                    "[upstream]\ndns = 127.0.0.1:9\noverride = 127.0.0.1:%d\n"
                    "[cache]\ndir = %s\nchunk_size = 1M\nmemory_size = 512M\n"
                    "[domains]\nallow_unlisted = yes\n[log]\naccess =\nlevel = warn\n"
                    % (port, aport, oport, os.path.join(tmp, "cache")))
        os.makedirs(os.path.join(tmp, "cache"))
        cp = subprocess.Popen(["taskset", "-c", "0", CP, "-c", ini],
                              stdout=open(os.path.join(tmp, "cp.log"), "w"),
                              stderr=subprocess.STDOUT)
        procs.append(cp)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        # Cold once (fills the 128 objects), not measured.
        subprocess.run(["taskset", "-c", "1", LOADGEN, "-a", "127.0.0.1:%d" % port, "-H", HOST,
                        "-s", "chunks", "-c", "10", "-n", "cacheparty", "-p", "cold", "-k", "128",
                        "-K", "1M", "-v", "sample", "-T", "120"], check=True,
                       capture_output=True)
        pages = ("/", "/static/chart.js", "/api/live", "/status", "/api/history", "/api/inventory")
        sizes = {p: len(get(aport, p)[1]) for p in pages}
        rows = {"none": [], "10 pollers": []}
        for r in range(a.rounds):
            cond = "none" if r % 2 == 0 else "10 pollers"
            stop, q, ps = multiprocessing.Event(), multiprocessing.Queue(), []
            if cond != "none":
                for _ in range(10):
                    p = multiprocessing.Process(target=poller, args=(aport, stop, q))
                    p.start()
                    ps.append(p)
            with open("/proc/%d/clear_refs" % cp.pid, "w") as f:
                f.write("5\n")  # resets VmHWM
            c0 = cpu_ticks(cp.pid)
            nbytes, wall, little, sat = loadgen(port, a.seconds)
            c1 = cpu_ticks(cp.pid)
            stop.set()
            polls = moved = 0
            for p in ps:
                n, m = q.get(timeout=30)
                polls += n
                moved += m
                p.join(10)
            cpu = (c1 - c0) / CLK
            rows[cond].append((cpu / (nbytes / 1e9), nbytes / wall / 1e6, hwm_kib(cp.pid) / 1024,
                               polls, moved, wall, statistics.median(little), sat))
        print("page: " + ", ".join("%s %d bytes" % (p, sizes[p]) for p in pages))
        print("%-12s %6s %14s %10s %12s %8s %12s %8s %6s" % (
            "dashboard", "rounds", "cpu s per GB", "MB/s", "peak RSS MiB", "polls",
            "polled KiB/s", "L/N", "lg sat"))
        for cond, rs in rows.items():
            if not rs:
                continue
            print("%-12s %6d %14.3f %10.0f %12.1f %8d %12.1f %8.3f %6s" % (
                cond, len(rs), statistics.median(x[0] for x in rs),
                statistics.median(x[1] for x in rs), max(x[2] for x in rs),
                sum(x[3] for x in rs), sum(x[4] for x in rs) / sum(x[5] for x in rs) / 1024,
                statistics.median(x[6] for x in rs), "yes" if any(x[7] for x in rs) else "no"))
        for cond, rs in rows.items():
            print("  %s rounds (cpu s/GB, MB/s): %s" % (cond, ", ".join(
                "%.3f %.0f" % (x[0], x[1]) for x in rs)))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
