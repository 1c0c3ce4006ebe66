/*
 * pattern_view.h — a hook_pattern activation made by hand, for tests that
 * feed a probe's hook (qkv_inspect_hook, qkv_sinks_hook) hand-made layers
 * instead of a model's: what the forward pass hands it, built from q, the
 * kernel's LSE, a KV cache and the attention call's descriptor.
 */
#ifndef QKV_TESTS_PATTERN_VIEW_H
#define QKV_TESTS_PATTERN_VIEW_H

#include "model/internal.h"

/* a <- layer's hook_pattern over view v (filled here); n rows at pos0.
 *   q: [Hq, n, D] rotated   lse: [Hq, n]   d: the call (q_len n, kv_len pos0 + n) */
static inline void test_pattern_activation(qkv_activation *a, qkv_attn_view *v, int layer, const float *q,
                                           const float *lse, int n, int pos0, const qkv_kv_cache *cache,
                                           const qkv_attn_desc *d) {
    *v = (qkv_attn_view){.q = q, .lse = lse, .cache = cache, .desc = *d};
    *a = (qkv_activation){.point = QKV_HOOK_PATTERN, .layer = layer, .pos0 = pos0, .ndim = 3,
                          .shape = {d->n_q_head, n, (int64_t)pos0 + n}, .attn = v};
}

#endif
