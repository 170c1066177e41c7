# SPDX-License-Identifier: BSD-2-Clause
"""b19r (review repro): cachelog-json's "path" is nginx's $request_uri, which for an
absolute-form request line ("GET http://host/p?q HTTP/1.1") is "/p?q" (nginx's uri_start is
the path after the authority); cacheparty logs the whole request-target instead."""

import json

import harness as H


class JsonPathAbsoluteForm(H.CPTestCase):
    def test_path_is_request_uri(self):
        self.setup_proxy({"log": {"access_format": "json"}})
        c = self.client()
        c.send(b"GET http://" + H.DEFAULT_HOST.encode() + b"/b19r/j/size/10?q=1 HTTP/1.1\r\n"
               b"Host: " + H.DEFAULT_HOST.encode() + b"\r\n\r\n", expect=["GET"])
        self.assertStatus(c.read_response(), 200)
        d = self.daemon
        lines = H.wait_until(lambda: d.access_lines(), 10 * H.SLOW, 0.05, "a log line")
        a = json.loads(lines[0])
        self.assertEqual(a["path"], "/b19r/j/size/10?q=1")


if __name__ == "__main__":
    raise SystemExit(H.main())
