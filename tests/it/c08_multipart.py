# SPDX-License-Identifier: BSD-2-Clause
"""c08: several ranges answered 206 multipart/byteranges from the cache (issue 16; RFC 9110 §14.6,
§15.3.7.2; docs/interfaces.md, "Answers from the cache").

Overlapping and touching ranges are merged, the parts keep the order asked (a merged part stands
where its first range stood), unsatisfiable ranges are dropped (all of them: 416), a single part
left is a plain 206, more than 32 parts the whole object as 200. Every answer is read with the
standard library's MIME parser (email.parser) and also compared byte for byte with the framing
the daemon promises (include/multipart.h), each part with the origin's content; Content-Length is
the exact body length (the connection carries the next request). Cold answers fetch only the
chunks their parts touch, each once; warm ones make no origin request. Under valgrind: no memory
error or leak, a client that leaves mid-answer included."""

import email.parser
import email.policy
import os
import random
import re
import shutil
import threading
import unittest

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}}
CTYPE = "application/octet-stream"          # what the default origin sends
BOUNDARY_RE = re.compile(r"^multipart/byteranges; boundary=([0-9a-f]{32})$")
ACCESS_RE = re.compile(r'"GET (\S+) HTTP/1\.1" (\d{3}) (\d+) .* "(bytes=[^"]*)"$')


def range_header(parts):
    return "bytes=" + ",".join("%d-%d" % p for p in parts)


def expected_body(boundary, path, parts, total, ctype=CTYPE):
    """The multipart body the daemon must send for <parts> [(start, end_inclusive)] of <path>."""
    out = []
    for i, (a, b) in enumerate(parts):
        out.append(b"%s--%s\r\n" % (b"\r\n" if i else b"", boundary.encode()))
        if ctype:
            out.append(b"Content-Type: %s\r\n" % ctype.encode())
        out.append(b"Content-Range: bytes %d-%d/%d\r\n\r\n" % (a, b, total))
        out.append(H.content(path, a, b + 1))
    out.append(b"\r\n--%s--\r\n" % boundary.encode())
    return b"".join(out)


def mime_parts(resp):
    """[(Content-Type, Content-Range, bytes)] of a multipart answer, as the stdlib parses it."""
    head = b"Content-Type: " + resp.header("Content-Type").encode("latin-1") + b"\r\n\r\n"
    msg = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(head +
                                                                             bytes(resp.body))
    if not msg.is_multipart() or msg.get_content_type() != "multipart/byteranges":
        raise AssertionError("not multipart/byteranges: %r" % resp.header("Content-Type"))
    if msg.defects:
        raise AssertionError("MIME defects: %r" % msg.defects)
    return [(p.get("Content-Type"), p.get("Content-Range"), p.get_payload(decode=True))
            for p in msg.get_payload()]


def untyped(total):
    """An origin handler: the object of <total> bytes at any path, without a Content-Type."""
    def h(ex):
        rng = H.parse_range(ex.req.header("Range"), total)
        hdrs = [("ETag", '"untyped"')]
        if isinstance(rng, tuple):
            a, b = rng
            ex.send(206, H.content(ex.req.path, a, b),
                    hdrs + [("Content-Range", "bytes %d-%d/%d" % (a, b - 1, total))])
        else:
            ex.send(200, H.content(ex.req.path, 0, total), hdrs)
    return h


class Gather:
    """An origin handler: the object of <total> bytes at any path, each answer's head sent at once
    and its body held until <n> requests have arrived (or 1.5 s, less than the daemon's
    read_timeout, so that a held fill is not retried). .seen: for each request in arrival order,
    how many had arrived when its body was let go; .starts: their first bytes."""

    def __init__(self, total, n):
        self.total, self.n = total, n
        self.cond = threading.Condition()
        self.arrived = 0
        self.seen = []
        self.starts = []

    def __call__(self, ex):
        a, b = H.parse_range(ex.req.header("Range"), self.total)
        ex.send_head(206, [("Content-Type", CTYPE), ("ETag", '"gather"'),
                           ("Content-Range", "bytes %d-%d/%d" % (a, b - 1, self.total)),
                           ("Content-Length", str(b - a))])
        with self.cond:
            self.arrived += 1
            self.starts.append(a)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.arrived >= self.n, 1.5)
            self.seen.append(self.arrived)
        ex.write(H.content(ex.req.path, a, b))


def chunks_of(parts, cs):
    """Sorted chunk indexes that the parts touch, each once."""
    out = set()
    for a, b in parts:
        out.update(range(a // cs, b // cs + 1))
    return sorted(out)


class Base(H.CPTestCase):
    def reqs(self, path):
        return [r for r in list(self.origin.requests) if r.path == path]

    def check_multi(self, r, path, total, parts, ctype=CTYPE):
        """<r> is the 206 multipart/byteranges answer of exactly <parts>, in that order, of an
        object whose Content-Type is <ctype> ("": none). Returns its boundary."""
        self.assertStatus(r, 206)
        self.assertProcessedBy(r)
        self.assertIsNone(r.header("Content-Range"), "Content-Range on a multipart answer")
        self.assertEqual(len(r.header_all("Content-Type")), 1, r.raw_head)
        m = BOUNDARY_RE.match(r.header("Content-Type", ""))
        self.assertIsNotNone(m, r.header("Content-Type"))
        self.assertEqual(r.framing, "length")
        self.assertEqual(r.length, len(r.body))
        got = mime_parts(r)
        self.assertEqual(len(got), len(parts), [g[1] for g in got])
        for i, ((ct, cr, data), (a, b)) in enumerate(zip(got, parts)):
            self.assertEqual(ct, ctype or None, "part %d" % i)
            self.assertEqual(cr, "bytes %d-%d/%d" % (a, b, total), "part %d" % i)
            self.assertBody(data, path, a, b + 1)
        want = expected_body(m.group(1), path, parts, total, ctype)
        i = H.first_mismatch(bytes(r.body), want)
        self.assertIsNone(i, "multipart body differs at byte %s: got %r want %r" % (
            i, bytes(r.body[i:i + 40]) if i is not None else b"",
            want[i:i + 40] if i is not None else b""))
        return m.group(1)

    def check_206(self, r, path, a, b, total):
        self.assertStatus(r, 206)
        self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, total))
        self.assertEqual(r.header("Content-Type"), CTYPE)
        self.assertEqual(r.length, b - a + 1)
        self.assertBody(r, path, a, b + 1)

    def ask(self, c, path, rng, method="GET"):
        c.request(path, method=method, headers=[("Range", rng)])
        return c.read_response()

    def cold_then_warm(self, path, total, asked, parts, cs=K64):
        """Asks <asked> cold then warm: both answered with <parts>; the cold one fetched each
        chunk the parts touch once and nothing else, the warm one nothing; the connection is
        still usable after each. Returns the two boundaries."""
        bounds = []
        for phase in ("cold", "warm"):
            with self.subTest(phase=phase):
                before = self.origin.request_count()
                c = self.client(timeout=30)
                r = self.ask(c, path, asked)
                bounds.append(self.check_multi(r, path, total, parts))
                if phase == "cold":
                    self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
                    spans = H.fetched_spans(self.reqs(path), total)
                    got = H.fetched_chunks(self.reqs(path), total, cs)
                    self.assertEqual(got, chunks_of(parts, cs),
                                     "chunks fetched %r for parts %r (spans %r)" % (
                                         got, parts, spans))
                else:
                    self.assertEqual(self.origin.request_count(), before, "warm went upstream")
                    self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
                # exact framing: the next request on the connection is answered right
                self.check_206(self.ask(c, path, "bytes=%d-%d" % parts[0]), path,
                               parts[0][0], parts[0][1], total)
        return bounds


class Multipart(Base):
    def test_two_ranges_cold_and_warm(self):
        self.setup_proxy(SMALL)
        T = 20 * K64 + 1000
        p = "/c08/two/size/%d" % T
        parts = [(0, 99), (5 * K64 + 10, 5 * K64 + 1009)]
        b1, b2 = self.cold_then_warm(p, T, range_header(parts), parts)
        self.assertNotEqual(b1, b2, "the boundary is made per answer")

    def test_three_ranges_out_of_order_and_across_chunks(self):
        self.setup_proxy(SMALL)
        T = 30 * K64 + 7
        p = "/c08/three/size/%d" % T
        parts = [(20 * K64 - 5, 23 * K64 + 5), (K64 + 100, K64 + 199), (T - 50, T - 1)]
        self.cold_then_warm(p, T, range_header(parts), parts)

    def test_overlapping_and_touching_ranges_merged_in_the_order_asked(self):
        self.setup_proxy(SMALL)
        T = 20 * K64
        p = "/c08/merge/size/%d" % T
        # 8 ranges: (a) 600000-600099; (b) 0-99, joined by 50-199 (overlapping) and 200-299
        # (touching); (c) 400000-400009, inside 399990-400100 asked after it; (d) 700000-700099;
        # then 600050-700050, which joins (a) and (d): one part, where (a) stood.
        asked = ("bytes=600000-600099,0-99,50-199,200-299,400000-400009,399990-400100,"
                 "700000-700099,600050-700050")
        parts = [(600000, 700099), (0, 299), (399990, 400100)]
        self.cold_then_warm(p, T, asked, parts)

    def test_sixteen_ranges_shuffled(self):
        self.setup_proxy(SMALL)
        T = 48 * K64 + 12345
        p = "/c08/sixteen/size/%d" % T
        rnd = random.Random(1616)
        slot = T // 16
        parts = []
        for i in range(16):
            a = i * slot + rnd.randrange(slot // 2)
            parts.append((a, a + rnd.randrange(1, slot // 2 - 1)))
        rnd.shuffle(parts)
        self.cold_then_warm(p, T, range_header(parts), parts)

    def test_range_one_past_the_end_clamped_or_dropped(self):
        self.setup_proxy(SMALL)
        T = 5 * K64 + 3
        p = "/c08/end/size/%d" % T
        # one starting at the object's length, asked first: dropped (and never fetched); one
        # ending past the object: clamped
        asked = "bytes=%d-,0-9,%d-%d,%d-%d" % (T, T - 10, T + 100, 3 * K64, 3 * K64)
        self.cold_then_warm(p, T, asked, [(0, 9), (T - 10, T - 1), (3 * K64, 3 * K64)])

    def test_suffix_ranges_among_several(self):
        self.setup_proxy(SMALL)
        T = 5 * K64 + 3
        p = "/c08/suffix/size/%d" % T
        c = self.client()
        r = self.ask(c, p, "bytes=-10,0-9")
        self.check_multi(r, p, T, [(T - 10, T - 1), (0, 9)])
        r = self.ask(c, p, "bytes=0-9,-10")
        self.check_multi(r, p, T, [(0, 9), (T - 10, T - 1)])

    def test_cold_part_deep_in_a_big_chunk_then_one_before_it(self):
        # 1 MiB chunks: the first part starts deep inside chunk 0 (a two-part fill from there),
        # the second before it (its bytes come from the head part); every byte fetched once.
        self.setup_proxy()
        T = H.MIB + 5000
        p = "/c08/deep/size/%d" % T
        parts = [(700000, 700099), (100, 199)]
        c = self.client(timeout=30)
        self.check_multi(self.ask(c, p, range_header(parts)), p, T, parts)
        spans = sorted(H.fetched_spans(self.reqs(p), T))
        pos = 0
        for a, b in spans:
            self.assertEqual(a, pos, "fill spans %r" % spans)
            pos = b + 1
        self.assertEqual(pos, H.MIB, "fill spans %r: chunk 0 exactly" % spans)

    def test_cold_parts_are_fetched_in_parallel(self):
        # 4 parts in 4 chunks: their fills are asked at once ([upstream] readahead = 4 parts
        # ahead), not one after the other: the origin holds every body until all 4 are asked.
        self.setup_proxy(SMALL)
        T = 16 * K64
        p = "/c08/parallel/size/%d" % T
        g = Gather(T, 4)
        self.origin.route("/c08/parallel/", g)
        parts = [(9 * K64 + 5, 9 * K64 + 50), (K64, K64 + 9), (12 * K64, 12 * K64 + 99),
                 (3 * K64 + 7, 3 * K64 + 8)]
        r = self.get(p, headers=[("Range", range_header(parts))])
        self.check_multi(r, p, T, parts)
        self.assertEqual(g.seen[0], 4, "fills asked one after the other: %r" % g.seen)
        self.assertEqual(sorted(a // K64 for a in g.starts), [1, 3, 9, 12], g.starts)
        self.assertEqual(H.fetched_chunks(self.reqs(p), T, K64), [1, 3, 9, 12])

    def test_origin_without_ranges_is_asked_once(self):
        # Its one whole answer fills every chunk from the first asked: no part is asked ahead.
        self.setup_proxy(SMALL)
        T = 10 * K64
        p = "/c08/noranges/size/%d" % T
        self.origin.route("/c08/noranges/", lambda ex: ex.send(
            200, H.content(ex.req.path, 0, T), [("Content-Type", CTYPE), ("ETag", '"whole"')]))
        parts = [(8 * K64, 8 * K64 + 9), (2 * K64 + 1, 2 * K64 + 2), (5 * K64, 6 * K64)]
        self.check_multi(self.get(p, headers=[("Range", range_header(parts))]), p, T, parts)
        self.assertEqual(self.origin.request_count(), 1, self.reqs(p))
        n = self.origin.request_count()
        self.check_multi(self.get(p, headers=[("Range", range_header(parts))]), p, T, parts)
        self.assertEqual(self.origin.request_count(), n, "warm went upstream")

    def test_parts_from_disk_after_a_restart(self):
        # The parts' bytes from verified chunk files (disk lookups, sendfile), not from memory.
        cache = os.path.join(self._tmp, "shared-cache")
        os.makedirs(cache)
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        ov = {"cache": {"dir": cache, "chunk_size": "64K"}}
        d = self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        T = 12 * K64 + 77
        p = "/c08/disk/size/%d" % T
        parts = [(7 * K64 + 3, 9 * K64 + 3), (10, 99), (T - 100, T - 1), (4 * K64, 4 * K64)]
        self.check_multi(self.get(p, headers=[("Range", range_header(parts))]), p, T, parts)
        d.settle_disk()
        self.assertEqual(d.stop(), 0)
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        n = self.origin.request_count()
        again = [parts[2], parts[0], parts[3], parts[1]]
        r = self.get(p, headers=[("Range", range_header(again))])
        self.check_multi(r, p, T, again)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), n, "restarted daemon went upstream")
        disk = self.daemon.metrics().get('cacheparty_cache_hits_total{tier="disk"}', 0)
        self.assertGreaterEqual(disk, 5, "parts not read from the chunk files")

    def test_big_parts_cold_and_warm(self):
        # 1 MiB chunks, parts of several chunks each: read-ahead within each part, many turns
        # of CONN_SEND_TURN and blocked writes across part edges.
        self.setup_proxy()
        M = H.MIB
        T = 12 * M
        p = "/c08/big/size/%d" % T
        parts = [(5 * M + 7, 8 * M + 100), (0, 2 * M), (10 * M, T - 1)]
        self.cold_then_warm(p, T, range_header(parts), parts, cs=M)

    def test_concurrent_cold_clients_share_the_fills(self):
        self.setup_proxy(SMALL)
        N, T = 4, 24 * K64
        p = "/c08/shared/size/%d" % T
        rnd = random.Random(88)
        asks = []
        for _ in range(N):
            parts = []
            for idx in rnd.sample(range(24), 6):
                a = idx * K64 + rnd.randrange(K64 // 2)
                parts.append((a, a + rnd.randrange(1, K64 // 2 - 1)))
            asks.append(parts)
        barrier = threading.Barrier(N)
        got = [None] * N

        def one(k):
            c = H.Client(self.daemon.port, timeout=30)
            try:
                barrier.wait(10)
                c.request(p, headers=[("Range", range_header(asks[k]))])
                got[k] = c.read_response()
            except Exception as e:  # reported below, from the test's thread
                got[k] = e
            finally:
                c.close()
        threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for k in range(N):
            self.assertIsInstance(got[k], H.Response, "client %d: %r" % (k, got[k]))
            self.check_multi(got[k], p, T, asks[k])
        want = chunks_of([r for parts in asks for r in parts], K64)
        self.assertEqual(H.fetched_chunks(self.reqs(p), T, K64), want, "each chunk once")

    def test_object_without_content_type_has_parts_without_one(self):
        self.setup_proxy(SMALL)
        T = 4 * K64
        p = "/c08/untyped/size/%d" % T
        self.origin.route("/c08/untyped/", untyped(T))
        parts = [(3 * K64, 3 * K64 + 9), (0, 9)]
        for phase in ("cold", "warm"):
            with self.subTest(phase=phase):
                r = self.get(p, headers=[("Range", range_header(parts))])
                self.check_multi(r, p, T, parts, ctype="")

    def test_if_range_decides_between_parts_and_the_whole(self):
        self.setup_proxy(SMALL)
        T = 3 * K64
        p = "/c08/ifrange/size/%d" % T
        etag = '"%08x-%x"' % (H.seed_of(p), T)
        parts = [(2 * K64, 2 * K64 + 9), (0, 9)]
        c = self.client()
        c.request(p, headers=[("Range", range_header(parts)), ("If-Range", etag)])
        self.check_multi(c.read_response(), p, T, parts)
        c.request(p, headers=[("Range", range_header(parts)), ("If-Range", '"other"')])
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, p)

    def test_single_part_after_merging_is_a_plain_206(self):
        self.setup_proxy(SMALL)
        T = 10 * K64
        p = "/c08/plain/size/%d" % T
        c = self.client()
        for asked, (a, b) in [("bytes=0-99,100-199,50-150", (0, 199)),
                              ("bytes=70000-70010,69990-70100", (69990, 70100)),
                              ("bytes=%d-,0-9" % T, (0, 9)),
                              ("bytes=10-19,10-19", (10, 19)),
                              ("bytes=-100,%d-" % (T - 150), (T - 150, T - 1))]:
            with self.subTest(range=asked):
                r = self.ask(c, p, asked)
                self.check_206(r, p, a, b, T)
                self.assertNotIn("multipart", r.header("Content-Type"))

    def test_all_unsatisfiable_is_416(self):
        self.setup_proxy(SMALL)
        T = 2 * K64
        p = "/c08/unsat/size/%d" % T
        for phase in ("cold", "warm"):
            with self.subTest(phase=phase):
                c = self.client()
                r = self.ask(c, p, "bytes=%d-,%d-%d,-0" % (T, T + 10, T + 20))
                self.assertStatus(r, 416)
                self.assertEqual(r.header("Content-Range"), "bytes */%d" % T)
                self.check_206(self.ask(c, p, "bytes=1-2"), p, 1, 2, T)

    def test_32_parts_answered_33_give_the_whole_object(self):
        self.setup_proxy(SMALL)
        T = 4 * K64
        p = "/c08/many/size/%d" % T
        c = self.client()
        p32 = [(i * 1000, i * 1000 + 9) for i in range(32)]
        self.check_multi(self.ask(c, p, range_header(p32)), p, T, p32)
        p33 = [(i * 1000, i * 1000 + 9) for i in range(33)]
        r = self.ask(c, p, range_header(p33))
        self.assertStatus(r, 200)
        self.assertIsNone(r.header("Content-Range"))
        self.assertEqual(r.header("Content-Type"), CTYPE)
        self.assertBody(r, p)
        # 40 ranges asked, 32 parts after merging: answered, in the order asked
        asked = p32 + [(i * 1000 + 5, i * 1000 + 20) for i in range(8)]
        merged = [(i * 1000, i * 1000 + (20 if i < 8 else 9)) for i in range(32)]
        self.check_multi(self.ask(c, p, range_header(asked)), p, T, merged)
        # 35 asked, the 2 unsatisfiable dropped: 33 parts, still too many
        r = self.ask(c, p, range_header(p33) + ",%d-,%d-" % (T, T + 5))
        self.assertStatus(r, 200)
        self.assertBody(r, p)

    def test_head_with_several_ranges_gets_the_multipart_head(self):
        self.setup_proxy(SMALL)
        T = 6 * K64
        p = "/c08/head/size/%d" % T
        parts = [(K64, K64 + 99), (0, 9)]
        c = self.client()
        self.check_multi(self.ask(c, p, range_header(parts)), p, T, parts)
        n = self.origin.request_count()
        r = self.ask(c, p, range_header(parts), method="HEAD")
        self.assertStatus(r, 206)
        self.assertEqual(len(r.body), 0)
        self.assertIsNone(r.header("Content-Range"))
        m = BOUNDARY_RE.match(r.header("Content-Type", ""))
        self.assertIsNotNone(m, r.header("Content-Type"))
        # the length the GET's body would have, with this answer's boundary
        self.assertEqual(int(r.header("Content-Length")),
                         len(expected_body(m.group(1), p, parts, T)))
        self.assertEqual(self.origin.request_count(), n, "HEAD went upstream")
        self.check_206(self.ask(c, p, "bytes=3-4"), p, 3, 4, T)

    def test_access_log_counts_the_multipart_body(self):
        d = self.setup_proxy(SMALL)
        T = 3 * K64
        p = "/c08/log/size/%d" % T
        parts = [(2 * K64, 2 * K64 + 499), (10, 19), (K64, K64)]
        r = self.ask(self.client(), p, range_header(parts))
        self.check_multi(r, p, T, parts)
        lines = H.wait_until(lambda: d.access_lines(), 10 * H.SLOW, 0.05, "an access log line")
        self.assertEqual(len(lines), 1, lines)
        m = ACCESS_RE.search(lines[0])
        self.assertIsNotNone(m, lines[0])
        self.assertEqual(m.group(2), "206", lines[0])
        self.assertEqual(int(m.group(3)), len(r.body), lines[0])
        self.assertEqual(m.group(4), range_header(parts), lines[0])


@unittest.skipIf(H.SANITIZED, "ASan build: LeakSanitizer checks leaks there")
@unittest.skipIf(shutil.which("valgrind") is None, "valgrind not installed")
class MultipartValgrind(Base):
    def test_no_leak_or_error_in_multipart_answers(self):
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        d = self.daemon = self.start_daemon(SMALL, origin=self.origin, dns=self.dns,
                                            binary=self.valgrind_binary())
        self.assertIn("memcheck", os.readlink("/proc/%d/exe" % d.pid), "not under valgrind")
        T = 8 * K64
        p = "/c08/vg/size/%d" % T
        parts = [(3 * K64 + 5, 4 * K64 + 5), (0, 9), (7 * K64, T - 1)]
        c = self.client(timeout=60)
        for _ in ("cold", "warm"):
            self.check_multi(self.ask(c, p, range_header(parts)), p, T, parts)
        r = self.ask(c, p, range_header(parts), method="HEAD")
        self.assertStatus(r, 206)
        # a client that leaves after the first part's head, cold
        q = "/c08/vg2/size/%d" % T
        c2 = self.client(timeout=60)
        c2.request(q, headers=[("Range", range_header(parts))])
        c2.read_head()
        c2.close()
        self.check_multi(self.ask(c, q, range_header(parts)), q, T, parts)
        self.assertValgrindClean(d)


if __name__ == "__main__":
    raise SystemExit(H.main())
