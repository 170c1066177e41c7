# SPDX-License-Identifier: BSD-2-Clause
"""b24: the dashboard in a real browser (Debian's chromium, headless, through chromedriver; see
browser.py): against a daemon with traffic going through it, the page's live values equal
/api/live and /status (disks and memory too), an in-flight fetch appears with its readers and goes
when done, a purge from the page removes the object (with the token off loopback, refused
without), the inventory lists a stored Steam depot with its size on disk and its objects on a
click, a removal of the depot from the page takes its files (with the token off loopback,
refused without), the page without the chart library still renders its tables. Screenshots under build/dashboard-*.png for
a person to look at."""

import json
import os
import time
import unittest

import browser as B
import harness as H

SIZE = 300000
TOKEN = "b24-token-0123456789abcdef"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOTS = os.path.join(ROOT, os.environ.get("BUILD", "build"))
STEAM_UA = "Valve/Steam HTTP Client 1.0"
STEAM_HOST = "cache1-ams1.steamcontent.com"
DEPOT = "/depot/7000/"
DEPOT_PATHS = [DEPOT + "chunk/%040x/size/%d" % (0xb24000 + i, n)
               for i, n in enumerate((150000, 2 * H.MIB + 10))]
GROUP_ROW = '#inv_groups tr[data-service="steam"][data-prefix="%s"]' % DEPOT


@unittest.skipUnless(B.available(), "chromium and chromedriver are not installed (make deps)")
class DashboardBrowser(H.CPTestCase):
    def start(self, server=None):
        self.cache_dir = os.path.join(self._tmp, "cache")
        o = {"server": {"admin_listen": "auto"}, "cache": {"dir": self.cache_dir}}
        o["server"].update(server or {})
        d = self.setup_proxy(o)
        self.b = B.Browser(self._tmp, timeout=60 * H.SLOW)
        self.addCleanup(self.b.close)
        return d

    def page_url(self):
        return "http://127.0.0.1:%d/" % self.daemon.admin_port

    def shot(self, name, full=False):
        path = os.path.join(SHOTS, "dashboard-%s.png" % name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.b.screenshot(path, full)

    def updated_after(self, t_ms):
        """Waits for a render of /api/live taken after <t_ms> (the page's own clock stamp)."""
        return self.b.wait_js("return Number(document.body.dataset.updated || 0) > %d" % t_ms,
                              20 * H.SLOW, "a render after %d" % t_ms)

    def steam_get(self, path):
        return self.get(path, host=STEAM_HOST, headers=[("User-Agent", STEAM_UA)])

    def depot_on_disk(self):
        """[bytes, chunk files] of DEPOT, from the chunk files themselves (allocated units)."""
        b = n = 0
        for f in H.chunk_files(self.cache_dir):
            if H.chunk_file_info(f)["key"].startswith("steam\n" + DEPOT):
                st = os.stat(f)
                b += -(-max(st.st_size, st.st_blocks * 512) // 512) * 512
                n += 1
        return [b, n]

    def fill_depot(self):
        for p in DEPOT_PATHS:
            r = self.steam_get(p)
            self.assertStatus(r, 200)
            self.assertBody(r, p)
        self.daemon.settle_disk()
        want = self.depot_on_disk()
        self.assertEqual(want[1], 1 + 3)  # 150000 B, then 2 MiB + 10 B in 1 MiB chunks
        return want

    def page_depot(self):
        """The depot's row once the page shows it: [bytes, chunk files]."""
        return self.b.wait_js(
            "const r = document.querySelector('%s');"
            "return r ? [Number(r.dataset.bytes), Number(r.dataset.chunks)] : null;" % GROUP_ROW,
            20 * H.SLOW, "the depot on the page")

    def remove_depot_from_page(self):
        """Clicks the depot's Remove, accepts the confirmation, waits for the answer."""
        self.b.click(GROUP_ROW + " td.act button")
        self.assertIn(DEPOT, self.b.alert_text())
        self.b.accept_alert()
        return self.b.wait_js("const e = document.getElementById('inv_result');"
                              "return e.dataset.status ? [Number(e.dataset.status),"
                              " e.textContent] : null;", 20 * H.SLOW, "the removal's answer")

    def assert_depot_gone(self):
        self.b.wait_js("return document.querySelector('%s') === null" % GROUP_ROW,
                       30 * H.SLOW, "the depot gone from the page")
        H.wait_until(lambda: self.depot_on_disk() == [0, 0], 30 * H.SLOW, 0.05,
                     "the depot's files gone")
        n0 = self.origin.request_count()
        for p in DEPOT_PATHS:
            r = self.steam_get(p)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS", p)
        self.assertGreater(self.origin.request_count(), n0)

    def test_live_values_fetches_and_purge(self):
        self.start()
        p1 = "/b24/a/size/%d" % SIZE
        self.assertBody(self.get(p1), p1)
        self.assertBody(self.get(p1), p1)
        self.daemon.settle_fetches()
        gate, body = H.gated_route(self.origin, "/b24/gated", SIZE)
        self.addCleanup(gate.set)
        gp = "/b24/gated/size/%d" % SIZE
        a, b = self.client(), self.client()
        a.request(gp)
        H.wait_until(lambda: any(f["done"] >= SIZE // 2 for f in
                                 json.loads(bytes(self.daemon.admin_get("/api/live").body))
                                 ["fetches"]), 10 * H.SLOW, 0.05, "the fetch half done")
        b.request(gp)
        self.b.go(self.page_url())
        # The fetch in flight, with both clients.
        rows = self.b.wait_js(
            "const r = [...document.querySelectorAll('#fetches tbody tr[data-id]')];"
            "return r.length === 1 && r[0].dataset.readers === '2' ? "
            "r.map(x => [x.dataset.path, Number(x.dataset.done)]) : null;",
            20 * H.SLOW, "the fetch with its two readers")
        self.assertEqual(rows[0][0], gp)
        self.assertGreaterEqual(rows[0][1], SIZE // 2)
        self.shot("in-flight", full=True)  # docs/dashboard.png is one of these
        gate.set()
        for c in (a, b):
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertEqual(bytes(r.body), body)
        self.b.wait_js("return document.querySelectorAll('#fetches tbody tr[data-id]').length"
                       " === 0 && document.querySelector('#fetches tbody td.empty') !== null",
                       20 * H.SLOW, "no fetch left on the page")
        # With no traffic, the page's numbers are /status's.
        self.daemon.settle_fetches()
        self.daemon.settle_disk()
        st = self.daemon.status()
        t0 = int(time.time() * 1000)
        self.updated_after(t0)
        got = self.b.js("const r = document.querySelector('#services tbody tr[data-name]');"
                        "return {hit: Number(document.getElementById('saved').dataset.value),"
                        " served: Number(document.getElementById('c_ratio').dataset.served),"
                        " name: r.dataset.name, bytes: Number(r.dataset.bytes),"
                        " shit: Number(r.dataset.hit)};")
        hit, miss = st["response_bytes_total"]["hit"], st["response_bytes_total"]["miss"]
        self.assertEqual(got["hit"], hit)
        self.assertEqual(got["served"], hit + miss + st["response_bytes_total"]["bypass"])
        self.assertEqual(got["name"], H.DEFAULT_HOST)
        self.assertEqual((got["bytes"], got["shit"]), (4 * SIZE, 2 * SIZE))
        # (the chart library is a script of its own: loaded once the page is, maybe later)
        self.b.wait_js("return typeof window.Chart === 'function' && "
                       "document.getElementById('nochart').hidden", 20 * H.SLOW,
                       "the chart library")
        # A history that arrives before the chart library has run (its script comes after the
        # page's) waits for it: the library's onload draws it; the charts are not given up.
        self.b.js("window.__C = window.Chart; window.Chart = undefined; window.__done = false;"
                  "loadHistory().then(() => { window.__done = true; }); return true;")
        self.b.wait_js("return window.__done === true", 20 * H.SLOW, "a history without Chart")
        self.b.js("window.Chart = window.__C; chartLoaded(); return true;")
        self.b.wait_js("return !document.getElementById('chartbox').hidden && "
                       "document.getElementById('nochart').hidden && "
                       "document.querySelector('#chart') !== null", 20 * H.SLOW,
                       "the chart after a late library")
        self.b.wait_js("return document.getElementById('d_disk').dataset.value === '%d'"
                       % st["cache_bytes"]["disk"], 20 * H.SLOW, "the disk bytes of /status")
        self.shot("live")
        # Purge p1 from the page: confirm, then the answer on the page, then a MISS.
        self.b.type("#p_service", H.DEFAULT_HOST)
        self.b.type("#p_path", p1)
        self.b.click("#purgeform button")
        self.assertIn(p1, self.b.alert_text())
        self.b.accept_alert()
        res = self.b.wait_js("const t = document.getElementById('p_result').textContent;"
                             "return t.startsWith('purged') ? t : null;", 20 * H.SLOW,
                             "the purge's answer")
        self.assertRegex(res, r"^purged [1-9]\d*$")
        n0 = self.origin.request_count()
        self.assertEqual(self.get(p1).header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(self.origin.request_count(), n0 + 1)
        # The inventory: the stored depot with its size on disk, its objects on a click, then
        # removed from the page.
        want = self.fill_depot()
        self.b.go(self.page_url())
        self.assertEqual(self.page_depot(), want)
        self.b.click(GROUP_ROW + " td.pfx a")
        listed = self.b.wait_js(
            "const r = [...document.querySelectorAll('#objects tbody tr[data-path]')];"
            "return r.length ? r.map(x => [x.dataset.path, Number(x.dataset.bytes)]) : null;",
            20 * H.SLOW, "the depot's objects")
        self.assertEqual(sorted(p for p, _ in listed), sorted(DEPOT_PATHS))
        self.assertEqual(sum(n for _, n in listed), want[0])
        self.b.js("document.getElementById('stored').scrollIntoView()")
        self.shot("inventory")
        status, text = self.remove_depot_from_page()
        self.assertEqual(status, 202, text)
        self.assertIn("%d chunk files" % want[1], text)
        self.assert_depot_gone()

    def test_cluster_section(self):
        # A node of a cluster of two whose peer is up, beside a third listed but absent: the
        # page shows each with its state and what was asked of it.
        port = H.free_port()
        nodes = "127.0.3.1:%d, 127.0.3.2:%d, 127.0.3.3:%d" % (port, port, port)
        cl = {"nodes": nodes, "secret": "b24-cluster-secret-0123"}
        self.start({"listen": "127.0.0.1:%d, 127.0.3.1:%d" % (H.free_port(), port)})
        self.daemon.stop()
        peer = H.Daemon(os.path.join(self._tmp, "peer"), {
            "server": {"listen": "127.0.0.1:%d, 127.0.3.2:%d" % (H.free_port(), port),
                       "hostname": "b24peer"},
            "cluster": dict(cl, self="127.0.3.2:%d" % port)}, origin=self.origin)
        self._daemons.append(peer)
        self.daemon = self.start_daemon({
            "server": {"admin_listen": "auto",
                       "listen": "127.0.0.1:%d, 127.0.3.1:%d" % (H.free_port(), port)},
            "cache": {"dir": self.cache_dir},
            "cluster": dict(cl, self="127.0.3.1:%d" % port)}, origin=self.origin)
        p = "/b24/cl/size/%d" % (3 * H.MIB)
        H.wait_until(lambda: self.daemon.metrics().get(
            'cacheparty_cluster_peer_up{peer="127.0.3.2:%d"}' % port) == 1, 20 * H.SLOW,
            what="the peer up")
        self.assertBody(self.get(p), p)
        self.daemon.settle_fetches()
        asked = self.daemon.metrics()[
            'cacheparty_cluster_peer_bytes_asked_total{peer="127.0.3.2:%d"}' % port]
        self.b.go(self.page_url())
        rows = self.b.wait_js(
            "const r = [...document.querySelectorAll('#peers tbody tr[data-peer]')];"
            "return !document.getElementById('cluster').hidden && r.length === 2 ? "
            "r.map(x => [x.dataset.peer, x.dataset.state, Number(x.dataset.asked)]) : null;",
            20 * H.SLOW, "the cluster's nodes")
        self.assertEqual(rows, [["127.0.3.2:%d" % port, "up", asked],
                                ["127.0.3.3:%d" % port, "down", 0]])
        self.shot("cluster")

    def test_token_off_loopback_and_no_chart_library(self):
        self.start({"admin_listen": "auto-any", "admin_token": TOKEN,
                    "dashboard_chart_js": os.path.join(self._tmp, "no-such-chart.js")})
        p = "/b24/tok/size/%d" % SIZE
        self.assertBody(self.get(p), p)
        self.daemon.settle_disk()
        self.b.go(self.page_url())
        self.b.wait_js("return !document.getElementById('login').hidden", 20 * H.SLOW,
                       "the token form")
        # Without the token a purge is refused, whatever the page does.
        status = self.b.cmd("POST", "/execute/async", {
            "script": "const cb = arguments[arguments.length - 1];"
                      "fetch(arguments[0], {method: 'PURGE'}).then(r => cb(r.status));",
            "args": ["%s?identifier=%s" % (p, H.DEFAULT_HOST)]})
        self.assertEqual(status, 401)
        self.assertEqual(self.get(p).header("X-Upstream-Cache-Status"), "HIT")
        want = self.fill_depot()
        status = self.b.cmd("POST", "/execute/async", {
            "script": "const cb = arguments[arguments.length - 1];"
                      "fetch(arguments[0], {method: 'POST'}).then(r => cb(r.status));",
            "args": ["/api/purge?service=steam&prefix=" + DEPOT]})
        self.assertEqual(status, 401)
        self.assertEqual(self.depot_on_disk(), want)
        self.shot("login")
        self.b.type("#token", TOKEN)
        self.b.click("#loginform button")
        self.b.wait_js("return document.getElementById('login').hidden && "
                       "document.querySelector('#services tbody tr[data-name]') !== null",
                       20 * H.SLOW, "the dashboard after the login")
        # No chart library: the tables are there, the chart says why it is not.
        self.assertTrue(self.b.js("return typeof window.Chart === 'undefined' && "
                                  "!document.getElementById('nochart').hidden"))
        self.shot("no-chart")
        self.b.type("#p_service", H.DEFAULT_HOST)
        self.b.type("#p_path", p)
        self.b.click("#purgeform button")
        self.b.accept_alert()
        res = self.b.wait_js("const t = document.getElementById('p_result').textContent;"
                             "return t.startsWith('purged') ? t : null;", 20 * H.SLOW,
                             "the purge's answer")
        self.assertRegex(res, r"^purged [1-9]\d*$")
        self.assertEqual(self.get(p).header("X-Upstream-Cache-Status"), "MISS")
        # The depot, from the page, with the token it keeps as a cookie.
        self.assertEqual(self.page_depot(), want)
        status, text = self.remove_depot_from_page()
        self.assertEqual(status, 202, text)
        self.assert_depot_gone()


if __name__ == "__main__":
    H.main()
