/*
 * gguf.c — the GGUF reader: maps a file read-only, checks every count, length
 * and offset against the file size before using it, and indexes the metadata
 * and tensor infos for the accessors in qkv/gguf.h. Layout: the comment above
 * qkv_gguf_open in qkv/gguf.h; reference: ggml's docs/gguf.md.
 *
 * It does not dequantise (dequant.c), interpret hyper-parameters (the model
 * loader does), or write GGUF. It is the only place that turns ggml's
 * innermost-first ne[] into the outermost-first shapes used everywhere else.
 *
 * A file that changes size while mapped can still fault (SIGBUS) on access;
 * that is the price of mmap and is not defended against.
 */
#include "qkv/gguf.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_NESTING 8          /* arrays of arrays deeper than this are refused */
#define GGUF_N_VALUE_TYPES 13

/* ------------------------------------------------------------ type tables */

static const char *const k_value_type_names[GGUF_N_VALUE_TYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

/* Bytes of one scalar of each value type; 0 for string and array. */
static const uint8_t k_value_type_size[GGUF_N_VALUE_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
} ggml_type_traits;

/* Indexed by ggml type id; a NULL name marks a retired or unknown id. Block
 * sizes follow ggml-common.h (Q8_1 is two f16 + 32 int8 = 36 bytes). */
static const ggml_type_traits k_ggml_types[] = {
    [QKV_GGML_TYPE_F32] = {"f32", 1, 4},
    [QKV_GGML_TYPE_F16] = {"f16", 1, 2},
    [QKV_GGML_TYPE_Q4_0] = {"q4_0", 32, 18},
    [QKV_GGML_TYPE_Q4_1] = {"q4_1", 32, 20},
    [QKV_GGML_TYPE_Q5_0] = {"q5_0", 32, 22},
    [QKV_GGML_TYPE_Q5_1] = {"q5_1", 32, 24},
    [QKV_GGML_TYPE_Q8_0] = {"q8_0", 32, 34},
    [QKV_GGML_TYPE_Q8_1] = {"q8_1", 32, 36},
    [QKV_GGML_TYPE_Q2_K] = {"q2_K", 256, 84},
    [QKV_GGML_TYPE_Q3_K] = {"q3_K", 256, 110},
    [QKV_GGML_TYPE_Q4_K] = {"q4_K", 256, 144},
    [QKV_GGML_TYPE_Q5_K] = {"q5_K", 256, 176},
    [QKV_GGML_TYPE_Q6_K] = {"q6_K", 256, 210},
    [QKV_GGML_TYPE_Q8_K] = {"q8_K", 256, 292},
    [QKV_GGML_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [QKV_GGML_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [QKV_GGML_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [QKV_GGML_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [QKV_GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [QKV_GGML_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [QKV_GGML_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [QKV_GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [QKV_GGML_TYPE_I8] = {"i8", 1, 1},
    [QKV_GGML_TYPE_I16] = {"i16", 1, 2},
    [QKV_GGML_TYPE_I32] = {"i32", 1, 4},
    [QKV_GGML_TYPE_I64] = {"i64", 1, 8},
    [QKV_GGML_TYPE_F64] = {"f64", 1, 8},
    [QKV_GGML_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [QKV_GGML_TYPE_BF16] = {"bf16", 1, 2},
    [QKV_GGML_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [QKV_GGML_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [QKV_GGML_TYPE_MXFP4] = {"mxfp4", 32, 17},
    [QKV_GGML_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [QKV_GGML_TYPE_Q1_0] = {"q1_0", 128, 18},
};
#define N_GGML_TYPES ((int)(sizeof k_ggml_types / sizeof k_ggml_types[0]))

static const ggml_type_traits *ggml_traits(qkv_ggml_type t) {
    if ((int)t < 0 || (int)t >= N_GGML_TYPES || !k_ggml_types[t].name) return NULL;
    return &k_ggml_types[t];
}

const char *qkv_gguf_type_name(qkv_gguf_type t) {
    if ((int)t < 0 || (int)t >= GGUF_N_VALUE_TYPES) return "?";
    return k_value_type_names[t];
}

const char *qkv_ggml_type_name(qkv_ggml_type t) {
    const ggml_type_traits *tr = ggml_traits(t);
    return tr ? tr->name : "?";
}

int64_t qkv_ggml_block_elems(qkv_ggml_type t) {
    const ggml_type_traits *tr = ggml_traits(t);
    return tr ? tr->block_elems : 0;
}

size_t qkv_ggml_block_bytes(qkv_ggml_type t) {
    const ggml_type_traits *tr = ggml_traits(t);
    return tr ? tr->block_bytes : 0;
}

size_t qkv_ggml_row_size(qkv_ggml_type t, int64_t n) {
    const ggml_type_traits *tr = ggml_traits(t);
    if (!tr || n < 0 || n % tr->block_elems) return 0;
    uint64_t blocks = (uint64_t)(n / tr->block_elems);
    if (blocks > SIZE_MAX / tr->block_bytes) return 0;
    return (size_t)blocks * tr->block_bytes;
}

/* ------------------------------------------------------------- the handle */

/* Strings live in one arena, each NUL-terminated; they are referred to by
 * offset while the arena may still grow, and turned into pointers on access. */
typedef struct {
    uint64_t off;
    uint64_t len;
} str_ref;

typedef struct {
    str_ref key;
    qkv_gguf_type type;
    union {
        uint64_t u;    /* u8 u16 u32 u64 bool */
        int64_t i;     /* i8 i16 i32 i64 */
        double f;      /* f32 f64 */
        str_ref s;     /* string */
    } v;
    /* arrays */
    qkv_gguf_type arr_type;
    uint64_t arr_n;
    void *arr_data;    /* numeric / bool elements, malloc'd, host order */
    str_ref *arr_strs; /* [arr_n] for arrays of strings */
} gguf_kv;

typedef struct {
    const char *s;     /* arena pointer, valid once parsing is done */
    uint64_t len;
    int64_t id;
} name_index;

struct qkv_gguf {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    char *arena;
    uint64_t arena_len, arena_cap;

    gguf_kv *kv;
    int64_t n_kv;
    name_index *kv_sorted;     /* keys sorted for lookup and duplicate checks */

    qkv_gguf_tensor *tensors;
    str_ref *tensor_names;
    int64_t n_tensors;
    name_index *tensor_sorted;
};

/* ------------------------------------------------------------- the cursor */

typedef struct {
    qkv_gguf *g;
    uint64_t pos;
    qkv_error *err;
} cursor;

static uint64_t remaining(const cursor *c) { return c->g->size - c->pos; }

static qkv_status truncated(cursor *c, uint64_t need, const char *what) {
    return util_fail(c->err, QKV_ERR_FORMAT,
                    "%s: truncated: %s at offset %llu needs %llu bytes, only %llu left",
                    c->g->path, what, (unsigned long long)c->pos, (unsigned long long)need,
                    (unsigned long long)remaining(c));
}

static qkv_status read_bytes(void *out, cursor *c, uint64_t n, const char *what) {
    if (n > remaining(c)) return truncated(c, n, what);
    memcpy(out, c->g->map + c->pos, (size_t)n);
    c->pos += n;
    return QKV_OK;
}

static qkv_status read_u32(uint32_t *out, cursor *c, const char *what) {
    return read_bytes(out, c, 4, what);
}

static qkv_status read_u64(uint64_t *out, cursor *c, const char *what) {
    return read_bytes(out, c, 8, what);
}

/* Reads a GGUF string (u64 length + bytes) into the arena. */
static qkv_status read_string(str_ref *out, cursor *c, const char *what) {
    uint64_t len = 0;
    qkv_status s = read_u64(&len, c, what);
    if (s) return s;
    if (len > remaining(c)) return truncated(c, len, what);
    qkv_gguf *g = c->g;
    if (g->arena_len + len + 1 > g->arena_cap) {
        uint64_t cap = g->arena_cap ? g->arena_cap : 4096;
        while (cap < g->arena_len + len + 1) cap *= 2;
        char *a = realloc(g->arena, (size_t)cap);
        if (!a) return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory for strings", g->path);
        g->arena = a;
        g->arena_cap = cap;
    }
    memcpy(g->arena + g->arena_len, g->map + c->pos, (size_t)len);
    g->arena[g->arena_len + len] = 0;
    out->off = g->arena_len;
    out->len = len;
    g->arena_len += len + 1;
    c->pos += len;
    return QKV_OK;
}

static qkv_status skip_string(cursor *c, const char *what) {
    uint64_t len = 0;
    qkv_status s = read_u64(&len, c, what);
    if (s) return s;
    if (len > remaining(c)) return truncated(c, len, what);
    c->pos += len;
    return QKV_OK;
}

static const char *arena_str(const qkv_gguf *g, str_ref r) { return g->arena + r.off; }

/* ---------------------------------------------------------------- values */

static qkv_status bad_value_type(cursor *c, uint32_t t, const char *key) {
    return util_fail(c->err, QKV_ERR_FORMAT, "%s: key '%s' has unknown value type id %u", c->g->path,
                    key, t);
}

/* Checks an array's element count against the bytes left, knowing each element
 * needs at least min_bytes. */
static qkv_status check_count(cursor *c, uint64_t n, uint64_t min_bytes, const char *key) {
    if (min_bytes && n > remaining(c) / min_bytes)
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: key '%s': array of %llu elements cannot fit in the %llu bytes left",
                        c->g->path, key, (unsigned long long)n, (unsigned long long)remaining(c));
    return QKV_OK;
}

/* Validates and skips an array body (element type, count, elements) whose
 * contents are not kept: the elements of a nested array. */
static qkv_status skip_array(cursor *c, const char *key, int depth) {
    if (depth > GGUF_MAX_NESTING)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d",
                        c->g->path, key, GGUF_MAX_NESTING);
    uint32_t et = 0;
    uint64_t n = 0;
    qkv_status s = read_u32(&et, c, "array element type");
    if (!s) s = read_u64(&n, c, "array length");
    if (s) return s;
    if (et >= GGUF_N_VALUE_TYPES) return bad_value_type(c, et, key);
    if (et == QKV_GGUF_TYPE_STRING) {
        if ((s = check_count(c, n, 8, key))) return s;
        for (uint64_t i = 0; i < n; i++)
            if ((s = skip_string(c, "array string"))) return s;
    } else if (et == QKV_GGUF_TYPE_ARRAY) {
        if ((s = check_count(c, n, 12, key))) return s;
        for (uint64_t i = 0; i < n; i++)
            if ((s = skip_array(c, key, depth + 1))) return s;
    } else {
        uint64_t esz = k_value_type_size[et];
        if ((s = check_count(c, n, esz, key))) return s;
        c->pos += n * esz;
    }
    return QKV_OK;
}

static qkv_status read_array(gguf_kv *kv, cursor *c, const char *key) {
    uint32_t et = 0;
    uint64_t n = 0;
    qkv_status s = read_u32(&et, c, "array element type");
    if (!s) s = read_u64(&n, c, "array length");
    if (s) return s;
    if (et >= GGUF_N_VALUE_TYPES) return bad_value_type(c, et, key);
    kv->arr_type = (qkv_gguf_type)et;
    kv->arr_n = n;
    if (et == QKV_GGUF_TYPE_STRING) {
        if ((s = check_count(c, n, 8, key))) return s;
        kv->arr_strs = malloc((size_t)(n ? n : 1) * sizeof *kv->arr_strs);
        if (!kv->arr_strs)
            return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory for array '%s'", c->g->path,
                            key);
        for (uint64_t i = 0; i < n; i++)
            if ((s = read_string(&kv->arr_strs[i], c, "array string"))) return s;
        return QKV_OK;
    }
    if (et == QKV_GGUF_TYPE_ARRAY) {
        if ((s = check_count(c, n, 12, key))) return s;
        for (uint64_t i = 0; i < n; i++)
            if ((s = skip_array(c, key, 2))) return s;
        return QKV_OK;
    }
    uint64_t esz = k_value_type_size[et];
    if ((s = check_count(c, n, esz, key))) return s;
    kv->arr_data = malloc((size_t)(n ? n * esz : 1));
    if (!kv->arr_data)
        return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory for array '%s'", c->g->path, key);
    memcpy(kv->arr_data, c->g->map + c->pos, (size_t)(n * esz));
    if (et == QKV_GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++) ((uint8_t *)kv->arr_data)[i] = ((uint8_t *)kv->arr_data)[i] != 0;
    c->pos += n * esz;
    return QKV_OK;
}

static qkv_status read_value(gguf_kv *kv, cursor *c, uint32_t type, const char *key) {
    if (type >= GGUF_N_VALUE_TYPES) return bad_value_type(c, type, key);
    kv->type = (qkv_gguf_type)type;
    qkv_status s = QKV_OK;
    uint8_t b[8];
    switch (kv->type) {
    case QKV_GGUF_TYPE_STRING: return read_string(&kv->v.s, c, "string value");
    case QKV_GGUF_TYPE_ARRAY: return read_array(kv, c, key);
    default: break;
    }
    if ((s = read_bytes(b, c, k_value_type_size[type], "scalar value"))) return s;
    switch (kv->type) {
    case QKV_GGUF_TYPE_U8: kv->v.u = b[0]; break;
    case QKV_GGUF_TYPE_BOOL: kv->v.u = b[0] != 0; break;
    case QKV_GGUF_TYPE_I8: kv->v.i = (int8_t)b[0]; break;
    case QKV_GGUF_TYPE_U16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
    case QKV_GGUF_TYPE_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case QKV_GGUF_TYPE_U32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
    case QKV_GGUF_TYPE_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case QKV_GGUF_TYPE_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case QKV_GGUF_TYPE_U64: { uint64_t x; memcpy(&x, b, 8); kv->v.u = x; break; }
    case QKV_GGUF_TYPE_I64: { int64_t x; memcpy(&x, b, 8); kv->v.i = x; break; }
    case QKV_GGUF_TYPE_F64: { double x; memcpy(&x, b, 8); kv->v.f = x; break; }
    default: break;
    }
    return QKV_OK;
}

/* ------------------------------------------------------------ name lookup */

static int name_cmp(const void *a, const void *b) {
    const name_index *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->s, y->s, (size_t)n);
    if (r) return r;
    return (x->len > y->len) - (x->len < y->len);
}

/* Sorts names and reports the first duplicate (its id) or -1. */
static int64_t sort_names(name_index *idx, int64_t n) {
    if (n > 1) qsort(idx, (size_t)n, sizeof *idx, name_cmp);
    for (int64_t i = 1; i < n; i++)
        if (!name_cmp(&idx[i - 1], &idx[i])) return idx[i].id;
    return -1;
}

static int64_t find_name(const name_index *idx, int64_t n, const char *name) {
    if (!name) return -1;
    name_index key = {name, strlen(name), -1};
    const name_index *hit = n ? bsearch(&key, idx, (size_t)n, sizeof *idx, name_cmp) : NULL;
    return hit ? hit->id : -1;
}

/* --------------------------------------------------------------- parsing */

static qkv_status parse_header(cursor *c) {
    qkv_gguf *g = c->g;
    uint8_t magic[4];
    if (g->size < 4 || memcmp(g->map, "GGUF", 4) != 0) {
        if (g->size < 4)
            return util_fail(c->err, QKV_ERR_FORMAT, "%s: not a GGUF file (%llu bytes, too short)",
                            g->path, (unsigned long long)g->size);
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: not a GGUF file (magic %02x %02x %02x %02x, want \"GGUF\")", g->path,
                        g->map[0], g->map[1], g->map[2], g->map[3]);
    }
    qkv_status s = read_bytes(magic, c, 4, "magic");
    if (!s) s = read_u32(&g->version, c, "version");
    if (s) return s;
    if (g->version == 1)
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: GGUF version 1 is not supported (only 2 and 3; re-convert the model)",
                        g->path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xFFFFu) == 0 && (g->version >> 16) != 0)
            return util_fail(c->err, QKV_ERR_FORMAT,
                            "%s: big-endian GGUF is not supported (version field %08x)", g->path,
                            g->version);
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: GGUF version %u is not supported (only 2 and 3)",
                        g->path, g->version);
    }
    return QKV_OK;
}

static qkv_status parse_kvs(cursor *c, uint64_t n_kv) {
    qkv_gguf *g = c->g;
    g->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kv);
    if (!g->kv) return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory for metadata", g->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        uint32_t type = 0;
        qkv_status s = read_string(&kv->key, c, "metadata key");
        if (!s) s = read_u32(&type, c, "metadata value type");
        if (!s) s = read_value(kv, c, type, arena_str(g, kv->key));
        g->n_kv = (int64_t)i + 1;   /* so close frees what was read */
        if (s) return s;
    }
    g->n_kv = (int64_t)n_kv;
    return QKV_OK;
}

/* Once the arena is complete (names can be pointed at): the sorted key index,
 * duplicate keys, and general.alignment. */
static qkv_status index_kvs(cursor *c) {
    qkv_gguf *g = c->g;
    g->kv_sorted = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kv_sorted);
    if (!g->kv_sorted) return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory", g->path);
    for (int64_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = (name_index){arena_str(g, g->kv[i].key), g->kv[i].key.len, i};
    int64_t dup = sort_names(g->kv_sorted, g->n_kv);
    if (dup >= 0)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: duplicate metadata key '%s'", g->path,
                        arena_str(g, g->kv[dup].key));

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t a = find_name(g->kv_sorted, g->n_kv, "general.alignment");
    if (a >= 0) {
        const gguf_kv *kv = &g->kv[a];
        if (kv->type != QKV_GGUF_TYPE_U32)
            return util_fail(c->err, QKV_ERR_FORMAT, "%s: general.alignment is %s, expected u32",
                            g->path, qkv_gguf_type_name(kv->type));
        if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)))
            return util_fail(c->err, QKV_ERR_FORMAT,
                            "%s: general.alignment %llu is not a power of two", g->path,
                            (unsigned long long)kv->v.u);
        g->alignment = (uint32_t)kv->v.u;
    }
    return QKV_OK;
}

static qkv_status parse_tensor_info(cursor *c, int64_t id) {
    qkv_gguf *g = c->g;
    qkv_gguf_tensor *t = &g->tensors[id];
    uint32_t n_dims = 0, type = 0;
    qkv_status s = read_string(&g->tensor_names[id], c, "tensor name");
    if (!s) s = read_u32(&n_dims, c, "tensor n_dims");
    if (s) return s;
    const char *name = arena_str(g, g->tensor_names[id]);
    if (n_dims < 1 || n_dims > QKV_GGUF_MAX_DIMS)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1 .. %d allowed)",
                        g->path, name, n_dims, QKV_GGUF_MAX_DIMS);
    uint64_t ne[QKV_GGUF_MAX_DIMS];
    if ((s = read_bytes(ne, c, 8ull * n_dims, "tensor dimensions"))) return s;
    if ((s = read_u32(&type, c, "tensor type"))) return s;
    if ((s = read_u64(&t->offset, c, "tensor offset"))) return s;

    const ggml_type_traits *tr = ggml_traits((qkv_ggml_type)type);
    if (!tr)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: tensor '%s' has unknown ggml type id %u",
                        g->path, name, type);
    t->type = (qkv_ggml_type)type;
    t->n_dims = (int)n_dims;

    /* ggml's ne[0] is the innermost (contiguous) dimension; our shapes are
     * outermost first, so shape[n_dims-1-d] = ne[d]. This is the only place
     * in qkv that reverses dimensions. */
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] > (uint64_t)INT64_MAX)
            return util_fail(c->err, QKV_ERR_FORMAT, "%s: tensor '%s' has negative dimension ne[%u]",
                            g->path, name, d);
        if (ne[d] && n_el > (uint64_t)INT64_MAX / ne[d])
            return util_fail(c->err, QKV_ERR_FORMAT,
                            "%s: tensor '%s': element count overflows (ne[%u] = %llu)", g->path,
                            name, d, (unsigned long long)ne[d]);
        n_el *= ne[d];
        t->shape[n_dims - 1 - d] = (int64_t)ne[d];
    }
    for (int d = (int)n_dims; d < QKV_GGUF_MAX_DIMS; d++) t->shape[d] = 1;
    t->n_elements = (int64_t)n_el;

    if (ne[0] % (uint64_t)tr->block_elems)
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: tensor '%s': row of %llu elements is not a whole number of %s blocks "
                        "(%lld)",
                        g->path, name, (unsigned long long)ne[0], tr->name,
                        (long long)tr->block_elems);
    uint64_t n_blocks = n_el / (uint64_t)tr->block_elems;
    if (n_blocks > SIZE_MAX / tr->block_bytes)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: tensor '%s': byte size overflows", g->path,
                        name);
    t->nbytes = (size_t)(n_blocks * tr->block_bytes);
    return QKV_OK;
}

static int offset_cmp(const void *a, const void *b) {
    const qkv_gguf_tensor *x = *(const qkv_gguf_tensor *const *)a;
    const qkv_gguf_tensor *y = *(const qkv_gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static qkv_status parse_tensor_infos(cursor *c, uint64_t n) {
    qkv_gguf *g = c->g;
    size_t cnt = (size_t)(n ? n : 1);
    g->tensors = calloc(cnt, sizeof *g->tensors);
    g->tensor_names = calloc(cnt, sizeof *g->tensor_names);
    g->tensor_sorted = calloc(cnt, sizeof *g->tensor_sorted);
    if (!g->tensors || !g->tensor_names || !g->tensor_sorted)
        return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory for %llu tensor infos", g->path,
                        (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        qkv_status s = parse_tensor_info(c, (int64_t)i);
        if (s) return s;
    }
    g->n_tensors = (int64_t)n;
    return QKV_OK;
}

/* Once the arena is complete: tensor names, duplicates, the data section,
 * each tensor's bounds and alignment, overlaps. */
static qkv_status index_tensors(cursor *c) {
    qkv_gguf *g = c->g;
    /* names can be pointed at now that the arena is complete */
    for (int64_t i = 0; i < g->n_tensors; i++) {
        g->tensors[i].name = arena_str(g, g->tensor_names[i]);
        g->tensor_sorted[i] = (name_index){g->tensors[i].name, g->tensor_names[i].len, i};
    }
    int64_t dup = sort_names(g->tensor_sorted, g->n_tensors);
    if (dup >= 0)
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: duplicate tensor name '%s'", g->path,
                        g->tensors[dup].name);

    /* The data section starts at the next multiple of the alignment. A file
     * without tensors may end before that padding. */
    uint64_t a = g->alignment;
    if (c->pos > UINT64_MAX - (a - 1))
        return util_fail(c->err, QKV_ERR_FORMAT, "%s: data offset overflows", g->path);
    g->data_offset = (c->pos + a - 1) / a * a;
    uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;

    for (int64_t i = 0; i < g->n_tensors; i++) {
        qkv_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a)
            return util_fail(c->err, QKV_ERR_FORMAT,
                            "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu",
                            g->path, t->name, (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return util_fail(c->err, QKV_ERR_FORMAT,
                            "%s: tensor '%s': data [%llu, +%llu) runs past the end of the file "
                            "(data section %llu bytes from offset %llu)",
                            g->path, t->name, (unsigned long long)t->offset,
                            (unsigned long long)t->nbytes, (unsigned long long)data_size,
                            (unsigned long long)g->data_offset);
        t->data = g->map + g->data_offset + t->offset;
    }

    /* No two tensors may share bytes. */
    if (g->n_tensors > 1) {
        const qkv_gguf_tensor **by_off = malloc((size_t)g->n_tensors * sizeof *by_off);
        if (!by_off) return util_fail(c->err, QKV_ERR_NOMEM, "%s: out of memory", g->path);
        for (int64_t i = 0; i < g->n_tensors; i++) by_off[i] = &g->tensors[i];
        qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, offset_cmp);
        uint64_t end = 0;
        const qkv_gguf_tensor *prev = NULL;
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const qkv_gguf_tensor *t = by_off[i];
            if (!t->nbytes) continue;
            if (prev && t->offset < end) {
                qkv_status s = util_fail(c->err, QKV_ERR_FORMAT,
                                        "%s: tensors '%s' and '%s' overlap in the data section",
                                        g->path, prev->name, t->name);
                free(by_off);
                return s;
            }
            end = t->offset + t->nbytes;
            prev = t;
        }
        free(by_off);
    }
    return QKV_OK;
}

static qkv_status parse(cursor *c) {
    qkv_gguf *g = c->g;
    uint64_t n_tensors = 0, n_kv = 0;
    qkv_status s = parse_header(c);
    if (!s) s = read_u64(&n_tensors, c, "tensor count");
    if (!s) s = read_u64(&n_kv, c, "metadata count");
    if (s) return s;
    /* A key needs >= 13 bytes (length, type, a u8); a tensor info >= 32
     * (name length, n_dims, one ne, type, offset). */
    if (n_kv > remaining(c) / 13)
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: metadata count %llu cannot fit in a %llu-byte file", g->path,
                        (unsigned long long)n_kv, (unsigned long long)g->size);
    if (n_tensors > remaining(c) / 32)
        return util_fail(c->err, QKV_ERR_FORMAT,
                        "%s: tensor count %llu cannot fit in a %llu-byte file", g->path,
                        (unsigned long long)n_tensors, (unsigned long long)g->size);
    if ((s = parse_kvs(c, n_kv))) return s;
    if ((s = parse_tensor_infos(c, n_tensors))) return s;
    if ((s = index_kvs(c))) return s;
    return index_tensors(c);
}

/* ------------------------------------------------------------ open, close */

qkv_status qkv_gguf_open(qkv_gguf **out, const char *path, qkv_error *err) {
    if (!out || !path) return util_fail(err, QKV_ERR_INVALID, "qkv_gguf_open: NULL argument");
    *out = NULL;
    qkv_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return util_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        qkv_status s = util_fail(err, QKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        qkv_gguf_close(g);
        return s;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        qkv_status s = util_fail(err, QKV_ERR_IO, "%s: not a regular file", path);
        close(fd);
        qkv_gguf_close(g);
        return s;
    }
    g->size = (uint64_t)st.st_size;
    if (g->size < 24) {   /* magic, version, two counts */
        close(fd);
        qkv_status s = util_fail(err, QKV_ERR_FORMAT,
                                "%s: not a GGUF file (%llu bytes, shorter than a GGUF header)",
                                path, (unsigned long long)g->size);
        qkv_gguf_close(g);
        return s;
    }
    void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (m == MAP_FAILED) {
        qkv_status s = util_fail(err, QKV_ERR_IO, "%s: cannot map: %s", path, strerror(map_errno));
        qkv_gguf_close(g);
        return s;
    }
    g->map = m;

    cursor c = {g, 0, err};
    qkv_status s = parse(&c);
    if (s) {
        qkv_gguf_close(g);
        return s;
    }
    *out = g;
    return QKV_OK;
}

void qkv_gguf_close(qkv_gguf *g) {
    if (!g) return;
    if (g->map) munmap((void *)g->map, (size_t)g->size);
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].arr_data);
        free(g->kv[i].arr_strs);
    }
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->tensor_names);
    free(g->tensor_sorted);
    free(g->arena);
    free(g->path);
    free(g);
}

/* ------------------------------------------------------------- accessors */

const char *qkv_gguf_path(const qkv_gguf *g) { return g->path; }
uint32_t qkv_gguf_version(const qkv_gguf *g) { return g->version; }
uint32_t qkv_gguf_alignment(const qkv_gguf *g) { return g->alignment; }
uint64_t qkv_gguf_file_size(const qkv_gguf *g) { return g->size; }
uint64_t qkv_gguf_data_offset(const qkv_gguf *g) { return g->data_offset; }
int64_t qkv_gguf_n_kv(const qkv_gguf *g) { return g->n_kv; }

int64_t qkv_gguf_find_key(const qkv_gguf *g, const char *key) {
    return find_name(g->kv_sorted, g->n_kv, key);
}

const char *qkv_gguf_key(const qkv_gguf *g, int64_t key_id) {
    if (key_id < 0 || key_id >= g->n_kv) return NULL;
    return arena_str(g, g->kv[key_id].key);
}

qkv_gguf_type qkv_gguf_key_type(const qkv_gguf *g, int64_t key_id) {
    if (key_id < 0 || key_id >= g->n_kv) return (qkv_gguf_type)-1;
    return g->kv[key_id].type;
}

/* The kv for key if it has one of the accepted types (a bit mask of type ids). */
static const gguf_kv *get_kv(const qkv_gguf *g, const char *key, unsigned accept,
                             const char *want, qkv_error *err) {
    int64_t id = qkv_gguf_find_key(g, key);
    if (id < 0) {
        util_fail(err, QKV_ERR_FORMAT, "%s: metadata key '%s' missing", g->path, key ? key : "(null)");
        return NULL;
    }
    const gguf_kv *kv = &g->kv[id];
    if (!(accept & (1u << kv->type))) {
        util_fail(err, QKV_ERR_FORMAT, "%s: metadata key '%s' is %s, expected %s", g->path, key,
                 qkv_gguf_type_name(kv->type), want);
        return NULL;
    }
    return kv;
}

#define T(x) (1u << QKV_GGUF_TYPE_##x)

qkv_status qkv_gguf_get_u32(uint32_t *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(U32), "u32", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = (uint32_t)kv->v.u;
    return QKV_OK;
}

qkv_status qkv_gguf_get_i32(int32_t *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(I32), "i32", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = (int32_t)kv->v.i;
    return QKV_OK;
}

qkv_status qkv_gguf_get_u64(uint64_t *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(U64), "u64", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = kv->v.u;
    return QKV_OK;
}

qkv_status qkv_gguf_get_int(int64_t *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const unsigned uns = T(U8) | T(U16) | T(U32) | T(U64);
    const unsigned sig = T(I8) | T(I16) | T(I32) | T(I64);
    const gguf_kv *kv = get_kv(g, key, uns | sig, "an integer", err);
    if (!kv) return QKV_ERR_FORMAT;
    if (uns & (1u << kv->type)) {
        if (kv->v.u > (uint64_t)INT64_MAX)
            return util_fail(err, QKV_ERR_FORMAT, "%s: metadata key '%s' = %llu is out of range",
                            g->path, key, (unsigned long long)kv->v.u);
        *out = (int64_t)kv->v.u;
    } else {
        *out = kv->v.i;
    }
    return QKV_OK;
}

qkv_status qkv_gguf_get_f32(float *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(F32) | T(F64), "f32", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = (float)kv->v.f;
    return QKV_OK;
}

qkv_status qkv_gguf_get_bool(int *out, const qkv_gguf *g, const char *key, qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(BOOL), "bool", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = (int)kv->v.u;
    return QKV_OK;
}

qkv_status qkv_gguf_get_string(const char **out, size_t *len, const qkv_gguf *g, const char *key,
                               qkv_error *err) {
    const gguf_kv *kv = get_kv(g, key, T(STRING), "string", err);
    if (!kv) return QKV_ERR_FORMAT;
    *out = arena_str(g, kv->v.s);
    if (len) *len = (size_t)kv->v.s.len;
    return QKV_OK;
}

#undef T

static const gguf_kv *array_kv(const qkv_gguf *g, int64_t key_id) {
    if (key_id < 0 || key_id >= g->n_kv || g->kv[key_id].type != QKV_GGUF_TYPE_ARRAY) return NULL;
    return &g->kv[key_id];
}

uint64_t qkv_gguf_arr_len(const qkv_gguf *g, int64_t key_id) {
    const gguf_kv *kv = array_kv(g, key_id);
    return kv ? kv->arr_n : 0;
}

qkv_gguf_type qkv_gguf_arr_type(const qkv_gguf *g, int64_t key_id) {
    const gguf_kv *kv = array_kv(g, key_id);
    return kv ? kv->arr_type : (qkv_gguf_type)-1;
}

const void *qkv_gguf_arr_data(const qkv_gguf *g, int64_t key_id) {
    const gguf_kv *kv = array_kv(g, key_id);
    return kv ? kv->arr_data : NULL;
}

const char *qkv_gguf_arr_str(const qkv_gguf *g, int64_t key_id, uint64_t i, size_t *len) {
    const gguf_kv *kv = array_kv(g, key_id);
    if (!kv || kv->arr_type != QKV_GGUF_TYPE_STRING || i >= kv->arr_n) return NULL;
    if (len) *len = (size_t)kv->arr_strs[i].len;
    return arena_str(g, kv->arr_strs[i]);
}

int64_t qkv_gguf_n_tensors(const qkv_gguf *g) { return g->n_tensors; }

int64_t qkv_gguf_find_tensor(const qkv_gguf *g, const char *name) {
    return find_name(g->tensor_sorted, g->n_tensors, name);
}

const qkv_gguf_tensor *qkv_gguf_tensor_info(const qkv_gguf *g, int64_t tensor_id) {
    if (tensor_id < 0 || tensor_id >= g->n_tensors) return NULL;
    return &g->tensors[tensor_id];
}
