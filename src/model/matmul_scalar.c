/* matmul_scalar.c — the matmul kernels (matmul_impl.h) over plain C vectors
 * of 4 floats, no ISA named: the portable fallback every CPU runs (SSE2 on
 * baseline x86-64). Named "scalar" like attention's fallback, for QKV_ISA. */
#define VW 4
#define SUFFIX scalar
#include "model/matmul_impl.h"
