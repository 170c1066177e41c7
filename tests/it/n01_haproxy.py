# SPDX-License-Identifier: BSD-2-Clause
"""n01: three cacheparty nodes behind Debian's HAProxy, started from the shipped
conf/haproxy.cfg (README "More than one box").

HAProxy (installed by `make test`'s own step, none of its services enabled) runs in the
foreground from conf/haproxy.cfg as shipped from `defaults` on, with a global section of the
test's (no chroot, user or daemon; a stats socket in the temp dir) and the shipped addresses
replaced by loopback ones: the front on 127.0.0.1, node i on 127.0.3.i with the same ports on
every node, as boxes of a LAN would be. It is stopped by PID. Each node has its own cache dir
and [server] hostname; the scripted origin counts what it sends, by node.

- A mixed set (1 MiB Steam-style chunks without Range, asked through three cacheN hosts;
  multi-MiB objects read as unaligned ranges), four keep-alive clients in their own orders:
  cold, origin bytes = the unique bytes (the chunks the ranges touch), each chunk asked of the
  origin once; warm, 0; every body byte-exact.
- A node killed by PID: once HAProxy's stats show it DOWN (so nothing depends on timing), the set
  again: no client error, the origin sends exactly what the dead node had fetched (its objects,
  now filled by their next node), nothing else. The node started again on the same cache dir:
  once UP, the set again: 0 origin bytes.
- Parent chaining: a fourth node with upstream.override = the front. What it fetches is a hit
  of the cluster's (0 origin bytes for a warm set); with the hostname of a cluster node it gets
  the loop check's 508.
- HTTPS: a ClientHello through the front's TLS port reaches a node's passthrough relay and its
  origin byte for byte.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import unittest

import harness as H
from t01_tls import RawOrigin, client_hello

HAPROXY = "/usr/sbin/haproxy"
RECIPE = os.path.join(H.ROOT, "conf", "haproxy.cfg")
MIB = H.MIB
STEAM_UA = "Valve/Steam HTTP Client 1.0"
N_CHUNKS = 36
OBJECTS = [5 * MIB + 12345, 7 * MIB, 6 * MIB + 1, 9 * MIB - 7]
RANGES_PER_OBJECT = 4
CLIENTS = 4


def workload(tag):
    """[(host, ua, path, size, (start, end) or None)]: the set, and {(path, chunk index): bytes}
    of the chunks it touches (the unique bytes)."""
    rnd = random.Random(20)
    items = []
    for i in range(N_CHUNKS):
        path = "/%s/depot/%d/chunk/%040x/size/%d" % (tag, 700 + i % 5, i * 7919, MIB)
        items.append(("cache%d.steamcontent.com" % (i % 3 + 1), STEAM_UA, path, MIB, None))
    for k, n in enumerate(OBJECTS):
        path = "/%s/obj/%d/size/%d" % (tag, k, n)
        for _ in range(RANGES_PER_OBJECT):
            a = rnd.randrange(0, n - 1)
            b = min(n, a + rnd.randrange(1, 3 * MIB))
            items.append(("dl.n01.example", "n01", path, n, (a, b)))
    unique = {}
    for _, _, path, n, rng in items:
        a, b = rng or (0, n)
        for c in range(a // MIB, (b - 1) // MIB + 1):
            unique[(path, c)] = min(MIB, n - c * MIB)
    return items, unique


class Haproxy:
    """Debian's haproxy in the foreground from the shipped recipe, on loopback."""

    def __init__(self, tmp, node_addrs, node_http_port, node_tls_port, edit=None):
        """edit: a function of the recipe's text (from defaults on) to the text run."""
        self.dir = os.path.join(tmp, "haproxy")
        os.makedirs(self.dir)
        self.port = H.free_port()
        self.tls_port = H.free_port()
        self.sock = os.path.join(self.dir, "admin.sock")
        text = open(RECIPE).read()
        recipe = text[text.index("\ndefaults\n"):]
        recipe = recipe.replace("bind 10.0.0.10:80\n", "bind 127.0.0.1:%d\n" % self.port)
        recipe = recipe.replace("bind 10.0.0.10:443\n", "bind 127.0.0.1:%d\n" % self.tls_port)
        recipe = recipe.replace("tcp-check connect port 443\n",
                                "tcp-check connect port %d\n" % node_tls_port)
        recipe = recipe.replace("tcp-check connect port 80\n",
                                "tcp-check connect port %d\n" % node_http_port)
        for i, addr in enumerate(node_addrs, 1):
            recipe = recipe.replace("server cp%d 10.0.0.1%d:80 " % (i, i),
                                    "server cp%d %s:%d " % (i, addr, node_http_port))
            recipe = recipe.replace("server cp%d 10.0.0.1%d:443 " % (i, i),
                                    "server cp%d %s:%d " % (i, addr, node_tls_port))
        if edit is not None:
            recipe = edit(recipe)
        # Nothing of the shipped addresses left: the test reaches loopback only.
        addrs = set(re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", recipe))
        assert all(a.startswith("127.") for a in addrs), addrs
        cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n    maxconn 512\n    log stdout format raw local0 info\n"
                    "    stats socket %s mode 600 level admin\n" %
                    self.sock)
            f.write(recipe)
        self.log = open(os.path.join(self.dir, "haproxy.log"), "wb")
        r = subprocess.run([HAPROXY, "-c", "-f", cfg], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        out = r.stdout.decode("utf-8", "replace")
        assert r.returncode == 0, out
        # The recipe is clean: no warning from HAProxy's own check.
        assert "WARNING" not in out.upper(), out
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", cfg], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        H.wait_until(lambda: os.path.exists(self.sock) or self.proc.poll() is not None, 10,
                     what="haproxy's stats socket")
        assert self.proc.poll() is None, "haproxy exited"

    def command(self, cmd):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(cmd.encode() + b"\n")
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
        s.close()
        return out.decode("utf-8", "replace")

    def states(self):
        """{(backend, server): status} from `show stat` (UP, DOWN, "UP 1/2", ...)."""
        lines = self.command("show stat").splitlines()
        head = lines[0].lstrip("# ").split(",")
        col = {n: i for i, n in enumerate(head)}
        out = {}
        for line in lines[1:]:
            f = line.split(",")
            if len(f) < len(head) or f[col["svname"]] in ("FRONTEND", "BACKEND"):
                continue
            out[(f[col["pxname"]], f[col["svname"]])] = f[col["status"]]
        return out

    def wait_state(self, server, state, timeout=20, backend=None):
        def ok():
            st = self.states()
            return all(v == state for (px, sv), v in st.items()
                       if sv == server and backend in (None, px))
        H.wait_until(ok, timeout * H.SLOW, interval=0.1,
                     what="haproxy: %s %s (%r)" % (server, state, self.states()))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@unittest.skipUnless(os.access(HAPROXY, os.X_OK), "haproxy not installed (make deps-test)")
class HaproxyFront(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.origin = self.start_origin()
        self.by_node = {}       # hostname -> origin body bytes asked by it
        self.by_chunk = {}      # (path, first byte) -> times asked
        self.count_lock = threading.Lock()

        def counted(ex):
            rng = H.parse_range(ex.req.header("Range"), self._size(ex.req.path))
            a, b = rng if isinstance(rng, tuple) else (0, self._size(ex.req.path))
            node = (ex.req.header("X-LanCache-Processed-By") or "").split(",")[0].strip()
            with self.count_lock:
                self.by_node[node] = self.by_node.get(node, 0) + (b - a)
                key = (H.path_of(ex.req.path), a)
                self.by_chunk[key] = self.by_chunk.get(key, 0) + 1
            H.default_handler(ex)
        self.origin.route("/n01", counted)
        self.tls_origin = RawOrigin()
        self.addCleanup(self.tls_origin.stop)
        self.http_port = H.free_port()
        self.tls_port = H.free_port()
        self.nodes = []
        for i in range(3):
            self.nodes.append(self.start_node(i))
        self.front = Haproxy(self._tmp, ["127.0.3.%d" % (i + 1) for i in range(3)],
                             self.http_port, self.tls_port)
        self.addCleanup(self.front.stop)
        for i in range(3):
            self.front.wait_state("cp%d" % (i + 1), "UP")

    @staticmethod
    def _size(path):
        return int(re.search(r"/size/(\d+)", path).group(1))

    def node_dir(self, i):
        d = os.path.join(self._tmp, "node%d" % (i + 1))
        os.makedirs(d, exist_ok=True)
        return d

    def start_node(self, i, name=None, override=None):
        """Node i (0-based): its own dir and cache, its own hostname; HTTP on 127.0.3.<i+1> at
        the nodes' common port (and on a port of its own on 127.0.0.1, for the harness)."""
        addr = "127.0.3.%d" % (i + 1)
        d = H.Daemon(self.node_dir(i), {
            "server": {"listen": "127.0.0.1:%d, %s:%d" % (H.free_port(), addr, self.http_port),
                       "hostname": name or "n%d" % (i + 1),
                       "max_connections": "256"},
            "upstream": {"override": override or self.origin.addr},
            "tls": {"passthrough_listen": "%s:%d" % (addr, self.tls_port),
                    "override": self.tls_origin.addr},
            "log": {"level": "info"},
        }, origin=self.origin)
        self._daemons.append(d)
        return d

    def run_set(self, items, port=None, clients=CLIENTS):
        """Every item through the front (or <port>) by <clients> keep-alive clients, each in its
        own order; every body checked. Returns the number of requests answered."""
        port = port or self.front.port
        errors = []
        done = [0]
        lock = threading.Lock()

        def one_client(seed):
            order = list(items)
            random.Random(seed).shuffle(order)
            c = None
            try:
                for host, ua, path, n, rng in order:
                    hdrs = [("User-Agent", ua)]
                    if rng:
                        hdrs.append(("Range", "bytes=%d-%d" % (rng[0], rng[1] - 1)))
                    for attempt in range(2):  # a dropped connection is retried once
                        try:
                            if c is None:
                                c = H.Client(port, timeout=30)
                            c.request(path, host=host, headers=hdrs)
                            r = c.read_response()
                            break
                        except (OSError, H.ProtocolError):
                            if c is not None:
                                c.close()
                            c = None
                            if attempt == 1:
                                raise
                    a, b = rng or (0, n)
                    want = 206 if rng else 200
                    if r.status != want:
                        raise AssertionError("%s %s: status %d" % (host, path, r.status))
                    if bytes(r.body) != H.content(path, a, b):
                        raise AssertionError("%s %s [%d, %d): wrong bytes" % (host, path, a, b))
                    if (r.header("Connection") or "").lower() == "close":
                        c.close()
                        c = None
                    with lock:
                        done[0] += 1
            except Exception as e:  # noqa: BLE001 (reported below)
                with lock:
                    errors.append(repr(e))
            finally:
                if c is not None:
                    c.close()
        threads = [threading.Thread(target=one_client, args=(s,)) for s in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        return done[0]

    def origin_bytes(self):
        with self.count_lock:
            return sum(self.by_node.values())

    def settle(self):
        for d in self.nodes:
            if d.running():
                d.settle_fetches()
                d.settle_disk()

    def test_path_hashing_fetches_every_byte_once(self):
        items, unique = workload("n01")
        unique_bytes = sum(unique.values())
        # Cold: each chunk asked of the origin once, by one node.
        self.assertEqual(self.run_set(items), CLIENTS * len(items))
        self.settle()
        self.assertEqual(self.origin_bytes(), unique_bytes)
        self.assertEqual(self.origin.body_bytes_sent, unique_bytes)
        twice = {k: v for k, v in self.by_chunk.items() if v > 1}
        self.assertEqual(twice, {})
        share = dict(self.by_node)
        self.assertEqual(sorted(share), ["n1", "n2", "n3"], share)  # every node has its part
        # Warm: nothing.
        self.run_set(items)
        self.settle()
        self.assertEqual(self.origin_bytes(), unique_bytes)

        # Node 2 killed: once HAProxy has it DOWN, its objects are filled by the next node on
        # the ring, once each, and no other byte is asked again.
        self.nodes[1].proc.kill()
        self.nodes[1].proc.wait()
        self.nodes[1].expect_rc = -9
        self.front.wait_state("cp2", "DOWN")
        before = self.origin_bytes()
        self.run_set(items)
        self.settle()
        self.assertEqual(self.origin_bytes() - before, share["n2"])
        self.assertEqual(self.by_node.get("n2"), share["n2"])

        # Back on the same cache dir: its objects come home, and it still has them.
        self.nodes[1] = self.start_node(1)
        self.front.wait_state("cp2", "UP")
        before = self.origin_bytes()
        self.run_set(items)
        self.settle()
        self.assertEqual(self.origin_bytes() - before, 0)

    def test_parent_chaining_and_node_names(self):
        items, unique = workload("n01p")
        self.run_set(items, clients=1)
        self.settle()
        cold = self.origin_bytes()
        self.assertEqual(cold, sum(unique.values()))
        # A child whose upstream is the front: its misses are the cluster's hits.
        child = self.start_node(3, name="child", override="127.0.0.1:%d" % self.front.port)
        self.run_set(items, port=child.port, clients=2)
        child.settle_fetches()
        self.settle()
        self.assertEqual(self.origin_bytes(), cold)
        # A child named as a cluster node: the node sees its own name in the chain (508).
        child.stop()
        twin = self.start_node(4, name="n1", override="127.0.0.1:%d" % self.front.port)
        # Those the front sends to n1 come back 508; the others are answered. The path decides
        # (the front's hash), so which ones is fixed; over 24 paths each node gets some.
        statuses = set()
        for k in range(24):
            path = "/n01p/loop/%d/size/4096" % k
            r = self.get(path, host="dl.n01.example", daemon=twin)
            statuses.add(r.status)
            if r.status == 200:
                self.assertEqual(bytes(r.body), H.content(path, 0, 4096))
        self.assertEqual(statuses, {200, 508})

    def test_spread_over_the_nodes(self):
        # 2,000 Steam-style chunks of one depot set: each node fetches a third of them within
        # 5 % (the ring's points decide, and they depend only on the server ids and weights:
        # the same split on every run).
        items = []
        for i in range(2000):
            path = "/n01s/depot/%d/chunk/%040x/size/%d" % (900 + i % 300, i * 7919 + 3, 16384)
            items.append(("cache%d.steamcontent.com" % (i % 3 + 1), STEAM_UA, path, 16384, None))
        self.run_set(items, clients=2)
        self.settle()
        share = {n: b / (2000 * 16384) for n, b in self.by_node.items()}
        self.assertEqual(sorted(share), ["n1", "n2", "n3"])
        for n, f in share.items():
            self.assertLess(abs(f - 1 / 3), 0.05 / 3, share)

    def test_tls_check_needs_the_relay(self):
        # A node without a TLS relay is down for HTTPS only (HAProxy would else send it
        # connections it refuses), and up again for it once it has one.
        self.nodes[2].stop()
        d = H.Daemon(self.node_dir(2), {
            "server": {"listen": "127.0.0.1:%d, 127.0.3.3:%d" % (H.free_port(), self.http_port),
                       "hostname": "n3"},
            "upstream": {"override": self.origin.addr}}, origin=self.origin)
        self._daemons.append(d)
        self.front.wait_state("cp3", "DOWN", backend="cacheparty_tls")
        self.front.wait_state("cp3", "UP", backend="cacheparty")
        d.stop()
        self.nodes[2] = self.start_node(2)
        self.front.wait_state("cp3", "UP", backend="cacheparty_tls")

    def test_tls_through_the_front(self):
        hello = client_hello("cdn1.epicgames.com")
        s = socket.create_connection(("127.0.0.1", self.front.tls_port), timeout=10)
        s.sendall(hello + b"after the hello")
        s.shutdown(socket.SHUT_WR)
        H.wait_until(lambda: len(self.tls_origin.received) == 1, 10 * H.SLOW,
                     what="the TLS origin's connection")
        s.close()
        self.assertEqual(self.tls_origin.received[0], hello + b"after the hello")


if __name__ == "__main__":
    H.main()
