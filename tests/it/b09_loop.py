# SPDX-License-Identifier: BSD-2-Clause
"""b09: loop detection with X-LanCache-Processed-By (508), and chained caches."""

import harness as H


class Loop(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def check_508(self, value):
        c = self.client()
        c.request("/b09/size/10", headers=[("X-LanCache-Processed-By", value)])
        r = c.read_response()
        self.assertStatus(r, 508)
        self.assertProcessedBy(r)
        self.assertEqual(self.origin.request_count(), 0, "the origin saw the looping request")

    def test_own_name_508(self):
        self.check_508(H.HOSTNAME)

    def test_own_name_in_list_508(self):
        self.check_508("parent-cache, " + H.HOSTNAME)

    def test_response_chain_is_ours_then_the_incoming(self):
        """Every response says X-LanCache-Processed-By: ours, then the request's own chain
        after a comma, as monolithic's "$hostname,$http_x_lancache_processed_by" (issue 17)."""
        def pb(target, headers=(), status=200):
            r = self.get(target, headers=list(headers))
            self.assertStatus(r, status)
            return r.header_all("X-LanCache-Processed-By")
        self.assertEqual(pb("/b09/pb/size/10"), [H.HOSTNAME])
        inc = [("X-LanCache-Processed-By", "edge-1, edge-2")]
        self.assertEqual(pb("/b09/pb/size/10", inc), [H.HOSTNAME + ",edge-1, edge-2"])  # a hit
        self.assertEqual(pb("/b09/pb2/size/10", inc), [H.HOSTNAME + ",edge-1, edge-2"])  # a miss
        self.assertEqual(pb("/lancache-heartbeat", inc, 204), [H.HOSTNAME + ",edge-1, edge-2"])
        self.assertEqual(pb("/b09/pb/size/10", [("X-LanCache-Processed-By", H.HOSTNAME)], 508),
                         [H.HOSTNAME + "," + H.HOSTNAME])
        # the fill still sends the chain with our name appended, never the response's form
        self.assertEqual(self.origin.last().header("X-LanCache-Processed-By"),
                         "edge-1, edge-2, " + H.HOSTNAME)
        # a chain longer than 1 KiB is left out of the response, which stays whole
        long = ",".join("cache-%04d" % i for i in range(200))
        self.assertEqual(pb("/b09/pb/size/10", [("X-LanCache-Processed-By", long)]),
                         [H.HOSTNAME])

    def test_chain_same_hostname_508(self):
        # child (cp-test) -> parent (cp-test): the parent sees its own name and answers 508
        child = self.start_daemon({"upstream": {"override": "127.0.0.1:%d" % self.daemon.port}},
                                  origin=None, dns=self.dns)
        c = self.client(child)
        c.request("/b09/chain/size/10")
        r = c.read_response()
        self.assertStatus(r, 508)
        self.assertEqual(self.origin.request_count(), 0)

    def test_chain_two_caches(self):
        # child (cp-child) -> parent (cp-test) -> origin
        child = self.start_daemon({"server": {"hostname": "cp-child"},
                                   "upstream": {"override": "127.0.0.1:%d" % self.daemon.port}},
                                  origin=None, dns=self.dns)
        c = self.client(child)
        c.request("/b09/two/size/10000")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b09/two/size/10000")
        self.assertIn("cp-child", r.header("X-LanCache-Processed-By", ""))
        pb = ",".join(self.origin.last().header_all("X-LanCache-Processed-By"))
        self.assertIn("cp-child", pb)
        self.assertIn(H.HOSTNAME, pb)


if __name__ == "__main__":
    raise SystemExit(H.main())
