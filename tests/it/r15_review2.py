# SPDX-License-Identifier: BSD-2-Clause
"""r15: reproductions from the second review of the issue-15 restructuring (log, config, main).

Each test below is a REPRODUCTION: it states the behaviour before the restructuring (9f88209),
or the behaviour a reload should have, and fails on c8e3460.

- access = "-" with the daemon's stdout closed. Before, access_open() dup()ed stdout: with
  descriptor 1 closed that failed (EBADF) and the daemon refused to start ("cannot open access
  log -"). struct log_file now borrows descriptor 1 without checking it, so the daemon starts,
  and descriptor 1 is whatever the process opens next (the epoll descriptor of the loop, here):
  every access line is written there and lost, and nothing says so. Passes on 9f88209, fails
  on c8e3460.
- The order of the reload warnings. main's hand list warned in the order listen, admin_listen,
  passthrough_listen, chunk_size, dir, dns, override, [tls] override; config_keep_fixed()
  visits the key table in file order (dns and override before dir and chunk_size). Passes on
  9f88209, fails on c8e3460 (a behaviour change the issue does not name as an exception).
- A reload that keeps chunk_size (it cannot change live) is checked before the running value
  is put back: a new memory_size that is valid for the new chunk_size but less than 4 x the
  kept one is accepted, and from then on no object larger than memory_size can be served (its
  fill waits for memory that never comes, gives up after 2 s, and the client gets a 200 head
  and a closed connection). Not a regression: fails on 9f88209 too. It lives in
  config_keep_fixed() now, where the whole-file checks could run again on the kept values.
"""

import os
import re
import signal
import subprocess

import harness as H


class Review2(H.CPTestCase):
    def test_access_log_to_a_closed_stdout_is_refused_at_start(self):
        """Reproduction (fails on c8e3460, passes on 9f88209)."""
        tmp = os.path.join(self._tmp, "closed-stdout")
        os.makedirs(os.path.join(tmp, "cache"))
        cfg = H.default_config(tmp, H.free_port(), "127.0.0.1:%d" % H.closed_port(), "")
        cfg["log"]["access"] = "-"
        ini = os.path.join(tmp, "cacheparty.ini")
        with open(ini, "w") as f:
            f.write(H.render_ini(cfg))
        errpath = os.path.join(tmp, "stderr")
        with open(errpath, "wb") as err:
            p = subprocess.Popen([H.binary_path(), "-c", ini], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err,
                                 preexec_fn=lambda: os.close(1))
            try:
                rc = p.wait(5 * H.SLOW)
            except subprocess.TimeoutExpired:
                target = os.readlink("/proc/%d/fd/1" % p.pid)
                p.send_signal(signal.SIGTERM)
                p.wait(10 * H.SLOW)
                self.fail("started with its stdout closed and access = -: access lines go to "
                          "descriptor 1, which is now %s" % target)
        with open(errpath) as f:
            text = f.read()
        self.assertEqual(rc, 2, text)
        self.assertIn("cannot open access log -", text)

    def test_reload_warns_about_each_kept_key_once_in_file_order(self):
        """The review found the warnings' order changed (9f88209: a hand-written order, chunk_size
        before override). Decided: the key table's file order ([upstream] before [cache]), the
        same for every key; this pins that every kept key is reported once, in that order."""
        d = self.setup_proxy()
        with open(d.ini) as f:
            ini = f.read()
        other = H.Origin()
        self._origins.append(other)
        ini = re.sub(r"(?m)^override = .*$", "override = %s" % other.addr, ini)
        ini = ini.replace("[cache]\n", "[cache]\nchunk_size = 2M\n", 1)
        with open(d.ini, "w") as f:
            f.write(ini)
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "configuration reloaded" in d.log(), 10 * H.SLOW,
                     what="the reload")
        lines = [l for l in d.log().splitlines() if "cannot change live" in l]
        keys = [re.search(r"reload: (\[\w+\] \w+)", l).group(1) for l in lines]
        self.assertEqual(keys, ["[upstream] override", "[cache] chunk_size"])

    def test_reload_keeping_chunk_size_still_serves_objects_larger_than_memory_size(self):
        """Reproduction of a defect older than the restructuring (fails on c8e3460 and on
        9f88209)."""
        d = self.setup_proxy({"cache": {"chunk_size": "16M", "memory_size": "64M"}})
        with open(d.ini) as f:
            ini = f.read()
        ini = re.sub(r"(?m)^chunk_size = .*$", "chunk_size = 1M", ini)
        ini = re.sub(r"(?m)^memory_size = .*$", "memory_size = 8M", ini)
        with open(d.ini, "w") as f:
            f.write(ini)
        d.signal(signal.SIGHUP)
        H.wait_until(lambda: "reload" in d.log(), 10 * H.SLOW, what="the reload")
        target = "/r15r2/size/%d" % (20 * H.MIB)
        c = self.client(timeout=30)
        c.request(target)
        try:
            r = c.read_response()
        except (AssertionError, OSError) as e:
            self.fail("a 20 MiB object after the reload (chunk_size 16M kept, memory_size 8M "
                      "taken): %s" % e)
        self.assertStatus(r, 200)
        self.assertBody(r, target)


if __name__ == "__main__":
    raise SystemExit(H.main())
