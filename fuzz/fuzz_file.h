/*
 * fuzz_file.h — what the fuzz targets share: an input given to a loader that
 * takes a path. fuzz_file writes the bytes to one in-memory file (memfd,
 * created once, truncated to each input) and returns its /proc/self/fd path,
 * so a million inputs touch no disk. Header-only, one file per process.
 */
#ifndef QKV_FUZZ_FILE_H
#define QKV_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("qkv-fuzz", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_file");
        abort();
    }
    return path;
}

#endif /* QKV_FUZZ_FILE_H */
