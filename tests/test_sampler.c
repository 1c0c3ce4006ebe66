/*
 * test_sampler.c — the sampler's contract on synthetic logits: greedy is the
 * argmax (lowest id on ties), top-k 1 and a tiny top-p are greedy at any
 * temperature, draws stay inside the top-k set, a seed reproduces its
 * sequence, bad parameters are refused.
 */
#include "testing.h"

#include "qkv.h"

#include <stdlib.h>
#include <string.h>

enum { V = 1000 };

static qkv_sampler *make(const qkv_sampler_params *p) {
    qkv_sampler *s = NULL;
    qkv_error err = {0};
    CHECK(qkv_sampler_init(&s, V, p, &err) == QKV_OK, "%s", err.msg);
    return s;
}

TEST(sampler_greedy_top_k_top_p_and_seeds) {
    float logits[V];
    test_rng rng = {11};
    test_fill_normal(logits, V, &rng, 2);
    logits[17] = logits[400] = 9; /* a tie at the top: the lower id wins */
    qkv_sampler *greedy = make(NULL);
    const qkv_sampler_params k1 = {.temperature = 2, .top_k = 1, .seed = 5};
    const qkv_sampler_params p0 = {.temperature = 2, .top_p = 1e-6f, .seed = 5};
    const qkv_sampler_params k5 = {.temperature = 1.5f, .top_k = 5, .seed = 9};
    qkv_sampler *a = make(&k1), *b = make(&p0), *c = make(&k5), *c2 = make(&k5);
    if (!greedy || !a || !b || !c || !c2) return;
    /* the five most likely ids: 17, 400 and the three next */
    int top[5] = {17, 400, -1, -1, -1};
    for (int t = 2; t < 5; t++)
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int u = 0; u < t; u++) taken |= top[u] == i;
            if (!taken && (top[t] < 0 || logits[i] > logits[top[t]])) top[t] = i;
        }
    int32_t seq[64], seen_other = 0;
    for (int i = 0; i < 64; i++) {
        CHECK(qkv_sample(greedy, logits) == 17, "greedy is the lowest-id argmax");
        CHECK(qkv_sample(a, logits) == 17 && qkv_sample(b, logits) == 17, "top-k 1 / tiny top-p are greedy");
        seq[i] = qkv_sample(c, logits);
        int in_top = 0;
        for (int t = 0; t < 5; t++) in_top |= seq[i] == top[t];
        CHECK(in_top, "draw %d: id %d outside the top 5", i, seq[i]);
        seen_other |= seq[i] != 17;
        CHECK(qkv_sample(c2, logits) == seq[i], "the same seed gives the same sequence (draw %d)", i);
    }
    CHECK(seen_other, "64 draws at temperature 1.5 over 5 ids never left the argmax");
    qkv_sampler_free(greedy); qkv_sampler_free(a); qkv_sampler_free(b); qkv_sampler_free(c); qkv_sampler_free(c2);

    qkv_sampler *s = NULL;
    qkv_error err = {0};
    const qkv_sampler_params bad = {.temperature = -1};
    CHECK(qkv_sampler_init(&s, V, &bad, &err) == QKV_ERR_INVALID && !s && strstr(err.msg, "temperature"),
          "negative temperature: %s", err.msg);
    CHECK(qkv_sampler_init(&s, 0, NULL, &err) == QKV_ERR_INVALID && !s && strstr(err.msg, "n_vocab"),
          "no vocabulary: %s", err.msg);
    qkv_sampler_free(NULL);
}
