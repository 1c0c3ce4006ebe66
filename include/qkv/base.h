/*
 * qkv/base.h — what every layer of libqkv shares: the export mark, the
 * version, status codes and errors, element types, the CPU count.
 *
 * The conventions of every qkv header (stated once, used everywhere):
 *   - Shapes are written outermost first, row-major, last dim contiguous,
 *     exactly as PyTorch prints them: q: [n_q_head, q_len, head_dim].
 *   - Hq = n_q_head, Hkv = n_kv_head, Lq = q_len, Lk = kv_len, D = head_dim.
 *     Hq % Hkv == 0; query head h reads KV head h / (Hq / Hkv) (GQA).
 *   - Causal masking is bottom-right aligned: query row i sits at absolute
 *     key position Lk - Lq + i (as in flash-attn and every KV-cache decode).
 *   - LSE is the natural-log sum of exp of the scaled, masked scores of a row.
 *     A fully masked row has O = 0 and LSE = -inf, never NaN.
 *   - Functions return qkv_status; on failure the optional qkv_error receives
 *     one line naming what was wrong. The library never prints, never exits
 *     and is safe to call from several threads (an object with scratch in it,
 *     a plan, model or sampler, serves one call at a time). Its process-wide
 *     state is its thread pool (workers started when a plan or model is made,
 *     or at a loop's first need, and kept for the process; one parallel loop holds the
 *     pool at a time, a concurrent one runs on its caller's thread) and the
 *     kernel ISA, chosen once from CPUID and QKV_ISA.
 *   - Parameter structs qkv_attn_desc, qkv_mask, qkv_model_params and
 *     qkv_sampler_params: zero is every optional field's default, so a
 *     designated initialiser names only what it sets (qkv_rope has
 *     qkv_rope_default()).
 *   - Arguments: outputs first, then inputs, then sizes.
 */
#ifndef QKV_BASE_H
#define QKV_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks what libqkv exports: the library is built with -fvisibility=hidden,
 * so the functions the headers under include/qkv/ declare with it, and
 * nothing else, are its ABI
 * (tests/test_library.c checks the shared library's symbol table). */
#if defined(__GNUC__) || defined(__clang__)
#define QKV_API __attribute__((visibility("default")))
#else
#define QKV_API
#endif

/* The API's version: MAJOR changes break source or binary compatibility (the
 * shared library's soname is libqkv.so.MAJOR), MINOR adds, PATCH fixes. */
#define QKV_VERSION_MAJOR 0
#define QKV_VERSION_MINOR 2
#define QKV_VERSION_PATCH 0
#define QKV_VERSION_STR_(x) #x
#define QKV_VERSION_STR(x) QKV_VERSION_STR_(x)
#define QKV_VERSION                                                                  \
    QKV_VERSION_STR(QKV_VERSION_MAJOR) "." QKV_VERSION_STR(QKV_VERSION_MINOR) "." \
    QKV_VERSION_STR(QKV_VERSION_PATCH)

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH" (the
 * header a program was compiled with says QKV_VERSION). */
QKV_API const char *qkv_version(void);

/* ------------------------------------------------------------------ errors */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_INVALID = 1,     /* an argument is out of its documented range */
    QKV_ERR_NOMEM = 2,       /* an allocation failed */
    QKV_ERR_IO = 3,          /* a file could not be opened, read or written */
    QKV_ERR_FORMAT = 4,      /* a file's contents are malformed */
    QKV_ERR_FULL = 5,        /* a fixed-capacity container is full */
    QKV_ERR_TOO_LARGE = 6,   /* the request would need more memory than allowed */
    QKV_ERR_UNSUPPORTED = 7, /* valid, but not implemented (e.g. a tensor type) */
    QKV_ERR_CANCELLED = 8    /* a progress callback asked the call to stop */
} qkv_status;

typedef struct {
    qkv_status status;
    char msg[320];
} qkv_error;

/* Name of a status code, e.g. "invalid argument". Never NULL. */
QKV_API const char *qkv_status_str(qkv_status s);

/* ------------------------------------------------------------------ dtypes */

typedef enum {
    QKV_DTYPE_F32 = 0,
    QKV_DTYPE_BF16 = 1,
    QKV_DTYPE_F16 = 2
} qkv_dtype;

QKV_API size_t qkv_dtype_size(qkv_dtype t);          /* bytes per element */
QKV_API const char *qkv_dtype_name(qkv_dtype t);     /* "f32", "bf16", "f16" */
/* Parses "f32" | "bf16" | "f16"; QKV_ERR_INVALID otherwise, the message
 * naming the choices and what was given. */
QKV_API qkv_status qkv_dtype_parse(qkv_dtype *out, const char *name, qkv_error *err);

/* Round-to-nearest-even conversions, NaN preserved. */
QKV_API uint16_t qkv_f32_to_bf16(float x);
QKV_API float qkv_bf16_to_f32(uint16_t x);
QKV_API uint16_t qkv_f32_to_f16(float x);
QKV_API float qkv_f16_to_f32(uint16_t x);
/* dst[n] (dtype t) <- src[n] f32, and back. */
QKV_API void qkv_convert_from_f32(void *dst, qkv_dtype t, const float *src, size_t n);
QKV_API void qkv_convert_to_f32(float *dst, const void *src, qkv_dtype t, size_t n);

/* The CPUs this process may run on now (its affinity mask: taskset, cgroup
 * cpusets), at least 1: what n_threads 0 ("all available") means everywhere
 * in every qkv header. */
QKV_API int qkv_cpu_count(void);

#ifdef __cplusplus
}
#endif

#endif /* QKV_BASE_H */
