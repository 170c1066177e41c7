#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/cpu_budget.sh: CPU work per byte served, for cacheparty and nginx configured like lancache
# (bench/conf), in the cases a Raspberry Pi cares about. See bench/README.md "CPU budget".
#
#   bench/cpu_budget.sh [-size SIZE] [-clients N] [-targets cacheparty,nginx] [-no-native]
#   env: BUILD (default build), KEEP=1 keeps the work directory
#
# User space: instructions counted by valgrind --tool=callgrind on the proxy (every thread), zeroed
# and dumped around each phase with callgrind_control, so start-up and idle work are outside the
# count. Each case is measured twice, with fewer and more bytes (cold: objects of SIZE and 2 x SIZE;
# hits: 1 and 3 fetches of the 2 x SIZE object), and the figure is the difference of the two counts
# over the difference of the bytes: what is left is the cost that grows with the bytes (per-request
# work is part of it, at one request per object).
#   hit-memory   cacheparty: a warm object served from chunk memory (send)
#   hit-disk     after a restart, an object served from its chunk files (sendfile), already
#                verified; nginx: its warm hit (slices from cache files, sendfile)
#   verify-disk  cacheparty, after a restart: the first read of a chunk file (pread + XXH3 of
#                the whole body, then sendfile)
#   cold-coal    N clients on one cold object at once (coalesced): per byte delivered to clients
#                (the upstream bytes are 1/N of that)
# Kernel side: the same cases without valgrind, larger, with utime and stime of the proxy
# (/proc/PID/stat, all threads): what user-space counts miss (send/sendfile/recv, TCP on loopback).
#
# Every process listens on 127.0.0.1 only and is stopped by its pid.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
BENCH_BIN="$BUILD/bench"
CONF="$ROOT/bench/conf"
SIZE=64M
CLIENTS=4
TARGETS="cacheparty nginx"
NATIVE=1
while [ $# -gt 0 ]; do
    case "$1" in
    -size | --size) SIZE=${2:?}; shift 2 ;;
    -clients | --clients) CLIENTS=${2:?}; shift 2 ;;
    -targets | --targets) TARGETS=${2//,/ }; shift 2 ;;
    -no-native | --no-native) NATIVE=0; shift ;;
    -h | --help) sed -n '4,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    *) echo "cpu_budget.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
to_bytes() {
    local v=$1
    case "$v" in
    *K) echo $((${v%K} << 10)) ;; *M) echo $((${v%M} << 20)) ;; *G) echo $((${v%G} << 30)) ;;
    *) echo "$v" ;;
    esac
}
S1=$(to_bytes "$SIZE")
S2=$((2 * S1))
for p in "$BUILD/cacheparty" "$BENCH_BIN/origin" "$BENCH_BIN/loadgen"; do
    [ -x "$p" ] || { echo "cpu_budget.sh: $p is missing: run make bench-cpu" >&2; exit 2; }
done
for t in valgrind callgrind_control; do
    command -v $t >/dev/null || { echo "cpu_budget.sh: $t is missing (apt-get install valgrind)" >&2; exit 2; }
done
if [[ " $TARGETS " == *" nginx "* ]] && [ ! -x /usr/sbin/nginx ]; then
    echo "cpu_budget.sh: nginx is not installed (apt-get install nginx); skipping it" >&2
    TARGETS=${TARGETS//nginx/}
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cacheparty-cpu.XXXXXX")
PIDS=()
log() { printf '%s\n' "$*" >&2; }
stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local p
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && stop_pid "$p"; done
    if [ "${KEEP:-0}" = 1 ]; then log "cpu_budget.sh: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # $1 port, $2 pid: up to 120 s (valgrind starts slowly)
    local i
    for i in $(seq 1 1200); do
        kill -0 "$2" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
wait_file() {
    local i
    for i in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.05; done
    return 1
}

# Origin (no delay, no rate limit) and the bench DNS stub.
for _ in 1 2 3; do # its UDP port may be taken for TCP: another try picks another port
    python3 "$ROOT/bench/dns.py" --portfile "$WORK/dns.port" --lifetime 7200 --log "$WORK/dns.log" \
        2>>"$WORK/dns.err" &
    PIDS+=($!)
    wait_file "$WORK/dns.port" && break
done
[ -s "$WORK/dns.port" ] || { log "cpu_budget.sh: DNS stub did not start"; cat "$WORK/dns.err" >&2; exit 1; }
DNS_PORT=$(cat "$WORK/dns.port")
"$BENCH_BIN/origin" -d 0 -r 0 -P "$WORK/origin.port" -t 7200 2>"$WORK/origin.log" &
PIDS+=($!)
wait_file "$WORK/origin.port" || { log "cpu_budget.sh: origin did not start"; exit 1; }
OPORT=$(cat "$WORK/origin.port")
HOST_HDR="cdn.bench.example:$OPORT"

# ---- targets -----------------------------------------------------------------------------
# start_target TARGET MODE(cg|native) MEMORY: sets TPID, TPORT; the cache persists per target.
TPID=
TPORT=
start_target() {
    local target=$1 mode=$2 dir="$WORK/$1" pre=()
    mkdir -p "$dir/cache"
    [ -n "$TPORT" ] || TPORT=$(free_port)
    if [ "$mode" = cg ]; then
        pre=(valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p.out" --dump-line=no)
    fi
    case "$target" in
    cacheparty)
        sed -e "s|@WORK@|$dir|g" -e "s|@PORT@|$TPORT|g" -e "s|@DNS_PORT@|$DNS_PORT|g" \
            "$CONF/cacheparty.ini.in" >"$dir/cacheparty.ini"
        "${pre[@]}" "$BUILD/cacheparty" -c "$dir/cacheparty.ini" 2>>"$dir/stderr.log" &
        ;;
    nginx)
        local user=""
        [ "$(id -u)" = 0 ] && user="user root;"
        # One process (master_process off) so that valgrind sees the worker's work.
        sed -e "s|@WORK@|$dir|g" -e "s|@PORT@|$TPORT|g" -e "s|@DNS_PORT@|$DNS_PORT|g" \
            -e "s|@USER@|$user|" -e 's|^worker_processes 1;|worker_processes 1;\nmaster_process off;|' \
            "$CONF/nginx-lancache.conf.in" >"$dir/nginx.conf"
        "${pre[@]}" /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
            2>>"$dir/stderr.log" &
        ;;
    esac
    TPID=$!
    PIDS+=("$TPID")
    wait_port "$TPORT" "$TPID" || { log "cpu_budget.sh: $target did not start"; tail "$dir"/*.log >&2; exit 1; }
}
stop_target() { stop_pid "$TPID"; }

# ---- one phase ---------------------------------------------------------------------------
# phase MODE PREFIX OBJSIZE CLIENTS: loadgen (scenario big: every client reads the object once);
# prints "BYTES COST" where COST is instructions (cg) or "UTICKS STICKS" (native).
phase() {
    local mode=$1 prefix=$2 size=$3 clients=$4 line n0 n1 u0 u1 s0 s1
    if [ "$mode" = cg ]; then
        callgrind_control -z "$TPID" >/dev/null 2>&1
    else
        read -r u0 s0 < <(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$TPID/stat")
    fi
    n0=$(ls "$WORK"/*/cg.*.out.* 2>/dev/null | wc -l)
    line=$("$BENCH_BIN/loadgen" -a "127.0.0.1:$TPORT" -H "$HOST_HDR" -s big -B "$size" \
        -c "$clients" -x "$prefix" -v sample -T 600 2>>"$WORK/loadgen.log")
    case "$line" in *" failed=0 "*) ;; *) log "cpu_budget.sh: phase failed: $line"; exit 1 ;; esac
    local bytes
    bytes=$(sed -n 's/.* bytes=\([0-9]*\) .*/\1/p' <<<"$line")
    if [ "$mode" = cg ]; then
        callgrind_control -d "$TPID" >/dev/null 2>&1
        local f=""
        for _ in $(seq 1 100); do
            n1=$(ls "$WORK"/*/cg.*.out.* 2>/dev/null | wc -l)
            [ "$n1" -gt "$n0" ] && break
            sleep 0.1
        done
        f=$(ls -t "$WORK"/*/cg.*.out.* | head -n1)
        echo "$bytes $(awk '/^summary:/ { print $2 }' "$f")"
    else
        read -r u1 s1 < <(awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$TPID/stat")
        echo "$bytes $((u1 - u0)) $((s1 - s0))"
    fi
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
# delta NAME TARGET "BYTES1 IR1" "BYTES2 IR2": instructions per byte of the difference.
delta() {
    local b1 i1 b2 i2
    read -r b1 i1 <<<"$3"
    read -r b2 i2 <<<"$4"
    awk -v t="$2" -v n="$1" -v b1="$b1" -v i1="$i1" -v b2="$b2" -v i2="$i2" 'BEGIN {
        printf "cg target=%s case=%s bytes=%.0f instr=%.0f ipb=%.4f (N: %.0f B %.0f Ir; 2N: %.0f B %.0f Ir)\n",
            t, n, b2 - b1, i2 - i1, (i2 - i1) / (b2 - b1), b1, i1, b2, i2 }' | tee -a "$RESULTS" >&2
}
native() { # NAME TARGET "BYTES U S"
    local b u s hz
    read -r b u s <<<"$3"
    hz=$(getconf CLK_TCK)
    awk -v t="$2" -v n="$1" -v b="$b" -v u="$u" -v s="$s" -v hz="$hz" 'BEGIN {
        printf "native target=%s case=%s bytes=%.0f user_ns_per_byte=%.4f sys_ns_per_byte=%.4f (ticks %d + %d)\n",
            t, n, b, u / hz * 1e9 / b, s / hz * 1e9 / b, u, s }' | tee -a "$RESULTS" >&2
}

# Callgrind: each case twice (N and 2N bytes), the difference counts.
cg_cacheparty() {
    local r1 r2 c1=/cg-cold-a c2=/cg-cold-b
    start_target cacheparty cg
    r1=$(phase cg "$c1" "$S1" "$CLIENTS")
    r2=$(phase cg "$c2" "$S2" "$CLIENTS")
    delta cold-coal cacheparty "$r1" "$r2"
    r1=$(phase cg "$c2" "$S2" 1)
    r2=$(phase cg "$c2" "$S2" 3)
    delta hit-memory cacheparty "$r1" "$r2"
    stop_target
    start_target cacheparty cg # a restart: memory is empty, every chunk comes from disk
    r1=$(phase cg "$c1" "$S1" 1)
    r2=$(phase cg "$c2" "$S2" 1)
    delta verify-disk cacheparty "$r1" "$r2"
    r1=$(phase cg "$c2" "$S2" 1)
    r2=$(phase cg "$c2" "$S2" 3)
    delta hit-disk cacheparty "$r1" "$r2"
    stop_target
}
cg_nginx() {
    local r1 r2 c1=/cg-cold-a c2=/cg-cold-b
    start_target nginx cg
    r1=$(phase cg "$c1" "$S1" "$CLIENTS")
    r2=$(phase cg "$c2" "$S2" "$CLIENTS")
    delta cold-coal nginx "$r1" "$r2"
    r1=$(phase cg "$c2" "$S2" 1)
    r2=$(phase cg "$c2" "$S2" 3)
    delta hit-disk nginx "$r1" "$r2"
    stop_target
}

# Native: each case repeated until the proxy used NATIVE_TICKS ticks of CPU (or NATIVE_MAX_S
# seconds passed): utime and stime are sampled per tick, so a few hundred ticks are needed.
NATIVE_TICKS=${NATIVE_TICKS:-300}
NATIVE_MAX_S=${NATIVE_MAX_S:-60}
ACC_B=0 ACC_U=0 ACC_S=0 ACC_T0=0
acc_reset() { ACC_B=0 ACC_U=0 ACC_S=0 ACC_T0=$(date +%s); }
acc_add() { # "BYTES U S"
    local b u s
    read -r b u s <<<"$1"
    ACC_B=$((ACC_B + b)) ACC_U=$((ACC_U + u)) ACC_S=$((ACC_S + s))
}
acc_more() { [ $((ACC_U + ACC_S)) -lt "$NATIVE_TICKS" ] && [ $(($(date +%s) - ACC_T0)) -lt "$NATIVE_MAX_S" ]; }
NCOLD=0
native_cacheparty() {
    local i
    start_target cacheparty native
    acc_reset
    while acc_more; do # a new cold object each time
        NCOLD=$((NCOLD + 1))
        acc_add "$(phase native "/nat-cold-$NCOLD" "$S2" "$CLIENTS")"
    done
    native cold-coal cacheparty "$ACC_B $ACC_U $ACC_S"
    acc_reset
    while acc_more; do acc_add "$(phase native "/nat-cold-$NCOLD" "$S2" 4)"; done
    native hit-memory cacheparty "$ACC_B $ACC_U $ACC_S"
    stop_target
    acc_reset
    while acc_more; do # each restart forgets which files were verified
        start_target cacheparty native
        for i in $(seq 1 "$NCOLD"); do acc_add "$(phase native "/nat-cold-$i" "$S2" 1)"; done
        stop_target
    done
    native verify-disk cacheparty "$ACC_B $ACC_U $ACC_S"
    start_target cacheparty native
    acc_add "$(phase native /nat-cold-1 "$S2" 1)"
    acc_reset
    while acc_more; do acc_add "$(phase native /nat-cold-1 "$S2" 4)"; done
    native hit-disk cacheparty "$ACC_B $ACC_U $ACC_S"
    stop_target
}
native_nginx() {
    start_target nginx native
    acc_reset
    while acc_more; do
        NCOLD=$((NCOLD + 1))
        acc_add "$(phase native "/nat-cold-$NCOLD" "$S2" "$CLIENTS")"
    done
    native cold-coal nginx "$ACC_B $ACC_U $ACC_S"
    acc_reset
    # an older object: nginx may still be finishing the cache files of the last one
    while acc_more; do acc_add "$(phase native /nat-cold-1 "$S2" 4)"; done
    native hit-disk nginx "$ACC_B $ACC_U $ACC_S"
    stop_target
}

T0=$(date +%s)
for t in $TARGETS; do
    TPORT=
    log "cpu_budget.sh: $t under callgrind (objects of $SIZE and $((S2 >> 20))M, $CLIENTS clients on a cold one)"
    "cg_$t"
    rm -rf "${WORK:?}/$t/cache"
    if [ "$NATIVE" = 1 ]; then
        TPORT=
        log "cpu_budget.sh: $t without valgrind (utime/stime)"
        NCOLD=0
        "native_$t"
        rm -rf "${WORK:?}/$t/cache"
    fi
done
{
    echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')," \
        "size=$SIZE clients=$CLIENTS elapsed=$(($(date +%s) - T0))s"
    echo "host_mhz=$(awk -F': ' '/^cpu MHz/ { print $2; exit }' /proc/cpuinfo)"
    cat "$RESULTS"
} >"$RESULTS.final"
mkdir -p "$BENCH_BIN"
SAVED="$BENCH_BIN/cpu-budget-$(date -u +%Y%m%d-%H%M%S).txt"
cp "$RESULTS.final" "$SAVED"
python3 "$ROOT/bench/cpu_estimate.py" "$SAVED"
log "cpu_budget.sh: raw results in $SAVED"
