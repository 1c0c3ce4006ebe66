/* matmul_scalar.c — the matmul kernels (matmul_impl.h) with one float a
 * "vector": the portable fallback every CPU runs. */
#define VW 1
#define SUFFIX scalar
#include "model/matmul_impl.h"
