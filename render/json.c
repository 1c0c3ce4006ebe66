/*
 * json.c — the one JSON string writer: the page's data blocks (html.c) and
 * every --json the CLI prints use it.
 */
#include "qkv_render.h"

void qkv_json_string(FILE *f, const char *s, int in_script) {
    fputc('"', f);
    uint32_t cp;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        const int n = qkv_text_next(&cp, (const char *)p);
        if (n > 1) fwrite(p, 1, (size_t)n, f), p += n - 1;
        else if (*p >= 0x80) fputs("\\ufffd", f); /* JSON is UTF-8: a broken sequence (a reply cut mid-character) */
        else if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20 || *p == 0x7F || (in_script && (*p == '<' || *p == '>' || *p == '&')))
            fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}
