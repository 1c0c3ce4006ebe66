/*
 * qkv/probe.h — what qkv measures on a running model: attention maps and
 * sinks, ablation, activation patching, direct logit attribution, the logit
 * lens, streaming and the needle test. Built on qkv/model.h and
 * qkv/tokenizer.h; nothing below includes it.
 */
#ifndef QKV_PROBE_H
#define QKV_PROBE_H

#include "qkv/base.h"
#include "qkv/model.h"
#include "qkv/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ probe: maps */

/*
 * Attention maps and sink statistics of a running model, taken from the
 * engine that runs it. A probe holds no copy of the attention: it reads what
 * a layer's kernel was given (rotated q, the KV cache) and what it returned
 * (LSE) through a hook on blocks.L.attn.hook_pattern, and recomputes the
 * weight rows it is asked for:  w[i, j] = exp(cap(scale * q_i . k_j) - lse_i),
 * 0 where masked (cap: the descriptor's softcap, qkv_attn_desc).
 */


/* What one weight row says. */
typedef struct {
    double sink;            /* weight on key 0 */
    double first;           /* weight on keys 0 .. n_first-1 */
    double entropy;         /* -sum w ln w, nats (0 for one-hot, ln m for m equal keys) */
    int top;                /* the strongest key (lowest index on ties); -1 if n == 0 */
    float top_weight;
    int top_other;          /* the strongest key >= n_first; -1 if none */
    float top_other_weight;
} qkv_row_stats;

/* Statistics of w[n] (a weight row), the first n_first keys counted as "first". */
QKV_API void qkv_row_stats_of(qkv_row_stats *s, const float *w, int n, int n_first);

/* Receives one weight row: map (layer_index, head_index) of the request,
 * query position `row`, w: [n_keys] (all keys of the cache, masked ones 0).
 * Return nonzero to stop the forward pass. */
typedef int (*qkv_inspect_row_fn)(void *user, int layer_index, int head_index, int row, const float *w,
                                  int n_keys, const qkv_row_stats *s);

typedef struct {
    const int *layers;      /* [n_layers] layers to inspect, increasing; NULL: all */
    int n_layers;
    const int *heads;       /* [n_heads] query heads, any order; NULL: all */
    int n_heads;
    int n_first;            /* keys counted as "first" in the row stats; 0 means 1 */
    qkv_inspect_row_fn row;
    void *user;
} qkv_inspect_params;

/* A hook on hook_pattern that hands the requested maps to p->row one row
 * at a time, in order: layer, head (as listed), query row — so one forward
 * call over a whole prompt streams [n_layers, n_heads, n, n] in C order. It
 * holds 64 rows of Lk floats, whatever the prompt: O(n) beyond the model.
 *   qkv_inspect *in; qkv_inspect_init(&in, qkv_model_get_config(m), &p, &err);
 *   qkv_hook h = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_inspect_hook, .user = in};
 *   qkv_model_forward(m, ..., &(qkv_forward_opts){.hooks = &h, .n_hooks = 1}, &err);
 * A row callback that returns nonzero stops the forward call (its error
 * names the layer and head). */
typedef struct qkv_inspect qkv_inspect;
QKV_API qkv_status qkv_inspect_init(qkv_inspect **out, const qkv_model_config *cfg, const qkv_inspect_params *p,
                                    qkv_error *err);
QKV_API void qkv_inspect_free(qkv_inspect *in);
QKV_API qkv_status qkv_inspect_hook(void *in, const qkv_activation *a, qkv_error *err);

/* Attention sinks over long text, from the kernel's outputs: every row's
 * weight on keys 0 .. n_first-1 (n_first dot products and the row's LSE),
 * plus every `every`-th row recomputed in full for its strongest other key.
 * Rows at positions < skip are left out of every mean. */
typedef struct {
    int n_first;            /* k >= 1 (default 4) */
    int skip;               /* >= 0 (default 16) */
    int every;              /* >= 1 (default 16) */
    int n_threads;          /* 0: all cores */
} qkv_sinks_params;

/* Defaults: n_first 4, skip 16, every 16, all cores. */
QKV_API qkv_sinks_params qkv_sinks_params_default(void);

/* Means over the measured rows of one layer and head. */
typedef struct {
    double sink;            /* weight on token 0 */
    double first;           /* weight on tokens 0 .. n_first-1 */
    double top_other;       /* sampled rows: weight of the strongest key other than token 0 */
    double top_other_dist;  /* sampled rows: its distance back from the query (p - j) */
    double sink_top;        /* sampled rows: share whose strongest key is token 0 */
    double entropy;         /* sampled rows: -sum w ln w, nats */
    int64_t n_rows, n_sampled;
} qkv_sinks_head;

/* Accumulates over every forward call it is a hook of, on hook_pattern
 * (qkv_hook){.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = qkv_sinks_hook, .user = s}.
 * p NULL: qkv_sinks_params_default(). */
typedef struct qkv_sinks qkv_sinks;
QKV_API qkv_status qkv_sinks_init(qkv_sinks **out, const qkv_model_config *cfg, const qkv_sinks_params *p,
                                  qkv_error *err);
QKV_API void qkv_sinks_free(qkv_sinks *s);
QKV_API qkv_status qkv_sinks_hook(void *s, const qkv_activation *a, qkv_error *err);
/* The means so far for (layer, head); NULL if out of range. Valid until the
 * next call for the same pair or qkv_sinks_free. */
QKV_API const qkv_sinks_head *qkv_sinks_get(qkv_sinks *s, int layer, int head);

/* --------------------------------------------------------- probe: progress */

/*
 * Progress of a probe that runs many forward calls (qkv_ablate_positions,
 * qkv_ablate_heads, qkv_stream_score, qkv_patch): after each forward call (or
 * chunk) it calls progress(user, done, total) on the calling thread, done
 * counting the tokens run through the model so far (qkv_patch: its
 * components), of total for the whole probe (each probe says what total
 * is); the last call has done == total.
 * A nonzero return stops the probe, which then returns QKV_ERR_CANCELLED with
 * the KV cache empty. A NULL progress reports nothing. The layers of one long
 * forward call report through a hook on QKV_HOOK_RESID_POST with layer
 * QKV_ALL instead (one call per layer).
 */
typedef int (*qkv_progress_fn)(void *user, int64_t done, int64_t total);

/* ----------------------------------------------------------- probe: ablate */

/*
 * Weight against influence: a key's attention weight says how much a row
 * reads it, not how much the answer depends on it. Ablating position j hides
 * key j through the engine's exclusion mask (a qkv_exclusion of the forward
 * call, never a dense mask) and measures how the next-token distribution of the last
 * position moves: KL(p_full || p_ablated) in nats.
 *   QKV_ABLATE_ALL   key j leaves every query row (in the scoped layers and
 *                    heads). Rows before j cannot see j anyway, so their KV
 *                    cache is kept: rewind to j, forward tokens j .. n-1.
 *                    Cost: n partial forwards, n(n+1)/2 token-steps.
 *   QKV_ABLATE_LAST  only the final row loses key j (the direct effect):
 *                    tokens 0 .. n-2 once, then per j the last token alone.
 * Row j loses its own key; a row left with no visible key has O = 0 (the
 * kernels' definition), e.g. row 0 when j = 0 under ALL.
 */
typedef enum { QKV_ABLATE_ALL = 0, QKV_ABLATE_LAST = 1 } qkv_ablate_scope;

/* KL(softmax(p) || softmax(q)) in nats, in double; >= 0.
 *   p_logits, q_logits: [n] */
QKV_API double qkv_kl_logits(const float *p_logits, const float *q_logits, int n);

/* Spearman's rank correlation of x and y: the Pearson correlation of their
 * ranks, tied values sharing their mean rank. NaN if n < 2 or either is
 * constant.   x, y: [n] */
QKV_API double qkv_spearman(const double *x, const double *y, int n);

/* How an ablated distribution differs from the full one. */
typedef struct {
    double kl;              /* KL(p_full || p_ablated), nats */
    double dp_target;       /* p_ablated(target) - p_full(target) */
    int32_t top;            /* the ablated distribution's top token (lowest id on ties) */
} qkv_ablate_effect;

/* e <- the effect of logits against full_logits, both [n_vocab]. */
QKV_API void qkv_ablate_effect_of(qkv_ablate_effect *e, const float *full_logits, const float *logits, int n_vocab,
                                  int32_t target);

typedef struct {
    qkv_ablate_scope scope;
    int layer;              /* ablate in this layer only; -1: every layer */
    int head;               /* and this query head only; -1: every head */
    int32_t target;         /* token whose probability is followed; -1: the full run's top token */
    qkv_progress_fn progress; /* NULL: none; total n + n(n+1)/2 tokens (ALL), 2n (LAST) */
    void *progress_user;
} qkv_ablate_params;

/* What ablating one position did. */
typedef struct {
    double attn_mean;       /* full run: the last row's weight on the key, mean over the scoped (layer, head) */
    double attn_max;        /* ... and its largest */
    qkv_ablate_effect effect;
} qkv_ablate_row;

typedef struct {
    int32_t target;         /* as followed (params' or the full run's top) */
    double p_target;        /* its probability in the full run */
    int32_t top_full;       /* the full run's top token */
    double spearman_attn_kl;/* Spearman(attn_mean, kl) over the positions */
} qkv_ablate_summary;

/* Ablates every position 0 .. n-1 of tokens in turn (p NULL: ALL, every
 * layer and head, the top token).
 *   rows:   [n] output, rows[j] for position j
 *   tokens: [n] the sequence from position 0, 2 <= n <= qkv_model_n_ctx(m)
 * On return the KV cache is empty. QKV_ERR_INVALID for n < 2, a layer, head or target
 * out of range, or a token id outside the vocabulary. */
QKV_API qkv_status qkv_ablate_positions(qkv_ablate_row *rows, qkv_ablate_summary *sum, qkv_model *m,
                                        const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err);

/* Head importance: zero-ablates each (layer, head) in turn
 * (qkv_forward_opts.zero_heads), a full forward of tokens each.
 *   effects: [L, Hq] output     tokens: [n], 1 <= n <= qkv_model_n_ctx(m)
 * p's target (-1: the full run's top) and progress (after each forward, of
 * (1 + L x Hq) x n tokens) apply; its scope, layer and head do not (every
 * head is zeroed in turn). p NULL: target -1, no progress. sum gets the
 * target, its p and the top token (spearman_attn_kl NaN). Cost: L x Hq
 * forwards of n tokens. On return the KV cache is empty. */
QKV_API qkv_status qkv_ablate_heads(qkv_ablate_effect *effects, qkv_ablate_summary *sum, qkv_model *m,
                                    const int32_t *tokens, const qkv_ablate_params *p, int n, qkv_error *err);

/* ------------------------------------------------------------ probe: patch */

/*
 * Activation patching (TransformerLens's patching.get_act_patch_*): which
 * component carries what. Two prompts of one length n, clean and corrupted,
 * each run from position 0; then, one component at a time, the corrupted run
 * again with that component's activation replaced by the clean run's at the
 * same point, and a metric M of the last position's next-token logits (the
 * model's output, after any final soft-cap; in double) says how much of the
 * clean behaviour came back:
 *   recovery = (M(patched) - M(corrupt)) / (M(clean) - M(corrupt))
 * 1: all of it, 0: none; never clipped (over- and under-shoot are findings).
 *   QKV_METRIC_KL          M(x) = KL(p_clean || p_x) in nats, so M(clean) = 0 and
 *                          recovery = 1 - KL(clean || patched) / KL(clean || corrupt)
 *   QKV_METRIC_LOGIT_DIFF  M(x) = logit_x[answer] - logit_x[wrong]
 * The components: every head, layer or position of one sweep (qkv_sweep,
 * below), at TransformerLens's activation names (qkv_hook_point).
 * Cost: the clean and the corrupted run, each caching its activations at
 * the points the sweeps patch (the corrupted run's hook_resid_pre of every
 * layer always: the checkpoints), then per component one forward resumed at
 * the patched layer l from the corrupted run's residual there
 * (qkv_forward_opts.start_resid), with a hook that copies the clean rows in:
 * (L - l) x n layer-token steps, against L x n for a full forward per
 * component (qkv_patch_summary counts both). A component whose clean rows
 * equal the corrupted run's bit for bit (every position before the first
 * token where the prompts differ) would rerun the corrupted run itself
 * (a resumed call computes what the whole call does, bit for bit): its
 * recovery is 0 and it is not run.
 */
typedef enum { QKV_METRIC_KL = 0, QKV_METRIC_LOGIT_DIFF = 1 } qkv_metric_kind;

typedef struct {
    qkv_metric_kind kind;
    int32_t answer, wrong;      /* LOGIT_DIFF only: two different ids in [0, V) */
} qkv_metric;

/* The sweeps, in the order every front-end lists them (--sweeps, JSON,
 * .npy names, Python's keys): */
typedef enum {
    QKV_SWEEP_HEAD_OUT = 0,     /* head_out      [L, Hq]     attn.hook_z of head h at every position */
    QKV_SWEEP_HEAD_OUT_POS,     /* head_out_pos  [L, Hq, n]  attn.hook_z of head h at position p only */
    QKV_SWEEP_RESID_PRE,        /* resid_pre     [L, n]      hook_resid_pre of layer l at position p */
    QKV_SWEEP_ATTN_OUT,         /* attn_out      [L, n]      hook_attn_out (Gemma: after its post-attention
                                                             norm) at position p */
    QKV_SWEEP_MLP_OUT,          /* mlp_out       [L, n]      hook_mlp_out (Gemma: after its post-FFN norm) at
                                                             position p */
    QKV_SWEEP_COUNT
} qkv_sweep;

/* The sweep's name ("head_out" ...); NULL outside [0, QKV_SWEEP_COUNT). */
QKV_API const char *qkv_sweep_name(qkv_sweep s);
/* The hook point it patches (QKV_HOOK_Z, QKV_HOOK_RESID_PRE, ...);
 * QKV_HOOK_COUNT outside [0, QKV_SWEEP_COUNT). */
QKV_API qkv_hook_point qkv_sweep_point(qkv_sweep s);
/* shape <- its recovery array's for L layers, Hq heads and n tokens ([L, Hq],
 * [L, Hq, n] or [L, n], outermost first); returns the number of dimensions,
 * 2 (shape[2] is then 1) or 3; 0 outside [0, QKV_SWEEP_COUNT). */
QKV_API int qkv_sweep_shape(int64_t shape[3], qkv_sweep s, int n_layer, int n_head, int n);

/* Recovery arrays, caller-allocated, shapes qkv_sweep_shape; NULL skips that sweep. */
typedef struct {
    float *recovery[QKV_SWEEP_COUNT];
} qkv_patch_out;

#define QKV_PATCH_DEFAULT_MAX_BYTES ((int64_t)1 << 30)

typedef struct {
    qkv_metric metric;
    int64_t max_bytes;          /* qkv_patch_bytes may not exceed it; 0: QKV_PATCH_DEFAULT_MAX_BYTES (1 GiB) */
    qkv_progress_fn progress;   /* NULL: none; here done and total count components (each a resumed
                                   forward call, or none when unchanged), total = n_components */
    void *progress_user;
} qkv_patch_params;

typedef struct {
    double clean, corrupt;              /* M(clean) and M(corrupt) (KL: 0 and KL(clean || corrupt)) */
    int64_t layer_token_steps;          /* layers x tokens run: the two runs and every resumed one */
    int64_t naive_layer_token_steps;    /* a full forward per component, L x n each, plus the two runs */
    int64_t n_components;               /* entries of the recovery arrays */
    int64_t n_unchanged;                /* components equal in both runs: recovery 0, not run */
} qkv_patch_summary;

/* Bytes qkv_patch allocates for the sweeps `which` asks for (its non-NULL
 * recovery arrays; NULL: none): every layer's hook_resid_pre of the corrupted run
 * (L n E floats), both runs' activations at the points the sweeps patch
 * (hook_z, 2 L n Hq D floats, for head_out and head_out_pos; 2 L n E each
 * for resid_pre (L n E: the corrupted run's are the checkpoints), attn_out,
 * mlp_out) and three logit rows of V floats. Its peak memory is the model's
 * and this. -1 for a NULL model or n < 1. */
QKV_API int64_t qkv_patch_bytes(const qkv_model *m, int n, const qkv_patch_out *which);

/* Runs the sweeps out asks for, patching clean into corrupt.
 *   out:            the recovery arrays (qkv_patch_out), filled where non-NULL
 *   sum:            the metric's two values and the cost
 *   clean, corrupt: [n] token ids, 1 <= n <= qkv_model_n_ctx(m); a pair of
 *                   different lengths is the caller's to refuse
 *   p:              NULL: KL, the default byte limit, no progress
 * QKV_ERR_INVALID for a NULL argument, a bad n, metric kind or token id,
 * answer or wrong outside [0, V) or equal, and when the clean and corrupt
 * runs give the same metric (M(clean) == M(corrupt): recovery is 0 / 0);
 * QKV_ERR_TOO_LARGE (naming both figures) when qkv_patch_bytes exceeds
 * max_bytes, before anything runs; QKV_ERR_CANCELLED from progress. It
 * allocates its caches once per call (qkv_patch_bytes); the forward calls
 * inside allocate nothing. Starts from position 0; on return the KV cache is
 * empty. */
QKV_API qkv_status qkv_patch(qkv_patch_out *out, qkv_patch_summary *sum, qkv_model *m, const int32_t *clean,
                             const int32_t *corrupt, int n, const qkv_patch_params *p, qkv_error *err);

/* -------------------------------------------------------- probe: attribute */

/*
 * Direct logit attribution (TransformerLens's cache.decompose_resid and
 * stack_head_results with apply_ln): each part's additive share of the
 * difference of two logits at the last position. The final residual x
 * (hook_resid_post of the last layer, last position) is the sum of the
 * embedding (hook_embed: Gemma's scaled by sqrt(E)) and every layer's
 * hook_attn_out and hook_mlp_out. Through the final RMSNorm with this run's
 * scale s = 1 / sqrt(mean(x^2) + eps) frozen, its weight g (Gemma's GGUF
 * stores 1 + w) and the unembedding rows u = W_U[answer] - W_U[wrong], a
 * part c contributes
 *   s * sum_i c_i g_i u_i      (in double)
 * so the parts add up to the logit difference before any final soft-cap,
 * up to the float rounding of the forward pass (tests/test_attribute.c
 * states the tolerance). A head's part is its hook_z at the last position
 * through its own columns of the output projection, W_O[:, h D .. (h+1) D);
 * the heads of a layer add up to its attn only where nothing normalises the
 * attention output after W_O (llama, qwen2, qwen3, mistral): with Gemma's
 * post-attention norms (gemma2, gemma3) heads are NaN and heads_linear 0.
 * The logit difference of a soft-capped model (Gemma 2) is attributed
 * before the cap (final_softcap 1): the cap is not additive.
 */
typedef struct {
    float *heads;       /* [L, Hq] caller-allocated output, or NULL; NaN where heads_linear is 0 */
    float *attn;        /* [L] caller-allocated output */
    float *mlp;         /* [L] caller-allocated output */
    double embed;       /* the embedding's part */
    double total;       /* embed + sum attn + sum mlp, of the unrounded parts */
    double logit_diff;  /* the model's own, before any final soft-cap: its final normed row h (as the forward
                           computes it) dotted with u, in double */
    int heads_linear;   /* 1: heads are additive (no post-attention norm) */
    int final_softcap;  /* 1: the model soft-caps its logits; attributed before the cap */
    int32_t answer, wrong; /* as used: the caller's, or the model's own top-1 / top-2 where it passed -1 */
} qkv_attribution;

/* Attributes the logit difference of answer and wrong after tokens.
 *   tokens: [n], 1 <= n <= qkv_model_n_ctx(m), run from position 0
 *   answer: a token id, or -1 for the model's top-1 at the last position
 *   wrong:  a token id, or -1 for the model's most likely token other than answer
 * QKV_ERR_INVALID for NULL outputs, a bad n or token id, answer or wrong
 * outside [-1, V), or both the same. Allocates its few rows once per call;
 * on return the KV cache is empty. */
QKV_API qkv_status qkv_attribute(qkv_attribution *a, qkv_model *m, const int32_t *tokens, int n, int32_t answer,
                                 int32_t wrong, qkv_error *err);

/* ------------------------------------------------------------- probe: lens */

/*
 * The logit lens (nostalgebraist 2020; TransformerLens's
 * cache.accumulated_resid with apply_ln): what the residual stream would
 * predict if the model stopped after layer l. hook_resid_post of layer l at
 * each position goes through the model's own final step, a forward resumed
 * after the last layer (qkv_forward_opts.start_layer = L): the final RMSNorm
 * with that row's own RMS, the unembedding and any final soft-cap; then a
 * softmax (in double). The last layer's lens is the model's own output.
 */
typedef struct {
    int k;              /* top tokens kept per (layer, position), 1 <= k <= V */
    int32_t target;     /* a token whose probability is followed; -1: none */
    int pos0, pos1;     /* the positions read, [pos0, pos1) within [0, n]; 0, 0: all n */
} qkv_lens_params;

/* Caller-allocated, w = pos1 - pos0 positions (n for all); probabilities in [0, 1]. */
typedef struct {
    int32_t *top_ids;   /* [L, w, k] most likely first (the lower id first on ties) */
    float *top_probs;   /* [L, w, k] their probabilities */
    float *target_prob; /* [L, w] the target's probability, or NULL (needed when target >= 0) */
} qkv_lens_out;

/* The lens of every layer at positions pos0..pos1-1 of tokens.
 *   tokens: [n], 1 <= n <= qkv_model_n_ctx(m), run from position 0
 * Only tokens[0, pos1) run (a position's residual depends on no later
 * token), and only the window's w positions are kept and unembedded: a
 * window of a long prompt costs the forward to pos1 and L w unembeddings.
 * QKV_ERR_INVALID for NULL outputs, a bad n, k, window or token id, a
 * target outside [-1, V), or a target without target_prob. Memory: every
 * layer's residual at the window (L w E floats) and up to
 * QKV_LENS_LOGIT_FLOATS floats of logits (rows of V, one layer's positions
 * at a time), allocated once per call (qkv_lens_bytes(m, w, k)); on return
 * the KV cache is empty. */
#define QKV_LENS_LOGIT_FLOATS ((int64_t)1 << 24)
QKV_API qkv_status qkv_lens(qkv_lens_out *out, qkv_model *m, const int32_t *tokens, int n, const qkv_lens_params *p,
                            qkv_error *err);

/* The bytes qkv_lens allocates to read w positions with k top tokens (the
 * residuals, the logit rows, the top-k heap), beside the model's own state
 * and the caller's outputs; -1 for a NULL m, w < 1 or k < 1. */
QKV_API int64_t qkv_lens_bytes(const qkv_model *m, int w, int k);

/* ----------------------------------------------------------- probe: stream */

/*
 * Perplexity of a long text under a bounded KV cache (StreamingLLM, Xiao et
 * al., arXiv:2309.17453). The text is read in chunks of C tokens, each one
 * forward call; token t+1 is scored once, NLL = -log p(tokens[t+1] | its
 * context). The context, with W = window and S = sinks:
 *   FULL       every earlier token (causal mask).
 *   WINDOW     the last W keys, self included (QKV_MASK_WINDOW).
 *   SINKS      the first S keys and the last W - S (QKV_MASK_SINK_WINDOW
 *              with window W - S): W keys in all.
 *   RECOMPUTE  sliding-window re-computation at a stride of C: before each
 *              chunk the cache is emptied and the W - C tokens before the
 *              chunk are run again from position 0, then the chunk, so row k
 *              of a chunk sees the W - C + k + 1 most recent keys (W for the
 *              last row), all computed from a fresh start whose first token
 *              (position 0 again) every row sees. With C = 1 this is the
 *              paper's "sliding window with re-computation"; C >= W runs
 *              no prefix and each row sees its last W keys.
 * How WINDOW and SINKS hold their keys:
 *   QKV_STREAM_MASK     a full cache, the mask alone (keys at their original
 *                       positions; memory grows with the text).
 *   QKV_STREAM_EVICT    before each chunk the cache is cut to W - 1 rows (the
 *                       S sinks kept), so it never holds more than W - 1 + C;
 *                       keys and queries keep their original positions.
 *   QKV_STREAM_SHIFT    the same eviction, the kept keys re-rotated to their
 *                       rows (qkv_model_evict with shift): positions
 *                       re-indexed within the cache, as StreamingLLM does.
 * MASK and EVICT see the same keys with the same rotations: their NLLs agree
 * to float rounding (tests/test_stream.c).
 */
typedef enum { QKV_STREAM_FULL = 0, QKV_STREAM_WINDOW = 1, QKV_STREAM_SINKS = 2, QKV_STREAM_RECOMPUTE = 3 } qkv_stream_policy;
typedef enum { QKV_STREAM_MASK = 0, QKV_STREAM_EVICT = 1, QKV_STREAM_SHIFT = 2 } qkv_stream_cache;

typedef struct {
    qkv_stream_policy policy;
    qkv_stream_cache cache;     /* WINDOW and SINKS only */
    int window;                 /* W >= 1 */
    int sinks;                  /* S, 0 <= S < W (SINKS) */
    int chunk;                  /* C >= 1 */
    qkv_progress_fn progress;   /* NULL: none; after each chunk, total qkv_stream_steps(p, n) */
    void *progress_user;
} qkv_stream_params;

/* KV cache rows the policy needs for n tokens (the n_ctx to open the model
 * with): n for FULL and MASK, min(n, W - 1 + C) otherwise. */
QKV_API int qkv_stream_rows(const qkv_stream_params *p, int n);
/* Tokens the model runs to score n tokens under p: n - 1, plus the W - C
 * tokens RECOMPUTE runs again before each chunk (fewer near the start). */
QKV_API int64_t qkv_stream_steps(const qkv_stream_params *p, int n);

/* Scores tokens under p.
 *   nll:    [n - 1] output, nll[t] for token t + 1
 *   tokens: [n], 2 <= n
 * *max_rows (may be NULL) gets the most KV rows held at once. Each chunk is
 * a forward call with the policy's mask; on return the cache is empty. The
 * model's n_ctx must be >= qkv_stream_rows(p, n). QKV_ERR_INVALID for
 * bad parameters or a too small context. */
QKV_API qkv_status qkv_stream_score(float *nll, int *max_rows, qkv_model *m, const int32_t *tokens, int n,
                                    const qkv_stream_params *p, qkv_error *err);

/* ----------------------------------------------------------- probe: needle */

/*
 * Needle in a haystack, with telemetry (the article's third caution: a long
 * context holds the sentence, but does the model find it?). A needle
 * sentence is put into a haystack text at a depth, a question follows in the
 * chat template, the model answers greedily, and the answer is scored by
 * substring (RULER's string_match_all). From the kernel's LSE, the attention
 * the query producing the first answer token (the prompt's last position)
 * puts on the needle's tokens, per layer and head, and the retrieval score
 * of every head (Wu et al. 2024, arXiv:2404.15574): at each answer step a
 * head copies when its strongest key lies in the needle and holds the token
 * just generated; its score is the share of needle tokens it copied.
 */

/* The byte offset in text[0 .. len) where a sentence starts that is nearest
 * at or before depth percent (0 .. 100) of the text: just after ". ", "! ",
 * "? " (any whitespace after the mark) or a blank line; 0 if none is;
 * len for depth 100. */
QKV_API size_t qkv_needle_offset(const char *text, size_t len, double depth);

/* Where expected first occurs in answer, ASCII case folded (RULER: r.lower()
 * in pred.lower()): its byte offset, or -1 (always for an empty expected). */
QKV_API long qkv_needle_match(const char *answer, const char *expected);

typedef struct {
    const char *needle;     /* the sentence put into the haystack */
    const char *question;   /* the user's question after the haystack */
    const char *system;     /* the chat's system turn; NULL: the template's own */
    int max_answer;         /* tokens the answer may take, >= 1 */
    int plain;              /* 1: no chat template (a base model): the text alone, after the tokenizer's BOS;
                               system must be NULL */
} qkv_needle_text;

/* One prompt: the first tokens of the haystack (repeated from its start
 * if it is shorter), the needle at a sentence boundary at depth percent of
 * them (qkv_needle_offset of their text), then "\n\n" and the question, as
 * the user turn of the GGUF's chat template (qkv_chat_format, then
 * qkv_chat_tokenize), or as it is when nt->plain. As many haystack tokens as
 * leave n + max_answer <= length. */
typedef struct {
    int32_t *ids;           /* [n] malloc'd (qkv_needle_prompt_free) */
    int n;
    int needle_pos;         /* tokens [needle_pos, needle_pos + needle_len) hold the needle's bytes */
    int needle_len;
    int haystack_tokens;    /* haystack tokens used (before the needle went in) */
} qkv_needle_prompt;

/* hay: [n_hay] the haystack's tokens (qkv_tokenize without special tokens).
 * QKV_ERR_INVALID for a depth outside [0, 100], max_answer < 1, or a length
 * too small for the template, needle and question with max_answer (the
 * message says the least length that fits). */
QKV_API qkv_status qkv_needle_prompt_build(qkv_needle_prompt *out, const qkv_gguf *g, const qkv_tokenizer *t,
                                           const int32_t *hay, int64_t n_hay, const qkv_needle_text *nt, int length,
                                           double depth, qkv_error *err);
QKV_API void qkv_needle_prompt_free(qkv_needle_prompt *p);

/* What one prompt gave; the caller owns every array. */
typedef struct {
    int32_t *answer;        /* [max_answer] the greedy answer, stop token left out */
    int n_answer;
    double *mass_max;       /* [L] first answer token: needle mass, the largest over heads */
    double *mass_mean;      /* [L] ... the mean over heads */
    double *retrieval;      /* [L, Hq] += the share of needle tokens each head copied */
    double *step_mass_max;  /* [max_answer, L] or NULL: as mass_max, for the row producing answer token k */
    double *step_mass_mean; /* [max_answer, L] or NULL: as mass_mean, likewise */
} qkv_needle_result;

/* Runs p from an empty cache and answers greedily (at most max_answer
 * tokens; a qkv_token_ends_turn token stops it); on return the cache is
 * empty. Needs qkv_model_n_ctx(m) >= p->n + max_answer.
 * The needle mass of head h in layer l is the sum of the weights its last
 * prompt row gives keys needle_pos .. needle_pos + needle_len - 1, each
 * exp(scale q.k - lse) from the kernel's LSE. */
QKV_API qkv_status qkv_needle_run(qkv_needle_result *r, qkv_model *m, const qkv_tokenizer *t, const qkv_needle_prompt *p,
                                  int max_answer, qkv_error *err);

/* --------------------------------------------------------- probe: explore */

/*
 * The explorer's reads of one sequence (qkv serve), exact and without an
 * n x n table: a row is recomputed from a replay of its query
 * (qkv_model_replay: the forward's own rotated q and LSE against the KV
 * cache, through qkv_pattern_weights), and a head's whole map is kept as a
 * max-pooled overview filled by a hook while the forward calls append rows.
 */

/* Every layer's and head's attention row of query pos, from one replay of
 * pos (no unembedding):
 *   w:      [L, Hq, pos + 1] output, keys 0 .. pos; a sliding layer's keys
 *           outside its window are 0
 *   tokens: [qkv_model_pos(m)] the sequence's ids (tokens[pos] is replayed)
 * The model's sequence state is unchanged. QKV_ERR_INVALID for NULL
 * arguments or pos outside [0, qkv_model_pos(m)), and as qkv_model_replay. */
QKV_API qkv_status qkv_explore_rows(float *w, qkv_model *m, const int32_t *tokens, int pos, qkv_error *err);
/* One layer's rows of query pos, replaying layers 0 .. layer only:
 *   w: [Hq, pos + 1] for head QKV_ALL, else [pos + 1]
 * QKV_ERR_INVALID also for a layer or head out of range. */
QKV_API qkv_status qkv_explore_row(float *w, qkv_model *m, const int32_t *tokens, int pos, int layer, int head,
                                   qkv_error *err);

/*
 * The max-pooled overview of every head of every layer: grid cell (a, b) of
 * (layer, head) is the largest weight any query of positions [a s, (a+1) s)
 * gives any key of [b s, (b+1) s), s the block. qkv_overview_hook, installed
 * on QKV_HOOK_PATTERN (layer QKV_ALL) of the forward calls that append a
 * sequence's rows (its prefill, its generation steps), pools each call's
 * rows as they come: per row and key block the largest score s_j, then one
 * exp(max s_j - lse) (the weights' max: exp is increasing; a soft-capped
 * score likewise, tanh is). The block starts at 1; when a call's rows
 * reach past block x max_bins positions it doubles and each 2 x 2 of cells
 * merges into one (a max of maxes: exact). Cells no row reached are 0.
 * Memory: L x Hq x max_bins^2 floats, and per thread one key tile. A
 * rewind or an edit is not undone: pool a replay's rows into nothing, and a
 * rewound sequence's into a cleared overview (qkv_overview_clear).
 */
typedef struct qkv_overview qkv_overview;
/* An overview for cfg's layers and heads, max_bins in [1, 4096] per side
 * (QKV_ERR_INVALID otherwise; QKV_ERR_NOMEM). */
QKV_API qkv_status qkv_overview_init(qkv_overview **out, const qkv_model_config *cfg, int max_bins, qkv_error *err);
QKV_API void qkv_overview_free(qkv_overview *o);    /* NULL is fine */
/* Back to block 1 and no rows. */
QKV_API void qkv_overview_clear(qkv_overview *o);
/* Bytes the overview holds (its grid and scratch). */
QKV_API size_t qkv_overview_bytes(const qkv_overview *o);
/* The hook (user = the overview): pools a hook_pattern call's rows.
 * QKV_ERR_INVALID for another point, or a layer, head count or head_dim that
 * is not the overview's. Never allocates. */
QKV_API qkv_status qkv_overview_hook(void *o, const qkv_activation *a, qkv_error *err);
/* out[bins, bins] <- (layer, head)'s cells for the first n positions (rows
 * = query blocks), bins = ceil(n / block); *block gets the block. Returns
 * bins, or -1 for a layer, head or n out of range (n in [1, block x max_bins]). */
QKV_API int qkv_overview_get(const qkv_overview *o, float *out, int layer, int head, int n, int *block);

#ifdef __cplusplus
}
#endif

#endif /* QKV_PROBE_H */
