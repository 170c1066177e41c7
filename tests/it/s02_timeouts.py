# SPDX-License-Identifier: BSD-2-Clause
"""s02: client-side timeouts: request_timeout for a whole head (slowloris included),
keepalive_timeout for idle connections."""

import time

import harness as H


class Timeouts(H.CPTestCase):
    def test_partial_head_closed_after_request_timeout(self):
        self.setup_proxy()
        c = self.client()
        c.send(b"GET /s02/size/10 HTTP/1.1\r\nHost: game.example.test\r\n")
        self.assertClosed(c, timeout=15, what="connection with an unfinished head")
        if c._ready:
            self.assertIn(c._ready[0].status, (400, 408))
        self.assertEqual(self.origin.request_count(), 0)
        H.wait_until(lambda: "request timeout in CONN_S_READ_HEAD" in self.daemon.log(),
                     10 * H.SLOW, 0.1, "the daemon to log the request timeout")
        self.assertNotIn("send timeout", self.daemon.log())

    def test_slowloris_closed(self):
        # one byte every 200 ms never completes a head within request_timeout (2s)
        self.setup_proxy()
        c = self.client()
        data = b"GET /s02/size/10 HTTP/1.1\r\nHost: game.example.test\r\n" + \
            b"".join(b"X-%d: %s\r\n" % (i, b"v" * 20) for i in range(50))
        closed = False
        deadline = time.monotonic() + 20 * H.SLOW
        for b in data:
            if time.monotonic() > deadline:
                break
            try:
                c.sock.send(bytes([b]))
            except OSError:
                closed = True
                break
            if not c.is_open(0.2):
                closed = True
                break
        self.assertTrue(closed or c.wait_closed(5), "slowloris connection never closed")
        self.assertEqual(self.origin.request_count(), 0)

    def test_idle_connection_closed_after_keepalive_timeout(self):
        self.setup_proxy({"server": {"keepalive_timeout": "1s"}})
        c = self.client()
        c.request("/s02/ka/size/10")
        self.assertBody(c.read_response(), "/s02/ka/size/10")
        self.assertClosed(c, timeout=15, what="idle keep-alive connection")

    def test_connection_without_request_closed(self):
        self.setup_proxy()
        c = self.client()
        self.assertClosed(c, timeout=15, what="connection that never sends a request")


if __name__ == "__main__":
    raise SystemExit(H.main())
