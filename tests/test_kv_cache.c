/*
 * test_kv_cache.c — the KV cache: append/read round trips in every dtype,
 * capacity errors, and decode through the cache equal to attention on the
 * same rounded K/V given directly, and init faulting the cache's memory in.
 * Also the scalar dtype conversions against known bit patterns.
 */
#include "testing.h"

#include "qkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(dtype_conversions_round_to_nearest_even) {
    /* bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> even (1.0) */
    CHECK(qkv_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even: %04x", qkv_f32_to_bf16(1.0f + 0x1p-8f));
    CHECK(qkv_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81, "bf16 above tie");
    CHECK(qkv_bf16_to_f32(0x4049) == 3.140625f, "bf16 3.140625");
    CHECK(qkv_f32_to_f16(1.0f) == 0x3c00, "f16 1.0");
    CHECK(qkv_f32_to_f16(65504.0f) == 0x7bff, "f16 max");
    CHECK(qkv_f32_to_f16(65520.0f) == 0x7c00, "f16 overflow to inf");
    CHECK(qkv_f32_to_f16(0x1p-24f) == 0x0001, "f16 smallest subnormal");
    CHECK(qkv_f32_to_f16(0x1p-25f) == 0x0000, "f16 tie below smallest subnormal to even (0)");
    CHECK(qkv_f16_to_f32(0x0001) == 0x1p-24f, "f16 subnormal back");
    CHECK(qkv_f16_to_f32(0xfc00) == -INFINITY, "f16 -inf");
    CHECK(isnan(qkv_f16_to_f32(qkv_f32_to_f16(NAN))), "f16 NaN kept");
    CHECK(isnan(qkv_bf16_to_f32(qkv_f32_to_bf16(NAN))), "bf16 NaN kept");
    /* every f16 value survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        uint16_t back = qkv_f32_to_f16(qkv_f16_to_f32((uint16_t)h));
        if (back != h) {
            CHECK(0, "f16 %04x round trip gave %04x", h, back);
            break;
        }
    }
}

TEST(kv_cache_append_read_and_capacity) {
    const qkv_dtype types[3] = {QKV_DTYPE_F32, QKV_DTYPE_BF16, QKV_DTYPE_F16};
    test_rng r = {7};
    for (int t = 0; t < 3; t++) {
        qkv_kv_cache *c = NULL;
        qkv_error err = {0};
        CHECK(qkv_kv_cache_init(&c, 3, 64, 10, types[t], &err) == QKV_OK, "%s", err.msg);
        float k[3 * 7 * 64], v[3 * 7 * 64], kb[3 * 10 * 64], vb[3 * 10 * 64];
        test_fill_normal(k, sizeof k / 4, &r, 1);
        test_fill_normal(v, sizeof v / 4, &r, 1);
        CHECK(qkv_kv_cache_append(c, k, v, 7, &err) == QKV_OK, "append 7: %s", err.msg);
        CHECK(qkv_kv_cache_len(c) == 7, "len %d", qkv_kv_cache_len(c));
        CHECK(qkv_kv_cache_append(c, k, v, 4, &err) == QKV_ERR_FULL, "append past capacity must fail");
        CHECK(strstr(err.msg, "full") != NULL, "message: %s", err.msg);
        CHECK(qkv_kv_cache_len(c) == 7, "a refused append writes nothing");
        CHECK(qkv_kv_cache_append(c, k, v, 3, &err) == QKV_OK, "append 3 more: %s", err.msg);
        CHECK(qkv_kv_cache_read(kb, vb, c, 0, 10, &err) == QKV_OK, "%s", err.msg);
        /* head h, position p of the cache: [h][p]; of the first append: [h][p] with 7 rows */
        double tol = types[t] == QKV_DTYPE_F32 ? 0 : types[t] == QKV_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;
        for (int h = 0; h < 3; h++)
            for (int p = 0; p < 7; p++)
                for (int e = 0; e < 64; e++) {
                    float want = k[(h * 7 + p) * 64 + e], got = kb[(h * 10 + p) * 64 + e];
                    if (fabsf(got - want) > tol * fabsf(want) + 1e-30) {
                        CHECK(0, "%s k[%d][%d][%d] = %g want %g", qkv_dtype_name(types[t]), h, p, e, got, want);
                        h = 3; p = 7; break;
                    }
                }
        CHECK(qkv_kv_cache_read(kb, vb, c, 5, 6, &err) == QKV_ERR_INVALID, "read past len must fail");
        CHECK(qkv_kv_cache_truncate(c, 2, &err) == QKV_OK && qkv_kv_cache_len(c) == 2, "truncate");
        qkv_kv_cache_free(c);
    }
}

TEST(decode_through_the_cache_equals_direct_attention) {
    /* Prefill 200 positions, then append 100 more (as decoding does), then
     * attend with the last 2 queries: the same as attention over the cache's
     * rounded K/V handed over directly. */
    const qkv_dtype types[3] = {QKV_DTYPE_F32, QKV_DTYPE_BF16, QKV_DTYPE_F16};
    test_rng r = {8};
    enum { HQ = 8, HKV = 2, D = 128, N1 = 200, N2 = 100, N = N1 + N2, CAP = 512 };
    float *k1 = malloc(HKV * N1 * D * 4), *v1 = malloc(HKV * N1 * D * 4); /* [HKV, N1, D] */
    float *k2 = malloc(HKV * N2 * D * 4), *v2 = malloc(HKV * N2 * D * 4); /* [HKV, N2, D] */
    float *kr = malloc(HKV * N * D * 4), *vr = malloc(HKV * N * D * 4);   /* [HKV, N, D] read back */
    float q[HQ * 2 * D], o1[HQ * 2 * D], o2[HQ * 2 * D];                  /* [HQ, 2, D] */
    test_fill_normal(k1, HKV * N1 * D, &r, 1);
    test_fill_normal(v1, HKV * N1 * D, &r, 1);
    test_fill_normal(k2, HKV * N2 * D, &r, 1);
    test_fill_normal(v2, HKV * N2 * D, &r, 1);
    test_fill_normal(q, HQ * 2 * D, &r, 1);
    for (int t = 0; t < 3; t++) {
        qkv_kv_cache *c = NULL;
        qkv_error err = {0};
        CHECK(qkv_kv_cache_init(&c, HKV, D, CAP, types[t], &err) == QKV_OK, "%s", err.msg);
        CHECK(qkv_kv_cache_append(c, k1, v1, N1, &err) == QKV_OK, "%s", err.msg);
        CHECK(qkv_kv_cache_append(c, k2, v2, N2, &err) == QKV_OK, "%s", err.msg);
        CHECK(qkv_kv_cache_read(kr, vr, c, 0, N, &err) == QKV_OK, "%s", err.msg);
        qkv_attn_desc d = {.n_q_head = HQ, .n_kv_head = HKV, .q_len = 2, .kv_len = N, .head_dim = D,
                           .mask = {.kind = QKV_MASK_CAUSAL}, .n_threads = 2};
        CHECK(qkv_attn_cached(o1, NULL, q, c, &d, QKV_KERNEL_DECODE, &err) == QKV_OK, "%s", err.msg);
        CHECK(qkv_attn(o2, NULL, q, kr, vr, &d, QKV_KERNEL_REFERENCE, &err) == QKV_OK, "%s", err.msg);
        CHECK_CLOSE(qkv_dtype_name(types[t]), o1, o2, HQ * 2 * D, 1e-5, 0);
        qkv_kv_cache_free(c);
    }
    free(k1); free(v1); free(k2); free(v2); free(kr); free(vr);
}

/* This process's resident bytes (/proc/self/statm), or -1. */
static double resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* A new cache is resident at once (kv_cache.c: kv_commit), not page by page
 * as it fills, so its first append does not fault in a huge page per head
 * inside a forward pass. 2 x 64 MiB: above glibc's largest mmap threshold,
 * so the memory is fresh, never pages an earlier test touched. */
TEST(kv_cache_init_makes_its_memory_resident) {
    const int n_kv_head = 8, capacity = 16384, head_dim = 128;
    const double bytes = 2.0 * n_kv_head * capacity * head_dim * 4;
    const double before = resident_bytes();
    qkv_kv_cache *c = NULL;
    qkv_error err = {0};
    CHECK(qkv_kv_cache_init(&c, n_kv_head, head_dim, capacity, QKV_DTYPE_F32, &err) == QKV_OK, "%s", err.msg);
    const double after = resident_bytes();
    CHECK(before >= 0 && after >= 0, "/proc/self/statm is readable");
    CHECK(after - before >= 0.95 * bytes, "resident grew by %.1f MiB for a %.1f MiB cache", (after - before) / (1 << 20),
          bytes / (1 << 20));
    qkv_kv_cache_free(c);
}
