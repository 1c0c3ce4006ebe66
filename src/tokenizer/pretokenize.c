/*
 * pretokenize.c — the pre-tokenizer splits of byte-level BPE vocabularies, as
 * hand-written matchers of the regexes in qkv/tokenizer.h (no regex library), plus
 * lenient UTF-8 and the character classes they test.
 *
 * Each matcher answers one question: at code point i of a stretch that ends
 * at `end`, how far does the regex's first matching alternative reach? The
 * alternatives are tried in the regex's order with its greedy-then-backtrack
 * semantics worked out by hand (noted at each one). The split is "isolated":
 * match after match from the start of the stretch. Every code point is a
 * letter, a number, White_Space or none of these, and each regex has an
 * alternative for each, so a match always exists and the pieces cover the text.
 *
 * Not here: the special-token cut (tokenizer.c does that first, and hands
 * each stretch between special tokens here separately, as HF and llama.cpp do).
 */
#include "qkv/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ UTF-8 */

int tokenizer_utf8_decode(uint32_t *cp, const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        goto invalid;
    }
    if ((size_t)len > n) goto invalid;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) goto invalid;
        v = (v << 6) | (s[k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto invalid;
    *cp = v;
    return len;
invalid:
    *cp = QKV_UCD_INVALID_BASE + c;
    return 1;
}

int tokenizer_utf8_encode(unsigned char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The White_Space property (PropList.txt), which is what \s means to
 * Oniguruma and to llama.cpp. Python's str.isspace differs (it adds
 * U+001C..001F and drops nothing), so this list is written out. */
static int is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int tokenizer_ucd_class(uint32_t cp) {
    if (is_white_space(cp)) return QKV_UCD_SPACE;
    /* binary search for the last range with lo <= cp */
    int lo = 0, hi = qkv_ucd_n_ranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (qkv_ucd_ranges[mid].lo <= cp) lo = mid + 1;
        else hi = mid - 1;
    }
    if (hi >= 0 && cp <= qkv_ucd_ranges[hi].hi) return qkv_ucd_ranges[hi].cls;
    return 0;
}

/* --------------------------------------------------------------- matchers */

/* A stretch of decoded text: code points and their classes. */
typedef struct {
    const uint32_t *cp;
    const uint8_t *cls;
} chars;

#define IS_L(c, i) ((c)->cls[i] & QKV_UCD_LETTER)
#define IS_N(c, i) ((c)->cls[i] & QKV_UCD_NUMBER)
#define IS_S(c, i) ((c)->cls[i] & QKV_UCD_SPACE)
/* [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls, invalid bytes */
#define IS_OTHER(c, i) ((c)->cls[i] == 0)
#define IS_RN(c, i) ((c)->cp[i] == '\r' || (c)->cp[i] == '\n')

static int64_t run(const chars *c, int64_t i, int64_t end, int flag) {
    while (i < end && (c->cls[i] & flag)) i++;
    return i;
}

static int64_t run_other(const chars *c, int64_t i, int64_t end) {
    while (i < end && IS_OTHER(c, i)) i++;
    return i;
}

static uint32_t lower_ascii(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

/* 's|'t|'re|'ve|'m|'ll|'d, case-sensitive or (?i:...) ASCII-folded. Returns
 * the end or -1. Under (?i:) Oniguruma also folds U+017F (long s) to s and
 * U+212A (Kelvin sign) to k; only the former can matter here. */
static int64_t contraction(const chars *c, int64_t i, int64_t end, int fold) {
    if (c->cp[i] != '\'' || i + 1 >= end) return -1;
    uint32_t a = c->cp[i + 1];
    if (fold) a = (a == 0x17F) ? 's' : lower_ascii(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= end) return -1;
    uint32_t b = c->cp[i + 2];
    if (fold) b = (b == 0x17F) ? 's' : lower_ascii(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return -1;
}

/* \s+(?!\S)|\s+ at a White_Space code point: greedy \s+ takes the whole run;
 * the lookahead then holds only at the end of the stretch or, after backing
 * off one, before the run's last space. A run of one before a non-space
 * falls through to the plain \s+. */
static int64_t space_run(const chars *c, int64_t i, int64_t end) {
    int64_t k = run(c, i, end, QKV_UCD_SPACE);
    if (k == end) return k;
    return (k - i >= 2) ? k - 1 : k;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static int64_t match_gpt2(const chars *c, int64_t i, int64_t end) {
    int64_t k = contraction(c, i, end, 0);
    if (k >= 0) return k;
    /* " ?X+": the optional space is a literal U+0020 and is only kept when
     * an X follows it; otherwise ' ?' backs off to empty and X+ must start at i. */
    int64_t j = (c->cp[i] == ' ' && i + 1 < end) ? i + 1 : i;
    if (IS_L(c, j)) return run(c, j, end, QKV_UCD_LETTER);
    if (IS_L(c, i)) return run(c, i, end, QKV_UCD_LETTER);
    if (IS_N(c, j)) return run(c, j, end, QKV_UCD_NUMBER);
    if (IS_N(c, i)) return run(c, i, end, QKV_UCD_NUMBER);
    if (IS_OTHER(c, j)) return run_other(c, j, end);
    if (IS_OTHER(c, i)) return run_other(c, i, end);
    return space_run(c, i, end);
}

/* Llama-3 (digits = 3) and Qwen2 (digits = 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int64_t match_llama3(const chars *c, int64_t i, int64_t end, int digits) {
    int64_t k = contraction(c, i, end, 1);
    if (k >= 0) return k;
    /* [^\r\n\p{L}\p{N}]?\p{L}+: one leading non-letter, non-number that is
     * not CR/LF (a space, a tab, punctuation) joins the word after it. */
    if (!IS_L(c, i) && !IS_N(c, i) && !IS_RN(c, i) && i + 1 < end && IS_L(c, i + 1))
        return run(c, i + 1, end, QKV_UCD_LETTER);
    if (IS_L(c, i)) return run(c, i, end, QKV_UCD_LETTER);
    if (IS_N(c, i)) {
        k = i;
        while (k < end && k - i < digits && IS_N(c, k)) k++;
        return k;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]*: punctuation, then any CR/LF right after it. */
    int64_t j = (c->cp[i] == ' ' && i + 1 < end && IS_OTHER(c, i + 1)) ? i + 1 : i;
    if (IS_OTHER(c, j)) {
        k = run_other(c, j, end);
        while (k < end && IS_RN(c, k)) k++;
        return k;
    }
    /* \s*[\r\n]+: greedy \s* takes the whole space run and backs off to its
     * last CR/LF, which [\r\n]+ then takes: the match ends just after it. */
    int64_t r = run(c, i, end, QKV_UCD_SPACE), last = -1;
    for (k = i; k < r; k++)
        if (IS_RN(c, k)) last = k;
    if (last >= 0) return last + 1;
    return space_run(c, i, end);
}

/* --------------------------------------------------------------- the split */

/* Appends the pieces of chars [from, end) matched by pre; piece ends are in
 * code point indices. Returns the new count. */
static int64_t split_stretch(int64_t *ends, int64_t n, const chars *c, int64_t from, int64_t end,
                             qkv_pretok pre) {
    for (int64_t i = from; i < end;) {
        int64_t k;
        switch (pre) {
        case QKV_PRE_LLAMA3: k = match_llama3(c, i, end, 3); break;
        case QKV_PRE_QWEN2: k = match_llama3(c, i, end, 1); break;
        default: k = match_gpt2(c, i, end); break;
        }
        ends[n++] = k;
        i = k;
    }
    return n;
}

const char *qkv_pretok_name(qkv_pretok p) {
    switch (p) {
    case QKV_PRE_NONE: return "none";
    case QKV_PRE_GPT2: return "gpt2";
    case QKV_PRE_SMOLLM: return "smollm";
    case QKV_PRE_LLAMA3: return "llama3";
    case QKV_PRE_QWEN2: return "qwen2";
    }
    return "?";
}

qkv_status qkv_pretokenize(qkv_pretok pre, const char *text, size_t len, size_t *ends,
                           int64_t max_pieces, int64_t *n, qkv_error *err) {
    if (n) *n = 0;
    if (!text && len) return util_fail(err, QKV_ERR_INVALID, "pretokenize: text is NULL");
    if (!n || (max_pieces > 0 && !ends) || max_pieces < 0)
        return util_fail(err, QKV_ERR_INVALID, "pretokenize: bad output arguments");
    if (pre < QKV_PRE_NONE || pre > QKV_PRE_QWEN2)
        return util_fail(err, QKV_ERR_INVALID, "pretokenize: unknown pre-tokenizer %d", (int)pre);
    if (len == 0) return QKV_OK;

    const unsigned char *s = (const unsigned char *)text;
    uint32_t *cp = malloc(len * sizeof *cp);
    uint8_t *cls = malloc(len);
    size_t *off = malloc((len + 1) * sizeof *off);   /* byte offset of each code point */
    int64_t *pe = malloc(len * sizeof *pe);          /* piece ends, code point indices */
    if (!cp || !cls || !off || !pe) {
        free(cp), free(cls), free(off), free(pe);
        return util_fail(err, QKV_ERR_NOMEM, "pretokenize: out of memory for %zu bytes", len);
    }
    int64_t nc = 0;
    for (size_t b = 0; b < len;) {
        off[nc] = b;
        b += (size_t)tokenizer_utf8_decode(&cp[nc], s + b, len - b);
        cls[nc] = (uint8_t)tokenizer_ucd_class(cp[nc]);
        nc++;
    }
    off[nc] = len;

    chars c = {cp, cls};
    int64_t np = 0;
    if (pre == QKV_PRE_NONE) {
        pe[np++] = nc;
    } else if (pre == QKV_PRE_SMOLLM) {
        /* HF Digits(individual_digits): every \p{N} a piece of its own; GPT-2
         * on each stretch between them, which ends where the stretch ends. */
        int64_t from = 0;
        for (int64_t i = 0; i <= nc; i++) {
            if (i < nc && !IS_N(&c, i)) continue;
            np = split_stretch(pe, np, &c, from, i, QKV_PRE_GPT2);
            if (i < nc) pe[np++] = i + 1;
            from = i + 1;
        }
    } else {
        np = split_stretch(pe, np, &c, 0, nc, pre);
    }

    *n = np;
    int64_t w = np < max_pieces ? np : max_pieces;
    for (int64_t k = 0; k < w; k++) ends[k] = off[pe[k]];
    free(cp), free(cls), free(off), free(pe);
    if (np > max_pieces)
        return util_fail(err, QKV_ERR_FULL, "pretokenize: %lld pieces, room for %lld",
                        (long long)np, (long long)max_pieces);
    return QKV_OK;
}
