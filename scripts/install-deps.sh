#!/bin/sh
# install-deps.sh — the Debian packages qkv needs beyond gcc and make, installed
# only when missing (`make deps`; `make test` and `make demo` run it):
#   libpng-dev  qkv inspect --png encodes with libpng
#   unifont     GNU Unifont glyphs for the PNG's token labels (CJK included)
#   chromium    headless browser for the inspect page's test
#   python3     drives that browser test (standard library only)
#   openmpi-bin, libopenmpi-dev  mpicc and mpirun for libqkv_mpi and qkv-mpi (make mpi-test)
set -eu
need=""
[ -f /usr/include/png.h ] || need="$need libpng-dev"
[ -f /usr/share/unifont/unifont.hex ] || need="$need unifont"
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v python3 >/dev/null 2>&1 || need="$need python3"
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
