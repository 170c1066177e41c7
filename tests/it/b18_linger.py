# SPDX-License-Identifier: BSD-2-Clause
"""b18: lingering close. A response that closes the connection is followed by a shutdown of our
side and the client's further bytes are read and dropped (for a bounded time), so that bytes the
daemon never read do not make the kernel answer with a reset that destroys the response before
the client reads it: a refused request followed by a large pipelined upload still gets its whole
error response and a clean EOF."""

import socket
import time

import harness as H


class Linger(H.CPTestCase):
    def test_unread_pipelined_bytes_do_not_destroy_the_response(self):
        """A Connection: close request followed by bytes the daemon will never parse, from a
        client with a small receive buffer that is slow to read: most of the response is still in
        the daemon's send queue when it is done with the connection. A plain close() with those
        unread bytes would reset the connection and drop that queue; the lingering close
        delivers every byte and then EOF."""
        self.setup_proxy()
        p = "/b18/big/size/%d" % (2 * H.MIB)
        self.assertStatus(self.get(p), 200)  # cached: the response is sent at once
        for _ in range(3):
            s = socket.socket()
            self.addCleanup(s.close)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            s.settimeout(10)
            s.connect(("127.0.0.1", self.daemon.port))
            s.sendall(H.build_request("GET", p, headers=[("Connection", "close")]) +
                      b"J" * (64 * 1024))
            time.sleep(0.3)  # let the daemon queue the whole response and finish with us
            got = b""
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
            except ConnectionResetError:
                self.fail("reset after %d bytes of the response" % len(got))
            head, _, body = got.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head[:100])
            self.assertEqual(len(body), 2 * H.MIB)
            self.assertEqual(body, H.content(p, 0, 2 * H.MIB))

    def test_bad_request_then_pipelined_bytes_get_whole_400_and_eof(self):
        self.setup_proxy()
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", self.daemon.port), timeout=10)
            self.addCleanup(s.close)
            s.sendall(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n" + b"X" * (128 * 1024))
            got = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
            self.assertTrue(got.startswith(b"HTTP/1.1 400 "), got[:200])
            head, _, body = got.partition(b"\r\n\r\n")
            self.assertIn(b"connection: close", head.lower())
            clen = int([ln.split(b":", 1)[1] for ln in head.split(b"\r\n")
                        if ln.lower().startswith(b"content-length:")][0])
            self.assertEqual(len(body), clen)
        self.assertEqual(self.origin.request_count(), 0)
        self.assertStatus(self.get("/b18/after/size/100"), 200)

    def test_close_request_gets_eof_after_the_response(self):
        self.setup_proxy()
        c = self.client()
        c.request("/b18/x/size/1000", headers=[("Connection", "close")])
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b18/x/size/1000")
        c.wait_closed()  # our FIN came right after the response
        self.assertTrue(self.daemon.running())


if __name__ == "__main__":
    raise SystemExit(H.main())
