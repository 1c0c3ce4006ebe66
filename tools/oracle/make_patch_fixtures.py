#!/usr/bin/env python3
"""Golden activation-patching recoveries, direct logit attributions and logit
lenses (issue 33; qkv_patch / qkv_attribute / qkv_lens) from Hugging Face
transformers running the same GGUFs with PyTorch forward hooks.

Pinned and checked (make_family_fixtures.PINNED, tools/oracle/requirements.txt):
torch 2.15.0, transformers 5.24.0, numpy 2.4.6, gguf 0.19.0, tokenizers,
accelerate 1.15.0. Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and
models/gemma-3-270m-q4_k_m.gguf (`make model`).

    /work/oracle-venv/bin/python tools/oracle/make_patch_fixtures.py \
        [--out tests/fixtures/patch] [--only smollm2_ioi] [--qkv build/qkv] \
        [--llamacpp-f32 /tmp/patch-f32.gguf]

About 15 min of CPU time on 2 threads (8 min wall on an idle 2-core
machine; the float64 rerun of every sweep is two thirds of it).
--qkv also checks that `qkv tokenize` gives the fixture's ids; --llamacpp-f32
runs llama.cpp on each GGUF dequantised to F32 (written to PATH and deleted;
1.1 GB for Gemma) and prints how far its last-position logits and metrics are
from transformers'. Rerunning with the pinned versions on the same machine
rewrites the same files.

The reference: load_reference (make_logits_fixtures.py: transformers' own GGUF
loader, every tensor dequantised to float32, eager attention, 2 threads); its
config is asserted to need none of make_family_fixtures.fix_config's fixes
(for Gemma 3 270M: head_dim 256 = query_pre_attn_scalar, window 512, RoPE
1e6 / 10000, no soft-caps). Prompts are tokenized by transformers'
tokenizer from the same GGUF, BOS as the GGUF says (SmolLM2 none, Gemma 3
<bos>); SmolLM2's are also checked against its own tokenizer
(native_tokenizer).

Where each activation is read and replaced (forward hooks / pre-hooks on
transformers' modules; TransformerLens names as in include/qkv.h):
  blocks.L.hook_resid_pre   input of model.layers[L]
  blocks.L.attn.hook_z      input of self_attn.o_proj, [n, Hq*D] = [n, Hq, D]
  blocks.L.hook_attn_out    llama: output 0 of self_attn (= o_proj's output);
                            Gemma 3: output of post_attention_layernorm
  blocks.L.hook_mlp_out     llama: output of mlp; Gemma 3: output of
                            post_feedforward_layernorm
  blocks.L.hook_resid_post  output of model.layers[L]

Patching, the naive way: for every component a full forward pass of the
corrupted prompt in which a hook puts the clean run's activation in place
(head_out: hook_z's columns of head h at every position; resid_pre, attn_out,
mlp_out: the [E] row at one position p). Many components run at once as the
rows of one batch of copies of the corrupted prompt, each row with its own
replacement; a few are rerun alone and must agree to 1e-5. Metrics at the
last position in float64 from the float32 logits (after any final soft-cap):
kl recovery = 1 - KL(p_clean || p_patched) / KL(p_clean || p_corrupt),
logit_diff recovery = (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt),
LD = logit[answer] - logit[wrong]; not clipped. Checked on the way: patching
a position before the first differing token changes nothing (|recovery| <
1e-4), and replacing the whole residual entering a layer gives the clean run
back (recovery 1). The same sweeps rerun with the model in float64 (the same
dequantised weights) measure how far float32 rounding alone moves each
recovery (meta.json "measured").

DLA of the clean prompt, answer / wrong as the metric's: x the final residual
(hook_resid_post of the last layer) at the last position, s = 1/sqrt(mean(x^2)
+ eps) frozen, g the final norm's effective weight (Gemma: 1 + w, transformers
keeps w), u = W_U[answer] - W_U[wrong] (tied embedding); a component c in E
contributes s * sum_i c_i g_i u_i. Components: embed (the input of layer 0,
Gemma's scaled by sqrt(E)), attn_out and mlp_out per layer, and for llama each
head: o_proj.weight[:, h*D:(h+1)*D] @ z_h (Gemma 3's heads pass through
post_attention_layernorm: not additive, NaN). Asserted: total = embed + sum
attn + sum mlp equals the model's own pre-soft-cap logit difference (final
norm and lm_head on x) to 1e-4 relative, and the heads of a layer sum to its
attn.

Logit lens of the clean prompt: hook_resid_post of each layer at each position
through model.model.norm, lm_head and the final soft-cap if the config has
one, softmax in float64. The last layer's is asserted equal to the model's
logits.

Files, per case OUT/<case>/ (the layout in tests/test_patch_oracle.c):
  meta.json        model, texts, ids, n, n_layer, n_head, answer/wrong ids and
                   pieces (and how they were chosen), metrics {kl, logit_diff}
                   {clean, corrupt}, dla {embed, total, logit_diff,
                   heads_linear, answer_id, wrong_id, final_softcap}, the clean
                   run's top-2 at the last position, measured (float64 rerun,
                   batch vs single), versions, model sha256, script
  {kl,logit_diff}_{head_out [L,Hq], resid_pre [L,n], attn_out [L,n],
                   mlp_out [L,n]}.npy   float64 recoveries
  dla_heads.npy [L,Hq] (NaN where not linear), dla_attn.npy [L],
  dla_mlp.npy [L]  float64
  lens_top1.npy [L,n] int32, lens_gap.npy [L,n] (top-1 minus top-2
                   probability), lens_prob_answer.npy [L,n] float64
"""
import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from importlib.metadata import version

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_family_fixtures import PINNED, check_versions, fix_config, llamacpp_view  # noqa: E402
from make_logits_fixtures import load_reference, native_tokenizer, save, sha256  # noqa: E402
from gguf_f32 import dequantised_f32_gguf  # noqa: E402

CASES = [
    dict(name="smollm2_ioi", model="models/SmolLM2-135M-Instruct.Q4_1.gguf",
         clean="When Mary and John went to the store, John gave a drink to",
         corrupt="When Mary and John went to the store, Mary gave a drink to",
         answer=" Mary", wrong=" John"),
    # answer / wrong 年 / 病: both runs' own top-1 is "\n\n", and the top-1 /
    # top-2 difference moves by only 0.009 logits between them, below float32's
    # reach on a recovery ratio; 年 vs 病 moves by 12.9 (7.74 clean, -5.19 corrupt)
    dict(name="gemma3_leave", model="models/gemma-3-270m-q4_k_m.gguf",
         clean="年假怎么申请？", corrupt="病假怎么申请？", answer="年", wrong="病"),
]
SWEEPS = ("head_out", "resid_pre", "attn_out", "mlp_out")
METRICS = ("kl", "logit_diff")
HEADS_LINEAR = ("llama", "mistral", "qwen2", "qwen3")   # no norm between o_proj and the residual
BATCH = 32
TOL_UNITS = 2e-5     # the self-checks, in nats / logits: float32 rounding, batched or not
SCRIPT = "tools/oracle/make_patch_fixtures.py"


# ---------------------------------------------------------------- hook sites

def site(model, point, L):
    """(module, 'pre' | 'post', index into a tuple output or None) where
    `point` of layer L is read and replaced."""
    layer = model.model.layers[L]
    sandwich = hasattr(layer, "post_feedforward_layernorm")      # Gemma 2 / 3
    if point == "resid_pre":
        return layer, "pre", None
    if point == "resid_post":
        return layer, "post", None
    if point == "z":
        return layer.self_attn.o_proj, "pre", None
    if point == "attn_out":
        return (layer.post_attention_layernorm, "post", None) if sandwich else (layer.self_attn, "post", 0)
    if point == "mlp_out":
        return (layer.post_feedforward_layernorm, "post", None) if sandwich else (layer.mlp, "post", None)
    raise ValueError(point)


@contextmanager
def hooked(model, fns):
    """Hooks calling fns[(point, L)](t) with the activation t [B, n, dim]; a
    tensor returned replaces it for the rest of the forward pass."""
    handles = []
    for (point, L), f in fns.items():
        mod, when, index = site(model, point, L)
        if when == "pre":
            def pre(m, args, kwargs, f=f):
                new = f(args[0] if args else kwargs["hidden_states"])
                if new is None:
                    return None
                if args:
                    return (new,) + tuple(args[1:]), kwargs
                return args, {**kwargs, "hidden_states": new}
            handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            def post(m, args, kwargs, out, f=f, index=index):
                new = f(out if index is None else out[index])
                if new is None or index is None:
                    return new
                return tuple(out[:index]) + (new,) + tuple(out[index + 1:])
            handles.append(mod.register_forward_hook(post, with_kwargs=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def capture(model, ids):
    """One forward pass of ids: every point of every layer [n, dim] (batch
    row 0) and the logits [n, V], float32."""
    acts = {}
    n_layer = model.config.num_hidden_layers

    def keep(key):
        def f(t):
            acts[key] = t[0].detach().clone()
        return f

    fns = {(p, L): keep((p, L)) for L in range(n_layer) for p in ("resid_pre", "z", "attn_out", "mlp_out",
                                                                  "resid_post")}
    with torch.no_grad(), hooked(model, fns):
        logits = model(torch.tensor([ids])).logits[0]
    return acts, logits


def patched_last_logits(model, ids, clean, specs, head_dim):
    """Last-position logits [len(specs), V] of copies of ids (the corrupted
    prompt), copy b run with its own replacement specs[b] = (point, L, pos,
    head): the clean activation clean[(point, L)] put in at position pos
    (None: every position), in head h's columns only where head is not None."""
    by_site = {}
    for b, (point, L, pos, head) in enumerate(specs):
        by_site.setdefault((point, L), []).append((b, pos, head))

    def replace(key, rows):
        src = clean[key]                                             # [n, dim]

        def f(t):
            t = t.clone()
            for b, pos, head in rows:
                cols = slice(None) if head is None else slice(head * head_dim, (head + 1) * head_dim)
                rws = slice(None) if pos is None else slice(pos, pos + 1)
                t[b, rws, cols] = src[rws, cols].to(t.dtype)
            return t
        return f

    fns = {key: replace(key, rows) for key, rows in by_site.items()}
    x = torch.tensor([ids] * len(specs))
    with torch.no_grad(), hooked(model, fns):
        return model(x, logits_to_keep=1).logits[:, -1]


# ------------------------------------------------------------------- metrics

class Metric:
    """Both metrics at the last position, in float64 from the float32 logits,
    relative to the clean and corrupt runs."""

    def __init__(self, clean_last, corrupt_last, answer, wrong):
        self.a, self.w = answer, wrong
        self.lp_clean = torch.log_softmax(clean_last.double(), -1)
        self.values = {"kl": {"clean": 0.0, "corrupt": float(self.kl(corrupt_last[None])[0])},
                       "logit_diff": {"clean": float(self.ld(clean_last[None])[0]),
                                      "corrupt": float(self.ld(corrupt_last[None])[0])}}

    def kl(self, logits):                                            # [B, V] -> [B]
        lq = torch.log_softmax(logits.double(), -1)
        return (self.lp_clean.exp() * (self.lp_clean - lq)).sum(-1)

    def ld(self, logits):
        logits = logits.double()
        return logits[:, self.a] - logits[:, self.w]

    def span(self):
        """Each recovery's denominator: KL(p_clean || p_corrupt), LD_clean - LD_corrupt."""
        return {"kl": self.values["kl"]["corrupt"],
                "logit_diff": abs(self.values["logit_diff"]["clean"] - self.values["logit_diff"]["corrupt"])}

    def recovery(self, logits):
        """{"kl": [B], "logit_diff": [B]} float64 numpy."""
        kl = self.values["kl"]
        ld = self.values["logit_diff"]
        return {"kl": (1.0 - self.kl(logits) / kl["corrupt"]).numpy(),
                "logit_diff": ((self.ld(logits) - ld["corrupt"]) / (ld["clean"] - ld["corrupt"])).numpy()}


def sweep_specs(sweep, n_layer, n_head, n):
    if sweep == "head_out":
        return [("z", L, None, h) for L in range(n_layer) for h in range(n_head)], (n_layer, n_head)
    return [(sweep, L, p, None) for L in range(n_layer) for p in range(n)], (n_layer, n)


def run_specs(model, ids, clean, specs, metric, head_dim, batch):
    """Recoveries {"kl": [len(specs)], "logit_diff": [...]} of the patched runs."""
    out = {m: [] for m in METRICS}
    for i in range(0, len(specs), batch):
        rec = metric.recovery(patched_last_logits(model, ids, clean, specs[i:i + batch], head_dim))
        for m in METRICS:
            out[m].append(rec[m])
    return {m: np.concatenate(v) for m, v in out.items()}


def runs(model, ids_clean, ids_corrupt):
    """The clean run's activations and logits [n, V], the corrupt run's logits."""
    clean, logits_clean = capture(model, ids_clean)
    _, logits_corrupt = capture(model, ids_corrupt)
    return clean, logits_clean, logits_corrupt


def sweeps(model, ids_corrupt, clean, metric, batch):
    """Every sweep's recoveries {sweep: {metric: array}}."""
    cfg = model.config
    rec = {}
    for sw in SWEEPS:
        specs, shape = sweep_specs(sw, cfg.num_hidden_layers, cfg.num_attention_heads, len(ids_corrupt))
        r = run_specs(model, ids_corrupt, clean, specs, metric, cfg.head_dim, batch)
        rec[sw] = {m: r[m].reshape(shape) for m in METRICS}
    return rec


def check_patching(model, ids_clean, ids_corrupt, clean, metric, rec, batch):
    """The reference against itself: positions before the first differing
    token are identical in both runs, so patching them changes nothing; the
    whole residual entering a layer brings the clean run back; some batched
    components alone give the same. Compared in the metric's own units
    (recovery times its denominator: float32 noise in the logits, not in the
    ratio). Returns the largest batch-vs-single recovery gap."""
    cfg = model.config
    n_layer = cfg.num_hidden_layers
    first = next(i for i, (a, b) in enumerate(zip(ids_clean, ids_corrupt)) if a != b)
    span = metric.span()
    for sw in ("resid_pre", "attn_out", "mlp_out"):
        for m in METRICS:
            worst = np.abs(rec[sw][m][:, :first]).max() * span[m] if first else 0.0
            assert worst < TOL_UNITS, (sw, m, worst)
    whole = [("resid_pre", L, None, None) for L in (0, n_layer // 2, n_layer - 1)]
    r = run_specs(model, ids_corrupt, clean, whole, metric, cfg.head_dim, batch)
    for m in METRICS:
        assert np.abs(r[m] - 1).max() * span[m] < TOL_UNITS, (m, r[m])
    # alone (batch of one): the two largest recoveries of each sweep and its last component
    gap = 0.0
    for sw in SWEEPS:
        specs, _ = sweep_specs(sw, n_layer, cfg.num_attention_heads, len(ids_clean))
        flat = rec[sw]["logit_diff"].reshape(-1)
        for i in list(np.argsort(-np.abs(flat))[:2]) + [len(specs) - 1]:
            one = run_specs(model, ids_corrupt, clean, [specs[i]], metric, cfg.head_dim, 1)
            for m in METRICS:
                d = abs(float(one[m][0]) - float(rec[sw][m].reshape(-1)[i]))
                assert d * span[m] < TOL_UNITS, (sw, m, i, d)
                gap = max(gap, d)
    return gap


# ------------------------------------------------------------- DLA and lens

def final_norm(model):
    """(eps, effective weight g [E] float64) of the final RMS norm."""
    norm = model.model.norm
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    g = norm.weight.detach().double()
    if model.config.model_type.startswith("gemma"):                  # Gemma's RMSNorm scales by 1 + w
        g = 1.0 + g
    return eps, g


def softcap(model, logits):
    cap = getattr(model.config, "final_logit_softcapping", None)
    return logits if cap is None else torch.tanh(logits / cap) * cap


def attribute(model, acts, answer, wrong):
    """DLA of the clean run at the last position (see the module docstring)."""
    cfg = model.config
    n_layer, Hq, D = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim
    x32 = acts[("resid_post", n_layer - 1)][-1]                       # [E] float32
    x = x32.double()
    eps, g = final_norm(model)
    s = 1.0 / torch.sqrt((x * x).mean() + eps)
    W_U = model.lm_head.weight.detach().double()                      # [V, E]
    coef = s * g * (W_U[answer] - W_U[wrong])                         # [E]
    embed = float(acts[("resid_pre", 0)][-1].double() @ coef)
    attn = np.array([float(acts[("attn_out", L)][-1].double() @ coef) for L in range(n_layer)])
    mlp = np.array([float(acts[("mlp_out", L)][-1].double() @ coef) for L in range(n_layer)])
    linear = cfg.model_type in HEADS_LINEAR
    heads = np.full((n_layer, Hq), np.nan)
    if linear:
        for L in range(n_layer):
            o_proj = model.model.layers[L].self_attn.o_proj
            assert o_proj.bias is None
            W_O = o_proj.weight.detach().double()                      # [E, Hq*D]
            z = acts[("z", L)][-1].double()                            # [Hq*D]
            for h in range(Hq):
                c = W_O[:, h * D:(h + 1) * D] @ z[h * D:(h + 1) * D]   # [E]
                heads[L, h] = float(c @ coef)
        worst = np.abs(heads.sum(1) - attn).max() / np.abs(attn).max()
        assert worst < 1e-4, ("heads do not sum to attn", worst)
    total = embed + attn.sum() + mlp.sum()
    with torch.no_grad():                                              # the model's own, before any soft-cap
        pre = model.lm_head(model.model.norm(x32[None, None]))[0, 0].double()
    logit_diff = float(pre[answer] - pre[wrong])
    rel = abs(total - logit_diff) / max(abs(logit_diff), 1.0)
    assert rel < 1e-4, ("DLA total", total, logit_diff, rel)
    return dict(heads=heads, attn=attn, mlp=mlp, embed=embed, total=float(total), logit_diff=logit_diff,
                heads_linear=int(linear), final_softcap=int(getattr(cfg, "final_logit_softcapping", None)
                                                             is not None))


def lens(model, acts, logits_clean, answer):
    """top-1 ids [L, n], top-1 - top-2 probability [L, n], p(answer) [L, n]."""
    n_layer = model.config.num_hidden_layers
    top1, gap, p_ans = [], [], []
    for L in range(n_layer):
        with torch.no_grad():
            lg = softcap(model, model.lm_head(model.model.norm(acts[("resid_post", L)][None]))[0])   # [n, V]
        if L == n_layer - 1:
            d = (lg - logits_clean).abs().max().item()
            assert d < 1e-4, ("last layer's lens is not the model's output", d)
        p = torch.softmax(lg.double(), -1)
        t = torch.topk(p, 2, dim=-1)
        top1.append(t.indices[:, 0].numpy().astype(np.int32))
        gap.append((t.values[:, 0] - t.values[:, 1]).numpy())
        p_ans.append(p[:, answer].numpy())
    return np.stack(top1), np.stack(gap), np.stack(p_ans)


# ------------------------------------------------------------------ a case

def token_ids(tok, model, text, path, qkv):
    """transformers' ids (BOS as the GGUF says), checked against SmolLM2's own
    tokenizer and, with --qkv, against `qkv tokenize`."""
    ids = tok(text)["input_ids"]
    if model.config.model_type == "llama":
        assert native_tokenizer(tok).encode(text, add_special_tokens=True).ids == ids, text
    if qkv:
        res = subprocess.run([qkv, "tokenize", "-m", path, "-p", text, "--json"], check=True,
                             capture_output=True, text=True)
        theirs = json.loads(res.stdout)["ids"]
        assert theirs == ids, (text, ids, theirs)
    return ids


def one_token(tok, piece):
    ids = tok(piece, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (piece, ids)
    return ids[0]


def llamacpp_check(path, f32_path, ids_clean, ids_corrupt, logits_clean, logits_corrupt, metric):
    """llama.cpp on the GGUF dequantised to F32 (F32 KV cache): last-position
    logits and metric values against transformers'; a line to print."""
    from llama_cpp import Llama
    dequantised_f32_gguf(path, f32_path)
    try:
        lc = Llama(model_path=f32_path, verbose=False, n_ctx=64, n_threads=2, n_threads_batch=2,
                   logits_all=True, type_k=0, type_v=0)
        last = []
        for ids in (ids_clean, ids_corrupt):
            lc.reset()
            lc.eval(ids)
            last.append(torch.tensor(np.array(lc.scores[len(ids) - 1], dtype=np.float32)))
        del lc
    finally:
        os.remove(f32_path)
    d = max((last[0] - logits_clean[-1]).abs().max().item(), (last[1] - logits_corrupt[-1]).abs().max().item())
    theirs = Metric(last[0], last[1], metric.a, metric.w).values
    return (f"llama.cpp F32 vs transformers: last-position max |dlogit| {d:.2e}; KL corrupt "
            f"{theirs['kl']['corrupt']:.6f} vs {metric.values['kl']['corrupt']:.6f}; LD clean/corrupt "
            f"{theirs['logit_diff']['clean']:.5f}/{theirs['logit_diff']['corrupt']:.5f} vs "
            f"{metric.values['logit_diff']['clean']:.5f}/{metric.values['logit_diff']['corrupt']:.5f}")


def make_case(case, args):
    t0 = time.time()
    path = case["model"]
    tok, model = load_reference(path)
    cfg = model.config
    changes = fix_config(cfg.__class__.from_dict(cfg.to_dict()), llamacpp_view(path))
    assert not changes, f"transformers' config differs from llama.cpp's reading: {changes}"
    assert cfg.tie_word_embeddings
    n_layer, Hq = cfg.num_hidden_layers, cfg.num_attention_heads
    ids_clean = token_ids(tok, model, case["clean"], path, args.qkv)
    ids_corrupt = token_ids(tok, model, case["corrupt"], path, args.qkv)
    n = len(ids_clean)
    assert len(ids_corrupt) == n, (ids_clean, ids_corrupt)
    piece = lambda i: tok.decode([i])                                       # noqa: E731

    clean, logits_clean, logits_corrupt = runs(model, ids_clean, ids_corrupt)
    top_clean = torch.topk(logits_clean[-1], 2).indices.tolist()
    top_corrupt = int(logits_corrupt[-1].argmax())
    if case["answer"] is not None:
        answer, wrong, choice = one_token(tok, case["answer"]), one_token(tok, case["wrong"]), "given"
    elif top_corrupt != top_clean[0]:
        answer, wrong, choice = top_clean[0], top_corrupt, "clean top-1, corrupt top-1"
    else:
        answer, wrong, choice = top_clean[0], top_clean[1], "clean top-1, clean top-2 (corrupt top-1 the same)"
    for name, lg in (("clean", logits_clean), ("corrupt", logits_corrupt)):
        p = torch.softmax(lg[-1].double(), -1)
        t = torch.topk(p, 5)
        print(f"  {name}: " + ", ".join(f"{piece(i)!r} {v:.3f}" for v, i in zip(t.values.tolist(),
                                                                                 t.indices.tolist())) +
              f"; p(answer {piece(answer)!r}) {p[answer]:.4f}, p(wrong {piece(wrong)!r}) {p[wrong]:.4f}")

    metric = Metric(logits_clean[-1], logits_corrupt[-1], answer, wrong)
    rec = sweeps(model, ids_corrupt, clean, metric, args.batch)
    gap = check_patching(model, ids_clean, ids_corrupt, clean, metric, rec, args.batch)
    dla = attribute(model, clean, answer, wrong)
    top1, lgap, p_ans = lens(model, clean, logits_clean, answer)
    t32 = time.time() - t0

    # the same sweeps in float64: how far float32 rounding alone moves them
    model64 = copy.deepcopy(model).double()
    clean64, logits_clean64, logits_corrupt64 = runs(model64, ids_clean, ids_corrupt)
    metric64 = Metric(logits_clean64[-1], logits_corrupt64[-1], answer, wrong)
    rec64 = sweeps(model64, ids_corrupt, clean64, metric64, args.batch)
    del model64
    dev64 = {f"{m}_{sw}": float(np.abs(rec[sw][m] - rec64[sw][m]).max()) for sw in SWEEPS for m in METRICS}
    dev64_metric = {m: {k: abs(metric.values[m][k] - metric64.values[m][k]) for k in ("clean", "corrupt")}
                    for m in METRICS}
    lc_line = None
    if args.llamacpp_f32:
        lc_line = llamacpp_check(path, args.llamacpp_f32, ids_clean, ids_corrupt, logits_clean, logits_corrupt,
                                 metric)

    out = os.path.join(args.out, case["name"])
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    for sw in SWEEPS:
        for m in METRICS:
            save(out, f"{m}_{sw}.npy", rec[sw][m].astype(np.float64))
    save(out, "dla_heads.npy", dla["heads"])
    save(out, "dla_attn.npy", dla["attn"])
    save(out, "dla_mlp.npy", dla["mlp"])
    save(out, "lens_top1.npy", top1)
    save(out, "lens_gap.npy", lgap)
    save(out, "lens_prob_answer.npy", p_ans)
    meta = {
        "model": os.path.basename(path), "sha256": sha256(path),
        "clean_text": case["clean"], "corrupt_text": case["corrupt"],
        "clean_ids": ids_clean, "corrupt_ids": ids_corrupt, "n": n, "n_layer": n_layer, "n_head": Hq,
        "answer_id": answer, "wrong_id": wrong, "answer_piece": piece(answer), "wrong_piece": piece(wrong),
        "answer_choice": choice, "clean_top2_ids": top_clean, "corrupt_top1_id": top_corrupt,
        "metrics": metric.values,
        "dla": {k: dla[k] for k in ("embed", "total", "logit_diff", "heads_linear", "final_softcap")} |
               {"answer_id": answer, "wrong_id": wrong},
        "measured": {"float64_rerun_max_abs_recovery_diff": dev64, "float64_rerun_metric_diff": dev64_metric,
                     "batch_vs_single_max_abs_recovery_diff": gap},
        "versions": {p: version(p) for p in PINNED},
        "reference": "transformers GGUF loader, float32 weights dequantised by gguf, eager attention, "
                     "2 threads, forward hooks; naive patching (one full corrupted forward per component)",
        "script": SCRIPT,
    }
    with open(os.path.join(out, "meta.json"), "w", encoding="utf-8") as fh:
        fh.write(dumps(meta) + "\n")
    summary(case["name"], meta, rec, dla, top1, lgap, piece, n_layer)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"  float64 rerun: max |d recovery| {max(dev64.values()):.2e}; batch vs single {gap:.1e}")
    if lc_line:
        print("  " + lc_line)
    print(f"  {out}: {size} bytes; float32 part {t32:.0f} s, whole case {time.time() - t0:.0f} s")


def dumps(obj):
    """JSON, one key a line, lists of numbers on one line; UTF-8 text as is."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    return re.sub(r"\[\s+([-0-9.e,\s]+?)\s+\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text)


def summary(name, meta, rec, dla, top1, lgap, piece, n_layer):
    m = meta["metrics"]
    print(f"{name}: n {meta['n']}, answer {meta['answer_piece']!r} ({meta['answer_id']}), wrong "
          f"{meta['wrong_piece']!r} ({meta['wrong_id']}) [{meta['answer_choice']}]; KL corrupt "
          f"{m['kl']['corrupt']:.5f}; LD clean {m['logit_diff']['clean']:.5f} corrupt "
          f"{m['logit_diff']['corrupt']:.5f}")
    for sw in SWEEPS:
        for mt in METRICS:
            a = rec[sw][mt]
            top = np.argsort(-a.reshape(-1))[:5]
            cells = [np.unravel_index(i, a.shape) for i in top]
            print(f"  {mt:10s} {sw:9s} top: " + ", ".join(f"{tuple(int(c) for c in ix)} {a[ix]:+.4f}"
                                                         for ix in cells))
    print(f"  DLA total {dla['total']:.5f} (model {dla['logit_diff']:.5f}), embed {dla['embed']:+.4f}; attn top "
          + ", ".join(f"L{L} {dla['attn'][L]:+.3f}" for L in np.argsort(-np.abs(dla['attn']))[:5])
          + "; mlp top " + ", ".join(f"L{L} {dla['mlp'][L]:+.3f}" for L in np.argsort(-np.abs(dla['mlp']))[:5]))
    if dla["heads_linear"]:
        h = dla["heads"]
        top = [np.unravel_index(i, h.shape) for i in np.argsort(-np.abs(h).reshape(-1))[:8]]
        print("  DLA heads top: " + ", ".join(f"{int(L)}.{int(k)} {h[L, k]:+.3f}" for L, k in top))
    print("  lens top-1 at the last position per layer: " +
          " ".join(f"{L}:{piece(int(top1[L, -1]))!r}" for L in range(n_layer)))
    print(f"  lens entries with top-2 gap < 1e-3: {(lgap < 1e-3).sum()} of {lgap.size}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/patch")
    ap.add_argument("--only", default=None, help="comma list of case names")
    ap.add_argument("--batch", type=int, default=BATCH, help="patched copies per forward call")
    ap.add_argument("--qkv", default=None, help="a qkv binary: check `qkv tokenize` gives the same ids")
    ap.add_argument("--llamacpp-f32", metavar="PATH", default=None,
                    help="also run llama.cpp on each GGUF dequantised to F32 (written to PATH, then deleted)")
    args = ap.parse_args()
    check_versions()
    t0 = time.time()
    for case in CASES:
        if args.only and case["name"] not in args.only.split(","):
            continue
        make_case(case, args)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
