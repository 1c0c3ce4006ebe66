/*
 * qkv.h — the whole public API of libqkv: exact, fast self-attention for the
 * decoder families llama.cpp writes, and the model and probe layers built on
 * it. One header per layer under include/qkv/, each including only the
 * layers below it; the conventions are stated once in qkv/base.h.
 *   base  <- attn, io, gguf  <- model, tokenizer  <- cost, probe
 */
#ifndef QKV_H
#define QKV_H

#include "qkv/base.h"
#include "qkv/attn.h"
#include "qkv/io.h"
#include "qkv/gguf.h"
#include "qkv/model.h"
#include "qkv/tokenizer.h"
#include "qkv/cost.h"
#include "qkv/probe.h"

#endif /* QKV_H */
