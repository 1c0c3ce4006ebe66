/*
 * test_json_read.c — the tests' JSON reader (json_read.c) on what it
 * promises: every value kind, escapes down to surrogate pairs, nested
 * lists read back as a shape and C-order numbers, ragged lists and broken
 * documents refused with a reason.
 */
#include "testing.h"

#include "json_read.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(json_read_values_and_shapes) {
    char err[128] = "";
    test_json *v = test_json_parse(" {\"a\": [[1, 2.5, -3e2], [null, 0, 4]], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\","
                                   " \"t\": true, \"f\": false, \"z\": null, \"e\": [], \"o\": {}} ",
                                   err, sizeof err);
    CHECK(v != NULL, "parse: %s", err);
    if (!v) return;
    int64_t shape[4] = {0};
    const test_json *a = test_json_get(v, "a");
    CHECK(test_json_shape(a, shape, 4) == 2 && shape[0] == 2 && shape[1] == 3, "shape of a");
    double x[6];
    CHECK(test_json_numbers(a, x, 6) == 6 && x[0] == 1 && x[1] == 2.5 && x[2] == -300 && isnan(x[3]) && x[5] == 4,
          "numbers of a");
    const test_json *s = test_json_get(v, "s");
    CHECK(s && s->kind == TEST_JSON_STRING && !strcmp(s->string, "x\xC3\xA9\xF0\x9F\x98\x80\n\""), "escapes: %s",
          s ? s->string : "");
    CHECK(test_json_get(v, "t")->number == 1 && test_json_get(v, "f")->kind == TEST_JSON_BOOL, "booleans");
    CHECK(test_json_get(v, "z")->kind == TEST_JSON_NULL && !test_json_get(v, "missing"), "null, a missing key");
    CHECK(test_json_shape(test_json_get(v, "e"), shape, 4) == 1 && shape[0] == 0, "an empty list is [0]");
    CHECK(test_json_get(v, "o")->kind == TEST_JSON_OBJECT && test_json_get(v, "o")->n == 0, "an empty object");
    CHECK(test_json_shape(s, shape, 4) == -1, "a string has no shape");
    test_json_free(v);
}

TEST(json_read_refuses_broken_documents) {
    static const char *const bad[] = {
        "",          "{",        "[1, 2",       "[1,]",           "{\"a\" 1}", "{\"a\": 1,}", "01",
        "1.",        "-",        "\"\\x\"",     "\"\\ud800\"",    "\"a",       "[1] x",      "nul",
        "\"\x01\"",  "{1: 2}",   "[1 2]",       "tru",
    };
    char err[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        test_json *v = test_json_parse(bad[i], err, sizeof err);
        CHECK(v == NULL && err[0], "'%s' was accepted", bad[i]);
        test_json_free(v);
    }
    /* ragged and mixed lists have no shape */
    static const char *const ragged[] = {"[[1, 2], [3]]", "[[1], 2]", "[1, [2]]", "[[1], []]", "[\"a\"]"};
    for (size_t i = 0; i < sizeof ragged / sizeof ragged[0]; i++) {
        test_json *v = test_json_parse(ragged[i], err, sizeof err);
        int64_t shape[4];
        CHECK(v && test_json_shape(v, shape, 4) == -1, "'%s' has a shape", ragged[i]);
        test_json_free(v);
    }
    /* nesting is bounded */
    char deep[201];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    deep[200] = 0;
    CHECK(test_json_parse(deep, err, sizeof err) == NULL && strstr(err, "deep"), "100 levels: %s", err);
}
