/*
 * qkv_mpi.h — libqkv_mpi: context-parallel attention over MPI, built on
 * libqkv's attention plan (include/qkv.h keeps every convention: shapes
 * outermost first, bottom-right causal alignment, LSE -inf and O = 0 for a
 * row that sees nothing, outputs first).
 *
 * One sequence is split across the ranks of a communicator by rows. Each
 * rank holds its rows of Q, K and V; K/V blocks travel around the ring
 * (rank r sends to r + 1, receives from r - 1) with non-blocking sends and
 * receives while the rank attends to the block it already has, and the
 * partial (O, LSE) of every block are merged exactly by log-sum-exp:
 *   m = max(l1, l2), LSE = m + log(e^(l1-m) + e^(l2-m)),
 *   O = (e^(l1-m) O1 + e^(l2-m) O2) / (e^(l1-m) + e^(l2-m))
 * (ring attention, Liu et al. 2023, arXiv:2310.01889; the merge is
 * flash-decoding's). A block no row of a rank can see under the mask is not
 * computed, and a block that no rank further along the ring needs is not
 * sent (causal contiguous: block b stops at rank P-1; a window W shorter than
 * a block: after one hop; the sinks' block goes all the way round).
 *
 * Every wait is bounded (qkv_cp_params.timeout_s): a rank that died or
 * stalls gives QKV_ERR_IO naming the peer and what was awaited, never a
 * hang; the communicator then has requests in flight and the caller should
 * MPI_Abort. Every rank must make the same call (the same descriptor and
 * parameters); the library checks this collectively and all ranks return
 * the same status, but for QKV_ERR_IO (a timeout or an MPI error), which
 * only the ranks that saw it return.
 */
#ifndef QKV_MPI_H
#define QKV_MPI_H

#include "qkv.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the rows of a sequence of n rows are laid out over P ranks.
 *   CONTIGUOUS  rank r holds one run of rows; the first n % P ranks one row
 *               more (n >= P).
 *   ZIGZAG      the rows cut into 2P runs as CONTIGUOUS cuts them; rank r
 *               holds runs r and 2P-1-r, an early and a late one, so every
 *               rank has about the same causal work (n >= 2P). */
typedef enum { QKV_CP_CONTIGUOUS = 0, QKV_CP_ZIGZAG = 1 } qkv_cp_layout;

/* Rows of one rank: n_seg runs (1 or 2) of global rows, held in this order. */
typedef struct {
    int n_seg;
    int start[2], len[2];  /* run s: global rows start[s] .. start[s] + len[s] - 1 */
    int total;             /* len[0] + ... : the rank's local row count */
} qkv_cp_rows;

/* The rows rank `rank` of n_ranks holds of a sequence of n rows.
 * QKV_ERR_INVALID if n is shorter than the layout needs (n < P, or < 2P for
 * ZIGZAG) or rank is outside [0, n_ranks). */
qkv_status qkv_cp_rows_of(qkv_cp_rows *out, int n, int n_ranks, int rank, qkv_cp_layout layout,
                          qkv_error *err);

/* A rank's rows out of a whole array and back, for whoever scatters and
 * gathers (qkv-mpi attend's rank 0):
 *   whole: [H, L, X] f32, L = the sequence's rows (X = D, or 1 for LSE)
 *   part:  [H, rows->total, X] f32, the rank's rows in rows' order */
void qkv_cp_rows_take(float *part, const float *whole, int H, int L, int X, const qkv_cp_rows *rows);
void qkv_cp_rows_put(float *whole, const float *part, int H, int L, int X, const qkv_cp_rows *rows);

/* Time spent by one call (seconds, this rank) and what it moved. */
typedef struct {
    double total_s;         /* the whole call */
    double compute_s;       /* local attention and merges */
    double wait_s;          /* blocked in bounded waits after the compute (transfer not hidden) */
    int64_t bytes_sent;     /* K/V bytes this rank sent */
    int64_t bytes_received; /* K/V bytes this rank received */
    int blocks_computed;    /* key blocks this rank attended to (its own included) */
    int blocks_sent, blocks_received;
} qkv_cp_stats;

/* Zero is every field's default. */
typedef struct {
    qkv_cp_layout layout;   /* qkv_cp_attention only */
    double timeout_s;       /* the longest any one wait may take; 0 means 60 s */
    qkv_cp_stats *stats;    /* NULL, or receives this rank's figures */
} qkv_cp_params;

/*
 * Context-parallel attention of one sequence. d is the GLOBAL call
 * (q_len = Lq, kv_len = Lk of the whole sequence, masks in global key
 * indices, exclusions included); query row i sits at position Lk - Lq + i
 * as in qkv_attn. With Q rows R_q = qkv_cp_rows_of(Lq, P, rank, layout)
 * and K rows R_k = qkv_cp_rows_of(Lk, ...):
 *   o:   [Hq, R_q.total, D]   f32 output, this rank's rows in R_q order
 *   lse: [Hq, R_q.total]      f32 output, may be NULL
 *   q:   [Hq, R_q.total, D]   f32
 *   k:   [Hkv, R_k.total, D]  d->kv_dtype, dense (d->kv_head_stride 0)
 *   v:   [Hkv, R_k.total, D]  same layout
 * Equals qkv_attn on the whole arrays up to float rounding of the
 * merges. p may be NULL (contiguous, 60 s). Collective over comm.
 */
qkv_status qkv_cp_attention(float *o, float *lse, const float *q, const void *k, const void *v,
                            const qkv_attn_desc *d, MPI_Comm comm, const qkv_cp_params *p,
                            qkv_error *err);

/* One rank's part of a KV cache sharded by position: keys start .. start +
 * len - 1 (len may be 0). The shards of all ranks, in rank order, tile
 * [0, Lk) without gaps. */
typedef struct {
    const void *k, *v;      /* [Hkv, len, D] in d->kv_dtype, heads d->kv_head_stride apart (0: dense) */
    int start, len;
} qkv_cp_kv_shard;

/*
 * Decode against a sharded KV cache (flash-decoding across machines): every
 * rank attends q to its shard, and the partial (O, LSE) are merged by one
 * all-reduce with the log-sum-exp operator, so every rank gets the result.
 * d is the global call (kv_len = Lk of the whole cache, Lq <= QKV_DECODE_MAX_Q;
 * rows at positions Lk - Lq + i).
 *   o:   [Hq, Lq, D] f32 output (every rank)    lse: [Hq, Lq] or NULL
 *   q:   [Hq, Lq, D] f32, the same on every rank
 * p->layout is not read. Collective over comm.
 */
qkv_status qkv_cp_decode(float *o, float *lse, const float *q, const qkv_cp_kv_shard *shard,
                         const qkv_attn_desc *d, MPI_Comm comm, const qkv_cp_params *p, qkv_error *err);

/*
 * A model whose sequence is split across the ranks (weights on every rank):
 * the prompt's rows are cut as CONTIGUOUS cuts them, each rank runs the
 * model on its rows at their global positions, and every layer's attention
 * is qkv_cp_attention over the ring with the layer's own mask and soft-cap
 * (causal, or a sliding layer's window: a block no row of a rank reaches is
 * neither sent to it nor computed there). Every family runs so: QK-norm,
 * biases and RoPE happen in each rank's model before the ring. Decode: every
 * rank runs the new token (the same on all), the last rank keeps its K/V,
 * and each layer attends with qkv_cp_decode over the sharded cache (the
 * layer's mask and soft-cap again). m is made by the caller on every rank
 * (qkv_weights_open, then qkv_model_new over them), with n_ctx >= its rows of the prompt + the tokens
 * to generate + 1, and a full cache in every layer (swa_cache 0: a rank's
 * rows stay at their global positions for the sharded decode;
 * QKV_ERR_UNSUPPORTED otherwise). Nothing is installed on m: each forward
 * call passes its own qkv_forward_opts (the attention replacement, the
 * rank's RoPE offset); m's KV cache is this object's while it lives. p->stats
 * (may be NULL) receives the ring's figures of the last prefill summed over
 * the layers. Every call is collective over comm.
 */
typedef struct qkv_cp_model qkv_cp_model;
qkv_status qkv_cp_model_init(qkv_cp_model **out, qkv_model *m, MPI_Comm comm, const qkv_cp_params *p, qkv_error *err);
void qkv_cp_model_free(qkv_cp_model *cm);   /* NULL is fine; m stays open */
/* Prefill of tokens [n] (the same array on every rank, n >= P) into an
 * empty model.
 *   rows_logits: [R.total, V] this rank's rows (qkv_cp_rows_of(n, P, rank,
 *                CONTIGUOUS)), or NULL
 *   last:        [V] the logits of token n-1, on every rank */
qkv_status qkv_cp_model_prefill(qkv_cp_model *cm, float *rows_logits, float *last, const int32_t *tokens, int n,
                                qkv_error *err);
/* One decode step of token (the same on every rank) at the next global
 * position; logits: [V] on every rank. */
qkv_status qkv_cp_model_decode(qkv_cp_model *cm, float *logits, int32_t token, qkv_error *err);

/* The one way libqkv_mpi waits, for callers' own transfers too: polls
 * reqs[0 .. n) (MPI_REQUEST_NULL entries count as done) with MPI_Testall
 * for at most timeout_s seconds. QKV_ERR_IO "rank R: timed out after T s
 * waiting for <what> (did a rank die?)" when it runs out; the requests then
 * stay in flight (MPI_Abort). */
qkv_status qkv_cp_wait(MPI_Request *reqs, int n, double timeout_s, MPI_Comm comm, const char *what,
                       qkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* QKV_MPI_H */
