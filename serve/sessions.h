/*
 * sessions.h — the server's sessions (serve/sessions.c): one prefilled
 * sequence each (its own qkv_model: run state and KV cache, every layer
 * holding every position so that any row can be recomputed), its token ids
 * and pieces and the next-token logits after its last token; and the table
 * that holds them under --max-sessions and --max-mib, evicting the least
 * recently used first and remembering what it evicted (410, not 404).
 *
 * Locking: the table has its own mutex (lookups, insertion, eviction, the
 * listing); each session has one that a request holds while it runs the
 * session's model. A session found in the table carries a reference: the
 * request that looked it up releases it, and whoever drops the last
 * reference of a session that left the table (deleted, evicted) frees it.
 */
#ifndef QKV_SERVE_SESSIONS_H
#define QKV_SERVE_SESSIONS_H

#include "qkv.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct serve_session {
    char id[24];                /* "s<N>", never reused while the server runs */
    pthread_mutex_t mu;         /* held while a request runs this session's model */
    qkv_model *m;
    int32_t *ids;               /* [cap] the sequence; ids[0..n) are in the KV cache */
    char **pieces;              /* [cap] readable labels of ids */
    int n, cap;                 /* cap = the model's n_ctx */
    float *logits;              /* [V] the next-token logits after ids[n-1] */
    qkv_overview *overview;     /* every head's max-pooled map, pooled as the forward calls append rows */
    size_t bytes;               /* what the session holds: model state, KV cache, overview, ids, pieces, logits */
    /* guarded by the table's mutex */
    double last_use;            /* seconds (monotonic) */
    int refs;                   /* requests holding it */
    int in_table;               /* 0 once deleted or evicted */
    int ready;                  /* 0 while its prefill runs (requests get 409) */
    int evicted;                /* the table evicted it (a running prefill stops) */
} serve_session;

/* An evicted id, kept so that a later request hears 410 and why. */
#define SERVE_EVICTED_KEEP 256

typedef struct {
    pthread_mutex_t mu;
    serve_session **s;          /* [n] */
    int n, cap;
    uint64_t next_id;
    int max_sessions;
    int64_t max_bytes;
    char evicted[SERVE_EVICTED_KEEP][24];
    int n_evicted;              /* total evicted (the ring holds the last SERVE_EVICTED_KEEP) */
} serve_table;

int serve_table_init(serve_table *t, int max_sessions, int64_t max_bytes);
/* Frees every session (no request may be running). */
void serve_table_free(serve_table *t);

/* A new session of `bytes`, not yet ready, with one reference and its id
 * set; first evicts least recently used sessions until it fits within
 * max_sessions and max_bytes. NULL with the status (400 when it alone is
 * above max_bytes, 500 out of memory) and a message in msg[cap]. */
serve_session *serve_table_add(serve_table *t, size_t bytes, int *status, char *msg, size_t cap);
/* The session id, with a reference (last_use updated). NULL with status 404
 * (unknown), 410 (evicted: the message says why) or 409 (its prefill is
 * still running) and msg. */
serve_session *serve_table_get(serve_table *t, const char *id, int *status, char *msg, size_t cap);
/* Drops a reference; frees a session that left the table when it was the last. */
void serve_table_release(serve_table *t, serve_session *s);
/* Takes the session out of the table (DELETE, a failed or cancelled
 * prefill); 0, or 404/410 with msg. */
int serve_table_remove(serve_table *t, const char *id, char *msg, size_t cap);
/* The prefill finished: requests may use it. */
void serve_table_ready(serve_table *t, serve_session *s);
/* 1 if s left the table, evicted or deleted (its prefill should stop). */
int serve_table_dropped(serve_table *t, serve_session *s);

/* Frees a session that is in no table. */
void serve_session_free(serve_session *s);
double serve_now_s(void);

#endif /* QKV_SERVE_SESSIONS_H */
