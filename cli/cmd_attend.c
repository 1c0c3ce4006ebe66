/*
 * cmd_attend.c — `qkv attend`: attention of .npy arrays from Python.
 *   q: [Hq, Lq, D], k/v: [Hkv, Lk, D] float32 (a leading batch dim of 1 is
 *   accepted); optional RoPE on q and k; masks; a kernel and a KV dtype.
 * Outputs (--out, --lse, --weights) are written only when everything
 * succeeded; bad input gets one line on stderr and exit status 2.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "outputs.h"
#include "util.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *q, *k, *v, *out, *lse, *weights, *positions;
    int causal, window, sinks, have_sinks, threads, rope, pos_offset_set, pairing, kernel, kv_dtype;
    int64_t pos_offset;
    qkv_mask_kind mask;
    cli_ints exclude;
    float scale, softcap;
    qkv_rope rope_params;
} attend_args;

static int parse_rope_scaling(void *dest, const char *flag, const char *s) {
    qkv_rope *r = dest;
    (void)flag;
    if (strncmp(s, "llama3:", 7))
        return cli_fail("--rope-scaling: '%s' must look like llama3:factor=8,low=1,high=4,orig=8192", s);
    r->scaling = QKV_ROPE_SCALING_LLAMA3;
    r->factor = 8;
    r->low_freq_factor = 1;
    r->high_freq_factor = 4;
    r->original_max_position = 8192;
    const char *p = s + 7;
    while (*p) {
        char key[32], val[64];
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        if (!eq || (size_t)(eq - p) >= sizeof key || n - (size_t)(eq - p) - 1 >= sizeof val)
            return cli_fail("--rope-scaling: bad item in '%s'", s);
        memcpy(key, p, (size_t)(eq - p));
        key[eq - p] = 0;
        memcpy(val, eq + 1, n - (size_t)(eq - p) - 1);
        val[n - (size_t)(eq - p) - 1] = 0;
        int rc;
        if (!strcmp(key, "factor")) rc = cli_parse_float(&r->factor, "--rope-scaling factor", val, 1e-6, 1e6);
        else if (!strcmp(key, "low")) rc = cli_parse_float(&r->low_freq_factor, "--rope-scaling low", val, 1e-6, 1e6);
        else if (!strcmp(key, "high")) rc = cli_parse_float(&r->high_freq_factor, "--rope-scaling high", val, 1e-6, 1e6);
        else if (!strcmp(key, "orig")) rc = cli_parse_int(&r->original_max_position, "--rope-scaling orig", val, 1, 1 << 30);
        else return cli_fail("--rope-scaling: unknown key '%s' (factor, low, high, orig)", key);
        if (rc) return rc;
        p += n;
        if (*p) p++;
    }
    if (!(r->high_freq_factor > r->low_freq_factor))
        return cli_fail("--rope-scaling: high (%g) must be greater than low (%g)", r->high_freq_factor,
                        r->low_freq_factor);
    return 0;
}

static int parse_args(attend_args *a, int argc, char **argv) {
    static const char *const pairings[] = {"half", "interleaved", NULL};
    memset(a, 0, sizeof *a);
    a->rope_params = qkv_rope_default();
    cli_flag flags[] = {
        CLI_FLAGS_ATTEND_ARRAYS(a),
        {.name = "--weights", .kind = CLI_STRING, .dest = &a->weights, .metavar = "FILE",
         .help = "also write the weights [Hq, Lq, Lk] (reference kernel only)"},
        CLI_FLAGS_ATTEND_MASK(a),
        CLI_FLAG_KERNEL(&a->kernel, "attention kernel (default auto)"),
        CLI_FLAG_KV_DTYPE(&a->kv_dtype, "K (after RoPE) and V are stored so (default f32)"),
        CLI_FLAG_THREADS(&a->threads),
        CLI_FLAG_CHOICE("--rope", CLI_CHOICE, &a->pairing, pairings, "apply RoPE to q and k before attention"),
        {.name = "--rope-theta", .kind = CLI_FLOAT, .dest = &a->rope_params.theta, .lo = 1.0001, .hi = 1e12, .metavar = "X",
         .help = "RoPE base (default 10000)"},
        CLI_FLAG_FN("--rope-scaling", &a->rope_params, parse_rope_scaling, "llama3:factor=8,low=1,high=4,orig=8192",
                    "llama3 frequency scaling"),
        {.name = "--positions", .kind = CLI_STRING, .dest = &a->positions, .metavar = "FILE",
         .help = "int32/int64 [Lk]: positions of the K rows; Q takes the last Lq"},
        {.name = "--pos-offset", .kind = CLI_I64, .dest = &a->pos_offset, .lo = 0, .hi = 0x1p40, .metavar = "P",
         .help = "positions P, P+1, ... (default 0)"},
        {0},
    };
    const cli_command cmd = {.name = "attend", .usage = "--q q.npy --k k.npy --v v.npy --out o.npy [flags]",
                             .about = "q: [Hq, Lq, D], k, v: [Hkv, Lk, D] float32 .npy (leading batch dim 1 allowed)", .flags = flags};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc) return rc;
    a->have_sinks = cli_given(&cmd, "--sinks");
    a->pos_offset_set = cli_given(&cmd, "--pos-offset");
    a->rope = cli_given(&cmd, "--rope");
    a->rope_params.pairing = a->pairing ? QKV_ROPE_INTERLEAVED : QKV_ROPE_HALF;
    if (!a->q || !a->k || !a->v || !a->out) return cli_fail("attend: --q, --k, --v and --out are required");
    if (a->have_sinks && !a->window) return cli_fail("--sinks needs --window");
    if (a->weights && a->kernel != QKV_KERNEL_REFERENCE)
        return cli_fail("--weights needs --kernel ref (the fast kernels never build the weight matrix)");
    if ((a->positions || a->pos_offset_set || a->rope_params.scaling) && !a->rope)
        return cli_fail("--positions, --pos-offset and --rope-scaling need --rope");
    if (a->positions && a->pos_offset_set) return cli_fail("give --positions or --pos-offset, not both");
    a->mask = a->window ? (a->have_sinks ? QKV_MASK_SINK_WINDOW : QKV_MASK_WINDOW)
                        : (a->causal ? QKV_MASK_CAUSAL : QKV_MASK_NONE);
    return 0;
}

int cli_load_3d(qkv_npy *a, const char *path) {
    qkv_error err = {0};
    if (qkv_npy_load(a, path, &err)) return cli_fail("%s", err.msg);
    if (a->type != QKV_NPY_F32) {
        static const char *const descr[] = {"<f4", "<i4", "<i8", "<f8"};
        const int type = (int)a->type;
        qkv_npy_free(a);
        return cli_fail("%s: must be float32, not '%s'", path, descr[type]);
    }
    if (a->ndim == 4 && a->shape[0] == 1) {
        memmove(a->shape, a->shape + 1, 3 * sizeof a->shape[0]);
        a->ndim = 3;
    }
    if (a->ndim != 3 || a->count == 0) {
        qkv_npy_free(a);
        return cli_fail("%s: expected shape [heads, tokens, head_dim] (optionally with a leading 1)", path);
    }
    for (int i = 0; i < 3; i++)
        if (a->shape[i] > (1 << 30)) {
            qkv_npy_free(a);
            return cli_fail("%s: dimension %d is too large", path, i);
        }
    return 0;
}

static int load_positions(int64_t *pos, const char *path, int64_t lk) {
    qkv_npy p;
    qkv_error err = {0};
    if (qkv_npy_load(&p, path, &err)) return cli_fail("%s", err.msg);
    int rc = 0;
    int ndim_ok = p.ndim == 1 || (p.ndim == 2 && p.shape[0] == 1);
    if (p.type != QKV_NPY_I32 && p.type != QKV_NPY_I64) rc = cli_fail("%s: positions must be int32 or int64", path);
    else if (!ndim_ok || p.count != lk)
        rc = cli_fail("%s: expected %lld positions (one per K row), got shape with %lld", path, (long long)lk,
                      (long long)p.count);
    for (int64_t i = 0; !rc && i < lk; i++) {
        pos[i] = p.type == QKV_NPY_I32 ? ((int32_t *)p.data)[i] : ((int64_t *)p.data)[i];
        if (pos[i] < 0) rc = cli_fail("%s: position %lld is negative", path, (long long)pos[i]);
    }
    qkv_npy_free(&p);
    return rc;
}

static int attend(attend_args *a) {
    /* outputs first: a target that cannot be written fails before any work */
    const char *out_tmp = cli_output_add(a->out), *lse_tmp = NULL, *w_tmp = NULL;
    if (!out_tmp || (a->lse && !(lse_tmp = cli_output_add(a->lse))) ||
        (a->weights && !(w_tmp = cli_output_add(a->weights))))
        return cli_outputs_finish(CLI_EXIT_BAD_INPUT);
    qkv_npy q = {0}, k = {0}, v = {0};
    int rc = cli_load_3d(&q, a->q);
    if (!rc) rc = cli_load_3d(&k, a->k);
    if (!rc) rc = cli_load_3d(&v, a->v);
    float *o = NULL, *lse = NULL, *w = NULL;
    void *kd = NULL, *vd = NULL;
    int64_t *pos = NULL;
    if (rc) goto done;
    int64_t hq = q.shape[0], lq = q.shape[1], d = q.shape[2], hkv = k.shape[0], lk = k.shape[1];
    if (k.shape[2] != d) { rc = cli_fail("%s: head_dim %lld differs from q's %lld", a->k, (long long)k.shape[2], (long long)d); goto done; }
    if (memcmp(v.shape, k.shape, 3 * sizeof k.shape[0])) { rc = cli_fail("%s: shape differs from k's", a->v); goto done; }
    if (hq % hkv) { rc = cli_fail("%s: %lld query heads is not a multiple of %lld KV heads (%s)", a->q, (long long)hq, (long long)hkv, a->k); goto done; }
    if (d < QKV_HEAD_DIM_MIN || d > QKV_HEAD_DIM_MAX) { rc = cli_fail("%s: head_dim %lld outside [%d, %d]", a->q, (long long)d, QKV_HEAD_DIM_MIN, QKV_HEAD_DIM_MAX); goto done; }
    for (int e = 0; e < a->exclude.n; e++)
        if (a->exclude.v[e] >= lk) { rc = cli_fail("--exclude: key %d is outside [0, %lld)", a->exclude.v[e], (long long)lk); goto done; }
    qkv_error err = {0};
    if (a->rope) {
        if (d % 2) { rc = cli_fail("%s: RoPE needs an even head_dim, got %lld", a->q, (long long)d); goto done; }
        pos = malloc((size_t)lk * sizeof *pos);
        if (!pos) { rc = cli_fail("--rope: cannot allocate %lld positions", (long long)lk); goto done; }
        if (a->positions) {
            if ((rc = load_positions(pos, a->positions, lk))) goto done;
        } else {
            for (int64_t i = 0; i < lk; i++) pos[i] = a->pos_offset + i;
        }
        if (lq > lk) { rc = cli_fail("%s: RoPE positions need Lq (%lld) <= Lk (%lld)", a->q, (long long)lq, (long long)lk); goto done; }
        if (qkv_rope_apply(q.data, pos + (lk - lq), &a->rope_params, (int)hq, (int)lq, (int)d, &err) ||
            qkv_rope_apply(k.data, pos, &a->rope_params, (int)hkv, (int)lk, (int)d, &err)) {
            rc = cli_fail("rope: %s", err.msg);
            goto done;
        }
    }
    size_t nkv = (size_t)k.count;
    kd = malloc(nkv * qkv_dtype_size((qkv_dtype)a->kv_dtype));
    vd = malloc(nkv * qkv_dtype_size((qkv_dtype)a->kv_dtype));
    o = malloc((size_t)q.count * sizeof(float));
    lse = malloc((size_t)(hq * lq) * sizeof(float));
    if (!kd || !vd || !o || !lse) { rc = cli_fail("attend: out of memory"); goto done; }
    qkv_convert_from_f32(kd, (qkv_dtype)a->kv_dtype, k.data, nkv);
    qkv_convert_from_f32(vd, (qkv_dtype)a->kv_dtype, v.data, nkv);
    qkv_attn_desc desc = {.n_q_head = (int)hq, .n_kv_head = (int)hkv, .q_len = (int)lq, .kv_len = (int)lk,
                          .head_dim = (int)d, .scale = a->scale, .softcap = a->softcap,
                          .mask = {.kind = a->mask, .window = a->window, .sinks = a->sinks, .exclude = a->exclude.v,
                                   .n_exclude = a->exclude.n},
                          .kv_dtype = (qkv_dtype)a->kv_dtype, .n_threads = a->threads};
    qkv_status st;
    if (a->weights) {
        int64_t n_w = hq * lq * lk;
        if (n_w > QKV_REFERENCE_MAX_SCORES) { rc = cli_fail("--weights: [%lld, %lld, %lld] is too large to write", (long long)hq, (long long)lq, (long long)lk); goto done; }
        w = malloc((size_t)n_w * sizeof(float));
        if (!w) { rc = cli_fail("--weights: out of memory"); goto done; }
        st = qkv_attn_reference(o, lse, w, q.data, kd, vd, &desc, &err);
    } else {
        st = qkv_attn(o, lse, q.data, kd, vd, &desc, (qkv_kernel)a->kernel, &err);
    }
    if (st) { rc = cli_fail("%s", err.msg); goto done; }
    int64_t shape_o[3] = {hq, lq, d}, shape_w[3] = {hq, lq, lk};
    if (qkv_npy_save_f32(out_tmp, o, 3, shape_o, &err) || (lse_tmp && qkv_npy_save_f32(lse_tmp, lse, 2, shape_o, &err)) ||
        (w_tmp && qkv_npy_save_f32(w_tmp, w, 3, shape_w, &err)))
        rc = cli_outputs_fail(err.msg);
done:
    qkv_npy_free(&q);
    qkv_npy_free(&k);
    qkv_npy_free(&v);
    free(o); free(lse); free(w); free(kd); free(vd); free(pos);
    return cli_outputs_finish(rc);
}

int cmd_attend(int argc, char **argv) {
    attend_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc == 0) rc = attend(&a);
    cli_ints_free(&a.exclude);
    return rc < 0 ? 0 : rc;
}
