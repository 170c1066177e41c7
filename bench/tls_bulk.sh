#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/tls_bulk.sh: throughput of one bulk HTTPS download through cacheparty's TLS passthrough,
# side by side with the same download straight from the origin, and the daemon's CPU cost.
#
#   bench/tls_bulk.sh [-size MIB] [-runs N] [-pin] [-rate BYTES/s]
#   env: BUILD (default build), KEEP=1 keeps the work directory
#
# Origin: `openssl s_server -WWW` serving a SIZE MiB file of random bytes, with a certificate made
# here. Client: curl (--resolve, so the name reaches the relay as SNI; --cacert, so the client
# verifies the origin's own certificate through the relay). Each run downloads the file direct,
# then through the relay (tls.override points at the origin), alternating, and the daemon's
# utime+stime (/proc/PID/stat) is read around each relayed download; the order of the downloads
# alternates from run to run. -pin: the two TLS endpoints (curl and the origin) on CPU 0, the relay
# under test (the daemon, nginx) on CPU 1, as bench/run.sh pins load and proxy: the relay takes no
# CPU from the endpoints, as on a LAN where it is another machine (2-core machines; the default
# lets the scheduler place them all).
# -rate: curl's --limit-rate, e.g. 120M for about a Pi's 1 GbE. When Debian's nginx and
# libnginx-mod-stream are installed, each run also downloads through nginx's stream proxy with
# ssl_preread (lancache's :443 relay) on the same CPU as the daemon, as the peer.
# Everything listens on 127.0.0.1 and is stopped by its pid at the end; every download is bounded
# by curl's --max-time.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SIZE=256
RUNS=5
PIN=0
RATE=
while [ $# -gt 0 ]; do
    case "$1" in
    -size | --size) SIZE=${2:?}; shift 2 ;;
    -runs | --runs) RUNS=${2:?}; shift 2 ;;
    -rate | --rate) RATE=${2:?}; shift 2 ;;
    -pin | --pin) PIN=1; shift ;;
    *) sed -n '4,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
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
NPORT=$(free_port)
$(cpu0) openssl s_server -accept "127.0.0.1:$OPORT" -cert cert.pem -key key.pem -WWW -quiet \
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

# The peer, when Debian's nginx and its stream module are there: nginx's stream proxy with
# ssl_preread (what lancache runs on :443 in place of sniproxy), as a relay of the same download.
NGINX_MOD=/usr/lib/nginx/modules/ngx_stream_module.so
NPID=
if command -v nginx >/dev/null && [ -f "$NGINX_MOD" ]; then
    mkdir -p nginx
    cat >nginx/nginx.conf <<NGINX
load_module $NGINX_MOD;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 64; }
stream {
    server {
        listen 127.0.0.1:$NPORT;
        ssl_preread on;
        proxy_pass 127.0.0.1:$OPORT;
    }
}
NGINX
    $(cpu1) nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -g 'daemon off;' 2>>nginx/error.log &
    NPID=$!
    PIDS+=($NPID)
    sleep 0.3
fi
tree_ticks() { # the CPU of <pid> and its children (nginx's worker)
    local t=0 p
    for p in $1 $(pgrep -P "$1"); do t=$((t + $(ticks "$p"))); done
    echo "$t"
}

# One download; prints bytes/s. <port> is the origin's or the relay's.
fetch() {
    $(cpu0) curl -sS --max-time 120 ${RATE:+--limit-rate "$RATE"} --resolve "$NAME:$1:127.0.0.1" --cacert cert.pem \
        "https://$NAME:$1/file.bin" -o /dev/null -w '%{speed_download} %{size_download}\n'
}

HZ=$(getconf CLK_TCK)
# How busy CPUs 0 and 1 were between two /proc/stat samples, in % ("c0/c1").
cpu_sample() { awk '/^cpu[01] / {printf "%s %s ", $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
busy() { # <before> <after>
    python3 -c "
a, b = [int(x) for x in '$1'.split()], [int(x) for x in '$2'.split()]
print('/'.join('%d' % round(100 * (b[i] - a[i]) / max(1, b[i + 1] - a[i + 1])) for i in (0, 2)))"
}

echo "TLS passthrough bulk download: ${SIZE} MiB, $RUNS runs, pin=$PIN, client rate limit ${RATE:-none} ($(nproc) CPUs)"
printf '%-5s %14s %14s %8s %16s %14s %8s %16s %9s %9s\n' run "direct MiB/s" "relay MiB/s" ratio \
    "daemon CPU s/GiB" "nginx MiB/s" ratio "nginx CPU s/GiB" "busy d" "busy r"
ratios=()
nratios=()
nspeed=0 nsize=$((SIZE * 1048576)) n0=0 n1=0
direct() { # the direct download: sets dspeed, dsize, dbusy
    local s0
    s0=$(cpu_sample)
    read -r dspeed dsize < <(fetch "$OPORT")
    dbusy=$(busy "$s0" "$(cpu_sample)")
}
for i in $(seq "$RUNS"); do
    # Direct first in odd runs, last in even ones: a drift of the machine favours neither.
    [ $((i % 2)) = 1 ] && direct
    s0=$(cpu_sample)
    t0=$(ticks "$DPID")
    read -r rspeed rsize < <(fetch "$TPORT")
    t1=$(ticks "$DPID")
    rbusy=$(busy "$s0" "$(cpu_sample)")
    if [ -n "$NPID" ]; then
        n0=$(tree_ticks "$NPID")
        read -r nspeed nsize < <(fetch "$NPORT")
        n1=$(tree_ticks "$NPID")
    fi
    [ $((i % 2)) = 0 ] && direct
    [ "$dsize" = $((SIZE * 1048576)) ] && [ "$rsize" = $((SIZE * 1048576)) ] &&
        [ "$nsize" = $((SIZE * 1048576)) ] ||
        { echo "short download: direct $dsize, relay $rsize, nginx $nsize bytes" >&2; exit 1; }
    line=$(python3 -c "
d, r, t, hz, mib, n, nt = $dspeed, $rspeed, $t1 - $t0, $HZ, $SIZE, $nspeed, $n1 - $n0
print('%-5d %14.1f %14.1f %8.3f %16.3f %14.1f %8.3f %16.3f %9s %9s' % ($i, d / 1048576,
      r / 1048576, r / d, t / hz / (mib / 1024), n / 1048576, n / d, nt / hz / (mib / 1024),
      '$dbusy', '$rbusy'))")
    echo "$line"
    ratios+=("$(echo "$line" | awk '{print $4}')")
    nratios+=("$(echo "$line" | awk '{print $7}')")
done
python3 -c "
import statistics
r = [float(x) for x in '${ratios[*]}'.split()]
print('median relay/direct ratio: %.3f (min %.3f, max %.3f)' % (statistics.median(r), min(r), max(r)))
n = [float(x) for x in '${nratios[*]}'.split()]
if max(n) > 0:
    print('median nginx-stream/direct ratio: %.3f (min %.3f, max %.3f)' % (statistics.median(n), min(n), max(n)))"
echo "relay log: $(wc -l <tls-access.log) connections, last: $(tail -1 tls-access.log)"
