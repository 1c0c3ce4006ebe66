/*
 * buffers.h — a set of buffers as one table: a row per buffer, {the address
 * of its pointer, element count, element size}, laid out one after another
 * in one block of memory, each starting on a UTIL_BUFFER_ALIGN boundary (as
 * llm.c's fill_in_activation_sizes / malloc_and_point_activations). The
 * bytes a set takes are the sum of its rows, and the pointers are set in one
 * walk over the same rows, so the two cannot disagree. The block itself is
 * the caller's (the model's run state allocates one, an attention plan
 * carves its per-thread scratch out of its own).
 */
#ifndef QKV_UTIL_BUFFERS_H
#define QKV_UTIL_BUFFERS_H

#include <stddef.h>

#define UTIL_BUFFER_ALIGN 64 /* a cache line, and an AVX-512 vector */

typedef struct {
    void *ptr;   /* the address of a pointer to any object type (float **, int64_t ** ...) */
    size_t count, size; /* elements, bytes each */
} util_buffer;

/* Bytes of rows[0 .. n) laid out by util_buffers_place (a multiple of
 * UTIL_BUFFER_ALIGN), or SIZE_MAX if that does not fit in a size_t. */
size_t util_buffers_bytes(const util_buffer *rows, size_t n);
/* Points each row's pointer into mem, which is UTIL_BUFFER_ALIGN-aligned and
 * holds util_buffers_bytes(rows, n) bytes; returns the byte after the last. */
char *util_buffers_place(void *mem, const util_buffer *rows, size_t n);

#endif
