#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# restart_million.sh: time to the first HIT after a restart with about a million chunk files on
# disk (issue 4's acceptance). It fills a cache with chunk_size 4K from the bench origin (one
# 4 GiB object = 1,048,576 chunk files, ~8 GiB on disk), stops cacheparty, starts it again and
# measures from the exec to the first 200 with X-Upstream-Cache-Status: HIT, polling a chunk-sized
# range every millisecond. Loopback only; the origin and the fill are bounded in size and time.
#   bench/restart_million.sh [CHUNKS]      (default 1048576; needs ~8 GiB free under $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
CHUNKS=${1:-1048576}
BUILD=${BUILD:-build}
make --no-print-directory all "$BUILD/bench/origin" >/dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cp-restart.XXXXXX")
cleanup() {
    [ -n "${cp_pid:-}" ] && kill "$cp_pid" 2>/dev/null || true
    [ -n "${origin_pid:-}" ] && kill "$origin_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
oport=$(free_port)
port=$(free_port)
"$BUILD/bench/origin" -l "127.0.0.1:$oport" -d 0 -r 0 -t 3600 >/dev/null 2>&1 &
origin_pid=$!
size=$((CHUNKS * 4096))
cat >"$tmp/cp.ini" <<INI
[server]
listen = 127.0.0.1:$port
admin_listen =
hostname = restart-bench
[upstream]
dns = system
override = 127.0.0.1:$oport
allow_private = yes
readahead = 8
max_per_origin = 32
[cache]
dir = $tmp/cache
chunk_size = 4K
memory_size = 64M
disk_size = 100G
min_free = 1G
[domains]
allow_unlisted = yes
[log]
access =
level = warn
INI
start_cp() {
    "$BUILD/cacheparty" -c "$tmp/cp.ini" 2>>"$tmp/cp.log" &
    cp_pid=$!
}
url="http://127.0.0.1:$port/big/$size/million"
start_cp
for _ in $(seq 1 500); do curl -s -o /dev/null "http://127.0.0.1:$port/lancache-heartbeat" && break; sleep 0.01; done
echo "filling: one object of $size bytes in $CHUNKS chunks of 4 KiB"
t0=$(date +%s.%N)
curl -s -o /dev/null --max-time 1800 -H 'Host: restart.example' "$url"
t1=$(date +%s.%N)
# the last chunks are written when their fills complete: wait for the file count to settle
count() { find "$tmp/cache" -type f -name '*.[0-9]*' -not -path "$tmp/cache/tmp/*" | wc -l; }
prev=-1
for _ in $(seq 1 120); do n=$(count); [ "$n" = "$prev" ] && break; prev=$n; sleep 1; done
echo "filled in $(echo "$t1 - $t0" | bc) s; chunk files on disk: $n; du: $(du -sh "$tmp/cache" | cut -f1)"
kill "$cp_pid"; wait "$cp_pid" || true
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped (cold start)" || echo "page cache kept (not root)"
# first HIT after restart: a range in the middle of the object, polled over raw sockets from one
# process that also starts the daemon, so the figure is exec -> first HIT byte, not curl start-up.
mid=$(( (CHUNKS / 2) * 4096 ))
python3 - "$BUILD/cacheparty" "$tmp/cp.ini" "$port" "$mid" "$n" "$tmp/cp.log" "$size" <<'PY'
import socket, subprocess, sys, time
binary, ini, port, mid, nfiles, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
req = ("GET /big/%s/million HTTP/1.1\r\nHost: restart.example\r\nRange: bytes=%d-%d\r\n"
       "Connection: close\r\n\r\n" % (sys.argv[7], mid, mid + 4095))
t0 = time.monotonic()
proc = subprocess.Popen([binary, "-c", ini], stderr=open(log, "a"))
first_resp = None
try:
    while time.monotonic() - t0 < 30:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.0005)
            continue
        s.sendall(req.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
        s.close()
        if first_resp is None:
            first_resp = time.monotonic() - t0
        if b"X-Upstream-Cache-Status: HIT" in data:
            print("first response %.1f ms, first HIT %.1f ms after exec (restart with %s chunk files on disk)"
                  % (first_resp * 1000, (time.monotonic() - t0) * 1000, nfiles))
            break
    else:
        print("no HIT within 30 s")
        sys.exit(1)
finally:
    proc.terminate()
    proc.wait()
PY
