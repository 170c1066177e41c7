#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# tests/deps-servers.sh PKG...: installs the Debian server packages that tests start themselves
# (in the foreground, on loopback high ports, from configs they write: tests/it/b20_dns_servers.py)
# and leaves none of the services of what it installed enabled or running: a Pi that ran
# `make test` must not find a resolver on :53 after its next boot. Run as root (the Makefile's
# deps step adds sudo).
#   - while installing, a policy-rc.d that denies every start (unless the machine has one) keeps
#     the packages' postinst scripts from starting their daemons;
#   - then the units and init scripts of the packages it installed are disabled (and stopped).
# A package that was already installed is left as it is: a resolver the user runs (Pi-hole with
# unbound) keeps running and starting at boot.
# tests/deps-servers.sh --check PKG...: exits 0 when every package is installed (needs no root).
set -eu

check=""
if [ "${1:-}" = "--check" ]; then
    check=yes
    shift
fi

missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -n "$missing" ] || exit 0
[ -z "$check" ] || exit 1

echo "installing test servers (their services left disabled):$missing"
own_policy=""
cleanup() {
    if [ -n "$own_policy" ]; then
        rm -f /usr/sbin/policy-rc.d
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM HUP
if [ ! -e /usr/sbin/policy-rc.d ]; then
    own_policy=yes
    printf '#!/bin/sh\n# cacheparty tests/deps-servers.sh: no daemon starts while installing\nexit 101\n' \
        >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
fi
apt-get update -qq
listed() {
    dpkg-query -W -f='${Package} ${Status}\n' | awk '/install ok installed$/ {print $1}' | sort -u
}
pkgs_before=$(mktemp)
pkgs_after=$(mktemp)
listed >"$pkgs_before"
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
listed >"$pkgs_after"
# Every package this install added, its dependencies too (nginx's unit is in nginx-common).
added="$missing $(comm -13 "$pkgs_before" "$pkgs_after" | tr '\n' ' ')"
rm -f "$pkgs_before" "$pkgs_after"

# The units and init scripts of the packages just installed.
units=""
inits=""
for p in $added; do
    for f in $(dpkg-query -L "$p" 2>/dev/null); do
        case "$f" in
        /lib/systemd/system/*.service | /usr/lib/systemd/system/*.service) units="$units ${f##*/}" ;;
        /etc/init.d/*) [ -f "$f" ] && inits="$inits ${f##*/}" ;;
        esac
    done
done
for u in $units; do
    if [ -d /run/systemd/system ]; then
        systemctl disable --now "$u" >/dev/null 2>&1 || true
    elif command -v systemctl >/dev/null 2>&1; then
        systemctl disable "$u" >/dev/null 2>&1 || true # (works on the unit files alone)
    fi
    # without systemctl (a container), the links the postinst made: every target's wants and
    # the aliases pointing at the unit
    for l in /etc/systemd/system/*.wants/"$u" /etc/systemd/system/*.service; do
        if [ -L "$l" ] && [ "$(basename "$(readlink "$l")")" = "$u" ]; then
            rm -f "$l"
        fi
    done
done
for i in $inits; do
    if command -v update-rc.d >/dev/null 2>&1; then
        update-rc.d "$i" disable >/dev/null 2>&1 || true
    fi
done
for u in $units; do
    for l in /etc/systemd/system/*.wants/"$u"; do
        if [ -e "$l" ] || [ -L "$l" ]; then
            echo "tests/deps-servers.sh: $u is still enabled ($l)" >&2
            exit 1
        fi
    done
done
