# SPDX-License-Identifier: BSD-2-Clause
"""x01: the crash-consistency soak (tests/soak/soak.py, `make soak`) in a short form: 5 kill -9
and restart cycles with chunk-file damage in between; no wrong byte may ever be served, the
daemon never dies by itself, and a final whole read of every object is exact."""

import os
import re
import subprocess
import sys

import harness as H

SOAK = os.path.join(H.ROOT, "tests", "soak", "soak.py")


class SoakShort(H.CPTestCase):
    def test_five_cycles_no_wrong_byte(self):
        if not os.access(os.path.join(H.ROOT, H.BUILD, "bench", "origin"), os.X_OK):
            self.fail("bench origin missing: make test-bins")
        env = dict(os.environ)
        env["SOAK_SEED"] = ""
        p = subprocess.run([sys.executable, SOAK, "--cycles", "5", "--clients", "4", "--quiet"],
                           capture_output=True, text=True, env=env, timeout=240 * H.SLOW)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        sys.stdout.write(p.stdout[-3000:])
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-2000:])
        m = re.search(r"(\d+) bytes served and verified, (\d+) wrong", last)
        self.assertIsNotNone(m, last)
        self.assertEqual(int(m.group(2)), 0)
        self.assertGreater(int(m.group(1)), 0, "nothing was served")


if __name__ == "__main__":
    raise SystemExit(H.main())
