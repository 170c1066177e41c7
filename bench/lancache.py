#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""bench/lancache.py: a lancache cache taken over (issue 18), measured.

A real lancache tree is made by Debian's nginx configured as lancache monolithic (the Nginx class
of tests/it/b21_lancache.py) in front of bench/origin: N1 Steam-style 1 MiB chunks (the Valve
agent) and NB multi-slice objects of 64 MiB. nginx is stopped, then:

  A. first byte: the same 1 MiB objects fetched one after the other over one keep-alive
     connection, the page cache dropped before each timed pass: first as adopted slices (served
     from the nginx files, lancache_migrate = off: no mover competes for the disk), then copied
     into chunks (untimed) and, after a restart (memory empty), as cacheparty chunk hits from
     disk (each verified whole on its first read). p50/p99/mean TTFB.
  B. import rate against `cp -r` of the same tree on the same disk, the page cache dropped and a
     `sync` included in each: cp -r, `cacheparty import --copy` and `cacheparty import` (move:
     the chunk files made durable by one syncfs per batch before their nginx files go).
  C. the loop's responsiveness while moves run: /lancache-heartbeat every 2 ms on its own
     keep-alive connection, from a process of its own on core 1 at real-time priority (so that
     its samples are the loop's delays, not its own wait for the core it shares with the client
     and the origin), until the moves are done, while one client downloads the whole tree through
     cacheparty, with lancache_migrate = move against off (no writes), each run on a fresh copy
     of the tree, the modes alternated in each round, the page cache dropped before each run (as
     bench/disk_stall.sh measures a cold disk read). With perf installed, the loop thread's own
     scheduling delays (perf sched) are shown beside.

The proxy runs on core 0, the origin, the clients and the probe on core 1. Loopback only;
bounded in size and time. Needs root (drop_caches) and nginx (`make deps`).
Usage: bench/lancache.py [--small N1] [--big NB] [--parts ABC] [--dir DIR] [--rounds N]
                         [--also OTHER_BINARY]   (defaults 400, 4, 3 rounds)
"""

import argparse
import http.client
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "it"))
import b21_lancache as B  # noqa: E402  (the nginx-as-lancache fixture)
import harness as H  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
CP = os.path.join(ROOT, BUILD, "cacheparty")
ORIGIN = os.path.join(ROOT, BUILD, "bench", "origin")
STEAM_HOST, UA = "cache1-ams1.steamcontent.com", "Valve/Steam HTTP Client 1.0"


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mount_of(path):
    # The mount <path> is on and its options (`discard` matters: each removed file's blocks are
    # then trimmed at the journal commit, which a move pays and cp -r does not).
    best = ("?", "?", "?", "")
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype, opts = line.split()[:4]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                best = (dev, mnt, fstype, opts)
    return "%s on %s, %s (%s)" % best


def tree_bytes(d):
    n = b = 0
    for root, _, names in os.walk(d):
        for x in names:
            n += 1
            b += os.path.getsize(os.path.join(root, x))
    return n, b


class Proxy:
    def __init__(self, tmp, name, origin_port, extra, binary=None):
        self.port, self.admin = H.free_port(), H.free_port()
        self.ini = os.path.join(tmp, name + ".ini")
        cache = extra.pop("dir")
        with open(self.ini, "w") as f:
            f.write("[server]\nlisten = 127.0.0.1:%d\nadmin_listen = 127.0.0.1:%d\n"
                    "hostname = lc-bench\n[upstream]\ndns = system\noverride = 127.0.0.1:%d\n"
                    "allow_private = yes\n[cache]\ndir = %s\nchunk_size = 1M\n"
                    "memory_size = 64M\ndisk_size = 100G\nmin_free = 1G\n" %
                    (self.port, self.admin, origin_port, cache))
            for k, v in extra.items():
                f.write("%s = %s\n" % (k, v))
            f.write("[domains]\nallow_unlisted = yes\n[log]\naccess =\nlevel = warn\n")
        self.log = open(os.path.join(tmp, name + ".log"), "a")
        self.proc = subprocess.Popen(["taskset", "-c", "0", binary or CP, "-c", self.ini],
                                     stdout=self.log, stderr=self.log)
        H.wait_until(self.up, 10, what="cacheparty up")

    def up(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/lancache-heartbeat")
            c.getresponse().read()
            return True
        except OSError:
            return False

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=5)
        c.request("GET", "/metrics")
        out = {}
        for line in c.getresponse().read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def settle(self):
        H.wait_until(lambda: self.metrics().get("cacheparty_cache_disk_io_pending", 0) == 0, 600,
                     what="disk idle")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def ttfb_pass(port, objs):
    """TTFB and total time (ms) of each object, one after the other on one connection. The body
    is read in steps of 256 KiB: one recv() of all that is queued (megabytes) is one long stretch
    of kernel time, which on a kernel without full preemption delays the heartbeat probe that
    shares this core (perf sched: 3.5-4.7 ms at p99, most of what the probe measured)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    firsts, totals = [], []
    buf = memoryview(bytearray(256 * 1024))
    for host, ua, path, size in objs:
        t0 = time.monotonic()
        c.request("GET", path, headers={"Host": host, "User-Agent": ua or "bench"})
        r = c.getresponse()
        first = r.read(1)
        t1 = time.monotonic()
        rest = 0
        while True:
            n = r.readinto(buf)
            if n == 0:
                break
            rest += n
        t2 = time.monotonic()
        assert r.status == 200 and len(first) + rest == size, (r.status, path)
        firsts.append((t1 - t0) * 1000)
        totals.append((t2 - t0) * 1000)
    c.close()
    return firsts, totals


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def probe(port, stop, out):
    """In a process of its own (run_probe): the downloading client's thread must not share an
    interpreter lock with it, or its delays would be the client's, not the loop's. Puts
    (real-time priority, [(start, ms), ...]) on <out>, start in time.monotonic()."""
    os.sched_setaffinity(0, {1})
    # Real-time priority: the probe is the instrument, so the origin and the downloading client
    # that share its core must not delay it. Without it, its worst samples were its own wait for
    # core 1 (perf sched: the client ran 16 ms while the probe waited), not the loop's.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        rt = True
    except OSError:
        rt = False  # (no CAP_SYS_NICE: said in the output)
    s = socket.create_connection(("127.0.0.1", port))
    req = b"GET /lancache-heartbeat HTTP/1.1\r\nHost: probe.example\r\n\r\n"
    lat = []
    while not stop.is_set():
        t0 = time.monotonic()
        s.sendall(req)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                raise SystemExit("heartbeat connection closed")
            buf += d
        lat.append((t0, (time.monotonic() - t0) * 1000))
        time.sleep(0.002)
    out.put((rt, lat))


def run_probe(port):
    """Starts probe() in its own process; returns (stop, collect) where collect() stops it and
    gives its latencies."""
    stop, q = multiprocessing.Event(), multiprocessing.Queue()
    pr = multiprocessing.Process(target=probe, args=(port, stop, q))
    pr.start()

    def collect():
        stop.set()
        got = q.get(timeout=60)
        pr.join(10)
        return got
    return collect


def part_a(tmp, oport, tree, small, proxies):
    # A. first byte: adopted slice against our chunk hit, same objects, same run
    objs = small[:min(200, len(small))]
    cache_a = os.path.join(tmp, "cache_a")
    # Served in place with nothing moved meanwhile (off: no mover competes for the disk)...
    p = Proxy(tmp, "a0", oport, {"dir": os.path.join(tmp, "cache_a0"), "lancache_dir": tree,
                                 "lancache_settle": "0", "lancache_migrate": "off"})
    proxies.append(p)
    drop_caches()
    f_lc, t_lc = ttfb_pass(p.port, objs)
    served = p.metrics().get('cacheparty_lancache_slices_total{result="served"}', 0)
    p.stop()
    # ... then copied into our chunks (not timed), and those read after a restart.
    p = Proxy(tmp, "a1", oport, {"dir": cache_a, "lancache_dir": tree,
                                 "lancache_settle": "0", "lancache_migrate": "copy"})
    proxies.append(p)
    ttfb_pass(p.port, objs)
    p.settle()
    p.stop()
    p = Proxy(tmp, "a2", oport, {"dir": cache_a})
    proxies.append(p)
    drop_caches()
    f_own, t_own = ttfb_pass(p.port, objs)
    hits = p.metrics().get('cacheparty_cache_hits_total{tier="disk"}', 0)
    p.stop()
    print("\nA. first byte of a 1 MiB object, page cache dropped, one keep-alive client, "
          "%d objects" % len(objs))
    print("%-34s %9s %9s %9s %11s %8s" % ("", "p50 ms", "p99 ms", "mean ms", "total p50",
                                          "N=X*R"))
    for name, f, t in (("adopted slice (nginx file)", f_lc, t_lc),
                       ("cacheparty chunk hit (disk)", f_own, t_own)):
        # Little's law for one client: N = X * R, X = 1 / mean total time
        x = len(t) / (sum(t) / 1000)
        print("%-34s %9.2f %9.2f %9.2f %11.2f %8.2f" % (
            name, q(f, 0.5), q(f, 0.99), statistics.mean(f), q(t, 0.5),
            x * statistics.mean(t) / 1000))
    print("(served from lancache: %d chunks; disk hits in the second pass: %d)" %
          (served, hits))



def part_b(tmp, tree, nfiles, nbytes, also=None, rounds=3):
    # B. import rate against cp -r, same tree, same disk, cold page cache, sync included;
    # three rounds in turn, the median of each
    print("\nB. %.1f MiB, %d files, page cache dropped, sync included, median of %d rounds" %
          (nbytes / 2**20, nfiles, rounds))
    ini = os.path.join(tmp, "b.ini")
    cache_b = os.path.join(tmp, "cache_b")
    with open(ini, "w") as f:
        f.write("[server]\nlisten = 127.0.0.1:1\nadmin_listen =\n[cache]\ndir = %s\n"
                "chunk_size = 1M\ndisk_size = 100G\nmin_free = 1G\nlancache_settle = 0\n"
                "[domains]\nallow_unlisted = yes\n[log]\naccess =\n" % cache_b)
    runs = {"cp -r": [], "import --copy --jobs 2": [], "import (move) --jobs 2": []}
    if also:
        runs["import (move) --jobs 2 [also]"] = []
    last = {}
    for _ in range(rounds):
        for name in runs:
            src = os.path.join(tmp, "tree_b")
            shutil.rmtree(src, ignore_errors=True)
            shutil.rmtree(cache_b, ignore_errors=True)
            dest = os.path.join(tmp, "cp_dest")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(tree, src)
            drop_caches()
            t0 = time.monotonic()
            if name == "cp -r":
                subprocess.run(["cp", "-r", src, dest], check=True)
            else:
                args = ["--jobs", "2"] + (["--copy"] if "--copy" in name else [])
                binary = also if "[also]" in name else CP
                r = subprocess.run([binary, "-c", ini, "import", src] + args,
                                   capture_output=True, text=True)
                assert r.returncode == 0, r.stderr
                last[name] = r.stdout.strip().splitlines()[-2]
            subprocess.run(["sync"], check=True)
            runs[name].append(time.monotonic() - t0)
    for name in last:
        print("   %s: %s" % (name, last[name]))
    if also:
        print("   [also]: %s" % also)
    cp_s = statistics.median(runs["cp -r"])
    print("%-28s %9s %9s %12s   %s" % ("", "seconds", "MiB/s", "rate vs cp", "rounds (s)"))
    for name, ts in runs.items():
        m = statistics.median(ts)
        print("%-28s %9.2f %9.1f %12.2f   %s" % (name, m, nbytes / 2**20 / m, cp_s / m,
                                               " ".join("%.2f" % t for t in ts)))
    shutil.rmtree(os.path.join(tmp, "tree_b"), ignore_errors=True)
    shutil.rmtree(cache_b, ignore_errors=True)



def loop_sched_delays(data, pid):
    """The loop thread's scheduling delays (ms) from a `perf sched record` file: how long it
    waited for core 0 each time it was woken (the loop's own view, apart from the probe's)."""
    out = subprocess.run(["perf", "sched", "timehist", "-i", data], capture_output=True,
                         text=True).stdout
    tag = "[%d]" % pid
    rows = (line.split() for line in out.splitlines())
    return [float(f[4]) for f in rows if len(f) >= 6 and f[2].endswith(tag)]


def part_c(tmp, oport, tree, modes, small, big, proxies, rounds, also):
    # C. heartbeat while moves run, against no moves: each run on a fresh copy of the tree, the
    # modes (and binaries) alternated in every round. The probe runs until the moves are done;
    # its samples are shown for the download (the same span in both modes) and for the whole run.
    perf = shutil.which("perf") is not None
    print("\nC. /lancache-heartbeat every 2 ms while one client downloads the tree through "
          "cacheparty (page cache dropped); %d rounds%s" %
          (rounds, "; loop = the loop thread's scheduling delay (perf sched)" if perf else ""))
    cols = ("round", "lancache_migrate", "MB/s", "n dl", "p99 dl", "max dl", "n all", "p99 all",
            "max all", "loop p99", "loop max")
    fmt = "%-6s %-18s %6s %6s %7s %7s %6s %7s %7s %8s %8s"
    rowfmt = "%-6s %-18s %6.0f %6d %7.2f %7.2f %6d %7.2f %7.2f %8.2f %8.2f"
    print(fmt % cols)
    runs = [(m, CP) for m in modes] + ([(m + " [also]", also) for m in modes] if also else [])
    res = {name: [] for name, _ in runs}
    rt_all = True
    for r in range(rounds):
        for name, binary in runs:
            mode = name.split()[0]
            tag = "%s%s_%d" % (mode, "_also" if "[also]" in name else "", r)
            tree_c, cache_c = os.path.join(tmp, "tree_c"), os.path.join(tmp, "cache_c")
            shutil.rmtree(tree_c, ignore_errors=True)
            shutil.rmtree(cache_c, ignore_errors=True)
            shutil.copytree(tree, tree_c)
            p = Proxy(tmp, "c_" + tag, oport, {"dir": cache_c, "lancache_dir": tree_c,
                                               "lancache_settle": "0", "lancache_migrate": mode},
                      binary=binary)
            proxies.append(p)
            drop_caches()
            rec, data = None, "/dev/shm/cp-lcbench-sched-%d.data" % os.getpid()
            loop = []
            try:
                if perf:  # (its file in memory: not on the disk under test)
                    rec = subprocess.Popen(["perf", "sched", "record", "-a", "-o", data],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                collect = run_probe(p.port)
                time.sleep(0.2)
                t0 = time.monotonic()
                ttfb_pass(p.port, small + big)
                t1 = time.monotonic()
                p.settle()
                rt, samples = collect()
                rt_all = rt_all and rt
                if rec is not None:
                    rec.send_signal(signal.SIGINT)
                    rec.wait(120)
                    loop = loop_sched_delays(data, p.proc.pid)
            finally:
                if rec is not None and rec.poll() is None:
                    rec.kill()
                    rec.wait()
                if os.path.exists(data):
                    os.unlink(data)
            m = p.metrics()
            p.stop()
            dl = [ms for st, ms in samples if t0 <= st <= t1]
            al = [ms for st, ms in samples]
            mb = sum(o[3] for o in small + big) / (t1 - t0) / 1e6
            nan = float("nan")
            row = (mb, len(dl), q(dl, 0.99) if dl else nan, max(dl) if dl else nan, len(al),
                   q(al, 0.99), max(al), q(loop, 0.99) if loop else nan,
                   max(loop) if loop else nan)
            res[name].append(row)
            print(rowfmt % ((r, name) + row) + "   (moved %d)" %
                  m.get('cacheparty_lancache_slices_total{result="migrated"}', 0), flush=True)
    for name, _ in runs:
        rows = res[name]
        med = [statistics.median(x[k] for x in rows) for k in range(len(rows[0]))]
        print(rowfmt % (("median", name) + tuple(med)))
    print("   dl: samples while the download ran; all: until the moves were done; probe at %s" %
          ("SCHED_FIFO" if rt_all else "normal priority (SCHED_FIFO refused in some runs)"))
    if also:
        print("   [also]: %s" % also)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=400)
    ap.add_argument("--big", type=int, default=4)
    ap.add_argument("--parts", default="ABC", help="which measurements (default ABC)")
    ap.add_argument("--modes", default="off,move", help="lancache_migrate values compared in C")
    ap.add_argument("--dir", default=None,
                    help="where the trees and caches are made (default: $TMPDIR or /tmp)")
    ap.add_argument("--also", default=None,
                    help="B, C: a second cacheparty binary timed beside, in the same rounds "
                         "(before/after)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="B, C: rounds of each method, alternated (default 3)")
    a = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists(B.NGINX):
        sys.exit("bench/lancache.py needs root (drop_caches) and nginx (make deps)")
    subprocess.run(["make", "--no-print-directory", "-C", ROOT, "all", BUILD + "/bench/origin"],
                   check=True, stdout=subprocess.DEVNULL)
    os.sched_setaffinity(0, {1})
    tmp = tempfile.mkdtemp(prefix="cp-lcbench.", dir=a.dir)
    print("filesystem of %s: %s" % (tmp, mount_of(tmp)))
    oport = H.free_port()
    origin = subprocess.Popen(["taskset", "-c", "1", ORIGIN, "-l", "127.0.0.1:%d" % oport,
                               "-d", "0", "-r", "0", "-t", "3600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxies = []
    try:
        small = [(STEAM_HOST, UA, "/1M/depot/%d/chunk/%040x" % (i, i), 1 << 20)
                 for i in range(a.small)]
        big = [("dl.bench.example", None, "/64M/big/%d" % i, 64 << 20) for i in range(a.big)]
        ngx = B.Nginx(tmp, oport)
        t0 = time.monotonic()
        for host, ua, path, size in small + big:
            st, body = ngx.get(host, path, ua)
            assert st == 200 and len(body) == size, (st, path)
        fill_s = time.monotonic() - t0
        ngx.stop()
        tree = ngx.cache
        nfiles, nbytes = tree_bytes(tree)
        print("tree: %d nginx files, %.1f MiB (filled through nginx in %.1f s)" %
              (nfiles, nbytes / 2**20, fill_s))
        modes = a.modes.split(",")

        if "A" in a.parts:
            part_a(tmp, oport, tree, small, proxies)
        if "B" in a.parts:
            part_b(tmp, tree, nfiles, nbytes, a.also, a.rounds)
        if "C" in a.parts:
            part_c(tmp, oport, tree, modes, small, big, proxies, a.rounds, a.also)
    finally:
        for p in proxies:
            if p.proc.poll() is None:
                p.proc.kill()
        origin.terminate()
        origin.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
