#!/usr/bin/env python3
"""Golden attention maps of SmolLM2-135M-Instruct (Q4_1 GGUF) from Hugging Face
transformers: every layer and head, output_attentions=True with eager
attention, on three short prompts. Checked by tests/test_inspect_oracle.c
against the maps `qkv inspect` recomputes from q, K and the flash kernel's LSE.

Pinned: see tools/oracle/requirements.txt (torch 2.15.0, transformers 5.24.0,
gguf 0.19.0, numpy 2.4.6; transformers needs accelerate for gguf_file=).
Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (`make model`).

    /work/oracle-venv/bin/python tools/oracle/make_attention_fixtures.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out tests/fixtures/attention]

Per prompt NAME:
  NAME.ids.npy   int32 [n]  token ids from transformers' tokenizer of the same GGUF
                 (chat: apply_chat_template(add_generation_prompt=True), special
                 tokens parsed; SmolLM2's GGUF adds no BOS)
  NAME.attn.npy  float32 [n_layer, n_head, n(n+1)/2]: each causal map [n, n]
                 packed row by row, row i holding keys 0..i (the zeros right of
                 the diagonal are not stored)
manifest.txt: one line per prompt, "NAME n chat(0|1) n_layer n_head".

Reference: AutoModelForCausalLM.from_pretrained(dir, gguf_file=...,
dtype=float32, attn_implementation="eager"), model(ids, output_attentions=True):
softmax in float32 of the scaled, causally masked scores, per layer [1, H, n, n].
torch.set_num_threads(2): float32 sums depend a little on threading.
"""
import argparse
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    # name, text, chat
    ("zh", "年假怎么申请？", False),
    ("zh_chat", "年假怎么申请？", True),
    ("en", "The quick brown fox jumps over the lazy dog.", False),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/fixtures/attention")
    args = ap.parse_args()
    torch.set_num_threads(2)
    d, f = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for name, text, chat in PROMPTS:
        if chat:
            text = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           tokenize=False)
        ids = tok(text).input_ids
        n = len(ids)
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
        att = torch.stack([a[0] for a in out.attentions]).numpy()  # [L, H, n, n]
        L, H = att.shape[0], att.shape[1]
        assert np.allclose(att.sum(-1), 1, atol=1e-5) and np.all(np.triu(att, 1) == 0)
        rows, cols = np.tril_indices(n)
        packed = np.ascontiguousarray(att[:, :, rows, cols], dtype=np.float32)
        np.save(os.path.join(args.out, name + ".ids.npy"), np.array(ids, dtype=np.int32))
        np.save(os.path.join(args.out, name + ".attn.npy"), packed)
        lines.append("%s %d %d %d %d" % (name, n, int(chat), L, H))
        print(name, n, "tokens", packed.shape)
    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
