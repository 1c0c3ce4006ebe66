/*
 * test_gguf.c — the GGUF reader: every metadata type and accessor on a file
 * written by the gguf Python package (tests/fixtures/gguf/meta.gguf, made by
 * tools/oracle/make_gguf_fixtures.py; the literal values below are the ones
 * that script writes), tensor shapes outermost first, versions 2/3, and bad
 * files: hand-built malformed headers, every truncation, random corruption.
 * A bad file must give QKV_ERR_FORMAT (or _IO) with a message naming the file,
 * never a crash; run under -fsanitize=address,undefined to be sure.
 */
#include "qkv.h"
#include "gguf_build.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fixture(const char *name) {
    static char path[600];
    snprintf(path, sizeof path, "%s/gguf/%s", test_fixture_dir(), name);
    return path;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static const char *tmp_path(const char *name) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    return path;
}

/* ------------------------------------------------------- good file, values */

TEST(gguf_meta_scalars) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    const char *path = fixture("meta.gguf");
    qkv_status s = qkv_gguf_open(&g, path, &err);
    CHECK(s == QKV_OK, "open %s: %s", path, err.msg);
    if (s) return;
    CHECK(qkv_gguf_version(g) == 3, "version %u", qkv_gguf_version(g));
    CHECK(qkv_gguf_alignment(g) == 32, "alignment %u", qkv_gguf_alignment(g));
    CHECK(qkv_gguf_n_kv(g) == 31, "n_kv %lld", (long long)qkv_gguf_n_kv(g));
    CHECK(!strcmp(qkv_gguf_path(g), path), "path");
    CHECK(qkv_gguf_key(g, 0) && !strcmp(qkv_gguf_key(g, 0), "general.architecture"),
          "first key in file order");
    CHECK(qkv_gguf_key(g, -1) == NULL && qkv_gguf_key(g, 31) == NULL, "key out of range");
    CHECK(qkv_gguf_find_key(g, "nope") == -1, "absent key");
    CHECK(qkv_gguf_find_key(g, NULL) == -1, "NULL key");
    CHECK(qkv_gguf_key_type(g, 99) == (qkv_gguf_type)-1, "key_type out of range");

    const char *str;
    size_t len;
    CHECK(qkv_gguf_get_string(&str, &len, g, "general.architecture", &err) == 0 &&
              !strcmp(str, "testarch") && len == 8,
          "architecture");

    int64_t i64;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    int b;
    static const struct { const char *key; qkv_gguf_type type; int64_t v; } ints[] = {
        {"test.u8", QKV_GGUF_TYPE_U8, 200},
        {"test.i8", QKV_GGUF_TYPE_I8, -100},
        {"test.u16", QKV_GGUF_TYPE_U16, 60000},
        {"test.i16", QKV_GGUF_TYPE_I16, -30000},
        {"test.u32", QKV_GGUF_TYPE_U32, 4000000000},
        {"test.i32", QKV_GGUF_TYPE_I32, -2000000000},
        {"test.u64_small", QKV_GGUF_TYPE_U64, 123456789012},
        {"test.i64", QKV_GGUF_TYPE_I64, -1099511627776},
        {"test.after_nested", QKV_GGUF_TYPE_U32, 77},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int64_t id = qkv_gguf_find_key(g, ints[k].key);
        CHECK(id >= 0 && qkv_gguf_key_type(g, id) == ints[k].type, "%s: type %d", ints[k].key,
              (int)qkv_gguf_key_type(g, id));
        i64 = 0;
        s = qkv_gguf_get_int(&i64, g, ints[k].key, &err);
        CHECK(s == QKV_OK && i64 == ints[k].v, "get_int %s: %lld (%s)", ints[k].key, (long long)i64,
              err.msg);
    }
    CHECK(qkv_gguf_get_u32(&u32, g, "test.u32", &err) == 0 && u32 == 4000000000u, "get_u32");
    CHECK(qkv_gguf_get_i32(&i32, g, "test.i32", &err) == 0 && i32 == -2000000000, "get_i32");
    CHECK(qkv_gguf_get_u64(&u64, g, "test.u64", &err) == 0 && u64 == 9223372036854775813ull,
          "get_u64");
    CHECK(qkv_gguf_get_f32(&f, g, "test.f32", &err) == 0 && f == 3.25f, "get_f32 %g", f);
    CHECK(qkv_gguf_get_f32(&f, g, "test.f64", &err) == 0 && f == 0.1f, "get_f32 of f64 %g", f);
    CHECK(qkv_gguf_get_bool(&b, g, "test.bool", &err) == 0 && b == 1, "bool true");
    CHECK(qkv_gguf_get_bool(&b, g, "test.bool_false", &err) == 0 && b == 0, "bool false");
    CHECK(qkv_gguf_get_string(&str, &len, g, "test.string", &err) == 0 &&
              !strcmp(str, "h\xc3\xa9llo \xe5\xb9\xb4\xe5\x81\x87\xe6\x80\x8e\xe4\xb9\x88\xe7\x94\xb3\xe8\xaf\xb7") &&
              len == strlen(str),
          "utf-8 string");
    CHECK(qkv_gguf_get_string(&str, &len, g, "test.string_nul", &err) == 0 && len == 3 &&
              !memcmp(str, "a\0b", 4),
          "string with NUL: len %zu", len);
    CHECK(qkv_gguf_get_string(&str, NULL, g, "test.string", &err) == 0, "NULL len");

    /* type checking, with messages that name the file and the key */
    memset(&err, 0, sizeof err);
    s = qkv_gguf_get_u32(&u32, g, "test.i32", &err);
    CHECK(s == QKV_ERR_FORMAT && err.status == QKV_ERR_FORMAT && strstr(err.msg, "test.i32") &&
              strstr(err.msg, "i32") && strstr(err.msg, "meta.gguf"),
          "u32 of i32: %s", err.msg);
    s = qkv_gguf_get_int(&i64, g, "test.u64", &err);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "out of range"), "u64 above INT64_MAX: %s",
          err.msg);
    s = qkv_gguf_get_int(&i64, g, "test.f32", &err);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "f32"), "int of f32: %s", err.msg);
    s = qkv_gguf_get_int(&i64, g, "test.bool", &err);
    CHECK(s == QKV_ERR_FORMAT, "int of bool");
    s = qkv_gguf_get_f32(&f, g, "test.u32", &err);
    CHECK(s == QKV_ERR_FORMAT, "f32 of u32");
    s = qkv_gguf_get_string(&str, &len, g, "test.arr.str", &err);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "array"), "string of array: %s", err.msg);
    s = qkv_gguf_get_bool(&b, g, "missing.key", &err);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "missing.key") && strstr(err.msg, "missing"),
          "missing key: %s", err.msg);
    CHECK(qkv_gguf_get_u32(&u32, g, "missing.key", NULL) == QKV_ERR_FORMAT, "NULL err");
    qkv_gguf_close(g);
}

TEST(gguf_meta_arrays) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, fixture("meta.gguf"), &err)) {
        CHECK(0, "open: %s", err.msg);
        return;
    }
    int64_t id;
#define ARR(key, etype, ctype, ...)                                                         \
    do {                                                                                    \
        static const ctype want[] = {__VA_ARGS__};                                          \
        size_t nw = sizeof want / sizeof want[0];                                           \
        id = qkv_gguf_find_key(g, key);                                                     \
        CHECK(id >= 0 && qkv_gguf_key_type(g, id) == QKV_GGUF_TYPE_ARRAY, key ": not array"); \
        CHECK(qkv_gguf_arr_type(g, id) == etype, key ": element type %d",                  \
              (int)qkv_gguf_arr_type(g, id));                                               \
        CHECK(qkv_gguf_arr_len(g, id) == nw, key ": len %llu",                             \
              (unsigned long long)qkv_gguf_arr_len(g, id));                                 \
        const ctype *got = qkv_gguf_arr_data(g, id);                                        \
        CHECK(got && ((uintptr_t)got % sizeof(ctype)) == 0, key ": data %p", (void *)got); \
        if (got && qkv_gguf_arr_len(g, id) == nw)                                           \
            CHECK(!memcmp(got, want, sizeof want), key ": values differ");                  \
    } while (0)
    ARR("test.arr.u8", QKV_GGUF_TYPE_U8, uint8_t, 1, 2, 255);
    ARR("test.arr.i8", QKV_GGUF_TYPE_I8, int8_t, -1, 2, -128);
    ARR("test.arr.u16", QKV_GGUF_TYPE_U16, uint16_t, 1, 65535);
    ARR("test.arr.i16", QKV_GGUF_TYPE_I16, int16_t, -32768, 7);
    ARR("test.arr.u32", QKV_GGUF_TYPE_U32, uint32_t, 0, 4294967295u, 5);
    ARR("test.arr.i32", QKV_GGUF_TYPE_I32, int32_t, -5, 6, 2147483647);
    ARR("test.arr.f32", QKV_GGUF_TYPE_F32, float, 0.5f, -1.25f, 1e-3f);
    ARR("test.arr.bool", QKV_GGUF_TYPE_BOOL, uint8_t, 1, 0, 1);
    ARR("test.arr.u64", QKV_GGUF_TYPE_U64, uint64_t, UINT64_MAX, 1);
    ARR("test.arr.i64", QKV_GGUF_TYPE_I64, int64_t, INT64_MIN, 3);
    ARR("test.arr.f64", QKV_GGUF_TYPE_F64, double, 2.5, -0.1);
#undef ARR

    id = qkv_gguf_find_key(g, "test.arr.str");
    CHECK(qkv_gguf_arr_type(g, id) == QKV_GGUF_TYPE_STRING && qkv_gguf_arr_len(g, id) == 5,
          "string array");
    CHECK(qkv_gguf_arr_data(g, id) == NULL, "no raw data for strings");
    static const char *const want[] = {"a", "", "\xe5\xb9\xb4\xe5\x81\x87\xe6\x80\x8e\xe4\xb9\x88\xe7\x94\xb3\xe8\xaf\xb7",
                                       "x\0y", "<|im_start|>"};
    static const size_t want_len[] = {1, 0, 18, 3, 12};
    for (int i = 0; i < 5; i++) {
        size_t len = 999;
        const char *sv = qkv_gguf_arr_str(g, id, (uint64_t)i, &len);
        CHECK(sv && len == want_len[i] && !memcmp(sv, want[i], len) && sv[len] == 0,
              "arr_str %d: len %zu", i, len);
    }
    CHECK(qkv_gguf_arr_str(g, id, 5, NULL) == NULL, "arr_str out of range");
    CHECK(qkv_gguf_arr_str(g, qkv_gguf_find_key(g, "test.arr.u8"), 0, NULL) == NULL,
          "arr_str of a numeric array");

    id = qkv_gguf_find_key(g, "test.arr.nested");
    CHECK(qkv_gguf_arr_type(g, id) == QKV_GGUF_TYPE_ARRAY && qkv_gguf_arr_len(g, id) == 2 &&
              qkv_gguf_arr_data(g, id) == NULL,
          "nested i32 arrays");
    id = qkv_gguf_find_key(g, "test.arr.nested_str");
    CHECK(qkv_gguf_arr_type(g, id) == QKV_GGUF_TYPE_ARRAY && qkv_gguf_arr_len(g, id) == 2,
          "nested string arrays");

    /* not arrays */
    id = qkv_gguf_find_key(g, "test.u8");
    CHECK(qkv_gguf_arr_len(g, id) == 0 && qkv_gguf_arr_type(g, id) == (qkv_gguf_type)-1 &&
              qkv_gguf_arr_data(g, id) == NULL,
          "scalar is not an array");
    CHECK(qkv_gguf_arr_len(g, -1) == 0 && qkv_gguf_arr_data(g, 1000) == NULL, "bad key_id");
    qkv_gguf_close(g);
}

TEST(gguf_tensor_shapes_outermost_first) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, fixture("meta.gguf"), &err)) {
        CHECK(0, "open: %s", err.msg);
        return;
    }
    CHECK(qkv_gguf_n_tensors(g) == 2, "n_tensors %lld", (long long)qkv_gguf_n_tensors(g));
    int64_t id = qkv_gguf_find_tensor(g, "t.3d");
    const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, id);
    CHECK(t != NULL, "t.3d present");
    if (t) {
        /* numpy [2, 3, 4] -> ggml ne {4, 3, 2} -> our shape [2, 3, 4] */
        CHECK(!strcmp(t->name, "t.3d") && t->type == QKV_GGML_TYPE_F32 && t->n_dims == 3, "t.3d");
        CHECK(t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 4 && t->shape[3] == 1,
              "shape [%lld %lld %lld %lld]", (long long)t->shape[0], (long long)t->shape[1],
              (long long)t->shape[2], (long long)t->shape[3]);
        CHECK(t->n_elements == 24 && t->nbytes == 96, "n_elements %lld nbytes %zu",
              (long long)t->n_elements, t->nbytes);
        CHECK((qkv_gguf_data_offset(g) + t->offset) % 32 == 0, "aligned data");
        float v[24];
        memcpy(v, t->data, sizeof v);
        int ok = 1;
        for (int i = 0; i < 24; i++) ok &= v[i] == (float)i;
        CHECK(ok, "row-major values 0..23");
    }
    t = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, "t.1d"));
    CHECK(t && t->type == QKV_GGML_TYPE_F16 && t->n_dims == 1 && t->shape[0] == 8 &&
              t->nbytes == 16,
          "t.1d");
    if (t) {
        float y[8];
        CHECK(qkv_dequantize(y, t->data, t->type, 8, &err) == QKV_OK, "dequant f16: %s", err.msg);
        const float want[8] = {1, -2, 0.5f, 65504, -0.0f, 5.96046448e-08f, INFINITY, -INFINITY};
        CHECK_CLOSE("t.1d", y, want, 8, 0, 0);
        CHECK(signbit(y[4]), "-0 kept");
    }
    CHECK(qkv_gguf_find_tensor(g, "nope") == -1 && qkv_gguf_find_tensor(g, NULL) == -1,
          "absent tensor");
    CHECK(qkv_gguf_tensor_info(g, -1) == NULL && qkv_gguf_tensor_info(g, 2) == NULL,
          "tensor_info out of range");
    qkv_gguf_close(g);
}

TEST(gguf_type_tables) {
    /* block sizes as in ggml-common.h / gguf.constants.GGML_QUANT_SIZES */
    static const struct { qkv_ggml_type t; const char *name; int64_t be; size_t bb; } k[] = {
        {QKV_GGML_TYPE_F32, "f32", 1, 4},       {QKV_GGML_TYPE_F16, "f16", 1, 2},
        {QKV_GGML_TYPE_BF16, "bf16", 1, 2},     {QKV_GGML_TYPE_Q4_0, "q4_0", 32, 18},
        {QKV_GGML_TYPE_Q4_1, "q4_1", 32, 20},   {QKV_GGML_TYPE_Q5_0, "q5_0", 32, 22},
        {QKV_GGML_TYPE_Q8_0, "q8_0", 32, 34},   {QKV_GGML_TYPE_Q2_K, "q2_K", 256, 84},
        {QKV_GGML_TYPE_Q3_K, "q3_K", 256, 110}, {QKV_GGML_TYPE_Q4_K, "q4_K", 256, 144},
        {QKV_GGML_TYPE_Q5_K, "q5_K", 256, 176}, {QKV_GGML_TYPE_Q6_K, "q6_K", 256, 210},
        {QKV_GGML_TYPE_Q8_K, "q8_K", 256, 292}, {QKV_GGML_TYPE_IQ4_XS, "iq4_xs", 256, 136},
        {QKV_GGML_TYPE_MXFP4, "mxfp4", 32, 17}, {QKV_GGML_TYPE_Q1_0, "q1_0", 128, 18},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        CHECK(!strcmp(qkv_ggml_type_name(k[i].t), k[i].name), "name %s", k[i].name);
        CHECK(qkv_ggml_block_elems(k[i].t) == k[i].be && qkv_ggml_block_bytes(k[i].t) == k[i].bb,
              "%s block", k[i].name);
    }
    CHECK(!strcmp(qkv_ggml_type_name((qkv_ggml_type)4), "?") &&
              !strcmp(qkv_ggml_type_name((qkv_ggml_type)42), "?") &&
              !strcmp(qkv_ggml_type_name((qkv_ggml_type)-1), "?"),
          "unknown type names");
    CHECK(qkv_ggml_block_elems((qkv_ggml_type)5) == 0, "retired id");
    CHECK(qkv_ggml_row_size(QKV_GGML_TYPE_Q4_K, 512) == 288, "row size q4_K");
    CHECK(qkv_ggml_row_size(QKV_GGML_TYPE_Q4_K, 100) == 0, "partial block");
    CHECK(qkv_ggml_row_size(QKV_GGML_TYPE_F32, -1) == 0, "negative");
    CHECK(qkv_ggml_row_size((qkv_ggml_type)4, 32) == 0, "unknown");
    CHECK(!strcmp(qkv_gguf_type_name(QKV_GGUF_TYPE_STRING), "string") &&
              !strcmp(qkv_gguf_type_name(QKV_GGUF_TYPE_F64), "f64") &&
              !strcmp(qkv_gguf_type_name((qkv_gguf_type)13), "?"),
          "value type names");
}

/* ------------------------------------------------------ versions and magic */

static qkv_status open_bytes(const char *name, const void *p, size_t n, qkv_error *err,
                             qkv_gguf **out) {
    const char *path = tmp_path(name);
    if (!write_all(path, p, n)) {
        CHECK(0, "cannot write %s", path);
        return QKV_ERR_IO;
    }
    qkv_gguf *g = NULL;
    memset(err, 0, sizeof *err);
    qkv_status s = qkv_gguf_open(&g, path, err);
    if (out) *out = g;
    else qkv_gguf_close(g);
    if (s) {
        CHECK(g == NULL, "%s: handle left on failure", name);
        CHECK(err->status == s && err->msg[0] && strstr(err->msg, path),
              "%s: message should name the file: '%s'", name, err->msg);
    }
    return s;
}

TEST(gguf_versions) {
    size_t n;
    uint8_t *p = read_all(fixture("meta.gguf"), &n);
    CHECK(p != NULL, "read fixture");
    if (!p) return;
    qkv_error err;
    qkv_gguf *g = NULL;

    uint32_t v = 2;   /* v2 and v3 share the layout */
    memcpy(p + 4, &v, 4);
    CHECK(open_bytes("v2.gguf", p, n, &err, &g) == QKV_OK, "v2: %s", err.msg);
    CHECK(g && qkv_gguf_version(g) == 2 && qkv_gguf_n_tensors(g) == 2, "v2 contents");
    qkv_gguf_close(g);

    static const struct { uint32_t v; const char *msg; } bad[] = {
        {1, "version 1"}, {0, "version 0"}, {4, "version 4"}, {0x03000000u, "big-endian"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(p + 4, &bad[i].v, 4);
        qkv_status s = open_bytes("badv.gguf", p, n, &err, NULL);
        CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, bad[i].msg), "version %08x: %s", bad[i].v,
              err.msg);
    }
    v = 3;
    memcpy(p + 4, &v, 4);
    memcpy(p, "GGUX", 4);
    qkv_status s = open_bytes("magic.gguf", p, n, &err, NULL);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "not a GGUF"), "bad magic: %s", err.msg);
    memcpy(p, "GGUF", 4);
    s = open_bytes("empty.gguf", p, 0, &err, NULL);
    CHECK(s == QKV_ERR_FORMAT && strstr(err.msg, "not a GGUF"), "empty: %s", err.msg);
    s = open_bytes("tiny.gguf", "GG", 2, &err, NULL);
    CHECK(s == QKV_ERR_FORMAT, "2 bytes: %s", err.msg);
    free(p);

    s = qkv_gguf_open(&g, tmp_path("does-not-exist.gguf"), &err);
    CHECK(s == QKV_ERR_IO && g == NULL && strstr(err.msg, "does-not-exist.gguf"), "missing: %s",
          err.msg);
    s = qkv_gguf_open(&g, test_tmpdir(), &err);
    CHECK(s == QKV_ERR_IO && g == NULL, "directory: %s", err.msg);
    CHECK(qkv_gguf_open(NULL, "x", &err) == QKV_ERR_INVALID, "NULL out");
    qkv_gguf_close(NULL);
}

/* ------------------------------------------------------- hand-built files */

/* One tensor "w" f32 ne {ne0, ne1} at offset, with data_bytes of data. */
static void one_tensor(gguf_buf *b, uint64_t ne0, uint64_t ne1, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    gguf_put_header(b, 1, 1);
    gguf_put_kv_u32(b, "k", 1);
    uint64_t ne[2] = {ne0, ne1};
    gguf_put_tinfo(b, "w", 2, ne, type, offset);
    gguf_put_pad(b, 32);
    gguf_put_zeros(b, data_bytes);
}

static void expect_bad(const char *what, gguf_buf *b, const char *msg_part) {
    qkv_error err;
    qkv_status s = open_bytes("crafted.gguf", b->p, b->n, &err, NULL);
    CHECK(s == QKV_ERR_FORMAT, "%s: status %d (%s)", what, (int)s, err.msg);
    CHECK(strstr(err.msg, msg_part) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, msg_part);
    free(b->p);
    *b = (gguf_buf){0};
}

static void expect_ok(const char *what, gguf_buf *b) {
    qkv_error err;
    qkv_status s = open_bytes("crafted.gguf", b->p, b->n, &err, NULL);
    CHECK(s == QKV_OK, "%s: %s", what, err.msg);
    free(b->p);
    *b = (gguf_buf){0};
}

TEST(gguf_crafted_good) {
    gguf_buf b = {0};
    one_tensor(&b, 4, 2, QKV_GGML_TYPE_F32, 0, 32);
    expect_ok("baseline", &b);

    gguf_put_header(&b, 0, 0);           /* no tensors, no padding */
    expect_ok("empty gguf", &b);

    /* empty arrays of each kind, bool normalised to 0/1 */
    gguf_put_header(&b, 0, 3);
    gguf_put_str(&b, "e.u32");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_U32);
    gguf_put_u64(&b, 0);
    gguf_put_str(&b, "e.str");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_STRING);
    gguf_put_u64(&b, 0);
    gguf_put_str(&b, "b");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_BOOL);
    gguf_put_u64(&b, 2);
    gguf_put(&b, "\x07\x00", 2);
    qkv_error err;
    qkv_gguf *g = NULL;
    CHECK(open_bytes("arrays.gguf", b.p, b.n, &err, &g) == QKV_OK, "empty arrays: %s", err.msg);
    if (g) {
        int64_t id = qkv_gguf_find_key(g, "e.u32");
        CHECK(qkv_gguf_arr_len(g, id) == 0 && qkv_gguf_arr_type(g, id) == QKV_GGUF_TYPE_U32,
              "empty u32 array");
        id = qkv_gguf_find_key(g, "e.str");
        CHECK(qkv_gguf_arr_len(g, id) == 0 && qkv_gguf_arr_str(g, id, 0, NULL) == NULL,
              "empty string array");
        const uint8_t *bv = qkv_gguf_arr_data(g, qkv_gguf_find_key(g, "b"));
        CHECK(bv && bv[0] == 1 && bv[1] == 0, "bool array normalised");
        qkv_gguf_close(g);
    }
    free(b.p);
    b = (gguf_buf){0};

    /* zero-element tensor, 1-D and 4-D shapes, custom alignment 64 */
    gguf_put_header(&b, 3, 1);
    gguf_put_kv_u32(&b, "general.alignment", 64);
    uint64_t ne0[1] = {0}, ne4[4] = {2, 1, 3, 1}, ne1[1] = {16};
    gguf_put_tinfo(&b, "zero", 1, ne0, QKV_GGML_TYPE_F32, 0);
    gguf_put_tinfo(&b, "four", 4, ne4, QKV_GGML_TYPE_F32, 0);
    gguf_put_tinfo(&b, "one", 1, ne1, QKV_GGML_TYPE_F16, 64);
    gguf_put_pad(&b, 64);
    gguf_put_zeros(&b, 96);
    g = NULL;
    CHECK(open_bytes("shapes.gguf", b.p, b.n, &err, &g) == QKV_OK, "shapes: %s", err.msg);
    if (g) {
        CHECK(qkv_gguf_alignment(g) == 64 && qkv_gguf_data_offset(g) % 64 == 0, "alignment 64");
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, "four"));
        CHECK(t && t->n_dims == 4 && t->shape[0] == 1 && t->shape[1] == 3 && t->shape[2] == 1 &&
                  t->shape[3] == 2 && t->n_elements == 6 && t->nbytes == 24,
              "4-D shape reversed");
        t = qkv_gguf_tensor_info(g, qkv_gguf_find_tensor(g, "zero"));
        CHECK(t && t->n_elements == 0 && t->nbytes == 0, "zero-size tensor");
        qkv_gguf_close(g);
    }
    free(b.p);
}

TEST(gguf_crafted_bad) {
    gguf_buf b = {0};
    const uint64_t huge = (uint64_t)1 << 60;

    gguf_put_header(&b, 0, huge);
    gguf_put_zeros(&b, 64);
    expect_bad("huge n_kv", &b, "metadata count");

    gguf_put_header(&b, huge, 0);
    gguf_put_zeros(&b, 64);
    expect_bad("huge n_tensors", &b, "tensor count");

    gguf_put_header(&b, 0, 1);
    gguf_put_u64(&b, (uint64_t)1 << 63);   /* key length */
    gguf_put_zeros(&b, 16);
    expect_bad("huge key length", &b, "truncated");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "s");
    gguf_put_u32(&b, QKV_GGUF_TYPE_STRING);
    gguf_put_u64(&b, 1000);
    gguf_put(&b, "abc", 3);
    expect_bad("string past EOF", &b, "truncated");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "t");
    gguf_put_u32(&b, 13);
    gguf_put_u32(&b, 0);
    expect_bad("unknown value type", &b, "unknown value type id 13");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "a");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_U32);
    gguf_put_u64(&b, huge);
    gguf_put_zeros(&b, 64);
    expect_bad("huge u32 array", &b, "cannot fit");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "a");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_STRING);
    gguf_put_u64(&b, huge);
    gguf_put_zeros(&b, 64);
    expect_bad("huge string array", &b, "cannot fit");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "a");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_STRING);
    gguf_put_u64(&b, 2);
    gguf_put_str(&b, "ok");
    gguf_put_u64(&b, huge);
    expect_bad("array string past EOF", &b, "truncated");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "a");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, 77);
    gguf_put_u64(&b, 1);
    gguf_put_zeros(&b, 8);
    expect_bad("unknown element type", &b, "unknown value type id 77");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "deep");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    for (int i = 0; i < 20; i++) {
        gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
        gguf_put_u64(&b, 1);
    }
    gguf_put_u32(&b, QKV_GGUF_TYPE_U8);
    gguf_put_u64(&b, 0);
    expect_bad("nesting", &b, "nested deeper");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "a");
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u32(&b, QKV_GGUF_TYPE_ARRAY);
    gguf_put_u64(&b, huge);
    gguf_put_zeros(&b, 64);
    expect_bad("huge nested array", &b, "cannot fit");

    gguf_put_header(&b, 0, 2);
    gguf_put_kv_u32(&b, "dup", 1);
    gguf_put_kv_u32(&b, "dup", 2);
    expect_bad("duplicate key", &b, "duplicate metadata key 'dup'");

    gguf_put_header(&b, 0, 1);
    gguf_put_str(&b, "general.alignment");
    gguf_put_u32(&b, QKV_GGUF_TYPE_I32);
    gguf_put_u32(&b, 32);
    expect_bad("alignment type", &b, "general.alignment is i32");

    gguf_put_header(&b, 0, 1);
    gguf_put_kv_u32(&b, "general.alignment", 48);
    expect_bad("alignment 48", &b, "not a power of two");

    gguf_put_header(&b, 0, 1);
    gguf_put_kv_u32(&b, "general.alignment", 0);
    expect_bad("alignment 0", &b, "not a power of two");

    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    gguf_put_header(&b, 1, 0);
    gguf_put_tinfo(&b, "w", 5, ne5, QKV_GGML_TYPE_F32, 0);
    gguf_put_zeros(&b, 64);
    expect_bad("5 dims", &b, "5 dimensions");

    gguf_put_header(&b, 1, 0);
    gguf_put_tinfo(&b, "w", 0, ne5, QKV_GGML_TYPE_F32, 0);
    gguf_put_zeros(&b, 64);
    expect_bad("0 dims", &b, "0 dimensions");

    one_tensor(&b, 32, 1, 4, 0, 128);
    expect_bad("retired type 4", &b, "unknown ggml type id 4");

    one_tensor(&b, 32, 1, 1000, 0, 128);
    expect_bad("type 1000", &b, "unknown ggml type id 1000");

    one_tensor(&b, UINT64_MAX, 1, QKV_GGML_TYPE_F32, 0, 64);
    expect_bad("negative ne", &b, "negative dimension");

    one_tensor(&b, (uint64_t)1 << 30, (uint64_t)1 << 30, QKV_GGML_TYPE_F32, 0, 64);
    expect_bad("huge ne product", &b, "past the end");

    one_tensor(&b, (uint64_t)1 << 32, (uint64_t)1 << 32, QKV_GGML_TYPE_F32, 0, 64);
    expect_bad("ne product 2^64", &b, "overflows");

    one_tensor(&b, (uint64_t)1 << 40, (uint64_t)1 << 40, QKV_GGML_TYPE_F32, 0, 64);
    expect_bad("ne product overflow", &b, "overflows");

    one_tensor(&b, (uint64_t)1 << 31, (uint64_t)1 << 31, QKV_GGML_TYPE_F64, 0, 64);
    expect_bad("byte size overflow", &b, "overflows");

    one_tensor(&b, 33, 1, QKV_GGML_TYPE_Q4_0, 0, 64);
    expect_bad("partial block", &b, "whole number of q4_0 blocks");

    one_tensor(&b, 4, 1, QKV_GGML_TYPE_F32, 4, 64);
    expect_bad("misaligned offset", &b, "multiple of the alignment");

    one_tensor(&b, 4, 2, QKV_GGML_TYPE_F32, 0, 31);
    expect_bad("data one byte short", &b, "past the end");

    one_tensor(&b, 4, 2, QKV_GGML_TYPE_F32, (uint64_t)1 << 63, 32);
    expect_bad("offset past EOF", &b, "past the end");

    one_tensor(&b, 4, 2, QKV_GGML_TYPE_F32, UINT64_MAX - 31, 32);
    expect_bad("offset near UINT64_MAX", &b, "past the end");

    uint64_t ne[1] = {8};
    gguf_put_header(&b, 2, 0);
    gguf_put_tinfo(&b, "w", 1, ne, QKV_GGML_TYPE_F32, 0);
    gguf_put_tinfo(&b, "w", 1, ne, QKV_GGML_TYPE_F32, 32);
    gguf_put_pad(&b, 32);
    gguf_put_zeros(&b, 64);
    expect_bad("duplicate tensor", &b, "duplicate tensor name 'w'");

    uint64_t ne16[1] = {16};
    gguf_put_header(&b, 2, 0);
    gguf_put_tinfo(&b, "a", 1, ne16, QKV_GGML_TYPE_F32, 0);    /* bytes [0, 64) */
    gguf_put_tinfo(&b, "b", 1, ne, QKV_GGML_TYPE_F32, 32);     /* bytes [32, 64) */
    gguf_put_pad(&b, 32);
    gguf_put_zeros(&b, 64);
    expect_bad("overlap", &b, "overlap");

    /* the name of a tensor is checked for length too */
    gguf_put_header(&b, 1, 0);
    gguf_put_u64(&b, huge);
    gguf_put_zeros(&b, 40);
    expect_bad("tensor name length", &b, "truncated");
    free(b.p);
}

/* --------------------------------------------------- truncation, corruption */

/* Touches everything a consumer could read, so the sanitizer sees it. */
static uint64_t walk(const qkv_gguf *g) {
    uint64_t h = 0;
    for (int64_t i = 0; i < qkv_gguf_n_kv(g); i++) {
        const char *k = qkv_gguf_key(g, i);
        h += strlen(k) + (uint64_t)qkv_gguf_key_type(g, i);
        h += (uint64_t)qkv_gguf_find_key(g, k);   /* a corrupted key may hold a NUL: no check */
        uint64_t n = qkv_gguf_arr_len(g, i);
        qkv_gguf_type et = qkv_gguf_arr_type(g, i);
        if (et == QKV_GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                size_t len;
                const char *sv = qkv_gguf_arr_str(g, i, j, &len);
                h += len + (uint8_t)sv[len];
            }
        } else if (qkv_gguf_arr_data(g, i)) {
            const uint8_t *d = qkv_gguf_arr_data(g, i);
            static const int sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            for (uint64_t j = 0; j < n * (uint64_t)sz[et]; j++) h += d[j];
        }
        if (qkv_gguf_key_type(g, i) == QKV_GGUF_TYPE_STRING) {
            const char *sv;
            size_t len;
            if (qkv_gguf_get_string(&sv, &len, g, k, NULL) == QKV_OK) h += len + (uint8_t)sv[len];
        }
    }
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        const uint8_t *d = t->data;
        if (t->nbytes) h += d[0] + d[t->nbytes - 1];
        if (qkv_dequantize_supported(t->type) && t->n_elements > 0 && t->n_elements <= 4096) {
            float *y = malloc((size_t)t->n_elements * sizeof *y);
            if (y && qkv_dequantize(y, t->data, t->type, t->n_elements, NULL) == QKV_OK)
                h += (uint64_t)(y[0] == y[0]);
            free(y);
        }
    }
    return h;
}

/* End of the last tensor's data: truncating anywhere before it must fail. */
static uint64_t data_end(const char *path) {
    qkv_gguf *g = NULL;
    uint64_t end = 0;
    if (qkv_gguf_open(&g, path, NULL)) return 0;
    for (int64_t i = 0; i < qkv_gguf_n_tensors(g); i++) {
        const qkv_gguf_tensor *t = qkv_gguf_tensor_info(g, i);
        uint64_t e = qkv_gguf_data_offset(g) + t->offset + t->nbytes;
        if (e > end) end = e;
    }
    walk(g);
    qkv_gguf_close(g);
    return end;
}

static void truncations(const char *name, size_t stride_after_header) {
    const char *path = fixture(name);
    size_t n;
    uint8_t *p = read_all(path, &n);
    uint64_t need = data_end(path);
    CHECK(p && need > 0 && need <= n, "%s: read", name);
    if (!p) return;
    qkv_gguf *g = NULL;
    qkv_gguf_open(&g, path, NULL);
    uint64_t header_end = g ? qkv_gguf_data_offset(g) : n;
    qkv_gguf_close(g);
    int n_bad = 0, n_tried = 0;
    for (size_t cut = 0; cut < n; cut += cut < header_end ? 1 : stride_after_header) {
        qkv_error err;
        qkv_status s = open_bytes("trunc.gguf", p, cut, &err, NULL);
        n_tried++;
        if (cut < need) {
            if (s != QKV_ERR_FORMAT && n_bad++ < 5)
                CHECK(0, "%s cut at %zu of %zu: status %d", name, cut, n, (int)s);
        } else if (s != QKV_OK && n_bad++ < 5) {
            CHECK(0, "%s cut at %zu (after all data): %s", name, cut, err.msg);
        }
    }
    CHECK(n_bad == 0, "%s: %d of %d truncations wrong", name, n_bad, n_tried);
    free(p);
}

TEST(gguf_truncated_everywhere) {
    truncations("meta.gguf", 1);
    truncations("quant.gguf", 97);
}

TEST(gguf_random_corruption) {
    size_t n;
    uint8_t *p = read_all(fixture("meta.gguf"), &n);
    CHECK(p != NULL, "read");
    if (!p) return;
    uint8_t *q = malloc(n);
    test_rng rng = {12345};
    int n_ok = 0, n_err = 0;
    qkv_gguf *g0 = NULL;
    qkv_gguf_open(&g0, fixture("meta.gguf"), NULL);
    size_t header = g0 ? (size_t)qkv_gguf_data_offset(g0) : 0;   /* corrupt the header only */
    qkv_gguf_close(g0);
    CHECK(header > 64, "data offset %zu", header);
    if (header <= 64) {
        free(q);
        free(p);
        return;
    }
    for (int it = 0; it < 1500; it++) {
        memcpy(q, p, n);
        int kind = it % 3;
        if (kind == 0) {           /* flip a few bytes */
            int flips = test_rng_int(&rng, 1, 4);
            for (int f = 0; f < flips; f++)
                q[test_rng_u64(&rng) % header] ^= (uint8_t)(1 + test_rng_u64(&rng) % 255);
        } else if (kind == 1) {    /* write a random 64-bit value (a count, length, offset) */
            size_t at = test_rng_u64(&rng) % (header - 8);
            uint64_t v = test_rng_u64(&rng) >> test_rng_int(&rng, 0, 63);
            memcpy(q + at, &v, 8);
        } else {                   /* a small 32-bit value (a type id, n_dims) */
            size_t at = test_rng_u64(&rng) % (header - 4);
            uint32_t v = (uint32_t)test_rng_int(&rng, 0, 45);
            memcpy(q + at, &v, 4);
        }
        qkv_error err;
        qkv_gguf *g = NULL;
        qkv_status s = open_bytes("fuzz.gguf", q, n, &err, &g);
        if (s == QKV_OK) {
            walk(g);
            qkv_gguf_close(g);
            n_ok++;
        } else {
            CHECK(s == QKV_ERR_FORMAT || s == QKV_ERR_NOMEM, "iteration %d: status %d: %s", it,
                  (int)s, err.msg);
            n_err++;
        }
    }
    CHECK(n_err > 100, "corruption should mostly be caught (%d ok, %d errors)", n_ok, n_err);
    free(q);
    free(p);
}
