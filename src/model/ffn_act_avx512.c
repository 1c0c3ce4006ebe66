/* ffn_act_avx512.c — the FFN activations (ffn_act_impl.h) for AVX-512, 16 floats a vector. */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")
#define VW 16
#define SUFFIX avx512
#include "model/ffn_act_impl.h"
