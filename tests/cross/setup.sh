#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# tests/cross/setup.sh ARCH SYSROOT: makes a foreign-architecture build of cacheparty possible
# without touching the native build.
#   1. installs what is missing among crossbuild-essential-ARCH and qemu-user (apt-get install
#      --no-remove: apt aborts rather than remove any installed package);
#   2. adds ARCH as a dpkg foreign architecture if needed (this only widens apt's lists);
#   3. downloads (apt-get download, nothing is installed) the runtime and -dev packages of the
#      libraries cacheparty links with, for ARCH, and unpacks them into SYSROOT with dpkg-deb -x.
# libhttp-parser-dev is not Multi-Arch: installing libhttp-parser-dev:ARCH would remove the native
# one, which is why the foreign libraries live in a private sysroot and are never installed.
# The native build dependencies are checked before and after: any change fails the run.
# Quiet and quick when everything is already in place (a stamp file records the package list).
set -euo pipefail

ARCH=${1:?usage: setup.sh ARCH SYSROOT}
SYSROOT=${2:?usage: setup.sh ARCH SYSROOT}
case "$ARCH" in
arm64) TRIPLET=aarch64-linux-gnu QEMU=qemu-aarch64 ;;
armhf) TRIPLET=arm-linux-gnueabihf QEMU=qemu-arm ;;
*) echo "setup.sh: ARCH must be arm64 or armhf (got '$ARCH')" >&2; exit 2 ;;
esac

# The libraries of DEB_DEPS (Makefile), runtime + development package each.
LIBS="libev4 libev-dev libhttp-parser2.9 libhttp-parser-dev libinih1 libinih-dev libc-ares2
      libc-ares-dev libxxhash0 libxxhash-dev libjansson4 libjansson-dev libcmocka0 libcmocka-dev
      libmd0 libmd-dev zlib1g zlib1g-dev"
NATIVE_WATCH="libev-dev libhttp-parser-dev libhttp-parser2.9 libinih-dev libc-ares-dev
              libxxhash-dev libjansson-dev libcmocka-dev libmd-dev zlib1g-dev"

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
APT_OPTS=(-o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends --no-remove)
log() { printf 'cross(%s): %s\n' "$ARCH" "$*" >&2; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
native_state() {
    local p
    for p in $NATIVE_WATCH; do
        dpkg-query -W -f='${Package}:${Architecture}=${Version} ${Status}\n' "$p" 2>/dev/null ||
            echo "$p missing"
    done
}
BEFORE=$(native_state)

apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] && return 0
    log "apt-get update"
    # A failed index (a mirror in sync) is retried once, then left to the download to judge:
    # the packages needed may well be listed in the indexes that did arrive.
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq ||
        { sleep 5; $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq; } ||
        log "apt-get update reported errors; going on with the lists apt has"
    apt_updated=1
}

# 1. toolchain and emulator
missing=""
installed "crossbuild-essential-$ARCH" || missing="$missing crossbuild-essential-$ARCH"
command -v "$QEMU" >/dev/null 2>&1 || missing="$missing qemu-user"
if [ -n "$missing" ]; then
    apt_update
    log "installing:$missing"
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install "${APT_OPTS[@]}" $missing
fi
command -v "$TRIPLET-gcc" >/dev/null || { log "$TRIPLET-gcc still missing"; exit 1; }
command -v "$QEMU" >/dev/null || { log "$QEMU still missing"; exit 1; }

# 2 + 3. the foreign libraries, unpacked into the sysroot
STAMP="$SYSROOT/.cacheparty-sysroot"
WANT="$ARCH: $(echo $LIBS)"
if [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$WANT" ] &&
    [ -e "$SYSROOT/usr/lib/$TRIPLET/libhttp_parser.so" ]; then
    exit 0
fi
if ! dpkg --print-foreign-architectures | grep -qx "$ARCH"; then
    log "dpkg --add-architecture $ARCH (apt lists only; nothing is installed for $ARCH)"
    $SUDO dpkg --add-architecture "$ARCH"
    apt_updated=0
    apt_update
fi
DEBS="$SYSROOT.debs"
rm -rf "$DEBS" "$SYSROOT"
mkdir -p "$DEBS" "$SYSROOT"
pkgs=()
for p in $LIBS; do pkgs+=("$p:$ARCH"); done
# apt-get download runs its fetcher as _apt when it can; the directory may not be its to write,
# in which case apt falls back to root and says so: that warning is expected here.
if ! (cd "$DEBS" && apt-get download -qq "${pkgs[@]}" 2>"$DEBS/apt.err"); then
    apt_update # stale or missing lists for ARCH
    (cd "$DEBS" && apt-get download -qq "${pkgs[@]}" 2>"$DEBS/apt.err") ||
        { cat "$DEBS/apt.err" >&2; log "apt-get download failed"; exit 1; }
fi
for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$SYSROOT"; done
for p in $LIBS; do
    ls "$DEBS/${p}_"*"_$ARCH.deb" >/dev/null 2>&1 || { log "no $p for $ARCH was downloaded"; exit 1; }
done

AFTER=$(native_state)
if [ "$BEFORE" != "$AFTER" ]; then
    log "the native packages changed (this must never happen):"
    diff <(echo "$BEFORE") <(echo "$AFTER") >&2 || true
    exit 1
fi
{
    echo "$WANT"
    (cd "$DEBS" && ls -1 ./*.deb | sed 's|^\./||')
} >"$STAMP"
log "sysroot ready: $SYSROOT ($(ls "$DEBS"/*.deb | wc -l) packages)"
