#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# tests/cross/smoke.sh "DAEMON COMMAND" ORIGIN: a black-box smoke test of a cacheparty binary,
# usually a foreign one under qemu-user (make cross). It starts the (native) bench origin and the
# daemon on loopback ports with upstream.override pointing at the origin, then checks, byte for
# byte against the origin's own pattern files (origin -w):
#   1. a 3 MiB object (chunk_size 256K: 12 full chunks) and a 1 MiB + 7 bytes object (a short
#      last chunk): a MISS, then a HIT with no new origin request;
#   2. a Range request across a chunk boundary (206, Content-Range, bytes);
#   3. SIGTERM: exit status 0; a second start on the same cache directory serves the objects as
#      HITs (from disk: the memory cache starts empty) with no origin request; SIGTERM, exit 0.
# Every process it starts listens on 127.0.0.1 only and is stopped by its pid.
set -euo pipefail

DAEMON=${1:?usage: smoke.sh "DAEMON COMMAND" ORIGIN}
ORIGIN=${2:?usage: smoke.sh "DAEMON COMMAND" ORIGIN}
read -r -a DAEMON_CMD <<<"$DAEMON"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cacheparty-cross-smoke.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -TERM "$p" 2>/dev/null && { wait "$p" 2>/dev/null || true; }
    done
    if [ "${KEEP:-0}" = 1 ]; then echo "smoke: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
STEP=start
fail() {
    echo "smoke: FAILED at $STEP: $*" >&2
    for f in "$WORK"/daemon*.log; do
        [ -f "$f" ] && { echo "--- $f (last 30 lines)"; tail -n 30 "$f"; } >&2
    done
    exit 1
}
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # $1 port, $2 pid, $3 seconds
    local i
    for i in $(seq 1 $(($3 * 10))); do
        kill -0 "$2" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
origin_requests() {
    curl -sf "http://127.0.0.1:$OPORT/__stats" | awk '$1 == "requests" { print $2 }'
}

OBJ1=/depot/3M/big.bin
OBJ2=/depot/1048583/odd.bin
mkdir -p "$WORK/expect"
"$ORIGIN" -w "$WORK/expect" "$OBJ1" "$OBJ2" || fail "origin -w"
"$ORIGIN" -d 0 -r 0 -P "$WORK/origin.port" -t 600 2>"$WORK/origin.log" &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$WORK/origin.port" ] && break; sleep 0.05; done
OPORT=$(cat "$WORK/origin.port") || fail "origin did not start"
PORT=$(free_port)
HOST="cdn.cross.example:$OPORT"
cat >"$WORK/cacheparty.ini" <<EOF
[server]
listen = 127.0.0.1:$PORT
admin_listen =
hostname = cross-smoke
shutdown_timeout = 10s
[upstream]
dns = system
override = 127.0.0.1:$OPORT
allow_private = yes
[cache]
dir = $WORK/cache
chunk_size = 256K
memory_size = 16M
disk_size = 1G
min_free = 0
[domains]
allow_unlisted = yes
[log]
access =
level = info
EOF

DPID=
start_daemon() { # $1 = log suffix
    "${DAEMON_CMD[@]}" -c "$WORK/cacheparty.ini" 2>"$WORK/daemon-$1.log" &
    DPID=$!
    PIDS+=("$DPID")
    wait_port "$PORT" "$DPID" 60 || fail "daemon did not listen on 127.0.0.1:$PORT"
}
stop_daemon() {
    kill -TERM "$DPID"
    local rc=0
    wait "$DPID" || rc=$?
    [ "$rc" = 0 ] || fail "daemon exited $rc after SIGTERM (want 0)"
}
# $1 path, $2 expected cache status, [$3 range a-b]
fetch() {
    local path=$1 want=$2 range=${3:-} out="$WORK/got" hdr="$WORK/hdr" args=()
    [ -n "$range" ] && args=(-H "Range: bytes=$range")
    curl -sS --max-time 60 -o "$out" -D "$hdr" -H "Host: $HOST" "${args[@]}" \
        "http://127.0.0.1:$PORT$path" || fail "curl $path"
    local status
    status=$(awk 'NR == 1 { print $2 }' "$hdr")
    local cs
    cs=$(tr -d '\r' <"$hdr" | awk -F': ' 'tolower($1) == "x-upstream-cache-status" { print $2 }')
    if [ -n "$range" ]; then
        [ "$status" = 206 ] || fail "$path range $range: status $status"
        local a=${range%-*} b=${range#*-}
        grep -qi "^Content-Range: bytes $a-$b/" "$hdr" || fail "$path: Content-Range $(grep -i content-range "$hdr")"
        cmp -s "$out" <(tail -c +$((a + 1)) "$WORK/expect$path" | head -c $((b - a + 1))) ||
            fail "$path range $range: bytes differ"
    else
        [ "$status" = 200 ] || fail "$path: status $status"
        cmp -s "$out" "$WORK/expect$path" || fail "$path: body differs from the origin's"
    fi
    [ "$cs" = "$want" ] || fail "$path: X-Upstream-Cache-Status '$cs', want $want"
    echo "smoke: ok $STEP $path ${range:+range $range }-> $status $cs $(stat -c %s "$out") bytes"
}

STEP=first-start
start_daemon 1
r0=$(origin_requests)
STEP=miss
fetch "$OBJ1" MISS
fetch "$OBJ2" MISS
r1=$(origin_requests)
[ "$r1" -gt "$r0" ] || fail "the misses made no origin request"
STEP=hit-memory
fetch "$OBJ1" HIT
fetch "$OBJ2" HIT
fetch "$OBJ1" HIT 262000-786700
r2=$(origin_requests)
[ "$r2" = "$r1" ] || fail "hits made $((r2 - r1)) origin request(s)"
STEP=sigterm
stop_daemon
STEP=restart
start_daemon 2
STEP=hit-disk
fetch "$OBJ1" HIT
fetch "$OBJ2" HIT 1048000-1048582
r3=$(origin_requests)
[ "$r3" = "$r2" ] || fail "hits after the restart made $((r3 - r2)) origin request(s)"
STEP=sigterm-2
stop_daemon
echo "smoke: passed (${DAEMON_CMD[*]})"
