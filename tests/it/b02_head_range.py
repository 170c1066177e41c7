# SPDX-License-Identifier: BSD-2-Clause
"""b02: HEAD (headers, no body, Content-Length preserved) and single ranges."""

import harness as H


class HeadRange(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def test_head_no_body_length_kept(self):
        c = self.client()
        p = "/b02/size/123457"
        c.request(p, method="HEAD")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        self.assertEqual(r.header("Content-Length"), "123457")
        self.assertEqual(len(r.body), 0)
        # no stray body bytes: the next response on the connection parses and is right
        c.request("/b02/size/10")
        r2 = c.read_response()
        self.assertStatus(r2, 200)
        self.assertBody(r2, "/b02/size/10")
        self.assertEqual(self.origin.requests[0].method, "HEAD")

    def test_head_then_get_pipelined(self):
        c = self.client()
        c.send(H.build_request("HEAD", "/b02/size/5000") + H.build_request("GET", "/b02/size/7"),
               expect=["HEAD", "GET"])
        a, b = c.read_responses(2)
        self.assertEqual(a.header("Content-Length"), "5000")
        self.assertBody(b, "/b02/size/7")

    def test_range_middle(self):
        p = "/b02/size/100000"
        r = self.get(p, headers=[("Range", "bytes=1000-1999")])
        self.assertStatus(r, 206)
        self.assertProcessedBy(r)
        self.assertEqual(r.header("Content-Range"), "bytes 1000-1999/100000")
        self.assertBody(r, p, 1000, 2000)

    def test_range_suffix(self):
        p = "/b02/size/100000"
        r = self.get(p, headers=[("Range", "bytes=-100")])
        self.assertStatus(r, 206)
        self.assertEqual(r.header("Content-Range"), "bytes 99900-99999/100000")
        self.assertBody(r, p, 99900, 100000)

    def test_range_open_end(self):
        p = "/b02/size/100000"
        r = self.get(p, headers=[("Range", "bytes=99000-")])
        self.assertStatus(r, 206)
        self.assertEqual(r.header("Content-Range"), "bytes 99000-99999/100000")
        self.assertBody(r, p, 99000, 100000)

    def test_range_unsatisfiable_416(self):
        r = self.get("/b02/size/1000", headers=[("Range", "bytes=5000-")])
        self.assertStatus(r, 416)
        self.assertProcessedBy(r)
        self.assertEqual(r.header("Content-Range"), "bytes */1000")


if __name__ == "__main__":
    raise SystemExit(H.main())
