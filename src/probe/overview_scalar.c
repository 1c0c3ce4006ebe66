/* overview_scalar.c — the overview's score tile (overview_impl.h) on baseline x86-64: SSE2, 4 floats a vector. */
#define VW 4
#define SUFFIX scalar
#include "probe/overview_impl.h"
