/* overview_avx2.c — the overview's score tile (overview_impl.h) for AVX2 + FMA, 8 floats a vector. */
#pragma GCC target("avx2,fma,f16c")
#define VW 8
#define SUFFIX avx2
#include "probe/overview_impl.h"
