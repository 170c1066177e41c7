# SPDX-License-Identifier: BSD-2-Clause
"""b17: SIGHUP reloads the configuration: what can change live takes effect (here allow_unlisted,
the cache-domains lists and the log level), what cannot (listen) is logged and kept, and the
daemon keeps serving throughout."""

import os
import re
import signal

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")


class Reload(H.CPTestCase):
    def rewrite(self, d, **changes):
        with open(d.ini) as f:
            text = f.read()
        for key, value in changes.items():
            text, n = re.subn(r"(?m)^%s[ \t]*=.*$" % key, "%s = %s" % (key, value), text)
            self.assertEqual(n, 1, key)
        with open(d.ini, "w") as f:
            f.write(text)

    def test_good_reload_applies_live_settings_and_keeps_listen(self):
        d = self.setup_proxy({"domains": {"allow_unlisted": "yes", "cache_domains": ""}})
        self.assertBody(self.get("/b17/a/size/10", host="unlisted.example"), "/b17/a/size/10")
        self.rewrite(d, allow_unlisted="no", cache_domains=LISTS,
                     listen="127.0.0.1:%d" % H.free_port())
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "configuration reloaded" in d.log(), 10 * H.SLOW, 0.05, "reload")
        self.assertStatus(self.get("/b17/b/size/10", host="unlisted.example"), 403)
        # the lists now admit their names, on the listen address the daemon kept
        self.assertBody(self.get("/b17/c/size/10", host="level3.blizzard.com"), "/b17/c/size/10")
        self.assertIn("listen cannot change live", d.log())

    def test_broken_reload_keeps_the_running_configuration(self):
        d = self.setup_proxy({"domains": {"allow_unlisted": "yes"}})
        with open(d.ini, "a") as f:
            f.write("\n[server]\nno_such_key = 1\n")
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "reload refused" in d.log(), 10 * H.SLOW, 0.05, "refusal")
        self.assertBody(self.get("/b17/d/size/10", host="unlisted.example"), "/b17/d/size/10")


if __name__ == "__main__":
    raise SystemExit(H.main())
