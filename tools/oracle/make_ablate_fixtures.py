#!/usr/bin/env python3
"""Golden KL divergences of `qkv ablate` (qkv_ablate_positions / heads) from
Hugging Face transformers running SmolLM2-135M-Instruct (Q4_1 GGUF) loaded
from the same GGUF as make_logits_fixtures.py does.

Pinned: see tools/oracle/requirements.txt. Needs
models/SmolLM2-135M-Instruct.Q4_1.gguf (`make model`).

    /work/oracle-venv/bin/python tools/oracle/make_ablate_fixtures.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out tests/fixtures/ablate]

The reference: the model with attn_implementation="eager", its
eager_attention_forward replaced by the same computation with our own 4D
additive mask (0 visible, -inf hidden) of shape [1, H, n, n]:
  scope all   key j hidden from every row i >= j (rows < j never see it),
  scope last  key j hidden from row n-1 only,
  in every layer, or in one layer / one query head (the mask is plain causal
  elsewhere). A row with no visible key gets O = 0 (qkv's definition; softmax
  over all -inf would be NaN). Head zero-ablation sets one head's attention
  output to 0 before o_proj, for every row.
KL(p_full || p_ablated) of the last position's next-token distribution in
float64 from the float32 logits, the target being the full run's top token.
Token ids come from SmolLM2's own tokenizer (digits split one by one), as qkv
tokenizes; transformers' GGUF tokenizer would keep "4729" whole.

Files (float32 / int32 .npy), per case NAME:
  NAME.ids [n], NAME.kl_all [n], NAME.kl_last [n], NAME.dp_all [n] (p_ablated
  - p_full of the target), NAME.top_all [n] (top token after ablation),
  NAME.kl_scoped [n] (scope all in layer SCOPE_LAYER, head SCOPE_HEAD),
  NAME.kl_heads [L, H] (zero-ablation of each head),
and manifest.txt: `ablate NAME N TARGET P_TARGET SCOPE_LAYER SCOPE_HEAD`.
"""
import os
import sys

import numpy as np
import torch
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_fixtures import native_tokenizer, save, start  # noqa: E402

CASES = [
    # name, text, (layer, head) of the scoped run (head -1: every head of the layer)
    ("code", "The code is 4729. Repeat the code: 472", (16, 0)),
    ("capital", "The capital of France is Paris. The capital of Italy is", (16, -1)),
]

# What the patched attention does on the next forward call.
STATE = {"hide": None, "layer": -1, "head": -1, "zero": None}


def visible(n, hide, scope):
    """[n, n] bool: causal, and key `hide` removed from the rows scope names."""
    vis = torch.ones(n, n, dtype=torch.bool).tril()
    if hide is not None:
        rows = slice(hide, n) if scope == "all" else slice(n - 1, n)
        vis[rows, hide] = False
    return vis


def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """eager_attention_forward with our additive mask (attention_mask unused)."""
    k = modeling_llama.repeat_kv(key, module.num_key_value_groups)
    v = modeling_llama.repeat_kv(value, module.num_key_value_groups)
    h, n = query.shape[1], query.shape[2]
    vis = STATE["vis"].expand(h, n, n).clone()
    hide_here = STATE["layer"] < 0 or STATE["layer"] == module.layer_idx
    if not hide_here:
        vis = STATE["causal"].expand(h, n, n).clone()
    elif STATE["head"] >= 0:
        plain = STATE["causal"].expand(h, n, n).clone()
        plain[STATE["head"]] = vis[STATE["head"]]
        vis = plain
    mask = torch.zeros(1, h, n, n, dtype=query.dtype)
    mask[0][~vis] = float("-inf")
    scores = torch.matmul(query, k.transpose(2, 3)) * scaling + mask
    w = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    w = torch.nan_to_num(w, nan=0.0)  # rows with no visible key: O = 0
    out = torch.matmul(w, v)
    if STATE["zero"] == module.layer_idx:
        out[:, STATE["zero_head"]] = 0
    return out.transpose(1, 2).contiguous(), w


def last_logits(model, ids, hide=None, scope="all", layer=-1, head=-1, zero=None):
    n = len(ids)
    STATE.update(vis=visible(n, hide, scope), causal=visible(n, None, scope), layer=layer, head=head,
                 zero=None if zero is None else zero[0], zero_head=None if zero is None else zero[1])
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].double()


def kl(p_logits, q_logits):
    lp = torch.log_softmax(p_logits, -1)
    lq = torch.log_softmax(q_logits, -1)
    return float((lp.exp() * (lp - lq)).sum())


def main():
    args, tok, model = start(__doc__, "tests/fixtures/ablate")
    modeling_llama.eager_attention_forward = attention
    native = native_tokenizer(tok)
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    manifest = ["# ablate NAME N TARGET P_TARGET SCOPE_LAYER SCOPE_HEAD"]
    for name, text, (sl, sh) in CASES:
        ids = native.encode(text, add_special_tokens=True).ids
        n = len(ids)
        full = last_logits(model, ids)
        target = int(full.argmax())
        p_full = torch.softmax(full, -1)
        kl_all, kl_last, dp_all, top_all, kl_scoped = [], [], [], [], []
        for j in range(n):
            a = last_logits(model, ids, hide=j, scope="all")
            kl_all.append(kl(full, a))
            dp_all.append(float(torch.softmax(a, -1)[target] - p_full[target]))
            top_all.append(int(a.argmax()))
            kl_last.append(kl(full, last_logits(model, ids, hide=j, scope="last")))
            kl_scoped.append(kl(full, last_logits(model, ids, hide=j, scope="all", layer=sl, head=sh)))
        kl_heads = np.array([[kl(full, last_logits(model, ids, zero=(l, h))) for h in range(H)] for l in range(L)])
        save(args.out, f"{name}.ids.npy", np.array(ids, dtype=np.int32))
        save(args.out, f"{name}.kl_all.npy", np.array(kl_all, dtype=np.float32))
        save(args.out, f"{name}.kl_last.npy", np.array(kl_last, dtype=np.float32))
        save(args.out, f"{name}.dp_all.npy", np.array(dp_all, dtype=np.float32))
        save(args.out, f"{name}.top_all.npy", np.array(top_all, dtype=np.int32))
        save(args.out, f"{name}.kl_scoped.npy", np.array(kl_scoped, dtype=np.float32))
        save(args.out, f"{name}.kl_heads.npy", kl_heads.astype(np.float32))
        manifest.append(f"ablate {name} {n} {target} {float(p_full[target]):.6f} {sl} {sh}")
        print(f"{name}: {n} tokens, target {tok.decode([target])!r} p {float(p_full[target]):.3f}; "
              f"KL all {np.round(kl_all, 3).tolist()}")
    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
