# SPDX-License-Identifier: BSD-2-Clause
"""b26: the dashboard's bounds on a large set (README "Memory"): 100,000 stored objects, planted
by tests/tools/plant as the daemon writes chunk files (on tmpfs, /dev/shm: a disk would take
minutes), and 10,000 client addresses (one connection from each of 10,000 addresses of
127.0.0.0/8) keep the daemon's peak VmRSS within the stated bound; the inventory's totals are the
planted files, per service and per depot, and /api/inventory answers within a bound of time on
that set (a generous one: it takes milliseconds); a depot's objects are listed from their files.
Skipped when /dev/shm cannot hold the set (about 400 MiB)."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.parse

import harness as H

N = 100000
DEPOTS = 1000
CLIENTS = 10000
MEMORY = 4 * H.MIB
ANSWERS = 1 * H.MIB
PER_FILE = 48  # README "Memory": bytes of the disk index per chunk file, at most
BASE = 16 * H.MIB  # README "Memory": the program, its threads, the dashboard's tables
INVENTORY_TIME_S = 2.0
PLANT = os.path.join(H.ROOT, H.BUILD, "tests", "tools", "plant")


def shm_free():
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def peak_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


@unittest.skipUnless(shm_free() >= 600 * H.MIB, "/dev/shm has less than 600 MiB free")
class Bounds(H.CPTestCase):
    def api(self, target):
        r = self.daemon.admin_get(target)
        self.assertStatus(r, 200)
        return json.loads(bytes(r.body))

    def test_100k_objects_and_10k_clients_within_the_bounds(self):
        shm = tempfile.mkdtemp(prefix="cp-b26-", dir="/dev/shm")
        self.addCleanup(shutil.rmtree, shm, True)
        cache = os.path.join(shm, "cache")
        os.makedirs(cache)
        out = subprocess.run([PLANT, cache, str(N), str(DEPOTS)], check=True,
                             stdout=subprocess.PIPE, timeout=300).stdout.decode()
        self.assertIn("planted %d files" % N, out)
        self.setup_proxy({"server": {"admin_listen": "auto"},
                          "cache": {"dir": cache, "memory_size": "4M", "answers_memory": "1M",
                                    "min_free": "0"}})
        H.wait_until(lambda: self.api("/api/inventory")["complete"], 120 * H.SLOW, 0.1,
                     "the inventory of the planted files")
        t0 = time.monotonic()
        inv = self.api("/api/inventory")
        took = time.monotonic() - t0
        print("    /api/inventory on %d files, %d groups: %.1f ms, %d bytes" %
              (inv["chunks"], inv["groups_total"], took * 1000, len(json.dumps(inv))))
        self.assertLess(took, INVENTORY_TIME_S * H.SLOW)
        self.assertEqual(inv["chunks"], N)
        self.assertEqual(inv["unread_chunks"], 0)
        self.assertEqual(inv["groups_total"], DEPOTS + 16)
        svc = {s["service"]: s for s in inv["services"]}
        self.assertEqual(svc["steam"]["chunks"], N // 4 * 3)
        self.assertEqual(svc["steam"]["groups"], DEPOTS)
        self.assertEqual(svc["blizzard"]["chunks"], N - N // 4 * 3)
        self.assertEqual(len(inv["groups"]), 500)  # the largest 500 of 1016
        self.assertEqual(inv["groups_matched"], DEPOTS + 16)
        groups = {(g["service"], g["prefix"]): g["chunks"] for g in inv["groups"]}
        self.assertEqual(groups[("blizzard", "/tpr/game0/")], (N - N // 4 * 3) // 16)
        self.assertEqual(inv["bytes"], self.daemon.metrics()['cacheparty_cache_bytes{tier="disk"}'])
        # The index's own accounting: within its bound per file; the group table far from its 16 MiB.
        self.assertLessEqual(inv["index_memory_bytes"], PER_FILE * N + inv["inventory_memory_bytes"])
        self.assertLess(inv["inventory_memory_bytes"], 16 * H.MIB)
        # One depot's objects, read from their files.
        target = "/api/objects?" + urllib.parse.urlencode({"service": "steam",
                                                           "prefix": "/depot/1007/"})
        r = H.wait_until(lambda: (lambda x: x if x.status != 202 else None)(
            self.daemon.admin_get(target)), 30 * H.SLOW, 0.05, "the listing")
        self.assertStatus(r, 200)
        objs = json.loads(bytes(r.body))["objects"]
        self.assertEqual(len(objs), N // 4 * 3 // DEPOTS)
        self.assertEqual(sorted(o["path"] for o in objs),
                         sorted("/depot/1007/chunk/%040x" % i
                                for i in range(7, N // 4 * 3, DEPOTS)))
        # 10,000 client addresses, one connection each, every answer a hit after the first.
        path = "/b26/small/size/1000"
        for i in range(CLIENTS):
            src = "127.%d.%d.%d" % (10 + i // 65536, (i // 256) % 256, 1 + i % 250)
            c = H.Client(self.daemon.port, source=src)
            # The daemon closes first: no client socket is left in TIME_WAIT on 127.10.x.y:port
            # (it would keep later tests from binding 0.0.0.0 on that port).
            c.request(path, headers=[("Connection", "close")])
            resp = c.read_response()
            self.assertTrue(c.wait_closed(), "the daemon closes after Connection: close")
            c.close()
            self.assertStatus(resp, 200)
        self.assertEqual(self.origin.request_count(), 1)
        live = self.api("/api/live")
        self.assertEqual(len(live["clients"]), 256)
        self.assertEqual(sum(1 for _ in self.api("/api/inventory")["services"]), 3)
        # The daemon's peak: within memory_size + answers_memory + 48 B per file + the group
        # table + 16 MiB, with one connection open at a time (each open one adds its buffers).
        inv = self.api("/api/inventory")
        bound = MEMORY + ANSWERS + PER_FILE * inv["chunks"] + inv["inventory_memory_bytes"] + BASE
        peak = peak_rss(self.daemon.pid)
        print("    peak VmRSS %.1f MiB (bound %.1f MiB: memory_size 4M, answers_memory 1M, "
              "%d chunk files, group table %d KiB)" % (peak / H.MIB, bound / H.MIB, inv["chunks"],
                                                       inv["inventory_memory_bytes"] // 1024))
        if not H.SANITIZED:
            self.assertLess(peak, bound)


if __name__ == "__main__":
    H.main()
