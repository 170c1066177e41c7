# SPDX-License-Identifier: BSD-2-Clause
"""b23: the dashboard's JSON (docs/interfaces.md "Dashboard API"): /api/live's fetches in flight
(with their readers, gone once done), bytes per service and per client address (hits per byte,
as response_bytes_total), its totals equal to /status, a service's totals kept across a restart,
/api/history's samples; both behind the admin checks like every view."""

import json

import harness as H

SIZE = 300000  # one chunk at the harness's chunk size


class DashboardApi(H.CPTestCase):
    def start(self, overrides=None):
        o = {"server": {"admin_listen": "auto"}}
        for sec, kv in (overrides or {}).items():
            o.setdefault(sec, {}).update(kv)
        return self.setup_proxy(o)

    def api(self, target):
        r = self.daemon.admin_get(target)
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Type"), "application/json")
        return json.loads(bytes(r.body))

    def test_fetch_in_flight_with_its_readers_then_gone(self):
        self.start()
        prefix = "/b23/gated"
        gate, body = H.gated_route(self.origin, prefix, SIZE)
        path = prefix + "/size/%d" % SIZE
        a = self.client()
        b = self.client()
        a.request(path)
        # The fetch shows once half the body has come; B then joins it.
        H.wait_until(lambda: any(f["done"] >= SIZE // 2 for f in self.api("/api/live")["fetches"]),
                     10 * H.SLOW, 0.05, "the fetch half done")
        b.request(path)
        H.wait_until(lambda: [f["readers"] for f in self.api("/api/live")["fetches"]] == [2],
                     10 * H.SLOW, 0.05, "two readers on the fetch")
        f = self.api("/api/live")["fetches"][0]
        self.assertEqual(f["service"], H.DEFAULT_HOST)
        self.assertEqual(f["path"], path)
        self.assertEqual(f["total"], SIZE)
        self.assertGreaterEqual(f["done"], SIZE // 2)
        self.assertLess(f["done"], SIZE)
        self.assertFalse(f["stalled"])  # (it waits for the gate far less than stall_s here)
        self.assertEqual(self.api("/api/live")["now"]["fetches"], 1)
        gate.set()
        for c in (a, b):
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertEqual(bytes(r.body), body)
        H.wait_until(lambda: self.api("/api/live")["fetches"] == [], 10 * H.SLOW, 0.05,
                     "no fetch in flight")
        self.assertEqual(self.origin.request_count(), 1)

    def test_a_fetch_past_its_first_chunk(self):
        # Review (read, not reproduced here): a fetch of a run of chunks drops each chunk's ref
        # once filled, and the listing read the first one. Here: the fetches of an object of
        # four chunks listed while past their first MiB, all sane, the daemon alive.
        self.start()
        size = 3 * H.MIB + 12345
        gate, body = H.gated_route(self.origin, "/b23/multi", size, H.MIB + H.MIB // 2)
        path = "/b23/multi/size/%d" % size
        a = self.client()
        a.request(path)
        H.wait_until(lambda: any(f["first"] + f["done"] > H.MIB
                                 for f in self.api("/api/live")["fetches"]),
                     10 * H.SLOW, 0.05, "a fetch past its first chunk")
        for _ in range(3):
            fs = self.api("/api/live")["fetches"]
            self.assertGreaterEqual(len(fs), 1)
            for f in fs:
                self.assertEqual((f["service"], f["path"]), (H.DEFAULT_HOST, path))
                self.assertIn(f["total"], (0, size))
                self.assertLess(f["seconds"], 3600)
                self.assertLessEqual(f["first"] + f["done"], size)
        gate.set()
        r = a.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), body)
        H.wait_until(lambda: self.api("/api/live")["fetches"] == [], 10 * H.SLOW, 0.05,
                     "no fetch in flight")
        self.assertTrue(self.daemon.running())

    def test_bytes_per_service_and_client_match_the_counters(self):
        self.start()
        p1, p2 = "/b23/svc/a/size/%d" % SIZE, "/b23/svc/b/size/%d" % (SIZE // 3)
        self.assertBody(self.get(p1), p1)
        self.assertBody(self.get(p1), p1)  # a hit, every byte
        other = H.Client(self.daemon.port, source="127.0.0.2")
        self._clients.append(other)
        other.request(p2)
        self.assertBody(other.read_response(), p2)
        other.request(p1)
        self.assertBody(other.read_response(), p1)
        self.daemon.settle_fetches()
        H.wait_until(lambda: sum(s["bytes"] for s in self.api("/api/live")["services"]) ==
                     3 * SIZE + SIZE // 3, 10 * H.SLOW, 0.05, "the bytes accounted")
        live = self.api("/api/live")
        st = self.daemon.status()
        svc = {s["name"]: s for s in live["services"]}
        self.assertEqual(list(svc), [H.DEFAULT_HOST])
        s = svc[H.DEFAULT_HOST]
        self.assertEqual(s["bytes"], 3 * SIZE + SIZE // 3)
        self.assertEqual(s["hit"], 2 * SIZE)
        self.assertEqual(s["total_bytes"], s["bytes"])  # a first start: this run is all
        cl = {c["name"]: c for c in live["clients"]}
        self.assertEqual(cl["127.0.0.1"]["bytes"], 2 * SIZE)
        self.assertEqual(cl["127.0.0.1"]["hit"], SIZE)
        self.assertEqual(cl["127.0.0.2"]["bytes"], SIZE + SIZE // 3)
        self.assertEqual(cl["127.0.0.2"]["hit"], SIZE)
        self.assertEqual([c["floor"] for c in live["clients"]], [0, 0])
        self.assertEqual([c["name"] for c in live["clients"]], ["127.0.0.1", "127.0.0.2"])
        t = live["totals"]
        self.assertEqual(t["bytes_hit"], st["response_bytes_total"]["hit"])
        self.assertEqual(t["bytes_miss"], st["response_bytes_total"]["miss"])
        self.assertEqual(t["bytes_hit"], 2 * SIZE)
        self.assertEqual(t["bytes_miss"], SIZE + SIZE // 3)
        self.assertEqual(t["upstream_bytes"], st["upstream_bytes_total"])
        self.assertAlmostEqual(t["hit_ratio"], 2 * SIZE / (3 * SIZE + SIZE // 3), places=3)
        self.assertEqual(live["now"]["connections"], st["connections"]["http"])
        h = self.api("/api/history")
        self.assertEqual(h["columns"][:3], ["t_ms", "bytes_hit", "bytes_miss"])
        self.assertGreaterEqual(len(h["samples"]), 1)
        self.assertTrue(all(len(x) == 8 for x in h["samples"]))
        ts = [x[0] for x in h["samples"]]
        self.assertEqual(ts, sorted(ts))

    def test_service_totals_survive_a_restart(self):
        d = self.start()
        p = "/b23/keep/size/%d" % SIZE
        self.assertBody(self.get(p), p)
        self.assertBody(self.get(p), p)
        H.wait_until(lambda: sum(s["bytes"] for s in self.api("/api/live")["services"]) ==
                     2 * SIZE, 10 * H.SLOW, 0.05, "the bytes accounted")
        d.stop()
        d.start()
        live = self.api("/api/live")
        s = {x["name"]: x for x in live["services"]}[H.DEFAULT_HOST]
        self.assertEqual((s["bytes"], s["hit"]), (0, 0))
        self.assertEqual((s["total_bytes"], s["total_hit"]), (2 * SIZE, SIZE))
        self.assertBody(self.get(p), p)
        H.wait_until(lambda: {x["name"]: x for x in self.api("/api/live")["services"]}
                     [H.DEFAULT_HOST]["total_bytes"] == 3 * SIZE, 10 * H.SLOW, 0.05,
                     "the new bytes added to the total")

    def test_ten_thousand_client_addresses_stay_in_a_bounded_table(self):
        # Each request from another loopback address: the table keeps 256 of them, the busiest
        # exactly (no floor), and the daemon's memory does not grow with the addresses.
        self.start()
        big = "/b23/many/big/size/%d" % SIZE
        small = "/b23/many/small/size/100"
        top = H.Client(self.daemon.port, source="127.1.0.1")
        self._clients.append(top)
        top.request(big)
        self.assertBody(top.read_response(), big)
        self.assertBody(self.get(small), small)
        base = self.daemon.rss_kib()
        n = 10000
        for i in range(n):
            src = "127.2.%d.%d" % (i // 250, i % 250 + 1)
            c = H.Client(self.daemon.port, source=src)
            c.request(small, headers=[("Connection", "close")])
            r = c.read_response()
            c.close()
            self.assertEqual(r.status, 200)
        H.wait_until(lambda: sum(x["bytes"] for x in self.api("/api/live")["clients"]) ==
                     SIZE + 100 + 100 * n, 10 * H.SLOW, 0.05, "the requests accounted")
        live = self.api("/api/live")
        self.assertEqual(len(live["clients"]), 256)
        first = live["clients"][0]
        self.assertEqual((first["name"], first["bytes"], first["floor"]), ("127.1.0.1", SIZE, 0))
        # The space-saving table credits what it cannot tell apart, never loses a byte: its
        # counts add up to every byte served.
        self.assertEqual(sum(x["bytes"] for x in live["clients"]), SIZE + 100 + 100 * n)
        self.assertTrue(all(x["floor"] <= x["bytes"] for x in live["clients"]))
        if not H.SANITIZED:
            self.assertLess(self.daemon.rss_kib() - base, 8 * 1024,
                            "RSS grew by more than 8 MiB for 10,000 client addresses")

    def test_the_api_is_a_view_behind_the_token(self):
        self.start({"server": {"admin_listen": "auto-any",
                               "admin_token": "b23-token-0123456789abcdef"}})
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        for target in ("/api/live", "/api/history"):
            c.request(target, host="127.0.0.1")
            self.assertStatus(c.read_response(), 401)
        self.assertIn("fetches", self.api("/api/live"))  # admin_get sends the token


if __name__ == "__main__":
    H.main()
