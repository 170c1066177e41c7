# SPDX-License-Identifier: BSD-2-Clause
"""c11: hit and miss per byte (issue 16). Every byte fetched from the origin counts as a miss
(cacheparty_response_bytes_total{cache="miss"}) the first time it is delivered to any client and
as a hit every later time; a request is logged MISS when one of its bytes was a first delivery,
else HIT. Checked on a cold download with read-ahead (also with a memory too small for what is
fetched ahead, so chunks are evicted before they are delivered and come back from their files),
on eight concurrent range connections, and on a joiner of a chunk still filling that gets bytes
the first client already had. Overlap in the joiner test is made certain by the origin (it holds
the chunk half sent until the test releases it), never by timing."""

import re
import threading

import harness as H

BIG = (16 if H.SANITIZED else 64) * H.MIB
CS = H.MIB
LINE_RE = re.compile(r'^\[(\S+)\] (\S+) / - - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" '
                     r'"([^"]*)" "(HIT|MISS|BYPASS|-)" "([^"]*)" "([^"]*)"$')


class Held:
    """Serves the /size/N object of the request path; the first request sends its head and
    <hold> body bytes, sets .holding and waits for .release before the rest."""

    def __init__(self, hold):
        self.hold = hold
        self.lock = threading.Lock()
        self.first = True
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, ex):
        req = ex.req
        n = int(H.SIZE_RE.search(req.path).group(1))
        with self.lock:
            first, self.first = self.first, False
        if not first:
            H.serve_object(ex, n)
            return
        rng = H.parse_range(req.header("Range"), n)
        start, end = rng if isinstance(rng, tuple) else (0, n)
        hdrs = [("Content-Type", "application/octet-stream"), ("Accept-Ranges", "bytes"),
                ("ETag", '"%08x-%x"' % (H.seed_of(req.path), n)),
                ("Content-Length", str(end - start))]
        if isinstance(rng, tuple):
            hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, n)))
        ex.send_head(206 if isinstance(rng, tuple) else 200, hdrs)
        cut = min(end, start + self.hold)
        ex.write(H.content(req.path, start, cut))
        self.holding.set()
        while not self.release.wait(0.05):
            if ex.origin.stopping.is_set():
                return
        ex.write(H.content(req.path, cut, end))


class HitMiss(H.CPTestCase):
    def start(self, cache=None):
        o = {"server": {"admin_listen": "auto"}, "cache": {"memory_size": "128M"}}
        o["cache"].update(cache or {})
        return self.setup_proxy(o)

    def counts(self):
        m = self.daemon.metrics()
        return (m.get('cacheparty_response_bytes_total{cache="hit"}', 0),
                m.get('cacheparty_response_bytes_total{cache="miss"}', 0))

    def wait_counted(self, total):
        """Waits until hit + miss reach <total> (bytes are counted as they are sent, a client's
        last byte may come before the counter in the scrape); returns (hit, miss)."""
        try:
            H.wait_until(lambda: sum(self.counts()) >= total, 10 * H.SLOW, 0.05,
                         "hit + miss >= %d" % total)
        except AssertionError:
            pass
        return self.counts()

    def statuses(self, n):
        """The cache status column of the first <n> access log lines."""
        lines = H.wait_until(lambda: len(self.daemon.access_lines()) >= n and
                             self.daemon.access_lines(), 10 * H.SLOW, 0.05, "%d lines" % n)
        out = []
        for line in lines[:n]:
            m = LINE_RE.match(line)
            self.assertIsNotNone(m, line)
            out.append(m.group(9))
        return out

    def download(self, p):
        c = self.client(timeout=60 * H.SLOW)
        c.request(p)
        r = c.read_response()
        c.close()
        self.assertStatus(r, 200)
        self.assertBody(r, p)
        return r

    def ranges(self, p, n):
        """<n> concurrent connections, each asking its own n-th of object <p> (BIG bytes)."""
        part = BIG // n
        out = [None] * n
        errs = []

        def one(i):
            try:
                c = self.client(timeout=60 * H.SLOW)
                a, b = i * part, (i + 1) * part - 1
                c.request(p, headers=[("Range", "bytes=%d-%d" % (a, b))])
                r = c.read_response()
                self.assertStatus(r, 206)
                self.assertBody(r, p, a, b + 1, BIG)
                out[i] = r
            except BaseException as e:   # reported by the main thread
                errs.append(e)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise errs[0]
        return out

    def test_cold_download_is_all_miss_then_all_hit(self):
        self.start()
        p = H.size_path(BIG, "c11/one")
        r = self.download(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        hit, miss = self.wait_counted(BIG)
        # every byte was delivered once: all misses (read-ahead counts only once delivered)
        self.assertEqual((hit, miss), (0, BIG))
        self.daemon.settle_fetches()
        up = self.daemon.metrics()["cacheparty_upstream_bytes_total"]
        self.assertEqual(up, BIG)     # the origin bytes that were delivered: the misses
        r = self.download(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        hit, miss = self.wait_counted(2 * BIG)
        self.assertEqual((hit, miss), (BIG, BIG))
        self.assertEqual(self.statuses(2), ["MISS", "HIT"])

    def test_readahead_evicted_before_delivery_still_counts_as_miss(self):
        # 16 MiB of memory and 4 runs of read-ahead: chunks fetched ahead are evicted before the
        # client gets to them, and are read back from their files: still first deliveries
        # (a quarter of the object, so that the ASan build's smaller object is evicted too)
        self.start({"memory_size": "%dM" % max(4, BIG // H.MIB // 4)})
        p = H.size_path(BIG, "c11/evict")
        self.download(p)
        hit, miss = self.wait_counted(BIG)
        self.assertEqual((hit, miss), (0, BIG))
        self.assertGreater(self.daemon.metrics().get(
            'cacheparty_evictions_total{tier="memory"}', 0), 0)
        self.download(p)
        hit, miss = self.wait_counted(2 * BIG)
        self.assertEqual((hit, miss), (BIG, BIG))
        self.assertEqual(self.statuses(2), ["MISS", "HIT"])

    def test_eight_range_connections_cold_all_miss_then_all_hit(self):
        self.start()
        p = H.size_path(BIG, "c11/eight")
        rs = self.ranges(p, 8)
        hit, miss = self.wait_counted(BIG)
        # each connection delivered its own eighth first: every line a MISS, every byte a miss
        # (exact: a chunk fetched ahead of a connection counts once some client got it)
        self.assertEqual((hit, miss), (0, BIG))
        self.assertEqual(self.statuses(8), ["MISS"] * 8)
        self.assertEqual([r.header("X-Upstream-Cache-Status") for r in rs], ["MISS"] * 8)
        self.daemon.settle_fetches()
        rs = self.ranges(p, 8)
        hit2, miss2 = self.wait_counted(2 * BIG)
        self.assertEqual(miss2, miss)
        self.assertEqual(hit2 - hit, BIG)
        self.assertEqual(self.statuses(16)[8:], ["HIT"] * 8)
        self.assertEqual([r.header("X-Upstream-Cache-Status") for r in rs], ["HIT"] * 8)

    def test_joiner_gets_bytes_already_delivered_as_hits(self):
        held = Held(CS // 2)
        self.start()
        self.origin.route("/c11/join", held)
        n = 3 * CS // 2
        p = H.size_path(n, "c11/join")
        a = self.client()
        a.request(p)
        ra = a.read_head()
        a.read_body_until(ra, CS // 4)       # A has had a quarter of chunk 0 ...
        H.wait_until(lambda: self.counts()[1] >= CS // 4, 5 * H.SLOW, 0.02, "A's bytes counted")
        # ... and B, joining the chunk while it fills, asks for what A already got
        b = self.client()
        b.request(p, headers=[("Range", "bytes=0-%d" % (CS // 4 - 1))])
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, p, 0, CS // 4, n)
        self.assertEqual(rb.header("X-Upstream-Cache-Status"), "HIT")
        held.release.set()
        ra = a.finish_response(ra)
        self.assertBody(ra, p)
        hit, miss = self.wait_counted(n + CS // 4)
        self.assertEqual((hit, miss), (CS // 4, n))
        self.daemon.settle_fetches()
        self.assertEqual(self.daemon.metrics()["cacheparty_upstream_bytes_total"], n)
        # B (its line first: it ended first) is a HIT, A a MISS
        self.assertEqual(self.statuses(2), ["HIT", "MISS"])
        # B joined chunk 0's fill (A may also have joined the read-ahead of chunk 1, or not:
        # that depends on when A reads)
        self.assertGreaterEqual(self.daemon.metrics()["cacheparty_coalesced_total"], 1)

    def test_clients_on_one_cold_object_at_once_share_one_miss_per_byte(self):
        self.start()
        n, k = 8 * CS + 12345, 5
        p = H.size_path(n, "c11/many")
        barrier = threading.Barrier(k)
        out, errs = [None] * k, []

        def one(i):
            try:
                c = self.client(timeout=60 * H.SLOW)
                barrier.wait(30 * H.SLOW)
                c.request(p)
                out[i] = c.read_response()
            except BaseException as e:   # reported by the main thread
                errs.append(e)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(k)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise errs[0]
        for r in out:
            self.assertBody(r, p)
        # each byte came from the origin once and was a miss for one client, a hit for the rest
        self.assertEqual(self.wait_counted(k * n), ((k - 1) * n, n))
        st = self.statuses(k)
        self.assertIn("MISS", st)
        self.daemon.settle_fetches()
        self.assertEqual(self.daemon.metrics()["cacheparty_upstream_bytes_total"], n)

    def test_nocache_refetch_is_bypass_and_its_bytes_count_per_byte(self):
        self.start({"chunk_size": "64K"})
        n = 200000
        p = H.size_path(n, "c11/nocache")
        self.download(p)
        self.assertEqual(self.wait_counted(n), (0, n))
        # a refetch brings the bytes from the origin again: their first delivery is a miss
        r = self.get(p + "?nocache=1")
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(self.wait_counted(2 * n), (0, 2 * n))
        r = self.download(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.wait_counted(3 * n), (n, 2 * n))
        self.assertEqual(self.statuses(3), ["MISS", "BYPASS", "HIT"])


if __name__ == "__main__":
    raise SystemExit(H.main())
