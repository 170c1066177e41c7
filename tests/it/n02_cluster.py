# SPDX-License-Identifier: BSD-2-Clause
"""n02: cluster mode ([cluster] nodes, self, secret): any front, every byte fetched once.

Three nodes on 127.0.3.1-3 (the same port on each, as boxes of a LAN), each with its own cache
dir and hostname; the scripted origin counts what it sends, by the node that asked (the first
name of X-LanCache-Processed-By), and checks that no peer credential ever reaches it. Before any
measurement every node's /metrics shows both peers up (health from the heartbeats, so nothing
depends on timing).

- Clients that pick a node at random for every request: a mixed set (1 MiB Steam-style chunks
  without Range, 16 KiB chunks of a few hundred depots, multi-MiB objects read as unaligned
  ranges), cold: origin bytes = the unique bytes, each chunk asked once; warm: 0; every body
  byte-exact; the bytes each node fetched and stores within 1.3x of each other; what a node
  passes on from its owner is never on its disk (the disk bytes of all nodes add up to the
  unique bytes, not more). A warm request through a node that does not own the object says
  HIT, as its owner does.
- HAProxy (Debian's) in front, from the shipped recipe with `balance roundrobin` instead of the
  path hash: the same, origin bytes = unique bytes.
- A node killed mid-download (its origin transfer held by the test's gate, so "mid" is a fact,
  not a moment): clients connected to it retry once on another node, as real clients do, and
  clients of the other nodes see nothing; every download completes byte-exact; afterwards every
  node serves every object byte-exact (nothing wrong stored).
- Peer requests: a LAN client that sends a credential (forged, or replayed from another
  address) gets 403; a signed peer request for a host the owner does not admit gets 403; a
  PURGE at one node's admin reaches the others.
- Inconsistent node lists (a fourth node that lists another set): the nodes see that they
  disagree (cluster_peer_disagrees), never peer, and a signed peer request sent to a node for a
  chunk it does not own is answered from the origin, never sent on (no loop).
"""

import hashlib
import hmac
import os
import random
import re
import signal
import threading
import time
import unittest

import harness as H
from n01_haproxy import HAPROXY, Haproxy

MIB = H.MIB
STEAM_UA = "Valve/Steam HTTP Client 1.0"
SECRET = "n02-cluster-secret-0123456789"
CLIENTS = 4


def workload(tag, small=60, big=(5 * MIB + 12345, 7 * MIB, 6 * MIB + 1), ranges=4):
    """[(host, ua, path, size, (start, end) or None)] and {(path, chunk): bytes} of the chunks it
    touches (the unique bytes)."""
    rnd = random.Random(21)
    items = []
    for i in range(12):
        path = "/%s/depot/%d/chunk/%040x/size/%d" % (tag, 700 + i % 5, i * 7919, MIB)
        items.append(("cache%d.steamcontent.com" % (i % 3 + 1), STEAM_UA, path, MIB, None))
    for i in range(small):
        n = 16 * 1024
        path = "/%s/depot/%d/chunk/%040x/size/%d" % (tag, 800 + i % 17, i * 104729 + 1, n)
        items.append(("cache%d.steamcontent.com" % (i % 3 + 1), STEAM_UA, path, n, None))
    for k, n in enumerate(big):
        path = "/%s/obj/%d/size/%d" % (tag, k, n)
        for _ in range(ranges):
            a = rnd.randrange(0, n - 1)
            b = min(n, a + rnd.randrange(1, 3 * MIB))
            items.append(("dl.n02.example", "n02", path, n, (a, b)))
    unique = {}
    for _, _, path, n, rng in items:
        a, b = rng or (0, n)
        for c in range(a // MIB, (b - 1) // MIB + 1):
            unique[(path, c)] = min(MIB, n - c * MIB)
    return items, unique


def sign(secret, frm, t, method, host, target, rng=""):
    msg = "cacheparty-peer\n%d\n%d\n%s\n%s\n%s\n%s" % (frm, t, method, host, target, rng)
    mac = hmac.new(secret.encode(), msg.encode(), hashlib.sha256).hexdigest()
    return "%d %d %s" % (frm, t, mac)


class ClusterBase(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.origin = self.start_origin()
        self.by_node = {}   # hostname -> origin body bytes asked by it
        self.by_chunk = {}  # (path, first byte) -> times asked
        self.leaked = []    # peer credentials the origin saw (never)
        self.lock = threading.Lock()

        def counted(ex):
            size = int(re.search(r"/size/(\d+)", ex.req.path).group(1))
            rng = H.parse_range(ex.req.header("Range"), size)
            a, b = rng if isinstance(rng, tuple) else (0, size)
            node = (ex.req.header("X-LanCache-Processed-By") or "").split(",")[0].strip()
            with self.lock:
                if ex.req.header("X-Cacheparty-Peer") is not None:
                    self.leaked.append(ex.req.path)
                self.by_node[node] = self.by_node.get(node, 0) + (b - a)
                key = (H.path_of(ex.req.path), a)
                self.by_chunk[key] = self.by_chunk.get(key, 0) + 1
            H.default_handler(ex)
        self.origin.route("/n02", counted)
        self.port = H.free_port()
        self.addrs = ["127.0.3.%d" % (i + 1) for i in range(3)]
        self.nodes = [self.start_node(i) for i in range(3)]
        self.wait_peers()

    def node_list(self):
        return ", ".join("%s:%d" % (a, self.port) for a in self.addrs)

    def start_node(self, i, nodes=None, secret=SECRET, extra=None):
        """Node i (0-based): HTTP on 127.0.3.<i+1> at the common port (and on a port of its own
        on 127.0.0.1, for the harness), its own dir, cache and hostname."""
        addr = "127.0.3.%d" % (i + 1)
        d = os.path.join(self._tmp, "node%d" % (i + 1))
        os.makedirs(d, exist_ok=True)
        over = {
            "server": {"listen": "127.0.0.1:%d, %s:%d" % (H.free_port(), addr, self.port),
                       "hostname": "n%d" % (i + 1), "max_connections": "256"},
            "upstream": {"override": self.origin.addr, "first_byte_timeout": "10s",
                         "read_timeout": "10s", "connect_timeout": "2s"},
            "cluster": {"nodes": nodes or self.node_list(), "self": "%s:%d" % (addr, self.port),
                        "secret": secret},
            "log": {"level": "info"},
        }
        for sec, kv in (extra or {}).items():
            over.setdefault(sec, {}).update(kv)
        dm = H.Daemon(d, over, origin=self.origin)
        self._daemons.append(dm)
        return dm

    def peer_up(self, d):
        """{peer address: up} from d's /metrics."""
        out = {}
        for k, v in d.metrics().items():
            m = re.match(r'cacheparty_cluster_peer_up\{peer="([^"]+)"\}', k)
            if m:
                out[m.group(1)] = v == 1
        return out

    def wait_peers(self, up=None):
        """Until every running node sees exactly the nodes of <up> (default: all running) up."""
        def ok():
            for i, d in enumerate(self.nodes):
                if not d.running():
                    continue
                want = {"%s:%d" % (a, self.port): (up is None and self.nodes[j].running()) or
                        (up is not None and j in up)
                        for j, a in enumerate(self.addrs) if j != i}
                if self.peer_up(d) != want:
                    return False
            return True
        H.wait_until(ok, 30 * H.SLOW, interval=0.1,
                     what="peers: %r" % [self.peer_up(d) for d in self.nodes if d.running()])

    def origin_bytes(self):
        with self.lock:
            return sum(self.by_node.values())

    def settle(self):
        for d in self.nodes:
            if d.running():
                d.settle_fetches()
                d.settle_disk()

    def fetch(self, pick, host, ua, path, n, rng, c_by_port, retries=1):
        """One request through the node pick() names; a dropped connection is retried once on
        another node (as real clients do). Returns the response."""
        hdrs = [("User-Agent", ua)]
        if rng:
            hdrs.append(("Range", "bytes=%d-%d" % (rng[0], rng[1] - 1)))
        port = pick()
        for attempt in range(retries + 1):
            c = c_by_port.get(port)
            try:
                if c is None:
                    c = c_by_port[port] = H.Client(port, timeout=60)
                c.request(path, host=host, headers=hdrs)
                r = c.read_response()
                if (r.header("Connection") or "").lower() == "close":
                    c.close()
                    c_by_port.pop(port, None)
                return r
            except (OSError, H.ProtocolError):
                if c is not None:
                    c.close()
                c_by_port.pop(port, None)
                if attempt == retries:
                    raise
                port = pick(avoid=port)

    def run_set(self, items, pick_factory, clients=CLIENTS):
        """Every item by <clients> keep-alive clients, each in its own order, each request to
        the port pick_factory(seed)() gives; every body checked. Returns the responses'
        X-Upstream-Cache-Status values by (port, path, range)."""
        errors = []
        seen = {}
        lock = threading.Lock()

        def one_client(seed):
            order = list(items)
            random.Random(seed).shuffle(order)
            pick = pick_factory(seed)
            conns = {}
            try:
                for host, ua, path, n, rng in order:
                    r = self.fetch(pick, host, ua, path, n, rng, conns)
                    a, b = rng or (0, n)
                    if r.status != (206 if rng else 200):
                        raise AssertionError("%s %s: status %d" % (host, path, r.status))
                    if bytes(r.body) != H.content(path, a, b):
                        raise AssertionError("%s %s [%d, %d): wrong bytes" % (host, path, a, b))
                    with lock:
                        seen[(path, rng)] = r.header("X-Upstream-Cache-Status")
            except Exception as e:  # noqa: BLE001 (reported below)
                with lock:
                    errors.append(repr(e))
            finally:
                for c in conns.values():
                    c.close()
        threads = [threading.Thread(target=one_client, args=(s,)) for s in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        return seen

    def random_nodes(self, seed):
        rnd = random.Random(1000 + seed)
        ports = [d.port for d in self.nodes]

        def pick(avoid=None):
            live = [p for p, d in zip(ports, self.nodes) if d.running() and p != avoid]
            return rnd.choice(live)
        return pick

    def disk_bytes(self, d):
        return d.metrics().get('cacheparty_cache_bytes{tier="disk"}', 0)

    def assert_every_byte_once(self, unique):
        self.settle()
        self.assertEqual(self.leaked, [])
        self.assertEqual(self.origin_bytes(), sum(unique.values()))
        self.assertEqual({k: v for k, v in self.by_chunk.items() if v > 1}, {})


class Cluster(ClusterBase):
    def test_random_nodes_fetch_every_byte_once(self):
        items, unique = workload("n02")
        unique_bytes = sum(unique.values())
        self.run_set(items, self.random_nodes)
        self.assert_every_byte_once(unique)
        self.assertEqual(sorted(self.by_node), ["n1", "n2", "n3"], self.by_node)
        # Each node's origin bytes are the origin's only (not what its peers sent it).
        self.assertEqual(sum(d.metrics()["cacheparty_upstream_bytes_total"] for d in self.nodes),
                         unique_bytes)
        # What a node passes on from an owner stays in its memory: the disks hold each chunk
        # once (each file a little larger than its bytes: its header).
        disk = [self.disk_bytes(d) for d in self.nodes]
        self.assertGreaterEqual(sum(disk), unique_bytes)
        self.assertLess(sum(disk), unique_bytes * 1.05, disk)
        # Warm, through other nodes again: nothing new, and every answer a hit.
        status = self.run_set(items, lambda s: self.random_nodes(s + 50))
        self.settle()
        self.assertEqual(self.origin_bytes(), unique_bytes)
        self.assertEqual(set(status.values()), {"HIT"})
        m = [d.metrics() for d in self.nodes]
        asked = sum(v for mm in m for k, v in mm.items()
                    if k.startswith("cacheparty_cluster_peer_bytes_asked_total"))
        served = sum(v for mm in m for k, v in mm.items()
                     if k.startswith("cacheparty_cluster_peer_bytes_served_total"))
        self.assertGreater(asked, 0)
        # What one node was sent is what another sent it, unless a node cut a run it had asked
        # of an owner (fetch_split: a reader deep inside it got a fetch of its own, and the old
        # request is read up to the cut, then closed): the owner's bytes past the cut were sent
        # (counted served) and never read. Whether that happens depends on timing.
        splits = sum(d.status()["fetch_split_total"] for d in self.nodes)
        if splits == 0:
            self.assertEqual(asked, served)
        else:
            self.assertLessEqual(asked, served)

    def test_spread_over_the_nodes(self):
        # A few hundred depots' chunks (2000 of 16 KiB: each node's share is within 4 % of a
        # third at one standard deviation, whatever the port the nodes got): origin fetches
        # and disk use per node within 1.3x of each other.
        items = []
        for i in range(2000):
            path = "/n02s/depot/%d/chunk/%040x/size/%d" % (900 + i % 300, i * 7919 + 3, 16384)
            items.append(("cache%d.steamcontent.com" % (i % 3 + 1), STEAM_UA, path, 16384, None))
        self.run_set(items, self.random_nodes, clients=2)
        self.assert_every_byte_once({(p, 0): n for _, _, p, n, _ in items})
        share = dict(self.by_node)
        self.assertEqual(sorted(share), ["n1", "n2", "n3"], share)
        self.assertLessEqual(max(share.values()) / min(share.values()), 1.3, share)
        disk = [self.disk_bytes(d) for d in self.nodes]
        self.assertLessEqual(max(disk) / min(disk), 1.3, disk)

    @unittest.skipUnless(os.access(HAPROXY, os.X_OK), "haproxy not installed (make deps-test)")
    def test_round_robin_front(self):
        items, unique = workload("n02rr", small=120)
        tls_port = H.free_port()
        front = Haproxy(self._tmp, self.addrs, self.port, tls_port,
                        edit=lambda t: t.replace("    balance uri path-only\n",
                                                 "    balance roundrobin\n", 1)
                                        .replace("    hash-type consistent\n", "", 1))
        self.addCleanup(front.stop)
        for i in range(3):
            front.wait_state("cp%d" % (i + 1), "UP", backend="cacheparty")
        self.run_set(items, lambda s: (lambda avoid=None: front.port))
        self.assert_every_byte_once(unique)
        self.run_set(items, lambda s: (lambda avoid=None: front.port))
        self.settle()
        self.assertEqual(self.origin_bytes(), sum(unique.values()))


    def held_object(self, prefix, size, at):
        """An object <prefix>/obj/size/<size> whose origin transfer stops at byte <at> until the
        test opens the gate: the chunks from there on are held at the origin, each in the
        request of its owner. Returns (path, body, gate, held), <held> the (node, first, end)
        of each request held."""
        path = "%s/obj/size/%d" % (prefix, size)
        body = H.content(path, 0, size)
        gate = threading.Event()
        held = []

        def handler(ex):
            rng = H.parse_range(ex.req.header("Range"), size)
            start, end = rng if isinstance(rng, tuple) else (0, size)
            node = (ex.req.header("X-LanCache-Processed-By") or "").split(",")[0].strip()
            hdrs = [("Content-Length", str(end - start)), ("ETag", '"%s"' % prefix[1:]),
                    ("Content-Type", "application/octet-stream")]
            if isinstance(rng, tuple):
                hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size)))
            ex.send_head(206 if isinstance(rng, tuple) else 200, hdrs)
            cut = max(start, min(end, at))
            ex.write(body[start:cut])
            if cut < end:
                with self.lock:
                    held.append((node, start, end))
            while cut < end and not gate.wait(0.05):
                if ex.origin.stopping.is_set():
                    return
            ex.write(body[cut:end])
        self.origin.route(prefix, handler)
        return path, body, gate, held

    def test_node_killed_mid_download(self):
        # An object whose origin transfer stops at byte AT until the test opens the gate.
        size, at = 6 * MIB, 2 * MIB + 4321
        path, body, gate, held = self.held_object("/k02", size, at)
        # One client on each node, each reading the whole object; each says when it has the
        # bytes before AT (then its node is filling the chunk of AT, from that chunk's owner).
        results = [None] * 3
        retried = [False] * 3
        reached = [threading.Event() for _ in range(3)]
        ports = [d.port for d in self.nodes]

        def download(i):
            c = None
            try:
                c = H.Client(ports[i], timeout=60)
                c.request(path, host="dl.n02.example", headers=[("User-Agent", "n02")])
                r = c.read_head()
                c.read_body_until(r, at)
                reached[i].set()
                try:
                    r = c.finish_response(r)
                except (OSError, H.ProtocolError):
                    # Its node died: once more, on another node (as real clients do).
                    retried[i] = True
                    c.close()
                    c = None
                    other = next(p for p, d in zip(ports, self.nodes)
                                 if d.running() and p != ports[i])
                    r = self.fetch(lambda avoid=None: other, "dl.n02.example", "n02", path,
                                   size, None, {}, retries=0)
                results[i] = (r.status, bytes(r.body) == body)
            except Exception as e:  # noqa: BLE001 (asserted below)
                results[i] = repr(e)
                reached[i].set()
            finally:
                if c is not None:
                    c.close()
        threads = [threading.Thread(target=download, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for e in reached:
            self.assertTrue(e.wait(60 * H.SLOW))
        self.assertEqual(results, [None] * 3)
        # The owner of the chunk of AT is the node whose origin request for it is held.
        owners = {n for n, a, b in held if a <= at < b}
        self.assertEqual(len(owners), 1, held)
        victim = int(owners.pop()[1:]) - 1
        self.nodes[victim].proc.kill()
        self.nodes[victim].proc.wait()
        self.nodes[victim].expect_rc = -9
        self.wait_peers(up={j for j in range(3) if j != victim})
        gate.set()
        for t in threads:
            t.join()
        self.assertEqual(results, [(200, True)] * 3)
        self.assertEqual(retried, [j == victim for j in range(3)])
        # The other nodes were streaming that chunk from the victim: each went on without it.
        for j, d in enumerate(self.nodes):
            if j != victim:
                self.assertGreaterEqual(d.metrics()["cacheparty_fetch_peer_fallback_total"], 1)
        # Nothing wrong stored: every node (the victim too, back on its cache dir) serves it.
        self.nodes[victim] = self.start_node(victim)
        self.wait_peers()
        for d in self.nodes:
            r = self.get(path, host="dl.n02.example", daemon=d)
            self.assertEqual((r.status, bytes(r.body) == body), (200, True))

    def test_hung_owner_is_left_when_found_down(self):
        # As above, but the owner hangs (SIGSTOP) instead of dying, and the nodes wait 300 s
        # for a byte: the fills streaming from it move on when its heartbeats fail, not when
        # read_timeout ends them, so the downloads through the other nodes complete (each
        # client gives up after 60 s) without a retry.
        for j in range(3):
            self.nodes[j].stop()
        slow = {"upstream": {"read_timeout": "300s", "first_byte_timeout": "300s"}}
        self.nodes = [self.start_node(j, extra=slow) for j in range(3)]
        self.wait_peers()
        size, at = 6 * MIB, 2 * MIB + 4321
        path, body, gate, held = self.held_object("/k02h", size, at)
        results = [None] * 3
        reached = [threading.Event() for _ in range(3)]
        ports = [d.port for d in self.nodes]

        def download(i):
            c = None
            try:
                c = H.Client(ports[i], timeout=60)
                c.request(path, host="dl.n02.example", headers=[("User-Agent", "n02")])
                r = c.read_head()
                c.read_body_until(r, at)
                reached[i].set()
                r = c.finish_response(r)
                results[i] = (r.status, bytes(r.body) == body)
            except Exception as e:  # noqa: BLE001 (asserted below)
                results[i] = repr(e)
                reached[i].set()
            finally:
                if c is not None:
                    c.close()
        threads = [threading.Thread(target=download, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for e in reached:
            self.assertTrue(e.wait(60 * H.SLOW))
        self.assertEqual(results, [None] * 3)
        owners = {n for n, a, b in held if a <= at < b}
        self.assertEqual(len(owners), 1, held)
        victim = int(owners.pop()[1:]) - 1
        others = [j for j in range(3) if j != victim]
        self.nodes[victim].signal(signal.SIGSTOP)
        # Meanwhile new objects through another node, one after the other, until the hung
        # node is seen down: those it owns are asked of it while it still counts as up, and
        # must be moved too once it is down, though they were asked less than a heartbeat
        # timeout before.
        vaddr = "%s:%d" % (self.addrs[victim], self.port)
        seen_down = threading.Event()
        late = []

        def newcomer(k):
            p = "/n02hn/new/%d/size/%d" % (k, 100000)
            try:
                c = H.Client(ports[others[0]], timeout=60)
                c.request(p, host="dl.n02.example", headers=[("User-Agent", "n02")])
                r = c.read_response()
                c.close()
                late.append((r.status, bytes(r.body) == H.content(p, 0, 100000)))
            except Exception as e:  # noqa: BLE001 (asserted below)
                late.append(repr(e))

        def newcomers():
            # one more every 0.2 s, each on its own connection (so that some are in flight
            # when the node is seen down, asked of it less than a heartbeat timeout before)
            ts = []
            while not seen_down.is_set() and len(ts) < 200:
                t = threading.Thread(target=newcomer, args=(len(ts),))
                t.start()
                ts.append(t)
                time.sleep(0.2)
            for t in ts:
                t.join()
        nt = threading.Thread(target=newcomers)
        nt.start()
        try:
            H.wait_until(lambda: all(not self.peer_up(self.nodes[j])[vaddr] for j in others),
                         30 * H.SLOW, interval=0.1, what="the hung node seen down")
            seen_down.set()
            nt.join()
            self.assertEqual(late, [(200, True)] * len(late))
            gate.set()
            for j in others:
                threads[j].join()
            self.assertEqual([results[j] for j in others], [(200, True)] * 2)
            for j in others:
                self.assertGreaterEqual(
                    self.nodes[j].metrics()["cacheparty_fetch_peer_fallback_total"], 1)
        finally:
            seen_down.set()
            self.nodes[victim].signal(signal.SIGCONT)
            gate.set()
        nt.join()
        threads[victim].join()
        self.assertEqual(results[victim], (200, True))

    def peer_get(self, node, frm, target, host="dl.n02.example", rng=None, cred=None,
                 source=None, method="GET"):
        """A request with a peer credential (<cred>, or one signed for it as node <frm>) to
        node <node>'s cluster address, from <source> (default: node <frm>'s address)."""
        t = int(time.time())
        cred = cred or sign(SECRET, frm, t, method, host, target, rng or "")
        hdrs = [("X-Cacheparty-Peer", cred)]
        if rng:
            hdrs.append(("Range", rng))
        c = H.Client(self.port, host=self.addrs[node], source=source or self.addrs[frm])
        try:
            c.request(target, method=method, host=host, headers=hdrs)
            return c.read_response()
        finally:
            c.close()

    def node_index(self, addr):
        """A node's index in the sorted list (as cluster.h numbers them)."""
        return sorted("%s:%d" % (a, self.port) for a in self.addrs).index(addr)

    def test_peer_credentials(self):
        path = "/n02c/obj/size/%d" % (3 * MIB)
        a = self.node_index("%s:%d" % (self.addrs[0], self.port))
        b = self.node_index("%s:%d" % (self.addrs[1], self.port))
        ok = self.peer_get(0, 1, path, rng="bytes=0-99")
        self.assertEqual(ok.status, 206)
        self.assertEqual(bytes(ok.body), H.content(path, 0, 100))
        self.assertEqual(a, 0)
        t = int(time.time())
        good = sign(SECRET, b, t, "GET", "dl.n02.example", path, "bytes=0-99")
        cases = [
            # a LAN client with a credential made with the secret: not from node b's address
            ("address", dict(cred=good, source="127.0.0.1")),
            # from node b's address, but not made with the secret
            ("mac", dict(cred=sign("not-the-secret-at-all", b, t, "GET", "dl.n02.example",
                                   path, "bytes=0-99"))),
            # a credential of another request (replayed for another range)
            ("mac", dict(cred=good, rng="bytes=0-199")),
            ("time", dict(cred=sign(SECRET, b, t - 1000, "GET", "dl.n02.example", path,
                                    "bytes=0-99"))),
            ("syntax", dict(cred="1 2 3")),
            # a node's own index from another address
            ("address", dict(cred=sign(SECRET, a, t, "GET", "dl.n02.example", path,
                                       "bytes=0-99"))),
        ]
        before = self.origin.request_count()
        for why, kw in cases:
            kw.setdefault("rng", "bytes=0-99")
            r = self.peer_get(0, 1, path, **kw)
            self.assertEqual((r.status, r.header("X-Cacheparty-Peer-Refused")), (403, why), kw)
        self.assertEqual(self.origin.request_count(), before)
        self.assertEqual(self.nodes[0].metrics()['cacheparty_errors_total{kind="peer_refused"}'],
                         len(cases))

    def test_refused_request_body_is_never_read_as_a_request(self):
        # A refused credential on a request with a body: one answer, then the connection
        # closes, the body unread (it would be the next request, another client's behind a
        # front that pools its server connections).
        smuggled = b"GET /lancache-heartbeat HTTP/1.1\r\nHost: x\r\n\r\n"
        c = H.Client(self.port, host=self.addrs[0], source="127.0.0.1")
        try:
            c.request("/n02s/x", method="POST", host="dl.n02.example",
                      headers=[("X-Cacheparty-Peer", "1 2 3"),
                               ("Content-Length", str(len(smuggled)))], body=smuggled)
            r = c.read_response()
            self.assertEqual((r.status, r.header("X-Cacheparty-Peer-Refused")), (403, "syntax"))
            self.assertTrue(c.wait_closed())
            self.assertEqual(list(c._ready), [])
        finally:
            c.close()

    def test_digest_only_to_a_peer(self):
        # The agreement digest is an HMAC of guessable text: a LAN client's heartbeat gets none,
        # a signed one (a peer's) does.
        r = self.get("/lancache-heartbeat", host="x", daemon=self.nodes[0])
        self.assertEqual(r.status, 204)
        self.assertIsNone(r.header("X-Cacheparty-Cluster"))
        r = self.peer_get(0, 1, "/lancache-heartbeat", host="x")
        self.assertEqual(r.status, 204)
        self.assertRegex(r.header("X-Cacheparty-Cluster") or "", r"^[0-9a-f]{16,}$")

    def test_peer_request_is_never_sent_on(self):
        # A signed peer request to node 1 for chunks that other nodes own (of eight chunks, some
        # are: the owners follow from the path): all eight filled from the origin by node 1
        # itself, never asked of a node.
        path = "/n02f/obj/size/%d" % (8 * MIB)
        before = self.nodes[0].metrics()
        for k in range(8):
            r = self.peer_get(0, 1, path, rng="bytes=%d-%d" % (k * MIB, k * MIB + 9))
            self.assertEqual((r.status, bytes(r.body)),
                             (206, H.content(path, k * MIB, k * MIB + 10)))
        self.settle()
        self.assertEqual(set(self.by_node), {"n1"})
        after = self.nodes[0].metrics()
        asked = [k for k in after if k.startswith("cacheparty_cluster_peer_requests_total")]
        self.assertEqual(len(asked), 2)
        for k in asked:
            self.assertEqual(after[k], before.get(k, 0), k)
        # The whole object through node 2: the chunks node 1 owns come from node 1 (which has
        # them), the others are filled by their owners now; so the eight were not all node 1's.
        r = self.get(path, host="dl.n02.example", daemon=self.nodes[1])
        self.assertEqual((r.status, bytes(r.body) == H.content(path, 0, 8 * MIB)), (200, True))
        self.settle()
        self.assertNotEqual(set(self.by_node), {"n1"})

    def test_owner_hit_tells_of_its_chunk_only(self):
        # Chunks 1, 3, 5 and 7 of each of 8 objects of 9 chunks read through node 3 (so their
        # owners have them, and node 1 has them only where it is the owner), then each object
        # whole through node 1: chunk 0 first, then read-ahead asks 1-2, 3-4, 5-6 and 7-8 (one
        # request per chunk a node owns, one per stretch for the origin). The bytes node 1 counts as misses are
        # the five cold chunks of each, whichever node owns which chunk: an owner's HIT for
        # chunk 1 says nothing of chunk 2.
        objs = ["/n02h/obj/%d/size/%d" % (k, 9 * MIB) for k in range(8)]
        for path in objs:
            for k in (1, 3, 5, 7):
                r = self.get(path, host="dl.n02.example", daemon=self.nodes[2],
                             headers=[("Range", "bytes=%d-%d" % (k * MIB, (k + 1) * MIB - 1))])
                self.assertEqual((r.status, bytes(r.body) == H.content(path, k * MIB,
                                                                      (k + 1) * MIB)),
                                 (206, True))
        self.settle()
        warm = self.origin_bytes()
        self.assertEqual(warm, 32 * MIB)
        d = self.nodes[0]
        before = [dm.metrics() for dm in self.nodes]
        for path in objs:
            r = self.get(path, host="dl.n02.example", daemon=d)
            self.assertEqual((r.status, bytes(r.body) == H.content(path, 0, 9 * MIB)),
                             (200, True))
        self.settle()
        after = [dm.metrics() for dm in self.nodes]
        miss = 'cacheparty_response_bytes_total{cache="miss"}'
        hit = 'cacheparty_response_bytes_total{cache="hit"}'
        with self.lock:
            twice = {k: v for k, v in self.by_chunk.items() if v > 1}
            seen = dict(self.by_node)
        self.assertEqual(self.origin_bytes() - warm, 40 * MIB, (seen, twice, after))
        self.assertEqual(after[0][miss] - before[0].get(miss, 0), 40 * MIB)
        self.assertEqual(after[0][hit] - before[0].get(hit, 0), 32 * MIB)
        # What the owners sent node 1 is counted there, not again by them (so the nodes'
        # counts add up to what the clients got).
        for j in (1, 2):
            self.assertEqual((after[j].get(miss, 0) - before[j].get(miss, 0),
                              after[j].get(hit, 0) - before[j].get(hit, 0)), (0, 0))

    def test_owner_without_its_origin_is_skipped(self):
        # Node 2 cannot reach the origin (its override is a closed port): it answers 502 for
        # the chunks it owns, and node 1 asks the origin for those itself; node 2 stays up
        # (its heartbeats pass), and every client of node 1 gets 200 and the right bytes.
        self.nodes[1].stop()
        self.nodes[1] = self.start_node(
            1, extra={"upstream": {"override": "127.0.0.1:%d" % H.closed_port()}})
        self.wait_peers()
        d = self.nodes[0]
        f0 = d.metrics().get("cacheparty_fetch_peer_fallback_total", 0)
        for k in range(30):
            path = "/n02o/obj/%d/size/%d" % (k, 65536)
            r = self.get(path, host="dl.n02.example", daemon=d)
            self.assertEqual((r.status, bytes(r.body) == H.content(path, 0, 65536)), (200, True))
        self.settle()
        self.assertNotIn("n2", self.by_node)
        self.assertEqual(sum(self.by_node.values()), 30 * 65536)
        k = d.metrics().get("cacheparty_fetch_peer_fallback_total", 0) - f0
        self.assertGreater(k, 0)
        self.assertTrue(self.peer_up(d)["%s:%d" % (self.addrs[1], self.port)])
        # The k objects node 2 owns stay in node 1's memory only: the disks hold the others
        # once (each file its bytes and a header within one more 4 KiB block).
        disk = sum(self.disk_bytes(dm) for dm in self.nodes)
        self.assertGreaterEqual(disk, (30 - k) * 65536)
        self.assertLessEqual(disk, (30 - k) * (65536 + 4096))

    def test_owner_checks_admission(self):
        # Node 1 admits listed hosts only now; a peer's request for another is refused there,
        # credential or not.
        self.nodes[0].stop()
        self.nodes[0] = self.start_node(0, extra={"domains": {"allow_unlisted": "no"}})
        self.wait_peers()
        r = self.peer_get(0, 1, "/n02a/obj/size/1000", rng="bytes=0-9")
        self.assertEqual(r.status, 403)
        self.assertIsNone(r.header("X-Cacheparty-Peer-Refused"))
        self.assertEqual(self.by_node, {})

    def test_purge_reaches_every_node(self):
        items, unique = workload("n02p", small=30, big=(), ranges=0)
        self.run_set(items, self.random_nodes)
        self.run_set(items, lambda s: self.random_nodes(s + 7))
        self.settle()
        cold = self.origin_bytes()
        self.assertEqual(cold, sum(unique.values()))
        host, ua, path, n, _ = items[0]
        d = self.nodes[0]
        c = H.Client(d.admin_port)
        c.request(path, method="PURGE", host=host, headers=[("User-Agent", ua)])
        r = c.read_response()
        c.close()
        self.assertEqual(r.status, 200)
        H.wait_until(lambda: sum(v for k, v in d.metrics().items()
                                 if k.startswith("cacheparty_cluster_peer_purges_total")) == 2,
                     20 * H.SLOW, what="the purge done by both peers")
        # Gone from every node, and from each non-owner's memory: asked of the origin once more
        # whichever node is asked, then a hit again everywhere.
        for dm in self.nodes:
            r = self.get(path, host=host, headers=[("User-Agent", ua)], daemon=dm)
            self.assertEqual((r.status, bytes(r.body) == H.content(path, 0, n)), (200, True))
        self.settle()
        self.assertEqual(self.origin_bytes(), cold + n)


class InconsistentLists(ClusterBase):
    peer_get = Cluster.peer_get

    """Node 1 lists nodes 1 and 2; node 2 lists nodes 1, 2 and 3 (which does not run)."""

    def setUp(self):
        H.CPTestCase.setUp(self)
        self.origin = self.start_origin()
        self.by_node, self.by_chunk, self.leaked = {}, {}, []
        self.lock = threading.Lock()
        self.origin.route("/n02", self._count)
        self.port = H.free_port()
        self.addrs = ["127.0.3.%d" % (i + 1) for i in range(3)]
        two = ", ".join("%s:%d" % (a, self.port) for a in self.addrs[:2])
        self.nodes = [self.start_node(0, nodes=two), self.start_node(1)]

    def _count(self, ex):
        node = (ex.req.header("X-LanCache-Processed-By") or "").split(",")[0].strip()
        with self.lock:
            if ex.req.header("X-Cacheparty-Peer") is not None:
                self.leaked.append(ex.req.path)
            self.by_node[node] = self.by_node.get(node, 0) + 1
        H.default_handler(ex)

    def disagrees(self, d):
        return {k: v for k, v in d.metrics().items()
                if k.startswith("cacheparty_cluster_peer_disagrees")}

    def test_no_peering_and_no_loop(self):
        p0, p1 = ["%s:%d" % (a, self.port) for a in self.addrs[:2]]
        H.wait_until(lambda: self.disagrees(self.nodes[0]) ==
                     {'cacheparty_cluster_peer_disagrees{peer="%s"}' % p1: 1} and
                     self.disagrees(self.nodes[1]).get(
                         'cacheparty_cluster_peer_disagrees{peer="%s"}' % p0) == 1,
                     30 * H.SLOW, what="both nodes see that they disagree")
        # Each fills from the origin itself, and never asks the other.
        for i in range(20):
            path = "/n02/inc/%d/size/%d" % (i, 100000)
            for d in self.nodes:
                r = self.get(path, host="dl.n02.example", daemon=d)
                self.assertEqual((r.status, bytes(r.body) == H.content(path, 0, 100000)),
                                 (200, True))
        self.assertEqual(self.by_node, {"n1": 20, "n2": 20})
        for d in self.nodes:
            self.assertEqual(sum(v for k, v in d.metrics().items()
                                 if k.startswith("cacheparty_cluster_peer_requests_total")), 0)
        # A peer request that node 1 gets (signed by node 2, as node 1 numbers them) is
        # answered from the origin, whoever owns the chunk: never sent on.
        path = "/n02/inc/peer/size/%d" % (4 * MIB)
        for k in range(4):
            r = self.peer_get(0, 1, path, rng="bytes=%d-%d" % (k * MIB, k * MIB + 9))
            self.assertEqual((r.status, bytes(r.body)),
                             (206, H.content(path, k * MIB, k * MIB + 10)))
        self.assertEqual(self.by_node["n1"], 24)
        self.assertEqual(self.leaked, [])
        self.assertEqual(sum(v for k, v in self.nodes[0].metrics().items()
                             if k.startswith("cacheparty_cluster_peer_requests_total")), 0)


if __name__ == "__main__":
    H.main()
