# SPDX-License-Identifier: BSD-2-Clause
"""c09: what a cache fill asks the origin (issue 16, docs/interfaces.md "Requests to origins").

- A fill carries the end-to-end request fields of the request that started it (X-Foo,
  Accept-Language, a launcher's own field), on a miss, on every read-ahead run, on each hop of a
  followed redirect, on a resumption after the origin cut the body, and on a disk miss; never
  the hop-by-hop fields, Range (its own), If-*, Cookie, Accept-Encoding (it asks for identity),
  nor the fields that steer how a request is handled on the way. A bypass (Authorization) still
  forwards Cookie. The forwarded fields are bounded: what exceeds 8 KiB is dropped field by
  field, with a log line.
- A 206 that ends before the range asked is taken, and the rest asked again from where it ended,
  in the same fill: every byte exact, each byte asked of the origin once, no fault counted. A 206
  that starts elsewhere is still a failure."""

import copy
import os
import threading

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}}

CLIENT = [("X-Foo", "bar baz"), ("Accept-Language", "de-DE, en;q=0.5"),
          ("X-Epic-Launcher", "EpicGamesLauncher/15.2.1"), ("Accept", "*/*"),
          ("Cache-Control", "no-transform"), ("User-Agent", "Valve/Steam HTTP Client 1.0")]
# Fields the client sends that a fill must not pass on, by name.
FORBIDDEN = [("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"),
             ("TE", "trailers"), ("Trailer", "X-Sum"), ("Upgrade", "h2c"),
             ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZQ=="),
             ("Proxy-Authorization", "Basic Zm9vOmJhcg=="), ("Proxy-Foo", "1"),
             ("If-None-Match", '"nope"'), ("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT"),
             ("If-Range", '"other"'), ("If-Whatever", "1"),
             ("Cookie", "session=secret"), ("Accept-Encoding", "gzip, br"),
             ("Forwarded", "for=192.0.2.60;host=evil.example"),
             ("X-Forwarded-For", "192.0.2.60"), ("X-Forwarded-Host", "evil.example"),
             ("X-Forwarded-Proto", "https"), ("X-Original-URL", "/admin"),
             ("X-Rewrite-URL", "/admin"), ("X-HTTP-Method-Override", "DELETE"),
             ("X-HTTP-Method", "PUT"), ("X-Method-Override", "PATCH"), ("Max-Forwards", "0"),
             ("Expect", "100-continue"), ("Content-Length", "0")]
NEVER = {n.lower() for n, _ in FORBIDDEN} - {"connection", "accept-encoding"}  # (checked apart)


def client_headers():
    return CLIENT + FORBIDDEN


class Base(H.CPTestCase):
    def assertFillFields(self, req):
        """<req>, a fill request, carries the client's fields and none of the forbidden."""
        for name, value in CLIENT:
            self.assertEqual(req.header_all(name), [value],
                             "%s not forwarded on %r: %r" % (name, req, req.raw))
        for name, _ in req.headers:
            self.assertNotIn(name.lower(), NEVER, "%s forwarded on %r: %r" % (name, req, req.raw))
        self.assertEqual(req.header_all("Connection"), [], req.raw)
        self.assertEqual(req.header_all("Accept-Encoding"), ["identity"], req.raw)
        self.assertEqual(len(req.header_all("Host")), 1, req.raw)
        self.assertEqual(len(req.header_all("Range")), 1, req.raw)
        self.assertTrue(req.header("Range").startswith("bytes="), req.raw)
        self.assertEqual(req.method, "GET")

    def fills(self, prefix):
        return [q for q in list(self.origin.requests) if q.path.startswith(prefix)]

    def metric(self, name):
        return self.daemon.metrics().get(name, 0)


class Fields(Base):
    def test_miss_carries_the_clients_fields(self):
        self.setup_proxy()
        p = "/c09/miss/size/100000"
        r = self.get(p, headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        reqs = self.fills("/c09/miss/")
        self.assertEqual(len(reqs), 1)
        self.assertFillFields(reqs[0])
        self.assertEqual(reqs[0].header("Range"), "bytes=0-%d" % (H.MIB - 1))

    def test_every_read_ahead_request_carries_them(self):
        self.setup_proxy(SMALL)
        n = 3 * K64
        p = "/c09/ra/size/%d" % n
        r = self.get(p, headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        self.daemon.settle_fetches()
        reqs = self.fills("/c09/ra/")
        # chunk 0, then read-ahead for chunks 1 and 2 (readahead 4: one chunk each)
        self.assertEqual(sorted(q.header("Range") for q in reqs),
                         ["bytes=0-65535", "bytes=131072-196607", "bytes=65536-131071"])
        self.assertGreaterEqual(self.daemon.status()["readahead_chunks_total"], 1)
        for q in reqs:
            self.assertFillFields(q)

    def test_read_ahead_for_a_joiner_carries_the_first_readers_fields(self):
        # The first reader's fill of chunk 0 is held by the origin until a second reader, with
        # other fields, has joined it and reads on: its read-ahead is the object's fill, with
        # the fields of the request that started it.
        self.setup_proxy(SMALL)
        n = 3 * K64
        p = "/c09/join/size/%d" % n
        gate = threading.Event()

        def h(ex):
            if (ex.req.header("Range") or "").startswith("bytes=0-"):
                gate.wait(10)
            H.serve_object(ex, n, path=p)
        self.origin.route("/c09/join/", h)
        a = self.client()
        a.request(p, headers=client_headers())
        self.origin.wait_requests(1)
        b = self.client()
        b.request(p, headers=[("X-Foo", "second"), ("Accept-Language", "fr")])
        H.wait_until(lambda: self.metric("cacheparty_coalesced_total") >= 1, 10,
                     what="the second reader joining")
        gate.set()
        for c in (a, b):
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p)
        self.daemon.settle_fetches()
        reqs = self.fills("/c09/join/")
        self.assertEqual(len(reqs), 3, [q.header("Range") for q in reqs])
        for q in reqs:
            self.assertFillFields(q)

    def test_redirect_hops_carry_them(self):
        self.setup_proxy()
        final = "/c09/final/size/300000"
        self.origin.route("/c09/r1", lambda ex: ex.send(302, b"moved", [("Location", "/c09/r2")]))
        self.origin.route("/c09/r2", lambda ex: ex.send(
            301, b"", [("Location", "http://%s%s" % (H.DEFAULT_HOST, final))]))
        r = self.get("/c09/r1", headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, final)
        reqs = self.fills("/c09/")
        self.assertEqual([q.path for q in reqs], ["/c09/r1", "/c09/r2", final])
        for q in reqs:
            self.assertFillFields(q)

    def test_resumption_carries_them(self):
        self.setup_proxy()
        n = 300000
        p = "/c09/resume/size/%d" % n
        seen = {"n": 0}

        def h(ex):
            seen["n"] += 1
            if seen["n"] == 1:
                ex.req.query["abort"] = ["100000"]   # the body cut after 100000 bytes
            H.serve_object(ex, n, path=p)
        self.origin.route("/c09/resume/", h)
        r = self.get(p, headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        reqs = self.fills("/c09/resume/")
        self.assertEqual([q.header("Range") for q in reqs],
                         ["bytes=0-%d" % (H.MIB - 1), "bytes=100000-%d" % (H.MIB - 1)])
        for q in reqs:
            self.assertFillFields(q)
        self.assertEqual(self.metric("cacheparty_fetch_resumed_total"), 1)

    def test_bypass_still_forwards_cookie(self):
        self.setup_proxy()
        p = "/c09/bypass/size/1000"
        r = self.get(p, headers=[("Authorization", "Bearer t0ken"),
                                 ("Cookie", "session=secret")])
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        q = self.origin.last()
        self.assertEqual(q.header("Cookie"), "session=secret", q.raw)
        self.assertEqual(q.header("Authorization"), "Bearer t0ken", q.raw)

    def test_fields_beyond_8k_dropped_field_by_field(self):
        self.setup_proxy()
        p = "/c09/big/size/1000"
        big = [("X-Big-%02d" % i, "%02d" % i + "v" * 998) for i in range(12)]
        r = self.get(p, headers=big + [("X-After", "small")])
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        q = self.origin.last()
        got = [name for name, _ in q.headers if name.startswith("X-Big-")]
        # each line is 1012 bytes: eight fit in 8 KiB, the rest are dropped; a later small one
        # still goes
        self.assertEqual(got, ["X-Big-%02d" % i for i in range(8)], q.raw[:200])
        for name, value in big[:8]:
            self.assertEqual(q.header(name), value)
        self.assertEqual(q.header("X-After"), "small")
        H.wait_until(lambda: "4 request field(s) beyond 8192 bytes" in self.daemon.log(), 10,
                     what="the log line for the dropped fields")


class DiskMiss(Base):
    def test_disk_miss_fill_carries_them(self):
        # A chunk file found damaged after a restart is refetched through the cache's filler,
        # from the copy of the request the cache kept during the lookup.
        cache = os.path.join(self._tmp, "shared-cache")
        os.makedirs(cache)
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        ov = {"cache": {"dir": cache, "chunk_size": "64K"}}
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        n = 3 * K64
        p = "/c09/disk/size/%d" % n
        r = self.get(p)
        self.assertBody(r, p)
        key = H.cache_key(p)
        H.wait_until(lambda: len([1 for (k, _i) in H.chunk_index(cache) if k == key]) == 3, 30,
                     what="3 chunk files")
        files = {i: inf for (k, i), inf in H.chunk_index(cache).items() if k == key}
        self.assertEqual(self.daemon.stop(), 0)
        os.truncate(files[1]["path"], 10)
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        k = len(self.origin.requests)
        r = self.get(p, headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        new = list(self.origin.requests)[k:]
        self.assertEqual([q.header("Range") for q in new], ["bytes=65536-131071"])
        self.assertFillFields(new[0])
        self.assertIn("starts chunk 1 after a disk miss", self.daemon.log(),
                      "not filled through the cache's filler")


def route_short(test, prefix, n, most):
    """Every range request to <prefix> answered with at most <most> bytes from its start."""
    def h(ex):
        rng = ex.req.header("Range") or ""
        if rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            a = int(a)
            b = min(int(b) if b else n - 1, n - 1, a + most - 1)
            q = copy.copy(ex.req)     # (the recorded request keeps the Range as asked)
            q.headers = [(k, v) for k, v in q.headers if k.lower() != "range"]
            q.headers.append(("Range", "bytes=%d-%d" % (a, b)))
            ex.req = q
        H.serve_object(ex, n)
    test.origin.route(prefix, h)


class Short206(Base):
    def check_requests(self, prefix, total, most):
        """Each byte asked once: the answers tile [0, total); each request asks on from where
        the one before it in its run ended, and a run has exactly the answers it needs."""
        reqs = self.fills(prefix)
        spans = []
        runs = {}
        for q in reqs:
            a, _, b = q.header("Range")[6:].partition("-")
            a, b = int(a), min(int(b), total - 1)
            spans.append((a, min(b, a + most - 1)))
            runs.setdefault(b, []).append(a)
        spans.sort()
        pos = 0
        for a, b in spans:
            self.assertEqual(a, pos, "bytes asked twice or skipped: %r" % spans)
            pos = b + 1
        self.assertEqual(pos, total, spans)
        for end, starts in runs.items():
            first = min(starts)
            self.assertEqual(len(starts), -(-(end + 1 - first) // most),
                             "run to %d: %r" % (end, sorted(starts)))
        return reqs

    def test_short_206s_inside_one_chunk(self):
        self.setup_proxy()
        n, most = 300000, 100000
        p = "/c09/s1/size/%d" % n
        route_short(self, "/c09/s1/", n, most)
        r = self.get(p, headers=client_headers())
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        reqs = self.check_requests("/c09/s1/", n, most)
        self.assertEqual([q.header("Range") for q in reqs],
                         ["bytes=0-%d" % (H.MIB - 1), "bytes=100000-%d" % (H.MIB - 1),
                          "bytes=200000-%d" % (H.MIB - 1)])
        for q in reqs:
            self.assertFillFields(q)
        self.assertEqual(self.metric("cacheparty_fetch_short_total"), 2)
        self.assertEqual(self.metric("cacheparty_fetch_resumed_total"), 0)
        # stored whole: a hit, and a range from it
        k = self.origin.request_count()
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        r = self.get(p, headers=[("Range", "bytes=99990-200009")])
        self.assertStatus(r, 206)
        self.assertBody(r, p, 99990, 200010)
        self.assertEqual(self.origin.request_count(), k)

    def test_short_206s_across_chunks_of_read_ahead_runs(self):
        # 64 KiB chunks, read-ahead 2 over 10 chunks: runs of 5 and 4 chunks after chunk 0, each
        # answered 100000 bytes at a time, so that answers end inside chunks
        self.setup_proxy({"cache": {"chunk_size": "64K"}, "upstream": {"readahead": "2"}})
        n, most = 10 * K64 - 1234, 100000
        p = "/c09/s2/size/%d" % n
        route_short(self, "/c09/s2/", n, most)
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        self.daemon.settle_fetches()
        self.check_requests("/c09/s2/", n, most)
        self.assertGreaterEqual(self.metric("cacheparty_fetch_short_total"), 2)
        self.assertEqual(self.metric("cacheparty_fetch_resumed_total"), 0)
        k = self.origin.request_count()
        c = self.client()
        c.request(p, headers=[("Range", "bytes=%d-%d" % (K64 - 5, 5 * K64 + 5))])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, K64 - 5, 5 * K64 + 6)
        self.assertEqual(self.origin.request_count(), k)

    def test_206_starting_elsewhere_is_a_failure(self):
        self.setup_proxy()
        n = 300000

        def h(ex):
            body = H.content("/c09/else/size/%d" % n, 10, 1000)
            ex.send(206, body, [("Content-Range", "bytes 10-999/%d" % n)])
        self.origin.route("/c09/else/", h)
        r = self.get("/c09/else/size/%d" % n)
        self.assertStatus(r, 502)
        self.assertEqual(self.metric("cacheparty_fetch_short_total"), 0)

    def test_206_ending_past_the_object_is_not_cached(self):
        self.setup_proxy()
        n = 300000

        def h(ex):
            ex.send(206, b"x" * 1000, [("Content-Range", "bytes 0-999/500")])
        self.origin.route("/c09/past/", h)
        self.get("/c09/past/size/%d" % n)
        self.assertEqual(self.metric("cacheparty_fetch_short_total"), 0)
        k = self.origin.request_count()
        self.get("/c09/past/size/%d" % n)
        self.assertGreater(self.origin.request_count(), k, "a bogus 206 was cached")


if __name__ == "__main__":
    raise SystemExit(H.main())
