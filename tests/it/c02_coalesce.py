# SPDX-License-Identifier: BSD-2-Clause
"""c02: coalesced misses (issue 5): concurrent clients of a cold object share one upstream request
per chunk and get its bytes as they arrive; a client leaving does not hurt the others nor the
fill; an origin reset mid-chunk closes the clients already streaming and stores nothing.

Overlap is made certain by the origin, not by timing: the Paced handler sends the first part of a
held chunk and then waits for an Event that the test sets only after the clients have shown what
they received meanwhile."""

import os
import threading

import harness as H

CS = H.MIB


class Paced:
    """Origin behaviour for one object of <total> bytes at any path (content follows the request
    path): 206 answers to ranged GETs, with ETag. The first request for a chunk in <hold> sends its
    head and <hold_bytes> body bytes, sets .holding and waits for .release; then sends the rest,
    or resets the connection when .broken is set. While .broken, later requests send a head and
    reset. Other requests are sent in <piece>-byte pieces, <pause> s apart."""

    def __init__(self, total, cs=CS, hold=(0,), hold_bytes=None, piece=64 * H.KIB, pause=0.002):
        self.total = total
        self.cs = cs
        self.hold = set(hold)
        self.hold_bytes = cs // 2 if hold_bytes is None else hold_bytes
        self.piece = piece
        self.pause = pause
        self.lock = threading.Lock()
        self.held = set()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()    # the held chunk's last byte was sent
        self.broken = False

    def __call__(self, ex):
        req = ex.req
        total = self.total
        rng = H.parse_range(req.header("Range"), total)
        etag = self.etag_of(req.path, rng[0] if isinstance(rng, tuple) else 0)
        hdrs = [("ETag", etag), ("Accept-Ranges", "bytes"),
                ("Content-Type", "application/octet-stream")]
        if rng == "unsat":
            ex.send(416, b"", hdrs + [("Content-Range", "bytes */%d" % total)])
            return
        start, end = rng if isinstance(rng, tuple) else (0, total)
        status = 206 if isinstance(rng, tuple) else 200
        if status == 206:
            hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, total)))
        hdrs.append(("Content-Length", str(end - start)))
        ex.send_head(status, hdrs)
        if req.method == "HEAD":
            return
        with self.lock:
            first = self.holds(start)
            self.held.add(start // self.cs)
            broken = self.broken
        if first:
            cut = min(end, start + self.hold_bytes)
            ex.write(H.content(req.path, start, cut))
            self.holding.set()
            while not self.release.wait(0.05):
                if ex.origin.stopping.is_set():
                    return
            if self.broken:
                ex.close(reset=True)
                return
            self.send_pieces(ex, cut, end)
            self.finished.set()
            return
        if broken:
            ex.close(reset=True)        # a head and nothing else: no progress to resume from
            return
        self.send_pieces(ex, start, end)

    def etag_of(self, path, start):
        """The ETag of the answer to a request starting at byte <start>."""
        return '"%08x-%x"' % (H.seed_of(path), self.total)

    def holds(self, start):
        """Whether the request starting at byte <start> is the one held (called under .lock)."""
        idx = start // self.cs
        return idx in self.hold and idx not in self.held

    def send_pieces(self, ex, start, end):
        off = start
        while off < end:
            if ex.origin.stopping.is_set():
                return
            nxt = min(end, off + self.piece)
            ex.write(H.content(ex.req.path, off, nxt))
            off = nxt
            if self.pause and off < end:
                ex.sleep(self.pause)


class Base(H.CPTestCase):
    def reqs(self, p):
        return [r for r in list(self.origin.requests) if r.path == H.path_of(p)]

    def assertEachChunkOnce(self, p, total, cs=CS):
        spans = []
        for r in self.reqs(p):
            rg = H.range_of(r)
            self.assertIsNotNone(rg, "upstream request without a single Range: %r" % r)
            a, b = rg
            b = total - 1 if b is None else min(b, total - 1)
            spans.append((a, b))
        spans.sort()
        pos = 0
        for a, b in spans:
            self.assertEqual(a, pos, "upstream ranges %r: byte %d %s" % (
                spans, min(a, pos), "fetched twice" if a < pos else "never fetched"))
            pos = b + 1
        self.assertEqual(pos, total, "upstream ranges %r stop at %d of %d" % (spans, pos, total))

    def release_later(self, paced):
        """Make sure a held origin handler never outlives a failed test."""
        self.addCleanup(paced.release.set)

    def wait_holding(self, paced):
        self.assertTrue(paced.holding.wait(10 * H.SLOW), "the origin never got the held chunk")

    def cache_dir(self):
        return self.daemon.cfg("cache", "dir")

    def stored(self, p):
        """{index: info} of the chunk files stored for <p>."""
        key = H.cache_key(p)
        return {i: inf for (k, i), inf in H.chunk_index(self.cache_dir()).items() if k == key}


class Coalesce(Base):
    def many(self, n, tag):
        self.setup_proxy({"server": {"max_connections": str(n + 16)}})
        total = 4 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/%s/" % tag, paced)
        p = "/c02/%s/obj" % tag
        barrier = threading.Barrier(n)
        cond = threading.Condition()
        state = {"first": 0}
        results = [None] * n
        errors = []
        clients = [self.client(timeout=60) for _ in range(n)]

        def worker(i):
            c = clients[i]
            try:
                barrier.wait(30 * H.SLOW)
                c.request(p)
                r = c.read_head()
                c.read_body_until(r, 1)
                with cond:
                    state["first"] += 1
                    cond.notify_all()
                results[i] = c.finish_response(r)
            except Exception as e:  # reported below
                errors.append("client %d: %r" % (i, e))
                with cond:
                    state["first"] += 1000    # wake the main thread at once
                    cond.notify_all()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        try:
            with cond:
                ok = cond.wait_for(lambda: state["first"] >= n, 30 * H.SLOW)
            self.assertEqual(errors, [])
            self.assertTrue(ok, "only %d of %d clients got body bytes while the origin held "
                            "chunk 0 half sent" % (state["first"], n))
            self.assertFalse(paced.finished.is_set())
        finally:
            paced.release.set()
            for t in threads:
                t.join(60 * H.SLOW)
        self.assertEqual(errors, [])
        statuses = []
        for i, r in enumerate(results):
            self.assertIsNotNone(r, "client %d has no response" % i)
            self.assertStatus(r, 200)
            self.assertBody(r, p, total=total)
            statuses.append(r.header("X-Upstream-Cache-Status"))
        self.assertEqual(statuses.count("MISS"), 1, statuses)
        self.assertEqual(statuses.count("HIT"), n - 1, statuses)
        self.assertEachChunkOnce(p, total)
        # and it is all stored: one more client makes no upstream request
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)

    def test_10_clients_one_fetch_per_chunk(self):
        self.many(10, "ten")

    def test_50_clients_one_fetch_per_chunk(self):
        self.many(50, "fifty")

    def test_joiner_streams_before_chunk_completes(self):
        self.setup_proxy()
        total = 2 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/join/", paced)
        p = "/c02/join/obj"
        a = self.client()
        a.request(p)
        ra = a.read_head()
        self.assertStatus(ra, 200)
        a.read_body_until(ra, CS // 2)
        self.wait_holding(paced)
        self.assertEqual(len(ra.body), CS // 2)
        self.assertBody(bytes(ra.body), p, 0, CS // 2)
        # B arrives while the origin is stuck in the middle of chunk 0
        b = self.client()
        b.request(p)
        rb = b.read_head()
        self.assertStatus(rb, 200)
        self.assertEqual(rb.header("Content-Length"), str(total))
        b.read_body_until(rb, CS // 2)
        self.assertFalse(paced.finished.is_set())
        self.assertBody(bytes(rb.body), p, 0, len(rb.body))
        self.assertEqual(len(rb.body), CS // 2, "joiner did not get the committed half")
        self.assertEqual(H.fetched_chunks(self.reqs(p), total, CS).count(0), 1,
                         "the joiner went upstream for chunk 0")
        paced.release.set()
        ra = a.finish_response(ra)
        rb = b.finish_response(rb)
        self.assertBody(ra, p, total=total)
        self.assertBody(rb, p, total=total)
        self.assertEqual(ra.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(rb.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEachChunkOnce(p, total)

    def test_joiner_ranges_while_chunk_held(self):
        self.setup_proxy()
        total = 3 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/jr/", paced)
        p = "/c02/jr/obj"
        a = self.client()
        a.request(p)
        ra = a.read_head()
        a.read_body_until(ra, 1)
        self.wait_holding(paced)
        # a range inside the committed half completes while the chunk is still held
        b = self.client()
        b.request(p, headers=[("Range", "bytes=1000-2000")])
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertEqual(rb.header("Content-Range"), "bytes 1000-2000/%d" % total)
        self.assertBody(rb, p, 1000, 2001)
        # a range across the committed point: its first part arrives now
        half = CS // 2
        c = self.client()
        c.request(p, headers=[("Range", "bytes=%d-%d" % (half - 100, half + 99))])
        rc = c.read_head()
        self.assertStatus(rc, 206)
        c.read_body_until(rc, 100)
        self.assertBody(bytes(rc.body), p, half - 100, half)
        # a range in another chunk is fetched on its own, not behind the held one
        d = self.client()
        d.request(p, headers=[("Range", "bytes=%d-%d" % (CS + 5, CS + 5000))])
        rd = d.read_response()
        self.assertStatus(rd, 206)
        self.assertBody(rd, p, CS + 5, CS + 5001)
        self.assertFalse(paced.finished.is_set())
        paced.release.set()
        rc = c.finish_response(rc)
        self.assertBody(rc, p, half - 100, half + 100)
        self.assertBody(a.finish_response(ra), p, total=total)
        self.assertEachChunkOnce(p, total)


class ClientGone(Base):
    def test_first_client_leaves_others_complete(self):
        self.setup_proxy()
        total = 3 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/gone/", paced)
        p = "/c02/gone/obj"
        cl = []
        for i in range(3):
            c = self.client()
            c.request(p)
            r = c.read_head()
            c.read_body_until(r, 1)
            if i == 0:
                self.wait_holding(paced)
            cl.append((c, r))
        for c, r in cl[1:]:
            c.read_body_until(r, CS // 2)
        self.assertEqual(cl[0][1].header("X-Upstream-Cache-Status"), "MISS")
        cl[0][0].close()                    # the client that caused the fetch leaves
        paced.release.set()
        for c, r in cl[1:]:
            self.assertBody(c.finish_response(r), p, total=total)
        self.assertEachChunkOnce(p, total)
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)

    def test_all_clients_leave_fill_still_stored(self):
        self.setup_proxy()
        total = CS
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/alone/", paced)
        p = "/c02/alone/obj"
        a = self.client()
        a.request(p)
        ra = a.read_head()
        a.read_body_until(ra, 1)
        self.wait_holding(paced)
        a.close()
        paced.release.set()
        H.wait_until(lambda: 0 in self.stored(p), 10 * H.SLOW, 0.02,
                     "chunk 0 stored after its only client left")
        self.assertTrue(paced.finished.is_set())
        inf = self.stored(p)[0]
        self.assertEqual(inf["size"], inf["hdr_len"] + CS)
        self.assertEqual(H.chunk_file_body(inf), H.content(p, 0, CS))
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)


class OriginReset(Base):
    def test_reset_mid_chunk_closes_streaming_waiters(self):
        self.setup_proxy()
        total = 2 * H.MIB
        paced = Paced(total)
        paced.broken = True
        self.release_later(paced)
        self.origin.route("/c02/rst/", paced)
        p = "/c02/rst/obj"
        cl = []
        for i in range(5):
            c = self.client()
            c.request(p)
            r = c.read_head()
            self.assertStatus(r, 200)
            c.read_body_until(r, 1)
            if i == 0:
                self.wait_holding(paced)
            cl.append((c, r))
        paced.release.set()                 # the origin resets now (and on any retry)
        for i, (c, r) in enumerate(cl):
            with self.assertRaises(H.ProtocolError, msg="client %d completed" % i):
                c.read_response(timeout=20)
            got = bytes(c.partial.body)
            self.assertLess(len(got), total)
            self.assertBody(got, p, 0, len(got))
        self.assertNotIn(0, self.stored(p), "a chunk cut short was stored")
        # the origin is fixed: the next request refetches chunk 0 and succeeds
        paced.broken = False
        n0 = sum(1 for q in self.reqs(p) if H.range_of(q)[0] == 0)
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=total)
        self.assertEqual(sum(1 for q in self.reqs(p) if H.range_of(q)[0] == 0), n0 + 1)
        H.wait_until(lambda: 0 in self.stored(p), 10 * H.SLOW, 0.02, "chunk 0 stored")
        self.assertEqual(H.chunk_file_body(self.stored(p)[0]), H.content(p, 0, CS))
        self.assertEqual(os.listdir(os.path.join(self.cache_dir(), "tmp")), [])


class Memory(Base):
    """memory_size holds 4 chunks of 64 KiB: fills wait for room (back-pressure), never fail."""

    OV = {"cache": {"chunk_size": "64K", "memory_size": "256K"}}

    def up_heads(self):
        return self.daemon.log().count("UP_S_WAIT_HEAD -> UP_S_BODY")

    def test_fill_waiting_for_memory_resumes_when_readers_finish(self):
        self.setup_proxy(self.OV)
        cs = 64 * H.KIB
        held = []
        for i in range(4):
            paced = Paced(cs, cs=cs)
            self.release_later(paced)
            self.origin.route("/c02/mem/a%d/" % i, paced)
            p = "/c02/mem/a%d/obj" % i
            c = self.client()
            c.request(p)
            r = c.read_head()
            c.read_body_until(r, 1)
            self.wait_holding(paced)
            held.append((paced, c, r, p))
        # the four chunks filling now take all of memory_size; a fifth object's fill must wait
        self.origin.route("/c02/mem/b/", Paced(cs, cs=cs, hold=()))
        pb = "/c02/mem/b/obj"
        b = self.client()
        b.request(pb)
        # its origin head has been handed to the cache (the debug log line precedes it in the
        # same callback, so everything the test does next happens after)
        try:
            H.wait_until(lambda: self.up_heads() >= 5, 10 * H.SLOW, 0.02, "the fifth origin head")
        except AssertionError:
            for paced, c, r, p in held:
                paced.release.set()
            self.skipTest("no 'UP_S_WAIT_HEAD -> UP_S_BODY' debug lines to order the test on")
        for paced, c, r, p in held:
            paced.release.set()
        for paced, c, r, p in held:
            self.assertBody(c.finish_response(r), p, total=cs)
        # nothing is in use any more: the fifth fill must get its memory and complete
        try:
            rb = b.read_response(timeout=10)
        except Exception as e:
            self.fail("the fill waiting for memory never resumed after every reader finished "
                      "(%r)" % e)
        self.assertStatus(rb, 200)
        self.assertBody(rb, pb, total=cs)

    def test_many_objects_small_memory(self):
        self.setup_proxy(self.OV)
        paths = ["/c02/memmany/o%d/size/%d" % (i, H.MIB + 1000 * i) for i in range(12)]
        res = H.run_many(self.daemon.port, [[p] for p in paths], timeout=30)
        self.assertEqual(res["errors"], [])
        self.assertEqual(res["ok"], len(paths))
        for p in paths:
            n = int(H.SIZE_RE.search(p).group(1))
            self.assertEachChunkOnce(p, n, 64 * H.KIB)


class Shutdown(Base):
    def test_sigterm_with_fetch_in_flight(self):
        self.setup_proxy({"server": {"shutdown_timeout": "1s"}})
        total = 2 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/term/", paced)
        p = "/c02/term/obj"
        cl = []
        for i in range(3):
            c = self.client()
            c.request(p)
            r = c.read_head()
            c.read_body_until(r, 1)
            if i == 0:
                self.wait_holding(paced)
            cl.append((c, r))
        rc = self.daemon.stop()
        self.assertEqual(rc, 0, self.daemon.log_tail())
        for c, r in cl:
            with self.assertRaises(H.ProtocolError):
                c.read_response(timeout=10)
            self.assertLess(len(c.partial.body), total)
            self.assertBody(bytes(c.partial.body), p, 0, len(c.partial.body))
        self.assertNotIn(0, self.stored(p))


class Interleaved(Base):
    def test_nocache_while_chunk_filling(self):
        self.setup_proxy()
        total = 2 * H.MIB
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/ncf/", paced)
        p = "/c02/ncf/obj"
        a = self.client()
        a.request(p)
        ra = a.read_head()
        a.read_body_until(ra, 1)
        self.wait_holding(paced)
        # a forced refetch of the object while its chunk 0 is half filled: its own fetch
        b = self.client()
        b.request(p + "?nocache=1")
        rb = b.read_response(timeout=20)
        self.assertStatus(rb, 200)
        self.assertBody(rb, p, total=total)
        self.assertFalse(paced.finished.is_set())
        paced.release.set()
        self.assertBody(a.finish_response(ra), p, total=total)
        H.wait_until(lambda: {0, 1} <= set(self.stored(p)), 10 * H.SLOW, 0.02, "chunks stored")
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)
        for i in (0, 1):
            self.assertEqual(H.chunk_file_body(self.stored(p)[i]),
                             H.content(p, i * CS, (i + 1) * CS))

    def test_pipelined_behind_a_held_miss(self):
        self.setup_proxy()
        total = CS + 1000
        paced = Paced(total)
        self.release_later(paced)
        self.origin.route("/c02/pipe/", paced)
        p = "/c02/pipe/obj"
        q = "/c02/pipe2/size/5000"
        self.assertBody(self.get(q), q)         # q is cached, p is cold
        c = self.client()
        c.send(H.build_request("GET", p) +
               H.build_request("GET", q, headers=[("Range", "bytes=0-9")]) +
               H.build_request("HEAD", p), expect=["GET", "GET", "HEAD"])
        r = c.read_head()
        c.read_body_until(r, 1)
        self.wait_holding(paced)
        paced.release.set()
        r1, r2, r3 = c.read_responses(3)
        self.assertBody(r1, p, total=total)
        self.assertStatus(r2, 206)
        self.assertBody(r2, q, 0, 10)
        self.assertStatus(r3, 200)
        self.assertEqual(r3.header("Content-Length"), str(total))
        self.assertEqual(r3.header("X-Upstream-Cache-Status"), "HIT")


if __name__ == "__main__":
    raise SystemExit(H.main())
