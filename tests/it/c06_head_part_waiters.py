# SPDX-License-Identifier: BSD-2-Clause
"""c06: the held-back head part of a two-part chunk (see c05) is asked for any reader that waits
for a byte before the offset, also one that began to wait before the chunk was two-part (during
its disk lookup, or behind a run that could not be cut yet), and it follows a redirect chain as a
fetch of its own would (found in review, each failed before the fix). Ordering is made certain by the origin (answers held on events) and by
the daemon's own log (a client's request has been handled once its state change is logged: the
loop is single-threaded), never by timing."""

import errno
import os
import threading

import harness as H
from c02_coalesce import Base, Paced

CS = H.MIB
OFF = 700000


def start_of_req(req, total):
    rng = H.parse_range(req.header("Range"), total)
    return rng[0] if isinstance(rng, tuple) else 0


def start_of(ex, total):
    return start_of_req(ex.req, total)


class Chain:
    """<prefix>obj redirects to <prefix>h1, h1 to h2, ... h<hops-1> to <prefix>h<hops>: <hops>
    redirects. The first request for obj starting at byte <at> sends the redirect's head and half
    its short body, sets .holding and waits for .drain before the rest."""

    def __init__(self, prefix, total, at, hops=5):
        self.prefix = prefix
        self.total = total
        self.at = at
        self.hops = hops
        self.lock = threading.Lock()
        self.held = False
        self.holding = threading.Event()
        self.drain = threading.Event()
        self.seen = []

    def __call__(self, ex):
        path = ex.req.path
        start = start_of(ex, self.total)
        n = 0 if path.endswith("/obj") else int(path.rsplit("h", 1)[1])
        nxt = "%sh%d" % (self.prefix, n + 1)
        with self.lock:
            self.seen.append((path, start))
            first = n == 0 and start == self.at and not self.held
            self.held = self.held or first
        if first:
            ex.send_head(302, [("Location", nxt), ("Content-Length", "10")])
            ex.write(b"moved")
            self.holding.set()
            while not self.drain.wait(0.05):
                if ex.origin.stopping.is_set():
                    return
            ex.write(b"moved")
            return
        ex.send(302, b"moved", [("Location", nxt)])


class HoldStarts(Paced):
    """Paced (no hold) whose requests starting at a byte in <holds> each wait for their own
    event: .asked[start] is set when one arrives, .go[start] lets it answer."""

    def __init__(self, total, holds):
        super().__init__(total, hold=())
        self.asked = {s: threading.Event() for s in holds}
        self.go = {s: threading.Event() for s in holds}
        self.starts = []

    def __call__(self, ex):
        start = start_of(ex, self.total)
        with self.lock:
            self.starts.append(start)
        if start in self.go:
            self.asked[start].set()
            while not self.go[start].wait(0.05):
                if ex.origin.stopping.is_set():
                    return
        super().__call__(ex)


class ErrorHeld:
    """The request starting at byte <at> gets a 404 whose 10-byte body is held after 5 bytes
    until .drain (.holding set then); every other request gets a plain 404."""

    def __init__(self, total, at):
        self.total = total
        self.at = at
        self.holding = threading.Event()
        self.drain = threading.Event()

    def __call__(self, ex):
        if start_of(ex, self.total) != self.at:
            ex.send(404, b"not here!!")
            return
        ex.send_head(404, [("Content-Length", "10")])
        ex.write(b"not h")
        self.holding.set()
        while not self.drain.wait(0.05):
            if ex.origin.stopping.is_set():
                return
        ex.write(b"ere!!")


class HeadPartWaiters(Base):
    LONG = {"upstream": {"first_byte_timeout": "30s", "read_timeout": "30s"},
            "server": {"send_timeout": "30s"}}

    def wait_handled(self, c):
        """Until the daemon has taken <c>'s request in (its connection entered CACHE_HEAD)."""
        mark = "127.0.0.1:%d CONN_S_READ_HEAD -> CONN_S_CACHE_HEAD" % c.local_port
        H.wait_until(lambda: mark in self.daemon.log(), 10 * H.SLOW, what=mark)

    def a_held_then_b(self, name, o):
        """A asks a range at OFF of /c06/<name>/obj, whose answer <o> holds mid-body (.holding,
        released by .drain); then B asks bytes 1000-1999 of it, before A's offset."""
        self.addCleanup(o.drain.set)
        self.origin.route("/c06/%s/" % name, o)
        p = "/c06/%s/obj" % name
        a = self.client(timeout=30)
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.assertTrue(o.holding.wait(10 * H.SLOW))
        b = self.client(timeout=30)
        b.request(p, headers=[("Range", "bytes=1000-1999")])
        return a, b

    def test_redirect_chain_of_five_alone(self):
        # control: the 5-redirect chain is within the limit for an ordinary two-part fill
        total = 2 * CS
        self.setup_proxy(self.LONG)
        self.origin.route("/c06/rd0/h5", Paced(total, hold=()))
        o = Chain("/c06/rd0/", total, at=-1)
        self.origin.route("/c06/rd0/", o)
        r = self.get("/c06/rd0/obj", headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.assertStatus(r, 206)
        self.assertBody(r, "/c06/rd0/h5", OFF, OFF + 1000)
        r = self.get("/c06/rd0/obj", headers=[("Range", "bytes=1000-1999")])
        self.assertStatus(r, 206)
        self.assertBody(r, "/c06/rd0/h5", 1000, 2000)

    def test_head_part_asked_while_a_redirect_drains_follows_five_hops(self):
        # A's request (from OFF) is answered by a redirect whose short body the origin holds.
        # B wants bytes before OFF meanwhile: the head part is asked now, of the URL A's fetch
        # has not left yet, so it must be allowed the whole chain of 5 redirects too.
        total = 2 * CS
        self.setup_proxy(self.LONG)
        final = "/c06/rd/h5"
        self.origin.route(final, Paced(total, hold=()))
        o = Chain("/c06/rd/", total, at=OFF)
        a, b = self.a_held_then_b("rd", o)
        rb = b.read_response()
        self.assertStatus(rb, 206)   # 502 when the head part counts A's redirect twice
        self.assertBody(rb, final, 1000, 2000)
        o.drain.set()
        ra = a.read_response()
        self.assertStatus(ra, 206)
        self.assertBody(ra, final, OFF, OFF + 1000)

    def test_no_head_part_for_an_answer_that_fails_the_chunk(self):
        # A's request is answered 404 (uncacheable: the chunk fails once its body is read away).
        # B, wanting bytes before A's offset meanwhile, must not have the head part asked.
        total = 2 * CS
        d = self.setup_proxy(self.LONG)
        o = ErrorHeld(total, OFF)
        a, b = self.a_held_then_b("err", o)
        self.wait_handled(b)
        self.assertEqual(d.status()["upstream_requests_total"], 1)
        o.drain.set()
        self.assertStatus(a.read_response(), 404)
        self.assertStatus(b.read_response(), 404)
        starts = sorted(start_of_req(r, total) for r in self.origin.requests)
        self.assertNotIn(0, starts, "the head part was asked: %r" % starts)

    def test_reader_waiting_before_the_split_has_the_head_part_asked(self):
        # R's read-ahead run [1..3] is answered by a redirect whose body the origin holds, so B
        # (bytes 1000.. of chunk 3) cannot cut the run and waits. Once the run follows the
        # redirect (its answer held too), A's range deep in chunk 3 cuts it there: chunk 3 is
        # a two-part chunk whose part from A's offset is held. B waits for a byte before that
        # offset: its head part must be asked now, not once A's part is answered.
        total = 8 * CS
        cfg = {"upstream": dict(self.LONG["upstream"], readahead="2"),
               "server": self.LONG["server"]}
        self.setup_proxy(cfg)
        lo = 3 * CS + OFF
        fin = HoldStarts(total, holds=(CS, lo))
        for e in fin.go.values():
            self.addCleanup(e.set)
        redir = Chain("/c06/sp/", total, at=CS, hops=1)      # obj redirects to h1
        self.addCleanup(redir.drain.set)
        self.origin.route("/c06/sp/h1", fin)
        self.origin.route("/c06/sp/", redir)
        p, fin_path = "/c06/sp/obj", "/c06/sp/h1"
        r = self.client(timeout=60)
        r.request(p, headers=[("Range", "bytes=0-%d" % (6 * CS - 1))])
        rr = r.read_head()
        self.assertStatus(rr, 206)
        self.assertTrue(redir.holding.wait(10 * H.SLOW), "the run [1..3] was not redirected")
        b = self.client(timeout=20)
        b.request(p, headers=[("Range", "bytes=%d-%d" % (3 * CS + 1000, 3 * CS + 1999))])
        self.wait_handled(b)
        redir.drain.set()
        self.assertTrue(fin.asked[CS].wait(10 * H.SLOW), "the run did not follow the redirect")
        a = self.client(timeout=30)
        a.request(p, headers=[("Range", "bytes=%d-%d" % (lo, lo + 999))])
        self.assertTrue(fin.asked[lo].wait(10 * H.SLOW), "A's range did not cut the run")
        # A's part and the run are both held: B's bytes can only come from the head part
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, fin_path, 3 * CS + 1000, 3 * CS + 2000)
        for e in fin.go.values():
            e.set()
        ra = a.read_response()
        self.assertBody(ra, fin_path, lo, lo + 1000)
        self.assertBody(r.finish_response(rr), fin_path, 0, 6 * CS)

    def test_reader_joining_a_disk_lookup_has_the_head_part_asked(self):
        # Chunk 0's file is found unusable by the lookup (a FIFO where the file was: the I/O
        # thread's open() blocks until the test opens it for writing). A (from OFF) starts the
        # lookup; B (bytes 1000..) joins it. The lookup misses: the fetch from OFF starts, its
        # answer held. B waits for a byte before OFF: the head part must be asked now.
        total = 2 * CS
        self.setup_proxy(self.LONG)
        fin = HoldStarts(total, holds=())
        self.origin.route("/c06/ld/", fin)
        p = "/c06/ld/obj"
        r = self.get(p)
        self.assertBody(r, p, total=total)
        self.assertEqual(sorted(self.stored(p)), [0, 1])
        path0 = self.stored(p)[0]["path"]
        self.daemon.stop()
        self.daemon.start()     # memory empty: chunk 0 is looked up on disk
        H.wait_until(lambda: self.daemon.metrics().get(
            'cacheparty_cache_chunks{tier="disk"}') == 2, 10 * H.SLOW, what="disk scan")
        os.unlink(path0)
        os.mkfifo(path0)
        fin.asked[OFF] = threading.Event()
        fin.go[OFF] = threading.Event()
        self.addCleanup(fin.go[OFF].set)
        a = self.client(timeout=30)
        a.request(p, headers=[("Range", "bytes=%d-%d" % (OFF, OFF + 999))])
        self.wait_handled(a)    # A's offset is the lookup's (the first reader's)
        b = self.client(timeout=20)
        b.request(p, headers=[("Range", "bytes=1000-1999")])
        self.wait_handled(b)

        def open_writer():      # only once the I/O thread is blocked in open() as reader
            try:
                return os.open(path0, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    return None
                raise
        fd = []
        H.wait_until(lambda: fd.append(open_writer()) or fd[-1] is not None, 10 * H.SLOW,
                     what="the lookup opening chunk 0")
        os.close(fd[-1])
        self.assertTrue(fin.asked[OFF].wait(10 * H.SLOW), "the lookup did not miss")
        # A's answer is held: B's bytes can only come from the head part
        rb = b.read_response()
        self.assertStatus(rb, 206)
        self.assertBody(rb, p, 1000, 2000)
        fin.go[OFF].set()
        self.assertBody(a.read_response(), p, OFF, OFF + 1000)


if __name__ == "__main__":
    raise SystemExit(H.main())
