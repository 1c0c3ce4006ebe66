#!/usr/bin/env python3
"""Golden attention fixtures from PyTorch's scaled_dot_product_attention
(and flex_attention for soft-capped scores).

Writes tests/fixtures/attn/<name>.{q,k,v,o,lse}.npy and manifest.txt:

    name hq hkv lq lk d mask window sinks exclude scale softcap

q [Hq,Lq,D], k/v [Hkv,Lk,D], o [Hq,Lq,D], lse [Hq,Lq]: float32, little-endian,
C order. mask is none|causal|window|sinkwindow; window/sinks are 0 when unused;
exclude is a comma list of key indices or '-'; scale 0 means 1/sqrt(D);
softcap c > 0 caps every score s = scale q.k to c tanh(s / c) before the mask
(Gemma 2's attn_logit_softcapping), 0 means none.

Semantics (include/qkv.h): query row i sits at absolute position
p = Lk - Lq + i (bottom-right aligned). causal: key j visible iff j <= p.
window W: j <= p and j > p - W. sinkwindow S,W: j <= p and (j < S or
j > p - W). Excluded keys are invisible to every row. GQA: query head h
reads KV head h // (Hq / Hkv).

The golden O is torch.nn.functional.scaled_dot_product_attention with an
explicit boolean attn_mask (True = attend) and K/V expanded with
repeat_interleave, computed in float64 from the float32 inputs. LSE is
torch.logsumexp of the masked, scaled float64 scores. Fully masked rows are
set explicitly to O = 0, LSE = -inf (the library's contract; SDPA itself
gives NaN or 0 there depending on the backend/version).

SDPA has no soft-capping: a softcap case's O and LSE come from
torch.nn.attention.flex_attention (eager, float64) with the score_mod Gemma 2
uses in PyTorch, c * tanh(score / c), the mask as -inf from the same
score_mod, and return_lse=True (natural log); checked against an explicit
softmax(c tanh(S / c) + mask) @ V and logsumexp in float64.

Usage: python tools/oracle/make_attn_fixtures.py [--out tests/fixtures/attn]
"""
import argparse
import math
import os
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

# name, hq, hkv, lq, lk, d, mask, window, sinks, exclude (list), scale (0 = 1/sqrt(D))
CASES = [
    # smallest possible problem
    ("mha_d16_none_1x1", 2, 2, 1, 1, 16, "none", 0, 0, [], 0.0),
    # Lq = Lk, lengths that are not multiples of 16/32/64
    ("mha_d64_causal_37", 2, 2, 37, 37, 64, "causal", 0, 0, [], 0.0),
    ("gqa4_d16_causal_129", 8, 2, 129, 129, 16, "causal", 0, 0, [], 0.0),
    ("gqa8_d16_causal_200", 8, 1, 200, 200, 16, "causal", 0, 0, [], 0.0),
    ("mqa_d256_causal_24", 2, 1, 24, 24, 256, "causal", 0, 0, [], 0.0),
    ("mha_d128_causal_64", 1, 1, 64, 64, 128, "causal", 0, 0, [], 0.0),
    # decode-like: Lq small, long Lk
    ("mqa_d64_decode_1x777", 4, 1, 1, 777, 64, "causal", 0, 0, [], 0.0),
    ("gqa4_d128_decode_3x67", 8, 2, 3, 67, 128, "causal", 0, 0, [], 0.0),
    ("mqa_d256_decode_1x65", 4, 1, 1, 65, 256, "causal", 0, 0, [], 0.0),
    ("gqa8_d128_none_5x64", 8, 1, 5, 64, 128, "none", 0, 0, [], 0.0),
    # chunked prefill: Lq < Lk
    ("gqa4_d72_causal_20x53", 8, 2, 20, 53, 72, "causal", 0, 0, [], 0.0),
    ("mha_d80_none_11x40", 2, 2, 11, 40, 80, "none", 0, 0, [], 0.0),
    # sliding window and StreamingLLM sinks + window
    ("mha_d80_window7_33x45", 2, 2, 33, 45, 80, "window", 7, 0, [], 0.0),
    ("mha_d16_window1_9x9", 2, 2, 9, 9, 16, "window", 1, 0, [], 0.0),
    ("mha_d16_window50_9x20", 2, 2, 9, 20, 16, "window", 50, 0, [], 0.0),
    ("gqa2_d80_sinkwindow4_9_30x70", 4, 2, 30, 70, 80, "sinkwindow", 9, 4, [], 0.0),
    ("mqa_d64_sinkwindow1_3_2x150", 8, 1, 2, 150, 64, "sinkwindow", 3, 1, [], 0.0),
    # custom scale (peaky softmax: score sd ~ 8 at D = 64 with scale 1)
    ("mha_d64_none_scale1_17x33", 2, 2, 17, 33, 64, "none", 0, 0, [], 1.0),
    ("gqa4_d64_causal_scale0.07_6x6", 4, 1, 6, 6, 64, "causal", 0, 0, [], 0.07),
    # exclusion lists (ablation), unsorted and with a repeat
    ("mha_d64_causal_excl_19", 2, 2, 19, 19, 64, "causal", 0, 0, [18, 0, 5, 5], 0.0),
    ("mqa_d128_decode_excl_1x50", 4, 1, 1, 50, 128, "causal", 0, 0, [0, 1, 2, 49, 30], 0.0),
    ("gqa4_d16_window_excl_12x40", 8, 2, 12, 40, 16, "window", 6, 0, [30, 31, 39], 0.0),
    # fully masked rows: O = 0, LSE = -inf
    ("mha_d16_causal_fullmask_6", 2, 2, 6, 6, 16, "causal", 0, 0, [0, 2, 3], 0.0),
    ("mha_d16_sinkwindow_fullmask_12", 2, 2, 12, 12, 16, "sinkwindow", 2, 2, [0, 1, 4, 5], 0.0),
    ("mha_d16_none_allexcl_3x4", 2, 2, 3, 4, 16, "none", 0, 0, [3, 2, 1, 0], 0.0),
    # Lq > Lk under causal: rows with p < 0 see nothing
    ("mha_d16_causal_lq_gt_lk_8x5", 2, 2, 8, 5, 16, "causal", 0, 0, [], 0.0),
]

# Soft-capped scores (the last field, c): scales and caps chosen so that
# s / c spans both of the kernels' tanh branches (|s / c| below and above
# 0.625) and reaches saturation, where many keys score near c.
SOFTCAP_CASES = [
    # Gemma 2's cap, D = 256, scale 1: score sd 16, s / c up to ~1.3
    ("gqa2_d256_causal_cap50_24", 4, 2, 24, 24, 256, "causal", 0, 0, [], 1.0, 50.0),
    # decode-shaped: Lq = 1 against 520 keys (two decode splits), heavy capping
    ("mqa_d64_decode_cap5_1x520", 4, 1, 1, 520, 64, "causal", 0, 0, [], 0.5, 5.0),
    ("mqa_d256_decode_cap50_1x260", 4, 1, 1, 260, 256, "causal", 0, 0, [], 1.0, 50.0),
    # GQA with a window, chunked (Lq < Lk)
    ("gqa4_d64_window17_cap2_30x90", 8, 2, 30, 90, 64, "window", 17, 0, [], 0.0, 2.0),
    # a few rows against sinks + window, D = 128
    ("gqa4_d128_sinkwindow4_64_cap30_4x300", 4, 1, 4, 300, 128, "sinkwindow", 64, 4, [], 1.0, 30.0),
    # saturated: score sd 8 against c = 1, every weight from a score near +-1
    ("mha_d64_none_cap1_scale1_17x33", 2, 2, 17, 33, 64, "none", 0, 0, [], 1.0, 1.0),
    # exclusions and fully masked rows stay exact under the cap
    ("mha_d16_causal_cap3_fullmask_6", 2, 2, 6, 6, 16, "causal", 0, 0, [0, 2, 3], 1.0, 3.0),
]

# Every case with its softcap; the seed of a case is its index here, so the
# cases above keep their seeds (and their bytes) whatever is appended.
ALL_CASES = [c + (0.0,) for c in CASES] + SOFTCAP_CASES


def visible(lq, lk, kind, window, sinks, exclude):
    """Boolean [Lq, Lk]: True where query row i may attend to key j."""
    i = torch.arange(lq).unsqueeze(1)
    j = torch.arange(lk).unsqueeze(0)
    p = lk - lq + i
    if kind == "none":
        m = torch.ones(lq, lk, dtype=torch.bool)
    elif kind == "causal":
        m = j <= p
    elif kind == "window":
        m = (j <= p) & (j > p - window)
    elif kind == "sinkwindow":
        m = (j <= p) & ((j < sinks) | (j > p - window))
    else:
        raise ValueError(kind)
    m = m.clone()
    for e in exclude:
        m[:, e] = False
    return m


def softcapped(q, k, v, mask, scale, softcap):
    """flex_attention's O [Hq,Lq,D] and LSE [Hq,Lq] with scores capped to
    c tanh(s / c), masked keys at -inf (float64, eager)."""

    c = torch.tensor(softcap, dtype=torch.float64)  # a tensor: flex_attention traces score_mod

    def score_mod(score, b, h, q_idx, kv_idx):
        capped = c * torch.tanh(score / c)
        return torch.where(mask[q_idx, kv_idx], capped, torch.full_like(capped, float("-inf")))

    with warnings.catch_warnings():  # eager flex_attention warns that it is not compiled
        warnings.simplefilter("ignore")
        o, lse = flex_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), score_mod=score_mod,
                                scale=scale, return_lse=True)
    return o.squeeze(0), lse.squeeze(0)


def golden(q32, k32, v32, mask, scale, softcap):
    """O [Hq,Lq,D] and LSE [Hq,Lq] in float64 from float32 inputs."""
    hq, hkv = q32.shape[0], k32.shape[0]
    d = q32.shape[-1]
    s = scale if scale != 0.0 else 1.0 / math.sqrt(d)
    q = q32.to(torch.float64)
    k = k32.to(torch.float64).repeat_interleave(hq // hkv, dim=0)
    v = v32.to(torch.float64).repeat_interleave(hq // hkv, dim=0)
    scores = torch.matmul(q, k.transpose(-1, -2)) * s
    if softcap > 0:
        o, lse_flex = softcapped(q, k, v, mask, s, softcap)
        scores = softcap * torch.tanh(scores / softcap)
    else:
        o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                           attn_mask=mask, dropout_p=0.0, is_causal=False,
                                           scale=s).squeeze(0)
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    if softcap > 0:  # flex_attention's own LSE, on the rows that see a key
        live = mask.any(dim=-1)
        assert torch.allclose(lse_flex[:, live], lse[:, live], rtol=1e-12, atol=1e-12)
    dead = ~mask.any(dim=-1)  # [Lq] rows with no visible key
    o[:, dead, :] = 0.0
    lse[:, dead] = float("-inf")
    assert torch.isfinite(o).all(), "NaN/inf left in O"
    assert not torch.isnan(lse).any()
    # independent check of SDPA: explicit softmax(scores) @ V on live rows
    live = ~dead
    if live.any():
        w = torch.softmax(scores[:, live, :], dim=-1)
        o2 = torch.matmul(w, v)
        assert torch.allclose(o[:, live, :], o2, rtol=1e-12, atol=1e-12)
    return o, lse, int(dead.sum())


def save(path, arr, dtype):
    a = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
    np.save(path, a, allow_pickle=False)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "attn"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    lines = [
        "# golden attention cases: tools/oracle/make_attn_fixtures.py "
        f"(torch {torch.__version__}, SDPA and flex_attention in float64)",
        "# name hq hkv lq lk d mask window sinks exclude scale softcap",
    ]
    for idx, (name, hq, hkv, lq, lk, d, kind, window, sinks, excl, scale, softcap) in enumerate(ALL_CASES):
        assert hq % hkv == 0
        g = torch.Generator().manual_seed(1000 + idx)
        q = torch.randn(hq, lq, d, generator=g, dtype=torch.float32)
        k = torch.randn(hkv, lk, d, generator=g, dtype=torch.float32)
        v = torch.randn(hkv, lk, d, generator=g, dtype=torch.float32)
        mask = visible(lq, lk, kind, window, sinks, excl)
        o, lse, n_dead = golden(q, k, v, mask, scale, softcap)
        base = os.path.join(args.out, name)
        save(base + ".q.npy", q.numpy(), np.float32)
        save(base + ".k.npy", k.numpy(), np.float32)
        save(base + ".v.npy", v.numpy(), np.float32)
        save(base + ".o.npy", o.to(torch.float32).numpy(), np.float32)
        save(base + ".lse.npy", lse.to(torch.float32).numpy(), np.float32)
        ex = ",".join(str(e) for e in excl) if excl else "-"
        lines.append(f"{name} {hq} {hkv} {lq} {lk} {d} {kind} {window} {sinks} {ex} {scale!r} {softcap!r}")
        print(f"{name}: fully masked rows {n_dead}")
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
