# SPDX-License-Identifier: BSD-2-Clause
"""r16: review of issue 16 (stored response fields). Reproductions of what the review found:

- the first delivery of a fill carries Age whenever the corrected initial age is > 0, i.e. as
  soon as the origin took a second to answer (or its clock is behind), not only when an
  upstream cache said so (docs/interfaces.md; c12 asserts "no Age on a miss" and flakes when a
  second boundary falls between the fill's request and its answer);
- one set of fields per version holds only while the object's objver slot (65536, direct
  mapped on 16 bits of the key hash) is not taken by another object: after a colliding object,
  a later fill of the same version answers with its own fields;
- a version 1 object completed after the upgrade: its fields after a restart depend on which
  chunk file is read first (a version 1 file's empty head is adopted by the version-2 chunks
  just as a real one would be);
- a refetch (?nocache=1) of a whole object: at b5f4f6b it keeps the version's old head
  (docs: "stored again with all its fields"); after b0bc994 (renew) every chunk's forced fill
  renews the slot with its own answer, so the chunks of one version end with different fields;
- Content-Digest (RFC 9530: a digest of the message content) of the chunk fill's 206 answer is
  stored and replayed on the whole-object 200 and on other ranges, where it is wrong."""

import base64
import hashlib
import os
import shutil

import harness as H

K64 = 64 * H.KIB
SMALL = {"cache": {"chunk_size": "64K"}, "upstream": {"first_byte_timeout": "5s"}}
N = 3 * K64 + 777


def digest(body):
    return "sha-256=:%s:" % base64.b64encode(hashlib.sha256(bytes(body)).digest()).decode()


class Review(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.setup_proxy(SMALL)

    def test_miss_from_a_slow_origin_has_no_age(self):
        """No upstream cache (no Age, no Date from the origin): the first delivery is the
        origin's answer for this request, so it carries no Age (RFC 9111 §5.1), however long
        the origin took. The origin waits 1.5 s before its head (a behaviour of the origin)."""
        self.origin.route("/r16/slow/", lambda ex: H.serve_object(ex, N))
        p = "/r16/slow/obj?delay=1.5"
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=N)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "MISS")
        self.assertIsNone(r.header("Age"), "a first delivery from the origin has no Age")

    def test_one_set_of_fields_per_version_survives_a_slot_collision(self):
        """As c12's test_one_set_of_fields_per_version, with another object in between whose
        key hash falls in the same objver slot (found offline: XXH3-128 of "host\\npath",
        bytes 8..15 little-endian, & 0xffff: both are slot 24762)."""
        seq = [0]

        def h(ex):
            seq[0] += 1
            H.serve_object(ex, N, extra=[("X-Seq", str(seq[0]))])
        self.origin.route("/r16/ver/", h)
        self.origin.route("/r16/other/", lambda ex: H.serve_object(ex, 1000))
        p, other = "/r16/ver/obj", "/r16/other/28863"
        c = self.client()
        c.request(p, headers=[("Range", "bytes=0-99")])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertEqual(r.header("X-Seq"), "1")
        r = self.get(other)                     # takes the objver slot of <p>
        self.assertStatus(r, 200)
        self.assertBody(r, other, total=1000)
        c.request(p, headers=[("Range", "bytes=%d-%d" % (2 * K64 + 5, 2 * K64 + 99))])
        r = c.read_response()
        self.assertStatus(r, 206)
        self.assertBody(r, p, 2 * K64 + 5, 2 * K64 + 100)
        self.assertGreater(seq[0], 1, "chunk 2 came from the origin")
        c.request(p, headers=[("Range", "bytes=0-99")])
        r0 = c.read_response()
        self.assertEqual(r0.header("X-Seq"), "1")
        self.assertEqual(r.header("X-Seq"), r0.header("X-Seq"),
                         "two chunks of one version answered with different fields")
        self.assertEqual(r.header("Date"), r0.header("Date"))

    def test_refetch_renews_one_set_of_fields_for_every_chunk(self):
        seq = [0]

        def h(ex):
            seq[0] += 1
            H.serve_object(ex, N, extra=[("X-Seq", str(seq[0]))])
        self.origin.route("/r16/refetch/", h)
        p = "/r16/refetch/obj"
        r = self.get(p)
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=N)
        self.assertEqual(r.header("X-Seq"), "1")
        before = seq[0]
        r = self.get(p + "?nocache=1")
        self.assertStatus(r, 200)
        self.assertBody(r, p, total=N)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "BYPASS")
        self.assertGreater(seq[0], before, "refetched")
        got = {}
        c = self.client()
        for i in range(4):
            c.request(p, headers=[("Range", "bytes=%d-%d" % (i * K64, i * K64 + 9))])
            r = c.read_response()
            self.assertStatus(r, 206)
            self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
            got[i] = (r.header("X-Seq"), r.header("Date"))
        self.assertEqual(len(set(got.values())), 1, "one set of fields per version: %r" % got)
        self.assertNotEqual(got[0][0], "1", "the refetch's answer is stored (README)")

    def test_content_digest_matches_every_answer(self):
        """The origin sends Content-Digest of what each answer carries (its 206 of a chunk: of
        that chunk). A Content-Digest on an answer from the cache must be the digest of that
        answer's content, or absent."""
        def h(ex):
            req = ex.req
            rng = H.parse_range(req.header("Range"), N)
            start, end = rng if isinstance(rng, tuple) else (0, N)
            body = H.content(req.path, start, end)
            hdrs = [("Content-Type", "application/octet-stream"),
                    ("ETag", '"%08x-%x"' % (H.seed_of(req.path), N)),
                    ("Accept-Ranges", "bytes"),
                    ("Content-Digest", digest(body))]
            if isinstance(rng, tuple):
                hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, N)))
            ex.send(206 if isinstance(rng, tuple) else 200, body, hdrs)
        self.origin.route("/r16/digest/", h)
        p = "/r16/digest/obj"
        for what in ("miss", "hit"):
            r = self.get(p)
            self.assertStatus(r, 200)
            self.assertBody(r, p, total=N)
            cd = r.header("Content-Digest")
            if cd is not None:
                self.assertEqual(cd, digest(r.body), "%s: Content-Digest of another content" % what)
        r = self.get(p, headers=[("Range", "bytes=100-70000")])
        self.assertStatus(r, 206)
        self.assertBody(r, p, 100, 70001)
        cd = r.header("Content-Digest")
        if cd is not None:
            self.assertEqual(cd, digest(r.body), "range: Content-Digest of another content")


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
V1_PATH = "/c12/v1/size/100000"   # fixtures/v1cache (fixtures/make_v1_cache.py)
V1_LM = "Tue, 15 Nov 1994 12:45:26 GMT"


class V1Mix(H.CPTestCase):
    def test_v1_object_fields_do_not_depend_on_read_order(self):
        """The v1 fixture with its chunk 1 gone: chunk 1 is filled after the upgrade (the same
        version: ETag, Last-Modified, length) and stored with every field. Before and after a
        restart, both chunks answer with one set of fields, whichever is asked first."""
        cache = os.path.join(self._tmp, "cache-v1mix")
        shutil.copytree(os.path.join(FIXTURES, "v1cache"), cache)
        files = H.chunk_files(cache)
        os.unlink([f for f in files if f.endswith(".1")][0])
        ov = {"cache": {"dir": cache, "chunk_size": "64K"}}
        self.origin = self.start_origin()
        self.dns = self.start_dns()
        self.origin.route("/c12/v1/", lambda ex: H.serve_object(
            ex, 100000, extra=[("Last-Modified", V1_LM), ("X-Custom", "v1")]))
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)

        def ask(first, second):
            out = {}
            c = self.client()
            for rng in (first, second):
                c.request(V1_PATH, headers=[("Range", rng)])
                r = c.read_response()
                self.assertStatus(r, 206)
                out[rng] = (r.header("X-Custom"), r.header("Date"))
            return out
        c0, c1 = "bytes=0-99", "bytes=70000-70099"
        before = ask(c1, c0)                 # chunk 1 filled first: its fields for both
        self.assertEqual(before[c0], before[c1])
        H.wait_until(lambda: len(H.chunk_files(cache)) == 2, 10 * H.SLOW, what="chunk 1 stored")
        self.assertEqual(self.daemon.stop(), 0)
        self.daemon = self.start_daemon(ov, origin=self.origin, dns=self.dns)
        after = ask(c0, c1)                  # the version 1 file read first
        self.assertEqual(after[c0], after[c1], "one set of fields per version")
        self.assertEqual(after[c0], before[c0], "the same fields as before the restart")


if __name__ == "__main__":
    import sys
    sys.exit(H.main())
