/*
 * sampler.c — picking the next token from logits: greedy (argmax, lowest id
 * on ties), or temperature with optional top-k and top-p (nucleus) cut-offs,
 * drawn with a seeded splitmix64 so a seed reproduces a run.
 */
#include "qkv.h"

#include <math.h>
#include <stdlib.h>

static double next_uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

typedef struct {
    float p;
    int32_t id;
} cand;

static int by_prob_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t qkv_sample(const float *logits, int n_vocab, const qkv_sampler *s, uint64_t *rng_state) {
    int32_t best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (!s || s->temperature <= 0) return best;
    cand *c = malloc((size_t)n_vocab * sizeof *c);
    if (!c) return best;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) {
        c[i].id = i;
        c[i].p = expf((logits[i] - logits[best]) / s->temperature);
        sum += c[i].p;
    }
    qsort(c, (size_t)n_vocab, sizeof *c, by_prob_desc);
    int n = n_vocab;
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;
    double kept = 0;
    for (int i = 0; i < n; i++) kept += c[i].p;
    if (s->top_p > 0 && s->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += c[i].p;
            if (acc >= s->top_p * kept) {
                n = i + 1;
                break;
            }
        }
        kept = acc < kept ? acc : kept;
    }
    (void)sum;
    double r = next_uniform(rng_state) * kept, acc = 0;
    int32_t pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(c);
    return pick;
}
