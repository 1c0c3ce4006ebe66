/*
 * cmd_tokenize.c — `qkv tokenize`: the token ids a GGUF's own tokenizer gives
 * a text, one row per token with its piece (the bytes it stands for), or the
 * same as JSON. Pieces are shown readably: control characters escaped, bytes
 * that are not valid UTF-8 (a lone byte of a multi-byte character) as <0xXX>.
 * The prompt flags are those of qkv run (--chat included), but an empty text
 * is valid here: no ids, or only the BOS the GGUF asks for. Bad input gets
 * one line on stderr and exit status 2.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "prompt.h"
#include "json_out.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cmd_tokenize(int argc, char **argv) {
    const char *model = CLI_DEFAULT_MODEL;
    cli_prompt_args pa = {.allow_empty = 1}; /* an empty text: no ids (or the BOS the GGUF asks for) */
    int json = 0;
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&model),
        CLI_FLAGS_PROMPT(&pa),
        {.name = "--no-bos", .kind = CLI_BOOL, .dest = &pa.no_bos,
         .help = "add no BOS / EOS even where the GGUF asks for them"},
        CLI_FLAG_JSON(&json, "{\"ids\": [...], \"pieces\": [...], ...} on one line"),
        {0},
    };
    const cli_command cmd = {.name = "tokenize", .usage = "[-m MODEL.gguf] (-p TEXT | -f FILE | --tokens IDS) [flags]",
                             .about = "The token ids the model's own tokenizer (from the GGUF) gives a text (any bytes;\n"
                             "invalid UTF-8 is tokenised byte for byte), one row per token with its piece.",
                             .flags = flags};
    CLI_PARSE_OR_RETURN(&cmd, argc, argv);
    int rc = cli_prompt_check(&pa);
    if (rc) return rc;
    qkv_gguf *g = NULL;
    qkv_tokenizer *tok = NULL;
    cli_prompt pr = {0};
    if ((rc = cli_tokenizer_open(&g, &tok, model)) || (rc = cli_prompt_load(&pr, &pa, g, tok))) goto done;
    const int32_t *ids = pr.ids;
    const int64_t n = pr.n;
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, model);
        printf(", \"vocab\": \"%s\", \"pre\": \"%s\", \"n_vocab\": %d, \"n_tokens\": %lld, \"ids\": [",
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
    cli_prompt_free(&pr);
    qkv_tokenizer_free(tok);
    qkv_gguf_close(g);
    return rc;
}
