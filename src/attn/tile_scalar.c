/* tile_scalar.c — the flash inner loop (tile_impl.h) with one float a "vector":
 * the portable fallback every CPU runs. */
#define VW 1
#define SUFFIX scalar
#include "attn/tile_impl.h"
