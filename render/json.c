/*
 * json.c — the one JSON string writer: the page's data blocks (html.c) and
 * every --json the CLI prints use it.
 */
#include "qkv_render.h"

void qkv_json_string(FILE *f, const char *s, int in_script) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20 || *p == 0x7F || (in_script && (*p == '<' || *p == '>' || *p == '&')))
            fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}
