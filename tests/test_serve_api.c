/*
 * test_serve_api.c — `qkv serve`'s API against the CLI, one good run of each
 * endpoint (in make test's ASan subset): on SmolLM2, rows equal `qkv inspect
 * --npy` rows, the edit's KL `qkv ablate --scope last`'s, lens `qkv lens
 * --json`; on the tiny Gemma 3 fixture (window 12, layers 0-4 sliding), rows
 * and the overview of a 40-token prompt in sliding and global layers, the
 * edit's KL, lens, and patch (logit-diff, every sweep) = `qkv patch --json`.
 * The hostile requests are tests/test_serve_hostile.c, the real Gemma 3 past
 * its 512 window tests/test_serve_gemma3.c, SmolLM2's patch
 * tests/test_serve_probes.c.
 */
#include "serve_client.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT "The capital of France is"

/* The numbers of a JSON array member into out [cap]; how many. */
static int numbers(const test_json *v, const char *key, double *out, int cap) {
    const test_json *a = key ? test_json_get(v, key) : v;
    return a ? (int)test_json_numbers(a, out, cap) : -1;
}

/* `qkv inspect --npy` of model, prompt args and layer (all heads): [Hq, n, n]; NULL after a failed CHECK. */
static float *inspect_maps(const char *model, const char *const *prompt, int layer, int64_t *count) {
    char npy[700], lay[16];
    snprintf(npy, sizeof npy, "%s/serve-inspect.npy", test_tmpdir());
    snprintf(lay, sizeof lay, "%d", layer);
    const char *argv[24] = {"inspect", "-m", model, "--layers", lay, "--npy", npy};
    int n = 7;
    for (int i = 0; prompt[i]; i++) argv[n++] = prompt[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    const int rc = test_run_cli(argv, NULL, &out, &err);
    CHECK(rc == 0, "qkv inspect: exit %d: %s", rc, err ? err : "");
    free(out);
    free(err);
    return rc ? NULL : test_load_npy(test_tmpdir(), "serve-inspect.npy", "", count);
}

/* The API's row of (layer, head, query) equals inspect's, to float rounding. */
static void check_row(int port, const char *sid, const float *maps, int n, int layer, int head, int q) {
    char path[200];
    snprintf(path, sizeof path, "/api/sessions/%s/attention?layer=%d&head=%d&query=%d", sid, layer, head, q);
    test_json *j = serve_json(port, "GET", path, NULL, NULL);
    double w[4096];
    const int got = j ? numbers(j, "weights", w, 4096) : -1;
    CHECK(got == q + 1, "%s: %d weights, want %d", path, got, q + 1);
    double worst = 0, sum = 0;
    for (int k = 0; k < got && k <= q; k++) {
        const double d = fabs(w[k] - maps[((size_t)head * n + q) * n + k]);
        worst = d > worst ? d : worst;
        sum += w[k];
    }
    CHECK(worst < 2e-5, "%s: differs from qkv inspect --npy by %g", path, worst);
    CHECK(fabs(sum - 1) < 1e-4, "%s: the weights sum to %g", path, sum);
    test_json_free(j);
}

/* GET .../lens?pos0=&pos1= is the whole lens's columns pos0..pos1-1 (the
 * same ids, probabilities within 1e-5: its forward call to pos1 is shorter,
 * and a shorter call's matmuls may round otherwise: 2.4e-6 seen), with the
 * window's tokens and its bounds. */
static void check_lens_window(int port, int pos0, int pos1) {
    char path[160];
    snprintf(path, sizeof path, "/api/sessions/s1/lens?k=5&pos0=%d&pos1=%d", pos0, pos1);
    int st;
    test_json *all = serve_json(port, "GET", "/api/sessions/s1/lens?k=5", NULL, NULL), *win = serve_json(port, "GET", path, NULL, &st);
    CHECK(st == 200 && all && win && serve_num(win, "pos0") == pos0 && serve_num(win, "pos1") == pos1 &&
              serve_num(win, "n_tokens") == serve_num(all, "n_tokens") && test_json_get(win, "tokens")->n == pos1 - pos0,
          "%s: %d, its bounds and tokens", path, st);
    const test_json *ai = all ? test_json_get(all, "top_ids") : NULL, *wi = win ? test_json_get(win, "top_ids") : NULL;
    const test_json *ap = all ? test_json_get(all, "top_probs") : NULL, *wp = win ? test_json_get(win, "top_probs") : NULL;
    int bad = 0;
    for (int l = 0; ai && wi && ap && wp && l < ai->n && l < wi->n; l++)
        for (int p = pos0; p < pos1 && p - pos0 < wi->items[l].n; p++) {
            double a[5], w[5], pa[5], pw[5];
            test_json_numbers(&ai->items[l].items[p], a, 5);
            test_json_numbers(&wi->items[l].items[p - pos0], w, 5);
            test_json_numbers(&ap->items[l].items[p], pa, 5);
            test_json_numbers(&wp->items[l].items[p - pos0], pw, 5);
            for (int j = 0; j < 5; j++) bad += a[j] != w[j] || fabs(pa[j] - pw[j]) > 1e-5;
        }
    CHECK(ai && wi && wi->n == ai->n && bad == 0, "%s: %d top tokens differ from the whole lens's", path, bad);
    test_json_free(all);
    test_json_free(win);
}

TEST(serve_api_smollm2_every_endpoint) {
    if (!test_require_model()) return;
    const char *model = test_model_path();
    serve_child sv;
    const char *extra[] = {"--threads", "2", NULL};
    if (!serve_start(&sv, model, extra)) return;
    const int port = sv.port;
    int st;
    /* the model */
    test_json *m = serve_json(port, "GET", "/api/model", NULL, &st);
    CHECK(st == 200 && m && serve_num(m, "n_layer") == 30 && serve_num(m, "n_head") == 9 && serve_num(m, "n_head_kv") == 3,
          "/api/model: %d", st);
    double win[64];
    CHECK(m && numbers(m, "windows", win, 64) == 30 && win[0] == 0, "/api/model: windows");
    test_json_free(m);
    /* a session, as JSON */
    test_json *s = serve_json(port, "POST", "/api/sessions", "{\"text\": \"" PROMPT "\"}", &st);
    const test_json *id = s ? test_json_get(s, "id") : NULL, *top = s ? test_json_get(s, "top") : NULL;
    CHECK(st == 200 && id && !strcmp(id->string, "s1") && serve_num(s, "n_tokens") == 5 && serve_num(s, "bytes") > 0, "create: %d", st);
    CHECK(top && top->n == 10 && !strcmp(test_json_get(&top->items[0], "piece")->string, "\xC2\xB7Paris"), "create: top");
    /* tokenize gives the session's tokens without making one; health */
    test_json *tk = serve_json(port, "POST", "/api/tokenize", "{\"text\": \"" PROMPT "\"}", &st);
    const test_json *tt = tk ? test_json_get(tk, "tokens") : NULL, *stoks = s ? test_json_get(s, "tokens") : NULL;
    CHECK(st == 200 && tt && stoks && tt->n == stoks->n, "tokenize: %d", st);
    for (int i = 0; tt && stoks && i < tt->n && i < stoks->n; i++)
        CHECK(serve_num(&tt->items[i], "id") == serve_num(&stoks->items[i], "id"), "tokenize: token %d", i);
    test_json_free(tk);
    test_json *hl = serve_json(port, "GET", "/health", NULL, &st);
    CHECK(st == 200 && hl && !strcmp(test_json_get(hl, "status")->string, "ok"), "health: %d", st);
    test_json_free(hl);
    /* attention rows = qkv inspect --npy's, one head and the mean */
    const char *prompt[] = {"-p", PROMPT, NULL};
    int64_t count = 0;
    float *maps = inspect_maps(model, prompt, 3, &count);
    if (maps && count == 9 * 5 * 5) {
        for (int h = 0; h < 9; h += 4) check_row(port, "s1", maps, 5, 3, h, 4);
        check_row(port, "s1", maps, 5, 3, 2, 1);
        test_json *mean = serve_json(port, "GET", "/api/sessions/s1/attention?layer=3&head=mean&query=4", NULL, NULL);
        double w[5], worst = 0;
        CHECK(mean && numbers(mean, "weights", w, 5) == 5, "head=mean");
        for (int k = 0; mean && k < 5; k++) {
            double want = 0;
            for (int h = 0; h < 9; h++) want += maps[((size_t)h * 5 + 4) * 5 + k] / 9;
            worst = fmax(worst, fabs(w[k] - want));
        }
        CHECK(worst < 2e-5, "head=mean differs from the mean of inspect's rows by %g", worst);
        test_json_free(mean);
        /* the same row as float32 bytes */
        serve_resp r;
        serve_req(port, "GET", "/api/sessions/s1/attention?layer=3&head=2&query=4&format=f32", NULL, NULL, 0, &r);
        CHECK(r.status == 200 && r.len == 5 * sizeof(float) && !strcmp(r.type, "application/octet-stream"), "format=f32");
        for (size_t k = 0; r.status == 200 && k < 5 && r.len == 20; k++)
            CHECK(fabsf(((float *)r.body)[k] - maps[((size_t)2 * 5 + 4) * 5 + k]) < 2e-5f, "format=f32: key %zu", k);
        serve_resp_free(&r);
        /* rows: queries 1..4 over every key, zeros after each query */
        test_json *rows = serve_json(port, "GET", "/api/sessions/s1/rows?layer=3&head=2&q0=1&q1=5&k0=0&k1=5", NULL, &st);
        double v[20];
        CHECK(st == 200 && rows && numbers(rows, "values", v, 20) == 20, "rows: %d", st);
        for (int i = 0; rows && i < 4; i++)
            for (int k = 0; k < 5; k++)
                CHECK(fabs(v[i * 5 + k] - maps[((size_t)2 * 5 + 1 + i) * 5 + k]) < 2e-5, "rows: [%d][%d]", i, k);
        test_json_free(rows);
        /* the grid: sink and key metrics are the row's entries */
        test_json *g = serve_json(port, "GET", "/api/sessions/s1/grid?query=4&metric=key&key=2", NULL, &st);
        const test_json *vals = g ? test_json_get(g, "values") : NULL;
        CHECK(st == 200 && vals && vals->n == 30 && vals->items[3].n == 9, "grid: %d", st);
        if (vals && vals->n == 30 && vals->items[3].n == 9)
            CHECK(fabs(vals->items[3].items[2].number - maps[((size_t)2 * 5 + 4) * 5 + 2]) < 2e-5, "grid key=2: layer 3 head 2");
        test_json_free(g);
        g = serve_json(port, "GET", "/api/sessions/s1/grid?query=4&metric=sink", NULL, &st);
        vals = g ? test_json_get(g, "values") : NULL;
        if (vals && vals->n == 30) CHECK(fabs(vals->items[3].items[5].number - maps[((size_t)5 * 5 + 4) * 5]) < 2e-5, "grid sink");
        test_json_free(g);
        g = serve_json(port, "GET", "/api/sessions/s1/grid?query=4&metric=entropy", NULL, &st);
        CHECK(st == 200, "grid entropy: %d", st);
        test_json_free(g);
    } else {
        CHECK(0, "qkv inspect --npy: %lld floats, want %d", (long long)count, 9 * 5 * 5);
    }
    free(maps);
    /* next = the session's top */
    test_json *nx = serve_json(port, "GET", "/api/sessions/s1/next?k=3", NULL, &st);
    const test_json *nt = nx ? test_json_get(nx, "top") : NULL;
    CHECK(st == 200 && nt && nt->n == 3 && serve_num(&nt->items[0], "id") == serve_num(&top->items[0], "id"), "next: %d", st);
    test_json_free(nx);
    /* edit: hiding key 1 from the last query = qkv ablate --scope last's KL at position 1 */
    const char *ab[] = {"ablate", "-m", model, "-p", PROMPT, "--scope", "last", "--json", NULL};
    char *abl = serve_cli_stdout(ab), perr[200] = "";
    test_json *aj = abl ? test_json_parse(abl, perr, sizeof perr) : NULL;
    const test_json *pos = aj ? test_json_get(aj, "positions") : NULL;
    for (int j = 0; pos && j < 5; j += 2) {
        char body[128];
        snprintf(body, sizeof body, "{\"exclude\": [%d], \"k\": 3, \"layer\": 3, \"head\": 2}", j);
        test_json *e = serve_json(port, "POST", "/api/sessions/s1/edit", body, &st);
        const double kl = e ? serve_num(e, "kl") : NAN, want = serve_num(&pos->items[j], "kl");
        CHECK(st == 200 && fabs(kl - want) <= 1e-4 * (1 + want), "edit exclude [%d]: KL %g, qkv ablate's %g", j, kl, want);
        const test_json *row = e ? test_json_get(e, "row") : NULL;
        double after[5];
        CHECK(row && numbers(row, "after", after, 5) == 5 && after[j] == 0, "edit: the hidden key's weight after");
        test_json_free(e);
    }
    test_json_free(aj);
    free(abl);
    test_json *zh = serve_json(port, "POST", "/api/sessions/s1/edit", "{\"zero_heads\": [[3, 2], [4, 0]]}", &st);
    CHECK(st == 200 && zh && serve_num(zh, "kl") > 0, "edit zero_heads: %d", st);
    test_json_free(zh);
    /* the session is unchanged by all that: its next-token top again */
    nx = serve_json(port, "GET", "/api/sessions/s1/next?k=1", NULL, &st);
    nt = nx ? test_json_get(nx, "top") : NULL;
    CHECK(nt && serve_num(&nt->items[0], "p") == serve_num(&top->items[0], "p"), "the session changed under the probes");
    test_json_free(nx);
    /* lens = qkv lens --json byte for byte (patch: the tiny Gemma 3 below, and tests/test_serve_probes.c) */
    /* the server's threads: the same splits, so the same bytes */
    const char *lens[] = {"lens", "-m", model, "-p", PROMPT, "--threads", "2", "--json", NULL};
    serve_check_same_as_cli(port, "GET", "/api/sessions/s1/lens?k=5", NULL, lens);
    check_lens_window(port, 1, 4);
    /* generate: greedy continues with the top token; as events too */
    test_json *gj = serve_json(port, "POST", "/api/sessions/s1/generate", "{\"n\": 2}", &st);
    const test_json *toks = gj ? test_json_get(gj, "tokens") : NULL;
    CHECK(st == 200 && toks && toks->n == 7 && serve_num(&toks->items[5], "id") == serve_num(&top->items[0], "id"), "generate: %d", st);
    test_json_free(gj);
    serve_resp r;
    const char *g1 = "{\"n\": 1, \"temperature\": 0.8, \"seed\": 3}";
    serve_req(port, "POST", "/api/sessions/s1/generate", "Accept: text/event-stream\r\n", g1, strlen(g1), &r);
    CHECK(r.status == 200 && !strncmp(r.type, "text/event-stream", 17) && r.body && strstr(r.body, "event: token\ndata: {") &&
              strstr(r.body, "event: session\ndata: {\"id\": \"s1\", \"n_tokens\": 8"),
          "generate as events: %d %.300s", r.status, r.body ? r.body : "");
    serve_resp_free(&r);
    /* a session made with progress events; the list; delete */
    const char *b2 = "{\"tokens\": [1, 2, 3, 4, 5, 6, 7]}";
    serve_req(port, "POST", "/api/sessions", "Accept: text/event-stream\r\n", b2, strlen(b2), &r);
    CHECK(r.status == 200 && r.body && strstr(r.body, "event: progress\ndata: {\"done\": ") &&
              strstr(r.body, "\"total\": 7}") && strstr(r.body, "event: session\ndata: {\"id\": \"s2\""),
          "create as events: %d %.300s", r.status, r.body ? r.body : "");
    serve_resp_free(&r);
    test_json *ls = serve_json(port, "GET", "/api/sessions", NULL, &st);
    const test_json *arr = ls ? test_json_get(ls, "sessions") : NULL;
    CHECK(st == 200 && arr && arr->n == 2 && serve_num(ls, "max_sessions") == 4, "list: %d", st);
    test_json_free(ls);
    test_json *d = serve_json(port, "DELETE", "/api/sessions/s2", NULL, &st);
    CHECK(st == 200 && d && !strcmp(test_json_get(d, "deleted")->string, "s2"), "delete: %d", st);
    test_json_free(d);
    SERVE_CHECK_ERROR(port, "GET", "/api/sessions/s2", NULL, 404, "no session s2");
    test_json *again = serve_json(port, "GET", "/api/sessions/s1", NULL, &st);
    CHECK(st == 200 && again && serve_num(again, "n_tokens") == 8, "get: %d", st);
    test_json_free(again);
    /* the page: gzipped when accepted */
    serve_req(port, "GET", "/", "Accept-Encoding: gzip, deflate\r\n", NULL, 0, &r);
    CHECK(r.status == 200 && !strcmp(r.encoding, "gzip") && r.len > 2 && (unsigned char)r.body[0] == 0x1f &&
              (unsigned char)r.body[1] == 0x8b && !strncmp(r.type, "text/html", 9),
          "GET / (gzip): %d %s %s", r.status, r.encoding, r.type);
    serve_resp_free(&r);
    serve_req(port, "GET", "/", NULL, NULL, 0, &r);
    CHECK(r.status == 200 && !*r.encoding && r.body && strstr(r.body, "<html"), "GET /: %d", r.status);
    serve_resp_free(&r);
    test_json_free(s);
    serve_stop(&sv);
}

/* The tiny Gemma 3 (window 12; layers 0-4 slide, 5 is global) on 40 tokens:
 * rows of sliding and global layers = qkv inspect --npy's, and the edit's KL
 * = qkv ablate --scope last's. */
TEST(serve_api_family_gemma3_sliding_rows) {
    char model[700];
    snprintf(model, sizeof model, "%s/families/gemma3/model.gguf", test_fixture_dir());
    if (!test_require_file(model, "the family fixtures")) return;
    char ids[400] = "", body[500];
    for (int i = 0; i < 40; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", 5 + (i * 37) % 250);
    snprintf(body, sizeof body, "{\"tokens\": [%s]}", ids);
    serve_child sv;
    if (!serve_start(&sv, model, NULL)) return;
    int st;
    test_json *s = serve_json(sv.port, "POST", "/api/sessions", body, &st);
    CHECK(st == 200 && s && serve_num(s, "n_tokens") == 40, "create: %d", st);
    test_json_free(s);
    const char *prompt[] = {"--tokens", ids, NULL};
    for (int layer = 4; layer <= 5; layer++) {
        int64_t count = 0;
        float *maps = inspect_maps(model, prompt, layer, &count);
        CHECK(count == 4 * 40 * 40, "inspect: %lld floats", (long long)count);
        if (maps && count == 4 * 40 * 40)
            for (int h = 0; h < 4; h += 3) {
                check_row(sv.port, "s1", maps, 40, layer, h, 39);
                check_row(sv.port, "s1", maps, 40, layer, h, 20);
                /* 40 positions fit the overview's bins: block 1, the map itself */
                char path[128];
                snprintf(path, sizeof path, "/api/sessions/s1/overview?layer=%d&head=%d", layer, h);
                test_json *o = serve_json(sv.port, "GET", path, NULL, &st);
                static double v[40 * 40];
                CHECK(st == 200 && o && serve_num(o, "block") == 1 && serve_num(o, "bins") == 40 &&
                          numbers(o, "values", v, 40 * 40) == 40 * 40, "%s: %d", path, st);
                double worst = 0;
                for (int i = 0; o && i < 40 * 40; i++) worst = fmax(worst, fabs(v[i] - maps[(size_t)h * 1600 + i]));
                CHECK(worst < 2e-5, "%s: differs from qkv inspect --npy by %g", path, worst);
                test_json_free(o);
            }
        free(maps);
    }
    /* a sliding layer's keys outside the window weigh 0 */
    test_json *a = serve_json(sv.port, "GET", "/api/sessions/s1/attention?layer=0&head=1&query=39", NULL, &st);
    double w[40];
    CHECK(a && numbers(a, "weights", w, 40) == 40 && serve_num(a, "window") == 12, "attention: %d", st);
    for (int k = 0; a && k < 28; k++) CHECK(w[k] == 0, "key %d is outside layer 0's window: weight %g", k, w[k]);
    test_json_free(a);
    const char *ab[] = {"ablate", "-m", model, "--tokens", ids, "--scope", "last", "--json", NULL};
    char *abl = serve_cli_stdout(ab), perr[200] = "";
    test_json *aj = abl ? test_json_parse(abl, perr, sizeof perr) : NULL;
    const test_json *pos = aj ? test_json_get(aj, "positions") : NULL;
    test_json *e = serve_json(sv.port, "POST", "/api/sessions/s1/edit", "{\"exclude\": [35]}", &st);
    const double kl = e ? serve_num(e, "kl") : NAN, want = pos && pos->n == 40 ? serve_num(&pos->items[35], "kl") : NAN;
    CHECK(st == 200 && fabs(kl - want) <= 1e-4 * (1 + want), "edit exclude [35]: KL %g, qkv ablate's %g", kl, want);
    test_json_free(e);
    test_json_free(aj);
    free(abl);
    /* patch with the logit-diff metric and every sweep = qkv patch --json's */
    char cor[400], pbody[600];
    snprintf(cor, sizeof cor, "%s", ids);
    cor[0] = cor[0] == '9' ? '8' : '9'; /* the first id changed */
    snprintf(pbody, sizeof pbody, "{\"corrupt_tokens\": [%s], \"metric\": \"logit-diff\", \"answer\": %d, \"wrong\": %d, "
             "\"per_position\": true}", cor, 44, 45);
    const char *patch[] = {"patch", "-m", model, "--clean-tokens", ids, "--corrupt-tokens", cor, "--metric", "logit-diff",
                           "--answer", "(", "--wrong", ")", "--per-position", "--json", NULL};
    serve_check_same_as_cli(sv.port, "POST", "/api/sessions/s1/patch", pbody, patch);
    const char *lens[] = {"lens", "-m", model, "--tokens", ids, "-k", "3", "--json", NULL};
    serve_check_same_as_cli(sv.port, "GET", "/api/sessions/s1/lens?k=3", NULL, lens);
    serve_stop(&sv);
}
