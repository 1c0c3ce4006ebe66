/* overview_avx512.c — the overview's score tile (overview_impl.h) for AVX-512, 16 floats a vector. */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")
#define VW 16
#define SUFFIX avx512
#include "probe/overview_impl.h"
