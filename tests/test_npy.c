/*
 * test_npy.c — the .npy reader's float64 arrays (the oracles' fixtures,
 * tests/fixtures/patch): read as they are, type QKV_NPY_F64, values bit for
 * bit; big-endian float64 refused by name. The other types and the writer:
 * test_inspect.c, test_attend_cli.c.
 */
#include "testing.h"

#include "qkv.h"

#include <stdio.h>
#include <string.h>

/* A version-1 .npy of descr with shape (2, 3) and data[6], padded to 128 bytes of header. */
static void write_npy(const char *path, const char *descr, const double *data) {
    char hdr[128];
    int len = snprintf(hdr + 10, sizeof hdr - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }", descr);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)(128 - 10), hdr[9] = 0;
    for (int i = 10 + len; i < 127; i++) hdr[i] = ' ';
    hdr[127] = '\n';
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fwrite(hdr, 1, 128, f);
    fwrite(data, sizeof(double), 6, f);
    fclose(f);
}

TEST(npy_reads_float64) {
    const double data[6] = {0.1, -2.5, 1e300, 0, -0.0, 3.141592653589793};
    char path[600];
    snprintf(path, sizeof path, "%s/f8.npy", test_tmpdir());
    write_npy(path, "<f8", data);
    qkv_npy a;
    qkv_error err = {0};
    CHECK(qkv_npy_load(&a, path, &err) == QKV_OK, "%s", err.msg);
    CHECK(a.type == QKV_NPY_F64 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 && a.count == 6,
          "type %d, %d dims", (int)a.type, a.ndim);
    if (a.data) CHECK(!memcmp(a.data, data, sizeof data), "float64 values changed");
    qkv_npy_free(&a);
    snprintf(path, sizeof path, "%s/f8be.npy", test_tmpdir());
    write_npy(path, ">f8", data);
    CHECK(qkv_npy_load(&a, path, &err) == QKV_ERR_FORMAT && strstr(err.msg, "big-endian data ('>f8')"),
          "big-endian float64: %s", err.msg);
}
