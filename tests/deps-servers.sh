#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# tests/deps-servers.sh PKG...: installs the Debian server packages that tests start themselves
# (in the foreground, on loopback high ports, from configs they write: tests/it/b20_dns_servers.py)
# and leaves none of their services enabled or running: a Pi that ran `make test` must not find a
# resolver on :53 after its next boot. Run as root (the Makefile's deps step adds sudo).
#   - while installing, a policy-rc.d that denies every start (unless the machine has one) keeps
#     the packages' postinst scripts from starting their daemons;
#   - then every unit and init script they ship is disabled (and stopped, should one run).
# Idempotent: with the packages present and nothing enabled it changes nothing.
# tests/deps-servers.sh --check PKG...: exits 0 when that is so (needs no root), else 1.
set -eu

check=""
if [ "${1:-}" = "--check" ]; then
    check=yes
    shift
fi

UNITS="unbound.service unbound-resolvconf.service named.service"
INITS="unbound named"

missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done

enabled() {
    for u in $UNITS; do
        for d in /etc/systemd/system/*.wants; do
            [ -e "$d/$u" ] && return 0
        done
    done
    for i in $INITS; do
        ls /etc/rc[2-5].d/S[0-9][0-9]"$i" >/dev/null 2>&1 && return 0
    done
    return 1
}

if [ -z "$missing" ] && ! enabled; then
    exit 0
fi
[ -z "$check" ] || exit 1

if [ -n "$missing" ]; then
    echo "installing test servers (no service left enabled):$missing"
    own_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# cacheparty tests/deps-servers.sh: no daemon starts while installing\nexit 101\n' \
            >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=yes
    fi
    trap '[ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

for u in $UNITS; do
    if [ -d /run/systemd/system ]; then
        systemctl disable --now "$u" >/dev/null 2>&1 || true
    elif command -v systemctl >/dev/null 2>&1; then
        systemctl disable "$u" >/dev/null 2>&1 || true # (works on the unit files alone)
    fi
done
for i in $INITS; do
    if [ -x "/etc/init.d/$i" ] && command -v update-rc.d >/dev/null 2>&1; then
        update-rc.d "$i" disable >/dev/null 2>&1 || true
    fi
done
if enabled; then
    echo "tests/deps-servers.sh: a service of $* is still enabled" >&2
    exit 1
fi
