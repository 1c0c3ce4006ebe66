/*
 * file_replace.c — one file written whole or not at all, for the callers
 * without cli/outputs.c (the Python package's save_png and save_html): the
 * bytes go to a new temporary beside the target, PATH.qkv-XXXXXX (opened
 * O_EXCL, so a new file gets 0666 less the umask as fopen would give it; a
 * replaced one keeps its mode), which is synced and renamed onto the target.
 * Any failure removes the temporary and leaves an existing target as it was.
 *
 * Not done here: several files committed together and the signal handlers
 * that remove temporaries on SIGINT (cli/outputs.c, one command a process).
 */
#include "qkv_render.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A fresh temporary beside path: its descriptor (name in tmp [cap]), or -1
 * with errno set. */
static int open_temporary(char *tmp, size_t cap, const char *path) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned x = (unsigned)ts.tv_nsec ^ (unsigned)getpid() << 12;
    for (int attempt = 0; attempt < 100; attempt++) {
        x = x * 1103515245u + 12345u;
        snprintf(tmp, cap, "%s.qkv-%06x", path, (x >> 8) & 0xFFFFFF);
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

qkv_status qkv_file_replace(const char *path, const void *data, size_t len, qkv_error *err) {
    if (!path || !*path) return util_fail(err, QKV_ERR_INVALID, "an output file name is empty");
    struct stat sb;
    const int exists = lstat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode))
        return util_fail(err, QKV_ERR_IO, "%s: is not a regular file; qkv writes regular files only and will not replace it",
                        path);
    const size_t cap = strlen(path) + sizeof ".qkv-XXXXXX";
    char *tmp = malloc(cap);
    if (!tmp) return util_fail(err, QKV_ERR_NOMEM, "%s: out of memory", path);
    const int fd = open_temporary(tmp, cap, path);
    if (fd < 0) {
        const int e = errno;
        free(tmp);
        return util_fail(err, QKV_ERR_IO, "%s: cannot create a file there (%s)", path, strerror(e));
    }
    if (exists) fchmod(fd, sb.st_mode & 07777);
    const char *p = data;
    size_t left = len;
    int e = 0;
    while (left && !e) {
        const ssize_t k = write(fd, p, left);
        if (k > 0) {
            p += k;
            left -= (size_t)k;
        } else if (k == 0) {
            e = EIO;
        } else if (errno != EINTR) {
            e = errno;
        }
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) unlink(tmp);
    free(tmp);
    if (e) return util_fail(err, QKV_ERR_IO, "%s: cannot write (%s)", path, strerror(e));
    return QKV_OK;
}
