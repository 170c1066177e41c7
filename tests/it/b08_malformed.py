# SPDX-License-Identifier: BSD-2-Clause
"""b08: malformed or oversized request heads get 400/414/431/505 and the connection is closed;
nothing reaches the origin (docs/interfaces.md, the table of "HTTP on `listen`")."""

import harness as H

HOST = b"Host: game.example.test\r\n"
GET = b"GET /b08/size/10 HTTP/1.1\r\n"

# name -> (request bytes, expected status)
CASES = {
    "bare_lf_request_line": (b"GET /b08/size/10 HTTP/1.1\n" + HOST + b"\r\n", 400),
    "bare_lf_header": (GET + b"Host: game.example.test\nX-A: b\r\n\r\n", 400),
    "bare_lf_everywhere": (b"GET /b08/size/10 HTTP/1.1\nHost: game.example.test\n\n", 400),
    "obs_fold": (GET + HOST + b"X-A: b\r\n c\r\n\r\n", 400),
    "space_before_colon": (GET + HOST + b"X-Foo : 1\r\n\r\n", 400),
    "space_in_name": (GET + HOST + b"X Foo: 1\r\n\r\n", 400),
    "no_colon": (GET + HOST + b"XFoo\r\n\r\n", 400),
    "control_byte_in_value": (GET + HOST + b"X-Foo: a\x01b\r\n\r\n", 400),
    "del_in_value": (GET + HOST + b"X-Foo: a\x7fb\r\n\r\n", 400),
    "nul_in_value": (GET + HOST + b"X-Foo: a\x00b\r\n\r\n", 400),
    "control_byte_in_target": (b"GET /b08/a\x01b HTTP/1.1\r\n" + HOST + b"\r\n", 400),
    "two_host_same": (GET + HOST + HOST + b"\r\n", 400),
    "two_host_different": (GET + HOST + b"Host: other.example.test\r\n\r\n", 400),
    "no_host_http11": (GET + b"User-Agent: t\r\n\r\n", 400),
    "no_host_http10": (b"GET /b08/size/10 HTTP/1.0\r\n\r\n", 400),
    "empty_host": (GET + b"Host: \r\n\r\n", 400),
    "bad_host": (GET + b"Host: bad host\r\n\r\n", 400),
    "te_on_get": (GET + HOST + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "te_on_head": (b"HEAD /b08/size/10 HTTP/1.1\r\n" + HOST +
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "body_on_get": (GET + HOST + b"Content-Length: 5\r\n\r\nhello", 400),
    "garbage_request_line": (b"HELLO\r\n" + HOST + b"\r\n", 400),
    "target_over_8k_414": (b"GET /" + b"a" * (8 * 1024 + 10) + b" HTTP/1.1\r\n" + HOST + b"\r\n",
                           414),
    "head_over_32k_431": (GET + HOST + b"".join(b"X-Pad-%02d: %s\r\n" % (i, b"p" * 1000)
                                                for i in range(40)) + b"\r\n", 431),
    "over_100_fields_431": (GET + HOST + b"".join(b"X-F%d: v\r\n" % i for i in range(110)) +
                            b"\r\n", 431),
    "http20_505": (b"GET /b08/size/10 HTTP/2.0\r\n" + HOST + b"\r\n", 505),
    "http12_505": (b"GET /b08/size/10 HTTP/1.2\r\n" + HOST + b"\r\n", 505),
}


class Malformed(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def check(self, data, status):
        c = self.client()
        c.send(data, expect=["GET"])
        try:
            r = c.read_response()
        except H.ProtocolError as e:
            self.fail("no %d response: %s" % (status, e))
        self.assertStatus(r, status)
        self.assertProcessedBy(r)
        self.assertClosed(c, what="connection after %d" % status)
        self.assertEqual(self.origin.request_count(), 0, "request reached the origin")

    def test_limits_not_hit(self):
        # a 20 KiB head with 90 fields and a 7 KiB target is fine
        target = "/b08/ok/size/10?" + "q" * 7000
        c = self.client()
        c.request(target, headers=[("X-F%d" % i, "v" * 200) for i in range(88)])
        r = c.read_response()
        self.assertStatus(r, 200)
        self.assertBody(r, "/b08/ok/size/10")


def _make(data, status):
    return lambda self: self.check(data, status)


for _name, (_data, _status) in CASES.items():
    setattr(Malformed, "test_" + _name, _make(_data, _status))


if __name__ == "__main__":
    raise SystemExit(H.main())
