/*
 * cmd_tokenize.c — `qkv tokenize`: the token ids a GGUF's own tokenizer gives
 * a text, one row per token with its piece (the bytes it stands for), or the
 * same as JSON. Pieces are shown readably: control characters escaped, bytes
 * that are not valid UTF-8 (a lone byte of a multi-byte character) as <0xXX>.
 * Bad input gets one line on stderr and exit status 2.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static const char usage_text[] =
    "usage: qkv tokenize [-m MODEL.gguf] (-p TEXT | -f FILE) [--json] [--special] [--no-bos]\n"
    "\n"
    "The token ids the model's own tokenizer (from the GGUF) gives a text.\n"
    "\n"
    "  -m FILE        GGUF with a tokenizer (default " DEFAULT_MODEL ")\n"
    "  -p TEXT        the text (any bytes; invalid UTF-8 is tokenised byte for byte)\n"
    "  -f FILE        read the text from a file instead\n"
    "  --special      recognise control tokens written in the text (<|im_start|> ...)\n"
    "  --no-bos       add no BOS / EOS even where the GGUF asks for them\n"
    "  --json         {\"ids\": [...], \"pieces\": [...], ...} on one line\n";

/* Length of the valid UTF-8 sequence at s[0 .. n), or 0 if it is not one. */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    return len;
}

/* Writes piece p[0 .. n) readably; json selects JSON string escapes. */
static void put_piece(FILE *f, const char *p, size_t n, int json) {
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        int len = utf8_len(s + i, n - i);
        unsigned c = s[i];
        if (len == 0) {
            fprintf(f, "<0x%02X>", c);
            i++;
            continue;
        }
        if (len > 1) {
            fwrite(s + i, 1, (size_t)len, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\r') {
            fputs("\\r", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c == '\\' || c == '"') {
            fprintf(f, "\\%c", c);
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, json ? "\\u%04x" : "\\x%02x", c);
        } else {
            fputc((int)c, f);
        }
        i += (size_t)len;
    }
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (!got) break;
        n += got;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = DEFAULT_MODEL, *prompt = NULL, *file = NULL;
    int json = 0, special = 0, no_bos = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(f, "--json")) { json = 1; continue; }
        if (!strcmp(f, "--special")) { special = 1; continue; }
        if (!strcmp(f, "--no-bos")) { no_bos = 1; continue; }
        if (strcmp(f, "-m") && strcmp(f, "--model") && strcmp(f, "-p") && strcmp(f, "--prompt") &&
            strcmp(f, "-f") && strcmp(f, "--file"))
            return cli_fail("tokenize: unknown flag '%s' (see qkv tokenize --help)", f);
        if (!(v = cli_value(argc, argv, &i))) return CLI_EXIT_BAD_INPUT;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model = v;
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) prompt = v;
        else file = v;
    }
    if (!!prompt + !!file != 1) return cli_fail("tokenize: give exactly one of -p TEXT or -f FILE");

    size_t len = 0;
    char *owned = NULL;
    const char *text = prompt;
    if (file) {
        if (!(owned = read_file(file, &len))) return cli_fail("tokenize: cannot read '%s'", file);
        text = owned;
    } else {
        len = strlen(prompt);
    }

    qkv_error err = {0};
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = 0;
    if (qkv_gguf_open(&g, model, &err) || qkv_tokenizer_load(&tok, g, &err)) {
        if (err.status == QKV_ERR_IO && !strcmp(model, DEFAULT_MODEL))
            rc = cli_fail("%s (run `make model`, or give -m FILE)", err.msg);
        else
            rc = cli_fail("%s", err.msg);
        goto done;
    }
    int64_t cap = qkv_tokenize_bound(len);
    ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        rc = cli_fail("tokenize: out of memory for %zu bytes of text", len);
        goto done;
    }
    if (qkv_tokenize(tok, text, len, !no_bos, special, ids, cap, &n, &err)) {
        rc = cli_fail("%s", err.msg);
        goto done;
    }

    if (json) {
        printf("{\"model\": \"");
        put_piece(stdout, model, strlen(model), 1);
        printf("\", \"vocab\": \"%s\", \"pre\": \"%s\", \"n_vocab\": %d, \"n_tokens\": %lld, \"ids\": [",
               qkv_tokenizer_type(tok) == QKV_VOCAB_BPE ? "gpt2" : "llama",
               qkv_pretok_name(qkv_tokenizer_pretok(tok)), qkv_tokenizer_n_vocab(tok), (long long)n);
        for (int64_t k = 0; k < n; k++) printf("%s%d", k ? ", " : "", ids[k]);
        printf("], \"pieces\": [");
        for (int64_t k = 0; k < n; k++) {
            size_t pl;
            const char *p = qkv_token_piece(tok, ids[k], &pl);
            printf("%s\"", k ? ", " : "");
            put_piece(stdout, p, pl, 1);
            putchar('"');
        }
        printf("]}\n");
    } else {
        for (int64_t k = 0; k < n; k++) {
            size_t pl;
            const char *p = qkv_token_piece(tok, ids[k], &pl);
            printf("%8d  \"", ids[k]);
            put_piece(stdout, p, pl, 0);
            printf("\"%s\n", qkv_token_type_of(tok, ids[k]) == QKV_TOKEN_CONTROL ? "  (control)" : "");
        }
        printf("%lld tokens (%s vocabulary of %d, pre-tokenizer %s)\n", (long long)n,
               qkv_tokenizer_type(tok) == QKV_VOCAB_BPE ? "gpt2" : "llama", qkv_tokenizer_n_vocab(tok),
               qkv_pretok_name(qkv_tokenizer_pretok(tok)));
    }
done:
    free(ids);
    free(owned);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return rc;
}
