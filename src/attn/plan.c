/*
 * plan.c — the top of src/attn, where every call comes in: qkv_attn (a
 * plan made for the call, run, freed), qkv_attn_run and the plan itself:
 * every buffer the flash and decode kernels need (per-thread tile scratch
 * and f32 copies of bf16/f16 K/V, decode split partials, the exclusion
 * bitmap), sized once for the largest problem a caller will run and laid out
 * in one block of memory, the plan's own or the caller's. A call is checked
 * once, here (attention.c's attn_call_check), and handed to the kernels below
 * (flash.c, decode.c, reference.c) resolved; qkv_attn_run checks that a call
 * fits and never allocates. A reference plan holds nothing: its kernel
 * materialises its score table per call.
 */
#include "attn/internal.h"
#include "util/buffers.h"

#include <string.h>

#define PLAN_ALIGN UTIL_BUFFER_ALIGN

static size_t round_up(size_t n) { return (n + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

/* One thread's scratch as a table (util/buffers.h) for ws, row stride ld
 * (a multiple of 16): every buffer starts 64-byte aligned, and a thread's
 * bytes are the rows' sum (shapes in internal.h's attn_scratch; acc has
 * q's floats, more than its [ATTN_MAX_ROWS, ld], as it always had). */
#define SCRATCH_ROWS 11
static void scratch_table(util_buffer rows[SCRATCH_ROWS], attn_scratch *ws, int ld) {
    const size_t n_q = (size_t)ATTN_MAX_STRIDE * ld, n_tile = (size_t)ATTN_BK * ld, f = sizeof(float);
    const util_buffer table[SCRATCH_ROWS] = {
        {&ws->q, n_q, f},           {&ws->s, ATTN_MAX_STRIDE * ATTN_BK, f},
        {&ws->kt, n_tile, f},       {&ws->vt, n_tile, f},
        {&ws->acc, n_q, f},         {&ws->m, ATTN_MAX_ROWS, f},
        {&ws->l, ATTN_MAX_ROWS, f}, {&ws->alpha, ATTN_MAX_ROWS, f},
        {&ws->tmax, ATTN_MAX_ROWS, f},
        {&ws->pos, ATTN_MAX_ROWS, sizeof(int32_t)},
        {&ws->part, ATTN_PART, f},
    };
    memcpy(rows, table, sizeof table);
}

/* Byte offsets of the plan's parts from the aligned start of its memory. */
typedef struct {
    int n_threads, ld;
    size_t ws, scratch, scratch_bytes, part, n_part, excl, kvf, kvf_cap, total;
    size_t bytes; /* a workspace of any alignment needs this many */
} plan_layout;

/* Floats of K (and of V) in each thread's f32 copy of a KV head
 * (attn_kv_f32): only for bf16/f16 K/V that the flash kernel may read, as
 * many keys as the plan's longest call or ATTN_KV_F32_MAX_FLOATS, a
 * multiple of 16 (every copy starts aligned). AUTO with q_len <= the decode
 * limit runs flash only below ATTN_DECODE_MIN_KV keys (qkv_attn_pick). */
static size_t kv_f32_floats(const qkv_attn_desc *max, qkv_kernel kernel) {
    if (max->kv_dtype == QKV_DTYPE_F32 || (kernel != QKV_KERNEL_FLASH && kernel != QKV_KERNEL_AUTO)) return 0;
    size_t keys = (size_t)max->kv_len;
    if (kernel == QKV_KERNEL_AUTO && max->q_len <= QKV_DECODE_MAX_Q && keys >= ATTN_DECODE_MIN_KV)
        keys = ATTN_DECODE_MIN_KV - 1;
    size_t n = keys * (size_t)max->head_dim;
    if (n > ATTN_KV_F32_MAX_FLOATS) n = ATTN_KV_F32_MAX_FLOATS;
    return (n + 15) & ~(size_t)15;
}

/* The layout for a checked max descriptor; QKV_ERR_INVALID names a bad
 * kernel or n_threads. */
static qkv_status layout_of(plan_layout *L, const qkv_attn_desc *max, qkv_kernel kernel, int n_threads,
                            qkv_error *err) {
    if (n_threads < 0) return util_fail(err, QKV_ERR_INVALID, "attention plan: n_threads %d < 0", n_threads);
    switch (kernel) {
    case QKV_KERNEL_AUTO:
    case QKV_KERNEL_REFERENCE:
    case QKV_KERNEL_FLASH:
    case QKV_KERNEL_FLASH_BF16: break;
    case QKV_KERNEL_DECODE:
        if (max->q_len > QKV_DECODE_MAX_Q)
            return util_fail(err, QKV_ERR_INVALID, "attention: the decode kernel takes q_len <= %d, got %d",
                            QKV_DECODE_MAX_Q, max->q_len);
        break;
    default: return util_fail(err, QKV_ERR_INVALID, "attention: unknown kernel %d", (int)kernel);
    }
    memset(L, 0, sizeof *L);
    L->n_threads = attn_threads(n_threads);
    L->ld = (max->head_dim + 15) & ~15;
    L->ws = round_up(sizeof(qkv_attn_plan));
    size_t end = L->ws;
    if (kernel != QKV_KERNEL_REFERENCE) {
        L->scratch = round_up(end + (size_t)L->n_threads * sizeof(attn_scratch));
        attn_scratch one;
        util_buffer rows[SCRATCH_ROWS];
        scratch_table(rows, &one, L->ld);
        L->scratch_bytes = util_buffers_bytes(rows, SCRATCH_ROWS); /* a multiple of 64: every thread's starts aligned */
        end = L->scratch + (size_t)L->n_threads * L->scratch_bytes;
        if (kernel == QKV_KERNEL_AUTO || kernel == QKV_KERNEL_DECODE)
            L->n_part = attn_decode_part_bound(max->n_q_head, max->q_len, max->kv_len, L->ld, L->n_threads);
        L->part = round_up(end);
        end = L->part + L->n_part * sizeof(float);
        L->excl = round_up(end);
        end = L->excl + ATTN_EXCL_WORDS(max->kv_len) * sizeof(uint64_t);
        L->kvf_cap = kv_f32_floats(max, kernel);
        L->kvf = round_up(end);
        end = L->kvf + (size_t)L->n_threads * 2 * L->kvf_cap * sizeof(float);
    }
    L->total = round_up(end);
    L->bytes = L->total + PLAN_ALIGN - 1; /* room to align any start */
    return QKV_OK;
}

/* The plan laid out by L in workspace: [L->bytes] at any alignment. */
static qkv_attn_plan *plan_place(void *workspace, const plan_layout *L, const qkv_attn_desc *max,
                                 qkv_kernel kernel) {
    char *base = (char *)(((uintptr_t)workspace + PLAN_ALIGN - 1) & ~(uintptr_t)(PLAN_ALIGN - 1));
    qkv_attn_plan *p = (qkv_attn_plan *)(void *)base;
    memset(p, 0, sizeof *p);
    p->kernel = kernel;
    p->n_threads = L->n_threads;
    p->max_q_head = max->n_q_head;
    p->max_q_len = max->q_len;
    p->max_kv_len = max->kv_len;
    p->max_head_dim = max->head_dim;
    if (kernel != QKV_KERNEL_REFERENCE) {
        p->ws = (attn_scratch *)(void *)(base + L->ws);
        for (int t = 0; t < L->n_threads; t++) {
            attn_scratch *ws = &p->ws[t];
            util_buffer rows[SCRATCH_ROWS];
            scratch_table(rows, ws, L->ld);
            util_buffers_place(base + L->scratch + (size_t)t * L->scratch_bytes, rows, SCRATCH_ROWS);
            float *kvf = (float *)(void *)(base + L->kvf) + (size_t)t * 2 * L->kvf_cap;
            ws->kvf = (attn_kv_f32){.k = L->kvf_cap ? kvf : NULL, .v = L->kvf_cap ? kvf + L->kvf_cap : NULL,
                                    .cap = L->kvf_cap, .kvh = -1};
        }
        p->part = L->n_part ? (float *)(void *)(base + L->part) : NULL;
        p->n_part = L->n_part;
        p->excl = (uint64_t *)(void *)(base + L->excl);
    }
    return p;
}

/* A plan in memory of its own for a checked max descriptor. */
static qkv_status plan_alloc(qkv_attn_plan **out, const qkv_attn_desc *max, qkv_kernel kernel, int n_threads,
                             qkv_error *err) {
    plan_layout L;
    qkv_status st = layout_of(&L, max, kernel, n_threads, err);
    if (st) return st;
    void *mem = malloc(L.bytes);
    if (!mem) return util_fail(err, QKV_ERR_NOMEM, "attention plan: cannot allocate %zu bytes", L.bytes);
    *out = plan_place(mem, &L, max, kernel);
    (*out)->owned = mem;
    util_parallel_start(L.n_threads); /* a run never starts a thread: it could allocate */
    return QKV_OK;
}

size_t qkv_attn_workspace_size(const qkv_attn_desc *max_desc, qkv_kernel kernel, int n_threads) {
    plan_layout L = {0};
    return qkv_attn_check(max_desc, NULL) || layout_of(&L, max_desc, kernel, n_threads, NULL) ? 0 : L.bytes;
}

qkv_status qkv_attn_plan_init_in(qkv_attn_plan **out, void *workspace, size_t bytes, const qkv_attn_desc *max_desc,
                                 qkv_kernel kernel, int n_threads, qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "attention plan: out is NULL");
    *out = NULL;
    plan_layout L;
    qkv_status st = qkv_attn_check(max_desc, err);
    if (st || (st = layout_of(&L, max_desc, kernel, n_threads, err))) return st;
    if (!workspace) return util_fail(err, QKV_ERR_INVALID, "attention plan: workspace is NULL");
    if (bytes < L.bytes)
        return util_fail(err, QKV_ERR_INVALID, "attention plan: workspace of %zu bytes, this plan needs %zu", bytes,
                        L.bytes);
    *out = plan_place(workspace, &L, max_desc, kernel);
    util_parallel_start(L.n_threads); /* a run never starts a thread: it could allocate */
    return QKV_OK;
}

qkv_status qkv_attn_plan_init(qkv_attn_plan **out, const qkv_attn_desc *max_desc, qkv_kernel kernel, int n_threads,
                              qkv_error *err) {
    if (!out) return util_fail(err, QKV_ERR_INVALID, "attention plan: out is NULL");
    *out = NULL;
    qkv_status st = qkv_attn_check(max_desc, err);
    return st ? st : plan_alloc(out, max_desc, kernel, n_threads, err);
}

void qkv_attn_plan_free(qkv_attn_plan *plan) {
    if (plan) free(plan->owned);
}

/* QKV_ERR_INVALID naming the first field of d beyond the plan's maxima. */
static qkv_status check_fits(const qkv_attn_plan *p, const qkv_attn_desc *d, qkv_error *err) {
    const struct {
        const char *field;
        int got, max;
    } f[] = {
        {"n_q_head", d->n_q_head, p->max_q_head}, {"q_len", d->q_len, p->max_q_len},
        {"kv_len", d->kv_len, p->max_kv_len},     {"head_dim", d->head_dim, p->max_head_dim},
        {"n_threads", d->n_threads, p->n_threads},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].got > f[i].max)
            return util_fail(err, QKV_ERR_INVALID, "attention: %s %d exceeds the plan's %d", f[i].field, f[i].got,
                            f[i].max);
    return QKV_OK;
}

/* A checked call that fits the plan, on the plan's kernel and memory. */
static qkv_status run_checked(qkv_attn_plan *plan, float *o, float *lse, const float *q, const void *k,
                              const void *v, const qkv_attn_desc *d, qkv_error *err) {
    attn_problem P;
    attn_problem_init(&P, d, q, k, v, plan->excl);
    const int threads = d->n_threads > 0 ? d->n_threads : plan->n_threads;
    /* a decode plan has max_q_len <= QKV_DECODE_MAX_Q; AUTO picks decode only below it */
    switch (plan->kernel == QKV_KERNEL_AUTO ? qkv_attn_pick(d) : plan->kernel) {
    case QKV_KERNEL_REFERENCE: return attn_reference(o, lse, NULL, &P, threads, err);
    case QKV_KERNEL_DECODE:
        if (attn_decode_part_floats(&P, threads) > plan->n_part) /* attn_decode_part_bound is wrong */
            return util_fail(err, QKV_ERR_INVALID, "attention plan: decode partials beyond the bound (a bug)");
        attn_decode(o, lse, &P, threads, plan->ws, plan->part);
        break;
    case QKV_KERNEL_FLASH_BF16: attn_flash(o, lse, &P, threads, attn_rows_bf16dot(), plan->ws); break;
    default: attn_flash(o, lse, &P, threads, NULL, plan->ws); break;
    }
    return QKV_OK;
}

qkv_status qkv_attn_run(qkv_attn_plan *plan, float *o, float *lse, const float *q, const void *k, const void *v,
                        const qkv_attn_desc *d, qkv_error *err) {
    if (!plan) return util_fail(err, QKV_ERR_INVALID, "attention: plan is NULL");
    qkv_status st = attn_call_check(o, q, k, v, d, err);
    /* a reference plan holds nothing a call could outgrow */
    if (st || (plan->kernel != QKV_KERNEL_REFERENCE && (st = check_fits(plan, d, err)))) return st;
    return run_checked(plan, o, lse, q, k, v, d, err);
}

qkv_status qkv_attn(float *o, float *lse, const float *q, const void *k, const void *v,
                         const qkv_attn_desc *d, qkv_kernel kernel, qkv_error *err) {
    qkv_status st = attn_call_check(o, q, k, v, d, err);
    if (st) return st;
    /* a plan for exactly this call, and for the one kernel AUTO picks */
    if (kernel == QKV_KERNEL_AUTO) kernel = qkv_attn_pick(d);
    qkv_attn_plan *plan = NULL;
    if ((st = plan_alloc(&plan, d, kernel, d->n_threads, err))) return st;
    st = run_checked(plan, o, lse, q, k, v, d, err);
    qkv_attn_plan_free(plan);
    return st;
}
