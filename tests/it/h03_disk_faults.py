# SPDX-License-Identifier: BSD-2-Clause
"""h03: a full cache disk (ENOSPC, issue #7): the cache directory is a 2 MiB tmpfs while the
configured disk_size is far larger, so chunk writes fail. The daemon keeps serving every object
with the right bytes (from memory or the origin), counts the failures in
cacheparty_errors_total{kind="disk_write"}, never leaves a chunk file that is not whole, and stops
cleanly. The file re-executes itself under `unshare -m` (a private mount namespace) and mounts the
tmpfs there; it is skipped, with the reason, where that is not permitted.

EIO (a failing disk) is not simulated here: it needs a device-mapper or loop device."""

import os
import shutil
import subprocess
import sys

MNTNS_ENV = "CP_H03_MNTNS"


def _reexec_in_mntns():
    if os.environ.get(MNTNS_ENV) or shutil.which("unshare") is None or os.geteuid() != 0:
        return
    try:
        ok = subprocess.run(["unshare", "-m", "true"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if ok:
        env = dict(os.environ)
        env[MNTNS_ENV] = "1"
        os.execvpe("unshare", ["unshare", "-m", "--propagation", "private", "--",
                               sys.executable] + sys.argv, env)


_reexec_in_mntns()

import harness as H  # noqa: E402

TMPFS_SIZE = 2 * H.MIB
CHUNK = 64 * H.KIB


def mount_tmpfs(path):
    """Mounts a TMPFS_SIZE tmpfs on <path>; returns None or why it cannot."""
    if os.environ.get(MNTNS_ENV) != "1":
        return "no private mount namespace (needs root and unshare -m)"
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % TMPFS_SIZE, "cp-h03", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return "mount -t tmpfs: %s" % p.stderr.strip()
    return None


class DiskFull(H.CPTestCase):
    def setUp(self):
        super().setUp()
        self.cache = os.path.join(self._tmp, "small")
        os.makedirs(self.cache)
        why = mount_tmpfs(self.cache)
        if why:
            self.skipTest(why)
        self.addCleanup(subprocess.run, ["umount", "-l", self.cache])

    def test_enospc_keeps_serving_right_bytes_and_is_counted(self):
        self.setup_proxy({"server": {"admin_listen": "auto"},
                          "cache": {"dir": self.cache, "disk_size": "1G", "min_free": "0",
                                    "memory_size": "1M", "chunk_size": "64K"}})
        objs = ["/h03/o%d/size/%d" % (i, 5 * CHUNK + 1000 * i) for i in range(12)]
        for rnd in range(2):
            for p in objs:
                c = self.client(timeout=30)
                c.request(p)
                r = c.read_response()
                self.assertStatus(r, 200)
                self.assertBody(r, p)
                c.close()
        # far more than the disk holds was asked for: writes failed, and that is reported
        m = self.daemon.metrics()
        self.assertGreater(m.get('cacheparty_errors_total{kind="disk_write"}', 0), 0, m)
        st = os.statvfs(self.cache)
        self.assertLess(st.f_bavail * st.f_frsize, 2 * CHUNK, "the tmpfs never filled")
        # ranges still right
        for p in objs[:4]:
            r = self.get(p, headers=[("Range", "bytes=%d-%d" % (CHUNK - 10, 3 * CHUNK + 5))])
            self.assertStatus(r, 206)
            self.assertBody(r, p, CHUNK - 10, 3 * CHUNK + 6)
        # every chunk file left is whole (header + data_len), none half-written
        for f in H.chunk_files(self.cache):
            info = H.chunk_file_info(f)
            self.assertIsNotNone(info, f)
            self.assertEqual(info["size"], info["hdr_len"] + info["data_len"], f)
        self.assertEqual(self.daemon.stop(), 0)
        # after a restart on the same full disk, still the right bytes
        self.daemon.start()
        for p in objs[::3]:
            self.assertBody(self.get(p), p)


if __name__ == "__main__":
    raise SystemExit(H.main())
