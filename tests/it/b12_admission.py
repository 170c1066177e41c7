# SPDX-License-Identifier: BSD-2-Clause
"""b12: which hosts are proxied. With allow_unlisted = no and no cache-domains lists, every host
is refused with 403 (the heartbeat still answers). Cache-domains matching lands with issue #4."""

import harness as H


class Admission(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy({"domains": {"allow_unlisted": "no"}})

    def test_unlisted_host_403(self):
        r = self.get("/b12/size/10", host="unlisted.example.test")
        self.assertStatus(r, 403)
        self.assertProcessedBy(r)
        self.assertEqual(self.origin.request_count(), 0)

    def test_heartbeat_still_204(self):
        r = self.get("/lancache-heartbeat", host="unlisted.example.test")
        self.assertStatus(r, 204)
        self.assertProcessedBy(r)


if __name__ == "__main__":
    raise SystemExit(H.main())
