# SPDX-License-Identifier: BSD-2-Clause
"""r18b (second review of issue 18's move fixes): repros, on b21's nginx harness.

- every chunk lookup of a whole-object 200 queues its own lc_pending for the same nginx file
  (lc_set is keyed by (obj, index)), each reserving the room of all the file's chunks: after the
  first moved the file, the next one's reservation (n_chunks again, for a file now gone) keeps
  the FIFO paused for good, and every file queued behind it is never moved.
- "a whole-object 200 larger than disk_size is never moved (one warning)": the warning comes
  once per chunk lookup, each time the object is served.
"""

import os
import unittest

import harness as H
import b21_lancache as L


@unittest.skipUnless(os.path.exists(L.NGINX), "nginx is not installed (make deps installs it)")
class Review18b(H.CPTestCase):
    fill = L.Lancache.fill
    serve = L.Lancache.serve
    get_all = L.Lancache.get_all
    metric = L.Lancache.metric

    def test_a_whole_200_does_not_stall_the_moves_queued_after_it(self):
        size = 6 * L.MIB
        big = ("dl.example.org:8080", None, "/b21/norange/size/%d" % size, "", size)
        small = ("cdn.example.net", None, "/r18b/small/size/102400", "", 102400)
        ngx = self.fill([big, small])
        self.assertEqual(len(ngx.files()), 2)
        d = self.serve(ngx, "move", {"cache": {"disk_size": "10M", "min_free": "0"}})
        self.get_all(d, [big, small])
        d.settle_disk()
        H.wait_until(lambda: not ngx.files() or self.metric(d, "lancache_move_paused") == 1,
                     10 * H.SLOW, what="moves done or paused")
        d.settle_disk()
        try:  # (a little longer: the mover is at idle priority)
            H.wait_until(lambda: not ngx.files(), 5 * H.SLOW, what="both nginx files moved")
        except AssertionError:
            pass
        self.assertEqual((ngx.files(), self.metric(d, "lancache_move_paused")), ([], 0),
                         "7 chunks (about 7 MiB) fit in disk_size 10M, yet the moves stay paused; "
                         "left: %r, migrated %d" % ([L.ngx_key_of(f) for f in ngx.files()],
                         self.metric(d, 'lancache_slices_total{result="migrated"}')))

    def test_a_200_larger_than_disk_size_is_warned_once(self):
        size = 6 * L.MIB
        big = ("dl.example.org:8080", None, "/b21/norange/size/%d" % size, "", size)
        ngx = self.fill([big])
        d = self.serve(ngx, "move", {"cache": {"disk_size": "3M", "min_free": "0"}})
        self.get_all(d, [big])
        self.get_all(d, [big])
        d.settle_disk()
        H.wait_until(lambda: "never moved" in d.log(), 10 * H.SLOW, what="the warning")
        self.assertEqual(d.log().count("never moved"), 1, "docs: one warning")


if __name__ == "__main__":
    H.main()
