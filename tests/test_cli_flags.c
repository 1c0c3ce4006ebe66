/*
 * test_cli_flags.c — the CLI's one flag table and one prompt loader:
 *   - every command's --help exits 0 and lists only flags its parser knows:
 *     each flag (both spellings) named in the help is fed back to the
 *     command, a value flag alone must fail with "needs a value", a bool
 *     flag followed by an unknown one must fail on the unknown one;
 *   - for every command an unknown flag, a missing value and a number out
 *     of range are one line on stderr, exit 2;
 *   - a Llama-3 chat template gives ONE BOS under --chat in run, tokenize,
 *     inspect and sinks. The model is the tiny Llama-3.1 fixture with a
 *     tokenizer.chat_template key added here, in C: the key is inserted
 *     first in the KV section and padded to a multiple of the GGUF alignment
 *     (32), so every later offset, tensor data included, stays valid, and no
 *     second 2 MB binary is committed.
 */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const commands[] = {"attend", "bench", "cost", "explain", "scaling",
                                       "run", "tokenize", "inspect", "sinks", "ablate", "patch", "attribute", "lens",
                                       "stream", "demo", "serve", NULL};

/* The flags of one help line "  -m, --model FILE   text": names into names[],
 * returns how many; *has_value when a metavar follows them. */
static int help_line_flags(const char *line, char names[][64], int *has_value) {
    if (strncmp(line, "  -", 3)) return 0;
    const char *p = line + 2, *end = strstr(p, "  ");
    size_t len = end ? (size_t)(end - p) : strcspn(p, "\n");
    char left[256];
    snprintf(left, sizeof left, "%.*s", (int)len, p);
    int n = 0;
    *has_value = 0;
    for (char *tok = strtok(left, ", "); tok; tok = strtok(NULL, ", ")) {
        if (tok[0] == '-' && n < 4) snprintf(names[n++], 64, "%s", tok);
        else *has_value = 1;
    }
    return n;
}

TEST(cli_help_lists_only_parsed_flags) {
    for (int c = 0; commands[c]; c++) {
        const char *argv[] = {commands[c], "--help", NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_cli(argv, NULL, &out, &err);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: qkv %s ", commands[c]);
        CHECK(rc == 0 && err && !*err && out && !strncmp(out, usage, strlen(usage)), "%s --help: exit %d, %s", commands[c],
              rc, err ? err : "");
        int n_flags = 0;
        for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
            char names[4][64];
            int has_value, n = help_line_flags(line, names, &has_value);
            for (int i = 0; i < n; i++) {
                if (!strcmp(names[i], "--help") || !strcmp(names[i], "-h")) continue;
                n_flags++;
                if (has_value) {
                    const char *bad[] = {commands[c], names[i], NULL};
                    CHECK_BAD_CLI(bad, "needs a value");
                } else {
                    const char *bad[] = {commands[c], names[i], "--no-such-flag", NULL};
                    CHECK_BAD_CLI(bad, "unknown flag '--no-such-flag'");
                }
            }
        }
        CHECK(n_flags >= 2, "%s --help lists %d flags", commands[c], n_flags);
        free(out);
        free(err);
    }
}

static char g_tiny[600];

static const char *tiny_path(void) {
    snprintf(g_tiny, sizeof g_tiny, "%s/model/tiny31/tiny-llama31.gguf", test_fixture_dir());
    return g_tiny;
}

TEST(cli_every_command_rejects_bad_flags) {
    /* per command: a value flag and a number outside its range (NULL: none) */
    static const struct {
        const char *cmd, *flag, *bad;
    } cases[] = {
        {"attend", "--window", "0"}, {"bench", "--n", "0"},         {"cost", "--layers", "0"},
        {"explain", "--trials", "0"}, {"scaling", "--positions", "1"}, {"run", "--top-p", "2"},
        {"tokenize", "--tokens", "1,99999"}, {"inspect", "--first", "0"}, {"sinks", "--skip", "-1"},
        {"ablate", "--head", "-2"}, {"patch", "--max-mib", "0"}, {"attribute", "--top", "0"}, {"lens", "-k", "101"},
        {"stream", "--window", "0"}, {"demo", "--n", "5000"}, {"serve", "--port", "65536"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *unknown[] = {cases[i].cmd, "--frobnicate", NULL};
        CHECK_BAD_CLI(unknown, "unknown flag '--frobnicate'");
        const char *missing[] = {cases[i].cmd, cases[i].flag, NULL};
        CHECK_BAD_CLI(missing, "needs a value");
        if (!cases[i].bad) continue;
        /* parsing stops at the bad value; tokenize's ids are checked against the model's vocabulary */
        const char *range[] = {cases[i].cmd, cases[i].flag, cases[i].bad, "-m", tiny_path(), NULL};
        CHECK_BAD_CLI(range, "out of range");
    }
    const char *choice[] = {"attend", "--kernel", "fast", NULL};
    CHECK_BAD_CLI(choice, "is not auto, ref, flash, decode or flash-bf16");
    const char *list[] = {"bench", "--sweep", "prefill,nope", NULL};
    CHECK_BAD_CLI(list, "--sweep: 'nope' is not");
}

/* The tiny Llama-3.1 model with tokenizer.chat_template = the Llama-3 template,
 * written to the test's directory. */
static const char *tiny_llama3_chat(void) {
    static char path[700];
    static const char tmpl[] =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
    static const char key[] = "tokenizer.chat_template";
    FILE *in = fopen(tiny_path(), "rb"); /* binary: test_read_file stops at a NUL */
    if (!in || fseek(in, 0, SEEK_END)) return NULL;
    const size_t n = (size_t)ftell(in);
    char *src = malloc(n);
    rewind(in);
    const int read_ok = src && n >= 24 && fread(src, 1, n, in) == n;
    fclose(in);
    if (!read_ok) {
        free(src);
        return NULL;
    }
    /* key: u64 length, bytes; type u32 8 (string); value: u64 length, bytes */
    size_t klen = sizeof key - 1, vlen = sizeof tmpl - 1, head = 8 + klen + 4 + 8;
    while ((head + vlen) % 32) vlen++;
    char *value = malloc(vlen);
    memset(value, ' ', vlen);
    memcpy(value, tmpl, sizeof tmpl - 1);
    snprintf(path, sizeof path, "%s/tiny-llama3-chat.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    uint64_t n_kv, kl = klen, vl = vlen;
    uint32_t type = 8;
    memcpy(&n_kv, src + 16, 8);
    n_kv++;
    int ok = f && fwrite(src, 1, 16, f) == 16 && fwrite(&n_kv, 8, 1, f) == 1 && fwrite(&kl, 8, 1, f) == 1 &&
             fwrite(key, 1, klen, f) == klen && fwrite(&type, 4, 1, f) == 1 && fwrite(&vl, 8, 1, f) == 1 &&
             fwrite(value, 1, vlen, f) == vlen && fwrite(src + 24, 1, n - 24, f) == n - 24;
    if (f && fclose(f)) ok = 0;
    free(value);
    free(src);
    return ok ? path : NULL;
}

/* How many times id occurs in the JSON array that starts at the first `from` in s. */
static int count_id(const char *s, const char *from, int id) {
    const char *p = s ? strstr(s, from) : NULL;
    int n = 0;
    for (const char *end = p ? strchr(p, ']') : NULL; p && p < end; p++)
        if ((p[-1] == '[' || p[-1] == ' ') && atoi(p) == id && p[0] >= '0' && p[0] <= '9') n++;
    return n;
}

TEST(cli_one_bos_under_llama3_chat) {
    const char *m = tiny_llama3_chat();
    CHECK(m != NULL, "could not write the Llama-3 chat fixture");
    if (!m) return;
    char *out = NULL, *err = NULL;
    /* tokenize: one <|begin_of_text|> (509), first */
    const char *tok[] = {"tokenize", "-m", m, "--chat", "-p", "hello", "--json", NULL};
    int rc = test_run_cli(tok, NULL, &out, &err);
    CHECK(rc == 0, "tokenize --chat: exit %d: %s", rc, err);
    CHECK(out && strstr(out, "\"ids\": [509, ") && count_id(out, "\"ids\": [", 509) == 1, "tokenize --chat ids: %s", out);
    const char *nt = out ? strstr(out, "\"n_tokens\": ") : NULL;
    const int n = nt ? atoi(nt + 12) : -1;
    CHECK(n > 10, "tokenize --chat: %d tokens", n);
    free(out);
    free(err);
    /* run: the same prompt length */
    const char *run[] = {"run", "-m", m, "--chat", "-p", "hello", "-n", "0", NULL};
    rc = test_run_cli(run, NULL, &out, &err);
    char want[64];
    snprintf(want, sizeof want, "prompt %d tokens", n);
    CHECK(rc == 0 && err && strstr(err, want), "run --chat (want %s): exit %d: %s", want, rc, err);
    free(out);
    free(err);
    /* inspect: the tokens it lists, one BOS */
    const char *insp[] = {"inspect", "-m", m, "--chat", "-p", "hello", "--json", "--layers", "0", "--heads", "0", NULL};
    rc = test_run_cli(insp, NULL, &out, &err);
    snprintf(want, sizeof want, "\"n_tokens\": %d,", n);
    CHECK(rc == 0 && out && strstr(out, want), "inspect --chat (want %s): exit %d: %s", want, rc, err);
    int bos = 0;
    for (const char *p = out; p && (p = strstr(p, "{\"id\": 509,")); p++) bos++;
    CHECK(bos == 1, "inspect --chat: %d BOS tokens", bos);
    free(out);
    free(err);
    /* sinks: the same length */
    const char *sinks[] = {"sinks", "-m", m, "--chat", "-p", "hello", "--json", "--skip", "0", NULL};
    rc = test_run_cli(sinks, NULL, &out, &err);
    CHECK(rc == 0 && out && strstr(out, want), "sinks --chat (want %s): exit %d: %s", want, rc, err);
    free(out);
    free(err);
    /* without --chat the GGUF's add_bos_token (true) adds one */
    const char *plain[] = {"tokenize", "-m", m, "-p", "hello", "--json", NULL};
    rc = test_run_cli(plain, NULL, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "\"ids\": [509, ") && count_id(out, "\"ids\": [", 509) == 1, "tokenize: %s", out);
    free(out);
    free(err);
}
