# SPDX-License-Identifier: BSD-2-Clause
"""f02: address failover. A name whose first address refuses connections (or never answers
them) is served from its next address, IPv4 and IPv6 alike, for cache fills, resumed fills,
pass-through requests and the TLS relay; the dead address is avoided for the next requests
(20 s). Every address is on loopback: a dead one is 127.0.0.2 on a port only 127.0.0.1 listens
on (or the reverse), and the origins are bound to one address each. The TLS relay always
connects to port 443: its test listens on 127.0.0.3:443 and skips where that cannot be bound."""

import socket

import harness as H

NAME = "fo.example.test"
FAILOVER = "cacheparty_upstream_connect_failover_total"
CONNECT_ERRORS = 'cacheparty_errors_total{kind="upstream_connect"}'


class Failover(H.CPTestCase):
    def start(self, records, overrides=None):
        self.dns = self.start_dns(records)
        cfg = {"upstream": {"override": None, "allow_private": "yes"}}
        cfg.update(overrides or {})
        self.daemon = self.start_daemon(cfg, origin=None, dns=self.dns)

    def live_and_dead(self):
        """An origin on 127.0.0.1:P, and 127.0.0.2:P refusing connections."""
        o = self.start_origin()
        if not H.connect_refused(o.port, host="127.0.0.2"):
            self.skipTest("127.0.0.2:%d does not refuse connections on this host" % o.port)
        return o

    def metric(self, name):
        return self.daemon.metrics().get(name, 0)

    def test_fill_fails_over_from_a_refused_a_record(self):
        o = self.live_and_dead()
        self.start({NAME: ["127.0.0.2", "127.0.0.1"]})
        host = "%s:%d" % (NAME, o.port)
        r = self.get("/f02/a/size/5000", host=host)
        self.assertStatus(r, 200)
        self.assertBody(r, "/f02/a/size/5000")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(o.request_count(), 1)
        self.assertEqual(self.metric(FAILOVER), 1)
        self.assertEqual(self.metric(CONNECT_ERRORS), 1)

    def test_dead_address_not_tried_again_for_the_next_request(self):
        o = self.live_and_dead()
        self.start({NAME: ["127.0.0.2", "127.0.0.1"]})
        host = "%s:%d" % (NAME, o.port)
        r = self.get("/f02/b1/size/5000", host=host)
        self.assertStatus(r, 200)
        self.assertEqual(self.metric(FAILOVER), 1)
        # The dead address comes back to life: had the next fill tried it first, this origin
        # would see its connection. Within 20 s of the failure it is tried only last.
        revived = self.start_origin("127.0.0.2", o.port)
        r = self.get("/f02/b2/size/5000", host=host)
        self.assertStatus(r, 200)
        self.assertBody(r, "/f02/b2/size/5000")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(revived.connections, 0)
        self.assertEqual(o.request_count(), 2)
        self.assertEqual(self.metric(FAILOVER), 1)
        self.assertEqual(self.metric(CONNECT_ERRORS), 1)

    def test_aaaa_tried_when_the_a_is_dead(self):
        try:
            o6 = self.start_origin("::1")
        except OSError as e:
            self.skipTest("no IPv6 loopback (::1) on this host: %s" % e)
        if not H.connect_refused(o6.port, host="127.0.0.2"):
            self.skipTest("127.0.0.2:%d does not refuse connections on this host" % o6.port)
        self.start({NAME: ["::1", "127.0.0.2"]})   # the A is tried first, then the AAAA
        r = self.get("/f02/six/size/7000", host="%s:%d" % (NAME, o6.port))
        self.assertStatus(r, 200)
        self.assertBody(r, "/f02/six/size/7000")
        self.assertEqual(o6.request_count(), 1)
        self.assertEqual(self.metric(FAILOVER), 1)

    def test_pass_through_fails_over(self):
        o = self.live_and_dead()
        self.start({NAME: ["127.0.0.2", "127.0.0.1"]})
        r = self.get("/f02/auth/size/3000", host="%s:%d" % (NAME, o.port),
                     headers=[("Authorization", "Basic dXNlcjpwdw==")])
        self.assertStatus(r, 200)
        self.assertBody(r, "/f02/auth/size/3000")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(o.request_count(), 1)
        self.assertEqual(o.last().header("Authorization"), "Basic dXNlcjpwdw==")
        self.assertEqual(self.metric(FAILOVER), 1)

    def test_resumed_fill_answered_by_another_address(self):
        a = self.start_origin()
        try:
            b = self.start_origin("127.0.0.2", a.port)
        except OSError as e:
            self.skipTest("cannot listen on 127.0.0.2:%d: %s" % (a.port, e))
        n = 300000

        def cut(ex):
            # Half the object, then this address is gone: its connection reset, its port closed.
            a.close_listener()
            ex.req.query["abort"] = [str(n // 2)]
            ex.req.query["reset"] = ["1"]
            H.serve_object(ex, n)
        a.route("/f02/resume/", cut)
        self.start({NAME: ["127.0.0.1", "127.0.0.2"]})
        target = "/f02/resume/size/%d" % n
        r = self.get(target, host="%s:%d" % (NAME, a.port))
        self.assertStatus(r, 200)
        self.assertBody(r, target)
        self.assertEqual(a.request_count(), 1)
        self.assertEqual(b.request_count(), 1)
        rng = H.range_of(b.last())
        self.assertIsNotNone(rng, b.last().raw)
        self.assertGreater(rng[0], 0)              # the rest, not the object again
        self.assertEqual(self.metric("cacheparty_fetch_resumed_total"), 1)
        self.assertEqual(self.metric(FAILOVER), 1)

    def test_connect_timeout_fails_over(self):
        bh = H.Blackhole()                         # 127.0.0.1:Q never completes a connect
        self.addCleanup(bh.stop)
        if not bh.works():
            self.skipTest("cannot make a connect hang on this host")
        try:
            o = self.start_origin("127.0.0.2", bh.port)
        except OSError as e:
            self.skipTest("cannot listen on 127.0.0.2:%d: %s" % (bh.port, e))
        self.start({NAME: ["127.0.0.1", "127.0.0.2"]})
        r = self.get("/f02/slow/size/4000", host="%s:%d" % (NAME, bh.port))
        self.assertStatus(r, 200)
        self.assertBody(r, "/f02/slow/size/4000")
        self.assertEqual(o.request_count(), 1)
        self.assertEqual(self.metric(FAILOVER), 1)
        self.assertEqual(self.metric('cacheparty_errors_total{kind="upstream_timeout"}'), 1)

    def test_every_address_refused_502(self):
        port = H.closed_port()
        if not H.connect_refused(port, host="127.0.0.2"):
            self.skipTest("127.0.0.2:%d does not refuse connections on this host" % port)
        self.start({NAME: ["127.0.0.1", "127.0.0.2"]})
        r = self.get("/f02/none/size/10", host="%s:%d" % (NAME, port))
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)
        self.assertEqual(self.metric(FAILOVER), 1)
        self.assertEqual(self.metric(CONNECT_ERRORS), 2)

    def test_tls_relay_fails_over(self):
        from t01_tls import client_hello   # (the first flight OpenSSL sends, made by Python's ssl)
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(ls.close)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            ls.bind(("127.0.0.3", 443))     # the relay always connects to port 443
        except OSError as e:
            self.skipTest("cannot listen on 127.0.0.3:443 here: %s" % e)
        ls.listen(4)
        if not H.connect_refused(443, host="127.0.0.4"):
            self.skipTest("127.0.0.4:443 does not refuse connections on this host")
        tls_port = H.free_port()
        self.start({NAME: ["127.0.0.4", "127.0.0.3"]},
                   {"tls": {"passthrough_listen": "127.0.0.1:%d" % tls_port,
                            "handshake_timeout": "3s"}})
        H.wait_until(lambda: "(TLS passthrough)" in self.daemon.log(), 30 * H.SLOW, 0.02,
                     "passthrough_listen")
        hello = client_hello(NAME)
        c = socket.create_connection(("127.0.0.1", tls_port), timeout=10)
        self.addCleanup(c.close)
        c.sendall(hello)
        ls.settimeout(10 * H.SLOW)
        o, _ = ls.accept()
        self.addCleanup(o.close)
        o.settimeout(10 * H.SLOW)
        got = b""
        while len(got) < len(hello):
            b = o.recv(65536)
            if not b:
                break
            got += b
        self.assertEqual(got, hello)
        self.assertEqual(self.metric(FAILOVER), 1)


if __name__ == "__main__":
    raise SystemExit(H.main())
