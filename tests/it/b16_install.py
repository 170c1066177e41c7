# SPDX-License-Identifier: BSD-2-Clause
"""b16: `make install` / `make uninstall` (PREFIX, SYSCONFDIR, DESTDIR): the binary, the
configuration (never overwritten) and the systemd unit, nothing else; the unit passes
`systemd-analyze verify` once installed where its ExecStart exists; the installed configuration
loads."""

import os
import shutil
import subprocess
import unittest

import harness as H

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def make(*args):
    env = dict(os.environ)
    env.setdefault("BUILD", "build")
    return subprocess.run(["make", "-s", "--no-print-directory"] + list(args), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def files_under(top):
    out = []
    for root, _, files in os.walk(top):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), top))
    return sorted(out)


class Install(H.CPTestCase):
    def test_destdir_layout_keep_config_and_uninstall(self):
        dest = os.path.join(self._tmp, "dest")
        r = make("install", "DESTDIR=" + dest)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(files_under(dest), ["etc/cacheparty/cacheparty.ini",
                                             "usr/local/bin/cacheparty",
                                             "usr/local/lib/systemd/system/cacheparty.service"])
        self.assertTrue(os.access(os.path.join(dest, "usr/local/bin/cacheparty"), os.X_OK))
        with open(os.path.join(dest, "usr/local/lib/systemd/system/cacheparty.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=/usr/local/bin/cacheparty -c /etc/cacheparty/cacheparty.ini",
                      unit)
        for line in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "DynamicUser=yes",
                     "CacheDirectory=cacheparty", "LogsDirectory=cacheparty",
                     "AmbientCapabilities=CAP_NET_BIND_SERVICE", "ProtectSystem=strict",
                     "NoNewPrivileges=yes", "Restart=on-failure"):
            self.assertIn(line, unit)
        # an edited configuration survives a second install
        ini = os.path.join(dest, "etc/cacheparty/cacheparty.ini")
        with open(ini, "a") as f:
            f.write("\n; edited by the user\n")
        r = make("install", "DESTDIR=" + dest)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(ini) as f:
            self.assertIn("; edited by the user", f.read())
        r = make("uninstall", "DESTDIR=" + dest)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(files_under(dest), ["etc/cacheparty/cacheparty.ini"])

    @unittest.skipIf(shutil.which("systemd-analyze") is None, "systemd-analyze not installed")
    def test_unit_verifies_where_installed(self):
        top = os.path.join(self._tmp, "root")
        r = make("install", "PREFIX=%s/usr" % top, "SYSCONFDIR=%s/etc" % top)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        unit = os.path.join(top, "usr/lib/systemd/system/cacheparty.service")
        v = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # the installed binary accepts the installed configuration
        t = subprocess.run([os.path.join(top, "usr/bin/cacheparty"), "-t", "-c",
                            os.path.join(top, "etc/cacheparty/cacheparty.ini")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(t.returncode, 0, t.stdout + t.stderr)


if __name__ == "__main__":
    raise SystemExit(H.main())
