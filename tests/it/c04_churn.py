# SPDX-License-Identifier: BSD-2-Clause
"""c04: no leak of memory, descriptors or fetches after 1000+ coalesced fetches with random client
disconnects (issue 5). Three clients per cold object ask for it together; some hang up at a
random point, the others read it whole and verify it. Afterwards: no fetch in flight, the
daemon's descriptors back to where they were, every object stored whole (a second pass is all
hits), and (via the harness's teardown) a clean exit, which under ASan means no leak."""

import random

import harness as H
from c02_coalesce import Paced

OBJECTS = 520
CHUNK = 64 * 1024
SIZE = 3 * CHUNK - 1000       # 3 chunks: a fill of chunk 0, then one read-ahead run of 2


class Churn(H.CPTestCase):
    def test_coalesced_fetches_with_random_disconnects(self):
        d = self.setup_proxy({"server": {"admin_listen": "auto", "max_connections": "256"},
                              "cache": {"chunk_size": "64K", "memory_size": "4M"},
                              "upstream": {"max_per_origin": "64", "keepalive": "16"}})
        rnd = random.Random(1234)
        base_fds = d.fd_count()
        for i in range(OBJECTS):
            path = "/c04/o%d/size/%d" % (i, SIZE)
            clients = [H.Client(d.port) for _ in range(3)]
            for c in clients:
                c.request(path)
            keep = rnd.randrange(3)
            for k, c in enumerate(clients):
                if k != keep and rnd.random() < 0.6:
                    try:
                        c.sock.recv(rnd.randrange(1, 4096))
                    except OSError:
                        pass
                    c.close()        # gone mid-response (or before it)
                    continue
                self.assertBody(c.read_response(), path)
                c.close()
        # every fetch ends by itself, clients or not
        H.wait_until(lambda: d.status()["inflight_fetches"] == 0, 30 * H.SLOW, 0.05,
                     "no fetch in flight")
        st = d.status()
        self.assertGreaterEqual(st["fetches_total"], 1000, st)
        H.wait_until(lambda: d.fd_count() <= base_fds + 20, 30 * H.SLOW, 0.05,
                     "descriptors back near %d (now %d)" % (base_fds, d.fd_count()))
        # everything was stored whole despite the hang-ups
        before = self.origin.request_count()
        for i in range(0, OBJECTS, 37):
            path = "/c04/o%d/size/%d" % (i, SIZE)
            r = self.get(path)
            self.assertBody(r, path)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), before)


class ReadAhead(H.CPTestCase):
    def test_one_cold_download_fetches_in_parallel(self):
        # one client, a cold 8 MiB object of 1 MiB chunks, readahead 4: after the first chunk's
        # head, runs of chunks ahead of the reader are fetched at the same time
        d = self.setup_proxy({"server": {"admin_listen": "auto"},
                              "upstream": {"readahead": "4", "max_per_origin": "8"}})
        path = "/c04/ra/size/%d" % (8 * H.MIB)
        # each origin response trickles, so fetches that overlap in time are seen open together
        r = self.get(path + "?trickle=262144,0.05")
        self.assertBody(r, path)
        self.assertGreaterEqual(self.origin.peak_open, 2, "read-ahead fetches never overlapped")
        # each byte asked for once: the runs tile the object
        spans = sorted(H.fetched_spans(self.origin.requests, 8 * H.MIB))
        self.assertEqual(sum(b - a + 1 for a, b in spans), 8 * H.MIB, spans)
        self.assertGreaterEqual(len(spans), 2, spans)
        self.assertGreaterEqual(d.status()["readahead_chunks_total"], 1)

    def test_no_read_ahead_while_many_fetches_run(self):
        # 32 fetches of other objects are held at the origin: the clients' cold data already keeps
        # it busy, so a cold download now gets no read-ahead, only the chunks its reader reaches
        busy = 32
        d = self.setup_proxy({"server": {"admin_listen": "auto", "max_connections": "128"},
                              "upstream": {"readahead": "4", "max_per_origin": "64"}})
        held = []
        for i in range(busy):
            paced = Paced(H.MIB, hold=(0,), hold_bytes=1000)
            self.addCleanup(paced.release.set)
            self.origin.route("/c04/busy/o%d/" % i, paced)
            p = "/c04/busy/o%d/obj" % i
            c = self.client(timeout=30)
            c.request(p)
            r = c.read_head()
            c.read_body_until(r, 1)          # its fetch runs, held mid-body
            held.append((paced, c, r, p))
        self.assertEqual(d.status()["inflight_fetches"], busy)
        path = "/c04/busy/big/size/%d" % (4 * H.MIB)
        x = self.client(timeout=30)
        x.request(path)
        rx = x.read_head()
        x.read_body_until(rx, 1)             # its head step (where read-ahead starts) is done
        st = d.status()
        self.assertEqual(st["readahead_chunks_total"], 0, st)
        for paced, c, r, p in held:
            paced.release.set()
        for paced, c, r, p in held:
            self.assertBody(c.finish_response(r), p, total=H.MIB)
        self.assertBody(x.finish_response(rx), path)


class Split(H.CPTestCase):
    def test_reader_deep_in_a_run_gets_its_own_fetch(self):
        # readahead 2 over a cold 16-chunk object: runs [1-8] and [9-15] after chunk 0. A second
        # client wanting chunk 14 (five chunks into the slow second run) must not wait for the run
        # to reach it: the run is cut and chunk 14 fetched at once.
        cs = 64 * 1024
        d = self.setup_proxy({"server": {"admin_listen": "auto"},
                              "cache": {"chunk_size": "64K"},
                              "upstream": {"readahead": "2", "max_per_origin": "8",
                                           "read_timeout": "30s"}})
        path = "/c04/split/size/%d" % (16 * cs)
        target = path + "?trickle=8192,0.05"       # each response crawls: 64 KiB in ~0.4 s
        a = self.client()
        a.request(target)
        H.wait_until(lambda: any((r.header("Range") or "").startswith("bytes=%d-" % (9 * cs))
                                 for r in self.origin.requests), 20 * H.SLOW, 0.02,
                     "the run from chunk 9 to start")
        b = self.client()
        lo = 14 * cs + 100
        b.request(target, headers=[("Range", "bytes=%d-%d" % (lo, lo + 999))])
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, path, start=lo, end=lo + 1000)
        starts = [(r.header("Range") or "")[6:].split("-")[0] for r in self.origin.requests]
        self.assertIn(str(14 * cs), starts, "chunk 14 was not fetched on its own: %r" % starts)
        self.assertGreaterEqual(d.status()["fetch_split_total"], 1)
        ra = a.read_response()
        self.assertBody(ra, path)


if __name__ == "__main__":
    raise SystemExit(H.main())
