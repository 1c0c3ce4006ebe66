/*
 * needle.c — a needle-in-a-haystack prompt run with telemetry: the prompt in
 * one forward call, then a greedy answer one token per call. An attention
 * hook reads, for the row that produces each answer token, every head's
 * weights from the kernel's LSE (exp(scale q.k - lse), no n x n table): at
 * the first answer token the mass on the needle's keys, and at every token
 * each head's strongest key, which the retrieval score checks against the
 * token generated (Wu et al. 2024), and, if asked, the needle mass at every
 * answer token. It does not render or print anything.
 */
#include "qkv/probe.h"
#include "probe/internal.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int n_layer, n_head;
    int needle_pos, needle_len;
    int step;               /* the answer token the row read produces */
    double *mass_max, *mass_mean;   /* [L] the result's */
    double *step_max, *step_mean;   /* [max_answer, L] the result's, or NULL */
    int *top;               /* [L, Hq] this step's strongest key of each head */
    float *w;               /* [n_ctx] one weight row */
} needle_hook_state;

static qkv_status needle_hook(void *user, const qkv_activation *a, qkv_error *err) {
    needle_hook_state *s = user;
    const int n = (int)a->shape[1], n_keys = (int)a->shape[2], layer = a->layer;
    double mx = 0, sum = 0;
    for (int h = 0; h < s->n_head; h++) {
        qkv_status st = qkv_pattern_weights(s->w, a, h, n - 1, 1, 0, n_keys, err);
        if (st) return st;
        s->top[layer * s->n_head + h] = probe_argmax(s->w, n_keys);
        if (s->step > 0 && !s->step_max) continue;
        double mass = 0;
        for (int j = s->needle_pos; j < s->needle_pos + s->needle_len; j++) mass += s->w[j];
        if (mass > mx) mx = mass;
        sum += mass;
    }
    if (s->step == 0) {
        s->mass_max[layer] = mx;
        s->mass_mean[layer] = sum / s->n_head;
    }
    if (s->step_max) {
        s->step_max[(size_t)s->step * s->n_layer + layer] = mx;
        s->step_mean[(size_t)s->step * s->n_layer + layer] = sum / s->n_head;
    }
    return QKV_OK;
}

qkv_status qkv_needle_run(qkv_needle_result *r, qkv_model *m, const qkv_tokenizer *t, const qkv_needle_prompt *p,
                          int max_answer, qkv_error *err) {
    if (!r || !m || !t || !p || !p->ids || !r->answer || !r->mass_max || !r->mass_mean || !r->retrieval)
        return util_fail(err, QKV_ERR_INVALID, "needle: a NULL argument");
    const qkv_model_config *c = qkv_model_get_config(m);
    const int L = c->n_layer, H = c->n_head, V = c->n_vocab;
    if (max_answer < 1) return util_fail(err, QKV_ERR_INVALID, "needle: max_answer %d < 1", max_answer);
    if (p->needle_pos < 0 || p->needle_len < 1 || p->needle_pos + p->needle_len > p->n)
        return util_fail(err, QKV_ERR_INVALID, "needle: needle tokens [%d, %d) outside the prompt's %d", p->needle_pos,
                        p->needle_pos + p->needle_len, p->n);
    if ((int64_t)p->n + max_answer > qkv_model_n_ctx(m))
        return util_fail(err, QKV_ERR_INVALID, "needle: %d prompt and %d answer tokens exceed the model's %d positions",
                        p->n, max_answer, qkv_model_n_ctx(m));
    needle_hook_state s = {.n_layer = L, .n_head = H, .needle_pos = p->needle_pos, .needle_len = p->needle_len,
                           .mass_max = r->mass_max, .mass_mean = r->mass_mean,
                           .step_max = r->step_mass_max && r->step_mass_mean ? r->step_mass_max : NULL,
                           .step_mean = r->step_mass_mean,
                           .top = malloc((size_t)L * H * sizeof(int)),
                           .w = malloc((size_t)qkv_model_n_ctx(m) * sizeof(float))};
    float *logits = malloc((size_t)V * sizeof(float));                          /* [V] */
    unsigned char *copied = calloc((size_t)L * H * p->needle_len, 1);          /* [L, Hq, needle_len] */
    qkv_status st = QKV_OK;
    r->n_answer = 0;
    if (!s.top || !s.w || !logits || !copied) {
        st = util_fail(err, QKV_ERR_NOMEM, "needle: out of memory");
        goto done;
    }
    const qkv_hook telemetry = {.point = QKV_HOOK_PATTERN, .layer = QKV_ALL, .fn = needle_hook, .user = &s};
    const qkv_forward_opts o = {.hooks = &telemetry, .n_hooks = 1};
    if ((st = qkv_model_rewind(m, 0, err)) || (st = qkv_model_forward(m, logits, p->ids, p->n, 0, &o, err))) goto done;
    for (;;) {
        const int32_t next = probe_argmax(logits, V);
        if (qkv_token_ends_turn(t, next)) break;
        /* a head copies when its strongest key is a needle token equal to next */
        for (int i = 0; i < L * H; i++) {
            const int j = s.top[i] - p->needle_pos;
            if (j >= 0 && j < p->needle_len && p->ids[s.top[i]] == next && !copied[(size_t)i * p->needle_len + j]) {
                copied[(size_t)i * p->needle_len + j] = 1;
                r->retrieval[i] += 1.0 / p->needle_len;
            }
        }
        r->answer[r->n_answer++] = next;
        if (r->n_answer == max_answer) break;
        s.step = r->n_answer;
        if ((st = qkv_model_forward(m, logits, &next, 1, 0, &o, err))) goto done;
    }
done:
    qkv_model_rewind(m, 0, NULL);
    free(s.top);
    free(s.w);
    free(logits);
    free(copied);
    return st;
}
