# SPDX-License-Identifier: BSD-2-Clause
"""d01: the disk tier across restarts (issue 4): a restarted daemon serves what the last one
stored without asking the origin; every kind of damaged chunk file found after a restart is
refetched (only that chunk) and replaced by a valid one; tmp/ is emptied at start; a cache dir
written with another chunk_size is refused; a cache dir that cannot be written is not fatal."""

import os
import shutil

import harness as H

K64 = 64 * H.KIB
N = 5 * K64 + 1000          # 6 chunks of 64 KiB, the last one short
DAMAGED = 2                 # the chunk the corruption tests damage


class Base(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.cache = os.path.join(self._tmp, "shared-cache")
        os.makedirs(self.cache)
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        self.daemon = None

    def run_daemon(self, chunk_size="64K"):
        """A new daemon on the shared cache dir (the previous one must be stopped)."""
        ov = {"cache": {"dir": self.cache, "chunk_size": chunk_size}}
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        return self.daemon

    def stop_daemon(self):
        rc = self.daemon.stop()
        self.assertEqual(rc, 0, "daemon exited with %s on SIGTERM" % rc)

    def restart(self, chunk_size="64K"):
        self.stop_daemon()
        return self.run_daemon(chunk_size)

    def reqs(self, p):
        return [r for r in list(self.origin.requests) if r.path == H.path_of(p)]

    def stored(self, p):
        key = H.cache_key(p)
        return {i: inf for (k, i), inf in H.chunk_index(self.cache).items() if k == key}

    def download(self, p, status=None, total=N):
        c = self.client(timeout=60)
        c.request(p)
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(r.length, total)
        self.assertBody(r, p, total=total)
        if status is not None:
            self.assertEqual(r.header("X-Upstream-Cache-Status"), status)
        return r

    def assertValidChunk(self, p, index, total=N, cs=K64):
        inf = self.stored(p).get(index)
        self.assertIsNotNone(inf, "no valid chunk file for %s chunk %d" % (p, index))
        start = index * cs
        end = min(total, start + cs)
        self.assertEqual(inf["magic"], H.CHUNK_FILE_MAGIC)
        self.assertEqual(inf["chunk_size"], cs)
        self.assertEqual(inf["total"], total)
        self.assertEqual(inf["data_len"], end - start)
        self.assertEqual(inf["size"], inf["hdr_len"] + inf["data_len"])
        self.assertEqual(H.chunk_file_body(inf), H.content(p, start, end))
        return inf

    def wait_stored(self, p, n=6, etag=None):
        """Wait until chunks 0..n-1 of <p> are on disk (a response can end before its last chunk
        is sealed and written), with <etag> when given."""
        def ok():
            st = self.stored(p)
            return all(i in st and (etag is None or st[i]["etag"] == etag) for i in range(n))
        H.wait_until(ok, 10 * H.SLOW, 0.02, "%d chunk files of %s" % (n, p))
        return self.stored(p)

    def new_chunks(self, since, total=N, cs=K64):
        """Chunk indexes the origin was asked for since request number <since>."""
        return H.fetched_chunks(list(self.origin.requests)[since:], total, cs)

    def tmp_entries(self):
        return sorted(os.listdir(os.path.join(self.cache, "tmp")))


class Restart(Base):
    def test_restart_then_hit_no_upstream(self):
        self.run_daemon()
        a = "/d01/rs/a/size/%d" % N
        b = "/d01/rs/b/size/%d" % (3 * H.MIB + 4321)
        self.download(a, "MISS")
        self.download(b, "MISS", total=3 * H.MIB + 4321)
        self.wait_stored(a)
        self.wait_stored(b, 49)
        for i in range(6):
            self.assertValidChunk(a, i)
        self.assertEqual(len(self.stored(b)), 49)
        self.assertEqual(self.tmp_entries(), [])
        with open(os.path.join(self.cache, "cacheparty.cache")) as f:
            self.assertIn(str(K64), f.read())
        k = self.origin.request_count()
        self.restart()
        self.download(a, "HIT")
        self.download(b, "HIT", total=3 * H.MIB + 4321)
        c = self.client()
        c.request(b, headers=[("Range", "bytes=%d-%d" % (H.MIB - 7, 2 * H.MIB + 7))])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, b, H.MIB - 7, 2 * H.MIB + 8)
        c.request(a, method="HEAD")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Length"), str(N))
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k, "restarted daemon went upstream")

    def test_restart_twice_partial_object(self):
        # only some chunks stored: after a restart those are hits, the others fills
        self.run_daemon()
        p = "/d01/part/size/%d" % N
        c = self.client()
        c.request(p, headers=[("Range", "bytes=%d-%d" % (K64 + 1, 3 * K64 - 1))])
        r = c.read_response()
        self.assertStatus(r, 206)
        H.wait_until(lambda: {1, 2} <= set(self.stored(p)), 10 * H.SLOW, 0.02, "chunks 1, 2")
        self.restart()
        have = set(self.stored(p))
        self.assertNotIn(0, have)
        k = len(self.origin.requests)
        self.download(p, "MISS")            # chunk 0 was not stored: this request fetched it
        self.assertEqual(self.new_chunks(k), sorted(set(range(6)) - have))
        self.wait_stored(p)
        self.restart()
        k = self.origin.request_count()
        self.download(p, "HIT")
        self.assertEqual(self.origin.request_count(), k)

    def test_read_ahead_leaves_stored_chunks_to_the_disk(self):
        # Chunks 2 and 4 stored, not in memory (restarted): a whole download fills 0, 1, 3 and 5
        # from the origin, each once, and reads 2 and 4 from their files, whatever spans its
        # read-ahead asks for.
        self.run_daemon()
        p = "/d01/gaps/size/%d" % N
        c = self.client()
        for i in (2, 4):
            c.request(p, headers=[("Range", "bytes=%d-%d" % (i * K64, (i + 1) * K64 - 1))])
            self.assertStatus(c.read_response(), 206)
        H.wait_until(lambda: {2, 4} <= set(self.stored(p)), 10 * H.SLOW, 0.02, "chunks 2, 4")
        self.restart()
        # (a span trusts the disk index alone: wait for its start-up scan to count the two)
        H.wait_until(lambda: self.daemon.metrics().get('cacheparty_cache_chunks{tier="disk"}') == 2,
                     10 * H.SLOW, 0.02, "the disk index's scan")
        k = len(self.origin.requests)
        self.download(p, "MISS")
        self.daemon.settle_fetches()
        self.assertEqual(self.new_chunks(k), [0, 1, 3, 5])
        # (read ahead: 1, 3 and 5; chunk 0 was the reader's own miss)
        self.assertEqual(self.daemon.metrics()["cacheparty_readahead_chunks_total"], 3)


class Corruption(Base):
    """Fill A and B, stop, damage A's chunk DAMAGED, start: A is right, the origin saw exactly a
    request for the damaged chunk, the file is valid again, B is untouched; after another restart
    everything is a hit."""

    def corrupt_and_check(self, kind, damage, index=DAMAGED):
        a = "/d01/%s/a/size/%d" % (kind, N)
        b = "/d01/%s/b/size/%d" % (kind, N)
        self.run_daemon()
        self.download(a, "MISS")
        self.download(b, "MISS")
        files_a = self.wait_stored(a)
        files_b = self.wait_stored(b)
        self.stop_daemon()
        target = files_a[index]["path"]
        damage(target, files_a, files_b)
        self.run_daemon()
        self.assertEqual(self.tmp_entries(), [], "tmp/ not emptied at start")
        k = len(self.origin.requests)
        self.download(a)
        new = list(self.origin.requests)[k:]
        self.assertEqual(self.new_chunks(k), [index], "want chunk %d refetched, got %r"
                         % (index, [(q.target, q.header("Range")) for q in new]))
        self.assertEqual({q.path for q in new}, {a})
        self.wait_stored(a)
        for i in range(6):
            self.assertValidChunk(a, i)
        self.assertEqual(self.stored(a)[index]["path"], target)
        k = self.origin.request_count()
        self.download(b, "HIT")
        self.assertEqual(self.origin.request_count(), k, "B's chunks were not kept")
        self.restart()
        k = self.origin.request_count()
        self.download(a, "HIT")
        self.download(b, "HIT")
        self.assertEqual(self.origin.request_count(), k, "replaced chunk not served after restart")

    @staticmethod
    def rewrite(path, fn):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        data = fn(data)
        with open(path, "wb") as f:
            f.write(data)

    def test_truncated(self):
        self.corrupt_and_check("trunc", lambda p, fa, fb: os.truncate(p, os.path.getsize(p) // 2))

    def test_truncated_to_empty(self):
        self.corrupt_and_check("empty", lambda p, fa, fb: os.truncate(p, 0))

    def test_truncated_by_one_byte_last_chunk(self):
        self.corrupt_and_check("trunc1", lambda p, fa, fb: os.truncate(p, os.path.getsize(p) - 1),
                               index=5)

    def test_zeroed(self):
        self.corrupt_and_check("zero", lambda p, fa, fb: self.rewrite(
            p, lambda d: bytearray(len(d))))

    def test_flip_body_byte(self):
        def flip(d):
            d[len(d) - 1000] ^= 0x01
            return d
        self.corrupt_and_check("flipb", lambda p, fa, fb: self.rewrite(p, flip))

    def test_flip_header_byte(self):
        def flip(d):
            d[33] ^= 0x40       # inside the object length field
            return d
        self.corrupt_and_check("fliph", lambda p, fa, fb: self.rewrite(p, flip))

    def test_flip_key_byte(self):
        def flip(d):
            d[60] ^= 0x01       # inside the key
            return d
        self.corrupt_and_check("flipk", lambda p, fa, fb: self.rewrite(p, flip))

    def test_extended(self):
        def ext(p, fa, fb):
            with open(p, "ab") as f:
                f.write(b"\0")
        self.corrupt_and_check("ext", ext)

    def test_another_objects_chunk(self):
        self.corrupt_and_check("foreign", lambda p, fa, fb: shutil.copyfile(
            fb[DAMAGED]["path"], p))

    def test_another_index_of_same_object(self):
        self.corrupt_and_check("otheridx", lambda p, fa, fb: shutil.copyfile(fa[1]["path"], p))

    def test_replaced_by_a_directory(self):
        def mkdir(p, fa, fb):
            os.unlink(p)
            os.mkdir(p)
        # the daemon may not be able to delete a directory; it must still serve correct bytes
        a = "/d01/dir/a/size/%d" % N
        self.run_daemon()
        self.download(a, "MISS")
        target = self.wait_stored(a)[DAMAGED]["path"]
        self.stop_daemon()
        mkdir(target, None, None)
        self.run_daemon()
        k = self.origin.request_count()
        self.download(a)
        self.assertEqual(self.origin.request_count(), k + 1)
        self.download(a)

    def test_garbage_in_tmp(self):
        p = "/d01/tmpg/a/size/%d" % N
        self.run_daemon()
        self.download(p, "MISS")
        name = os.path.basename(self.wait_stored(p)[0]["path"])
        self.stop_daemon()
        tmp = os.path.join(self.cache, "tmp")
        for f, data in [("garbage", b"x" * 100), (name + ".77", b"CPCHUNK1" + b"\0" * 50),
                        ("empty", b""), (".hidden", b"y")]:
            with open(os.path.join(tmp, f), "wb") as fh:
                fh.write(data)
        self.run_daemon()
        self.assertEqual([e for e in self.tmp_entries() if e != ".hidden"], [],
                         "tmp/ not emptied at start")
        k = self.origin.request_count()
        self.download(p, "HIT")
        self.assertEqual(self.origin.request_count(), k)
        for i in range(6):
            self.assertValidChunk(p, i)

    def test_several_damaged_chunks(self):
        a = "/d01/multi/a/size/%d" % N
        self.run_daemon()
        self.download(a, "MISS")
        fa = self.wait_stored(a)
        self.stop_daemon()
        os.truncate(fa[0]["path"], 10)
        os.truncate(fa[3]["path"], 0)
        os.unlink(fa[5]["path"])
        self.run_daemon()
        k = len(self.origin.requests)
        self.download(a)
        self.assertEqual(self.new_chunks(k), [0, 3, 5])
        self.wait_stored(a)
        for i in range(6):
            self.assertValidChunk(a, i)


class Versions(Base):
    def test_old_version_chunks_replaced_on_disk(self):
        state = {"path": "/d01/ver-v1/size/%d" % N}

        def h(ex):
            H.serve_object(ex, N, path=state["path"])
        self.origin.route("/d01/ver/", h)
        p = "/d01/ver/obj"
        v1, v2 = state["path"], "/d01/ver-v2/size/%d" % N
        self.run_daemon()
        r = self.get(p)
        self.assertBody(r, v1, total=N)
        self.wait_stored(p)
        self.restart()
        state["path"] = v2
        # the new version's chunk 0, fetched on purpose: the object's version is now v2
        c = self.client()
        c.request(p + "?nocache=1", headers=[("Range", "bytes=0-99")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, v2, 0, 100)
        # a plain download: v1's chunks on disk are another version, refetched and replaced
        k = len(self.origin.requests)
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertEqual(r.header("ETag"), '"%08x-%x"' % (H.seed_of(v2), N))
        self.assertBody(r, v2, total=N)
        self.assertEqual(self.new_chunks(k), [1, 2, 3, 4, 5])
        st = self.wait_stored(p, etag='"%08x-%x"' % (H.seed_of(v2), N))
        for i, inf in st.items():
            self.assertEqual(inf["etag"], '"%08x-%x"' % (H.seed_of(v2), N), "chunk %d" % i)
            self.assertEqual(H.chunk_file_body(inf), H.content(v2, i * K64, min(N, (i + 1) * K64)))
        self.restart()
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, v2, total=N)
        self.assertEqual(self.origin.request_count(), k)


    def test_mixed_versions_on_disk_after_restart_never_mixed(self):
        # disk: chunks 0-2, 4, 5 of v1 and chunk 3 of v2; restarted, the object's version is
        # unknown until a chunk is read: a client may be cut short, never sent two versions
        state = {"path": "/d01/mixd-v1/size/%d" % N}

        def h(ex):
            H.serve_object(ex, N, path=state["path"])
        self.origin.route("/d01/mixd/", h)
        p = "/d01/mixd/obj"
        v1, v2 = state["path"], "/d01/mixd-v2/size/%d" % N
        e1, e2 = ['"%08x-%x"' % (H.seed_of(v), N) for v in (v1, v2)]
        self.run_daemon()
        self.assertBody(self.get(p), v1, total=N)
        self.wait_stored(p)
        state["path"] = v2
        c = self.client()
        c.request(p + "?nocache=1", headers=[("Range", "bytes=%d-%d" % (3 * K64, 3 * K64 + 9))])
        self.assertBody(c.read_response(), v2, 3 * K64, 3 * K64 + 10)
        H.wait_until(lambda: self.stored(p).get(3, {}).get("etag") == e2, 10 * H.SLOW, 0.02,
                     "chunk 3 of v2 stored")
        self.restart()
        complete = None
        for attempt in range(3):
            c = self.client()
            c.request(p)
            try:
                r = c.read_response()
                ok = True
            except H.ProtocolError:
                r = c.partial
                ok = False
            self.assertStatus(r, 200)
            et = r.header("ETag")
            self.assertIn(et, (e1, e2))
            got = bytes(r.body)
            self.assertBody(got, v1 if et == e1 else v2, 0, len(got))
            if ok:
                self.assertEqual(len(got), N)
                complete = et
                if et == e2:
                    break
        self.assertEqual(complete, e2, "never converged on the origin's version")


class ChunkSize(Base):
    def test_other_chunk_size_refused(self):
        p = "/d01/cs/size/%d" % N
        self.run_daemon("64K")
        self.download(p, "MISS")
        self.wait_stored(p)
        self.stop_daemon()
        with open(os.path.join(self.cache, "cacheparty.cache"), "rb") as f:
            marker = f.read()
        sub = os.path.join(self._tmp, "refused")
        os.makedirs(sub)
        d = H.Daemon(sub, {"cache": {"dir": self.cache, "chunk_size": "1M"}}, origin=self.origin,
                     dns=self.dns, start=False)
        self._daemons.append(d)
        d.expect_rc = 2
        with self.assertRaises(H.DaemonError):
            d.start()
        self.assertEqual(d.rc, 2, d.log_tail())
        self.assertIn("chunk_size", d.log(), d.log_tail())
        # -t sees it too, as start would (issue 17), and changes nothing
        rc, out, err = H.run_binary(["-c", d.ini, "-t"])
        self.assertEqual(rc, 1, out + err)
        self.assertIn("written with chunk_size 65536, configured 1048576", err)
        self.assertEqual(self.origin.request_count(), len(self.reqs(p)))
        # nothing was touched: the marker and the chunks are still there and still served
        with open(os.path.join(self.cache, "cacheparty.cache"), "rb") as f:
            self.assertEqual(f.read(), marker)
        self.assertEqual(len(self.stored(p)), 6)
        self.run_daemon("64K")
        k = self.origin.request_count()
        self.download(p, "HIT")
        self.assertEqual(self.origin.request_count(), k)

    def test_foreign_marker_refused(self):
        with open(os.path.join(self.cache, "cacheparty.cache"), "w") as f:
            f.write("something else entirely\n")
        sub = os.path.join(self._tmp, "refused")
        os.makedirs(sub)
        d = H.Daemon(sub, {"cache": {"dir": self.cache}}, origin=self.origin, dns=self.dns,
                     start=False)
        self._daemons.append(d)
        d.expect_rc = 2
        with self.assertRaises(H.DaemonError):
            d.start()
        self.assertEqual(d.rc, 2, d.log_tail())
        self.assertIn("cacheparty.cache", d.log(), d.log_tail())


class Unwritable(Base):
    def test_tmp_unusable_serves_from_memory(self):
        # tmp/ replaced by a file after start: no chunk can be written (works as root too)
        self.run_daemon()
        tmp = os.path.join(self.cache, "tmp")
        os.rmdir(tmp)
        with open(tmp, "w") as f:
            f.write("not a directory\n")
        p = "/d01/ro/size/%d" % N
        self.download(p, "MISS")
        self.assertEqual(self.stored(p), {})
        k = self.origin.request_count()
        self.download(p, "HIT")
        self.assertEqual(self.origin.request_count(), k)
        self.assertTrue(self.daemon.running())


if __name__ == "__main__":
    raise SystemExit(H.main())
