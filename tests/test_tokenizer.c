/*
 * test_tokenizer.c — the tokenizer against Hugging Face, id for id.
 *
 * Golden data (tests/fixtures/tokenizer/, from tools/oracle/make_tokenizer_fixtures.py):
 *   splits.txt     the pieces HF tokenizers' own pre-tokenizers (gpt2 ByteLevel,
 *                  SmolLM2's Digits + ByteLevel, the Llama-3 and Qwen2 Split
 *                  regexes) cut 159 texts into: 123 random ones built to hit
 *                  every regex alternative, every White_Space, CR/LF, marks.
 *   smollm2.txt    ids of SmolLM2-135M-Instruct (models/, SKIPPED when absent).
 *   llama_bpe.gguf a tiny Llama-3-style byte-level BPE vocabulary and its ids.
 *   spm.gguf       a tiny SentencePiece-style vocabulary and its ids.
 * Exact equality everywhere: token ids have no tolerance. Also: the round
 * trip detokenize(tokenize(s)) == s on every fixture text, on invalid UTF-8
 * and on random bytes; load errors; and `qkv tokenize` end to end.
 */
#include "testing.h"

#include "qkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fixture(const char *name) {
    static char path[8][512];
    static int slot;
    slot = (slot + 1) % 8;
    snprintf(path[slot], sizeof path[slot], "%s/tokenizer/%s", test_fixture_dir(), name);
    return path[slot];
}

/* ---------------------------------------------------------- fixture files */

typedef struct {
    int add_special, parse_special;
    char *text;           /* malloc'd, NUL-terminated (texts hold no NUL but splits may) */
    size_t len;
    int64_t *want;        /* malloc'd */
    int64_t n_want;
    int hf_differs;       /* transformers' GGUF tokenizer gives other ids */
} fixture_case;

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static char *unhex(const char *s, size_t n, size_t *len) {
    char *out = malloc(n / 2 + 1);
    for (size_t i = 0; i + 1 < n; i += 2) out[i / 2] = (char)(hexval(s[i]) * 16 + hexval(s[i + 1]));
    out[n / 2] = 0;
    *len = n / 2;
    return out;
}

static int64_t *parse_list(const char *s, size_t n, int64_t *count) {
    int64_t *v = malloc((n + 1) * sizeof *v), k = 0;
    for (size_t i = 0; i < n;) {
        char *end;
        v[k++] = strtoll(s + i, &end, 10);
        i = (size_t)(end - s);
        if (i < n && s[i] == ',') i++;
    }
    *count = k;
    return v;
}

/* Splits line into up to max tab-separated fields (pointers and lengths). */
static int fields(const char *line, size_t n, const char **f, size_t *fl, int max) {
    int k = 0;
    const char *p = line, *end = line + n;
    while (k < max) {
        const char *t = memchr(p, '\t', (size_t)(end - p));
        f[k] = p;
        fl[k] = (size_t)((t ? t : end) - p);
        k++;
        if (!t) break;
        p = t + 1;
    }
    return k;
}

/* Reads an ids file: <flags> TAB <hex> TAB <ids> TAB <hf ids or '='>. */
static fixture_case *load_cases(const char *path, int *n_cases) {
    size_t size;
    char *buf = test_read_file(path, &size);
    *n_cases = 0;
    if (!buf) return NULL;
    int cap = 16, n = 0;
    fixture_case *cs = malloc((size_t)cap * sizeof *cs);
    for (char *line = buf; line < buf + size;) {
        char *nl = memchr(line, '\n', (size_t)(buf + size - line));
        size_t len = (size_t)((nl ? nl : buf + size) - line);
        if (len > 0 && line[0] != '#') {
            const char *f[4];
            size_t fl[4];
            if (fields(line, len, f, fl, 4) == 4) {
                if (n == cap) cs = realloc(cs, (size_t)(cap *= 2) * sizeof *cs);
                fixture_case *c = &cs[n++];
                c->add_special = f[0][0] == '1';
                c->parse_special = f[0][1] == '1';
                c->text = unhex(f[1], fl[1], &c->len);
                c->want = parse_list(f[2], fl[2], &c->n_want);
                c->hf_differs = !(fl[3] == 1 && f[3][0] == '=');
            }
        }
        line += len + 1;
    }
    free(buf);
    *n_cases = n;
    return cs;
}

static void free_cases(fixture_case *cs, int n) {
    for (int i = 0; i < n; i++) free(cs[i].text), free(cs[i].want);
    free(cs);
}

static qkv_tokenizer *load_tok(const char *path, qkv_gguf **g) {
    qkv_error err = {0};
    qkv_tokenizer *t = NULL;
    *g = NULL;
    if (qkv_gguf_open(g, path, &err) || qkv_tokenizer_load(&t, *g, &err)) {
        CHECK(0, "%s: %s", path, err.msg);
        qkv_gguf_close(*g);
        *g = NULL;
        return NULL;
    }
    return t;
}

static void print_ids(const char *what, const int32_t *ids, int64_t n) {
    fprintf(stderr, "    %s:", what);
    for (int64_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Every case of an ids file: identical ids. Returns the number of cases. */
static int check_ids_file(const qkv_tokenizer *t, const char *name, int *hf_differs) {
    int n;
    fixture_case *cs = load_cases(fixture(name), &n);
    CHECK(cs && n > 0, "%s: no cases", name);
    *hf_differs = 0;
    for (int i = 0; i < n; i++) {
        fixture_case *c = &cs[i];
        int64_t cap = qkv_tokenize_bound(c->len), got_n;
        int32_t *got = malloc((size_t)cap * sizeof *got);
        qkv_error err = {0};
        qkv_status s = qkv_tokenize(t, c->text, c->len, c->add_special, c->parse_special, got, cap,
                                    &got_n, &err);
        CHECK(s == QKV_OK, "%s case %d: %s", name, i, err.msg);
        int same = s == QKV_OK && got_n == c->n_want;
        for (int64_t k = 0; same && k < got_n; k++) same = got[k] == c->want[k];
        if (!same && test_failures() < 10) {
            fprintf(stderr, "  %s case %d (%zu bytes: \"%.60s\"):\n", name, i, c->len, c->text);
            print_ids("got ", got, got_n);
            int32_t *w = malloc((size_t)(c->n_want + 1) * sizeof *w);
            for (int64_t k = 0; k < c->n_want; k++) w[k] = (int32_t)c->want[k];
            print_ids("want", w, c->n_want);
            free(w);
        }
        CHECK(same, "%s case %d: ids differ", name, i);
        *hf_differs += c->hf_differs;
        free(got);
    }
    free_cases(cs, n);
    return n;
}

/* detokenize(tokenize(text)) == text, with special tokens skipped. */
static void check_round_trip(const qkv_tokenizer *t, const char *what, const char *text, size_t len,
                             int add_special) {
    int64_t cap = qkv_tokenize_bound(len), n;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    char *back = malloc(len + 16);
    size_t n_back;
    qkv_error err = {0};
    CHECK(qkv_tokenize(t, text, len, add_special, 0, ids, cap, &n, &err) == QKV_OK, "%s: %s", what,
          err.msg);
    CHECK(qkv_detokenize(t, ids, n, 1, back, len + 16, &n_back, &err) == QKV_OK, "%s: %s", what,
          err.msg);
    CHECK(n_back == len && memcmp(back, text, len) == 0,
          "%s: round trip of %zu bytes gave %zu: \"%.40s\" -> \"%.40s\"", what, len, n_back, text,
          back);
    free(ids);
    free(back);
}

/* 1 if every byte of text has a token (a byte without one is dropped). */
static int bytes_encodable(const qkv_tokenizer *t, const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) {
        int32_t id[8];
        int64_t n = 0;
        if (qkv_tokenize(t, text + i, 1, 0, 0, id, 8, &n, NULL) != QKV_OK || n == 0) return 0;
    }
    return 1;
}

static void round_trip_file(const qkv_tokenizer *t, const char *name) {
    int n;
    fixture_case *cs = load_cases(fixture(name), &n);
    for (int i = 0; i < n; i++) {
        if (!bytes_encodable(t, cs[i].text, cs[i].len)) continue;
        char what[96];
        snprintf(what, sizeof what, "%s case %d", name, i);
        check_round_trip(t, what, cs[i].text, cs[i].len, 0);
        check_round_trip(t, what, cs[i].text, cs[i].len, 1);
    }
    free_cases(cs, n);
}

/* Random bytes between text atoms (valid and invalid UTF-8). Bytes run from
 * lo to 255 except for SmolLM2, whose vocabulary lacks 21 bytes (0x04, 0xC0,
 * 0xF5..0xFF ...: tokenize drops them, so they cannot come back): there they
 * are drawn from 0x20..0xBF. */
static void round_trip_random(const qkv_tokenizer *t, const char *name, int all_bytes) {
    static const char *atoms[] = {"the", " ", "  ", "\n", "\r\n", "\t", "年假", "é", "'s", "123", "😀",
                                  "\xe5\xb9", "\xe0\x80", "<s>", "!!", "\xed\xa0\x80"};
    test_rng r = {7};
    char buf[512];
    for (int it = 0; it < 300; it++) {
        size_t n = 0, want = (size_t)test_rng_int(&r, 0, 400);
        while (n < want) {
            if (test_rng_int(&r, 0, 1)) {
                buf[n++] = (char)(all_bytes ? test_rng_int(&r, 0, 255) : test_rng_int(&r, 0x20, 0xBF));
            } else {
                const char *a = atoms[test_rng_int(&r, 0, (int)(sizeof atoms / sizeof *atoms) - 1)];
                size_t al = strlen(a);
                if (n + al > sizeof buf) break;
                memcpy(buf + n, a, al);
                n += al;
            }
        }
        char what[96];
        snprintf(what, sizeof what, "%s random %d", name, it);
        check_round_trip(t, what, buf, n, it & 1);
    }
}

/* --------------------------------------------------------------- splits */

TEST(tok_pretokenize_matches_hf_splits) {
    size_t size;
    char *buf = test_read_file(fixture("splits.txt"), &size);
    CHECK(buf != NULL, "splits.txt missing");
    if (!buf) return;
    int n_lines = 0, per_pre[5] = {0};
    for (char *line = buf; line < buf + size;) {
        char *nl = memchr(line, '\n', (size_t)(buf + size - line));
        size_t len = (size_t)((nl ? nl : buf + size) - line);
        const char *f[3];
        size_t fl[3];
        if (len > 0 && line[0] != '#' && fields(line, len, f, fl, 3) == 3) {
            qkv_pretok pre = QKV_PRE_NONE;
            for (int p = QKV_PRE_GPT2; p <= QKV_PRE_QWEN2; p++) {
                const char *name = qkv_pretok_name((qkv_pretok)p);
                if (fl[0] == strlen(name) && !memcmp(f[0], name, fl[0])) pre = (qkv_pretok)p;
            }
            CHECK(pre != QKV_PRE_NONE, "splits.txt: unknown pre '%.*s'", (int)fl[0], f[0]);
            size_t tl;
            char *text = unhex(f[1], fl[1], &tl);
            int64_t n_want, n_got;
            int64_t *want = parse_list(f[2], fl[2], &n_want);
            size_t *got = malloc((tl + 1) * sizeof *got);
            qkv_error err = {0};
            CHECK(qkv_pretokenize(pre, text, tl, got, (int64_t)tl + 1, &n_got, &err) == QKV_OK, "%s",
                  err.msg);
            int same = n_got == n_want;
            for (int64_t k = 0; same && k < n_got; k++) same = (int64_t)got[k] == want[k];
            if (!same && test_failures() < 10) {
                fprintf(stderr, "  %s on %zu bytes \"%s\": got", qkv_pretok_name(pre), tl, text);
                for (int64_t k = 0; k < n_got; k++) fprintf(stderr, " %zu", got[k]);
                fprintf(stderr, "\n    want");
                for (int64_t k = 0; k < n_want; k++) fprintf(stderr, " %lld", (long long)want[k]);
                fputc('\n', stderr);
            }
            CHECK(same, "%s split %d differs", qkv_pretok_name(pre), per_pre[pre]);
            per_pre[pre]++;
            n_lines++;
            free(text), free(want), free(got);
        }
        line += len + 1;
    }
    free(buf);
    printf("  %d splits: gpt2 %d, smollm %d, llama3 %d, qwen2 %d\n", n_lines, per_pre[1], per_pre[2],
           per_pre[3], per_pre[4]);
    CHECK(per_pre[1] >= 100 && per_pre[2] >= 100 && per_pre[3] >= 100 && per_pre[4] >= 100,
          "too few splits");
}

TEST(tok_pretokenize_full_and_args) {
    size_t ends[4];
    int64_t n;
    qkv_error err = {0};
    const char *s = "a b c d e";
    CHECK(qkv_pretokenize(QKV_PRE_GPT2, s, strlen(s), ends, 4, &n, &err) == QKV_ERR_FULL && n == 5,
          "5 pieces into 4: status and count (%lld)", (long long)n);
    CHECK(ends[3] == 7, "the first 4 ends are written (%zu)", ends[3]);
    CHECK(qkv_pretokenize(QKV_PRE_LLAMA3, "", 0, NULL, 0, &n, &err) == QKV_OK && n == 0, "empty text");
    CHECK(qkv_pretokenize((qkv_pretok)99, s, 1, ends, 4, &n, &err) == QKV_ERR_INVALID, "bad pre");
    CHECK(qkv_pretokenize(QKV_PRE_NONE, s, strlen(s), ends, 4, &n, &err) == QKV_OK && n == 1 &&
              ends[0] == strlen(s),
          "NONE: one piece");
}

/* ------------------------------------------------------------- SmolLM2 */

TEST(tok_smollm2_matches_hf) {
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (!test_require_model()) return;
    if (qkv_gguf_open(&g, test_model_path(), &err) != QKV_OK) {
        CHECK(0, "%s", err.msg);
        return;
    }
    qkv_tokenizer *t = NULL;
    CHECK(qkv_tokenizer_load(&t, g, &err) == QKV_OK, "%s", err.msg);
    if (!t) {
        qkv_gguf_close(g);
        return;
    }
    CHECK(qkv_tokenizer_n_vocab(t) == 49152, "n_vocab %d", qkv_tokenizer_n_vocab(t));
    CHECK(qkv_tokenizer_type(t) == QKV_VOCAB_BPE && qkv_tokenizer_pretok(t) == QKV_PRE_SMOLLM &&
              !strcmp(qkv_tokenizer_pre_name(t), "smollm"),
          "gpt2 / smollm");
    CHECK(qkv_tokenizer_bos(t) == 1 && qkv_tokenizer_eos(t) == 2 && !qkv_tokenizer_add_bos(t) &&
              !qkv_tokenizer_add_eos(t),
          "bos %d eos %d add %d %d", qkv_tokenizer_bos(t), qkv_tokenizer_eos(t),
          qkv_tokenizer_add_bos(t), qkv_tokenizer_add_eos(t));
    CHECK(qkv_token_find(t, "<|im_start|>", 12) == 1 && qkv_token_type_of(t, 1) == QKV_TOKEN_CONTROL,
          "<|im_start|> is control token 1");
    size_t len;
    const char *p = qkv_token_piece(t, 905, &len);
    CHECK(p && len == 6 && !memcmp(p, " world", 6), "piece of 905 is ' world'");
    p = qkv_token_text(t, 905, &len);
    CHECK(p && len == 7 && !memcmp(p, "\xc4\xa0world", 7), "text of 905 is 'Ġworld'");

    int differs, n = check_ids_file(t, "smollm2.txt", &differs);
    printf("  %d SmolLM2 cases identical (transformers' GGUF tokenizer differs on %d: no digit split)\n",
           n, differs);
    CHECK(n >= 30, "only %d cases", n);
    round_trip_file(t, "smollm2.txt");
    round_trip_random(t, "smollm2", 0);
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

/* ---------------------------------------------------------- Llama-3 vocab */

#define LLAMA3_VOCAB "models/llama3-vocab.gguf"

/* The real Llama-3 tokenizer (`make model` writes it from quicktok's data)
 * against quicktok's own encoder, and its chat template. */
TEST(tok_llama3_vocab_matches_quicktok) {
    if (!test_require_file(LLAMA3_VOCAB, "the Llama-3 vocab GGUF: run `make model`")) return;
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(LLAMA3_VOCAB, &g);
    if (!t) return;
    CHECK(qkv_tokenizer_n_vocab(t) == 128256 && qkv_tokenizer_type(t) == QKV_VOCAB_BPE &&
              qkv_tokenizer_pretok(t) == QKV_PRE_LLAMA3,
          "128256 tokens, gpt2, llama3 split (%d)", qkv_tokenizer_n_vocab(t));
    CHECK(qkv_tokenizer_bos(t) == 128000 && qkv_tokenizer_eos(t) == 128009 && qkv_tokenizer_add_bos(t) &&
              !qkv_tokenizer_add_eos(t),
          "bos 128000 (added), eos 128009 <|eot_id|> (%d %d)", qkv_tokenizer_bos(t), qkv_tokenizer_eos(t));
    CHECK(qkv_token_type_of(t, 128009) == QKV_TOKEN_CONTROL && qkv_token_type_of(t, 128255) == QKV_TOKEN_CONTROL &&
              qkv_token_type_of(t, 127999) == QKV_TOKEN_NORMAL,
          "the 256 specials are control tokens");
    size_t len;
    const char *p = qkv_token_text(t, 1917, &len);
    CHECK(p && len == 7 && !memcmp(p, "\xc4\xa0world", 7), "token 1917 is spelled 'Ġworld'");
    int differs, n = check_ids_file(t, "llama3_vocab.txt", &differs);
    printf("  %d Llama-3 cases identical to quicktok-v1 0.4.0\n", n);
    CHECK(n >= 30, "only %d cases", n);
    round_trip_file(t, "llama3_vocab.txt");

    char *chat = NULL;
    qkv_error err = {0};
    CHECK(qkv_chat_format(&chat, g, NULL, "年假怎么申请？", &err) == QKV_OK, "%s", err.msg);
    const char *want = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n年假怎么申请？<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK(chat && !strcmp(chat, want), "Llama-3 chat format: %s", chat ? chat : "(none)");
    free(chat);
    const char *argv[] = {"tokenize", "-m", LLAMA3_VOCAB, "-p", "年假怎么申请？", "--chat", "--json", NULL};
    char *out = NULL, *errs = NULL;
    int rc = test_run_cli(argv, NULL, &out, &errs);
    CHECK(rc == 0 && out && strstr(out, "\"ids\": [128000, 128006, 882, 128007, 271, 8107, 107099, 104237, "
                                        "112838, 11571, 128009, 128006, 78191, 128007, 271]"),
          "--chat: one <|begin_of_text|>, quicktok's ids: %s %s", out, errs);
    free(out), free(errs);
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

/* ------------------------------------------------------ synthetic vocabs */

TEST(tok_llama_bpe_matches_hf) {
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(fixture("llama_bpe.gguf"), &g);
    if (!t) return;
    CHECK(qkv_tokenizer_pretok(t) == QKV_PRE_LLAMA3, "llama-bpe is the Llama-3 split");
    int32_t bos = qkv_token_find(t, "<|begin_of_text|>", 17);
    CHECK(bos >= 0 && qkv_tokenizer_bos(t) == bos && qkv_tokenizer_add_bos(t), "BOS added");
    int differs, n = check_ids_file(t, "llama_bpe.txt", &differs);
    printf("  %d cases identical (transformers differs on %d: no ignore_merges)\n", n, differs);
    round_trip_file(t, "llama_bpe.txt");
    round_trip_random(t, "llama_bpe", 1);
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

TEST(tok_spm_matches_hf) {
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(fixture("spm.gguf"), &g);
    if (!t) return;
    CHECK(qkv_tokenizer_type(t) == QKV_VOCAB_SPM && qkv_tokenizer_pretok(t) == QKV_PRE_NONE, "llama");
    CHECK(qkv_tokenizer_bos(t) == 1 && qkv_tokenizer_add_bos(t), "BOS 1 added");
    size_t len;
    const char *p = qkv_token_piece(t, qkv_token_find(t, "<0x0A>", 6), &len);
    CHECK(p && len == 1 && p[0] == '\n', "<0x0A> is a newline byte");
    int32_t id = qkv_token_find(t, "\xe2\x96\x81the", 6);
    p = qkv_token_piece(t, id, &len);
    CHECK(id >= 0 && len == 4 && !memcmp(p, " the", 4), "▁the is ' the'");
    CHECK(qkv_token_score(t, id) < 0, "scores are read");
    int differs, n = check_ids_file(t, "spm.txt", &differs);
    printf("  %d cases identical (transformers differs on %d: Metaspace prepend 'first')\n", n,
           differs);
    round_trip_file(t, "spm.txt");
    round_trip_random(t, "spm", 1);
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

TEST(tok_special_tokens_only_when_asked) {
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(fixture("llama_bpe.gguf"), &g);
    if (!t) return;
    const char *s = "<|eot_id|> <think>";
    int32_t eot = qkv_token_find(t, "<|eot_id|>", 10), think = qkv_token_find(t, "<think>", 7);
    int32_t ids[64];
    int64_t n;
    CHECK(qkv_tokenize(t, s, strlen(s), 0, 1, ids, 64, &n, NULL) == QKV_OK && n == 3 &&
              ids[0] == eot && ids[2] == think,
          "parse_special: control and user-defined whole (n %lld)", (long long)n);
    CHECK(qkv_tokenize(t, s, strlen(s), 0, 0, ids, 64, &n, NULL) == QKV_OK && n > 3 &&
              ids[0] != eot && ids[n - 1] == think,
          "without: the control token is text, the user-defined one still whole");
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

TEST(tok_api_edges) {
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(fixture("llama_bpe.gguf"), &g);
    if (!t) return;
    int32_t ids[4];
    int64_t n;
    qkv_error err = {0};
    const char *s = "one two three four five six";
    CHECK(qkv_tokenize(t, s, strlen(s), 1, 0, ids, 4, &n, &err) == QKV_ERR_FULL && n > 4,
          "too small: QKV_ERR_FULL and the count needed (%lld)", (long long)n);
    CHECK(qkv_tokenize(t, s, strlen(s), 1, 0, NULL, 0, &n, &err) == QKV_ERR_FULL && n > 4,
          "counting with no buffer");
    CHECK(qkv_tokenize(t, "", 0, 1, 0, ids, 4, &n, &err) == QKV_OK && n == 1 &&
              ids[0] == qkv_tokenizer_bos(t),
          "empty text: BOS only");
    CHECK(qkv_token_piece(t, -1, NULL) == NULL && qkv_token_piece(t, qkv_tokenizer_n_vocab(t), NULL) == NULL,
          "piece out of range");
    CHECK(qkv_token_find(t, "no such token", 13) == -1, "find: absent");
    int32_t bad[2] = {5, 1 << 30};
    char out[8];
    size_t n_out;
    CHECK(qkv_detokenize(t, bad, 2, 0, out, sizeof out, &n_out, &err) == QKV_ERR_INVALID,
          "detokenize: id out of range");
    int32_t good[3];
    CHECK(qkv_tokenize(t, "Hello world", 11, 0, 0, good, 3, &n, &err) == QKV_OK && n == 2, "Hello world");
    CHECK(qkv_detokenize(t, good, n, 0, out, 4, &n_out, &err) == QKV_ERR_FULL && n_out == 11 &&
              !strcmp(out, "Hel"),
          "detokenize into 4 bytes: FULL, length 11, 'Hel' (%s)", out);
    CHECK(qkv_detokenize(t, good, n, 0, NULL, 0, &n_out, &err) == QKV_ERR_FULL && n_out == 11,
          "detokenize: length only");
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
}

TEST(tok_long_inputs_are_linear) {
    /* 200 KB of one letter, of spaces, of newlines: no quadratic step */
    qkv_gguf *g;
    qkv_tokenizer *t = load_tok(fixture("llama_bpe.gguf"), &g);
    qkv_gguf *g2;
    qkv_tokenizer *t2 = load_tok(fixture("spm.gguf"), &g2);
    if (!t || !t2) return;
    size_t len = 200000;
    char *s = malloc(len);
    int64_t cap = qkv_tokenize_bound(len), n;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    const char fill[] = {'a', ' ', '\n'};
    for (int k = 0; k < 3; k++) {
        memset(s, fill[k], len);
        CHECK(qkv_tokenize(t, s, len, 0, 0, ids, cap, &n, NULL) == QKV_OK && n > 0, "bpe fill %d", k);
        CHECK(qkv_tokenize(t2, s, len, 0, 0, ids, cap, &n, NULL) == QKV_OK && n > 0, "spm fill %d", k);
    }
    free(s);
    free(ids);
    qkv_tokenizer_free(t);
    qkv_gguf_close(g);
    qkv_tokenizer_free(t2);
    qkv_gguf_close(g2);
}

TEST(tok_load_refuses_bad_vocabularies) {
    static const struct {
        const char *file;
        qkv_status want;
        const char *needle;
    } cases[] = {
        {"bad_pre.gguf", QKV_ERR_UNSUPPORTED, "tekken"},
        {"bad_merge.gguf", QKV_ERR_FORMAT, "merge 1"},
        {"bad_model.gguf", QKV_ERR_UNSUPPORTED, "bert"},
        {"bad_bos.gguf", QKV_ERR_FORMAT, "bos_token_id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qkv_gguf *g = NULL;
        qkv_error err = {0};
        CHECK(qkv_gguf_open(&g, fixture(cases[i].file), &err) == QKV_OK, "%s: %s", cases[i].file, err.msg);
        qkv_tokenizer *t = (qkv_tokenizer *)1;
        qkv_status s = qkv_tokenizer_load(&t, g, &err);
        CHECK(s == cases[i].want && t == NULL, "%s: status %d, want %d", cases[i].file, s, cases[i].want);
        CHECK(strstr(err.msg, cases[i].needle) != NULL, "%s: message '%s' lacks '%s'", cases[i].file,
              err.msg, cases[i].needle);
        qkv_gguf_close(g);
    }
    /* a GGUF with no tokenizer at all */
    char path[512];
    snprintf(path, sizeof path, "%s/gguf/meta.gguf", test_fixture_dir());
    qkv_gguf *g = NULL;
    qkv_error err = {0};
    if (qkv_gguf_open(&g, path, &err) == QKV_OK) {
        qkv_tokenizer *t = NULL;
        CHECK(qkv_tokenizer_load(&t, g, &err) == QKV_ERR_FORMAT && strstr(err.msg, "tokenizer"),
              "no tokenizer: %s", err.msg);
        qkv_gguf_close(g);
    }
}

/* ------------------------------------------------------------------ CLI */

/* Expects exit 2 and exactly one stderr line containing needle. */
static void expect_cli_bad(const char *const *argv, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    const char *e = err ? err : "";
    int lines = 0;
    for (const char *p = e; *p; p++) lines += *p == '\n';
    CHECK(rc == 2, "%s: exit %d, want 2 (stderr: %s)", needle, rc, e);
    CHECK(lines == 1, "%s: %d stderr lines, want 1: %s", needle, lines, e);
    CHECK(strstr(e, needle) != NULL, "stderr should mention '%s': %s", needle, e);
    free(out);
    free(err);
}

TEST(tok_cli_prints_ids_and_pieces) {
    const char *m = fixture("llama_bpe.gguf");
    const char *argv[] = {"tokenize", "-m", m, "-p", "Hello world\n", "--json", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(out && strstr(out, "\"ids\": [602, 370, 282, 198]"), "json ids: %s", out);
    CHECK(out && strstr(out, "\"pieces\": [\"<|begin_of_text|>\", \"Hello\", \" world\", \"\\n\"]"),
          "json pieces: %s", out);
    free(out), free(err);

    const char *argv2[] = {"tokenize", "-m", m, "-p", "<|eot_id|>\xe5\xb9", "--special", "--no-bos", NULL};
    rc = test_run_cli(argv2, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(out && strstr(out, "\"<|eot_id|>\"  (control)") && strstr(out, "<0xE5>") &&
              strstr(out, "3 tokens") && !strstr(out, "begin_of_text"),
          "plain output, invalid UTF-8 as <0xXX>, no BOS: %s", out);
    free(out), free(err);

    /* the same text without --special: the control token is plain text */
    const char *argv3[] = {"tokenize", "-m", m, "-p", "<|eot_id|>", "--no-bos", NULL};
    rc = test_run_cli(argv3, NULL, &out, &err);
    CHECK(rc == 0 && out && !strstr(out, "(control)"), "no --special: %s", out);
    free(out), free(err);

    /* SmolLM2 */
    if (test_require_model()) {
        const char *argv4[] = {"tokenize", "-m", test_model_path(), "-p", "<|im_start|>user\n年假怎么申请？",
                               "--special", "--json", NULL};
        rc = test_run_cli(argv4, NULL, &out, &err);
        CHECK(rc == 0 && out && strstr(out, "\"ids\": [1, 4093, 198, 32090, 129, 176, 219, 225, 37911, "
                                            "232, 27948, 226, 16821, 128, 16313, 132, 8083, 249]"),
              "SmolLM2 ids: %s %s", out, err);
        free(out), free(err);
    }
}

/* An empty text is a tokenizer's valid input: no ids, or only the BOS the
 * GGUF asks for (as transformers gives with its special tokens), exit 0, in
 * plain and JSON output, from -p and from -f; qkv run still refuses it. */
TEST(tok_cli_empty_text_gives_no_ids) {
    const char *m = fixture("llama_bpe.gguf"); /* asks for BOS 602 <|begin_of_text|> */
    const struct {
        const char *argv[9];
        const char *want;
    } cases[] = {
        {{"tokenize", "-m", m, "-p", "", "--json", NULL}, "\"n_tokens\": 1, \"ids\": [602], \"pieces\": [\"<|begin_of_text|>\"]}"},
        {{"tokenize", "-m", m, "-p", "", "--json", "--no-bos", NULL}, "\"n_tokens\": 0, \"ids\": [], \"pieces\": []}"},
        {{"tokenize", "-m", m, "-f", "-", "--json", "--no-bos", NULL}, "\"n_tokens\": 0, \"ids\": [], \"pieces\": []}"},
        {{"tokenize", "-m", m, "-p", "", NULL}, "     602  \"<|begin_of_text|>\"  (control)\n1 tokens ("},
        {{"tokenize", "-m", m, "-p", "", "--no-bos", NULL}, "0 tokens ("},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = test_run_cli(cases[i].argv, "", &out, &err);
        CHECK(rc == 0 && err && !err[0], "case %zu: exit %d, stderr: %s", i, rc, err);
        CHECK(out && strstr(out, cases[i].want), "case %zu: want '%s' in: %s", i, cases[i].want, out);
        /* plain output without BOS: the summary line alone */
        if (i == 4) CHECK(out && !strncmp(out, "0 tokens (", 10), "no rows before the summary: %s", out);
        free(out), free(err);
    }
    if (test_require_model()) { /* SmolLM2 adds no BOS */
        const char *argv[] = {"tokenize", "-m", test_model_path(), "-p", "", "--json", NULL};
        char *out = NULL, *err = NULL;
        int rc = test_run_cli(argv, NULL, &out, &err);
        CHECK(rc == 0 && out && strstr(out, "\"ids\": []"), "SmolLM2: exit %d: %s %s", rc, out, err);
        free(out), free(err);
        const char *run[] = {"run", "-m", test_model_path(), "-p", "", NULL};
        expect_cli_bad(run, "no tokens");
    }
}

TEST(tok_cli_bad_input) {
    const char *m = fixture("llama_bpe.gguf");
    const char *missing[] = {"tokenize", "-m", "no/such/model.gguf", "-p", "x", NULL};
    expect_cli_bad(missing, "no/such/model.gguf");
    const char *not_gguf[] = {"tokenize", "-m", fixture("splits.txt"), "-p", "x", NULL};
    expect_cli_bad(not_gguf, "splits.txt");
    const char *no_tok[] = {"tokenize", "-m", fixture("bad_pre.gguf"), "-p", "x", NULL};
    expect_cli_bad(no_tok, "tekken");
    const char *flag[] = {"tokenize", "-m", m, "-p", "x", "--bogus", NULL};
    expect_cli_bad(flag, "--bogus");
    const char *no_text[] = {"tokenize", "-m", m, NULL};
    expect_cli_bad(no_text, "-p");
    const char *no_value[] = {"tokenize", "-m", m, "-p", NULL};
    expect_cli_bad(no_value, "-p");
    const char *no_file[] = {"tokenize", "-m", m, "-f", "no/such/text.txt", NULL};
    expect_cli_bad(no_file, "no/such/text.txt");
}
