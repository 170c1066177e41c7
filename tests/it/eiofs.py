#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""eiofs: a FUSE filesystem for the disk-fault tests: every operation passes through to a backing
directory, except that while the control file exists, reading a chunk file (a file two
directories down, <ab>/<cd>/<name>) fails with EIO, as a failing disk would; when the control
file says "body", only reads past the first byte fail (the header reads, the body does not). Runs in the
foreground until unmounted or killed.

Usage: /usr/bin/python3 eiofs.py BACKING MOUNTPOINT CONTROL_FILE
Needs Debian's python3-fusepy (the fusepy module) and /dev/fuse; run as root."""

import errno
import os
import sys

import fusepy


class EioFS(fusepy.Operations):
    def __init__(self, backing, control):
        self.root = os.path.realpath(backing)
        self.control = control

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _failing(self, path, offset):
        if path.count("/") < 3:
            return False
        try:
            with open(self.control) as f:
                mode = f.read().strip()
        except OSError:
            return False
        return mode != "body" or offset > 0

    # metadata
    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime",
                "st_ctime", "st_ino", "st_blocks")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def statfs(self, path):
        sv = os.statvfs(self._p(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")
        return {k: getattr(sv, k) for k in keys}

    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        os.rmdir(self._p(path))

    def unlink(self, path):
        os.unlink(self._p(path))

    def rename(self, old, new):
        os.rename(self._p(old), self._p(new))

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._p(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._p(path), times)

    def truncate(self, path, length, fh=None):
        with open(self._p(path), "r+b") as f:
            f.truncate(length)

    def readlink(self, path):
        return os.readlink(self._p(path))

    # files
    def open(self, path, flags):
        return os.open(self._p(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def read(self, path, size, offset, fh):
        if self._failing(path, offset):
            raise fusepy.FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        os.fsync(fh)

    def release(self, path, fh):
        os.close(fh)


def main():
    backing, mnt, control = sys.argv[1:4]
    fusepy.FUSE(EioFS(backing, control), mnt, foreground=True, nothreads=True,
                allow_other=False, direct_io=True)


if __name__ == "__main__":
    main()
