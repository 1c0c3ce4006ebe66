/* main.c — `qkv <command> [flags]`: dispatches to cli/cmd_<name>.c. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"explain", cmd_explain, "the article's 4-token example, step by step, through the reference kernel"},
    {"scaling", cmd_scaling, "why 1/sqrt(d): Monte Carlo of q.k spread and the largest softmax weight"},
    {"cost", cmd_cost, "attention FLOPs, score-table and KV-cache bytes from a model configuration"},
    {"attend", cmd_attend, "attention of .npy arrays (q, k, v) with masks, RoPE and a kernel choice"},
    {"run", cmd_run, "a GGUF model (llama, qwen2, qwen3, gemma2, gemma3) reading a prompt and continuing it (prefill, then decode)"},
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
    {"demo", cmd_demo, "the embedded default walk-through run by `make demo`"},
};

static void usage(FILE *f) {
    fprintf(f, "qkv %s — the self-attention of Llama-family models, in C\n\nusage: qkv <command> [flags]\n\n",
            QKV_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`qkv <command> --help` describes a command's flags.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qkv %s\n", QKV_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    return cli_fail("unknown command '%s' (run `qkv --help`)", argv[1]);
}
