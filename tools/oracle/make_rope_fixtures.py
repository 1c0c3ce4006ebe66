#!/usr/bin/env python3
"""Golden RoPE fixtures from transformers (rotate-half) and Meta's reference
formulation (interleaved).

Writes tests/fixtures/rope/<name>.{x,pos,out,inv_freq}.npy and manifest.txt:

    name pairing theta scaling factor low high orig h t d

x, out [H,T,D] float32; pos [T] int64; inv_freq [D/2] float32.
pairing half|interleaved; scaling none|llama3 (factor/low/high/orig are 0 when
none).

half: transformers' own LlamaRotaryEmbedding, built from a LlamaConfig
(rope_parameters = {"rope_type": "default"|"llama3", "rope_theta": ..., and
for llama3 factor 8, low_freq_factor 1, high_freq_factor 4,
original_max_position_embeddings 8192}), and transformers'
apply_rotary_pos_emb. inv_freq is the module's inv_freq buffer.

interleaved: Meta's llama model.py apply_rotary_emb — pairs (2i, 2i+1) taken
as complex numbers (torch.view_as_complex), multiplied by
torch.polar(1, pos * inv_freq) — with the same inv_freq as above (Meta applies
the identical llama3 scaling to its freqs).

Both compute the angle as a float32 product (float)pos * inv_freq, then
cos/sin in float32, like the library.

Usage: python tools/oracle/make_rope_fixtures.py [--out tests/fixtures/rope]
"""
import argparse
import os

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}

# Arbitrary, non-contiguous, unsorted positions with a repeat and large ones.
POS_A = [0, 1, 2, 3, 17, 5, 4096, 8191, 8192, 8193, 12345, 65535, 100000, 99999, 31, 31,
         500, 2047, 77777, 42]
POS_B = [0, 7, 8, 9, 1000, 1001, 1003, 16384, 32768, 54321, 100000, 3]

# name, pairing, theta, scaling, h, d, positions
CASES = [
    ("half_t10000_d64", "half", 10000.0, "none", 3, 64, POS_A),
    ("half_t500000_d128", "half", 500000.0, "none", 2, 128, POS_B),
    ("half_t500000_d128_llama3", "half", 500000.0, "llama3", 2, 128, POS_A),
    ("half_t500000_d64_llama3", "half", 500000.0, "llama3", 3, 64, POS_B),
    ("interleaved_t10000_d64", "interleaved", 10000.0, "none", 3, 64, POS_A),
    ("interleaved_t500000_d128", "interleaved", 500000.0, "none", 2, 128, POS_B),
    ("interleaved_t500000_d128_llama3", "interleaved", 500000.0, "llama3", 2, 128, POS_A),
    ("interleaved_t10000_d128_contig", "interleaved", 10000.0, "none", 1, 128, list(range(16))),
    ("half_t10000_d128_contig", "half", 10000.0, "none", 1, 128, list(range(16))),
]


def rotary_module(theta, scaling, h, d):
    rp = {"rope_type": "default", "rope_theta": theta}
    if scaling == "llama3":
        rp = {"rope_type": "llama3", "rope_theta": theta, **LLAMA3}
    cfg = LlamaConfig(hidden_size=h * d, num_attention_heads=h, num_key_value_heads=h,
                      head_dim=d, max_position_embeddings=131072, rope_parameters=rp)
    return LlamaRotaryEmbedding(cfg)


def rope_half(rot, x, pos):
    """transformers: x [H,T,D] -> rotated, via cos/sin from the module."""
    xb = x.unsqueeze(0)  # [1,H,T,D]
    cos, sin = rot(xb, pos.unsqueeze(0))  # [1,T,D]
    out, _ = apply_rotary_pos_emb(xb, xb, cos, sin, unsqueeze_dim=1)
    return out.squeeze(0)


def rope_interleaved(inv_freq, x, pos):
    """Meta's llama model.py: freqs_cis = polar(1, outer(t, freqs)); x as complex pairs."""
    freqs = torch.outer(pos.to(torch.float32), inv_freq.to(torch.float32))  # [T, D/2]
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # [H,T,D/2]
    out = torch.view_as_real(x_ * freqs_cis.unsqueeze(0)).flatten(2)
    return out.type_as(x)


def save(path, arr, dtype):
    np.save(path, np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")),
            allow_pickle=False)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "rope"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import transformers
    lines = [
        "# golden RoPE cases: tools/oracle/make_rope_fixtures.py "
        f"(torch {torch.__version__}, transformers {transformers.__version__})",
        "# name pairing theta scaling factor low high orig h t d",
    ]
    for idx, (name, pairing, theta, scaling, h, d, positions) in enumerate(CASES):
        g = torch.Generator().manual_seed(2000 + idx)
        t = len(positions)
        x = torch.randn(h, t, d, generator=g, dtype=torch.float32)
        pos = torch.tensor(positions, dtype=torch.int64)
        rot = rotary_module(theta, scaling, h, d)
        inv_freq = rot.inv_freq.detach().to(torch.float32)
        assert inv_freq.shape == (d // 2,)
        with torch.no_grad():
            out = rope_half(rot, x, pos) if pairing == "half" else rope_interleaved(inv_freq, x, pos)
        assert out.dtype == torch.float32 and out.shape == x.shape
        # cross-check the two pairings: interleaved == half on de-interleaved dims
        perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
        with torch.no_grad():
            if pairing == "half":
                alt = rope_interleaved(inv_freq, x[..., torch.argsort(perm)], pos)[..., perm]
            else:
                alt = rope_half(rot, x[..., perm], pos)[..., torch.argsort(perm)]
        assert torch.allclose(alt, out, rtol=0, atol=1e-5), (name, (alt - out).abs().max())
        base = os.path.join(args.out, name)
        save(base + ".x.npy", x.numpy(), np.float32)
        save(base + ".pos.npy", pos.numpy(), np.int64)
        save(base + ".out.npy", out.numpy(), np.float32)
        save(base + ".inv_freq.npy", inv_freq.numpy(), np.float32)
        if scaling == "llama3":
            sc = (f"llama3 {LLAMA3['factor']!r} {LLAMA3['low_freq_factor']!r} "
                  f"{LLAMA3['high_freq_factor']!r} {LLAMA3['original_max_position_embeddings']}")
        else:
            sc = "none 0 0 0 0"
        lines.append(f"{name} {pairing} {theta!r} {sc} {h} {t} {d}")
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
