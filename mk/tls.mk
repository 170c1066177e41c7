# TLS passthrough (issue #9): its integration tests (tests/it/t01_tls.py) and bench/tls_bulk.sh
# drive `openssl s_server` / `s_client` as origin and client.
DEB_DEPS += openssl

.PHONY: bench-tls
# Bulk HTTPS download through the passthrough, side by side with a direct one and with nginx's
# stream proxy (ssl_preread) as the peer (bench/README.md). The peer's packages are installed here,
# never by `make deps`: only the benchmark needs them.
bench-tls: deps
	@$(MAKE) --no-print-directory all
	@missing=""; for p in nginx libnginx-mod-stream; do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	        --no-install-recommends $$missing || echo "bench-tls: no nginx peer ($$missing)"; \
	fi
	BUILD=$(BUILD) bench/tls_bulk.sh
