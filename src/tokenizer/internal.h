/* internal.h — what the tokenizer files share inside src/tokenizer. */
#ifndef QKV_TOKENIZER_INTERNAL_H
#define QKV_TOKENIZER_INTERNAL_H

#include "qkv/tokenizer.h"

/* tokenizer.chat_template of g: a string of at most QKV_CHAT_TEMPLATE_MAX
 * bytes (QKV_ERR_FORMAT naming the key and the limit otherwise, or when absent). */
qkv_status tokenizer_chat_template(const char **out, const qkv_gguf *g, qkv_error *err);

#endif
