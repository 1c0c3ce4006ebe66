/*
 * explain_permute.c — `qkv explain --permute -m MODEL`: the article's last
 * claim (order enters attention only through the causal mask and RoPE) on a
 * real model. One forward call over the prompt captures, in every layer, the
 * last row's query after RoPE (attn.hook_rot_q), the keys after RoPE
 * (attn.hook_rot_k), the values (attn.hook_v), the last row's attention
 * output (attn.hook_z) and the last position's layer input (hook_resid_pre).
 * Then, for T seeded random orderings of the prefix (the last token stays
 * last), the last row attends again through qkv_attn with the layer's
 * scale, soft-cap, GQA and mask:
 *   RoPE off: q and k rotated back by -position (RoPE composes, R(-p) R(p) =
 *             R(0)), so q.k compares content only; keys move with their values;
 *   RoPE on:  each moved key rotated by (new - old position) onto its new
 *             place, R(p' - p) R(p) = R(p'), exact (no rotation) for a key
 *             that stays.
 * The rotated-back q, k are taken from hook_rot_q/rot_k rather than
 * hook_q/hook_k because those come before Gemma 3's QK-norm.
 * Last, the whole model runs on each permuted prompt, and the last
 * position's layer input and attention output are compared with the
 * original run's: earlier layers already mixed order into the residual.
 * Not here: the article's own 4 tokens (cmd_explain.c runs them).
 */
#include "cli.h"
#include "explain_permute.h"
#include "json_out.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one forward call leaves behind, every layer (L layers, n tokens). */
typedef struct {
    int n, Hq, Hkv, D, E;
    float *rot_q;   /* [L, Hq, D]     the last row's query after RoPE */
    float *rot_k;   /* [L, Hkv, n, D] keys after RoPE, head-major as the kernel takes them */
    float *v;       /* [L, Hkv, n, D] values */
    float *z;       /* [L, Hq, D]     the last row's attention output */
    float *resid;   /* [L, E]         the last position's layer input */
} capture;

static int capture_init(capture *c, const qkv_model_config *cfg, int n) {
    const size_t L = (size_t)cfg->n_layer, D = (size_t)cfg->head_dim, kv = L * cfg->n_kv_head * n * D;
    *c = (capture){.n = n, .Hq = cfg->n_head, .Hkv = cfg->n_kv_head, .D = cfg->head_dim, .E = cfg->n_embd};
    c->rot_q = malloc(L * c->Hq * D * sizeof(float));
    c->rot_k = malloc(kv * sizeof(float));
    c->v = malloc(kv * sizeof(float));
    c->z = malloc(L * c->Hq * D * sizeof(float));
    c->resid = malloc(L * c->E * sizeof(float));
    return c->rot_q && c->rot_k && c->v && c->z && c->resid ? 0 : cli_fail("out of memory");
}

static void capture_free(capture *c) {
    free(c->rot_q);
    free(c->rot_k);
    free(c->v);
    free(c->z);
    free(c->resid);
}

static qkv_status capture_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    capture *c = user;
    const size_t n = (size_t)c->n, D = (size_t)c->D, l = (size_t)a->layer;
    const size_t row = (size_t)a->shape[1] * (a->ndim == 3 ? (size_t)a->shape[2] : 1);
    const float *last = a->data + (n - 1) * row;
    switch (a->point) {
    case QKV_HOOK_ROT_Q: memcpy(c->rot_q + l * row, last, row * sizeof(float)); break;
    case QKV_HOOK_Z: memcpy(c->z + l * row, last, row * sizeof(float)); break;
    case QKV_HOOK_RESID_PRE: memcpy(c->resid + l * row, last, row * sizeof(float)); break;
    case QKV_HOOK_ROT_K:
    case QKV_HOOK_V: { /* [n, Hkv, D] -> [Hkv, n, D] */
        float *dst = (a->point == QKV_HOOK_V ? c->v : c->rot_k) + l * c->Hkv * n * D;
        for (size_t t = 0; t < n; t++)
            for (size_t h = 0; h < (size_t)c->Hkv; h++)
                memcpy(dst + (h * n + t) * D, a->data + (t * c->Hkv + h) * D, D * sizeof(float));
        break;
    }
    default: break;
    }
    return QKV_OK;
}

/* One forward call of ids (the cache emptied again after it) into c. */
static int capture_run(capture *c, qkv_model *m, const int32_t *ids, int n) {
    const qkv_hook_point points[] = {QKV_HOOK_RESID_PRE, QKV_HOOK_V, QKV_HOOK_ROT_Q, QKV_HOOK_ROT_K, QKV_HOOK_Z};
    qkv_hook hooks[5];
    for (int i = 0; i < 5; i++) hooks[i] = (qkv_hook){.point = points[i], .layer = QKV_ALL, .fn = capture_hook, .user = c};
    const qkv_forward_opts opts = {.hooks = hooks, .n_hooks = 5};
    qkv_error err = {0};
    if (qkv_model_forward(m, NULL, ids, n, 0, &opts, &err) || qkv_model_rewind(m, 0, &err))
        return cli_fail("explain: %s", err.msg);
    return 0;
}

/* A seeded ordering of 0 .. n-2 with n-1 kept last: Fisher-Yates over splitmix64. */
static void shuffle_prefix(int *perm, int n, uint64_t *state) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 2; i > 0; i--) {
        const int j = (int)(cli_splitmix64(state) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* One layer's figures over the T orderings. */
typedef struct {
    int window;          /* 0: causal over every key */
    float theta;         /* 0: a NoPE layer (no RoPE: "on" is "off" in another order) */
    double off, on;      /* max |Δ| of the last row's output, RoPE off / on */
    int off_same;        /* orderings whose RoPE-off output is bit-identical */
    double out, bound;   /* max |o| (RoPE on, original order); the rounding bound 8 n u max|v| */
    double self;         /* max |o - hook_z|: the recomputed row against the model's own */
    double resid, resid_ref, z, z_ref; /* whole model: max |Δ| and max |x| of hook_resid_pre and hook_z */
} layer_row;

/* Scratch for one layer: q [Hq, D], k, v, k' [Hkv, n, D], o [Hq, D] x 3, positions [n]. */
typedef struct {
    float *q_off, *k_off, *kp, *vp, *o_off0, *o_on0, *o;
    int64_t *pos;
} scratch;

static void permute_rows(float *dst, const float *src, const int *perm, int H, int n, int D) {
    for (int h = 0; h < H; h++)
        for (int p = 0; p < n; p++)
            memcpy(dst + ((size_t)h * n + p) * D, src + ((size_t)h * n + perm[p]) * D, (size_t)D * sizeof(float));
}

/* The last row over n keys k, v: [Hkv, n, D], q, o: [Hq, D], as layer la attends. */
static int attend_last(float *o, const float *q, const float *k, const float *v, const qkv_layer_attn *la, int n,
                       int threads) {
    const qkv_attn_desc d = {.n_q_head = la->n_head, .n_kv_head = la->n_kv_head, .q_len = 1, .kv_len = n,
                             .head_dim = la->head_dim, .scale = la->scale, .softcap = la->softcap,
                             .mask = {.kind = la->window ? QKV_MASK_WINDOW : QKV_MASK_CAUSAL, .window = la->window},
                             .n_threads = threads};
    qkv_error err = {0};
    if (qkv_attn(o, NULL, q, k, v, &d, QKV_KERNEL_AUTO, &err)) return cli_fail("explain: %s", err.msg);
    return 0;
}

/* x: [H, n, D] turned by pos as layer la rotates (not at all on a NoPE layer). */
static int rotate(float *x, const int64_t *pos, const qkv_layer_attn *la, int H, int n) {
    qkv_error err = {0};
    if (!la->no_rope && qkv_rope_apply(x, pos, &la->rope, H, n, la->head_dim, &err))
        return cli_fail("explain: %s", err.msg);
    return 0;
}

/* The layer experiment of layer l on the captured c, over perms [T, n]. */
static int layer_permute(layer_row *r, const capture *c, const qkv_layer_attn *la, int l, const int *perms, int T,
                         scratch *s, int threads) {
    const int n = c->n, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const size_t qn = (size_t)Hq * D, kn = (size_t)Hkv * n * D;
    const float *q = c->rot_q + l * qn, *k = c->rot_k + l * kn, *v = c->v + l * kn;
    r->window = la->window;
    r->theta = la->no_rope ? 0.0f : la->rope.theta;
    r->bound = 8.0 * n * 0x1p-24 * max_abs(v, kn);
    /* RoPE removed: q at -(n-1), key t at -t */
    memcpy(s->q_off, q, qn * sizeof(float));
    memcpy(s->k_off, k, kn * sizeof(float));
    for (int t = 0; t < n; t++) s->pos[t] = -t;
    s->pos[0] = -(n - 1);
    if (rotate(s->q_off, s->pos, la, Hq, 1)) return 2;
    s->pos[0] = 0;
    if (rotate(s->k_off, s->pos, la, Hkv, n)) return 2;
    for (int t = -1; t < T; t++) { /* t = -1: the original order */
        const int *perm = t < 0 ? NULL : perms + (size_t)t * n;
        float *o_off = t < 0 ? s->o_off0 : s->o, *o_on = t < 0 ? s->o_on0 : s->o;
        if (perm) {
            permute_rows(s->kp, s->k_off, perm, Hkv, n, D);
            permute_rows(s->vp, v, perm, Hkv, n, D);
        }
        if (attend_last(o_off, s->q_off, perm ? s->kp : s->k_off, perm ? s->vp : v, la, n, threads)) return 2;
        if (perm) {
            const double d = max_diff(o_off, s->o_off0, qn);
            r->off = fmax(r->off, d);
            r->off_same += !memcmp(o_off, s->o_off0, qn * sizeof(float));
            /* RoPE on: the key from position perm[p] turned to position p */
            permute_rows(s->kp, k, perm, Hkv, n, D);
            for (int p = 0; p < n; p++) s->pos[p] = p - perm[p];
            if (rotate(s->kp, s->pos, la, Hkv, n)) return 2;
        }
        if (attend_last(o_on, q, perm ? s->kp : k, perm ? s->vp : v, la, n, threads)) return 2;
        if (perm) r->on = fmax(r->on, max_diff(o_on, s->o_on0, qn));
    }
    r->out = max_abs(s->o_on0, qn);
    r->self = max_diff(s->o_on0, c->z + l * qn, qn);
    return 0;
}

/* ----------------------------------------------------------------- output */

static double rel(double d, double ref) { return ref > 0 ? d / ref : 0; }

static void print_text(const explain_permute_args *a, const qkv_model_config *cfg, const cli_prompt *pr,
                       const layer_row *rows, const int *perms, int T) {
    const int n = pr->n, L = cfg->n_layer;
    printf("qkv explain --permute: %s, %d tokens:", cli_basename(a->model), n);
    for (int i = 0; i < n; i++) printf(" %s", pr->labels[i]);
    printf("\n  %d random orderings of the %d tokens before the last (seed %lld; the last stays last), e.g.",
           T, n - 1, (long long)a->seed);
    for (int p = 0; p < n; p++) printf(" %d", perms[p]);
    printf("\n\n");
    printf("Each layer: its own q, k, v of this prompt (attn.hook_rot_q, hook_rot_k, hook_v); the last row\n"
           "attends over the permuted keys through qkv_attn, with the layer's scale, soft-cap, GQA and mask.\n"
           "  RoPE off: q and k rotated back by -position (q.k compares content only), keys moved with their values\n"
           "  RoPE on:  each moved key rotated to its new position\n"
           "Whole model: the prompt's tokens in that order (the last kept last), the model run again; the last\n"
           "position's layer input (hook_resid_pre) and attention output (hook_z) against the original run's.\n"
           "|Δ| is the largest change over all heads' outputs (or the input's E values) and all orderings;\n"
           "relative is |Δ| / max |x| of the original.\n\n");
    printf("                            one layer, prefix permuted             whole model, prompt permuted\n");
    printf("  layer  mask      RoPE θ   RoPE off   same bits   RoPE on   rel.   input   rel.   attn out   rel.\n");
    double off = 0, on_min = INFINITY, worst = 0;
    int same = 0, nope = 0;
    for (int l = 0; l < L; l++) {
        const layer_row *r = &rows[l];
        char mask[32];
        if (r->window) snprintf(mask, sizeof mask, "window %d", r->window);
        else snprintf(mask, sizeof mask, "causal");
        printf("  %5d  %-10s %7.0f  %9.2g   %4d/%-4d  %9.3g  %5.3f  %6.3g  %5.3f  %9.3g  %5.3f\n", l, mask,
               (double)r->theta, r->off, r->off_same, T, r->on, rel(r->on, r->out), r->resid,
               rel(r->resid, r->resid_ref), r->z, rel(r->z, r->z_ref));
        off = fmax(off, r->off);
        if (r->theta > 0) on_min = fmin(on_min, r->on);
        nope += r->theta == 0;
        same += r->off_same;
        worst = fmax(worst, rel(r->off, r->bound));
    }
    printf("\n  RoPE off: the last row's output moves by at most %.2g over %d layers x %d orderings (%d of %d\n"
           "  bit-identical). The keys are the same set, so only the order of the kernel's float additions\n"
           "  (the softmax sum and the weighted sum of v, taken in key order) differs: at most 8·n·u·max|v|\n"
           "  with u = 2^-24 and n = %d keys, and the largest change is %.3g of that bound.\n",
           off, L, T, same, L * T, n, worst);
    printf("  RoPE on: every layer %smoves it, by %.3g at the least (the score of q at position %d and a key\n"
           "  at position p depends on %d - p, so a key scores differently in another place).\n",
           nope ? "with RoPE " : "", on_min, n - 1, n - 1);
    if (nope)
        printf("  %d NoPE layers (RoPE θ 0: q and k unrotated) see no position: RoPE on is RoPE off there.\n", nope);
    if (cfg->window)
        printf("  Sliding layers see the last %d keys: with %d tokens the window holds the whole prefix, as\n"
               "  here; past %d, a permutation also changes which keys are in the window, as the mask does.\n",
               cfg->window, n, cfg->window);
    printf("  The mask still orders the other rows: row i sees keys 0..i, so a permutation changes the set\n"
           "  every row but the last sees, and their outputs change with RoPE or without.\n"
           "  Whole model: layer 0's input at the last position is its own embedding (unchanged) and its\n"
           "  attention output moves as RoPE on above; from layer 1 on, the earlier layers' outputs at the\n"
           "  other positions (changed by the mask and by RoPE) are in the residual stream, so the last\n"
           "  position's input, and its q, k, v, change themselves.\n");
}

static void print_json(const explain_permute_args *a, const qkv_model_config *cfg, const cli_prompt *pr,
                       const layer_row *rows, const int *perms, int T) {
    const int n = pr->n;
    printf("{\n  \"model\": ");
    cli_json_string(stdout, a->model);
    printf(",\n  \"kernel\": \"auto\",\n  \"n_tokens\": %d,\n  \"tokens\": ", n);
    cli_json_prompt(stdout, pr);
    printf(",\n  \"seed\": %lld,\n  \"trials\": %d,\n  \"orderings\": [", (long long)a->seed, T);
    for (int t = 0; t < T; t++) {
        printf("%s[", t ? ", " : "");
        for (int p = 0; p < n; p++) printf("%s%d", p ? ", " : "", perms[(size_t)t * n + p]);
        printf("]");
    }
    printf("],\n  \"layers\": [\n");
    for (int l = 0; l < cfg->n_layer; l++) {
        const layer_row *r = &rows[l];
        printf("    {\"layer\": %d, \"window\": %d, \"rope_theta\": ", l, r->window);
        cli_json_double(stdout, r->theta);
        const struct {
            const char *key;
            double x;
        } f[] = {{"rope_off_max_abs", r->off},  {"rope_on_max_abs", r->on},   {"output_max_abs", r->out},
                 {"rounding_bound", r->bound},  {"vs_hook_z", r->self},       {"model_input_max_abs", r->resid},
                 {"model_input_ref", r->resid_ref}, {"model_attn_out_max_abs", r->z}, {"model_attn_out_ref", r->z_ref}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
            printf(", \"%s\": ", f[i].key);
            cli_json_double(stdout, f[i].x);
        }
        printf(", \"rope_off_bit_identical\": %d}%s\n", r->off_same, l + 1 < cfg->n_layer ? "," : "");
    }
    printf("  ]\n}\n");
}

/* ------------------------------------------------------------------- main */

int explain_permute_model(const explain_permute_args *a) {
    cli_session ss;
    capture orig = {0}, perm_run = {0};
    scratch s = {0};
    layer_row *rows = NULL;
    int *perms = NULL, rc;
    int32_t *ids = NULL;
    if ((rc = cli_session_open(&ss, a->model, &a->pa, 0, a->threads))) goto done;
    const qkv_model_config *cfg = qkv_model_get_config(ss.model);
    const int n = ss.pr.n, L = cfg->n_layer, T = a->trials;
    if (n < 3) {
        rc = cli_fail("explain: --permute needs a prompt of 3 tokens or more (this one has %d)", n);
        goto done;
    }
    const size_t qn = (size_t)cfg->n_head * cfg->head_dim, kn = (size_t)cfg->n_kv_head * n * cfg->head_dim;
    rows = calloc((size_t)L, sizeof *rows);
    perms = malloc((size_t)T * n * sizeof(int));
    ids = malloc((size_t)n * sizeof(int32_t));
    s.q_off = malloc(qn * sizeof(float));
    s.o_off0 = malloc(qn * sizeof(float));
    s.o_on0 = malloc(qn * sizeof(float));
    s.o = malloc(qn * sizeof(float));
    s.k_off = malloc(kn * sizeof(float));
    s.kp = malloc(kn * sizeof(float));
    s.vp = malloc(kn * sizeof(float));
    s.pos = malloc((size_t)n * sizeof(int64_t));
    if (!rows || !perms || !ids || !s.q_off || !s.o_off0 || !s.o_on0 || !s.o || !s.k_off || !s.kp || !s.vp || !s.pos) {
        rc = cli_fail("out of memory");
        goto done;
    }
    if ((rc = capture_init(&orig, cfg, n)) || (rc = capture_init(&perm_run, cfg, n)) ||
        (rc = capture_run(&orig, ss.model, ss.pr.ids, n)))
        goto done;
    uint64_t state = (uint64_t)a->seed;
    for (int t = 0; t < T; t++) shuffle_prefix(perms + (size_t)t * n, n, &state);
    for (int l = 0; l < L; l++) {
        qkv_layer_attn la;
        qkv_model_layer_attn(&la, cfg, l);
        if ((rc = layer_permute(&rows[l], &orig, &la, l, perms, T, &s, a->threads))) goto done;
        rows[l].resid_ref = max_abs(orig.resid + (size_t)l * cfg->n_embd, (size_t)cfg->n_embd);
        rows[l].z_ref = max_abs(orig.z + (size_t)l * qn, qn);
    }
    /* the whole model on each permuted prompt */
    for (int t = 0; t < T; t++) {
        for (int p = 0; p < n; p++) ids[p] = ss.pr.ids[perms[(size_t)t * n + p]];
        if ((rc = capture_run(&perm_run, ss.model, ids, n))) goto done;
        for (int l = 0; l < L; l++) {
            const size_t E = (size_t)cfg->n_embd;
            rows[l].resid = fmax(rows[l].resid, max_diff(perm_run.resid + l * E, orig.resid + l * E, E));
            rows[l].z = fmax(rows[l].z, max_diff(perm_run.z + l * qn, orig.z + l * qn, qn));
        }
    }
    if (a->json) print_json(a, cfg, &ss.pr, rows, perms, T);
    else print_text(a, cfg, &ss.pr, rows, perms, T);
done:
    capture_free(&orig);
    capture_free(&perm_run);
    free(s.q_off);
    free(s.o_off0);
    free(s.o_on0);
    free(s.o);
    free(s.k_off);
    free(s.kp);
    free(s.vp);
    free(s.pos);
    free(rows);
    free(perms);
    free(ids);
    cli_session_close(&ss);
    return rc;
}
