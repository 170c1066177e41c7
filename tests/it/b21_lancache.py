# SPDX-License-Identifier: BSD-2-Clause
"""b21: a real lancache cache served and moved in place ([cache] lancache_dir).

The cache is made by Debian's nginx (installed by `make deps`, started here in the foreground on
a loopback high port from a config written here, configured like lancache monolithic: its
$cacheidentifier map, `slice 1m`, `proxy_cache_key $cacheidentifier$uri$slice_range`,
`levels=2:2`, `use_temp_path=off`), in front of the scripted origin, then stopped by PID. It is
filled with Steam chunks (the Valve agent, a query string that is not part of the key), a
multi-slice object with a short last slice, an object whose origin ignores Range (one 200 file
for three chunks), and hosts of no service with and without a port. cacheparty with that tree
then serves every object byte-exact without asking the origin; `move` leaves no nginx file of an
adopted slice behind, and a restart serves the same bytes from cacheparty's own chunks. `copy`
keeps the files, `off` writes nothing. Damaged and foreign files (truncated, a bit flipped in the
header and in the KEY, a temporary name, a Vary variant, a 200 stored chunked, a Content-Range
that disagrees with the key, slices of one object with different ETags, a symlink, a directory)
are never served: each is counted by reason and its bytes come from the origin."""

import hashlib
import http.client
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import unittest
import zlib

import harness as H

NGINX = "/usr/sbin/nginx"
MIB = 1024 * 1024
STEAM_UA = "Valve/Steam HTTP Client 1.0"
STEAM_HOST = "cache1-ams1.steamcontent.com"


class Nginx:
    """Debian's nginx as lancache monolithic, in the foreground, one process, on loopback."""

    def __init__(self, tmp, origin_port):
        self.dir = os.path.join(tmp, "nginx")
        self.cache = os.path.join(self.dir, "cache")
        os.makedirs(self.cache)
        self.port = H.free_port()
        self.pidfile = os.path.join(self.dir, "nginx.pid")
        conf = os.path.join(self.dir, "nginx.conf")
        d = self.dir
        with open(conf, "w") as f:
            f.write("""daemon off;
master_process off;
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %(d)s/body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    map "$http_user_agent£££$http_host" $cacheidentifier {
        default $http_host;
        ~Valve\\/Steam\\ HTTP\\ Client\\ 1\\.0£££.* steam;
    }
    proxy_cache_path %(c)s levels=2:2 keys_zone=generic:16m inactive=200d max_size=1g
                     use_temp_path=off;
    server {
        listen 127.0.0.1:%(p)d;
        location / {
            slice 1m;
            proxy_cache generic;
            proxy_cache_key $cacheidentifier$uri$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 3650d;
            proxy_cache_valid 301 302 0;
            proxy_ignore_headers Expires Cache-Control;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_pass http://127.0.0.1:%(o)d;
        }
    }
}
""" % {"d": d, "c": self.cache, "p": self.port, "o": origin_port})
        self.proc = subprocess.Popen([NGINX, "-c", conf, "-p", d], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        H.wait_until(lambda: os.path.exists(self.pidfile) and self._accepts(), 10,
                     what="nginx listening")

    def _accepts(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/lancache-probe", headers={"Host": "probe.invalid"})
            c.getresponse().read()
            c.close()
            return True
        except OSError:
            return False

    def get(self, host, path, ua=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        hdrs = {"Host": host}
        if ua:
            hdrs["User-Agent"] = ua
        c.request("GET", path, headers=hdrs)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)  # graceful: finishes what it writes
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def files(self):
        out = []
        for root, dirs, names in os.walk(self.cache):
            for n in names:
                out.append(os.path.join(root, n))
        return sorted(out)


def ngx_key_of(path):
    """The KEY line of an nginx cache file."""
    with open(path, "rb") as f:
        head = f.read(4096)
    i = head.index(b"\nKEY: ")
    return head[i + 6:head.index(b"\n", i + 6)].decode("latin-1")


def file_for(files, key_prefix, start=0):
    want = "%sbytes=%d-%d" % (key_prefix, start, start + MIB - 1)
    for p in files:
        if ngx_key_of(p) == want:
            return p
    raise AssertionError("no nginx file for %s" % want)


def no_range_origin(ex):
    """An origin that ignores Range: always the whole object, 200."""
    n = int(H.SIZE_RE.search(ex.req.path).group(1))
    chunked = "chunked200" in ex.req.path
    ex.send(200, H.content(ex.req.path, 0, n),
            [("Content-Type", "application/octet-stream"), ("ETag", '"nr-%d"' % n)],
            chunked=chunked)


# (host, user agent, request path, lancache key prefix ($cacheidentifier$uri), size)
SHA = "3e5c1a2b9f0d4c6e8a7b5c3d1e2f4a6b8c0d2e4f"
OBJECTS = [
    (STEAM_HOST, STEAM_UA, "/b21/depot/1091501/chunk/%s/size/524288?x=1" % SHA,
     "steam/b21/depot/1091501/chunk/%s/size/524288" % SHA, 524288),
    ("cache2-fra1.steamcontent.com", STEAM_UA, "/b21/depot/7/chunk/%s/size/1048576" % SHA,
     "steam/b21/depot/7/chunk/%s/size/1048576" % SHA, 1048576),
    ("dl.example.org:8080", None, "/b21/multi//a/./big/size/3500000",
     "dl.example.org:8080/b21/multi/a/big/size/3500000", 3500000),
    ("cdn.example.net", None, "/b21/small/size/102400", "cdn.example.net/b21/small/size/102400",
     102400),
    ("dl.example.org:8080", None, "/b21/norange/size/2500000",
     "dl.example.org:8080/b21/norange/size/2500000", 2500000),
]
# For import, whose keys come from $uri alone: paths that requests spell one way (the object above
# asked as "//a/./" is adopted under "/a/", where those requests do not look).
OBJECTS_PLAIN = OBJECTS[:2] + [
    ("dl.example.org:8080", None, "/b21/multi/plain/size/3500000",
     "dl.example.org:8080/b21/multi/plain/size/3500000", 3500000)] + OBJECTS[3:]
SLICES = 1 + 1 + 4 + 1 + 1  # nginx files
CHUNKS = 1 + 1 + 4 + 1 + 3  # cacheparty chunks (the 200 holds three)


def body_path(path):
    return path.split("?", 1)[0]


@unittest.skipUnless(os.path.exists(NGINX), "nginx is not installed (make deps installs it)")
class Lancache(H.CPTestCase):
    def fill(self, objects):
        """A lancache cache of <objects> made by nginx, which is stopped again."""
        self.origin = self.start_origin()
        self.origin.route("/b21/norange", no_range_origin)
        self.origin.route("/b21/chunked200", no_range_origin)
        ngx = Nginx(self._tmp, self.origin.port)
        try:
            for host, ua, path, _, size in objects:
                st, body = ngx.get(host, path, ua)
                self.assertEqual(st, 200, path)
                self.assertEqual(body, H.content(body_path(path), 0, size), path)
        finally:
            ngx.stop()
        return ngx

    def serve(self, ngx, migrate, extra=None):
        self.cache_dir = getattr(self, "cache_dir", os.path.join(self._tmp, "ourcache"))
        ov = {"cache": {"dir": self.cache_dir, "lancache_dir": ngx.cache,
                        "lancache_settle": "0", "lancache_migrate": migrate}}
        for k, v in (extra or {}).items():
            ov.setdefault(k, {}).update(v)
        self.dns = self.start_dns()
        return self.start_daemon(ov, origin=self.origin, dns=self.dns)

    def get_all(self, d, objects):
        for host, ua, path, _, size in objects:
            hdrs = [("User-Agent", ua)] if ua else []
            r = self.get(path, host=host, headers=hdrs, daemon=d)
            self.assertStatus(r, 200)
            self.assertBody(r, body_path(path), total=size)

    def metric(self, d, name):
        return d.metrics().get("cacheparty_" + name, 0)

    def test_move_serves_in_place_then_from_own_chunks(self):
        ngx = self.fill(OBJECTS)
        self.assertEqual(len(ngx.files()), SLICES)
        asked = len(self.origin.requests)
        d = self.serve(ngx, "move")
        self.get_all(d, OBJECTS)
        self.assertEqual(len(self.origin.requests), asked, "the origin was asked")
        d.settle_disk()
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="served"}'), CHUNKS)
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="migrated"}'), CHUNKS)
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="removed"}'), SLICES)
        self.assertEqual(ngx.files(), [], "nginx files left after the move")
        self.assertEqual(len(H.chunk_files(self.cache_dir)), CHUNKS)
        d.stop()
        # A restart, without lancache's tree: the same bytes from our own chunks.
        d2 = self.start_daemon({"cache": {"dir": self.cache_dir}}, origin=self.origin,
                               dns=self.dns)
        self.get_all(d2, OBJECTS)
        self.assertEqual(len(self.origin.requests), asked, "the origin was asked after the move")
        self.assertEqual(self.metric(d2, "cache_misses_total"), 0)

    def test_copy_keeps_the_files_and_off_writes_nothing(self):
        ngx = self.fill(OBJECTS[:3])
        before = ngx.files()
        asked = len(self.origin.requests)
        self.cache_dir = os.path.join(self._tmp, "offcache")
        d = self.serve(ngx, "off")
        self.get_all(d, OBJECTS[:3])
        self.get_all(d, OBJECTS[:3])  # again from lancache's files: nothing of ours
        d.settle_disk()
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="served"}'), 12)
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="migrated"}'), 0)
        self.assertEqual(H.chunk_files(self.cache_dir), [])
        self.assertEqual(ngx.files(), before)
        d.stop()
        self.cache_dir = os.path.join(self._tmp, "copycache")
        d = self.serve(ngx, "copy")
        self.get_all(d, OBJECTS[:3])
        d.settle_disk()
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="migrated"}'), 6)
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="removed"}'), 0)
        self.assertEqual(len(H.chunk_files(self.cache_dir)), 6)
        self.assertEqual(ngx.files(), before, "copy changed lancache's files")
        self.assertEqual(len(self.origin.requests), asked)

    def test_a_damaged_chunk_of_ours_falls_back_to_lancache_copy(self):
        ngx = self.fill(OBJECTS[2:3])
        d = self.serve(ngx, "copy")
        self.get_all(d, OBJECTS[2:3])
        d.settle_disk()
        d.stop()
        first = [f for f in H.chunk_files(self.cache_dir) if f.endswith(".0")]
        self.assertEqual(len(first), 1)
        with open(first[0], "r+b") as f:  # the last body byte of chunk 0
            f.seek(-1, 2)
            b = f.read(1)
            f.seek(-1, 2)
            f.write(bytes([b[0] ^ 1]))
        self.origin.stop()  # nothing to fetch from: the bytes must come from lancache's file
        d = self.serve(ngx, "copy")
        self.get_all(d, OBJECTS[2:3])
        m = d.metrics()
        self.assertEqual(m.get("cacheparty_integrity_failures_total"), 1)
        self.assertEqual(m.get('cacheparty_lancache_slices_total{result="served"}'), 1)

    def test_young_files_wait_for_settle(self):
        ngx = self.fill(OBJECTS[3:4])
        asked = len(self.origin.requests)
        d = self.serve(ngx, "copy", {"cache": {"lancache_settle": "1h"}})
        self.get_all(d, OBJECTS[3:4])
        self.assertEqual(len(self.origin.requests), asked + 1)
        self.assertEqual(self.metric(d, 'lancache_skipped_total{reason="young"}'), 1)
        self.assertEqual(self.metric(d, 'lancache_slices_total{result="served"}'), 0)

    def test_damaged_and_foreign_files_are_never_served(self):
        objs = {}

        def obj(tag, size, host="cdn.example.net"):
            path = "/b21/dmg/%s/size/%d" % (tag, size)
            objs[tag] = (host, None, path, "%s%s" % (host, path), size)

        for tag in ("trunc", "hdrflip", "keyflip", "temp", "vary", "crange", "symlink", "dir"):
            obj(tag, 200000)
        obj("etags", 2500000)
        objs["chunked"] = ("cdn.example.net", None, "/b21/chunked200/size/300000",
                           "cdn.example.net/b21/chunked200/size/300000", 300000)
        ngx = self.fill(list(objs.values()))
        files = ngx.files()
        p = {t: file_for(files, o[3]) for t, o in objs.items()}

        with open(p["trunc"], "r+b") as f:
            f.truncate(os.path.getsize(p["trunc"]) - 1)
        with open(p["hdrflip"], "r+b") as f:  # a bit of the crc32 field (64-bit layout)
            f.seek(48)
            b = f.read(1)
            f.seek(48)
            f.write(bytes([b[0] ^ 0x10]))
        with open(p["keyflip"], "r+b") as f:
            data = f.read(4096)
            i = data.index(b"\nKEY: ") + 6 + 3
            f.seek(i)
            f.write(bytes([data[i] ^ 0x01]))
        os.rename(p["temp"], p["temp"] + ".0000000001")
        with open(p["vary"], "r+b") as f:
            f.seek(187)
            f.write(b"\x0f")
        with open(p["crange"], "r+b") as f:
            data = f.read(8192)
            old = b"Content-Range: bytes 0-199999/200000"
            i = data.index(old)
            f.seek(i)
            f.write(b"Content-Range: bytes 0-199998/200000")
        second = file_for(files, objs["etags"][3], MIB)
        with open(second, "r+b") as f:  # slice 1 of 3 of another version
            data = f.read(8192)
            i = data.index(b'ETag: "') + 7
            f.seek(i)
            f.write(b"0" if data[i:i + 1] != b"0" else b"1")
        os.rename(p["symlink"], p["symlink"] + ".real")
        os.symlink(p["symlink"] + ".real", p["symlink"])
        os.rename(p["dir"], p["dir"] + ".real")
        os.mkdir(p["dir"])

        asked = len(self.origin.requests)
        d = self.serve(ngx, "move")
        for tag, o in sorted(objs.items()):
            self.get_all(d, [o])
        d.settle_disk()
        m = d.metrics()
        skipped = {k: v for k, v in m.items() if k.startswith("cacheparty_lancache_skipped_total")}

        def n(reason):
            return skipped.get('cacheparty_lancache_skipped_total{reason="%s"}' % reason, 0)

        self.assertEqual(n("length"), 1, skipped)
        self.assertEqual(n("crc"), 2, skipped)  # the header's crc32, and the KEY's bytes
        self.assertEqual(n("vary"), 1, skipped)
        self.assertEqual(n("chunked"), 1, skipped)
        self.assertEqual(n("range"), 1, skipped)
        self.assertEqual(n("not_file"), 2, skipped)  # the symlink and the directory
        self.assertGreaterEqual(n("version_differs"), 1, skipped)
        # Nothing of the damaged objects was served from lancache; the temp file was not even
        # looked at (its final name is absent), and the slices of the object with two ETags
        # were none adopted.
        self.assertEqual(m.get('cacheparty_lancache_slices_total{result="served"}', 0), 0)
        # Every object came from the origin: one request each (three chunks of "etags" in one
        # ranged request or more, whole objects for the two that ignore Range).
        self.assertGreaterEqual(len(self.origin.requests) - asked, len(objs))
        # Refused files stay where they are (never deleted by us, whatever lancache_migrate).
        self.assertTrue(os.path.exists(p["trunc"]) and os.path.islink(p["symlink"]))
        self.assertTrue(os.path.exists(p["temp"] + ".0000000001"))
        log = open(d.log_path, errors="replace").read()
        self.assertIn("not used (length:", log)
        self.assertEqual(log.count(p["trunc"]), 1, "a refused file is logged once")
        # Asked again: served from our own chunks now, still not from the damaged files.
        asked = len(self.origin.requests)
        for tag, o in sorted(objs.items()):
            self.get_all(d, [o])
        self.assertEqual(len(self.origin.requests), asked)
        log = open(d.log_path, errors="replace").read()
        self.assertEqual(log.count(p["trunc"]), 1)

    def check_as_nobody(self, tree, migrate):
        """`cacheparty -t` as user nobody on a config with lancache_dir <tree>."""
        os.chmod(self._tmp, 0o755)
        self.checks = getattr(self, "checks", 0) + 1
        sub = os.path.join(self._tmp, "nb%d" % self.checks)
        os.makedirs(sub)
        os.chmod(sub, 0o777)
        d = H.Daemon(sub, {"cache": {"dir": os.path.join(sub, "cache"), "lancache_dir": tree,
                                     "lancache_migrate": migrate}}, start=False)
        os.chmod(os.path.join(sub, "cache"), 0o777)
        d.write_config(H.free_port())
        os.chmod(d.ini, 0o644)
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               H.binary_path(), "-t", "-c", d.ini], capture_output=True,
                              text=True)

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv")
    def test_start_reports_a_tree_it_cannot_read_or_delete_from(self):
        tree = os.path.join(self._tmp, "ngxtree")
        os.makedirs(os.path.join(tree, "0a", "1b"))
        os.chmod(tree, 0o755)
        os.chmod(os.path.join(tree, "0a"), 0o755)
        os.chmod(os.path.join(tree, "0a", "1b"), 0o700)  # nginx's owner-only directories
        r = self.check_as_nobody(tree, "copy")
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cannot read %s/0a/1b" % tree, r.stderr)
        self.assertEqual(len([l for l in r.stderr.splitlines() if "lancache_dir" in l]), 1)
        os.chmod(os.path.join(tree, "0a", "1b"), 0o755)
        r = self.check_as_nobody(tree, "copy")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # Readable directories holding nginx's owner-only files (a chown -R of the directories
        # only): said at start too, not found at every lookup.
        f = os.path.join(tree, "0a", "1b", "0123456789abcdef0123456789ab1b0a")
        with open(f, "wb") as fh:
            fh.write(b"\0" * 700)
        os.chmod(f, 0o600)
        r = self.check_as_nobody(tree, "copy")
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cannot read its files (%s: Permission denied)" % f, r.stderr)
        os.chmod(f, 0o644)
        r = self.check_as_nobody(tree, "move")
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cannot delete from %s" % tree, r.stderr)
        self.assertIn("lancache_migrate = copy", r.stderr)

    # ---- cacheparty import -------------------------------------------------------------------
    def import_ini(self, extra=None):
        """A config for `cacheparty import` with our cache dir (self.cache_dir)."""
        self.cache_dir = getattr(self, "cache_dir", os.path.join(self._tmp, "ourcache"))
        ov = {"cache": {"dir": self.cache_dir, "lancache_settle": "0"}}
        for k, v in (extra or {}).items():
            ov.setdefault(k, {}).update(v)
        self.checks = getattr(self, "checks", 0) + 1
        d = H.Daemon(os.path.join(self._tmp, "imp%d" % self.checks), ov, start=False)
        d.write_config(H.free_port())
        return d.ini

    def run_import(self, ini, tree, *args):
        r = subprocess.run([H.binary_path(), "-c", ini, "import", tree] + list(args),
                           capture_output=True, text=True, timeout=300 * H.SLOW)
        return r

    @staticmethod
    def summary(out):
        """{'adopted': N, 'chunks': N, 'present': N, 'removed': N, 'skipped': {reason: N}}"""
        m = re.search(r"import: (?:adopted|would adopt) (\d+) files \((\d+) chunks.*already in the "
                      r"cache: (\d+); lancache files removed: (\d+); temporary files removed: "
                      r"(\d+)", out)
        assert m, out
        sk = re.search(r"import: skipped (\d+) files(.*)", out)
        assert sk, out
        reasons = dict((k, int(v)) for k, v in re.findall(r" (\w+)=(\d+)", sk.group(2)))
        return {"adopted": int(m.group(1)), "chunks": int(m.group(2)),
                "present": int(m.group(3)), "removed": int(m.group(4)),
                "temp_removed": int(m.group(5)), "skipped": reasons,
                "skipped_total": int(sk.group(1))}

    def test_import_moves_a_tree_then_adopts_nothing_new(self):
        ngx = self.fill(OBJECTS_PLAIN)
        asked = len(self.origin.requests)
        ini = self.import_ini()
        r = self.run_import(ini, ngx.cache, "--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("slice size 1048576 bytes, key $cacheidentifier$uri$slice_range", r.stdout)
        s = self.summary(r.stdout)
        self.assertEqual((s["adopted"], s["chunks"], s["removed"]), (SLICES, CHUNKS, 0), r.stdout)
        self.assertEqual(len(ngx.files()), SLICES)
        self.assertEqual(H.chunk_files(self.cache_dir), [])
        r = self.run_import(ini, ngx.cache, "--jobs", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        s = self.summary(r.stdout)
        self.assertEqual((s["adopted"], s["chunks"], s["removed"], s["skipped_total"]),
                         (SLICES, CHUNKS, SLICES, 0), r.stdout)
        self.assertIn("import: 100% ", r.stderr)  # the progress (not a terminal: plain lines)
        self.assertEqual(ngx.files(), [])
        self.assertEqual(len(H.chunk_files(self.cache_dir)), CHUNKS)
        r = self.run_import(ini, ngx.cache)
        s = self.summary(r.stdout)
        self.assertEqual((s["adopted"], s["chunks"], s["skipped_total"]), (0, 0, 0), r.stdout)
        d = self.start_daemon({"cache": {"dir": self.cache_dir}}, origin=self.origin,
                              dns=self.start_dns())
        self.get_all(d, OBJECTS_PLAIN)
        self.assertEqual(len(self.origin.requests), asked)
        self.assertEqual(self.metric(d, "cache_misses_total"), 0)

    def test_import_copy_keeps_files_and_is_idempotent(self):
        ngx = self.fill(OBJECTS_PLAIN[:3])
        before = ngx.files()
        ini = self.import_ini()
        s = self.summary(self.run_import(ini, ngx.cache, "--copy").stdout)
        self.assertEqual((s["adopted"], s["chunks"], s["removed"]), (6, 6, 0))
        self.assertEqual(ngx.files(), before)
        s = self.summary(self.run_import(ini, ngx.cache, "--copy").stdout)
        self.assertEqual((s["adopted"], s["present"]), (0, 6))
        # A move after the copy: everything is there already, so the files just go.
        s = self.summary(self.run_import(ini, ngx.cache).stdout)
        self.assertEqual((s["adopted"], s["present"], s["removed"]), (0, 6, 6))
        self.assertEqual(ngx.files(), [])

    def test_import_counts_a_few_thousand_files_by_reason(self):
        self.origin = self.start_origin()
        ngx = Nginx(self._tmp, self.origin.port)
        planted = {"length": 10, "crc": 10, "vary": 5, "not_file": 5, "young": 4, "unlisted": 6,
                   "uri": 4, "bypass": 3}
        objs = []
        try:
            c = http.client.HTTPConnection("127.0.0.1", ngx.port, timeout=30)

            def fetch(host, path, ua, size):
                c.request("GET", path, headers={"Host": host, "User-Agent": ua or "x"})
                r = c.getresponse()
                body = r.read()
                self.assertEqual(r.status, 200, path)
                self.assertEqual(len(body), size)

            for i in range(2400):
                size = 2048 + (i % 7) * 512
                path = "/b21/many/%d/chunk/%s/size/%d" % (i, SHA, size)
                fetch(STEAM_HOST, path, STEAM_UA, size)
                objs.append(("steam", path, size))
            for i in range(planted["unlisted"]):  # allow_unlisted = no below
                path = "/b21/unl/%d/size/4096" % i
                fetch("files.example.org", path, None, 4096)
            for i in range(planted["uri"]):  # escapes: requests spell it more than one way
                path = "/b21/esc%%20%d/size/4096" % i
                fetch(STEAM_HOST, path, STEAM_UA, 4096)
            for i in range(planted["bypass"]):  # lancache's League exception (a built-in rule)
                path = "/b21/lol/releaselisting_%d/size/4096" % i
                fetch(STEAM_HOST, path, STEAM_UA, 4096)
            c.close()
        finally:
            ngx.stop()
        files = ngx.files()
        self.assertEqual(len(files), 2400 + planted["unlisted"] + planted["uri"] + planted["bypass"])
        old = time.time() - 7200
        for f in files:
            os.utime(f, (old, old))
        by_key = {ngx_key_of(f): f for f in files}

        def slot(i):
            return by_key["steam%sbytes=0-1048575" % objs[i][1]]

        k = 0
        for _ in range(planted["length"]):
            p = slot(k)
            k += 1
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) - 3)
            os.utime(p, (old, old))
        for _ in range(planted["crc"]):
            p = slot(k)
            k += 1
            with open(p, "r+b") as f:
                f.seek(49)
                b = f.read(1)
                f.seek(49)
                f.write(bytes([b[0] ^ 0x40]))
            os.utime(p, (old, old))
        for _ in range(planted["vary"]):
            p = slot(k)
            k += 1
            with open(p, "r+b") as f:
                f.seek(187)
                f.write(b"\x02")
            os.utime(p, (old, old))
        for j in range(planted["not_file"]):
            p = slot(k)
            k += 1
            os.rename(p, p + ".real")
            if j % 2:
                os.symlink(p + ".real", p)
            else:
                os.mkdir(p)
        for _ in range(planted["young"]):
            p = slot(k)
            k += 1
            os.utime(p, None)  # now: younger than lancache_settle
        temps = 7
        for _ in range(temps):
            p = slot(k)
            k += 1
            os.rename(p, p + ".0000000042")
        good = 2400 - k
        planted["temp"] = temps
        # the renamed originals of the not_file ones are foreign names
        planted["name"] = planted["not_file"]
        ini = self.import_ini({"cache": {"lancache_settle": "600s"},
                               "domains": {"allow_unlisted": "no"}})
        r = self.run_import(ini, ngx.cache, "--jobs", "4")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        s = self.summary(r.stdout)
        self.assertEqual(s["adopted"], good, r.stdout)
        self.assertEqual(s["chunks"], good)
        self.assertEqual(s["skipped"], planted, r.stdout)
        self.assertEqual(s["temp_removed"], temps)
        self.assertEqual(len(H.chunk_files(self.cache_dir)), good)
        # A second run: nothing new; what was refused is refused again (temp files are gone).
        r = self.run_import(ini, ngx.cache, "--jobs", "2")
        s2 = self.summary(r.stdout)
        self.assertEqual((s2["adopted"], s2["present"]), (0, 0), r.stdout)
        again = dict(planted)
        del again["temp"]
        self.assertEqual(s2["skipped"], again, r.stdout)
        # And the daemon serves what was adopted, without the origin.
        asked = len(self.origin.requests)
        d = self.start_daemon({"cache": {"dir": self.cache_dir}}, origin=self.origin,
                              dns=self.start_dns())
        for i in range(k, 2400, 97):
            r = self.get(objs[i][1], host=STEAM_HOST, headers=[("User-Agent", STEAM_UA)], daemon=d)
            self.assertStatus(r, 200)
            self.assertBody(r, objs[i][1], total=objs[i][2])
        self.assertEqual(len(self.origin.requests), asked)

    def test_import_refuses_what_it_does_not_understand(self):
        ini = self.import_ini()
        tree = os.path.join(self._tmp, "notngx")
        os.makedirs(os.path.join(tree, "ab", "cd"))
        with open(os.path.join(tree, "ab", "cd", "0123456789abcdef0123456789abcdef"), "wb") as f:
            f.write(b"hello" * 100)
        r = self.run_import(ini, tree)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a lancache cache", r.stderr)
        tree2 = os.path.join(self._tmp, "flat")
        os.makedirs(tree2)
        with open(os.path.join(tree2, "file.txt"), "w") as f:
            f.write("x")
        r = self.run_import(ini, tree2)
        self.assertEqual(r.returncode, 1)
        self.assertIn("levels=2:2", r.stderr)
        # lancache with 2 MiB slices, chunk_size 1M: refused, saying what to set
        ngx = self.fill(OBJECTS[3:4])
        f = ngx.files()[0]
        with open(f, "rb") as fh:
            data = fh.read()
        key = ngx_key_of(f)
        newkey = key.replace("bytes=0-1048575", "bytes=0-2097151").encode()
        hdr = bytearray(data[:336])
        rest = data[336 + 6 + len(key) + 1:]
        struct.pack_into("<I", hdr, 48, zlib.crc32(newkey))
        hs = 336 + 6 + len(newkey) + 1
        bs = struct.unpack_from("<H", hdr, 56)[0] - (336 + 6 + len(key) + 1) + hs
        struct.pack_into("<HH", hdr, 54, hs, bs)
        h = hashlib.md5(newkey).hexdigest()
        tree3 = os.path.join(self._tmp, "two")
        os.makedirs(os.path.join(tree3, h[30:32], h[28:30]))
        with open(os.path.join(tree3, h[30:32], h[28:30], h), "wb") as fh:
            fh.write(bytes(hdr) + b"\nKEY: " + newkey + b"\n" + rest)
        r = self.run_import(ini, tree3)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("2097152-byte slices", r.stderr)
        self.assertIn("CACHE_SLICE_SIZE", r.stderr)

    def test_kill_9_during_moves_loses_nothing(self):
        """`kill -9` of import and of the daemon while they move, at whatever point each is
        reached: afterwards every object is served byte-exact without the origin."""
        objs = [(STEAM_HOST, STEAM_UA, "/b21/k9/%d/chunk/%s/size/%d" % (i, SHA, 300000 + i),
                 "", 300000 + i) for i in range(120)]
        objs += [("dl.example.org:8080", None, "/b21/k9big/%d/size/%d" % (i, 3 * MIB + 5), "",
                  3 * MIB + 5) for i in range(6)]
        ngx = self.fill(objs)
        total = len(ngx.files())
        ini = self.import_ini()
        for round_ in range(3):
            left = len(ngx.files())
            if left == 0:
                break
            p = subprocess.Popen([H.binary_path(), "-c", ini, "import", ngx.cache, "--jobs", "2"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Kill once some files have moved (or when it ends first, which is fine too).
            H.wait_until(lambda: p.poll() is not None or len(ngx.files()) < left - 5 * (round_ + 1),
                         60 * H.SLOW, what="import progress")
            if p.poll() is None:
                p.kill()
            p.wait()
        # The daemon moves the rest while serving, killed too.
        asked = len(self.origin.requests)
        for round_ in range(2):
            d = self.serve(ngx, "move")
            for host, ua, path, _, size in objs[round_ * 40:(round_ + 1) * 40]:
                hdrs = [("User-Agent", ua)] if ua else []
                r = self.get(path, host=host, headers=hdrs, daemon=d)
                self.assertStatus(r, 200)
                self.assertBody(r, path, total=size)
            d.proc.kill()
            d.proc.wait()
            d.expect_rc = -9
        # A final import finishes the move; every slice is somewhere, every byte right.
        r = self.run_import(ini, ngx.cache)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(ngx.files(), [])
        d = self.start_daemon({"cache": {"dir": self.cache_dir}}, origin=self.origin,
                              dns=self.start_dns())
        self.get_all(d, objs)
        self.assertEqual(len(self.origin.requests), asked, "a slice was lost")
        self.assertEqual(self.metric(d, "integrity_failures_total"), 0)
        self.assertGreater(total, 0)

    def test_start_refuses_a_slice_size_other_than_chunk_size(self):
        tree = os.path.join(self._tmp, "tree")
        os.makedirs(tree)
        d = H.Daemon(os.path.join(self._tmp, "d"), {"cache": {"lancache_dir": tree,
                                                              "lancache_slice_size": "2M"}},
                     start=False)
        d.write_config(H.free_port())
        r = subprocess.run([H.binary_path(), "-t", "-c", d.ini], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("lancache_slice_size", r.stderr + r.stdout)
        self.assertIn("chunk_size", r.stderr + r.stdout)


if __name__ == "__main__":
    H.main()
