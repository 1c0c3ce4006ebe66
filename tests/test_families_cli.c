/*
 * test_families_cli.c — every model command on every family: the committed
 * tiny models (tests/fixtures/families/: qwen2, qwen3, gemma2, gemma3,
 * smollm3, olmo2, mistral as llama, phi3 and phi3_long) and the real Gemma 3 270M,
 * small sizes so each run takes well under a second (Gemma 3: a few
 * commands, a few seconds in all). phi3_long's original context (8) is below
 * every context opened here (stream's evicting cache: 9 rows), so every
 * path takes its long LongRoPE factors and stream's two caches agree.
 *
 * Per model: tokenize (BOS where the family's tokenizer asks for one), run
 * (greedy ids in the vocabulary, every prompt position's logits), inspect
 * (JSON, HTML, PNG and the .npy maps: each row a distribution over keys at or
 * before it, and on a sliding layer none beyond its own window), sinks (each
 * layer's own window reported), ablate over positions and over heads, stream
 * (every policy; the mask and the eviction give the same NLLs, sliding layers
 * included) and needle on a base model (--no-chat: no chat template needed).
 * Every JSON is checked whole (json_check.h: valid UTF-8, every number
 * finite) and its arrays have the model's shapes.
 *
 * Also: Gemma's chat template (as llama.cpp's llm_chat_apply_template
 * writes it), and JSON strings that stay UTF-8 when a reply ends inside a
 * character.
 */
#include "gguf_build.h"
#include "json_check.h"
#include "testing.h"

#include "qkv_render.h"

#include <math.h>

#define PROMPT "The cat sat on the mat. The dog ran to the park."

typedef struct {
    const char *path;
    qkv_model_config cfg;
    int window[64];   /* [n_layer] each layer's own window (0: global) */
    int bos;          /* the tokenizer's BOS, added to a prompt; -1: none */
} model_info;

static int model_load_info(model_info *mi, const char *path) {
    memset(mi, 0, sizeof *mi);
    mi->path = path;
    qkv_gguf *g = NULL;
    qkv_tokenizer *t = NULL;
    qkv_error err = {0};
    int ok = qkv_gguf_open(&g, path, &err) == QKV_OK && qkv_model_config_read(&mi->cfg, g, &err) == QKV_OK &&
             qkv_tokenizer_load(&t, g, &err) == QKV_OK && mi->cfg.n_layer <= 64;
    CHECK(ok, "%s: %s", path, err.msg);
    if (ok) {
        for (int l = 0; l < mi->cfg.n_layer; l++) {
            qkv_layer_attn a;
            qkv_model_layer_attn(&a, &mi->cfg, l);
            mi->window[l] = a.window;
        }
        mi->bos = qkv_tokenizer_add_bos(t) ? qkv_tokenizer_bos(t) : -1;
    }
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
    return ok;
}

/* Runs argv: exit 0 and, for json, one valid JSON document on stdout (the caller frees). */
static char *run_ok(const char *const *argv, int json) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "%s %s: exit %d: %s", argv[0], argv[2], rc, err ? err : "");
    if (rc == 0 && json) CHECK(json_valid(out), "%s %s: stdout is not valid JSON: %.300s", argv[0], argv[2], out);
    free(err);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

static const char *tmp(const char *name) {
    static char p[4][600];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(p[slot], sizeof p[slot], "%s/%s", test_tmpdir(), name);
    return p[slot];
}

/* tokenize --json: n ids and as many pieces, the BOS first where there is one. Returns n. */
static int check_tokenize(const model_info *mi) {
    char *o = run_ok((const char *const[]){"tokenize", "-m", mi->path, "-p", PROMPT, "--json", NULL}, 1);
    if (!o) return 0;
    const char *ids = json_get(o, "ids");
    const int n = json_len(ids);
    CHECK(n > 10 && json_len(json_get(o, "pieces")) == n && json_num(json_get(o, "n_tokens")) == n,
          "%s: tokenize: %d ids: %.200s", mi->path, n, o);
    for (int i = 0; i < n; i++) {
        const double id = json_num(json_at(ids, i));
        CHECK(id >= 0 && id < mi->cfg.n_vocab, "%s: id %g", mi->path, id);
    }
    if (mi->bos >= 0) CHECK(json_num(json_at(ids, 0)) == mi->bos, "%s: the first id is not BOS %d", mi->path, mi->bos);
    free(o);
    return n;
}

/* run: 4 greedy ids in the vocabulary, logits [n, V] all finite. */
static void check_run(const model_info *mi, int n) {
    const char *lg = tmp("logits.npy");
    char *o = run_ok((const char *const[]){"run", "-m", mi->path, "-p", PROMPT, "-n", "4", "--ctx", "256", "--print-ids",
                                           "--logits", lg, NULL}, 0);
    if (!o) return;
    int k = 0;
    char *p = o, *e;
    for (long id = strtol(p, &e, 10); e != p; id = strtol(p = e, &e, 10), k++)
        CHECK(id >= 0 && id < mi->cfg.n_vocab, "%s: run id %ld", mi->path, id);
    CHECK(k == 4, "%s: run printed %d ids: %s", mi->path, k, o);
    free(o);
    qkv_npy a = {0};
    qkv_error err = {0};
    CHECK(qkv_npy_load(&a, lg, &err) == QKV_OK && a.ndim == 2 && a.shape[0] == n && a.shape[1] == mi->cfg.n_vocab,
          "%s: --logits [%lld, %lld], want [%d, %d] %s", mi->path, (long long)a.shape[0], (long long)a.shape[1], n,
          mi->cfg.n_vocab, err.msg);
    int finite = 1;
    for (int64_t i = 0; i < a.count && a.type == QKV_NPY_F32; i++) finite &= isfinite(((float *)a.data)[i]);
    CHECK(finite, "%s: a logit is not finite", mi->path);
    qkv_npy_free(&a);
}

/* inspect: every map row sums to 1 over keys at or before it, none beyond a sliding layer's window. */
static void check_inspect(const model_info *mi, int n) {
    const char *npy = tmp("maps.npy"), *png = tmp("maps.png"), *html = tmp("maps.html");
    char *o = run_ok((const char *const[]){"inspect", "-m", mi->path, "-p", PROMPT, "--json", "--npy", npy, "--png",
                                           png, "--html", html, NULL}, 1);
    if (!o) return;
    const int L = mi->cfg.n_layer, H = mi->cfg.n_head;
    CHECK(json_num(json_get(o, "n_tokens")) == n && json_len(json_get(o, "tokens")) == n &&
              json_len(json_get(o, "maps")) == L * H,
          "%s: inspect JSON: %.200s", mi->path, o);
    free(o);
    qkv_npy a = {0};
    qkv_error err = {0};
    CHECK(qkv_npy_load(&a, npy, &err) == QKV_OK && a.ndim == 4 && a.shape[0] == L && a.shape[1] == H &&
              a.shape[2] == n && a.shape[3] == n,
          "%s: --npy shape: %s", mi->path, err.msg);
    for (int l = 0; l < L && !test_failures(); l++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const float *row = (const float *)a.data + (((size_t)l * H + h) * n + i) * n;
                double sum = 0, outside = 0;
                for (int j = 0; j < n; j++) {
                    const int seen = j <= i && (!mi->window[l] || i - j < mi->window[l]);
                    sum += row[j];
                    if (!seen) outside += fabs(row[j]);
                }
                CHECK(fabs(sum - 1) < 1e-3 && outside == 0, "%s: layer %d (window %d) head %d row %d: sum %g, %g beyond",
                      mi->path, l, mi->window[l], h, i, sum, outside);
            }
    qkv_npy_free(&a);
    char *p = test_read_file(png, NULL), *t = test_read_file(html, NULL); /* the PNG read up to its first NUL */
    CHECK(p && !strncmp(p, "\x89PNG\r\n\x1a\n", 8), "%s: --png is not a PNG", mi->path);
    CHECK(t && strstr(t, "<html") && strstr(t, "</html>"), "%s: --html is not a page", mi->path);
    free(p);
    free(t);
}

/* sinks --json: each layer with its own window. */
static void check_sinks(const model_info *mi) {
    char *o = run_ok((const char *const[]){"sinks", "-m", mi->path, "-p", PROMPT, "--skip", "0", "--json", NULL}, 1);
    if (!o) return;
    const char *layers = json_get(o, "layers");
    CHECK(json_len(layers) == mi->cfg.n_layer, "%s: sinks: %d layers", mi->path, json_len(layers));
    for (int l = 0; l < json_len(layers); l++) {
        const char *ly = json_at(layers, l);
        CHECK(json_num(json_get(ly, "window")) == mi->window[l] && json_len(json_get(ly, "heads")) == mi->cfg.n_head,
              "%s: sinks layer %d: window %g, want %d", mi->path, l, json_num(json_get(ly, "window")), mi->window[l]);
    }
    free(o);
}

/* ablate over positions (n of them, KL >= 0) and over heads ([L][H]). */
static void check_ablate(const model_info *mi, int n) {
    char *o = run_ok((const char *const[]){"ablate", "-m", mi->path, "-p", PROMPT, "--json", NULL}, 1);
    if (o) {
        const char *pos = json_get(o, "positions");
        CHECK(json_len(pos) == n, "%s: ablate: %d positions, want %d", mi->path, json_len(pos), n);
        for (int i = 0; i < json_len(pos); i++)
            CHECK(json_num(json_get(json_at(pos, i), "kl")) >= 0, "%s: ablate position %d: kl", mi->path, i);
    }
    free(o);
    o = run_ok((const char *const[]){"ablate", "-m", mi->path, "-p", PROMPT, "--heads", "--json", NULL}, 1);
    if (o) {
        const char *kl = json_get(o, "kl");
        CHECK(json_len(kl) == mi->cfg.n_layer && json_len(json_at(kl, 0)) == mi->cfg.n_head,
              "%s: ablate --heads: kl [%d][%d]", mi->path, json_len(kl), json_len(json_at(kl, 0)));
    }
    free(o);
}

/* stream: the six policies, then the same with --via-mask: the same NLLs. */
static void check_stream(const model_info *mi, const char *text, const char *window, const char *chunk,
                         const char *max_tokens) {
    const char *argv[] = {"stream", "-m", mi->path, "-p", text, "--window", window, "--sinks", "2", "--chunk", chunk,
                          "--max-tokens", max_tokens, "--json", NULL, NULL};
    char *a = run_ok(argv, 1);
    argv[14] = "--via-mask";
    char *b = run_ok(argv, 1);
    if (a && b) {
        const char *va = json_get(a, "variants"), *ca = json_get(a, "chunks"), *cb = json_get(b, "chunks");
        CHECK(json_len(va) == 6 && json_len(ca) >= 2, "%s: stream: %d variants, %d chunks", mi->path, json_len(va),
              json_len(ca));
        for (int k = 0; k < json_len(va); k++)
            CHECK(json_num(json_get(json_at(va, k), "ppl")) >= 1, "%s: stream variant %d: ppl", mi->path, k);
        /* the same keys, summed in another order over a cache of another length
         * (~1e-6 relative), printed to 5 decimals: 1e-4 nats apart at most */
        double worst = json_len(ca) == json_len(cb) ? 0 : INFINITY;
        for (int i = 0; i < json_len(ca) && i < json_len(cb); i++)
            for (int k = 0; k < 6; k++) {
                const double d = fabs(json_num(json_at(json_get(json_at(ca, i), "nll"), k)) -
                                      json_num(json_at(json_get(json_at(cb, i), "nll"), k)));
                worst = isnan(d) ? INFINITY : fmax(worst, d);
            }
        CHECK(worst <= 1e-4, "%s: stream NLLs by eviction and by the mask differ by %g:\n%s\n%s", mi->path, worst, ca,
              cb);
    }
    free(a);
    free(b);
}

/* needle on a base model: the chat template is asked for, --no-chat does without. */
static void check_needle(const model_info *mi, const char *length) {
    const char *argv[] = {"needle", "-m", mi->path, "--lengths", length, "--depths", "0,100", "--needle", "Key is 42.",
                          "--question", "Key?", "--answer", "42", "--max-answer", "3", "--json", "--no-chat", NULL};
    char *o = run_ok(argv, 1);
    if (o) {
        const char *cells = json_get(o, "cells");
        CHECK(json_len(cells) == 2 && !strncmp(json_get(o, "chat"), "false", 5), "%s: needle: %.200s", mi->path, o);
        for (int i = 0; i < json_len(cells); i++) {
            const char *c = json_at(cells, i);
            CHECK(json_len(json_get(c, "needle_mass_by_layer")) == mi->cfg.n_layer &&
                      json_num(json_get(c, "tokens")) <= atoi(length) && json_num(json_get(c, "needle_pos")) >= 0,
                  "%s: needle cell %d: %.300s", mi->path, i, c);
        }
    }
    free(o);
    argv[16] = NULL;
    CHECK_BAD_CLI(argv, "has no tokenizer.chat_template (a base model?): --no-chat");
    CHECK_BAD_CLI(((const char *const[]){"needle", "-m", mi->path, "--no-chat", "--system", "Be brief.", NULL}),
                  "--system needs the chat template, not --no-chat");
}

/* patch, attribute and lens --json on five ids every vocabulary has, the
 * clean and corrupted prompts differing at position 2: the arrays have the
 * model's shapes; resid_pre patched at layer 0, position 2 makes the corrupted
 * run the clean one (recovery 1) and where the runs agree it is 0; the
 * attribution's parts add up to the logit difference (its own identity, to
 * float rounding of a sum over L + 1 parts). */
static void check_probes(const model_info *mi) {
    const int L = mi->cfg.n_layer;
    char *o = run_ok((const char *const[]){"patch", "-m", mi->path, "--clean-tokens", "3,5,7,9,11", "--corrupt-tokens",
                                           "3,5,8,9,11", "--json", NULL},
                     1);
    if (o) {
        const char *rp = json_get(o, "resid_pre");
        CHECK(json_len(rp) == L && json_len(json_at(rp, 0)) == 5 && json_len(json_get(o, "head_out")) == L &&
                  json_len(json_get(o, "attn_out")) == L && json_len(json_get(o, "mlp_out")) == L,
              "%s: patch shapes: %.300s", mi->path, o);
        if (json_len(rp) == L) {
            const double at2 = json_num(json_at(json_at(rp, 0), 2)), at0 = json_num(json_at(json_at(rp, 0), 0));
            CHECK(fabs(at2 - 1) < 1e-6 && at0 == 0, "%s: patch resid_pre[0]: position 2 %g, position 0 %g", mi->path,
                  at2, at0);
        }
        free(o);
    }
    o = run_ok((const char *const[]){"attribute", "-m", mi->path, "--tokens", "3,5,7,9,11", "--json", NULL}, 1);
    if (o) {
        const double total = json_num(json_get(o, "total")), diff = json_num(json_get(o, "logit_diff"));
        CHECK(json_len(json_get(o, "attn")) == L && json_len(json_get(o, "mlp")) == L &&
                  fabs(total - diff) <= 1e-4 * (1 + fabs(diff)),
              "%s: attribute: total %g, logit_diff %g: %.200s", mi->path, total, diff, o);
        free(o);
    }
    o = run_ok((const char *const[]){"lens", "-m", mi->path, "--tokens", "3,5,7,9,11", "-k", "3", "--json", NULL}, 1);
    if (o) {
        const char *ids = json_get(o, "top_ids");
        CHECK(json_len(ids) == L && json_len(json_at(ids, 0)) == 5 && json_len(json_at(json_at(ids, 0), 0)) == 3 &&
                  json_len(json_get(o, "target_prob")) == L,
              "%s: lens shapes: %.200s", mi->path, o);
        free(o);
    }
}

static void check_family(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/families/%s/model.gguf", test_fixture_dir(), name);
    model_info mi;
    if (!model_load_info(&mi, path)) return;
    const int n = check_tokenize(&mi);
    if (!n) return;
    check_run(&mi, n);
    check_inspect(&mi, n);
    check_sinks(&mi);
    check_ablate(&mi, n);
    check_stream(&mi, PROMPT " " PROMPT, "6", "4", "96"); /* sinks + window within gemma2's 8, gemma3's 12 */
    check_needle(&mi, "96");
    check_probes(&mi);
}

TEST(families_cli_qwen2) { check_family("qwen2"); }
TEST(families_cli_qwen3) { check_family("qwen3"); }
TEST(families_cli_gemma2) { check_family("gemma2"); }
TEST(families_cli_gemma3) { check_family("gemma3"); }
TEST(families_cli_mistral) { check_family("mistral"); }
TEST(families_cli_smollm3) { check_family("smollm3"); }
TEST(families_cli_olmo2) { check_family("olmo2"); }
TEST(families_cli_phi3) { check_family("phi3"); }
TEST(families_cli_phi3_long) { check_family("phi3_long"); }

/* The real Gemma 3 270M (18 layers, 15 of them sliding over 512 keys): the
 * commands that cost one forward pass or a few, on short text. */
TEST(families_cli_real_gemma3_270m) {
    if (!test_require_gemma3()) return;
    model_info mi;
    if (!model_load_info(&mi, test_gemma3_path())) return;
    CHECK(mi.cfg.n_layer == 18 && mi.window[0] == 512 && mi.window[5] == 0 && mi.bos == 2, "Gemma 3 270M's config");
    const int n = check_tokenize(&mi);
    if (!n) return;
    check_run(&mi, n);
    check_sinks(&mi);
    char *o = run_ok((const char *const[]){"inspect", "-m", mi.path, "-p", PROMPT, "--layers", "4,5", "--json", NULL}, 1);
    CHECK(o && json_len(json_get(o, "maps")) == 2 * mi.cfg.n_head, "inspect --layers 4,5: %.200s", o);
    free(o);
    o = run_ok((const char *const[]){"ablate", "-m", mi.path, "-p", "The cat sat on the mat.", "--layer", "5", "--json",
                                     NULL}, 1);
    CHECK(o && json_len(json_get(o, "positions")) > 5, "ablate --layer 5: %.200s", o);
    free(o);
    /* a stream window inside the sliding layers' 512: the mask and the eviction agree on every layer */
    check_stream(&mi, PROMPT, "6", "4", "12");
    check_needle(&mi, "80");
}

/* Gemma's template, recognised by <start_of_turn>: a system text opens the
 * user turn (llama.cpp's tests/test-chat-template.cpp, google/gemma-7b-it:
 * "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"),
 * the tokenizer adds the one BOS. */
TEST(families_cli_gemma_chat_template) {
    static const char tmpl[] =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + "
        "'\\n\\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = \"\" %}{% set "
        "loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if message['role'] == 'assistant' "
        "%}{% set role = \"model\" %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role "
        "+ '\\n' + (first_user_prefix if loop.first else \"\") }}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' "
        "}}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";
    const gguf_kv kv = {.key = "tokenizer.chat_template", .type = QKV_GGUF_TYPE_STRING, .s = tmpl};
    const gguf_tiny_spec s = {.arch = "gemma3", .n_layer = 6, .n_embd = 32, .n_head = 2, .n_kv_head = 1,
                              .head_dim = 16, .n_ff = 64, .byte_vocab = 1, .kv = &kv, .n_kv = 1, .bad_block = -1};
    const char *path = tmp("gemma-chat.gguf");
    gguf_buf b = {0};
    gguf_put_tiny_model(&b, &s);
    CHECK(gguf_buf_save(&b, path), "cannot write %s", path);
    free(b.p);
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    char *chat = NULL, *plain = NULL;
    CHECK(qkv_gguf_open(&g, path, &err) == QKV_OK, "%s", err.msg);
    CHECK(qkv_chat_format(&chat, g, "You are a helpful assistant", "Hello", &err) == QKV_OK &&
              !strcmp(chat, "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                            "<start_of_turn>model\n"),
          "with a system text: %s %s", chat ? chat : "", err.msg);
    CHECK(qkv_chat_format(&plain, g, NULL, "Hello", &err) == QKV_OK &&
              !strcmp(plain, "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"),
          "without: %s %s", plain ? plain : "", err.msg);
    free(chat);
    free(plain);
    qkv_gguf_close(g);
    /* the commands take it: one BOS, then the turn's bytes (this vocabulary has no <start_of_turn>) */
    char *o = run_ok((const char *const[]){"tokenize", "-m", path, "-p", "Hello", "--chat", "--json", NULL}, 1);
    const char *ids = o ? json_get(o, "ids") : NULL;
    int bos = 0;
    for (int i = 0; i < json_len(ids); i++) bos += json_num(json_at(ids, i)) == 1;
    CHECK(ids && json_num(json_at(ids, 0)) == 1 && bos == 1 &&
              json_len(ids) > (int)strlen("<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"),
          "tokenize --chat: %.300s", o);
    free(o);
    o = run_ok((const char *const[]){"run", "-m", path, "-p", "Hello", "--chat", "-n", "2", "--print-ids", NULL}, 0);
    free(o);
}

/* qkv_json_string: a reply cut inside a character still makes valid JSON. */
TEST(families_cli_json_strings_stay_utf8) {
    static const struct { const char *in, *out; } cases[] = {
        {"ok", "\"ok\""},
        {"\xE5\xB9\xB4", "\"\xE5\xB9\xB4\""},             /* 年 whole */
        {"a\xE5\xB9", "\"a\\ufffd\\ufffd\""},             /* 年 cut after two bytes */
        {"\xFF x \xC0\x80", "\"\\ufffd x \\ufffd\\ufffd\""}, /* never UTF-8; an overlong NUL */
        {"q\"\n\x01", "\"q\\\"\\n\\u0001\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = tmp("s.json");
        FILE *f = fopen(path, "wb");
        if (!f) continue;
        qkv_json_string(f, cases[i].in, 0);
        fclose(f);
        char *got = test_read_file(path, NULL);
        CHECK(got && !strcmp(got, cases[i].out) && json_valid(got), "case %zu: %s, want %s", i, got ? got : "",
              cases[i].out);
        free(got);
    }
}
