/*
 * test_model_hostile.c — hostile GGUFs of the model families (qwen2, qwen3,
 * gemma2, gemma3, llama, smollm3, olmo2, phi3), built here (gguf_build.h's gguf_put_tiny_model,
 * one fault per file) from a good tiny model of each that loads and runs.
 * Each fault is refused by qkv_model_open with one message naming the file
 * and the key or tensor, and by `qkv run`, `qkv inspect` and `qkv sinks` with
 * one line on stderr and exit 2, writing nothing and leaving an existing
 * output file as it was.
 *
 * What "inconsistent" means, key by key (llama.cpp's load_hparams and
 * create_tensor, src/llama-model.cpp, do the same unless said):
 *   attention.key_length      in [16, 256] and even (the kernels' head sizes;
 *                             llama.cpp has no upper bound), and the q/k/v/o
 *                             and QK-norm tensors' shapes follow from it:
 *                             attn_q [n_head * key_length, E] ... (a shape
 *                             that disagrees: "tensor has wrong shape")
 *   attention.sliding_window  >= 1 on gemma2 (default 4096) and gemma3
 *                             (required); llama.cpp takes 0 and then masks
 *                             every key (p1 - p0 >= 0): every row NaN
 *   attention.sliding_window_pattern P: of each P layers the last is global
 *                             (llama.cpp's set_swa_pattern; gemma2 2, gemma3
 *                             6); P < 2 names no sliding layer, P > layers no
 *                             global one (llama.cpp runs both: every layer
 *                             dense, or every layer blind beyond the window)
 *   attn_logit_softcapping, final_logit_softcapping   finite and > 0 (llama.cpp
 *                             divides by them: 0 gives inf, NaN every logit)
 *   rope.freq_base, rope.freq_base_swa   finite and > 1; attention.scale > 0
 *   rope.dimension_count      even and <= key_length (partial rotary, phi3;
 *                             llama.cpp asserts n_rot <= head dim in ggml's
 *                             rope and pairs within it)
 *   rope_factors_long/short   phi3's LongRoPE: both or neither, [n_rot/2]
 *                             each, finite and > 0, both checked whichever
 *                             the context takes (llama.cpp: create_tensor's
 *                             shape, and the pair read together)
 *   general.architecture      one of llama, qwen2, qwen3, gemma2, gemma3, smollm3,
 *                             olmo2, phi3; olmo2 without attention.sliding_window
 *                             (OLMo 3's sliding layers, under the same arch)
 *   tensors                   present for the family (qwen2's q/k/v biases,
 *                             QK-norms of qwen3 and gemma3, gemma's and olmo2's
 *                             post-norms, olmo2's QK-norms over the whole
 *                             projection: [Hq*D] and [Hkv*D], not [D]; phi3's
 *                             fused attn_qkv and ffn_up [2F, E])
 *                             and every value finite: in the block types the
 *                             scales are checked (a NaN or inf d or dmin makes
 *                             its whole block non-finite)
 */
#include "gguf_build.h"
#include "testing.h"

#include <dirent.h>
#include <math.h>

/* A good tiny model of arch: 2 layers (gemma3: 6, its pattern's global layer
 * 5), embedding 32, 2 query heads of 16 on 1 KV head (qwen3: 32, != E / H),
 * ffn 64, any text tokenises. */
static gguf_tiny_spec family(const char *arch) {
    const int qwen3 = !strcmp(arch, "qwen3"), gemma3 = !strcmp(arch, "gemma3");
    return (gguf_tiny_spec){.arch = arch, .n_layer = gemma3 ? 6 : 2, .n_embd = 32, .n_head = 2, .n_kv_head = 1,
                            .head_dim = qwen3 ? 32 : 16, .n_ff = 64, .byte_vocab = 1, .bad_block = -1};
}

static const char *write_model(const char *name, const gguf_tiny_spec *s) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    gguf_buf b = {0};
    gguf_put_tiny_model(&b, s);
    int ok = gguf_buf_save(&b, path);
    free(b.p);
    CHECK(ok, "cannot write %s", path);
    return path;
}

TEST(model_hostile_good_family_models_load_and_run) {
    /* every family the library names, so that a new row is run here */
    const char *archs[16];
    int n = 0;
    while (n < 16 && (archs[n] = qkv_model_family_name(n))) n++;
    CHECK(n == 8 && !qkv_model_family_name(-1), "%d families", n);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "good-%s.gguf", archs[i]);
        const gguf_tiny_spec s = family(archs[i]);
        const char *path = write_model(name, &s);
        qkv_model *m = NULL;
        qkv_error err = {0};
        CHECK(qkv_model_open(&m, path, NULL, &err) == QKV_OK, "%s: %s", archs[i], err.msg);
        if (m) CHECK(!strcmp(qkv_model_get_config(m)->arch, archs[i]), "%s: arch %s", archs[i], qkv_model_get_config(m)->arch);
        qkv_model_close(m);
        const char *argv[] = {"run", "-m", path, "-p", "hi", "-n", "2", "--print-ids", NULL};
        char *out = NULL, *e = NULL;
        int rc = test_run_cli(argv, NULL, &out, &e);
        CHECK(rc == 0 && out && *out, "%s: run exit %d: %s", archs[i], rc, e);
        free(out);
        free(e);
    }
}

/* The same, with each block type the hostile cases poison (scales finite). */
TEST(model_hostile_block_types_load_and_run) {
    static const qkv_ggml_type types[] = {QKV_GGML_TYPE_Q8_0, QKV_GGML_TYPE_Q5_0, QKV_GGML_TYPE_Q5_1,
                                          QKV_GGML_TYPE_Q4_K, QKV_GGML_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        gguf_tiny_spec s = family("gemma2");
        s.n_ff = 256; /* ffn_down's rows hold one 256-element super-block */
        s.quant = "blk.1.ffn_down.weight", s.quant_type = types[i];
        char name[64];
        snprintf(name, sizeof name, "good-%s.gguf", qkv_ggml_type_name(types[i]));
        const char *path = write_model(name, &s);
        const char *argv[] = {"run", "-m", path, "-p", "hi", "-n", "2", "--print-ids", NULL};
        char *out = NULL, *e = NULL;
        int rc = test_run_cli(argv, NULL, &out, &e);
        CHECK(rc == 0, "%s: run exit %d: %s", name, rc, e);
        free(out);
        free(e);
    }
}

/* One hostile file: a family and what is wrong with it. */
typedef struct {
    const char *file, *arch;
    gguf_kv kv;             /* a key set (NULL key: none) */
    const char *drop;       /* a key or tensor left out */
    const char *resize;     /* a 1-D tensor of resize_d0 elements */
    uint64_t resize_d0;
    int n_layer;            /* 0: the family's */
    const char *quant;      /* a matrix in block type qt whose block 1 has scale bits bad */
    qkv_ggml_type qt;
    uint16_t bad;
    const char *poison;     /* an F32 tensor whose element 3 is poison_value */
    float poison_value;
    qkv_status want;
    const char *msg;
} hostile;

#define U32(k, v) {.key = k, .type = QKV_GGUF_TYPE_U32, .u = v}
#define F32(k, v) {.key = k, .type = QKV_GGUF_TYPE_F32, .f = v}
#define NAN16 0x7e00
#define INF16 0x7c00

static const hostile k_cases[] = {
    {"g2-window0.gguf", "gemma2", U32("gemma2.attention.sliding_window", 0), .want = QKV_ERR_FORMAT,
     .msg = "g2-window0.gguf: gemma2.attention.sliding_window = 0 is out of range [1, 16777216]"},
    {"g3-window0.gguf", "gemma3", U32("gemma3.attention.sliding_window", 0), .want = QKV_ERR_FORMAT,
     .msg = "g3-window0.gguf: gemma3.attention.sliding_window = 0 is out of range [1, 16777216]"},
    {"g3-nowindow.gguf", "gemma3", .drop = "gemma3.attention.sliding_window", .want = QKV_ERR_FORMAT,
     .msg = "g3-nowindow.gguf: missing metadata key gemma3.attention.sliding_window"},
    {"g2-softcap0.gguf", "gemma2", F32("gemma2.attn_logit_softcapping", 0), .want = QKV_ERR_FORMAT,
     .msg = "g2-softcap0.gguf: gemma2.attn_logit_softcapping = 0 is outside (0, 1e+30)"},
    {"g2-softcapneg.gguf", "gemma2", F32("gemma2.attn_logit_softcapping", -50), .want = QKV_ERR_FORMAT,
     .msg = "g2-softcapneg.gguf: gemma2.attn_logit_softcapping = -50 is outside (0, 1e+30)"},
    {"g2-finalnan.gguf", "gemma2", F32("gemma2.final_logit_softcapping", NAN), .want = QKV_ERR_FORMAT,
     .msg = "g2-finalnan.gguf: gemma2.final_logit_softcapping = nan is outside (0, 1e+30)"},
    {"g3-finalneg.gguf", "gemma3", F32("gemma3.final_logit_softcapping", -1), .want = QKV_ERR_FORMAT,
     .msg = "g3-finalneg.gguf: gemma3.final_logit_softcapping = -1 is outside (0, 1e+30)"},
    {"g2-keylen512.gguf", "gemma2", U32("gemma2.attention.key_length", 512), .want = QKV_ERR_FORMAT,
     .msg = "g2-keylen512.gguf: gemma2.attention.key_length = 512 is out of range [1, 256]"},
    {"q3-keylen-vs-q.gguf", "qwen3", U32("qwen3.attention.key_length", 16), .drop = "qwen3.attention.value_length",
     .want = QKV_ERR_FORMAT,
     .msg = "q3-keylen-vs-q.gguf: tensor blk.0.attn_q.weight has shape [64, 32], expected [32, 32]"},
    {"q3-valuelen.gguf", "qwen3", U32("qwen3.attention.value_length", 16), .want = QKV_ERR_UNSUPPORTED,
     .msg = "q3-valuelen.gguf: qwen3.attention.value_length 16 differs from key_length 32"},
    {"g3-pattern8.gguf", "gemma3", U32("gemma3.attention.sliding_window_pattern", 8), .want = QKV_ERR_FORMAT,
     .msg = "g3-pattern8.gguf: gemma3.attention.sliding_window_pattern 8 names no global layer among 6 layers"},
    {"g3-4layers.gguf", "gemma3", .n_layer = 4, .want = QKV_ERR_FORMAT,
     .msg = "g3-4layers.gguf: gemma3's sliding pattern 6 (there is no gemma3.attention.sliding_window_pattern) "
            "names no global layer among 4 layers"},
    {"g2-pattern1.gguf", "gemma2", U32("gemma2.attention.sliding_window_pattern", 1), .want = QKV_ERR_FORMAT,
     .msg = "g2-pattern1.gguf: gemma2.attention.sliding_window_pattern 1 names no sliding layer for the window of 8"},
    {"g3-pattern0.gguf", "gemma3", U32("gemma3.attention.sliding_window_pattern", 0), .want = QKV_ERR_FORMAT,
     .msg = "g3-pattern0.gguf: gemma3.attention.sliding_window_pattern = 0 is out of range [1, 4096]"},
    {"g3-q5_0-nan.gguf", "gemma3", .quant = "blk.2.attn_q.weight", .qt = QKV_GGML_TYPE_Q5_0, .bad = NAN16,
     .want = QKV_ERR_FORMAT, .msg = "g3-q5_0-nan.gguf: blk.2.attn_q.weight[32] = nan is not finite"},
    {"q3-q5_1-inf.gguf", "qwen3", .quant = "blk.0.attn_k.weight", .qt = QKV_GGML_TYPE_Q5_1, .bad = INF16,
     .want = QKV_ERR_FORMAT, .msg = "q3-q5_1-inf.gguf: blk.0.attn_k.weight[32] = "},
    {"q2-q8_0-nan.gguf", "qwen2", .quant = "blk.1.attn_output.weight", .qt = QKV_GGML_TYPE_Q8_0, .bad = NAN16,
     .want = QKV_ERR_FORMAT, .msg = "q2-q8_0-nan.gguf: blk.1.attn_output.weight[32] = nan is not finite"},
    {"g2-q4_k-nan.gguf", "gemma2", .quant = "blk.1.ffn_down.weight", .qt = QKV_GGML_TYPE_Q4_K, .bad = NAN16,
     .want = QKV_ERR_FORMAT, .msg = "g2-q4_k-nan.gguf: blk.1.ffn_down.weight[256] = nan is not finite"},
    {"l-q6_k-inf.gguf", "llama", .quant = "blk.0.ffn_down.weight", .qt = QKV_GGML_TYPE_Q6_K, .bad = INF16,
     .want = QKV_ERR_FORMAT, .msg = "l-q6_k-inf.gguf: blk.0.ffn_down.weight[256] = "},
    {"q3-no-knorm.gguf", "qwen3", .drop = "blk.1.attn_k_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "q3-no-knorm.gguf: missing tensor blk.1.attn_k_norm.weight"},
    {"g3-no-knorm.gguf", "gemma3", .drop = "blk.0.attn_k_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "g3-no-knorm.gguf: missing tensor blk.0.attn_k_norm.weight"},
    {"q3-knorm-nan.gguf", "qwen3", .poison = "blk.0.attn_k_norm.weight", .poison_value = NAN, .want = QKV_ERR_FORMAT,
     .msg = "q3-knorm-nan.gguf: blk.0.attn_k_norm.weight[3] = nan is not finite"},
    {"q2-no-vbias.gguf", "qwen2", .drop = "blk.0.attn_v.bias", .want = QKV_ERR_FORMAT,
     .msg = "q2-no-vbias.gguf: missing tensor blk.0.attn_v.bias"},
    {"q2-qbias-inf.gguf", "qwen2", .poison = "blk.1.attn_q.bias", .poison_value = INFINITY, .want = QKV_ERR_FORMAT,
     .msg = "q2-qbias-inf.gguf: blk.1.attn_q.bias[3] = inf is not finite"},
    {"g2-no-postffw.gguf", "gemma2", .drop = "blk.1.post_ffw_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "g2-no-postffw.gguf: missing tensor blk.1.post_ffw_norm.weight"},
    {"g3-no-postattn.gguf", "gemma3", .drop = "blk.3.post_attention_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "g3-no-postattn.gguf: missing tensor blk.3.post_attention_norm.weight"},
    {"g3-swabase-neg.gguf", "gemma3", F32("gemma3.rope.freq_base_swa", -10000), .want = QKV_ERR_FORMAT,
     .msg = "g3-swabase-neg.gguf: gemma3.rope.freq_base_swa = -10000 is outside (1, 1e+30)"},
    {"g3-swabase-nan.gguf", "gemma3", F32("gemma3.rope.freq_base_swa", NAN), .want = QKV_ERR_FORMAT,
     .msg = "g3-swabase-nan.gguf: gemma3.rope.freq_base_swa = nan is outside (1, 1e+30)"},
    {"g2-scale-nan.gguf", "gemma2", F32("gemma2.attention.scale", NAN), .want = QKV_ERR_FORMAT,
     .msg = "g2-scale-nan.gguf: gemma2.attention.scale = nan is outside (0, 1e+30)"},
    {"o2-no-qnorm.gguf", "olmo2", .drop = "blk.1.attn_q_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "o2-no-qnorm.gguf: missing tensor blk.1.attn_q_norm.weight"},
    /* a per-head attn_q_norm (qwen3's [D]) where OLMo 2's covers the whole projection */
    {"o2-qnorm-head.gguf", "olmo2", .resize = "blk.0.attn_q_norm.weight", .resize_d0 = 16, .want = QKV_ERR_FORMAT,
     .msg = "o2-qnorm-head.gguf: tensor blk.0.attn_q_norm.weight has 16 elements, expected 32"},
    {"o2-no-postffw.gguf", "olmo2", .drop = "blk.0.post_ffw_norm.weight", .want = QKV_ERR_FORMAT,
     .msg = "o2-no-postffw.gguf: missing tensor blk.0.post_ffw_norm.weight"},
    {"o2-window.gguf", "olmo2", U32("olmo2.attention.sliding_window", 4096), .want = QKV_ERR_UNSUPPORTED,
     .msg = "o2-window.gguf: olmo2.attention.sliding_window (sliding layers, as OLMo 3 has) is not supported in "
            "olmo2"},
    {"p3-rotdim18.gguf", "phi3", U32("phi3.rope.dimension_count", 18), .want = QKV_ERR_FORMAT,
     .msg = "p3-rotdim18.gguf: phi3.rope.dimension_count 18 must be even and at most head_dim 16"},
    {"p3-rotdim7.gguf", "phi3", U32("phi3.rope.dimension_count", 7), .want = QKV_ERR_FORMAT,
     .msg = "p3-rotdim7.gguf: phi3.rope.dimension_count 7 must be even and at most head_dim 16"},
    {"p3-no-qkv.gguf", "phi3", .drop = "blk.1.attn_qkv.weight", .want = QKV_ERR_FORMAT,
     .msg = "p3-no-qkv.gguf: missing tensor blk.1.attn_qkv.weight"},
    {"p3-no-short.gguf", "phi3", .drop = "rope_factors_short.weight", .want = QKV_ERR_FORMAT,
     .msg = "p3-no-short.gguf: missing tensor rope_factors_short.weight (LongRoPE needs both tables)"},
    {"p3-short-nan.gguf", "phi3", .poison = "rope_factors_short.weight", .poison_value = NAN, .want = QKV_ERR_FORMAT,
     .msg = "p3-short-nan.gguf: rope_factors_short.weight[3] = nan is not finite"},
    {"p3-attnfactor0.gguf", "phi3", F32("phi3.rope.scaling.attn_factor", 0), .want = QKV_ERR_FORMAT,
     .msg = "p3-attnfactor0.gguf: phi3.rope.scaling.attn_factor = 0 is outside (0, 1e+30)"},
    {"falcon.gguf", "falcon", .want = QKV_ERR_UNSUPPORTED,
     .msg = "falcon.gguf: general.architecture 'falcon' is not supported (llama, qwen2, qwen3, gemma2, gemma3, smollm3, "
            "olmo2, phi3)"},
};

/* Files in the test's directory. */
static int count_files(void) {
    DIR *d = opendir(test_tmpdir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void put_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(model_hostile_families_refused) {
    char old_npy[700], old_logits[700];
    snprintf(old_npy, sizeof old_npy, "%s/old.npy", test_tmpdir());
    snprintf(old_logits, sizeof old_logits, "%s/old-logits.npy", test_tmpdir());
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const hostile *h = &k_cases[i];
        gguf_tiny_spec s = family(h->arch);
        if (h->n_layer) s.n_layer = h->n_layer;
        if (h->kv.key) s.kv = &h->kv, s.n_kv = 1;
        s.drop = h->drop;
        s.resize = h->resize, s.resize_d0 = h->resize_d0;
        if (h->quant) {
            s.n_ff = 256; /* ffn_down's rows hold one K-quant super-block */
            s.quant = h->quant, s.quant_type = h->qt, s.bad_block = 1, s.bad_scale = h->bad;
        }
        s.poison = h->poison, s.poison_at = 3, s.poison_value = h->poison_value;
        const char *path = write_model(h->file, &s);
        qkv_model *m = (qkv_model *)1;
        qkv_error err = {0};
        qkv_status st = qkv_model_open(&m, path, NULL, &err);
        CHECK(st == h->want && m == NULL, "%s: status %d, want %d (%s)", h->file, (int)st, (int)h->want, err.msg);
        CHECK(strstr(err.msg, h->msg) != NULL && !strchr(err.msg, '\n'), "%s: message '%s' lacks '%s'", h->file,
              err.msg, h->msg);
        /* the commands: one line, exit 2, the outputs there before untouched, none added */
        put_file(old_npy, "previous maps");
        put_file(old_logits, "previous logits");
        const int files = count_files();
        CHECK_BAD_CLI(((const char *const[]){"run", "-m", path, "-p", "hi", "-n", "1", "--logits", old_logits, NULL}),
                      h->msg);
        CHECK_BAD_CLI(((const char *const[]){"inspect", "-m", path, "-p", "hi", "--npy", old_npy, NULL}), h->msg);
        CHECK_BAD_CLI(((const char *const[]){"sinks", "-m", path, "-p", "hi", "--skip", "0", "--json", NULL}), h->msg);
        char *a = test_read_file(old_npy, NULL), *b = test_read_file(old_logits, NULL);
        CHECK(a && !strcmp(a, "previous maps") && b && !strcmp(b, "previous logits"),
              "%s: an existing output was changed", h->file);
        free(a);
        free(b);
        CHECK(count_files() == files, "%s: %d files after the commands, %d before", h->file, count_files(), files);
    }
}

/* phi3's LongRoPE tables must be [n_rot/2]: a long table of 5 (n_rot 8 wants
 * 4) is refused naming it, at a context that takes the short table too. */
TEST(model_hostile_phi3_longrope_table_length) {
    gguf_tiny_spec s = family("phi3");
    s.rope_factors_len = 5;
    const char *path = write_model("p3-long5.gguf", &s);
    const int ctxs[2] = {64, 128}; /* short factors, long factors */
    for (int i = 0; i < 2; i++) {
        qkv_model *m = (qkv_model *)1;
        qkv_error err = {0};
        const qkv_model_params p = {.n_ctx = ctxs[i]};
        qkv_status st = qkv_model_open(&m, path, &p, &err);
        CHECK(st == QKV_ERR_FORMAT && !m, "n_ctx %d: status %d (%s)", ctxs[i], (int)st, err.msg);
        CHECK(strstr(err.msg, "p3-long5.gguf: tensor rope_factors_long.weight has 5 elements, expected 4"),
              "n_ctx %d: message '%s'", ctxs[i], err.msg);
    }
    CHECK_BAD_CLI(((const char *const[]){"run", "-m", path, "-p", "hi", "-n", "1", NULL}),
                  "tensor rope_factors_long.weight has 5 elements, expected 4");
}
