#!/bin/sh
# bench/tile_ab.sh REV [D G n kv_dtype rounds [lq]] — the flash inner loop of git
# revision REV (A) against the work tree's (B), one thread, in one process
# (bench/tile_ab.c): causal prefill, or with lq <= 8 a decode step. Builds in
# /tmp/qkv-tile-ab; needs build/libqkv.a (make).
#   bench/tile_ab.sh HEAD~1 128 4 2048 f32 8        prefill, n = 2048
#   bench/tile_ab.sh HEAD~1 64 3 512 bf16 8 1       decode, 512 keys
set -eu
[ $# -ge 1 ] || { echo "tile_ab.sh: usage: tile_ab.sh REV [D G n kv_dtype rounds [lq]]" >&2; exit 2; }
rev=$1; shift
top=$(git rev-parse --show-toplevel)
out=/tmp/qkv-tile-ab
rm -rf "$out" && mkdir -p "$out/A/attn"
git -C "$top" show "$rev:src/attn/tile_impl.h" > "$out/A/attn/tile_impl.h" || { echo "tile_ab.sh: no tile_impl.h at $rev" >&2; exit 2; }
[ -f "$top/build/libqkv.a" ] || { echo "tile_ab.sh: build/libqkv.a missing: run make" >&2; exit 2; }
flags="-O3 -std=c11 -D_GNU_SOURCE -ffp-contract=fast -I$top/include"
# the AVX2 tiles of each tree (attn/internal.h from the work tree for both)
for v in A B; do
    src=$([ $v = A ] && echo "$out/A" || echo "$top/src")
    printf '#pragma GCC target("avx2,fma,f16c")\n#define VW 8\n#define SUFFIX %s\n#include "attn/tile_impl.h"\n' $v > "$out/tile_$v.c"
    cc $flags -I"$src" -I"$top/src" -c "$out/tile_$v.c" -o "$out/tile_$v.o"
done
cc $flags -I"$top/src" "$top/bench/tile_ab.c" "$out/tile_A.o" "$out/tile_B.o" "$top/build/libqkv.a" -lm -pthread -o "$out/tile_ab"
exec "$out/tile_ab" "$@"
