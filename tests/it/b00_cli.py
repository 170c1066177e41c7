# SPDX-License-Identifier: BSD-2-Clause
"""b00: command line and configuration errors (docs/interfaces.md, "Command line" and "Configuration")."""

import os
import re
import socket

import harness as H


class Cli(H.CPTestCase):
    def write_ini(self, extra_after=None, replace=None):
        """Writes a valid test INI; extra_after = (section, line) inserts <line> right after the
        [section] header. Returns (path, line number of the inserted line)."""
        cfg = H.default_config(self._tmp, H.free_port(), "127.0.0.1:53", "127.0.0.1:1")
        H.merge_config(cfg, replace)
        lines = H.render_ini(cfg).splitlines()
        lineno = None
        if extra_after:
            sec, text = extra_after
            i = lines.index("[%s]" % sec)
            lines.insert(i + 1, text)
            lineno = i + 2
        path = os.path.join(self._tmp, "test.ini")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path, lineno

    def assertFileLine(self, text, path, lineno, slack=0):
        """stderr has "PATH:LINE: message" with LINE in lineno .. lineno + slack."""
        lines = "|".join(str(n) for n in range(lineno, lineno + slack + 1))
        self.assertRegex(text, r"(?m)^.*%s:(%s): ?\S" % (re.escape(path), lines),
                         "no '%s:%d: message' in stderr" % (path, lineno))

    def test_t_good_config_exits_0(self):
        path, _ = self.write_ini()
        rc, out, err = H.run_binary(["-c", path, "-t"])
        self.assertEqual(rc, 0, "stdout: %s\nstderr: %s" % (out, err))
        self.assertTrue((out + err).strip(), "-t printed no summary")

    def test_t_unknown_key_file_line(self):
        path, n = self.write_ini(("server", "bogus_key = 1"))
        rc, out, err = H.run_binary(["-c", path, "-t"])
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertFileLine(err, path, n)

    def test_t_unknown_section_file_line(self):
        # inih reports a refused key, so the line may be the section's or its first key's
        path, n = self.write_ini(("log", "[nosuchsection]"))
        rc, out, err = H.run_binary(["-c", path, "-t"])
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertFileLine(err, path, n, slack=1)

    def test_t_bad_value_file_line(self):
        path, n = self.write_ini(("upstream", "connect_timeout = soon"))
        rc, out, err = H.run_binary(["-c", path, "-t"])
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertFileLine(err, path, n)

    def test_daemon_bad_config_exits_1(self):
        path, n = self.write_ini(("cache", "memory_sise = 64M"))
        rc, out, err = H.run_binary(["-c", path], timeout=20)
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertFileLine(err, path, n)

    def test_missing_config_exits_1(self):
        path = os.path.join(self._tmp, "nope.ini")
        rc, out, err = H.run_binary(["-c", path, "-t"])
        self.assertEqual(rc, 1, "stdout: %s\nstderr: %s" % (out, err))
        self.assertIn(path, err)

    def test_port_taken_exits_2(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        try:
            path, _ = self.write_ini(replace={"server": {"listen": "127.0.0.1:%d" % port}})
            rc, out, err = H.run_binary(["-c", path], timeout=20)
        finally:
            s.close()
        self.assertEqual(rc, 2, "stdout: %s\nstderr: %s" % (out, err))
        self.assertTrue(err.strip(), "no reason on stderr")

    def test_version_exits_0(self):
        rc, out, err = H.run_binary(["-V"])
        self.assertEqual(rc, 0, "stdout: %s\nstderr: %s" % (out, err))
        self.assertTrue((out + err).strip())


if __name__ == "__main__":
    raise SystemExit(H.main())
