# Crash-consistency soak (issue #7): tests/soak/soak.py fills the cache from the bench origin
# through the daemon while kill -9-ing and restarting it and damaging chunk files between runs;
# every byte served is verified. SOAK_CYCLES=N (default 100), SOAK_SEED=S to replay a run.
# A 5-cycle form runs in `make test` (tests/it/x01_soak_short.py).

SOAK_CYCLES ?= 100
SOAK_SEED   ?=

.PHONY: soak

soak: deps
	@$(MAKE) --no-print-directory $(BUILD)/cacheparty $(BUILD)/bench/origin
	BUILD=$(BUILD) SOAK_CYCLES=$(SOAK_CYCLES) SOAK_SEED=$(SOAK_SEED) $(PYTHON) tests/soak/soak.py
