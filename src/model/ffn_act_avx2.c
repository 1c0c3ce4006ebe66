/* ffn_act_avx2.c — the FFN activations (ffn_act_impl.h) for AVX2 with FMA, 8 floats a vector. */
#pragma GCC target("avx2,fma,f16c")
#define VW 8
#define SUFFIX avx2
#include "model/ffn_act_impl.h"
