/* tanh_poly.h — the split point and polynomial of qkv's float tanh
 * (attn/internal.h says why each; tools/tanh_poly.py made them): used by
 * util/vmath.h's vtanh and its readable twin attn_tanhf (attn/softcap.c). */
#ifndef QKV_UTIL_TANH_POLY_H
#define QKV_UTIL_TANH_POLY_H

#define UTIL_TANH_SMALL 0.625f
#define UTIL_TANH_P0 -0.3333328068256378f
#define UTIL_TANH_P1 0.13331441581249237f
#define UTIL_TANH_P2 -0.05373971536755562f
#define UTIL_TANH_P3 0.0206390880048275f
#define UTIL_TANH_P4 -0.005704987328499556f

#endif
