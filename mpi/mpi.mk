# mpi/mpi.mk — libqkv_mpi, qkv-mpi and their tests (included by the Makefile).
# Built only by `make mpi` / `make mpi-test`: the core build never needs MPI.
# Open MPI (Debian openmpi-bin, libopenmpi-dev) comes from `make deps`.
MPICC    ?= mpicc
MPIRUN   ?= mpirun
MPI_SRC      := $(sort $(wildcard mpi/*.c))
MPI_CLI_SRC  := $(sort $(wildcard mpi/cli/*.c))
MPI_TEST_SRC := $(sort $(wildcard mpi/tests/test_*.c))
MPI_OBJ      := $(MPI_SRC:%.c=$(BUILD)/%.o)
MPI_CLI_OBJ  := $(MPI_CLI_SRC:%.c=$(BUILD)/%.o)
MPI_TEST_OBJ := $(MPI_TEST_SRC:%.c=$(BUILD)/%.o)
# the CLI helpers qkv-mpi shares with qkv: flag tables, errors, the .npy and prompt loaders
MPI_CLI_SHARED := $(BUILD)/cli/dispatch.o $(BUILD)/cli/flags.o $(BUILD)/cli/util.o $(BUILD)/cli/outputs.o $(BUILD)/cli/cmd_attend.o \
                  $(BUILD)/cli/prompt.o $(BUILD)/cli/progress.o
MPI_CFLAGS = $(ALL_CFLAGS) -Impi -Icli -Irender

.PHONY: mpi mpi-test mpi-check-tools
mpi-check-tools:
	@command -v $(MPICC) >/dev/null 2>&1 || { echo "mpi: $(MPICC) not found (Open MPI: run make deps)" >&2; exit 1; }
	@command -v $(MPIRUN) >/dev/null 2>&1 || { echo "mpi: $(MPIRUN) not found (Open MPI: run make deps)" >&2; exit 1; }

mpi: mpi-check-tools $(BUILD)/libqkv_mpi.a $(BUILD)/qkv-mpi $(BUILD)/mpi/qkv-mpi-check $(BUILD)/mpi/qkv-mpi-test

$(BUILD)/mpi/%.o: mpi/%.c $(FLAGS_FILE) | mpi-check-tools
	@mkdir -p $(dir $@)
	@echo "mpicc $<"
	@$(MPICC) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/libqkv_mpi.a: $(MPI_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/qkv-mpi: $(MPI_CLI_OBJ) $(MPI_CLI_SHARED) $(BUILD)/libqkv_mpi.a $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a
	$(MPICC) -o $@ $(MPI_CLI_OBJ) $(MPI_CLI_SHARED) $(BUILD)/libqkv_mpi.a $(BUILD)/libqkv_render.a $(BUILD)/libqkv.a \
	    $(LDLIBS)

$(BUILD)/mpi/qkv-mpi-check: $(BUILD)/mpi/tests/check.o $(BUILD)/libqkv_mpi.a $(BUILD)/libqkv.a
	$(MPICC) -o $@ $< $(BUILD)/libqkv_mpi.a $(BUILD)/libqkv.a $(LDLIBS)

# the runner of tests/ (tests/main.c) with the tests of mpi/tests/test_*.c
$(BUILD)/mpi/qkv-mpi-test: $(MPI_TEST_OBJ) $(BUILD)/tests/main.o $(BUILD)/libqkv.a
	$(CC) -o $@ $(MPI_TEST_OBJ) $(BUILD)/tests/main.o $(BUILD)/libqkv.a $(LDLIBS)

$(BUILD)/mpi/tests/test_%.o: ALL_CFLAGS += -Itests

# Runs the MPI tests; fails (never skips) when Open MPI is missing.
mpi-test: mpi $(BUILD)/qkv
	QKV_BIN=$(BUILD)/qkv QKV_MPI_BIN=$(BUILD)/qkv-mpi QKV_MPI_CHECK=$(BUILD)/mpi/qkv-mpi-check \
	    QKV_MPIRUN="$$(command -v $(MPIRUN))" ./$(BUILD)/mpi/qkv-mpi-test $(TESTS)

-include $(MPI_OBJ:.o=.d) $(MPI_CLI_OBJ:.o=.d) $(MPI_TEST_OBJ:.o=.d) $(BUILD)/mpi/tests/check.d
