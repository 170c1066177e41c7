# SPDX-License-Identifier: BSD-2-Clause
"""b10: signals. SIGTERM/SIGINT drain (responses in flight finish, new connections refused,
exit 0, bounded by shutdown_timeout), SIGHUP keeps serving, NOTIFY_SOCKET READY/STOPPING."""

import os
import signal
import socket
import threading

import harness as H

BIG = 8 * H.MIB


class Signals(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.gate = threading.Event()
        self.origin = self.start_origin()
        self.dns = self.start_dns()

        def gated(ex):
            # 1 MiB, then wait for the test to open the gate, then the rest
            p = ex.req.path
            ex.send_head(200, [("Content-Length", str(BIG))])
            ex.write(H.content(p, 0, H.MIB))
            while not self.gate.wait(0.1):
                if ex.origin.stopping.is_set():
                    return
            for piece in H.content_pieces(H.seed_of(p), H.MIB, BIG):
                ex.write(piece)
        self.origin.route("/b10/gated", gated)

    def not_served(self, port):
        """True when a new connection is refused, or accepted but never answered."""
        if H.connect_refused(port):
            return True
        try:
            c = H.Client(port, timeout=2)
        except OSError:
            return True
        try:
            c.request("/lancache-heartbeat")
            c.read_response(timeout=2 * H.SLOW)
            return False
        except (H.ProtocolError, socket.timeout, OSError):
            return True
        finally:
            c.close()

    def check_drain(self, sig):
        d = self.start_daemon(origin=self.origin, dns=self.dns)
        c = self.client(d, timeout=30)
        c.request("/b10/gated/x")
        r = c.read_head()
        self.assertStatus(r, 200)
        c.read_body_until(r, 512 * H.KIB)
        d.signal(sig)
        # the listener goes away (or at least nobody new is served)
        try:
            H.wait_until(lambda: H.connect_refused(d.port), 5 * H.SLOW, 0.05,
                         "the listen port to refuse connections")
        except AssertionError:
            self.assertTrue(self.not_served(d.port), "a new connection was served after signal")
        self.assertTrue(d.running(), "the daemon exited with a response in flight")
        self.gate.set()
        c.finish_response(r)
        self.assertBody(r, "/b10/gated/x", total=BIG)
        rc = d.wait(30 * H.SLOW)
        self.assertEqual(rc, 0, "exit status after the drain")

    def test_sigterm_drains_in_flight(self):
        self.check_drain(signal.SIGTERM)

    def test_sigint_drains_in_flight(self):
        self.check_drain(signal.SIGINT)

    def test_sigterm_idle_keepalive_exits(self):
        d = self.start_daemon(origin=self.origin, dns=self.dns)
        c = self.client(d)
        c.request("/b10/idle/size/10")
        self.assertBody(c.read_response(), "/b10/idle/size/10")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(20 * H.SLOW), 0)
        self.assertClosed(c)

    def test_sigterm_bounded_by_shutdown_timeout(self):
        d = self.start_daemon({"server": {"shutdown_timeout": "1s"}},
                              origin=self.origin, dns=self.dns)
        c = self.client(d)
        # an endless trickle: 1 KiB every 50 ms of a 1 GiB body
        c.request("/b10/endless/size/%d?trickle=1024,0.05" % (1 << 30))
        r = c.read_head()
        self.assertStatus(r, 200)
        d.signal(signal.SIGTERM)
        rc = d.wait(20 * H.SLOW)
        self.assertIsNotNone(rc, "daemon still running long after shutdown_timeout")
        self.assertEqual(rc, 0)
        self.assertClosed(c)
        self.assertFalse(r.complete)

    def test_sighup_keeps_serving(self):
        d = self.start_daemon(origin=self.origin, dns=self.dns)
        d.signal(signal.SIGHUP)
        r = self.get("/b10/hup/size/100", daemon=d)
        self.assertBody(r, "/b10/hup/size/100")
        # a bad file is refused and the old configuration keeps running
        with open(d.ini, "a") as f:
            f.write("[server]\nbogus_key = 1\n")
        d.signal(signal.SIGHUP)
        r = self.get("/b10/hup2/size/100", daemon=d)
        self.assertBody(r, "/b10/hup2/size/100")
        self.assertTrue(d.running())

    def test_notify_socket(self):
        path = os.path.join(self._tmp, "notify.sock")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(path)
        ns.settimeout(10 * H.SLOW)
        self.addCleanup(ns.close)
        d = self.start_daemon(origin=self.origin, dns=self.dns, env={"NOTIFY_SOCKET": path})
        msgs = []

        def wait_for(word):
            while not any(word in m.split("\n") for m in msgs):
                msgs.append(ns.recv(4096).decode("utf-8", "replace"))
        wait_for("READY=1")
        d.signal(signal.SIGTERM)
        wait_for("STOPPING=1")
        self.assertEqual(d.wait(20 * H.SLOW), 0)


if __name__ == "__main__":
    raise SystemExit(H.main())
