# SPDX-License-Identifier: BSD-2-Clause
"""r05: regressions from the review of the cache and forwarding paths.

- a chunked origin response whose head nearly fills the output buffer must not abort the daemon
  (it asserted on the room for the last chunk);
- an absurd object length from the origin followed by a changed ETag must not spin the loop
  (the old version's chunks were walked index by index);
- a process out of descriptors must not delete good chunk files (open() errors were taken for
  damage)."""

import os
import re
import stat

import harness as H


class Review(H.CPTestCase):
    def test_chunked_response_with_huge_head_does_not_abort(self):
        self.setup_proxy()
        pad = "x" * 65000

        def h(ex):
            ex.send_head(200, [("X-Pad", pad), ("Transfer-Encoding", "chunked")])
            ex.write(b"0\r\n\r\n")
        self.origin.route("/r05/bighead", h)
        c = self.client()
        c.request("/r05/bighead", headers=[("Authorization", "Bearer x")])   # forwarded as is
        try:
            c.read_response()
        except H.ProtocolError:
            pass        # a closed connection is an acceptable answer to an unforwardable head
        self.assertStatus(self.get("/lancache-heartbeat"), 204)
        self.assertTrue(self.daemon.running())

    def test_absurd_length_then_new_version_keeps_serving(self):
        self.setup_proxy()
        state = {"etag": '"v1"'}
        huge = 10 ** 17

        def h(ex):
            rng = ex.req.header("Range") or "bytes=0-0"
            a, _, b = rng[6:].partition("-")
            a, b = int(a), int(b)
            body = b"z" * (b - a + 1)
            ex.send(206, body, [("Content-Range", "bytes %d-%d/%d" % (a, b, huge)),
                                ("ETag", state["etag"])])
        self.origin.route("/r05/huge", h)
        c = self.client()
        c.request("/r05/huge", headers=[("Range", "bytes=0-99")])
        r = c.read_response()
        self.assertIn(r.status, (206, 200))
        state["etag"] = '"v2"'
        c = self.client()
        c.request("/r05/huge?nocache=1", headers=[("Range", "bytes=0-99")])
        c.read_response()
        # the loop is still turning
        self.assertStatus(self.get("/lancache-heartbeat"), 204)

    def test_out_of_descriptors_never_deletes_chunk_files(self):
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        d1 = self.start_daemon({}, origin=self.origin, dns=self.dns)
        cache_dir = d1.cfg("cache", "dir")
        path = "/r05/fd/size/%d" % (2 * H.MIB)
        self.assertBody(self.get(path, daemon=d1), path)
        files = H.wait_until(lambda: len(H.chunk_files(cache_dir)) >= 2 and
                             H.chunk_files(cache_dir), 10 * H.SLOW, 0.05, "chunk files")
        self.assertEqual(d1.stop(), 0)
        # the same cache under a daemon with very few descriptors: hits come from disk
        wrapper = os.path.join(self._tmp, "cacheparty-lowfd")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nulimit -n 24\nexec %s \"$@\"\n" % H.binary_path())
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        d = self.start_daemon({"server": {"max_connections": "200"},
                               "cache": {"dir": cache_dir}},
                              origin=self.origin, dns=self.dns, binary=wrapper)
        c = H.Client(d.port)            # accepted while descriptors remain
        c.request("/lancache-heartbeat")
        self.assertStatus(c.read_response(), 204)
        # the start-up scan has listed the files (it needs descriptors too: a scan that fails
        # leaves nothing to look up on disk)
        H.wait_until(lambda: re.search(r"disk index: [1-9]\d* chunk files", d.log()),
                     10 * H.SLOW, 0.05, "the disk index scanned")
        hogs = []                       # then every descriptor taken
        for _ in range(40):
            try:
                hogs.append(H.Client(d.port, timeout=2))
            except OSError:
                break
        H.wait_until(lambda: "Too many open files" in d.log(), 10 * H.SLOW, 0.05,
                     "the daemon out of descriptors")
        c.request(path)
        try:
            c.read_response()
        except (H.ProtocolError, OSError):
            pass
        for h in hogs:
            h.close()
        c.close()
        self.assertIn("served as a miss", d.log())
        for p in files:
            self.assertTrue(os.path.exists(p), "%s was deleted" % p)
        self.assertBody(self.get(path, daemon=d), path)


if __name__ == "__main__":
    raise SystemExit(H.main())
