# Fuzzing (issue #7): every fuzz/fuzz_<name>.c is a libFuzzer target (it defines
# LLVMFuzzerTestOneInput) linked against the project's sources other than main.c, all built with
# clang under ASan+UBSan into $(BUILD)/fuzz/.
#   make fuzz                 each target FUZZ_TIME seconds (default 600), one after the other,
#                             from fuzz/corpus/<name>/ (seeds, checked in) plus a work corpus in
#                             $(BUILD)/fuzz/corpus/<name>/; a crash fails the target and leaves
#                             its input in $(BUILD)/fuzz/crash-<name>-*
#   make fuzz FUZZ_TIME=30    the bounded short form .ci/run uses
#   make fuzz-regress         replays fuzz/corpus/<name>/ and fuzz/regress/<name>/ (found crashes,
#                             kept as regression inputs) once through every target
#   make fuzz-bins            builds the targets only
# FUZZ_JOBS=N runs N targets at once (default 1); FUZZ_MAX_LEN caps input length (70000).

DEB_DEPS += clang libclang-rt-14-dev

FUZZ_CC     ?= clang
FUZZ_TIME   ?= 600
FUZZ_JOBS   ?= 1
# Heads reach their 32 KiB / 64 KiB limits only with inputs longer than libFuzzer's default 4096.
FUZZ_MAX_LEN ?= 70000
FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DSYSCONFDIR_STR='"$(SYSCONFDIR)"' \
               -O1 -g $(WARN) $(FUZZ_SAN) -Iinclude -Isrc $(PKG_CFLAGS)
FUZZ_SRC    := $(wildcard fuzz/fuzz_*.c)
FUZZ_NAMES  := $(FUZZ_SRC:fuzz/fuzz_%.c=%)
FUZZ_BIN    := $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)
FUZZ_OBJS   := $(LIBOBJS:$(BUILD)/obj/%.o=$(BUILD)/fuzz/obj/%.o)

FORMAT_SRC += $(wildcard fuzz/*.c)

.PHONY: fuzz fuzz-bins fuzz-regress

$(BUILD)/fuzz/obj/%.o: src/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(BUILD)/fuzz/obj/dashboard_page.o: $(BUILD)/gen/dashboard_page.c include/dashboard.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/fuzz/libcacheparty-fuzz.a: $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c $(BUILD)/fuzz/libcacheparty-fuzz.a
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -o $@ $< \
	    $(BUILD)/fuzz/libcacheparty-fuzz.a $(LIBS_ALL)

fuzz-bins: deps
	@$(MAKE) --no-print-directory $(FUZZ_BIN)

# Replays the seeds and the regression inputs: any crash among them fails.
fuzz-regress: fuzz-bins
	@set -e; for n in $(FUZZ_NAMES); do \
	    dirs=""; for d in fuzz/corpus/$$n fuzz/regress/$$n; do [ -d $$d ] && dirs="$$dirs $$d"; done; \
	    [ -n "$$dirs" ] || continue; \
	    files=$$(find $$dirs -type f | sort); [ -n "$$files" ] || continue; \
	    echo "fuzz-regress $$n: $$(echo "$$files" | wc -l) inputs"; \
	    $(BUILD)/fuzz/fuzz_$$n -runs=0 $$files >$(BUILD)/fuzz/regress-$$n.log 2>&1 || \
	        { tail -40 $(BUILD)/fuzz/regress-$$n.log; echo "fuzz-regress $$n: FAILED"; exit 1; }; \
	done

# Each target for FUZZ_TIME seconds; the summary line per target gives its executions.
fuzz: fuzz-regress
	@mkdir -p $(BUILD)/fuzz/logs
	@printf '%s\n' $(FUZZ_NAMES) | xargs -P $(FUZZ_JOBS) -I{} sh -c '\
	    n={}; mkdir -p $(BUILD)/fuzz/corpus/$$n; \
	    seeds=""; [ -d fuzz/corpus/$$n ] && seeds=fuzz/corpus/$$n; \
	    dict=""; [ -f fuzz/$$n.dict ] && dict=-dict=fuzz/$$n.dict; \
	    log=$(BUILD)/fuzz/logs/$$n.log; \
	    if $(BUILD)/fuzz/fuzz_$$n -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	        -max_len=$(FUZZ_MAX_LEN) \
	        -print_final_stats=1 $$dict -artifact_prefix=$(BUILD)/fuzz/crash-$$n- \
	        $(BUILD)/fuzz/corpus/$$n $$seeds >$$log 2>&1; then \
	        echo "fuzz $$n: ok, $$(sed -n "s/^stat::number_of_executed_units: *//p" $$log) executions in $(FUZZ_TIME) s"; \
	    else tail -60 $$log; echo "fuzz $$n: FAILED (input in $(BUILD)/fuzz/crash-$$n-*)"; exit 1; fi'

-include $(FUZZ_OBJS:.o=.d) $(FUZZ_BIN:%=%.d)
