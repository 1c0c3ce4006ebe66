/* ffn_act_scalar.c — the FFN activations (ffn_act_impl.h) over plain C
 * vectors of 4 floats: the portable fallback (SSE2 on baseline x86-64). */
#define VW 4
#define SUFFIX scalar
#include "model/ffn_act_impl.h"
