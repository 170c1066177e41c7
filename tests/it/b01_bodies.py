# SPDX-License-Identifier: BSD-2-Clause
"""b01: byte-exact bodies of several sizes through the proxy (content verified, not only length)."""

import harness as H


class Bodies(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def fetch(self, n, tag="b01"):
        p = H.size_path(n, tag)
        c = self.client(timeout=60)
        c.request(p)
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertProcessedBy(r)
        if r.length is not None:
            self.assertEqual(r.length, n)
        self.assertBody(r, p)
        return r

    def test_size_0(self):
        self.fetch(0)

    def test_size_1(self):
        self.fetch(1)

    def test_size_1kib(self):
        self.fetch(1024)

    def test_size_1mib(self):
        self.fetch(H.MIB)

    def test_size_odd(self):
        self.fetch(3 * H.MIB + 12345)

    def test_size_64mib(self):
        self.fetch(64 * H.MIB)

    def test_upstream_saw_one_get(self):
        self.fetch(5000)
        self.assertEqual(self.origin.request_count(), 1)
        req = self.origin.last()
        self.assertEqual(req.method, "GET")
        self.assertEqual(req.target, "/b01/size/5000")


if __name__ == "__main__":
    raise SystemExit(H.main())
