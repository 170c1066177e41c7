# SPDX-License-Identifier: BSD-2-Clause
"""b19: the cachelog as the dashboards that parse lancache's read it (issue 17). A mixed traffic
log (HIT, MISS, ranges, the heartbeat, 403, 404, 508, 400, HEAD, a query string, user agents with
'"', '\\', a trailing '\\', bytes >= 0x80, brackets and braces, X-Forwarded-For, a Host with
:80) is read back with each parser's rules, reimplemented here from their documented behaviour:
  - the contract's line regex (15 fields);
  - lancache-manager's line regex, which needs the literal "/ - - -", and its quoted-field reader;
  - DeveLanCacheUI's tokenizer: 15 tokens split at spaces, where "...", [...], (...) and {...} are
    one token each and '\\' escapes the next character;
  - lancache-stats' regex, whose cache status is HIT, MISS or -;
  - Lancache-Monitoring's line regex (any four words between the client and the date, the
    request's method and URI, status, bytes, then the cache status and host as the 3rd and 4th of
    the five quoted fields) and its time layout (nginx's $time_local), with ::ffff: stripped.
Every field must come back equal to what was sent, once nginx's \\xHH escapes are undone; HOST is
the Host lowercased without its port; the identifier of an answer with no service is the Host."""

import datetime
import json
import os
import re
import socket

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
HOST = "level3.blizzard.com"

CONTRACT_RE = re.compile(r'^\[(\S+)\] (\S+) / (\S+) - (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) '
                         r'"([^"]*)" "([^"]*)" "([A-Z]+|-)" "([^"]*)" "([^"]*)"$')
LM_RE = re.compile(r'^\[(?P<svc>[^\]]+)\] (?P<ip>\S+) / - - - \[(?P<time>[^\]]+)\] (?P<rest>.*)$')
STATS_RE = re.compile(r'^\[(\S+)\] (\S+) / \S+ - \S+ \[([^\]]+)\] "(\S+) (\S+) ([^"]+)" (\d{3}) '
                      r'(\d+) "([^"]*)" "([^"]*)" "(HIT|MISS|-)" "([^"]*)" "([^"]*)"$')

MON_RE = re.compile(r'^\[\S+\] (\S+) \S+ \S+ \S+ \S+ \[([^\]]+)\] "(\S+) (\S+)[^"]*" (\d+) (\d+) '
                    r'"[^"]*" "[^"]*" "([^"]*)" "([^"]*)" "[^"]*"')


def monitoring(line):
    """Lancache-Monitoring's parse: (client, time, method, uri, status, bytes, cache, host) or
    None when its regex or its time layout refuses the line."""
    m = MON_RE.match(line)
    if m is None:
        return None
    try:
        t = datetime.datetime.strptime(m.group(2), "%d/%b/%Y:%H:%M:%S %z")
    except ValueError:
        return None
    addr = m.group(1)
    if addr.startswith("::ffff:") and "." in addr:
        addr = addr[7:]
    return (addr, t, m.group(3), m.group(4), int(m.group(5)), int(m.group(6)), m.group(7),
            m.group(8))


UAS = ['plain/1.0', 'quote"inside', 'back\\slash', 'trailing\\', 'caf\xe9 \xff',
       'brackets [x] {y} (z)']


def unescape(s):
    """nginx's \\xHH back to bytes (as latin-1 text, which is how the requests were sent)."""
    return re.sub(r'\\x([0-9A-F]{2})', lambda m: chr(int(m.group(1), 16)), s)


def quoted_fields(rest):
    """lancache-manager's reader: the quoted fields and bare numbers of the rest of the line."""
    out, i = [], 0
    while i < len(rest):
        if rest[i] == ' ':
            i += 1
        elif rest[i] == '"':
            j = rest.index('"', i + 1)
            out.append(rest[i + 1:j])
            i = j + 1
        else:
            j = rest.find(' ', i)
            j = len(rest) if j < 0 else j
            out.append(rest[i:j])
            i = j
    return out


def develan_tokens(line):
    """DeveLanCacheUI's split: grouped tokens, '\\' escaping the next character."""
    closing = {'"': '"', '[': ']', '(': ')', '{': '}'}
    toks, i = [], 0
    while i < len(line):
        if line[i] == ' ':
            i += 1
            continue
        start = i
        if line[i] in closing:
            end = closing[line[i]]
            i += 1
            while i < len(line) and line[i] != end:
                i += 2 if line[i] == '\\' else 1
            i += 1
        else:
            while i < len(line) and line[i] != ' ':
                i += 2 if line[i] == '\\' else 1
        toks.append(line[start:i])
    return toks


class CachelogParsers(H.CPTestCase):
    def lines(self, n):
        d = self.daemon
        return H.wait_until(lambda: len(d.access_lines()) >= n and d.access_lines(),
                            10 * H.SLOW, 0.05, "%d access log lines" % n)

    def test_mixed_traffic_parses_in_every_parser(self):
        self.setup_proxy({"domains": {"cache_domains": LISTS, "allow_unlisted": "no"}})
        self.origin.route("/b19/missing", lambda ex: ex.send(404, b"no\n"))
        sent = []  # (target, method, host, headers, status, cache_status, ident)

        def req(target, method="GET", host=HOST, headers=(), status=200, cs="MISS",
                ident="blizzard"):
            c = self.client()
            c.request(target, method, host, list(headers))
            r = c.read_response()
            self.assertStatus(r, status)
            sent.append((target, method, host, dict(headers), status, cs,
                         ident if ident is not None else host))  # None: no service, the Host

        for i, ua in enumerate(UAS):
            req("/b19/obj%d/size/100" % i, headers=[("User-Agent", ua), ("Referer", ua)])
        req("/b19/obj0/size/100", headers=[("User-Agent", "again")], cs="HIT")
        req("/b19/obj1/size/100?query=1&x=%22", headers=[("Range", "bytes=0-9")], status=206,
            cs="HIT")
        req("/b19/obj2/size/100", method="HEAD", cs="HIT")
        req("/b19/obj3/size/100", host="Level3.Blizzard.COM:80", cs="HIT")
        req("/b19/obj4/size/100", headers=[("X-Forwarded-For", "10.9.8.7")], cs="HIT")
        req("/lancache-heartbeat", status=204, cs="-", ident=None)
        req("/b19/missing/x", status=404, cs="MISS")
        req("/b19/loop", headers=[("X-LanCache-Processed-By", H.HOSTNAME)], status=508, cs="-",
            ident=None)
        req("/b19/unlisted", host="Unlisted.Example.test:80", status=403, cs="-", ident=None)
        c = self.client()
        c.send(b"GET /b19/bad HTTP/1.1\r\nHost: Game.example.test\r\nBad Header: x\r\n\r\n",
               expect=["GET"])
        self.assertStatus(c.read_response(), 400)
        lines = self.lines(len(sent) + 1)
        self.assertEqual(len(lines), len(sent) + 1)
        for line in lines:
            self.assertTrue(all(0x20 <= ord(ch) < 0x7f for ch in line), line)
            self.assertEqual(len(develan_tokens(line)), 15, (line, develan_tokens(line)))
            m = CONTRACT_RE.match(line)
            if "10.9.8.7" not in line:
                self.assertIsNotNone(m, line)
                lm = LM_RE.match(line)
                self.assertIsNotNone(lm, line)
                self.assertEqual(len(quoted_fields(lm.group("rest"))), 8, line)
        for line, (target, method, host, hdrs, status, cs, ident) in zip(lines, sent):
            toks = develan_tokens(line)
            self.assertEqual(unescape(toks[0][1:-1]), ident, line)
            self.assertEqual(toks[1], "127.0.0.1")
            self.assertEqual(toks[3], hdrs.get("X-Forwarded-For", "-"))
            self.assertEqual(unescape(toks[7][1:-1]), "%s %s HTTP/1.1" % (method, target))
            self.assertEqual(toks[8], str(status))
            self.assertEqual(unescape(toks[10][1:-1]), hdrs.get("Referer", "-"))
            self.assertEqual(unescape(toks[11][1:-1]), hdrs.get("User-Agent", "-"))
            self.assertEqual(toks[12], '"%s"' % cs, line)
            self.assertEqual(toks[13][1:-1], host.lower().split(":")[0], line)
            self.assertEqual(toks[14][1:-1], hdrs.get("Range", "-"))
            if cs in ("HIT", "MISS", "-"):
                s = STATS_RE.match(line)
                self.assertIsNotNone(s, line)
                self.assertEqual(unescape(s.group(5)), target)
            mon = monitoring(line)
            self.assertIsNotNone(mon, line)
            self.assertEqual(mon[0], "127.0.0.1")
            self.assertEqual((mon[2], unescape(mon[3]), mon[4], mon[6]),
                             (method, target, status, cs), line)
            self.assertEqual(mon[7], host.lower().split(":")[0])
        # the 400's line: a head that did not parse has no Host to name, nor a request line
        toks = develan_tokens(lines[-1])
        self.assertEqual(toks[0], "[-]")
        self.assertEqual(toks[8], "400")
        self.assertEqual(toks[12], '"-"')
        # what nginx writes for each special byte
        ua_line = lines[1]
        self.assertIn('"quote\\x22inside"', ua_line)
        self.assertIn('"trailing\\x5C"', lines[3])
        self.assertIn('"caf\\xE9 \\xFF"', lines[4])

    def test_ipv6_client_line_parses_in_every_parser(self):
        try:
            probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            probe.bind(("::1", 0))
            probe.close()
        except OSError:
            self.skipTest("no IPv6 loopback here")
        port6 = H.free_port()
        self.setup_proxy({"server": {"listen": "127.0.0.1:%d, [::1]:%d" % (H.free_port(), port6)},
                          "domains": {"cache_domains": LISTS, "allow_unlisted": "no"}})
        # (the daemon opens its listeners one after the other: wait for the second)
        def connect():
            try:
                return H.Client(port6, host="::1")
            except ConnectionRefusedError:
                return None
        c = H.wait_until(connect, 10 * H.SLOW, 0.02, "the [::1] listener")
        self._clients.append(c)
        c.request("/b19/v6/size/100", host=HOST, headers=[("User-Agent", "v6 client")])
        r = c.read_response()
        self.assertStatus(r, 200)
        line = self.lines(1)[0]
        toks = develan_tokens(line)
        self.assertEqual(len(toks), 15, line)
        self.assertEqual(toks[1], "::1")
        self.assertIsNotNone(CONTRACT_RE.match(line), line)
        lm = LM_RE.match(line)
        self.assertIsNotNone(lm, line)
        self.assertEqual(lm.group("ip"), "::1")
        self.assertEqual(len(quoted_fields(lm.group("rest"))), 8, line)
        s = STATS_RE.match(line)
        self.assertIsNotNone(s, line)
        self.assertEqual(s.group(2), "::1")
        mon = monitoring(line)
        self.assertIsNotNone(mon, line)
        self.assertEqual((mon[0], mon[2], mon[3], mon[4], mon[5], mon[6], mon[7]),
                         ("::1", "GET", "/b19/v6/size/100", 200, 100, "MISS", HOST))

    def test_json_has_monolithics_keys(self):
        self.setup_proxy({"log": {"access_format": "json"}})
        c = self.client()
        c.request("/b19/j/size/10?q=1", headers=[("User-Agent", "caf\xe9 \"x\" \\"),
                                                 ("X-Forwarded-For", "10.0.0.1"),
                                                 ("Range", "bytes=0-4")])
        self.assertStatus(c.read_response(), 206)
        c.request("/lancache-heartbeat", host="Game.Example.Test:80")
        self.assertStatus(c.read_response(), 204)
        lines = self.lines(2)
        keys = ["timestamp", "time_local", "cache_identifier", "remote_addr", "forwarded_for",
                "remote_user", "status", "bytes_sent", "referer", "user_agent",
                "upstream_cache_status", "host", "http_range", "method", "path", "proto",
                "scheme"]
        a = json.loads(lines[0])
        self.assertEqual(list(a.keys()), keys)
        self.assertRegex(a["timestamp"], r"^\d+\.\d{3}$")
        self.assertEqual(a["cache_identifier"], "game.example.test")
        self.assertEqual(a["forwarded_for"], "10.0.0.1")
        self.assertEqual(a["remote_user"], "")
        self.assertEqual(a["status"], "206")
        self.assertEqual(a["bytes_sent"], 5)
        self.assertEqual(a["referer"], "")
        self.assertEqual(a["user_agent"], "caf\xe9 \"x\" \\")  # the lone 0xE9 as U+00E9
        self.assertEqual(a["upstream_cache_status"], "MISS")
        self.assertEqual(a["host"], "game.example.test")
        self.assertEqual(a["http_range"], "bytes=0-4")
        self.assertEqual((a["method"], a["path"], a["proto"], a["scheme"]),
                         ("GET", "/b19/j/size/10?q=1", "HTTP/1.1", "http"))
        b = json.loads(lines[1])
        self.assertEqual(list(b.keys()), keys)
        self.assertEqual(b["cache_identifier"], "Game.Example.Test:80")  # $http_host
        self.assertEqual(b["host"], "game.example.test")
        self.assertEqual(b["upstream_cache_status"], "")
        self.assertEqual(b["status"], "204")


if __name__ == "__main__":
    raise SystemExit(H.main())
