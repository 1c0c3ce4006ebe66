/*
 * model_steps.c — times qkv_model_forward alone: one prefill of a repeated
 * 12-token sentence, then single-token decode steps (min and median), for
 * comparing two builds of libqkv on the same machine, under callgrind or an
 * allocation counter as well as the clock. Only the model API it uses is
 * needed, so it builds against older trees too:
 *   cc -O2 -std=c11 -Iinclude bench/model_steps.c build/libqkv.a -lm -fopenmp -o model_steps
 * (`make` builds it as build/model_steps).
 *   ./model_steps MODEL.gguf [threads 2] [prompt 300] [steps 32] [ctx 1024]
 */
#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>

#include "timing.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: model_steps MODEL.gguf [threads] [prompt] [steps] [ctx]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 2, n_prompt = argc > 3 ? atoi(argv[3]) : 300,
              n_steps = argc > 4 ? atoi(argv[4]) : 32, n_ctx = argc > 5 ? atoi(argv[5]) : 1024;
    static const int32_t sentence[12] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 7627, 314};
    qkv_model_params p = {0};
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    qkv_model *m = NULL;
    qkv_error err;
    if (threads < 1 || n_prompt < 1 || n_steps < 1 || n_ctx < n_prompt + n_steps) {
        fprintf(stderr, "model_steps: threads, prompt and steps must be >= 1, ctx >= prompt + steps\n");
        return 2;
    }
    if (qkv_model_open(&m, argv[1], &p, &err)) {
        fprintf(stderr, "model_steps: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    float *logits = malloc((size_t)qkv_model_get_config(m)->n_vocab * sizeof(float));
    double *step = malloc((size_t)n_steps * sizeof *step);
    for (int i = 0; i < n_prompt; i++) prompt[i] = sentence[i % 12];
    double t0 = util_now_s();
    int failed = qkv_model_forward(m, logits, prompt, n_prompt, 0, NULL, &err) != QKV_OK;
    const double prefill = util_now_s() - t0;
    for (int i = 0; i < n_steps && !failed; i++) {
        int32_t tok = sentence[i % 12];
        t0 = util_now_s();
        failed = qkv_model_forward(m, logits, &tok, 1, 0, NULL, &err) != QKV_OK;
        step[i] = util_now_s() - t0;
    }
    if (failed) {
        fprintf(stderr, "model_steps: %s\n", err.msg);
        return 1;
    }
    qsort(step, (size_t)n_steps, sizeof *step, by_value);
    printf("threads %d: prefill %d tokens %.3f s (%.1f tok/s) | %d decode steps: min %.2f ms, median %.2f ms\n", threads,
           n_prompt, prefill, n_prompt / prefill, n_steps, step[0] * 1e3, step[n_steps / 2] * 1e3);
    free(prompt); free(logits); free(step);
    qkv_model_close(m);
    return 0;
}
