/*
 * unembed.c — the model's last step seen from outside: the final norm's
 * weight and the unembedding tensor, for probes that project a residual
 * direction onto the logits themselves (direct logit attribution).
 */
#include "model/state.h"

const float *qkv_model_final_norm_weight(const qkv_model *m) {
    return m->weights->norm_w + (size_t)(2 * m->cfg.n_layer) * m->cfg.n_embd; /* [2L + 1, E]: output_norm last */
}

const qkv_gguf_tensor *qkv_model_unembedding(const qkv_model *m) { return m->weights->output; }
