# SPDX-License-Identifier: BSD-2-Clause
"""c03: cache fills that survive origin faults and follow redirects (issue 5, docs/interfaces.md "Requests to origins").

- a reset mid-chunk is resumed with a Range from the byte reached: ten concurrent readers all
  get the exact bytes and see only a pause;
- when every attempt fails, readers already streaming are closed before the promised length,
  nothing is stored, and the next request refetches;
- redirects are followed server-side (relative and absolute), the bytes stored under the
  original key; more than 5 hops is a 502; an https target is passed to the client uncached."""

import harness as H

N = 3 * H.MIB


class Resume(H.CPTestCase):
    def route_faulty(self, path, fail_first, abort=300000):
        state = {"n": 0}

        def h(ex):
            rng = ex.req.header("Range") or ""
            start = int(rng[6:].split("-")[0]) if rng.startswith("bytes=") else 0
            if start < H.MIB:
                state["n"] += 1
            if start < H.MIB and state["n"] <= fail_first:
                # attempts at chunk 0: <abort> bytes, trickled so readers join, then RST
                ex.req.query["abort"] = [str(abort)]
                ex.req.query["reset"] = ["1"]
                ex.req.query["trickle"] = ["60000,0.02"]
            H.serve_object(ex, N, path=path)
        self.origin.route(path, h)
        return state

    def test_reset_mid_chunk_resumed_for_every_reader(self):
        self.setup_proxy()
        path = "/c03/resume/size/%d" % N
        self.route_faulty(path, fail_first=1)
        res = H.run_many(self.daemon.port, [[path] for _ in range(10)], timeout=60)
        self.assertEqual(res["errors"], [])
        self.assertEqual(res["ok"], 10)
        ranges = [r.header("Range") for r in self.origin.requests]
        self.assertIn("bytes=300000-%d" % (H.MIB - 1), ranges,
                      "no resumption from the byte reached: %r" % ranges)
        # stored whole: a later download is all hits
        before = self.origin.request_count()
        r = self.get(path)
        self.assertBody(r, path)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), before)

    def test_retries_exhausted_short_close_then_refetch(self):
        self.setup_proxy()
        path = "/c03/broken/size/%d" % N
        state = self.route_faulty(path, fail_first=100, abort=100000)
        c = self.client()
        c.request(path)
        with self.assertRaises(H.ProtocolError):
            c.read_response()       # the head promised N bytes; the connection closes before
        attempts = [r for r in self.origin.requests
                    if (r.header("Range") or "").startswith("bytes=")
                    and int(r.header("Range")[6:].split("-")[0]) < H.MIB]
        self.assertGreaterEqual(len(attempts), 2, "no resumption attempted")
        self.assertLessEqual(len(attempts), 1 + 3, "more attempts than the bound")
        # the origin heals: the next request fetches chunk 0 again and succeeds
        state["n"] = 10 ** 6
        before = self.origin.request_count()
        r = self.get(path)
        self.assertBody(r, path)
        self.assertGreater(self.origin.request_count(), before)


class Redirects(H.CPTestCase):
    def test_chain_followed_and_stored_under_original_key(self):
        self.setup_proxy()
        final = "/c03/final/size/300000"
        self.origin.route("/c03/r1", lambda ex: ex.send(302, b"moved", [("Location", "/c03/r2")]))
        self.origin.route("/c03/r2", lambda ex: ex.send(
            301, b"", [("Location", "http://%s%s" % (H.DEFAULT_HOST, final))]))
        r = self.get("/c03/r1")
        self.assertStatus(r, 200)
        self.assertBody(r, final)
        n = self.origin.request_count()
        self.assertEqual(n, 3)
        self.assertEqual(self.origin.requests[-1].path, final)
        r = self.get("/c03/r1")
        self.assertBody(r, final)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), n)

    def test_too_many_hops_is_502(self):
        self.setup_proxy()
        self.origin.route("/c03/loop", lambda ex: ex.send(302, b"", [("Location", "/c03/loop")]))
        self.assertStatus(self.get("/c03/loop"), 502)
        self.assertEqual(self.origin.request_count(), 6)   # the first answer and 5 hops

    def test_https_target_passed_through_uncached(self):
        self.setup_proxy()
        self.origin.route("/c03/tls", lambda ex: ex.send(
            302, b"elsewhere", [("Location", "https://%s/c03/x" % H.DEFAULT_HOST)]))
        r = self.get("/c03/tls")
        self.assertStatus(r, 302)
        self.assertEqual(r.header("Location"), "https://%s/c03/x" % H.DEFAULT_HOST)
        self.assertEqual(bytes(r.body), b"elsewhere")


if __name__ == "__main__":
    raise SystemExit(H.main())
