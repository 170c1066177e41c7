# SPDX-License-Identifier: BSD-2-Clause
"""s01: a client that stops reading: bounded daemon memory (upstream back-pressure) and the
connection closed after send_timeout; a slow trickling origin still delivers exact bytes."""

import time

import harness as H

HUGE = (256 if H.SANITIZED else 1024) * H.MIB
RSS_LIMIT_KIB = 64 * 1024


class SlowClient(H.CPTestCase):
    def test_stalled_reader_bounded_memory_and_closed(self):
        self.setup_proxy({"cache": {"memory_size": "16M"}})
        d = self.daemon
        c = self.client(timeout=30)
        # small receive buffer so the daemon meets back-pressure early
        c.sock.setsockopt(H.socket.SOL_SOCKET, H.socket.SO_RCVBUF, 64 * H.KIB)
        p = "/s01/huge/size/%d" % HUGE
        c.request(p)
        r = c.read_head()
        self.assertStatus(r, 200)
        c.read_body_until(r, 64 * H.KIB)
        self.assertBody(r.body, p, 0, len(r.body))
        # stop reading. Wait until the origin stops sending (buffers full) or the daemon has closed
        # the connection, sampling the daemon's RSS meanwhile.
        peak = d.rss_kib()
        last, stable_since = -1, time.monotonic()
        deadline = time.monotonic() + 30 * H.SLOW
        while time.monotonic() < deadline:
            peak = max(peak, d.rss_kib())
            sent = self.origin.body_bytes_sent
            if sent != last:
                last, stable_since = sent, time.monotonic()
            elif time.monotonic() - stable_since > 1.0:
                break
            if H.server_side_closed(d.port, c.local_port):
                break
            time.sleep(0.05)
        print("    stalled client: daemon peak VmRSS %d KiB, origin sent %d body bytes"
              % (peak, self.origin.body_bytes_sent))
        if not H.SANITIZED:
            self.assertLess(peak, RSS_LIMIT_KIB,
                            "daemon VmRSS reached %d KiB with a stalled client (origin sent %d "
                            "bytes)" % (peak, self.origin.body_bytes_sent))
        # send_timeout (3s): the daemon closes the connection it cannot write to
        H.wait_until(lambda: H.server_side_closed(d.port, c.local_port), 20 * H.SLOW, 0.1,
                     "the daemon to close a client that accepts no bytes")
        # One line says why, as a send timeout: the bytes waiting are in its socket, not in the
        # daemon's output buffer, and its request came whole long ago.
        line = "127.0.0.1:%d: send timeout in CONN_S_CACHE_BODY" % c.local_port
        H.wait_until(lambda: line in d.log(), 10 * H.SLOW, 0.1,
                     "the daemon to log the send timeout of this client")
        self.assertNotIn("request timeout", d.log())
        got = len(r.body) + c.drain(timeout=30)
        self.assertLess(got, HUGE)
        self.assertTrue(c.peer_closed)

    def test_slow_reader_gets_exact_bytes(self):
        # reads slowly but steadily (never idle for send_timeout): must get everything
        self.setup_proxy()
        p = "/s01/steady/size/%d" % (2 * H.MIB)
        c = self.client(timeout=30)
        c.sock.setsockopt(H.socket.SOL_SOCKET, H.socket.SO_RCVBUF, 32 * H.KIB)
        c.request(p)
        r = c.read_head()
        while not r.complete:
            c.read_body_until(r, len(r.body) + 256 * H.KIB)
            time.sleep(0.02)   # the client's own pace, not a synchronisation
        self.assertBody(r, p)

    def test_trickling_origin(self):
        self.setup_proxy()
        p = "/s01/trickle/size/%d" % (512 * H.KIB)
        # 32 KiB every 50 ms: ~0.8 s, each gap far below read_timeout
        r = self.get(p + "?trickle=32768,0.05")
        self.assertStatus(r, 200)
        self.assertBody(r, p)

    def test_trickling_origin_chunked(self):
        self.setup_proxy()
        p = "/s01/trickle2/size/%d" % (100 * H.KIB + 3)
        r = self.get(p + "?trickle=10000,0.05&chunked=1")
        self.assertStatus(r, 200)
        self.assertBody(r, p)


if __name__ == "__main__":
    raise SystemExit(H.main())
