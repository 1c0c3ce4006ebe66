/*
 * test_attn_plan.c — the attention plan: qkv_attn_run gives qkv_attn's
 * results bit for bit (it is the same kernel on the same rows; only where the
 * scratch lives differs) for every planned kernel, mask kind, exclusions and
 * KV dtype, from a plan larger than the call and from one in a misaligned
 * caller workspace; a call larger than its plan is refused naming the field.
 * That runs allocate nothing is test_alloc.c's.
 */
#include "testing.h"

#include "qkv.h"

#include <stdlib.h>
#include <string.h>

/* The largest call of the sweep below. */
static const qkv_attn_desc plan_max = {.n_q_head = 8, .n_kv_head = 8, .q_len = 40, .kv_len = 700, .head_dim = 80};

typedef struct {
    int hq, hkv, lq, lk, d;
} plan_shape;

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

TEST(attn_plan_run_equals_qkv_attn_bit_for_bit) {
    const qkv_kernel kernels[] = {QKV_KERNEL_FLASH, QKV_KERNEL_FLASH_BF16, QKV_KERNEL_DECODE, QKV_KERNEL_AUTO};
    const qkv_mask_kind masks[] = {QKV_MASK_NONE, QKV_MASK_CAUSAL, QKV_MASK_WINDOW, QKV_MASK_SINK_WINDOW};
    const qkv_dtype dtypes[] = {QKV_DTYPE_F32, QKV_DTYPE_BF16, QKV_DTYPE_F16};
    /* decode's rows (Lq <= 8) against long and short KV; flash's blocks; AUTO both ways */
    const plan_shape shapes[] = {{8, 2, 1, 700, 64}, {6, 3, 5, 300, 80}, {4, 4, 8, 33, 16},
                                 {8, 1, 40, 700, 64}, {2, 2, 17, 17, 72}};
    const int excl[] = {0, 5, 299, 64, 63};
    test_rng rng = {42};
    const size_t nq = (size_t)8 * 40 * 80, nkv = (size_t)8 * 700 * 80;
    float *q = malloc(nq * 4), *kf = malloc(nkv * 4), *vf = malloc(nkv * 4);
    void *k = malloc(nkv * 4), *v = malloc(nkv * 4);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4), *l1 = malloc(8 * 40 * 4), *l2 = malloc(8 * 40 * 4);
    test_fill_normal(q, nq, &rng, 1);
    test_fill_normal(kf, nkv, &rng, 1);
    test_fill_normal(vf, nkv, &rng, 1);
    qkv_error err = {0};
    for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
        qkv_attn_desc max = plan_max;
        if (kernels[ki] == QKV_KERNEL_DECODE) max.q_len = QKV_DECODE_MAX_Q;
        /* one plan of its own memory, one in a caller's workspace 3 bytes off alignment */
        qkv_attn_plan *own = NULL, *in = NULL;
        CHECK(qkv_attn_plan_init(&own, &max, kernels[ki], 2, &err) == QKV_OK, "plan: %s", err.msg);
        size_t bytes = qkv_attn_workspace_size(&max, kernels[ki], 2);
        char *ws = malloc(bytes + 3);
        CHECK(bytes > 0 && qkv_attn_plan_init_in(&in, ws + 3, bytes, &max, kernels[ki], 2, &err) == QKV_OK,
              "plan in workspace: %s", err.msg);
        if (!own || !in) break;
        int compared = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const plan_shape *s = &shapes[si];
            if (s->lq > max.q_len) continue;
            for (size_t ti = 0; ti < sizeof dtypes / sizeof dtypes[0]; ti++) {
                qkv_convert_from_f32(k, dtypes[ti], kf, (size_t)s->hkv * s->lk * s->d);
                qkv_convert_from_f32(v, dtypes[ti], vf, (size_t)s->hkv * s->lk * s->d);
                for (size_t mi = 0; mi < sizeof masks / sizeof masks[0] + 1; mi++) {
                    /* the last round: causal with exclusions */
                    const int with_excl = mi == sizeof masks / sizeof masks[0];
                    qkv_attn_desc d = {.n_q_head = s->hq, .n_kv_head = s->hkv, .q_len = s->lq, .kv_len = s->lk,
                                       .head_dim = s->d, .kv_dtype = dtypes[ti],
                                       .mask = {.kind = with_excl ? QKV_MASK_CAUSAL : masks[mi], .window = 50,
                                                .sinks = 4, .exclude = with_excl ? excl : NULL,
                                                .n_exclude = with_excl ? 5 : 0}};
                    const size_t n_o = (size_t)s->hq * s->lq * s->d, n_l = (size_t)s->hq * s->lq;
                    qkv_status a = qkv_attn(o1, l1, q, k, v, &d, kernels[ki], &err);
                    CHECK(a == QKV_OK, "qkv_attn: %s", err.msg);
                    for (int pi = 0; pi < 2 && a == QKV_OK; pi++) {
                        memset(o2, 0xff, n_o * 4);
                        qkv_status b = qkv_attn_run(pi ? in : own, o2, l2, q, k, v, &d, &err);
                        CHECK(b == QKV_OK, "qkv_attn_run: %s", err.msg);
                        CHECK(b == QKV_OK && same_bits(o1, o2, n_o) && same_bits(l1, l2, n_l),
                              "%s %s mask %d%s hq=%d lq=%d lk=%d (%s plan): results differ",
                              qkv_kernel_name(kernels[ki]), qkv_dtype_name(dtypes[ti]), (int)d.mask.kind,
                              with_excl ? " + exclusions" : "", s->hq, s->lq, s->lk, pi ? "workspace" : "own");
                        compared++;
                    }
                }
            }
        }
        CHECK(compared >= 2 * 3 * 5 * 3, "%s: only %d comparisons", qkv_kernel_name(kernels[ki]), compared);
        qkv_attn_plan_free(own);
        qkv_attn_plan_free(in); /* nothing: the workspace is ours */
        free(ws);
    }
    free(q); free(kf); free(vf); free(k); free(v); free(o1); free(o2); free(l1); free(l2);
}

TEST(attn_plan_refuses_calls_larger_than_it) {
    const qkv_attn_desc max = {.n_q_head = 4, .n_kv_head = 2, .q_len = 4, .kv_len = 64, .head_dim = 32};
    qkv_attn_plan *plan = NULL;
    qkv_error err = {0};
    CHECK(qkv_attn_plan_init(&plan, &max, QKV_KERNEL_AUTO, 2, &err) == QKV_OK, "%s", err.msg);
    if (!plan) return;
    float *q = calloc(8 * 8 * 48, 4), *kv = calloc(4 * 65 * 48, 4), *o = calloc(8 * 8 * 48, 4);
    struct {
        const char *field;
        qkv_attn_desc d;
    } big[] = {
        {"n_q_head", {.n_q_head = 8, .n_kv_head = 2, .q_len = 4, .kv_len = 64, .head_dim = 32}},
        {"q_len", {.n_q_head = 4, .n_kv_head = 2, .q_len = 5, .kv_len = 64, .head_dim = 32}},
        {"kv_len", {.n_q_head = 4, .n_kv_head = 2, .q_len = 4, .kv_len = 65, .head_dim = 32}},
        {"head_dim", {.n_q_head = 4, .n_kv_head = 2, .q_len = 4, .kv_len = 64, .head_dim = 48}},
        {"n_threads", {.n_q_head = 4, .n_kv_head = 2, .q_len = 4, .kv_len = 64, .head_dim = 32, .n_threads = 3}},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        err.msg[0] = 0;
        qkv_status st = qkv_attn_run(plan, o, NULL, q, kv, kv, &big[i].d, &err);
        CHECK(st == QKV_ERR_INVALID && strstr(err.msg, big[i].field) && strstr(err.msg, "plan"),
              "%s beyond the plan: status %d, '%s'", big[i].field, (int)st, err.msg);
    }
    /* the plan's own size, smaller ones and other KV head counts run */
    const qkv_attn_desc fits[] = {max, {.n_q_head = 4, .n_kv_head = 4, .q_len = 1, .kv_len = 1, .head_dim = 16},
                                  {.n_q_head = 3, .n_kv_head = 1, .q_len = 2, .kv_len = 40, .head_dim = 20,
                                   .n_threads = 1}};
    for (size_t i = 0; i < sizeof fits / sizeof fits[0]; i++)
        CHECK(qkv_attn_run(plan, o, NULL, q, kv, kv, &fits[i], &err) == QKV_OK, "fits[%zu]: %s", i, err.msg);
    qkv_attn_plan_free(plan);

    /* bad plans */
    qkv_attn_desc long_q = max;
    long_q.q_len = QKV_DECODE_MAX_Q + 1;
    CHECK(qkv_attn_plan_init(&plan, &long_q, QKV_KERNEL_DECODE, 2, &err) == QKV_ERR_INVALID && !plan &&
              strstr(err.msg, "q_len"),
          "a decode plan for q_len 9: %s", err.msg);
    CHECK(qkv_attn_workspace_size(&long_q, QKV_KERNEL_DECODE, 2) == 0, "workspace size of a bad plan");
    qkv_attn_desc no_heads = max;
    no_heads.n_q_head = 0;
    CHECK(qkv_attn_plan_init(&plan, &no_heads, QKV_KERNEL_FLASH, 2, &err) == QKV_ERR_INVALID &&
              strstr(err.msg, "n_q_head"),
          "a plan for no heads: %s", err.msg);
    CHECK(qkv_attn_plan_init(&plan, &max, QKV_KERNEL_FLASH, -1, &err) == QKV_ERR_INVALID, "n_threads -1");
    CHECK(qkv_attn_plan_init(&plan, &max, (qkv_kernel)99, 2, &err) == QKV_ERR_INVALID, "kernel 99");
    size_t bytes = qkv_attn_workspace_size(&max, QKV_KERNEL_AUTO, 2);
    char *ws = malloc(bytes);
    CHECK(qkv_attn_plan_init_in(&plan, ws, bytes - 1, &max, QKV_KERNEL_AUTO, 2, &err) == QKV_ERR_INVALID &&
              !plan && strstr(err.msg, "workspace"),
          "a workspace one byte short: %s", err.msg);
    CHECK(qkv_attn_run(NULL, o, NULL, q, kv, kv, &max, &err) == QKV_ERR_INVALID, "NULL plan");
    qkv_attn_plan_free(NULL);
    free(ws); free(q); free(kv); free(o);
}

/* A flash plan for bf16/f16 K/V keeps each thread's f32 copy of a KV head
 * between the blocks of a call (attn_kv_f32), never between calls: runs on
 * new K/V through one plan give qkv_attn's bits each time, with the
 * copy (a bf16 plan) and without it (an f32 plan: each tile converted). */
TEST(attn_plan_kv_copy_is_per_call) {
    const qkv_dtype dtypes[] = {QKV_DTYPE_BF16, QKV_DTYPE_F16};
    const int hq = 6, hkv = 1, n = 300, D = 64; /* one KV head: a stale copy would be of the same head */
    const size_t nq = (size_t)hq * n * D, nkv = (size_t)hkv * n * D;
    float *q = malloc(nq * 4), *kf = malloc(nkv * 4), *vf = malloc(nkv * 4);
    void *k = malloc(nkv * 2), *v = malloc(nkv * 2);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4), *l1 = malloc((size_t)hq * n * 4), *l2 = malloc((size_t)hq * n * 4);
    test_rng rng = {7};
    qkv_error err = {0};
    for (size_t ti = 0; ti < 2; ti++) {
        qkv_attn_desc d = {.n_q_head = hq, .n_kv_head = hkv, .q_len = n, .kv_len = n, .head_dim = D,
                           .kv_dtype = dtypes[ti], .n_threads = 2, .mask = {.kind = QKV_MASK_CAUSAL}};
        qkv_attn_desc f32_max = d;
        f32_max.kv_dtype = QKV_DTYPE_F32;
        qkv_attn_plan *with = NULL, *without = NULL;
        CHECK(qkv_attn_plan_init(&with, &d, QKV_KERNEL_FLASH, 2, &err) == QKV_OK, "plan: %s", err.msg);
        CHECK(qkv_attn_plan_init(&without, &f32_max, QKV_KERNEL_FLASH, 2, &err) == QKV_OK, "plan: %s", err.msg);
        CHECK(qkv_attn_workspace_size(&d, QKV_KERNEL_FLASH, 2) >=
                  qkv_attn_workspace_size(&f32_max, QKV_KERNEL_FLASH, 2) + (size_t)2 * 2 * n * D * 4,
              "a bf16/f16 plan holds a copy of a KV head per thread");
        /* the copy is at most 4 MiB each of K and V per thread (qkv/attn.h), and decode plans hold none */
        qkv_attn_desc big = d, big_f32 = f32_max;
        big.kv_len = big_f32.kv_len = 1 << 20;
        big.head_dim = big_f32.head_dim = 128;
        const size_t cap = (size_t)2 * 2 * (4 << 20) + 64;
        CHECK(qkv_attn_workspace_size(&big, QKV_KERNEL_FLASH, 2) <=
                  qkv_attn_workspace_size(&big_f32, QKV_KERNEL_FLASH, 2) + cap,
              "1M keys: the copy is beyond 4 MiB each of K and V");
        big.q_len = big_f32.q_len = 1;
        CHECK(qkv_attn_workspace_size(&big, QKV_KERNEL_DECODE, 2) ==
                  qkv_attn_workspace_size(&big_f32, QKV_KERNEL_DECODE, 2),
              "a decode plan holds a K/V copy");
        if (!with || !without) break;
        for (int round = 0; round < 3; round++) { /* new K, V and Q each round, the same plans */
            test_fill_normal(q, nq, &rng, 1);
            test_fill_normal(kf, nkv, &rng, 1);
            test_fill_normal(vf, nkv, &rng, 1);
            qkv_convert_from_f32(k, dtypes[ti], kf, nkv);
            qkv_convert_from_f32(v, dtypes[ti], vf, nkv);
            CHECK(qkv_attn(o1, l1, q, k, v, &d, QKV_KERNEL_FLASH, &err) == QKV_OK, "%s", err.msg);
            for (int pi = 0; pi < 2; pi++) {
                memset(o2, 0xff, nq * 4);
                CHECK(qkv_attn_run(pi ? without : with, o2, l2, q, k, v, &d, &err) == QKV_OK, "%s", err.msg);
                CHECK(same_bits(o1, o2, nq) && same_bits(l1, l2, (size_t)hq * n),
                      "%s round %d, plan %s the copy: results differ", qkv_dtype_name(dtypes[ti]), round,
                      pi ? "without" : "with");
            }
        }
        qkv_attn_plan_free(with);
        qkv_attn_plan_free(without);
    }
    free(q); free(kf); free(vf); free(k); free(v); free(o1); free(o2); free(l1); free(l2);
}
