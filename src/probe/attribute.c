/*
 * attribute.c — direct logit attribution (qkv/probe.h, "probe: attribute"). One
 * forward call keeps, at the last position, the embedding, every layer's
 * attention and MLP outputs (and hook_z for the heads) and the final
 * residual; each part is then projected onto g * (W_U[answer] -
 * W_U[wrong]) with the run's final RMS scale frozen. A head's part goes
 * through its columns of W_O (qkv_model_head_result) and the unembedding
 * rows through the model's own tensor and dequantiser, never a copy. It
 * does not decide what a part means.
 */
#include "qkv/probe.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The last position's rows of one forward call. */
typedef struct {
    int last, E, QD;
    float *embed;       /* [E] hook_embed */
    float *z;           /* [L, QD] attn.hook_z, or NULL */
    float *attn, *mlp;  /* [L, E] hook_attn_out, hook_mlp_out */
    float *x;           /* [E] hook_resid_post of the last layer */
    float *normed;      /* [E] ln_final.hook_normalized: x / rms(x), before the weight */
    int n_layer;
} last_rows;

static qkv_status keep_last(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    last_rows *r = user;
    const int64_t width = a->ndim == 3 ? a->shape[1] * a->shape[2] : a->shape[1];
    const float *row = a->data + (size_t)r->last * width;
    float *dst = NULL;
    switch (a->point) {
    case QKV_HOOK_EMBED: dst = r->embed; break;
    case QKV_HOOK_Z: dst = r->z + (size_t)a->layer * r->QD; break;
    case QKV_HOOK_ATTN_OUT: dst = r->attn + (size_t)a->layer * r->E; break;
    case QKV_HOOK_MLP_OUT: dst = r->mlp + (size_t)a->layer * r->E; break;
    case QKV_HOOK_RESID_POST: dst = a->layer == r->n_layer - 1 ? r->x : NULL; break;
    case QKV_HOOK_LN_FINAL: dst = r->normed; break;
    default: break;
    }
    if (dst) memcpy(dst, row, (size_t)width * sizeof(float));
    return QKV_OK;
}

/* s * sum_i c[i] w[i]: a part through the frozen final norm and the
 * unembedding difference (w = g * u).   c, w: [E] */
static double part(const float *c, const double *w, int E, double s) {
    double acc = 0;
    for (int i = 0; i < E; i++) acc += (double)c[i] * w[i];
    return s * acc;
}

/* The index of the largest x[i] other than skip (-1: none), lowest on ties. */
static int32_t top_except(const float *x, int V, int32_t skip) {
    int32_t best = -1;
    for (int32_t i = 0; i < V; i++)
        if (i != skip && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

/* u[E] <- W_U[a] - W_U[w] in double, the rows dequantised as the forward's matmul reads them. */
static qkv_status unembed_diff(double *u, float *row, const qkv_model *m, int32_t a, int32_t w, qkv_error *err) {
    const qkv_gguf_tensor *out = qkv_model_unembedding(m);
    const int E = qkv_model_get_config(m)->n_embd;
    const size_t bytes = qkv_ggml_row_size(out->type, E);
    qkv_status st = qkv_dequantize(row, (const char *)out->data + (size_t)a * bytes, out->type, E, err);
    if (st) return st;
    for (int i = 0; i < E; i++) u[i] = row[i];
    if ((st = qkv_dequantize(row, (const char *)out->data + (size_t)w * bytes, out->type, E, err))) return st;
    for (int i = 0; i < E; i++) u[i] -= row[i];
    return QKV_OK;
}

/* heads[l, h] <- the part of head h of layer l: its hook_z row through W_O's
 * columns h D .. (h+1) D (qkv_model_head_result).   c: [Hq, E] scratch */
static qkv_status head_parts(float *heads, const last_rows *r, qkv_model *m, const double *w, double s, float *c,
                             qkv_error *err) {
    const qkv_model_config *cfg = qkv_model_get_config(m);
    const int L = cfg->n_layer, Hq = cfg->n_head, E = cfg->n_embd;
    for (int l = 0; l < L; l++) {
        qkv_status st = qkv_model_head_result(c, m, l, r->z + (size_t)l * r->QD, 1, err);
        if (st) return st;
        for (int h = 0; h < Hq; h++) heads[(size_t)l * Hq + h] = (float)part(c + (size_t)h * E, w, E, s);
    }
    return QKV_OK;
}

qkv_status qkv_attribute(qkv_attribution *a, qkv_model *m, const int32_t *tokens, int n, int32_t answer,
                         int32_t wrong, qkv_error *err) {
    if (!a || !a->attn || !a->mlp || !m || !tokens) return util_fail(err, QKV_ERR_INVALID, "attribute: a NULL argument");
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, Hq = c->n_head, E = c->n_embd, V = c->n_vocab, QD = Hq * c->head_dim;
    const int n_ctx = qkv_model_n_ctx(m);
    if (n < 1 || n > n_ctx) return util_fail(err, QKV_ERR_INVALID, "attribute: %d tokens outside [1, %d]", n, n_ctx);
    if (answer < -1 || answer >= V || wrong < -1 || wrong >= V || (answer >= 0 && answer == wrong))
        return util_fail(err, QKV_ERR_INVALID, "attribute: answer %d and wrong %d: two different ids in [0, %d) or -1",
                        answer, wrong, V);
    const int linear = !c->post_norms, want_heads = linear && a->heads;
    last_rows r = {.last = n - 1, .E = E, .QD = QD, .n_layer = L, .embed = malloc((size_t)E * sizeof(float)),
                   .z = want_heads ? malloc((size_t)L * QD * sizeof(float)) : NULL,
                   .attn = malloc((size_t)L * E * sizeof(float)), .mlp = malloc((size_t)L * E * sizeof(float)),
                   .x = malloc((size_t)E * sizeof(float)), .normed = malloc((size_t)E * sizeof(float))};
    float *logits = malloc((size_t)V * sizeof(float)), *row = malloc((size_t)E * sizeof(float));
    double *w = malloc((size_t)E * sizeof(double));
    float *hc = want_heads ? malloc((size_t)Hq * E * sizeof(float)) : NULL;
    qkv_status st = QKV_OK;
    if (!r.embed || (want_heads && (!r.z || !hc)) || !r.attn || !r.mlp || !r.x || !r.normed || !logits || !row || !w) {
        st = util_fail(err, QKV_ERR_NOMEM, "attribute: out of memory");
        goto done;
    }
    const qkv_hook hooks[6] = {{.point = QKV_HOOK_EMBED, .fn = keep_last, .user = &r},
                               {.point = QKV_HOOK_ATTN_OUT, .layer = QKV_ALL, .fn = keep_last, .user = &r},
                               {.point = QKV_HOOK_MLP_OUT, .layer = QKV_ALL, .fn = keep_last, .user = &r},
                               {.point = QKV_HOOK_RESID_POST, .layer = L - 1, .fn = keep_last, .user = &r},
                               {.point = QKV_HOOK_LN_FINAL, .layer = -1, .fn = keep_last, .user = &r},
                               {.point = QKV_HOOK_Z, .layer = QKV_ALL, .fn = keep_last, .user = &r}};
    if ((st = qkv_model_rewind(m, 0, err)) ||
        (st = qkv_model_forward(m, logits, tokens, n, 0, &(qkv_forward_opts){.hooks = hooks, .n_hooks = want_heads ? 6 : 5},
                                err)))
        goto done;
    a->answer = answer >= 0 ? answer : top_except(logits, V, wrong);
    a->wrong = wrong >= 0 ? wrong : top_except(logits, V, a->answer);
    a->heads_linear = linear;
    a->final_softcap = c->final_softcap > 0;

    /* u = W_U[answer] - W_U[wrong] (in w); the model's own logit difference:
     * its final normed row, as the forward computes it, dotted with u */
    if ((st = unembed_diff(w, row, m, a->answer, a->wrong, err))) goto done;
    const float *g = qkv_model_final_norm_weight(m);
    for (int i = 0; i < E; i++) row[i] = g[i] * r.normed[i]; /* the forward's own final norm */
    a->logit_diff = 0;
    for (int i = 0; i < E; i++) a->logit_diff += (double)row[i] * w[i];
    /* w = g * u; s: the final norm's scale of this run, frozen */
    for (int i = 0; i < E; i++) w[i] *= g[i];
    double ss = 0;
    for (int i = 0; i < E; i++) ss += (double)r.x[i] * r.x[i];
    const double s = 1 / sqrt(ss / E + c->norm_eps);

    a->embed = part(r.embed, w, E, s);
    a->total = a->embed;
    for (int l = 0; l < L; l++) {
        const double pa = part(r.attn + (size_t)l * E, w, E, s), pm = part(r.mlp + (size_t)l * E, w, E, s);
        a->attn[l] = (float)pa;
        a->mlp[l] = (float)pm;
        a->total += pa + pm;
    }
    if (want_heads) st = head_parts(a->heads, &r, m, w, s, hc, err);
    else if (a->heads)
        for (int i = 0; i < L * Hq; i++) a->heads[i] = NAN;
done:
    qkv_model_rewind(m, 0, NULL);
    free(r.embed);
    free(r.z);
    free(r.attn);
    free(r.mlp);
    free(r.x);
    free(r.normed);
    free(logits);
    free(row);
    free(w);
    free(hc);
    return st;
}
