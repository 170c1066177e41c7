#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/tls_bulk.sh: throughput of one bulk HTTPS download through cacheparty's TLS passthrough,
# side by side with the same download straight from the origin, and the daemon's CPU cost.
#
#   bench/tls_bulk.sh [-size MIB] [-runs N] [-pin]
#   env: BUILD (default build), KEEP=1 keeps the work directory
#
# Origin: `openssl s_server -WWW` serving a SIZE MiB file of random bytes, with a certificate made
# here. Client: curl (--resolve, so the name reaches the relay as SNI; --cacert, so the client
# verifies the origin's own certificate through the relay). Each run downloads the file direct,
# then through the relay (tls.override points at the origin), alternating, and the daemon's
# utime+stime (/proc/PID/stat) is read around each relayed download. -pin: curl on CPU 0, the
# origin and the daemon on CPU 1 (2-core machines; the default lets the scheduler place them).
# Everything listens on 127.0.0.1 and is stopped by its pid at the end; every download is bounded
# by curl's --max-time.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SIZE=256
RUNS=5
PIN=0
while [ $# -gt 0 ]; do
    case "$1" in
    -size | --size) SIZE=${2:?}; shift 2 ;;
    -runs | --runs) RUNS=${2:?}; shift 2 ;;
    -pin | --pin) PIN=1; shift ;;
    *) sed -n '4,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
for tool in openssl curl python3; do
    command -v "$tool" >/dev/null || { echo "tls_bulk.sh: $tool is required" >&2; exit 2; }
done
[ -x "$BUILD/cacheparty" ] || { echo "tls_bulk.sh: build $BUILD/cacheparty first (make)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/cp-tlsbench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cpu0() { [ "$PIN" = 1 ] && echo "taskset -c 0" || true; }
cpu1() { [ "$PIN" = 1 ] && echo "taskset -c 1" || true; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

NAME=bench.example.test
cd "$WORK"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem \
    -out cert.pem -days 2 -subj "/CN=$NAME" -addext "subjectAltName=DNS:$NAME" 2>/dev/null
head -c $((SIZE * 1048576)) /dev/urandom >file.bin

OPORT=$(free_port)
HPORT=$(free_port)
TPORT=$(free_port)
$(cpu1) openssl s_server -accept "127.0.0.1:$OPORT" -cert cert.pem -key key.pem -WWW -quiet \
    >origin.log 2>&1 &
PIDS+=($!)
mkdir -p cache
cat >cacheparty.ini <<EOF
[server]
listen = 127.0.0.1:$HPORT
admin_listen =
max_connections = 64
[upstream]
dns = 127.0.0.1:9
allow_private = yes
[cache]
dir = $WORK/cache
memory_size = 16M
[domains]
allow_unlisted = yes
[tls]
passthrough_listen = 127.0.0.1:$TPORT
override = 127.0.0.1:$OPORT
access = $WORK/tls-access.log
[log]
access =
error = $WORK/daemon.log
level = warn
EOF
$(cpu1) "$BUILD/cacheparty" -c cacheparty.ini &
DPID=$!
PIDS+=($DPID)
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$HPORT/lancache-heartbeat" &&
        curl -s -o /dev/null --resolve "$NAME:$OPORT:127.0.0.1" --cacert cert.pem \
            "https://$NAME:$OPORT/cert.pem" && break
    sleep 0.05
done

# One download; prints bytes/s. <port> is the origin's or the relay's.
fetch() {
    $(cpu0) curl -sS --max-time 120 --resolve "$NAME:$1:127.0.0.1" --cacert cert.pem \
        "https://$NAME:$1/file.bin" -o /dev/null -w '%{speed_download} %{size_download}\n'
}

HZ=$(getconf CLK_TCK)
echo "TLS passthrough bulk download: ${SIZE} MiB, $RUNS runs, pin=$PIN ($(nproc) CPUs)"
printf '%-5s %14s %14s %8s %16s\n' run "direct MiB/s" "relay MiB/s" ratio "daemon CPU s/GiB"
ratios=()
for i in $(seq "$RUNS"); do
    read -r dspeed dsize < <(fetch "$OPORT")
    t0=$(ticks "$DPID")
    read -r rspeed rsize < <(fetch "$TPORT")
    t1=$(ticks "$DPID")
    [ "$dsize" = $((SIZE * 1048576)) ] && [ "$rsize" = $((SIZE * 1048576)) ] ||
        { echo "short download: direct $dsize, relay $rsize bytes" >&2; exit 1; }
    line=$(python3 -c "
d, r, t, hz, mib = $dspeed, $rspeed, $t1 - $t0, $HZ, $SIZE
print('%-5d %14.1f %14.1f %8.3f %16.3f' % ($i, d / 1048576, r / 1048576, r / d,
                                          t / hz / (mib / 1024)))")
    echo "$line"
    ratios+=("$(echo "$line" | awk '{print $4}')")
done
python3 -c "
import statistics
r = [float(x) for x in '${ratios[*]}'.split()]
print('median relay/direct ratio: %.3f (min %.3f, max %.3f)' % (statistics.median(r), min(r), max(r)))"
echo "relay log: $(wc -l <tls-access.log) connections, last: $(tail -1 tls-access.log)"
