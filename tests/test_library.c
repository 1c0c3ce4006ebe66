/*
 * test_library.c — what the built libraries promise as artefacts: the shared
 * library's soname is libqkv.so.MAJOR and it needs nothing beyond libc and
 * libm (the pictures live in libqkv_render.a; no OpenMP: its threads are
 * util/parallel.c's pool); the qkv binary needs no libpng or zlib (the PNG
 * encoder is render/'s own); the version
 * the library reports is the header's; the page the renderer embeds is
 * render/inspect_page.html byte for byte.
 */
#include "qkv.h"
#include "testing.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The build directory: that of $QKV_BIN (build/qkv or build/portable/qkv). */
static void build_dir(char *out, size_t cap) {
    const char *bin = getenv("QKV_BIN");
    snprintf(out, cap, "%s", bin ? bin : "build/qkv");
    char *slash = strrchr(out, '/');
    if (slash) *slash = 0;
    else snprintf(out, cap, ".");
}

TEST(library_version_matches_header) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", QKV_VERSION_MAJOR, QKV_VERSION_MINOR, QKV_VERSION_PATCH);
    CHECK(!strcmp(QKV_VERSION, want), "QKV_VERSION %s, numbers say %s", QKV_VERSION, want);
    CHECK(!strcmp(qkv_version(), QKV_VERSION), "qkv_version() %s, header %s", qkv_version(), QKV_VERSION);
}

TEST(shared_library_soname_and_dependencies) {
    char dir[512], cmd[700], line[512];
    build_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "readelf -d '%s/libqkv.so' 2>&1", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run readelf");
    if (!p) return;
    char soname[64];
    snprintf(soname, sizeof soname, "[libqkv.so.%d]", QKV_VERSION_MAJOR);
    int has_soname = 0, n_needed = 0;
    while (fgets(line, sizeof line, p)) {
        if (strstr(line, "(SONAME)")) has_soname = strstr(line, soname) != NULL;
        if (strstr(line, "(NEEDED)")) {
            n_needed++;
            int allowed = strstr(line, "[libc.so") || strstr(line, "[libm.so") || strstr(line, "[libpthread.so") ||
                          strstr(line, "[libmvec.so");
            CHECK(allowed, "libqkv.so needs more than libc, libm and libpthread: %s", line);
        }
    }
    CHECK(pclose(p) == 0, "readelf failed on %s/libqkv.so", dir);
    CHECK(has_soname, "no SONAME %s", soname);
    CHECK(n_needed >= 2, "readelf listed %d NEEDED entries", n_needed);

    /* the file a program loads by its soname answers with the same version */
    char so[600];
    snprintf(so, sizeof so, "%s/libqkv.so.%d", dir, QKV_VERSION_MAJOR);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen %s: %s", so, dlerror());
    if (!h) return;
    const char *(*version)(void) = NULL;
    void *sym = dlsym(h, "qkv_version");
    memcpy(&version, &sym, sizeof sym); /* POSIX's object-to-function pointer, without the cast C forbids */
    CHECK(version && !strcmp(version(), QKV_VERSION), "dlsym qkv_version");
    dlclose(h);
}

TEST(qkv_binary_needs_no_libpng) {
    char cmd[700], line[512];
    const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
    snprintf(cmd, sizeof cmd, "readelf -d '%s' 2>&1", bin);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run readelf");
    if (!p) return;
    int n_needed = 0;
    while (fgets(line, sizeof line, p)) {
        if (!strstr(line, "(NEEDED)")) continue;
        n_needed++;
        CHECK(!strstr(line, "[libpng") && !strstr(line, "[libz."), "%s links %s", bin, line);
    }
    CHECK(pclose(p) == 0 && n_needed >= 2, "readelf -d %s: %d NEEDED entries", bin, n_needed);
}

extern const char render_inspect_page[];

TEST(render_embeds_the_page_file) {
    size_t len = 0;
    char *page = test_read_file("render/inspect_page.html", &len);
    CHECK(page != NULL, "cannot read render/inspect_page.html");
    if (!page) return;
    CHECK(!strcmp(page, render_inspect_page), "the embedded page differs from render/inspect_page.html");
    CHECK(!strncmp(page, "<!DOCTYPE html>", 15) && strstr(page, "</html>") && strstr(page, "<!--qkv:data-->\n") &&
              strstr(page, "<title>"),
          "render/inspect_page.html lacks its doctype, title, data mark or end");
    free(page);
}

#if !defined(__AVX__)
/* The default build's promise, one binary for every x86-64: outside the
 * per-ISA kernel files, whose functions run only after the dispatcher has
 * seen the CPU has the instructions, libqkv holds no VEX or EVEX instruction
 * (v-prefixed mnemonics, which include every ymm/zmm use, and k-mask ones).
 * Not compiled in the NATIVE=1 build, which makes no such promise. */
TEST(library_baseline_code_is_plain_x86_64) {
    static const char *const per_isa[] = {"tile_avx2.o",     "tile_avx512.o",   "tile_avx512bf16.o", "matmul_avx2.o",
                                          "matmul_avx512.o", "ffn_act_avx2.o",  "ffn_act_avx512.o",  "overview_avx2.o",
                                          "overview_avx512.o"};
    char dir[512], cmd[700], line[1024], member[256] = "";
    build_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn '%s/libqkv.a' 2>&1", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run objdump");
    if (!p) return;
    int n_insn = 0, n_bad = 0, isa_file = 0, n_isa_vector = 0;
    while (fgets(line, sizeof line, p)) {
        const char *fmt = strstr(line, ":     file format");
        if (fmt) {
            snprintf(member, sizeof member, "%.*s", (int)(fmt - line), line);
            isa_file = 0;
            for (size_t i = 0; i < sizeof per_isa / sizeof per_isa[0]; i++)
                if (!strcmp(member, per_isa[i])) isa_file = 1;
            continue;
        }
        const char *tab = strchr(line, '\t'); /* "   offset:\tmnemonic operands" */
        if (!tab || !strchr(line, ':')) continue;
        n_insn++;
        const char *m = tab + 1;
        int vex = m[0] == 'v' && m[1] >= 'a' && m[1] <= 'z' && strncmp(m, "verr", 4) && strncmp(m, "verw", 4);
        int kmask = m[0] == 'k' && strchr("amnoxsu", m[1]) && strstr(line, "%k");
        if (!(vex || kmask)) continue;
        if (isa_file) n_isa_vector++;
        else if (++n_bad <= 5) test_fail(__FILE__, __LINE__, "%s: %s", member, m);
    }
    CHECK(pclose(p) == 0, "objdump failed on %s/libqkv.a", dir);
    CHECK(n_insn > 10000, "objdump listed only %d instructions", n_insn);
    CHECK(n_isa_vector > 1000, "the per-ISA kernels hold only %d vector instructions", n_isa_vector);
    CHECK(n_bad == 0, "%d VEX/EVEX instructions outside the per-ISA kernel files", n_bad);
}
#endif

/* QKV_ISA narrows the one process-wide choice (util/cpu.c) that attention
 * and the matmuls share; an unknown name is ignored. */
TEST(qkv_isa_narrows_the_process_choice) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        char cmd[700], line[2048], want[64];
        const char *bin = getenv("QKV_BIN") ? getenv("QKV_BIN") : "build/qkv";
        snprintf(cmd, sizeof cmd, "QKV_ISA=%s '%s' bench --n 64 --repeat 1 --threads 1 --json 2>&1", names[i], bin);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL, "cannot run %s", cmd);
        if (!p) continue;
        char isa[32] = "";
        while (fgets(line, sizeof line, p)) {
            const char *at = strstr(line, "\"isa\": \"");
            if (at) sscanf(at + 8, "%31[a-z0-9]", isa);
        }
        pclose(p);
        /* the CPU may lack the ISA: then the best it has below it */
        int supported = i == 0 || (i == 1 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                                __builtin_cpu_supports("f16c")
                                          : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"));
        snprintf(want, sizeof want, "%s", names[i]);
        if (supported) CHECK(!strcmp(isa, want), "QKV_ISA=%s: bench ran %s", names[i], isa);
        else CHECK(isa[0] && strcmp(isa, want), "QKV_ISA=%s (unsupported): bench ran '%s'", names[i], isa);
    }
}

/* The names of the functions the public headers (include/qkv/, the
 * umbrella include/qkv.h includes them all) declare, each declaration
 * opening a line with QKV_API; a declaration without it is counted in
 * *unmarked. */
static int header_functions(char names[][64], int cap, int *unmarked) {
    FILE *ls = popen("ls include/qkv/*.h", "r");
    CHECK(ls != NULL, "cannot list include/qkv");
    if (!ls) return 0;
    char path[256], line[512];
    int n = 0, n_headers = 0;
    *unmarked = 0;
    while (fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = 0;
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "cannot open %s", path);
        if (!f) continue;
        n_headers++;
        while (fgets(line, sizeof line, f)) {
            const char *open = strchr(line, '('), *name = open;
            while (name && name > line && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') ||
                                           (name[-1] >= '0' && name[-1] <= '9')))
                name--;
            if (!open || strncmp(name, "qkv_", 4) || line[0] == ' ' || line[0] == '#' || line[0] == '/' ||
                line[0] == '*' || !strncmp(line, "typedef", 7))
                continue;
            if (strncmp(line, "QKV_API ", 8)) {
                ++*unmarked;
                continue;
            }
            if (n < cap) snprintf(names[n++], 64, "%.*s", (int)(open - name), name);
        }
        fclose(f);
    }
    CHECK(pclose(ls) == 0 && n_headers >= 2, "include/qkv/*.h: %d headers read", n_headers);
    return n;
}

static int listed(char names[][64], int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}

TEST(shared_library_exports_exactly_the_header) {
    static char declared[512][64], exported[512][64];
    int unmarked = 0;
    const int n_decl = header_functions(declared, 512, &unmarked);
    CHECK(n_decl > 100 && unmarked == 0, "include/qkv: %d functions, %d declarations without QKV_API", n_decl, unmarked);
    char dir[512], cmd[700], line[512];
    build_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s/libqkv.so' 2>&1", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run nm");
    if (!p) return;
    int n_exp = 0, data = 0;
    while (fgets(line, sizeof line, p)) {
        char type = 0, sym[256] = {0};
        if (sscanf(line, "%*s %c %255s", &type, sym) != 2) continue;
        if (type == 'T' && n_exp < 512) snprintf(exported[n_exp++], 64, "%.63s", sym);
        else if (type == 'D' || type == 'B' || type == 'R') {
            data++;
            printf("     exported data: %s", line);
        }
    }
    CHECK(pclose(p) == 0, "nm failed");
    for (int i = 0; i < n_exp; i++) CHECK(listed(declared, n_decl, exported[i]), "%s is exported, not in include/qkv", exported[i]);
    for (int i = 0; i < n_decl; i++) CHECK(listed(exported, n_exp, declared[i]), "%s is in include/qkv, not exported", declared[i]);
    CHECK(data == 0, "%d data symbols exported", data);
    printf("     libqkv.so exports %d functions, the %d include/qkv declares\n", n_exp, n_decl);
}
