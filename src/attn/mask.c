/*
 * mask.c — the single definition of which keys a query row may see, and the
 * tile classifier the fast kernels use to skip or shortcut whole tiles.
 * No n x n matrix is ever built: a mask is a rule over (row position, key).
 */
#include "attn/internal.h"

#include <string.h>

int qkv_mask_visible(const qkv_mask *m, int q_len, int kv_len, int i, int j) {
    int p = kv_len - q_len + i; /* bottom-right aligned absolute position of row i */
    if (j < 0 || j >= kv_len) return 0;
    switch (m->kind) {
    case QKV_MASK_NONE: break;
    case QKV_MASK_CAUSAL:
        if (j > p) return 0;
        break;
    case QKV_MASK_WINDOW:
        if (j > p || j <= p - m->window) return 0;
        break;
    case QKV_MASK_SINK_WINDOW:
        if (j > p || (j >= m->sinks && j <= p - m->window)) return 0;
        break;
    }
    for (int e = 0; e < m->n_exclude; e++)
        if (m->exclude[e] == j) return 0;
    return 1;
}

int qkv_mask_row_count(const qkv_mask *m, int q_len, int kv_len, int i) {
    if (m->n_exclude > 0) {
        int n = 0;
        for (int j = 0; j < kv_len; j++) n += qkv_mask_visible(m, q_len, kv_len, i, j);
        return n;
    }
    return attn_rule_keys_seen(m, kv_len, kv_len - q_len + i);
}

/* Visibility by the kind's rule alone (exclusions are handled separately). */
static int rule_visible(const qkv_mask *m, int p, int j) {
    switch (m->kind) {
    case QKV_MASK_NONE: return 1;
    case QKV_MASK_CAUSAL: return j <= p;
    case QKV_MASK_WINDOW: return j <= p && j > p - m->window;
    case QKV_MASK_SINK_WINDOW: return j <= p && (j < m->sinks || j > p - m->window);
    }
    return 0;
}

/* 1 if some key of [lo, hi] (clipped to [0, kv_len)) is not excluded. */
static int interval_sees(const attn_excl *ex, int kv_len, int lo, int hi) {
    if (lo < 0) lo = 0;
    if (hi > kv_len - 1) hi = kv_len - 1;
    for (int j = lo; j <= hi; j++)
        if (!attn_excl_has(ex, j)) return 1;
    return 0;
}

int attn_row_sees_any(const qkv_mask *m, const attn_excl *ex, int kv_len, int p) {
    switch (m->kind) {
    case QKV_MASK_NONE: return interval_sees(ex, kv_len, 0, kv_len - 1);
    case QKV_MASK_CAUSAL: return interval_sees(ex, kv_len, 0, p);
    case QKV_MASK_WINDOW: return interval_sees(ex, kv_len, p - m->window + 1, p);
    case QKV_MASK_SINK_WINDOW:
        return interval_sees(ex, kv_len, 0, (m->sinks - 1 < p ? m->sinks - 1 : p)) ||
               interval_sees(ex, kv_len, p - m->window + 1, p);
    }
    return 0;
}

int attn_key_end(const qkv_mask *m, int kv_len, int p_last) {
    if (m->kind == QKV_MASK_NONE) return kv_len;
    int e = p_last + 1;
    return e < 0 ? 0 : (e > kv_len ? kv_len : e);
}

int attn_rule_keys_seen(const qkv_mask *m, int kv_len, int p) {
    const int end = attn_key_end(m, kv_len, p);
    if (m->kind != QKV_MASK_WINDOW && m->kind != QKV_MASK_SINK_WINDOW) return end;
    const int win = end < m->window ? end : m->window;
    if (m->kind == QKV_MASK_WINDOW) return win;
    const int sinks = m->sinks < end - win ? m->sinks : end - win; /* the keys before the window */
    return win + (sinks > 0 ? sinks : 0);
}

/*
 * Rows with positions [p0, p1] against keys [j0, j1): every rule above is an
 * interval (or two) in j whose ends move monotonically with p, so checking the
 * four corners of the tile (and the sink boundary) decides "all visible" and
 * "none visible" exactly.
 */
attn_tile_class attn_classify_tile(const qkv_mask *m, const attn_excl *ex, int p0, int p1, int j0,
                                   int j1) {
    int any_excluded = attn_excl_any(ex, j0, j1);
    if (m->kind == QKV_MASK_NONE) return any_excluded ? ATTN_TILE_PARTIAL : ATTN_TILE_FULL;
    int lo_vis, all_vis;
    switch (m->kind) {
    case QKV_MASK_CAUSAL:
        lo_vis = j0 <= p1;             /* some row sees some key */
        all_vis = (j1 - 1) <= p0;      /* first row sees the last key */
        break;
    case QKV_MASK_WINDOW:
        lo_vis = j0 <= p1 && (j1 - 1) > p0 - m->window;
        all_vis = (j1 - 1) <= p0 && j0 > p1 - m->window;
        break;
    default: { /* SINK_WINDOW */
        int win_any = j0 <= p1 && (j1 - 1) > p0 - m->window;
        int sink_any = j0 < m->sinks && j0 <= p1;
        lo_vis = win_any || sink_any;
        int win_all = (j1 - 1) <= p0 && j0 > p1 - m->window;
        int sink_all = (j1 - 1) < m->sinks && (j1 - 1) <= p0;
        all_vis = win_all || sink_all;
        break;
    }
    }
    if (!lo_vis) return ATTN_TILE_EMPTY;
    if (all_vis && !any_excluded) return ATTN_TILE_FULL;
    return ATTN_TILE_PARTIAL;
}

int attn_rule_visible(const qkv_mask *m, int p, int j) { return rule_visible(m, p, j); }

/* ------------------------------------------------------------ exclusions */

void attn_excl_build(attn_excl *ex, uint64_t *bits, const qkv_mask *m, int kv_len) {
    ex->bits = NULL;
    ex->n_words = 0;
    if (m->n_exclude <= 0) return;
    ex->n_words = (int)ATTN_EXCL_WORDS(kv_len);
    ex->bits = bits;
    memset(bits, 0, (size_t)ex->n_words * sizeof *bits);
    for (int e = 0; e < m->n_exclude; e++) {
        int j = m->exclude[e];
        if (j >= 0 && j < kv_len) bits[j >> 6] |= 1ull << (j & 63);
    }
}

int attn_excl_any(const attn_excl *ex, int j0, int j1) {
    if (!ex->bits) return 0;
    for (int j = j0; j < j1; j++)
        if (attn_excl_has(ex, j)) return 1;
    return 0;
}
