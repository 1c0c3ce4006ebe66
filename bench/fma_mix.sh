#!/bin/sh
# bench/fma_mix.sh [--threads N] [--seconds S] [--slice S] [--isa avx512|avx2] —
# builds bench/fma_mix.c with qkv bench's roofline loops (cli/bench_roofline.c)
# into /tmp/qkv-fma_mix and runs it: the FMA peak's register-only loop against
# the flash micro-kernels' instruction mix, in turns, per ISA (see the .c).
# Needs build/libqkv.a (make).
#   nice -n -20 bench/fma_mix.sh --threads 2 --seconds 20
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$top/build/libqkv.a" ] || { echo "fma_mix.sh: build/libqkv.a missing: run make" >&2; exit 2; }
out=/tmp/qkv-fma_mix
mkdir -p "$out"
cc -O3 -std=c11 -D_GNU_SOURCE -fopenmp -I"$top/include" -I"$top/src" -I"$top/cli" "$top/bench/fma_mix.c" "$top/cli/bench_roofline.c" \
    "$top/build/libqkv.a" -lm -pthread -o "$out/fma_mix"
exec "$out/fma_mix" "$@"
