# SPDX-License-Identifier: BSD-2-Clause
"""Self-test of the harness itself (origin, DNS stub, client helpers), no daemon involved.
Not part of run_all.py (its name has no category letter + digit): python3 tests/it/selftest.py"""

import socket
import struct
import threading
import time

import harness as H


class SelfTest(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.origin = self.start_origin()

    def direct(self):
        c = H.Client(self.origin.port)
        self._clients.append(c)
        return c

    def test_content_blocks(self):
        a = H.content("/x/size/100000", 0, 100000)
        self.assertEqual(len(a), 100000)
        self.assertEqual(H.content("/x/size/100000", 4090, 5000), a[4090:5000])
        self.assertNotEqual(a[:4096], a[4096:8192])
        self.assertNotEqual(H.content("/y/size/100000", 0, 100), a[:100])
        t0 = time.monotonic()
        big = H.content("/size/67108864", 0, 64 * H.MIB)
        self.assertEqual(len(big), 64 * H.MIB)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIsNone(H.first_mismatch(big, big))
        b2 = bytearray(big)
        b2[12345678] ^= 1
        self.assertEqual(H.first_mismatch(bytes(b2), big), 12345678)

    def test_sizes_keepalive(self):
        c = self.direct()
        for n in (0, 1, 1024, H.MIB, 5 * H.MIB + 3):
            c.request(H.size_path(n))
            r = c.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, H.size_path(n))
        self.assertEqual(self.origin.connections, 1)
        self.assertEqual(len(self.origin.requests), 5)
        self.assertEqual(self.origin.requests[0].header("host"), H.DEFAULT_HOST)

    def test_pipelined_head_range(self):
        c = self.direct()
        c.send(H.build_request("GET", "/size/10") + H.build_request("HEAD", "/size/20") +
               H.build_request("GET", "/size/30", headers=[("Range", "bytes=5-9")]),
               expect=["GET", "HEAD", "GET"])
        a, b, d = c.read_responses(3)
        self.assertBody(a, "/size/10")
        self.assertEqual(b.header("content-length"), "20")
        self.assertEqual(len(b.body), 0)
        self.assertStatus(d, 206)
        self.assertEqual(d.header("content-range"), "bytes 5-9/30")
        self.assertBody(d, "/size/30", 5, 10)

    def test_chunked_close_status(self):
        c = self.direct()
        c.request("/size/200000?chunked=1")
        r = c.read_response()
        self.assertEqual(r.framing, "chunked")
        self.assertBody(r, "/size/200000")
        c.request("/size/77?status=404")
        r = c.read_response()
        self.assertStatus(r, 404)
        self.assertBody(r, "/size/77")
        c.request("/size/5000?close=1")
        r = c.read_response()
        self.assertEqual(r.framing, "close")
        self.assertBody(r, "/size/5000")
        self.assertTrue(c.peer_closed)

    def test_abort_stall_delay(self):
        c = self.direct()
        c.request("/size/100000?abort=1000")
        with self.assertRaises(H.ProtocolError):
            c.read_response()
        self.assertEqual(len(c.partial.body), 1000)
        c2 = self.direct()
        c2.request("/size/10?stall=1")
        self.assertTrue(c2.is_open(0.3))
        c2.close()
        self.origin.wait_closed_conns(2)

    def test_custom_handler(self):
        def h(ex):
            ex.send(200, b"hello", [("Connection", "x-foo"), ("X-Foo", "1")])
        self.origin.route("/custom", h)
        c = self.direct()
        c.request("/custom/a")
        r = c.read_response()
        self.assertEqual(bytes(r.body), b"hello")
        self.assertEqual(r.header("x-foo"), "1")

    def test_dns_stub(self):
        dns = self.start_dns({"game.example.test": ["127.0.0.1", "::1"]}, ttl=30)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)

        def q(name, qtype):
            pkt = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
            for label in name.split("."):
                pkt += bytes([len(label)]) + label.encode()
            pkt += b"\0" + struct.pack(">HH", qtype, 1)
            s.sendto(pkt, ("127.0.0.1", dns.port))
            return s.recv(512)

        r = q("Game.Example.Test", 1)
        self.assertEqual(r[:2], b"\x12\x34")
        self.assertEqual(struct.unpack(">H", r[6:8])[0], 1)
        self.assertEqual(r[-4:], socket.inet_aton("127.0.0.1"))
        r = q("game.example.test", 28)
        self.assertEqual(r[-16:], socket.inet_pton(socket.AF_INET6, "::1"))
        r = q("nope.example.test", 1)
        self.assertEqual(struct.unpack(">H", r[2:4])[0] & 0xF, 3)
        self.assertEqual(dns.query_count(), 3)
        self.assertEqual(dns.query_count("game.example.test"), 2)
        s.close()

    def test_run_many(self):
        plans = [["/m/%d/size/%d" % (i, 1000 + i * 7), "/size/20000"] for i in range(50)]
        res = H.run_many(self.origin.port, plans, timeout=30)
        self.assertEqual(res["errors"], [])
        self.assertEqual(res["ok"], 100)

    def test_server_side_closed(self):
        c = self.direct()
        c.request("/size/10")
        c.read_response()
        self.assertFalse(H.server_side_closed(self.origin.port, c.local_port))
        c.request("/size/10?closeafter=1")
        c.read_response()
        self.origin.wait_closed_conns(1)
        H.wait_until(lambda: H.server_side_closed(self.origin.port, c.local_port), 5)


if __name__ == "__main__":
    raise SystemExit(H.main())
