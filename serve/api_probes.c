/*
 * api_probes.c — the probes that run a session's sequence again from
 * position 0: the logit lens (GET .../lens, `qkv lens --json`'s bytes, or a
 * window of positions) and activation patching (POST .../patch, `qkv patch
 * --json`'s bytes), written by the CLI's writers (cli/probe_json.c). Both
 * run on a model of their own over the server's weights
 * (serve_scratch_model), sized for the sequence in one call: the session's
 * cache is not touched.
 */
#include "server.h"
#include "probe_json.h"
#include "prompt.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The session's tokens as the commands print a prompt. */
static cli_prompt session_prompt(const serve_session *s) {
    return (cli_prompt){.ids = s->ids, .labels = s->pieces, .n = s->n};
}

int serve_api_lens(struct mg_connection *c, serve_server *sv, serve_session *s) {
    const int V = sv->cfg.n_vocab, L = sv->cfg.n_layer, n = s->n;
    int k, target, st;
    int32_t top1 = 0;
    for (int v = 1; v < V; v++)
        if (s->logits[v] > s->logits[top1]) top1 = v;
    int pos0, pos1;
    if ((st = http_query_int(c, "k", &k, 1, SERVE_MAX_K, 1, 5)) || (st = http_query_int(c, "target", &target, 0, V - 1, 1, top1)) ||
        (st = http_query_int(c, "pos0", &pos0, 0, n - 1, 1, 0)) || (st = http_query_int(c, "pos1", &pos1, pos0 + 1, n, 1, n)))
        return st;
    const int w = pos1 - pos0; /* the window read: positions pos0..pos1-1 */
    const size_t cells = (size_t)L * w;
    /* held to --max-mib with the run state: qkv_lens's residuals and logit rows, and the outputs
     * [L, n, k] ids, probabilities and pieces (a pointer and about 16 bytes each), [L, n] p(target) */
    const int64_t probe = qkv_lens_bytes(s->m, w, k) + (int64_t)cells * k * (int64_t)(sizeof(int32_t) + sizeof(float) +
                                                                                        sizeof(char *) + 16) +
                          (int64_t)cells * (int64_t)sizeof(float);
    qkv_model *m = serve_scratch_model(c, sv, pos1, probe, "the lens's residuals and outputs");
    if (!m) return 400;
    int32_t *ids = malloc(cells * k * sizeof(int32_t));
    float *probs = malloc(cells * k * sizeof(float)), *tp = malloc(cells * sizeof(float));
    char **labels = calloc(cells * k, sizeof(char *)), *target_label = serve_piece(sv, target);
    qkv_lens_out out = {.top_ids = ids, .top_probs = probs, .target_prob = tp};
    const qkv_lens_params lp = {.k = k, .target = target, .pos0 = pos0, .pos1 = pos1};
    qkv_error err = {0};
    if (!ids || !probs || !tp || !labels || !target_label) st = http_error(c, 500, "out of memory");
    else if (qkv_lens(&out, m, s->ids, pos1, &lp, &err)) st = http_error(c, 500, "%s", err.msg);
    qkv_model_close(m);
    for (size_t i = 0; !st && i < cells * k; i++)
        if (!(labels[i] = serve_piece(sv, ids[i]))) st = http_error(c, 500, "out of memory");
    http_buf b;
    if (!st && !(st = http_buf_open(c, &b) ? 500 : 0)) {
        const cli_prompt pr = {.ids = s->ids + pos0, .labels = s->pieces + pos0, .n = w};
        const cli_lens_json j = {.model = sv->o.model, .n_tokens = n, .pos0 = pos0, .tokens = &pr, .n_layer = L, .k = k, .target = target,
                                 .target_label = target_label, .top_ids = ids, .top_labels = labels, .top_probs = probs,
                                 .target_prob = tp};
        cli_lens_json_write(b.f, &j);
        http_buf_send(c, &b, 200, NULL);
        st = 200;
    }
    cli_labels_free(labels, labels ? (int64_t)(cells * k) : 0);
    free(ids);
    free(probs);
    free(tp);
    free(target_label);
    return st;
}

/* ----------------------------------------------------------------- patch */

/* "answer" / "wrong": one token, as text (exactly one token) or an id; 0 or 400 sent. */
static int one_token(struct mg_connection *c, serve_server *sv, const cJSON *req, const char *key, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v) return http_error(c, 400, "\"metric\": \"logit-diff\" needs \"answer\" and \"wrong\" (one token each)");
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < sv->cfg.n_vocab && v->valuedouble == floor(v->valuedouble)) {
        *out = (int32_t)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring[0] || !http_utf8_valid(v->valuestring, strlen(v->valuestring)))
        return http_error(c, 400, "\"%s\": want a token id or a text of exactly one token", key);
    int32_t ids[4];
    int64_t n = 0;
    if (qkv_tokenize(sv->tok, v->valuestring, strlen(v->valuestring), 0, 0, ids, 4, &n, NULL) || n != 1)
        return http_error(c, 400, "\"%s\": the text is not exactly one token", key);
    *out = ids[0];
    return 0;
}

/* The sweeps asked for (bit per qkv_sweep): "sweeps" names, "per_position" adds head_out_pos; 0 or 400 sent. */
static int sweeps_of(struct mg_connection *c, const cJSON *req, int *sweeps) {
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(req, "sweeps"), *pp = cJSON_GetObjectItemCaseSensitive(req, "per_position");
    *sweeps = ((1 << QKV_SWEEP_COUNT) - 1) & ~(1 << QKV_SWEEP_HEAD_OUT_POS); /* `qkv patch`'s default */
    if (sw) {
        if (!cJSON_IsArray(sw) || !cJSON_GetArraySize(sw)) return http_error(c, 400, "\"sweeps\" must be a non-empty array of sweep names");
        *sweeps = 0;
        for (const cJSON *e = sw->child; e; e = e->next) {
            int found = -1;
            for (int s = 0; s < QKV_SWEEP_COUNT && cJSON_IsString(e); s++)
                if (!strcmp(e->valuestring, qkv_sweep_name((qkv_sweep)s))) found = s;
            if (found < 0) return http_error(c, 400, "\"sweeps\": want names among head_out, head_out_pos, resid_pre, attn_out, mlp_out");
            *sweeps |= 1 << found;
        }
    }
    if (pp && !cJSON_IsBool(pp)) return http_error(c, 400, "\"per_position\" must be true or false");
    if (cJSON_IsTrue(pp)) *sweeps |= 1 << QKV_SWEEP_HEAD_OUT_POS;
    return 0;
}

int serve_api_patch(struct mg_connection *c, serve_server *sv, serve_session *s) {
    cJSON *req;
    int st = serve_body_json(c, sv, &req);
    if (st) return st;
    const int n = s->n, L = sv->cfg.n_layer, H = sv->cfg.n_head;
    int32_t *corrupt = NULL, answer = -1, wrong = -1;
    int nc = 0, sweeps = 0, max_mib = (int)(QKV_PATCH_DEFAULT_MAX_BYTES >> 20);
    qkv_metric_kind kind = QKV_METRIC_KL;
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(req, "metric"), *jx = cJSON_GetObjectItemCaseSensitive(req, "max_mib");
    qkv_patch_out out = {0};
    char *al = NULL, *wl = NULL;
    qkv_model *m = NULL;
    if ((st = serve_prompt_ids(c, sv, req, "corrupt", "corrupt_tokens", &corrupt, &nc)) || (st = sweeps_of(c, req, &sweeps)))
        goto done;
    if (jm) {
        int found = -1;
        for (int i = 0; cli_metric_names[i] && cJSON_IsString(jm); i++)
            if (!strcmp(jm->valuestring, cli_metric_names[i])) found = i;
        if (found < 0) {
            st = http_error(c, 400, "\"metric\": want \"kl\" or \"logit-diff\"");
            goto done;
        }
        kind = (qkv_metric_kind)found;
    }
    if (jx && !(cJSON_IsNumber(jx) && jx->valuedouble >= 1 && jx->valuedouble <= 1 << 20)) {
        st = http_error(c, 400, "\"max_mib\": want an integer in [1, %d]", 1 << 20);
        goto done;
    }
    if (jx) max_mib = (int)jx->valuedouble;
    if (kind == QKV_METRIC_LOGIT_DIFF) {
        if ((st = one_token(c, sv, req, "answer", &answer)) || (st = one_token(c, sv, req, "wrong", &wrong))) goto done;
        if (answer == wrong) {
            st = http_error(c, 400, "\"answer\" and \"wrong\" are the same token (%d)", answer);
            goto done;
        }
    } else if (cJSON_GetObjectItemCaseSensitive(req, "answer") || cJSON_GetObjectItemCaseSensitive(req, "wrong")) {
        st = http_error(c, 400, "\"answer\" and \"wrong\" go with \"metric\": \"logit-diff\"");
        goto done;
    }
    if (nc != n) {
        st = http_error(c, 400, "the session is %d tokens and the corrupted prompt %d: patching needs the same count", n, nc);
        goto done;
    }
    if (!memcmp(corrupt, s->ids, (size_t)n * sizeof(int32_t))) {
        st = http_error(c, 400, "the corrupted prompt is the session's own %d tokens: nothing to patch", n);
        goto done;
    }
    for (int w = 0; w < QKV_SWEEP_COUNT; w++) {
        if (!(sweeps & (1 << w))) continue;
        int64_t shape[3];
        qkv_sweep_shape(shape, (qkv_sweep)w, L, H, n);
        if (!(out.recovery[w] = malloc((size_t)(shape[0] * shape[1] * shape[2]) * sizeof(float)))) {
            st = http_error(c, 500, "out of memory");
            goto done;
        }
    }
    const int64_t need = qkv_patch_bytes(s->m, n, &out), limit = (int64_t)max_mib << 20;
    if (need > limit) {
        st = http_error(c, 400, "the sweeps would cache %lld bytes (%.1f MiB) of activations, above \"max_mib\" %d", (long long)need,
                        (double)need / (1 << 20), max_mib);
        goto done;
    }
    qkv_patch_summary sum = {0};
    const qkv_patch_params pp = {.metric = {.kind = kind, .answer = answer, .wrong = wrong}, .max_bytes = limit};
    qkv_error err = {0};
    if (!(m = serve_scratch_model(c, sv, n, need, "the sweeps' cached activations"))) {
        st = 400;
        goto done;
    }
    if (qkv_patch(&out, &sum, m, s->ids, corrupt, n, &pp, &err)) {
        st = http_error(c, err.status == QKV_ERR_INVALID ? 400 : 500, "%s", err.msg);
        goto done;
    }
    if ((answer >= 0 && !(al = serve_piece(sv, answer))) || (wrong >= 0 && !(wl = serve_piece(sv, wrong)))) {
        st = http_error(c, 500, "out of memory");
        goto done;
    }
    cli_prompt clean = session_prompt(s), cor = {.ids = corrupt, .n = n, .labels = calloc((size_t)n, sizeof(char *))};
    for (int i = 0; cor.labels && i < n; i++)
        if (!(cor.labels[i] = serve_piece(sv, corrupt[i]))) {
            cli_labels_free(cor.labels, n);
            cor.labels = NULL;
        }
    http_buf b;
    if (!cor.labels) st = http_error(c, 500, "out of memory");
    else if (!(st = http_buf_open(c, &b) ? 500 : 0)) {
        const cli_patch_json j = {.model = sv->o.model, .metric = kind, .answer = answer, .wrong = wrong,
                                  .answer_label = al, .wrong_label = wl, .n_layer = L, .n_head = H, .clean = &clean,
                                  .corrupt = &cor, .sum = &sum, .out = &out};
        cli_patch_json_write(b.f, &j);
        http_buf_send(c, &b, 200, NULL);
        st = 200;
    }
    if (cor.labels) cli_labels_free(cor.labels, n);
done:
    qkv_model_close(m);
    for (int w = 0; w < QKV_SWEEP_COUNT; w++) free(out.recovery[w]);
    free(al);
    free(wl);
    free(corrupt);
    cJSON_Delete(req);
    return st;
}
