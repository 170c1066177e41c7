#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""report.py: print bench/run.sh's results file as the results tables (Markdown).

usage: report.py RESULTS_FILE

Each result line is the loadgen's key=value line plus the harness's up_bytes, up_reqs,
proxy_cpu_s and proxy_rss_mib. Lines starting with '#' are context, printed first.
"""
import shlex
import sys

PHASE_ORDER = {"cold": 0, "warm": 1}
TARGET_NOTES = {
    "origin": "ceiling (origin direct)",
    "nginx-static": "ceiling (static files)",
}


def parse(line):
    out = {}
    for tok in shlex.split(line):
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
        else:
            out.setdefault("_kind", tok)
    return out


def num(d, k, default=float("nan")):
    try:
        return float(d.get(k, default))
    except ValueError:
        return default


def fmt_mbps(v):
    if v != v:
        return "-"
    return "{:,.0f}".format(v) if v >= 100 else "{:.1f}".format(v)


def table(rows, header, align):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def fmt(r):
        cells = []
        for i, c in enumerate(r):
            c = str(c)
            cells.append(c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]))
        return "| " + " | ".join(cells) + " |"

    print(fmt(header))
    print("|" + "|".join(("-" * (w + 1) + ":" if a == "r" else "-" * (w + 2))
                         for w, a in zip(widths, align)) + "|")
    for r in rows:
        print(fmt(r))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    context, results, restarts, capacity, skipped = [], [], [], [], []
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("#"):
                context.append(line[1:].strip())
                continue
            d = parse(line)
            kind = d.get("_kind")
            if kind == "restart":
                restarts.append(d)
            elif kind == "capacity":
                capacity.append(d)
            elif kind == "skipped":
                skipped.append(d)
            else:
                results.append(d)

    for c in context:
        print("    " + c)
    print()
    for d in capacity:
        print("Origin capacity (no delay, no rate limit, %s clients, chunks, full verification, "
              "sharing its CPU with the loadgen): %s MB/s, loadgen CPU %.0f%%." % (
                  d.get("clients"), fmt_mbps(num(d, "mbps")), 100 * num(d, "lg_util", 0)))
        print()

    ceiling = {}
    for d in results:
        if d.get("target") == "origin" and d.get("phase") == "cold":
            ceiling[(d.get("scenario"), "cold")] = num(d, "mbps")
        if d.get("target") == "nginx-static":
            ceiling[(d.get("scenario"), "warm")] = num(d, "mbps")

    header = ["target", "scenario", "phase", "MB/s", "vs ceiling", "TTFB p50 / p99 ms",
              "upstream / distinct", "upstream req", "failed", "proxy CPU s", "peak RSS MiB",
              "busy % load/proxy", "Little L/N", "notes"]
    align = ["l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l"]
    rows = []
    errors = []
    order = {"big": 0, "chunks": 1, "ranges": 2}
    results.sort(key=lambda d: (order.get(d.get("scenario"), 9),
                                PHASE_ORDER.get(d.get("phase"), 9)))
    for d in results:
        target, sc, ph = d.get("target", "?"), d.get("scenario", "?"), d.get("phase", "?")
        notes = []
        if target in TARGET_NOTES:
            notes.append(TARGET_NOTES[target])
        mbps = num(d, "mbps")
        ceil = ceiling.get((sc, ph))
        of = "-"
        if ceil and target not in TARGET_NOTES and mbps == mbps:
            of = "{:.2f}x".format(mbps / ceil)
        distinct = num(d, "distinct_bytes", 0)
        up = num(d, "up_bytes", 0)
        ratio = "{:.2f}".format(up / distinct) if distinct and target != "nginx-static" else "-"
        if target == "origin":
            ratio = "-"
        if ph == "warm" and distinct and up / distinct > 0.5 and target not in TARGET_NOTES:
            notes.append("not caching")
        ll = num(d, "little_ratio")
        busy = num(d, "busy_ratio")
        if ll != ll:
            little = "-"
        elif d.get("little_flag") == "1":
            if abs(ll - busy) <= 0.05:
                little = "{:.2f} tail".format(ll)
            else:
                little = "{:.2f} !".format(ll)
                notes.append("Little's law unexplained")
        else:
            little = "{:.2f}".format(ll)
        lbusy, pbusy = d.get("load_core_busy", "-"), d.get("proxy_core_busy", "-")
        if d.get("lg_saturated") == "1" or (lbusy.isdigit() and int(lbusy) >= 90
                                             and not (pbusy.isdigit() and int(pbusy) >= 90)):
            notes.append("load-bound: lower bound")
        other, secs = num(d, "other_cpu_s", 0), num(d, "secs", 0)
        if other >= 0.5 and other > 0.2 * secs:
            notes.append("others used %.1f CPU s" % other)
        if d.get("verify") == "sample":
            notes.append("sampled")
        if d.get("deadline_hit") == "1":
            notes.append("deadline hit")
        failed = d.get("failed", "?")
        if failed not in ("0", "?") or d.get("error"):
            if d.get("error"):
                errors.append("%s %s %s: %s" % (target, sc, ph, d.get("error")))
        p50, p99 = num(d, "ttfb_p50_ms"), num(d, "ttfb_p99_ms")
        if p50 != p50:
            ttfb = "-"
        elif p50 < 10:
            ttfb = "{:.1f} / {:.1f}".format(p50, p99)
        else:
            ttfb = "{:.0f} / {:.0f}".format(p50, p99)
        is_proxy = True
        rows.append([target, sc, ph, fmt_mbps(mbps), of, ttfb, ratio,
                     d.get("up_reqs", "-") if target != "origin" else "-",
                     "%s/%s" % (failed, d.get("requests", "?")),
                     d.get("proxy_cpu_s", "-") if is_proxy else "-",
                     d.get("proxy_rss_mib", "-") if is_proxy else "-",
                     "%s/%s" % (lbusy, pbusy), little, "; ".join(notes)])
    if rows:
        table(rows, header, align)
    for d in skipped:
        print("\nskipped %s: %s" % (d.get("target"), d.get("reason")))
    if restarts:
        print()
        rows = []
        for d in restarts:
            hit = num(d, "first_hit_s", -1)
            ok = num(d, "first_ok_s", -1)
            rows.append([d.get("target", "?"),
                         "{:.3f}".format(ok) if ok >= 0 else "never",
                         "{:.3f}".format(hit) if hit >= 0 else "no HIT",
                         d.get("attempts", "-"),
                         d.get("error", "") if hit < 0 else ""])
        table(rows, ["restart", "first response s", "first HIT s", "requests", "note"],
              ["l", "r", "r", "r", "l"])
    if errors:
        print()
        print("First failure per row:")
        for e in errors:
            print("- " + e)


if __name__ == "__main__":
    main()
