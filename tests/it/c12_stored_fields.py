# SPDX-License-Identifier: BSD-2-Clause
"""c12: the origin's response fields stored with the object and replayed (issue 16): every
end-to-end field on a miss, a joiner, a hit, a range and after a restart (Content-Encoding
among them), hop-by-hop fields and Set-Cookie never; the origin's Date replayed and Age computed
(RFC 9111 §4.2.3) on answers from the store; one set of fields per object version; fields over
16 KiB served but not stored; a cache directory written by the previous chunk file format
(version 1) carried over."""

import email.utils
import os
import re
import shutil
import threading
import time

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}}
N = 3 * K64 + 777
LM = "Tue, 15 Nov 1994 12:45:26 GMT"
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
V1_PATH = "/c12/v1/size/100000"   # what fixtures/v1cache holds (fixtures/make_v1_cache.py)

# Sent by the origin and replayed on every answer from the cache.
KEPT = [("Content-Encoding", "gzip"),
        ("Content-Disposition", 'attachment; filename="depot.bin"'),
        ("Cache-Control", "public, max-age=31536000"),
        ("Expires", "Thu, 01 Dec 2099 16:00:00 GMT"),
        ("X-Custom", "v  1"),
        ("Digest", "sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="),
        ("Content-Language", "de")]
# Sent by the origin and never replayed.
DROPPED = [("Connection", "X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"),
           ("Set-Cookie", "session=secret"), ("Set-Cookie", "other=1"),
           ("Proxy-Thing", "1"), ("X-LanCache-Foo", "1"), ("X-Upstream-Other", "1")]


def date_of(r):
    v = r.header("Date")
    return None if v is None else email.utils.parsedate_to_datetime(v).timestamp()


class Held:
    """An object route whose first GET sends its head and <hold> bytes, then waits for .release
    (so that other clients join the fill); <extra> fields on every answer; every later request
    is served at once."""

    def __init__(self, n, extra, hold=K64 // 2):
        self.n, self.extra, self.hold = n, extra, hold
        self.holding = threading.Event()
        self.release = threading.Event()
        self.first = True
        self.lock = threading.Lock()

    def __call__(self, ex):
        with self.lock:
            first, self.first = self.first, False
        if not first or ex.req.method != "GET":
            H.serve_object(ex, self.n, extra=self.extra)
            return
        req = ex.req
        rng = H.parse_range(req.header("Range"), self.n)
        start, end = rng if isinstance(rng, tuple) else (0, self.n)
        hdrs = [("Content-Type", "application/octet-stream"),
                ("ETag", '"%08x-%x"' % (H.seed_of(req.path), self.n)),
                ("Accept-Ranges", "bytes")] + list(self.extra)
        if isinstance(rng, tuple):
            hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, self.n)))
        hdrs.append(("Content-Length", str(end - start)))
        ex.send_head(206 if isinstance(rng, tuple) else 200, hdrs)
        cut = min(end, start + self.hold)
        ex.write(H.content(req.path, start, cut))
        self.holding.set()
        while not self.release.wait(0.05):
            if ex.origin.stopping.is_set():
                return
        ex.write(H.content(req.path, cut, end))


class Base(H.CPTestCase):
    def assertStoredFields(self, r, what, content=True):
        for k, v in KEPT:
            if not content and k.startswith("Content-"):
                self.assertIsNone(r.header(k), "%s: %s replayed without a body" % (what, k))
                continue
            self.assertEqual(r.header_all(k), [v], "%s: %s" % (what, k))
        for k, _ in DROPPED:
            if k != "Connection":
                self.assertEqual(r.header_all(k), [], "%s: %s replayed" % (what, k))
        conn = r.header("Connection") or ""
        self.assertNotIn("X-Hop", conn, what)
        self.assertEqual(len(r.header_all("Date")), 1, "%s: one Date" % what)
        self.assertEqual(len(r.header_all("Age")), min(1, len(r.header_all("Age"))), what)

    def assertNoStoredFields(self, r, what):
        """412 and 416 carry our short text: Date and the validators, none of the object's
        fields (its Cache-Control would make our text storable downstream)."""
        for k, _ in KEPT + DROPPED:
            if k != "Connection":
                self.assertEqual(r.header_all(k), [], "%s: %s" % (what, k))
        self.assertEqual(len(r.header_all("Date")), 1, what)

    def reqs(self, path):
        return [q for q in list(self.origin.requests) if q.path == H.path_of(path)]


class Replay(Base):
    def setUp(self):
        super().setUp()
        self.setup_proxy(SMALL)

    def test_miss_joiner_hit_range_replay_the_same_fields(self):
        held = Held(N, KEPT + DROPPED)
        self.origin.route("/c12/replay/", held)
        p = "/c12/replay/obj"
        a = self.client()
        a.request(p)
        ra = a.read_head()
        self.assertStatus(ra, 200)
        self.assertTrue(held.holding.wait(10 * H.SLOW))
        b = self.client()                       # joins the fill of chunk 0
        b.request(p)
        rb = b.read_head()
        self.assertStatus(rb, 200)
        held.release.set()
        ra = a.finish_response(ra)
        rb = b.finish_response(rb)
        n_fill = len(self.reqs(p))
        self.assertEqual(sorted(H.fetched_chunks(self.reqs(p), N, K64)), [0, 1, 2, 3])
        rh = self.get(p)                        # from the store
        for r, what in ((ra, "miss"), (rb, "joiner"), (rh, "hit")):
            self.assertStatus(r, 200)
            self.assertBody(r, p, total=N)
            self.assertStoredFields(r, what)
            self.assertEqual(r.header("ETag"), '"%08x-%x"' % (H.seed_of(p), N), what)
            self.assertEqual(r.header("Content-Type"), "application/octet-stream", what)
            self.assertEqual(r.header("Content-Length"), str(N), what)
            self.assertEqual(r.header("Accept-Ranges"), "bytes", what)
        self.assertEqual(rh.header("X-Upstream-Cache-Status"), "HIT")
        # One Date for the version: the miss's, replayed by the joiner and the hit.
        self.assertEqual(rb.header("Date"), ra.header("Date"))
        self.assertEqual(rh.header("Date"), ra.header("Date"))
        self.assertIsNone(ra.header("Age"), "a first delivery from the origin has no Age")
        self.assertRegex(rh.header("Age") or "", r"^\d+$")

        c = self.client()
        c.request(p, headers=[("Range", "bytes=100-70000")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, 100, 70001)
        self.assertStoredFields(r, "range")
        c.request(p, headers=[("If-None-Match", rh.header("ETag"))])
        r = c.read_response()
        self.assertStatus(r, 304)
        self.assertStoredFields(r, "304", content=False)
        self.assertIsNone(r.header("Content-Type"))
        c.request(p, headers=[("Range", "bytes=%d-" % (N + 5))])
        r = c.read_response()
        self.assertStatus(r, 416)
        self.assertNoStoredFields(r, "416")
        self.assertEqual(r.header("Content-Type"), "text/plain")   # our text, not the object's
        c.request(p, headers=[("If-Match", '"other"')])
        r = c.read_response()
        self.assertStatus(r, 412)
        self.assertNoStoredFields(r, "412")
        c.request(p, headers=[("Range", "bytes=0-9,150000-150009")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertTrue(r.header("Content-Type").startswith("multipart/byteranges; boundary="))
        self.assertEqual(r.header("X-Custom"), "v  1")
        self.assertEqual(len(self.reqs(p)), n_fill, "everything after the fill came from the store")

    def test_date_and_age_from_the_origin(self):
        # An upstream cache's answer: a Date 100 s ago and an Age of 30 (apparent age wins).
        now = time.time()
        date = email.utils.formatdate(now - 100, usegmt=True)

        def h(ex):
            H.serve_object(ex, N, extra=[("Date", date), ("Age", "30")])
        self.origin.route("/c12/age/", h)
        p = "/c12/age/obj"
        r1 = self.get(p)
        self.assertStatus(r1, 200)
        self.assertEqual(r1.header("Date"), date)
        age1 = int(r1.header("Age"))
        self.assertGreaterEqual(age1, 100)      # an upstream cache's Age is kept on a miss
        r2 = self.get(p)
        self.assertStatus(r2, 200)
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(r2.header("Date"), date)
        age2 = int(r2.header("Age"))
        self.assertGreaterEqual(age2, age1)
        self.assertLess(age2, 100 + (time.time() - now) + 2)
        self.assertEqual(len(r2.header_all("Age")), 1)

    def test_date_added_when_the_origin_sends_none(self):
        def h(ex):
            req = ex.req
            body = H.content(req.path, 0, 5000)
            ex.send(200, body, [("ETag", '"nodate"'), ("X-Custom", "a")])
        self.origin.route("/c12/nodate/", h)
        p = "/c12/nodate/obj"
        t0 = time.time()
        r1 = self.get(p)
        self.assertStatus(r1, 200)
        d1 = date_of(r1)
        self.assertIsNotNone(d1, "a Date of ours when the origin sent none")
        self.assertLessEqual(abs(d1 - t0), 5)
        r2 = self.get(p)
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(r2.header("Date"), r1.header("Date"), "the stored Date, not a new one")
        self.assertEqual(r2.header("X-Custom"), "a")

    def test_one_set_of_fields_per_version(self):
        """A later fill of another chunk of the same version answers with the fields of the
        answer that brought the version, not with its own."""
        seq = [0]

        def h(ex):
            seq[0] += 1
            H.serve_object(ex, N, extra=[("X-Seq", str(seq[0]))])
        self.origin.route("/c12/ver/", h)
        p = "/c12/ver/obj"
        c = self.client()
        c.request(p, headers=[("Range", "bytes=0-99")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertEqual(r.header("X-Seq"), "1")
        n0 = len(self.reqs(p))
        c.request(p, headers=[("Range", "bytes=%d-%d" % (2 * K64 + 5, 2 * K64 + 99))])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, 2 * K64 + 5, 2 * K64 + 100)
        self.assertGreater(len(self.reqs(p)), n0, "chunk 2 came from the origin")
        self.assertEqual(r.header("X-Seq"), "1")

    def test_fields_over_16k_served_not_stored(self):
        big = [("X-Big-%02d" % i, "b" * 1000) for i in range(17)]

        def h(ex):
            H.serve_object(ex, N, extra=big)
        self.origin.route("/c12/big/", h)
        p = "/c12/big/obj"
        for _ in range(2):
            r = self.get(p)
            self.assertStatus(r, 200)
            self.assertBody(r, p, total=N)
            for k, v in big:
                self.assertEqual(r.header(k), v)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        gets = [q for q in self.reqs(p) if q.method == "GET"]
        self.assertGreaterEqual(len(gets), 2, "not stored: the second request went upstream")
        self.assertIn("too long to store", self.daemon.log())


class Disk(Base):
    def test_fields_replayed_after_restart(self):
        cache = os.path.join(self._tmp, "cache-r")
        os.makedirs(cache)
        ov = {"cache": {"dir": cache, "chunk_size": "64K"}}
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)

        def h(ex):
            H.serve_object(ex, N, extra=KEPT + DROPPED)
        self.origin.route("/c12/disk/", h)
        p = "/c12/disk/obj"
        r1 = self.get(p)
        self.assertStatus(r1, 200)
        key = H.cache_key(p)
        H.wait_until(lambda: len([1 for (k, _i) in H.chunk_index(cache) if k == key]) == 4,
                     10 * H.SLOW, what="4 chunk files")
        for (k, _i), inf in H.chunk_index(cache).items():
            if k == key:
                self.assertEqual(inf["version"], 2)
                self.assertIn("Content-Encoding: gzip\r\n", inf["fields"])
                self.assertNotIn("Set-Cookie", inf["fields"])
                self.assertEqual(inf["date"], r1.header("Date"))
        self.assertEqual(self.daemon.stop(), 0)
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        n = len(self.reqs(p))
        r2 = self.get(p)
        self.assertStatus(r2, 200)
        self.assertBody(r2, p, total=N)
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT")
        self.assertStoredFields(r2, "after restart")
        self.assertEqual(r2.header("Date"), r1.header("Date"))
        self.assertRegex(r2.header("Age") or "", r"^\d+$")
        self.assertEqual(len(self.reqs(p)), n)

    def test_version_1_cache_carried_over(self):
        """A cache dir of the previous format (chunk file version 1, without the origin's fields):
        each file is a miss the first time it is asked, deleted and refetched quietly, and
        stored again with every field; from then on a hit. Nothing else is touched."""
        cache = os.path.join(self._tmp, "cache-v1")
        shutil.copytree(os.path.join(FIXTURES, "v1cache"), cache)
        files = H.chunk_files(cache)
        self.assertEqual([H.chunk_file_info(f)["version"] for f in files], [1, 1])
        self.origin = self.start_origin()
        self.dns = self.start_dns()

        def h(ex):
            H.serve_object(ex, 100000, extra=[("Last-Modified", "Tue, 15 Nov 1994 12:45:26 GMT"),
                                              ("X-Custom", "v2")])
        self.origin.route("/c12/v1/", h)
        self.daemon = self.start_daemon({"cache": {"dir": cache, "chunk_size": "64K"}},
                                        origin=self.origin, dns=self.dns)
        r = self.get(V1_PATH)
        self.assertStatus(r, 200)
        self.assertBody(r, V1_PATH, total=100000)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(r.header("X-Custom"), "v2", "refetched: the origin's fields")
        self.assertEqual(r.header("ETag"), '"%08x-%x"' % (H.seed_of(V1_PATH), 100000))
        self.assertEqual(sorted(H.fetched_chunks(list(self.origin.requests), 100000, K64)), [0, 1])
        H.wait_until(lambda: [H.chunk_file_info(f)["version"] for f in H.chunk_files(cache)]
                     == [2, 2], 10 * H.SLOW, what="the chunks stored again in version 2")
        self.assertEqual(self.daemon.metrics().get("cacheparty_cache_old_format_chunks_total"), 2)
        self.assertEqual(self.daemon.log().count("chunk files of an earlier format"), 1)
        n = len(self.origin.requests)
        r = self.get(V1_PATH)
        self.assertStatus(r, 200)
        self.assertBody(r, V1_PATH, total=100000)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(r.header("X-Custom"), "v2")
        c = self.client()
        c.request(V1_PATH, headers=[("Range", "bytes=65000-70000")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, V1_PATH, 65000, 70001)
        self.assertEqual(len(self.origin.requests), n)

if __name__ == "__main__":
    import sys
    sys.exit(H.main())
