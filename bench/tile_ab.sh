#!/bin/sh
# bench/tile_ab.sh REV [D G n kv_dtype rounds [lq]] — the flash inner loop of git
# revision REV (A) against the work tree's (B), one thread, in one process
# (bench/tile_ab.c, built by ab_build.sh): causal prefill, or with lq <= 8 a decode step. Builds in
# /tmp/qkv-tile_ab; needs build/libqkv.a (make). The AVX2 tiles, or with
# TILE_AB_ISA=avx512 the AVX-512 ones.
#   bench/tile_ab.sh HEAD~1 128 4 2048 f32 8        prefill, n = 2048
#   bench/tile_ab.sh HEAD~1 64 3 512 bf16 8 1       decode, 512 keys
set -eu
[ $# -ge 1 ] || { echo "tile_ab.sh: usage: tile_ab.sh REV [D G n kv_dtype rounds [lq]]" >&2; exit 2; }
rev=$1; shift
. "$(dirname "$0")/ab_build.sh"
case ${TILE_AB_ISA:-avx2} in
avx2) ab_build tile_ab "$rev" attn/tile_impl.h avx2,fma,f16c 8 -ffp-contract=fast ;;
avx512) ab_build tile_ab "$rev" attn/tile_impl.h avx512f,avx512bw,avx512dq,avx512vl,fma,f16c 16 -ffp-contract=fast ;;
*) echo "tile_ab.sh: TILE_AB_ISA is avx2 or avx512" >&2; exit 2 ;;
esac
exec /tmp/qkv-tile_ab/tile_ab "$@"
