# SPDX-License-Identifier: BSD-2-Clause
"""c15: chunk memory sent by reference. A client whose socket already holds bytes it has not
taken gets chunk memory by reference (sendfile from the chunk memory file) instead of copies;
the socket then holds references to the chunk's pages. Those bytes must arrive as they were sent
after the chunk left memory and its memory was given to other chunks and written over: a slow
client of one object, paused while other clients fetch more objects than memory holds, then
reads on and gets exactly the origin's bytes. Clients that keep up get copies."""

import time

import harness as H

MEM = 8 * H.MIB
# A short last chunk (malloc'd, always copied) after chunks that go by reference: sent in a turn
# that decided on references, it must still be copied (it is in no file).
X_SIZE = 24 * H.MIB + 4321
REF = 'cacheparty_sent_bytes_total{from="memory_reference"}'
COPY = 'cacheparty_sent_bytes_total{from="memory_copy"}'


class ByReference(H.CPTestCase):
    def metric(self, name):
        return self.daemon.metrics().get(name, 0)

    def test_bytes_sent_by_reference_survive_memory_reuse(self):
        self.need_big_send_buffers()
        self.setup_proxy({"server": {"admin_listen": "auto", "send_timeout": "60s"},
                              "cache": {"memory_size": "8M"},
                              "upstream": {"read_timeout": "20s"}})
        x = "/c15/slow/size/%d" % X_SIZE
        a = self.client(timeout=60)
        a.request(x)
        r = a.read_head()
        self.assertStatus(r, 200)
        # Reads on slowly until the daemon has sent it bytes by reference (its socket holds
        # what it has not taken yet when the daemon sends more).
        got_ref = False
        while len(r.body) < 8 * H.MIB and not r.complete:
            a.read_body_until(r, len(r.body) + 64 * H.KIB)
            if self.metric(REF) > 0:
                got_ref = True
                break
            time.sleep(0.01)   # the client's own pace, not a synchronisation
        self.assertTrue(got_ref, "no byte was sent by reference to a client behind by %d bytes"
                        % (X_SIZE - len(r.body)))
        # Meanwhile others fetch more objects than memory holds, each whole and at once: the
        # chunk memory that the slow client's socket refers to is released and written over.
        others = ["/c15/other%d/size/%d" % (i, 2 * MEM) for i in range(3)]
        for p in others:
            b = self.client(timeout=60)
            b.request(p)
            self.assertBody(b.read_response(), p)
            b.close()
        self.assertGreater(self.metric(COPY), 0, "a client that keeps up got no copies")
        self.assertGreater(self.metric("cacheparty_evictions_total{tier=\"memory\"}"), 0)
        # The slow client reads the rest: every byte as the origin sent it.
        a.finish_response(r, timeout=60)
        self.assertBody(r, x)
        # Every byte came from the origin once (no fill was repeated for lack of memory).
        self.assertEqual(self.metric("cacheparty_upstream_bytes_total"), X_SIZE + 3 * 2 * MEM)

    def test_short_last_chunk_in_a_turn_by_reference_is_copied(self):
        # Chunks 0-1 are in the memory file, chunk 2 (4321 bytes) is malloc'd. A client that
        # lags reads the object slowly: the turn that reaches chunk 2 starts on chunk 1's rest
        # with the socket still full, so it decides on references; chunk 2 must still be sent
        # (copied), not closed on.
        self.need_big_send_buffers()
        self.setup_proxy({"server": {"admin_listen": "auto", "send_timeout": "60s"}})
        size = 2 * H.MIB + 4321
        for i in range(3):
            p = "/c15/short-last%d/size/%d" % (i, size)
            c = self.client(timeout=60)
            c.request(p)
            r = c.read_head()
            self.assertStatus(r, 200)
            # the whole object is fetched (and its bytes wait in the daemon) before reading on
            H.wait_until(lambda: self.origin.body_bytes_sent >= (i + 1) * size, 20 * H.SLOW)
            while not r.complete:
                c.read_body_until(r, len(r.body) + 32 * H.KIB)
                time.sleep(0.002)   # the client's own pace, not a synchronisation
            self.assertBody(r, p)
            c.close()
        self.assertGreater(self.metric(REF), 0)

    def need_big_send_buffers(self):
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            if int(f.read().split()[2]) < 2 * H.MIB:
                self.skipTest("socket send buffers capped under 2 MiB (net.ipv4.tcp_wmem): a "
                              "socket never holds the 512 KiB that makes a send by reference")


if __name__ == "__main__":
    H.main()
