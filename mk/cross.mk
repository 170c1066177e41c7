# Foreign-architecture builds (the Raspberry Pi's arm64 and armhf) tested under qemu-user, the
# native alignment check, and the CPU budget benchmark.
#
#   make cross ARCH=arm64|armhf   toolchain + sysroot (tests/cross/setup.sh), the daemon and the
#                                 unit tests built for ARCH with the Makefile's own rules and
#                                 warnings (-Werror), the unit tests and a black-box smoke test
#                                 under qemu-user, then cross-align
#                                 (cross-smoke), make install of the foreign binary (cross-install)
#   make cross-unit ARCH=...      only the unit tests under qemu-user
#   make cross-align              native build with -fsanitize=alignment, unit tests (qemu-user
#                                 does not fault on unaligned access, this does)
#   make bench-cpu                bench/cpu_budget.sh: instructions per byte served (callgrind)
#
# The foreign build is a recursive make of the Makefile with BUILD=build/cross-ARCH, CC=the cross
# compiler and pkg-config pointed at the sysroot; nothing of the native build is touched.

ARCH ?= arm64
CROSS_TRIPLET_arm64 := aarch64-linux-gnu
CROSS_TRIPLET_armhf := arm-linux-gnueabihf
CROSS_TRIPLET = $(CROSS_TRIPLET_$(ARCH))
CROSS_BUILD   = build/cross-$(ARCH)
CROSS_SYSROOT = $(CURDIR)/$(CROSS_BUILD)/sysroot
CROSS_LIBDIR  = $(CROSS_SYSROOT)/usr/lib/$(CROSS_TRIPLET)
CROSS_EXEC    = $(CURDIR)/tests/cross/qemu-run.sh $(ARCH) $(CROSS_SYSROOT)
# armhf: 32-bit size_t and long; off_t is 64-bit (-D_FILE_OFFSET_BITS=64 in CFLAGS_ALL). time_t
# stays 32-bit as in Debian 12's armhf libraries, which is what `make` on the Pi builds: c-ares'
# ares_timeout() fills a struct timeval, and a -D_TIME_BITS=64 program would read it with the
# wrong layout. cross-time64 compiles (without linking) with -D_TIME_BITS=64 to catch time_t
# assumptions in our code anyway.
CROSS_CFLAGS_arm64 :=
CROSS_CFLAGS_armhf :=
CROSS_SUBMAKE = env PKG_CONFIG_LIBDIR=$(CROSS_LIBDIR)/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(CROSS_SYSROOT) \
    $(MAKE) --no-print-directory BUILD=$(CROSS_BUILD) CC=$(CROSS_TRIPLET)-gcc CI=true \
    CFLAGS="-isystem $(CROSS_SYSROOT)/usr/include $(CROSS_CFLAGS_$(ARCH))" \
    LDFLAGS="-L$(CROSS_LIBDIR) -Wl,-rpath-link=$(CROSS_LIBDIR)"

.PHONY: cross-check-arch cross-setup cross-bins cross-unit cross-smoke cross-install cross-time64 cross-align \
        bench-cpu

cross-check-arch:
	@case "$(ARCH)" in arm64|armhf) ;; \
	    *) echo "make cross: ARCH must be arm64 or armhf (got '$(ARCH)')"; exit 2 ;; esac

cross-setup: cross-check-arch deps
	@tests/cross/setup.sh $(ARCH) $(CROSS_SYSROOT)

cross-bins: cross-setup
	@$(CROSS_SUBMAKE) test-bins
	@file $(CROSS_BUILD)/cacheparty | sed 's/, BuildID.*//'

cross-unit: cross-bins
	BUILD=$(CROSS_BUILD) CP_UNIT_EXEC="$(CROSS_EXEC)" $(PYTHON) tests/run_all.py --unit

cross-smoke: cross-bins
	@$(MAKE) --no-print-directory $(BUILD)/bench/origin
	tests/cross/smoke.sh "$(CROSS_EXEC) $(CROSS_BUILD)/cacheparty" $(BUILD)/bench/origin

cross-time64: cross-setup
	@if [ "$(ARCH)" = armhf ]; then \
	    $(CROSS_SUBMAKE) BUILD=$(CROSS_BUILD)/time64 \
	        CFLAGS="-isystem $(CROSS_SYSROOT)/usr/include -D_TIME_BITS=64" \
	        $(patsubst src/%.c,$(CROSS_BUILD)/time64/obj/%.o,$(SRCS)) \
	        $(patsubst tests/unit/%.c,$(CROSS_BUILD)/time64/tests/%.o,$(UNIT_SRC)) && \
	    echo "cross-time64: every source compiles with -D_TIME_BITS=64 (armhf, -Werror)"; fi

# The README's Pi install with the foreign binary: make install into a private root, the unit
# verified by systemd-analyze (where installed), the installed configuration accepted by the
# foreign binary (-t) under qemu-user.
CROSS_ROOT = $(CURDIR)/$(CROSS_BUILD)/root
cross-install: cross-bins
	@rm -rf $(CROSS_ROOT)
	@$(MAKE) --no-print-directory -s BUILD=$(CROSS_BUILD) PREFIX=$(CROSS_ROOT)/usr \
	    SYSCONFDIR=$(CROSS_ROOT)/etc install
	@file -L $(CROSS_ROOT)/usr/bin/cacheparty | grep -q "$(if $(filter arm64,$(ARCH)),ARM aarch64,32-bit.*ARM)" || \
	    { echo "cross-install: the installed binary is not the $(ARCH) one"; exit 1; }
	@if command -v systemd-analyze >/dev/null; then \
	    systemd-analyze verify $(CROSS_ROOT)/usr/lib/systemd/system/cacheparty.service && \
	    echo "cross-install: systemd-analyze verify: unit ok"; \
	else echo "cross-install: systemd-analyze not installed, unit not verified"; fi
	$(CROSS_EXEC) $(CROSS_ROOT)/usr/bin/cacheparty -t -c $(CROSS_ROOT)/etc/cacheparty/cacheparty.ini

cross: cross-unit cross-smoke cross-install cross-time64 cross-align
	@echo "cross: $(ARCH) unit tests and smoke test passed under $$(tests/cross/qemu-run.sh $(ARCH) / --version 2>/dev/null | head -n1 || true)"

# Native: every access checked for alignment (the Pi's armhf faults on some unaligned accesses,
# qemu-user never does). -fsanitize=undefined in `make asan` includes this check too; this build
# keeps the release -O2 and nothing else. (With the instrumentation, gcc 12 takes cache.c's
# wake_list(), which lends a local list head to the waiters it wakes and takes it back before
# returning, for a dangling pointer; that warning stays on in every other build.)
cross-align: deps
	@$(MAKE) --no-print-directory BUILD=build/align CI=true \
	    SANITIZE="-fsanitize=alignment -fno-sanitize-recover=alignment -Wno-dangling-pointer" \
	    build/align/cacheparty $(UNIT_SRC:tests/unit/%.c=build/align/tests/%) $(BUILD)/bench/origin
	BUILD=build/align UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(PYTHON) tests/run_all.py --unit
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 tests/cross/smoke.sh build/align/cacheparty \
	    $(BUILD)/bench/origin

bench-cpu: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	bench/cpu_budget.sh
