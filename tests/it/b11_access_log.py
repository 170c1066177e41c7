# SPDX-License-Identifier: BSD-2-Clause
"""b11: the access log (docs/interfaces.md, "Access log"): one cachelog line per request, every line matches
the lancache regex; json format; SIGUSR1 reopens the file."""

import json
import os
import re
import signal

import harness as H

LINE_RE = re.compile(r'^\[(\S+)\] (\S+) / - - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" '
                     r'"([^"]*)" "([A-Z]+|-)" "([^"]*)" "([^"]*)"$')
UA = "Valve/Steam HTTP Client 1.0"


class AccessLog(H.CPTestCase):
    def wait_lines(self, d, n):
        return H.wait_until(lambda: len(d.access_lines()) >= n and d.access_lines(),
                            10 * H.SLOW, 0.05, "%d access log lines" % n)

    def test_cachelog_lines(self):
        d = self.setup_proxy()
        c = self.client()
        c.request("/b11/a/size/100", headers=[("User-Agent", UA), ("Referer", 'x"y')])
        self.assertBody(c.read_response(), "/b11/a/size/100")
        c.request("/b11/b/size/1000", headers=[("Range", "bytes=0-9")])
        self.assertStatus(c.read_response(), 206)
        c.request("/lancache-heartbeat")
        self.assertStatus(c.read_response(), 204)
        c.request("/b11/c", method="POST")
        self.assertStatus(c.read_response(), 405)
        lines = self.wait_lines(d, 4)
        self.assertEqual(len(lines), 4, lines)
        fields = []
        for line in lines:
            m = LINE_RE.match(line)
            self.assertIsNotNone(m, "access log line does not match the contract: %r" % line)
            fields.append(m.groups())
        a, b, hb, post = fields
        self.assertEqual(a[0], "game.example.test")
        self.assertEqual(a[1], "127.0.0.1")
        self.assertEqual(a[3], "GET /b11/a/size/100 HTTP/1.1")
        self.assertEqual(a[4], "200")
        self.assertEqual(a[5], "100")
        self.assertEqual(a[6], "x\\x22y")  # nginx's escape of '"'
        self.assertEqual(a[7], UA)
        self.assertEqual(a[8], "MISS")
        self.assertEqual(a[9], "game.example.test")
        self.assertEqual(a[10], "-")
        self.assertEqual(b[4], "206")
        self.assertEqual(b[5], "10")
        self.assertEqual(b[10], "bytes=0-9")
        self.assertEqual(hb[0], "game.example.test")  # no service: the Host
        self.assertEqual(hb[4], "204")
        self.assertEqual(hb[8], "-")
        self.assertEqual(post[4], "405")
        self.assertEqual(post[8], "-")

    def test_json_format(self):
        d = self.setup_proxy({"log": {"access_format": "json"}})
        self.assertBody(self.get("/b11/j/size/10"), "/b11/j/size/10")
        lines = self.wait_lines(d, 1)
        obj = json.loads(lines[0])
        self.assertIsInstance(obj, dict)
        self.assertIn("200", json.dumps(obj))

    def test_sigusr1_reopens(self):
        d = self.setup_proxy()
        self.assertBody(self.get("/b11/r1/size/10"), "/b11/r1/size/10")
        self.wait_lines(d, 1)
        path = d.cfg("log", "access")
        os.rename(path, path + ".1")
        d.signal(signal.SIGUSR1)
        # the reopen happens asynchronously: retry requests until one lands in the new file
        def landed():
            self.get("/b11/r2/size/10")
            return os.path.exists(path) and d.access_lines()
        H.wait_until(landed, 10 * H.SLOW, 0.1, "a line in the reopened access log")
        self.assertTrue(d.running())


if __name__ == "__main__":
    raise SystemExit(H.main())
