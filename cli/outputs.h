/* outputs.h — the files a command writes, whole or not at all (cli/outputs.c). */
#ifndef QKV_CLI_OUTPUTS_H
#define QKV_CLI_OUTPUTS_H

#include <stdint.h>
#include <stdio.h>

/* Every file a command writes, written whole or not at all (cli/outputs.c).
 * Declare each output before computing: cli_output_add refuses a target
 * that exists and is not a regular file, or is named twice, and returns the
 * path of its own fresh temporary beside the target (write there), or NULL
 * after an error line; cli_output_stream does the same and returns the
 * temporary as an open stream (do not fclose it). Then end the command with
 * cli_outputs_finish(rc): rc == 0 syncs every temporary (a full disk is an
 * error) and renames them all onto their targets only when all succeeded;
 * anything else, or a failed sync, removes them all and leaves every target
 * as it was. Returns rc, or 2 after an error line. SIGINT, SIGTERM, SIGHUP
 * and SIGPIPE remove the temporaries too. */
#define CLI_MAX_OUTPUTS 8
const char *cli_output_add(const char *path);
FILE *cli_output_stream(const char *path);
/* cli_output_add of prefix + name (--npy out/ioi_ and "head_out.npy":
 * out/ioi_head_out.npy; a prefix ending in '/' is a folder, which must
 * exist); the joined path is kept here until the outputs are finished. */
const char *cli_output_add_joined(const char *prefix, const char *name);
int cli_outputs_commit(void);   /* cli_outputs_finish(0) */
void cli_outputs_discard(void); /* cli_outputs_finish(rc != 0) */
int cli_outputs_finish(int rc);
/* --npy PREFIX: float32 arrays written as PREFIX<name>.npy. Declare them
 * with cli_npy_declare before computing (cli_output_add_joined; data and
 * shape may come later), write them with cli_npy_write before the commit,
 * then cli_npy_report prints "wrote PATH: float32 [shape]" for each. 0, or
 * 2 after an error line. */
typedef struct {
    const char *name;     /* "head_out": the file PREFIXhead_out.npy */
    const float *data;    /* [shape...] */
    int ndim;
    int64_t shape[4];
    const char *tmp;      /* set by cli_npy_declare */
} cli_npy_array;
int cli_npy_declare(cli_npy_array *arrays, int n, const char *prefix);
int cli_npy_write(const cli_npy_array *arrays, int n);
void cli_npy_report(FILE *msg, const cli_npy_array *arrays, int n, const char *prefix);
/* cli_fail("%s", msg) with each temporary's path in msg replaced by its
 * target's (a library writer names the file it was given). */
int cli_outputs_fail(const char *msg);

#endif /* QKV_CLI_OUTPUTS_H */
