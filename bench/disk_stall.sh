#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# disk_stall.sh: does a slow disk read stall the event loop for other clients? (issue 4)
# For each cacheparty binary given: fill a cache with one object from the bench origin, restart
# the daemon (memory empty), drop the page cache, then download the object again (every chunk
# read from disk and verified on its first read) while a second keep-alive client asks for
# /lancache-heartbeat (answered by the loop itself) every 2 ms. The heartbeat's latency is the
# loop's responsiveness: a chunk read done on the loop shows up as a heartbeat as slow as the read.
# The probe runs on core 1 at SCHED_FIFO (since 2026-12-07), so that its own wait for the core it
# shares with the client and the origin is not counted as the loop's.
# Loopback only; bounded in size and time. Needs root (drop_caches).
#   bench/disk_stall.sh [SIZE_MIB] BINARY...     (default 512 MiB, binary build/cacheparty)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SIZE_MIB=512
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SIZE_MIB=$1; shift; fi
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$BUILD/cacheparty")
make --no-print-directory all "$BUILD/bench/origin" >/dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cp-stall.XXXXXX")
cleanup() {
    [ -n "${probe_pid:-}" ] && kill "$probe_pid" 2>/dev/null || true
    [ -n "${cp_pid:-}" ] && kill "$cp_pid" 2>/dev/null || true
    [ -n "${origin_pid:-}" ] && kill "$origin_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
oport=$(free_port)
taskset -c 1 "$BUILD/bench/origin" -l "127.0.0.1:$oport" -d 0 -r 0 -t 3600 >/dev/null 2>&1 &
origin_pid=$!
size=$((SIZE_MIB * 1048576))

probe() { # $1 port, $2 seconds max, $3 stop file, $4 ready file: prints "n p50 p99 max" in ms
    taskset -c 1 python3 - "$@" <<'PY'
import os, socket, sys, time
port, limit, stop, ready = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
# The probe is the instrument: at real-time priority its samples are the loop's delays, not its
# own wait for the core it shares with the downloading client and the origin.
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
s = socket.create_connection(("127.0.0.1", port), timeout=30)
req = b"GET /lancache-heartbeat HTTP/1.1\r\nHost: stall.example\r\n\r\n"
lat = []
end = time.monotonic() + limit
while time.monotonic() < end and not os.path.exists(stop):
    t0 = time.monotonic()
    s.sendall(req)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            raise SystemExit("heartbeat connection closed")
        buf += d
    lat.append((time.monotonic() - t0) * 1000)
    if len(lat) == 1:
        open(ready, "w").close()  # (the download starts once the probe is measuring)
    time.sleep(0.002)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
print("%d %.2f %.2f %.2f" % (len(lat), q(0.5), q(0.99), lat[-1]))
PY
}

printf '%-40s %10s %8s %9s %9s %9s\n' binary "MB/s" probes "p50 ms" "p99 ms" "max ms"
for bin in "${BINS[@]}"; do
    port=$(free_port)
    rm -rf "$tmp/cache"
    cat >"$tmp/cp.ini" <<INI
[server]
listen = 127.0.0.1:$port
admin_listen =
hostname = stall-bench
[upstream]
dns = system
override = 127.0.0.1:$oport
allow_private = yes
[cache]
dir = $tmp/cache
chunk_size = 1M
memory_size = 64M
disk_size = 100G
min_free = 1G
[domains]
allow_unlisted = yes
[log]
access =
level = warn
INI
    url="http://127.0.0.1:$port/big/$size/stall"
    start_cp() {
        taskset -c 0 "$bin" -c "$tmp/cp.ini" 2>>"$tmp/cp.log" &
        cp_pid=$!
        for _ in $(seq 1 500); do
            curl -s -o /dev/null "http://127.0.0.1:$port/lancache-heartbeat" && return 0
            sleep 0.01
        done
        echo "cacheparty did not start" >&2
        exit 1
    }
    start_cp
    curl -s -o /dev/null --max-time 600 -H 'Host: stall.example' "$url"
    kill "$cp_pid"
    wait "$cp_pid" || true
    sync
    echo 3 >/proc/sys/vm/drop_caches
    start_cp
    rm -f "$tmp/stop" "$tmp/ready"
    probe "$port" 300 "$tmp/stop" "$tmp/ready" >"$tmp/probe.out" &
    probe_pid=$!
    for _ in $(seq 1 1000); do
        [ -e "$tmp/ready" ] && break
        kill -0 "$probe_pid" 2>/dev/null || { echo "the probe did not start" >&2; exit 1; }
        sleep 0.01
    done
    [ -e "$tmp/ready" ] || { echo "the probe did not start" >&2; exit 1; }
    sleep 0.2 # (samples of the idle loop before the download)
    t0=$(date +%s.%N)
    got=$(taskset -c 1 curl -s -o /dev/null -w '%{size_download}' --max-time 600 \
        -H 'Host: stall.example' "$url")
    t1=$(date +%s.%N)
    touch "$tmp/stop"
    wait "$probe_pid" || { echo "the probe failed" >&2; exit 1; }
    probe_pid=
    [ "$got" = "$size" ] || { echo "short download: $got of $size bytes" >&2; exit 1; }
    read -r n p50 p99 max <"$tmp/probe.out"
    mbs=$(awk -v b="$size" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.0f", b / (c - a) / 1e6 }')
    printf '%-40s %10s %8s %9s %9s %9s\n' "$bin" "$mbs" "$n" "$p50" "$p99" "$max"
    kill "$cp_pid"
    wait "$cp_pid" || true
    cp_pid=
done
