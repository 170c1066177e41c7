# SPDX-License-Identifier: BSD-2-Clause
"""b07: methods other than GET and HEAD get 405 with Allow: GET, HEAD (CONNECT also closes).
The heartbeat answers 204 to any method but CONNECT, and to HTTP/1.0 without Host, as lancache's
nginx does (issue 17): a body already in is dropped and the connection kept; one still to come
is not waited for, the 204 closes the connection."""

import harness as H


class Methods(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy()

    def check_405(self, method, body=b""):
        c = self.client()
        hdrs = [("Content-Length", str(len(body)))] if body else []
        c.request("/b07/size/10", method=method, headers=hdrs, body=body)
        r = c.read_response()
        self.assertStatus(r, 405)
        self.assertProcessedBy(r)
        self.assertEqual(sorted(r.tokens("Allow")), ["get", "head"], r.raw_head)
        self.assertEqual(self.origin.request_count(), 0)
        return c

    def test_post_405(self):
        self.check_405("POST", b"hello=world")

    def test_post_no_body_405(self):
        self.check_405("POST")

    def test_put_405(self):
        self.check_405("PUT", b"x" * 100)

    def test_delete_405(self):
        self.check_405("DELETE")

    def test_options_405(self):
        self.check_405("OPTIONS")

    def heartbeat(self, c, method="GET", headers=(), body=b"", raw=None):
        if raw is not None:
            c.send(raw, expect=[method])
        else:
            c.request("/lancache-heartbeat", method=method, headers=list(headers), body=body)
        r = c.read_response()
        self.assertStatus(r, 204)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
        self.assertProcessedBy(r)
        return r

    def test_heartbeat_any_method_keeps_the_connection(self):
        c = self.client()
        for m in ("POST", "PUT", "DELETE", "OPTIONS", "PURGE", "HEAD", "GET"):
            r = self.heartbeat(c, m)
            self.assertNotEqual(r.header("Connection"), "close", m)
        # a body that came with the head is dropped: the next request on the connection works
        self.heartbeat(c, "POST", [("Content-Length", "11")], b"hello=world")
        self.heartbeat(c, "GET", [("Content-Length", "3")], b"abc")
        c.request("/b07/after/size/10")
        self.assertBody(c.read_response(), "/b07/after/size/10")
        self.assertEqual(self.origin.request_count(), 1)

    def test_heartbeat_body_not_sent_closes(self):
        c = self.client()
        c.send(b"POST /lancache-heartbeat HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
               b"\r\nabc", expect=["POST"])
        r = c.read_response()
        self.assertStatus(r, 204)
        self.assertEqual(r.header("Connection"), "close")
        self.assertTrue(c.wait_closed())
        c = self.client()
        r = self.heartbeat(c, "POST", raw=b"POST /lancache-heartbeat HTTP/1.1\r\nHost: x\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        self.assertEqual(r.header("Connection"), "close")

    def test_heartbeat_http10_without_host(self):
        c = self.client()
        self.heartbeat(c, raw=b"GET /lancache-heartbeat HTTP/1.0\r\n\r\n")
        c = self.client()
        self.heartbeat(c, "POST", raw=b"POST /lancache-heartbeat?x=1 HTTP/1.0\r\n\r\n")
        # elsewhere, HTTP/1.0 without Host stays 400
        c = self.client()
        c.send(b"GET /b07/size/10 HTTP/1.0\r\n\r\n", expect=["GET"])
        self.assertStatus(c.read_response(), 400)
        self.assertEqual(self.origin.request_count(), 0)

    def test_heartbeat_connect_is_refused(self):
        """CONNECT is never a heartbeat: with a path it is malformed (400), and it closes."""
        c = self.client()
        c.send(b"CONNECT /lancache-heartbeat HTTP/1.1\r\nHost: x\r\n\r\n", expect=["CONNECT"])
        self.assertStatus(c.read_response(), 400)
        self.assertTrue(c.wait_closed())

    def test_purge_on_listen_405(self):
        # PURGE belongs to the admin listener only
        self.check_405("PURGE")

    def test_connect_405_and_close(self):
        c = self.client()
        c.send(b"CONNECT game.example.test:443 HTTP/1.1\r\nHost: game.example.test:443\r\n\r\n")
        r = c.read_response()
        self.assertStatus(r, 405)
        self.assertProcessedBy(r)
        self.assertEqual(sorted(r.tokens("Allow")), ["get", "head"])
        self.assertClosed(c)


if __name__ == "__main__":
    raise SystemExit(H.main())
