# SPDX-License-Identifier: BSD-2-Clause
"""b13: no leak after a SIGTERM shutdown, checked by valgrind's memcheck on the real daemon.

The daemon runs under `valgrind --leak-check=full --error-exitcode=42` through a wrapper script
(exec, so signals reach it), serves keep-alive, pipelined, DNS-resolved, failing and error
requests, then is stopped with SIGTERM: the harness's teardown requires exit status 0, which
valgrind turns into 42 on any memory error or leak. Skipped under ASan (the two do not mix) and
when valgrind is absent."""

import os
import shutil
import unittest

import harness as H


@unittest.skipIf(H.SANITIZED, "ASan build: LeakSanitizer checks leaks there")
@unittest.skipIf(shutil.which("valgrind") is None, "valgrind not installed")
class Valgrind(H.CPTestCase):
    def test_no_leak_after_sigterm(self):
        wrapper = self.valgrind_binary()
        self.origin = self.start_origin()
        self.dns = self.start_dns({"game.example.test": ["127.0.0.1"]})
        d = self.daemon = self.start_daemon({"upstream": {"override": None, "allow_private": "yes"}}, origin=self.origin, dns=self.dns,
                              binary=wrapper)
        exe = os.readlink("/proc/%d/exe" % d.pid)
        self.assertIn("memcheck", exe, "the daemon is not running under valgrind")
        host = "game.example.test:%d" % self.origin.port
        c = self.client()
        for i in range(3):      # keep-alive, resolved through the stub DNS
            c.request("/b13/ka%d/size/%d" % (i, 70000 + i), host=host)
            self.assertBody(c.read_response(), "/b13/ka%d/size/%d" % (i, 70000 + i))
        c.send(("GET /b13/p1/size/10 HTTP/1.1\r\nHost: %s\r\n\r\n"
                "GET /b13/p2/size/20 HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)).encode())
        self.assertBody(c.read_response(), "/b13/p1/size/10")
        self.assertBody(c.read_response(), "/b13/p2/size/20")
        self.assertStatus(self.get("/b13/x", host="nxdomain.example.test"), 502)
        self.assertStatus(self.get("/b13/x", method="POST", host=host), 405)
        self.assertStatus(self.get("/lancache-heartbeat"), 204)
        # a client that leaves mid-body, and one left idle on a keep-alive connection
        c2 = self.client()
        c2.request("/b13/big/size/%d" % (8 * H.MIB), host=host)
        c2.close()
        idle = self.client()
        idle.request("/b13/idle/size/5", host=host)
        idle.read_response()
        self.assertValgrindClean(d)


if __name__ == "__main__":
    raise SystemExit(H.main())
