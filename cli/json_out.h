/* json_out.h — JSON values as the commands print them (cli/util.c). */
#ifndef QKV_CLI_JSON_OUT_H
#define QKV_CLI_JSON_OUT_H

#include "prompt.h"
#include "qkv_render.h"

#include <stdint.h>
#include <stdio.h>

/* s as a JSON string, quotes included (render/json.c: the one writer). */
#define cli_json_string(f, s) qkv_json_string((f), (s), 0)
/* An array [shape[0], ..., shape[ndim-1]] (C order, ndim >= 1) as nested
 * JSON lists: put(f, i, user) writes element i; each innermost list on one
 * line, the items of the outer ones on lines of their own, indent spaces in. */
void cli_json_nested(FILE *f, int ndim, const int64_t *shape, int indent,
                     void (*put)(FILE *f, int64_t i, const void *user), const void *user);
/* cli_json_nested of floats v: %.9g (read back as the same float), NaN and
 * infinities as null. */
void cli_json_floats(FILE *f, const float *v, int ndim, const int64_t *shape, int indent);
/* A double as JSON: %.10g, NaN and infinities as null. */
void cli_json_double(FILE *f, double x);
/* One token as JSON: {"id": id, "piece": label}, or null for id < 0. */
void cli_json_token(FILE *f, int32_t id, const char *label);
/* A prompt's tokens as a JSON list of cli_json_token (labels from cli_prompt_labels). */
void cli_json_prompt(FILE *f, const cli_prompt *p);

#endif /* QKV_CLI_JSON_OUT_H */
