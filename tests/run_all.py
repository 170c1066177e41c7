#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs every test of cacheparty and ends with the line "N passed, N failed" (docs/interfaces.md, `make test`).

Groups, in order:
  unit   every cmocka binary $BUILD/tests/test_* (its "[  PASSED  ] N test(s)." and
         "[  FAILED  ] N test(s)" lines are counted; a binary that crashes or exits non-zero without
         them counts as 1 failure)
  it     the black-box suite tests/it/[a-z][0-9]*.py, one subprocess per file
  bench  bench/run.sh -smoke when it exists and is executable (1 test: pass on exit 0)

Usage: BUILD=build python3 tests/run_all.py [-k PATTERN] [--list]
  -k PATTERN  run only tests whose id contains PATTERN (or matches it as a glob). Ids look like
              unit/test_config, it/b01_bodies.Bodies.test_size_64mib, bench/smoke.
Environment: BUILD (default build), CP_SANITIZED=1 under ASan (longer timeouts, no RSS checks),
  CP_UNIT_EXEC="CMD ARGS" runs each unit binary as CMD ARGS BINARY (e.g. under qemu-user, with
  longer timeouts; make cross); the unit binaries then see CP_UNIT_EMULATED=1 (a test of 10 M
  entries runs 1 M).
Exit status 0 only when nothing failed.
"""

import argparse
import fnmatch
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BUILD_DIR = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
SANITIZED = os.environ.get("CP_SANITIZED", "") not in ("", "0")
UNIT_EXEC = shlex.split(os.environ.get("CP_UNIT_EXEC", ""))
SLOW = 3 if SANITIZED or UNIT_EXEC else 1
UNIT_TIMEOUT = 120 * SLOW
IT_FILE_TIMEOUT = 300 * SLOW
BENCH_TIMEOUT = 300 * SLOW

PASSED_RE = re.compile(r"^\[  PASSED  \] (\d+) test\(s\)\.", re.M)
FAILED_RE = re.compile(r"^\[  FAILED  \] (\d+) test\(s\)", re.M)
SKIPPED_RE = re.compile(r"^\[  SKIPPED \] (\d+) test\(s\)", re.M)


def matches(tid, pattern):
    if not pattern:
        return True
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(tid, pattern) or fnmatch.fnmatchcase(tid, "*" + pattern + "*")
    return pattern in tid


def out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def tail(text, n=80):
    lines = text.splitlines()
    return "\n".join(lines[-n:])


def run_group(cmd, timeout, env=None):
    """Runs cmd in its own session; returns (rc or None on timeout, output)."""
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        data, _ = p.communicate(timeout=timeout)
        return p.returncode, data.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        kill_session(p)
        data, _ = p.communicate()
        return None, data.decode("utf-8", "replace")


def kill_session(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass


class Group:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.failures = []
        self.t0 = time.monotonic()
        self.elapsed = None

    def summary(self):
        """One line; the first call (at the group's end) fixes the elapsed time."""
        if self.elapsed is None:
            self.elapsed = time.monotonic() - self.t0
        s = "%s: %d passed, %d failed" % (self.name, self.passed, self.failed)
        if self.skipped:
            s += ", %d skipped" % self.skipped
        return s + " (%.1fs)" % self.elapsed


# ---- unit ----------------------------------------------------------------------------------
def unit_binaries():
    out_ = []
    for p in sorted(glob.glob(os.path.join(BUILD_DIR, "tests", "test_*"))):
        base = os.path.basename(p)
        if "." in base or not os.path.isfile(p) or not os.access(p, os.X_OK):
            continue
        out_.append(p)
    return out_


def run_unit(pattern):
    g = Group("unit")
    bins = [b for b in unit_binaries() if matches("unit/" + os.path.basename(b), pattern)]
    out("== unit: %d binaries in %s/tests" % (len(bins), BUILD))
    env = dict(os.environ)
    env["CMOCKA_MESSAGE_OUTPUT"] = "STDOUT"
    if UNIT_EXEC:
        env["CP_UNIT_EMULATED"] = "1"
    for b in bins:
        tid = "unit/" + os.path.basename(b)
        rc, text = run_group(UNIT_EXEC + [b], UNIT_TIMEOUT, env)
        passed = sum(int(m) for m in PASSED_RE.findall(text))
        failed = sum(int(m) for m in FAILED_RE.findall(text))
        skipped = sum(int(m) for m in SKIPPED_RE.findall(text))
        found = bool(PASSED_RE.search(text) or FAILED_RE.search(text))
        why = None
        if rc is None:
            why = "timed out after %ds" % UNIT_TIMEOUT
            failed += 1
        elif not found:
            why = "exit %d without a cmocka summary (crash?)" % rc
            failed = 1
        elif rc != 0 and failed == 0:
            why = "exit %d after all tests passed (sanitizer report at exit?)" % rc
            failed = 1
        g.passed += passed
        g.failed += failed
        g.skipped += skipped
        if failed:
            g.failures.append(tid)
            out("  FAILED %s: %d passed, %d failed%s" % (tid, passed, failed,
                                                          " (%s)" % why if why else ""))
            out("\n".join("    " + line for line in tail(text, 100).splitlines()))
        else:
            out("  ok     %s: %d passed" % (tid, passed))
    out(g.summary())
    return g


# ---- integration ---------------------------------------------------------------------------
def it_files():
    files = glob.glob(os.path.join(ROOT, "tests", "it", "*.py"))
    return sorted(f for f in files if re.match(r"^[a-z]\d+.*\.py$", os.path.basename(f)))


def list_it(files, pattern):
    ids = []
    for f in files:
        rc, text = run_group([sys.executable, f, "--list"] + (["-k", pattern] if pattern else []),
                             60)
        ids += [line for line in text.splitlines() if line.startswith("it/")]
    return ids


def run_it(pattern):
    g = Group("it")
    files = it_files()
    daemon = os.path.join(BUILD_DIR, "cacheparty")
    out("== it: %d files in tests/it (daemon %s/cacheparty)" % (len(files), BUILD))
    if not os.access(daemon, os.X_OK):
        if list_it(files, pattern):
            out("  FAILED it: %s is missing (run make)" % daemon)
            g.failed += 1
            g.failures.append("it (daemon binary missing)")
        out(g.summary())
        return g
    env = dict(os.environ)
    env["BUILD"] = BUILD
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="cp-runall-") as tmp:
        for f in files:
            stem = os.path.splitext(os.path.basename(f))[0]
            res = os.path.join(tmp, stem + ".json")
            cmd = [sys.executable, f, "--result", res] + (["-k", pattern] if pattern else [])
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            timed_out = False
            try:
                rc = p.wait(IT_FILE_TIMEOUT)
            except subprocess.TimeoutExpired:
                kill_session(p)
                rc = p.wait()
                timed_out = True
            try:
                with open(res) as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                data = {"tests": [], "running": None}
            # a file that dies leaves its daemons behind in its session
            kill_session(p)
            for t in data["tests"]:
                if t["status"] == "pass":
                    g.passed += 1
                elif t["status"] == "skip":
                    g.skipped += 1
                else:
                    g.failed += 1
                    g.failures.append(t["id"])
            if timed_out:
                who = data.get("running") or stem
                out("  FAILED %s: file timed out after %ds" % (who, IT_FILE_TIMEOUT))
                g.failed += 1
                g.failures.append(who + " (timeout)")
            elif data.get("running"):
                out("  FAILED %s: the test process died (exit %s)" % (data["running"], rc))
                g.failed += 1
                g.failures.append(data["running"] + " (died)")
            elif rc not in (0, 1) or (rc == 1 and not any(t["status"] == "fail"
                                                          for t in data["tests"])):
                out("  FAILED it/%s: exit %s" % (stem, rc))
                g.failed += 1
                g.failures.append("it/%s (exit %s)" % (stem, rc))
    out(g.summary())
    return g


# ---- bench ---------------------------------------------------------------------------------
def run_bench(pattern):
    g = Group("bench")
    script = os.path.join(ROOT, "bench", "run.sh")
    if not matches("bench/smoke", pattern):
        return g
    if not (os.path.isfile(script) and os.access(script, os.X_OK)):
        out("== bench: bench/run.sh not present, skipped")
        return g
    out("== bench: bench/run.sh -smoke")
    env = dict(os.environ)
    env["BUILD"] = BUILD
    rc, text = run_group([script, "-smoke"], BENCH_TIMEOUT, env)
    if rc == 0:
        g.passed += 1
        out("  ok     bench/smoke")
    else:
        g.failed += 1
        g.failures.append("bench/smoke")
        out("  FAILED bench/smoke: %s" % ("timed out" if rc is None else "exit %d" % rc))
        out("\n".join("    " + line for line in tail(text, 60).splitlines()))
    out(g.summary())
    return g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", dest="pattern", default=None,
                    help="only tests whose id contains PATTERN (or matches the glob)")
    ap.add_argument("--list", action="store_true", help="list test ids and exit")
    ap.add_argument("--unit", action="store_true", help="run the unit group only")
    args = ap.parse_args()
    if args.list:
        for b in unit_binaries():
            tid = "unit/" + os.path.basename(b)
            if matches(tid, args.pattern):
                print(tid)
        for tid in list_it(it_files(), args.pattern):
            print(tid)
        if matches("bench/smoke", args.pattern) and os.access(os.path.join(ROOT, "bench", "run.sh"),
                                                              os.X_OK):
            print("bench/smoke")
        return 0
    groups = [run_unit(args.pattern)]
    if not args.unit:
        groups += [run_it(args.pattern), run_bench(args.pattern)]
    passed = sum(g.passed for g in groups)
    failed = sum(g.failed for g in groups)
    out()
    out("== summary")
    for g in groups:
        out("  " + g.summary())
    for g in groups:
        for f in g.failures:
            out("  FAILED " + f)
    out("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
