/*
 * json_read.h — a small strict JSON reader for the tests that check a
 * command's --json: parse the whole text into a tree (RFC 8259: objects,
 * arrays, strings with every escape, numbers, true, false, null; nothing
 * after the value but white space), look keys up, and read a nested list
 * of numbers back as a shape and its elements in C order.
 */
#ifndef QKV_TESTS_JSON_READ_H
#define QKV_TESTS_JSON_READ_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TEST_JSON_NULL, TEST_JSON_BOOL, TEST_JSON_NUMBER, TEST_JSON_STRING, TEST_JSON_ARRAY, TEST_JSON_OBJECT } test_json_kind;

typedef struct test_json {
    test_json_kind kind;
    double number;           /* NUMBER; BOOL: 1 or 0 */
    char *string;            /* STRING: the decoded UTF-8 */
    int n;                   /* ARRAY, OBJECT: how many items */
    struct test_json *items; /* [n] */
    char **keys;             /* OBJECT: [n] */
} test_json;

/* The tree of text, or NULL with the reason and its byte offset in err [cap]. */
test_json *test_json_parse(const char *text, char *err, size_t cap);
void test_json_free(test_json *v);
/* The value of key in object v; NULL if v is not an object or has no such key. */
const test_json *test_json_get(const test_json *v, const char *key);
/* A nested list whose leaves are all numbers or null, every list at one
 * depth the same length: its number of dimensions (shape [max_dims]);
 * -1 for anything else. A number alone has 0 dimensions. */
int test_json_shape(const test_json *v, int64_t *shape, int max_dims);
/* Its leaves in C order into out [cap] (null as NaN); returns how many there are. */
int64_t test_json_numbers(const test_json *v, double *out, int64_t cap);

#endif
