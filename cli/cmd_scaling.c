/*
 * cmd_scaling.c — `qkv scaling`: the article's Monte Carlo argument for the
 * 1/sqrt(d) in attention. With q and k of independent N(0, 1) components the
 * dot product q.k has standard deviation sqrt(d); softmax over such spread
 * scores nearly picks one position. For each d the command estimates std(q.k)
 * and the average largest softmax weight over a few positions, unscaled and
 * scaled, with 95% confidence intervals and a small histogram.
 *
 * The softmax weights come from the library's reference kernel (trials as
 * heads, one query row, mask none, scale 1 or 1/sqrt(d) passed explicitly;
 * heads below 16 dims are padded with zeros). The random numbers are
 * splitmix64 + Box-Muller seeded from (--seed, d): the same seed gives the
 * same output, and a d's figures do not depend on which other d are listed.
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "util.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_D 16
#define N_BINS 10

/* splitmix64 and Box-Muller: small, portable, reproducible everywhere. */
typedef struct {
    uint64_t s;
    int have_spare;
    double spare;
} rng;

static uint64_t rng_u64(rng *r) { return cli_splitmix64(&r->s); }

static double rng_normal(rng *r) {
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1 = (double)((rng_u64(r) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(rng_u64(r) >> 11) * 0x1.0p-53;
    double rad = sqrt(-2 * log(u1)), ang = 6.283185307179586 * u2;
    r->spare = rad * sin(ang);
    r->have_spare = 1;
    return rad * cos(ang);
}

/* Estimates for one d. */
typedef struct {
    int d;
    double dot_std, dot_std_lo, dot_std_hi;
    double top_raw, top_raw_lo, top_raw_hi;      /* largest weight, scale 1 */
    double top_sc, top_sc_lo, top_sc_hi;         /* largest weight, scale 1/sqrt(d) */
    double hist_raw[N_BINS], hist_sc[N_BINS];    /* share of trials per 0.1-wide bin */
} estimate;

/* Running sums of x and x^2. */
typedef struct {
    double n, s, s2;
} moments;
static void mom_add(moments *m, double x) {
    m->n += 1;
    m->s += x;
    m->s2 += x * x;
}
static double mom_mean(const moments *m) { return m->s / m->n; }
static double mom_var(const moments *m) {
    double mu = mom_mean(m), v = (m->s2 - m->n * mu * mu) / (m->n - 1);
    return v > 0 ? v : 0;
}

static int bin_of(double w) {
    int b = (int)(w * N_BINS);
    return b < 0 ? 0 : (b >= N_BINS ? N_BINS - 1 : b);
}

static int simulate(estimate *est, int d, int positions, int trials, uint64_t seed) {
    const int P = positions;
    const int D = d < QKV_HEAD_DIM_MIN ? QKV_HEAD_DIM_MIN : d;
    int batch = (int)((1 << 20) / ((int64_t)P * D));
    if (batch < 1) batch = 1;
    if (batch > 4096) batch = 4096;
    if (batch > trials) batch = trials;
    float *q = calloc((size_t)batch * D, sizeof *q);          /* q: [B, 1, D] */
    float *k = calloc((size_t)batch * P * D, sizeof *k);      /* k: [B, P, D], also used as v */
    float *o = malloc((size_t)batch * D * sizeof *o);         /* o: [B, 1, D] */
    float *w = malloc((size_t)batch * P * sizeof *w);         /* w: [B, 1, P] */
    if (!q || !k || !o || !w) {
        free(q), free(k), free(o), free(w);
        return cli_fail("scaling: out of memory for %d trials of %d keys", batch, P);
    }
    rng r = {seed * 0xD1B54A32D192ED03ull + (uint64_t)d, 0, 0};
    moments dots = {0}, blocks = {0}, raw = {0}, sc = {0};
    memset(est, 0, sizeof *est);
    est->d = d;
    for (int done = 0; done < trials; done += batch) {
        int B = trials - done < batch ? trials - done : batch;
        for (int b = 0; b < B; b++) {
            float *qb = q + (size_t)b * D, *kb = k + (size_t)b * P * D;
            for (int c = 0; c < d; c++) qb[c] = (float)rng_normal(&r);
            for (int j = 0; j < P; j++)
                for (int c = 0; c < d; c++) kb[(size_t)j * D + c] = (float)rng_normal(&r);
            /* q.k for each position, in double over the float inputs */
            double sq = 0;
            for (int j = 0; j < P; j++) {
                double dot = 0;
                for (int c = 0; c < d; c++) dot += (double)qb[c] * kb[(size_t)j * D + c];
                mom_add(&dots, dot);
                sq += dot * dot;
            }
            mom_add(&blocks, sq / P);
        }
        qkv_attn_desc desc = {0};
        desc.n_q_head = desc.n_kv_head = B;
        desc.q_len = 1;
        desc.kv_len = P;
        desc.head_dim = D;
        desc.mask.kind = QKV_MASK_NONE;
        desc.kv_dtype = QKV_DTYPE_F32;
        for (int pass = 0; pass < 2; pass++) {
            desc.scale = pass == 0 ? 1.0f : (float)(1.0 / sqrt((double)d));
            qkv_error err = {0};
            if (qkv_attn_reference(o, NULL, w, q, k, k, &desc, &err) != QKV_OK) {
                free(q), free(k), free(o), free(w);
                return cli_fail("scaling: reference kernel: %s", err.msg);
            }
            for (int b = 0; b < B; b++) {
                double top = 0;
                for (int j = 0; j < P; j++)
                    if (w[(size_t)b * P + j] > top) top = w[(size_t)b * P + j];
                mom_add(pass == 0 ? &raw : &sc, top);
                (pass == 0 ? est->hist_raw : est->hist_sc)[bin_of(top)] += 1.0 / trials;
            }
        }
    }
    free(q), free(k), free(o), free(w);

    /* std(q.k) = sqrt(var); the per-trial means of (q.k)^2 are independent, so
     * se(var) ~ sd(block means) / sqrt(T) and se(std) = se(var) / (2 std). */
    double var = mom_var(&dots), T = trials;
    est->dot_std = sqrt(var);
    double se = est->dot_std > 0 ? sqrt(mom_var(&blocks) / T) / (2 * est->dot_std) : 0;
    est->dot_std_lo = est->dot_std - 1.96 * se;
    est->dot_std_hi = est->dot_std + 1.96 * se;
    est->top_raw = mom_mean(&raw);
    se = sqrt(mom_var(&raw) / T);
    est->top_raw_lo = est->top_raw - 1.96 * se;
    est->top_raw_hi = est->top_raw + 1.96 * se;
    est->top_sc = mom_mean(&sc);
    se = sqrt(mom_var(&sc) / T);
    est->top_sc_lo = est->top_sc - 1.96 * se;
    est->top_sc_hi = est->top_sc + 1.96 * se;
    return 0;
}

static void print_text(const estimate *e, int n, int positions, int trials, uint64_t seed) {
    char b[96];
    printf("qkv scaling: why attention divides q·k by √d\n\n");
    printf("  q and k with independent N(0, 1) components; softmax over %d positions;\n", positions);
    printf("  %d trials per d, seed %llu; [lo, hi] are 95%% confidence intervals\n\n", trials,
           (unsigned long long)seed);
    printf("  ");
    cli_put_cell("d", 5, 1);
    cli_put_cell("√d", 8, 1);
    cli_put_cell("std(q·k) [95% CI]", 26, 1);
    printf("     ");
    cli_put_cell("top weight, q·k", 24, 0);
    printf("top weight, q·k/√d\n");
    for (int i = 0; i < n; i++) {
        const estimate *x = &e[i];
        printf("  ");
        snprintf(b, sizeof b, "%d", x->d);
        cli_put_cell(b, 5, 1);
        snprintf(b, sizeof b, "%.2f", sqrt((double)x->d));
        cli_put_cell(b, 8, 1);
        snprintf(b, sizeof b, "%.2f [%.2f, %.2f]", x->dot_std, x->dot_std_lo, x->dot_std_hi);
        cli_put_cell(b, 26, 1);
        printf("     ");
        snprintf(b, sizeof b, "%.3f [%.3f, %.3f]", x->top_raw, x->top_raw_lo, x->top_raw_hi);
        cli_put_cell(b, 24, 0);
        printf("%.3f [%.3f, %.3f]\n", x->top_sc, x->top_sc_lo, x->top_sc_hi);
    }

    /* Histogram of the largest weight for the largest d. */
    const estimate *h = &e[0];
    for (int i = 1; i < n; i++)
        if (e[i].d > h->d) h = &e[i];
    double peak = 0;
    for (int k = 0; k < N_BINS; k++) {
        if (h->hist_raw[k] > peak) peak = h->hist_raw[k];
        if (h->hist_sc[k] > peak) peak = h->hist_sc[k];
    }
    enum { BAR = 24 };
    printf("\n  largest weight at d = %d: share of trials\n\n  ", h->d);
    cli_put_cell("weight", 11, 0);
    cli_put_cell("q·k (unscaled)", BAR + 8, 0);
    printf("q·k/√d\n");
    for (int k = 0; k < N_BINS; k++) {
        char line[256];
        size_t o = (size_t)snprintf(line, sizeof line, "  %.1f-%.1f    ", k / 10.0, (k + 1) / 10.0);
        const double share[2] = {h->hist_raw[k], h->hist_sc[k]};
        for (int s = 0; s < 2; s++) {
            int len = peak > 0 ? (int)lround(share[s] / peak * BAR) : 0;
            if (share[s] > 0 && len == 0) len = 1;
            char bar[BAR + 8], pct[16];
            memset(bar, '#', (size_t)len);
            bar[len] = 0;
            if (share[s] == 0) pct[0] = 0;
            else if (share[s] < 0.005) snprintf(pct, sizeof pct, " <1%%");
            else snprintf(pct, sizeof pct, "%3.0f%%", 100 * share[s]);
            o += (size_t)snprintf(line + o, sizeof line - o, "%-*s %-4s   ", BAR, bar, pct);
        }
        while (o > 0 && line[o - 1] == ' ') line[--o] = 0; /* no trailing blanks */
        puts(line);
    }
    printf("\n  Unscaled, q·k spreads about √d = %.1f wide and the softmax nearly picks one\n"
           "  position (top weight %.2f on average): the others get almost no gradient.\n"
           "  Dividing by √d brings the spread back to about 1 (top weight %.2f).\n",
           sqrt((double)h->d), h->top_raw, h->top_sc);
    printf("\n(weights from qkv_attn_reference, mask none, scale 1 or 1/√d)\n");
}

static void json_ci(const char *key, double v, double lo, double hi) {
    printf("\"%s\": %.6f, \"%s_ci95\": [%.6f, %.6f]", key, v, key, lo, hi);
}

static void json_hist(const char *key, const double *h) {
    printf("\"%s\": [", key);
    for (int k = 0; k < N_BINS; k++) printf("%s%.6f", k ? ", " : "", h[k]);
    printf("]");
}

static void print_json(const estimate *e, int n, int positions, int trials, uint64_t seed) {
    printf("{\n  \"kernel\": \"reference\",\n  \"seed\": %llu,\n  \"trials\": %d,\n  \"positions\": %d,\n",
           (unsigned long long)seed, trials, positions);
    printf("  \"hist_bins\": [");
    for (int k = 0; k <= N_BINS; k++) printf("%s%.1f", k ? ", " : "", k / 10.0);
    printf("],\n  \"results\": [\n");
    for (int i = 0; i < n; i++) {
        const estimate *x = &e[i];
        printf("    {\"d\": %d, \"sqrt_d\": %.6f, ", x->d, sqrt((double)x->d));
        json_ci("dot_std", x->dot_std, x->dot_std_lo, x->dot_std_hi);
        printf(", ");
        json_ci("max_weight_unscaled", x->top_raw, x->top_raw_lo, x->top_raw_hi);
        printf(", ");
        json_ci("max_weight_scaled", x->top_sc, x->top_sc_lo, x->top_sc_hi);
        printf(", ");
        json_hist("hist_unscaled", x->hist_raw);
        printf(", ");
        json_hist("hist_scaled", x->hist_sc);
        printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("  ]\n}\n");
}

int cmd_scaling(int argc, char **argv) {
    int positions = 5, trials = 20000, json = 0;
    int64_t seed = 1;
    cli_ints d_list = {0};
    cli_flag flags[] = {
        {.name = "--d", .kind = CLI_INTS, .dest = &d_list, .lo = 1, .hi = QKV_HEAD_DIM_MAX, .metavar = "LIST",
         .help = "head dims, comma separated, at most " CLI_STR(MAX_D) " (default 2,128)"},
        {.name = "--positions", .kind = CLI_INT, .dest = &positions, .lo = 2, .hi = 4096, .metavar = "N",
         .help = "keys each query attends to (default 5)"},
        {.name = "--trials", .kind = CLI_INT, .dest = &trials, .lo = 100, .hi = 10000000, .metavar = "N",
         .help = "random queries per d (default 20000)"},
        {.name = "--seed", .kind = CLI_I64, .dest = &seed, .lo = 0, .hi = 0x1p63, .metavar = "N",
         .help = "random seed (default 1); the same seed gives the same output"},
        CLI_FLAG_JSON(&json, "the same figures as JSON"),
        {0},
    };
    const cli_command cmd = {.name = "scaling", .usage = "[--d LIST] [--positions N] [--trials N] [--seed N] [--json]",
                             .about = "Why attention divides q.k by sqrt(d): draws q and k with independent N(0, 1)\n"
                             "components, measures the spread of q.k and the average largest softmax weight\n"
                             "over N positions without and with the 1/sqrt(d) factor (reference kernel).",
                             .notes = "Intervals are 95% (1.96 standard errors; for std(q.k) by the delta method over\n"
                             "per-trial means of (q.k)^2, since one query's dot products share q).",
                             .flags = flags};
    int rc = cli_parse(&cmd, argc, argv);
    int ds[MAX_D] = {2, 128}, n_d = 2;
    if (!rc && d_list.n > MAX_D) rc = cli_fail("--d: at most %d values", MAX_D);
    for (int i = 0; !rc && i < d_list.n; i++) ds[i] = d_list.v[i];
    if (d_list.n) n_d = d_list.n;
    cli_ints_free(&d_list);
    if (rc) return rc < 0 ? 0 : rc;
    /* Keep one run to a few seconds of normals. */
    for (int i = 0; i < n_d; i++)
        if ((double)trials * (positions + 1) * ds[i] > 4e9)
            return cli_fail("scaling: trials x (positions + 1) x d = %.3g random numbers is too many "
                            "(at most 4e9); lower --trials",
                            (double)trials * (positions + 1) * ds[i]);
    estimate est[MAX_D];
    for (int i = 0; i < n_d; i++)
        if (simulate(&est[i], ds[i], positions, trials, (uint64_t)seed)) return CLI_EXIT_BAD_INPUT;
    if (json) print_json(est, n_d, positions, trials, (uint64_t)seed);
    else print_text(est, n_d, positions, trials, (uint64_t)seed);
    return 0;
}
