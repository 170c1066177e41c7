# SPDX-License-Identifier: BSD-2-Clause
"""b14: cache-domains identifiers (docs/interfaces.md, "Cache identifier and key"): listed hosts are proxied under their service's
name, look-alike and unlisted hosts get 403 without allow_unlisted (the origin sees nothing), the
Steam User-Agent rule applies only under steamcontent.com; `-t` counts the lists and `dns` prints
the LAN overrides."""

import os
import re
import subprocess

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
STEAM_UA = "Valve/Steam HTTP Client 1.0 (816)"
LINE_RE = re.compile(r'^\[(\S+)\] (\S+) / - - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" '
                     r'"([^"]*)" "(HIT|MISS|-)" "([^"]*)" "([^"]*)"$')


class Domains(H.CPTestCase):
    def start(self, allow_unlisted="no", steam_ua="yes"):
        return self.setup_proxy({"domains": {"cache_domains": LISTS,
                                             "allow_unlisted": allow_unlisted,
                                             "steam_user_agent": steam_ua}})

    def idents(self, n):
        lines = H.wait_until(lambda: len(self.daemon.access_lines()) >= n and
                             self.daemon.access_lines(), 10 * H.SLOW, 0.05, "access lines")
        return [LINE_RE.match(x).group(1) for x in lines]

    def test_listed_hosts_get_their_service(self):
        self.start()
        for i, host in enumerate(("lancache.steamcontent.com", "cache7-fra1.steamcontent.com",
                                  "level3.blizzard.com")):
            p = "/b14/a%d/size/100" % i
            self.assertBody(self.get(p, host=host), p)
        self.assertEqual(self.idents(3), ["steam", "steam", "blizzard"])
        self.assertEqual(self.origin.request_count(), 3)
        # one identifier, one cache key: the same path from another steam host is a hit
        r = self.get("/b14/a0/size/100", host="cache7-fra1.steamcontent.com")
        self.assertBody(r, "/b14/a0/size/100")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), 3)

    def test_lookalikes_and_unlisted_refused(self):
        self.start()
        for host in ("evilsteamcontent.com", "steamcontent.com.evil.net", "xsteamcontent.com",
                     "example.org", "blizzard.com"):
            self.assertStatus(self.get("/b14/x/size/10", host=host), 403)
        self.assertEqual(self.origin.request_count(), 0)

    def test_unlisted_allowed_uses_authority(self):
        self.start(allow_unlisted="yes")
        self.assertBody(self.get("/b14/u/size/10", host="Other.Example:8080"), "/b14/u/size/10")
        self.assertEqual(self.idents(1), ["other.example:8080"])

    def test_unlisted_host_named_like_a_service_keeps_its_own_keys(self):
        # an unlisted LAN host called "Blizzard" must never serve from (or fill) the blizzard
        # service's cache: it gets the identifier "blizzard."
        self.start(allow_unlisted="yes")
        p = "/b14/svc/size/100"
        self.assertBody(self.get(p, host="level3.blizzard.com"), p)
        r = self.get(p, host="Blizzard")
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(self.origin.request_count(), 2)
        self.assertEqual(self.origin.last().header("Host"), "blizzard")
        self.assertEqual(self.idents(2), ["blizzard", "blizzard."])
        # and a PURGE for that host removes its object, not the service's
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        c.request(p, method="PURGE", host="Blizzard")
        self.assertStatus(c.read_response(), 200)
        r = self.get(p, host="level3.blizzard.com")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        r = self.get(p, host="Blizzard")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")

    def test_steam_user_agent_rule(self):
        self.start()
        # not in the sample lists, but under steamcontent.com with Valve's UA: steam
        self.assertBody(self.get("/b14/s/size/10", host="a.b.steamcontent.com",
                                 headers=[("User-Agent", STEAM_UA)]), "/b14/s/size/10")
        # Valve's UA elsewhere admits nothing
        self.assertStatus(self.get("/b14/s/size/10", host="intranet.example",
                                   headers=[("User-Agent", STEAM_UA)]), 403)
        self.assertEqual(self.origin.request_count(), 1)

    def test_steam_agent_on_steams_other_cdn_hosts(self):
        """Steam's LANCache mode sends its CDN host names to the cache (issue 17): with the Steam
        agent, the built-in Steam content hosts that are not in the lists are `steam`, and the
        same path on two of them is one stored copy. Another customer's name under the same
        shared CDN domain, and an unrelated host, are not `steam` (403 with allow_unlisted =
        no)."""
        self.start()
        ua = [("User-Agent", STEAM_UA)]
        p = "/depot/17/chunk/b14aa/size/1000"
        for host in ("f3b7q2p3.ssl.hwcdn.net", "steam.cdn.on.net", "steampipe-kr.akamaized.net"):
            self.assertBody(self.get(p, host=host, headers=ua), p)
        self.assertEqual(self.origin.request_count(), 1)
        self.assertEqual(self.idents(3), ["steam"] * 3)
        for host in ("other.ssl.hwcdn.net", "evil.akamaized.net", "www.example.org"):
            self.assertStatus(self.get(p, host=host, headers=ua), 403)
        # without the agent, a built-in Steam host is an unlisted host like any other
        self.assertStatus(self.get(p, host="steam.cdn.on.net"), 403)
        self.assertEqual(self.origin.request_count(), 1)

    def test_steam_hosts_extend_and_any_mode(self):
        d = self.setup_proxy({"domains": {"cache_domains": LISTS, "allow_unlisted": "no",
                                          "steam_user_agent": "yes",
                                          "steam_hosts": "steam.mirror.example *.st.example.net"}})
        ua = [("User-Agent", STEAM_UA)]
        p = "/depot/18/chunk/b14bb/size/1000"
        self.assertBody(self.get(p, host="steam.mirror.example", headers=ua), p)
        self.assertBody(self.get(p, host="a.st.example.net", headers=ua), p)
        self.assertStatus(self.get(p, host="st.example.net", headers=ua), 403)
        self.assertEqual(self.origin.request_count(), 1)
        d.stop()
        # any: lancache's rule, the agent decides whatever the host (even a listed one)
        self.setup_proxy({"domains": {"cache_domains": LISTS, "allow_unlisted": "no",
                                      "steam_user_agent": "any"}})
        n = self.origin.request_count()
        q = "/depot/19/chunk/b14cc/size/1000"
        for host in ("www.example.org", "level3.blizzard.com", "other.ssl.hwcdn.net"):
            self.assertBody(self.get(q, host=host, headers=ua), q)
        self.assertEqual(self.origin.request_count(), n + 1)
        self.assertEqual(self.idents(3), ["steam"] * 3)
        self.assertStatus(self.get(q, host="www.example.org"), 403)

    def test_cli_counts_and_dns_export(self):
        d = self.start()
        out = subprocess.run([H.binary_path(), "-t", "-c", d.ini], capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"cache-domains: 5 services, \d+ names")
        out = subprocess.run([H.binary_path(), "-c", d.ini, "dns", "--ip", "192.168.1.10"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("address=/level3.blizzard.com/192.168.1.10", out.stdout)
        # *.steamcontent.com: the names below only (tests/it/b20 loads it into dnsmasq)
        self.assertIn("address=/*.steamcontent.com/192.168.1.10", out.stdout)
        # the AAAA of a redirected name is answered locally (no data), never forwarded
        self.assertIn("local=/*.steamcontent.com/", out.stdout)
        # several --ip, both families (as lancache-dns's LANCACHE_IP); none replaces another
        out = subprocess.run([H.binary_path(), "-c", d.ini, "dns", "--ip", "192.168.1.10",
                              "--ip", "192.168.1.11", "--ip", "fd00::10"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        for ip in ("192.168.1.10", "192.168.1.11", "fd00::10"):
            self.assertIn("address=/level3.blizzard.com/%s\n" % ip, out.stdout)
        out = subprocess.run([H.binary_path(), "-c", d.ini, "dns", "--ip", "not-an-ip"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1)

    def test_malformed_list_line_is_skipped_not_fatal(self):
        """One bad line in a community list must not stop the cache (issue 17): start, -t and
        dns skip it with a FILE:LINE warning, count it in /metrics, and keep the other names. A
        list that cannot be read still stops start."""
        bad = os.path.join(self._tmp, "bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "cache_domains.json"), "w") as f:
            f.write('{"cache_domains":[{"name":"x","domain_files":["x.txt"]}]}')
        with open(os.path.join(bad, "x.txt"), "w") as f:
            f.write("good.example\nbad*name.example\n*.also.example\n")
        d = self.setup_proxy({"server": {"admin_listen": "auto"},
                              "domains": {"cache_domains": bad, "allow_unlisted": "no"}})
        self.assertIn("x.txt:2: invalid name", d.log())
        self.assertEqual(d.metrics().get("cacheparty_domains_lines_skipped"), 1)
        self.assertBody(self.get("/b14/skip/size/10", host="good.example"), "/b14/skip/size/10")
        self.assertBody(self.get("/b14/skip2/size/10", host="a.also.example"),
                        "/b14/skip2/size/10")
        self.assertStatus(self.get("/b14/skip/size/10", host="bad-name.example"), 403)
        rc, out, err = H.run_binary(["-c", d.ini, "-t"])
        self.assertEqual(rc, 0, err)
        self.assertIn("x.txt:2:", err)
        self.assertIn("1 malformed lines skipped", out)
        rc, out, err = H.run_binary(["-c", d.ini, "dns", "--ip", "10.0.0.1"])
        self.assertEqual(rc, 0, err)
        self.assertIn("good.example", out)
        self.assertIn("x.txt:2:", err)
        # unreadable: still refused
        os.remove(os.path.join(bad, "x.txt"))
        rc, out, err = H.run_binary(["-c", d.ini], timeout=30)
        self.assertEqual(rc, 1)
        self.assertIn("x.txt:0:", err)

if __name__ == "__main__":
    raise SystemExit(H.main())
