/*
 * needle_prompt.c — the prompts of a needle-in-a-haystack test: haystack
 * tokens cut to fit a length, a needle sentence put in at a sentence
 * boundary at a depth, the question after it, all in the model's chat
 * template (or as plain text, for a base model); and where the needle's
 * tokens are in the result. The answer's scoring (substring, as RULER
 * does) is here too. Nothing is run.
 */
#include "qkv/probe.h"
#include "util/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- text */

/* 1 if a sentence starts at text[i]: after ". " (or '!', '?', any
 * whitespace run after the mark) or after a blank line; 1 at 0. */
static int sentence_start(const char *text, size_t i) {
    if (i == 0) return 1;
    if (!isspace((unsigned char)text[i - 1]) || isspace((unsigned char)text[i])) return 0;
    size_t j = i;
    int newlines = 0;
    while (j > 0 && isspace((unsigned char)text[j - 1])) newlines += text[--j] == '\n';
    if (newlines >= 2) return 1;
    return j > 0 && (text[j - 1] == '.' || text[j - 1] == '!' || text[j - 1] == '?');
}

size_t qkv_needle_offset(const char *text, size_t len, double depth) {
    if (!(depth < 100)) return len;
    size_t i = depth > 0 ? (size_t)(depth / 100 * (double)len) : 0;
    while (i > 0 && !sentence_start(text, i)) i--;
    return i;
}

long qkv_needle_match(const char *answer, const char *expected) {
    const size_t n = strlen(expected);
    if (n == 0) return -1;
    for (const char *a = answer; *a; a++) {
        size_t k = 0;
        while (k < n && a[k] && tolower((unsigned char)a[k]) == tolower((unsigned char)expected[k])) k++;
        if (k == n) return (long)(a - answer);
    }
    return -1;
}

/* ------------------------------------------------------------- prompts */

/* The user turn for b haystack tokens: their text with the needle at the
 * depth's sentence boundary, "\n\n", the question. *needle_at: the
 * needle's byte offset in it. NULL if out of memory or detokenize fails. */
static char *user_turn(size_t *needle_at, const qkv_tokenizer *t, const int32_t *hay, int64_t n_hay,
                       const qkv_needle_text *nt, int64_t b, double depth, qkv_error *err) {
    int32_t *ids = malloc((size_t)(b > 0 ? b : 1) * sizeof *ids); /* [b] the haystack, repeated */
    char *hs = NULL, *user = NULL;
    size_t cap = 64, len = 0;
    if (!ids) goto nomem;
    for (int64_t i = 0; i < b; i++) ids[i] = hay[i % n_hay];
    for (;;) { /* the text's length is not known before */
        if (!(hs = malloc(cap))) goto nomem;
        qkv_status st = qkv_detokenize(t, ids, b, 1, hs, cap, &len, err);
        if (st == QKV_OK) break;
        free(hs);
        hs = NULL;
        if (st != QKV_ERR_FULL) goto fail;
        cap = len + 1;
    }
    const size_t at = qkv_needle_offset(hs, len, depth), nl = strlen(nt->needle), ql = strlen(nt->question);
    const int space_before = at > 0 && !isspace((unsigned char)hs[at - 1]);
    const int space_after = at < len && !isspace((unsigned char)hs[at]);
    if (!(user = malloc(len + nl + ql + 5))) goto nomem;
    char *w = user;
    memcpy(w, hs, at), w += at;
    if (space_before) *w++ = ' ';
    *needle_at = at + (size_t)space_before;
    memcpy(w, nt->needle, nl), w += nl;
    if (space_after) *w++ = ' ';
    memcpy(w, hs + at, len - at), w += len - at;
    memcpy(w, "\n\n", 2), w += 2;
    memcpy(w, nt->question, ql + 1);
    free(ids);
    free(hs);
    return user;
nomem:
    util_fail(err, QKV_ERR_NOMEM, "needle: out of memory");
fail:
    free(ids);
    free(hs);
    return NULL;
}

/* out <- the prompt for b haystack tokens (the chat template's, or the
 * user turn alone when plain), the needle's token span found from its bytes. */
static qkv_status build(qkv_needle_prompt *out, const qkv_gguf *g, const qkv_tokenizer *t, const int32_t *hay,
                        int64_t n_hay, const qkv_needle_text *nt, int64_t b, double depth, qkv_error *err) {
    size_t needle_at = 0;
    char *chat = NULL, *user = user_turn(&needle_at, t, hay, n_hay, nt, b, depth, err);
    if (!user) return err ? err->status : QKV_ERR_NOMEM;
    qkv_status st = nt->plain ? QKV_OK : qkv_chat_format(&chat, g, nt->system, user, err);
    if (!st && nt->plain && !(chat = strdup(user))) st = util_fail(err, QKV_ERR_NOMEM, "needle: out of memory");
    if (st) {
        free(user);
        return st;
    }
    const size_t len = strlen(chat);
    /* the needle's bytes in the chat text: the user turn is there verbatim */
    const char *u = strstr(chat, user);
    const size_t a = u ? (size_t)(u - chat) + needle_at : 0, e = a + strlen(nt->needle);
    free(user);
    if (!u) {
        free(chat);
        return util_fail(err, QKV_ERR_UNSUPPORTED, "needle: the chat template changed the user's text");
    }
    const int64_t bound = qkv_tokenize_bound(len);
    int64_t n = 0;
    int32_t *ids = malloc((size_t)bound * sizeof *ids);
    if (!ids) st = util_fail(err, QKV_ERR_NOMEM, "needle: out of memory");
    else st = qkv_chat_tokenize(t, chat, len, 1, ids, bound, &n, err);
    free(chat);
    if (st) {
        free(ids);
        return st;
    }
    if (n > 0x7fffffff) {
        free(ids);
        return util_fail(err, QKV_ERR_TOO_LARGE, "needle: a prompt of %lld tokens", (long long)n);
    }
    /* Token i covers bytes [off, off + piece length) of the text the pieces
     * spell; that text is the chat text, less a BOS the tokenizer added in
     * front and a prefix space a "llama" vocabulary adds: both at the start,
     * so offsets are counted back from the end. */
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t pl = 0;
        qkv_token_piece(t, ids[i], &pl);
        total += pl;
    }
    const int64_t lead = total > len ? (int64_t)(total - len) : 0;
    int first = -1, last = -1;
    int64_t off = -lead; /* token i's first byte in the chat text */
    for (int64_t i = 0; i < n; i++) {
        size_t pl = 0;
        qkv_token_piece(t, ids[i], &pl);
        if (off < (int64_t)e && off + (int64_t)pl > (int64_t)a) {
            if (first < 0) first = (int)i;
            last = (int)i;
        }
        off += (int64_t)pl;
    }
    *out = (qkv_needle_prompt){.ids = ids, .n = (int)n, .needle_pos = first, .needle_len = last - first + 1,
                               .haystack_tokens = (int)b};
    return QKV_OK;
}

qkv_status qkv_needle_prompt_build(qkv_needle_prompt *out, const qkv_gguf *g, const qkv_tokenizer *t,
                                   const int32_t *hay, int64_t n_hay, const qkv_needle_text *nt, int length,
                                   double depth, qkv_error *err) {
    memset(out, 0, sizeof *out);
    if (!g || !t || !hay || !nt || !nt->needle || !nt->question)
        return util_fail(err, QKV_ERR_INVALID, "needle: a NULL argument");
    if (n_hay < 1) return util_fail(err, QKV_ERR_INVALID, "needle: the haystack has no tokens");
    if (!(depth >= 0 && depth <= 100)) return util_fail(err, QKV_ERR_INVALID, "needle: depth %g outside [0, 100]", depth);
    if (nt->max_answer < 1) return util_fail(err, QKV_ERR_INVALID, "needle: max_answer %d < 1", nt->max_answer);
    if (!nt->needle[0]) return util_fail(err, QKV_ERR_INVALID, "needle: the needle is empty");
    if (nt->plain && nt->system)
        return util_fail(err, QKV_ERR_INVALID, "needle: a system turn needs the chat template (plain is set)");
    /* the template, needle and question alone fix the overhead; then as many
     * haystack tokens as fit, a few fewer when tokens merge differently */
    qkv_needle_prompt p;
    qkv_status st = build(&p, g, t, hay, n_hay, nt, 0, depth, err);
    if (st) return st;
    const int64_t least = (int64_t)p.n + nt->max_answer;
    qkv_needle_prompt_free(&p);
    if (least > length)
        return util_fail(err, QKV_ERR_INVALID,
                        "needle: a length of %d tokens cannot hold the %sneedle, question and %d answer tokens "
                        "(needs %lld)",
                        length, nt->plain ? "" : "template, ", nt->max_answer, (long long)least);
    int64_t b = length - least;
    for (int tries = 0; tries < 16; tries++) {
        if ((st = build(&p, g, t, hay, n_hay, nt, b, depth, err))) return st;
        const int64_t over = (int64_t)p.n + nt->max_answer - length;
        if (over <= 0) {
            if (p.needle_pos < 0) {
                qkv_needle_prompt_free(&p);
                return util_fail(err, QKV_ERR_INVALID, "needle: the needle's tokens were not found in the prompt");
            }
            *out = p;
            return QKV_OK;
        }
        qkv_needle_prompt_free(&p);
        b = b > over ? b - over : 0;
    }
    return util_fail(err, QKV_ERR_INVALID, "needle: no haystack cut fits %d tokens", length);
}

void qkv_needle_prompt_free(qkv_needle_prompt *p) {
    if (!p) return;
    free(p->ids);
    memset(p, 0, sizeof *p);
}
