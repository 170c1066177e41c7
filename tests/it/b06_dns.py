# SPDX-License-Identifier: BSD-2-Clause
"""b06: origins found through [upstream] dns (no override): resolution, NXDOMAIN, private checks."""

import harness as H

NAME = "game.example.test"


class Dns(H.CPTestCase):
    def start(self, allow_private="yes"):
        self.origin = self.start_origin()
        self.dns = self.start_dns({NAME: ["127.0.0.1"], "v6only.example.test": ["::1"]})
        self.daemon = self.start_daemon({"upstream": {"override": None,
                                                      "allow_private": allow_private}},
                                        origin=None, dns=self.dns)

    def test_resolved_through_stub(self):
        self.start()
        host = "%s:%d" % (NAME, self.origin.port)
        r = self.get("/b06/a/size/5000", host=host)
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        self.assertBody(r, "/b06/a/size/5000")
        self.assertGreaterEqual(self.dns.query_count(NAME), 1)
        self.assertEqual(self.origin.last().header("Host"), host)

    def test_host_normalised_before_lookup(self):
        self.start()
        r = self.get("/b06/b/size/100", host="GAME.Example.TEST.:%d" % self.origin.port)
        self.assertStatus(r, 200)
        self.assertBody(r, "/b06/b/size/100")
        self.assertGreaterEqual(self.dns.query_count(NAME), 1)

    def test_absolute_form_resolved(self):
        self.start()
        c = self.client()
        c.send(("GET http://%s:%d/b06/c/size/77 HTTP/1.1\r\nHost: %s:%d\r\n\r\n"
                % (NAME, self.origin.port, NAME, self.origin.port)).encode())
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b06/c/size/77")

    def test_nxdomain_502(self):
        self.start()
        r = self.get("/b06/d/size/10", host="nosuch.example.test:%d" % self.origin.port)
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)
        self.assertGreaterEqual(self.dns.query_count("nosuch.example.test"), 1)
        self.assertEqual(self.origin.request_count(), 0)

    def test_ip_literal_allowed_with_allow_private(self):
        self.start()
        r = self.get("/b06/e/size/10", host="127.0.0.1:%d" % self.origin.port)
        self.assertStatus(r, 200)
        self.assertBody(r, "/b06/e/size/10")

    def test_private_address_refused_403(self):
        self.start(allow_private="no")
        r = self.get("/b06/f/size/10", host="%s:%d" % (NAME, self.origin.port))
        self.assertStatus(r, 403)
        self.assertProcessedBy(r)
        self.assertEqual(self.origin.request_count(), 0)

    def test_ip_literal_refused_403(self):
        self.start(allow_private="no")
        r = self.get("/b06/g/size/10", host="127.0.0.1:%d" % self.origin.port)
        self.assertStatus(r, 403)
        self.assertEqual(self.origin.request_count(), 0)


if __name__ == "__main__":
    raise SystemExit(H.main())
