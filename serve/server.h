/*
 * server.h — what the handlers share (serve/server.c routes to them): the
 * server's model (its GGUF, tokenizer and configuration; the weights each
 * session's model maps), the sessions table, and the handlers by concern:
 * api_sessions.c (model, sessions, generate), api_rows.c (attention rows,
 * grid, rows, next-token, edit), api_probes.c (lens, patch), assets.c (the
 * embedded page). Each handler answers the request itself and returns the
 * status it sent.
 */
#ifndef QKV_SERVE_SERVER_H
#define QKV_SERVE_SERVER_H

#include "serve.h"
#include "sessions.h"
#include "http.h"

#include <civetweb.h>
#include <signal.h>

typedef struct {
    serve_opts o;
    qkv_weights *weights;       /* one copy, shared by every session's model */
    const qkv_gguf *gguf;       /* the weights' */
    qkv_tokenizer *tok;
    qkv_model_config cfg;
    serve_table table;
    volatile sig_atomic_t stopping; /* SIGINT/SIGTERM came: running prefills stop */
    volatile sig_atomic_t listening; /* CivetWeb started (its log lines go to stderr from then on) */
} serve_server;

/* Positions one forward call of a session runs (its model's n_batch): the
 * prefill's chunk, and the unit of its progress events. */
#define SERVE_CHUNK 512
/* Positions a session keeps free for generation beyond its prompt (its
 * cache is the prompt + this, within --ctx). */
#define SERVE_GEN_ROOM 256
/* The overview's bins per side at most (block doubles past them): L x Hq x
 * 128^2 floats a session (Gemma 3 270M: 4.7 MB; SmolLM2: 17.7 MB). */
#define SERVE_OVERVIEW_BINS 128
/* Top tokens a response lists at most (k). */
#define SERVE_MAX_K 100

/* ------------------------------------------------------------ handlers */
int serve_api_model(struct mg_connection *c, serve_server *sv);
int serve_api_tokenize(struct mg_connection *c, serve_server *sv);
int serve_api_sessions_create(struct mg_connection *c, serve_server *sv);
int serve_api_sessions_list(struct mg_connection *c, serve_server *sv);
/* the handlers of one session: s holds a reference and its mutex is held */
int serve_api_session_get(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_generate(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_attention(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_grid(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_rows(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_next(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_overview(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_edit(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_lens(struct mg_connection *c, serve_server *sv, serve_session *s);
int serve_api_patch(struct mg_connection *c, serve_server *sv, serve_session *s);
/* GET / and /assets/NAME; 404 for a name not in the embedded table */
int serve_assets(struct mg_connection *c, const char *path);

/* ------------------------------------------------------ shared pieces */
/* The session as JSON on one line: {"id", "n_tokens", "n_ctx", "bytes",
 * "tokens": [{"id", "piece"}], "top": [...] (next-token top 10)}. */
void serve_session_json(FILE *f, const serve_server *sv, const serve_session *s);
/* The top k tokens of logits [V]: [{"id", "piece", "p", "logit"}], most likely first (lower id on ties). */
void serve_top_json(FILE *f, const serve_server *sv, const float *logits, int k);
/* Appends ids[0..n) to s (its pieces too) through the model in chunks of
 * SERVE_CHUNK, keeping s->logits the last token's and pooling the rows into
 * s->overview; progress(user, done, total) after each layer of each chunk
 * (NULL: none), nonzero to stop. 0, or -1 with msg (the session is then
 * unusable). */
int serve_session_append(serve_server *sv, serve_session *s, const int32_t *ids, int n,
                         int (*progress)(void *user, int done, int total), void *user, char *msg, size_t cap);
/* A model of its own for a probe that runs a whole sequence of n tokens
 * from position 0 (lens, patch), over the server's weights: the session's
 * cache is left as it is. Its state and the probe's own probe_bytes (what,
 * e.g. "the lens's residuals and outputs") may not pass --max-mib together
 * (400 naming both). NULL with the status sent. */
qkv_model *serve_scratch_model(struct mg_connection *c, serve_server *sv, int n, int64_t probe_bytes, const char *what);
/* The body as a cJSON object (400 sent otherwise: not JSON, not an object). */
struct cJSON;
int serve_body_json(struct mg_connection *c, serve_server *sv, struct cJSON **out);
/* A prompt's token ids from a request object: "text" (+ "chat", "bos") or
 * "tokens"; with prefix "corrupt": "corrupt" / "corrupt_tokens". 0, or the
 * status sent (400). *ids malloc'd. */
int serve_prompt_ids(struct mg_connection *c, serve_server *sv, const struct cJSON *req, const char *text_key,
                     const char *tokens_key, int32_t **ids, int *n);
/* serve_prompt_ids of the request's body ("text" / "tokens"). */
int serve_body_prompt(struct mg_connection *c, serve_server *sv, int32_t **ids, int *n);
/* The readable label of a token (malloc'd; NULL when out of memory). */
char *serve_piece(const serve_server *sv, int32_t id);

#endif /* QKV_SERVE_SERVER_H */
