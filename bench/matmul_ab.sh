#!/bin/sh
# bench/matmul_ab.sh REV [isa [tokens [type [rounds]]]] — the matmul kernels of
# git revision REV (A) against the work tree's (B), one thread, in one process
# (bench/matmul_ab.c): one decode step's matrix-vector products of a
# SmolLM2-shaped model (MODEL=gemma: Gemma-3-270M's, needed by the K-quants).
# isa: avx512, avx2 or scalar (default avx512); LAYERS=1 in the
# environment keeps the weights in cache. Builds in /tmp/qkv-matmul_ab (ab_build.sh); needs
# build/libqkv.a (make).
#   bench/matmul_ab.sh HEAD avx512 1 q4_1 20
#   MODEL=gemma LAYERS=18 bench/matmul_ab.sh HEAD avx512 1 q5_0 20
set -eu
[ $# -ge 1 ] || { echo "matmul_ab.sh: usage: matmul_ab.sh REV [avx512|avx2] [tokens] [type] [rounds]" >&2; exit 2; }
rev=$1; isa=${2:-avx512}
shift; [ $# -ge 1 ] && shift
case $isa in
avx512) target='avx512f,avx512bw,avx512dq,avx512vl,fma,f16c'; vw=16 ;;
avx2) target='avx2,fma,f16c'; vw=8 ;;
scalar) target='sse2'; vw=4 ;;
*) echo "matmul_ab.sh: isa '$isa' is not avx512, avx2 or scalar" >&2; exit 2 ;;
esac
. "$(dirname "$0")/ab_build.sh"
ab_build matmul_ab "$rev" model/matmul_impl.h "$target" $vw
exec /tmp/qkv-matmul_ab/matmul_ab "$@"
