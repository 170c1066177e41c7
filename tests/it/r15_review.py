# SPDX-License-Identifier: BSD-2-Clause
"""r15: findings of the review of the issue-15 restructuring (cache, fetch, conn_cache).

- The object key of an absolute-form request without a path ("GET http://host HTTP/1.1"):
  before the restructuring conn_cache built it by hand and overwrote the "\\n" separator with the
  "/" ("ident/"), a key no other request (nor any PURGE) could reach.
  cache_key_build() now makes it "ident\\n/", the key of "GET /". A behaviour change (a fix) of
  the merged restructuring: this test pins it. It passes on d9352ee and fails on 9f88209 (there
  the second request is a MISS and the origin is asked twice).
- A reader that wants the bytes before the offset of a two-part fill while that fill, redirected,
  waits for the resolver to find the redirect's target: the restructured fetch (its state is
  RESOLVE) asks the head part at once, as fetch_want promises. Before, the short redirect body's
  "discard" flag stayed set until the fetch connected again, and fetch_hurry took the fill for
  an answer being read away that fails the chunk: nothing was asked, and the reader waited for
  the fill's own answer. A behaviour change (a fix), pinned here: passes on d9352ee, fails on
  9f88209 (the reader gets nothing while the fill's answer is held, then a 504 when that answer
  times out)."""

import harness as H
from c06_head_part_waiters import HoldStarts

HOST = "r15.example.test"
TARGET = "r15-target.example.test"
CS = H.MIB
OFF = 700000


class Review(H.CPTestCase):
    def test_absolute_form_without_path_is_the_object_of_slash(self):
        """Pins a behaviour change (not a reproduction of a defect)."""
        self.setup_proxy()
        self.origin.route("/", lambda ex: H.serve_object(ex, 5000, path="/r15/root"))
        c = self.client()
        c.send(("GET http://%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (HOST, HOST)).encode())
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(len(r.body), 5000)
        self.assertEqual(self.origin.last().target, "/")
        r2 = self.get("/", host=HOST)
        self.assertStatus(r2, 200)
        self.assertEqual(bytes(r2.body), bytes(r.body))
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT", r2.raw_head)
        self.assertEqual(self.origin.request_count(), 1)


    def wait_handled(self, c):
        """Until the daemon has taken <c>'s request in (its connection entered CACHE_HEAD)."""
        mark = "127.0.0.1:%d CONN_S_READ_HEAD -> CONN_S_CACHE_HEAD" % c.local_port
        H.wait_until(lambda: mark in self.daemon.log(), 10 * H.SLOW, what=mark)

    def test_head_part_asked_while_a_redirect_target_is_resolved(self):
        """Pins a behaviour change (not a reproduction of a defect)."""
        self.origin = self.start_origin()
        self.dns = self.start_dns({HOST: ["127.0.0.1"], TARGET: ["127.0.0.1"]})
        self.daemon = self.start_daemon(
            {"upstream": {"override": None, "allow_private": "yes", "first_byte_timeout": "30s",
                          "read_timeout": "30s"},
             "server": {"send_timeout": "30s"}}, origin=None, dns=self.dns)
        port = self.origin.port
        host = "%s:%d" % (HOST, port)
        total = 2 * CS
        final = "/r15/rr/final"
        target = "http://%s:%d%s" % (TARGET, port, final)
        self.origin.route("/r15/rr/obj", lambda ex: ex.send(302, b"", [("Location", target)]))
        held = HoldStarts(total, holds=(OFF,))   # the fill's own answer, from OFF, is held
        self.addCleanup(held.go[OFF].set)
        self.origin.route(final, held)
        # The origin's name in the resolver's cache; from now on the DNS stub answers nothing.
        self.assertStatus(self.get("/r15/warm/size/100", host=host), 200)
        self.dns.drop = True
        a = self.client(timeout=60)
        a.request("/r15/rr/obj", host=host, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        # A's fill followed the redirect and asks the resolver for the target's name.
        H.wait_until(lambda: self.dns.query_count(TARGET) >= 1, 10 * H.SLOW, what="target query")
        b = self.client(timeout=60)
        b.request("/r15/rr/obj", host=host, headers=[("Range", "bytes=1000-1999")])
        self.wait_handled(b)
        self.dns.drop = False    # the resolver's retry is answered
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, final, 1000, 2000)
        self.assertFalse(held.go[OFF].is_set())
        held.go[OFF].set()
        ra = a.read_response()
        self.assertStatus(ra, 206)
        self.assertBody(ra, final, OFF, OFF + 1000)


if __name__ == "__main__":
    raise SystemExit(H.main())
