/*
 * buffers.c — laying out a table of buffers (buffers.h). It allocates
 * nothing.
 */
#include "util/buffers.h"

#include <stdint.h>
#include <string.h>

/* Bytes of one row, rounded up to UTIL_BUFFER_ALIGN; SIZE_MAX on overflow. */
static size_t row_bytes(const util_buffer *r) {
    if (r->size && r->count > (SIZE_MAX - UTIL_BUFFER_ALIGN) / r->size) return SIZE_MAX;
    return (r->count * r->size + UTIL_BUFFER_ALIGN - 1) / UTIL_BUFFER_ALIGN * UTIL_BUFFER_ALIGN;
}

size_t util_buffers_bytes(const util_buffer *rows, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t b = row_bytes(&rows[i]);
        if (b > SIZE_MAX - total) return SIZE_MAX;
        total += b;
    }
    return total;
}

char *util_buffers_place(void *mem, const util_buffer *rows, size_t n) {
    char *at = mem;
    for (size_t i = 0; i < n; i++) {
        void *p = at;
        memcpy(rows[i].ptr, &p, sizeof p); /* a store through void ** would alias a float * */
        at += row_bytes(&rows[i]);
    }
    return at;
}
