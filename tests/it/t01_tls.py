# SPDX-License-Identifier: BSD-2-Clause
"""t01: the TLS passthrough on [tls] passthrough_listen (issue #9).

A real handshake through the relay (openssl s_client to openssl s_server: byte-exact both ways,
the client sees the origin's own certificate), Python ssl clients and origins for bulk transfers
both ways with a slow reader (daemon memory bounded), and raw ClientHello bytes (made by Python's
ssl over a MemoryBIO, so they are what OpenSSL really sends) for the refusals: no SNI, unlisted
name, IP literal, a name resolving to a private address, garbage, a stalled hello, a hello
trickled byte by byte (accepted). Also half-close both ways, idle_timeout, connect failures,
relaying to itself, the shared max_connections budget, /metrics, the [tls] access log, SIGHUP,
SIGTERM, and valgrind at exit."""

import atexit
import hashlib
import os
import re
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
import unittest

import harness as H
from b15_admin import parse_exposition, value

OPENSSL = shutil.which("openssl")
LISTS = os.path.join(H.ROOT, "conf", "cache-domains")
LISTED = "cdn1.epicgames.com"          # in conf/cache-domains/epicgames.txt
UNLISTED = "not-listed.example.test"
BULK = (8 if H.SANITIZED else 32) * H.MIB
ACCESS_RE = re.compile(r"\[tls\] access (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) client=(\S+) "
                       r"sni=(\S+) origin=(\S+) up=(\d+) down=(\d+) duration_ms=(\d+) "
                       r"outcome=([a-z_]+)$")

_CERT = {}


def cert_files():
    """A self-signed certificate for LISTED, made once per run (in a temp dir)."""
    if not _CERT:
        d = H.tempfile.mkdtemp(prefix="cp-t01-")
        atexit.register(shutil.rmtree, d, True)
        key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
                        "-days", "2", "-subj", "/CN=%s" % LISTED, "-addext",
                        "subjectAltName=DNS:%s" % LISTED],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _CERT.update(dir=d, key=key, cert=crt)
    return _CERT


def client_hello(name):
    """The first flight OpenSSL sends for server_hostname <name> (None: no SNI)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(i, o, server_hostname=name)
    try:
        s.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return o.read()


def hello_with_literal(ip):
    """A real hello whose server name bytes are replaced by the IP literal <ip> (Python never
    sends an IP address as SNI; some clients do)."""
    stand_in = ("x" * len(ip))
    h = client_hello(stand_in + ".test")
    pos = h.index((stand_in + ".test").encode())
    # shorten the name by ".test" and every length that covers it
    raise_if = h.count((stand_in + ".test").encode())
    assert raise_if == 1
    cut = len(".test")
    name_len_at = pos - 2
    out = bytearray(h[:pos] + ip.encode() + h[pos + len(stand_in) + cut:])
    # lengths (big-endian) to shrink: record (3), handshake (6..9), extensions, SNI ext/list/name
    def dec16(at):
        v = int.from_bytes(out[at:at + 2], "big") - cut
        out[at:at + 2] = v.to_bytes(2, "big")
    dec16(3)
    hs = int.from_bytes(out[6:9], "big") - cut
    out[6:9] = hs.to_bytes(3, "big")
    dec16(name_len_at)            # host name length
    dec16(name_len_at - 3)        # server_name_list length
    dec16(name_len_at - 5)        # extension length
    # the extensions block length: after session id, cipher suites, compression methods
    off = 9 + 2 + 32
    off += 1 + out[off]
    off += 2 + int.from_bytes(out[off:off + 2], "big")
    off += 1 + out[off]
    dec16(off)
    return bytes(out)


def pattern(seed, n):
    """n deterministic bytes."""
    block = hashlib.sha256(seed.encode()).digest() * 2048      # 64 KiB
    reps = n // len(block) + 1
    return (block * reps)[:n]


# --------------------------------------------------------------------------------------------
# origins
# --------------------------------------------------------------------------------------------

def cpu_seconds(pid):
    """utime + stime of <pid>, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recv_to_eof(s):
    """Every byte <s> receives until the peer's FIN."""
    data = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            return bytes(data)
        data += b

class RawOrigin:
    """A plain TCP origin (the relay never looks past the ClientHello): each connection is handed
    to handler(sock, conn_index) in its own thread. received[i]: every byte of connection i until
    its EOF (when the default handler runs)."""

    def __init__(self, handler=None):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.addr = "127.0.0.1:%d" % self.port
        self.handler = handler or self.read_all
        self.received = {}
        self.conns = 0
        self.lock = threading.Lock()
        self.socks = []
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                i = self.conns
                self.conns += 1
                self.socks.append(s)
            threading.Thread(target=self._run, args=(s, i), daemon=True).start()

    def _run(self, s, i):
        try:
            self.handler(s, i)
        except OSError:
            pass

    def read_all(self, s, i):
        data = recv_to_eof(s)
        with self.lock:
            self.received[i] = data
        s.close()

    def stop(self):
        self.stopping = True
        self.lsock.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass


class TlsOrigin(RawOrigin):
    """A Python ssl origin with the test certificate; handler(ssl_sock, i) after the handshake.
    names[i]: the SNI the origin saw."""

    def __init__(self, handler):
        c = cert_files()
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(c["cert"], c["key"])
        self.names = {}

        def sni_cb(sslobj, name, ctx):
            self.names[len(self.names)] = name
        self.ctx.sni_callback = sni_cb
        self.tls_handler = handler
        super().__init__(self._tls)

    def _tls(self, s, i):
        t = self.ctx.wrap_socket(s, server_side=True)
        self.tls_handler(t, i)


def tls_client_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cert_files()["cert"])     # the origin's own certificate
    return ctx


def duplex(t, out_data, in_n, pace=0.0, sample=None):
    """Sends <out_data> and receives <in_n> bytes at once on the ssl socket <t>, in one thread
    (an SSL object must not be used by two threads). <pace>: seconds to sleep after each read
    (a slow reader); sample(): called every 16 reads. Returns (received count, sha256 hex)."""
    t.setblocking(False)
    view = memoryview(out_data)
    sent = got = reads = 0
    h = hashlib.sha256()
    while sent < len(view) or got < in_n:
        want_r = got < in_n
        want_w = sent < len(view)
        if not (want_r and t.pending()):
            rl, wl, _ = select.select([t] if want_r else [], [t] if want_w else [], [], 60)
            if not rl and not wl:
                raise AssertionError("duplex stalled at sent %d, got %d" % (sent, got))
        if want_r:
            try:
                b = t.recv(65536)
                if not b:
                    break
                h.update(b)
                got += len(b)
                reads += 1
                if pace:
                    time.sleep(pace)
                if sample is not None and reads % 16 == 0:
                    sample()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
        if want_w:
            try:
                sent += t.send(view[sent:sent + 65536])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
    t.setblocking(True)
    return got, h.hexdigest()


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(min(1 << 20, n - len(buf)))
        if not b:
            break
        buf += b
    return bytes(buf)


@unittest.skipIf(OPENSSL is None, "openssl not installed")
class Tls(H.CPTestCase):
    # fixtures ----------------------------------------------------------------------------------
    def start(self, tls=None, overrides=None, origin=None, dns_records=None, lists=False):
        """Daemon with passthrough_listen on a free port and tls.override = <origin> (when
        given); admin on. Sets self.daemon, self.tls_port, self.dns."""
        self.tls_port = H.free_port()
        o = {"server": {"admin_listen": "auto"},
             "tls": {"passthrough_listen": "127.0.0.1:%d" % self.tls_port,
                     "handshake_timeout": "3s",
                     "access": os.path.join(self._tmp, "tls-access.log")}}
        if origin is not None:
            o["tls"]["override"] = origin.addr
        if lists:
            o["domains"] = {"cache_domains": LISTS, "allow_unlisted": "no"}
        for sec, kv in (overrides or {}).items():
            o.setdefault(sec, {}).update(kv)
        for k, v in (tls or {}).items():
            o["tls"][k] = v
        self.dns = self.start_dns(dns_records)
        self.daemon = self.start_daemon(o, dns=self.dns)
        self.wait_tls_listening()
        return self.daemon

    def wait_tls_listening(self):
        """The harness waits for `listen`; passthrough_listen opens just after it."""
        H.wait_until(lambda: "(TLS passthrough)" in self.daemon.log(), 30 * H.SLOW, 0.02,
                     "passthrough_listen")

    def origin(self, cls=RawOrigin, *args):
        o = cls(*args)
        self.addCleanup(o.stop)
        return o

    def connect(self, timeout=10.0):
        s = socket.create_connection(("127.0.0.1", self.tls_port), timeout=timeout)
        self.addCleanup(s.close)
        return s

    def scrape(self):
        r = self.daemon.admin_get("/metrics")
        self.assertStatus(r, 200)
        return parse_exposition(bytes(r.body).decode("utf-8"))

    def refused(self, reason):
        return value(self.scrape(), "cacheparty_tls_refused_total", reason=reason)

    def wait_refused(self, reason, n=1):
        H.wait_until(lambda: self.refused(reason) >= n, 10 * H.SLOW, 0.05,
                     "tls_refused_total{reason=%s} >= %d" % (reason, n))
        self.assertEqual(self.refused(reason), n)

    def access(self):
        try:
            with open(os.path.join(self._tmp, "tls-access.log")) as f:
                return [ln.rstrip("\n") for ln in f if ln.strip()]
        except OSError:
            return []

    def wait_access(self, n=1, path=None):
        H.wait_until(lambda: len(self.access()) >= n, 10 * H.SLOW, 0.05, "%d access lines" % n)
        lines = self.access()
        for ln in lines:
            self.assertRegex(ln, ACCESS_RE)
        return [ACCESS_RE.match(ln) for ln in lines]

    def assert_closed_by_daemon(self, s, timeout=10.0):
        """The daemon closes <s> (EOF or reset) without sending a byte."""
        s.settimeout(timeout * H.SLOW)
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        except socket.timeout:
            self.fail("the daemon did not close the connection")
        self.assertEqual(data, b"")

    def refusal(self, reason, payload, **start_kw):
        """Sends <payload>; the daemon closes without contacting the origin; counted; logged."""
        origin = self.origin()
        self.start(origin=origin, **start_kw)
        s = self.connect()
        s.sendall(payload)
        self.assert_closed_by_daemon(s)
        self.wait_refused(reason)
        m = self.wait_access(1)[0]
        self.assertEqual(m.group(8), reason)
        self.assertEqual(m.group(4), "-")       # never connected anywhere
        self.assertEqual((m.group(5), m.group(6)), ("0", "0"))
        self.assertEqual(origin.conns, 0)
        return m

    # a real handshake ----------------------------------------------------------------------------
    def test_s_client_handshake_through_relay_sees_origin_cert(self):
        c = cert_files()
        port = H.free_port()
        srv = subprocess.Popen([OPENSSL, "s_server", "-accept", "127.0.0.1:%d" % port, "-cert",
                                c["cert"], "-key", c["key"], "-rev", "-naccept", "1"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
        self.addCleanup(srv.wait)
        self.addCleanup(srv.kill)
        # listening once it says so (a probe connection would use up -naccept 1)
        for _ in range(10):
            if srv.stdout.readline().strip() in (b"ACCEPT", b""):
                break

        class Addr:
            addr = "127.0.0.1:%d" % port
        self.start(origin=Addr, lists=True)
        line = "cacheparty passthrough %s" % hashlib.sha1(b"t01").hexdigest()
        p = subprocess.run([OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % self.tls_port,
                            "-servername", LISTED, "-CAfile", c["cert"], "-verify_return_error",
                            "-showcerts", "-ign_eof"],
                           input=(line + "\nCLOSE\n").encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30 * H.SLOW)
        out = p.stdout.decode("latin-1")
        self.assertEqual(p.returncode, 0, out[-2000:])
        self.assertIn("Verify return code: 0 (ok)", out)
        self.assertIn(line[::-1], out.splitlines())     # s_server -rev: our bytes, reversed
        pem = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out, re.S)
        self.assertIsNotNone(pem, out[-2000:])
        with open(c["cert"]) as f:
            self.assertEqual(pem.group(0).split(), f.read().strip().split())
        m = self.wait_access(1)[0]
        self.assertEqual(m.group(3), LISTED)
        self.assertEqual(m.group(4), "127.0.0.1:%d" % port)
        self.assertEqual(m.group(8), "ok")
        self.assertGreater(int(m.group(5)), len(line))
        self.assertGreater(int(m.group(6)), len(line))
        fams = self.scrape()
        self.assertEqual(value(fams, "cacheparty_tls_bytes_total", direction="up"),
                         int(m.group(5)))
        self.assertEqual(value(fams, "cacheparty_tls_bytes_total", direction="down"),
                         int(m.group(6)))
        self.assertEqual(fams["cacheparty_tls_relayed_total"]["samples"][()], 1)
        # the relay's lines never go to the cachelog access file
        self.assertFalse(any("tls" in ln for ln in self.daemon.access_lines()))

    def test_bulk_both_ways_slow_reader_bounded_memory(self):
        down_data = pattern("down", BULK)
        up_data = pattern("up", BULK)
        got_up = {}

        def handler(t, i):
            got_up["n"], got_up["sha"] = duplex(t, down_data, BULK)
            t.close()
        origin = self.origin(TlsOrigin, handler)
        d = self.start(origin=origin)
        raw = self.connect(timeout=60)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * H.KIB)
        t = tls_client_ctx().wrap_socket(raw, server_hostname=LISTED)
        base = d.rss_kib()
        rss = [base]
        n, sha = duplex(t, up_data, BULK, pace=0.002, sample=lambda: rss.append(d.rss_kib()))
        self.assertEqual(n, BULK)
        self.assertEqual(sha, hashlib.sha256(down_data).hexdigest())
        H.wait_until(lambda: "sha" in got_up, 60, 0.05, "the origin to read everything")
        self.assertEqual(got_up["n"], BULK)
        self.assertEqual(got_up["sha"], hashlib.sha256(up_data).hexdigest())
        self.assertEqual(origin.names.get(0), LISTED)
        print("    bulk %d MiB each way: daemon VmRSS %d KiB at start, peak %d KiB (%d samples)"
              % (BULK // H.MIB, base, max(rss), len(rss)))
        if not H.SANITIZED:
            self.assertLess(max(rss) - base, 8 * 1024,
                            "daemon RSS grew by %d KiB" % (max(rss) - base))
        fams = self.scrape()
        self.assertGreaterEqual(value(fams, "cacheparty_tls_bytes_total", direction="up"), BULK)
        self.assertGreaterEqual(value(fams, "cacheparty_tls_bytes_total", direction="down"), BULK)
        t.close()

    def test_stalled_reader_stops_origin_reads(self):
        # a client that reads nothing: the relay's pipe and the socket buffers fill, then the
        # origin's sends block (back-pressure all the way), daemon memory unchanged
        sent = {"n": 0}

        def handler(s, i):
            s.recv(65536)           # the hello
            s.settimeout(0.5)
            chunk = b"z" * 65536
            try:
                while sent["n"] < 512 * H.MIB:
                    sent["n"] += s.send(chunk)
            except (socket.timeout, OSError):
                pass
        origin = self.origin(RawOrigin, handler)
        d = self.start(origin=origin)
        s = self.connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * H.KIB)
        base = d.rss_kib()
        s.sendall(client_hello(LISTED))
        last = -1
        H.wait_until(lambda: origin.conns == 1, 10, 0.02, "the relay to connect")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:      # until the origin is blocked
            cur = sent["n"]
            if cur == last and cur > 0:
                break
            last = cur
            time.sleep(0.7)
        self.assertLess(sent["n"], 64 * H.MIB, "the origin was never blocked")
        if not H.SANITIZED:
            self.assertLess(d.rss_kib() - base, 4 * 1024)

    def test_stalled_reader_of_small_segments_does_not_spin(self):
        # An origin sending 100-byte segments fills the relay's pipe by its 16 slots long before
        # its 64 KiB: the relay must stop reading the origin then (back-pressure), not poll a
        # readable socket it cannot drain. Checked by the daemon's CPU while all is stalled.
        sent = {"n": 0}

        def handler(s, i):
            s.recv(65536)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(0.5)
            try:
                while sent["n"] < 64 * H.MIB:
                    sent["n"] += s.send(b"q" * 100)
                    time.sleep(0.0005)
            except (socket.timeout, OSError):
                pass
        origin = self.origin(RawOrigin, handler)
        d = self.start(origin=origin)
        s = self.connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(client_hello(LISTED))
        H.wait_until(lambda: origin.conns == 1, 10, 0.02, "the relay to connect")
        last = -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:      # until the origin is blocked
            if sent["n"] == last and last > 0:
                break
            last = sent["n"]
            time.sleep(0.5)
        c0 = cpu_seconds(d.proc.pid)
        time.sleep(2)
        used = cpu_seconds(d.proc.pid) - c0
        self.assertLess(used, 0.5, "the daemon used %.2f s of CPU in 2 s with every side stalled"
                        % used)

    def test_origin_reset_after_data_delivers_what_was_taken(self):
        # The origin sends, the relay takes it all, then the origin resets: what the relay had
        # already taken reaches the client before the relay closes.
        n = 200 * 1024
        done = threading.Event()

        def handler(s, i):
            s.recv(65536)
            s.sendall(b"r" * n)
            done.wait(10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()                # a reset
        origin = self.origin(RawOrigin, handler)
        self.start(origin=origin)
        s = self.connect()
        s.sendall(client_hello(LISTED))
        s.settimeout(10)
        got = 0
        try:
            while got < n:
                b = s.recv(65536)
                if not b:
                    break
                got += len(b)
                if got >= n // 2:
                    done.set()  # the reset comes while the rest may still be in the relay
        except OSError:
            pass
        done.set()
        self.assertEqual(got, n)

    # the ClientHello -------------------------------------------------------------------------
    def test_hello_trickled_byte_by_byte_accepted(self):
        def handler(t, i):
            t.sendall(b"hello " + t.recv(100))
            t.close()
        origin = self.origin(TlsOrigin, handler)
        self.start(origin=origin)
        raw = self.connect()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = tls_client_ctx().wrap_bio(i, o, server_hostname=LISTED)
        first = True
        while True:
            try:
                tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            out = o.read()
            if first:       # the ClientHello, one byte per segment
                for k in range(len(out)):
                    raw.sendall(out[k:k + 1])
                    time.sleep(0.001)
                first = False
            elif out:
                raw.sendall(out)
            if done:
                break
            data = raw.recv(65536)
            self.assertNotEqual(data, b"", "closed during the handshake")
            i.write(data)
        tls.write(b"world")
        raw.sendall(o.read())
        got = b""
        while b"hello world" not in got:
            data = raw.recv(65536)
            if not data:
                break
            i.write(data)
            try:
                got += tls.read(100)
            except ssl.SSLWantReadError:
                pass
        self.assertEqual(got, b"hello world")
        self.assertEqual(origin.names.get(0), LISTED)
        self.assertEqual(self.refused("malformed"), 0)

    def test_hello_fragmented_over_records_accepted(self):
        # the same message cut into 3-byte records: the origin receives exactly those bytes
        h = client_hello(LISTED)
        msg = h[5:]
        recs = b"".join(b"\x16\x03\x01" + len(msg[k:k + 3]).to_bytes(2, "big") + msg[k:k + 3]
                        for k in range(0, len(msg), 3))
        origin = self.origin()
        self.start(origin=origin)
        s = self.connect()
        s.sendall(recs + b"after the hello")
        s.shutdown(socket.SHUT_WR)
        self.assertEqual(s.recv(10), b"")        # the origin closes after our EOF
        H.wait_until(lambda: 0 in origin.received, 10, 0.02, "origin EOF")
        self.assertEqual(origin.received[0], recs + b"after the hello")

    def test_no_sni_refused(self):
        self.refusal("no_sni", client_hello(None))

    def test_unlisted_name_refused(self):
        m = self.refusal("unlisted", client_hello(UNLISTED), lists=True)
        self.assertEqual(m.group(3), UNLISTED)

    def test_unlisted_allowed_with_allow_unlisted(self):
        origin = self.origin()
        self.start(origin=origin, overrides={"domains": {"allow_unlisted": "yes"}})
        s = self.connect()
        s.sendall(client_hello(UNLISTED))
        H.wait_until(lambda: origin.conns == 1, 10, 0.02, "the relay to connect")

    def test_listed_wildcard_name_relayed(self):
        origin = self.origin()
        self.start(origin=origin, lists=True)
        s = self.connect()
        h = client_hello("Edge-7.Download.EpicGames.com.")    # *.download.epicgames.com
        s.sendall(h)
        s.shutdown(socket.SHUT_WR)
        self.assertEqual(s.recv(10), b"")
        H.wait_until(lambda: 0 in origin.received, 10, 0.02, "origin EOF")
        self.assertEqual(origin.received[0], h)
        m = self.wait_access(1)[0]
        self.assertEqual(m.group(3), "edge-7.download.epicgames.com")

    def test_ip_literal_refused(self):
        m = self.refusal("ip_literal", hello_with_literal("127.0.0.1"),
                         overrides={"upstream": {"allow_private": "no"}})
        self.assertEqual(m.group(3), "127.0.0.1")

    def test_private_address_refused(self):
        # no override: the name is resolved through the stub DNS, to a loopback address
        self.start(dns_records={LISTED: ["127.0.0.1"]},
                   overrides={"upstream": {"allow_private": "no"}})
        s = self.connect()
        s.sendall(client_hello(LISTED))
        self.assert_closed_by_daemon(s)
        self.wait_refused("private")
        self.assertGreaterEqual(self.dns.query_count(LISTED), 1)
        m = self.wait_access(1)[0]
        self.assertEqual((m.group(3), m.group(8)), (LISTED, "private"))

    def test_nxdomain_refused(self):
        self.start(dns_records={})
        s = self.connect()
        s.sendall(client_hello("nosuch.example.test"))
        self.assert_closed_by_daemon(s)
        self.wait_refused("resolve")

    def test_garbage_refused(self):
        self.refusal("not_tls", b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % LISTED.encode())

    def test_malformed_hello_refused(self):
        h = bytearray(client_hello(LISTED))
        h[9] = 2        # legacy_version 2.x
        self.refusal("malformed", bytes(h))

    def test_stalled_hello_closed_after_handshake_timeout(self):
        origin = self.origin()
        self.start(origin=origin, tls={"handshake_timeout": "1s"})
        s = self.connect()
        h = client_hello(LISTED)
        s.sendall(h[:len(h) // 2])
        self.assert_closed_by_daemon(s, timeout=20)
        self.wait_refused("timeout")
        self.assertEqual(origin.conns, 0)
        self.assertEqual(self.wait_access(1)[0].group(8), "timeout")

    def test_client_gone_before_hello(self):
        origin = self.origin()
        self.start(origin=origin)
        s = self.connect()
        s.sendall(b"\x16\x03")
        s.close()
        self.wait_refused("eof")

    # the relay -------------------------------------------------------------------------------
    def test_half_close_both_directions(self):
        # client: hello + data, then SHUT_WR; the origin sees EOF, answers, then closes; the
        # client still receives the whole answer after its own EOF
        answer = pattern("answer", 3 * H.MIB + 5)
        got = {}

        def handler(s, i):
            got["up"] = recv_to_eof(s)
            s.sendall(answer)
            s.shutdown(socket.SHUT_WR)
            got["eof"] = s.recv(1)         # the relay passes our FIN on, then closes
            s.close()
        origin = self.origin(RawOrigin, handler)
        self.start(origin=origin)
        s = self.connect()
        h = client_hello(LISTED)
        body = pattern("body", 2 * H.MIB + 3)
        s.sendall(h + body)
        s.shutdown(socket.SHUT_WR)
        data = bytearray()
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            data += b
        self.assertEqual(bytes(data), answer)
        H.wait_until(lambda: "eof" in got, 10, 0.02, "the origin's EOF")
        self.assertEqual(got["up"], h + body)
        self.assertEqual(got["eof"], b"")
        m = self.wait_access(1)[0]
        self.assertEqual(m.group(8), "ok")
        self.assertEqual(int(m.group(5)), len(h) + len(body))
        self.assertEqual(int(m.group(6)), len(answer))
        H.wait_until(lambda: value(self.scrape(), "cacheparty_connections", kind="tls") == 0,
                     10, 0.05, "relay gone")

    def test_origin_closes_first(self):
        def handler(s, i):
            s.recv(65536)
            s.sendall(b"bye")
            s.close()
        origin = self.origin(RawOrigin, handler)
        self.start(origin=origin)
        s = self.connect()
        s.sendall(client_hello(LISTED))
        self.assertEqual(recv_exact(s, 3), b"bye")
        self.assertEqual(s.recv(10), b"")       # the origin's FIN, passed on
        s.sendall(b"late")                       # our direction still open until we close
        s.close()
        m = self.wait_access(1)[0]
        self.assertIn(m.group(8), ("ok", "error"))

    def test_idle_timeout_closes(self):
        def handler(s, i):
            s.recv(65536)
            s.recv(65536)           # waits forever (until closed)
        origin = self.origin(RawOrigin, handler)
        self.start(origin=origin, tls={"idle_timeout": "1s"})
        s = self.connect()
        s.sendall(client_hello(LISTED))
        self.assert_closed_by_daemon(s, timeout=20)
        H.wait_until(lambda: self.scrape()["cacheparty_tls_idle_timeout_total"]["samples"][()]
                     == 1, 10, 0.05, "idle counter")
        self.assertEqual(self.wait_access(1)[0].group(8), "idle")

    def test_connect_refused(self):
        class Closed:
            addr = "127.0.0.1:%d" % H.closed_port()
        self.start(origin=Closed)
        s = self.connect()
        s.sendall(client_hello(LISTED))
        self.assert_closed_by_daemon(s)
        self.wait_refused("connect")
        m = self.wait_access(1)[0]
        self.assertEqual((m.group(4), m.group(8)), (Closed.addr, "connect"))

    def test_relay_to_itself_refused(self):
        port = H.free_port()

        class Self:
            addr = "127.0.0.1:%d" % port
        self.tls_port = port
        o = {"server": {"admin_listen": "auto"},
             "tls": {"passthrough_listen": Self.addr, "override": Self.addr,
                     "access": os.path.join(self._tmp, "tls-access.log")}}
        self.daemon = self.start_daemon(o)
        self.wait_tls_listening()
        s = self.connect()
        s.sendall(client_hello(LISTED))
        self.assertEqual(s.recv(10), b"")
        self.wait_refused("loop")
        self.assertEqual(self.scrape()["cacheparty_tls_accepted_total"]["samples"][()], 2)

    def test_max_connections_shared_with_http(self):
        origin = self.origin()
        d = self.start(origin=origin, overrides={"server": {"max_connections": "2"}})
        hs = [self.connect(), self.connect()]   # two relays waiting for their hello
        H.wait_until(lambda: value(self.scrape(), "cacheparty_connections", kind="tls") == 2,
                     10, 0.05, "two TLS connections accepted")
        c = self.client()
        c.request("/lancache-heartbeat")
        # the HTTP connection waits in the backlog: nothing is answered while both relays live
        c.sock.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            c.sock.recv(1)
        c.sock.settimeout(10)
        hs[0].close()
        r = c.read_response()
        self.assertStatus(r, 204)
        self.assertIn("max_connections (2) reached", d.log())

    def test_metrics_exposition_with_tls(self):
        origin = self.origin()
        self.start(origin=origin)
        fams = self.scrape()
        for reason in ("no_sni", "unlisted", "ip_literal", "private", "malformed", "timeout",
                       "resolve", "connect", "not_tls"):
            self.assertIn((("reason", reason),), fams["cacheparty_tls_refused_total"]["samples"])
        self.assertEqual(fams["cacheparty_tls_refused_total"]["type"], "counter")
        s = self.connect()
        s.sendall(client_hello(LISTED))
        H.wait_until(lambda: origin.conns == 1, 10, 0.02, "the relay to connect")
        fams = self.scrape()
        self.assertEqual(value(fams, "cacheparty_connections", kind="tls"), 1)
        self.assertEqual(value(fams, "cacheparty_connections", kind="http"), 0)
        st = self.daemon.status()
        self.assertEqual(st["connections"]["tls"], 1)
        self.assertEqual(st["tls_refused_total"]["no_sni"], 0)

    # life cycle ------------------------------------------------------------------------------
    def test_sighup_moves_and_reopens_the_access_log(self):
        origin = self.origin()
        d = self.start(origin=origin)
        s = self.connect()
        s.sendall(client_hello(None))
        self.wait_refused("no_sni")
        first = os.path.join(self._tmp, "tls-access.log")
        moved = first + ".1"
        os.rename(first, moved)
        d.signal(signal.SIGUSR1)
        H.wait_until(lambda: os.path.exists(first), 10, 0.02, "the log reopened")
        s = self.connect()
        s.sendall(b"junk")
        self.wait_refused("not_tls")
        self.assertEqual(len(self.wait_access(1)), 1)
        with open(moved) as f:
            self.assertIn("outcome=no_sni", f.read())
        # SIGHUP with a new path
        second = os.path.join(self._tmp, "tls-second.log")
        with open(d.ini) as f:
            ini = f.read()
        with open(d.ini, "w") as f:
            f.write(ini.replace(first, second))
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "configuration reloaded" in d.log(), 10, 0.02, "reload")
        s = self.connect()
        s.sendall(client_hello(None))
        self.wait_refused("no_sni", 2)
        H.wait_until(lambda: os.path.exists(second), 10, 0.02, "the new log")
        with open(second) as f:
            self.assertRegex(f.read().strip(), ACCESS_RE)

    def test_sigterm_waits_for_relays_then_exits(self):
        def handler(s, i):
            s.recv(65536)
            s.recv(65536)
            s.sendall(b"last words")
            s.close()
        origin = self.origin(RawOrigin, handler)
        d = self.start(origin=origin)
        hello_only = self.connect()
        hello_only.sendall(b"\x16\x03")         # still in HELLO: closed at once on SIGTERM
        s = self.connect()
        s.sendall(client_hello(LISTED))
        H.wait_until(lambda: origin.conns == 1, 10, 0.02, "the relay to connect")
        d.signal(signal.SIGTERM)
        self.assert_closed_by_daemon(hello_only)
        self.assertIsNone(d.wait(0.3))          # the relay in flight keeps it running
        s.sendall(b"go")
        self.assertEqual(recv_exact(s, 10), b"last words")
        s.close()
        self.assertEqual(d.wait(20 * H.SLOW), 0)
        outcomes = [m.group(8) for m in self.wait_access(2)]
        self.assertEqual(sorted(outcomes), ["ok", "shutdown"])

    def test_disabled_when_empty(self):
        self.daemon = self.start_daemon({"server": {"admin_listen": "auto"}})
        self.assertIn(("kind", "tls"), [k[0] for k in
                                        self.scrape()["cacheparty_connections"]["samples"]])
        self.assertNotIn("TLS passthrough", self.daemon.log())

    @unittest.skipIf(H.SANITIZED, "ASan build: LeakSanitizer checks leaks there")
    @unittest.skipIf(shutil.which("valgrind") is None, "valgrind not installed")
    def test_valgrind_no_leak_with_relays_in_every_phase(self):
        wrapper = self.valgrind_binary()

        def handler(s, i):
            while s.recv(65536):
                pass
        origin = self.origin(RawOrigin, handler)
        self.tls_port = H.free_port()
        d = self.daemon = self.start_daemon(
            {"server": {"admin_listen": "auto", "shutdown_timeout": "1s"},
             "tls": {"passthrough_listen": "127.0.0.1:%d" % self.tls_port,
                     "override": origin.addr}},
            binary=wrapper)
        self.wait_tls_listening()
        relayed = self.connect()
        relayed.sendall(client_hello(LISTED) + b"x" * 100000)
        hello = self.connect()
        hello.sendall(b"\x16\x03\x01")
        self.connect().sendall(client_hello(None))
        H.wait_until(lambda: origin.conns == 1, 30, 0.05, "the relay to connect")
        H.wait_until(lambda: self.refused("no_sni") == 1, 30, 0.1, "no_sni")
        self.assertValgrindClean(d)


if __name__ == "__main__":
    raise SystemExit(H.main())
