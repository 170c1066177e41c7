# SPDX-License-Identifier: BSD-2-Clause
"""c01: the chunk cache seen from outside (docs/interfaces.md, "HTTP on `listen`"; issue 4): second downloads make
no upstream request, HIT/MISS, ranges (random, suffix, open, unsatisfiable, multi), conditionals,
HEAD, ?nocache=1, an origin without range support, uncacheable answers, a changed ETag, BYPASS."""

import random
import re

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}}
LINE_RE = re.compile(r'^\[(\S+)\] (\S+) / - - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" '
                     r'"([^"]*)" "(HIT|MISS|-)" "([^"]*)" "([^"]*)"$')


def etag_of(path, n):
    """The ETag the default origin sends for the /size/<n> object at <path>."""
    return '"%08x-%x"' % (H.seed_of(path), n)


def versioned(state):
    """A handler serving, at any path, the object state["path"] of state["size"] bytes (content
    and ETag follow state["path"]): switching it changes the object at the origin."""
    def h(ex):
        H.serve_object(ex, state["size"], path=state["path"])
    return h


class Base(H.CPTestCase):
    def reqs(self, target, method=None):
        """The origin's requests for the path of <target> (any query)."""
        p = H.path_of(target)
        return [r for r in list(self.origin.requests)
                if r.path == p and (method is None or r.method == method)]

    def assertCoverage(self, reqs, total, cs):
        """<reqs> are ranged GETs that together ask for every byte of [0, total) exactly once
        (the cache never fetches a byte twice). Each starts on a chunk edge, or is the tail part
        of a two-part fill (a client's range started at least 64 KiB inside a chunk)."""
        spans = []
        for r in reqs:
            self.assertEqual(r.method, "GET", r)
            rg = H.range_of(r)
            self.assertIsNotNone(rg, "fill without a single Range: %r %r" % (r, r.header("Range")))
            a, b = rg
            b = total - 1 if b is None else min(b, total - 1)
            if a % cs:
                self.assertGreaterEqual(a % cs, 64 * 1024, "fill range %r" % r.header("Range"))
            spans.append((a, b))
        spans.sort()
        pos = 0
        for a, b in spans:
            self.assertEqual(a, pos, "fill ranges %r: byte %d %s" % (
                spans, min(a, pos), "fetched twice" if a < pos else "never fetched"))
            pos = b + 1
        self.assertEqual(pos, total, "fill ranges %r end at %d of %d" % (spans, pos, total))

    def full(self, target, status="HIT", c=None, headers=()):
        c = c or self.client(timeout=60)
        c.request(target, headers=headers)
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        self.assertBody(r, target)
        self.assertEqual(r.length, len(r.body))
        if status is not None:
            self.assertEqual(r.header("X-Upstream-Cache-Status"), status, r.raw_head)
        return r


class SecondDownload(Base):
    def test_1mib_64k_chunks_second_download_no_upstream(self):
        d = self.setup_proxy(SMALL)
        p = "/c01/two/size/%d" % H.MIB
        r1 = self.full(p, "MISS")
        self.assertEqual(r1.header("ETag"), etag_of(p, H.MIB))
        self.assertEqual(r1.header("Accept-Ranges"), "bytes")
        self.assertCoverage(self.reqs(p), H.MIB, K64)
        n = self.origin.request_count()
        for r in self.reqs(p):
            self.assertIsNone(r.header("If-None-Match"))
            self.assertIsNone(r.header("If-Modified-Since"))
        r2 = self.full(p, "HIT")
        self.assertEqual(bytes(r2.body), bytes(r1.body))
        self.assertEqual(r2.header("ETag"), r1.header("ETag"))
        self.assertEqual(r2.header("Content-Type"), r1.header("Content-Type"))
        self.assertEqual(self.origin.request_count(), n, "second download went upstream")
        # the access log says MISS then HIT
        lines = H.wait_until(lambda: len(d.access_lines()) >= 2 and d.access_lines(),
                             10 * H.SLOW, 0.05, "2 access log lines")
        self.assertEqual(len(lines), 2, lines)
        got = []
        for line in lines:
            m = LINE_RE.match(line)
            self.assertIsNotNone(m, line)
            self.assertEqual(m.group(5), "200", line)
            self.assertEqual(m.group(6), str(H.MIB), line)
            got.append(m.group(9))
        self.assertEqual(got, ["MISS", "HIT"])

    def test_odd_size_last_chunk_short(self):
        self.setup_proxy(SMALL)
        n = 5 * K64 + 12345
        p = "/c01/odd/size/%d" % n
        self.full(p, "MISS")
        self.assertCoverage(self.reqs(p), n, K64)
        before = self.origin.request_count()
        self.full(p, "HIT")
        c = self.client()
        c.request(p, headers=[("Range", "bytes=%d-" % (5 * K64 - 3))])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (5 * K64 - 3, n - 1, n))
        self.assertBody(r, p, 5 * K64 - 3, n)
        self.assertEqual(self.origin.request_count(), before)

    def test_64mib_default_chunk_second_download_no_upstream(self):
        self.setup_proxy()
        n = 64 * H.MIB
        p = "/c01/big/size/%d" % n
        r1 = self.full(p, "MISS")
        self.assertEqual(r1.length, n)
        self.assertCoverage(self.reqs(p), n, H.MIB)
        before = self.origin.request_count()
        r2 = self.full(p, "HIT")
        self.assertEqual(self.origin.request_count(), before, "second download went upstream")
        self.assertTrue(bytes(r2.body) == bytes(r1.body))

    def test_keepalive_miss_then_hit_same_connection(self):
        self.setup_proxy(SMALL)
        c = self.client()
        p = "/c01/ka/size/200000"
        self.full(p, "MISS", c=c)
        n = self.origin.request_count()
        self.full(p, "HIT", c=c)
        self.full(p, "HIT", c=c)
        self.assertEqual(self.origin.request_count(), n)


class Ranges(Base):
    def check_206(self, r, p, start, end, total):
        self.assertStatus(r, 206)
        self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (start, end, total))
        self.assertEqual(r.length, end - start + 1)
        self.assertBody(r, p, start, end + 1)

    def test_random_ranges_64mib_cold_then_cached(self):
        self.setup_proxy()
        total = 64 * H.MIB
        p = "/c01/rnd/size/%d" % total
        rng = random.Random(20240604)
        n_each = 500

        def one():
            kind = rng.random()
            if kind < 0.70:
                ln = rng.choice([1, 2, rng.randint(1, 4096), rng.randint(1, 300 * H.KIB),
                                 rng.randint(H.MIB - 100, H.MIB + 100),
                                 rng.randint(1, 3 * H.MIB)])
                a = rng.randrange(total)
                b = a + ln - 1
                return "bytes=%d-%d" % (a, b), a, min(b, total - 1)
            if kind < 0.80:
                a = total - rng.randint(1, 2 * H.MIB)
                return "bytes=%d-" % a, a, total - 1
            if kind < 0.90:
                k = rng.randint(1, 2 * H.MIB)
                return "bytes=-%d" % k, total - k, total - 1
            # aligned on chunk edges, the cases most likely to be off by one
            i = rng.randrange(64)
            a = i * H.MIB + rng.choice([-1, 0, 1]) if i else 0
            b = a + rng.choice([H.MIB - 1, H.MIB, H.MIB + 1, 0])
            return "bytes=%d-%d" % (a, b), a, min(b, total - 1)

        c = self.client(timeout=60)

        def run(n):
            for _ in range(n):
                hdr, a, b = one()
                c.request(p, headers=[("Range", hdr)])
                r = c.read_response()
                with self.subTest(range=hdr):
                    self.check_206(r, p, a, b, total)
                    self.assertEqual(r.header("ETag"), etag_of(p, total))

        run(n_each)
        # cold phase: never a byte fetched twice
        fills = self.reqs(p)
        self.assertGreater(len(fills), 0)
        spans = sorted(H.fetched_spans(fills, total))
        self.assertEqual(H.bytes_fetched_twice(fills, total), 0, "bytes fetched twice: %r" % spans)
        for r in fills:
            # a fill starts on a chunk edge, or (two-part fill) where a client's range starts
            # deep inside a chunk; its other part then ends right there
            a = H.range_of(r)[0]
            if a % H.MIB:
                self.assertGreaterEqual(a % H.MIB, 64 * 1024)
                self.assertIn(a - 1, [b for _, b in spans], "no head part for %d" % a)
        # fill the rest, then the second half must make no upstream request
        self.full(p, None, c=c)
        self.assertCoverage(self.reqs(p), total, H.MIB)
        before = self.origin.request_count()
        run(n_each)
        self.assertEqual(self.origin.request_count(), before, "cached ranges went upstream")

    def test_range_forms_cold_and_warm(self):
        self.setup_proxy(SMALL)
        T = H.MIB + 1000
        cases = [
            ("bytes=0-0", 206, (0, 0)),
            ("bytes=100-200", 206, (100, 200)),
            ("bytes=65530-65545", 206, (65530, 65545)),             # across a chunk edge
            ("bytes=65536-131071", 206, (65536, 131071)),            # exactly chunk 1
            ("bytes=%d-" % (T - 70000), 206, (T - 70000, T - 1)),    # open
            ("bytes=300000-", 206, (300000, T - 1)),
            ("bytes=-100", 206, (T - 100, T - 1)),                   # suffix
            ("bytes=-70000", 206, (T - 70000, T - 1)),
            ("bytes=-%d" % (T + 5), 206, (0, T - 1)),                # suffix longer than T
            ("bytes=%d-%d" % (T - 1, T + 100), 206, (T - 1, T - 1)),  # end clamped
            ("bytes=%d-" % T, 416, None),
            ("bytes=%d-%d" % (T + 10, T + 20), 416, None),
            ("bytes=-0", 416, None),
            ("bytes=0-9, 5-20", 206, (0, 20)),                       # several, merged: one
            ("bytes=0-9,10-19", 206, (0, 19)),                       # (c08: multipart)
            ("bytes=9-5", 200, None),                                # invalid: ignored
            ("items=0-9", 200, None),
        ]
        for i, (hdr, status, rg) in enumerate(cases):
            p = "/c01/rf%d/size/%d" % (i, T)
            for phase in ("cold", "warm"):
                with self.subTest(range=hdr, phase=phase):
                    before = self.origin.request_count()
                    c = self.client()
                    c.request(p, headers=[("Range", hdr)])
                    r = c.read_response()
                    self.assertStatus(r, status)
                    self.assertEqual(r.header("ETag"), etag_of(p, T))
                    if status == 206:
                        self.check_206(r, p, rg[0], rg[1], T)
                    elif status == 416:
                        self.assertEqual(r.header("Content-Range"), "bytes */%d" % T)
                    else:
                        self.assertBody(r, p)
                        self.assertIsNone(r.header("Content-Range"))
                    # the connection is still usable (exact framing)
                    c.request(p, headers=[("Range", "bytes=1-2")])
                    self.check_206(c.read_response(), p, 1, 2, T)
                    if phase == "warm":
                        self.assertEqual(self.origin.request_count(), before,
                                         "warm request went upstream")
                        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
            # never more than one request per chunk for all of this
            got = H.fetched_chunks(self.reqs(p), T, K64)
            self.assertEqual(len(got), len(set(got)), "chunk fetched twice: %r" % got)

    def test_range_on_cold_object_fetches_only_its_chunks(self):
        self.setup_proxy(SMALL)
        T = 20 * K64
        p = "/c01/only/size/%d" % T
        c = self.client()
        c.request(p, headers=[("Range", "bytes=%d-%d" % (5 * K64 + 10, 7 * K64 + 10))])
        self.check_206(c.read_response(), p, 5 * K64 + 10, 7 * K64 + 10, T)
        got = H.fetched_chunks(self.reqs(p), T, K64)
        self.assertEqual(sorted(set(got) & {5, 6, 7}), [5, 6, 7], got)
        self.assertEqual(min(got), 5, "chunks before the range fetched: %r" % got)
        # the same range again: nothing new; a range over cached and cold chunks: only the cold
        n = self.origin.request_count()
        c.request(p, headers=[("Range", "bytes=%d-%d" % (5 * K64 + 10, 7 * K64 + 10))])
        self.check_206(c.read_response(), p, 5 * K64 + 10, 7 * K64 + 10, T)
        self.assertEqual(self.origin.request_count(), n)
        c.request(p, headers=[("Range", "bytes=%d-%d" % (6 * K64, 9 * K64 - 1))])
        self.check_206(c.read_response(), p, 6 * K64, 9 * K64 - 1, T)
        got = H.fetched_chunks(self.reqs(p), T, K64)
        self.assertEqual(sorted(set(got) & set(range(9))), [5, 6, 7, 8], got)
        self.assertEqual(len(got), len(set(got)), "chunk fetched twice: %r" % got)


class Conditionals(Base):
    LM = "Tue, 15 Nov 1994 12:45:26 GMT"

    def setUp(self):
        super().setUp()
        self.setup_proxy(SMALL)

        def h(ex):
            H.serve_object(ex, int(H.SIZE_RE.search(ex.req.path).group(1)),
                           extra=[("Last-Modified", self.LM)])
        self.origin.route("/c01/cond", h)

    def ask(self, p, headers, status):
        c = self.client()
        c.request(p, headers=headers)
        r = c.read_response()
        self.assertStatus(r, status)
        if status == 304:
            self.assertEqual(len(r.body), 0)
            self.assertEqual(r.header("ETag"), etag_of(p, 300000))
            self.assertIsNone(r.header("Transfer-Encoding"))
            # nothing follows the 304 on the connection
            c.request(p, headers=[("Range", "bytes=0-3")])
            r2 = c.read_response()
            self.assertStatus(r2, 206)
            self.assertBody(r2, p, 0, 4)
        return r

    def test_conditionals_from_stored_validators(self):
        p = "/c01/cond/a/size/300000"
        r = self.full(p, "MISS")
        self.assertEqual(r.header("Last-Modified"), self.LM)
        et = etag_of(p, 300000)
        n = self.origin.request_count()
        self.ask(p, [("If-None-Match", et)], 304)
        self.ask(p, [("If-None-Match", "W/" + et)], 304)
        self.ask(p, [("If-None-Match", '"nope", ' + et)], 304)
        self.ask(p, [("If-None-Match", "*")], 304)
        self.assertBody(self.ask(p, [("If-None-Match", '"nope"')], 200), p)
        self.ask(p, [("If-Modified-Since", self.LM)], 304)
        self.assertBody(self.ask(p, [("If-Modified-Since", "Mon, 14 Nov 1994 12:45:26 GMT")], 200),
                        p)
        # If-Range: the right ETag gives the range, a wrong one the whole object
        r = self.ask(p, [("Range", "bytes=10-19"), ("If-Range", et)], 206)
        self.assertEqual(r.header("Content-Range"), "bytes 10-19/300000")
        self.assertBody(r, p, 10, 20)
        r = self.ask(p, [("Range", "bytes=10-19"), ("If-Range", '"wrong"')], 200)
        self.assertBody(r, p)
        self.assertIsNone(r.header("Content-Range"))
        self.assertEqual(self.origin.request_count(), n, "conditionals went upstream")

    def test_conditional_on_cold_object_fill_is_unconditional(self):
        p = "/c01/cond/cold/size/300000"
        et = etag_of(p, 300000)
        r = self.ask(p, [("If-None-Match", et)], 304)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        for q in self.reqs(p):
            self.assertIsNone(q.header("If-None-Match"), "fill carried the client's If-None-Match")
            self.assertIsNone(q.header("If-Modified-Since"))
        self.full(p, None)


class Head(Base):
    def test_head_after_fill_is_a_hit(self):
        self.setup_proxy(SMALL)
        p = "/c01/head/size/300000"
        self.full(p, "MISS")
        n = self.origin.request_count()
        c = self.client()
        c.request(p, method="HEAD")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Length"), "300000")
        self.assertEqual(r.header("ETag"), etag_of(p, 300000))
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        # no body bytes after the head: the next response on the connection parses cleanly
        c.request(p, headers=[("Range", "bytes=0-99")])
        r2 = c.read_response()
        self.assertStatus(r2, 206)
        self.assertBody(r2, p, 0, 100)
        self.assertEqual(self.origin.request_count(), n)
        self.assertEqual(self.reqs(p, "HEAD"), [])

    def test_head_before_fill_is_forwarded(self):
        self.setup_proxy(SMALL)
        p = "/c01/headcold/size/300000"
        c = self.client()
        c.request(p, method="HEAD")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Length"), "300000")
        self.assertEqual(len(self.reqs(p, "HEAD")), 1, "origin did not see the HEAD")
        self.assertEqual(self.reqs(p, "GET"), [], "a HEAD filled the cache")
        c.request(p, headers=[("Range", "bytes=5-9")])
        r2 = c.read_response()
        self.assertStatus(r2, 206)
        self.assertBody(r2, p, 5, 10)
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "MISS")


class NoCache(Base):
    def test_nocache_refetches_and_restores(self):
        self.setup_proxy(SMALL)
        p = "/c01/nc/size/%d" % (4 * K64)
        self.full(p, "MISS")
        n1 = len(self.reqs(p))
        self.assertEqual(n1, 4)
        r = self.full(p + "?nocache=1", None)
        self.assertIn(r.header("X-Upstream-Cache-Status"), ("MISS", "BYPASS"))
        new = self.reqs(p)[n1:]
        self.assertCoverage(new, 4 * K64, K64)
        for q in new:
            self.assertIn("nocache=1", q.target, "query not forwarded upstream")
        n2 = self.origin.request_count()
        self.full(p, "HIT")
        self.assertEqual(self.origin.request_count(), n2)


class NoRangeOrigin(Base):
    def setUp(self):
        super().setUp()
        self.setup_proxy(SMALL)

        def h(ex):
            # ignores Range: always the whole object with 200
            n = int(H.SIZE_RE.search(ex.req.path).group(1))
            ex.send(200, H.content(ex.req.path, 0, n),
                    [("ETag", etag_of(ex.req.path, n)), ("Content-Type", "application/x-test")])
        self.origin.route("/c01/norange", h)

    def test_full_get(self):
        n = 5 * K64 + 777
        p = "/c01/norange/full/size/%d" % n
        r = self.full(p, "MISS")
        self.assertEqual(r.header("ETag"), etag_of(p, n))
        k = self.origin.request_count()
        self.full(p, "HIT")
        self.assertEqual(self.origin.request_count(), k, "not cached")

    def test_one_whole_answer_fills_every_chunk(self):
        # the first answer shows the origin ignores Range: that one answer fills all 6 chunks
        # (no read-ahead requests, each of which would bring the object from byte 0 again), and
        # the origin is remembered, so the next object costs one request too
        for name in ("first", "second"):
            n = 5 * K64 + 777
            p = "/c01/norange/%s/size/%d" % (name, n)
            k = self.origin.request_count()
            r = self.full(p, "MISS")
            self.assertBody(r, p)
            self.daemon.settle_fetches()
            self.assertEqual(self.origin.request_count() - k, 1, "requests for %s" % name)
            self.full(p, "HIT")
            for a in (0, K64 + 5, 5 * K64):
                r = self.get(p, headers=[("Range", "bytes=%d-%d" % (a, a + 99))])
                self.assertBody(r, p, a, a + 100)
            self.assertEqual(self.origin.request_count() - k, 1, "not all stored: %s" % name)

    def test_ranges(self):
        n = 5 * K64 + 777
        p = "/c01/norange/rg/size/%d" % n
        c = self.client()
        for a, b in [(100000, 199999), (0, 0), (n - 10, n - 1), (K64 - 1, K64)]:
            c.request(p, headers=[("Range", "bytes=%d-%d" % (a, b))])
            r = c.read_response()
            self.assertStatus(r, 206)
            self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, n))
            self.assertBody(r, p, a, b + 1)
        c.request(p, headers=[("Range", "bytes=-5")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, n - 5, n)
        self.full(p, None, c=c)
        k = self.origin.request_count()
        c.request(p, headers=[("Range", "bytes=100000-199999")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, 100000, 200000)
        self.full(p, "HIT", c=c)
        self.assertEqual(self.origin.request_count(), k, "not cached")


class Uncacheable(Base):
    def test_404_passes_through_uncached(self):
        self.setup_proxy(SMALL)
        p = "/c01/nf/missing"
        want = b"no such object: " + p.encode() + b"\n"
        for i in range(2):
            before = self.origin.request_count()
            c = self.client()
            c.request(p)
            r = c.read_response()
            self.assertStatus(r, 404)
            self.assertEqual(bytes(r.body), want)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
            self.assertGreaterEqual(self.origin.request_count() - before, 1,
                                    "404 answered from the cache on round %d" % i)
        self.assertGreaterEqual(len(self.reqs(p)), 2)
        self.assertEqual(H.chunk_files(self.daemon.cfg("cache", "dir")), [])

    def test_big_error_body_and_5xx_pass_through(self):
        self.setup_proxy(SMALL)
        big = bytes(range(256)) * 400   # 100 KiB error page: not drained by the fill

        def h(ex):
            ex.send(403, big, [("Content-Type", "text/html")])
        self.origin.route("/c01/forbidden", h)
        for _ in range(2):
            before = self.origin.request_count()
            r = self.get("/c01/forbidden/x")
            self.assertStatus(r, 403)
            self.assertEqual(bytes(r.body), big)
            self.assertGreaterEqual(self.origin.request_count() - before, 1)
        p = "/c01/err/size/1000?status=503"
        for _ in range(2):
            before = self.origin.request_count()
            r = self.get(p)
            self.assertStatus(r, 503)
            self.assertBody(r, p)
            self.assertGreaterEqual(self.origin.request_count() - before, 1)
        self.assertEqual(H.chunk_files(self.daemon.cfg("cache", "dir")), [])

    def test_authorization_bypass(self):
        self.setup_proxy(SMALL)
        p = "/c01/auth/size/200000"
        auth = "Basic dXNlcjpwYXNz"
        for i in range(2):
            c = self.client()
            c.request(p, headers=[("Authorization", auth)])
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
            self.assertEqual(len(self.reqs(p)), i + 1)
            q = self.origin.last()
            self.assertEqual(q.header("Authorization"), auth, "Authorization not forwarded")
            self.assertIsNone(q.header("Range"))
        self.assertEqual(H.chunk_files(self.daemon.cfg("cache", "dir")), [], "bypass stored")
        # not cached by the bypass: a plain request is a MISS that fills (without Authorization)
        self.full(p, "MISS")
        for q in self.reqs(p)[2:]:
            self.assertIsNone(q.header("Authorization"))
            self.assertIsNotNone(q.header("Range"))
        # and a cached object is still bypassed with Authorization
        n = self.origin.request_count()
        c = self.client()
        c.request(p, headers=[("Authorization", auth)])
        r = c.read_response()
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertBody(r, p)
        self.assertEqual(self.origin.request_count(), n + 1)


class Versions(Base):
    def test_etag_change_nocache_then_normal(self):
        self.setup_proxy(SMALL)
        n1, n2 = 5 * K64 + 100, 4 * K64 + 5
        state = {"path": "/c01/ver-v1/size/%d" % n1, "size": n1}
        self.origin.route("/c01/ver/", versioned(state))
        p = "/c01/ver/obj"
        v1, v2 = state["path"], "/c01/ver-v2/size/%d" % n2
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, v1, total=n1)
        self.assertEqual(r.header("ETag"), etag_of(v1, n1))
        state.update(path=v2, size=n2)
        r = self.get(p + "?nocache=1")
        self.assertStatus(r, 200)
        self.assertEqual(r.header("ETag"), etag_of(v2, n2))
        self.assertBody(r, v2, total=n2)
        k = self.origin.request_count()
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertEqual(r.header("ETag"), etag_of(v2, n2))
        self.assertBody(r, v2, total=n2)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k)
        # ranges anywhere: the new version only
        for a in (0, K64 - 1, 3 * K64 + 7, n2 - 1):
            c = self.client()
            c.request(p, headers=[("Range", "bytes=%d-%d" % (a, a + 70000))])
            r = c.read_response()
            self.assertStatus(r, 206)
            self.assertBody(r, v2, a, min(n2, a + 70001))

    def test_etag_change_under_partial_cache_never_mixed(self):
        self.setup_proxy(SMALL)
        n = 6 * K64
        state = {"path": "/c01/mix-v1/size/%d" % n, "size": n}
        self.origin.route("/c01/mix/", versioned(state))
        p = "/c01/mix/obj"
        v1, v2 = state["path"], "/c01/mix-v2/size/%d" % n
        c = self.client()
        c.request(p, headers=[("Range", "bytes=0-70000")])       # chunks 0 and 1 of v1
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, v1, 0, 70001)
        state["path"] = v2                                        # same length, new ETag
        c = self.client()
        c.request(p)
        try:
            r = c.read_response()
            done = True
        except H.ProtocolError:
            r = c.partial
            done = False
        self.assertIn(r.status, (200,))
        et = r.header("ETag")
        self.assertIn(et, (etag_of(v1, n), etag_of(v2, n)))
        src = v1 if et == etag_of(v1, n) else v2
        got = bytes(r.body)
        if done:
            self.assertEqual(len(got), n)
        # whatever arrived is one version, the one the head announced
        self.assertBody(got, src, 0, len(got))
        # afterwards: the new version, whole
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertEqual(r.header("ETag"), etag_of(v2, n))
        self.assertBody(r, v2, total=n)
        r = self.get(p)
        self.assertBody(r, v2, total=n)


class Keys(Base):
    """Cache key = identifier + path without the query (docs/interfaces.md)."""

    def test_query_ignored_host_part_of_key(self):
        self.setup_proxy(SMALL)
        p = "/c01/key/size/200000"
        self.full(p, "MISS")
        n = self.origin.request_count()
        self.full(p + "?x=1&y=2", "HIT")
        c = self.client()
        c.request("http://%s%s" % (H.DEFAULT_HOST, p))          # absolute-form
        r = c.read_response()
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        for host in ("GAME.Example.TEST", H.DEFAULT_HOST + "."):
            c = self.client()
            c.request(p, host=host)
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT", host)
        self.assertEqual(self.origin.request_count(), n)
        # another host with the same path is another object
        c = self.client()
        c.request(p, host="other.example.test")
        r = c.read_response()
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertGreater(self.origin.request_count(), n)
        self.assertEqual(self.origin.last().header("Host"), "other.example.test")


class Huge(Base):
    def test_6gib_object_ranges_64bit(self):
        # only the chunks the ranges touch travel: offsets past 4 GiB, never the whole object
        self.setup_proxy()
        T = 6 * 1024 * H.MIB + 12345
        p = "/c01/huge/size/%d" % T
        c = self.client()
        for a, b in [(5 * 1024 * H.MIB - 10, 5 * 1024 * H.MIB + 9), (T - 100, T - 1),
                     ((1 << 32) - 1, (1 << 32))]:
            for phase in ("cold", "warm"):
                self.daemon.settle_fetches()    # the cold range's chunk may fill on after it
                n = self.origin.request_count()
                c.request(p, headers=[("Range", "bytes=%d-%d" % (a, b))])
                r = c.read_response()
                self.assertStatus(r, 206)
                self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, T))
                self.assertEqual(r.length, b - a + 1)
                self.assertBody(r, p, a, b + 1)
                if phase == "warm":
                    self.assertEqual(self.origin.request_count(), n)
        c.request(p, headers=[("Range", "bytes=-7")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, T - 7, T)
        c.request(p, headers=[("Range", "bytes=%d-" % T)])
        r = c.read_response()
        self.assertStatus(r, 416)
        self.assertEqual(r.header("Content-Range"), "bytes */%d" % T)
        c.request(p, method="HEAD")
        r = c.read_response()
        self.assertEqual(r.header("Content-Length"), str(T))
        for q in self.reqs(p):
            self.assertIsNotNone(H.range_of(q), "the whole 6 GiB object was asked for")


if __name__ == "__main__":
    raise SystemExit(H.main())
