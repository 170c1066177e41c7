# SPDX-License-Identifier: BSD-2-Clause
"""b25: the inventory (docs/interfaces.md "Dashboard API"): what is stored per service and per
Steam depot (other services by two path segments), equal to the chunk files on disk; the same
after a restart (the start-up scan, then each file's header key read in the background); the
objects of one depot on demand; purges of an object, a depot and a whole service (POST only,
refused from another origin or without the token off loopback), which remove exactly those
chunk files and make their objects misses again while the rest stays a hit."""

import json
import os
import urllib.parse

import harness as H

STEAM_UA = "Valve/Steam HTTP Client 1.0"
STEAM_HOST = "cache1-ams1.steamcontent.com"
TOKEN = "b25-token-0123456789abcdef"


def sha(i):
    return ("%040x" % (0xb25 * 1000003 + i))[-40:]


# (host, ua, path, size, service, group prefix)
OBJECTS = [
    (STEAM_HOST, STEAM_UA, "/depot/100/chunk/%s/size/200000" % sha(1), 200000, "steam",
     "/depot/100/"),
    (STEAM_HOST, STEAM_UA, "/depot/100/chunk/%s/size/1000" % sha(2), 1000, "steam", "/depot/100/"),
    (STEAM_HOST, STEAM_UA, "/depot/100/chunk/%s/size/70000" % sha(3), 70000, "steam",
     "/depot/100/"),
    (STEAM_HOST, STEAM_UA, "/depot/200/chunk/%s/size/%d" % (sha(4), 2 * H.MIB + 5000),
     2 * H.MIB + 5000, "steam", "/depot/200/"),
    (H.DEFAULT_HOST, None, "/b25/game/files/a/size/3000", 3000, H.DEFAULT_HOST, "/b25/game/"),
    (H.DEFAULT_HOST, None, "/b25/other/size/5000", 5000, H.DEFAULT_HOST, "/b25/other/"),
]


def q(**kw):
    return urllib.parse.urlencode(kw, quote_via=urllib.parse.quote)


class Inventory(H.CPTestCase):
    def start(self, server=None, cache_dir=None):
        self.cache_dir = cache_dir or getattr(self, "cache_dir", None) or os.path.join(
            self._tmp, "cache")
        o = {"server": {"admin_listen": "auto"}, "cache": {"dir": self.cache_dir}}
        o["server"].update(server or {})
        if getattr(self, "origin", None) is None:
            return self.setup_proxy(o)
        self.daemon = self.start_daemon(o, origin=self.origin, dns=self.dns)
        return self.daemon

    def req(self, target, method="GET", headers=(), auth=True):
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        hdrs = list(headers)
        if auth and self.daemon.admin_token:
            hdrs.append(("Authorization", "Bearer " + self.daemon.admin_token))
        c.request(target, method=method, host="127.0.0.1:%d" % self.daemon.admin_port,
                  headers=hdrs)
        r = c.read_response()
        c.close()
        return r

    def api(self, target):
        r = self.req(target)
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Type"), "application/json")
        return json.loads(bytes(r.body))

    def inventory(self):
        inv = self.api("/api/inventory")
        self.assertEqual(inv["groups_matched"], len(inv["groups"]))
        return inv

    def complete_inventory(self):
        H.wait_until(lambda: self.api("/api/inventory")["complete"], 30 * H.SLOW, 0.05,
                     "the inventory complete")
        return self.inventory()

    def fetch(self, obj, expect=None):
        host, ua, path, size = obj[:4]
        r = self.get(path, host=host, headers=[("User-Agent", ua)] if ua else [])
        self.assertStatus(r, 200)
        self.assertBody(r, path, total=size)
        if expect is not None:
            self.assertEqual(r.header("X-Upstream-Cache-Status"), expect, path)
        return r

    def fill(self):
        for o in OBJECTS:
            self.fetch(o)
        self.daemon.settle_disk()

    def on_disk(self):
        """{(service, prefix): [bytes, chunks]} from the chunk files themselves."""
        out = {}
        for f in H.chunk_files(self.cache_dir):
            h = H.chunk_file_info(f)
            ident, _, path = h["key"].partition("\n")
            o = next(o for o in OBJECTS if o[2] == path)
            st = os.stat(f)
            units = -(-max(st.st_size, st.st_blocks * 512) // 512)
            e = out.setdefault((ident, o[5]), [0, 0])
            e[0] += units * 512
            e[1] += 1
        return out

    def groups(self, inv):
        return {(g["service"], g["prefix"]): [g["bytes"], g["chunks"]] for g in inv["groups"]}

    def listing(self, service, prefix, status=200):
        target = "/api/objects?" + q(service=service, prefix=prefix)
        last = {}

        def done():
            r = self.req(target)
            last["r"] = r
            return r.status != 202
        H.wait_until(done, 30 * H.SLOW, 0.05, "the listing of " + prefix)
        self.assertStatus(last["r"], status)
        return json.loads(bytes(last["r"].body))

    def test_totals_per_depot_and_service_equal_the_files_and_survive_a_restart(self):
        self.start()
        self.fill()
        want = self.on_disk()
        self.assertEqual(len(want), 4)
        inv = self.complete_inventory()
        self.assertEqual(self.groups(inv), want)
        svc = {s["service"]: s for s in inv["services"]}
        self.assertEqual(svc["steam"]["groups"], 2)
        self.assertEqual(svc["steam"]["bytes"], want[("steam", "/depot/100/")][0] +
                         want[("steam", "/depot/200/")][0])
        self.assertEqual(svc["steam"]["chunks"], 3 + 3)  # depot 200's object is three chunks
        self.assertEqual(inv["chunks"], len(H.chunk_files(self.cache_dir)))
        st = self.daemon.metrics()
        self.assertEqual(inv["bytes"], st['cacheparty_cache_bytes{tier="disk"}'])
        for g in inv["groups"]:
            self.assertGreater(g["last_ms"], 0)
        # ?service= narrows the groups.
        only = self.api("/api/inventory?service=steam")
        self.assertEqual(sorted(g["prefix"] for g in only["groups"]), ["/depot/100/", "/depot/200/"])
        # A restart: the scan finds the files, their keys are read, the totals are the same.
        asked = self.origin.request_count()
        self.daemon.stop()
        self.start()
        inv2 = self.complete_inventory()
        self.assertEqual(self.groups(inv2), want)
        self.assertEqual(inv2["unread_chunks"], 0)
        self.assertEqual(self.origin.request_count(), asked)

    def test_objects_of_a_depot_on_demand(self):
        self.start()
        self.fill()
        self.complete_inventory()
        lst = self.listing("steam", "/depot/100/")
        self.assertFalse(lst["truncated"])
        got = sorted((o["path"], o["chunks"]) for o in lst["objects"])
        self.assertEqual(got, sorted((o[2], 1) for o in OBJECTS[:3]))
        want = self.on_disk()[("steam", "/depot/100/")]
        self.assertEqual(sum(o["bytes"] for o in lst["objects"]), want[0])
        lst = self.listing("steam", "/depot/200/")
        self.assertEqual([(o["path"], o["chunks"]) for o in lst["objects"]], [(OBJECTS[3][2], 3)])
        self.listing("steam", "/depot/300/", status=404)
        self.assertStatus(self.req("/api/objects?service=steam"), 400)
        # A listing made before an object is removed never shows it again.
        self.listing("steam", "/depot/100/")
        r = self.req("/api/purge?" + q(service="steam", path=OBJECTS[2][2]), method="POST")
        self.assertStatus(r, 200)
        lst = self.listing("steam", "/depot/100/")
        self.assertEqual(sorted(o["path"] for o in lst["objects"]),
                         sorted(o[2] for o in OBJECTS[:2]))

    def test_purge_an_object_a_depot_and_a_service(self):
        self.start()
        self.fill()
        self.complete_inventory()
        n0 = self.origin.request_count()
        # One object.
        r = self.req("/api/purge?" + q(service="steam", path=OBJECTS[1][2]), method="POST")
        self.assertStatus(r, 200)
        self.assertEqual(r.header_all("Content-Type"), ["application/json"])
        self.assertEqual(json.loads(bytes(r.body)), {"removed": 1})
        # A depot: its chunk files go, the other depot's and the other service's stay.
        r = self.req("/api/purge?" + q(service="steam", prefix="/depot/100/"), method="POST")
        self.assertStatus(r, 202)
        self.assertEqual(r.header_all("Content-Type"), ["application/json"])
        self.assertEqual(json.loads(bytes(r.body)), {"groups": 1, "chunks": 2})
        H.wait_until(lambda: ("steam", "/depot/100/") not in self.groups(self.inventory()),
                     30 * H.SLOW, 0.05, "depot 100 gone")
        H.wait_until(lambda: self.inventory()["purges"] == 0, 30 * H.SLOW, 0.05,
                     "the depot's purge over")
        self.assertEqual(set(self.on_disk()), {("steam", "/depot/200/"),
                                               (H.DEFAULT_HOST, "/b25/game/"),
                                               (H.DEFAULT_HOST, "/b25/other/")})
        for o in OBJECTS[3:]:
            self.fetch(o, "HIT")
        self.assertEqual(self.origin.request_count(), n0)
        self.fetch(OBJECTS[0], "MISS")
        self.assertEqual(self.origin.request_count(), n0 + 1)
        self.daemon.settle_disk()
        # A whole service.
        r = self.req("/api/purge?" + q(service="steam"), method="POST")
        self.assertStatus(r, 202)
        self.assertEqual(json.loads(bytes(r.body))["groups"], 2)
        H.wait_until(lambda: not any(s == "steam" for s, _ in self.groups(self.inventory())),
                     30 * H.SLOW, 0.05, "steam gone")
        self.assertEqual(set(self.on_disk()), {(H.DEFAULT_HOST, "/b25/game/"),
                                               (H.DEFAULT_HOST, "/b25/other/")})
        for o in OBJECTS[4:]:
            self.fetch(o, "HIT")
        self.fetch(OBJECTS[3], "MISS")
        inv = self.inventory()
        self.assertEqual(inv["purges"], 0)
        self.assertGreaterEqual(inv["purged_chunks"], 2 + 4)
        # Nothing there: 404, nothing queued.
        r = self.req("/api/purge?" + q(service="nosuch"), method="POST")
        self.assertStatus(r, 404)

    def test_a_file_in_the_other_dir_is_grouped_and_its_purge_ends(self):
        # Two cache dirs; one chunk file moved into the dir its object does not hash to (a dir
        # added or swapped since): the start-up scan indexes it where it is, its key is read and
        # it joins its depot; a purge of that depot ends (the file it cannot find by its hash is
        # left, and the log says so) instead of running for ever.
        a, b = os.path.join(self._tmp, "ca"), os.path.join(self._tmp, "cb")
        self.start(cache_dir=a + "," + b)
        self.fill()
        self.daemon.stop()
        files = [f for f in H.chunk_files(a) + H.chunk_files(b)
                 if H.chunk_file_info(f)["key"] == "steam\n" + OBJECTS[1][2]]
        self.assertEqual(len(files), 1)
        src = files[0]
        home, other = (a, b) if src.startswith(a + os.sep) else (b, a)
        dst = os.path.join(other, os.path.relpath(src, home))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)
        self.start(cache_dir=a + "," + b)
        inv = self.complete_inventory()
        self.assertEqual(self.groups(inv)[("steam", "/depot/100/")][1], 3)
        r = self.req("/api/purge?" + q(service="steam", prefix="/depot/100/"), method="POST")
        self.assertStatus(r, 202)
        H.wait_until(lambda: self.api("/api/inventory")["purges"] == 0, 60 * H.SLOW, 0.05,
                     "the purge over")
        inv = self.inventory()
        self.assertEqual(self.groups(inv).get(("steam", "/depot/100/"), [0, 0])[1], 1)
        self.assertFalse(any(g["purging"] for g in inv["groups"]))
        self.assertTrue(os.path.exists(dst))
        self.assertIn("stopped after 4 passes", self.daemon.log_tail(200))
        self.fetch(OBJECTS[3], "HIT")

    def test_no_state_change_by_get_from_elsewhere_or_without_the_token(self):
        self.start({"admin_listen": "auto-any", "admin_token": TOKEN})
        self.fill()
        self.complete_inventory()
        target = "/api/purge?" + q(service="steam", prefix="/depot/100/")
        files = sorted(H.chunk_files(self.cache_dir))
        self.assertStatus(self.req(target), 405)
        self.assertStatus(self.req(target, method="HEAD"), 405)
        self.assertStatus(self.req(target, method="POST", auth=False), 401)
        self.assertStatus(self.req(target, method="POST", auth=False,
                                   headers=[("Authorization", "Bearer " + TOKEN + "x")]), 401)
        own = "http://127.0.0.1:%d" % self.daemon.admin_port
        for hdrs in ([("Origin", "http://attacker.example")], [("Origin", "null")],
                     [("Sec-Fetch-Site", "cross-site")], [("Origin", own + "0")]):
            self.assertStatus(self.req(target, method="POST", headers=hdrs), 403)
        # The views need the token too (off loopback).
        self.assertStatus(self.req("/api/inventory", auth=False), 401)
        self.assertStatus(self.req("/api/objects?" + q(service="steam", prefix="/depot/100/"),
                                   auth=False), 401)
        self.assertEqual(sorted(H.chunk_files(self.cache_dir)), files)
        self.assertEqual(self.groups(self.inventory()), self.on_disk())
        # From the page itself, with the token: done.
        r = self.req(target, method="POST",
                     headers=[("Origin", own), ("Sec-Fetch-Site", "same-origin")])
        self.assertStatus(r, 202)
        H.wait_until(lambda: ("steam", "/depot/100/") not in self.groups(self.inventory()),
                     30 * H.SLOW, 0.05, "depot 100 gone")
        H.wait_until(lambda: self.inventory()["purges"] == 0, 30 * H.SLOW, 0.05,
                     "the depot's purge over")

    def test_bad_queries(self):
        self.start()
        for target in ("/api/purge", "/api/purge?prefix=/depot/1/",
                       "/api/purge?service=steam&prefix=/a/&path=/a/b",
                       "/api/purge?service=%zz", "/api/purge?service=a%00b"):
            self.assertStatus(self.req(target, method="POST"), 400)
        self.assertStatus(self.req("/api/inventory?service=%"), 400)
        self.assertTrue(self.daemon.running())


if __name__ == "__main__":
    H.main()
