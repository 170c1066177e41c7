# SPDX-License-Identifier: BSD-2-Clause
"""r18 (review of issue 18): repros for lancache adoption, built on b21's nginx harness (all
fixed; kept as tests).

- import of a multi-slice object of a hide_etag service (lancache's Battle.net fix, the built-in
  blizzard-etag rule): every slice must be adopted, not refused as version_differs.
- a move never makes the cache evict (docs/interfaces.md: "Moving never makes the cache evict:
  it pauses when the chunk would take the cache over disk_size"): a 200 holding a whole object
  larger than disk_size must not be moved past disk_size.
"""

import os
import struct
import time
import unittest

import harness as H
import b21_lancache as L

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")


@unittest.skipUnless(os.path.exists(L.NGINX), "nginx is not installed (make deps installs it)")
class Review18(H.CPTestCase):
    fill = L.Lancache.fill
    serve = L.Lancache.serve
    get_all = L.Lancache.get_all
    metric = L.Lancache.metric
    import_ini = L.Lancache.import_ini
    run_import = L.Lancache.run_import
    summary = staticmethod(L.Lancache.summary)

    def test_import_adopts_a_multi_slice_object_of_a_hide_etag_service(self):
        # nginx keys Host "blizzard" as $cacheidentifier "blizzard" (its map's default), the very
        # key lancache gives level3.blizzard.com through cache-domains.
        size = 2500000
        path = "/r18/bliz/size/%d" % size
        ngx = self.fill([("blizzard", None, path, "blizzard" + path, size)])
        self.assertEqual(len(ngx.files()), 3)
        ini = self.import_ini({"domains": {"cache_domains": LISTS, "allow_unlisted": "no"}})
        r = self.run_import(ini, ngx.cache, "--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        s = self.summary(r.stdout)
        # The daemon serves these three slices (its lookup clears the ETag of both sides); import
        # should adopt them too.
        self.assertEqual(s["skipped"].get("version_differs", 0), 0, r.stdout)
        self.assertEqual(s["adopted"], 3, r.stdout)

    def test_a_move_never_evicts(self):
        # One nginx file holding a whole 6 MiB object (an origin that ignored Range) and a cache
        # of disk_size 3M: serving it is fine, but moving it must pause, not write 6 chunks and
        # then evict what it just moved.
        size = 6 * L.MIB
        path = "/r18/norange/size/%d" % size
        objs = [("cdn.example.net", None, path, "cdn.example.net" + path, size)]
        self.origin = self.start_origin()
        self.origin.route("/r18/norange", L.no_range_origin)
        ngx = L.Nginx(self._tmp, self.origin.port)
        try:
            st, body = ngx.get(objs[0][0], path)
            self.assertEqual(st, 200)
        finally:
            ngx.stop()
        self.assertEqual(len(ngx.files()), 1)
        d = self.serve(ngx, "move", {"cache": {"disk_size": "3M", "min_free": "0"}})
        self.get_all(d, objs)
        d.settle_disk()
        # (It can never fit: it is served in place and never moved, and says so.)
        H.wait_until(lambda: self.metric(d, 'lancache_slices_total{result="migrated"}') > 0 or
                     self.metric(d, "lancache_move_paused") == 1 or
                     "never moved" in d.log(), 10 * H.SLOW,
                     what="the move done, paused or refused")
        d.settle_disk()
        ev = self.metric(d, 'evictions_total{tier="disk"}')
        migrated = self.metric(d, 'lancache_slices_total{result="migrated"}')
        left = ngx.files()
        asked = len(self.origin.requests)
        self.get_all(d, objs)
        refetched = len(self.origin.requests) - asked
        self.assertEqual(ev, 0, "the move made the cache evict %d chunk files (%d migrated, nginx "
                         "files left %d, origin asked %d times again: slices lost)"
                         % (ev, migrated, len(left), refetched))

    def test_a_huge_content_range_total_does_not_hang_the_lookup(self):
        # A 206 whose Content-Range total is absurd (an origin's, stored by lancache as it came):
        # the lookup's sibling check walks every slice window of that total (2^30 here), on an
        # I/O thread; a client asking 100 bytes must still get an answer.
        size = 3 * L.MIB
        path = "/r18/huge/size/%d" % size
        ngx = self.fill([("cdn.example.net", None, path, "cdn.example.net" + path, size)])
        f = L.file_for(ngx.files(), "cdn.example.net" + path, 0)
        for other in ngx.files():  # the slice alone (the others would disagree at once)
            if other != f:
                os.unlink(other)
        with open(f, "rb") as fh:
            data = bytearray(fh.read())
        old = b"Content-Range: bytes 0-1048575/3145728"
        new = b"Content-Range: bytes 0-1048575/1125899906842624"
        i = data.index(old)
        data[i:i + len(old)] = new
        bs = struct.unpack_from("<H", data, 56)[0] + len(new) - len(old)
        struct.pack_into("<H", data, 56, bs)
        with open(f, "wb") as fh:
            fh.write(bytes(data))
        os.utime(f, (time.time() - 7200,) * 2)
        d = self.serve(ngx, "copy")
        c = self.client(d, timeout=20.0)
        c.request(path, "GET", "cdn.example.net", [("Range", "bytes=0-99")], "HTTP/1.1")
        try:
            r = c.read_response(timeout=20.0)
        except Exception as e:  # noqa: BLE001 (the harness's timeout)
            d.proc.kill()
            d.proc.wait()
            d.expect_rc = -9
            self.fail("no answer within 20 s: the lookup is stuck (%r)" % (e,))
        self.assertIn(r.status, (200, 206))

    def test_move_after_copy_empties_the_tree(self):
        # README: "Try lancache_migrate = copy first ... move removes each nginx file once its
        # bytes are safely in cacheparty's cache". After a copy run (or a kill -9 of a move
        # between its chunk's rename and the nginx file's unlink) our chunk is found first and
        # lancache's file is never looked at again: with move, it stays forever.
        objs = L.OBJECTS[:2]
        ngx = self.fill(objs)
        self.assertEqual(len(ngx.files()), 2)
        d = self.serve(ngx, "copy")
        self.get_all(d, objs)
        d.settle_disk()
        H.wait_until(lambda: self.metric(d, 'lancache_slices_total{result="migrated"}') == 2,
                     10 * H.SLOW, what="copied")
        d.stop()
        d = self.serve(ngx, "move")
        self.get_all(d, objs)
        d.settle_disk()
        self.get_all(d, objs)
        d.settle_disk()
        self.assertEqual(ngx.files(), [], "nginx files of adopted slices left with move")

    def test_uri_mapping_matches_nginx(self):
        # Paths nginx normalises for $uri: cacheparty's lookup must find the file nginx wrote for
        # the very same request (a miss asks the origin).
        paths = ["/r18/u/a%2Fb/size/100", "/r18/u/a%20b/size/101", "/r18/u/x/%2e%2e/y/size/102",
                 "/r18/u/%7Euser/size/103", "/r18/u/a%25b/size/104", "/r18/u/a%2e/size/105",
                 "/r18/u/a;b=c/size/106", "/r18/u/%2F%2Fz/size/107"]
        objs = [("cdn.example.net", None, p, "", int(p.rsplit("/", 1)[1])) for p in paths]
        ngx = self.fill(objs)
        asked = len(self.origin.requests)
        d = self.serve(ngx, "off")
        missed = []
        for host, ua, path, _, size in objs:
            n = len(self.origin.requests)
            r = self.get(path, host=host, daemon=d)
            self.assertStatus(r, 200)
            if len(self.origin.requests) != n:
                missed.append(path)
        self.assertEqual(missed, [], "not found in lancache's tree")

    def test_moves_of_single_slices_never_evict(self):
        # Steam chunks, one slice each, served in a burst: the mover's batch is checked one
        # chunk at a time against a disk usage that does not count the batch itself.
        objs = [(L.STEAM_HOST, L.STEAM_UA, "/r18/burst/%d/chunk/%s/size/%d" % (i, L.SHA, L.MIB),
                 "", L.MIB) for i in range(12)]
        ngx = self.fill(objs)
        d = self.serve(ngx, "move", {"cache": {"disk_size": "4M", "min_free": "0"}})
        self.get_all(d, objs)
        d.settle_disk()
        H.wait_until(lambda: self.metric(d, "lancache_move_paused") == 1 or not ngx.files(),
                     10 * H.SLOW, what="the moves paused or done")
        d.settle_disk()
        ev = self.metric(d, 'evictions_total{tier="disk"}')
        migrated = self.metric(d, 'lancache_slices_total{result="migrated"}')
        self.assertEqual(ev, 0, "the moves made the cache evict %d chunk files (%d migrated, %d "
                         "nginx files left)" % (ev, migrated, len(ngx.files())))

    def test_a_long_key_is_not_counted_as_a_refused_file(self):
        # A key longer than NGXCACHE_KEY_MAX once "bytes=S-E" is added: open_slice() returns
        # NGXCACHE_KEY without writing <path>, and cache_lc_find() copies (and logs) that
        # uninitialized stack buffer as the path of a refused file that does not exist.
        class Tree:
            pass
        ngx = Tree()
        ngx.cache = os.path.join(self._tmp, "emptytree")
        os.makedirs(ngx.cache)
        self.origin = self.start_origin()
        d = self.serve(ngx, "copy")
        host = "h" * 50 + ".example.net"
        path = "/r18/long/" + "a" * 8110 + "/size/10"
        r = self.get(path, host=host, daemon=d)
        self.assertStatus(r, 200)
        self.assertBody(r, path)
        skipped = {k: v for k, v in d.metrics().items() if "lancache_skipped" in k and v}
        log = [l for l in open(d.log_path, errors="replace").read().splitlines()
               if "lancache file" in l]
        self.assertEqual((skipped, log), ({}, []), "a refusal of no file, path %r" % (log,))


if __name__ == "__main__":
    H.main()
