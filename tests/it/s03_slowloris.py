# SPDX-License-Identifier: BSD-2-Clause
"""s03: slowloris (issue #7 acceptance): 500 connections trickling a request head one byte at a
time do not starve a normal client, which is served (and its bodies verified) while all 500 are
open; descriptors stay bounded; max_connections holds when the trickling connections exceed it,
and the normal client is served once request_timeout has closed them. The normal client's
latency is measured and printed ("measure:" lines), never asserted on."""

import socket
import statistics
import threading
import time

import harness as H

HEAD = b"GET /s03/slow/size/10 HTTP/1.1\r\nHost: game.example.test\r\nUser-Agent: " + \
    b"x" * 4000 + b"\r\n\r\n"


class Loris:
    """<n> connections, each sent a first few bytes of HEAD then one more byte per round."""

    def __init__(self, port, n):
        self.socks = []
        self.pos = []
        self.closed = 0
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(True)
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.setblocking(False)
            self.socks.append(s)
            self.pos.append(0)
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self, interval):
        self.interval = interval
        self.thread.start()

    def trickle(self):
        for i, s in enumerate(self.socks):
            if s is None or self.pos[i] >= len(HEAD) - 4:
                continue
            try:
                s.send(HEAD[self.pos[i]:self.pos[i] + 1])
                self.pos[i] += 1
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                self.socks[i] = None
                self.closed += 1
        self.rounds += 1

    def run(self):
        while not self.stop.wait(self.interval):
            self.trickle()

    def open_count(self):
        """Connections the daemon has not closed (EOF or reset seen on a peek)."""
        n = 0
        for i, s in enumerate(self.socks):
            if s is None:
                continue
            try:
                d = s.recv(1, socket.MSG_PEEK)
                if d == b"":
                    continue
                n += 1      # data (a 408?) counts as open until the EOF
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def close(self):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(5)
        for s in self.socks:
            if s is not None:
                s.close()


class Slowloris(H.CPTestCase):
    def loris(self, n):
        lo = Loris(self.daemon.port, n)
        self.addCleanup(lo.close)
        return lo

    def test_500_slowloris_do_not_starve_a_normal_client(self):
        self.setup_proxy({"server": {"max_connections": "1024", "request_timeout": "60s"}})
        base_fds = self.daemon.fd_count()
        lo = self.loris(500)
        lo.start(0.2)
        H.wait_until(lambda: lo.rounds >= 3, 10 * H.SLOW, what="trickle rounds")
        lat = []
        i = 0
        # normal requests throughout at least 15 trickle rounds (3 s), bounded in count
        while (i < 30 or lo.rounds < 15) and i < 5000:
            p = "/s03/n%d/size/%d" % (i, 1000 + 100000 * (i % 3))
            t0 = time.monotonic()
            c = H.Client(self.daemon.port)
            try:
                c.request(p)
                r = c.read_response()
            finally:
                c.close()
            lat.append(time.monotonic() - t0)
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            i += 1
            time.sleep(0.01)
        # all 500 were still open (and trickling) while the normal client was served
        self.assertEqual(lo.closed, 0)
        self.assertEqual(lo.open_count(), 500)
        fds = self.daemon.fd_count()
        self.assertLessEqual(fds, base_fds + 500 + 16, "descriptors: %d (base %d)"
                             % (fds, base_fds))
        self.assertEqual(self.origin.request_count(), i)
        print("measure: slowloris 500 open, normal client latency over %d requests: "
              "median %.1f ms, max %.1f ms; daemon fds %d (base %d); trickle rounds %d"
              % (len(lat), statistics.median(lat) * 1000, max(lat) * 1000, fds, base_fds,
                 lo.rounds))

    def test_head_timeout_closes_trickling_connections(self):
        # a head trickled byte by byte never resets the request_timeout clock
        self.setup_proxy({"server": {"max_connections": "1024", "request_timeout": "1s"}})
        lo = self.loris(200)
        lo.start(0.1)
        H.wait_until(lambda: lo.open_count() == 0, 20 * H.SLOW, 0.2,
                     what="the trickling connections to be closed")
        self.assertGreaterEqual(lo.rounds, 10)
        self.assertEqual(self.origin.request_count(), 0)
        r = self.get("/s03/after/size/100")
        self.assertBody(r, "/s03/after/size/100")

    def test_max_connections_holds(self):
        self.setup_proxy({"server": {"max_connections": "100", "request_timeout": "2s"}})
        base_fds = self.daemon.fd_count()
        lo = self.loris(150)     # 50 more than allowed wait in the kernel's accept queue
        lo.start(0.2)
        peak = 0
        for _ in range(10):
            peak = max(peak, self.daemon.fd_count())
            time.sleep(0.05)
        self.assertLessEqual(peak, base_fds + 100, "more than max_connections accepted")
        # the normal client is queued behind them and served once request_timeout frees slots
        c = self.client(timeout=30)
        c.request("/s03/queued/size/5000")
        r = c.read_response()
        self.assertBody(r, "/s03/queued/size/5000")
        print("measure: max_connections 100 with 150 trickling: daemon fds peak %d (base %d)"
              % (peak, base_fds))


if __name__ == "__main__":
    raise SystemExit(H.main())
