/*
 * attention.c — the attention descriptor: its one check per call, its defaults
 * resolved into an attn_problem, the kernel names and AUTO's pick. The
 * bottom of src/attn: the entry points above it (plan.c, reference.c) check
 * a call here once, and the kernels take the resolved problem without
 * checking again. It calls no kernel and no plan.
 */
#include "attn/internal.h"

#include <math.h>
#include <string.h>

const char *qkv_kernel_name(qkv_kernel k) {
    switch (k) {
    case QKV_KERNEL_AUTO: return "auto";
    case QKV_KERNEL_REFERENCE: return "ref";
    case QKV_KERNEL_FLASH: return "flash";
    case QKV_KERNEL_DECODE: return "decode";
    case QKV_KERNEL_FLASH_BF16: return "flash-bf16";
    }
    return "?";
}

qkv_status qkv_kernel_parse(qkv_kernel *out, const char *name, qkv_error *err) {
    const char *s = name ? name : "";
    if (!strcmp(s, "ref") || !strcmp(s, "reference")) *out = QKV_KERNEL_REFERENCE;
    else if (!strcmp(s, "flash")) *out = QKV_KERNEL_FLASH;
    else if (!strcmp(s, "decode")) *out = QKV_KERNEL_DECODE;
    else if (!strcmp(s, "flash-bf16")) *out = QKV_KERNEL_FLASH_BF16;
    else if (!strcmp(s, "auto")) *out = QKV_KERNEL_AUTO;
    else
        return util_fail(err, QKV_ERR_INVALID,
                         "kernel must be \"auto\", \"flash\", \"decode\", \"flash-bf16\" or \"reference\", got \"%.64s\"", s);
    return QKV_OK;
}

qkv_status qkv_attn_check(const qkv_attn_desc *d, qkv_error *err) {
    if (!d) return util_fail(err, QKV_ERR_INVALID, "attention: descriptor is NULL");
    if (d->n_q_head < 1) return util_fail(err, QKV_ERR_INVALID, "attention: n_q_head %d < 1", d->n_q_head);
    if (d->n_kv_head < 1) return util_fail(err, QKV_ERR_INVALID, "attention: n_kv_head %d < 1", d->n_kv_head);
    if (d->n_q_head % d->n_kv_head)
        return util_fail(err, QKV_ERR_INVALID, "attention: n_q_head %d is not a multiple of n_kv_head %d",
                        d->n_q_head, d->n_kv_head);
    if (d->q_len < 1) return util_fail(err, QKV_ERR_INVALID, "attention: q_len %d < 1", d->q_len);
    if (d->kv_len < 1) return util_fail(err, QKV_ERR_INVALID, "attention: kv_len %d < 1", d->kv_len);
    if (d->head_dim < QKV_HEAD_DIM_MIN || d->head_dim > QKV_HEAD_DIM_MAX)
        return util_fail(err, QKV_ERR_INVALID, "attention: head_dim %d outside [%d, %d]", d->head_dim,
                        QKV_HEAD_DIM_MIN, QKV_HEAD_DIM_MAX);
    if (!(d->scale >= 0) || !isfinite(d->scale))
        return util_fail(err, QKV_ERR_INVALID, "attention: scale must be finite and >= 0 (0 = 1/sqrt(D))");
    if (!(d->softcap >= 0) || !isfinite(d->softcap))
        return util_fail(err, QKV_ERR_INVALID, "attention: softcap must be finite and >= 0 (0 = none), got %g",
                        (double)d->softcap);
    if (d->kv_dtype != QKV_DTYPE_F32 && d->kv_dtype != QKV_DTYPE_BF16 && d->kv_dtype != QKV_DTYPE_F16)
        return util_fail(err, QKV_ERR_INVALID, "attention: unknown kv_dtype %d", (int)d->kv_dtype);
    if (d->kv_head_stride != 0 && d->kv_head_stride < (int64_t)d->kv_len * d->head_dim)
        return util_fail(err, QKV_ERR_INVALID, "attention: kv_head_stride %lld < kv_len * head_dim",
                        (long long)d->kv_head_stride);
    if (d->n_threads < 0) return util_fail(err, QKV_ERR_INVALID, "attention: n_threads %d < 0", d->n_threads);
    const qkv_mask *m = &d->mask;
    switch (m->kind) {
    case QKV_MASK_NONE:
    case QKV_MASK_CAUSAL: break;
    case QKV_MASK_WINDOW:
    case QKV_MASK_SINK_WINDOW:
        if (m->window < 1) return util_fail(err, QKV_ERR_INVALID, "attention: mask window %d < 1", m->window);
        if (m->kind == QKV_MASK_SINK_WINDOW && m->sinks < 0)
            return util_fail(err, QKV_ERR_INVALID, "attention: mask sinks %d < 0", m->sinks);
        break;
    default: return util_fail(err, QKV_ERR_INVALID, "attention: unknown mask kind %d", (int)m->kind);
    }
    if (m->n_exclude < 0 || (m->n_exclude > 0 && !m->exclude))
        return util_fail(err, QKV_ERR_INVALID, "attention: bad exclusion list");
    return QKV_OK;
}

qkv_kernel qkv_attn_pick(const qkv_attn_desc *d) {
    /* Few query rows against a long KV: the flash grid (KV heads x query
     * blocks) has too few items to fill the cores, so split the keys instead. */
    if (d->q_len <= QKV_DECODE_MAX_Q && d->kv_len >= ATTN_DECODE_MIN_KV) return QKV_KERNEL_DECODE;
    return QKV_KERNEL_FLASH;
}

int attn_threads(int requested) {
    int n = requested > 0 ? requested : qkv_cpu_count();
    return n < 1 ? 1 : n;
}

qkv_status attn_call_check(const float *o, const float *q, const void *k, const void *v, const qkv_attn_desc *d,
                           qkv_error *err) {
    if (!o) return util_fail(err, QKV_ERR_INVALID, "attention: output o is NULL");
    qkv_status st = qkv_attn_check(d, err);
    if (st) return st;
    if (!q || !k || !v) return util_fail(err, QKV_ERR_INVALID, "attention: q, k and v must not be NULL");
    return QKV_OK;
}

void attn_problem_init(attn_problem *P, const qkv_attn_desc *d, const float *q, const void *k, const void *v,
                       uint64_t *excl_bits) {
    memset(P, 0, sizeof *P);
    P->n_q_head = d->n_q_head;
    P->n_kv_head = d->n_kv_head;
    P->group = d->n_q_head / d->n_kv_head;
    P->q_len = d->q_len;
    P->kv_len = d->kv_len;
    P->head_dim = d->head_dim;
    P->ld = (d->head_dim + 15) & ~15;
    P->scale = d->scale > 0 ? d->scale : 1.0f / sqrtf((float)d->head_dim);
    P->softcap = d->softcap;
    P->mask = &d->mask;
    P->q = q;
    P->k = k;
    P->v = v;
    P->kv_dtype = d->kv_dtype;
    P->kv_head_stride = d->kv_head_stride ? d->kv_head_stride : (int64_t)d->kv_len * d->head_dim;
    if (excl_bits) attn_excl_build(&P->ex, excl_bits, &d->mask, d->kv_len);
}
