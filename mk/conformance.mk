# HTTP conformance (issue #16): the HTTP cache test suite, npm package http-cache-tests at the
# version and dependency tree pinned by tests/conformance/package-lock.json, run through the daemon
# on loopback by tests/conformance/run.py. docs/conformance.md says how to read what it prints.
# The suite is installed with `npm ci` under $(BUILD)/conformance/suite (never globally, never into
# the source tree), once: the npm registry is the only network it needs, at install time only.
# Node and npm come from Debian's packages when missing, or when node is older than the suite's
# engines field (node >= 14.8.0).
#   CONFORMANCE_ID=TEST_ID   run that one test and print both sides' requests and answers
#   CONFORMANCE_TIMEOUT=SEC  the whole run's bound (default 600; the suite itself gets 300 s)

CONFORMANCE_DIR     = $(BUILD)/conformance
CONFORMANCE_SUITE   = $(CONFORMANCE_DIR)/suite
CONFORMANCE_PKG     = $(CONFORMANCE_SUITE)/node_modules/http-cache-tests
CONFORMANCE_TIMEOUT ?= 600
CONFORMANCE_ID      ?=
CONFORMANCE_NODE_MIN := 14.8.0

.PHONY: conformance conformance-node

# Exits non-zero when node stays missing or too old after the install.
conformance-node:
	@node_ok() { v=$$(node -p process.versions.node 2>/dev/null) && \
	    [ "$$(printf '%s\n' $(CONFORMANCE_NODE_MIN) "$$v" | sort -V | head -n1)" = $(CONFORMANCE_NODE_MIN) ]; }; \
	SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	if ! node_ok; then \
	    echo "installing Debian's nodejs (node missing or older than $(CONFORMANCE_NODE_MIN))"; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs; \
	    node_ok || { echo "node $(CONFORMANCE_NODE_MIN) or later is needed: $$(node --version 2>&1)"; exit 1; }; \
	fi; \
	if ! command -v npm >/dev/null 2>&1; then \
	    echo "installing Debian's npm"; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends npm; \
	fi

$(CONFORMANCE_SUITE)/.installed: tests/conformance/package.json tests/conformance/package-lock.json
	@$(MAKE) --no-print-directory conformance-node
	rm -rf $(CONFORMANCE_SUITE)
	mkdir -p $(CONFORMANCE_SUITE)
	cp tests/conformance/package.json tests/conformance/package-lock.json $(CONFORMANCE_SUITE)/
	cd $(CONFORMANCE_SUITE) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

conformance: deps
	@$(MAKE) --no-print-directory conformance-node
	@$(MAKE) --no-print-directory $(BUILD)/cacheparty $(CONFORMANCE_SUITE)/.installed
	timeout --kill-after=20 $(CONFORMANCE_TIMEOUT) $(PYTHON) tests/conformance/run.py \
	    --suite $(CONFORMANCE_PKG) --build $(BUILD) --out $(CONFORMANCE_DIR) \
	    $(if $(CONFORMANCE_ID),--id $(CONFORMANCE_ID))
