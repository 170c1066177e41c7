#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""bench/cpu_estimate.py FILE: turns bench/cpu_budget.sh's figures into an estimate of the CPU a
Raspberry Pi 4 / Pi 5 spends serving 1 GbE of payload, with the assumptions printed next to it.

  user cycles/s   = instructions per byte (callgrind, x86-64) x RATE / IPC
  kernel cycles/s = sys ns per byte (this host, loopback) x host GHz x KSCALE x RATE
  share of a core = (user + kernel cycles/s) / clock

Assumptions (flags change them): RATE 117e6 B/s (1 GbE, 1500-byte frames, TCP payload); an
arm64 build executes about as many instructions as x86-64 for this code (ARM_INSN 1.0); IPC 0.8 on
the Cortex-A72, 1.3 on the Cortex-A76; the kernel needs KSCALE 2.0 (A72) and 1.3 (A76) times the
cycles per byte this host's kernel needs (narrower cores, LPDDR4 at a few GB/s of copy bandwidth);
loopback charges the receiving side's TCP work to the sender too, a real NIC's driver and
interrupts are not modelled.
"""
import argparse
import re
import sys

PIS = [  # name, clock GHz, IPC, kernel scale
    ("Pi 4 (A72 @1.5 GHz)", 1.5, "ipc_a72", "kscale_a72"),
    ("Pi 4 (A72 @1.8 GHz)", 1.8, "ipc_a72", "kscale_a72"),
    ("Pi 5 (A76 @2.4 GHz)", 2.4, "ipc_a76", "kscale_a76"),
]
CASES = ["hit-memory", "hit-disk", "verify-disk", "cold-coal"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--rate", type=float, default=117e6)
    ap.add_argument("--arm-insn", type=float, default=1.0)
    ap.add_argument("--ipc-a72", type=float, default=0.8)
    ap.add_argument("--ipc-a76", type=float, default=1.3)
    ap.add_argument("--kscale-a72", type=float, default=2.0)
    ap.add_argument("--kscale-a76", type=float, default=1.3)
    ap.add_argument("--host-mhz", type=float, default=None)
    a = ap.parse_args()
    cg, nat, mhz = {}, {}, a.host_mhz
    with open(a.file) as f:
        for line in f:
            m = re.match(r"host_mhz=([\d.]+)", line)
            if m and mhz is None:
                mhz = float(m.group(1))
            kv = dict(re.findall(r"(\w+)=([^\s]+)", line))
            if line.startswith("cg "):
                cg[(kv["target"], kv["case"])] = float(kv["ipb"])
            elif line.startswith("native "):
                nat[(kv["target"], kv["case"])] = (float(kv["user_ns_per_byte"]),
                                                   float(kv["sys_ns_per_byte"]))
    if mhz is None:
        sys.exit("cpu_estimate.py: no host_mhz in %s (use --host-mhz)" % a.file)
    ghz = mhz / 1000.0
    print("CPU budget at %.0f MB/s of payload (host %.2f GHz; IPC A72 %.2f, A76 %.2f; kernel x%.1f "
          "(A72), x%.1f (A76))" % (a.rate / 1e6, ghz, a.ipc_a72, a.ipc_a76, a.kscale_a72,
                                   a.kscale_a76))
    hdr = "%-11s %-11s %9s %10s %10s" % ("target", "case", "user i/B", "host usr", "host sys")
    for name, _, _, _ in PIS:
        hdr += " %21s" % name
    print(hdr)
    print("%-11s %-11s %9s %10s %10s" % ("", "", "", "ns/B", "ns/B") +
          "".join(" %21s" % "user+kernel = core%" for _ in PIS))
    for (target, case) in sorted(cg, key=lambda k: (k[0], CASES.index(k[1]) if k[1] in CASES else 9)):
        ipb = cg[(target, case)]
        un, sn = nat.get((target, case), (float("nan"), float("nan")))
        row = "%-11s %-11s %9.4f %10.4f %10.4f" % (target, case, ipb, un, sn)
        for _, clock, ipc_k, ks_k in PIS:
            user = ipb * a.arm_insn * a.rate / getattr(a, ipc_k) / (clock * 1e9)
            kern = sn * ghz * getattr(a, ks_k) * a.rate / (clock * 1e9)
            row += " %5.1f%%+%5.1f%% =%5.0f%%" % (100 * user, 100 * kern, 100 * (user + kern))
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
