# SPDX-License-Identifier: BSD-2-Clause
"""c10: one origin request per uncacheable answer (issue 16). Whatever a fill gets back that
cannot be cached (404, 503, a redirect that is not followed, a close-delimited 200) is delivered,
from that one answer, to every client waiting on the fill; a body too large to share makes each
waiter forward its own request, never a cut answer. A chunked 200 from an origin that ignores
Range is stored once its last chunk arrives; a close-delimited one never is.

Concurrency is made certain, not timed: the origin holds its answer (Held) until the test has
seen, in /metrics, that the daemon took every client's request (one fill started, the others
joined it), and only then releases it."""

import threading

import harness as H

MISSES = "cacheparty_cache_misses_total"
JOINED = "cacheparty_coalesced_total"


class Held:
    """Origin route: each request waits for .release, then is answered by answer(ex)."""

    def __init__(self, answer):
        self.answer = answer
        self.release = threading.Event()

    def __call__(self, ex):
        self.release.wait(60 * H.SLOW)
        self.answer(ex)


class Uncacheable(H.CPTestCase):
    def start(self, upstream=None, **cache):
        # The origin holds its answers while the clients come in: far from first_byte_timeout.
        over = {"server": {"admin_listen": "auto"},
                "upstream": dict({"first_byte_timeout": "30s"}, **(upstream or {}))}
        if cache:
            over["cache"] = cache
        return self.setup_proxy(over)

    def log_lines(self, needle, n):
        """The access log lines naming <needle>, once there are <n> (the log is written once
        per loop turn, after the responses)."""
        d = self.daemon
        lines = H.wait_until(
            lambda: (lambda ls: len(ls) >= n and ls)([l for l in d.access_lines() if needle in l]),
            10 * H.SLOW, 0.05, "%d access log lines for %s" % (n, needle))
        self.assertEqual(len(lines), n)
        return lines

    def byte_counts(self):
        m = self.daemon.metrics()
        return (m.get('cacheparty_response_bytes_total{cache="hit"}', 0),
                m.get('cacheparty_response_bytes_total{cache="miss"}', 0))

    def origin_count(self, prefix):
        return sum(1 for r in self.origin.requests if r.path.startswith(prefix))

    def wait_taken(self, c, target, method="GET"):
        """Sends <target> on client <c> and waits until the daemon shows it took the request:
        the first one starting the fill (a miss), each later one joining it."""
        d = self.daemon
        m0 = d.metrics()
        miss0, join0 = m0.get(MISSES, 0), m0.get(JOINED, 0)
        c.request(target, method=method)
        H.wait_until(lambda: (lambda m: m.get(MISSES, 0) + m.get(JOINED, 0) >= miss0 + join0 + 1)(
            d.metrics()), 20 * H.SLOW, what="the daemon taking %s %s" % (method, target))

    def waiters(self, target, n, held, methods=None):
        """n clients ask <target> one after the other, each waiting for the fill the first one
        started (the origin holds its answer until all are in), then the answer is released;
        returns their responses."""
        cs = []
        for i in range(n):
            c = self.client(timeout=30)
            self.wait_taken(c, target, methods[i] if methods else "GET")
            cs.append(c)
        m = self.daemon.metrics()
        self.assertGreaterEqual(m.get(JOINED, 0), n - 1)
        self.origin.wait_requests(1)
        held.release.set()
        return [c.read_response(timeout=30) for c in cs]

    def assertShared(self, rs, status, body, field=("X-Custom", None), all_waiters=True):
        for r in rs:
            self.assertStatus(r, status)
            self.assertEqual(bytes(r.body), body)
            self.assertEqual(r.header("Content-Length"), str(len(body)))
            if field[1] is not None:
                self.assertEqual(r.header(field[0]), field[1])
            self.assertIsNotNone(r.header("Date"))
            self.assertIsNone(r.header("Transfer-Encoding"))
        # per byte: one origin answer, so one first delivery (MISS), every other one a HIT (the
        # MISS may have gone to a waiter that left: <rs> is not all of them)
        statuses = sorted(r.header("X-Upstream-Cache-Status") for r in rs)
        misses = 1 if all_waiters else statuses.count("MISS")
        self.assertLessEqual(misses, 1)
        self.assertEqual(statuses, ["HIT"] * (len(rs) - misses) + ["MISS"] * misses)
        first = rs[0]
        for r in rs[1:]:
            self.assertEqual((r.status, bytes(r.body), r.header(field[0])),
                             (first.status, bytes(first.body), first.header(field[0])))

    def error_page(self, status, tag):
        body = ("%d from the origin for %s\n" % (status, tag)).encode() * 20

        def answer(ex):
            ex.send(status, body, [("Content-Type", "text/plain"), ("X-Custom", tag)])
        return body, Held(answer)

    def test_404_five_waiters_one_origin_request(self):
        self.start()
        body, held = self.error_page(404, "c10-404")
        self.origin.route("/c10/404", held)
        hit0, miss0 = self.byte_counts()
        rs = self.waiters("/c10/404/x", 5, held)
        self.assertShared(rs, 404, body, ("X-Custom", "c10-404"))
        self.assertEqual(self.origin_count("/c10/404"), 1)
        self.assertEqual(self.daemon.metrics().get("cacheparty_answers_shared_total"), 5)
        # the body came from the origin once: one delivery is the miss, four are hits
        hit, miss = self.byte_counts()
        self.assertEqual((hit - hit0, miss - miss0), (4 * len(body), len(body)))
        lines = self.log_lines("/c10/404/x", 5)
        self.assertEqual(sum(1 for l in lines if '"MISS"' in l), 1)
        self.assertEqual(sum(1 for l in lines if '"HIT"' in l), 4)
        # not cached: the next request asks the origin again
        held.release.set()
        r = self.get("/c10/404/x")
        self.assertStatus(r, 404)
        self.assertEqual(self.origin_count("/c10/404"), 2)

    def test_503_five_waiters_one_origin_request(self):
        self.start()
        body, held = self.error_page(503, "c10-503")
        self.origin.route("/c10/503", held)
        rs = self.waiters("/c10/503/x", 5, held)
        self.assertShared(rs, 503, body, ("X-Custom", "c10-503"))
        self.assertEqual(self.origin_count("/c10/503"), 1)

    def test_unfollowed_302_five_waiters_one_origin_request(self):
        """An https Location is never followed by a fill: the redirect itself is the answer."""
        self.start()
        body = b"moved to https\n"

        def answer(ex):
            ex.send(302, body, [("Location", "https://secure.example.test/c10/x"),
                                ("X-Custom", "c10-302")])
        held = Held(answer)
        self.origin.route("/c10/302", held)
        rs = self.waiters("/c10/302/x", 5, held)
        self.assertShared(rs, 302, body, ("X-Custom", "c10-302"))
        for r in rs:
            self.assertEqual(r.header("Location"), "https://secure.example.test/c10/x")
        self.assertEqual(self.origin_count("/c10/302"), 1)

    def test_close_delimited_300k_five_waiters_one_origin_request(self):
        self.start()
        target = "/c10/close/size/%d" % (300 * H.KIB)
        body = H.content(target, 0, 300 * H.KIB)

        def answer(ex):
            ex.send(200, body, [("Content-Type", "application/octet-stream"),
                                ("X-Custom", "c10-close")], close=True)
        held = Held(answer)
        self.origin.route("/c10/close", held)
        rs = self.waiters(target, 5, held)
        self.assertShared(rs, 200, body, ("X-Custom", "c10-close"))
        self.assertEqual(self.origin_count("/c10/close"), 1)
        # never cached: a truncation cannot be told from its end
        r = self.get(target)
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), body)
        self.assertEqual(self.origin_count("/c10/close"), 2)

    def test_head_waiter_gets_the_head_alone(self):
        self.start()
        body, held = self.error_page(404, "c10-head")
        self.origin.route("/c10/head", held)
        rs = self.waiters("/c10/head/x", 3, held, methods=["GET", "GET", "HEAD"])
        self.assertShared(rs[:2], 404, body, ("X-Custom", "c10-head"))
        self.assertStatus(rs[2], 404)
        self.assertEqual(bytes(rs[2].body), b"")
        self.assertEqual(rs[2].header("X-Custom"), "c10-head")
        self.assertEqual(rs[2].header("Content-Length"), str(len(body)))
        self.assertEqual(self.origin_count("/c10/head"), 1)

    def test_close_delimited_past_the_bound_each_forwards(self):
        """An unknown-length body longer than the bound (1 MiB) is not shared: each waiter sends
        its own request and gets the whole body, never a cut one."""
        self.start()
        n = H.MIB + 300 * H.KIB
        target = "/c10/big/size/%d" % n
        body = H.content(target, 0, n)

        def answer(ex):
            ex.send(200, body, [("X-Custom", "c10-big")], close=True)
        held = Held(answer)
        self.origin.route("/c10/big", held)
        rs = self.waiters(target, 3, held)
        for r in rs:
            self.assertStatus(r, 200)
            self.assertEqual(bytes(r.body), body)
        self.assertEqual(self.origin_count("/c10/big"), 4)  # the fill's, then one each
        self.assertGreaterEqual(self.daemon.metrics().get("cacheparty_answer_fallbacks_total"), 1)

    def test_stalled_answer_is_504_for_every_waiter(self):
        """An uncacheable answer whose body stops coming: after read_timeout every waiter gets
        504 (none gets a cut body that looks complete), and nobody asks the origin again."""
        self.start(upstream={"read_timeout": "1s"})

        def answer(ex):
            ex.send_head(404, [("Content-Length", "1000"), ("X-Custom", "c10-stall")])
            ex.write(b"x" * 10)
            ex.stall()
        held = Held(answer)
        self.origin.route("/c10/stall", held)
        rs = self.waiters("/c10/stall/x", 3, held)
        for r in rs:
            self.assertStatus(r, 504)
            self.assertIsNone(r.header("X-Custom"))
        self.assertEqual(self.origin_count("/c10/stall"), 1)

    def test_nocache_waiters_share_the_answer(self):
        """Refetches (?nocache=) of one chunk share one fill, so its uncacheable answer too; it
        says BYPASS, as a refetch answered from the cache does."""
        self.start()
        body, held = self.error_page(404, "c10-nc")
        self.origin.route("/c10/nc", held)
        rs = self.waiters("/c10/nc/x?nocache=1", 3, held)
        for r in rs:
            self.assertStatus(r, 404)
            self.assertEqual(bytes(r.body), body)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(self.origin_count("/c10/nc"), 1)
        lines = self.log_lines("/c10/nc/x", 3)
        for l in lines:
            self.assertIn('"BYPASS"', l)

    def test_error_page_longer_than_the_bound_each_forwards(self):
        """A Content-Length past the bound: the fill does not read it; each waiter forwards its
        own request and gets the whole answer."""
        self.start()
        body = b"e" * (2 * H.MIB)

        def answer(ex):
            ex.send(503, body, [("X-Custom", "c10-long")])
        held = Held(answer)
        self.origin.route("/c10/long", held)
        rs = self.waiters("/c10/long/x", 3, held)
        for r in rs:
            self.assertStatus(r, 503)
            self.assertEqual(bytes(r.body), body)
            self.assertEqual(r.header("X-Custom"), "c10-long")
        self.assertEqual(self.origin_count("/c10/long"), 4)
        self.assertEqual(self.daemon.metrics().get("cacheparty_answer_fallbacks_total"), 1)
        self.assertEqual(self.daemon.metrics().get("cacheparty_answers_shared_total", 0), 0)

    def chunked_norange(self, ex):
        """An origin that ignores Range and sends its objects chunked, without a length."""
        m = H.SIZE_RE.search(ex.req.path)
        n = int(m.group(1))
        ex.send(200, H.content(ex.req.path, 0, n),
                [("ETag", '"c10-%d"' % n), ("Content-Type", "application/x-c10")], chunked=True)

    def test_chunked_200_without_range_cached(self):
        self.start()
        self.origin.route("/c10/chunked", self.chunked_norange)
        target = "/c10/chunked/size/%d" % (300 * H.KIB)
        r = self.get(target)
        self.assertStatus(r, 200)
        self.assertBody(r, target)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(r.header("Content-Length"), str(300 * H.KIB))
        self.assertEqual(r.header("ETag"), '"c10-%d"' % (300 * H.KIB))
        r = self.get(target)
        self.assertStatus(r, 200)
        self.assertBody(r, target)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        r = self.get(target, headers=[("Range", "bytes=1000-1999")])
        self.assertStatus(r, 206)
        self.assertBody(r, target, 1000, 2000)
        self.assertEqual(self.origin_count("/c10/chunked"), 1)
        self.assertEqual(self.daemon.metrics().get("cacheparty_fetch_chunked_stored_total"), 1)

    def test_chunked_200_without_range_many_chunks_cached_from_a_range(self):
        """64 KiB chunks: a first request in the middle of the object stores all of its chunks,
        those before the reader's too."""
        self.start(chunk_size="64K", memory_size="4M")
        self.origin.route("/c10/chunks", self.chunked_norange)
        n = 200 * H.KIB + 123
        target = "/c10/chunks/size/%d" % n
        r = self.get(target, headers=[("Range", "bytes=100000-")])
        self.assertStatus(r, 206)
        self.assertBody(r, target, 100000, n)
        r = self.get(target)
        self.assertStatus(r, 200)
        self.assertBody(r, target)
        # Stored, but bytes 0-99999 reach a client for the first time: a miss, per byte.
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        r = self.get(target)
        self.assertBody(r, target)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin_count("/c10/chunks"), 1)

    def test_chunked_200_without_range_waiters_share_the_stored_object(self):
        self.start()
        target = "/c10/chw/size/%d" % (200 * H.KIB)
        held = Held(self.chunked_norange)
        self.origin.route("/c10/chw", held)
        rs = self.waiters(target, 5, held)
        for r in rs:
            self.assertStatus(r, 200)
            self.assertBody(r, target)
        self.assertEqual(self.origin_count("/c10/chw"), 1)
        r = self.get(target)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin_count("/c10/chw"), 1)

    def test_waiter_that_leaves_does_not_hurt_the_others(self):
        self.start()
        body, held = self.error_page(404, "c10-leave")
        self.origin.route("/c10/leave", held)
        d = self.daemon
        cs = []
        for _ in range(3):
            c = self.client(timeout=30)
            self.wait_taken(c, "/c10/leave/x")
            cs.append(c)
        cs[0].close()
        held.release.set()
        rs = [c.read_response(timeout=30) for c in cs[1:]]
        self.assertShared(rs, 404, body, ("X-Custom", "c10-leave"), all_waiters=False)
        self.assertEqual(self.origin_count("/c10/leave"), 1)
        H.wait_until(lambda: d.metrics().get("cacheparty_answer_bytes") == 0, 10 * H.SLOW,
                     what="answer memory returned")


    def test_every_waiter_leaves_the_answer_is_freed(self):
        """The fill goes on without its readers (it holds none of them): its answer is read,
        nobody takes it, and all of it is freed."""
        self.start()
        n = 300 * H.KIB
        target = "/c10/gone/size/%d" % n
        body = H.content(target, 0, n)

        def answer(ex):
            ex.send(200, body, close=True)
        held = Held(answer)
        self.origin.route("/c10/gone", held)
        cs = []
        for _ in range(3):
            c = self.client(timeout=30)
            self.wait_taken(c, target)
            cs.append(c)
        for c in cs:
            c.close()
        held.release.set()
        self.daemon.settle_fetches()
        H.wait_until(lambda: self.daemon.metrics().get("cacheparty_answer_bytes") == 0,
                     10 * H.SLOW, what="answer memory returned")
        self.assertEqual(self.origin_count("/c10/gone"), 1)
        r = self.get(target)
        self.assertEqual(bytes(r.body), body)
        self.assertEqual(self.origin_count("/c10/gone"), 2)

if __name__ == "__main__":
    raise SystemExit(H.main())
