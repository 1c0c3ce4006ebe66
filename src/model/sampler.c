/*
 * sampler.c — picking the next token from logits: greedy (argmax, lowest id
 * on ties), or temperature with optional top-k and top-p (nucleus) cut-offs,
 * drawn with a seeded splitmix64 so a seed reproduces a run. The candidates
 * live in a buffer allocated at init and are ordered by an in-place heap
 * sort (glibc's qsort allocates for arrays of this size), so a draw never
 * allocates.
 */
#include "qkv/model.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float p;
    int32_t id;
} cand;

struct qkv_sampler {
    qkv_sampler_params params;
    int n_vocab;
    uint64_t rng;   /* splitmix64 state, starts at the seed */
    cand *c;        /* [n_vocab] */
};

static double next_uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* The order of the candidates: probability descending, then id ascending (a
 * total order, so the sorted array is unique). */
static int before(const cand *x, const cand *y) {
    if (x->p != y->p) return x->p > y->p;
    return x->id < y->id;
}

/* Restores the heap (the element that comes last in the order on top) below i. */
static void sift_down(cand *c, size_t i, size_t n) {
    for (;;) {
        size_t top = i, l = 2 * i + 1, r = l + 1;
        if (l < n && before(&c[top], &c[l])) top = l;
        if (r < n && before(&c[top], &c[r])) top = r;
        if (top == i) return;
        cand t = c[i];
        c[i] = c[top];
        c[top] = t;
        i = top;
    }
}

/* Heap sort of c[n] into the order of `before`. */
static void sort_candidates(cand *c, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(c, i, n);
    for (size_t end = n; end > 1; end--) {
        cand t = c[0];
        c[0] = c[end - 1];
        c[end - 1] = t;
        sift_down(c, 0, end - 1);
    }
}

qkv_status qkv_sampler_init(qkv_sampler **out, int n_vocab, const qkv_sampler_params *p, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "sampler: out is NULL");
    *out = NULL;
    const qkv_sampler_params greedy = {0};
    if (!p) p = &greedy;
    if (n_vocab < 1) return util_fail(err, QKV_ERR_INVALID, "sampler: n_vocab %d < 1", n_vocab);
    if (!(p->temperature >= 0) || p->top_k < 0 || !(p->top_p >= 0))
        return util_fail(err, QKV_ERR_INVALID, "sampler: temperature %g, top_k %d and top_p %g must be >= 0",
                        (double)p->temperature, p->top_k, (double)p->top_p);
    qkv_sampler *s = calloc(1, sizeof *s);
    if (s) s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s || !s->c) {
        qkv_sampler_free(s);
        return util_fail(err, QKV_ERR_NOMEM, "sampler: cannot allocate %d candidates", n_vocab);
    }
    s->params = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed;
    *out = s;
    return QKV_OK;
}

void qkv_sampler_free(qkv_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

int32_t qkv_sample(qkv_sampler *s, const float *logits) {
    const int n_vocab = s->n_vocab;
    const qkv_sampler_params *sp = &s->params;
    int32_t best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (sp->temperature <= 0) return best;
    cand *c = s->c;
    for (int i = 0; i < n_vocab; i++) {
        c[i].id = i;
        c[i].p = expf((logits[i] - logits[best]) / sp->temperature);
    }
    sort_candidates(c, (size_t)n_vocab);
    int n = n_vocab;
    if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    double kept = 0;
    for (int i = 0; i < n; i++) kept += c[i].p;
    if (sp->top_p > 0 && sp->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += c[i].p;
            if (acc >= sp->top_p * kept) {
                n = i + 1;
                break;
            }
        }
        kept = acc < kept ? acc : kept;
    }
    double r = next_uniform(&s->rng) * kept, acc = 0;
    int32_t pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) {
            pick = c[i].id;
            break;
        }
    }
    return pick;
}
