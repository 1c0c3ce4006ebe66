#!/usr/bin/env python3
"""Golden activations of SmolLM2-135M-Instruct (Q4_1 GGUF) at qkv's named hook
points (TransformerLens names, include/qkv.h qkv_hook_point), from Hugging Face
transformers loading the same GGUF as make_logits_fixtures.py does, with
PyTorch forward hooks on its modules.

Pinned and checked (PINNED below, tools/oracle/requirements.txt): torch, transformers,
numpy, gguf, accelerate. Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (`make model`).

    /work/oracle-venv/bin/python tools/oracle/make_hook_fixtures.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out tests/fixtures/hooks]

One prompt (the `english` prompt of make_logits_fixtures.py, 22 tokens, no BOS),
one forward pass, float32, eager attention, 2 threads. Where each point is
taken in transformers' LlamaForCausalLM (batch dimension dropped):

  hook_embed                 output of model.embed_tokens                 [n, E]
  blocks.L.hook_resid_pre    input of model.layers[L] (forward pre-hook)  [n, E]
  blocks.L.attn.hook_q/k/v   outputs of self_attn.q_proj/k_proj/v_proj    [n, H, D]
  blocks.L.attn.hook_rot_q/k what apply_rotary_pos_emb returns            [n, H, D]
  blocks.L.attn.hook_pattern eager attention weights (self_attn output 1) [Hq, n, n]
  blocks.L.attn.hook_z       input of self_attn.o_proj (pre-hook)         [n, Hq, D]
  blocks.L.hook_attn_out     output of self_attn.o_proj                   [n, E]
  blocks.L.hook_mlp_out      output of mlp                                [n, E]
  blocks.L.hook_resid_post   output of model.layers[L]                    [n, E]
  ln_final.hook_normalized   model.norm's input x as x * rsqrt(mean(x^2) + eps): the
                             norm before its weight (TransformerLens's RMSNorm)  [n, E]

q, k, rot_q, rot_k are stored as transformers has them: in HF's rotate-half
order within each head's D. llama.cpp's converter permuted the rows of
attn_q / attn_k (per head, HF row r*D/2 + i -> GGUF row 2i + r) so that the
interleaved RoPE on the GGUF weights equals rotate-half on HF's; transformers'
loader un-permutes them, qkv runs the GGUF rows as they are. So
qkv[t, h, 2i + r] = fixture[t, h, r*D/2 + i]. The script checks that mapping
against the GGUF's own dequantised attn_q / attn_k (gguf.quants.dequantize):
input_layernorm's output times the raw GGUF rows equals transformers' q / k
with the mapping applied (rotated: permuted rotate-half RoPE = interleaved
RoPE of the permuted vector, what tests/fixtures/rope/ checks).

Size: resid_pre, z, attn_out, mlp_out and resid_post of all 30 layers would be
7.6 MB, so only LAYERS are stored for the [n, E] points and hook_z, ATTN_LAYERS
for q, k, v, rot_q, rot_k and the pattern (1.8 MB in all). resid_mid is not
stored (asserted here to be exactly resid_pre + attn_out). Logits: [n, V] would be 4.3 MB, so per position the
logsumexp (float64 of the float32 row), the top 5 and the logits of 512
evenly strided ids (0, 96, ..., 49056).

Files, float32 little-endian C order unless said:
  <full hook name>.npy   e.g. blocks.14.attn.hook_z.npy; where an array equals one
                         already written (hook_resid_pre of L = hook_resid_post of
                         L - 1, of 0 = hook_embed) the manifest names that file
  ids.npy [n] int32, logits.lse.npy [n], logits.top5_ids.npy [n, 5] int32,
  logits.top5.npy [n, 5], logits.sub_ids.npy [512] int32, logits.sub.npy [n, 512]
  manifest.txt:
    # comments: model sha256, versions, config
    array NAME FILE ORDER SHAPE     ORDER same | rotate_half (see above); SHAPE d0,d1[,d2]
"""
import os
import sys
from importlib.metadata import version

import numpy as np
import torch
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_logits_fixtures import native_tokenizer, save, sha256, start  # noqa: E402

PINNED = {"torch": "2.15.0", "transformers": "5.24.0", "numpy": "2.4.6", "gguf": "0.19.0",
          "accelerate": "1.15.0"}
# make_logits_fixtures.py's `english` prompt
TEXT = ("The quick brown fox jumps over the lazy dog. Attention is all you need, "
        "and the capital of France is")
LAYERS = [0, 1, 14, 28, 29]       # [n, E] points and hook_z
ATTN_LAYERS = [0, 14, 29]         # q, k, v, rot_q, rot_k, pattern
SUB_STRIDE = 96                   # logits of ids 0, 96, ... at every position
TOPK = 5


def check_versions():
    bad = []
    for pkg, want in PINNED.items():
        have = version(pkg).split("+")[0]
        if have != want:
            bad.append(f"{pkg} {have} (pinned {want})")
    if bad:
        raise SystemExit("make_hook_fixtures.py: " + ", ".join(bad) +
                         "; install tools/oracle/requirements.txt")


def to_hf_half(D):
    """perm[j] = the HF (rotate-half) index of GGUF/qkv index j within one head:
    qkv[..., j] = hf[..., perm[j]], j = 2i + r -> r*D/2 + i."""
    j = np.arange(D)
    return (j % 2) * (D // 2) + j // 2


class Capture:
    """Forward hooks on every module a point is read from; arrays per
    (name, layer) as numpy float32 without the batch dimension."""

    def __init__(self, model):
        self.model = model
        self.cfg = model.config
        self.acts = {}
        self.handles = []
        self.rope_calls = []
        self.rope_orig = modeling_llama.apply_rotary_pos_emb
        inner = model.model
        self.hook(inner.embed_tokens, "hook_embed", -1, out=True)
        self.hook(inner.norm, "ln_final_in", -1, out=False)
        for L, layer in enumerate(inner.layers):
            a = layer.self_attn
            self.hook(layer, "hook_resid_pre", L, out=False)
            self.hook(layer, "hook_resid_post", L, out=True)
            self.hook(layer.input_layernorm, "ln1", L, out=True)
            self.hook(layer.post_attention_layernorm, "hook_resid_mid", L, out=False)
            self.hook(a.q_proj, "attn.hook_q", L, out=True, heads=self.cfg.num_attention_heads)
            self.hook(a.k_proj, "attn.hook_k", L, out=True, heads=self.cfg.num_key_value_heads)
            self.hook(a.v_proj, "attn.hook_v", L, out=True, heads=self.cfg.num_key_value_heads)
            self.hook(a.o_proj, "attn.hook_z", L, out=False, heads=self.cfg.num_attention_heads)
            self.hook(a.o_proj, "hook_attn_out", L, out=True)
            self.hook(a, "attn.hook_pattern", L, out=True, index=1)
            self.hook(a, "self_attn_out", L, out=True, index=0)
            self.hook(layer.mlp, "hook_mlp_out", L, out=True)
        modeling_llama.apply_rotary_pos_emb = self.rope

    def store(self, name, layer, t, heads=None):
        x = t.detach()[0].float().numpy().copy()
        if heads:
            x = x.reshape(x.shape[0], heads, -1)
        assert (name, layer) not in self.acts, (name, layer)
        self.acts[(name, layer)] = x

    def hook(self, module, name, layer, out, heads=None, index=None):
        def post(mod, args, kwargs, output):
            t = output[index] if index is not None else output
            self.store(name, layer, t if not isinstance(t, tuple) else t[0], heads)

        def pre(mod, args, kwargs):
            self.store(name, layer, args[0] if args else kwargs["hidden_states"], heads)

        if out:
            self.handles.append(module.register_forward_hook(post, with_kwargs=True))
        else:
            self.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))

    def rope(self, q, k, cos, sin, *args, **kwargs):
        """apply_rotary_pos_emb, recording its outputs [1, H, n, D] -> [n, H, D];
        called once per layer, in layer order."""
        rq, rk = self.rope_orig(q, k, cos, sin, *args, **kwargs)
        self.rope_calls.append((rq.detach()[0].transpose(0, 1).numpy().copy(),
                                rk.detach()[0].transpose(0, 1).numpy().copy()))
        return rq, rk

    def close(self):
        for h in self.handles:
            h.remove()
        modeling_llama.apply_rotary_pos_emb = self.rope_orig
        for L, (rq, rk) in enumerate(self.rope_calls):
            self.acts[("attn.hook_rot_q", L)] = rq
            self.acts[("attn.hook_rot_k", L)] = rk


def full_name(name, layer):
    return name if layer < 0 else f"blocks.{layer}.{name}"


def gguf_rows(path, name):
    """The GGUF tensor `name` dequantised as stored: [rows, cols] float32."""
    import gguf
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)


def check_consistency(acts, n_layer, model_path, D):
    """What the hooks caught is one forward pass: the residual stream's sums,
    and the q / k row permutation against the GGUF's raw rows."""
    assert np.array_equal(acts[("hook_resid_pre", 0)], acts[("hook_embed", -1)])
    for L in range(n_layer):
        pre, mid, post = (acts[(p, L)] for p in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post"))
        assert np.array_equal(mid, pre + acts[("hook_attn_out", L)]), L
        assert np.array_equal(post, mid + acts[("hook_mlp_out", L)]), L
        assert np.array_equal(acts[("self_attn_out", L)], acts[("hook_attn_out", L)]), L
        if L + 1 < n_layer:
            assert np.array_equal(post, acts[("hook_resid_pre", L + 1)]), L
    perm = to_hf_half(D)
    worst = 0.0
    for L in ATTN_LAYERS:
        h = acts[("ln1", L)].astype(np.float64)                              # [n, E]
        for kind, tensor in (("q", "attn_q"), ("k", "attn_k")):
            w = gguf_rows(model_path, f"blk.{L}.{tensor}.weight").astype(np.float64)  # [H*D, E]
            raw = (h @ w.T).reshape(h.shape[0], -1, D)                       # GGUF row order
            hf = acts[(f"attn.hook_{kind}", L)]
            err = np.abs(raw - hf[..., perm]).max() / np.abs(hf).max()
            other = np.abs(raw - hf).max() / np.abs(hf).max()
            assert err < 1e-5 and other > 1e-2, (L, kind, err, other)
            worst = max(worst, err)
    print(f"q/k: GGUF rows = transformers' with qkv[2i+r] = hf[r*D/2+i] (rel err {worst:.2g})")


def main():
    check_versions()
    args, tok, model = start(__doc__, "tests/fixtures/hooks")
    cfg = model.config
    n_layer, E, Hq, Hkv = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = cfg.head_dim
    assert cfg.tie_word_embeddings

    ids = tok(TEXT, add_special_tokens=True).input_ids
    assert native_tokenizer(tok).encode(TEXT, add_special_tokens=True).ids == ids
    n = len(ids)

    cap = Capture(model)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()            # [n, V]
    cap.close()
    acts = cap.acts
    # ln_final.hook_normalized: LlamaRMSNorm's own float32 steps, before its weight
    x = torch.from_numpy(acts.pop(("ln_final_in", -1)))
    eps = model.model.norm.variance_epsilon
    acts[("ln_final.hook_normalized", -1)] = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).numpy()
    assert len(cap.rope_calls) == n_layer
    check_consistency(acts, n_layer, args.model, D)
    # logits are ln_final times the norm's weight times the tied embedding
    w_emb = model.model.embed_tokens.weight.detach().double()
    w_norm = model.model.norm.weight.detach().double()
    re = ((torch.from_numpy(acts[("ln_final.hook_normalized", -1)]).double() * w_norm) @ w_emb.T -
          logits.double()).abs().max()
    assert re < 1e-3, re

    for f in os.listdir(args.out):
        if f.endswith(".npy"):
            os.remove(os.path.join(args.out, f))
    manifest = [f"# model {os.path.basename(args.model)} sha256 {sha256(args.model)}",
                "# " + " ".join(f"{k} {version(k)}" for k in PINNED) + ", float32, eager attention, 2 threads",
                f"# config n_layer {n_layer} n_embd {E} n_head {Hq} n_head_kv {Hkv} head_dim {D}",
                f"# prompt {n} tokens (ids.npy): {TEXT!r}",
                "# array NAME FILE ORDER SHAPE   (ORDER rotate_half: qkv[t,h,2i+r] = fixture[t,h,r*D/2+i])"]
    save(args.out, "ids.npy", np.array(ids, dtype=np.int32))

    written = {}  # file -> array, so an array equal to one written is not written twice

    def put(name, layer, order="same", same_as=None):
        x = np.ascontiguousarray(acts[(name, layer)], dtype=np.float32)
        fname = full_name(*same_as) + ".npy" if same_as else full_name(name, layer) + ".npy"
        if same_as:
            assert np.array_equal(written[fname], x), (name, layer, same_as)
        else:
            save(args.out, fname, x)
            written[fname] = x
        manifest.append(f"array {full_name(name, layer)} {fname} {order} {','.join(map(str, x.shape))}")

    put("hook_embed", -1)
    for L in LAYERS:
        # resid_pre of L is resid_post of L - 1 (hook_embed for L = 0): one file
        prev = ("hook_embed", -1) if L == 0 else ("hook_resid_post", L - 1)
        put("hook_resid_pre", L, same_as=prev if full_name(*prev) + ".npy" in written else None)
        for p in ("attn.hook_z", "hook_attn_out", "hook_mlp_out", "hook_resid_post"):
            put(p, L)
    for L in ATTN_LAYERS:
        put("attn.hook_q", L, "rotate_half")
        put("attn.hook_k", L, "rotate_half")
        put("attn.hook_v", L)
        put("attn.hook_rot_q", L, "rotate_half")
        put("attn.hook_rot_k", L, "rotate_half")
        put("attn.hook_pattern", L)
    put("ln_final.hook_normalized", -1)

    V = logits.shape[1]
    sub = np.arange(0, V, SUB_STRIDE, dtype=np.int32)
    top = torch.topk(logits, TOPK, dim=-1)
    save(args.out, "logits.lse.npy", torch.logsumexp(logits.double(), dim=-1).float().numpy())
    save(args.out, "logits.top5_ids.npy", top.indices.numpy().astype(np.int32))
    save(args.out, "logits.top5.npy", top.values.numpy().astype(np.float32))
    save(args.out, "logits.sub_ids.npy", sub)
    save(args.out, "logits.sub.npy", logits[:, sub].numpy().astype(np.float32))
    manifest.append(f"# logits: lse [{n}], top5_ids/top5 [{n},{TOPK}], sub_ids [{len(sub)}] (stride {SUB_STRIDE}), "
                    f"sub [{n},{len(sub)}]")

    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(args.out, x)) for x in os.listdir(args.out))
    print(f"{n} tokens; next '{tok.decode([top.indices[-1, 0].item()])}'; {args.out}: {total} bytes")
    for L in (0, 14, n_layer - 1):
        print(f"  layer {L:2d}: max|resid_post| {np.abs(acts[('hook_resid_post', L)]).max():8.2f}, "
              f"max|attn_out| {np.abs(acts[('hook_attn_out', L)]).max():7.2f}, "
              f"max|mlp_out| {np.abs(acts[('hook_mlp_out', L)]).max():7.2f}")


if __name__ == "__main__":
    main()
