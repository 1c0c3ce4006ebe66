/*
 * test_serve_probes.c — `qkv serve`'s patch on SmolLM2 = `qkv patch --json`
 * (the KL metric, the resid_pre sweep; the logit-diff metric with every sweep
 * is tests/test_serve_api.c's, on the tiny Gemma 3). A file of its own: 150
 * resumed forwards each side, kept out of the ASan subset (serve_api).
 */
#include "serve_client.h"
#include "testing.h"

#include <string.h>

TEST(serve_probes_smollm2_patch_equals_cli) {
    if (!test_require_model()) return;
    const char *model = test_model_path();
    serve_child sv;
    const char *extra[] = {"--threads", "2", NULL};
    if (!serve_start(&sv, model, extra)) return;
    int st;
    test_json *s = serve_json(sv.port, "POST", "/api/sessions", "{\"text\": \"The capital of France is\"}", &st);
    CHECK(st == 200, "create: %d", st);
    test_json_free(s);
    const char *patch[] = {"patch", "-m", model, "--clean", "The capital of France is", "--corrupt", "The capital of Italy is",
                           "--sweeps", "resid_pre", "--threads", "2", "--json", NULL}; /* the server's threads */
    serve_check_same_as_cli(sv.port, "POST", "/api/sessions/s1/patch",
                            "{\"corrupt\": \"The capital of Italy is\", \"sweeps\": [\"resid_pre\"]}", patch);
    serve_stop(&sv);
}
