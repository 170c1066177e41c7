# SPDX-License-Identifier: BSD-2-Clause
"""h01: a hostile client (issue #7, docs/interfaces.md "HTTP on `listen`"): every request-hardening and
origin-safety rule, one case each. Every case asserts the status, whether the daemon closed the
connection (Connection: close, then EOF), that the origin saw no request (nor connection) where
none is allowed, and that the daemon still serves a normal request afterwards.

The origin-safety cases without [upstream] override run in a network namespace of this file's
own (the file re-executes itself under `unshare -n`): its loopback also carries a "public"
address PUBLIC and the private 10.0.0.1, the origin listens on 0.0.0.0 there, so a connection
the daemon should not make would be seen. Those cases are skipped, with the reason, where no
network namespace can be made."""

import os
import shutil
import subprocess
import sys

NETNS_ENV = "CP_H01_NETNS"


def _reexec_in_netns():
    """Re-executes this file in a new network namespace (loopback up, two extra addresses)."""
    if os.environ.get(NETNS_ENV) or shutil.which("unshare") is None or shutil.which("ip") is None:
        return
    cmd = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    try:
        ok = subprocess.run(cmd + ["true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if ok:
        env = dict(os.environ)
        env[NETNS_ENV] = "1"
        os.execvpe(cmd[0], cmd + ["--", sys.executable] + sys.argv, env)
    os.environ[NETNS_ENV] = "none"


_reexec_in_netns()

import harness as H  # noqa: E402

PUBLIC = "11.22.33.44"      # not special-purpose: the daemon's checks let it through
PRIVATE_ON_LO = "10.0.0.1"  # private, and reachable in the namespace: a connection would succeed
LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
STEAM_UA = "Valve/Steam HTTP Client 1.0 (816)"


def setup_netns():
    """Loopback up plus PUBLIC and PRIVATE_ON_LO, once; returns None or why it cannot be used."""
    if os.environ.get(NETNS_ENV) != "1":
        return "no network namespace (unshare -n not permitted here)"
    for args in (["link", "set", "lo", "up"], ["addr", "add", PUBLIC + "/32", "dev", "lo"],
                 ["addr", "add", PRIVATE_ON_LO + "/32", "dev", "lo"]):
        p = subprocess.run(["ip"] + args, capture_output=True, text=True)
        if p.returncode != 0 and "exists" not in p.stderr:
            return "ip %s: %s" % (" ".join(args), p.stderr.strip())
    return None


NETNS_PROBLEM = setup_netns() if os.environ.get(NETNS_ENV) == "1" else \
    "no network namespace (unshare -n not permitted here)"

HOST = b"Host: game.example.test\r\n"
GET = b"GET /h01/size/10 HTTP/1.1\r\n"


def req(*lines, line=GET, end=b"\r\n"):
    return line + b"".join(lines) + end


# Malformed heads: name -> (bytes, status). All close the connection.
BAD = {
    # line endings
    "bare_lf_request_line": (b"GET /h01/size/10 HTTP/1.1\n" + HOST + b"\r\n", 400),
    "bare_lf_field": (req(b"Host: game.example.test\nX-A: 1\r\n"), 400),
    "bare_lf_end": (GET + HOST + b"\n", 400),
    "bare_cr_field": (req(HOST, b"X-A: a\rb\r\n"), 400),
    "lf_lf": (b"GET /h01/size/10 HTTP/1.1\nHost: game.example.test\n\n", 400),
    # obs-fold, also inside Transfer-Encoding and Host
    "obs_fold_space": (req(HOST, b"X-A: b\r\n c\r\n"), 400),
    "obs_fold_tab": (req(HOST, b"X-A: b\r\n\tc\r\n"), 400),
    "obs_fold_transfer_encoding": (req(HOST, b"Transfer-Encoding: identity\r\n chunked\r\n"), 400),
    "obs_fold_te_empty_first": (req(HOST, b"Transfer-Encoding:\r\n chunked\r\n"), 400),
    "obs_fold_host": (req(b"Host:\r\n game.example.test\r\n"), 400),
    "leading_space_first_field": (req(b" Host: game.example.test\r\n"), 400),
    # field names
    "space_before_colon": (req(HOST, b"X-Foo : 1\r\n"), 400),
    "tab_before_colon": (req(HOST, b"X-Foo\t: 1\r\n"), 400),
    "space_before_colon_host": (req(b"Host : game.example.test\r\n"), 400),
    "space_before_colon_te": (req(HOST, b"Transfer-Encoding : chunked\r\n"), 400),
    "space_in_name": (req(HOST, b"X Foo: 1\r\n"), 400),
    "empty_name": (req(HOST, b": 1\r\n"), 400),
    "no_colon": (req(HOST, b"XFoo\r\n"), 400),
    "at_in_name": (req(HOST, b"X@Foo: 1\r\n"), 400),
    "paren_in_name": (req(HOST, b"X(Foo): 1\r\n"), 400),
    "quote_in_name": (req(HOST, b"\"X\": 1\r\n"), 400),
    "slash_in_name": (req(HOST, b"X/Y: 1\r\n"), 400),
    "utf8_in_name": (req(HOST, b"X-\xc3\xa9: 1\r\n"), 400),
    "nul_in_name": (req(HOST, b"X\x00: 1\r\n"), 400),
    # control bytes in values and in the request line
    "soh_in_value": (req(HOST, b"X-Foo: a\x01b\r\n"), 400),
    "esc_in_value": (req(HOST, b"X-Foo: a\x1bb\r\n"), 400),
    "vt_in_value": (req(HOST, b"X-Foo: a\x0bb\r\n"), 400),
    "del_in_value": (req(HOST, b"X-Foo: a\x7fb\r\n"), 400),
    "nul_in_value": (req(HOST, b"X-Foo: a\x00b\r\n"), 400),
    "control_in_host": (req(b"Host: game\x01.example.test\r\n"), 400),
    "control_in_user_agent": (req(HOST, b"User-Agent: a\x1fb\r\n"), 400),
    "control_in_target": (req(HOST, line=b"GET /h01/a\x01b HTTP/1.1\r\n"), 400),
    "space_in_target": (req(HOST, line=b"GET /h01/a b HTTP/1.1\r\n"), 400),
    "tab_in_request_line": (req(HOST, line=b"GET\t/h01/size/10 HTTP/1.1\r\n"), 400),
    "two_spaces_request_line": (req(HOST, line=b"GET  /h01/size/10 HTTP/1.1\r\n"), 400),
    "trailing_space_request_line": (req(HOST, line=b"GET /h01/size/10 HTTP/1.1 \r\n"), 400),
    # Host: none, two, invalid
    "no_host_http11": (req(b"User-Agent: t\r\n"), 400),
    "no_host_http11_absolute_form": (req(line=b"GET http://game.example.test/h01/size/10 "
                                              b"HTTP/1.1\r\n"), 400),
    "no_host_http10": (req(line=b"GET /h01/size/10 HTTP/1.0\r\n"), 400),
    "two_host_same": (req(HOST, HOST), 400),
    "two_host_different": (req(HOST, b"Host: other.example.test\r\n"), 400),
    "two_host_case": (req(b"host: game.example.test\r\n", b"HOST: game.example.test\r\n"), 400),
    "two_host_absolute_form": (req(HOST, HOST, line=b"GET http://game.example.test/h01/size/10 "
                                                    b"HTTP/1.1\r\n"), 400),
    "host_list": (req(b"Host: a.example.test, b.example.test\r\n"), 400),
    "empty_host": (req(b"Host: \r\n"), 400),
    "host_space": (req(b"Host: bad host\r\n"), 400),
    "host_userinfo": (req(b"Host: user@game.example.test\r\n"), 400),
    "host_path": (req(b"Host: game.example.test/x\r\n"), 400),
    "host_backslash": (req(b"Host: game.example.test\\x\r\n"), 400),
    "host_percent": (req(b"Host: game%2eexample.test\r\n"), 400),
    "host_empty_label": (req(b"Host: game..example.test\r\n"), 400),
    "host_leading_dot": (req(b"Host: .example.test\r\n"), 400),
    "host_two_trailing_dots": (req(b"Host: example.test..\r\n"), 400),
    "host_port_zero": (req(b"Host: game.example.test:0\r\n"), 400),
    "host_port_too_big": (req(b"Host: game.example.test:65536\r\n"), 400),
    "host_port_empty": (req(b"Host: game.example.test:\r\n"), 400),
    "host_port_letters": (req(b"Host: game.example.test:8o\r\n"), 400),
    "host_two_ports": (req(b"Host: game.example.test:80:80\r\n"), 400),
    "host_v6_unclosed": (req(b"Host: [::1\r\n"), 400),
    "host_v6_bad": (req(b"Host: [zz::1]\r\n"), 400),
    "host_v6_unbracketed": (req(b"Host: ::1\r\n"), 400),
    "host_utf8": (req(b"Host: g\xc3\xa4me.example.test\r\n"), 400),
    "host_too_long": (req(b"Host: " + b"a" * 260 + b".test\r\n"), 400),
    "absolute_form_bad_authority": (req(HOST, line=b"GET http://a b/ HTTP/1.1\r\n"), 400),
    "absolute_form_userinfo": (req(HOST, line=b"GET http://u:p@game.example.test/ "
                                              b"HTTP/1.1\r\n"), 400),
    "absolute_form_https": (req(HOST, line=b"GET https://game.example.test/ HTTP/1.1\r\n"), 400),
    # versions
    "http09_simple_request": (b"GET /h01/size/10\r\n\r\n", 400),
    "http09_version": (req(HOST, line=b"GET /h01/size/10 HTTP/0.9\r\n"), 505),
    "http20": (req(HOST, line=b"GET /h01/size/10 HTTP/2.0\r\n"), 505),
    "http12": (req(HOST, line=b"GET /h01/size/10 HTTP/1.2\r\n"), 505),
    "http30": (req(HOST, line=b"GET /h01/size/10 HTTP/3.0\r\n"), 505),
    "h2_preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    "version_lowercase": (req(HOST, line=b"GET /h01/size/10 http/1.1\r\n"), 400),
    "version_two_digit_minor": (req(HOST, line=b"GET /h01/size/10 HTTP/1.10\r\n"), 400),
    "version_no_dot": (req(HOST, line=b"GET /h01/size/10 HTTP/11\r\n"), 400),
    "version_garbage": (req(HOST, line=b"GET /h01/size/10 HTTX/1.1\r\n"), 400),
    # framing on GET/HEAD
    "te_chunked_on_get": (req(HOST, b"Transfer-Encoding: chunked\r\n", end=b"\r\n0\r\n\r\n"), 400),
    "te_identity_on_get": (req(HOST, b"Transfer-Encoding: identity\r\n"), 400),
    "te_empty_on_get": (req(HOST, b"Transfer-Encoding: \r\n"), 400),
    "te_on_head": (req(HOST, b"Transfer-Encoding: chunked\r\n", end=b"\r\n0\r\n\r\n",
                       line=b"HEAD /h01/size/10 HTTP/1.1\r\n"), 400),
    "body_on_get": (req(HOST, b"Content-Length: 5\r\n", end=b"\r\nhello"), 400),
    "body_on_head": (req(HOST, b"Content-Length: 5\r\n", end=b"\r\nhello",
                         line=b"HEAD /h01/size/10 HTTP/1.1\r\n"), 400),
    "cl_and_te_on_get": (req(HOST, b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"), 400),
    "cl_negative": (req(HOST, b"Content-Length: -1\r\n"), 400),
    "cl_hex": (req(HOST, b"Content-Length: 0x0\r\n"), 400),
    "cl_two_different": (req(HOST, b"Content-Length: 0\r\nContent-Length: 1\r\n"), 400),
    "cl_list_different": (req(HOST, b"Content-Length: 0, 1\r\n"), 400),
    "cl_overflow": (req(HOST, b"Content-Length: 99999999999999999999999\r\n"), 400),
    "cl_and_te_on_post": (req(HOST, b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                              line=b"POST /h01/x HTTP/1.1\r\n", end=b"\r\n0\r\n\r\n"), 400),
    # garbage
    "tls_client_hello": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 32, 400),
    "request_line_only_method": (b"GET\r\n\r\n", 400),
    "empty_method": (req(HOST, line=b" /h01/size/10 HTTP/1.1\r\n"), 400),
    "nonascii_method": (req(HOST, line=b"G\xc3\x89T /h01/size/10 HTTP/1.1\r\n"), 400),
    "asterisk_form_get": (req(HOST, line=b"GET * HTTP/1.1\r\n"), 400),
    "authority_form_get": (req(HOST, line=b"GET game.example.test:80 HTTP/1.1\r\n"), 400),
    # size limits
    "target_8193_414": (req(HOST, line=b"GET /" + b"a" * 8192 + b" HTTP/1.1\r\n"), 414),
    "target_endless_414": (b"GET /" + b"a" * 20000, 414),
    "head_over_32k_431": (req(HOST, *[b"X-Pad-%02d: %s\r\n" % (i, b"p" * 1000)
                                      for i in range(40)]), 431),
    "one_field_over_32k_431": (req(HOST, b"X-Big: " + b"b" * 33000 + b"\r\n"), 431),
    "endless_head_431": (GET + HOST + b"X-Pad: " + b"p" * 40000, 431),
    "fields_101_431": (req(HOST, *[b"X-F%d: v\r\n" % i for i in range(100)]), 431),
}

# Requests refused without closing: name -> (bytes, status, Allow expected)
METHODS = {
    "connect": (b"CONNECT game.example.test:443 HTTP/1.1\r\n" + HOST + b"\r\n", 405, True),
    "connect_ip": (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", 405, True),
}


class RequestHardening(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def assertServesNormally(self, c=None):
        """A normal request is served (on <c> when given, else on a new connection)."""
        c = c or self.client()
        c.request("/h01/ok/size/1000")
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/h01/ok/size/1000")
        return r

    def refused(self, data, status, what):
        """Sends <data>; asserts <status>, Connection: close, EOF, no origin request."""
        before = self.origin.request_count()
        conns = self.origin.connections
        c = self.client()
        try:
            c.send(data, expect=["GET"])
        except OSError:
            pass    # the daemon may refuse and close before taking all of a huge head
        try:
            r = c.read_response()
        except H.ProtocolError as e:
            self.fail("%s: no %d response: %s" % (what, status, e))
        self.assertStatus(r, status)
        self.assertProcessedBy(r)
        self.assertIn("close", r.tokens("Connection"), "%s: no Connection: close" % what)
        self.assertClosed(c, what="%s: connection after %d" % (what, status))
        self.assertEqual(len(c._ready), 0, "%s: more than one response" % what)
        self.assertEqual(self.origin.request_count(), before, "%s reached the origin" % what)
        self.assertEqual(self.origin.connections, conns, "%s: origin connection made" % what)
        return r

    def test_malformed_heads_refused_and_closed(self):
        for name, (data, status) in BAD.items():
            with self.subTest(case=name):
                self.refused(data, status, name)
                self.assertServesNormally()

    def test_connect_refused_405_and_closed(self):
        for name, (data, status, allow) in METHODS.items():
            with self.subTest(case=name):
                r = self.refused(data, status, name)
                self.assertEqual(r.header("Allow"), "GET, HEAD")
                self.assertServesNormally()

    def test_pipelined_bytes_after_refusal_not_processed(self):
        good = b"GET /h01/p1/size/10 HTTP/1.1\r\n" + HOST + b"\r\n"
        for name, bad in (("bare_lf", b"GET /h01/size/10 HTTP/1.1\n" + HOST + b"\r\n"),
                          ("http20", b"GET / HTTP/2.0\r\n" + HOST + b"\r\n"),
                          ("te_on_get", req(HOST, b"Transfer-Encoding: chunked\r\n",
                                            end=b"\r\n0\r\n\r\n")),
                          ("connect", METHODS["connect"][0])):
            with self.subTest(case=name):
                # the bad head and good ones in one segment, then more after the answer
                c = self.client()
                c.send(bad + good * 3, expect=["GET"])
                r = c.read_response()
                self.assertIn(r.status, (400, 405, 505))
                try:
                    c.sock.sendall(good)
                except OSError:
                    pass
                self.assertClosed(c, what="connection after a refusal")
                self.assertEqual(len(c._ready), 0, "a pipelined request after %s was answered"
                                 % name)
                self.assertEqual(self.origin.request_count(), 0)
        self.assertServesNormally()

    def test_pipelined_good_then_bad(self):
        c = self.client()
        c.send(b"GET /h01/g1/size/100 HTTP/1.1\r\n" + HOST + b"\r\n" +
               b"GET /h01/g2/size/100 HTTP/1.1\r\n" + HOST + HOST + b"\r\n" +
               b"GET /h01/g3/size/100 HTTP/1.1\r\n" + HOST + b"\r\n", expect=["GET", "GET"])
        r1, r2 = c.read_responses(2)
        self.assertBody(r1, "/h01/g1/size/100")
        self.assertStatus(r2, 400)
        self.assertClosed(c)
        self.assertEqual([q.path for q in self.origin.requests], ["/h01/g1/size/100"])

    def test_limits_at_the_boundary_served(self):
        # a request-target of exactly 8192 bytes, exactly 100 fields, a head of exactly 32 KiB
        target = "/h01/lim/size/10?" + "q" * (8192 - len("/h01/lim/size/10?"))
        self.assertEqual(len(target), 8192)
        c = self.client()
        c.request(target)
        self.assertBody(c.read_response(), "/h01/lim/size/10")
        c.request("/h01/lim/size/10", headers=[("X-F%d" % i, "v") for i in range(99)])
        self.assertBody(c.read_response(), "/h01/lim/size/10")
        base = H.build_request("GET", "/h01/lim/size/10", headers=[("X-Pad", "")])
        pad = 32 * 1024 - len(base)
        c.request("/h01/lim/size/10", headers=[("X-Pad", "p" * pad)])
        self.assertBody(c.read_response(), "/h01/lim/size/10")
        self.assertTrue(c.is_open())

    def test_upgrade_ignored(self):
        for hdrs in ([("Connection", "Upgrade"), ("Upgrade", "websocket"),
                      ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                      ("Sec-WebSocket-Version", "13")],
                     [("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"),
                      ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")]):
            with self.subTest(upgrade=hdrs[1][1]):
                c = self.client()
                c.request("/h01/up/size/100", headers=hdrs)
                r = c.read_response()
                self.assertStatus(r, 200)
                self.assertBody(r, "/h01/up/size/100")
                self.assertFalse(r.has("Upgrade"))
                q = self.origin.last()
                self.assertIsNone(q.header("Upgrade"))
                self.assertIsNone(q.header("HTTP2-Settings"))
                self.assertIsNone(q.header("Sec-WebSocket-Key"))
                # still HTTP on the same connection
                self.assertServesNormally(c)

    def test_leading_empty_lines_allowed(self):
        c = self.client()
        c.send(b"\r\n\r\n" + b"GET /h01/e/size/10 HTTP/1.1\r\n" + HOST + b"\r\n", expect=["GET"])
        self.assertBody(c.read_response(), "/h01/e/size/10")


IP_LITERALS = [
    "127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "0x7F.0.0.1", "127.1", "127.0.1",
    "0x7f000001", "017700000001", "0177.1", "127.0.0.1.", "10.0.0.1", "0xa.1", "169.254.169.254",
    "0xa9fea9fe", "8.8.8.8", "134744072", "[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]", "[::FFFF:10.0.0.1]", "[fe80::1]", "[2001:4860:4860::8888]", "[::]",
    "0", "0.0.0.0",
]


class IpLiterals(H.CPTestCase):
    """IP literals in any spelling: 403 without allow_private (the override is trusted as
    configured, so these run with one); the connection stays usable."""

    def test_ip_literal_hosts_refused(self):
        self.setup_proxy({"upstream": {"allow_private": "no"}})
        c = self.client()
        for lit in IP_LITERALS:
            for form in ("host", "host_port", "absolute"):
                with self.subTest(literal=lit, form=form):
                    if form == "host":
                        c.request("/h01/ip/size/10", host=lit)
                    elif form == "host_port":
                        c.request("/h01/ip/size/10", host="%s:8080" % lit)
                    else:
                        c.send(("GET http://%s/h01/ip/size/10 HTTP/1.1\r\nHost: %s\r\n\r\n"
                                % (lit, H.DEFAULT_HOST)).encode(), expect=["GET"])
                    r = c.read_response()
                    self.assertStatus(r, 403)
                    self.assertProcessedBy(r)
                    self.assertNotIn("close", r.tokens("Connection"))
                    self.assertTrue(c.is_open(0.05))
        self.assertEqual(self.origin.request_count(), 0)
        self.assertEqual(self.origin.connections, 0)
        # names are still served, on the same connection
        c.request("/h01/name/size/10")
        self.assertBody(c.read_response(), "/h01/name/size/10")

    def test_ip_literal_allowed_with_allow_private(self):
        self.setup_proxy({"upstream": {"allow_private": "yes"}})
        for lit in ("127.0.0.1", "0x7f.1", "[::1]"):
            with self.subTest(literal=lit):
                r = self.get("/h01/ipok/size/10", host=lit)
                self.assertBody(r, "/h01/ipok/size/10")


class Admission(H.CPTestCase):
    """Hosts outside the lists, and the Steam User-Agent rule outside steamcontent.com. The lists
    here name only blizzard hosts, so that steamcontent.com hosts depend on the UA rule alone."""

    def lists(self):
        d = os.path.join(self._tmp, "lists")
        os.makedirs(d)
        with open(os.path.join(d, "cache_domains.json"), "w") as f:
            f.write('{"cache_domains": [{"name": "blizzard", "domain_files": ["b.txt"]}]}\n')
        with open(os.path.join(d, "b.txt"), "w") as f:
            f.write("level3.blizzard.com\n*.cdn.blizzard.com\n")
        return d

    def test_unlisted_and_steam_ua_elsewhere_refused(self):
        self.setup_proxy({"domains": {"cache_domains": self.lists(), "allow_unlisted": "no"}})
        c = self.client()
        for host in ("intranet.example", "steamcontent.com", "steamcontent.com.evil.test",
                     "evilsteamcontent.com", "steamcontent.com.", "xsteamcontent.com",
                     "steamcontent.co", "a.steamcontent.com.evil.test:8080", "localhost",
                     "metadata.google.internal", "cdn.blizzard.com", "blizzard.com"):
            for ua in (None, STEAM_UA, "x " + STEAM_UA + " y"):
                with self.subTest(host=host, ua=ua):
                    c.request("/h01/st/size/10", host=host,
                              headers=[("User-Agent", ua)] if ua else [])
                    r = c.read_response()
                    self.assertStatus(r, 403)
                    self.assertTrue(c.is_open(0.05))
        self.assertEqual(self.origin.request_count(), 0)
        # the rule itself works, only with Valve's UA; listed hosts need no UA
        c.request("/h01/st/size/10", host="x.steamcontent.com", headers=[("User-Agent", STEAM_UA)])
        self.assertBody(c.read_response(), "/h01/st/size/10")
        c.request("/h01/st2/size/10", host="x.steamcontent.com")
        self.assertStatus(c.read_response(), 403)
        c.request("/h01/st3/size/10", host="a.cdn.blizzard.com")
        self.assertBody(c.read_response(), "/h01/st3/size/10")

    def test_steam_ua_rule_disabled(self):
        self.setup_proxy({"domains": {"cache_domains": self.lists(), "allow_unlisted": "no",
                                      "steam_user_agent": "no"}})
        r = self.get("/h01/st/size/10", host="x.steamcontent.com",
                     headers=[("User-Agent", STEAM_UA)])
        self.assertStatus(r, 403)
        self.assertEqual(self.origin.request_count(), 0)


PRIVATE_V4 = ["127.0.0.1", "127.8.9.10", "10.0.0.1", "10.255.255.254", "172.16.0.1",
              "172.31.255.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "100.127.255.254",
              "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "240.0.0.1",
              "255.255.255.255", "192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.1",
              "203.0.113.1", "192.88.99.1"]
PRIVATE_V6 = ["::1", "::", "fe80::1", "febf::1", "fc00::1", "fd12:3456::1", "ff02::1",
              "ff05::2", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
              "::ffff:192.168.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a00:1",
              "2002:7f00:1::1", "2002:c0a8:101::1", "2001:db8::1", "fec0::1", "100::1"]


class OriginSafety(H.CPTestCase):
    """Names resolving to special-purpose addresses, the checked address is the one connected
    to, redirects only to hosts passing the same checks. No override: the daemon connects where
    DNS says, inside this file's network namespace."""

    def setUp(self):
        super().setUp()
        if NETNS_PROBLEM:
            self.skipTest(NETNS_PROBLEM)
        self.origin = H.Origin(bind="0.0.0.0")
        self._origins.append(self.origin)
        self.port = self.origin.port
        self.local_addrs = []   # the address each origin connection was made to

        def record(ex):
            self.local_addrs.append(ex.conn.sock.getsockname()[0])
            H.default_handler(ex)
        self.origin.handler = record
        recs = {"public.example.test": [PUBLIC]}
        for i, a in enumerate(PRIVATE_V4 + PRIVATE_V6):
            recs["p%d.example.test" % i] = [a]
        recs["mixed.example.test"] = [PRIVATE_ON_LO, PUBLIC, "::1"]
        recs["mixed6.example.test"] = ["::1", PUBLIC]
        recs["allpriv.example.test"] = [PRIVATE_ON_LO, "127.0.0.1", "::1", "::ffff:10.0.0.1"]
        self.dns = self.start_dns(recs)
        self.daemon = self.start_daemon({"upstream": {"override": None, "allow_private": "no"}},
                                        origin=None, dns=self.dns)

    def host(self, name):
        return "%s:%d" % (name, self.port)

    def test_public_name_served_from_checked_address(self):
        r = self.get("/h01/pub/size/1000", host=self.host("public.example.test"))
        self.assertBody(r, "/h01/pub/size/1000")
        self.assertEqual(self.local_addrs, [PUBLIC])

    def test_names_resolving_to_special_addresses_refused(self):
        c = self.client()
        for i, a in enumerate(PRIVATE_V4 + PRIVATE_V6):
            with self.subTest(address=a):
                c.request("/h01/priv%d/size/10" % i, host=self.host("p%d.example.test" % i))
                r = c.read_response()
                self.assertStatus(r, 403)
                self.assertProcessedBy(r)
                self.assertTrue(c.is_open(0.05))
        self.assertEqual(self.origin.connections, 0, "the daemon connected to %s"
                         % self.local_addrs)
        c.request("/h01/after/size/10", host=self.host("public.example.test"))
        self.assertBody(c.read_response(), "/h01/after/size/10")

    def test_only_the_checked_address_is_connected(self):
        for name in ("mixed.example.test", "mixed6.example.test"):
            with self.subTest(name=name):
                r = self.get("/h01/%s/size/5000" % name, host=self.host(name))
                self.assertBody(r, "/h01/%s/size/5000" % name)
        self.assertEqual(set(self.local_addrs), {PUBLIC})
        r = self.get("/h01/allpriv/size/10", host=self.host("allpriv.example.test"))
        self.assertStatus(r, 403)
        self.assertEqual(set(self.local_addrs), {PUBLIC})

    def test_uncached_path_checks_too(self):
        # Authorization means bypass: the forwarding path has its own checks
        for host in ("p0.example.test", "allpriv.example.test"):
            with self.subTest(host=host):
                r = self.get("/h01/auth/size/10", host=self.host(host),
                             headers=[("Authorization", "Bearer x")])
                self.assertStatus(r, 403)
        self.assertEqual(self.origin.connections, 0)
        r = self.get("/h01/auth/size/10", host=self.host("public.example.test"),
                     headers=[("Authorization", "Bearer x")])
        self.assertBody(r, "/h01/auth/size/10")

    def redirect_route(self, path, loc):
        def h(ex):
            self.local_addrs.append(ex.conn.sock.getsockname()[0])
            ex.send(302, b"moved", [("Location", loc)])
        self.origin.route(path, h)

    def check_redirect_refused(self, i, loc, statuses):
        path = "/h01/redir%d/" % i
        self.redirect_route(path, loc)
        for attempt in range(2):
            n = self.origin.request_count()
            r = self.get(path, host=self.host("public.example.test"))
            self.assertIn(r.status, statuses, r)
            if r.status == 302:
                self.assertEqual(r.header("Location"), loc)
                self.assertEqual(bytes(r.body), b"moved")
            # never cached: asked again, the origin is asked again; never followed
            self.assertGreater(self.origin.request_count(), n)
            self.assertEqual({q.path for q in self.origin.requests[n:]}, {path})
        self.assertEqual(set(self.local_addrs), {PUBLIC})

    def test_redirects_to_ip_literals_passed_through(self):
        for i, lit in enumerate(["127.0.0.1", PRIVATE_ON_LO, "0x7f.1", "2130706433", "0177.1",
                                 "[::1]", "[::ffff:127.0.0.1]", PUBLIC]):
            for j, fmt in enumerate(("http://%s:%d/h01/final/size/100",
                                     "//%s:%d/h01/final/size/100")):
                loc = fmt % (lit, self.port)
                with self.subTest(location=loc):
                    self.check_redirect_refused(i * 2 + j, loc, (302,))

    def test_redirects_to_names_resolving_private_not_followed(self):
        # docs/interfaces.md: a redirect target that fails the checks is passed through to the
        # client uncached (302), and nothing but the checked address is connected to.
        for i, name in enumerate(["p0.example.test", "p2.example.test", "allpriv.example.test",
                                  "p%d.example.test" % (len(PRIVATE_V4) + 8)]):
            loc = "http://%s:%d/h01/final/size/100" % (name, self.port)
            with self.subTest(location=loc):
                self.check_redirect_refused(100 + i, loc, (302,))

    def test_redirect_to_allowed_host_followed(self):
        loc = "http://public.example.test:%d/h01/okfinal/size/3000" % self.port
        self.origin.route("/h01/okredir", lambda ex: ex.send(302, b"", [("Location", loc)]))
        r = self.get("/h01/okredir", host=self.host("public.example.test"))
        self.assertStatus(r, 200)
        self.assertBody(r, "/h01/okfinal/size/3000")
        self.assertEqual(self.origin.request_count(), 2)


if __name__ == "__main__":
    raise SystemExit(H.main())
