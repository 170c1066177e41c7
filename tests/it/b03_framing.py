# SPDX-License-Identifier: BSD-2-Clause
"""b03: upstream framings (chunked, close-delimited) delivered to HTTP/1.1 and HTTP/1.0 clients."""

import harness as H


class Framing(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def test_chunked_upstream_http11(self):
        p = "/b03/a/size/300001"
        c = self.client()
        c.request(p + "?chunked=1")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        self.assertIn(r.framing, ("chunked", "length"))
        self.assertBody(r, p)
        # the connection stays usable after a chunked response
        c.request("/b03/a2/size/10")
        r2 = c.read_response()
        self.assertBody(r2, "/b03/a2/size/10")

    def test_chunked_upstream_empty_body(self):
        p = "/b03/e/size/0"
        r = self.get(p + "?chunked=1")
        self.assertStatus(r, 200)
        self.assertEqual(len(r.body), 0)

    def test_chunked_upstream_large(self):
        p = "/b03/b/size/%d" % (8 * H.MIB + 5)
        c = self.client(timeout=30)
        c.request(p + "?chunked=1")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, p)

    def test_chunked_upstream_http10(self):
        p = "/b03/c/size/200003"
        c = self.client()
        c.request(p + "?chunked=1", version="HTTP/1.0")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        self.assertNotEqual(r.framing, "chunked", "chunked response to an HTTP/1.0 client")
        self.assertFalse(r.has("Transfer-Encoding"), r.raw_head)
        self.assertBody(r, p)
        if r.framing == "close":
            self.assertTrue(c.peer_closed)
        else:
            self.assertClosed(c, what="HTTP/1.0 connection without keep-alive")

    def test_close_delimited_upstream_http11(self):
        p = "/b03/d/size/150000"
        c = self.client()
        c.request(p + "?close=1")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, p)

    def test_close_delimited_upstream_http10(self):
        p = "/b03/f/size/150000"
        c = self.client()
        c.request(p + "?close=1", version="HTTP/1.0")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertNotEqual(r.framing, "chunked")
        self.assertBody(r, p)

    def test_length_upstream_http10(self):
        p = "/b03/g/size/65536"
        c = self.client()
        c.request(p, version="HTTP/1.0")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertNotEqual(r.framing, "chunked")
        self.assertBody(r, p)

    def test_http10_keepalive_chunked_upstream(self):
        p = "/b03/h/size/40000"
        c = self.client()
        c.request(p + "?chunked=1", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertNotEqual(r.framing, "chunked")
        self.assertBody(r, p)


if __name__ == "__main__":
    raise SystemExit(H.main())
