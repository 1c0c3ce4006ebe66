/* tile_avx512bf16.c — the flash inner loop (tile_impl.h) for AVX-512 with
 * AVX512_BF16: the f32 paths as in tile_avx512.c, plus the bf16 dot-product
 * block path (tile_bf16dot.h) the flash-bf16 kernel runs. */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,f16c")
#define VW 16
#define SUFFIX avx512bf16
#define ATTN_BF16DOT 1
#include "attn/tile_impl.h"
