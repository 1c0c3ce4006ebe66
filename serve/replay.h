/*
 * replay.h — a session's attention rows and edited next-token logits, read
 * from its KV cache (serve/replay.c): each query position is run again alone
 * over the rows before it (qkv_model_replay, which leaves the sequence as it
 * was; qkv_explore_row(s) for the plain rows), the row read through
 * qkv_pattern_weights (the forward's own rotated query and LSE; no n x n
 * table). A row of layer l replays layers 0..l only.
 */
#ifndef QKV_SERVE_REPLAY_H
#define QKV_SERVE_REPLAY_H

#include "sessions.h"

#include <stddef.h>

/* Weights of query rows [q0, q0 + nq) over keys [k0, k0 + nk) of one layer,
 * for one head or the mean of the layer's heads (head QKV_ALL). Keys after a
 * row's query are 0.
 *   out: [nq, nk]
 * 0 <= q0, q0 + nq <= s->n, 0 <= k0, k0 + nk <= s->n. 0, or -1 with msg. */
int serve_rows(serve_session *s, float *out, int layer, int head, int q0, int nq, int k0, int nk, char *msg, size_t cap);
/* Row q of every layer and head: out [L, Hq, q + 1]. 0, or -1 with msg. */
int serve_rows_all_layers(serve_session *s, float *out, int q, char *msg, size_t cap);
/* The last position replayed under opts (zeroed heads, hidden keys): its
 * logits [V] into after, and (layer >= 0) the last query's row in that layer
 * for head (QKV_ALL: the mean) under the edit (row_after [n]) and without it
 * (row_before [n]). The session is left as it was. 0, or -1 with msg. */
int serve_edit_last(serve_session *s, float *after, const qkv_forward_opts *opts, int layer, int head,
                    float *row_before, float *row_after, char *msg, size_t cap);

#endif /* QKV_SERVE_REPLAY_H */
