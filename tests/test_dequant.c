/*
 * test_dequant.c — qkv_dequantize against the gguf Python package's own
 * dequantize: tests/fixtures/gguf/quant.gguf (tensor T and T.expected, made
 * by tools/oracle/make_gguf_fixtures.py) and tests/fixtures/dequant/ (random
 * blocks of every block type, made by tools/oracle/make_dequant_fixtures.py),
 * plus hand-computed blocks, any source alignment, row-by-row use, and
 * refusals.
 *
 * Tolerance: zero. Both sides compute each value with the same float32
 * operations in the same order ((d * scale) * q - (dmin * min) ...), so the
 * results are identical, bit for bit.
 */
#include "qkv.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *quant_path(void) {
    static char path[600];
    snprintf(path, sizeof path, "%s/gguf/quant.gguf", test_fixture_dir());
    return path;
}

static const char *const k_supported[] = {"f32", "f16", "bf16", "q8_0", "q4_0",
                                          "q4_1", "q4_K", "q5_K", "q6_K"};

TEST(dequant_matches_gguf_package) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, quant_path(), &err)) {
        CHECK(0, "open: %s", err.msg);
        return;
    }
    CHECK(qkv_gguf_alignment(g) == 64, "fixture alignment %u", qkv_gguf_alignment(g));
    for (size_t k = 0; k < sizeof k_supported / sizeof k_supported[0]; k++) {
        const char *name = k_supported[k];
        char ename[64];
        snprintf(ename, sizeof ename, "%s.expected", name);
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, name));
        const qkv_gguf_tensor *e = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, ename));
        CHECK(t && e, "%s: tensors present", name);
        if (!t || !e) continue;
        CHECK(!strcmp(qkv_ggml_type_name(t->type), name), "%s: type %s", name,
              qkv_ggml_type_name(t->type));
        CHECK(qkv_dequantize_supported(t->type), "%s supported", name);
        CHECK(e->type == QKV_GGML_TYPE_F32 && e->n_elements == t->n_elements && t->n_dims == 2 &&
                  e->shape[0] == t->shape[0] && e->shape[1] == t->shape[1],
              "%s: shapes", name);
        size_t n = (size_t)t->n_elements;
        float *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
        memcpy(want, e->data, n * sizeof *want);

        /* the whole tensor at once */
        qkv_status s = qkv_dequantize(got, t->data, t->type, t->n_elements, &err);
        CHECK(s == QKV_OK, "%s: %s", name, err.msg);
        char what[80];
        snprintf(what, sizeof what, "%s whole", name);
        CHECK_CLOSE(what, got, want, n, 0, 0);

        /* row by row, as the model reads weights: row r at data + r * row_size */
        int64_t rows = t->shape[0], cols = t->shape[1];
        size_t rs = qkv_ggml_row_size(t->type, cols);
        CHECK(rs * (size_t)rows == t->nbytes, "%s: row size %zu x %lld != %zu", name, rs,
              (long long)rows, t->nbytes);
        memset(got, 0xff, n * sizeof *got);
        for (int64_t r = rows - 1; r >= 0; r--)
            qkv_dequantize(got + r * cols, (const uint8_t *)t->data + r * rs, t->type, cols, NULL);
        snprintf(what, sizeof what, "%s by row", name);
        CHECK_CLOSE(what, got, want, n, 0, 0);

        /* any alignment of the source */
        uint8_t *odd = malloc(t->nbytes + 3);
        memcpy(odd + 3, t->data, t->nbytes);
        memset(got, 0, n * sizeof *got);
        qkv_dequantize(got, odd + 3, t->type, t->n_elements, NULL);
        snprintf(what, sizeof what, "%s unaligned", name);
        CHECK_CLOSE(what, got, want, n, 0, 0);
        free(odd);
        free(got);
        free(want);
    }
    qkv_gguf_close(g);
}

/* Bit for bit, -0 and +0 apart; prints the first mismatches. */
static void check_bits(const char *what, const float *got, const float *want, size_t n) {
    int bad = 0;
    double maxd = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(&got[i], &want[i], sizeof got[i])) continue;
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= maxd)) maxd = d;
        if (bad++ < 3) CHECK(0, "%s[%zu] = %.9g, gguf says %.9g", what, i, got[i], want[i]);
    }
    CHECK(!bad, "%s: %d of %zu differ, max |diff| %g", what, bad, n, maxd);
}

/* The bytes of path (malloc'd; *len their count), NULL if unreadable. */
static uint8_t *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *p = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len == cap) {
            uint8_t *q = realloc(p, cap = cap ? 2 * cap : 4096);
            if (!q) break;
            p = q;
        }
        size_t got = fread(p + *len, 1, cap - *len, f);
        if (!got) break;
        *len += got;
    }
    fclose(f);
    return p;
}

/* tests/fixtures/dequant/: <type>.bin blocks, <type>.npy gguf's floats, one
 * manifest line "<type> <ggml id> <n>" each. */
TEST(dequant_matches_gguf_package_every_block_type) {
    char path[700], name[16];
    snprintf(path, sizeof path, "%s/dequant/manifest.txt", test_fixture_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    int id, types = 0;
    long long n;
    while (fscanf(f, "%15s %d %lld", name, &id, &n) == 3) {
        const qkv_ggml_type t = (qkv_ggml_type)id;
        types++;
        CHECK(!strcmp(qkv_ggml_type_name(t), name) && qkv_dequantize_supported(t), "%s: id %d is %s", name, id,
              qkv_ggml_type_name(t));
        size_t len = 0;
        snprintf(path, sizeof path, "%s/dequant/%s.bin", test_fixture_dir(), name);
        uint8_t *raw = read_bytes(path, &len);
        qkv_npy want = {0};
        snprintf(path, sizeof path, "%s/dequant/%s.npy", test_fixture_dir(), name);
        qkv_error err = {0};
        qkv_status st = qkv_npy_load(&want, path, &err);
        CHECK(raw && st == QKV_OK, "%s: fixtures (%s)", name, err.msg);
        if (raw && st == QKV_OK && len == qkv_ggml_row_size(t, n) && want.type == QKV_NPY_F32 &&
            want.count == n) {
            float *got = malloc((size_t)n * sizeof *got);
            memset(got, 0xff, (size_t)n * sizeof *got);
            CHECK(qkv_dequantize(got, raw, t, n, &err) == QKV_OK, "%s: %s", name, err.msg);
            check_bits(name, got, want.data, (size_t)n);
            free(got);
        } else {
            CHECK(0, "%s: %zu bytes, %lld floats for %lld elements", name, len, (long long)want.count, n);
        }
        qkv_npy_free(&want);
        free(raw);
    }
    fclose(f);
    CHECK(types == 10, "manifest lists %d types", types);
}

TEST(dequant_unsupported_types) {
    qkv_error err = {0};
    float y[256];
    static const uint8_t zeros[256];
    static const qkv_ggml_type types[] = {QKV_GGML_TYPE_Q8_1, QKV_GGML_TYPE_IQ4_NL, QKV_GGML_TYPE_Q8_K};
    static const char *const names[] = {"q8_1", "iq4_nl", "q8_K"};
    for (int i = 0; i < 3; i++) {
        CHECK(!qkv_dequantize_supported(types[i]), "%s not supported", names[i]);
        memset(&err, 0, sizeof err);
        qkv_status s = qkv_dequantize(y, zeros, types[i], qkv_ggml_block_elems(types[i]), &err);
        CHECK(s == QKV_ERR_UNSUPPORTED && err.status == s && strstr(err.msg, names[i]),
              "%s: status %d, '%s'", names[i], (int)s, err.msg);
    }
    qkv_status s = qkv_dequantize(y, y, (qkv_ggml_type)4, 32, &err);
    CHECK(s == QKV_ERR_UNSUPPORTED && strstr(err.msg, "id 4"), "unknown id: %s", err.msg);
    s = qkv_dequantize(y, y, QKV_GGML_TYPE_I32, 4, &err);
    CHECK(s == QKV_ERR_UNSUPPORTED && strstr(err.msg, "i32"), "i32: %s", err.msg);
}

TEST(dequant_invalid_counts) {
    qkv_error err = {0};
    uint8_t blk[34] = {0};
    float y[64];
    qkv_status s = qkv_dequantize(y, blk, QKV_GGML_TYPE_Q8_0, 33, &err);
    CHECK(s == QKV_ERR_INVALID && strstr(err.msg, "q8_0"), "partial block: %s", err.msg);
    s = qkv_dequantize(y, blk, QKV_GGML_TYPE_Q8_0, -32, &err);
    CHECK(s == QKV_ERR_INVALID, "negative n");
    s = qkv_dequantize(NULL, NULL, QKV_GGML_TYPE_Q8_0, 0, &err);
    CHECK(s == QKV_OK, "n = 0 is a no-op");
    s = qkv_dequantize(NULL, blk, QKV_GGML_TYPE_Q8_0, 32, &err);
    CHECK(s == QKV_ERR_INVALID, "NULL out");
}

static void put_f16(uint8_t *p, float x) {
    uint16_t h = qkv_f32_to_f16(x);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Small blocks worked out by hand from the layouts in dequant.c. */
TEST(dequant_hand_computed) {
    qkv_error err = {0};
    float y[256];

    /* Q8_0: d = 0.5, q = -16 .. 15 -> y = q / 2 */
    uint8_t q8[34];
    put_f16(q8, 0.5f);
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
    CHECK(qkv_dequantize(y, q8, QKV_GGML_TYPE_Q8_0, 32, &err) == 0, "q8_0");
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)(j - 16) * 0.5f, "q8_0[%d] = %g", j, y[j]);

    /* Q4_0: d = 2, qs[j] = low j, high 15 - j -> y[j] = 2 (j - 8), y[j+16] = 2 (7 - j) */
    uint8_t q4[18];
    put_f16(q4, 2.0f);
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(qkv_dequantize(y, q4, QKV_GGML_TYPE_Q4_0, 32, &err) == 0, "q4_0");
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == 2.0f * (float)(j - 8) && y[j + 16] == 2.0f * (float)(7 - j), "q4_0[%d]", j);

    /* Q4_1: d = 0.25, m = -1, same nibbles -> y[j] = j / 4 - 1 */
    uint8_t q41[20];
    put_f16(q41, 0.25f);
    put_f16(q41 + 2, -1.0f);
    for (int j = 0; j < 16; j++) q41[4 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK(qkv_dequantize(y, q41, QKV_GGML_TYPE_Q4_1, 32, &err) == 0, "q4_1");
    for (int j = 0; j < 16; j++)
        CHECK(y[j] == 0.25f * (float)j - 1.0f && y[j + 16] == 0.25f * (float)(15 - j) - 1.0f,
              "q4_1[%d]", j);

    /* Q5_0: d = 0.5; element j's code is j: low nibbles j & 15, qh bit j set
     * for j >= 16 -> y[j] = (j - 16) / 2 */
    uint8_t q5[22];
    put_f16(q5, 0.5f);
    q5[2] = q5[3] = 0x00, q5[4] = q5[5] = 0xff; /* qh = 0xffff0000 */
    for (int j = 0; j < 16; j++) q5[6 + j] = (uint8_t)(j | j << 4);
    CHECK(qkv_dequantize(y, q5, QKV_GGML_TYPE_Q5_0, 32, &err) == 0, "q5_0");
    for (int j = 0; j < 32; j++) CHECK(y[j] == (float)(j - 16) * 0.5f, "q5_0[%d] = %g", j, y[j]);

    /* Q3_K: d = 1; all 16 scales 33 (stored 6-bit 33: low 4 bits 1, high 2
     * bits 2) -> 1; low bits 3 everywhere; hmask bit j set only for even
     * sub-blocks j -> y = 3 (even j) or 3 - 4 = -1 (odd j) */
    uint8_t q3k[110];
    memset(q3k, 0x55, 32);         /* hmask: bits 0, 2, 4, 6 */
    memset(q3k + 32, 0xff, 64);    /* qs: every 2-bit field 3 */
    memset(q3k + 96, 0x11, 8);     /* low 4 bits of scales 0..15: 1 */
    memset(q3k + 104, 0xaa, 4);    /* high 2 bits: 2 */
    put_f16(q3k + 108, 1.0f);
    CHECK(qkv_dequantize(y, q3k, QKV_GGML_TYPE_Q3_K, 256, &err) == 0, "q3_K");
    for (int i = 0; i < 256; i++) CHECK(y[i] == ((i / 32) % 2 ? -1.0f : 3.0f), "q3_K[%d] = %g", i, y[i]);

    /* Q4_K: d = 1, dmin = 1; sub-block j has scale j + 1 and min j (j < 4 in
     * the low 6 bits of bytes 0..7; j >= 4 split over bytes 8..11 and the top
     * two bits of bytes 0..7). Every nibble 3 -> y = 3 (j + 1) - j. */
    uint8_t q4k[144] = {0};
    put_f16(q4k, 1.0f);
    put_f16(q4k + 2, 1.0f);
    uint8_t *sc = q4k + 4;
    for (int j = 0; j < 8; j++) {
        int s = j + 1, m = j;
        if (j < 4) {
            sc[j] |= (uint8_t)s;
            sc[j + 4] |= (uint8_t)m;
        } else {
            sc[j + 4] = (uint8_t)((s & 15) | (m & 15) << 4);
            sc[j - 4] |= (uint8_t)((s >> 4) << 6);
            sc[j] |= (uint8_t)((m >> 4) << 6);
        }
    }
    memset(q4k + 16, 0x33, 128);
    CHECK(qkv_dequantize(y, q4k, QKV_GGML_TYPE_Q4_K, 256, &err) == 0, "q4_K");
    for (int i = 0; i < 256; i++) {
        int j = i / 32;
        CHECK(y[i] == (float)(3 * (j + 1) - j), "q4_K[%d] = %g", i, y[i]);
    }

    /* Q6_K: d = 1, scales[g] = g - 8 for the 16 groups of 16, all 6-bit q = 33
     * (low 4 bits 1, high 2 bits 2) -> y = (g - 8) * (33 - 32) */
    uint8_t q6k[210];
    memset(q6k, 0x11, 128);             /* ql: low and high nibbles 1 */
    memset(q6k + 128, 0xAA, 64);        /* qh: every 2-bit field 2 */
    for (int gi = 0; gi < 16; gi++) q6k[192 + gi] = (uint8_t)(int8_t)(gi - 8);
    put_f16(q6k + 208, 1.0f);
    CHECK(qkv_dequantize(y, q6k, QKV_GGML_TYPE_Q6_K, 256, &err) == 0, "q6_K");
    for (int i = 0; i < 256; i++) CHECK(y[i] == (float)(i / 16 - 8), "q6_K[%d] = %g", i, y[i]);

    /* BF16 and F16 of simple values */
    uint16_t bf[3] = {qkv_f32_to_bf16(1.5f), qkv_f32_to_bf16(-2.0f), 0x7f80};
    CHECK(qkv_dequantize(y, bf, QKV_GGML_TYPE_BF16, 3, &err) == 0 && y[0] == 1.5f &&
              y[1] == -2.0f && isinf(y[2]),
          "bf16");
}

/* qkv_dequantize_check: for every block type, three blocks of random codes
 * with finite scales but one poisoned (d, then m or dmin where there is
 * one, NaN or +-inf) in block 1: the answer is element block_elems, its
 * value what qkv_dequantize gives there; with all scales finite, -1. Float
 * types element by element. */
TEST(dequant_check_finds_nonfinite_scales) {
    static const struct {
        qkv_ggml_type t;
        int d, m; /* byte offsets of the f16 scales, -1: none */
    } types[] = {
        {QKV_GGML_TYPE_Q8_0, 0, -1}, {QKV_GGML_TYPE_Q4_0, 0, -1}, {QKV_GGML_TYPE_Q4_1, 0, 2},
        {QKV_GGML_TYPE_Q5_0, 0, -1}, {QKV_GGML_TYPE_Q5_1, 0, 2},  {QKV_GGML_TYPE_Q2_K, 80, 82},
        {QKV_GGML_TYPE_Q3_K, 108, -1}, {QKV_GGML_TYPE_Q4_K, 0, 2}, {QKV_GGML_TYPE_Q5_K, 0, 2},
        {QKV_GGML_TYPE_Q6_K, 208, -1},
    };
    static const float poisons[] = {NAN, INFINITY, -INFINITY};
    test_rng rng = {5};
    qkv_error err = {0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const qkv_ggml_type t = types[k].t;
        const int64_t be = qkv_ggml_block_elems(t), n = 3 * be;
        const size_t bb = qkv_ggml_block_bytes(t);
        uint8_t blocks[3 * 210];
        float y[3 * 256];
        for (size_t i = 0; i < 3 * bb; i++) blocks[i] = (uint8_t)test_rng_u64(&rng);
        for (int b = 0; b < 3; b++) {
            put_f16(blocks + b * bb + types[k].d, 0.25f);
            if (types[k].m >= 0) put_f16(blocks + b * bb + types[k].m, -0.5f);
        }
        int64_t index = 7;
        float value = 7;
        CHECK(qkv_dequantize_check(&index, &value, blocks, t, n, &err) == QKV_OK && index == -1 && value == 0,
              "%s finite: index %lld", qkv_ggml_type_name(t), (long long)index);
        for (int which = 0; which < 2; which++) {
            const int off = which ? types[k].m : types[k].d;
            if (off < 0) continue;
            for (int p = 0; p < 3; p++) {
                uint8_t bad[3 * 210];
                memcpy(bad, blocks, 3 * bb);
                put_f16(bad + bb + off, poisons[p]);
                qkv_dequantize(y, bad, t, n, NULL);
                CHECK(qkv_dequantize_check(&index, &value, bad, t, n, &err) == QKV_OK && index == be &&
                          !memcmp(&value, &y[be], sizeof value) && !isfinite(value),
                      "%s, %s = %g in block 1: index %lld value %g", qkv_ggml_type_name(t), which ? "m" : "d",
                      (double)poisons[p], (long long)index, (double)value);
                for (int64_t i = 0; i < n; i++) /* the claim the check rests on */
                    if (isfinite(y[i]) != (i / be != 1)) {
                        CHECK(0, "%s: element %lld = %g", qkv_ggml_type_name(t), (long long)i, (double)y[i]);
                        break;
                    }
            }
        }
    }

    /* float types: element 5 */
    float f32[8] = {0, 1, -2, 3, 4, INFINITY, NAN, 7};
    uint16_t f16[8], bf16[8];
    for (int i = 0; i < 8; i++) f16[i] = qkv_f32_to_f16(f32[i]), bf16[i] = qkv_f32_to_bf16(f32[i]);
    const void *srcs[3] = {f32, f16, bf16};
    const qkv_ggml_type ft[3] = {QKV_GGML_TYPE_F32, QKV_GGML_TYPE_F16, QKV_GGML_TYPE_BF16};
    for (int i = 0; i < 3; i++) {
        int64_t index;
        float value;
        CHECK(qkv_dequantize_check(&index, &value, srcs[i], ft[i], 8, &err) == QKV_OK && index == 5 &&
                  value == INFINITY,
              "%s: index %lld value %g", qkv_ggml_type_name(ft[i]), (long long)index, (double)value);
        CHECK(qkv_dequantize_check(&index, &value, srcs[i], ft[i], 5, &err) == QKV_OK && index == -1,
              "%s: first 5 finite", qkv_ggml_type_name(ft[i]));
    }

    /* the refusals of qkv_dequantize */
    int64_t index;
    float value;
    CHECK(qkv_dequantize_check(&index, &value, f32, QKV_GGML_TYPE_Q5_0, 31, &err) == QKV_ERR_INVALID &&
              strstr(err.msg, "q5_0"),
          "partial block: %s", err.msg);
    CHECK(qkv_dequantize_check(&index, &value, f32, QKV_GGML_TYPE_IQ4_NL, 32, &err) == QKV_ERR_UNSUPPORTED,
          "iq4_nl: %s", err.msg);
    CHECK(qkv_dequantize_check(NULL, &value, f32, QKV_GGML_TYPE_F32, 8, &err) == QKV_ERR_INVALID, "NULL index");
}
