/* sessions.c — the sessions table: LRU eviction under the count and byte
 * limits, references, and the evicted ids (sessions.h). */
#include "sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double serve_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void serve_session_free(serve_session *s) {
    if (!s) return;
    qkv_model_close(s->m);
    qkv_overview_free(s->overview);
    for (int i = 0; s->pieces && i < s->n; i++) free(s->pieces[i]);
    free(s->pieces);
    free(s->ids);
    free(s->logits);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int serve_table_init(serve_table *t, int max_sessions, int64_t max_bytes) {
    memset(t, 0, sizeof *t);
    t->max_sessions = max_sessions;
    t->max_bytes = max_bytes;
    t->next_id = 1;
    return pthread_mutex_init(&t->mu, NULL) ? -1 : 0;
}

void serve_table_free(serve_table *t) {
    for (int i = 0; i < t->n; i++) serve_session_free(t->s[i]);
    free(t->s);
    pthread_mutex_destroy(&t->mu);
    memset(t, 0, sizeof *t);
}

/* Takes entry i out of the table (caller holds the lock); frees it if no request holds it. */
static void unlink_at(serve_table *t, int i) {
    serve_session *s = t->s[i];
    t->s[i] = t->s[--t->n];
    s->in_table = 0;
    if (s->refs == 0) serve_session_free(s);
}

static int64_t held_bytes(const serve_table *t) {
    int64_t b = 0;
    for (int i = 0; i < t->n; i++) b += (int64_t)t->s[i]->bytes;
    return b;
}

serve_session *serve_table_add(serve_table *t, size_t bytes, int *status, char *msg, size_t cap) {
    if ((int64_t)bytes > t->max_bytes) {
        *status = 400;
        snprintf(msg, cap, "the session would hold %zu bytes (%.1f MiB), above --max-mib %.0f", bytes,
                 (double)bytes / (1 << 20), (double)t->max_bytes / (1 << 20));
        return NULL;
    }
    serve_session *s = calloc(1, sizeof *s);
    if (!s || pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        *status = 500;
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    s->bytes = bytes;
    s->refs = 1;
    s->in_table = 1;
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        const int nc = t->cap ? 2 * t->cap : 8;
        serve_session **g = realloc(t->s, (size_t)nc * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&t->mu);
            pthread_mutex_destroy(&s->mu);
            free(s);
            *status = 500;
            snprintf(msg, cap, "out of memory");
            return NULL;
        }
        t->s = g;
        t->cap = nc;
    }
    /* least recently used first, until the new one fits */
    while (t->n > 0 && (t->n + 1 > t->max_sessions || held_bytes(t) + (int64_t)bytes > t->max_bytes)) {
        int lru = 0;
        for (int i = 1; i < t->n; i++)
            if (t->s[i]->last_use < t->s[lru]->last_use) lru = i;
        serve_session *old = t->s[lru];
        old->evicted = 1;
        snprintf(t->evicted[t->n_evicted++ % SERVE_EVICTED_KEEP], sizeof t->evicted[0], "%s", old->id);
        fprintf(stderr, "qkv serve: evicted session %s (least recently used; --max-sessions %d, --max-mib %.0f)\n",
                old->id, t->max_sessions, (double)t->max_bytes / (1 << 20));
        unlink_at(t, lru);
    }
    snprintf(s->id, sizeof s->id, "s%llu", (unsigned long long)t->next_id++);
    s->last_use = serve_now_s();
    t->s[t->n++] = s;
    pthread_mutex_unlock(&t->mu);
    return s;
}

static int find(const serve_table *t, const char *id) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->s[i]->id, id)) return i;
    return -1;
}

/* 404 or 410 for an id not in the table (caller holds the lock). */
static int gone(const serve_table *t, const char *id, char *msg, size_t cap) {
    const int keep = t->n_evicted < SERVE_EVICTED_KEEP ? t->n_evicted : SERVE_EVICTED_KEEP;
    for (int i = 0; i < keep; i++)
        if (!strcmp(t->evicted[i], id)) {
            snprintf(msg, cap,
                     "session %s was evicted: the least recently used session goes when a new one would exceed "
                     "--max-sessions %d or --max-mib %.0f; create it again",
                     id, t->max_sessions, (double)t->max_bytes / (1 << 20));
            return 410;
        }
    snprintf(msg, cap, "no session %.40s", id);
    return 404;
}

serve_session *serve_table_get(serve_table *t, const char *id, int *status, char *msg, size_t cap) {
    pthread_mutex_lock(&t->mu);
    const int i = find(t, id);
    serve_session *s = NULL;
    if (i < 0) {
        *status = gone(t, id, msg, cap);
    } else if (!t->s[i]->ready) {
        *status = 409;
        snprintf(msg, cap, "session %s is still prefilling", id);
    } else {
        s = t->s[i];
        s->refs++;
        s->last_use = serve_now_s();
    }
    pthread_mutex_unlock(&t->mu);
    return s;
}

void serve_table_release(serve_table *t, serve_session *s) {
    pthread_mutex_lock(&t->mu);
    /* last_use stays the request's start: the response may reach the client
     * (and its next request the table) before this release runs */
    const int free_it = --s->refs == 0 && !s->in_table;
    pthread_mutex_unlock(&t->mu);
    if (free_it) serve_session_free(s);
}

int serve_table_remove(serve_table *t, const char *id, char *msg, size_t cap) {
    pthread_mutex_lock(&t->mu);
    const int i = find(t, id);
    const int st = i < 0 ? gone(t, id, msg, cap) : 0;
    if (i >= 0) unlink_at(t, i);
    pthread_mutex_unlock(&t->mu);
    return st;
}

void serve_table_ready(serve_table *t, serve_session *s) {
    pthread_mutex_lock(&t->mu);
    s->ready = 1;
    pthread_mutex_unlock(&t->mu);
}

int serve_table_dropped(serve_table *t, serve_session *s) {
    pthread_mutex_lock(&t->mu);
    const int e = s->evicted || !s->in_table;
    pthread_mutex_unlock(&t->mu);
    return e;
}
