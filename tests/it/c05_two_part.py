# SPDX-License-Identifier: BSD-2-Clause
"""c05: two-part fills (issue 5, cold ranges). A client whose range starts deep inside a cold chunk
(64 KiB or more in) must not wait for the bytes before its offset to stream by: the chunk is filled
by two upstream requests, one from the client's offset, asked at once, and one for the part before
it (the head part), asked once the first is answered, or at once for a reader who wants its bytes.
Every byte is still fetched once, the chunk is stored only when both parts are in, a reader
crossing from one part into the other gets the right bytes, and a part that fails fails the chunk
visibly.

Ordering is made certain by the origin, not by timing: the request for the part before the offset
(the one starting on the chunk edge) is held mid-body until the test releases it."""

import threading
import time

import harness as H
from c02_coalesce import Base, Paced

K = H.KIB

CS = H.MIB
OFF = 700000                    # deep inside chunk 0


class HoldEdge(Paced):
    """Holds the first request that starts exactly on the edge of a chunk in <hold>."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.edges = set()

    def holds(self, start):
        idx = start // self.cs
        if start % self.cs or idx not in self.hold or idx in self.edges:
            return False
        self.edges.add(idx)
        return True


class ChangedEdge(HoldEdge):
    """HoldEdge whose held request answers as another version of the object (another ETag):
    the object changed at the origin between the two parts' requests."""

    def etag_of(self, path, start):
        with self.lock:
            first_edge = start % self.cs == 0 and start // self.cs not in self.edges
        return '"changed"' if first_edge else super().etag_of(path, start)


class HeldAnswer(Paced):
    """Paced whose request starting at byte <at> waits for .answer before anything is sent
    (.asked is set when it arrives). .starts: the first byte of every request, in arrival order."""

    def __init__(self, total, at, **kw):
        super().__init__(total, hold=(), **kw)
        self.at = at
        self.asked = threading.Event()
        self.answer = threading.Event()
        self.starts = []

    def __call__(self, ex):
        rng = H.parse_range(ex.req.header("Range"), self.total)
        start = rng[0] if isinstance(rng, tuple) else 0
        with self.lock:
            self.starts.append(start)
        if start == self.at:
            self.asked.set()
            while not self.answer.wait(0.05):
                if ex.origin.stopping.is_set():
                    return
        super().__call__(ex)


class TwoPart(Base):
    def start(self, total, name, hold=(0,), hold_bytes=100 * H.KIB, overrides=None,
              handler=HoldEdge):
        d = self.setup_proxy(overrides)
        paced = handler(total, hold=hold, hold_bytes=hold_bytes)
        self.release_later(paced)
        self.origin.route("/c05/%s/" % name, paced)
        return d, paced, "/c05/%s/obj" % name

    def assertChunkZeroStored(self, p, status="HIT"):
        """Chunk 0 of <p> is served whole, with no request to the origin: a HIT, or a MISS when
        its first bytes were fetched but never delivered to a client (hit and miss per byte)."""
        k = self.origin.request_count()
        r = self.get(p, headers=[("Range", "bytes=0-%d" % (CS - 1))])
        self.assertBody(r, p, 0, CS)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), status)
        self.assertEqual(self.origin.request_count(), k)

    def held_answer(self, name, total):
        """Client A asks a 1000-byte range at OFF of a cold object whose answer to that request
        the origin holds (HeldAnswer); returns when the origin has the request."""
        d = self.setup_proxy()
        o = HeldAnswer(total, OFF)
        self.addCleanup(o.answer.set)
        self.origin.route("/c05/%s/" % name, o)
        p = "/c05/%s/obj" % name
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.assertTrue(o.asked.wait(10 * H.SLOW))
        return d, o, p, a

    def served_deep(self, total, name):
        """A client's range at OFF, served while the part of chunk 0 before it is held."""
        d, paced, p = self.start(total, name)
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.wait_holding(paced)
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)
        return paced, p

    def test_deep_range_served_while_the_part_before_it_is_held(self):
        total = 3 * CS
        d, paced, p = self.start(total, "deep")
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 99999))])
        self.wait_holding(paced)
        # the part [0, OFF) is stuck at 100 KiB: the client's bytes come from the other part
        ra = a.read_response()
        self.assertStatus(ra, 206)
        self.assertEqual(ra.header("Content-Range"), "bytes %d-%d/%d" % (OFF, OFF + 99999, total))
        self.assertBody(ra, p, OFF, OFF + 100000)
        self.assertEqual(ra.header("X-Upstream-Cache-Status"), "MISS")
        self.assertFalse(paced.finished.is_set())
        starts = sorted(H.range_of(r)[0] for r in self.reqs(p))
        self.assertEqual(starts, [0, OFF], "upstream requests: %r" % starts)
        self.assertEqual(d.status()["fetch_two_part_total"], 1)
        paced.release.set()
        # the whole chunk is stored once both parts are in: the full object then needs only
        # chunks 1 and 2 from the origin
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=total)
        self.assertEachChunkOnce(p, total)
        self.assertChunkZeroStored(p)

    def test_head_part_is_asked_once_the_first_part_is_answered(self):
        # The origin holds the answer to the request from the client's offset. The head part
        # would have been asked in the same callback, so one upstream request now means it waits.
        d, o, p, a = self.held_answer("order", 2 * CS)
        self.assertEqual(d.status()["upstream_requests_total"], 1)
        self.assertEqual(o.starts, [OFF])
        o.answer.set()
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)
        d.settle_fetches()
        self.assertEqual(o.starts, [OFF, 0])
        self.assertEqual(d.status()["fetch_two_part_total"], 1)
        self.assertChunkZeroStored(p, "MISS")  # the head part was stored, never delivered

    def test_reader_before_the_offset_has_the_head_part_asked_at_once(self):
        # B wants the bytes before A's offset while A's answer is still held: B is served from
        # the head part, asked for B, before the origin answers A at all.
        total = 2 * CS
        d, o, p, a = self.held_answer("hurry", total)
        b = self.client()
        b.request(p, headers=[("Range", "bytes=1000-1999")])
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, p, 1000, 2000)
        self.assertFalse(o.answer.is_set())
        self.assertEqual(o.starts, [OFF, 0])
        o.answer.set()
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEachChunkOnce(p, total)

    def test_reader_crossing_from_one_part_into_the_other(self):
        total = 2 * CS
        paced, p = self.served_deep(total, "cross")
        # B reads chunk 0 from its start: the held part's 100 KiB, then nothing until released
        b = self.client()
        b.request(p, headers=[("Range", "bytes=0-%d" % (CS + 9999))])
        rb = b.read_head()
        self.assertStatus(rb, 206)
        b.read_body_until(rb, 100 * H.KIB)
        self.assertEqual(len(rb.body), 100 * H.KIB)
        self.assertBody(bytes(rb.body), p, 0, 100 * H.KIB)
        self.assertFalse(paced.finished.is_set())
        paced.release.set()
        rb = b.finish_response(rb)
        self.assertBody(rb, p, 0, CS + 10000)
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEachChunkOnce(p, total)

    def test_deep_range_inside_someone_elses_run(self):
        # A's full GET: chunk 0 alone, then read-ahead runs [1..4] and [5..7]; the run [1..4]
        # is held inside chunk 1, so chunk 3 is far ahead of it: B's range deep in chunk 3 cuts
        # the run there and chunk 3 is filled in two parts
        total = 8 * CS
        d, paced, p = self.start(total, "run", hold=(1,), hold_bytes=CS // 2,
                                 overrides={"upstream": {"readahead": "2"}})
        a = self.client(timeout=30)
        a.request(p)
        ra = a.read_head()
        self.assertStatus(ra, 200)
        self.wait_holding(paced)
        lo = 3 * CS + OFF
        b = self.client()
        b.request(p, headers=[("Range", "bytes=%d-%d" % (lo, lo + 9999))])
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, p, lo, lo + 10000)
        self.assertFalse(paced.finished.is_set())
        starts = [H.range_of(r)[0] for r in self.reqs(p)]
        self.assertIn(lo, starts)
        # the part before lo is asked for at the same time (it may reach the origin later)
        H.wait_until(lambda: any(H.range_of(r)[0] == 3 * CS for r in self.reqs(p)),
                     10 * H.SLOW, 0.01, "the request for chunk 3 up to lo")
        self.assertGreaterEqual(d.status()["fetch_split_total"], 1)
        paced.release.set()
        self.assertBody(a.finish_response(ra), p, total=total)
        # (the cut run's request still asks up to chunk 4; its answer is cut before chunk 3)

    def test_failed_part_fails_the_chunk_and_nothing_is_stored(self):
        total = 2 * CS
        paced, p = self.served_deep(total, "fail")
        # C wants all of chunk 0: it gets the held 100 KiB, then the part before OFF fails for
        # good (reset, and every resumption reset too): C is cut short, never given wrong bytes
        c = self.client()
        c.request(p, headers=[("Range", "bytes=0-%d" % (CS - 1))])
        rc = c.read_head()
        self.assertStatus(rc, 206)
        c.read_body_until(rc, 100 * H.KIB)
        paced.broken = True
        paced.release.set()
        with self.assertRaises(H.ProtocolError, msg="a failed chunk was completed"):
            c.read_response(timeout=20)
        got = bytes(c.partial.body)
        self.assertLess(len(got), CS)
        self.assertBody(got, p, 0, len(got))
        # nothing of chunk 0 was kept: the next request fetches it again, whole and right
        paced.broken = False
        n0 = self.origin.request_count()
        r = self.get(p, headers=[("Range", "bytes=0-%d" % (CS - 1))])
        self.assertStatus(r, 206)
        self.assertBody(r, p, 0, CS)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertGreater(self.origin.request_count(), n0)
        self.assertTrue(self.daemon.running())

    def test_parts_of_two_versions_are_never_joined(self):
        total = 2 * CS
        d, paced, p = self.start(total, "versions", handler=ChangedEdge)
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.wait_holding(paced)
        # whichever part answered first set the chunk's version; the other part's answer does
        # not match it, so the chunk fails: A gets a clean answer of one version, a 502, or a
        # response cut short, never bytes joined from two versions
        try:
            r = a.read_response(timeout=20)
            if r.status == 206:
                self.assertBody(r, p, OFF, OFF + 1000)
            else:
                self.assertStatus(r, 502)
        except H.ProtocolError:
            pass
        paced.release.set()
        # nothing of chunk 0 was stored: the next request fetches it again, as one version
        n0 = self.origin.request_count()
        r = self.get(p, headers=[("Range", "bytes=0-%d" % (CS - 1))])
        self.assertStatus(r, 206)
        self.assertBody(r, p, 0, CS)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(r.header("ETag"), Paced.etag_of(paced, p, 0))
        self.assertGreater(self.origin.request_count(), n0)
        self.assertTrue(self.daemon.running())


class HeadPart404:
    """Object of <total>: the request starting on the chunk edge (the head part) answers 404
    after <delay>; any other range answers 206 at once."""

    def __init__(self, total, delay=0.6):
        self.total = total
        self.delay = delay

    def __call__(self, ex):
        rng = H.parse_range(ex.req.header("Range"), self.total)
        start, end = rng if isinstance(rng, tuple) else (0, self.total)
        if start == 0:
            ex.sleep(self.delay)
            ex.send(404, b"nope")
            return
        hdrs = [("ETag", '"v1"'), ("Content-Type", "application/octet-stream"),
                ("Content-Range", "bytes %d-%d/%d" % (start, end - 1, self.total)),
                ("Content-Length", str(end - start))]
        ex.send_head(206, hdrs)
        ex.write(H.content(ex.req.path, start, end))


class EndBeforeOffset:
    """Object of <total> (ends inside chunk 1). The request starting on chunk 1's edge (head
    part) sends 100 KiB and waits for .release; a request beyond the end waits for .go416."""

    def __init__(self, total):
        self.total = total
        self.release = threading.Event()
        self.go416 = threading.Event()
        self.asked416 = threading.Event()
        self.holding = threading.Event()

    def __call__(self, ex):
        rng = H.parse_range(ex.req.header("Range"), self.total)
        hdrs = [("ETag", '"v1"'), ("Content-Type", "application/octet-stream")]
        if rng == "unsat":
            self.asked416.set()
            self.go416.wait(20)
            ex.send(416, b"", hdrs + [("Content-Range", "bytes */%d" % self.total)])
            return
        start, end = rng
        hdrs += [("Content-Range", "bytes %d-%d/%d" % (start, end - 1, self.total)),
                 ("Content-Length", str(end - start))]
        ex.send_head(206, hdrs)
        cut = min(end, start + 100 * K)
        ex.write(H.content(ex.req.path, start, cut))
        self.holding.set()
        self.release.wait(20)
        ex.write(H.content(ex.req.path, cut, end))


class NoRangeSlow:
    """Ignores Range: 200 with the whole object, in 64 KiB pieces; holds after <hold> bytes
    until .release. ETag from .etag (read when the head is sent)."""

    def __init__(self, total, hold):
        self.total = total
        self.hold = hold
        self.etag = '"v1"'
        self.release = threading.Event()
        self.holding = threading.Event()
        self.held = False

    def __call__(self, ex):
        hdrs = [("ETag", self.etag), ("Content-Type", "application/octet-stream"),
                ("Content-Length", str(self.total))]
        ex.send_head(200, hdrs)
        hold = not self.held
        self.held = True
        off = 0
        while off < self.total:
            if hold and off >= self.hold:
                self.holding.set()
                self.release.wait(20)
                hold = False
            nxt = min(self.total, off + 64 * K)
            ex.write(H.content(ex.req.path, off, nxt))
            off = nxt
            ex.sleep(0.001)


class ReviewFixes(Base):
    """Regressions found in review: each of these crashed the daemon, cut a client short or kept
    stale chunks before the fix."""

    def test_on_mem_after_other_part_failed(self):
        cs = 256 * K
        self.setup_proxy({"cache": {"chunk_size": "256K", "memory_size": "1M"},
                          "upstream": {"readahead": "1", "read_timeout": "10s",
                                       "first_byte_timeout": "5s"}})
        held = []
        for i in range(4):
            paced = Paced(cs, cs=cs, hold_bytes=1000)
            self.release_later(paced)
            self.origin.route("/c05/r/mem/a%d/" % i, paced)
            p = "/c05/r/mem/a%d/obj" % i
            c = self.client(timeout=30)
            c.request(p)
            r = c.read_head()
            c.read_body_until(r, 1)
            self.wait_holding(paced)
            held.append((paced, c, r, p))
        # memory is full of filling chunks. A deep range into a cold chunk: the tail part's
        # body waits for memory, then the head part answers 404 (fails the chunk)
        self.origin.route("/c05/r/mem/t/", HeadPart404(2 * cs))
        pt = "/c05/r/mem/t/obj"
        x = self.client(timeout=30)
        x.request(pt, headers=[("Range", "bytes=%d-%d" % (100 * K, 100 * K + 999))])
        time.sleep(1.5)
        for paced, c, r, p in held:
            paced.release.set()
        for paced, c, r, p in held:
            self.assertBody(c.finish_response(r), p, total=cs)
        time.sleep(2)
        self.assertTrue(self.daemon.running(), self.daemon.log_tail(30))


    def end_before_offset(self, name):
        """A asks from beyond the end of an object that ends inside chunk 1; its 416 is held."""
        total = CS + 200 * K
        self.setup_proxy({"upstream": {"readahead": "1", "first_byte_timeout": "20s",
                                       "read_timeout": "20s"}})
        o = EndBeforeOffset(total)
        self.addCleanup(o.release.set)
        self.addCleanup(o.go416.set)
        self.origin.route("/c05/r/%s/" % name, o)
        p = "/c05/r/%s/obj" % name
        a = self.client(timeout=30)
        a.request(p, headers=[("Range", "bytes=%d-" % (CS + 500 * K))])
        self.assertTrue(o.asked416.wait(10 * H.SLOW))
        return o, p, total, a

    def test_tail_part_416_fails_chunk_the_head_part_completes(self):
        # B, reading chunk 1 from its start, has the head part asked; the 416 of the part from
        # A's offset comes while the head part streams, and must not fail the chunk
        o, p, total, a = self.end_before_offset("end")
        b = self.client(timeout=30)
        b.request(p, headers=[("Range", "bytes=%d-%d" % (CS, total - 1))])
        self.assertTrue(o.holding.wait(10 * H.SLOW))
        ra = a.read_response()
        self.assertStatus(ra, 416)
        rb = b.read_head()
        self.assertStatus(rb, 206)
        b.read_body_until(rb, 100 * K)
        o.go416.set()
        time.sleep(0.5)
        o.release.set()
        rb = b.finish_response(rb)# fails: B closed after 100 KiB
        self.assertBody(rb, p, CS, total)

    def test_tail_part_416_then_the_head_part_is_asked(self):
        # Nobody wants the head part's bytes: it is asked when the 416 ends the other part
        o, p, total, a = self.end_before_offset("end2")
        o.go416.set()
        self.assertTrue(o.holding.wait(10 * H.SLOW))
        ra = a.read_response()
        self.assertStatus(ra, 416)
        b = self.client(timeout=30)
        b.request(p, headers=[("Range", "bytes=%d-%d" % (CS, total - 1))])
        rb = b.read_head()
        self.assertStatus(rb, 206)
        b.read_body_until(rb, 100 * K)
        o.release.set()
        self.assertBody(b.finish_response(rb), p, CS, total)

    def test_whole_object_fetch_stores_chunks_after_purge(self):
        cs = 64 * K
        total = 100 * cs
        self.setup_proxy({"cache": {"chunk_size": "64K"}, "server": {"admin_listen": "auto"},
                          "upstream": {"readahead": "1"}})
        o = NoRangeSlow(total, hold=4 * cs)
        self.addCleanup(o.release.set)
        self.origin.route("/c05/r/nr/", o)
        p = "/c05/r/nr/obj"
        r = self.get(p, headers=[("Range", "bytes=0-99")])
        self.assertStatus(r, 206)
        self.assertTrue(o.holding.wait(10))
        # PURGE while the whole answer streams (the origin's object changes: a new ETag)
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        c.request(p, method="PURGE")
        rp = c.read_response()
        self.assertEqual(rp.status, 200)
        o.etag = '"v2"'
        o.release.set()
        self.daemon.settle_fetches()
        self.daemon.settle_disk()
        key = H.cache_key(p)
        idx = sorted(i for (k, i) in H.chunk_index(self.daemon.cfg("cache", "dir")) if k == key)
        r = self.get(p, headers=[("Range", "bytes=%d-%d" % (80 * cs, 80 * cs + 99))])
        self.assertEqual(r.header("ETag"), '"v2"')
        self.assertEqual(idx, [], "chunks of the purged answer were stored")


    def test_ip_literal_two_part(self):
        self.setup_proxy({"upstream": {"override": ""}})
        port = self.origin.port if hasattr(self.origin, "port") else self.origin.addr[1]
        host = "127.0.0.1:%d" % port
        p = "/c05/r/ip/size/%d" % (2 * H.MIB)
        r = self.get("http://%s%s" % (host, p), host=host,
                     headers=[("Range", "bytes=700000-700099")])
        self.assertBody(r, p, 700000, 700100)
        self.daemon.settle_fetches()
        self.assertEqual(self.dns.query_count(), 0)


if __name__ == "__main__":
    raise SystemExit(H.main())
