# SPDX-License-Identifier: BSD-2-Clause
"""f01: origin faults: down (502), silent (504), connect timeout (504), invalid response (502),
early close before or after the head, read timeout mid-body."""

import harness as H


class OriginFaults(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def test_origin_down_502(self):
        d = self.start_daemon({"upstream": {"override": "127.0.0.1:%d" % H.closed_port()}},
                              origin=None, dns=self.dns)
        r = self.get("/f01/down/size/10", daemon=d)
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)

    def test_origin_silent_504(self):
        r = self.get("/f01/silent/size/10?stall=1")
        self.assertStatus(r, 504)
        self.assertProcessedBy(r)
        self.assertEqual(self.origin.request_count(), 1)

    def test_origin_slow_first_byte_within_timeout(self):
        r = self.get("/f01/delay/size/1000?delay=0.2")
        self.assertStatus(r, 200)
        self.assertBody(r, "/f01/delay/size/1000")

    def test_connect_timeout_504(self):
        bh = H.Blackhole()
        self.addCleanup(bh.stop)
        if not bh.works():
            self.skipTest("cannot make a connect hang on this host")
        d = self.start_daemon({"upstream": {"override": bh.addr}}, origin=None, dns=self.dns)
        r = self.get("/f01/bh/size/10", daemon=d)
        self.assertStatus(r, 504)
        self.assertProcessedBy(r)

    def test_invalid_response_502(self):
        def h(ex):
            ex.write(b"HELLO WORLD\r\n\r\n")
            ex.close()
        self.origin.route("/f01/garbage", h)
        r = self.get("/f01/garbage")
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)

    def test_bad_content_length_502(self):
        def h(ex):
            ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nxyz")
            ex.close()
        self.origin.route("/f01/badcl", h)
        r = self.get("/f01/badcl")
        self.assertStatus(r, 502)

    def test_close_without_response_502(self):
        def h(ex):
            ex.close()
        self.origin.route("/f01/hangup", h)
        r = self.get("/f01/hangup")
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)

    def check_truncated(self, target, total):
        c = self.client()
        c.request(target)
        try:
            r = c.read_response()
        except H.ProtocolError:
            # head forwarded, then the connection closed before the promised length: correct
            self.assertIsNotNone(c.partial)
            self.assertEqual(c.partial.status, 200)
            self.assertLess(len(c.partial.body), total)
            self.assertBody(c.partial.body, H.path_of(target), 0, len(c.partial.body))
            return
        # or the failure came before the head was sent
        self.assertStatus(r, 502)

    def test_abort_after_head(self):
        self.check_truncated("/f01/abort/size/%d?abort=1000" % H.MIB, H.MIB)

    def test_reset_after_head(self):
        self.check_truncated("/f01/rst/size/%d?abort=70000&reset=1" % H.MIB, H.MIB)

    def test_chunked_abort(self):
        c = self.client()
        c.request("/f01/chab/size/%d?chunked=1&abort=5000" % H.MIB)
        try:
            r = c.read_response()
        except H.ProtocolError:
            self.assertLess(len(c.partial.body), H.MIB)
            return
        self.assertStatus(r, 502)

    def test_read_timeout_mid_body(self):
        def h(ex):
            ex.send_head(200, [("Content-Length", str(H.MIB))])
            ex.write(H.content(ex.req.path, 0, 1000))
            ex.stall()
        self.origin.route("/f01/midstall", h)
        c = self.client(timeout=20)
        c.request("/f01/midstall")
        r = c.read_head()
        self.assertStatus(r, 200)
        self.assertClosed(c, timeout=20, what="client connection after the origin stalled")
        self.assertLess(len(r.body), H.MIB)

    def test_still_serving_after_faults(self):
        for t in ("/f01/x1/size/10?stall=1", "/f01/x2/size/100000?abort=10"):
            c = self.client()
            c.request(t)
            try:
                c.read_response()
            except H.ProtocolError:
                pass
        r = self.get("/f01/ok/size/5000")
        self.assertBody(r, "/f01/ok/size/5000")


if __name__ == "__main__":
    raise SystemExit(H.main())
