#!/usr/bin/env python3
"""Golden end-to-end fixture for `qkv attend` with RoPE: raw (pre-RoPE) q, k, v
and positions in, O and LSE out, Llama-3.1-8B head layout.

    q [32, Lq, 128], k/v [8, Lk, 128] float32; pos [Lk] int64 (increasing,
    with a gap); q sits at the last Lq positions.

transformers' LlamaRotaryEmbedding (LlamaConfig with rope_theta 500000 and
llama3 scaling: factor 8, low 1, high 4, original 8192) and
apply_rotary_pos_emb (rotate-half) rotate q and k in float32, exactly as
transformers does; then SDPA in float64 with an explicit bottom-right causal
boolean mask (row i at key index Lk - Lq + i) and K/V repeat_interleave'd for
GQA gives o [32, Lq, 128]; LSE [32, Lq] is logsumexp of the masked scaled
scores in float64. Both are stored as float32.

Writes tests/fixtures/attend_rope/{q,k,v,pos,o,lse}.npy and command.txt, the
`qkv attend` command line that should reproduce o.npy/lse.npy when run inside
that directory (it overwrites o.npy and lse.npy there: the C test redirects
--out/--lse to a temporary directory).

Usage: python tools/oracle/make_attend_rope_fixture.py [--out tests/fixtures/attend_rope]
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

HQ, HKV, D, LQ = 32, 8, 128, 5
POSITIONS = list(range(1000, 1010)) + list(range(1050, 1061))  # Lk = 21, gap after 1009
THETA = 500000.0
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
COMMAND = ("qkv attend --q q.npy --k k.npy --v v.npy --out o.npy --lse lse.npy --causal "
           "--rope half --rope-theta 500000 "
           "--rope-scaling llama3:factor=8,low=1,high=4,orig=8192 --positions pos.npy")


def save(path, arr, dtype):
    np.save(path, np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")),
            allow_pickle=False)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out",
                    default=os.path.join(here, "..", "..", "tests", "fixtures", "attend_rope"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    lk = len(POSITIONS)
    g = torch.Generator().manual_seed(3000)
    q = torch.randn(HQ, LQ, D, generator=g, dtype=torch.float32)
    k = torch.randn(HKV, lk, D, generator=g, dtype=torch.float32)
    v = torch.randn(HKV, lk, D, generator=g, dtype=torch.float32)
    pos = torch.tensor(POSITIONS, dtype=torch.int64)

    cfg = LlamaConfig(hidden_size=HQ * D, num_attention_heads=HQ, num_key_value_heads=HKV,
                      head_dim=D, max_position_embeddings=131072,
                      rope_parameters={"rope_type": "llama3", "rope_theta": THETA, **LLAMA3})
    rot = LlamaRotaryEmbedding(cfg)
    with torch.no_grad():
        cos_q, sin_q = rot(q.unsqueeze(0), pos[-LQ:].unsqueeze(0))
        cos_k, sin_k = rot(k.unsqueeze(0), pos.unsqueeze(0))
        qr, _ = apply_rotary_pos_emb(q.unsqueeze(0), q.unsqueeze(0), cos_q, sin_q)
        _, kr = apply_rotary_pos_emb(k.unsqueeze(0), k.unsqueeze(0), cos_k, sin_k)
    qr, kr = qr.squeeze(0), kr.squeeze(0)  # float32, rotated as transformers does

    # bottom-right causal: row i sits at key index lk - LQ + i
    i = torch.arange(LQ).unsqueeze(1)
    j = torch.arange(lk).unsqueeze(0)
    mask = j <= (lk - LQ + i)
    scale = 1.0 / math.sqrt(D)
    q64 = qr.to(torch.float64)
    k64 = kr.to(torch.float64).repeat_interleave(HQ // HKV, dim=0)
    v64 = v.to(torch.float64).repeat_interleave(HQ // HKV, dim=0)
    o = F.scaled_dot_product_attention(q64.unsqueeze(0), k64.unsqueeze(0), v64.unsqueeze(0),
                                       attn_mask=mask, scale=scale).squeeze(0)
    scores = (q64 @ k64.transpose(-1, -2)) * scale
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()

    out = args.out
    save(os.path.join(out, "q.npy"), q.numpy(), np.float32)
    save(os.path.join(out, "k.npy"), k.numpy(), np.float32)
    save(os.path.join(out, "v.npy"), v.numpy(), np.float32)
    save(os.path.join(out, "pos.npy"), pos.numpy(), np.int64)
    save(os.path.join(out, "o.npy"), o.to(torch.float32).numpy(), np.float32)
    save(os.path.join(out, "lse.npy"), lse.to(torch.float32).numpy(), np.float32)
    with open(os.path.join(out, "command.txt"), "w") as f:
        f.write(COMMAND + "\n")


if __name__ == "__main__":
    main()
