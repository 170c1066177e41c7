# SPDX-License-Identifier: BSD-2-Clause
"""c13r (review repro): a fill of ONE chunk (a Range request into the middle of an object) that
gets an error answer with a freshness lifetime is kept under the whole OBJECT's key, so every
later request of that object -- also for the chunks that are stored and were served as HITs a
moment before -- gets the error instead of the stored bytes, for up to 24 h. (nginx/lancache
keys per slice: a slice's 503 never hides other slices.)"""

import harness as H

N = 1024 * 1024  # 16 chunks of 64 KiB


class KeptAnswerShadowsObject(H.CPTestCase):
    def test_error_of_one_chunk_hides_stored_chunks(self):
        self.setup_proxy({"cache": {"chunk_size": "64K"}})
        mode = {"err": False}

        def answer(ex):
            if mode["err"]:
                ex.send(503, b"busy\n", [("Cache-Control", "max-age=600")])
            else:
                H.serve_object(ex, N, path="/c13r/obj/size/%d" % N)
        self.origin.route("/c13r/obj", answer)
        target = "/c13r/obj/size/%d" % N
        r = self.get(target, headers=[("Range", "bytes=0-99")])
        self.assertStatus(r, 206)
        r = self.get(target, headers=[("Range", "bytes=0-99")])
        self.assertStatus(r, 206)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")
        # the origin is busy for one far chunk
        mode["err"] = True
        r = self.get(target, headers=[("Range", "bytes=%d-%d" % (N - 100, N - 1))])
        self.assertStatus(r, 503)
        # the stored chunk 0 must still be served from the cache
        r = self.get(target, headers=[("Range", "bytes=0-99")])
        self.assertStatus(r, 206)
        self.assertEqual(r.header("X-Upstream-Cache-Status"), "HIT")


if __name__ == "__main__":
    raise SystemExit(H.main())
