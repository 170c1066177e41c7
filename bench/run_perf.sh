#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/run.sh: cacheparty against nginx configured like lancache monolithic, Varnish and Apache
# Traffic Server, with the origin served directly (cold ceiling) and nginx serving static files
# (warm ceiling), all in one run on loopback. See bench/README.md for the method and every column.
#
#   bench/run.sh [-scenario big|chunks|ranges|all] [-clients N] [-targets LIST] [-quick] [-smoke]
#   env: ORIGIN_DELAY (default 50ms), ORIGIN_RATE (bytes/s per response, default 100M),
#        BUILD (default build), KEEP=1 keeps the work directory, VERIFY_WARM=full|sample,
#        TRACE_DIR=DIR writes one line per request of each phase to DIR/TARGET-SCENARIO-PHASE.txt
#
# Every process it starts listens on 127.0.0.1 only, runs from a private config in a temporary
# directory, and is stopped by its pid when the run ends. Every load phase is bounded in requests
# and in time (loadgen -T).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
BENCH_BIN="$BUILD/bench"
CONF="$ROOT/bench/conf"

SCENARIO=all
CLIENTS=
MODE=full
TARGETS=
usage() {
    sed -n '4,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
    -scenario | --scenario) SCENARIO=${2:?}; shift 2 ;;
    -clients | --clients) CLIENTS=${2:?}; shift 2 ;;
    -targets | --targets) TARGETS=${2:?}; shift 2 ;;
    -quick | --quick) MODE=quick; shift ;;
    -smoke | --smoke) MODE=smoke; shift ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
    esac
done
case "$CLIENTS" in
'' | *[!0-9]*) [ -z "$CLIENTS" ] || { echo "run.sh: -clients takes a number" >&2; exit 2; } ;;
esac
case "$SCENARIO" in
all) SCENARIOS="big chunks ranges" ;;
big | chunks | ranges) SCENARIOS=$SCENARIO ;;
*) echo "run.sh: -scenario must be big, chunks, ranges or all" >&2; exit 2 ;;
esac

# Sizes per mode: full is the issue's workload; quick is for development; smoke is for make test.
case "$MODE" in
full)
    : "${CLIENTS:=50}"; BIG=256M; NCHUNKS=128; CHUNK=1M; ARCHIVE=256M; PHASE_T=180
    : "${ORIGIN_DELAY:=50ms}"; : "${ORIGIN_RATE:=100M}"
    : "${TARGETS:=origin nginx-static cacheparty nginx varnish trafficserver}" ;;
quick)
    : "${CLIENTS:=10}"; BIG=64M; NCHUNKS=32; CHUNK=1M; ARCHIVE=64M; PHASE_T=120
    : "${ORIGIN_DELAY:=50ms}"; : "${ORIGIN_RATE:=100M}"
    : "${TARGETS:=origin nginx-static cacheparty nginx varnish trafficserver}" ;;
smoke)
    : "${CLIENTS:=3}"; BIG=4M; NCHUNKS=8; CHUNK=256K; ARCHIVE=8M; PHASE_T=20
    : "${ORIGIN_DELAY:=2ms}"; : "${ORIGIN_RATE:=0}"
    : "${TARGETS:=origin cacheparty}" ;;
esac
TARGETS=${TARGETS//,/ }
: "${VERIFY_WARM:=sample}"
HOSTNAME_CDN=cdn.bench.example

for p in origin loadgen; do
    if [ ! -x "$BENCH_BIN/$p" ]; then
        echo "run.sh: $BENCH_BIN/$p is missing: run 'make bench' (or make $BENCH_BIN/$p)" >&2
        exit 2
    fi
done

# ---------------------------------------------------------------------------------------------
# Work directory, process bookkeeping, cleanup
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cacheparty-bench.XXXXXX")
chmod 755 "$WORK" # varnishd's jailed users must read the VCL and their workdir
RESULTS="$WORK/results.txt"
: >"$RESULTS"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] && stop_pid "$pid" 2>/dev/null || true
    done
    if [ "${KEEP:-0}" = 1 ]; then
        echo "run.sh: work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '%s\n' "$*" >&2; }

# Stop one process we started: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "run.sh: pid $pid did not stop in 30 s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait (at most 20 s) until 127.0.0.1:$1 accepts connections; $2 = pid that must stay alive.
wait_port() {
    local port=$1 pid=$2 i
    for i in $(seq 1 400); do
        if ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

wait_file() {
    local f=$1 i
    for i in $(seq 1 200); do
        [ -s "$f" ] && return 0
        sleep 0.05
    done
    return 1
}

# ---------------------------------------------------------------------------------------------
# CPU pinning: the proxy under test on one core, origin + DNS + load generator on the other(s).
NCPU=$(nproc)
if [ "$NCPU" -ge 2 ]; then
    PROXY_CPUS=1
    if [ "$NCPU" -gt 2 ]; then LOAD_CPUS="0,2-$((NCPU - 1))"; else LOAD_CPUS=0; fi
    PIN_PROXY=(taskset -c "$PROXY_CPUS")
    PIN_LOAD=(taskset -c "$LOAD_CPUS")
    PINNING="proxy under test -> CPU $PROXY_CPUS; origin, DNS stub, loadgen -> CPU $LOAD_CPUS (taskset)"
else
    PIN_PROXY=()
    PIN_LOAD=()
    PINNING="NOT PINNED: only $NCPU CPU; every figure is contaminated by sharing"
fi

# ---------------------------------------------------------------------------------------------
# Peers: installed with apt-get when missing, never started as system services.
need_pkg() { # $1 = binary, $2 = Debian package
    [ -x "$1" ] && return 0
    log "run.sh: $2 is missing; installing it with apt-get"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    local prc=/usr/sbin/policy-rc.d made_prc=0
    if [ ! -e "$prc" ]; then # keep Debian's postinst from starting the system service
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$prc" >/dev/null && $sudo chmod 755 "$prc" &&
            made_prc=1
    fi
    ($sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$2") \
        >"$WORK/apt-$2.log" 2>&1 || log "run.sh: apt-get install $2 failed (see $WORK/apt-$2.log)"
    [ "$made_prc" = 1 ] && $sudo rm -f "$prc"
    [ -x "$1" ]
}

HAVE_NGINX=0
HAVE_VARNISH=0
HAVE_ATS=0
for t in $TARGETS; do
    case "$t" in
    nginx | nginx-static) [ "$HAVE_NGINX" = 1 ] || { need_pkg /usr/sbin/nginx nginx && HAVE_NGINX=1; } || true ;;
    varnish) need_pkg /usr/sbin/varnishd varnish && HAVE_VARNISH=1 || true ;;
    trafficserver) need_pkg /usr/bin/traffic_server trafficserver && HAVE_ATS=1 || true ;;
    esac
done

# ---------------------------------------------------------------------------------------------
# Origin and DNS stub
DNS_PORTFILE="$WORK/dns.port"
"${PIN_LOAD[@]}" python3 "$ROOT/bench/dns.py" --portfile "$DNS_PORTFILE" --lifetime 7200 \
    --log "$WORK/dns.log" &
PIDS+=($!)
DNS_PID=$!
wait_file "$DNS_PORTFILE" || { log "run.sh: DNS stub did not start"; exit 1; }
DNS_PORT=$(cat "$DNS_PORTFILE")

start_origin() { # $1 = delay, $2 = rate, $3 = name; sets ORIGIN_PID ORIGIN_PORT
    local pf="$WORK/origin-$3.port"
    "${PIN_LOAD[@]}" "$BENCH_BIN/origin" -d "$1" -r "$2" -P "$pf" -t 7200 \
        2>>"$WORK/origin-$3.log" &
    ORIGIN_PID=$!
    PIDS+=("$ORIGIN_PID")
    wait_file "$pf" || { log "run.sh: origin did not start"; exit 1; }
    ORIGIN_PORT=$(cat "$pf")
}
start_origin "$ORIGIN_DELAY" "$ORIGIN_RATE" main
MAIN_ORIGIN_PID=$ORIGIN_PID
MAIN_ORIGIN_PORT=$ORIGIN_PORT
HOST_HDR="$HOSTNAME_CDN:$ORIGIN_PORT"

origin_stat() { # $1 = counter name; read from the origin's /__stats (bash /dev/tcp, no curl)
    local v
    v=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET /__stats HTTP/1.1\r\nHost: stats\r\nConnection: close\r\n\r\n" >&3
        cat <&3' _ "$ORIGIN_PORT" | awk -v k="$1" '$1 == k { print $2 }') || true
    echo "${v:-0}"
}

# ---------------------------------------------------------------------------------------------
# Process-tree CPU seconds and peak RSS of the proxy under test
CLK_TCK=$(getconf CLK_TCK)
tree_pids() { # $1 = root pid; prints it and its descendants
    local p=$1 c
    echo "$p"
    for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do tree_pids "$c"; done
}
tree_cpu_ticks() {
    local total=0 p v
    for p in $(tree_pids "$1"); do
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}
tree_reset_hwm() {
    local p
    for p in $(tree_pids "$1"); do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || true; done
}
tree_hwm_kb() {
    local total=0 p v
    for p in $(tree_pids "$1"); do
        v=$(awk '/^VmHWM:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# Busy share of a CPU list between two /proc/stat snapshots (user+nice+system+irq+softirq+steal
# over all but iowait... i.e. 1 - (idle+iowait)/total), in percent.
stat_snapshot() { grep -E '^cpu[0-9]+ ' /proc/stat; }
cpus_busy() { # $1 = cpu list "0,2-3", $2 = before file, $3 = after file
    awk -v list="$1" '
        BEGIN {
            n = split(list, parts, ",")
            for (i = 1; i <= n; i++) {
                if (split(parts[i], r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) want["cpu" c] = 1 }
                else want["cpu" parts[i]] = 1
            }
        }
        want[$1] {
            t = 0; for (i = 2; i <= NF; i++) t += $i
            idle = $5 + $6
            if (FNR == NR) { t0[$1] = t; i0[$1] = idle } else { dt += t - t0[$1]; di += idle - i0[$1] }
        }
        END { if (dt > 0) printf "%.0f", 100 * (dt - di) / dt; else printf "-" }' "$2" "$3"
}

# CPU ticks of the kernel's softirq threads: loopback network work the bench itself causes.
softirq_ticks() {
    local total=0 p v
    for p in $(pgrep -x 'ksoftirqd/[0-9]+' 2>/dev/null); do
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# Busy ticks of all CPUs between two snapshots.
all_busy_ticks() {
    awk '{ t = 0; for (i = 2; i <= NF; i++) t += $i; b = t - $5 - $6
           if (FNR == NR) b0 += b; else b1 += b } END { print b1 - b0 }' "$1" "$2"
}

# ---------------------------------------------------------------------------------------------
# Targets: start_<name> sets TPID and TPORT (TPID = the process whose tree is measured)
TDIR=
start_cacheparty() {
    local bin="$BUILD/cacheparty"
    [ -x "$bin" ] || { log "run.sh: $bin is missing (make)"; return 1; }
    if [ -z "$TDIR" ]; then
        TDIR="$WORK/cacheparty"
        mkdir -p "$TDIR/cache"
        TPORT=$(free_port)
        sed -e "s|@WORK@|$TDIR|g" -e "s|@PORT@|$TPORT|g" -e "s|@DNS_PORT@|$DNS_PORT|g" \
            "$CONF/cacheparty.ini.in" >"$TDIR/cacheparty.ini"
    fi
    "${PIN_PROXY[@]}" "$bin" -c "$TDIR/cacheparty.ini" 2>>"$TDIR/stderr.log" &
    TPID=$!
    PIDS+=("$TPID")
}
nginx_user() { if [ "$(id -u)" = 0 ]; then echo "user root;"; fi; }
start_nginx() {
    if [ -z "$TDIR" ]; then
        TDIR="$WORK/nginx"
        mkdir -p "$TDIR/cache"
        TPORT=$(free_port)
        sed -e "s|@WORK@|$TDIR|g" -e "s|@PORT@|$TPORT|g" -e "s|@DNS_PORT@|$DNS_PORT|g" \
            -e "s|@USER@|$(nginx_user)|" "$CONF/nginx-lancache.conf.in" >"$TDIR/nginx.conf"
    fi
    "${PIN_PROXY[@]}" /usr/sbin/nginx -p "$TDIR" -c "$TDIR/nginx.conf" -e "$TDIR/error.log" \
        2>>"$TDIR/stderr.log" &
    TPID=$!
    PIDS+=("$TPID")
}
STATIC_ROOT=
start_nginx-static() {
    if [ -z "$TDIR" ]; then
        TDIR="$WORK/nginx-static"
        STATIC_ROOT="$TDIR/root"
        mkdir -p "$STATIC_ROOT"
        TPORT=$(free_port)
        sed -e "s|@WORK@|$TDIR|g" -e "s|@PORT@|$TPORT|g" -e "s|@ROOT@|$STATIC_ROOT|g" \
            -e "s|@USER@|$(nginx_user)|" "$CONF/nginx-static.conf.in" >"$TDIR/nginx.conf"
        # The same objects the loadgen asks for, as files (then in page cache).
        # shellcheck disable=SC2046 # one word per path, on purpose
        "$BENCH_BIN/origin" -w "$STATIC_ROOT" "/big/$BIG/object.bin" "/archive/$ARCHIVE/data.pak" \
            $(for i in $(seq 0 $((NCHUNKS - 1))); do printf '/depot/%s/chunk_%04d ' "$CHUNK" "$i"; done)
    fi
    "${PIN_PROXY[@]}" /usr/sbin/nginx -p "$TDIR" -c "$TDIR/nginx.conf" -e "$TDIR/error.log" \
        2>>"$TDIR/stderr.log" &
    TPID=$!
    PIDS+=("$TPID")
}
start_varnish() {
    if [ -z "$TDIR" ]; then
        TDIR="$WORK/varnish"
        mkdir -p "$TDIR"
        TPORT=$(free_port)
        sed -e "s|@ORIGIN_PORT@|$ORIGIN_PORT|g" "$CONF/varnish.vcl.in" >"$TDIR/bench.vcl"
        chmod 644 "$TDIR/bench.vcl"
    fi
    "${PIN_PROXY[@]}" /usr/sbin/varnishd -F -n "$TDIR/n" -a "127.0.0.1:$TPORT" \
        -T "127.0.0.1:$(free_port)" -f "$TDIR/bench.vcl" -s malloc,4G \
        -p thread_pool_min=50 -p thread_pools=1 -p default_grace=0 \
        >>"$TDIR/stderr.log" 2>&1 &
    TPID=$!
    PIDS+=("$TPID")
}
start_trafficserver() {
    if [ -z "$TDIR" ]; then
        TDIR="$WORK/trafficserver"
        mkdir -p "$TDIR/etc" "$TDIR/cache" "$TDIR/run" "$TDIR/log" "$TDIR/var"
        cp -r /etc/trafficserver/. "$TDIR/etc/"
        local f uid="#-1" # as root: keep running as root inside the private runroot
        [ "$(id -u)" = 0 ] || uid="#$(id -u)"
        for f in records.config remap.config storage.config plugin.config; do
            sed -e "s|@WORK@|$TDIR|g" -e "s|@PORT@|$TPORT_NEXT|g" -e "s|@DNS_PORT@|$DNS_PORT|g" \
                -e "s|@HOST@|$HOST_HDR|g" -e "s|@USER_ID@|$uid|g" \
                "$CONF/trafficserver/$f.in" >"$TDIR/etc/$f"
        done
        cp "$CONF/trafficserver/cache_status.conf" "$TDIR/etc/"
        {
            echo "prefix: /usr"
            echo "exec_prefix: /usr"
            echo "bindir: /usr/bin"
            echo "sbindir: /usr/sbin"
            echo "sysconfdir: $TDIR/etc"
            echo "datadir: /usr/share/trafficserver"
            echo "includedir: /usr/include"
            echo "libdir: /usr/lib/trafficserver"
            echo "libexecdir: /usr/lib/trafficserver/modules"
            echo "localstatedir: $TDIR/var"
            echo "runtimedir: $TDIR/run"
            echo "logdir: $TDIR/log"
            echo "cachedir: $TDIR/cache"
        } >"$TDIR/runroot.yaml"
        TPORT=$TPORT_NEXT
    fi
    "${PIN_PROXY[@]}" /usr/bin/traffic_server --run-root="$TDIR/runroot.yaml" \
        >>"$TDIR/stderr.log" 2>&1 &
    TPID=$!
    PIDS+=("$TPID")
}
start_origin-direct() {
    # A second origin with the same delay and rate, pinned where a proxy would run, so the
    # ceiling row gets a core of its own as every proxy does.
    TDIR="$WORK/origin-direct"
    mkdir -p "$TDIR"
    "${PIN_PROXY[@]}" "$BENCH_BIN/origin" -d "$ORIGIN_DELAY" -r "$ORIGIN_RATE" -P "$TDIR/port" \
        -t 7200 2>>"$TDIR/origin.log" &
    TPID=$!
    PIDS+=("$TPID")
    wait_file "$TDIR/port" || return 1
    TPORT=$(cat "$TDIR/port")
}
start_target() { # $1 = name
    case "$1" in
    origin) start_origin-direct ;;
    cacheparty) start_cacheparty ;;
    nginx) start_nginx ;;
    nginx-static) start_nginx-static ;;
    varnish) start_varnish ;;
    trafficserver) TPORT_NEXT=$(free_port); start_trafficserver ;;
    *) log "run.sh: unknown target $1"; return 1 ;;
    esac || return 1
    if ! wait_port "$TPORT" "$TPID"; then
        log "run.sh: $1 did not start listening on 127.0.0.1:$TPORT; its log:"
        tail -n 20 "$TDIR"/*.log >&2 2>/dev/null || true
        return 1
    fi
}
stop_target() { # $1 = name
    stop_pid "$TPID"
}

# ---------------------------------------------------------------------------------------------
# One phase: loadgen against the target, plus the origin's and the proxy's counters around it.
FAILED_TOTAL=0
run_phase() { # $1 = target, $2 = scenario, $3 = phase
    local target=$1 sc=$2 ph=$3 verify=full
    [ "$ph" = warm ] && verify=$VERIFY_WARM
    local up_b0 up_r0 cpu0 up_b1 up_r1 cpu1 hwm line rc=0
    up_b0=$(origin_stat body_bytes)
    up_r0=$(origin_stat requests)
    cpu0=$(tree_cpu_ticks "$TPID")
    local ours0 ours1
    ours0=$(($(tree_cpu_ticks "$ORIGIN_PID") + $(tree_cpu_ticks "$DNS_PID") + $(softirq_ticks)))
    tree_reset_hwm "$TPID"
    stat_snapshot >"$WORK/stat0"
    local perfpid=
    if [ -n "${PHASE_PERF:-}" ] && [ "$ph" = cold ] && [ "$target" = cacheparty ]; then
        perf record --call-graph dwarf,8192 -F 2000 -p "$TPID" -o "$PHASE_PERF" >/dev/null 2>&1 &
        perfpid=$!
        sleep 0.5
    fi
    line=$(LG_TRACE=${TRACE_DIR:+$TRACE_DIR/$target-$sc-$ph.txt} \
        "${PIN_LOAD[@]}" "$BENCH_BIN/loadgen" -a "127.0.0.1:$TPORT" -H "$HOST_HDR" -s "$sc" \
        -c "$CLIENTS" -n "$target" -p "$ph" -B "$BIG" -k "$NCHUNKS" -K "$CHUNK" -A "$ARCHIVE" \
        -v "$verify" -T "$PHASE_T" 2>>"$WORK/loadgen.log") || rc=$?
    stat_snapshot >"$WORK/stat1"
    if [ -n "$perfpid" ]; then kill -INT "$perfpid"; wait "$perfpid" || true; fi
    cpu1=$(tree_cpu_ticks "$TPID")
    ours1=$(($(tree_cpu_ticks "$ORIGIN_PID") + $(tree_cpu_ticks "$DNS_PID") + $(softirq_ticks)))
    hwm=$(tree_hwm_kb "$TPID")
    up_b1=$(origin_stat body_bytes)
    up_r1=$(origin_stat requests)
    if [ -z "$line" ]; then
        line="target=$target scenario=$sc phase=$ph failed=all error=\"loadgen exited $rc\""
        FAILED_TOTAL=$((FAILED_TOTAL + 1))
    fi
    case "$line" in *" failed=0 "*) ;; *) FAILED_TOTAL=$((FAILED_TOTAL + 1)) ;; esac
    case "$line" in *" deadline_hit=1 "*) PHASE_DEADLINE=1 ;; esac
    line="$line up_bytes=$((up_b1 - up_b0)) up_reqs=$((up_r1 - up_r0))"
    line="$line proxy_cpu_s=$(awk -v t=$((cpu1 - cpu0)) -v h="$CLK_TCK" 'BEGIN { printf "%.2f", t / h }')"
    line="$line proxy_rss_mib=$((hwm / 1024))"
    if [ "$NCPU" -ge 2 ]; then
        line="$line load_core_busy=$(cpus_busy "$LOAD_CPUS" "$WORK/stat0" "$WORK/stat1")"
        line="$line proxy_core_busy=$(cpus_busy "$PROXY_CPUS" "$WORK/stat0" "$WORK/stat1")"
    fi
    # CPU time spent by everything else on the machine (other users, kernel threads) in the phase.
    local lg_ticks
    lg_ticks=$(echo "$line" | tr ' ' '\n' | awk -F= -v h="$CLK_TCK" '$1 == "lg_cpu_s" { printf "%d", $2 * h }')
    line="$line other_cpu_s=$(awk -v a="$(all_busy_ticks "$WORK/stat0" "$WORK/stat1")" \
        -v b=$((cpu1 - cpu0 + ours1 - ours0 + ${lg_ticks:-0})) -v h="$CLK_TCK" \
        'BEGIN { v = (a - b) / h; if (v < 0) v = 0; printf "%.2f", v }')"
    echo "$line" >>"$RESULTS"
    log "  $(printf '%-12s %-6s %-4s' "$target" "$sc" "$ph") $(echo "$line" |
        tr ' ' '\n' | grep -E '^(mbps|ttfb_p50_ms|ttfb_p99_ms|failed|up_bytes|little_ratio)=' |
        tr '\n' ' ')"
}

# Restart: stop the target, start it again on the same cache, time until the first HIT.
measure_restart() { # $1 = target
    local target=$1 t0 line rc=0
    stop_target "$target"
    t0=$(date +%s%N)
    start_target "$target" || { echo "restart target=$target error=\"did not restart\"" >>"$RESULTS"; return; }
    line=$("${PIN_LOAD[@]}" "$BENCH_BIN/loadgen" -a "127.0.0.1:$TPORT" -H "$HOST_HDR" -s chunks \
        -c 1 -n "$target" -p restart -k "$NCHUNKS" -K "$CHUNK" -f "$t0" -T 60 \
        2>>"$WORK/loadgen.log") || rc=$?
    echo "restart $line" >>"$RESULTS"
    log "  $(printf '%-12s restart' "$target") $(echo "$line" | tr ' ' '\n' |
        grep -E '^(first_ok_s|first_hit_s|attempts)=' | tr '\n' ' ')"
}

# ---------------------------------------------------------------------------------------------
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
{
    echo "# cacheparty bench, $DATE, mode=$MODE clients=$CLIENTS scenarios=\"$SCENARIOS\""
    echo "# host: $(uname -sr), $NCPU CPU ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "# pinning: $PINNING"
    echo "# origin: first-byte delay $ORIGIN_DELAY, rate $ORIGIN_RATE B/s per response; objects: big $BIG, chunks $NCHUNKS x $CHUNK, ranges archive $ARCHIVE"
    [ "$HAVE_NGINX" = 1 ] && echo "# nginx: $(/usr/sbin/nginx -v 2>&1 | sed 's/.*: //')"
    [ "$HAVE_VARNISH" = 1 ] && echo "# varnish: $(/usr/sbin/varnishd -V 2>&1 | head -1 | sed 's/ revision.*//')"
    [ "$HAVE_ATS" = 1 ] && echo "# trafficserver: $(dpkg-query -W -f='${Version}' trafficserver 2>/dev/null)"
    echo "# cacheparty: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo 'no commit yet')"
} >>"$RESULTS"
log "run.sh: $MODE run, $CLIENTS clients, scenarios: $SCENARIOS; targets: $TARGETS"
log "run.sh: pinning: $PINNING"
log "run.sh: origin on 127.0.0.1:$ORIGIN_PORT (pid $ORIGIN_PID, $(taskset -cp "$ORIGIN_PID" 2>/dev/null | sed 's/.*: /cpus /')), DNS stub on 127.0.0.1:$DNS_PORT; work dir $WORK"

# The origin's own capacity with no delay and no rate limit, under the same pinning.
if [ "$MODE" != smoke ]; then
    start_origin 0 0 capacity
    CAP_PORT=$ORIGIN_PORT
    line=$("${PIN_LOAD[@]}" "$BENCH_BIN/loadgen" -a "127.0.0.1:$CAP_PORT" -H "$HOSTNAME_CDN:$CAP_PORT" \
        -s chunks -c "$CLIENTS" -n origin-capacity -p cold -k "$NCHUNKS" -K "$CHUNK" -v full \
        -T 60 2>>"$WORK/loadgen.log") || true
    echo "capacity $line" >>"$RESULTS"
    log "  origin capacity (no delay, no rate limit, chunks, full verify): $(echo "$line" | tr ' ' '\n' | grep -E '^(mbps|lg_util)=' | tr '\n' ' ')"
    stop_pid "$ORIGIN_PID"
    ORIGIN_PORT=$MAIN_ORIGIN_PORT
    ORIGIN_PID=$MAIN_ORIGIN_PID
fi

START_ALL=$(date +%s)
for target in $TARGETS; do
    case "$target" in
    nginx | nginx-static) [ "$HAVE_NGINX" = 1 ] || { echo "skipped target=$target reason=\"nginx not installed\"" >>"$RESULTS"; continue; } ;;
    varnish) [ "$HAVE_VARNISH" = 1 ] || { echo "skipped target=$target reason=\"varnish not installed\"" >>"$RESULTS"; continue; } ;;
    trafficserver) [ "$HAVE_ATS" = 1 ] || { echo "skipped target=$target reason=\"trafficserver not installed\"" >>"$RESULTS"; continue; } ;;
    esac
    TDIR=
    if ! start_target "$target"; then
        echo "skipped target=$target reason=\"did not start\"" >>"$RESULTS"
        FAILED_TOTAL=$((FAILED_TOTAL + 1))
        continue
    fi
    log "run.sh: $target on 127.0.0.1:$TPORT (pid $TPID, $(taskset -cp "$TPID" 2>/dev/null | sed 's/.*: /cpus /'))"
    PHASE_DEADLINE=0
    for sc in $SCENARIOS; do
        if [ "$PHASE_DEADLINE" = 1 ]; then # bound the run: a target that hangs gets no more phases
            echo "skipped target=$target reason=\"$sc and later not run: an earlier phase hit the ${PHASE_T}s deadline\"" >>"$RESULTS"
            break
        fi
        case "$target" in
        origin) run_phase "$target" "$sc" cold ;;
        nginx-static) run_phase "$target" "$sc" warm ;;
        *)
            run_phase "$target" "$sc" cold
            [ "$PHASE_DEADLINE" = 1 ] || run_phase "$target" "$sc" warm
            ;;
        esac
    done
    case "$target" in
    cacheparty | nginx | varnish | trafficserver)
        if [ "$MODE" != smoke ] && [ "$PHASE_DEADLINE" = 0 ] && [[ " $SCENARIOS " == *" chunks "* ]]; then
            measure_restart "$target"
        fi ;;
    esac
    stop_target "$target"
done
ELAPSED=$(($(date +%s) - START_ALL))
echo "# elapsed: ${ELAPSED}s" >>"$RESULTS"

python3 "$ROOT/bench/report.py" "$RESULTS"
mkdir -p "$BENCH_BIN"
SAVED="$BENCH_BIN/results-$(date -u +%Y%m%d-%H%M%S)-$MODE.txt"
cp "$RESULTS" "$SAVED"
log "run.sh: raw results in $SAVED (${ELAPSED}s)"
if [ "$FAILED_TOTAL" -gt 0 ]; then
    log "run.sh: $FAILED_TOTAL phase(s) had failed requests or did not run; see the table"
    [ "$MODE" = smoke ] && exit 1
fi
exit 0
