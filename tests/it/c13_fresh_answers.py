# SPDX-License-Identifier: BSD-2-Clause
"""c13: fresh answers that are not objects (issue 16). A fill's answer that the chunk cache does
not store (404, 410, 503, a redirect not followed) is kept in memory when the origin gives it an
explicit freshness lifetime (s-maxage, max-age, Expires) and reused, as a HIT with its Age, until
it is stale; never when the origin forbids it (no-store, no-cache, private, must-understand on a
status it does not know), when the key cannot tell it (Vary), when it is personal (Set-Cookie),
when it is stale on arrival, or with answers_memory = 0. ?nocache= refetches, a new object
version replaces it, PURGE drops it.

No test depends on timing: a stale entry is made stale by the origin's own Date or Age, or by
waiting longer than its whole lifetime."""

import email.utils
import time

import harness as H


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


class FreshAnswers(H.CPTestCase):
    def start(self, **cache):
        over = {"server": {"admin_listen": "auto"}}
        if cache:
            over["cache"] = cache
        return self.setup_proxy(over)

    def origin_count(self, prefix):
        return sum(1 for r in self.origin.requests if r.path.startswith(prefix))

    def route(self, prefix, status, fields, body=None):
        """The origin answers every request under <prefix> with <status>, <fields> and a body
        naming the request's number (so a reused answer shows the first one's)."""
        seen = []

        def answer(ex):
            seen.append(ex.req)
            b = body if body is not None else ("%d #%d for %s\n" % (status, len(seen),
                                                                     prefix)).encode() * 8
            ex.send(status, b, list(fields))
        self.origin.route(prefix, answer)
        return seen

    def test_404_with_max_age_is_reused_as_a_hit(self):
        d = self.start()
        date = http_date(time.time())
        self.route("/c13/404", 404, [("Cache-Control", "max-age=600"), ("Date", date),
                                     ("X-Custom", "c13"), ("Content-Type", "text/plain")])
        r1 = self.get("/c13/404/x")
        self.assertStatus(r1, 404)
        self.assertEqual(r1.header("X-Upstream-Cache-Status"), "MISS")
        self.assertIn(b"#1 ", bytes(r1.body))
        r2 = self.get("/c13/404/x")
        self.assertStatus(r2, 404)
        self.assertEqual(bytes(r2.body), bytes(r1.body))
        self.assertEqual(r2.header("Content-Length"), str(len(r1.body)))
        self.assertEqual(r2.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(r2.header("X-Custom"), "c13")
        self.assertEqual(r2.header("Cache-Control"), "max-age=600")
        self.assertEqual(r2.header("Date"), date)  # the origin's, replayed
        self.assertEqual(len(r2.header_all("Age")), 1)
        age = int(r2.header("Age"))
        self.assertTrue(0 <= age < 600, age)
        self.assertEqual(self.origin_count("/c13/404"), 1)
        # a range and a HEAD get the same answer, never the origin
        r3 = self.get("/c13/404/x", headers=[("Range", "bytes=5-9")])
        self.assertStatus(r3, 404)
        self.assertEqual(bytes(r3.body), bytes(r1.body))
        r4 = self.get("/c13/404/x", method="HEAD")
        self.assertStatus(r4, 404)
        self.assertEqual(bytes(r4.body), b"")
        self.assertEqual(r4.header("Content-Length"), str(len(r1.body)))
        self.assertEqual(self.origin_count("/c13/404"), 1)
        # another path is another object
        self.assertStatus(self.get("/c13/404/y"), 404)
        self.assertEqual(self.origin_count("/c13/404"), 2)
        m = d.metrics()
        self.assertEqual(m.get("cacheparty_fresh_answers_reused_total"), 3)
        self.assertEqual(m.get("cacheparty_fresh_answers_kept_total"), 2)
        self.assertEqual(m.get("cacheparty_fresh_answers"), 2)
        self.assertGreater(m.get("cacheparty_fresh_answer_bytes"), 2 * len(r1.body))
        # the access log says HIT for the reused ones
        lines = H.wait_until(
            lambda: (lambda ls: len(ls) >= 4 and ls)([l for l in d.access_lines()
                                                      if "/c13/404/x" in l]),
            10 * H.SLOW, 0.05, "4 access log lines")
        self.assertEqual(len(lines), 4)
        self.assertIn("MISS", lines[0])
        for l in lines[1:]:
            self.assertIn("HIT", l)

    def test_statuses_and_lifetimes_that_are_kept(self):
        self.start()
        now = time.time()
        cases = [
            ("/c13/k410", 410, [("Expires", http_date(now + 600)), ("Date", http_date(now))]),
            ("/c13/k503", 503, [("Cache-Control", "s-maxage=600, max-age=0")]),
            ("/c13/k302", 302, [("Cache-Control", "max-age=600"),
                                ("Location", "https://secure.example.test/c13")]),
            ("/c13/k400", 400, [("Cache-Control", "max-age=600, must-understand")]),
            ("/c13/k204", 204, [("Cache-Control", "max-age=600")]),
        ]
        for prefix, status, fields in cases:
            self.route(prefix, status, fields, body=b"" if status == 204 else None)
            for _ in range(3):
                self.assertStatus(self.get(prefix + "/x"), status)
            self.assertEqual(self.origin_count(prefix), 1, prefix)
        r = self.get("/c13/k302/x")
        self.assertEqual(r.header("Location"), "https://secure.example.test/c13")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")

    def test_answers_never_kept(self):
        self.start()
        now = time.time()
        cases = [
            ("/c13/n-plain", 404, []),
            ("/c13/n-public", 404, [("Cache-Control", "public")]),
            ("/c13/n-past", 404, [("Expires", http_date(now - 60)), ("Date", http_date(now))]),
            ("/c13/n-zero", 404, [("Cache-Control", "max-age=0")]),
            ("/c13/n-bad", 404, [("Cache-Control", "max-age=ten")]),
            ("/c13/n-nostore", 404, [("Cache-Control", "max-age=600, no-store")]),
            ("/c13/n-nocache", 404, [("Cache-Control", "max-age=600, no-cache")]),
            ("/c13/n-private", 404, [("Cache-Control", "private, max-age=600")]),
            ("/c13/n-mu", 599, [("Cache-Control", "max-age=600, must-understand")]),
            ("/c13/n-vary", 404, [("Cache-Control", "max-age=600"), ("Vary", "Accept-Language")]),
            ("/c13/n-cookie", 404, [("Cache-Control", "max-age=600"), ("Set-Cookie", "a=b")]),
            # stale on arrival: by the origin's Date, or by its Age
            ("/c13/n-olddate", 404, [("Cache-Control", "max-age=600"),
                                     ("Date", http_date(now - 3600))]),
            ("/c13/n-age", 404, [("Cache-Control", "max-age=600"), ("Age", "600")]),
        ]
        for prefix, status, fields in cases:
            self.route(prefix, status, fields)
            r1 = self.get(prefix + "/x")
            r2 = self.get(prefix + "/x")
            self.assertStatus(r1, status)
            self.assertStatus(r2, status)
            self.assertIn(b"#2 ", bytes(r2.body), prefix)
            self.assertEqual(r2.header("X-Upstream-Cache-Status"), "MISS", prefix)
            self.assertEqual(self.origin_count(prefix), 2, prefix)
        self.assertEqual(self.daemon.metrics().get("cacheparty_fresh_answers", 0), 0)

    def test_close_delimited_answer_is_not_kept(self):
        self.start()
        n = []

        def answer(ex):
            n.append(1)
            ex.send(404, b"gone %d\n" % len(n), [("Cache-Control", "max-age=600")], close=True)
        self.origin.route("/c13/close", answer)
        for i in (1, 2):
            r = self.get("/c13/close/x")
            self.assertStatus(r, 404)
            self.assertEqual(bytes(r.body), b"gone %d\n" % i)
        self.assertEqual(self.origin_count("/c13/close"), 2)

    def test_origin_age_counts(self):
        """An upstream cache's Age counts: max-age=600 with Age: 100 is reused with an Age of
        at least 100 (and below the lifetime)."""
        self.start()
        self.route("/c13/aged", 404, [("Cache-Control", "max-age=600"), ("Age", "100")])
        self.assertStatus(self.get("/c13/aged/x"), 404)
        r = self.get("/c13/aged/x")
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin_count("/c13/aged"), 1)
        self.assertTrue(100 <= int(r.header("Age")) < 600, r.header("Age"))

    def test_the_answer_goes_stale(self):
        """Kept (the gauge says so), then stale once its whole lifetime has passed: the origin
        is asked again."""
        d = self.start()
        self.route("/c13/stale", 404, [("Cache-Control", "max-age=2")])
        t0 = time.time()
        self.assertStatus(self.get("/c13/stale/x"), 404)
        self.assertEqual(d.metrics().get("cacheparty_fresh_answers"), 1)
        time.sleep(max(0.0, t0 + 3.1 - time.time()))
        r = self.get("/c13/stale/x")
        self.assertStatus(r, 404)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertIn(b"#2 ", bytes(r.body))
        self.assertEqual(self.origin_count("/c13/stale"), 2)

    def test_nocache_refetch_and_a_new_object_replace_it(self):
        self.start()
        state = {"status": 404, "n": 0}
        body200 = b"now an object\n" * 100

        def answer(ex):
            state["n"] += 1
            if state["status"] == 404:
                ex.send(404, b"not yet %d\n" % state["n"], [("Cache-Control", "max-age=600")])
            else:
                ex.send(200, body200, [("Content-Type", "application/octet-stream")])
        self.origin.route("/c13/later", answer)
        self.assertStatus(self.get("/c13/later/x"), 404)
        self.assertEqual(bytes(self.get("/c13/later/x").body), b"not yet 1\n")
        self.assertEqual(state["n"], 1)
        # ?nocache= asks the origin again, and drops the kept answer (the refetch's own is not
        # kept: its path has a query, and answers are kept per target URI)
        r = self.get("/c13/later/x?nocache=1")
        self.assertStatus(r, 404)
        self.assertEqual(bytes(r.body), b"not yet 2\n")
        self.assertEqual(bytes(self.get("/c13/later/x").body), b"not yet 3\n")
        self.assertEqual(bytes(self.get("/c13/later/x").body), b"not yet 3\n")
        self.assertEqual(state["n"], 3)
        # the origin has the object now: a refetch stores it, and it replaces the kept 404
        state["status"] = 200
        r = self.get("/c13/later/x?nocache=1")
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), body200)
        r = self.get("/c13/later/x")
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), body200)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(state["n"], 4)

    def test_purge_drops_it(self):
        d = self.start()
        self.route("/c13/purge", 404, [("Cache-Control", "max-age=600")])
        self.get("/c13/purge/x")
        self.get("/c13/purge/x")
        self.assertEqual(self.origin_count("/c13/purge"), 1)
        c = H.Client(d.admin_port)
        self._clients.append(c)
        c.request("/c13/purge/x", method="PURGE")
        self.assertStatus(c.read_response(), 200)
        self.assertEqual(d.metrics().get("cacheparty_fresh_answers", 0), 0)
        r = self.get("/c13/purge/x")
        self.assertIn(b"#2 ", bytes(r.body))
        self.assertEqual(self.origin_count("/c13/purge"), 2)

    def test_answers_memory_zero_keeps_nothing(self):
        self.start(answers_memory="0")
        self.route("/c13/off", 404, [("Cache-Control", "max-age=600")])
        self.get("/c13/off/x")
        self.get("/c13/off/x")
        self.assertEqual(self.origin_count("/c13/off"), 2)

    def test_answers_memory_bounds_what_is_kept(self):
        """64 KiB of answers_memory and 40 answers of 4 KiB: never more than the limit kept, and
        the most recent ones are the ones reused."""
        d = self.start(answers_memory="64K")
        self.route("/c13/many", 404, [("Cache-Control", "max-age=600")], body=b"z" * 4096)
        for i in range(40):
            self.assertStatus(self.get("/c13/many/%d" % i), 404)
            self.assertLessEqual(d.metrics().get("cacheparty_fresh_answer_bytes", 0), 64 * 1024)
        kept = d.metrics().get("cacheparty_fresh_answers")
        self.assertTrue(5 <= kept < 16, kept)
        self.assertEqual(self.get("/c13/many/39").header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin_count("/c13/many"), 40)
        self.get("/c13/many/0")
        self.assertEqual(self.origin_count("/c13/many"), 41)


if __name__ == "__main__":
    import sys
    sys.exit(H.main())
