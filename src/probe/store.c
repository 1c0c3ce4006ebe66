/*
 * store.c — the hook the probes keep activations with (patch: both runs'
 * patched points; lens: every layer's residual): a copy per layer into the
 * probe's own buffer, nothing else. Allocation-free: the buffer is sized
 * by the probe before the forward call.
 */
#include "probe/internal.h"

#include <string.h>

qkv_status probe_store_hook(void *user, const qkv_activation *a, qkv_error *err) {
    (void)err;
    const probe_layer_store *s = user;
    memcpy(s->buf + (size_t)a->layer * s->per_layer, a->data + s->skip, s->per_layer * sizeof(float));
    return QKV_OK;
}
