#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs the HTTP cache test suite (npm http-cache-tests) through cacheparty: `make conformance`.

What it does, in order (docs/conformance.md says why and how to read the result):
  1. starts the suite's own server (tests/conformance/origin.mjs) on 127.0.0.1:<free port>;
  2. writes a cacheparty configuration under OUT/run/ (listen on 127.0.0.1:<free port>,
     [upstream] override = the suite's server, allow_private, allow_unlisted, a fresh cache
     directory) and starts BUILD/cacheparty on it;
  3. runs the suite's runner (tests/conformance/client.mjs) with cacheparty as the cache under test,
     bounded by --timeout;
  4. stops both by their process ids (also on an error, SIGINT or SIGTERM), checks cacheparty
     exited 0;
  5. writes OUT/results.json (the suite's raw results), OUT/groups.json (its grouping),
     OUT/table.txt (the table printed) and OUT/failures.txt (every test of the counted groups that
     did not pass, with the suite's message), and prints the per-group table;
  6. compares the sum over the counted groups with the floor file.

Usage: python3 tests/conformance/run.py --suite DIR [--build DIR] [--out DIR] [--floor FILE]
                                         [--timeout SEC] [--id TEST_ID]
  --id TEST_ID  run that one test and print what each side sent and received (no table, no floor)

Exit status: 0 when the run completed and the score is at least the floor; 1 when the score is
below the floor; 2 when the harness broke (a process did not start, cacheparty or the suite's
server died, cacheparty did not stop cleanly, results missing, no test got an answer, the run
overran its timeout).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE_VERSION = "0.4.5"

# The groups counted (issue 16: the ones that mean something for a forced LAN cache), as
# (label printed, the suite's group id, the test ids taken from it or None for all of them).
COUNTED = [
    ("partial", "partial", None),
    ("headers", "headers", None),
    ("conditional-etag", "conditional-inm", None),
    ("conditional-lm", "conditional-lm", None),
    ("status", "status", None),
    ("update304", "update304", None),
    ("updateHead", "updateHEAD", None),
    ("authorization", "auth", None),
    ("method", "method", None),
    ("age/date", "other", ["other-age-gen", "other-age-update-expires",
                           "other-age-update-max-age", "other-date-update"]),
]


class Broken(Exception):
    """The harness itself failed: exit 2."""


class Stop(Exception):
    """SIGTERM or SIGINT: clean up and exit 2."""


def on_signal(signum, _frame):
    raise Stop("stopped by signal %d" % signum)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tail(path, lines=30):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Proc:
    """A child process with its log file; stop() ends it by its pid."""

    def __init__(self, name, argv, log, env=None):
        self.name = name
        self.log = log
        self.logf = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc.poll() is None

    def wait_listening(self, port, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise Broken("%s exited with %s during startup:\n%s"
                             % (self.name, self.proc.returncode, tail(self.log)))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise Broken("%s not listening on 127.0.0.1:%d after %ds:\n%s"
                             % (self.name, port, timeout, tail(self.log)))
            time.sleep(0.05)

    def stop(self, timeout):
        """SIGTERM, then SIGKILL after timeout; returns the exit code (None if it was killed)."""
        if self.running():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.logf.close()
                return None
        self.logf.close()
        return self.proc.returncode


def write_config(path, run_dir, port, origin_port):
    text = """\
; written by tests/conformance/run.py for one `make conformance` run
[server]
listen = 127.0.0.1:{port}
admin_listen =
hostname = cp-conformance
max_connections = 1024
shutdown_timeout = 5s

[upstream]
dns = 127.0.0.1:{dns_port}           ; nothing listens there: no name is resolved
override = 127.0.0.1:{origin_port}
connect_timeout = 2s
first_byte_timeout = 10s
read_timeout = 10s
allow_private = yes

[cache]
dir = {cache}
memory_size = 64M
disk_size = 256M
min_free = 0

[domains]
allow_unlisted = yes

[log]
access = {access}
error = -
level = info
""".format(port=port, dns_port=free_port(), origin_port=origin_port,
           cache=os.path.join(run_dir, "cache"), access=os.path.join(run_dir, "access.log"))
    with open(path, "w") as f:
        f.write(text)


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        raise Broken("%s: %s" % (url, e))


def harness_failure(result):
    """A result that says the harness failed, not the cache: the control request to the suite's
    server failed, or the request could not be sent or its answer read (node-fetch's FetchError:
    refused, reset, timed out)."""
    return isinstance(result, list) and len(result) > 1 and (
        result[0] == "FetchError" or str(result[1]).startswith("PUT config"))


def read_floor(path):
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                return int(line)
    raise Broken("%s: no number in it" % path)


def score(groups, results):
    """Rows (label, suite id, passed, total, [(test id, result)] not passed) of the counted
    groups, then rows of every other group of the suite (no failure lists)."""
    by_id = {g["id"]: g for g in groups}
    counted, other = [], []
    taken = set()
    counted_ids = set()
    for label, gid, ids in COUNTED:
        g = by_id.get(gid)
        if g is None:
            raise Broken("the suite has no group %s" % gid)
        tests = [t for t in g["tests"] if ids is None or t["id"] in ids]
        if ids is not None and len(tests) != len(ids):
            raise Broken("group %s lacks some of %s" % (gid, ", ".join(ids)))
        missing = [t["id"] for t in tests if t["id"] not in results]
        if missing:
            raise Broken("no result for %s" % ", ".join(missing))
        failed = [(t, results[t["id"]]) for t in tests if results[t["id"]] is not True]
        counted.append((label, gid, len(tests) - len(failed), len(tests), failed))
        taken.add(gid)
        counted_ids.update(t["id"] for t in tests)
    for g in groups:
        rest = [t for t in g["tests"] if t["id"] not in counted_ids]
        if not rest:
            continue
        passed = sum(1 for t in rest if results.get(t["id"]) is True)
        label = g["id"] + (" (the rest)" if g["id"] in taken else "")
        other.append((label, g["id"], passed, len(rest)))
    return counted, other


def render(counted, other, floor, floor_path):
    lines = ["cache-tests %s through cacheparty: groups counted" % SUITE_VERSION,
             "  %-18s %-16s %6s %6s" % ("group", "suite group", "passed", "total")]
    for label, gid, passed, total, _ in counted:
        lines.append("  %-18s %-16s %6d %6d" % (label, gid, passed, total))
    p = sum(r[2] for r in counted)
    t = sum(r[3] for r in counted)
    lines.append("  %-18s %-16s %6d %6d" % ("sum", "", p, t))
    lines.append("  floor (%s): %d" % (os.path.relpath(floor_path, ROOT), floor))
    lines.append("other groups (not counted):")
    for label, gid, passed, total in other:
        lines.append("  %-35s %6d %6d" % (label, passed, total))
    return "\n".join(lines) + "\n", p, t


def failure_text(counted):
    out = []
    for label, gid, _, _, failed in counted:
        for t, r in failed:
            kind, msg = (r[0], r[1]) if isinstance(r, list) and len(r) > 1 else ("?", str(r))
            out.append("%s\t%s\t%s\t%s: %s" % (label, t["id"], t["kind"], kind, msg))
    return "\n".join(out) + ("\n" if out else "")


def main():
    ap = argparse.ArgumentParser(description="cache-tests through cacheparty")
    ap.add_argument("--suite", required=True, help="the installed http-cache-tests package")
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--out", default=None, help="default: BUILD/conformance")
    ap.add_argument("--floor", default=os.path.join(HERE, "floor.txt"))
    ap.add_argument("--timeout", type=int, default=300, help="seconds for the suite's run")
    ap.add_argument("--id", default="", help="run one test, verbosely")
    ap.add_argument("--node", default="node")
    args = ap.parse_args()

    build = args.build if os.path.isabs(args.build) else os.path.join(ROOT, args.build)
    out = args.out or os.path.join(build, "conformance")
    suite = os.path.abspath(args.suite)
    binary = os.path.join(build, "cacheparty")
    run_dir = os.path.join(out, "run")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs = []
    try:
        if not os.access(binary, os.X_OK):
            raise Broken("%s missing (make all)" % binary)
        try:
            with open(os.path.join(suite, "package.json")) as f:
                version = json.load(f).get("version")
        except (OSError, ValueError) as e:
            raise Broken("suite not installed at %s: %s" % (suite, e))
        if version != SUITE_VERSION:
            raise Broken("suite at %s is %s, not %s" % (suite, version, SUITE_VERSION))
        floor = read_floor(args.floor)

        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(os.path.join(run_dir, "cache"))
        for name in ("results.json", "groups.json", "table.txt", "failures.txt"):
            try:
                os.unlink(os.path.join(out, name))
            except FileNotFoundError:
                pass

        origin_port = free_port()
        origin = Proc("the suite's server",
                      [args.node, os.path.join(HERE, "origin.mjs"), suite, str(origin_port),
                       os.path.join(run_dir, "origin.pid")],
                      os.path.join(run_dir, "origin.log"))
        procs.append(origin)
        origin.wait_listening(origin_port, 20)

        port = free_port()
        ini = os.path.join(run_dir, "cacheparty.ini")
        write_config(ini, run_dir, port, origin_port)
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        daemon = Proc("cacheparty", [binary, "-c", ini], os.path.join(run_dir, "cacheparty.log"),
                      env=env)
        procs.append(daemon)
        daemon.wait_listening(port, 20)

        cache_url = "http://127.0.0.1:%d" % port
        origin_url = "http://127.0.0.1:%d" % origin_port
        st = http_status(cache_url + "/lancache-heartbeat")
        if st != 204:
            raise Broken("cacheparty's heartbeat answered %d, not 204" % st)
        st = http_status(origin_url + "/state/none")
        if st != 404:
            raise Broken("the suite's server answered /state/none with %d, not 404" % st)

        results_path = os.path.join(out, "results.json")
        groups_path = os.path.join(out, "groups.json")
        client_log = os.path.join(run_dir, "client.log")
        argv = [args.node, os.path.join(HERE, "client.mjs"), suite, cache_url, origin_url,
                results_path, groups_path] + ([args.id] if args.id else [])
        print("conformance: running cache-tests %s through cacheparty (pid %d) on %s, origin "
              "(pid %d) on %s" % (SUITE_VERSION, daemon.pid, cache_url, origin.pid, origin_url),
              flush=True)
        t0 = time.monotonic()
        with open(client_log, "wb") as logf:
            client = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=None if args.id else logf,
                                      stderr=None if args.id else subprocess.STDOUT, cwd=ROOT)
            procs.append(client)
            try:
                rc = client.wait(args.timeout)
            except subprocess.TimeoutExpired:
                raise Broken("the suite's runner did not finish within %ds:\n%s"
                             % (args.timeout, tail(client_log)))
        if rc != 0:
            raise Broken("the suite's runner exited with %d:\n%s" % (rc, tail(client_log)))
        if not daemon.running():
            raise Broken("cacheparty died during the run (exit %s):\n%s"
                         % (daemon.proc.returncode, tail(daemon.log)))
        if not origin.running():
            raise Broken("the suite's server died during the run (exit %s):\n%s"
                         % (origin.proc.returncode, tail(origin.log)))
        elapsed = time.monotonic() - t0
        procs.remove(client)
        procs.remove(daemon)
        drc = daemon.stop(15)
        if drc != 0:
            raise Broken("cacheparty did not stop cleanly on SIGTERM (exit %s):\n%s"
                         % (drc, tail(daemon.log)))
        procs.remove(origin)
        origin.stop(5)

        try:
            with open(results_path) as f:
                results = json.load(f)
            with open(groups_path) as f:
                groups = json.load(f)
        except (OSError, ValueError) as e:
            raise Broken("results missing: %s\n%s" % (e, tail(client_log)))
        if args.id:
            print("--- what the suite's server received and answered (%s):" % origin.log)
            with open(origin.log, "rb") as f:
                sys.stdout.write(f.read().decode("utf-8", "replace"))
            return 0
        if not results or all(harness_failure(r) for r in results.values()):
            raise Broken("no test got an answer through the harness, e.g. %s"
                         % (next(iter(results.values()), None),))

        counted, other = score(groups, results)
        table, passed, total = render(counted, other, floor, args.floor)
        with open(os.path.join(out, "table.txt"), "w") as f:
            f.write(table)
        with open(os.path.join(out, "failures.txt"), "w") as f:
            f.write(failure_text(counted))
        sys.stdout.write(table)
        print("conformance: %d of %d tests ran in %.0fs; raw results in %s, failures of the "
              "counted groups in %s" % (len(results), sum(len(g["tests"]) for g in groups),
                                        elapsed, results_path, os.path.join(out, "failures.txt")))
        if passed < floor:
            print("conformance: FAILED: %d of %d passed, below the floor of %d"
                  % (passed, total, floor))
            return 1
        print("conformance: %d of %d passed (floor %d)" % (passed, total, floor))
        return 0
    except (Broken, Stop) as e:
        print("conformance: harness broke: %s" % e, file=sys.stderr)
        return 2
    finally:
        for p in reversed(procs):
            if isinstance(p, Proc):
                p.stop(5)
            elif p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()


if __name__ == "__main__":
    sys.exit(main())
