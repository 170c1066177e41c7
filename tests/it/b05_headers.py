# SPDX-License-Identifier: BSD-2-Clause
"""b05: what goes upstream (Host, X-LanCache-Processed-By, query, absolute-form; the fields a fill
forwards: c09), what comes back (hop-by-hop stripped, X-LanCache-Processed-By,
X-Upstream-Cache-Status), the heartbeat."""

import harness as H


class Headers(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def test_upstream_host_and_processed_by(self):
        r = self.get("/b05/a/size/10", host="game.example.test",
                     headers=[("User-Agent", "Valve/Steam HTTP Client 1.0")])
        self.assertStatus(r, 200)
        req = self.origin.last()
        self.assertEqual(req.header("Host"), "game.example.test")
        self.assertEqual(len(req.header_all("Host")), 1)
        pb = req.header("X-LanCache-Processed-By")
        self.assertIsNotNone(pb, "no X-LanCache-Processed-By upstream: %r" % req.raw)
        self.assertIn(H.HOSTNAME, pb)
        self.assertEqual(req.header("User-Agent"), "Valve/Steam HTTP Client 1.0")
        self.assertEqual(req.version, "HTTP/1.1")

    def test_upstream_host_with_port_kept(self):
        r = self.get("/b05/p/size/10", host="game.example.test:8123")
        self.assertStatus(r, 200)
        self.assertEqual(self.origin.last().header("Host"), "game.example.test:8123")

    def test_processed_by_appended(self):
        r = self.get("/b05/b/size/10", headers=[("X-LanCache-Processed-By", "other-cache")])
        self.assertStatus(r, 200)
        pb = ",".join(self.origin.last().header_all("X-LanCache-Processed-By"))
        self.assertIn("other-cache", pb)
        self.assertIn(H.HOSTNAME, pb)

    def test_processed_by_chain_of_several_fields_kept_on_a_fill(self):
        # two caches before us, each with its own field: a cache fill carries the whole chain
        r = self.get("/b05/chain/size/10", headers=[("X-LanCache-Processed-By", "cache-a"),
                                                     ("X-LanCache-Processed-By", "cache-b")])
        self.assertStatus(r, 200)
        req = self.origin.last()
        self.assertEqual(req.header_all("X-LanCache-Processed-By"),
                         ["cache-a, cache-b, %s" % H.HOSTNAME])

    def test_request_built_afresh(self):
        r = self.get("/b05/c/size/10", headers=[
            ("Cookie", "session=secret"), ("X-Client-Junk", "1"),
            ("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"),
            ("Proxy-Authorization", "Basic Zm9vOmJhcg=="), ("Range", "bytes=0-3")])
        self.assertStatus(r, 206)
        req = self.origin.last()
        for name in ("Cookie", "X-Hop", "Keep-Alive", "Proxy-Authorization"):
            self.assertIsNone(req.header(name), "%s forwarded upstream: %r" % (name, req.raw))
        # the client's end-to-end fields go with the fill (tests/it/c09_fill_fields.py)
        self.assertEqual(req.header_all("X-Client-Junk"), ["1"], req.raw)
        # a cache fill asks for the whole first chunk, whatever range the client wanted
        self.assertEqual(req.header("Range"), "bytes=0-%d" % (H.MIB - 1))

    def test_query_forwarded_unchanged(self):
        t = "/b05/d/size/10?a=1&b=%20x&c&d=%2F"
        r = self.get(t)
        self.assertStatus(r, 200)
        self.assertEqual(self.origin.last().target, t)
        self.assertBody(r, "/b05/d/size/10")

    def test_absolute_form(self):
        c = self.client()
        c.send(b"GET http://Game.Example.Test./b05/e/size/10?q=1 HTTP/1.1\r\n"
               b"Host: Game.Example.Test.\r\n\r\n")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b05/e/size/10")
        req = self.origin.last()
        self.assertEqual(req.target, "/b05/e/size/10?q=1")
        self.assertEqual(req.header("Host").lower().rstrip("."), "game.example.test")

    def test_hop_by_hop_from_origin_not_forwarded(self):
        def h(ex):
            ex.send(200, b"hello", [("Connection", "x-foo"), ("X-Foo", "1"),
                                    ("Keep-Alive", "timeout=5, max=100"),
                                    ("Proxy-Connection", "keep-alive"), ("X-Keep", "yes")])
        self.origin.route("/b05/hop", h)
        # forwarded uncached (Authorization): the origin's end-to-end fields pass, hop-by-hop not
        r = self.get("/b05/hop", headers=[("Authorization", "Bearer t")])
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), b"hello")
        self.assertIsNone(r.header("X-Foo"), r.raw_head)
        self.assertIsNone(r.header("Keep-Alive"), r.raw_head)
        self.assertNotIn("x-foo", r.tokens("Connection"))
        self.assertEqual(r.header("X-Keep"), "yes")
        self.assertProcessedBy(r)
        # cached: the head is built from the stored metadata only
        r = self.get("/b05/hop")
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), b"hello")
        self.assertIsNone(r.header("X-Foo"), r.raw_head)
        self.assertIsNone(r.header("Keep-Alive"), r.raw_head)
        self.assertProcessedBy(r)

    def test_upstream_cache_status(self):
        r = self.get("/b05/f/size/10")
        self.assertStatus(r, 200)
        self.assertIn(r.header("X-Upstream-Cache-Status"), ("HIT", "MISS", "BYPASS"), r.raw_head)

    def test_authorization_forwarded_bypass(self):
        r = self.get("/b05/auth/size/10", headers=[("Authorization", "Bearer t0ken"),
                                                   ("If-None-Match", '"nope"')])
        self.assertStatus(r, 200)
        self.assertBody(r, "/b05/auth/size/10")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        req = self.origin.last()
        self.assertEqual(req.header("Authorization"), "Bearer t0ken")
        self.assertEqual(req.header("If-None-Match"), '"nope"')

    def test_conditionals_not_forwarded_without_authorization(self):
        r = self.get("/b05/cond/size/10", headers=[("If-None-Match", '"nope"'),
                                                   ("If-Modified-Since",
                                                    "Sat, 01 Jan 2000 00:00:00 GMT")])
        self.assertIn(r.status, (200, 304))
        req = self.origin.last()
        self.assertIsNone(req.header("If-None-Match"), req.raw)
        self.assertIsNone(req.header("If-Modified-Since"), req.raw)
        self.assertNotEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")

    def test_heartbeat(self):
        for host in ("game.example.test", "whatever.example"):
            r = self.get("/lancache-heartbeat", host=host)
            self.assertStatus(r, 204)
            self.assertProcessedBy(r)
            self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
            self.assertEqual(r.header("Access-Control-Expose-Headers"), "*")
            self.assertEqual(len(r.body), 0)
        self.assertEqual(self.origin.request_count(), 0)

    def test_heartbeat_keepalive(self):
        c = self.client()
        for _ in range(3):
            c.request("/lancache-heartbeat")
            self.assertStatus(c.read_response(), 204)
        c.request("/b05/g/size/10")
        self.assertBody(c.read_response(), "/b05/g/size/10")

    def test_upgrade_ignored(self):
        c = self.client()
        c.request("/b05/h/size/100", headers=[("Connection", "Upgrade"), ("Upgrade", "websocket")])
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b05/h/size/100")
        self.assertIsNone(self.origin.last().header("Upgrade"))


if __name__ == "__main__":
    raise SystemExit(H.main())
