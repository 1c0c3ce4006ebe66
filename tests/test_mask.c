/*
 * test_mask.c — qkv_mask_row_count, the closed form of a row's visible keys,
 * against the one definition (qkv_mask_visible) counted key by key: every
 * mask kind, windows below, at and above the lengths, sinks, Lq above and
 * below Lk, exclusions (repeated, out of range); then long rows at the
 * lengths `qkv bench` counts.
 */
#include "qkv.h"
#include "testing.h"

/* Keys of row i, one qkv_mask_visible call each. */
static int count_by_definition(const qkv_mask *m, int lq, int lk, int i) {
    int n = 0;
    for (int j = 0; j < lk; j++) n += qkv_mask_visible(m, lq, lk, i, j);
    return n;
}

/* Every row of every (lq, lk) up to 11 under m; 0 after the first mismatch. */
static int sweep_lengths(const qkv_mask *m) {
    for (int lq = 1; lq <= 11; lq++)
        for (int lk = 1; lk <= 11; lk++)
            for (int i = 0; i < lq; i++) {
                const int got = qkv_mask_row_count(m, lq, lk, i), want = count_by_definition(m, lq, lk, i);
                if (got != want) {
                    CHECK(0, "kind %d window %d sinks %d, %d excluded: lq %d lk %d row %d: %d keys, want %d", m->kind,
                          m->window, m->sinks, m->n_exclude, lq, lk, i, got, want);
                    return 0;
                }
            }
    return 1;
}

TEST(mask_row_count_equals_visible_keys) {
    static const int exclude[] = {3, 0, 3, 40, -1, 7};
    const qkv_mask_kind kinds[] = {QKV_MASK_NONE, QKV_MASK_CAUSAL, QKV_MASK_WINDOW, QKV_MASK_SINK_WINDOW};
    for (int k = 0; k < 4; k++)
        for (int w = 1; w <= 13; w += 3)
            for (int s = 0; s <= 3; s++)
                for (int ex = 0; ex <= 6; ex += 6) {
                    const qkv_mask m = {.kind = kinds[k], .window = w, .sinks = s, .exclude = exclude, .n_exclude = ex};
                    if (!sweep_lengths(&m)) return;
                }
    /* long rows: Llama heads' prefill, chunk and decode shapes with a window */
    const struct {
        int lq, lk;
    } shapes[] = {{4096, 4096}, {512, 16384}, {1, 131072}, {600, 500}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int k = 0; k < 4; k++) {
            const qkv_mask m = {.kind = kinds[k], .window = 1000, .sinks = 4};
            const int lq = shapes[c].lq, lk = shapes[c].lk;
            for (int i = 0; i < lq; i += lq / 7 + 1) {
                const int got = qkv_mask_row_count(&m, lq, lk, i), want = count_by_definition(&m, lq, lk, i);
                CHECK(got == want, "kind %d lq %d lk %d row %d: %d keys, want %d", k, lq, lk, i, got, want);
            }
        }
}
