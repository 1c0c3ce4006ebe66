/*
 * replay.h — recomputing a session's attention rows and edited next-token
 * logits from its KV cache (serve/replay.c). Rows are read through
 * hook_pattern (qkv_pattern_weights: the forward's own rotated queries and
 * LSE, no n x n table) while the positions from the first asked-for query on
 * are run again; the run leaves the cache holding the same sequence.
 */
#ifndef QKV_SERVE_REPLAY_H
#define QKV_SERVE_REPLAY_H

#include "sessions.h"

#include <stddef.h>

/* Weights of query rows [q0, q0 + nq) over keys [k0, k0 + nk) of one layer,
 * for one head, the mean of the layer's heads (head QKV_ALL), or every
 * head (out [Hq, nq, nk] when all_heads). Keys after a row's query are 0.
 *   out: [nq, nk] (or [Hq, nq, nk])
 * 0 <= q0, q0 + nq <= s->n, nq <= 256, 0 <= k0, k0 + nk <= s->n. 0, or -1 with msg. */
int serve_rows(serve_session *s, float *out, int layer, int head, int all_heads, int q0, int nq, int k0, int nk,
               char *msg, size_t cap);
/* Row q of every layer and head: out [L, Hq, q + 1]. 0, or -1 with msg. */
int serve_rows_all_layers(serve_session *s, float *out, int q, char *msg, size_t cap);
/* The last position run again under opts (zeroed heads, hidden keys): its
 * logits [V] into after, and (layer >= 0) the last query's row in that layer
 * for head (QKV_ALL: the mean) under the edit (row_after [n]) and without it
 * (row_before [n]). The session's cache and logits are restored. 0, or -1 with msg. */
int serve_edit_last(serve_session *s, float *after, const qkv_forward_opts *opts, int layer, int head,
                    float *row_before, float *row_after, char *msg, size_t cap);

#endif /* QKV_SERVE_REPLAY_H */
