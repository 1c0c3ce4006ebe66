/*
 * test_layers.c — the layers of libqkv as facts the compiler and this test
 * keep, not a sentence in a design note:
 *
 *   base  <-  attn, io, gguf  <-  model, tokenizer  <-  cost, probe
 *
 * One public header per layer (include/qkv/<layer>.h); each src/<area>/
 * includes only the public headers of its own layer and those below, and no
 * internal header of an area above (so a wrong-way call is an undeclared
 * function, an error under -Werror); nothing in src/ includes the umbrella
 * qkv.h. Every public header compiles on its own, and includes only layers
 * below it.
 */
#include "testing.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row per layer: its public header (under include/qkv/), the src/ area
 * that implements it, and the layers it may include (itself and below). */
typedef struct {
    const char *name;
    const char *below; /* space-separated layer names it may include, itself included */
} layer;

static const layer LAYERS[] = {
    {"util", "util base"},       /* src/util: the pool, the CPU, errors; public part in base.h */
    {"base", "base"},
    {"attn", "base attn util"},
    {"io", "base io util"},
    {"gguf", "base gguf util"},
    {"tokenizer", "base gguf tokenizer util"},
    {"model", "base attn io gguf model util"},
    {"cost", "base attn gguf model cost util"},
    {"probe", "base attn io gguf model tokenizer probe util"},
};
#define N_LAYERS ((int)(sizeof LAYERS / sizeof LAYERS[0]))

static const layer *find_layer(const char *name) {
    for (int i = 0; i < N_LAYERS; i++)
        if (!strcmp(LAYERS[i].name, name)) return &LAYERS[i];
    return NULL;
}

/* 1 if `word` is one of the space-separated words of `list`. */
static int has_word(const char *list, const char *word, size_t len) {
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, " ");
        if (n == len && !strncmp(p, word, len)) return 1;
        p += n + (p[n] == ' ');
    }
    return 0;
}

/* The layer an #include "..." line names: "qkv/model.h" -> model, "gguf/quant.h"
 * -> gguf (an area's internal header), "qkv.h" -> "umbrella"; NULL for a
 * system header or a file of the same directory. */
static const char *included_layer(char *out, size_t cap, const char *line) {
    const char *q = strstr(line, "#include \"");
    if (!q || strncmp(line, "#include", 8)) return NULL;
    q += 10;
    const char *end = strchr(q, '"');
    if (!end) return NULL;
    if (!strncmp(q, "qkv.h\"", 6)) return snprintf(out, cap, "umbrella"), out;
    if (!strncmp(q, "qkv/", 4)) return snprintf(out, cap, "%.*s", (int)(end - q - 6), q + 4), out;
    const char *slash = memchr(q, '/', (size_t)(end - q));
    if (!slash) return NULL;
    return snprintf(out, cap, "%.*s", (int)(slash - q), q), out;
}

/* Checks every #include "..." of `path` against the layer `owner`; returns the
 * number of includes read. */
static int check_file_includes(const char *path, const layer *owner) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    char line[512], name[64];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!included_layer(name, sizeof name, line)) continue;
        n++;
        CHECK(has_word(owner->below, name, strlen(name)), "%s (layer %s) includes a %s header: %.*s", path,
              owner->name, name, (int)strcspn(line, "\n"), line);
    }
    fclose(f);
    return n;
}

/* Checks the includes of each .c and .h directly under dir against owner;
 * returns the number of files. */
static int for_each_source(const char *dir, const layer *owner) {
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t len = strlen(e->d_name);
        if (len < 3 || (strcmp(e->d_name + len - 2, ".c") && strcmp(e->d_name + len - 2, ".h"))) continue;
        char path[600];
        snprintf(path, sizeof path, "%.300s/%.255s", dir, e->d_name);
        check_file_includes(path, owner);
        n++;
    }
    closedir(d);
    return n;
}

TEST(layers_each_src_area_includes_only_its_layer_and_below) {
    DIR *d = opendir("src");
    CHECK(d != NULL, "cannot open src/ (the tests run from the repository root)");
    if (!d) return;
    int areas = 0, files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        const layer *l = find_layer(e->d_name);
        CHECK(l != NULL, "src/%s is in no layer (add a row to LAYERS in tests/test_layers.c)", e->d_name);
        if (!l) continue;
        char dir[300];
        snprintf(dir, sizeof dir, "src/%s", e->d_name);
        files += for_each_source(dir, l);
        areas++;
    }
    closedir(d);
    CHECK(areas >= 8 && files > 50, "read %d areas, %d files", areas, files);
    printf("     %d areas, %d files: each includes only its layer and those below\n", areas, files);
}

TEST(layers_each_public_header_includes_only_layers_below) {
    int n = 0;
    for (int i = 0; i < N_LAYERS; i++) {
        char path[128];
        snprintf(path, sizeof path, "include/qkv/%s.h", LAYERS[i].name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* util has no public header of its own */
        fclose(f);
        check_file_includes(path, &LAYERS[i]);
        n++;
    }
    CHECK(n == N_LAYERS - 1, "%d public headers for %d layers", n, N_LAYERS - 1);
}

/* cc -fsyntax-only on a small file; returns the compiler's exit status and
 * its first error line (else its first line) in msg. */
static int compile_snippet(char *msg, size_t cap, const char *source) {
    char src[] = "/tmp/qkv_layer_XXXXXX.c";
    int fd = mkstemps(src, 2);
    CHECK(fd >= 0, "mkstemps failed");
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "w");
    fputs(source, f);
    fclose(f);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -Iinclude %s 2>&1", cc, src);
    FILE *p = popen(cmd, "r");
    msg[0] = 0;
    if (p) {
        char line[512];
        int have_error = 0;
        while (fgets(line, sizeof line, p))
            if (!msg[0] || (!have_error && strstr(line, "error:"))) {
                have_error = strstr(line, "error:") != NULL;
                snprintf(msg, cap, "%.*s", (int)strcspn(line, "\n"), line);
            }
    }
    const int rc = p ? pclose(p) : -1;
    remove(src);
    return rc;
}

TEST(layers_every_public_header_compiles_alone) {
    for (int i = 0; i < N_LAYERS; i++) {
        char path[128], source[256], msg[512];
        snprintf(path, sizeof path, "include/qkv/%s.h", LAYERS[i].name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        fclose(f);
        snprintf(source, sizeof source, "#include \"qkv/%s.h\"\n#include \"qkv/%s.h\"\n", LAYERS[i].name,
                 LAYERS[i].name);
        CHECK(compile_snippet(msg, sizeof msg, source) == 0, "%s alone (twice: its guard) does not compile: %s", path,
              msg);
    }
    char msg[512];
    CHECK(compile_snippet(msg, sizeof msg, "#include \"qkv.h\"\n") == 0, "the umbrella qkv.h: %s", msg);
}

/* The point of the split: code that sees only a lower layer cannot call up. */
TEST(layers_a_wrong_way_call_does_not_compile) {
    char msg[512];
    static const char *const wrong[] = {
        "#include \"qkv/attn.h\"\nint f(void);\nint f(void) { return qkv_model_forward(0, 0, 0, 0, 0, 0, 0); }\n",
        "#include \"qkv/model.h\"\nint f(void);\nint f(void) { return qkv_lens(0, 0, 0, 0, 0, 0); }\n",
        "#include \"qkv/gguf.h\"\nint f(void);\nint f(void) { return qkv_attn_check(0, 0); }\n",
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        CHECK(compile_snippet(msg, sizeof msg, wrong[i]) != 0, "compiled: %s", wrong[i]);
        CHECK(strstr(msg, "implicit declaration") || strstr(msg, "undeclared"), "not an undeclared call: %s", msg);
    }
    /* and the same calls compile with the right layer's header */
    CHECK(compile_snippet(msg, sizeof msg,
                          "#include \"qkv/model.h\"\nint f(void);\nint f(void) { return qkv_model_forward(0, 0, 0, 0, "
                          "0, 0, 0); }\n") == 0,
          "qkv_model_forward through qkv/model.h: %s", msg);
}
