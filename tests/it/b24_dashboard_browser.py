# SPDX-License-Identifier: BSD-2-Clause
"""b24: the dashboard in a real browser (Debian's chromium, headless, through chromedriver; see
browser.py): against a daemon with traffic going through it, the page's live values equal
/api/live and /status, an in-flight fetch appears with its readers and goes when done, a purge
from the page removes the object (with the token off loopback, refused without), the page
without the chart library still renders its tables. Screenshots under build/dashboard-*.png for
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


@unittest.skipUnless(B.available(), "chromium and chromedriver are not installed (make deps)")
class DashboardBrowser(H.CPTestCase):
    def start(self, server=None):
        o = {"server": {"admin_listen": "auto"}}
        o["server"].update(server or {})
        d = self.setup_proxy(o)
        self.b = B.Browser(self._tmp, timeout=60 * H.SLOW)
        self.addCleanup(self.b.close)
        return d

    def page_url(self):
        return "http://127.0.0.1:%d/" % self.daemon.admin_port

    def shot(self, name):
        path = os.path.join(SHOTS, "dashboard-%s.png" % name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.b.screenshot(path)

    def updated_after(self, t_ms):
        """Waits for a render of /api/live taken after <t_ms> (the page's own clock stamp)."""
        return self.b.wait_js("return Number(document.body.dataset.updated || 0) > %d" % t_ms,
                              20 * H.SLOW, "a render after %d" % t_ms)

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
        self.shot("in-flight")
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
        self.assertTrue(self.b.js("return typeof window.Chart === 'function' && "
                                  "document.getElementById('nochart').hidden"))
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


if __name__ == "__main__":
    H.main()
