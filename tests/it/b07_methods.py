# SPDX-License-Identifier: BSD-2-Clause
"""b07: methods other than GET and HEAD get 405 with Allow: GET, HEAD (CONNECT also closes)."""

import harness as H


class Methods(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def check_405(self, method, body=b""):
        c = self.client()
        hdrs = [("Content-Length", str(len(body)))] if body else []
        c.request("/b07/size/10", method=method, headers=hdrs, body=body)
        r = c.read_response()
        self.assertStatus(r, 405)
        self.assertProcessedBy(r)
        self.assertEqual(sorted(r.tokens("Allow")), ["get", "head"], r.raw_head)
        self.assertEqual(self.origin.request_count(), 0)
        return c

    def test_post_405(self):
        self.check_405("POST", b"hello=world")

    def test_post_no_body_405(self):
        self.check_405("POST")

    def test_put_405(self):
        self.check_405("PUT", b"x" * 100)

    def test_delete_405(self):
        self.check_405("DELETE")

    def test_options_405(self):
        self.check_405("OPTIONS")

    def test_purge_on_listen_405(self):
        # PURGE belongs to the admin listener only
        self.check_405("PURGE")

    def test_connect_405_and_close(self):
        c = self.client()
        c.send(b"CONNECT game.example.test:443 HTTP/1.1\r\nHost: game.example.test:443\r\n\r\n")
        r = c.read_response()
        self.assertStatus(r, 405)
        self.assertProcessedBy(r)
        self.assertEqual(sorted(r.tokens("Allow")), ["get", "head"])
        self.assertClosed(c)


if __name__ == "__main__":
    raise SystemExit(H.main())
