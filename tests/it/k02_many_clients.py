# SPDX-License-Identifier: BSD-2-Clause
"""k02: 500 concurrent keep-alive clients each downloading a few objects; every byte verified."""

import harness as H

CLIENTS = 500


class ManyClients(H.CPTestCase):
    def test_500_concurrent_keepalive_clients(self):
        # 1500 requests share 32 origin connections: queueing must not be mistaken for an origin
        # timeout (the test is about bytes and connections, not timing)
        self.setup_proxy({"server": {"max_connections": "600", "request_timeout": "60s"},
                          "upstream": {"max_per_origin": "32", "keepalive": "32",
                                       "first_byte_timeout": "60s", "read_timeout": "60s"}})
        sizes = [1024, 16 * 1024, 100 * 1024 + 7]
        plans = [["/k02/c%d/o%d/size/%d" % (i, j, sizes[(i + j) % 3]) for j in range(3)]
                 for i in range(CLIENTS)]
        conns = 'cacheparty_connections{kind="http"}'

        def all_connected(n):
            # the daemon holds every connection at once. Counted by its connection gauge, not by
            # its descriptors against a base taken earlier: a descriptor open at that moment (the
            # start-up probe's connection, an admin connection lingering) made the base too high
            # on a loaded machine, and the wait never ended.
            self.assertEqual(n, CLIENTS)
            H.wait_until(lambda: self.daemon.metrics().get(conns, 0) >= CLIENTS, 20 * H.SLOW,
                         0.05, "the daemon to accept %d connections" % CLIENTS)
        res = H.run_many(self.daemon.port, plans, timeout=120, on_connected=all_connected)
        self.assertEqual(res["errors"][:10], [], "%d errors" % len(res["errors"]))
        self.assertEqual(res["ok"], CLIENTS * 3)
        self.assertEqual(self.origin.request_count(), CLIENTS * 3)
        self.assertLessEqual(self.origin.peak_open, 32,
                             "more concurrent origin connections than max_per_origin")
        # still serving afterwards
        r = self.get("/k02/after/size/10")
        self.assertBody(r, "/k02/after/size/10")

    def test_shared_objects_concurrently(self):
        # many clients asking for the same few objects at once
        self.setup_proxy({"server": {"max_connections": "300", "request_timeout": "60s"},
                          "upstream": {"max_per_origin": "16", "keepalive": "16",
                                       "first_byte_timeout": "60s", "read_timeout": "60s"}})
        plans = [["/k02/shared/o%d/size/%d" % (j, 200000 + j) for j in range(2)]
                 for _ in range(200)]
        res = H.run_many(self.daemon.port, plans, timeout=120)
        self.assertEqual(res["errors"][:10], [], "%d errors" % len(res["errors"]))
        self.assertEqual(res["ok"], 400)


if __name__ == "__main__":
    raise SystemExit(H.main())
