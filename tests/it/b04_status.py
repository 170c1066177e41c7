# SPDX-License-Identifier: BSD-2-Clause
"""b04: origin error statuses pass through with their bodies."""

import harness as H


class Status(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def check(self, status, n=321):
        p = "/b04/s%d/size/%d" % (status, n)
        c = self.client()
        c.request(p + "?status=%d" % status)
        r = c.read_response()
        self.assertStatus(r, status)
        self.assertProcessedBy(r)
        self.assertBody(r, p)
        return c

    def test_404(self):
        self.check(404)

    def test_403(self):
        self.check(403)

    def test_500(self):
        self.check(500)

    def test_503(self):
        self.check(503)

    def test_404_chunked(self):
        p = "/b04/c/size/5000"
        r = self.get(p + "?status=404&chunked=1")
        self.assertStatus(r, 404)
        self.assertBody(r, p)


if __name__ == "__main__":
    raise SystemExit(H.main())
