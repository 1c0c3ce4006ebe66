#!/bin/sh
# install-deps.sh — the Debian packages qkv needs beyond gcc and make, installed
# only when missing (`make deps`; `make test` and `make demo` run it):
#   unifont     GNU Unifont glyphs for the PNG's token labels (CJK included)
#   chromium    headless browser for the inspect page's test
#   chromium-driver  chromedriver, through which Selenium drives chromium in the serve page's test
#   fonts-noto-cjk   a CJK font (Noto Sans CJK), so the pages show 年假怎么申请？ as characters, not boxes
#   python3     drives that browser test (standard library only)
#   python3-venv, python3-dev  `make pytest` builds the Python package in a venv
#               (Debian splits ensurepip and Python.h out of python3)
#   valgrind    the CLI smoke tests under memcheck (tests/test_valgrind.c)
#   libcivetweb-dev  CivetWeb, the HTTP server of `qkv serve` (and the HTTP client
#               of its API tests); linked by the qkv binary only, not libqkv
#   libcjson-dev     cJSON, which parses `qkv serve`'s JSON request bodies
# and with FUZZ=1 (make fuzz) the libFuzzer toolchain:
#   clang libclang-rt-14-dev
#   openmpi-bin, libopenmpi-dev  mpicc and mpirun for libqkv_mpi and qkv-mpi (make mpi-test)
set -eu
need=""
command -v valgrind >/dev/null 2>&1 || need="$need valgrind"
if [ "${FUZZ:-0}" = 1 ]; then
    command -v clang >/dev/null 2>&1 || need="$need clang"
    [ -n "$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] ||
        need="$need libclang-rt-14-dev"
fi
[ -f /usr/share/unifont/unifont.hex ] || need="$need unifont"
[ -f /usr/include/civetweb.h ] || need="$need libcivetweb-dev"
[ -f /usr/include/cjson/cJSON.h ] || need="$need libcjson-dev"
command -v chromium >/dev/null 2>&1 || need="$need chromium"
[ -x /usr/bin/chromedriver ] || need="$need chromium-driver"
[ -f /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc ] || need="$need fonts-noto-cjk"
command -v python3 >/dev/null 2>&1 || need="$need python3"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import ensurepip' 2>/dev/null || need="$need python3-venv"
    python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
        2>/dev/null || need="$need python3-dev"
else
    need="$need python3-venv python3-dev"
fi
command -v mpirun >/dev/null 2>&1 || need="$need openmpi-bin"
command -v mpicc >/dev/null 2>&1 || need="$need libopenmpi-dev"
[ -n "$need" ] || exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing Debian packages:$need (run: sudo apt-get install$need)" >&2
    exit 1
fi
echo "install-deps: installing$need"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
