/*
 * test_cost_ring.c — the cost model across machines (qkv_cost_ring, `qkv
 * cost --ranks N --link-gbs X`): Llama-3.1-8B's bf16 prefill at 128K over 8
 * ranks is 16,384 tokens and 2 GiB of KV per rank, a 64 MiB K/V block per
 * layer and step, 448 MiB sent per rank per layer; the step compute and
 * transfer times and the hiding threshold follow from the stated rates, by
 * arithmetic written out here. Bad input: ranks without a link, more ranks
 * than tokens. Gemma 3 270M at 32K over 4 ranks: its sliding layers' blocks
 * go one hop in qkv-mpi run's prefill, not up to three.
 */
#include "testing.h"

#include "clitext.h"
#include "qkv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(cost_ring_library_llama31_8b_128k) {
    qkv_model_config c;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&c, NULL, "llama-3.1-8b", &err) == QKV_OK, "preset: %s", err.msg);
    const qkv_ring_params p = {.ranks = 8, .link_gbs = 12.5, .rank_gflops = 200};
    qkv_ring_cost r;
    CHECK(qkv_cost_ring(&r, &c, 131072, 2, &p, &err) == QKV_OK, "ring: %s", err.msg);
    CHECK(r.tokens_per_rank == 16384, "tokens per rank %g", r.tokens_per_rank);
    CHECK(r.kv_bytes_per_rank == 2.0 * 1073741824, "KV per rank %.0f", r.kv_bytes_per_rank);
    CHECK(r.block_bytes == 64.0 * 1048576, "block %.0f", r.block_bytes);     /* K and V: 2 x 16384 x 8 x 128 x 2 B */
    CHECK(r.ring_bytes_per_layer == 448.0 * 1048576, "ring bytes %.0f", r.ring_bytes_per_layer);
    /* a step: 2 x 131072^2 x 4096 / 64 FLOPs at 200 GFLOP/s; 64 MiB at 12.5 GB/s */
    const double compute = 2.0 * 131072 * 131072 * 4096 / 64 / 200e9, transfer = 64.0 * 1048576 / 12.5e9;
    CHECK(fabs(r.step_compute_s - compute) < 1e-9 * compute, "step compute %g, want %g", r.step_compute_s, compute);
    CHECK(fabs(r.step_transfer_s - transfer) < 1e-9 * transfer, "step transfer %g, want %g", r.step_transfer_s, transfer);
    CHECK(r.hidden == 1, "not hidden");
    /* t >= Hkv e F / (Hq B) = 8 x 2 x 200e9 / (32 x 12.5e9) = 8 tokens */
    CHECK(fabs(r.min_tokens_per_rank - 8) < 1e-9, "threshold %g", r.min_tokens_per_rank);
    CHECK(fabs(r.prefill_attn_s - 32 * 8 * compute) < 1e-6 * r.prefill_attn_s, "prefill %g", r.prefill_attn_s);
    CHECK(fabs(r.prefill_attn_one_s - 2.0 * 131072 * 131072 * 4096 * 32 / 200e9) < 1e-3, "one rank %g", r.prefill_attn_one_s);
    /* a GPU-class rank (400 TFLOP/s) on the same link: hides from 8 x 2 x 4e14 / (32 x 12.5e9) = 16,000 tokens */
    const qkv_ring_params gpu = {.ranks = 64, .link_gbs = 12.5, .rank_gflops = 4e5};
    CHECK(qkv_cost_ring(&r, &c, 131072, 2, &gpu, &err) == QKV_OK, "ring: %s", err.msg);
    CHECK(fabs(r.min_tokens_per_rank - 16000) < 1e-6 && r.tokens_per_rank == 2048 && r.hidden == 0,
          "gpu: threshold %g, t %g, hidden %d", r.min_tokens_per_rank, r.tokens_per_rank, r.hidden);
    CHECK(r.prefill_attn_s > r.prefill_attn_one_s / 64 * 1.5, "transfer-bound ring should be slower than P x faster");
    const qkv_ring_params one = {.ranks = 1, .link_gbs = 1, .rank_gflops = 200};
    CHECK(qkv_cost_ring(&r, &c, 4096, 2, &one, &err) == QKV_OK && r.step_transfer_s == 0 && r.ring_bytes_per_layer == 0 &&
              fabs(r.prefill_attn_s - r.prefill_attn_one_s) < 1e-9 * r.prefill_attn_s,
          "one rank is the single-machine prefill");
    const qkv_ring_params many = {.ranks = 9, .link_gbs = 1, .rank_gflops = 1};
    CHECK(qkv_cost_ring(&r, &c, 8, 2, &many, &err) == QKV_ERR_INVALID && strstr(err.msg, "exceed"), "ranks > ctx: %s", err.msg);
    const qkv_ring_params nolink = {.ranks = 2, .link_gbs = 0, .rank_gflops = 1};
    CHECK(qkv_cost_ring(&r, &c, 8, 2, &nolink, &err) == QKV_ERR_INVALID, "link 0 accepted");
}

/* Gemma 3 270M (18 layers, 15 sliding with W = 512; 1 KV head, D = 256) at
 * 32,768 tokens over 4 ranks, f32: t = 8192, a block 2 x 8192 x 256 x 4 B =
 * 16 MiB. Causal, a layer sends 4 x 3 / 2 = 6 blocks; a sliding one
 * H = ceil(511 / 8192) = 1 hop per block, 3 blocks. All layers: 18 x 6 x 16
 * = 1728 MiB causal, 3 x 6 x 16 + 15 x 3 x 16 = 1008 MiB with the windows:
 * 15 x 3 x 16 = 720 MiB saved. */
TEST(cost_ring_sliding_layers_gemma3_32k) {
    qkv_model_config c;
    qkv_error err = {0};
    CHECK(qkv_cost_preset(&c, NULL, "gemma-3-270m", &err) == QKV_OK, "preset: %s", err.msg);
    const qkv_ring_params p = {.ranks = 4, .link_gbs = 12.5, .rank_gflops = 200};
    qkv_ring_cost r;
    CHECK(qkv_cost_ring(&r, &c, 32768, 4, &p, &err) == QKV_OK, "ring: %s", err.msg);
    CHECK(r.block_bytes == 16.0 * 1048576, "block %.0f", r.block_bytes);
    CHECK(r.model_ring_bytes_causal == 1728.0 * 1048576, "causal %.0f", r.model_ring_bytes_causal);
    CHECK(r.model_ring_bytes == 1008.0 * 1048576, "windowed %.0f", r.model_ring_bytes);
    /* at 1K tokens a rank holds 256 rows: a window of 512 reaches 2 ranks on (S = 1 + 2 + 2 = 5 of 6 blocks) */
    CHECK(qkv_cost_ring(&r, &c, 1024, 4, &p, &err) == QKV_OK && r.model_ring_bytes == r.block_bytes * (3 * 6 + 15 * 5),
          "1K: %.0f", r.model_ring_bytes);
}

TEST(cost_ring_cli) {
    const char *argv[] = {"cost", "--ctx", "128K,1M", "--ranks", "8", "--link-gbs", "12.5", NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "exit %d: %s", rc, err);
    const char *line = out ? cli_find_line(out, "KV cache per rank") : NULL;
    double v[4];
    CHECK(line && cli_line_numbers(line, v, 4) == 2 && v[0] == 2 && v[1] == 16, "KV per rank row: %.60s", line ? line : "");
    line = out ? cli_find_line(out, "ring traffic per layer, per rank") : NULL;
    CHECK(line && cli_line_numbers(line, v, 4) == 2 && v[0] == 448 && v[1] == 3.5, "ring row: %.60s", line ? line : "");
    CHECK(out && strstr(out, "across 8 ranks") && strstr(out, "from 8 tokens per rank"), "ring section: %s", out);
    free(out);
    free(err);
    const char *jargv[] = {"cost", "--ctx", "1M", "--ranks", "16", "--link-gbs", "50", "--rank-gflops", "400000", "--json", NULL};
    rc = test_run_cli(jargv, NULL, &out, &err);
    CHECK(rc == 0 && out && strstr(out, "\"ring\": {\"ranks\": 16") && strstr(out, "\"kv_gib_per_rank\": 8.000000") &&
              strstr(out, "\"min_tokens_per_rank\": 4000.0") && strstr(out, "\"hidden\": true"),
          "JSON: %s", out);
    free(out);
    free(err);
    const char *nolink[] = {"cost", "--link-gbs", "10", NULL};
    CHECK_BAD_CLI(nolink, "need --ranks");
    const char *toomany[] = {"cost", "--ctx", "4", "--ranks", "8", NULL};
    CHECK_BAD_CLI(toomany, "8 ranks exceed the context's 4 tokens");
}
