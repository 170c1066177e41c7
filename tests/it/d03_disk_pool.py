# SPDX-License-Identifier: BSD-2-Clause
"""d03: the disk tier's I/O pool (issue 4) and disk faults (issue 7): chunk files are read and
written by worker threads; a PURGE that lands while a chunk is still filling (or its file is being
written) leaves no file behind; a cache dir whose filesystem is full switches to pass-through
(clients still get the origin's exact bytes, nothing half-written is kept, /metrics says so);
many clients asking at once for a chunk that is only on disk share one lookup."""

import os
import subprocess
import threading

import harness as H
from c02_coalesce import Paced

CS = 256 * H.KIB


class Base(H.CPTestCase):
    def cache_dir(self):
        return self.daemon.cfg("cache", "dir")

    def stored(self, p):
        key = H.cache_key(p)
        return {i: inf for (k, i), inf in H.chunk_index(self.cache_dir()).items() if k == key}

    def reqs(self, p):
        return [r for r in list(self.origin.requests) if r.path == H.path_of(p)]

    def full(self, p, status=None, total=None):
        c = self.client(timeout=60)
        c.request(p)
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=total)
        if status is not None:
            self.assertEqual(r.header("X-Upstream-Cache-Status"), status, r.raw_head)
        return r

    def metric(self, name):
        return self.daemon.metrics().get(name, 0.0)


class PurgeWhileFilling(Base):
    def test_purge_during_fill_leaves_no_file(self):
        self.setup_proxy({"cache": {"chunk_size": "256K"}})
        total = CS  # one chunk: the purge cannot race a later chunk's new fill
        paced = Paced(total, cs=CS)
        self.addCleanup(paced.release.set)
        self.origin.route("/d03/purge/", paced)
        p = "/d03/purge/obj"
        c = self.client(timeout=60)
        c.request(p)
        head = c.read_head()
        self.assertStatus(head, 200)
        self.assertTrue(paced.holding.wait(10 * H.SLOW), "the origin never got the chunk")
        a = H.Client(self.daemon.admin_port)
        self._clients.append(a)
        a.request(p, method="PURGE", host=H.DEFAULT_HOST)
        self.assertStatus(a.read_response(), 200)
        paced.release.set()
        resp = c.finish_response(head)
        self.assertBody(resp, p, total=total)  # a request from before the PURGE completes
        self.assertEqual(self.stored(p), {}, "a chunk purged while it filled was stored")
        n = len(self.reqs(p))
        self.full(p, "MISS", total=total)
        self.assertEqual(len(self.reqs(p)), n + 1, "the purged object was not fetched again")
        self.assertEqual(sorted(self.stored(p)), [0])  # and this time it is stored


class SharedDiskLookup(Base):
    def test_concurrent_readers_of_a_disk_chunk_share_one_lookup(self):
        self.setup_proxy({"cache": {"chunk_size": "256K"}})
        p = "/d03/shared/size/%d" % (4 * CS)
        self.full(p, "MISS")
        self.assertEqual(sorted(self.stored(p)), [0, 1, 2, 3])
        self.daemon.stop()
        self.daemon.start()  # memory empty: every chunk is only on disk
        before = len(self.reqs(p))
        n = 16
        barrier = threading.Barrier(n)
        results, errors = [None] * n, []

        def worker(i):
            try:
                c = H.Client(self.daemon.port, timeout=60)
                barrier.wait(30 * H.SLOW)
                c.request(p)
                results[i] = c.read_response()
                c.close()
            except Exception as e:  # reported below
                errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60 * H.SLOW)
        self.assertEqual(errors, [])
        for r in results:
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(len(self.reqs(p)), before, "a disk hit went to the origin")
        m = self.daemon.metrics()
        # Each chunk read from disk at most once per concurrent wave: 4 chunks, 16 clients.
        self.assertLessEqual(m["cacheparty_cache_hits_total{tier=\"disk\"}"], 4 * n)
        self.assertGreaterEqual(m["cacheparty_cache_hits_total{tier=\"disk\"}"], 4)


class DiskFull(Base):
    """The cache dir on a tmpfs of a few chunks: the first stores fill it, then ENOSPC."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("mounting a small tmpfs needs root")
        self.mnt = os.path.join(self._tmp, "small")
        os.makedirs(self.mnt)
        rc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=640k", "cp-d03", self.mnt],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if rc.returncode != 0:
            self.skipTest("cannot mount a tmpfs here: %s" % rc.stdout.decode(errors="replace"))
        self.addCleanup(subprocess.run, ["umount", "-l", self.mnt])

    def test_full_disk_goes_pass_through(self):
        cache = os.path.join(self.mnt, "cache")
        self.setup_proxy({"cache": {"dir": cache, "chunk_size": "256K", "memory_size": "4M",
                                    "disk_size": "100M", "min_free": "0"}})
        paths = ["/d03/full/%d/size/%d" % (i, 4 * CS + 1000) for i in range(3)]
        for p in paths:
            self.full(p)  # correct bytes whatever the disk does
        H.wait_until(lambda: self.metric("cacheparty_cache_dirs_down") == 1, 10 * H.SLOW,
                     what="cache dir switched to pass-through")
        self.assertGreaterEqual(self.metric('cacheparty_errors_total{kind="disk_write"}'), 1)
        self.assertIn("serving new chunks without storing them", self.daemon.log())
        # Nothing half-written is kept: every chunk file there parses and has its full length.
        for path in H.chunk_files(cache):
            info = H.chunk_file_info(path)
            self.assertIsNotNone(info, "unparsable chunk file %s" % path)
            self.assertEqual(os.path.getsize(path), info["hdr_len"] + info["data_len"], path)
        self.assertEqual(os.listdir(os.path.join(cache, "tmp")), [])
        # Still serving: each object's bytes from memory or from the origin, never wrong.
        for p in paths:
            self.full(p)
        self.assertTrue(self.daemon.running())


class DiskReadErrors(Base):
    """The cache dir on a FUSE filesystem (tests/it/eiofs.py) that can make every chunk file read
    fail with EIO, as a failing disk does: the dir's chunks then come from the origin, correct;
    the dir is reported down; no chunk file is deleted as if it were corrupt."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("mounting a FUSE filesystem needs root")
        self.backing = os.path.join(self._tmp, "backing")
        self.mnt = os.path.join(self._tmp, "fuse")
        self.control = os.path.join(self._tmp, "eio-on")
        os.makedirs(self.backing)
        os.makedirs(self.mnt)
        here = os.path.dirname(os.path.abspath(__file__))
        self.fs = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "eiofs.py"),
                                    self.backing, self.mnt, self.control],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(self.unmount)
        try:
            H.wait_until(lambda: os.path.ismount(self.mnt) or self.fs.poll() is not None,
                         10 * H.SLOW, what="FUSE mount")
        except AssertionError:
            pass
        if not os.path.ismount(self.mnt):
            out = self.fs.stdout.read().decode(errors="replace") if self.fs.poll() is not None \
                else "no mount after 10 s"
            self.skipTest("cannot mount a FUSE filesystem here (python3-fusepy, /dev/fuse): %s"
                          % out[-300:])

    def unmount(self):
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if self.fs.poll() is None:
            self.fs.kill()
        self.fs.wait()

    def test_read_errors_go_to_the_origin(self):
        self.read_errors("")

    def test_read_errors_in_the_body_are_not_corruption(self):
        self.read_errors("body")  # the header reads fine; verifying the body fails with EIO

    def read_errors(self, mode):
        cache = os.path.join(self.mnt, "cache")
        self.setup_proxy({"cache": {"dir": cache, "chunk_size": "64K", "memory_size": "4M"}})
        p = "/d03/eio/size/%d" % (3 * 64 * 1024 + 500)
        self.full(p, "MISS")
        self.assertEqual(sorted(self.stored(p)), [0, 1, 2, 3])
        files = sorted(H.chunk_files(cache))
        self.daemon.stop()
        self.daemon.start()  # memory empty: every chunk must come from the disk, or the origin
        n = len(self.reqs(p))
        with open(self.control, "w") as f:
            f.write(mode)  # from now on chunk file reads fail with EIO
        self.full(p)  # the origin's bytes, whatever the disk does
        self.assertGreater(len(self.reqs(p)), n, "served without reading the disk or the origin")
        m = self.daemon.metrics()
        self.assertEqual(m.get("cacheparty_cache_dirs_down"), 1)
        self.assertEqual(m.get("cacheparty_integrity_failures_total"), 0,
                         "a read error was taken for a damaged file")
        self.assertIn("serving its chunks from the origin", self.daemon.log())
        os.unlink(self.control)
        self.assertEqual(sorted(H.chunk_files(cache)), files, "chunk files deleted on EIO")
        self.full(p)  # still serving (the dir is retried after 30 s; until then, the origin)


if __name__ == "__main__":
    raise SystemExit(H.main())
