/*
 * qkv/gguf.h — GGUF files: the container, its metadata and tensors, and
 * the dequantisation of every ggml block type qkv reads.
 */
#ifndef QKV_GGUF_H
#define QKV_GGUF_H

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------------------------------------------- gguf */

/*
 * A GGUF file (versions 2 and 3, little-endian), memory-mapped read-only:
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x      { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
 *   padding to general.alignment (u32, default 32), then the tensor data;
 *   each tensor at data start + offset (a multiple of the alignment).
 * string = u64 length + bytes (no NUL); array = u32 element type + u64 count +
 * elements (strings and nested arrays included).
 * Every offset, size, count and length is checked against the file at open;
 * a malformed file gives QKV_ERR_FORMAT naming the file and the problem.
 * Strings returned by the accessors are NUL-terminated copies owned by the
 * qkv_gguf (a length is given too: a GGUF string may contain NUL bytes).
 * Everything returned lives until qkv_gguf_close.
 */
typedef struct qkv_gguf qkv_gguf;

/* The most tokens a vocabulary read from a GGUF may have (the token list,
 * the embedding rows): the tokenizer and the model config both check it, so
 * that no size derived from it can overflow. */
#define QKV_MAX_VOCAB (1 << 24)

/* Metadata value types (ids as stored in the file). */
typedef enum {
    QKV_GGUF_TYPE_U8 = 0,
    QKV_GGUF_TYPE_I8 = 1,
    QKV_GGUF_TYPE_U16 = 2,
    QKV_GGUF_TYPE_I16 = 3,
    QKV_GGUF_TYPE_U32 = 4,
    QKV_GGUF_TYPE_I32 = 5,
    QKV_GGUF_TYPE_F32 = 6,
    QKV_GGUF_TYPE_BOOL = 7,
    QKV_GGUF_TYPE_STRING = 8,
    QKV_GGUF_TYPE_ARRAY = 9,
    QKV_GGUF_TYPE_U64 = 10,
    QKV_GGUF_TYPE_I64 = 11,
    QKV_GGUF_TYPE_F64 = 12
} qkv_gguf_type;

/* Tensor element types (ggml ids as stored in the file). Ids not listed
 * (4, 5, 31-33, 36-38: retired) or above 41 are rejected at open. */
typedef enum {
    QKV_GGML_TYPE_F32 = 0,
    QKV_GGML_TYPE_F16 = 1,
    QKV_GGML_TYPE_Q4_0 = 2,
    QKV_GGML_TYPE_Q4_1 = 3,
    QKV_GGML_TYPE_Q5_0 = 6,
    QKV_GGML_TYPE_Q5_1 = 7,
    QKV_GGML_TYPE_Q8_0 = 8,
    QKV_GGML_TYPE_Q8_1 = 9,
    QKV_GGML_TYPE_Q2_K = 10,
    QKV_GGML_TYPE_Q3_K = 11,
    QKV_GGML_TYPE_Q4_K = 12,
    QKV_GGML_TYPE_Q5_K = 13,
    QKV_GGML_TYPE_Q6_K = 14,
    QKV_GGML_TYPE_Q8_K = 15,
    QKV_GGML_TYPE_IQ2_XXS = 16,
    QKV_GGML_TYPE_IQ2_XS = 17,
    QKV_GGML_TYPE_IQ3_XXS = 18,
    QKV_GGML_TYPE_IQ1_S = 19,
    QKV_GGML_TYPE_IQ4_NL = 20,
    QKV_GGML_TYPE_IQ3_S = 21,
    QKV_GGML_TYPE_IQ2_S = 22,
    QKV_GGML_TYPE_IQ4_XS = 23,
    QKV_GGML_TYPE_I8 = 24,
    QKV_GGML_TYPE_I16 = 25,
    QKV_GGML_TYPE_I32 = 26,
    QKV_GGML_TYPE_I64 = 27,
    QKV_GGML_TYPE_F64 = 28,
    QKV_GGML_TYPE_IQ1_M = 29,
    QKV_GGML_TYPE_BF16 = 30,
    QKV_GGML_TYPE_TQ1_0 = 34,
    QKV_GGML_TYPE_TQ2_0 = 35,
    QKV_GGML_TYPE_MXFP4 = 39,
    QKV_GGML_TYPE_NVFP4 = 40,
    QKV_GGML_TYPE_Q1_0 = 41
} qkv_ggml_type;

/* "u8" ... "f64", "string", "array"; "?" for an unknown id. */
QKV_API const char *qkv_gguf_type_name(qkv_gguf_type t);
/* llama.cpp's names: "f32", "f16", "q4_0", "q4_K", "q6_K", "bf16" ...; "?" if unknown. */
QKV_API const char *qkv_ggml_type_name(qkv_ggml_type t);
/* Elements per block (1 for plain types, 32 or 256 for quantised ones) and
 * bytes per block; 0 for an unknown id. */
QKV_API int64_t qkv_ggml_block_elems(qkv_ggml_type t);
QKV_API size_t qkv_ggml_block_bytes(qkv_ggml_type t);
/* Bytes of n consecutive elements (a row of n = shape[last]); 0 if the type is
 * unknown or n is not a multiple of the block size. Row r of a 2-D weight
 * [rows, n] starts at data + r * qkv_ggml_row_size(type, n). */
QKV_API size_t qkv_ggml_row_size(qkv_ggml_type t, int64_t n);

/* Opens and validates path. QKV_ERR_IO if it cannot be opened or mapped,
 * QKV_ERR_FORMAT if malformed (bad magic, version 1, truncated, absurd counts,
 * unknown value or tensor type, duplicate key or tensor name, tensor data out
 * of the file or overlapping ...), QKV_ERR_NOMEM. *out is NULL on failure. */
QKV_API qkv_status qkv_gguf_open(qkv_gguf **out, const char *path, qkv_error *err);
QKV_API void qkv_gguf_close(qkv_gguf *g);   /* NULL is fine */

QKV_API const char *qkv_gguf_path(const qkv_gguf *g);      /* as given to open */
QKV_API uint32_t qkv_gguf_version(const qkv_gguf *g);      /* 2 or 3 */
QKV_API uint32_t qkv_gguf_alignment(const qkv_gguf *g);    /* general.alignment or 32 */
QKV_API uint64_t qkv_gguf_file_size(const qkv_gguf *g);
QKV_API uint64_t qkv_gguf_data_offset(const qkv_gguf *g);  /* file offset of the data section */

/* Metadata. key_id is 0 .. n_kv-1 in file order. */
QKV_API int64_t qkv_gguf_n_kv(const qkv_gguf *g);
QKV_API int64_t qkv_gguf_find_key(const qkv_gguf *g, const char *key);  /* -1 if absent */
QKV_API const char *qkv_gguf_key(const qkv_gguf *g, int64_t key_id);     /* NULL if out of range */
QKV_API qkv_gguf_type qkv_gguf_key_type(const qkv_gguf *g, int64_t key_id); /* -1 cast if out of range */

/* Typed getters by key. QKV_ERR_FORMAT (message names file, key, stored type)
 * when the key is absent or of another type; check qkv_gguf_find_key first for
 * optional keys. get_int accepts every integer type (u8 ... i64; a u64 above
 * INT64_MAX is refused): use it for counts and sizes. get_f32 accepts f32 and
 * f64 (rounded). get_string gives a NUL-terminated copy and, if len is not
 * NULL, its length in bytes. */
QKV_API qkv_status qkv_gguf_get_u32(uint32_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_i32(int32_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_u64(uint64_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_int(int64_t *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_f32(float *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_bool(int *out, const qkv_gguf *g, const char *key, qkv_error *err);
QKV_API qkv_status qkv_gguf_get_string(const char **out, size_t *len, const qkv_gguf *g,
                                       const char *key, qkv_error *err);

/* Arrays, by key_id (the tokenizer reads 10^5 elements; look the key up once).
 * arr_len is 0 and arr_type -1 when key_id is not an array.
 * arr_data: the elements of a numeric or bool array, copied to an aligned
 * buffer in host order ([arr_len] of u8 ... f64; bool is one byte 0/1); NULL
 * for arrays of strings or of arrays (nested arrays are validated but their
 * contents are not exposed).
 * arr_str: element i of a string array (NUL-terminated copy, *len its length
 * if len is not NULL); NULL if not a string array or i out of range. */
QKV_API uint64_t qkv_gguf_arr_len(const qkv_gguf *g, int64_t key_id);
QKV_API qkv_gguf_type qkv_gguf_arr_type(const qkv_gguf *g, int64_t key_id);
QKV_API const void *qkv_gguf_arr_data(const qkv_gguf *g, int64_t key_id);
QKV_API const char *qkv_gguf_arr_str(const qkv_gguf *g, int64_t key_id, uint64_t i, size_t *len);

/* Tensors. shape is OUTERMOST FIRST like every shape in this API: the file
 * stores ggml's ne[] innermost first and the loader reverses it (the only place
 * that does), so token_embd.weight with ne = {n_embd, n_vocab} reads
 * shape = [n_vocab, n_embd], rows of n_embd contiguous elements. */
#define QKV_GGUF_MAX_DIMS 4
typedef struct {
    const char *name;                    /* NUL-terminated */
    qkv_ggml_type type;
    int n_dims;                          /* 1 .. QKV_GGUF_MAX_DIMS */
    int64_t shape[QKV_GGUF_MAX_DIMS];    /* [n_dims], outermost first; unused = 1 */
    int64_t n_elements;                  /* product of shape */
    size_t nbytes;                       /* bytes of data */
    uint64_t offset;                     /* from the start of the data section */
    const void *data;                    /* into the mapping, read-only */
} qkv_gguf_tensor;

QKV_API int64_t qkv_gguf_n_tensors(const qkv_gguf *g);
QKV_API int64_t qkv_gguf_find_tensor(const qkv_gguf *g, const char *name);  /* -1 if absent */
/* Tensor tensor_id (0 .. n_tensors-1, file order); NULL if out of range. */
QKV_API const qkv_gguf_tensor *qkv_gguf_tensor_info(const qkv_gguf *g, int64_t tensor_id);

/* ------------------------------------------------------------- dequantise */

/* 1 if qkv_dequantize handles t: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. */
QKV_API int qkv_dequantize_supported(qkv_ggml_type t);

/* out[n] f32 <- src, n consecutive elements of type t (whole blocks: n a
 * multiple of qkv_ggml_block_elems(t); src needs qkv_ggml_row_size(t, n)
 * bytes, any alignment). QKV_ERR_UNSUPPORTED naming the type for other types,
 * QKV_ERR_INVALID if n < 0 or not a whole number of blocks. */
QKV_API qkv_status qkv_dequantize(float *out, const void *src, qkv_ggml_type t, int64_t n,
                                  qkv_error *err);

/* The first of the n elements qkv_dequantize(out, src, t, n) would write
 * whose value is not finite: *index (-1 when all are finite) and *value
 * (nan, inf or -inf; 0 when none). qkv_dequantize passes inf and NaN scales
 * through as the gguf package does; a loader that wants finite weights asks
 * here first. Block types are judged by their f16 scales (d; m or dmin)
 * without decoding: a finite scale gives finite elements, a non-finite one
 * makes its whole block non-finite, so the index is a block's first
 * element. Errors as qkv_dequantize's (QKV_ERR_INVALID also for NULL
 * index or value). */
QKV_API qkv_status qkv_dequantize_check(int64_t *index, float *value, const void *src, qkv_ggml_type t,
                                        int64_t n, qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_GGUF_H */
