# SPDX-License-Identifier: BSD-2-Clause
"""k01: keep-alive and pipelining on the client side, connection reuse on the origin side."""

import harness as H


class KeepAlive(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def test_20_sequential_one_connection_each_side(self):
        c = self.client()
        sizes = [0, 1, 10, 1000, 65536, 100001, 3, 4096, 4097, 300000] * 2
        for i, n in enumerate(sizes):
            p = "/k01/seq%d/size/%d" % (i, n)
            c.request(p)
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p)
        self.assertTrue(c.is_open(0.1), "client connection closed after 20 requests")
        # 18 fills; the two empty objects answer the fill's Range with 416, and are then
        # forwarded as asked (an empty object has no chunk to store)
        self.assertEqual(self.origin.request_count(), 22)
        self.assertLessEqual(self.origin.connections, 2,
                             "origin accepted %d connections for 20 sequential requests"
                             % self.origin.connections)

    def test_upstream_reused_across_clients(self):
        for i in range(6):
            c = self.client()
            p = "/k01/cl%d/size/1000" % i
            c.request(p)
            self.assertBody(c.read_response(), p)
            c.close()
        self.assertLessEqual(self.origin.connections, 2)

    def test_pipelined_three(self):
        c = self.client()
        paths = ["/k01/p1/size/100000", "/k01/p2/size/10", "/k01/p3/size/5000"]
        c.send(b"".join(H.build_request("GET", p) for p in paths), expect=["GET"] * 3)
        rs = c.read_responses(3)
        for p, r in zip(paths, rs):
            self.assertStatus(r, 200)
            self.assertBody(r, p)

    def test_pipelined_first_slow(self):
        c = self.client()
        paths = ["/k01/slow/size/20000?delay=0.3", "/k01/fast/size/30"]
        c.send(b"".join(H.build_request("GET", p) for p in paths), expect=["GET"] * 2)
        a, b = c.read_responses(2)
        self.assertBody(a, paths[0])
        self.assertBody(b, paths[1])

    def test_pipelined_mixed_head_chunked(self):
        c = self.client()
        reqs = [("GET", "/k01/m1/size/7000?chunked=1"), ("HEAD", "/k01/m2/size/9000"),
                ("GET", "/k01/m3/size/11"), ("GET", "/lancache-heartbeat"),
                ("GET", "/k01/m4/size/12?status=404")]
        c.send(b"".join(H.build_request(m, t) for m, t in reqs), expect=[m for m, _ in reqs])
        a, b, d, hb, e = c.read_responses(5)
        self.assertBody(a, reqs[0][1])
        self.assertEqual(b.header("Content-Length"), "9000")
        self.assertEqual(len(b.body), 0)
        self.assertBody(d, reqs[2][1])
        self.assertStatus(hb, 204)
        self.assertStatus(e, 404)
        self.assertBody(e, reqs[4][1])

    def test_pipelined_fifty(self):
        c = self.client(timeout=30)
        paths = ["/k01/many%d/size/%d" % (i, 100 + 37 * i) for i in range(50)]
        c.send(b"".join(H.build_request("GET", p) for p in paths), expect=["GET"] * 50)
        for p, r in zip(paths, c.read_responses(50)):
            self.assertBody(r, p)

    def test_pipelined_split_across_sends(self):
        c = self.client()
        data = H.build_request("GET", "/k01/s1/size/100") + H.build_request("GET", "/k01/s2/size/200")
        c.send(data[:50], expect=["GET", "GET"])
        c.send(data[50:-5])
        c.send(data[-5:])
        a, b = c.read_responses(2)
        self.assertBody(a, "/k01/s1/size/100")
        self.assertBody(b, "/k01/s2/size/200")

    def test_http10_keepalive(self):
        c = self.client()
        for i in range(3):
            p = "/k01/h10ka%d/size/500" % i
            c.request(p, version="HTTP/1.0", headers=[("Connection", "keep-alive")])
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertNotEqual(r.framing, "chunked")
            self.assertNotEqual(r.framing, "close", "HTTP/1.0 keep-alive answered close-delimited")
            self.assertBody(r, p)

    def test_http10_closes(self):
        c = self.client()
        c.request("/k01/h10/size/500", version="HTTP/1.0")
        r = c.read_response()
        self.assertBody(r, "/k01/h10/size/500")
        self.assertClosed(c)

    def test_connection_close_http11(self):
        c = self.client()
        c.request("/k01/cc/size/500", headers=[("Connection", "close")])
        r = c.read_response()
        self.assertBody(r, "/k01/cc/size/500")
        self.assertClosed(c)

    def test_origin_connection_close_then_next(self):
        def h(ex):
            ex.keep_alive = False
            H.serve_object(ex, 1000)
        self.origin.route("/k01/oc", h)
        c = self.client()
        for i in range(3):
            p = "/k01/oc%d/size/1000" % i
            c.request(p)
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p, total=1000)
        self.assertEqual(self.origin.connections, 3)

    def test_origin_closes_idle_pooled_connection(self):
        c = self.client()
        c.request("/k01/ca1/size/1000?closeafter=1")
        self.assertBody(c.read_response(), "/k01/ca1/size/1000")
        self.origin.wait_closed_conns(1)
        c.request("/k01/ca2/size/1000")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/k01/ca2/size/1000")


if __name__ == "__main__":
    raise SystemExit(H.main())
