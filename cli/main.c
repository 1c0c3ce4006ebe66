/* main.c — `qkv <command> [flags]`: dispatches to cli/cmd_<name>.c. */
#include "cli.h"
#include "commands.h"
#include "dispatch.h"

static const cli_dispatch_cmd commands[] = {
    {"explain", cmd_explain, "the article's 4-token example, step by step, through the reference kernel"},
    {"scaling", cmd_scaling, "why 1/sqrt(d): Monte Carlo of q.k spread and the largest softmax weight"},
    {"cost", cmd_cost, "attention FLOPs, score-table and KV-cache bytes from a model configuration"},
    {"attend", cmd_attend, "attention of .npy arrays (q, k, v) with masks, RoPE and a kernel choice"},
    {"run", cmd_run, "a GGUF model (llama, qwen2, qwen3, gemma2, gemma3, smollm3, olmo2, phi3) reading a prompt and continuing it (prefill, then decode)"},
    {"bench", cmd_bench, "time one attention shape through a kernel: GFLOP/s, KV GB/s, peak RSS"},
    {"tokenize", cmd_tokenize, "token ids and pieces of a text under a GGUF's own tokenizer"},
    {"inspect", cmd_inspect, "attention maps of a real model on your text: HTML page, PNG, .npy, JSON"},
    {"sinks", cmd_sinks, "how much attention piles on the first tokens over long text, per layer and head"},
    {"ablate", cmd_ablate, "weight against influence: hide each token's key in turn, KL of the next-token distribution"},
    {"patch", cmd_patch, "activation patching: which heads and layers carry the clean run's answer"},
    {"attribute", cmd_attribute, "direct logit attribution: each head's, layer's and the embedding's share of a logit difference"},
    {"lens", cmd_lens, "logit lens: what each layer's residual stream would predict, at every position"},
    {"stream", cmd_stream, "perplexity with a bounded KV cache: full, sliding window, attention sinks, recompute"},
    {"needle", cmd_needle, "needle in a haystack: is the fact found, and how much attention the answer puts on it"},
    {"serve", cmd_serve, "the attention explorer: a page and a JSON API over one model (sessions, rows, edits, lens, patch)"},
    {"demo", cmd_demo, "the embedded default walk-through run by `make demo`"},
};

int main(int argc, char **argv) {
    const cli_dispatch_table t = {.program = "qkv", .about = "the self-attention of Llama-family models, in C",
                                  .usage = "qkv <command> [flags]", .name_width = 10, .version_flag = 1,
                                  .cmds = commands, .n_cmds = sizeof commands / sizeof commands[0]};
    return cli_dispatch(&t, argc, argv);
}
