# SPDX-License-Identifier: BSD-2-Clause
"""h02: a hostile origin (issue #7, upstream response hardening) with the scripted origin:
invalid framing in the head (duplicate or invalid Content-Length, Content-Length with
Transfer-Encoding, other transfer codings, 101, an oversized head) is a 502 before any head
reaches the client and the origin connection is not reused; bad chunk framing never completes a
response nor gets cached; more bytes than Content-Length are dropped and that connection is not
reused; close-delimited and short bodies are never cached. After each case the daemon still
serves a normal request. Both paths run: the cache fill (plain GET) and the uncached forward
(Authorization: bypass)."""

import harness as H

BYPASS = [("Authorization", "Bearer h02")]


def raw_handler(data, close=True):
    """An origin handler that writes <data> verbatim (then closes unless told otherwise)."""
    def h(ex):
        ex.write(data)
        if close:
            ex.close()
        else:
            ex.conn.wait_peer_close()
            ex.close()
    return h


BAD_HEADS = {
    "cl_duplicate_differing": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Length: 11\r\n"
                              b"\r\n0123456789X",
    "cl_list_differing": b"HTTP/1.1 200 OK\r\nContent-Length: 10, 11\r\n\r\n0123456789X",
    "cl_negative": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nxyz",
    "cl_hex": b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n0123456789abcdef",
    "cl_plus": b"HTTP/1.1 200 OK\r\nContent-Length: +10\r\n\r\n0123456789",
    "cl_space_inside": b"HTTP/1.1 200 OK\r\nContent-Length: 1 0\r\n\r\n0123456789",
    "cl_overflow": b"HTTP/1.1 200 OK\r\nContent-Length: 184467440737095516160\r\n\r\nxyz",
    "cl_empty": b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nxyz",
    "cl_with_te": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5\r\nhello\r\n0\r\n\r\n",
    "te_with_cl_after": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n"
                        b"\r\n5\r\nhello\r\n0\r\n\r\n",
    "te_gzip_chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                       b"5\r\nhello\r\n0\r\n\r\n",
    "te_chunked_twice": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "te_identity": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nhello",
    "te_obs_fold": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x\r\n chunked\r\n\r\n"
                   b"5\r\nhello\r\n0\r\n\r\n",
    "space_before_colon_cl": b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
    "bare_lf_head": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "status_101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\n\r\n",
    "status_999": b"HTTP/1.1 999 What\r\nContent-Length: 0\r\n\r\n",
    "http2_status": b"HTTP/2 200\r\nContent-Length: 0\r\n\r\n",
    "http09_body": b"hello, no head at all\r\n\r\n",
    "control_in_value": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a\x01b\r\n\r\nhello",
    "oversized_head": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%03d: %s\r\n" % (i, b"p" * 900)
                                                       for i in range(80)) +
                      b"Content-Length: 5\r\n\r\nhello",
    "too_many_fields": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-F%d: v\r\n" % i
                                                        for i in range(120)) +
                       b"Content-Length: 5\r\n\r\nhello",
}

BAD_CHUNKED = {
    "bad_hex": b"5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n",
    "no_crlf_after_data": b"5\r\nhelloXX5\r\nhello\r\n0\r\n\r\n",
    "lf_only": b"5\nhello\n0\n\n",
    "size_overflow": b"5\r\nhello\r\nfffffffffffffffffff\r\nx\r\n0\r\n\r\n",
    "negative_size": b"5\r\nhello\r\n-1\r\nx\r\n0\r\n\r\n",
    "data_longer_than_size": b"3\r\nhello\r\n0\r\n\r\n",
    "control_in_extension": b"5;a=\x01\r\nhello\r\n0\r\n\r\n",
    "eof_mid_chunk": b"5\r\nhello\r\n100\r\nonly a few bytes",
    "eof_before_last_chunk": b"5\r\nhello\r\n",
}


class UpstreamHostile(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def serves_normally(self):
        r = self.get("/h02/ok/size/2000")
        self.assertStatus(r, 200)
        self.assertBody(r, "/h02/ok/size/2000")

    def check_502_not_reused(self, path, headers):
        conns = self.origin.connections
        closed = self.origin.closed_conns
        c = self.client()
        c.request(path, headers=headers)
        r = c.read_response()
        self.assertStatus(r, 502)
        self.assertProcessedBy(r)
        self.assertIsNone(r.header("X-A"))
        # the origin connection was closed by the daemon, never reused
        self.origin.wait_closed_conns(closed + (self.origin.connections - conns))
        # the client connection is still usable
        c.request("/h02/after/size/100")
        self.assertBody(c.read_response(), "/h02/after/size/100")

    def test_invalid_heads_502_before_head(self):
        for i, (name, data) in enumerate(BAD_HEADS.items()):
            for mode, hdrs in (("fill", []), ("bypass", BYPASS)):
                with self.subTest(case=name, path=mode):
                    path = "/h02/bad%d%s/x" % (i, mode)
                    self.origin.route(path, raw_handler(data, close=False))
                    n = self.origin.request_count()
                    self.check_502_not_reused(path, hdrs)
                    # never cached: the next request asks the origin again
                    self.check_502_not_reused(path, hdrs)
                    self.assertGreaterEqual(self.origin.request_count(), n + 2)
        self.serves_normally()

    def test_bad_chunk_framing_never_completes_nor_cached(self):
        for i, (name, chunks) in enumerate(BAD_CHUNKED.items()):
            for mode, hdrs in (("fill", []), ("bypass", BYPASS)):
                with self.subTest(case=name, path=mode):
                    path = "/h02/ch%d%s/x" % (i, mode)
                    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    self.origin.route(path, raw_handler(head + chunks,
                                                        close=name.startswith("eof")))
                    for attempt in range(2):
                        n = self.origin.request_count()
                        c = self.client()
                        c.request(path, headers=hdrs)
                        try:
                            r = c.read_response()
                        except H.ProtocolError:
                            # head sent, then the close before the end: the body is a prefix
                            # of what the framing delivered before it broke
                            self.assertEqual(c.partial.status, 200)
                            good = b"hello" + (b"only a few bytes" if name == "eof_mid_chunk"
                                               else b"")
                            self.assertTrue(good.startswith(bytes(c.partial.body)),
                                            bytes(c.partial.body))
                        else:
                            self.assertStatus(r, 502)
                        self.assertGreater(self.origin.request_count(), n, "served from cache")
        self.serves_normally()

    def test_more_bytes_than_content_length_dropped_not_reused(self):
        def h(ex):
            body = H.content("/h02/extra/size/1000", 0, 1000)
            ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + body +
                     b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL")
            ex.conn.wait_peer_close()
            ex.close()
        for mode, hdrs in (("fill", []), ("bypass", BYPASS)):
            with self.subTest(path=mode):
                self.origin.route("/h02/extra/size/1000", h)
                conns = self.origin.connections
                closed = self.origin.closed_conns
                c = self.client()
                c.request("/h02/extra/size/1000", headers=hdrs)
                r = c.read_response()
                self.assertStatus(r, 200)
                self.assertBody(r, "/h02/extra/size/1000")
                self.origin.wait_closed_conns(closed + (self.origin.connections - conns))
                # nothing of the extra bytes reaches the client as a response
                c.request("/h02/extra2/size/100", headers=hdrs)
                r2 = c.read_response()
                self.assertBody(r2, "/h02/extra2/size/100")
                self.assertNotIn(b"EVIL", bytes(r2.body))
        r = self.get("/h02/extra/size/1000")
        self.assertBody(r, "/h02/extra/size/1000")

    def test_close_delimited_never_cached(self):
        path = "/h02/cd/size/20000"
        for k in range(3):
            n = self.origin.request_count()
            r = self.get(path + "?close=1")
            self.assertStatus(r, 200)
            self.assertBody(r, path)
            self.assertGreater(self.origin.request_count(), n, "close-delimited body cached")
        self.serves_normally()

    def test_short_body_never_cached(self):
        total = 300000
        path = "/h02/short/size/%d" % total
        state = {"n": 0}

        def h(ex):
            state["n"] += 1
            ex.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"s\"\r\n\r\n" % total)
            ex.write(H.content(path, 0, 70000))
            ex.close()
        self.origin.route(path, h)
        for k in range(2):
            c = self.client()
            c.request(path)
            try:
                r = c.read_response()
                self.assertStatus(r, 502)
            except H.ProtocolError:
                self.assertLess(len(c.partial.body), total)
                self.assertBody(c.partial.body, path, 0, len(c.partial.body))
        self.assertGreaterEqual(state["n"], 2, "a short body was served from the cache")
        # the origin heals: the whole object, right bytes
        self.origin.routes = [(p, f) for p, f in self.origin.routes if p != path]
        r = self.get(path)
        self.assertBody(r, path)
        r = self.get(path)
        self.assertBody(r, path)
        self.serves_normally()


if __name__ == "__main__":
    raise SystemExit(H.main())
