# SPDX-License-Identifier: BSD-2-Clause
"""b20: `cacheparty dns` loaded into the real resolvers (Debian's dnsmasq, unbound and BIND's
named, installed by `make deps`, started here in the foreground on loopback high ports from
configs written here, stopped by PID), asked with a small resolver client: every format
redirects exactly the names of the lists (a wildcard `*.d` covers the names below d only, an
exact name only itself), never lets an AAAA through for a redirected name (an A, for an
IPv6-only --ip), and forwards everything else to the upstream resolver. Where a format cannot
say a rule (unbound's local zones: the names below d without d; a hosts file: any wildcard) the
output says so in a comment, and the server is checked to do what the comment says.

The upstream is a stub on loopback that answers every name (A 192.0.2.1, AAAA 2001:db8::1):
any answer other than those two is the cache's. No query leaves loopback."""

import os
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

import harness as H

LISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conf",
                     "cache-domains")
UP_A, UP_AAAA = "192.0.2.1", "2001:db8::1"
DNSMASQ, UNBOUND, NAMED = "/usr/sbin/dnsmasq", "/usr/sbin/unbound", "/usr/sbin/named"


class Upstream:
    """The upstream resolver: answers every A and AAAA query."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)  # (only so that close() can end the thread)
        self.port = self.sock.getsockname()[1]
        self.names = []
        self.closed = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while True:
            if self.closed:
                return
            try:
                d, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                # an answer to a resolver that just stopped comes back as ICMP port unreachable,
                # which Linux reports on the next recvfrom (ECONNREFUSED): not the end
                if self.closed:
                    return
                continue
            try:
                off = 12
                labels = []
                while d[off]:
                    labels.append(d[off + 1:off + 1 + d[off]].decode("latin-1"))
                    off += d[off] + 1
                qtype = struct.unpack(">H", d[off + 1:off + 3])[0]
                qend = off + 5
                self.names.append((".".join(labels).lower(), qtype))
                rr = b""
                if qtype == 1:
                    rr = socket.inet_aton(UP_A)
                elif qtype == 28:
                    rr = socket.inet_pton(socket.AF_INET6, UP_AAAA)
                ans = (b"\xc0\x0c" + struct.pack(">HHIH", qtype, 1, 60, len(rr)) + rr) if rr else b""
                flags = 0x8180 | (d[2] << 8 & 0x0100)
                out = d[:2] + struct.pack(">HHHHH", flags, 1, 1 if rr else 0, 0, 0) + d[12:qend]
            except (IndexError, struct.error):
                continue
            for _ in range(2):  # a pending ICMP error of an earlier answer fails one sendto
                try:
                    self.sock.sendto(out + ans, peer)
                    break
                except OSError:
                    if self.closed:
                        return

    def close(self):
        self.closed = True
        self.thread.join(10)
        self.sock.close()


def query(port, name, qtype, timeout=2.0, tries=1):
    """(rcode, [addresses]) of <name> <qtype> ("A" or "AAAA") asked of 127.0.0.1:<port>; the
    query is sent again after each <timeout> without an answer, <tries> times in all, as any
    resolver client does (a loaded machine may leave a server without CPU for a while)."""
    qid = random.randrange(65536)
    t = {"A": 1, "AAAA": 28}[qtype]
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", t, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        for attempt in range(tries):
            s.sendto(q, ("127.0.0.1", port))
            try:
                while True:
                    d, _ = s.recvfrom(4096)
                    if d[:2] == q[:2]:
                        break
                break
            except socket.timeout:
                if attempt == tries - 1:
                    raise
    finally:
        s.close()
    flags, qd, an = struct.unpack(">HHH", d[2:8])
    off = 12
    for _ in range(qd):
        while d[off]:
            off += d[off] + 1
        off += 5
    out = []
    for _ in range(an):
        while True:  # owner name
            if d[off] & 0xC0 == 0xC0:
                off += 2
                break
            if d[off] == 0:
                off += 1
                break
            off += d[off] + 1
        rtype, _cls, _ttl, rlen = struct.unpack(">HHIH", d[off:off + 10])
        off += 10
        rd = d[off:off + rlen]
        off += rlen
        if rtype == 1:
            out.append(socket.inet_ntop(socket.AF_INET, rd))
        elif rtype == 28:
            out.append(socket.inet_ntop(socket.AF_INET6, rd))
    return flags & 0xF, sorted(out)


def read_lists(root):
    """[(service, name, wild)] of the cache-domains checkout <root>, in order, each entry once
    (the first service that lists it), as cacheparty reads them."""
    import json
    with open(os.path.join(root, "cache_domains.json")) as f:
        doc = json.load(f)
    out, seen = [], set()
    for svc in doc["cache_domains"]:
        for fn in svc["domain_files"]:
            with open(os.path.join(root, fn)) as f:
                for line in f:
                    line = line.split("#")[0].strip().lower().rstrip(".")
                    if not line:
                        continue
                    wild = line.startswith("*.")
                    name = line[2:] if wild else line
                    if (name, wild) not in seen:
                        seen.add((name, wild))
                        out.append((svc["name"], name, wild))
    return out


def service_of(entries, host):
    """The lists' rule: an exact name matches itself, "*.d" the names below d; the exact name
    first, else the longest wildcard."""
    best = None
    for svc, name, wild in entries:
        if not wild and name == host:
            return svc
        if wild and host.endswith("." + name) and (best is None or len(name) > len(best[1])):
            best = (svc, name)
    return best[0] if best else None


def probe_names(entries):
    """The names to ask: every listed name, names below each (one and two labels), each
    wildcard's base, look-alikes, and an unrelated name."""
    names = ["unrelated.example.org"]
    for _svc, name, wild in entries:
        names += [name, "a." + name, "b.a." + name, "x" + name, name + ".evil.example"]
    return sorted(set(names))


class Server:
    def __init__(self, argv, port, tmp, name, up):
        """Starts argv, which serves DNS on <port> and forwards to <up> (an Upstream). Ready once
        a name of its own came back with the upstream's answer and the upstream saw it: an
        answer from whatever else holds the port (a server of a parallel test bound meanwhile:
        SO_REUSEADDR lets two UDP sockets share it) does not count."""
        self.port = port
        self.name = name
        self.log = open(os.path.join(tmp, name + ".log"), "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        ready = "ready-%d-%d.example.org" % (port, self.proc.pid)
        deadline = time.monotonic() + 20 * H.SLOW
        while True:  # a bounded wait for the process, not a test timing
            if self.proc.poll() is not None:
                self.log.close()
                raise AssertionError("%s exited %s:\n%s" % (name, self.proc.returncode,
                                                            self.text(tmp, name)))
            try:
                rcode, got = query(port, ready, "A", timeout=0.5)
                if rcode == 0 and got == [UP_A] and ready in [n for n, _t in up.names]:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError("%s does not answer %s through the upstream:\n%s"
                                     % (name, ready, self.text(tmp, name)))
            time.sleep(0.05)

    @staticmethod
    def text(tmp, name):
        with open(os.path.join(tmp, name + ".log"), "rb") as f:
            return f.read().decode("utf-8", "replace")[-3000:]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


class DnsServers(unittest.TestCase):
    def setUp(self):
        for exe in (DNSMASQ, UNBOUND, NAMED):
            if not os.access(exe, os.X_OK):
                self.fail("%s is missing: make deps installs dnsmasq-base, unbound and bind9" % exe)
        self.tmp = tempfile.mkdtemp(prefix="cp-b20-")
        self.up = Upstream()
        self.servers = []
        self.ini = os.path.join(self.tmp, "cp.ini")
        self.set_lists(LISTS)

    def tearDown(self):
        for s in self.servers:
            s.stop()
        self.up.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def set_lists(self, root):
        self.entries = read_lists(root)
        with open(self.ini, "w") as f:
            f.write("[domains]\ncache_domains = %s\n" % root)

    def export(self, fmt, *args):
        out = subprocess.run([H.binary_path(), "-c", self.ini, "dns", "--format", fmt] + list(args),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        path = os.path.join(self.tmp, "out." + fmt)
        with open(path, "w") as f:
            f.write(out.stdout)
        return path, out.stdout

    # servers ---------------------------------------------------------------------------------
    def start(self, name, make_argv):
        """Starts the server make_argv(port) builds, on a free port; another port when the one
        chosen was taken meanwhile (tests run in parallel; the servers bind UDP and TCP)."""
        for attempt in range(5):
            port = free_port()
            try:
                s = Server(make_argv(port), port, self.tmp, name, self.up)
            except AssertionError as e:
                if "in use" in str(e) and attempt < 4:
                    continue
                raise
            self.servers.append(s)
            return s

    def dnsmasq(self, conf=None, hosts=None):
        return self.start("dnsmasq", lambda port: self.dnsmasq_argv(port, conf, hosts))

    def dnsmasq_argv(self, port, conf, hosts):
        argv = [DNSMASQ, "--no-daemon", "--port=%d" % port, "--listen-address=127.0.0.1",
                "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
                "--server=127.0.0.1#%d" % self.up.port,
                "--pid-file=%s" % os.path.join(self.tmp, "dnsmasq.pid")]
        if os.geteuid() != 0:
            argv.append("--user=")
        if conf:
            argv.append("--conf-file=%s" % conf)
        if hosts:
            argv.append("--addn-hosts=%s" % hosts)
        return argv

    def unbound(self, include=None, rpz=None):
        return self.start("unbound", lambda port: self.unbound_argv(port, include, rpz))

    def unbound_argv(self, port, include, rpz):
        conf = os.path.join(self.tmp, "unbound.conf")
        with open(conf, "w") as f:
            f.write('server:\n  interface: 127.0.0.1\n  port: %d\n  do-ip6: no\n'
                    '  do-daemonize: no\n  username: ""\n  chroot: ""\n  directory: "%s"\n'
                    '  pidfile: "%s/unbound.pid"\n  use-syslog: no\n  logfile: ""\n'
                    '  verbosity: 1\n  do-not-query-localhost: no\n'
                    '  access-control: 127.0.0.0/8 allow\n  qname-minimisation: no\n'
                    '  msg-cache-size: 0\n  rrset-cache-size: 0\n'
                    '  module-config: "%s"\n' % (port, self.tmp, self.tmp,
                                                 "respip iterator" if rpz else "iterator"))
            if include:
                f.write('include: "%s"\n' % include)
            if rpz:
                f.write('rpz:\n  name: "rpz.cacheparty"\n  zonefile: "%s"\n' % rpz)
            f.write('forward-zone:\n  name: "."\n  forward-addr: 127.0.0.1@%d\n' % self.up.port)
        check = subprocess.run(["/usr/sbin/unbound-checkconf", conf], capture_output=True,
                               text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        return [UNBOUND, "-d", "-c", conf]

    def named(self, rpz):
        return self.start("named", lambda port: self.named_argv(port, rpz))

    def named_argv(self, port, rpz):
        conf = os.path.join(self.tmp, "named.conf")
        with open(conf, "w") as f:
            f.write('options {\n  directory "%s";\n  pid-file "%s/named.pid";\n'
                    '  session-keyfile "%s/session.key";\n'
                    '  listen-on port %d { 127.0.0.1; };\n  listen-on-v6 { none; };\n'
                    '  recursion yes;\n  allow-query { 127.0.0.1; };\n'
                    '  allow-recursion { 127.0.0.1; };\n'
                    '  forwarders { 127.0.0.1 port %d; };\n  forward only;\n'
                    '  dnssec-validation no;\n  max-cache-size 1m;\n  max-cache-ttl 1;\n'
                    '  max-ncache-ttl 1;\n'
                    '  response-policy { zone "rpz.cacheparty"; } qname-wait-recurse no;\n};\n'
                    'controls { };\n'
                    'zone "rpz.cacheparty" { type primary; file "%s"; };\n'
                    % (self.tmp, self.tmp, self.tmp, port, self.up.port, rpz))
        check = subprocess.run(["/usr/bin/named-checkconf", conf], capture_output=True,
                               text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        argv = [NAMED, "-g", "-c", conf, "-4", "-n", "1"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        return argv

    # checks ----------------------------------------------------------------------------------
    def check(self, server, target_of, what, names=None):
        """Asks <server> A and AAAA of every probe name; target_of(host) -> the addresses the
        host must get (a list, v4 and v6 mixed) or None (forwarded upstream)."""
        bad = []
        for host in names or probe_names(self.entries):
            want = target_of(host)
            for qtype in ("A", "AAAA"):
                try:
                    rcode, got = query(server.port, host, qtype, tries=3)
                except OSError as e:
                    raise AssertionError("%s: %s %s: %s\nupstream alive %s, saw (last 5): %s\n%s" % (
                        what, host, qtype, e, self.up.thread.is_alive(), self.up.names[-5:],
                        server.text(self.tmp, server.name)))
                if want is None:
                    exp = [UP_A] if qtype == "A" else [UP_AAAA]
                else:
                    fam = [a for a in want if (":" in a) == (qtype == "AAAA")]
                    exp = sorted(fam)  # [] = no data, never the upstream's
                if rcode != 0 or got != exp:
                    bad.append("%s %s: rcode %d %s, want %s" % (host, qtype, rcode, got, exp))
        self.assertEqual(bad, [], "%s:\n  %s" % (what, "\n  ".join(bad[:40])))

    def lists_target(self, ips, own=None, skip=()):
        own = own or {}

        def target(host):
            svc = service_of(self.entries, host)
            if svc is None or svc in skip:
                return None
            return own.get(svc, ips)
        return target

    # tests -----------------------------------------------------------------------------------
    def test_dnsmasq_redirects_exactly_the_lists(self):
        for ips in (["10.99.0.1"], ["10.99.0.1", "10.99.0.2", "fd00::1"], ["fd00::1"]):
            args = sum((["--ip", a] for a in ips), [])
            conf, _ = self.export("dnsmasq", *args)
            s = self.dnsmasq(conf=conf)
            self.check(s, self.lists_target(ips), "dnsmasq %s" % ips)
            s.stop()
            self.servers.remove(s)

    def test_rpz_in_named_and_unbound_redirects_exactly_the_lists(self):
        for ips in (["10.99.0.1"], ["10.99.0.1", "fd00::1"]):
            args = sum((["--ip", a] for a in ips), [])
            rpz, _ = self.export("rpz", *args)
            for start in (self.named, lambda z: self.unbound(rpz=z)):
                s = start(rpz)
                self.check(s, self.lists_target(ips), "rpz %s" % ips)
                s.stop()
                self.servers.remove(s)

    def test_unbound_native_redirects_what_it_can_say_and_says_what_it_cannot(self):
        conf, text = self.export("unbound", "--ip", "10.99.0.1")
        unsaid = re.findall(r"# \*\.(\S+): unbound cannot redirect", text)
        # the sample lists hold wildcards whose base is not listed: the case unbound cannot say
        self.assertIn("dyn.riotcdn.net", unsaid)
        self.assertIn("windowsupdate.com", unsaid)
        s = self.unbound(include=conf)
        listed = self.lists_target(["10.99.0.1"])
        exact = {name for _svc, name, wild in self.entries if not wild}

        def target(host):
            # a name only an unsaid wildcard covers is not redirected (the comment says so)
            if host not in exact and any(host.endswith("." + w) for w in unsaid):
                longer = [n for _s, n, wild in self.entries
                          if wild and host.endswith("." + n) and n not in unsaid]
                if not longer:
                    return None
            return listed(host)
        self.check(s, target, "unbound")

    def test_hosts_file_redirects_exact_names_only(self):
        path, text = self.export("hosts", "--ip", "10.99.0.1", "--ip", "fd00::1")
        self.assertIn("# skipped wildcard *.steamcontent.com", text)
        s = self.dnsmasq(hosts=path)
        exact = {name: svc for svc, name, wild in self.entries if not wild}
        self.check(s, lambda h: ["10.99.0.1", "fd00::1"] if h in exact else None,
                   "hosts (dnsmasq --addn-hosts)")

    def test_per_service_addresses_and_a_service_left_out(self):
        """--service-ip gives a service its own addresses, --skip leaves one out (lancache-dns's
        <SERVICE>CACHE_IP and DISABLE_<SERVICE>), also where another service's broader entry
        would cover its names."""
        root = os.path.join(self.tmp, "lists")
        os.makedirs(root)
        with open(os.path.join(root, "cache_domains.json"), "w") as f:
            f.write('{"cache_domains":[{"name":"outer","domain_files":["o.txt"]},'
                    '{"name":"inner","domain_files":["i.txt"]},'
                    '{"name":"other","domain_files":["x.txt"]}]}')
        with open(os.path.join(root, "o.txt"), "w") as f:
            f.write("*.cdn.example.net\nexample.net\n*.example.net\n")
        with open(os.path.join(root, "i.txt"), "w") as f:
            f.write("eu.cdn.example.net\n*.in.cdn.example.net\nexample.net\n")
        with open(os.path.join(root, "x.txt"), "w") as f:
            f.write("files.example.org\n*.dl.example.org\n")
        self.set_lists(root)
        cases = [
            (["--service-ip", "inner=10.99.0.7"], {"inner": ["10.99.0.7"]}, ()),
            (["--skip", "inner"], {}, ("inner",)),
            (["--skip", "outer", "--service-ip", "other=fd00::9"], {"other": ["fd00::9"]},
             ("outer",)),
        ]
        for args, own, skip in cases:
            target = self.lists_target(["10.99.0.1"], own, skip)
            conf, _ = self.export("dnsmasq", "--ip", "10.99.0.1", *args)
            s = self.dnsmasq(conf=conf)
            self.check(s, target, "dnsmasq %s" % args)
            s.stop()
            self.servers.remove(s)
            rpz, _ = self.export("rpz", "--ip", "10.99.0.1", *args)
            s = self.named(rpz)
            self.check(s, target, "named rpz %s" % args)
            s.stop()
            self.servers.remove(s)
        out = subprocess.run([H.binary_path(), "-c", self.ini, "dns", "--ip", "10.0.0.1",
                              "--skip", "nosuch"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("names no service", out.stderr)


    # a review's repro, kept
    def test_review_unbound_nested_service_twin_inside_another_zone(self):
        """A service's x + *.x inside another service's redirect zone, left out or at its own
        addresses: a nested zone of unbound's says it (transparent, or redirect)."""
        root = os.path.join(self.tmp, "lists")
        os.makedirs(root)
        with open(os.path.join(root, "cache_domains.json"), "w") as f:
            f.write('{"cache_domains":[{"name":"outer","domain_files":["o.txt"]},'
                    '{"name":"inner","domain_files":["i.txt"]}]}')
        with open(os.path.join(root, "o.txt"), "w") as f:
            f.write("example.net\n*.example.net\n")
        with open(os.path.join(root, "i.txt"), "w") as f:
            f.write("in.example.net\n*.in.example.net\n")
        self.set_lists(root)
        for args, own, skip in ((["--skip", "inner"], {}, ("inner",)),
                                (["--service-ip", "inner=10.99.0.7"], {"inner": ["10.99.0.7"]},
                                 ()),
                                ([], {}, ())):
            conf, text = self.export("unbound", "--ip", "10.99.0.1", *args)
            s = self.unbound(include=conf)
            self.check(s, self.lists_target(["10.99.0.1"], own, skip), "unbound %s\n%s"
                       % (args, text))
            s.stop()
            self.servers.remove(s)


def free_port():
    """A loopback port free for both UDP and TCP right now (the servers bind both)."""
    while True:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()


if __name__ == "__main__":
    H.main()
