#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Crash-consistency soak (issue #7): never serve a wrong byte across kill -9 and disk damage.

The bench origin ($BUILD/bench/origin, content of bench/pattern.h) serves objects through the
daemon, configured with a small chunk_size and little memory so that chunks go to disk. Each
cycle: start the daemon on the same cache directory, let concurrent clients fetch whole objects
and ranges and verify every byte they receive, kill -9 the daemon at a random moment, then
damage random chunk files (truncate, zero, flip a byte, swap two files, extend) and leave
temporary files under tmp/. A final pass reads every object whole through a fresh daemon, which
must then exit 0 on SIGTERM.

A short body (the daemon was killed mid-response) is fine and counted; a wrong byte, a daemon
that died on its own, a sanitizer report or a failed final pass are failures.

Usage: BUILD=build python3 tests/soak/soak.py [--cycles N] [--seed S] [--clients K] [--quiet]
Exit 0 when no byte was wrong; the last line is a summary with the counts.
"""

import argparse
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "it"))
import harness as H  # noqa: E402

M64 = (1 << 64) - 1
PAT_TABLE_WORDS = 8191
CHUNK = 64 * 1024
HOST = "soak.example.test"


def pat_table():
    t = []
    s = 0x6361636865706172
    for _ in range(PAT_TABLE_WORDS):
        s = (s + 0x9e3779b97f4a7c15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        t.append(z ^ (z >> 31))
    return t


def pat_seed(path):
    h = 0xcbf29ce484222325
    for ch in path.split("?", 1)[0].encode("latin-1"):
        h ^= ch
        h = (h * 0x100000001b3) & M64
    return h


def pat_object(table, path, size):
    """The whole body bench/origin serves for <path> (bench/pattern.h)."""
    seed = pat_seed(path)
    n = (size + 7) // 8
    words = [table[i % PAT_TABLE_WORDS] ^ ((seed + i) & M64) for i in range(n)]
    return struct.pack("<%dQ" % n, *words)[:size]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.complete = 0
        self.short = 0
        self.refused = 0
        self.bytes_verified = 0
        self.wrong = []
        self.statuses = {}

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def fetch(port, objects, expected, rnd, st):
    """One request for a random object or range; verifies whatever bytes arrive."""
    path, size = rnd.choice(objects)
    want = expected[path]
    kind = rnd.random()
    headers = []
    start, end = 0, size
    if kind < 0.4:
        a = rnd.randrange(size)
        b = min(size - 1, a + rnd.randrange(1, 3 * CHUNK))
        headers.append(("Range", "bytes=%d-%d" % (a, b)))
        start, end = a, b + 1
    elif kind < 0.5:
        n = rnd.randrange(1, size + 1)
        headers.append(("Range", "bytes=-%d" % n))
        start, end = size - n, size
    try:
        c = H.Client(port, timeout=10)
    except OSError:
        st.add(refused=1)
        return
    try:
        c.request(path, host=HOST, headers=headers)
        try:
            r = c.read_response()
            body = bytes(r.body)
            complete = True
        except H.ProtocolError:
            r = c.partial
            body = bytes(r.body) if r is not None else b""
            complete = False
        except (OSError, socket.timeout):
            st.add(requests=1, short=1)
            return
    finally:
        c.close()
    if r is None:
        st.add(requests=1, short=1)
        return
    with st.lock:
        st.statuses[r.status] = st.statuses.get(r.status, 0) + 1
    if r.status not in (200, 206):
        st.add(requests=1)
        return
    if r.status == 200:
        start, end = 0, size
    else:
        cr = r.header("Content-Range") or ""
        try:
            a, rest = cr.split(" ", 1)[1].split("-", 1)
            b, total = rest.split("/", 1)
            start, end = int(a), int(b) + 1
            if int(total) != size:
                raise ValueError
        except (IndexError, ValueError):
            with st.lock:
                st.wrong.append((path, "bad Content-Range %r" % cr))
            return
    ref = want[start:end]
    if complete and len(body) != len(ref):
        with st.lock:
            st.wrong.append((path, "complete body of %d bytes, want %d" % (len(body), len(ref))))
        return
    if body != ref[:len(body)]:
        i = H.first_mismatch(body, ref[:len(body)])
        with st.lock:
            st.wrong.append((path, "byte %d of %d-%d differs" % (start + i, start, end)))
        return
    st.add(requests=1, complete=1 if complete else 0, short=0 if complete else 1,
           bytes_verified=len(body))


def client_loop(port, objects, expected, rnd, st, stop):
    while not stop.is_set():
        fetch(port, objects, expected, rnd, st)


def damage(cache_dir, rnd, tally):
    """Damages a few random chunk files and leaves temporary files; returns what was done."""
    files = H.chunk_files(cache_dir)
    files = [f for f in files if os.path.basename(f) not in ("cacheparty.cache",)]
    if not files:
        return
    for _ in range(rnd.randint(1, 4)):
        f = rnd.choice(files)
        if not os.path.exists(f):
            continue
        how = rnd.choice(["truncate", "zero", "flip", "swap", "extend", "tmp"])
        size = os.path.getsize(f)
        try:
            if how == "truncate":
                os.truncate(f, rnd.randrange(size + 1) if size else 0)
            elif how == "zero":
                a = rnd.randrange(size + 1)
                with open(f, "r+b") as fh:
                    fh.seek(a)
                    fh.write(b"\0" * rnd.randint(1, max(1, size - a)))
            elif how == "flip" and size > 0:
                i = rnd.randrange(size)
                with open(f, "r+b") as fh:
                    fh.seek(i)
                    b = fh.read(1)
                    fh.seek(i)
                    fh.write(bytes([b[0] ^ (1 << rnd.randrange(8))]))
            elif how == "swap":
                g = rnd.choice(files)
                if g != f and os.path.exists(g):
                    tmp = f + ".swap"
                    os.rename(f, tmp)
                    os.rename(g, f)
                    os.rename(tmp, g)
            elif how == "extend":
                with open(f, "ab") as fh:
                    fh.write(os.urandom(rnd.randint(1, 100)))
            elif how == "tmp":
                # left-over temporary files: a copy of a real chunk, garbage, an empty one
                shard = os.path.dirname(os.path.dirname(os.path.dirname(f)))
                tdir = os.path.join(shard, "tmp")
                os.makedirs(tdir, exist_ok=True)
                base = os.path.basename(f).split(".")[0]
                shutil.copyfile(f, os.path.join(tdir, "%s.%d.%d" % (base, rnd.randrange(99),
                                                                    rnd.randrange(1 << 30))))
                with open(os.path.join(tdir, "%s.0.%d" % (base, rnd.randrange(1 << 30))),
                          "wb") as fh:
                    fh.write(os.urandom(rnd.randrange(1, 3 * CHUNK)))
                open(os.path.join(tdir, "%s.1.%d" % (base, rnd.randrange(1 << 30))), "wb").close()
            else:
                continue
        except OSError:
            continue
        tally[how] = tally.get(how, 0) + 1


def start_daemon(tmp, origin_port):
    d = H.Daemon(tmp, {
        "server": {"max_connections": "256", "request_timeout": "5s", "shutdown_timeout": "5s"},
        "upstream": {"override": "127.0.0.1:%d" % origin_port, "allow_private": "yes",
                     "first_byte_timeout": "5s", "read_timeout": "5s"},
        "cache": {"chunk_size": "64K", "memory_size": "2M"},
        "log": {"level": "info", "access": ""},
        "server.admin_listen": "auto",
    }, start=False)
    d.start()
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=int(os.environ.get("SOAK_CYCLES") or 100))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED") or 0) or None)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--objects", type=int, default=24)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    origin_bin = os.path.join(H.ROOT, H.BUILD, "bench", "origin")
    if not os.access(origin_bin, os.X_OK):
        print("soak: %s missing (make test-bins)" % origin_bin)
        return 2
    table = pat_table()
    objects = []
    for i in range(args.objects):
        size = rnd.choice([1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17,
                           rnd.randrange(1, 12 * CHUNK)])
        objects.append(("/soak/%d/o%d.bin" % (size, i), size))
    # (the bench origin takes an object's size from the first numeric segment of its path)
    expected = {p: pat_object(table, p, s) for p, s in objects}

    tmp = tempfile.mkdtemp(prefix="cp-soak-")
    portfile = os.path.join(tmp, "origin.port")
    origin = subprocess.Popen([origin_bin, "-d", "0", "-r", "0", "-P", portfile, "-t", "7200"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = Stats()
    tally = {}
    failures = []
    integrity = 0   # chunk files the daemon found damaged (counted until each kill)
    t0 = time.monotonic()
    try:
        H.wait_until(lambda: os.path.exists(portfile) and open(portfile).read().strip(), 10,
                     what="the bench origin")
        oport = int(open(portfile).read().strip())
        cache_dir = os.path.join(tmp, "cache")
        for cycle in range(args.cycles):
            d = start_daemon(tmp, oport)
            stop = threading.Event()
            threads = [threading.Thread(target=client_loop, daemon=True,
                                        args=(d.port, objects, expected,
                                              random.Random(rnd.random()), st, stop))
                       for _ in range(args.clients)]
            for t in threads:
                t.start()
            time.sleep(rnd.uniform(0.2, 1.2))
            if not d.running():
                failures.append("cycle %d: the daemon exited by itself (%s):\n%s"
                                % (cycle, d.proc.poll(), d.log_tail(30)))
                stop.set()
                break
            try:
                m = d.metrics()
                integrity += int(m.get("cacheparty_integrity_failures_total", 0))
            except (OSError, H.ProtocolError, socket.timeout):
                pass
            os.kill(d.pid, signal.SIGKILL)
            d.proc.wait()
            stop.set()
            for t in threads:
                t.join(30)
            if d.sanitizer_report():
                failures.append("cycle %d: sanitizer report:\n%s" % (cycle, d.log_tail(60)))
            d.logf.close()
            damage(cache_dir, rnd, tally)
            if not args.quiet:
                print("cycle %d: %d requests, %d complete, %d short, %d bytes verified, "
                      "%d wrong" % (cycle + 1, st.requests, st.complete, st.short,
                                    st.bytes_verified, len(st.wrong)), flush=True)
            if st.wrong:
                break
        # final pass: every object whole, then a clean stop
        if not failures and not st.wrong:
            d = start_daemon(tmp, oport)
            for path, size in objects:
                c = H.Client(d.port, timeout=30)
                c.request(path, host=HOST)
                r = c.read_response()
                c.close()
                if r.status != 200 or bytes(r.body) != expected[path]:
                    failures.append("final pass: %s: status %d, %d bytes, first wrong byte %s"
                                    % (path, r.status, len(r.body),
                                       H.first_mismatch(bytes(r.body), expected[path])))
                else:
                    st.add(bytes_verified=size)
            rc = d.stop()
            if rc != 0:
                failures.append("final pass: daemon exited %s:\n%s" % (rc, d.log_tail(30)))
            if d.sanitizer_report():
                failures.append("final pass: sanitizer report:\n%s" % d.log_tail(60))
            d.logf.close()
    finally:
        origin.send_signal(signal.SIGTERM)
        try:
            origin.wait(10)
        except subprocess.TimeoutExpired:
            origin.kill()
        H._kill_all_daemons()
        if failures or st.wrong:
            print("soak: kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for p, why in st.wrong[:20]:
        print("WRONG BYTES: %s: %s" % (p, why))
    for f in failures:
        print("FAILED: " + f)
    print("soak: seed %d, %d cycles, %d requests (%d complete, %d short, %d refused), "
          "%d bytes served and verified, %d wrong, damage %s, integrity failures detected %d, "
          "statuses %s, %.0fs"
          % (seed, args.cycles, st.requests, st.complete, st.short, st.refused,
             st.bytes_verified, len(st.wrong), dict(sorted(tally.items())), integrity,
             dict(sorted(st.statuses.items())), time.monotonic() - t0))
    return 1 if failures or st.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
