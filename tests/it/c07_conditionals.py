# SPDX-License-Identifier: BSD-2-Clause
"""c07: conditional requests answered from the cache (RFC 9110 §13; issue 16): If-Modified-Since
in the three date formats (later, earlier, equal, invalid, only without If-None-Match),
If-None-Match (lists, "*", weak comparison), If-Range (strong entity-tags, weak ones, dates),
If-Match and If-Unmodified-Since (412); our Date on every answer cacheparty makes itself, the
origin's kept on answers passed through; ?nocache= as lancache's proxy_cache_bypass $arg_nocache
(which values refetch, BYPASS in the head and the access log, concurrent refetches sharing one
origin request)."""

import email.utils
import re
import threading
import time

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}}
LM = "Tue, 15 Nov 1994 12:45:26 GMT"
LM_850 = "Tuesday, 15-Nov-94 12:45:26 GMT"
LM_ASC = "Tue Nov 15 12:45:26 1994"
N = 3 * K64 + 500
LINE_RE = re.compile(r'^\[(\S+)\] (\S+) / - - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" '
                     r'"([^"]*)" "(HIT|MISS|BYPASS|-)" "([^"]*)" "([^"]*)"$')
IMF_RE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|"
                    r"Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$")


def etag_of(path, n):
    return '"%08x-%x"' % (H.seed_of(path), n)


class Base(H.CPTestCase):
    def ask(self, target, headers, status, c=None):
        c = c or self.client()
        c.request(target, headers=headers)
        r = c.read_response()
        self.assertStatus(r, status)
        return r

    def assertNotModified(self, r, target):
        self.assertEqual(len(r.body), 0)
        self.assertEqual(r.header("ETag"), etag_of(target, N))
        self.assertEqual(r.header("Last-Modified"), LM)
        self.assertIsNone(r.header("Content-Range"))


class Conditionals(Base):
    """One stored object with an ETag and a Last-Modified; every answer comes from the cache."""

    def setUp(self):
        super().setUp()
        self.setup_proxy(SMALL)

        def h(ex):
            H.serve_object(ex, N, extra=[("Last-Modified", LM)])
        self.origin.route("/c07/", h)
        self.p = "/c07/obj/size/%d" % N
        r = self.get(self.p)
        self.assertStatus(r, 200)
        self.assertBody(r, self.p)
        self.assertEqual(r.header("Last-Modified"), LM)
        self.et = etag_of(self.p, N)
        self.n = self.origin.request_count()

    def tearDown(self):
        if self.origin is not None:
            self.assertEqual(self.origin.request_count(), self.n, "a conditional went upstream")
        super().tearDown()

    def ims(self, date, status, extra=()):
        c = self.client()
        r = self.ask(self.p, [("If-Modified-Since", date)] + list(extra), status, c)
        if status == 304:
            self.assertNotModified(r, self.p)
            # nothing follows the 304 on the connection
            r2 = self.ask(self.p, [("Range", "bytes=0-3")], 206, c)
            self.assertBody(r2, self.p, 0, 4)
        else:
            self.assertBody(r, self.p)
        return r

    def test_if_modified_since_equal_in_the_three_formats(self):
        for d in (LM, LM_850, LM_ASC):
            self.ims(d, 304)

    def test_if_modified_since_later_is_not_modified(self):
        for d in ("Tue, 15 Nov 1994 12:45:27 GMT", "Wednesday, 16-Nov-94 00:00:00 GMT",
                  "Sat Jan  1 00:00:00 2000", "Sat, 01 Jan 2000 00:00:00 GMT"):
            self.ims(d, 304)

    def test_if_modified_since_earlier_is_the_whole_object(self):
        for d in ("Tue, 15 Nov 1994 12:45:25 GMT", "Monday, 14-Nov-94 12:45:26 GMT",
                  "Mon Nov 14 12:45:26 1994"):
            self.ims(d, 200)

    def test_if_modified_since_invalid_is_ignored(self):
        for d in ("yesterday", "tue, 15 nov 1994 12:45:26 gmt", LM + ", " + LM,
                  "Tue, 15 Nov 1994 12:45:26 UTC", "Tue, 32 Nov 1994 12:45:26 GMT", "0"):
            self.ims(d, 200)

    def test_if_modified_since_only_without_if_none_match(self):
        self.ims("Sat, 01 Jan 2000 00:00:00 GMT", 200, [("If-None-Match", '"other"')])
        self.ims("Mon, 01 Jan 1990 00:00:00 GMT", 304, [("If-None-Match", self.et)])

    def test_if_none_match_lists_star_and_weak(self):
        for v in (self.et, '"a", ' + self.et + ', "b"', '"a",' + self.et, "*", "W/" + self.et,
                  '"x", W/' + self.et):
            self.assertNotModified(self.ask(self.p, [("If-None-Match", v)], 304), self.p)
        for v in ('"a", "b"', '"' + self.et + '"', self.et[:-2] + '"', "W/", '"a,' +
                  self.et[1:]):
            self.assertBody(self.ask(self.p, [("If-None-Match", v)], 200), self.p)

    def test_a_304_wins_over_the_range(self):
        r = self.ask(self.p, [("If-None-Match", self.et), ("Range", "bytes=0-9")], 304)
        self.assertNotModified(r, self.p)

    def test_if_range_with_a_strong_entity_tag(self):
        r = self.ask(self.p, [("Range", "bytes=10-19"), ("If-Range", self.et)], 206)
        self.assertEqual(r.header("Content-Range"), "bytes 10-19/%d" % N)
        self.assertBody(r, self.p, 10, 20)
        r = self.ask(self.p, [("Range", "bytes=10-19"), ("If-Range", '"other"')], 200)
        self.assertBody(r, self.p)
        self.assertIsNone(r.header("Content-Range"))

    def test_if_range_with_a_weak_entity_tag_never_matches(self):
        r = self.ask(self.p, [("Range", "bytes=10-19"), ("If-Range", "W/" + self.et)], 200)
        self.assertBody(r, self.p)
        self.assertIsNone(r.header("Content-Range"))

    def test_if_range_with_a_date(self):
        for d in (LM, LM_850, LM_ASC):
            r = self.ask(self.p, [("Range", "bytes=%d-" % (N - 10)), ("If-Range", d)], 206)
            self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (N - 10, N - 1, N))
            self.assertBody(r, self.p, N - 10, N)
        for d in ("Tue, 15 Nov 1994 12:45:27 GMT", "Sat, 01 Jan 2000 00:00:00 GMT", "soon"):
            r = self.ask(self.p, [("Range", "bytes=10-19"), ("If-Range", d)], 200)
            self.assertBody(r, self.p)

    def test_if_range_unsatisfiable_range(self):
        r = self.ask(self.p, [("Range", "bytes=%d-" % N), ("If-Range", self.et)], 416)
        self.assertEqual(r.header("Content-Range"), "bytes */%d" % N)
        r = self.ask(self.p, [("Range", "bytes=%d-" % N), ("If-Range", '"other"')], 200)
        self.assertBody(r, self.p)

    def test_if_match_and_if_unmodified_since_fail_with_412(self):
        c = self.client()
        for hdrs in ([("If-Match", '"other"')], [("If-Match", "W/" + self.et)],
                     [("If-Unmodified-Since", "Mon, 14 Nov 1994 00:00:00 GMT")],
                     [("If-Match", '"other"'), ("If-None-Match", self.et)]):
            r = self.ask(self.p, hdrs, 412, c)
            self.assertEqual(r.header("Content-Type"), "text/plain")
            self.assertEqual(bytes(r.body), b"412 Precondition Failed\n")
        # the connection goes on
        self.assertBody(self.ask(self.p, [("Range", "bytes=0-3")], 206, c), self.p, 0, 4)
        r = self.ask(self.p, [("If-Match", '"a", ' + self.et)], 200)
        self.assertBody(r, self.p)
        self.assertBody(self.ask(self.p, [("If-Match", "*")], 200), self.p)

    def test_if_unmodified_since_guards_a_resumed_range(self):
        # as Windows' BITS resumes: the range while the object is unchanged since
        for d in (LM, LM_850, "Sat, 01 Jan 2000 00:00:00 GMT"):
            r = self.ask(self.p, [("Range", "bytes=100-199"), ("If-Unmodified-Since", d)], 206)
            self.assertBody(r, self.p, 100, 200)
        r = self.ask(self.p, [("Range", "bytes=100-199"), ("If-Unmodified-Since", "junk")], 206)
        self.assertBody(r, self.p, 100, 200)

    def test_head_with_conditionals(self):
        c = self.client()
        c.request(self.p, "HEAD", headers=[("If-Modified-Since", LM_ASC)])
        r = c.read_response()
        self.assertStatus(r, 304)
        c.request(self.p, "HEAD", headers=[("If-Match", '"x"')])
        r = c.read_response()
        self.assertStatus(r, 412)
        self.assertEqual(len(r.body), 0)
        self.assertEqual(r.header("Content-Length"), "24")


class ColdConditionals(Base):
    def test_if_modified_since_on_a_cold_object_uses_the_fill_s_validators(self):
        self.setup_proxy(SMALL)

        def h(ex):
            H.serve_object(ex, N, extra=[("Last-Modified", LM)])
        self.origin.route("/c07/", h)
        p = "/c07/cold/size/%d" % N
        r = self.ask(p, [("If-Modified-Since", LM_850)], 304)
        self.assertNotModified(r, p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        for q in self.origin.requests:
            self.assertIsNone(q.header("If-Modified-Since"), "the fill was conditional")

    def test_weak_stored_etag_matches_if_none_match_weakly_only(self):
        self.setup_proxy(SMALL)

        def h(ex):
            ex.req.query["noetag"] = ["1"]
            H.serve_object(ex, N, extra=[("ETag", 'W/"weak7"')])
        self.origin.route("/c07/", h)
        p = "/c07/weak/size/%d" % N
        self.assertBody(self.get(p), p)
        for v in ('W/"weak7"', '"weak7"', '"x", W/"weak7"'):
            r = self.ask(p, [("If-None-Match", v)], 304)
            self.assertEqual(r.header("ETag"), 'W/"weak7"')
        # a weak validator never satisfies If-Range or If-Match
        self.assertBody(self.ask(p, [("Range", "bytes=0-9"), ("If-Range", 'W/"weak7"')], 200), p)
        self.ask(p, [("If-Match", 'W/"weak7"')], 412)


class OurDate(Base):
    def assertDate(self, r, what):
        v = r.header_all("Date")
        self.assertEqual(len(v), 1, "%s: Date fields %r\n%s" % (what, v, r.raw_head))
        self.assertRegex(v[0], IMF_RE, what)
        t = email.utils.parsedate_to_datetime(v[0]).timestamp()
        self.assertLess(abs(t - time.time()), 120, "%s: Date %s is not now" % (what, v[0]))

    def test_date_on_the_answers_we_make(self):
        self.setup_proxy(SMALL)

        def garbage(ex):
            ex.write(b"NOT HTTP\r\n\r\n")
            ex.close()
        self.origin.route("/c07/garbage", garbage)
        self.assertDate(self.ask("/lancache-heartbeat", [], 204), "204 heartbeat")
        c = self.client()
        c.request("/x", "DELETE")
        self.assertDate(c.read_response(), "405")
        c = self.client()
        c.send(b"GET /x HTTP/1.1\r\n\r\n", expect=["GET"])  # no Host
        self.assertDate(c.read_response(), "400")
        self.assertDate(self.ask("/c07/loop/size/10", [("X-LanCache-Processed-By", H.HOSTNAME)],
                                 508), "508")
        self.assertDate(self.ask("/c07/garbage/x", [], 502), "502")
        self.assertDate(self.ask("/c07/stall/size/10?stall=1", [], 504), "504")

    def test_date_on_a_refusal(self):
        self.setup_proxy({"domains": {"allow_unlisted": "no"}})
        self.assertDate(self.ask("/c07/x/size/10", [], 403), "403")

    def test_the_origin_s_date_is_kept_on_answers_passed_through(self):
        self.setup_proxy(SMALL)
        odate = "Mon, 07 Nov 1994 01:02:03 GMT"

        def dated(ex):
            ex.send(404, b"nope\n", [("Date", odate), ("Content-Type", "text/plain")])
        self.origin.route("/c07/dated", dated)
        r = self.ask("/c07/dated/x", [], 404)
        self.assertEqual(r.header_all("Date"), [odate], r.raw_head)
        self.assertEqual(bytes(r.body), b"nope\n")
        # a bypass (Authorization) too
        r = self.ask("/c07/dated/y", [("Authorization", "Bearer c07")], 404)
        self.assertEqual(r.header_all("Date"), [odate], r.raw_head)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        # an origin that sends none: ours (RFC 9110 §6.6.1)
        r = self.ask("/c07/undated/x?status=404", [], 404)
        self.assertDate(r, "404 passed through without a Date")


class Gate:
    """Origin behaviour: requests with nocache in their query wait for .release (they are
    counted as they arrive), the others are served at once."""

    def __init__(self, n):
        self.n = n
        self.release = threading.Event()

    def __call__(self, ex):
        if "nocache" in ex.req.query:
            self.release.wait(20 * H.SLOW)
        H.serve_object(ex, self.n)


class NoCache(Base):
    def cache_status(self, d, needle):
        """The access log's cache status for the request lines containing <needle>."""
        lines = H.wait_until(lambda: [ln for ln in d.access_lines() if needle in ln] or None,
                             10 * H.SLOW, 0.05, "access log line of " + needle)
        out = []
        for ln in lines:
            m = LINE_RE.match(ln)
            self.assertIsNotNone(m, ln)
            out.append(m.group(9))
        return out

    def test_which_values_refetch(self):
        d = self.setup_proxy(SMALL)
        p = "/c07/nc/size/%d" % N
        r = self.get(p)
        self.assertBody(r, p)
        chunks = 4
        for i, q in enumerate(("nocache=1", "nocache=yes", "a=b&nocache=true", "NoCache=1",
                               "nocache=00", "nocache=%30")):
            k = self.origin.request_count()
            r = self.get(p + "?" + q + "&t=%d" % i)
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS", q)
            self.assertEqual(self.origin.request_count() - k, chunks, q)
            self.assertEqual(self.cache_status(d, "t=%d " % i), ["BYPASS"], q)
        for i, q in enumerate(("nocache=0", "nocache=", "nocache", "xnocache=1", "nocache_=1",
                               "a=nocache=1", "nocache=0&nocache=1")):
            k = self.origin.request_count()
            r = self.get(p + "?" + q + "&u=%d" % i)
            self.assertBody(r, p)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT", q)
            self.assertEqual(self.origin.request_count(), k, q)
            self.assertEqual(self.cache_status(d, "u=%d " % i), ["HIT"], q)

    def test_a_refetch_stores_the_origin_s_new_version(self):
        self.setup_proxy(SMALL)
        state = {"v": "/c07/v1/size/%d" % N}

        def h(ex):
            H.serve_object(ex, N, path=state["v"])
        self.origin.route("/c07/ver/", h)
        p = "/c07/ver/obj"
        self.assertBody(self.get(p), state["v"], total=N)
        state["v"] = "/c07/v2/size/%d" % N
        self.assertBody(self.get(p), "/c07/v1/size/%d" % N, total=N)  # still the stored one
        r = self.get(p + "?nocache=yes")
        self.assertEqual(r.header("ETag"), etag_of(state["v"], N))
        self.assertBody(r, state["v"], total=N)
        k = self.origin.request_count()
        r = self.get(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertBody(r, state["v"], total=N)
        self.assertEqual(self.origin.request_count(), k)

    def test_concurrent_refetches_share_one_origin_request(self):
        d = self.setup_proxy(SMALL)
        n = 1000
        gate = Gate(n)
        self.origin.route("/c07/share/", gate)
        p = "/c07/share/size/%d" % n
        self.assertBody(self.get(p), p)
        k = self.origin.request_count()
        a = self.client()
        a.request(p + "?nocache=1")
        self.origin.wait_requests(k + 1)
        joined = d.metrics().get("cacheparty_coalesced_total", 0)
        b = self.client()
        b.request(p + "?nocache=yes")
        H.wait_until(lambda: d.metrics().get("cacheparty_coalesced_total", 0) >= joined + 1,
                     10 * H.SLOW, 0.02, "the second refetch joins the first")
        c = self.client()
        c.request(p)
        H.wait_until(lambda: d.metrics().get("cacheparty_coalesced_total", 0) >= joined + 2,
                     10 * H.SLOW, 0.02, "a plain request joins the refetch")
        gate.release.set()
        for cl, st in ((a, "BYPASS"), (b, "BYPASS"), (c, None)):
            r = cl.read_response()
            self.assertStatus(r, 200)
            self.assertBody(r, p)
            if st is not None:
                self.assertEqual(r.header("X-Upstream-Cache-Status"), st)
        self.assertEqual(self.origin.request_count(), k + 1, "the refetches did not share")
        r = self.get(p)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        self.assertEqual(self.origin.request_count(), k + 1)


if __name__ == "__main__":
    raise SystemExit(H.main())
