# SPDX-License-Identifier: BSD-2-Clause
"""r19 (review of issue 19's admin access): repros.

- "A PURGE without ?identifier= is the exception: its Host names the object, and a rebound name
  can name only its own objects" (docs/interfaces.md). With [domains] steam_user_agent = any the
  identifier comes from the User-Agent, whatever the Host: a page on a rebound name purges Steam's
  objects on loopback (same-origin for the browser: no preflight, Origin = http://Host).
"""

import harness as H

STEAM_UA = "Valve/Steam HTTP Client 1.0"


class ReviewAdmin(H.CPTestCase):
    def test_a_rebound_name_cannot_purge_steam_objects(self):
        self.setup_proxy({"server": {"admin_listen": "auto"},
                          "domains": {"steam_user_agent": "any"}})
        path = "/r19/depot/1/chunk/abc/size/2000"
        ua = [("User-Agent", STEAM_UA)]
        self.assertBody(self.get(path, headers=ua), path)
        self.daemon.settle_disk()
        self.assertEqual(self.get(path, headers=ua).header("X-Upstream-Cache-Status"), "HIT")
        port = self.daemon.admin_port
        evil = "attacker.example:%d" % port
        c = H.Client(port)
        self._clients.append(c)
        # What a script on http://attacker.example:PORT/ (rebound to 127.0.0.1) sends.
        c.request(path, method="PURGE", host=evil,
                  headers=ua + [("Origin", "http://" + evil), ("Sec-Fetch-Site", "same-origin")])
        r = c.read_response()
        c.close()
        n0 = self.origin.request_count()
        st = self.get(path, headers=ua).header("X-Upstream-Cache-Status")
        self.assertEqual((r.status, st, self.origin.request_count() - n0), (r.status, "HIT", 0),
                         "a rebound name purged steam's object: %d %r" % (r.status,
                                                                         bytes(r.body)))


if __name__ == "__main__":
    H.main()
