# TLS passthrough (issue #9): its integration tests (tests/it/t01_tls.py) and bench/tls_bulk.sh
# drive `openssl s_server` / `s_client` as origin and client.
DEB_DEPS += openssl

.PHONY: bench-tls
# Bulk HTTPS download through the passthrough, side by side with a direct one (bench/README.md).
bench-tls: deps
	@$(MAKE) --no-print-directory all
	BUILD=$(BUILD) bench/tls_bulk.sh
