# SPDX-License-Identifier: BSD-2-Clause
"""c16: a cold chunk filled in more than two parts, so that a reader deep inside it does not wait
for the bytes before its own to stream by (issue 21's cold-range tail), while every byte is still
asked of the origin once:
- a reader deep inside a two-part chunk's held-back head part gets the piece from its own byte
  asked at once, the rest still held back;
- a reader deep inside what an origin request not answered yet is to bring gets that request cut
  at its byte: the request is asked again for the bytes before (its first one is closed
  unanswered), and a request of its own from there; not when another reader waits for a byte
  before it (that reader would wait one more round trip).
Ordering is made certain by the origin (requests held on events) and by the daemon's log (a
client's request has been handled once its state change is logged), never by timing."""

import harness as H
from c02_coalesce import Base
from c06_head_part_waiters import HoldStarts

CS = H.MIB
LONG = {"upstream": {"first_byte_timeout": "30s", "read_timeout": "30s"},
        "server": {"send_timeout": "30s"}}


class ChunkParts(Base):
    def wait_handled(self, c):
        """Until the daemon has taken <c>'s request in (its connection entered CACHE_HEAD)."""
        mark = "127.0.0.1:%d CONN_S_READ_HEAD -> CONN_S_CACHE_HEAD" % c.local_port
        H.wait_until(lambda: mark in self.daemon.log(), 10 * H.SLOW, what=mark)

    def asked(self, o, start):
        self.assertTrue(o.asked[start].wait(10 * H.SLOW), "the origin never got a request "
                        "from byte %d: %r" % (start, sorted(o.starts)))

    def spans(self, p, total):
        out = []
        for r in self.reqs(p):
            a, b = H.range_of(r)
            out.append((a, total - 1 if b is None else min(b, total - 1)))
        return sorted(out)

    def ranged(self, p, a, n=1000):
        c = self.client(timeout=30)
        c.request(p, headers=[("Range", "bytes=%d-%d" % (a, a + n - 1))])
        return c

    def check(self, c, p, a, n=1000):
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, a, a + n)

    def test_a_reader_deep_in_the_held_head_part_gets_its_piece_asked(self):
        total = 2 * CS
        self.setup_proxy(LONG)
        A, B = 900000, 500000
        o = HoldStarts(total, holds=(A, B, 0))
        for e in o.go.values():
            self.addCleanup(e.set)
        p = "/c16/hp/obj"
        self.origin.route("/c16/hp/", o)
        a = self.ranged(p, A)
        self.asked(o, A)                # A's part, from its byte; the head part [0, A) held back
        b = self.ranged(p, B)
        self.asked(o, B)                # B's piece [B, A), at once
        self.assertNotIn(0, o.starts)   # [0, B) still held back
        c = self.ranged(p, 1000)
        self.asked(o, 0)                # asked for C, not deep: the rest of the head part
        for e in o.go.values():
            e.set()
        self.check(a, p, A)
        self.check(b, p, B)
        self.check(c, p, 1000)
        # Without pieces B would have had the whole head part [0, A) asked, from byte 0.
        self.assertEqual(self.spans(p, total), [(0, B - 1), (B, A - 1), (A, CS - 1)])

    def run_held(self, tag):
        """R reads 0..3 MiB of a cold object: chunk 0's answer is held after half of it, and the
        read-ahead request for chunk 1 is held unanswered. Returns (o, p, r)."""
        total = 4 * CS
        self.setup_proxy(LONG)
        o = HoldStarts(total, holds=(CS, CS + 600000))
        o.hold = {0}                    # chunk 0: its head and half of it, then held
        self.addCleanup(o.release.set)
        for e in o.go.values():
            self.addCleanup(e.set)
        p = "/c16/%s/obj" % tag
        self.origin.route("/c16/%s/" % tag, o)
        r = self.client(timeout=30)
        r.request(p, headers=[("Range", "bytes=0-%d" % (3 * CS - 1))])
        self.assertTrue(o.holding.wait(10 * H.SLOW))
        self.asked(o, CS)
        return o, p, r

    def finish(self, o, p, r, readers):
        o.release.set()
        for e in o.go.values():
            e.set()
        rr = r.read_response()
        self.assertStatus(rr, 206)
        self.assertBody(rr, p, 0, 3 * CS)
        for c, at in readers:
            self.check(c, p, at)

    def test_a_request_not_answered_yet_is_cut_for_a_reader_deep_inside(self):
        o, p, r = self.run_held("cut")
        b = self.ranged(p, CS + 600000)
        self.asked(o, CS + 600000)      # B's own request, at once
        # The read-ahead request is asked again for the bytes before B's (the first is closed).
        H.wait_until(lambda: (CS, CS + 599999) in self.spans(p, 4 * CS), 10 * H.SLOW,
                     what="the read-ahead request asked again for its part")
        self.finish(o, p, r, [(b, CS + 600000)])
        self.assertEqual(self.spans(p, 4 * CS),
                         [(0, CS - 1), (CS, CS + 599999), (CS, 2 * CS - 1),
                          (CS + 600000, 2 * CS - 1), (2 * CS, 3 * CS - 1)])

    def test_no_cut_while_another_reader_waits_for_the_bytes_before(self):
        o, p, r = self.run_held("nocut")
        w = self.ranged(p, CS + 100)    # waits for the read-ahead request's first bytes
        self.wait_handled(w)
        b = self.ranged(p, CS + 600000)
        self.wait_handled(b)
        before = self.daemon.status()["upstream_requests_total"]
        self.assertNotIn(CS + 600000, o.starts)
        self.finish(o, p, r, [(w, CS + 100), (b, CS + 600000)])
        self.assertEqual(self.daemon.status()["upstream_requests_total"], before)
        self.assertEqual(self.spans(p, 4 * CS),
                         [(0, CS - 1), (CS, 2 * CS - 1), (2 * CS, 3 * CS - 1)])


if __name__ == "__main__":
    raise SystemExit(H.main())
