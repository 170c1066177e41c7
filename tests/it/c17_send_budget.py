# SPDX-License-Identifier: BSD-2-Clause
"""c17: a loop iteration's send budget (turnq.h; CONN_LOOP_SEND, 4 MiB a loop iteration). Clients
whose responses are under way all become able to take bytes at once: the daemon is stopped
(SIGSTOP) while they empty their sockets, then continued, so one loop iteration finds every one of
them writable. Past the budget, their turns are put off to the next iteration, with no socket event
to bring them back: every client must still get every byte, in order, and its next request on the
same connection must be answered from its first byte. (The loop's idle watcher, which keeps a
poll from sleeping while turns are queued and no socket event would bring them back, is not
shown here: sockets still writable and the daemon's ticks wake the loop anyway.)"""

import os
import signal

import harness as H

N = 12
SIZE = 24 * H.MIB
PUT_OFF = "cacheparty_send_turns_put_off_total"


class SendBudget(H.CPTestCase):
    def metric(self, name):
        return self.daemon.metrics().get(name, 0)

    def drain(self, c, resp):
        """Reads whatever <c>'s socket holds now, without waiting (the daemon is stopped)."""
        c.sock.setblocking(False)
        try:
            while True:
                try:
                    d = c.sock.recv(H.MIB)
                except BlockingIOError:
                    break
                self.assertTrue(d, "the daemon closed a connection")
                c.received += len(d)
                c._ready.extend(c.parser.feed(d))
        finally:
            c.sock.setblocking(True)
        self.assertFalse(resp.complete, "a whole response fit in the socket buffers")

    def state(self):
        with open("/proc/%d/stat" % self.daemon.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def test_turns_put_off_still_deliver_every_byte(self):
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            if int(f.read().split()[2]) < 2 * H.MIB:
                self.skipTest("socket send buffers capped under 2 MiB (net.ipv4.tcp_wmem): a turn "
                              "may then send too little for %d of them to pass the budget" % N)
        with open("/proc/sys/net/ipv4/tcp_notsent_lowat") as f:
            if int(f.read()) < 2 * H.MIB:   # (-1, the default, is no limit: read as 2^32 - 1)
                self.skipTest("net.ipv4.tcp_notsent_lowat under 2 MiB: a turn may then send too "
                              "little for %d of them to pass the budget" % N)
        self.setup_proxy({"server": {"admin_listen": "auto", "send_timeout": "60s"}})
        path = "/c17/big/size/%d" % SIZE
        c = self.client(timeout=60)
        c.request(path)
        self.assertBody(c.read_response(), path)   # cached: every later request is a hit
        c.close()
        self.assertEqual(self.metric(PUT_OFF), 0, "one client alone never passes the budget")
        clients, resps = [], []
        for _ in range(N):
            cl = self.client(timeout=60)
            cl.request(path)
            r = cl.read_head()
            self.assertStatus(r, 200)
            cl.read_body_until(r, 64 * H.KIB)   # under way: its first bytes went out
            clients.append(cl)
            resps.append(r)
        self.daemon.signal(signal.SIGSTOP)
        try:
            H.wait_until(lambda: self.state() == "T", 10 * H.SLOW, 0.01, "the daemon to stop")
            for cl, r in zip(clients, resps):
                self.drain(cl, r)
        finally:
            self.daemon.signal(signal.SIGCONT)
        # Every socket has room for more than a turn now: the first iteration after the stop
        # sends turns until the budget is spent and puts the others off.
        for cl, r in zip(clients, resps):
            cl.finish_response(r, timeout=60)
            self.assertBody(r, path)
        self.assertGreater(self.metric(PUT_OFF), 0,
                           "%d clients able to take a turn each, and none was put off" % N)
        # The next request on each connection: answered whole, as the first was.
        for cl in clients:
            cl.request(path)
        for cl in clients:
            self.assertBody(cl.read_response(timeout=60), path)
            cl.close()
        self.assertEqual(self.origin.body_bytes_sent, SIZE)   # every byte fetched once


if __name__ == "__main__":
    H.main()
