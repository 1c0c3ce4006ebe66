/*
 * fuzz_npy.c — a .npy file from a stranger through qkv_npy_load (the loader
 * of `qkv attend`'s arrays): header, dtype, shape, data length.
 */
#include "fuzz_file.h"
#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qkv_npy a;
    if (qkv_npy_load(&a, fuzz_file(data, size), NULL) == QKV_OK) qkv_npy_free(&a);
    return 0;
}
