/*
 * svg_check.h — a well-formedness check of the SVG the CLI and
 * render/chart.c write (XML 1.0, the subset they use): one root element,
 * every tag closed in order (or self-closed), attributes double-quoted,
 * text and values free of raw '<', of '&' outside &lt; &gt; &amp; &quot;
 * &#N; and of control bytes. Header-only. Not a parser: no comments,
 * CDATA, processing instructions or doctype (an HTML page is not checked).
 */
#ifndef QKV_TESTS_SVG_CHECK_H
#define QKV_TESTS_SVG_CHECK_H

#include <string.h>

/* Text or an attribute value from p to the first of stop; NULL if bad. */
static inline const char *svg_text_end(const char *p, const char *stop) {
    for (; *p && !strchr(stop, *p); p++) {
        const unsigned char c = (unsigned char)*p;
        if (c == '<' || (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f) return NULL;
        if (c != '&') continue;
        static const char *const ents[] = {"&lt;", "&gt;", "&amp;", "&quot;", "&#"};
        int ok = 0;
        for (int i = 0; i < 5 && !ok; i++) ok = !strncmp(p, ents[i], strlen(ents[i]));
        if (!ok || !strchr(p, ';')) return NULL;
    }
    return p;
}

/* 1 if s is one well-formed element (whitespace around it allowed). */
static inline int svg_well_formed(const char *s) {
    const char *open[64]; /* the names of the open elements */
    size_t open_len[64];
    int depth = 0, roots = 0;
    for (const char *p = s; *p;) {
        if (*p != '<') {
            const char *e = svg_text_end(p, "<");
            if (!e || (depth == 0 && strspn(p, " \t\r\n") < (size_t)(e - p))) return 0;
            p = e;
            continue;
        }
        const int closing = p[1] == '/';
        const char *name = p + 1 + closing;
        const size_t n = strcspn(name, " \t\r\n/>");
        if (!n) return 0;
        p = name + n;
        if (closing) {
            if (!depth || open_len[depth - 1] != n || strncmp(open[depth - 1], name, n)) return 0;
            depth--;
            p += strspn(p, " \t\r\n");
            if (*p++ != '>') return 0;
            continue;
        }
        for (;;) { /* attributes: name="value" */
            p += strspn(p, " \t\r\n");
            if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
            const size_t an = strcspn(p, "= \t\r\n/>");
            if (!an || p[an] != '=' || p[an + 1] != '"') return 0;
            const char *e = svg_text_end(p + an + 2, "\"");
            if (!e || *e != '"') return 0;
            p = e + 1;
        }
        if (depth == 0 && roots++) return 0;
        if (*p == '/') {
            p += 2;
            continue;
        }
        if (depth == 64) return 0;
        open[depth] = name, open_len[depth++] = n;
        p++;
    }
    return depth == 0 && roots == 1;
}

#endif /* QKV_TESTS_SVG_CHECK_H */
