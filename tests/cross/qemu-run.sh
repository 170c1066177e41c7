#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# tests/cross/qemu-run.sh ARCH SYSROOT PROGRAM [ARGS...]: runs a foreign-architecture program
# under qemu-user. The C library comes from Debian's cross packages (/usr/TRIPLET, brought by
# crossbuild-essential-ARCH); the other libraries from SYSROOT (tests/cross/setup.sh), given to the
# guest's dynamic loader only (qemu -E), so the host's qemu never sees them. The exit status and
# the signals are the program's: qemu forwards SIGTERM and returns the guest's status.
set -euo pipefail
ARCH=${1:?usage: qemu-run.sh ARCH SYSROOT PROGRAM [ARGS...]}
SYSROOT=${2:?usage: qemu-run.sh ARCH SYSROOT PROGRAM [ARGS...]}
shift 2
case "$ARCH" in
arm64) TRIPLET=aarch64-linux-gnu QEMU=qemu-aarch64 ;;
armhf) TRIPLET=arm-linux-gnueabihf QEMU=qemu-arm ;;
*) echo "qemu-run.sh: ARCH must be arm64 or armhf" >&2; exit 2 ;;
esac
case "$SYSROOT" in /*) ;; *) SYSROOT="$PWD/$SYSROOT" ;; esac
exec "$QEMU" -L "/usr/$TRIPLET" -E "LD_LIBRARY_PATH=$SYSROOT/usr/lib/$TRIPLET" "$@"
