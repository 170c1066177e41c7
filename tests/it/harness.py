# SPDX-License-Identifier: BSD-2-Clause
"""Black-box integration harness for cacheparty (Python 3 standard library only).

Pieces:
  Origin     scripted threaded HTTP/1.1 origin on 127.0.0.1:<ephemeral>. Default handler serves
             deterministic bytes for paths ending in /size/N (content depends only on the path, so
             any byte can be verified), with Range, ETag, HEAD, keep-alive; behaviour switches come
             from the query string (the cache key ignores the query, the content ignores it too):
               status=404  chunked=1  close=1 (close-delimited)  delay=SEC (first byte)
               trickle=BYTES,SEC  stall=1 (never answers)  abort=K (close after K body bytes)
               reset=1 (RST instead of FIN on abort)  hdr=Name:Value (repeatable)  noetag=1
               closeafter=1 (answer keep-alive, then close the connection silently)
             Per-test handlers: origin.route(prefix, fn(ex)) or origin.handler = fn(ex).
  DnsStub    UDP DNS server answering A/AAAA from a dict name -> [addresses], NXDOMAIN otherwise.
  Daemon     writes a temp INI (defaults below + overrides), starts $BUILD/cacheparty -c FILE,
             waits for the listen port, stop() = SIGTERM + wait; teardown checks exit 0 and no
             sanitizer report; the log tail is printed when a test fails.
  Client     raw-socket client: send bytes, read responses (Content-Length / chunked / close),
             pipelined responses, "closed by peer" detection. ResponseParser is incremental.
  CPTestCase unittest base class wiring all of the above with ordered teardown.

Run a file directly:  BUILD=build python3 tests/it/b01_bodies.py [-k PATTERN]
Environment: BUILD (default build), CP_SANITIZED=1 (ASan build: no RSS checks, longer waits,
smaller huge bodies), CP_KEEP_TMP=1 (keep temp dirs of failed tests).
"""

import collections
import errno
import fnmatch
import itertools
import json
import os
import re
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
import urllib.parse
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", "build")
SANITIZED = os.environ.get("CP_SANITIZED", "") not in ("", "0")
SLOW = 3.0 if SANITIZED else 1.0          # multiplier for waits (never for assertions on time)
HOSTNAME = "cp-test"
DEFAULT_HOST = "game.example.test"
KIB = 1024
MIB = 1024 * 1024


def binary_path():
    b = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
    return os.path.join(b, "cacheparty")


def wait_until(cond, timeout, interval=0.02, what="condition"):
    """Poll cond() until it returns a truthy value; return it. Raises AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Deterministic content. The body of path P is a sequence of 4 KiB blocks; block k starts with
# 16 bytes (seed, k) big-endian, then byte at block offset o (16..4095) is (o*31 + seed) & 0xff.
# seed = crc32(path without query). Misplaced blocks and shifted bytes are both detected.
# --------------------------------------------------------------------------------------------
BLOCK = 4096
_HDR = struct.Struct(">QQ")
_tails = {}


def path_of(target):
    """Origin-form path (no query) of a request target, absolute-form accepted."""
    if "://" in target:
        target = urllib.parse.urlsplit(target).path or "/"
    return target.split("?", 1)[0]


def seed_of(target):
    return zlib.crc32(path_of(target).encode("latin-1"))


def _tail(seed):
    t = _tails.get(seed)
    if t is None:
        base = bytes(((i * 31 + seed) & 0xFF) for i in range(256))
        t = (base * 16)[16:BLOCK]
        if len(_tails) > 4096:
            _tails.clear()
        _tails[seed] = t
    return t


def content(target, start, end):
    """Bytes [start, end) of the deterministic body of <target> (a path or a full target)."""
    if end <= start:
        return b""
    seed = seed_of(target) if isinstance(target, str) else target
    tail = _tail(seed)
    k0, k1 = start // BLOCK, (end - 1) // BLOCK
    data = b"".join([_HDR.pack(seed, k) + tail for k in range(k0, k1 + 1)])
    off = start - k0 * BLOCK
    if off == 0 and len(data) == end - start:
        return data
    return data[off:off + (end - start)]


def content_pieces(seed, start, end, piece=MIB):
    """Yields the body [start, end) in pieces of about <piece> bytes (for huge bodies)."""
    off = start
    while off < end:
        nxt = min(end, (off // piece + 1) * piece)
        yield content(seed, off, nxt)
        off = nxt


def first_mismatch(got, want):
    """Index of the first differing byte, or None when equal (length included)."""
    if got == want:
        return None
    n = min(len(got), len(want))
    lo = 0
    step = 1 << 16
    while lo < n:
        hi = min(n, lo + step)
        if got[lo:hi] != want[lo:hi]:
            for i in range(lo, hi):
                if got[i] != want[i]:
                    return i
        lo = hi
    return n


def size_path(n, tag=None):
    """A /size/N path, optionally prefixed by a tag so tests do not share objects."""
    return "/%s/size/%d" % (tag, n) if tag else "/size/%d" % n


# --------------------------------------------------------------------------------------------
# Origin
# --------------------------------------------------------------------------------------------
class Request:
    """A request head as the origin received it."""

    def __init__(self, conn_id, seq, raw):
        self.conn_id = conn_id          # accepted connection number (1-based)
        self.seq = seq                  # request number on that connection (1-based)
        self.raw = raw                  # the head bytes as received, CRLFCRLF included
        self.time = time.monotonic()
        text = raw.decode("latin-1")
        lines = text.split("\r\n")
        parts = lines[0].split(" ")
        self.method = parts[0]
        self.target = parts[1] if len(parts) > 1 else ""
        self.version = parts[2] if len(parts) > 2 else ""
        self.headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            self.headers.append((name, value.strip(" \t")))
        self.path = path_of(self.target)
        q = self.target.split("?", 1)[1] if "?" in self.target else ""
        self.query = urllib.parse.parse_qs(q, keep_blank_values=True)

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def opt(self, name, default=None):
        v = self.query.get(name)
        return v[0] if v else default

    def __repr__(self):
        return "<Request #%d.%d %s %s>" % (self.conn_id, self.seq, self.method, self.target)


class Exchange:
    """One request/response on an origin connection, handed to handlers."""

    def __init__(self, origin, conn, req):
        self.origin = origin
        self.conn = conn
        self.req = req
        self.keep_alive = conn.client_keep_alive(req)
        self.head_sent = False
        self.closed = False

    # raw I/O -----------------------------------------------------------------------------
    def write(self, data):
        if not data:
            return
        self.conn.sock.sendall(data)
        self.origin._count_sent(len(data), self.head_sent)

    def send_head(self, status, headers=(), reason=None):
        reason = reason or REASONS.get(status, "Status")
        out = ["HTTP/1.1 %d %s\r\n" % (status, reason)]
        for k, v in headers:
            out.append("%s: %s\r\n" % (k, v))
        out.append("\r\n")
        self.write("".join(out).encode("latin-1"))
        self.head_sent = True

    def close(self, reset=False):
        """Close the connection (RST when reset) and stop handling requests on it."""
        self.conn.close(reset=reset)
        self.closed = True

    def stall(self):
        """Never answer: block until the peer closes or the origin stops."""
        self.conn.wait_peer_close()
        self.close()

    def sleep(self, sec):
        """Origin-side delay (a behaviour of the origin, never a test synchronisation)."""
        self.origin.stopping.wait(sec)

    # whole responses ---------------------------------------------------------------------
    def send(self, status=200, body=b"", headers=(), chunked=False, close=False, reason=None):
        """Send a complete response. HEAD gets no body. close=True: close-delimited."""
        hdrs = list(headers)
        names = {k.lower() for k, _ in hdrs}
        if close:
            self.keep_alive = False
            if "connection" not in names:
                hdrs.append(("Connection", "close"))
        elif chunked:
            hdrs.append(("Transfer-Encoding", "chunked"))
        elif "content-length" not in names:
            hdrs.append(("Content-Length", str(len(body))))
        if not self.keep_alive and "connection" not in names and not close:
            hdrs.append(("Connection", "close"))
        self.send_head(status, hdrs, reason)
        if self.req.method == "HEAD":
            return
        if chunked:
            self.write(chunk_encode(body))
        else:
            self.write(body)
        if close:
            self.close()


REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 301: "Moved Permanently",
           302: "Found", 304: "Not Modified", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 416: "Range Not Satisfiable", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}

CHUNK_SIZES = (1, 13, 4096, 65536, 777)


def chunk_encode(body, sizes=CHUNK_SIZES):
    out = []
    off, i = 0, 0
    mv = memoryview(body)
    while off < len(body):
        n = min(sizes[i % len(sizes)], len(body) - off)
        out.append(b"%x\r\n" % n)
        out.append(mv[off:off + n])
        out.append(b"\r\n")
        off += n
        i += 1
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def parse_range(value, total):
    """Single range 'bytes=a-b' -> (start, end_exclusive); 'multi' for several; None if absent or
    syntactically invalid; 'unsat' when unsatisfiable."""
    if not value or not value.startswith("bytes="):
        return None
    specs = value[6:].split(",")
    if len(specs) != 1:
        return "multi"
    a, _, b = specs[0].strip().partition("-")
    try:
        if a == "":
            n = int(b)
            if n == 0:
                return "unsat"
            return (max(0, total - n), total)
        start = int(a)
        end = int(b) + 1 if b else total
    except ValueError:
        return None
    if start >= total:
        return "unsat"
    return (start, min(end, total))


class OriginConn:
    def __init__(self, origin, sock, conn_id):
        self.origin = origin
        self.sock = sock
        self.id = conn_id
        self.buf = bytearray()
        self.closed = False
        self.lock = threading.Lock()

    def client_keep_alive(self, req):
        conn = (req.header("Connection") or "").lower()
        if req.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn

    def close(self, reset=False):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                if reset:
                    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                         struct.pack("ii", 1, 0))
                else:
                    self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        self.origin._conn_closed(self)

    def wait_peer_close(self):
        while not self.origin.stopping.is_set() and not self.closed:
            try:
                r, _, _ = select.select([self.sock], [], [], 0.1)
            except (OSError, ValueError):
                return
            if r:
                try:
                    d = self.sock.recv(65536)
                except OSError:
                    return
                if not d:
                    return

    def read_head(self):
        """Next request head, or None on EOF/stop."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                raw = bytes(self.buf[:i + 4])
                del self.buf[:i + 4]
                return raw
            if len(self.buf) > 1 << 20:
                return None
            try:
                d = self.sock.recv(65536)
            except OSError:
                return None
            if not d:
                return None
            self.buf += d

    def skip_body(self, req):
        n = int(req.header("Content-Length", "0") or 0)
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                return
            self.buf += d
        del self.buf[:n]

    def serve(self):
        seq = 0
        try:
            while not self.closed and not self.origin.stopping.is_set():
                raw = self.read_head()
                if raw is None:
                    break
                seq += 1
                req = Request(self.id, seq, raw)
                self.origin._record(req)
                if req.header("Content-Length"):
                    self.skip_body(req)
                ex = Exchange(self.origin, self, req)
                self.origin._dispatch(ex)
                if ex.closed or self.closed or not ex.keep_alive:
                    break
        except (OSError, ValueError):
            pass
        except Exception:  # a handler bug: make it visible in the test output
            traceback.print_exc()
        finally:
            self.close()


class Origin:
    """Scripted HTTP origin. Counters: connections (accepted), requests (list of Request),
    body_bytes_sent, bytes_sent. Thread-per-connection."""

    def __init__(self, bind="127.0.0.1", port=0):
        """bind: the listen address; "0.0.0.0" sees connections to any local address (tests in a
        network namespace of their own), .addr stays 127.0.0.1:<port>; another loopback address
        ("127.0.0.2", or "::1" for IPv6) gives .addr on it. port: 0 for an ephemeral one, else
        that one (several origins on one port, each on its own address: one name's addresses).
        Raises OSError when the address cannot be bound (no IPv6 on the host)."""
        v6 = ":" in bind
        self.lsock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.lsock.bind((bind, port))
        except OSError:
            self.lsock.close()
            raise
        self.lsock.listen(1024)
        self.port = self.lsock.getsockname()[1]
        if v6:
            self.addr = "[%s]:%d" % (bind, self.port)
        elif bind in ("0.0.0.0", "127.0.0.1"):
            self.addr = "127.0.0.1:%d" % self.port
        else:
            self.addr = "%s:%d" % (bind, self.port)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.connections = 0
        self.open_conns = {}
        self.closed_conns = 0
        self.peak_open = 0              # most connections open at once
        self.requests = []
        self.bytes_sent = 0
        self.body_bytes_sent = 0
        self.routes = []
        self.handler = None
        self.errors = []
        self.threads = []
        self.thread = threading.Thread(target=self._accept_loop, name="origin-accept", daemon=True)
        self.thread.start()

    # configuration -------------------------------------------------------------------------
    def route(self, prefix, fn):
        """fn(ex) handles requests whose path starts with <prefix> (first match wins)."""
        self.routes.append((prefix, fn))

    # counters ------------------------------------------------------------------------------
    def _record(self, req):
        with self.cond:
            self.requests.append(req)
            self.cond.notify_all()

    def _count_sent(self, n, body):
        with self.lock:
            self.bytes_sent += n
            if body:
                self.body_bytes_sent += n

    def _conn_closed(self, conn):
        with self.cond:
            if self.open_conns.pop(conn.id, None) is not None:
                self.closed_conns += 1
            self.cond.notify_all()

    def request_count(self):
        with self.lock:
            return len(self.requests)

    def wait_requests(self, n, timeout=10):
        with self.cond:
            ok = self.cond.wait_for(lambda: len(self.requests) >= n, timeout * SLOW)
        if not ok:
            raise AssertionError("origin saw %d requests, waited for %d" % (len(self.requests), n))
        return self.requests[n - 1]

    def wait_closed_conns(self, n, timeout=10):
        with self.cond:
            ok = self.cond.wait_for(lambda: self.closed_conns >= n, timeout * SLOW)
        if not ok:
            raise AssertionError("origin saw %d closed connections, waited for %d"
                                 % (self.closed_conns, n))

    def last(self):
        with self.lock:
            return self.requests[-1] if self.requests else None

    # serving -------------------------------------------------------------------------------
    def _accept_loop(self):
        while not self.stopping.is_set():
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            if self.stopping.is_set():
                s.close()
                return
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                self.connections += 1
                c = OriginConn(self, s, self.connections)
                self.open_conns[c.id] = c
                self.peak_open = max(self.peak_open, len(self.open_conns))
                self.cond.notify_all()
            t = threading.Thread(target=c.serve, name="origin-conn-%d" % c.id, daemon=True)
            t.start()
            self.threads.append(t)          # started first: stop() may join it at any time

    def _dispatch(self, ex):
        fn = self.handler
        for prefix, f in self.routes:
            if ex.req.path.startswith(prefix):
                fn = f
                break
        (fn or default_handler)(ex)

    def close_listener(self):
        """Stops accepting: connects to this origin are refused from now on, while the
        connections already open go on. Safe from a handler."""
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)   # wakes the accept loop (close alone may not)
        except OSError:
            pass
        try:
            self.lsock.close()
        except OSError:
            pass

    def stop(self):
        self.stopping.set()
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.open_conns.values())
        for c in conns:
            c.close()
        for t in list(self.threads):
            t.join(5)


SIZE_RE = re.compile(r"/size/(\d+)(?:\.[A-Za-z0-9]+)?$")


def serve_object(ex, n, path=None, status=None, chunked=None, close=None, extra=()):
    """Serve the deterministic object of <n> bytes for <path> (default: the request path),
    honouring Range/HEAD and the behaviour switches of the query string."""
    req = ex.req
    path = path or req.path
    seed = seed_of(path)
    status = int(req.opt("status", 0)) or status or 200
    chunked = bool(req.opt("chunked")) if chunked is None else chunked
    close = bool(req.opt("close")) if close is None else close
    hdrs = [("Content-Type", "application/octet-stream")]
    if not req.opt("noetag"):
        hdrs.append(("ETag", '"%08x-%x"' % (seed, n)))
    hdrs.append(("Accept-Ranges", "bytes"))
    for h in req.query.get("hdr", []):
        k, _, v = h.partition(":")
        hdrs.append((k.strip(), v.strip()))
    hdrs.extend(extra)
    start, end = 0, n
    if status == 200:
        rng = parse_range(req.header("Range"), n)
        if rng == "unsat":
            ex.send(416, b"", hdrs + [("Content-Range", "bytes */%d" % n)])
            return
        if isinstance(rng, tuple):
            status = 206
            start, end = rng
            hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, n)))
    if req.opt("stall"):
        ex.stall()
        return
    delay = float(req.opt("delay", 0))
    if delay:
        ex.sleep(delay)
        if ex.origin.stopping.is_set():
            return
    if close:
        ex.keep_alive = False
        hdrs.append(("Connection", "close"))
    elif chunked:
        hdrs.append(("Transfer-Encoding", "chunked"))
    else:
        hdrs.append(("Content-Length", str(end - start)))
    if req.opt("closeafter"):
        ex.keep_alive = True
    elif not ex.keep_alive and not close:
        hdrs.append(("Connection", "close"))
    ex.send_head(status, hdrs)
    if req.method == "HEAD":
        if req.opt("closeafter"):
            ex.close()
        return
    abort = req.opt("abort")
    limit = end if abort is None else min(end, start + int(abort))
    trickle = req.opt("trickle")
    piece, pause = MIB, 0.0
    if trickle:
        p, _, s = trickle.partition(",")
        piece, pause = max(1, int(p)), float(s or 0.05)
    chunk_i = 0
    for data in content_pieces(seed, start, limit, piece):
        if ex.origin.stopping.is_set():
            return
        if chunked:
            # several chunk sizes inside one piece, so framing is exercised
            out = []
            mv = memoryview(data)
            off = 0
            while off < len(data):
                k = min(CHUNK_SIZES[chunk_i % len(CHUNK_SIZES)], len(data) - off)
                out += [b"%x\r\n" % k, mv[off:off + k], b"\r\n"]
                off += k
                chunk_i += 1
            ex.write(b"".join(out))
        else:
            ex.write(data)
        if pause:
            ex.sleep(pause)
    if abort is not None:
        ex.close(reset=bool(req.opt("reset")))
        return
    if chunked:
        ex.write(b"0\r\n\r\n")
    if close or req.opt("closeafter"):
        ex.close()


def default_handler(ex):
    m = SIZE_RE.search(ex.req.path)
    if m:
        serve_object(ex, int(m.group(1)))
        return
    body = b"no such object: " + ex.req.path.encode("latin-1") + b"\n"
    ex.send(int(ex.req.opt("status", 404)), body, [("Content-Type", "text/plain")])


# --------------------------------------------------------------------------------------------
# DNS stub
# --------------------------------------------------------------------------------------------
QTYPE_A, QTYPE_AAAA = 1, 28


class DnsStub:
    """UDP DNS server on 127.0.0.1:<ephemeral>. records: {name: [addr, ...]} (IPv4 and IPv6
    literals). Names are case-insensitive; unknown names get NXDOMAIN; known names without an
    address of the asked type get an empty NOERROR. queries: list of (name, qtype)."""

    def __init__(self, records=None, ttl=60):
        self.records = {}
        for k, v in (records or {}).items():
            self.set(k, v)
        self.ttl = ttl
        self.drop = False           # True: never answer
        self.queries = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.addr = "127.0.0.1:%d" % self.port
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="dns-stub", daemon=True)
        self.thread.start()

    def set(self, name, addrs):
        self.records[name.lower().rstrip(".")] = list(addrs)

    def query_count(self, name=None):
        with self.lock:
            if name is None:
                return len(self.queries)
            return sum(1 for q in self.queries if q[0] == name.lower().rstrip("."))

    def _loop(self):
        while not self.stopping:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            try:
                resp = self._answer(data)
            except Exception:  # malformed query: ignore it, as a real server would
                continue
            if resp is not None and not self.drop:
                try:
                    self.sock.sendto(resp, peer)
                except OSError:
                    pass

    def _answer(self, data):
        qid, flags, qd, _an, _ns, _ar = struct.unpack(">HHHHHH", data[:12])
        if qd != 1:
            return None
        off = 12
        labels = []
        while True:
            n = data[off]
            off += 1
            if n == 0:
                break
            labels.append(data[off:off + n].decode("latin-1"))
            off += n
        qtype, qclass = struct.unpack(">HH", data[off:off + 4])
        question = data[12:off + 4]
        name = ".".join(labels).lower()
        with self.lock:
            self.queries.append((name, qtype))
        rd = flags & 0x0100
        opcode = flags & 0x7800
        answers = []
        rcode = 0
        if name not in self.records:
            rcode = 3
        else:
            for a in self.records[name]:
                fam = socket.AF_INET6 if ":" in a else socket.AF_INET
                t = QTYPE_AAAA if fam == socket.AF_INET6 else QTYPE_A
                if t != qtype or qclass != 1:
                    continue
                rdata = socket.inet_pton(fam, a)
                answers.append(struct.pack(">HHHIH", 0xC00C, t, 1, self.ttl, len(rdata)) + rdata)
        rflags = 0x8000 | opcode | 0x0400 | rd | 0x0080 | rcode
        return struct.pack(">HHHHHH", qid, rflags, 1, len(answers), 0, 0) + question + \
            b"".join(answers)

    def stop(self):
        self.stopping = True
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------------------------
# Daemon launcher
# --------------------------------------------------------------------------------------------
def gated_route(origin, prefix, size, at=None):
    """Routes <prefix> on <origin> to an object of <size> bytes (content(prefix + "/size/N")) whose
    origin answers a Range with a 206 of exactly that range (else a 200), sends its bytes up to
    object byte <at> (default: half), then waits for the returned gate (a threading.Event the
    test sets: a behaviour of the origin under the test's control, no timing) before the rest.
    Returns (gate, body)."""
    gate = threading.Event()
    body = content(prefix + "/size/%d" % size, 0, size)
    at = size // 2 if at is None else at

    def handler(ex):
        rng = parse_range(ex.req.header("Range"), size)
        start, end = rng if isinstance(rng, tuple) else (0, size)
        hdrs = [("Content-Length", str(end - start)), ("ETag", '"gated"'),
                ("Content-Type", "application/octet-stream")]
        if isinstance(rng, tuple):
            hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size)))
        ex.send_head(206 if isinstance(rng, tuple) else 200, hdrs)
        if ex.req.method == "HEAD":
            return
        cut = max(start, min(end, at))
        ex.write(body[start:cut])
        while cut < end and not gate.wait(0.05):
            if ex.origin.stopping.is_set():
                return
        ex.write(body[cut:end])
    origin.route(prefix, handler)
    return gate, body


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def closed_port():
    """A loopback port with nothing listening (connect -> ECONNREFUSED)."""
    return free_port()


class Blackhole:
    """A loopback address whose TCP connects hang (SYNs dropped): a listener with backlog 0
    whose accept queue is already full. For connect timeouts."""

    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.addr = "127.0.0.1:%d" % self.port
        self.fillers = []
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(0.3)
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                s.close()
                break
            self.fillers.append(s)

    def works(self):
        """True when a new connect really hangs."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", self.port))
            return False
        except socket.timeout:
            return True
        except OSError:
            return False
        finally:
            s.close()

    def stop(self):
        for s in self.fillers:
            s.close()
        self.lsock.close()


def default_config(tmpdir, port, dns_addr, origin_addr, admin_listen=""):
    return collections.OrderedDict([
        ("server", collections.OrderedDict([
            ("listen", "127.0.0.1:%d" % port),
            ("admin_listen", admin_listen),
            ("hostname", HOSTNAME),
            ("max_connections", "64"),
            ("request_timeout", "2s"),
            ("keepalive_timeout", "5s"),
            ("send_timeout", "3s"),
            ("shutdown_timeout", "5s"),
        ])),
        ("upstream", collections.OrderedDict([
            ("dns", dns_addr),
            ("override", origin_addr or ""),
            ("connect_timeout", "1s"),
            ("first_byte_timeout", "1s"),
            ("read_timeout", "2s"),
            ("keepalive", "4"),
            ("max_per_origin", "8"),
            ("allow_private", "yes"),
        ])),
        ("cache", collections.OrderedDict([
            ("dir", os.path.join(tmpdir, "cache")),
            ("memory_size", "64M"),
        ])),
        ("domains", collections.OrderedDict([
            ("allow_unlisted", "yes"),
        ])),
        ("log", collections.OrderedDict([
            ("access", os.path.join(tmpdir, "access.log")),
            ("error", "-"),
            ("level", "debug"),
        ])),
    ])


def render_ini(cfg):
    out = []
    for sec, kv in cfg.items():
        out.append("[%s]" % sec)
        for k, v in kv.items():
            out.append("%s = %s" % (k, v))
    return "\n".join(out) + "\n"


def merge_config(cfg, overrides):
    """overrides: {"section": {"key": value or None (remove)}} or {"section.key": value}."""
    for sec, kv in (overrides or {}).items():
        if "." in sec and not isinstance(kv, dict):
            s, k = sec.split(".", 1)
            kv = {k: kv}
            sec = s
        d = cfg.setdefault(sec, collections.OrderedDict())
        for k, v in kv.items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = str(v)
    return cfg


SANITIZER_RE = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                          r"ThreadSanitizer|AddressSanitizer:DEADLYSIGNAL")


class DaemonError(AssertionError):
    pass


class Daemon:
    """One cacheparty process. config: the rendered dict; port: its listen port."""

    _all = []
    _notify_ids = itertools.count()

    def __init__(self, tmpdir, overrides=None, origin=None, dns=None, binary=None, env=None,
                 start=True):
        self.tmpdir = tmpdir
        self.binary = binary or binary_path()
        self.origin = origin
        self.dns = dns
        self.overrides = overrides
        self.env = env
        self.proc = None
        self.rc = None
        self.expect_rc = 0
        self.ini = os.path.join(tmpdir, "cacheparty.ini")
        self.log_path = os.path.join(tmpdir, "daemon.log")
        self.port = None
        self.config = None
        self.admin_token = None
        self._notify = None
        os.makedirs(os.path.join(tmpdir, "cache"), exist_ok=True)
        if start:
            self.start()

    def write_config(self, port):
        origin_addr = self.origin.addr if self.origin is not None else ""
        dns_addr = self.dns.addr if self.dns is not None else "127.0.0.1:%d" % closed_port()
        # An admin listener on a free port unless the test says otherwise: settle_disk() reads
        # its /metrics.
        cfg = default_config(self.tmpdir, port, dns_addr, origin_addr, admin_listen="auto")
        merge_config(cfg, self.overrides)
        self.admin_port = None
        # "auto": loopback; "auto-any": 0.0.0.0 (not loopback: needs admin_token; the tests
        # still connect to 127.0.0.1 only).
        if cfg["server"].get("admin_listen") in ("auto", "auto-any"):
            addr = "127.0.0.1" if cfg["server"]["admin_listen"] == "auto" else "0.0.0.0"
            self.admin_port = free_port()
            while self.admin_port == port:  # the kernel may hand out a just-closed port again
                self.admin_port = free_port()
            cfg["server"]["admin_listen"] = "%s:%d" % (addr, self.admin_port)
        self.admin_token = cfg["server"].get("admin_token") or None
        self.config = cfg
        with open(self.ini, "w") as f:
            f.write(render_ini(cfg))
        return cfg

    def cfg(self, section, key):
        return self.config.get(section, {}).get(key)

    def start(self, timeout=None):
        timeout = timeout or (30.0 if SANITIZED else 10.0)
        if not os.access(self.binary, os.X_OK):
            raise DaemonError("daemon binary %s missing (run make)" % self.binary)
        fixed = (self.overrides or {}).get("server", {}).get("listen")
        for attempt in range(3):
            port = free_port()
            cfg = self.write_config(port)
            m = re.search(r":(\d+)\s*$", cfg["server"]["listen"].split(",")[0].strip())
            self.port = int(m.group(1)) if m else port
            self.logf = open(self.log_path, "ab")
            env = dict(os.environ)
            env.pop("NOTIFY_SOCKET", None)
            env.update(self.env or {})
            # Started means READY=1 (every listener open, the admin one included), not just
            # the first port answering: the harness listens for it unless the test does.
            self._close_notify()
            if "NOTIFY_SOCKET" not in env:
                self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                name = "cp-test-%d-%d" % (os.getpid(), next(Daemon._notify_ids))
                self._notify.bind("\0" + name)
                env["NOTIFY_SOCKET"] = "@" + name
            self.proc = subprocess.Popen([self.binary, "-c", self.ini], stdin=subprocess.DEVNULL,
                                         stdout=self.logf, stderr=subprocess.STDOUT, env=env)
            Daemon._all.append(self)
            self.rc = None
            try:
                self._wait_listening(timeout)
                return self
            except DaemonError:
                if self.proc.poll() == 2 and not fixed and attempt < 2 and \
                        "in use" in self.log_tail(5).lower():
                    continue    # port grabbed by someone else between free_port() and bind
                raise

    def _close_notify(self):
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    def _ready(self):
        """READY=1 received on the harness's notify socket (blocks up to 0.1 s)."""
        self._notify.settimeout(0.1)
        try:
            msg = self._notify.recv(4096).decode("utf-8", "replace")
        except (socket.timeout, BlockingIOError):
            return False
        return "READY=1" in msg.split("\n")

    def _wait_listening(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.rc = rc
                self._close_notify()
                raise DaemonError("daemon exited with %d during startup:\n%s"
                                  % (rc, self.log_tail()))
            if self._notify is not None:
                if self._ready():
                    return
                if time.monotonic() > deadline:
                    raise DaemonError("daemon not ready (no READY=1) after %.0fs:\n%s"
                                      % (timeout, self.log_tail()))
                continue
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                s.close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise DaemonError("daemon not listening on %d after %.0fs:\n%s"
                                  % (self.port, timeout, self.log_tail()))
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Wait for exit; returns the exit code or None on timeout."""
        try:
            self.rc = self.proc.wait(timeout)
            self._close_notify()
            return self.rc
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=None):
        """SIGTERM and wait; returns the exit code (negative = killed by that signal). SIGKILLs
        and raises DaemonError when it does not exit within timeout."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        timeout = timeout or (self._shutdown_s() + 10) * SLOW
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
            raise DaemonError("daemon did not exit within %.0fs of SIGTERM:\n%s"
                              % (timeout, self.log_tail()))
        return rc

    def _shutdown_s(self):
        v = self.cfg("server", "shutdown_timeout") or "5s"
        return parse_duration(v)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.rc = self.proc.wait()
            self._close_notify()

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        lines = self.log().splitlines()
        return "\n".join(lines[-n:])

    def sanitizer_report(self):
        m = SANITIZER_RE.search(self.log())
        return m is not None

    def teardown(self):
        """Stop (SIGTERM); raise DaemonError on an exit code other than expect_rc, on a hang, or
        on a sanitizer report."""
        try:
            if self.proc is None:
                return
            rc = self.stop() if self.proc.poll() is None else self.proc.poll()
            if self.expect_rc is not None and rc != self.expect_rc:
                raise DaemonError("daemon exited with %s (expected %s)" % (rc, self.expect_rc))
            if self.sanitizer_report():
                raise DaemonError("sanitizer report in the daemon log")
        finally:
            self.kill()
            self._close_notify()
            try:
                self.logf.close()
            except Exception:
                pass

    def rss_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def admin_get(self, target):
        """GET <target> on the admin listener (overrides {"server": {"admin_listen": "auto"}})."""
        if self.admin_port is None:
            raise DaemonError("no admin listener: start with admin_listen = auto")
        c = Client(self.admin_port)
        auth = [("Authorization", "Bearer " + self.admin_token)] if self.admin_token else []
        try:
            c.request(target, host="127.0.0.1", headers=auth)
            return c.read_response()
        finally:
            c.close()

    def metrics(self):
        """/metrics parsed: {'name{labels}': float} (labels exactly as printed)."""
        r = self.admin_get("/metrics")
        out = {}
        for line in bytes(r.body).decode("utf-8", "replace").splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
        return out

    def settle_disk(self, timeout=30):
        """Waits until the daemon's disk I/O threads have no chunk read or write pending (chunk
        files are written after the response that filled them; tests that look at the files
        wait for them here). No-op without an admin listener or a running process."""
        if self.admin_port is None or not self.running():
            return
        name = "cacheparty_cache_disk_io_pending"
        wait_until(lambda: self.metrics().get(name) == 0, timeout * SLOW, what=name + " == 0")

    def settle_fetches(self, timeout=30):
        """Waits until no origin fetch runs (a response can be complete while a fill it started
        still runs: read-ahead, or the part of a chunk before a client's range)."""
        if self.admin_port is None or not self.running():
            return
        name = "cacheparty_inflight_fetches"
        wait_until(lambda: self.metrics().get(name) == 0, timeout * SLOW, what=name + " == 0")

    def status(self):
        """/status as a dict."""
        return json.loads(bytes(self.admin_get("/status").body))

    def access_lines(self):
        path = self.cfg("log", "access")
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []


def _kill_all_daemons():
    for d in Daemon._all:
        try:
            d.kill()
        except Exception:
            pass


import atexit  # noqa: E402
atexit.register(_kill_all_daemons)


def parse_duration(v):
    m = re.match(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$", v)
    if not m:
        return 5.0
    n = int(m.group(1))
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]


def run_binary(args, timeout=20, env=None):
    """Run the daemon binary to completion (for -t, -V, bad configs): (rc, stdout, stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([binary_path()] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout * SLOW, env=e)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# Client side: incremental response parser and a blocking raw-socket client
# --------------------------------------------------------------------------------------------
class ProtocolError(AssertionError):
    pass


class Response:
    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.headers = []
        self.raw_head = b""
        self.body = bytearray()
        self.framing = None          # "length" | "chunked" | "close" | "none"
        self.length = None           # Content-Length when given
        self.complete = False
        self.head_done = False
        self.trailers = []

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def has(self, name):
        return any(k.lower() == name.lower() for k, _ in self.headers)

    def tokens(self, name):
        """Comma-separated tokens of all <name> headers, lowercased."""
        out = []
        for v in self.header_all(name):
            out += [t.strip().lower() for t in v.split(",") if t.strip()]
        return out

    def __repr__(self):
        return "<Response %s %s %s, %d body bytes%s>" % (
            self.version, self.status, self.reason, len(self.body),
            "" if self.complete else " (incomplete)")


class ResponseParser:
    """Feed bytes; get complete responses in order. methods: the request methods in order (HEAD
    responses carry no body)."""

    MAX_HEAD = 256 * KIB

    def __init__(self):
        self.buf = bytearray()
        self.methods = collections.deque()
        self.cur = None
        self.state = "head"
        self.remaining = 0
        self.eof = False

    def expect(self, method):
        self.methods.append(method)

    def feed(self, data):
        if data:
            self.buf += data
        out = []
        while True:
            r = self._step()
            if r is None:
                break
            if r is not True:
                out.append(r)
        return out

    def finish(self):
        """At EOF: completes a close-delimited response; returns it or None."""
        self.eof = True
        if self.cur is not None and self.state == "close":
            self.cur.complete = True
            r, self.cur, self.state = self.cur, None, "head"
            return r
        return None

    def _done(self):
        r = self.cur
        r.complete = True
        self.cur, self.state = None, "head"
        return r

    def _step(self):
        if self.state == "head":
            if not self.buf:
                return None
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > self.MAX_HEAD:
                    raise ProtocolError("response head too large")
                return None
            raw = bytes(self.buf[:i + 4])
            del self.buf[:i + 4]
            r = self.cur = Response()
            r.raw_head = raw
            lines = raw[:-4].decode("latin-1").split("\r\n")
            m = re.match(r"^(HTTP/\d\.\d) (\d{3})(?: (.*))?$", lines[0])
            if not m:
                raise ProtocolError("bad status line %r" % lines[0])
            r.version, r.status, r.reason = m.group(1), int(m.group(2)), m.group(3) or ""
            for line in lines[1:]:
                if ":" not in line:
                    raise ProtocolError("bad header line %r" % line)
                k, _, v = line.partition(":")
                if k != k.strip() or not k:
                    raise ProtocolError("bad header name %r" % line)
                r.headers.append((k, v.strip(" \t")))
            r.head_done = True
            if 100 <= r.status < 200:
                # interim response: report it as its own response, keep the method queued
                r.framing = "none"
                return self._done()
            method = self.methods.popleft() if self.methods else "GET"
            te = r.tokens("Transfer-Encoding")
            cl = r.header_all("Content-Length")
            if len(set(cl)) > 1:
                raise ProtocolError("conflicting Content-Length %r" % cl)
            if cl:
                r.length = int(cl[0])
            if method == "HEAD" or r.status in (204, 304):
                r.framing = "none"
                return self._done()
            if te:
                if te[-1] != "chunked":
                    raise ProtocolError("Transfer-Encoding %r without chunked last" % te)
                if cl:
                    raise ProtocolError("both Transfer-Encoding and Content-Length")
                r.framing = "chunked"
                self.state = "chunk-size"
                return True
            if cl:
                r.framing = "length"
                self.remaining = r.length
                self.state = "length"
                if self.remaining == 0:
                    return self._done()
                return True
            r.framing = "close"
            self.state = "close"
            return True
        if self.state == "length":
            if not self.buf:
                return None
            n = min(self.remaining, len(self.buf))
            self.cur.body += memoryview(self.buf)[:n]
            del self.buf[:n]
            self.remaining -= n
            if self.remaining == 0:
                return self._done()
            return None
        if self.state == "close":
            if self.buf:
                self.cur.body += self.buf
                self.buf = bytearray()
            return None
        if self.state == "chunk-size":
            i = self.buf.find(b"\r\n")
            if i < 0:
                if len(self.buf) > 4096:
                    raise ProtocolError("chunk size line too long")
                return None
            line = bytes(self.buf[:i]).split(b";", 1)[0].strip()
            del self.buf[:i + 2]
            try:
                n = int(line, 16)
            except ValueError:
                raise ProtocolError("bad chunk size %r" % line)
            if n == 0:
                self.state = "trailers"
                return True
            self.remaining = n
            self.state = "chunk-data"
            return True
        if self.state == "chunk-data":
            if self.remaining > 0:
                if not self.buf:
                    return None
                n = min(self.remaining, len(self.buf))
                self.cur.body += memoryview(self.buf)[:n]
                del self.buf[:n]
                self.remaining -= n
                if self.remaining > 0:
                    return None
            if len(self.buf) < 2:
                return None
            if bytes(self.buf[:2]) != b"\r\n":
                raise ProtocolError("chunk data not followed by CRLF")
            del self.buf[:2]
            self.state = "chunk-size"
            return True
        if self.state == "trailers":
            i = self.buf.find(b"\r\n")
            if i < 0:
                return None
            line = bytes(self.buf[:i])
            del self.buf[:i + 2]
            if line == b"":
                return self._done()
            self.cur.trailers.append(line)
            return True
        raise ProtocolError("parser state %s" % self.state)


def build_request(method="GET", target="/", host=DEFAULT_HOST, headers=(), version="HTTP/1.1",
                  body=b""):
    """Request bytes. host=None omits Host; headers: [(name, value)] added in order."""
    out = ["%s %s %s\r\n" % (method, target, version)]
    if host is not None:
        out.append("Host: %s\r\n" % host)
    for k, v in headers:
        out.append("%s: %s\r\n" % (k, v))
    out.append("\r\n")
    return "".join(out).encode("latin-1") + body


class Client:
    """Blocking raw-socket HTTP/1.x client for one connection."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, source=None):
        """source: a local address to connect from (another loopback address: another client)."""
        self.timeout = timeout * SLOW
        self.sock = socket.create_connection((host, port), timeout=self.timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = ResponseParser()
        self.peer_closed = False
        self.reset = False
        self.closed = False
        self.received = 0
        self._ready = collections.deque()   # complete responses not yet returned

    @property
    def local_port(self):
        return self.sock.getsockname()[1]

    def send(self, data, expect=None):
        """Send raw bytes; expect: list of methods whose responses will follow (default: one GET
        per request line found is NOT guessed; pass it for HEAD)."""
        for m in expect or ():
            self.parser.expect(m)
        self.sock.sendall(data)

    def request(self, target="/", method="GET", host=DEFAULT_HOST, headers=(),
                version="HTTP/1.1", body=b""):
        self.parser.expect(method)
        self.sock.sendall(build_request(method, target, host, headers, version, body))

    def _recv(self, n=MIB, timeout=None):
        """One recv; b'' on EOF (sets peer_closed); raises socket.timeout."""
        if self.peer_closed:
            return b""
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            d = self.sock.recv(n)
        except ConnectionResetError:
            self.peer_closed = self.reset = True
            return b""
        if not d:
            self.peer_closed = True
        self.received += len(d)
        return d

    def read_response(self, timeout=None):
        """Next complete response. Raises ProtocolError when the peer closes first (the partial
        response is in .partial)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if self._ready:
                return self._ready.popleft()
            if self.peer_closed:
                r = self.parser.finish()
                if r is not None:
                    return r
                self.partial = self.parser.cur
                raise ProtocolError("connection closed by peer%s before a complete response "
                                    "(partial: %r)" % (" (RST)" if self.reset else "",
                                                       self.parser.cur))
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("no complete response within %.1fs (partial: %r)"
                                     % (timeout or self.timeout, self.parser.cur))
            d = self._recv(timeout=left)
            rs = self.parser.feed(d)
            self._ready.extend(rs)

    def read_responses(self, n, timeout=None):
        return [self.read_response(timeout) for _ in range(n)]

    def read_head(self, timeout=None):
        """Read until the head of the next response is parsed; returns the in-progress Response
        (body bytes so far in .body; more arrive with read_body_until)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if self._ready:
                return self._ready[0]
            if self.parser.cur is not None and self.parser.cur.head_done:
                return self.parser.cur
            if self.peer_closed:
                raise ProtocolError("connection closed before a response head")
            d = self._recv(timeout=max(0.01, deadline - time.monotonic()))
            rs = self.parser.feed(d)
            self._ready.extend(rs)

    def read_body_until(self, resp, nbytes, timeout=None):
        """Read until <resp> (from read_head) has at least nbytes body bytes or is complete."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(resp.body) < nbytes and not resp.complete:
            if self.peer_closed:
                raise ProtocolError("connection closed after %d body bytes" % len(resp.body))
            d = self._recv(min(MIB, max(1, nbytes - len(resp.body))),
                           timeout=max(0.01, deadline - time.monotonic()))
            rs = self.parser.feed(d)
            self._ready.extend(rs)
        return resp

    def finish_response(self, resp, timeout=None):
        """Read until <resp> (from read_head) completes; returns it (raises if closed early)."""
        r = self.read_response(timeout)
        assert r is resp, "responses out of order"
        return r

    def wait_closed(self, timeout=5.0):
        """True when the peer closed (FIN or RST) within timeout; data read meanwhile is fed to
        the parser (see .extra_responses / parser.cur)."""
        deadline = time.monotonic() + timeout * SLOW
        while not self.peer_closed:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                d = self._recv(timeout=left)
            except socket.timeout:
                return False
            except OSError:
                self.peer_closed = True
                break
            try:
                rs = self.parser.feed(d)
            except ProtocolError:
                rs = []
            self._ready.extend(rs)
        return True

    def drain(self, timeout=10.0):
        """Read and discard until EOF/RST; returns the number of bytes read (the parser is not
        fed). Raises socket.timeout."""
        n = 0
        deadline = time.monotonic() + timeout * SLOW
        while not self.peer_closed:
            d = self._recv(timeout=max(0.01, deadline - time.monotonic()))
            n += len(d)
        return n

    def is_open(self, wait=0.2):
        """True when nothing (no data, no EOF) arrives within <wait> seconds."""
        r, _, _ = select.select([self.sock], [], [], wait)
        if not r:
            return True
        try:
            d = self.sock.recv(65536, socket.MSG_PEEK)
        except OSError:
            return False
        return bool(d)

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def connect_refused(port, host="127.0.0.1"):
    """True when a TCP connect to port is refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        s.close()


# TCP state from /proc/net/tcp (to see the daemon close a socket we have not drained) --------
TCP_ESTABLISHED = "01"


def tcp_sockets(local_port=None, remote_port=None):
    """Rows of /proc/net/tcp: list of (local_port, remote_port, state_hex, inode)."""
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            p = line.split()
            lp = int(p[1].split(":")[1], 16)
            rp = int(p[2].split(":")[1], 16)
            if local_port is not None and lp != local_port:
                continue
            if remote_port is not None and rp != remote_port:
                continue
            out.append((lp, rp, p[3], int(p[9])))
    return out


def server_side_closed(server_port, client_port):
    """True when the server end of the connection (server_port <- client_port) was closed by its
    process: gone, orphaned (inode 0) or out of ESTABLISHED."""
    rows = tcp_sockets(server_port, client_port)
    if not rows:
        return True
    return all(st != TCP_ESTABLISHED or inode == 0 for _, _, st, inode in rows)


# --------------------------------------------------------------------------------------------
# Many concurrent keep-alive clients in one selector loop
# --------------------------------------------------------------------------------------------
def run_many(port, plans, host=DEFAULT_HOST, timeout=60.0, connect_batch=64, on_connected=None):
    """plans: one list of targets per client connection. All connections are established first
    (then on_connected() is called, e.g. to look at the daemon), then each sends its requests one
    after the other (keep-alive) and checks every body against content(); connections stay open
    until every client is done. Returns {'ok': verified responses, 'errors': [str],
    'connections': established}."""
    sel = selectors.DefaultSelector()
    errors = []
    ok = 0
    deadline = time.monotonic() + timeout * SLOW
    states = []

    def drop(st, why):
        errors.append("client %d: %s" % (st["i"], why))
        st["done"] = True
        try:
            sel.unregister(st["sock"])
        except (KeyError, ValueError):
            pass

    # phase 1: connect everyone (in batches, so the listen backlog never overflows)
    pending = list(range(len(plans)))
    connecting = 0
    while (pending or connecting) and time.monotonic() < deadline:
        while pending and connecting < connect_batch:
            i = pending.pop(0)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            st = {"i": i, "sock": s, "next": 0, "parser": ResponseParser(), "out": b"",
                  "done": False, "connected": False}
            states.append(st)
            rc = s.connect_ex(("127.0.0.1", port))
            if rc not in (0, errno.EINPROGRESS):
                errors.append("client %d: connect: %s" % (i, os.strerror(rc)))
                st["done"] = True
                continue
            sel.register(s, selectors.EVENT_WRITE, st)
            connecting += 1
        for key, _ in sel.select(timeout=0.5):
            st = key.data
            connecting -= 1
            err = st["sock"].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                drop(st, "connect: %s" % os.strerror(err))
            else:
                st["connected"] = True
                sel.unregister(st["sock"])
    live = [st for st in states if st["connected"] and not st["done"]]
    if on_connected is not None:
        on_connected(len(live))

    # phase 2: requests
    def queue_next(st):
        t = plans[st["i"]][st["next"]]
        st["parser"].expect("GET")
        st["out"] = build_request("GET", t, host)

    for st in live:
        queue_next(st)
        sel.register(st["sock"], selectors.EVENT_WRITE, st)
    active = len(live)
    while active and time.monotonic() < deadline:
        for key, mask in sel.select(timeout=0.5):
            st = key.data
            s = st["sock"]
            if st["out"] and mask & selectors.EVENT_WRITE:
                try:
                    n = s.send(st["out"])
                    st["out"] = st["out"][n:]
                except BlockingIOError:
                    continue
                except OSError as e:
                    drop(st, "send: %s" % e)
                    active -= 1
                    continue
                if not st["out"]:
                    sel.modify(s, selectors.EVENT_READ, st)
                continue
            if not mask & selectors.EVENT_READ:
                continue
            try:
                d = s.recv(256 * KIB)
            except BlockingIOError:
                continue
            except OSError as e:
                drop(st, "recv: %s (request %d)" % (e, st["next"]))
                active -= 1
                continue
            if not d:
                drop(st, "closed by peer before response %d" % st["next"])
                active -= 1
                continue
            try:
                rs = st["parser"].feed(d)
            except ProtocolError as e:
                drop(st, str(e))
                active -= 1
                continue
            for r in rs:
                t = plans[st["i"]][st["next"]]
                m = SIZE_RE.search(path_of(t))
                want = content(t, 0, int(m.group(1))) if m else None
                if r.status != 200:
                    errors.append("client %d %s: status %d" % (st["i"], t, r.status))
                elif want is not None and bytes(r.body) != want:
                    errors.append("client %d %s: body differs at %s (len %d, want %d)"
                                  % (st["i"], t, first_mismatch(bytes(r.body), want),
                                     len(r.body), len(want)))
                else:
                    ok += 1
                st["next"] += 1
            if rs:
                if st["next"] >= len(plans[st["i"]]):
                    st["done"] = True
                    sel.unregister(s)
                    active -= 1
                else:
                    queue_next(st)
                    sel.modify(s, selectors.EVENT_WRITE, st)
    for st in states:
        if not st["done"] and st["connected"]:
            errors.append("client %d: unfinished at request %d (timeout)" % (st["i"], st["next"]))
        if not st["connected"] and not st["done"]:
            errors.append("client %d: connect timed out" % st["i"])
        st["sock"].close()
    sel.close()
    return {"ok": ok, "errors": errors, "connections": len(live)}


# --------------------------------------------------------------------------------------------
# unittest glue
# --------------------------------------------------------------------------------------------
class CPTestCase(unittest.TestCase):
    """Base class. Per test: a temp dir; start_origin / start_dns / start_daemon / client helpers
    whose teardown runs in a fixed order: clients, origins, daemons (exit code checked), DNS."""

    maxDiff = 2000

    def setUp(self):
        self._tmp = tempfile.mkdtemp(prefix="cp-it-")
        self._clients = []
        self._origins = []
        self._daemons = []
        self._dnss = []
        self.addCleanup(self._teardown_all)

    def _teardown_all(self):
        errs = []
        for c in self._clients:
            c.close()
        for o in self._origins:
            o.stop()
        for d in self._daemons:
            try:
                d.teardown()
            except DaemonError as e:
                errs.append(str(e))
        for s in self._dnss:
            s.stop()
        if errs:
            raise DaemonError("; ".join(errs))

    def run(self, result=None):
        before = (len(result.failures) + len(result.errors)) if result is not None else 0
        try:
            return super().run(result)
        finally:
            failed = result is not None and len(result.failures) + len(result.errors) > before
            if failed:
                for d in getattr(self, "_daemons", []):
                    sys.stdout.write("---- daemon log (%s, last 60 lines) ----\n%s\n----\n"
                                     % (d.log_path, d.log_tail(60)))
                sys.stdout.flush()
            tmp = getattr(self, "_tmp", None)
            if tmp:
                if failed and os.environ.get("CP_KEEP_TMP"):
                    sys.stdout.write("kept %s\n" % tmp)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)

    # fixtures ------------------------------------------------------------------------------
    def start_origin(self, bind="127.0.0.1", port=0):
        o = Origin(bind, port)
        self._origins.append(o)
        return o

    def start_dns(self, records=None, ttl=60):
        s = DnsStub(records, ttl)
        self._dnss.append(s)
        return s

    def start_daemon(self, overrides=None, origin=None, dns=None, **kw):
        sub = os.path.join(self._tmp, "d%d" % len(self._daemons))
        os.makedirs(sub)
        d = Daemon(sub, overrides, origin=origin, dns=dns, start=False, **kw)
        self._daemons.append(d)
        d.start()
        return d

    def setup_proxy(self, overrides=None, dns_records=None):
        """Origin + DNS stub + daemon with upstream.override = origin. Sets self.origin,
        self.dns, self.daemon."""
        self.origin = self.start_origin()
        self.dns = self.start_dns(dns_records)
        self.daemon = self.start_daemon(overrides, origin=self.origin, dns=self.dns)
        return self.daemon

    def valgrind_binary(self):
        """A script that runs the built daemon under valgrind memcheck (errors and definite,
        indirect or possible leaks make it exit 42), for start_daemon(binary=...); check it with
        assertValgrindClean()."""
        self._vlog = os.path.join(self._tmp, "valgrind.log")
        wrapper = os.path.join(self._tmp, "cacheparty-vg")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec valgrind --quiet --leak-check=full --show-leak-kinds=all "
                    "--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=42 "
                    "--log-file=%s %s \"$@\"\n" % (self._vlog, binary_path()))
        os.chmod(wrapper, 0o755)
        return wrapper

    def assertValgrindClean(self, daemon):
        """Stops <daemon> (started with valgrind_binary()) and checks valgrind's verdict."""
        rc = daemon.stop(timeout=120)
        with open(self._vlog) as f:
            report = f.read()
        self.assertEqual(rc, 0, "valgrind reported errors or leaks:\n" + report[-4000:])
        self.assertNotIn("definitely lost", report)

    def client(self, daemon=None, timeout=10.0):
        c = Client((daemon or self.daemon).port, timeout=timeout)
        self._clients.append(c)
        return c

    def get(self, target, method="GET", host=DEFAULT_HOST, headers=(), version="HTTP/1.1",
            daemon=None):
        """One request on a fresh connection; returns the response."""
        c = self.client(daemon)
        c.request(target, method, host, headers, version)
        return c.read_response()

    # assertions ----------------------------------------------------------------------------
    def assertBody(self, resp, target, start=0, end=None, total=None):
        """resp.body must be content(target)[start:end] (end default: start + total or the
        /size/N of the path)."""
        if end is None:
            if total is None:
                m = SIZE_RE.search(path_of(target))
                total = int(m.group(1))
            end = total
        want = content(target, start, end)
        got = bytes(resp.body) if not isinstance(resp, (bytes, bytearray)) else bytes(resp)
        i = first_mismatch(got, want)
        if i is not None:
            self.fail("body of %s differs at byte %d (got %d bytes, want %d): got %r want %r"
                      % (target, start + i, len(got), len(want), got[i:i + 16], want[i:i + 16]))

    def assertStatus(self, resp, status):
        if resp.status != status:
            self.fail("status %s, want %s: %r\n%s" % (resp.status, status, resp,
                                                      resp.raw_head.decode("latin-1")))

    def assertProcessedBy(self, resp):
        v = resp.header("X-LanCache-Processed-By")
        self.assertIsNotNone(v, "no X-LanCache-Processed-By in %r" % resp.raw_head)
        self.assertIn(HOSTNAME, v)

    def assertClosed(self, c, timeout=5.0, what="connection"):
        self.assertTrue(c.wait_closed(timeout), "%s not closed by the daemon" % what)


# --------------------------------------------------------------------------------------------
# Runner: python3 tests/it/FILE.py [-k PATTERN] [--result JSON] [--list]
# --------------------------------------------------------------------------------------------
def test_id(stem, test):
    return "it/%s.%s.%s" % (stem, type(test).__name__, test._testMethodName)


def id_matches(tid, pattern):
    if not pattern:
        return True
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(tid, pattern) or fnmatch.fnmatchcase(tid, "*" + pattern + "*")
    return pattern in tid


def _iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _iter_tests(t)
        else:
            yield t


class _Result(unittest.TestResult):
    def __init__(self, stem, result_file):
        super().__init__()
        self.stem = stem
        self.result_file = result_file
        self.records = []
        self._bad = False
        self._skip = None
        self._t0 = 0

    def startTest(self, test):
        super().startTest(test)
        self._bad = False
        self._skip = None
        self._t0 = time.monotonic()
        self._save(running=test_id(self.stem, test))

    def _report(self, test, kind, err):
        self._bad = True
        sys.stdout.write("  %s %s\n%s" % (kind, test_id(self.stem, test),
                                           self._exc_info_to_string(err, test)))
        sys.stdout.flush()

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._report(test, "FAIL", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._report(test, "ERROR", err)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._bad = True
            sys.stdout.write("  FAIL %s %s\n%s" % (test_id(self.stem, test), subtest._subDescription(),
                                                    self._exc_info_to_string(err, test)))
            sys.stdout.flush()

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._skip = reason

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._bad = True

    def stopTest(self, test):
        super().stopTest(test)
        dt = time.monotonic() - self._t0
        tid = test_id(self.stem, test)
        status = "fail" if self._bad else ("skip" if self._skip is not None else "pass")
        word = {"pass": "ok  ", "fail": "FAILED", "skip": "skip"}[status]
        extra = " (%s)" % self._skip if status == "skip" else ""
        sys.stdout.write("  %s %s %.2fs%s\n" % (word, tid, dt, extra))
        sys.stdout.flush()
        self.records.append({"id": tid, "status": status, "seconds": round(dt, 3)})
        self._save()

    def _save(self, running=None):
        if not self.result_file:
            return
        tmp = self.result_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"tests": self.records, "running": running}, f)
        os.replace(tmp, self.result_file)


def main():
    import argparse
    ap = argparse.ArgumentParser(description="run one integration test file")
    ap.add_argument("-k", dest="pattern", default=None, help="substring or glob of test ids")
    ap.add_argument("--result", default=None, help="write per-test results as JSON here")
    ap.add_argument("--list", action="store_true", help="list test ids and exit")
    args = ap.parse_args()
    mainmod = sys.modules["__main__"]
    stem = os.path.splitext(os.path.basename(mainmod.__file__))[0]
    suite = unittest.defaultTestLoader.loadTestsFromModule(mainmod)
    tests = [t for t in _iter_tests(suite) if id_matches(test_id(stem, t), args.pattern)]
    if args.list:
        for t in tests:
            print(test_id(stem, t))
        return 0
    res = _Result(stem, args.result)
    res._save()
    unittest.TestSuite(tests).run(res)
    bad = sum(1 for r in res.records if r["status"] == "fail")
    return 1 if bad else 0


# --------------------------------------------------------------------------------------------
# Chunk files in a cache dir (cache and disk tests): the header of include/chunkfile.h, parsed
# without checking its hashes (the daemon does that). Read-only.
# --------------------------------------------------------------------------------------------
CHUNK_FILE_MAGIC = b"CPCHUNK1"
_CHUNK_FIXED = struct.Struct("<8sIIQQQIIHHHH")   # the 56 bytes before the key (version 1)
_CHUNK_FIXED_V2 = struct.Struct("<IHHqq")         # version 2: 24 more bytes before the key


def cache_key(target, host=DEFAULT_HOST):
    """The cache key of <target> for an unlisted host (allow_unlisted): "host\\npath"."""
    return "%s\n%s" % (host, path_of(target))


def settle_all_disks():
    """Daemon.settle_disk() of every running daemon."""
    for d in Daemon._all:
        d.settle_disk()


def chunk_files(cache_dir):
    """Paths of every file in <cache_dir> except tmp/, the cacheparty.cache marker and the
    dashboard's cacheparty-live.state (its totals per service), sorted, once the running
    daemons have finished writing."""
    settle_all_disks()
    out = []
    for root, dirs, files in os.walk(cache_dir):
        if os.path.samefile(root, cache_dir):
            dirs[:] = [d for d in dirs if d != "tmp"]
        for f in files:
            if os.path.samefile(root, cache_dir) and f in ("cacheparty.cache",
                                                            "cacheparty-live.state",
                                                            "cacheparty-live.state.tmp"):
                continue
            out.append(os.path.join(root, f))
    return sorted(out)


def chunk_file_info(path):
    """The header fields of chunk file <path> as a dict (path, size, magic, version, hdr_len,
    chunk_size, index, total, data_len, key, etag, last_modified, content_type, and from version
    2 on date, fields (the stored response fields' text), response_time, initial_age), or None
    when the file is missing or too short to hold the fields."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024)   # more than the largest header
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if len(data) < _CHUNK_FIXED.size:
        return None
    (magic, version, hdr_len, chunk_size, index, total, data_len, _flags, key_len, etag_len,
     lm_len, ct_len) = _CHUNK_FIXED.unpack_from(data)
    off = _CHUNK_FIXED.size
    fields_len = date_len = response_time = initial_age = 0
    if version >= 2:
        if len(data) < off + _CHUNK_FIXED_V2.size:
            return None
        fields_len, date_len, _pad, response_time, initial_age = \
            _CHUNK_FIXED_V2.unpack_from(data, off)
        off += _CHUNK_FIXED_V2.size
    fields = []
    for n in (key_len, etag_len, lm_len, ct_len, date_len, fields_len):
        fields.append(data[off:off + n].decode("latin-1"))
        off += n
    return {"path": path, "size": size, "magic": magic, "version": version, "hdr_len": hdr_len,
            "chunk_size": chunk_size, "index": index, "total": total, "data_len": data_len,
            "key": fields[0], "etag": fields[1], "last_modified": fields[2],
            "content_type": fields[3], "date": fields[4], "fields": fields[5],
            "response_time": response_time, "initial_age": initial_age}


def chunk_index(cache_dir):
    """{(key, index): info} of the chunk files in <cache_dir> whose header parses."""
    out = {}
    for p in chunk_files(cache_dir):
        i = chunk_file_info(p)
        if i is not None and i["magic"] == CHUNK_FILE_MAGIC:
            out[(i["key"], i["index"])] = i
    return out


def chunk_file_body(info):
    """The body bytes of a chunk file (after its header)."""
    with open(info["path"], "rb") as f:
        f.seek(info["hdr_len"])
        return f.read()


def range_of(req):
    """(start, end_inclusive) of a request's 'Range: bytes=a-b' (b may be absent: None), or None."""
    v = req.header("Range")
    m = re.match(r"^bytes=(\d+)-(\d*)$", v or "")
    if not m:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def fetched_spans(reqs, total):
    """[(start, end_inclusive)] asked by the ranged requests <reqs>, end clamped to total - 1;
    a request without a single Range counts as the whole object."""
    out = []
    for r in reqs:
        rg = range_of(r)
        if rg is None:
            out.append((0, total - 1))
            continue
        a, b = rg
        out.append((a, total - 1 if b is None else min(b, total - 1)))
    return out


def bytes_fetched_twice(reqs, total):
    """How many object bytes the ranged requests <reqs> asked for more than once."""
    spans = sorted(s for s in fetched_spans(reqs, total) if s[0] <= s[1])
    twice, reach = 0, -1
    for a, b in spans:
        if a <= reach:
            twice += min(b, reach) - a + 1
        reach = max(reach, b)
    return twice


def fetched_chunks(reqs, total, cs):
    """Sorted chunk indexes the ranged requests <reqs> asked for, one entry per request and chunk
    touched (a chunk fetched twice appears twice)."""
    out = []
    for a, b in fetched_spans(reqs, total):
        if a <= b:
            out += range(a // cs, b // cs + 1)
    return sorted(out)
