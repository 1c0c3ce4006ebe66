/*
 * test_run_cli.c — `qkv run` end to end: generation from ids and text, the
 * chat template, --logits, and bad input (missing model, not a GGUF,
 * truncated file, unsupported architecture or tensor type, prompt longer than
 * the context, bad flags): one line on stderr, exit status 2, no crash.
 */
#include "testing.h"

#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_tiny[600];

static const char *tiny_path(void) {
    snprintf(g_tiny, sizeof g_tiny, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    return g_tiny;
}


/* Writes a copy of src with `bytes` bytes (or, if n_keep >= 0, only the first n_keep). */
static const char *write_variant(const char *name, const char *src, long n_keep, const char *find,
                                 const char *replace, size_t rlen) {
    static char path[8][600];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 600, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    if (find) {
        for (long i = 0; i + (long)strlen(find) <= n; i++)
            if (!memcmp(buf + i, find, strlen(find))) {
                memcpy(buf + i, replace, rlen);
                break;
            }
    }
    f = fopen(p, "wb");
    fwrite(buf, 1, (size_t)(n_keep >= 0 && n_keep < n ? n_keep : n), f);
    fclose(f);
    free(buf);
    return p;
}

TEST(run_cli_generates_from_ids_on_tiny_llama31) {
    const char *argv[] = {"run", "-m", tiny_path(), "--tokens", "509,17,300,41", "-n", "5", "--print-ids", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    int n = 0;
    for (char *p = out; *p; p++) n += (*p >= '0' && *p <= '9') && (p[1] == ' ' || p[1] == '\n');
    CHECK(n == 5, "want 5 ids, got: %s", out);
    CHECK(strstr(err, "tok/s") && strstr(err, "peak RSS"), "stats line: %s", err);
    free(out);
    free(err);
    /* --logits writes [n_prompt, vocab] */
    char lp[600];
    snprintf(lp, sizeof lp, "%s/logits.npy", test_tmpdir());
    const char *argv2[] = {"run", "-m", tiny_path(), "--tokens", "509,17,300", "-n", "0", "--logits", lp, NULL};
    CHECK(test_run_cli(argv2, NULL, NULL, NULL) == 0, "--logits run");
    qkv_npy a;
    CHECK(qkv_npy_load(&a, lp, NULL) == QKV_OK && a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 512,
          "logits.npy shape");
    if (!test_failures()) qkv_npy_free(&a);
}

TEST(run_cli_text_and_chat_on_smollm2) {
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!test_require_model()) return;
    const char *argv[] = {"run", "-m", model, "-p", "The capital of France is", "-n", "4", NULL};
    char *out = NULL, *err = NULL;
    CHECK(test_run_cli(argv, NULL, &out, &err) == 0, "run: %s", err);
    CHECK(strstr(out, "Paris") != NULL, "greedy continuation: '%s'", out);
    free(out);
    free(err);
    const char *chat[] = {"run", "-m", model, "--chat", "-p", "年假怎么申请？", "-n", "8", NULL};
    CHECK(test_run_cli(chat, NULL, &out, &err) == 0, "chat: %s", err);
    CHECK(strstr(err, "prompt 45 tokens") != NULL, "chat prompt is the ChatML form (45 tokens): %s", err);
    free(out);
    free(err);
    const char *longp[] = {"run", "-m", model, "-f", "/usr/share/common-licenses/GPL-3", "--ctx", "64", NULL};
    CHECK_BAD_CLI(longp, "context");
}

TEST(run_cli_rejects_bad_models_and_flags) {
    const char *missing[] = {"run", "-m", "/nonexistent/m.gguf", "-p", "hi", NULL};
    CHECK_BAD_CLI(missing, "/nonexistent/m.gguf");
    char txt[600];
    snprintf(txt, sizeof txt, "%s/not.gguf", test_tmpdir());
    FILE *f = fopen(txt, "w");
    fputs("plain text, not a model\n", f);
    fclose(f);
    const char *notgguf[] = {"run", "-m", txt, "-p", "hi", NULL};
    CHECK_BAD_CLI(notgguf, "not.gguf");
    const char *trunc = write_variant("trunc.gguf", tiny_path(), 100000, NULL, NULL, 0);
    const char *t1[] = {"run", "-m", trunc, "--tokens", "1,2", NULL};
    CHECK_BAD_CLI(t1, "trunc.gguf");
    /* architecture "llama" -> "gpt2x" (same length keeps the file valid) */
    const char *arch = write_variant("arch.gguf", tiny_path(), -1, "llama\x0c\x00\x00\x00\x00\x00\x00\x00",
                                     "gptx2", 5);
    const char *t2[] = {"run", "-m", arch, "--tokens", "1,2", NULL};
    CHECK_BAD_CLI(t2, "not supported");
    /* blk.0.attn_q.weight's type F16 -> IQ4_NL, which qkv does not decode
     * (smaller, so the file stays consistent):
     * tensor info = name, u32 n_dims (2), u64 ne[2], u32 type */
    const char iq4_nl[4] = {20, 0, 0, 0};
    char find[64];
    memcpy(find, "blk.0.attn_q.weight", 20);
    const char *qt = write_variant("qtype.gguf", tiny_path(), -1, NULL, NULL, 0);
    {
        FILE *g = fopen(qt, "r+b");
        char head[65536];
        size_t n = fread(head, 1, sizeof head, g);
        for (size_t i = 0; i + 19 + 24 <= n; i++)
            if (!memcmp(head + i, find, 19) && head[i + 19] == 2) {
                fseek(g, (long)(i + 19 + 4 + 16), SEEK_SET);
                fwrite(iq4_nl, 1, 4, g);
                break;
            }
        fclose(g);
    }
    const char *t3[] = {"run", "-m", qt, "--tokens", "1,2", NULL};
    CHECK_BAD_CLI(t3, "iq4_nl");
    const char *ctx[] = {"run", "-m", tiny_path(), "--tokens", "1,2,3,4,5,6,7,8,9", "--ctx", "4", NULL};
    CHECK_BAD_CLI(ctx, "context");
    const char *badid[] = {"run", "-m", tiny_path(), "--tokens", "1,99999", NULL};
    CHECK_BAD_CLI(badid, "--tokens");
    const char *flag[] = {"run", "-m", tiny_path(), "--tokens", "1", "--temp", "-1", NULL};
    CHECK_BAD_CLI(flag, "--temp");
    const char *two[] = {"run", "-m", tiny_path(), "--tokens", "1", "-p", "x", NULL};
    CHECK_BAD_CLI(two, "exactly one");
    const char *unk[] = {"run", "--frob", NULL};
    CHECK_BAD_CLI(unk, "--frob");
}
