/*
 * cmd_serve.c — `qkv serve`: the explorer's page and JSON API over one model
 * (serve/: CivetWeb, sessions, the endpoints; docs/serve.md).
 */
#include "cli.h"
#include "flags.h"
#include "flag_rows.h"
#include "commands.h"
#include "serve.h"

#include <stdio.h>

int cmd_serve(int argc, char **argv) {
    const char *model = CLI_DEFAULT_MODEL, *host = "127.0.0.1";
    int port = 8080, ctx = 0, threads = 0, max_sessions = 4, max_mib = 4096, max_body_mib = 8, http_threads = 12,
        kv_dtype = QKV_DTYPE_F32;
    cli_flag flags[] = {
        CLI_FLAG_MODEL(&model),
        {.name = "--host", .kind = CLI_STRING, .dest = &host, .metavar = "ADDR",
         .help = "address to listen on (default 127.0.0.1; another prints a warning: there is no authentication)"},
        {.name = "--port", .kind = CLI_INT, .dest = &port, .lo = 0, .hi = 65535, .metavar = "N",
         .help = "port (default 8080; 0: a free one, named in the listening line)"},
        {.name = "--ctx", .kind = CLI_INT, .dest = &ctx, .lo = 1, .hi = QKV_MODEL_MAX_CTX, .metavar = "N",
         .help = "the most positions one session holds, prompt and generated tokens\n(default: min(the model's training context, 8192))"},
        CLI_FLAG_THREADS(&threads),
        {.name = "--max-sessions", .kind = CLI_INT, .dest = &max_sessions, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "sessions held at once; the least recently used is evicted first (default 4)"},
        {.name = "--max-mib", .kind = CLI_INT, .dest = &max_mib, .lo = 1, .hi = 1 << 24, .metavar = "N",
         .help = "MiB all sessions may hold together (KV caches, run state; default 4096)"},
        {.name = "--max-body-mib", .kind = CLI_INT, .dest = &max_body_mib, .lo = 1, .hi = 1024, .metavar = "N",
         .help = "the largest request body, MiB (default 8; above it: 413)"},
        {.name = "--http-threads", .kind = CLI_INT, .dest = &http_threads, .lo = 2, .hi = 256, .metavar = "N",
         .help = "HTTP worker threads (default 12)"},
        CLI_FLAG_KV_DTYPE(&kv_dtype, "KV cache storage of every session (default f32)"),
        {0},
    };
    const cli_command cmd = {
        .name = "serve", .usage = "[-m MODEL] [--host ADDR] [--port N] [--ctx N] [flags]",
        .about = "The attention explorer: a page (embedded in this binary) and a JSON API over one\n"
                 "model. Each prompt becomes a session (its KV cache, prefilled once); any row of any\n"
                 "head is recomputed exactly on request, never an n x n table. Stop it with Ctrl-C.",
        .notes = "Prints \"qkv serve: http://HOST:PORT/ (model ..., ctx ...)\" once listening.\n"
                 "The API: docs/serve.md.",
        .flags = flags};
    const int parsed = cli_parse(&cmd, argc, argv);
    if (parsed) return parsed < 0 ? 0 : parsed;
    const serve_opts o = {.model = model, .host = host, .port = port, .ctx = ctx, .threads = threads,
                          .max_sessions = max_sessions, .max_bytes = (int64_t)max_mib << 20,
                          .max_body = (int64_t)max_body_mib << 20, .http_threads = http_threads,
                          .kv_dtype = (qkv_dtype)kv_dtype};
    return serve_run(&o);
}
