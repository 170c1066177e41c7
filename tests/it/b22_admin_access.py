# SPDX-License-Identifier: BSD-2-Clause
"""b22: who may use the admin listener (docs/interfaces.md "Admin access"): off loopback (the
daemon listens on 0.0.0.0; the tests still connect to 127.0.0.1 only) every request needs
admin_token as Bearer or cookie, views too unless admin_public; without a token such a listener
is refused at start; a Host that is a foreign name is refused on loopback too (DNS rebinding);
a state change from another origin is refused; nothing refused is purged."""

import os
import signal
import subprocess

import harness as H

TOKEN = "b22-token-0123456789abcdef"


class AdminAccess(H.CPTestCase):
    def start(self, server=None):
        o = {"server": {"admin_listen": "auto"}}
        o["server"].update(server or {})
        return self.setup_proxy(o)

    def req(self, target, method="GET", host=None, headers=()):
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        c.request(target, method=method,
                  host=host if host is not None else "127.0.0.1:%d" % self.daemon.admin_port,
                  headers=headers)
        r = c.read_response()
        c.close()
        return r

    def stored(self, path):
        """Fills <path> and waits for its chunk file: what a purge would remove."""
        self.assertBody(self.get(path), path)
        self.daemon.settle_disk()
        self.assertEqual(self.get(path).header("X-Upstream-Cache-Status"), "HIT")

    def still_cached(self, path):
        n0 = self.origin.request_count()
        self.assertEqual(self.get(path).header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), n0)

    def test_off_loopback_without_a_token_is_refused_at_start(self):
        self.start()  # a daemon to take its configuration from
        ini = self.daemon.ini
        with open(ini) as f:
            text = f.read()
        text = text.replace("admin_listen = 127.0.0.1:", "admin_listen = 0.0.0.0:")
        bad = os.path.join(self._tmp, "off-loopback.ini")
        with open(bad, "w") as f:
            f.write(text)
        p = subprocess.run([H.binary_path(), "-t", "-c", bad], capture_output=True, text=True,
                           timeout=30 * H.SLOW)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        out = p.stdout + p.stderr
        self.assertIn("not a loopback address", out)
        self.assertIn("admin_token", out)
        # A token too short, or with a character that cannot travel in a header, is refused too.
        for tok in ("short", "has space in it 0123456789", 'quote"0123456789abcdef'):
            with open(bad, "w") as f:
                f.write(text.replace("[server]\n", "[server]\nadmin_token = %s\n" % tok, 1))
            p = subprocess.run([H.binary_path(), "-t", "-c", bad], capture_output=True,
                               text=True, timeout=30 * H.SLOW)
            self.assertEqual(p.returncode, 1, tok + ": " + p.stdout + p.stderr)
            self.assertIn("admin_token", p.stdout + p.stderr)

    def test_off_loopback_every_request_needs_the_token(self):
        self.start({"admin_listen": "auto-any", "admin_token": TOKEN})
        path = "/b22/tok/size/2000"
        self.stored(path)
        bearer = [("Authorization", "Bearer " + TOKEN)]
        for target in ("/status", "/metrics", "/", "/nope"):
            r = self.req(target)
            self.assertStatus(r, 401)
            self.assertEqual(r.header("WWW-Authenticate"), 'Bearer realm="cacheparty admin"')
            self.assertNotIn(b"requests_total", bytes(r.body))
        for wrong in ("Bearer " + TOKEN + "x", "Bearer " + TOKEN[:-1], "Basic " + TOKEN):
            self.assertStatus(self.req("/status", headers=[("Authorization", wrong)]), 401)
        self.assertStatus(self.req("/status", headers=bearer), 200)
        self.assertStatus(self.req("/status", headers=[("Cookie", "cacheparty_admin=" + TOKEN)]),
                          200)
        # PURGE without it, or with a wrong one: refused, nothing removed.
        self.assertStatus(self.req(path, method="PURGE", host=H.DEFAULT_HOST), 401)
        self.assertStatus(self.req(path, method="PURGE", host=H.DEFAULT_HOST,
                                   headers=[("Authorization", "Bearer nope-nope-nope-nope")]),
                          401)
        self.still_cached(path)
        r = self.req(path, method="PURGE", host=H.DEFAULT_HOST, headers=bearer)
        self.assertStatus(r, 200)
        self.assertRegex(bytes(r.body).decode(), r"^purged [1-9]\d*\n$")
        self.assertEqual(self.get(path).header("X-Upstream-Cache-Status"), "MISS")
        # Every refusal was one log line.
        log = open(self.daemon.log_path, encoding="utf-8", errors="replace").read()
        self.assertGreaterEqual(log.count("refused (401)"), 9)

    def test_admin_public_opens_the_views_not_the_purge(self):
        self.start({"admin_listen": "auto-any", "admin_token": TOKEN, "admin_public": "yes"})
        path = "/b22/pub/size/1500"
        self.stored(path)
        self.assertStatus(self.req("/status"), 200)
        self.assertStatus(self.req("/metrics", method="HEAD"), 200)
        self.assertStatus(self.req(path, method="PURGE", host=H.DEFAULT_HOST), 401)
        self.assertStatus(self.req("/x?identifier=" + H.DEFAULT_HOST, method="PURGE"), 401)
        self.still_cached(path)

    def test_foreign_host_names_are_refused_on_loopback_too(self):
        self.start({"admin_names": "pi.lan, Cache.Example"})
        path = "/b22/host/size/1200"
        self.stored(path)
        port = self.daemon.admin_port
        for host in ("attacker.example:%d" % port, "attacker.example", "pi.lan.attacker.example"):
            r = self.req("/status", host=host)
            self.assertStatus(r, 403)
            self.assertNotIn(b"requests_total", bytes(r.body))
        for host in ("127.0.0.1:%d" % port, "localhost:%d" % port, "pi.lan:%d" % port,
                     "cache.example", "[::1]:%d" % port):
            self.assertStatus(self.req("/status", host=host), 200)
        # A purge by ?identifier= from a rebound name: refused, the object stays.
        ident = "?identifier=" + H.DEFAULT_HOST
        self.assertStatus(self.req(path + ident, method="PURGE", host="attacker.example"), 403)
        self.still_cached(path)

    def test_state_changes_from_another_origin_are_refused(self):
        self.start()
        path = "/b22/csrf/size/1300"
        self.stored(path)
        own = "http://127.0.0.1:%d" % self.daemon.admin_port
        for hdrs in ([("Origin", "http://attacker.example")], [("Origin", "null")],
                     [("Sec-Fetch-Site", "cross-site")], [("Sec-Fetch-Site", "same-site")],
                     [("Origin", own + "0")]):
            self.assertStatus(self.req(path, method="PURGE", host=H.DEFAULT_HOST, headers=hdrs),
                              403)
        self.still_cached(path)
        # The same from the page itself (its Origin is its own scheme, host and port).
        r = self.req(path + "?identifier=" + H.DEFAULT_HOST, method="PURGE",
                     headers=[("Origin", own), ("Sec-Fetch-Site", "same-origin")])
        self.assertStatus(r, 200)
        self.assertEqual(self.get(path).header("X-Upstream-Cache-Status"), "MISS")
        # A GET from anywhere changes nothing: it is read-only, whatever it names.
        self.stored(path)
        self.assertStatus(self.req(path, headers=[("Origin", "http://attacker.example")]), 404)
        self.still_cached(path)

    def test_token_changes_on_reload(self):
        self.start({"admin_listen": "auto-any", "admin_token": TOKEN})
        new = "b22-new-token-9876543210"
        with open(self.daemon.ini) as f:
            text = f.read()
        with open(self.daemon.ini, "w") as f:
            f.write(text.replace(TOKEN, new))
        self.daemon.admin_token = new
        self.daemon.signal(signal.SIGHUP)
        H.wait_until(lambda: "configuration reloaded" in self.daemon.log(), 10 * H.SLOW, 0.05,
                     "reload")
        self.assertStatus(self.req("/status", headers=[("Authorization", "Bearer " + new)]), 200)
        self.assertStatus(self.req("/status", headers=[("Authorization", "Bearer " + TOKEN)]),
                          401)


if __name__ == "__main__":
    H.main()
