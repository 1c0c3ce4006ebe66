/*
 * outputs.c — every file a command writes is written whole or not at all.
 *
 * A command declares its outputs before it computes anything
 * (cli_output_add): each target is checked — an existing target must be a
 * regular file (a device node, FIFO, symlink or directory is refused, never
 * replaced), no target may be named twice — and gets its own mkstemp
 * temporary, PATH.qkv-XXXXXX, in the target's directory. The command writes
 * the temporaries (by path, or through cli_output_stream's FILE); then
 * cli_outputs_commit syncs and closes every one, checking each step (a full
 * disk is an error), and renames them onto their targets only when all of
 * them succeeded. On any failure, and on SIGINT, SIGTERM, SIGHUP or SIGPIPE
 * (whose handler removes them, then dies of the signal), the temporaries are
 * removed and every previous file is left as it was.
 *
 * One command runs per process, so the list is this module's: the signal
 * handler has to find it. Not done here: the renames of one commit are
 * several system calls, so a crash between two of them keeps the first.
 */
#include "cli.h"
#include "outputs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path;     /* the target, as given */
    char canon[PATH_MAX]; /* realpath of its directory + "/" + its name */
    char tmp[PATH_MAX];   /* the temporary beside it */
    int fd;               /* the temporary, open until commit or discard */
    FILE *f;              /* cli_output_stream's stream on fd, or NULL */
} output;

static output g_out[CLI_MAX_OUTPUTS];
/* The targets cli_output_add_joined made, one per slot of g_out. */
static char g_joined[CLI_MAX_OUTPUTS][PATH_MAX];
/* Outputs whose temporary exists: the signal handler removes tmp of [0, g_n). */
static volatile sig_atomic_t g_n;

static void on_signal(int sig) {
    for (int i = 0; i < g_n; i++) unlink(g_out[i].tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        if (sigaction(sigs[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) continue; /* nohup keeps its way */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* The target's directory made absolute, then its name: two spellings of one
 * file compare equal. 0, or 2 after an error line. */
static int canonical(char *out, const char *path) {
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return cli_fail("%s: is a directory, not a file", path);
    char dir[PATH_MAX] = ".";
    if (slash) {
        const size_t dlen = (size_t)(slash - path);
        if (dlen >= sizeof dir) return cli_fail("%s: path too long", path);
        memcpy(dir, dlen ? path : "/", dlen ? dlen : 1);
        dir[dlen ? dlen : 1] = 0;
    }
    char real[PATH_MAX];
    if (!realpath(dir, real)) return cli_fail("%s: cannot write there (%s)", path, strerror(errno));
    if ((size_t)snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", name) >= PATH_MAX)
        return cli_fail("%s: path too long", path);
    return 0;
}

static const char *kind_of(mode_t m) {
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

const char *cli_output_add(const char *path) {
    if (!path || !*path) {
        cli_fail("an output file name is empty");
        return NULL;
    }
    if (g_n >= CLI_MAX_OUTPUTS) {
        cli_fail("%s: more than %d output files", path, CLI_MAX_OUTPUTS);
        return NULL;
    }
    output *o = &g_out[g_n];
    o->path = path;
    o->f = NULL;
    if (canonical(o->canon, path)) return NULL;
    struct stat sb;
    const int exists = lstat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        cli_fail("%s: is %s; qkv writes regular files only and will not replace it", path, kind_of(sb.st_mode));
        return NULL;
    }
    for (int i = 0; i < g_n; i++)
        if (!strcmp(g_out[i].canon, o->canon)) {
            cli_fail("%s: named twice as an output (also as %s)", path, g_out[i].path);
            return NULL;
        }
    static const char suffix[] = ".qkv-XXXXXX";
    const size_t clen = strlen(o->canon);
    if (clen + sizeof suffix > sizeof o->tmp) {
        cli_fail("%s: path too long", path);
        return NULL;
    }
    memcpy(o->tmp, o->canon, clen);
    memcpy(o->tmp + clen, suffix, sizeof suffix);
    if (g_n == 0) install_handlers();
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* the handler never sees a name half made */
    o->fd = mkstemp(o->tmp);
    const int e = errno;
    if (o->fd >= 0) g_n++;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (o->fd < 0) {
        cli_fail("%s: cannot create a file there (%s)", path, strerror(e));
        return NULL;
    }
    /* a replaced file keeps its mode; a new one gets what fopen would give
     * (0666 less the umask), not mkstemp's 0600 */
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(o->fd, exists ? sb.st_mode & 07777 : 0666 & ~mask);
    return o->tmp;
}

const char *cli_output_add_joined(const char *prefix, const char *name) {
    if (!prefix || !*prefix) {
        cli_fail("an output prefix is empty");
        return NULL;
    }
    char *path = g_joined[g_n < CLI_MAX_OUTPUTS ? g_n : 0];
    if ((size_t)snprintf(path, PATH_MAX, "%s%s", prefix, name) >= PATH_MAX) {
        cli_fail("%s%s: path too long", prefix, name);
        return NULL;
    }
    return cli_output_add(path);
}

FILE *cli_output_stream(const char *path) {
    const char *tmp = cli_output_add(path);
    if (!tmp) return NULL;
    output *o = &g_out[g_n - 1];
    int fd = dup(o->fd);
    o->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!o->f) {
        if (fd >= 0) close(fd);
        cli_fail("%s: cannot open (%s)", path, strerror(errno));
        cli_outputs_discard();
        return NULL;
    }
    return o->f;
}

/* Removes every temporary and forgets the list. */
static void discard_all(void) {
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    for (int i = 0; i < g_n; i++) {
        output *o = &g_out[i];
        if (o->f) fclose(o->f);
        o->f = NULL;
        if (o->fd >= 0) close(o->fd);
        o->fd = -1;
        unlink(o->tmp);
    }
    g_n = 0;
    sigprocmask(SIG_SETMASK, &old, NULL);
}

void cli_outputs_discard(void) { discard_all(); }

/* Output o's bytes on disk: its stream flushed and closed, the file synced and
 * still the one mkstemp made. 0, or 2 after an error line. */
static int sync_one(output *o) {
    if (o->f) {
        const int bad = fflush(o->f) != 0 || ferror(o->f);
        const int e = errno;
        const int closed = fclose(o->f) == 0;
        o->f = NULL;
        if (bad || !closed) return cli_fail("%s: cannot write (%s)", o->path, strerror(bad ? e : errno));
    }
    struct stat mine, named;
    if (fstat(o->fd, &mine) != 0 || lstat(o->tmp, &named) != 0 || mine.st_ino != named.st_ino ||
        mine.st_dev != named.st_dev)
        return cli_fail("%s: the temporary %s was replaced or removed while qkv wrote it", o->path, o->tmp);
    if (fsync(o->fd) != 0) return cli_fail("%s: cannot write (%s)", o->path, strerror(errno));
    const int closed = close(o->fd) == 0;
    o->fd = -1;
    if (!closed) return cli_fail("%s: cannot write (%s)", o->path, strerror(errno));
    return 0;
}

int cli_outputs_commit(void) {
    for (int i = 0; i < g_n; i++)
        if (sync_one(&g_out[i])) {
            discard_all();
            return CLI_EXIT_BAD_INPUT;
        }
    int rc = 0;
    for (int i = 0; i < g_n && !rc; i++) {
        struct stat sb; /* the target may have changed kind since it was declared */
        if (lstat(g_out[i].path, &sb) == 0 && !S_ISREG(sb.st_mode))
            rc = cli_fail("%s: became %s while qkv ran; not replaced", g_out[i].path, kind_of(sb.st_mode));
    }
    for (int i = 0; i < g_n && !rc; i++)
        if (rename(g_out[i].tmp, g_out[i].path) != 0)
            rc = cli_fail("%s: cannot replace (%s)", g_out[i].path, strerror(errno));
        else
            g_out[i].tmp[0] = 0; /* renamed: nothing left to remove */
    /* a rename that failed leaves its temporary and those after it */
    for (int i = 0; i < g_n; i++)
        if (g_out[i].tmp[0]) unlink(g_out[i].tmp);
    g_n = 0;
    return rc;
}

int cli_outputs_finish(int rc) {
    if (rc) {
        discard_all();
        return rc;
    }
    return cli_outputs_commit();
}

int cli_outputs_fail(const char *msg) {
    char line[2 * sizeof ((qkv_error *)0)->msg];
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < sizeof line;) {
        const output *hit = NULL;
        for (int i = 0; i < g_n && !hit; i++)
            if (!strncmp(p, g_out[i].tmp, strlen(g_out[i].tmp))) hit = &g_out[i];
        const char *put = hit ? hit->path : p;
        const size_t len = hit ? strlen(hit->path) : 1;
        if (n + len >= sizeof line) break;
        memcpy(line + n, put, len);
        n += len;
        p += hit ? strlen(hit->tmp) : 1;
    }
    line[n] = 0;
    return cli_fail("%s", line);
}

int cli_npy_declare(cli_npy_array *arrays, int n, const char *prefix) {
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.npy", arrays[i].name);
        if (!(arrays[i].tmp = cli_output_add_joined(prefix, name))) return CLI_EXIT_BAD_INPUT;
    }
    return 0;
}

int cli_npy_write(const cli_npy_array *arrays, int n) {
    qkv_error err = {0};
    for (int i = 0; i < n; i++)
        if (qkv_npy_save_f32(arrays[i].tmp, arrays[i].data, arrays[i].ndim, arrays[i].shape, &err))
            return cli_outputs_fail(err.msg);
    return 0;
}

void cli_npy_report(FILE *msg, const cli_npy_array *arrays, int n, const char *prefix) {
    for (int i = 0; i < n; i++) {
        fprintf(msg, "wrote %s%s.npy: float32 [", prefix, arrays[i].name);
        for (int d = 0; d < arrays[i].ndim; d++) fprintf(msg, "%s%lld", d ? ", " : "", (long long)arrays[i].shape[d]);
        fprintf(msg, "]\n");
    }
}
