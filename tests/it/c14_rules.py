# SPDX-License-Identifier: BSD-2-Clause
"""c14: per-path rules ([rules], docs/interfaces.md "Per-path rules"): lancache's never-cache
exceptions are built in and bypass the cache (the origin is asked every time, nothing is
stored), a user adds a rule or switches a built-in off by its name, hide_etag keeps the ETag
out of what is stored, compared and sent (Blizzard's CDN edges send different ETags for the
chunks of one file), and `-t` prints the rules in the order they are tried."""

import os
import re
import signal
import subprocess

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
SIZE = 1000

# one path per built-in bypass rule, as the games ask for them
BUILTIN_BYPASS = [
    ("lol-releaselisting", "l3cdn.riotgames.com", "/releases/live/releaselisting_EUW"),
    ("lol-version", "l3cdn.riotgames.com",
     "/releases/live/projects/lol_game_client/releases/0.0.1.7/version"),
    ("gw2-latest64", "assetcdn.101.arenanetworks.com", "/latest64"),
    ("wu-trust-lists", "ctldl.windowsupdate.com",
     "/msdownload/update/v3/static/trustedr/en/authrootstl.cab"),
    ("steam-server-status", "lancache.steamcontent.com", "/server-status"),
]


class Rules(H.CPTestCase):
    def start(self, rules=None, cache=None):
        over = {"server": {"admin_listen": "auto"},
                "domains": {"cache_domains": LISTS, "allow_unlisted": "yes"}}
        if rules:
            over["rules"] = rules
        if cache:
            over["cache"] = cache
        daemon = self.setup_proxy(over)
        self.origin.handler = lambda ex: H.serve_object(ex, SIZE)
        return daemon

    def statuses(self, n):
        lines = H.wait_until(lambda: len(self.daemon.access_lines()) >= n and
                             self.daemon.access_lines(), 10 * H.SLOW, 0.05, "access lines")
        return [re.search(r'"([A-Z]+|-)" "[^"]*" "[^"]*"$', x).group(1) for x in lines]

    def chunks(self):
        return self.daemon.metrics().get('cacheparty_cache_chunks{tier="memory"}', 0)

    def test_each_builtin_bypass_rule_asks_the_origin_every_time(self):
        self.start()
        n = 0
        for name, host, path in BUILTIN_BYPASS:
            for _ in range(3):
                r = self.get(path, host=host)
                self.assertStatus(r, 200)
                self.assertBody(r, path, total=SIZE)
                self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS", name)
                n += 1
                self.assertEqual(self.origin.request_count(), n, name)
                self.assertEqual(self.origin.last().path, path)
        self.assertEqual(self.statuses(n), ["BYPASS"] * n)
        self.assertEqual(self.chunks(), 0)
        # the rules are about those paths only: their neighbours are cached as usual
        for host, path in (("l3cdn.riotgames.com", "/releases/live/projects/x/files/a.bin"),
                           ("assetcdn.101.arenanetworks.com", "/program/latest64"),
                           ("lancache.steamcontent.com", "/server-status/more")):
            self.assertBody(self.get(path, host=host), path, total=SIZE)
            r = self.get(path, host=host)
            self.assertBody(r, path, total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT", path)
        self.assertEqual(self.origin.request_count(), n + 3)

    def test_bypass_ignores_a_copy_stored_before_the_rule(self):
        """A copy stored while no rule applied is never served once one does (reload)."""
        d = self.start({"lol-version": "off"})
        path = BUILTIN_BYPASS[1][2]
        host = BUILTIN_BYPASS[1][1]
        self.assertBody(self.get(path, host=host), path, total=SIZE)
        self.assertEqual(self.get(path, host=host).header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), 1)
        with open(d.ini) as f:
            text = f.read()
        with open(d.ini, "w") as f:
            f.write(text.replace("lol-version = off\n", ""))
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "configuration reloaded" in d.log(), 10 * H.SLOW, 0.05, "reload")
        r = self.get(path, host=host)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(self.origin.request_count(), 2)

    def test_user_rule_and_builtin_switched_off(self):
        self.start({"lol-version": "off",
                    "my-manifest": "bypass *.cdn.example.net ~*/manifest[0-9]+\\.json$",
                    "svc": "bypass blizzard /tpr/configs/"})
        host, path = BUILTIN_BYPASS[1][1], BUILTIN_BYPASS[1][2]
        self.get(path, host=host)
        self.assertEqual(self.get(path, host=host).header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), 1)
        for _ in range(2):
            r = self.get("/a/Manifest12.json", host="eu.cdn.example.net")
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(self.origin.request_count(), 3)
        # another host, or the wildcard's base: not the rule's
        for h in ("cdn.example.net", "eu.cdn.example.org"):
            self.get("/a/manifest1.json", host=h)
            r = self.get("/a/manifest1.json", host=h)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT", h)
        self.assertEqual(self.origin.request_count(), 5)
        # a service's rule: the blizzard identifier, whatever its host
        for _ in range(2):
            r = self.get("/tpr/configs/data/ab", host="level3.blizzard.com")
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(self.origin.request_count(), 7)

    def test_hide_etag_for_blizzard(self):
        """Blizzard's edges give the chunks of one file different ETags: under the built-in
        blizzard-etag rule the ETag is neither stored nor sent, so the chunks of one object
        stay one version (two chunks, each fetched once) and the answers carry no ETag."""
        self.start(cache={"chunk_size": "4K"})
        total = 6000

        def edge_etags(ex):
            rng = H.parse_range(ex.req.header("Range"), total)
            start = rng[0] if isinstance(rng, tuple) else 0
            ex.req.query["noetag"] = ["1"]
            H.serve_object(ex, total, extra=(("ETag", '"edge-%d"' % start),))
        self.origin.route("/tpr/", edge_etags)
        path = "/tpr/wow/data/ab/cd/abcdef"
        for want in ("MISS", "HIT"):
            r = self.get(path, host="level3.blizzard.com")
            self.assertStatus(r, 200)
            self.assertBody(r, path, total=total)
            self.assertIsNone(r.header("ETag"), r.raw_head)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), want)
        self.assertEqual(self.origin.request_count(), 2)  # one per chunk, never again
        r = self.get(path, host="level3.blizzard.com", headers=[("Range", "bytes=4000-4999")])
        self.assertStatus(r, 206)
        self.assertIsNone(r.header("ETag"))
        self.assertEqual(self.origin.request_count(), 2)
        # elsewhere the ETag is the object's, sent and stored
        r = self.get("/other/x/size/100", host="l3cdn.riotgames.com")
        self.assertIsNotNone(r.header("ETag"))

    def test_upstream_status_fields_as_monolithic(self):
        """monolithic's add_header X-Upstream-Status $upstream_status and
        X-Upstream-Response-Time $upstream_response_time: on a MISS the fill's origin status
        (206: fills ask a range) and "-" (nginx writes its head before the origin's answer
        ends); on a HIT neither; on a bypass the origin's status; on a 404 neither (add_header
        decorates 2xx/3xx only)."""
        self.start()
        p = "/c14/up/size/3000"
        self.origin.handler = H.default_handler
        r = self.get(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(r.header("X-Upstream-Status"), "206")
        self.assertEqual(r.header("X-Upstream-Response-Time"), "-")
        r = self.get(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertIsNone(r.header("X-Upstream-Status"))
        self.assertIsNone(r.header("X-Upstream-Response-Time"))
        r = self.get(p, headers=[("Authorization", "Bearer x")])
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertEqual(r.header("X-Upstream-Status"), "200")
        r = self.get("/c14/missing/size/10?status=404")
        self.assertStatus(r, 404)
        self.assertIsNone(r.header("X-Upstream-Status"))

    def versioned_origin(self):
        """The origin of the revalidation tests: each path has a version (ETag "vN",
        Last-Modified of day N, the bytes of PATH/vN); If-None-Match of the current version
        answers 304; self.mode "503", "404" or "drop" (close without an answer) overrides."""
        self.ver = {}
        self.mode = None
        days = ["Mon, 0%d Jan 2024 00:00:00 GMT" % d for d in range(1, 10)]

        def handler(ex):
            path = ex.req.path.split("?")[0]
            v = self.ver.setdefault(path, 1)
            if self.mode == "drop":
                ex.close(reset=True)
                return
            if self.mode in ("503", "404", "501"):
                ex.send(int(self.mode), b"no\n")
                return
            etag = '"v%d"' % v
            if ex.req.header("If-None-Match") == etag:
                ex.send(304, b"", [("ETag", etag), ("Content-Length", "0")])
                return
            ex.req.query["noetag"] = ["1"]
            H.serve_object(ex, SIZE, path="%s/v%d" % (path, v),
                           extra=(("ETag", etag), ("Last-Modified", days[v])))
        self.origin.handler = handler

    def test_revalidate_each_builtin_rule(self):
        """Every built-in switched to revalidate: one conditional request per client request
        (the stored ETag and Last-Modified, none of the client's), a 304 served from the cache
        (REVALIDATED), a changed object replaced (MISS, the new bytes), a 5xx or an origin that
        is down answered from the stored copy (STALE), a 404 passed on and the copy dropped."""
        self.start({name: "revalidate" for name, _, _ in BUILTIN_BYPASS})
        self.versioned_origin()
        for name, host, path in BUILTIN_BYPASS:
            n = self.origin.request_count()
            r = self.get(path, host=host)
            self.assertBody(r, path + "/v1", total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS", name)
            self.assertEqual(self.origin.request_count(), n + 1)
            for _ in range(2):
                r = self.get(path, host=host, headers=[("If-None-Match", '"client"')])
                self.assertStatus(r, 200)
                self.assertBody(r, path + "/v1", total=SIZE)
                self.assertEqual(r.header("X-Upstream-Cache-Status"), "REVALIDATED", name)
                self.assertEqual(r.header("X-Upstream-Status"), "304")
                q = self.origin.last()
                self.assertEqual(q.header("If-None-Match"), '"v1"')
                self.assertEqual(q.header("If-Modified-Since"), "Mon, 02 Jan 2024 00:00:00 GMT")
                self.assertIsNone(q.header("Range"))
            self.assertEqual(self.origin.request_count(), n + 3)  # one per client request
            self.ver[path] = 2
            r = self.get(path, host=host)
            self.assertBody(r, path + "/v2", total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS", name)
            r = self.get(path, host=host)
            self.assertBody(r, path + "/v2", total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "REVALIDATED", name)
            self.mode = "503"
            r = self.get(path, host=host)
            self.assertBody(r, path + "/v2", total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "STALE", name)
            self.assertEqual(r.header("X-Upstream-Status"), "503")
            self.mode = None
        # the origin down: every stored copy still served
        self.mode = "drop"
        self.origin.close_listener()
        for name, host, path in BUILTIN_BYPASS:
            r = self.get(path, host=host)
            self.assertStatus(r, 200)
            self.assertBody(r, path + "/v2", total=SIZE)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "STALE", name)
        n = len(BUILTIN_BYPASS)
        self.assertEqual(self.statuses(7 * n),
                         ["MISS", "REVALIDATED", "REVALIDATED", "MISS", "REVALIDATED", "STALE"] * n
                         + ["STALE"] * n)

    def test_revalidate_gone_object_is_passed_on_and_dropped(self):
        self.start({"svc": "revalidate * /c14/gone/"})
        self.versioned_origin()
        path = "/c14/gone/file"
        self.assertBody(self.get(path), path + "/v1", total=SIZE)
        self.mode = "404"
        r = self.get(path)
        self.assertStatus(r, 404)
        self.assertEqual(bytes(r.body), b"no\n")
        self.mode = None
        self.ver[path] = 3
        n = self.origin.request_count()
        r = self.get(path)  # nothing stored any more: a plain miss, one origin request
        self.assertBody(r, path + "/v3", total=SIZE)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(self.origin.request_count(), n + 1)
        self.assertIsNone(self.origin.last().header("If-None-Match"))
        # HEAD is revalidated too
        r = self.get(path, method="HEAD")
        self.assertStatus(r, 200)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "REVALIDATED")
        self.assertEqual(self.origin.last().method, "HEAD")

    def test_review_revalidate_head_of_changed_object(self):
        """Review: a revalidated HEAD whose object changed (200 to the conditional HEAD): the
        copy is dropped, the cache path finds nothing stored for a HEAD and hands it on to the
        pass path again, from UPSTREAM (the daemon aborted there)."""
        self.start({"svc": "revalidate * /c14/headchg/"})
        self.versioned_origin()
        path = "/c14/headchg/file"
        self.assertBody(self.get(path), path + "/v1", total=SIZE)
        self.ver[path] = 2
        r = self.get(path, method="HEAD")
        self.assertStatus(r, 200)
        self.assertEqual(r.header("ETag"), '"v2"')
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertTrue(self.daemon.running())
        self.assertBody(self.get(path), path + "/v2", total=SIZE)
        # a 501 (not in lancache's use_stale list) is passed on, the copy kept
        self.mode = "501"
        r = self.get(path)
        self.assertStatus(r, 501)
        self.mode = None
        r = self.get(path)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "REVALIDATED")
        self.assertBody(r, path + "/v2", total=SIZE)

    def test_cli_prints_the_rules_in_order(self):
        d = self.start({"gw2-latest64": "off", "mine": "bypass files.example.org =/a"})
        out = subprocess.run([H.binary_path(), "-t", "-c", d.ini], capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        rules = [x for x in out.stdout.splitlines() if x.startswith("rule ")]
        with open(d.ini) as f:
            line = f.read().splitlines().index("mine = bypass files.example.org =/a") + 1
        self.assertEqual(rules[0], "rule mine: bypass files.example.org =/a (%s:%d)"
                         % (d.ini, line))
        self.assertEqual([x.split(":")[0] for x in rules[1:]],
                         ["rule lol-releaselisting", "rule lol-version", "rule gw2-latest64",
                          "rule wu-trust-lists", "rule steam-server-status",
                          "rule blizzard-etag"])
        self.assertIn("rule gw2-latest64: off * /latest64 (%s:" % d.ini, out.stdout)
        self.assertIn("rule blizzard-etag: hide_etag blizzard / (built in)", out.stdout)
        bad = os.path.join(self._tmp, "bad.ini")
        with open(d.ini) as f, open(bad, "w") as g:
            g.write(f.read() + "\n[rules]\nx = bypass * nopath\n")
        out = subprocess.run([H.binary_path(), "-t", "-c", bad], capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("[rules] rule x: 'nopath' is not a path pattern", out.stderr)


if __name__ == "__main__":
    H.main()
