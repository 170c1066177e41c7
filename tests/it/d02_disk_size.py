# SPDX-License-Identifier: BSD-2-Clause
"""d02: disk_size is respected (issue 4): filling three times disk_size through the proxy keeps
the chunk files under the cache dir within disk_size (plus one chunk file of slack) at sampled
points and at the end, every body is correct, and the most recently fetched object stays on disk
(a HIT, also after a restart); an object read again and again survives while colder ones are
evicted (least recently used first); a restart with a smaller disk_size evicts the least
recently used files in the background, the newest staying. The memory tier is kept small
(memory_size 1M) so that hits come from disk."""

import os

import harness as H

K64 = 64 * H.KIB
DISK = 4 * H.MIB
OBJ = 5 * K64 - 1000             # 5 chunks of 64 KiB, the last one short
N_FILL = -(-3 * DISK // OBJ)     # objects totalling 3 x disk_size
SLACK = K64 + 4 * H.KIB          # one chunk file (body + header) being written
WAIT = 10 * H.SLOW               # eviction runs from the loop, just after the write


def disk_usage(cache_dir):
    """(bytes, files): apparent size of every file under <cache_dir> except tmp/, the marker and
    the dashboard's state file.
    Files the daemon deletes during the walk are skipped."""
    H.settle_all_disks()
    total = files = 0
    for root, dirs, names in os.walk(cache_dir):
        if root == cache_dir:
            dirs[:] = [d for d in dirs if d != "tmp"]
        for n in names:
            if root == cache_dir and n in ("cacheparty.cache", "cacheparty-live.state",
                                           "cacheparty-live.state.tmp"):
                continue
            try:
                total += os.lstat(os.path.join(root, n)).st_size
                files += 1
            except FileNotFoundError:
                pass
    return total, files


class Base(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.cache = os.path.join(self._tmp, "shared-cache")
        os.makedirs(self.cache)
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        self.daemon = None

    def run_daemon(self, disk_size=DISK):
        ov = {"cache": {"dir": self.cache, "chunk_size": "64K", "memory_size": "1M",
                        "disk_size": str(disk_size)}}
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        return self.daemon

    def restart(self, disk_size=DISK):
        rc = self.daemon.stop()
        self.assertEqual(rc, 0, "daemon exited with %s on SIGTERM" % rc)
        return self.run_daemon(disk_size)

    def download(self, p, status=None, total=OBJ):
        c = self.client(timeout=60)
        c.request(p)
        r = c.read_response()
        c.close()                   # max_connections is 64 in the harness
        self.assertStatus(r, 200)
        self.assertEqual(r.length, total)
        self.assertBody(r, p, total=total)
        if status is not None:
            self.assertEqual(r.header("X-Upstream-Cache-Status"), status, p)
        return r

    def stored(self, p):
        key = H.cache_key(p)
        return sorted(i for (k, i) in H.chunk_index(self.cache) if k == key)

    def assertWithin(self, limit, when):
        """The chunk files fit in <limit> (+ SLACK) once the daemon's eviction has run."""
        try:
            H.wait_until(lambda: disk_usage(self.cache)[0] <= limit + SLACK, WAIT,
                         what="disk usage <= %d" % (limit + SLACK))
        except AssertionError:
            used, files = disk_usage(self.cache)
            self.fail("%s: %d bytes in %d chunk files under the cache dir, limit %d + %d slack"
                      % (when, used, files, limit, SLACK))

    def assertHitFromDisk(self, p):
        """All of <p>'s chunks are files on disk, and a download is a HIT with no upstream
        request."""
        self.assertEqual(self.stored(p), list(range(5)), "%s not wholly on disk" % p)
        k = self.origin.request_count()
        self.download(p, "HIT")
        self.assertEqual(self.origin.request_count(), k, "%s went upstream" % p)


class DiskSize(Base):
    def test_fill_three_times_disk_size(self):
        self.run_daemon()
        paths = []
        for i in range(N_FILL):
            p = "/d02/fill/%03d/size/%d" % (i, OBJ)
            self.download(p, "MISS")
            paths.append(p)
            if i % 5 == 4:
                self.assertWithin(DISK, "after %d objects (%d bytes)" % (i + 1, (i + 1) * OBJ))
        self.assertWithin(DISK, "at the end")
        used, files = disk_usage(self.cache)
        self.assertGreaterEqual(used, DISK // 2, "the cache was emptied rather than trimmed")
        self.assertHitFromDisk(paths[-1])
        self.restart()
        self.assertWithin(DISK, "after a restart")
        self.assertHitFromDisk(paths[-1])

    def test_hot_object_survives(self):
        self.run_daemon()
        hot = "/d02/hot/size/%d" % OBJ
        self.download(hot, "MISS")
        for i in range(N_FILL):
            self.download("/d02/cold/%03d/size/%d" % (i, OBJ), "MISS")
            self.download(hot, "HIT")
        self.assertWithin(DISK, "at the end")
        self.assertHitFromDisk(hot)
        # the first cold objects, least recently used, are gone from disk
        self.assertEqual(self.stored("/d02/cold/000/size/%d" % OBJ), [])
        self.restart()
        self.assertHitFromDisk(hot)


class Restart(Base):
    def test_smaller_disk_size_evicts_at_start(self):
        self.run_daemon()
        paths = []
        for i in range(8):           # 40 chunk files, about 2.6 MB
            p = "/d02/shrink/%03d/size/%d" % (i, OBJ)
            self.download(p, "MISS")
            paths.append(p)
        before, files = disk_usage(self.cache)
        self.assertEqual(files, 40)
        self.assertGreater(before, 2 * H.MIB)
        self.restart(disk_size=H.MIB)
        self.assertWithin(H.MIB, "after a restart with disk_size 1M")
        self.assertHitFromDisk(paths[-1])
        self.assertEqual(self.stored(paths[0]), [], "the least recently used object was kept")
        self.assertTrue(self.daemon.running())


if __name__ == "__main__":
    raise SystemExit(H.main())
