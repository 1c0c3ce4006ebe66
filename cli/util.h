/* util.h — small helpers (cli/util.c): whole files, token and table cells
 * on stdout, labels, paths, timers, memory, the KV cache line, SVG text. */
#ifndef QKV_CLI_UTIL_H
#define QKV_CLI_UTIL_H

#include "cli.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One generated token on stdout, flushed: its id (space-separated after the
 * first) when print_ids, else the bytes it stands for. */
void cli_put_token(const qkv_tokenizer *tok, int32_t id, int print_ids, int first);
/* s on stdout padded with spaces to width display columns (qkv_text_width),
 * on the left when right (right-aligned), else on the right. */
void cli_put_cell(const char *s, int width, int right);

/* Whole file ('-': stdin) as a NUL-terminated malloc'd buffer of *len bytes
 * (len may be NULL). A directory, a file over max_bytes (refused before
 * reading), a stream that passes max_bytes (read no further), unreadable,
 * out of memory or a read error: NULL after one error line naming path. */
char *cli_read_file(const char *path, size_t max_bytes, size_t *len);
/* Prompt and haystack files (-f) up to 64 MiB: about 16 million tokens, four
 * times the largest --ctx; a larger file, or a stream that does not end
 * (-f /dev/zero), is refused once the limit is passed. */
#define CLI_PROMPT_MAX_BYTES ((size_t)64 << 20)
/* A float32 .npy of 3 dims (or 4 with a leading 1, dropped) of at most 2^30
 * per dim (cmd_attend.c): 0, or 2 after an error line naming path (a freed). */
int cli_load_3d(qkv_npy *a, const char *path);
/* The indices 0 .. count-1 of v ordered by |v|, largest first, NaN last
 * (ties in index order); malloc'd, NULL if out of memory. */
int64_t *cli_by_magnitude(const float *v, int64_t count);
/* n labels for a heatmap's rows or columns: "<prefix><i>" ("layer 0",
 * "h3"), or "<i> <names[i]>" when names is given; malloc'd (cli_labels_free);
 * NULL after an error line. */
char **cli_index_labels(int n, const char *prefix, char *const *names);
void cli_labels_free(char **labels, int64_t n);
/* The last component of a path. */
const char *cli_basename(const char *path);
double cli_status_mib(const char *key);  /* a /proc/self/status field ("VmRSS") in MiB, or -1 */
double cli_peak_rss_mib(void);  /* VmHWM, else getrusage's ru_maxrss */
/* One line on stderr, "<prog>: KV cache B bytes (X MiB, dtype): G global
 * layers x R rows, S sliding layers (window W) x R' rows; N tokens per call"
 * (qkv_model_kv_bytes, qkv_model_kv_rows; dtype: the one m was opened with). */
void cli_print_kv_cache(const char *prog, const qkv_model *m, qkv_dtype dtype);
double cli_now_s(void);         /* monotonic seconds (util/clock.h) */

/* The next number of a splitmix64 stream (Steele, Lea and Flood 2014):
 * *state advances by the golden-ratio constant, the output is its mix. Small,
 * portable and the same everywhere, so a seed reproduces a run. */
static inline uint64_t cli_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif /* QKV_CLI_UTIL_H */
