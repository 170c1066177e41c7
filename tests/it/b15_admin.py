# SPDX-License-Identifier: BSD-2-Clause
"""b15: the admin listener (docs/interfaces.md): /metrics in the Prometheus text format (checked by a
strict exposition parser below), counters that move exactly with known traffic, /status agreeing
with /metrics, PURGE by Host (cache identifier rules of §4) or ?identifier=, and the admin
endpoints never reachable on `listen`."""

import json
import math
import os
import re
import signal
import socket

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
STEAM_UA = "Valve/Steam HTTP Client 1.0 (816)"
PROM_CTYPE = "text/plain; version=0.0.4; charset=utf-8"

# The families docs/interfaces.md "Admin listener" names, with label (None: unlabelled) and type.
REQUIRED = {
    "cacheparty_requests_total": ("status", "counter"),
    "cacheparty_response_bytes_total": ("cache", "counter"),
    "cacheparty_upstream_requests_total": (None, "counter"),
    "cacheparty_upstream_bytes_total": (None, "counter"),
    "cacheparty_upstream_connect_failover_total": (None, "counter"),
    "cacheparty_coalesced_total": (None, "counter"),
    "cacheparty_inflight_fetches": (None, "gauge"),
    "cacheparty_connections": ("kind", "gauge"),
    "cacheparty_cache_bytes": ("tier", "gauge"),
    "cacheparty_cache_chunks": ("tier", "gauge"),
    "cacheparty_evictions_total": ("tier", "counter"),
    "cacheparty_integrity_failures_total": (None, "counter"),
    "cacheparty_errors_total": ("kind", "counter"),
}
REQUIRED_LABELS = {
    "cacheparty_response_bytes_total": {"hit", "miss", "bypass"},
    "cacheparty_connections": {"http", "tls", "admin"},
    "cacheparty_cache_bytes": {"memory", "disk"},
    "cacheparty_cache_chunks": {"memory", "disk"},
    "cacheparty_evictions_total": {"memory", "disk"},
}

NAME_RE = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
SAMPLE_RE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$" % NAME_RE)
HELP_RE = re.compile(r"^# HELP (%s) (.*)$" % NAME_RE)
TYPE_RE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME_RE)


def unescape_label(v):
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_labels(text):
    """'a="x",b="y"' -> (("a", "x"), ("b", "y")); raises ValueError on anything else."""
    out = []
    pos = 0
    while pos < len(text):
        m = LABEL_RE.match(text, pos)
        if not m:
            raise ValueError("bad label syntax at %r" % text[pos:])
        out.append((m.group(1), unescape_label(m.group(2))))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise ValueError("expected ',' at %r" % text[pos:])
            pos += 1
            if pos == len(text):
                break   # a trailing comma is allowed by the format
    names = [k for k, _ in out]
    if len(set(names)) != len(names):
        raise ValueError("duplicate label name in %r" % text)
    return tuple(out)


def parse_exposition(text):
    """Strict reading of the Prometheus text format 0.0.4 as cacheparty writes it. Returns
    {family: {"type", "help", "samples": {labels_tuple: value}}}; raises AssertionError naming the
    line on the first violation: a line that is neither HELP, TYPE nor `name{labels} value`,
    HELP/TYPE missing, repeated or after the family's samples, a family split in two, a sample
    of a family without TYPE, a duplicate series, a counter not named *_total, a value that is
    not a finite non-negative number."""
    if not text.endswith("\n"):
        raise AssertionError("exposition does not end with a newline")
    fams = {}
    order = []
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d %r" % (n, line)
        if line == "":
            raise AssertionError("%s: empty line" % where)
        if line.startswith("#"):
            m = HELP_RE.match(line) or TYPE_RE.match(line)
            if not m:
                raise AssertionError("%s: a comment that is neither HELP nor TYPE" % where)
            name = m.group(1)
            kind = "help" if line.startswith("# HELP") else "type"
            f = fams.get(name)
            if f is None:
                f = fams[name] = {"type": None, "help": None, "samples": {}}
                order.append(name)
            elif current != name:
                raise AssertionError("%s: family %s split" % (where, name))
            if f[kind] is not None:
                raise AssertionError("%s: second %s for %s" % (where, kind.upper(), name))
            if f["samples"]:
                raise AssertionError("%s: %s after samples of %s" % (where, kind.upper(), name))
            f[kind] = m.group(2)
            current = name
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            raise AssertionError("%s: not `name{labels} value`" % where)
        name, labels, value = m.group(1), m.group(2), m.group(3)
        f = fams.get(name)
        if f is None or current != name:
            raise AssertionError("%s: sample outside its family's HELP/TYPE block" % where)
        if f["type"] is None or f["help"] is None:
            raise AssertionError("%s: sample before HELP and TYPE of %s" % (where, name))
        try:
            lt = parse_labels(labels) if labels else ()
        except ValueError as e:
            raise AssertionError("%s: %s" % (where, e))
        key = tuple(sorted(lt))
        if key in f["samples"]:
            raise AssertionError("%s: duplicate series" % where)
        try:
            v = float(value)
        except ValueError:
            raise AssertionError("%s: value %r is not a number" % (where, value))
        if math.isnan(v) or math.isinf(v) or v < 0:
            raise AssertionError("%s: value %r" % (where, value))
        f["samples"][key] = v
    for name in order:
        f = fams[name]
        if f["type"] is None or f["help"] is None:
            raise AssertionError("family %s lacks HELP or TYPE" % name)
        if not name.startswith("cacheparty_"):
            raise AssertionError("family %s lacks the cacheparty_ prefix" % name)
        if f["type"] == "counter" and not name.endswith("_total"):
            raise AssertionError("counter %s does not end in _total" % name)
        if f["type"] != "counter" and name.endswith("_total"):
            raise AssertionError("%s ends in _total but is a %s" % (name, f["type"]))
    return fams


def value(fams, name, **labels):
    """The sample of family <name> with exactly <labels>, or 0 when absent (a status code not
    seen yet has no sample)."""
    return fams[name]["samples"].get(tuple(sorted(labels.items())), 0.0)


class Admin(H.CPTestCase):
    def start(self, overrides=None):
        o = {"server": {"admin_listen": "auto"}}
        for sec, kv in (overrides or {}).items():
            o.setdefault(sec, {}).update(kv)
        return self.setup_proxy(o)

    def admin(self):
        c = H.Client(self.daemon.admin_port)
        self._clients.append(c)
        return c

    def admin_req(self, target, method="GET", host="127.0.0.1", headers=()):
        c = self.admin()
        c.request(target, method=method, host=host, headers=headers)
        r = c.read_response()
        c.close()
        return r

    def scrape(self):
        r = self.daemon.admin_get("/metrics")
        self.assertStatus(r, 200)
        self.assertEqual(r.header("Content-Type"), PROM_CTYPE)
        return parse_exposition(bytes(r.body).decode("utf-8"))

    def wait_value(self, name, want, **labels):
        """Waits until the sample equals <want> (it is counted when the response is queued,
        which may follow the client's last byte by a loop iteration), then asserts it."""
        try:
            H.wait_until(lambda: value(self.scrape(), name, **labels) >= want, 5 * H.SLOW, 0.05,
                         "%s%r >= %s" % (name, labels, want))
        except AssertionError:
            pass
        self.assertEqual(value(self.scrape(), name, **labels), want, "%s%r" % (name, labels))

    def wait_files(self, key, n):
        """Waits until <n> chunk files of object <key> are on disk (PURGE counts those)."""
        cache_dir = self.daemon.cfg("cache", "dir")
        H.wait_until(lambda: sum(1 for k in H.chunk_index(cache_dir) if k[0] == key) == n,
                     10 * H.SLOW, 0.05, "%d chunk files of %r" % (n, key))

    def purge(self, target, host=None, headers=()):
        """PURGE <target>: with ?identifier= on the admin's own Host (another is refused), else
        with the Host that names the object (DEFAULT_HOST unless given)."""
        if host is None:
            host = "127.0.0.1" if "identifier=" in target else H.DEFAULT_HOST
        r = self.admin_req(target, method="PURGE", host=host, headers=headers)
        return r, bytes(r.body).decode("latin-1")

    # format ----------------------------------------------------------------------------------
    def test_metrics_exposition_is_strict_and_complete(self):
        self.start()
        fams = self.scrape()    # fresh daemon: every family present, even without samples
        for name, (label, kind) in REQUIRED.items():
            self.assertIn(name, fams, "family %s missing" % name)
            self.assertEqual(fams[name]["type"], kind, name)
            for key in fams[name]["samples"]:
                self.assertEqual([k for k, _ in key], [label] if label else [], "%s %r"
                                 % (name, key))
        for name, labels in REQUIRED_LABELS.items():
            got = {dict(k)[REQUIRED[name][0]] for k in fams[name]["samples"]}
            self.assertTrue(labels <= got, "%s: labels %r, want %r" % (name, got, labels))
        self.assertGreaterEqual(len(fams["cacheparty_errors_total"]["samples"]), 5)
        # traffic with several status codes, then the format holds with those samples too
        self.assertStatus(self.get("/b15/fmt/size/100"), 200)
        self.assertStatus(self.get("/b15/fmt/x?status=404"), 404)
        c = self.client()
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        self.assertStatus(c.read_response(), 400)
        fams = self.scrape()
        for code in ("200", "404", "400"):
            self.assertGreaterEqual(value(fams, "cacheparty_requests_total", status=code), 1, code)
        self.assertGreaterEqual(value(fams, "cacheparty_errors_total", kind="client_bad_request"),
                                1)
        self.assertGreaterEqual(value(fams, "cacheparty_connections", kind="admin"), 1)

    def test_checker_rejects_bad_expositions(self):
        good = "# HELP cacheparty_x_total x\n# TYPE cacheparty_x_total counter\n"
        parse_exposition(good + 'cacheparty_x_total{a="q\\"\\\\\\n"} 1\n')
        for bad in ('cacheparty_x_total{a="1"} 1\ncacheparty_x_total{a="1"} 2\n',
                    'cacheparty_x_total{a="1} 1\n',
                    "cacheparty_x_total 1 2 3\n",
                    "cacheparty_x_total{a=1} 1\n",
                    "cacheparty_x_total NaN\n",
                    "# TYPE cacheparty_x_total counter\n",
                    "\n"):
            with self.assertRaises(AssertionError, msg=bad):
                parse_exposition(good + bad)
        with self.assertRaises(AssertionError):
            parse_exposition("# HELP cacheparty_y y\n# TYPE cacheparty_y counter\ncacheparty_y 1\n")
        with self.assertRaises(AssertionError):
            parse_exposition("cacheparty_z 1\n")

    # counters --------------------------------------------------------------------------------
    def test_counters_follow_known_traffic(self):
        self.start()
        m0 = self.scrape()
        a, b = "/b15/cnt/a/size/5000", "/b15/cnt/b/size/7000"
        r = self.get(a)
        self.assertBody(r, a)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.wait_value("cacheparty_response_bytes_total", 5000, cache="miss")
        r = self.get(a)
        self.assertBody(r, a)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.wait_value("cacheparty_response_bytes_total", 5000, cache="hit")
        self.assertBody(self.get(b), b)
        self.wait_value("cacheparty_response_bytes_total", 12000, cache="miss")
        self.wait_value("cacheparty_requests_total",
                        value(m0, "cacheparty_requests_total", status="200") + 3, status="200")
        m = self.scrape()
        self.assertEqual(value(m, "cacheparty_response_bytes_total", cache="hit"), 5000)
        self.assertEqual(value(m, "cacheparty_response_bytes_total", cache="bypass"), 0)
        self.assertEqual(value(m, "cacheparty_upstream_requests_total"),
                         self.origin.request_count())
        self.assertEqual(self.origin.request_count(), 2)
        self.assertEqual(value(m, "cacheparty_upstream_bytes_total"), 12000)
        self.assertEqual(value(m, "cacheparty_inflight_fetches"), 0)
        self.assertEqual(value(m, "cacheparty_cache_chunks", tier="memory"), 2)
        self.assertEqual(value(m, "cacheparty_cache_bytes", tier="memory"), 12000)
        # an Authorization request is a BYPASS: its bytes are counted as such
        r = self.get("/b15/cnt/c/size/300", headers=[("Authorization", "Basic eDp5")])
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.wait_value("cacheparty_response_bytes_total", 300, cache="bypass")
        self.assertEqual(value(self.scrape(), "cacheparty_upstream_requests_total"),
                         self.origin.request_count())

    def test_status_json_agrees_with_metrics(self):
        self.start()
        self.assertBody(self.get("/b15/st/size/4096"), "/b15/st/size/4096")
        r404 = self.get("/b15/st/x?status=404")
        self.assertStatus(r404, 404)
        self.wait_value("cacheparty_requests_total", 1, status="404")
        # both on one connection, pipelined: nothing can change in between
        c = self.admin()
        c.send(H.build_request("GET", "/metrics", "127.0.0.1") +
               H.build_request("GET", "/status", "127.0.0.1"), expect=["GET", "GET"])
        rm, rs = c.read_responses(2)
        self.assertStatus(rm, 200)
        self.assertStatus(rs, 200)
        self.assertEqual(rs.header("Content-Type"), "application/json")
        fams = parse_exposition(bytes(rm.body).decode("utf-8"))
        st = json.loads(bytes(rs.body))
        self.assertIsInstance(st, dict)
        self.assertEqual(set(st), {n[len("cacheparty_"):] for n in fams})
        for name, f in fams.items():
            key = name[len("cacheparty_"):]
            label = REQUIRED.get(name, (None,))[0]
            if label is None and f["samples"] and list(f["samples"])[0]:
                label = list(f["samples"])[0][0][0]
            if label is None:
                self.assertEqual(list(f["samples"]), [()], name)
                self.assertEqual(st[key], f["samples"][()], name)
                continue
            self.assertIsInstance(st[key], dict, key)
            want = {dict(k)[label]: v for k, v in f["samples"].items()}
            self.assertEqual({k: float(v) for k, v in st[key].items()}, want, key)
        self.assertEqual(st["requests_total"].get("200"), 1)
        self.assertEqual(st["requests_total"].get("404"), 1)
        self.assertEqual(st["response_bytes_total"]["miss"], 4096 + len(r404.body))

    # PURGE -----------------------------------------------------------------------------------
    def test_purge_by_host_then_miss(self):
        self.start({"cache": {"chunk_size": "64K"}})
        p = "/b15/pg/size/200000"          # 4 chunks of 64 KiB
        key = H.cache_key(p)
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        n0 = self.origin.request_count()
        cache_dir = self.daemon.cfg("cache", "dir")
        self.wait_files(key, 4)
        r, body = self.purge(p + "?x=1")   # the query is not part of the key
        self.assertStatus(r, 200)
        self.assertTrue(r.header("Content-Type", "").startswith("text/plain"), r)
        m = re.match(r"^purged (\d+)\n$", body)
        self.assertIsNotNone(m, "body %r" % body)
        self.assertEqual(int(m.group(1)), 4, body)
        self.assertEqual([k for k in H.chunk_index(cache_dir) if k[0] == key], [])
        self.wait_value("cacheparty_cache_purged_chunks_total", 4)
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertGreater(self.origin.request_count(), n0)
        # purging again finds nothing; another object is untouched
        self.assertEqual(self.purge("/b15/pg/other/size/10")[1], "purged 0\n")

    def test_purge_answers_in_order_when_its_files_are_gone(self):
        """The files go on the I/O pool: the answer waits for them, and a request sent behind
        the PURGE on the same connection is answered after it, the connection kept."""
        self.start({"cache": {"chunk_size": "64K"}})
        p = "/b15/pq/size/300000"          # 5 chunks of 64 KiB
        key = H.cache_key(p)
        self.assertBody(self.get(p), p)
        self.wait_files(key, 5)
        c = self.admin()
        c.send(H.build_request("PURGE", p, H.DEFAULT_HOST, (), "HTTP/1.1", b"") +
               H.build_request("GET", "/status", "127.0.0.1", (), "HTTP/1.1", b"") +
               H.build_request("PURGE", p, H.DEFAULT_HOST, (), "HTTP/1.1", b""),
               expect=["PURGE", "GET", "PURGE"])
        first, status, again = c.read_responses(3)
        self.assertEqual((first.status, bytes(first.body)), (200, b"purged 5\n"))
        self.assertEqual(status.status, 200)
        self.assertEqual(status.header("Content-Type"), "application/json")
        self.assertEqual((again.status, bytes(again.body)), (200, b"purged 0\n"))
        self.assertFalse(c.peer_closed)
        self.assertEqual([k for k in H.chunk_index(self.daemon.cfg("cache", "dir"))
                          if k[0] == key], [])
        self.wait_value("cacheparty_cache_purged_chunks_total", 5)
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.wait_files(key, 5)            # stored anew once the purge was done

    def test_purge_by_identifier(self):
        self.start()
        p = "/b15/pid/size/3000"
        self.assertBody(self.get(p), p)
        self.wait_files(H.cache_key(p), 1)
        # a wrong identifier removes nothing: still a hit
        r, body = self.purge(p + "?identifier=elsewhere.example")
        self.assertStatus(r, 200)
        self.assertEqual(body, "purged 0\n")
        r = self.get(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        n0 = self.origin.request_count()
        # the right one, percent-encoded; with ?identifier= the Host must be the admin's (a
        # name pointed at the admin address by a rebinding page is refused: nothing purged)
        ident = H.DEFAULT_HOST.replace(".", "%2E")
        r, body = self.purge(p + "?a=b&identifier=" + ident, host="admin.invalid")
        self.assertStatus(r, 403)
        self.assertEqual(self.get(p).header("X-Upstream-Cache-Status"), "HIT")
        r, body = self.purge(p + "?a=b&identifier=" + ident,
                             host="127.0.0.1:%d" % self.daemon.admin_port)
        self.assertStatus(r, 200)
        self.assertRegex(body, r"^purged [1-9]\d*\n$")
        r = self.get(p)
        self.assertBody(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(self.origin.request_count(), n0 + 1)
        for bad in ("?identifier=", "?identifier=a%0Ab", "?identifier=%zz"):
            self.assertStatus(self.purge(p + bad, host="localhost")[0], 400)

    def test_purge_uses_cache_domains_identifier(self):
        self.start({"domains": {"cache_domains": LISTS, "allow_unlisted": "no"}})
        p = "/b15/dom/size/1000"
        self.assertBody(self.get(p, host="level3.blizzard.com"), p)
        s = "/b15/dom/s/size/1000"
        self.assertBody(self.get(s, host="lancache.steamcontent.com"), s)
        self.wait_files(H.cache_key(p, "blizzard"), 1)
        self.wait_files(H.cache_key(s, "steam"), 1)
        n0 = self.origin.request_count()
        # unlisted host, no allow_unlisted: no identifier
        r, body = self.purge(p, host="unlisted.example")
        self.assertStatus(r, 404)
        self.assertIn("identifier", body)
        # another host of the same service names the same object
        r, body = self.purge(p, host="dist.blizzard.com")
        self.assertEqual((r.status, body), (200, "purged 1\n"))
        r, body = self.purge(s, host="x.y.steamcontent.com")
        self.assertEqual((r.status, body), (200, "purged 1\n"))
        self.assertEqual(self.purge(s + "?identifier=steam")[1], "purged 0\n")
        r = self.get(p, host="level3.blizzard.com")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertEqual(self.origin.request_count(), n0 + 1)

    def test_purge_steam_user_agent_rule(self):
        self.start({"domains": {"allow_unlisted": "no", "steam_user_agent": "yes"}})
        s = "/b15/ua/size/1000"
        self.assertBody(self.get(s, host="x.y.steamcontent.com", headers=[("User-Agent",
                                                                           STEAM_UA)]), s)
        self.wait_files(H.cache_key(s, "steam"), 1)
        # as for a client request: no identifier without the UA
        self.assertStatus(self.purge(s, host="z.steamcontent.com")[0], 404)
        r, body = self.purge(s, host="z.steamcontent.com", headers=[("User-Agent", STEAM_UA)])
        self.assertEqual((r.status, body), (200, "purged 1\n"))

    def test_purge_ip_literal_host_has_no_identifier_without_allow_private(self):
        # as for a client request (refused: nothing is stored under it), the host names no object
        self.start({"upstream": {"allow_private": "no"}})
        r, body = self.purge("/b15/ip/x", host="192.168.1.5")
        self.assertStatus(r, 404)
        self.assertIn("identifier", body)
        self.assertEqual(self.purge("/b15/ip/x?identifier=192.168.1.5")[1], "purged 0\n")

    # routing, methods, connections -----------------------------------------------------------
    def test_admin_endpoints_not_on_listen(self):
        d = self.start()
        self.assertIsNotNone(d.admin_port)
        self.assertNotEqual(d.admin_port, d.port)
        r = self.get("/b15/listen/x", method="PURGE")
        self.assertStatus(r, 405)
        self.assertEqual(r.tokens("Allow"), ["get", "head"])
        r = self.get("/metrics")       # proxied to the origin like any path
        self.assertNotIn(b"cacheparty_", bytes(r.body))
        self.assertNotEqual(r.header("Content-Type"), PROM_CTYPE)

    def test_unknown_paths_and_methods(self):
        self.start()
        self.assertStatus(self.admin_req("/nope"), 404)
        self.assertStatus(self.admin_req("/metrics/x"), 404)
        r = self.admin_req("/metrics", method="POST")
        self.assertStatus(r, 405)
        self.assertEqual(r.tokens("Allow"), ["get", "head"])
        self.assertStatus(self.admin_req("/other", method="DELETE"), 405)
        c = self.admin()
        c.request("/metrics", method="HEAD", host="127.0.0.1")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), b"")
        self.assertGreater(int(r.header("Content-Length")), 100)
        # absolute-form and a query string still name /metrics
        self.assertStatus(self.admin_req("http://127.0.0.1/metrics?x=1"), 200)
        self.assertEqual(self.daemon.status()["upstream_requests_total"], 0)

    def test_keepalive_pipelining_and_bad_heads(self):
        self.start()
        c = self.admin()
        for _ in range(3):
            c.request("/status", host="127.0.0.1")
            self.assertStatus(c.read_response(), 200)
        c.send(H.build_request("GET", "/nope", "127.0.0.1") +
               H.build_request("GET", "/metrics", "127.0.0.1") +
               H.build_request("GET", "/status", "127.0.0.1", headers=[("Connection", "close")]),
               expect=["GET"] * 3)
        rs = c.read_responses(3)
        self.assertEqual([r.status for r in rs], [404, 200, 200])
        self.assertClosed(c)
        # HTTP/1.0 without keep-alive: one answer, then close
        c = self.admin()
        c.request("/status", host="127.0.0.1", version="HTTP/1.0")
        self.assertStatus(c.read_response(), 200)
        self.assertClosed(c)
        # malformed heads are refused like on `listen`, then closed
        c = self.admin()
        c.send(b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", expect=["GET"])
        self.assertStatus(c.read_response(), 400)
        self.assertClosed(c)
        c = self.admin()
        c.send(b"GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (20 * H.KIB) + b"\r\n\r\n",
               expect=["GET"])
        self.assertStatus(c.read_response(), 431)
        self.assertClosed(c)
        # a request body is not read: answered, then closed
        c = self.admin()
        c.request("/x", method="PURGE", host="127.0.0.1",
                  headers=[("Content-Length", "5")], body=b"hello")
        self.assertStatus(c.read_response(), 200)
        self.assertClosed(c)
        self.assertTrue(self.daemon.running())

    def test_connection_limit(self):
        self.start()
        cs = []
        for _ in range(64):
            c = H.Client(self.daemon.admin_port)
            self._clients.append(c)
            c.request("/status", host="127.0.0.1")
            self.assertStatus(c.read_response(), 200)
            cs.append(c)
        extra = H.Client(self.daemon.admin_port)
        self._clients.append(extra)
        self.assertClosed(extra, what="the 65th admin connection")
        self.assertEqual(self.status_on(cs[0])["connections"]["admin"], 64)
        for c in cs[1:]:
            c.close()
        H.wait_until(lambda: self.status_on(cs[0])["connections"]["admin"] == 1, 5 * H.SLOW,
                     0.05, "admin connections to close")
        self.assertEqual(self.daemon.status()["connections"]["admin"], 2)

    def status_on(self, c):
        c.request("/status", host="127.0.0.1")
        return json.loads(bytes(c.read_response().body))

    def test_sigterm_with_idle_admin_connection(self):
        d = self.start({"server": {"shutdown_timeout": "20s"}})
        c = self.admin()
        c.request("/metrics", host="127.0.0.1")
        self.assertStatus(c.read_response(), 200)
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(5 * H.SLOW), 0, "the daemon did not exit promptly")
        self.assertClosed(c)

    def test_admin_port_taken_exits_2(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        try:
            cfg = H.default_config(self._tmp, H.free_port(), "127.0.0.1:53", "127.0.0.1:1")
            H.merge_config(cfg, {"server": {"admin_listen": "127.0.0.1:%d" % port}})
            path = os.path.join(self._tmp, "taken.ini")
            with open(path, "w") as f:
                f.write(H.render_ini(cfg))
            rc, out, err = H.run_binary(["-c", path], timeout=20)
        finally:
            s.close()
        self.assertEqual(rc, 2, "stdout: %s\nstderr: %s" % (out, err))
        lines = [x for x in err.splitlines() if "admin_listen" in x]
        self.assertEqual(len(lines), 1, err)
        self.assertIn(str(port), lines[0])


if __name__ == "__main__":
    raise SystemExit(H.main())
