# SPDX-License-Identifier: BSD-2-Clause
"""r16: review of 4dd64bf (fresh answers that are not objects)."""

import harness as H


class FreshReview(H.CPTestCase):
    def start(self, **cache):
        over = {"server": {"admin_listen": "auto"}}
        if cache:
            over["cache"] = cache
        return self.setup_proxy(over)

    def test_kept_answer_is_not_reused_for_another_query(self):
        """RFC 9111 §4: a stored response is reused only for the same target URI. A 403 for
        an expired token must not answer the request that carries a valid one."""
        self.start()
        body = b"the object\n" * 100

        def answer(ex):
            if ex.req.opt("token") == "good":
                ex.send(200, body, [("Content-Type", "application/octet-stream")])
            else:
                ex.send(403, b"token expired\n", [("Cache-Control", "max-age=600")])
        self.origin.route("/r16q/", answer)
        self.assertStatus(self.get("/r16q/file?token=old"), 403)
        r = self.get("/r16q/file?token=good")
        self.assertStatus(r, 200)
        self.assertEqual(bytes(r.body), body)

    def test_followed_redirect_that_may_not_be_stored_is_asked_again(self):
        """A fill follows a 302 (no-store) to a 404 with max-age: the 404 is the target's, the
        302 may not be reused, so the next request of the original URI asks the origin."""
        self.start()
        n = []

        def redirect(ex):
            n.append(1)
            ex.send(302, b"", [("Location", "/r16t/%d" % len(n)),
                               ("Cache-Control", "no-store")])
        self.origin.route("/r16r/", redirect)
        self.origin.route("/r16t/1", lambda ex: ex.send(
            404, b"not here\n", [("Cache-Control", "max-age=600")]))
        self.origin.route("/r16t/", lambda ex: ex.send(200, b"moved here\n" * 10))
        self.assertStatus(self.get("/r16r/x"), 404)
        r = self.get("/r16r/x")
        self.assertEqual(len(n), 2)  # the origin is asked for /r16r/x again
        self.assertStatus(r, 200)


if __name__ == "__main__":
    import sys
    sys.exit(H.main())
