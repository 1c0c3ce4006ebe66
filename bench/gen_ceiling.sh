#!/bin/sh
# bench/gen_ceiling.sh MODEL.gguf [--threads N] [--seconds S] — builds
# bench/gen_ceiling.c with qkv bench's roofline loops (cli/bench_roofline.c)
# into /tmp/qkv-gen_ceiling and runs it: a generated token's two ceilings,
# the weight-read roofline and the 1-token matmul's mix on weights in L2
# (see the .c). Needs build/libqkv.a (make).
#   bench/gen_ceiling.sh models/gemma-3-270m-q4_k_m.gguf --threads 2
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$top/build/libqkv.a" ] || { echo "gen_ceiling.sh: build/libqkv.a missing: run make" >&2; exit 2; }
out=/tmp/qkv-gen_ceiling
mkdir -p "$out"
cc -O3 -std=c11 -D_GNU_SOURCE -fopenmp -I"$top/include" -I"$top/src" -I"$top/cli" "$top/bench/gen_ceiling.c" \
    "$top/cli/bench_roofline.c" "$top/build/libqkv.a" -lm -pthread -o "$out/gen_ceiling"
exec "$out/gen_ceiling" "$@"
