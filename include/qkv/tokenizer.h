/*
 * qkv/tokenizer.h — the tokenizer a GGUF describes, and its chat template.
 */
#ifndef QKV_TOKENIZER_H
#define QKV_TOKENIZER_H

#include "qkv/base.h"
#include "qkv/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- tokenizer */

/*
 * The tokenizer a GGUF describes (tokenizer.ggml.*), copied out of the file:
 * it outlives the qkv_gguf it was loaded from. Two vocabulary types:
 *   "gpt2"  byte-level BPE. Tokens are spelled in GPT-2's byte alphabet (a
 *           space is "Ġ"); tokenizer.ggml.merges ranks the pair merges. The
 *           text is first cut by the pre-tokenizer tokenizer.ggml.pre names.
 *   "llama" SentencePiece BPE. A space is spelled U+2581 "▁" and one is put
 *           in front of the text when tokenizer.ggml.add_space_prefix (default
 *           true); adjacent pieces merge by tokenizer.ggml.scores, highest
 *           first; a character not in the vocabulary becomes its <0xXX> tokens.
 * Token ids are int32_t in [0, n_vocab). Control and unknown tokens
 * (<|im_start|>, <s>) are recognised in text only when parse_special is set;
 * user-defined tokens always are. BOS/EOS come from tokenizer.ggml.bos_token_id
 * / eos_token_id, whether to add them from add_bos_token / add_eos_token
 * (absent: BOS for "llama" and the Llama-3 pre-tokenizer, else none).
 */
typedef struct qkv_tokenizer qkv_tokenizer;

typedef enum {
    QKV_VOCAB_BPE = 0,   /* tokenizer.ggml.model "gpt2" */
    QKV_VOCAB_SPM = 1    /* tokenizer.ggml.model "llama" */
} qkv_vocab_type;

/* How byte-level BPE text is cut before merging (tokenizer.ggml.pre). Each is a
 * hand-written matcher of the regex below (\p{L}, \p{N}: Unicode letters and
 * numbers; \s: White_Space), with "isolated" splits: every match is a piece.
 *   GPT2   "gpt2", "default" or absent:
 *          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   SMOLLM "smollm", "starcoder": every \p{N} character is a piece of its own,
 *          then GPT2 on each stretch between them (HF Digits + ByteLevel)
 *   LLAMA3 "llama-bpe", "llama3", "llama-v3" (a whole word that is a token is
 *          not merged: ignore_merges):
 *          (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   QWEN2  "qwen2": LLAMA3 with \p{N} instead of \p{N}{1,3}
 * Any other name is refused at load (QKV_ERR_UNSUPPORTED). */
typedef enum {
    QKV_PRE_NONE = 0,    /* SentencePiece: no pre-tokenizer */
    QKV_PRE_GPT2 = 1,
    QKV_PRE_SMOLLM = 2,
    QKV_PRE_LLAMA3 = 3,
    QKV_PRE_QWEN2 = 4
} qkv_pretok;

/* tokenizer.ggml.token_type values. */
typedef enum {
    QKV_TOKEN_NORMAL = 1,
    QKV_TOKEN_UNKNOWN = 2,
    QKV_TOKEN_CONTROL = 3,
    QKV_TOKEN_USER_DEFINED = 4,
    QKV_TOKEN_UNUSED = 5,
    QKV_TOKEN_BYTE = 6      /* SentencePiece <0xXX> */
} qkv_token_type;

/* Reads the tokenizer of g. QKV_ERR_FORMAT naming the key when a required key
 * (tokenizer.ggml.model, tokens; merges for "gpt2") is absent, mistyped or
 * inconsistent (more than QKV_MAX_VOCAB tokens, any
 * tokenizer.ggml.*_token_id out of range, a token type outside [0, 6], array
 * lengths differ, a merge of unknown tokens, a tokenizer.chat_template over
 * QKV_CHAT_TEMPLATE_MAX bytes); QKV_ERR_UNSUPPORTED for another model type or pre-tokenizer name;
 * QKV_ERR_NOMEM. *out is NULL on failure. */
QKV_API qkv_status qkv_tokenizer_load(qkv_tokenizer **out, const qkv_gguf *g, qkv_error *err);
QKV_API void qkv_tokenizer_free(qkv_tokenizer *t);   /* NULL is fine */

QKV_API int qkv_tokenizer_n_vocab(const qkv_tokenizer *t);
QKV_API qkv_vocab_type qkv_tokenizer_type(const qkv_tokenizer *t);
QKV_API qkv_pretok qkv_tokenizer_pretok(const qkv_tokenizer *t);
/* tokenizer.ggml.pre as stored ("smollm", "llama-bpe" ...), "default" if absent,
 * "" for "llama". */
QKV_API const char *qkv_tokenizer_pre_name(const qkv_tokenizer *t);
/* "gpt2", "smollm", "llama3" ...: the matcher's name. */
QKV_API const char *qkv_pretok_name(qkv_pretok p);
QKV_API int32_t qkv_tokenizer_bos(const qkv_tokenizer *t);   /* -1 if none */
QKV_API int32_t qkv_tokenizer_eos(const qkv_tokenizer *t);   /* -1 if none */
QKV_API int qkv_tokenizer_add_bos(const qkv_tokenizer *t);   /* 1 if tokenize adds BOS */
QKV_API int qkv_tokenizer_add_eos(const qkv_tokenizer *t);   /* 1 if tokenize adds EOS */

/* Token id's text as the vocabulary spells it ("Ġworld", "▁the", "<0x0A>"),
 * NUL-terminated, *len its length if len is not NULL; NULL if id is out of
 * range. */
QKV_API const char *qkv_token_text(const qkv_tokenizer *t, int32_t id, size_t *len);
/* The bytes token id stands for in text (" world", " the", "\n"; a control
 * token's own text, "<|im_start|>"). Not NUL-free: use *len (it may be a lone
 * byte of a UTF-8 sequence). NULL if id is out of range. */
QKV_API const char *qkv_token_piece(const qkv_tokenizer *t, int32_t id, size_t *len);
QKV_API qkv_token_type qkv_token_type_of(const qkv_tokenizer *t, int32_t id); /* 0 if out of range */
QKV_API float qkv_token_score(const qkv_tokenizer *t, int32_t id);  /* 0 if absent */
/* Id of the token spelled exactly text[0 .. len) (as qkv_token_text gives it),
 * -1 if none. */
QKV_API int32_t qkv_token_find(const qkv_tokenizer *t, const char *text, size_t len);

/* An upper bound on the ids qkv_tokenize makes from len bytes. */
QKV_API int64_t qkv_tokenize_bound(size_t len);

/* Token ids of text[0 .. len) (any bytes; invalid UTF-8 is kept byte for byte).
 *   add_special:   nonzero adds BOS / EOS as the GGUF asks (qkv_tokenizer_add_bos/eos)
 *   parse_special: nonzero recognises control tokens written in the text
 *   out_ids:       [max_ids] output (may be NULL when max_ids is 0)
 * *n receives the number of ids the text needs; if that exceeds max_ids, the
 * first max_ids are written and QKV_ERR_FULL returned; QKV_ERR_TOO_LARGE for
 * text of 256 MiB or more. A byte a "gpt2"
 * vocabulary has no token for is dropped (as HF and llama.cpp drop it); in a
 * "llama" one a character without a token or <0xXX> becomes the unknown
 * token, QKV_ERR_INVALID if there is none. The ids are those of the model's
 * own tokenizer.json (tests/fixtures/tokenizer); where transformers' rebuild
 * from GGUF departs from it (no digit split for "smollm", no ignore_merges,
 * no "▁" before a leading space), qkv follows the original, as llama.cpp does. */
QKV_API qkv_status qkv_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                                int parse_special, int32_t *out_ids, int64_t max_ids, int64_t *n,
                                qkv_error *err);

/* The text of ids: their pieces concatenated; with skip_special, control and
 * unknown tokens are left out. For "llama" vocabularies with add_space_prefix,
 * the space the first word token starts with is dropped (the one tokenize put
 * there), so detokenize(tokenize(s)) == s.
 *   out: [cap] output, NUL-terminated when cap > *n_out (may be NULL if cap is 0)
 * *n_out receives the length in bytes (without the NUL); QKV_ERR_FULL if
 * cap <= *n_out (out then holds a truncated, terminated prefix), QKV_ERR_INVALID
 * for an id out of range. */
QKV_API qkv_status qkv_detokenize(const qkv_tokenizer *t, const int32_t *ids, int64_t n_ids,
                                  int skip_special, char *out, size_t cap, size_t *n_out, qkv_error *err);

/* The pieces pre cuts text[0 .. len) into, as byte offsets: piece i is
 * text[ends[i-1] .. ends[i]) (ends[-1] = 0), in order, covering the text.
 *   ends: [max_pieces] output
 * *n receives the number of pieces; QKV_ERR_FULL if more than max_pieces. */
QKV_API qkv_status qkv_pretokenize(qkv_pretok pre, const char *text, size_t len, size_t *ends,
                                   int64_t max_pieces, int64_t *n, qkv_error *err);

/* -------------------------------------------------------------------- chat */

/* Renders one user turn (with an optional system turn) in the chat format the
 * GGUF's tokenizer.chat_template describes, ending with the assistant header
 * (add_generation_prompt). Recognised: ChatML (<|im_start|>, including a
 * default system prompt the template inserts when none is given) and Llama-3
 * (<|start_header_id|>). QKV_ERR_UNSUPPORTED for other templates,
 * QKV_ERR_FORMAT if the file has none.
 *   *out: malloc'd NUL-terminated text (caller frees); tokenize it with
 *   parse_special set. */
QKV_API qkv_status qkv_chat_format(char **out, const qkv_gguf *g, const char *system, const char *user,
                                   qkv_error *err);
/* The longest tokenizer.chat_template accepted, in bytes (real ones are a few
 * KiB); qkv_tokenizer_load and qkv_chat_format refuse a longer one. */
#define QKV_CHAT_TEMPLATE_MAX (1 << 20)

/* The tokens of a rendered chat (qkv_chat_format's text): control tokens
 * recognised (parse_special), and BOS added as the tokenizer asks when
 * add_special is set, unless the text already starts with the BOS token (the
 * template's own). Arguments and errors as qkv_tokenize. */
QKV_API qkv_status qkv_chat_tokenize(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                                     int32_t *out_ids, int64_t max_ids, int64_t *n, qkv_error *err);

/* 1 if id ends a generated answer: the tokenizer's EOS, or an end-of-turn
 * control token (<|im_end|>, <|eot_id|>, <|end_of_text|>, <|endoftext|>, </s>). */
QKV_API int qkv_token_ends_turn(const qkv_tokenizer *t, int32_t id);

#ifdef __cplusplus
}
#endif

#endif /* QKV_TOKENIZER_H */
