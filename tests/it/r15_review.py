# SPDX-License-Identifier: BSD-2-Clause
"""r15: findings of the review of the issue-15 restructuring (cache, fetch, conn_cache).

- The object key of an absolute-form request without a path ("GET http://host HTTP/1.1"):
  before the restructuring conn_cache built it by hand and overwrote the "\\n" separator with the
  "/" ("ident/"), a key no other request could reach (and no PURGE, which built "ident\\n/").
  cache_key_build() now makes it "ident\\n/", the key of "GET /". A behaviour change (a fix) of
  the merged restructuring: this test pins it. It passes on d9352ee and fails on 9f88209 (there
  the second request is a MISS and the origin is asked twice)."""

import harness as H

HOST = "r15.example.test"


class Review(H.CPTestCase):
    def test_absolute_form_without_path_is_the_object_of_slash(self):
        """Pins a behaviour change (not a reproduction of a defect)."""
        self.setup_proxy()
        self.origin.route("/", lambda ex: H.serve_object(ex, 5000, path="/r15/root"))
        c = self.client()
        c.send(("GET http://%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (HOST, HOST)).encode())
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(len(r.body), 5000)
        self.assertEqual(self.origin.last().target, "/")
        r2 = self.get("/", host=HOST)
        self.assertStatus(r2, 200)
        self.assertEqual(bytes(r2.body), bytes(r.body))
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT", r2.raw_head)
        self.assertEqual(self.origin.request_count(), 1)


if __name__ == "__main__":
    raise SystemExit(H.main())
