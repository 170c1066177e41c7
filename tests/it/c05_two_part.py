# SPDX-License-Identifier: BSD-2-Clause
"""c05: two-part fills (issue 5, cold ranges). A client whose range starts deep inside a cold chunk
(64 KiB or more in) must not wait for the bytes before its offset to stream by: the chunk is filled
by two upstream requests at once, one from the client's offset and one for the part before it.
Every byte is still fetched once, the chunk is stored only when both parts are in, a reader
crossing from one part into the other gets the right bytes, and a part that fails fails the chunk
visibly.

Ordering is made certain by the origin, not by timing: the request for the part before the offset
(the one starting on the chunk edge) is held mid-body until the test releases it."""

import harness as H
from c02_coalesce import Base, Paced

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


class TwoPart(Base):
    def start(self, total, name, hold=(0,), hold_bytes=100 * H.KIB, overrides=None,
              handler=HoldEdge):
        d = self.setup_proxy(overrides)
        paced = handler(total, hold=hold, hold_bytes=hold_bytes)
        self.release_later(paced)
        self.origin.route("/c05/%s/" % name, paced)
        return d, paced, "/c05/%s/obj" % name

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
        k = self.origin.request_count()
        r = self.get(p, headers=[("Range", "bytes=0-%d" % (CS - 1))])
        self.assertBody(r, p, 0, CS)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)

    def test_reader_crossing_from_one_part_into_the_other(self):
        total = 2 * CS
        d, paced, p = self.start(total, "cross")
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.wait_holding(paced)
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)
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
        d, paced, p = self.start(total, "fail")
        a = self.client()
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.wait_holding(paced)
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)
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


if __name__ == "__main__":
    raise SystemExit(H.main())
