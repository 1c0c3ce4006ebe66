/* matmul_avx512.c — the matmul kernels (matmul_impl.h) for AVX-512, 16 floats a vector. */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")
#define VW 16
#define SUFFIX avx512
#include "model/matmul_impl.h"
