# cacheparty — plain GNU Makefile, out-of-tree build under build/.
# Targets (the one list): all run test asan bench conformance fuzz soak cross install uninstall clean
# deps

PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR    ?=
BUILD      ?= build
CC         ?= cc
PYTHON     ?= python3

# Debian packages the build and the tests need; `make deps` installs the missing ones
# (python3-fusepy and fuse3: the FUSE filesystem of the disk read-error tests, tests/it/eiofs.py).
DEB_DEPS := build-essential pkg-config libev-dev libhttp-parser-dev libinih-dev libcmocka-dev \
            libc-ares-dev libxxhash-dev libjansson-dev libmd-dev zlib1g-dev python3 clang-format curl valgrind \
            python3-fusepy fuse3
# The real servers tests start themselves: the resolvers tests/it/b20_dns_servers.py loads
# `cacheparty dns` into, and the nginx that tests/it/b21_lancache.py fills a lancache cache with;
# tests/deps-servers.sh installs them with none of their services enabled or running.
DEB_SERVERS := dnsmasq-base unbound bind9 nginx
# For the tests only (`make test`, never `make run` nor the build): the real browser of
# tests/it/b24_dashboard_browser.py and the chart library the dashboard uses when installed.
DEB_TEST_ONLY := chromium chromium-driver libjs-chart.js
# Servers for the tests only, installed as DEB_SERVERS are (none of their services enabled or
# running): the HAProxy that tests/it/n01_haproxy.py starts from conf/haproxy.cfg.
DEB_TEST_SERVERS := haproxy

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla \
        -Wpointer-arith -Wcast-align
ifneq ($(CI),)
WARN += -Werror
endif

PKG_CFLAGS = $(shell pkg-config --cflags libcares inih jansson 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs libcares inih jansson 2>/dev/null)
CMOCKA_LIBS = $(shell pkg-config --libs cmocka 2>/dev/null)

OPT      ?= -O2
SANITIZE ?=
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DSYSCONFDIR_STR='"$(SYSCONFDIR)"' \
             $(OPT) -g $(WARN) $(SANITIZE) \
             -Iinclude -Isrc $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(SANITIZE) $(LDFLAGS)
LIBS_ALL = -lev -lhttp_parser -lxxhash -lmd -lz $(PKG_LIBS) -lm

SRCS     := $(wildcard src/*.c)
OBJS     := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
LIBOBJS  := $(filter-out $(BUILD)/obj/main.o,$(OBJS)) $(BUILD)/obj/dashboard_page.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)

.SECONDARY:

.PHONY: all run test asan bench fuzz soak cross install uninstall clean deps deps-test unit it check-headers \
        check-format check-layers test-bins

all: $(BUILD)/cacheparty

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

# The dashboard page (include/dashboard.h), its bytes as a C array.
$(BUILD)/gen/dashboard_page.c: src/dashboard.html
	@mkdir -p $(@D)
	@{ echo '/* generated from src/dashboard.html by the Makefile: do not edit */'; \
	  echo '#include "dashboard.h"'; echo 'const unsigned char dashboard_html[] = {'; \
	  od -An -v -tx1 $< | sed 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '};'; \
	  echo 'const size_t dashboard_html_len = sizeof(dashboard_html);'; } > $@

$(BUILD)/obj/dashboard_page.o: $(BUILD)/gen/dashboard_page.c include/dashboard.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libcacheparty.a: $(LIBOBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/cacheparty: $(BUILD)/obj/main.o $(BUILD)/libcacheparty.a
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ALL)

# Unit tests: one cmocka binary per module. Extra link flags (e.g. -Wl,--wrap=...) for a test
# come from a first-line comment "/* LDFLAGS: ... */" in its source.
$(BUILD)/tests/%.o: tests/unit/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(BUILD)/libcacheparty.a
	$(CC) $(LDFLAGS_ALL) $(shell sed -n '1s|^/\* LDFLAGS: \(.*\) \*/$$|\1|p' tests/unit/test_$*.c) \
	    -o $@ $< $(BUILD)/libcacheparty.a $(LIBS_ALL) $(CMOCKA_LIBS)

$(BUILD)/bench/%: bench/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< -lev $(LDFLAGS_ALL) -lm

# Test helpers built on the library (tests/tools: plant writes chunk files for it/b26_bounds).
$(BUILD)/tests/tools/%: tests/tools/%.c $(BUILD)/libcacheparty.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< $(BUILD)/libcacheparty.a $(LDFLAGS_ALL) $(LIBS_ALL)

test-bins: $(BUILD)/cacheparty $(UNIT_BIN) $(BENCH_BIN) $(TOOL_BIN)

# Installs whatever Debian package is missing (through sudo when not root); silent when all present.
deps:
	@missing=""; for p in $(DEB_DEPS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing build dependencies:$$missing"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@if ! sh tests/deps-servers.sh --check $(DEB_SERVERS); then \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO sh tests/deps-servers.sh $(DEB_SERVERS); \
	fi

deps-test:
	@missing=""; for p in $(DEB_TEST_ONLY); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing test dependencies:$$missing"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@if ! sh tests/deps-servers.sh --check $(DEB_TEST_SERVERS); then \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO sh tests/deps-servers.sh $(DEB_TEST_SERVERS); \
	fi

run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p var/cache var/log
	@echo "cacheparty on http://127.0.0.1:8080 (TLS passthrough on 127.0.0.1:8443) — try: curl -v -H 'Host: example.org' http://127.0.0.1:8080/lancache-heartbeat"
	exec $(BUILD)/cacheparty -c conf/local.ini

# The fuzzers run here in a bounded short form (the checked-in seeds and regression inputs, then
# 5 s per target); .ci/run gives them 30 s each and `make fuzz` 10 minutes.
test: deps deps-test
	@$(MAKE) --no-print-directory test-bins
	@$(MAKE) --no-print-directory check-headers check-format check-layers
	@$(MAKE) --no-print-directory fuzz FUZZ_TIME=5
	BUILD=$(BUILD) $(PYTHON) tests/run_all.py

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan OPT=-O1 \
	    SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    test-bins
	BUILD=build/asan CP_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(PYTHON) tests/run_all.py

# Every public header compiles on its own: it includes what it uses.
check-headers:
	@mkdir -p $(BUILD)/hdr
	@for h in include/*.h; do \
	    printf '#include "%s"\n' $$(basename $$h) > $(BUILD)/hdr/t.c; \
	    $(CC) $(CFLAGS_ALL) -fsyntax-only $(BUILD)/hdr/t.c || { echo "header not self-contained: $$h"; exit 1; }; \
	done

# No include cycle between modules of src/ and include/, and every include points down the layer
# order written at the top of tests/check_layers.py (which also says how to read its output).
# LAYERS_ALLOW="a->b ..." exempts edges while they are being removed. Part of `make test`.
LAYERS_ALLOW ?=
check-layers:
	@$(PYTHON) tests/check_layers.py $(foreach e,$(LAYERS_ALLOW),--allow '$(e)')

# Formatting follows the checked-in .clang-format.
FORMAT_SRC = $(wildcard src/*.c src/*.h include/*.h tests/unit/*.c tests/tools/*.c bench/*.c bench/*.h)
check-format:
	@clang-format --dry-run --Werror $(FORMAT_SRC) || \
	    { echo "formatting differs from .clang-format: run clang-format -i on the files above"; exit 1; }
	@echo "format: $(words $(FORMAT_SRC)) files clean"

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	bench/run.sh

# Installs the binary, the configuration (never overwriting one that exists) and the systemd unit;
# nothing else outside DESTDIR. The cache and log directories come from the unit.
BINDIR  = $(PREFIX)/bin
UNITDIR = $(PREFIX)/lib/systemd/system
install: $(BUILD)/cacheparty
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/cacheparty $(DESTDIR)$(UNITDIR)
	install -m 755 $(BUILD)/cacheparty $(DESTDIR)$(BINDIR)/cacheparty
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/cacheparty/cacheparty.ini ]; then \
	    echo "keeping existing $(DESTDIR)$(SYSCONFDIR)/cacheparty/cacheparty.ini"; \
	else install -m 644 conf/cacheparty.ini $(DESTDIR)$(SYSCONFDIR)/cacheparty/cacheparty.ini; fi
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' conf/cacheparty.service.in \
	    > $(DESTDIR)$(UNITDIR)/cacheparty.service
	chmod 644 $(DESTDIR)$(UNITDIR)/cacheparty.service

# Removes what install wrote, except the configuration (it may hold your edits).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/cacheparty $(DESTDIR)$(UNITDIR)/cacheparty.service

clean:
	rm -rf build

# Long-run targets (fuzz, soak, cross) and their extra dependencies live in mk/*.mk.
include $(wildcard mk/*.mk)

-include $(OBJS:.o=.d) $(UNIT_BIN:%=%.d) $(BENCH_BIN:%=%.d) $(TOOL_BIN:%=%.d)
