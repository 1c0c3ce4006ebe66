#!/usr/bin/env python3
"""Tiny random models of the qwen2, qwen3, gemma2, gemma3, smollm3 and olmo2
architectures and a Mistral, written to GGUF the way llama.cpp's convert_hf_to_gguf.py writes
them, and their reference logits, attention maps and greedy continuations from
Hugging Face transformers.

Pinned and checked (PINNED below, tools/oracle/requirements.txt): torch,
transformers, numpy, gguf, tokenizers, accelerate.

    /work/oracle-venv/bin/python tools/oracle/make_family_fixtures.py \
        [--out tests/fixtures/families] [--only qwen3,gemma2]

(--only rewrites those families' lines of OUT/manifest.txt and keeps the others'.)

Per family, everything seeded (FAMILIES below has the sizes):
  1. A transformers model (Qwen2ForCausalLM, Qwen3ForCausalLM,
     Gemma2ForCausalLM, Gemma3ForCausalLM, MistralForCausalLM,
     SmolLM3ForCausalLM, Olmo2ForCausalLM) built from a
     config small enough to commit, float32, eager attention, every parameter
     redrawn from torch.Generator(seed). Where the GGUF stores a matrix as F16
     the HF weight is rounded to F16 first, so the file holds exactly the
     weights the reference ran with. Gemma's RMSNorm multiplies by (1 + w) and
     the converter stores 1 + w: the GGUF value g is drawn in [0.5, 1.5] and
     HF's w = g - 1, exact in float32 (Sterbenz), so g - 1 + 1 == g.
  2. The GGUF, with gguf.GGUFWriter, keys and tensor names as llama.cpp's
     converter writes them for that HF class (tensor names through gguf-py's
     own TensorNameMap, as the converter's map_tensor_name): see write_gguf.
     Llama/Mistral and SmolLM3 (SmolLM3Model is a LlamaModel) q/k rows are
     permuted (LlamaModel.permute) for ggml's interleaved RoPE (llama.cpp's
     LLAMA_ROPE_TYPE_NORM for both); qwen2/qwen3/gemma2/gemma3/olmo2 are NEOX (rotate-half) in
     llama.cpp and are written unpermuted (Olmo2Model is a TextModel: its
     modify_tensors leaves q/k as they are); Gemma's norms get + 1; the tied
     Gemma lm_head is not written. A minimal tokenizer as the converter writes
     one (llama.cpp will not load a GGUF without tokenizer.ggml.model): a
     byte-level BPE ("gpt2", pre "qwen2") for Qwen, SmolLM3 and OLMo 2 (whose
     real ones are Llama 3's and dolma2's: the tokenizer is not what their
     fixtures test), SentencePiece ("llama",
     <0xXX> byte pieces, scores) for Gemma and Mistral.
  3. What llama.cpp makes of the file (llamacpp_view: key_length, the
     soft-caps, the sliding window and which layers use it, the query scale
     1/sqrt(key_length) -- Gemma's 27B rule aside --, the local RoPE base
     10000 that llama.cpp hard-codes for Gemma 3) is read back from the GGUF
     and put into the config of transformers' own GGUF loader
     (from_pretrained(dir, gguf_file=...)), which otherwise ignores those keys
     (fix_config). The reloaded model must have the same weights and the same
     logits as the in-memory one; without the fixes it either does not load
     (qwen3: head_dim 128) or its logits are far off (the table). That reader
     has no smollm3 and no olmo2: their files are read back with
     gguf.GGUFReader instead (smollm3's q/k rows un-permuted) into the
     family's config (SmolLM3Config's no_rope_layers is llama.cpp's rule)
     (read_back_gguf), with the same two checks.
  4. "Each feature matters": the same weights run with one feature removed
     (features below); the logits move by far more than the 1e-4 tolerance.
     Printed and written to manifest.txt.
  5. Fixtures, per family in OUT/<family>/:
       model.gguf          the model (< 300 KB)
       ids.npy   [n] int32 the prompt (seeded random ids; BOS first where the
                           GGUF's add_bos_token says so)
       logits.npy [n, V] f32  every position
       maps.npy  [L, Hq, n, n] f32  every layer's attention weights (eager
                           softmax output; 0 above the diagonal and outside
                           the window)
       gen.npy   [16] int32   greedy continuation of the prompt (argmax,
                              lowest id on ties) and gen_margin.npy [16] f32
                              its top-2 margins (each >= MIN_MARGIN, 0.03)
     and OUT/manifest.txt: versions, one `family` line per model, the config
     fixes and the feature table.

Metric (the one tests/test_model_families.c uses): per row (a position's [V]
logits; a (layer, head, query) row of a map) max |a - b| / max |b|, the worst
row reported.
"""
import argparse
import json
import math
import os
from importlib.metadata import version

import numpy as np
import torch
from torch import nn

import gguf
from transformers import (AutoConfig, AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM,
                          Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig, MistralForCausalLM,
                          Olmo2Config, Olmo2ForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)

PINNED = {"torch": "2.15.0", "transformers": "5.24.0", "numpy": "2.4.6", "gguf": "0.19.0",
          "tokenizers": "0.23.3", "accelerate": "1.15.0"}
GPL3 = "/usr/share/common-licenses/GPL-3"
N_PROMPT = 48
N_GEN = 16
MIN_MARGIN = 0.03   # the greedy top-2 margin test_model_families.c promises: far above any rounding
TOL = 1e-4


def check_versions():
    bad = [f"{p} {version(p).split('+')[0]} (pinned {w})" for p, w in PINNED.items()
           if version(p).split("+")[0] != w]
    if bad:
        raise SystemExit(f"{os.path.basename(__file__)}: " + ", ".join(bad) +
                         "; install tools/oracle/requirements.txt")


# ------------------------------------------------------------------ families

# name: arch (general.architecture), HF classes, sizes, dtype of the 2-D
# weights in the GGUF, the tokenizer kind and the family's own settings.
FAMILIES = {
    "qwen2": dict(arch="qwen2", cfg=Qwen2Config, cls=Qwen2ForCausalLM, seed=2, emb=0.1, vocab=272, hidden=64,
                  layers=2, heads=4, kv_heads=2, head_dim=None, ff=64, theta=1e6, eps=1e-6, tied=True,
                  wtype="F32", tok="bpe"),
    "qwen3": dict(arch="qwen3", cfg=Qwen3Config, cls=Qwen3ForCausalLM, seed=4, emb=0.2, vocab=272, hidden=64,
                  layers=2, heads=4, kv_heads=2, head_dim=32, ff=64, theta=1e6, eps=1e-6, tied=False,
                  wtype="F16", tok="bpe"),
    "gemma2": dict(arch="gemma2", cfg=Gemma2Config, cls=Gemma2ForCausalLM, seed=25, emb=0.3, vocab=288, hidden=64,
                   layers=2, heads=4, kv_heads=2, head_dim=16, ff=64, theta=10000.0, eps=1e-6, tied=True,
                   wtype="F32", tok="gemma", window=8, attn_softcap=5.0, final_softcap=4.0,
                   norm_ranges={"post_": (2.0, 4.0)}),
    "gemma3": dict(arch="gemma3", cfg=Gemma3TextConfig, cls=Gemma3ForCausalLM, seed=34, emb=0.3, vocab=288, hidden=32,
                   layers=6, heads=4, kv_heads=1, head_dim=16, ff=48, theta=1e6, local_theta=10000.0,
                   eps=1e-6, tied=True, wtype="F32", tok="gemma", window=12, norm_ranges={"post_": (2.0, 4.0)}),
    "mistral": dict(arch="llama", cfg=MistralConfig, cls=MistralForCausalLM, seed=8, emb=1.0, vocab=320, hidden=64,
                    layers=2, heads=4, kv_heads=1, head_dim=16, ff=64, theta=1e6, eps=1e-5, tied=False,
                    wtype="F16", tok="mistral"),
    # 8 layers: NoPE on 3 and 7 (llama.cpp's n_no_rope_layer_step 4)
    "smollm3": dict(arch="smollm3", cfg=SmolLM3Config, cls=SmolLM3ForCausalLM, seed=3, emb=1.0, vocab=272,
                    hidden=32, layers=8, heads=2, kv_heads=1, head_dim=None, ff=48, theta=2e6, eps=1e-6,
                    tied=True, wtype="F16", tok="bpe", no_rope_step=4),
    # no pre-norms, post-norms after each sublayer, QK-norm over the whole
    # projection (q: Hq*D = 64, k: Hkv*D = 32), untied as OLMo 2's
    "olmo2": dict(arch="olmo2", cfg=Olmo2Config, cls=Olmo2ForCausalLM, seed=5, emb=1.0, vocab=272, hidden=64,
                  layers=2, heads=4, kv_heads=2, head_dim=None, ff=64, theta=5e5, eps=1e-6, tied=False,
                  wtype="F16", tok="bpe"),
    # Phi-3: fused qkv_proj / gate_up_proj, partial rotary 0.5 (16 of 32 dims),
    # LongRoPE of context 512. phi3: original context 128, so the test's
    # n_ctx 128 and the 64 positions of prompt + greedy take the short
    # factors; phi3_long: original 8 < the 48-token prompt, so transformers
    # and llama.cpp's rule (n_ctx > 8) both take the long factors, on every
    # context the tests open (the fewest: qkv stream's evicting cache of
    # window 6 - 1 + chunk 4 = 9 rows in test_families_cli.c; at original 32
    # it took the short factors where --via-mask's 96 rows took the long).
    # Seeds: greedy top-2 margins >= MIN_MARGIN.
    "phi3": dict(arch="phi3", cfg=Phi3Config, cls=Phi3ForCausalLM, seed=8, emb=1.0, vocab=320, hidden=64,
                 layers=2, heads=2, kv_heads=1, head_dim=None, ff=64, theta=10000.0, eps=1e-5, tied=False,
                 wtype="F32", tok="mistral", rot=0.5, ctx=512, orig=128),
    "phi3_long": dict(arch="phi3", cfg=Phi3Config, cls=Phi3ForCausalLM, seed=12, emb=1.0, vocab=320, hidden=64,
                      layers=2, heads=2, kv_heads=1, head_dim=None, ff=64, theta=10000.0, eps=1e-5, tied=False,
                      wtype="F32", tok="mistral", rot=0.5, ctx=512, orig=8),
}
READ_BACK = ("smollm3", "olmo2")     # archs transformers' GGUF reader lacks
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]     # ids 0 1 2 3, as Gemma's
MISTRAL_SPECIALS = ["<unk>", "<s>", "</s>"]              # ids 0 1 2, as Llama-2 / Mistral's
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def hf_config(name, **over):
    """The family's transformers config (float32, eager attention)."""
    f = FAMILIES[name]
    kw = dict(vocab_size=f["vocab"], hidden_size=f["hidden"], intermediate_size=f["ff"],
              num_hidden_layers=f["layers"], num_attention_heads=f["heads"],
              num_key_value_heads=f["kv_heads"], max_position_embeddings=4096, rms_norm_eps=f["eps"],
              tie_word_embeddings=f["tied"])
    if f["head_dim"]:
        kw["head_dim"] = f["head_dim"]
    if name in ("qwen2", "qwen3", "smollm3", "olmo2"):
        eot = f["vocab"] - len(QWEN_SPECIALS)           # <|endoftext|>
        kw.update(rope_parameters={"rope_type": "default", "rope_theta": f["theta"]}, bos_token_id=eot,
                  eos_token_id=eot, pad_token_id=None)
    elif name == "mistral":
        kw.update(rope_parameters={"rope_type": "default", "rope_theta": f["theta"]}, sliding_window=None,
                  bos_token_id=1, eos_token_id=2, pad_token_id=None)
    elif name == "gemma2":
        kw.update(rope_parameters={"rope_type": "default", "rope_theta": f["theta"]},
                  query_pre_attn_scalar=f["head_dim"], sliding_window=f["window"],
                  attn_logit_softcapping=f["attn_softcap"], final_logit_softcapping=f["final_softcap"],
                  hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0)
    elif name == "gemma3":
        kw.update(rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": f["local_theta"]},
                                   "full_attention": {"rope_type": "default", "rope_theta": f["theta"]}},
                  query_pre_attn_scalar=f["head_dim"], sliding_window=f["window"],
                  final_logit_softcapping=None, attn_logit_softcapping=None,
                  hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0)
    elif f["arch"] == "phi3":
        kw.update(max_position_embeddings=f["ctx"], rope_parameters=longrope(name), sliding_window=None,
                  bos_token_id=1, eos_token_id=2, pad_token_id=None)
    if name == "olmo2":
        kw.update(attention_bias=False)
    if name == "smollm3":
        kw.update(no_rope_layers=no_rope_layers(f["layers"], f["no_rope_step"]), use_sliding_window=False,
                  attention_bias=False, mlp_bias=False)
    kw.update(over)
    if f["arch"] == "phi3":   # Phi3Config's own original_max_position_embeddings (default 4096) wins otherwise
        kw["original_max_position_embeddings"] = kw["rope_parameters"].get("original_max_position_embeddings",
                                                                           f["orig"])
    cfg = f["cfg"](**kw)
    cfg._attn_implementation = "eager"
    return cfg


def longrope(name, rot=None, short=None, long=None, attention_factor=None, rope_type="longrope"):
    """Phi-3's rope_parameters: partial rotary rot, LongRoPE's seeded factors
    (short in [1, 2], long in [1, 8]: [n_rot/2] each) of original context orig."""
    f = FAMILIES[name]
    n_rot = int(f["hidden"] // f["heads"] * f["rot"])
    r = np.random.default_rng(2000 + f["seed"])
    p = {"rope_type": rope_type, "rope_theta": f["theta"], "partial_rotary_factor": rot or f["rot"]}
    if rope_type == "longrope":
        p.update(short_factor=short or (1 + r.random(n_rot // 2)).round(3).tolist(),
                 long_factor=long or (1 + 7 * r.random(n_rot // 2)).round(3).tolist(),
                 original_max_position_embeddings=f["orig"])
        if attention_factor is not None:
            p["attention_factor"] = attention_factor
    return p


def no_rope_layers(L, step):
    """transformers' no_rope_layers (1: the layer uses RoPE) from llama.cpp's
    rule for SmolLM3: layer il rotates iff (il + 1) % n_no_rope_layer_step != 0,
    which is also SmolLM3Config's default for no_rope_layer_interval = step."""
    rule = [int((il + 1) % step != 0) for il in range(L)]
    assert rule == SmolLM3Config(num_hidden_layers=L, no_rope_layer_interval=step).no_rope_layers
    return rule


def build(name, cfg, sd):
    """A model of the family's class from cfg with the state dict sd."""
    m = FAMILIES[name]["cls"](cfg).float().eval()
    m.load_state_dict(sd)
    return m


def draw_weights(name):
    """The family's state dict, redrawn from its seed: matrices N(0, gain^2 /
    fan_in), embeddings N(0, 1), biases N(0, 0.5^2), RMSNorm weights in
    [0.5, 1.5] (Gemma: the stored 1 + w, HF's w = g - 1). Matrices the GGUF
    stores as F16 are rounded to F16."""
    f = FAMILIES[name]
    torch.manual_seed(f["seed"])
    model = f["cls"](hf_config(name)).float().eval()
    g = torch.Generator().manual_seed(f["seed"])
    sd = {}
    gemma = name.startswith("gemma")
    for key in sorted(model.state_dict()):
        p = model.state_dict()[key]
        if key == "lm_head.weight" and f["tied"]:
            continue
        if key.endswith("norm.weight"):
            lo, hi = 0.5, 1.5
            for part, rng in f.get("norm_ranges", {}).items():
                if part in key:
                    lo, hi = rng
            new = lo + (hi - lo) * torch.rand(p.shape, generator=g)
            if gemma:
                new = new - 1.0                       # exact: new in [0.5, 1.5]
        elif key.endswith(".bias"):
            new = 0.5 * torch.randn(p.shape, generator=g)
        else:
            gain = 1.0
            if "embed_tokens" in key:
                gain = f.get("emb", 1.0) * math.sqrt(p.shape[1])
            elif "q_proj" in key or "k_proj" in key or "qkv_proj" in key:
                gain = 2.5 if name == "gemma2" else 1.5
            elif "lm_head" in key:
                gain = 3.0
            new = torch.randn(p.shape, generator=g) * (gain / math.sqrt(p.shape[1]))
            if f["wtype"] == "F16":
                new = new.half().float()
        sd[key] = new.float().contiguous()
    if f["tied"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


# ----------------------------------------------------------------- tokenizers


def gpl3_text():
    with open(GPL3, encoding="utf-8") as fh:
        return fh.read()


def bpe_tokens(vocab):
    """Byte-level BPE ("gpt2"): the 256 byte symbols, merges learned on the
    GPL-3 with Qwen2's split regex, the Qwen specials last."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    n_learned = vocab - len(QWEN_SPECIALS)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS["qwen2"]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=n_learned, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([gpl3_text()], trainer)
    j = json.loads(tok.to_str())
    tokens = [t for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    assert len(tokens) == n_learned, (len(tokens), n_learned)
    types = [gguf.TokenType.NORMAL] * len(tokens) + [gguf.TokenType.CONTROL] * len(QWEN_SPECIALS)
    return tokens + QWEN_SPECIALS, types, merges


def spm_tokens(vocab, specials):
    """SentencePiece ("llama"): the specials, the 256 <0xXX> byte pieces, then
    the most frequent characters of the GPL-3 (a space spelled U+2581) with
    score -rank; everything else falls back to bytes."""
    counts = {}
    for ch in gpl3_text():
        ch = "\u2581" if ch == " " else ch
        if ch.isprintable():
            counts[ch] = counts.get(ch, 0) + 1
    n = vocab - len(specials) - 256
    chars = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:n]
    assert len(chars) == n
    types = [gguf.TokenType.CONTROL] * len(specials) + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * n
    if "<unk>" in specials:
        types[specials.index("<unk>")] = gguf.TokenType.UNKNOWN
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + chars
    scores = [0.0] * (len(specials) + 256) + [-float(i) for i in range(n)]
    return tokens, types, scores


def prompt_ids(name):
    """N_PROMPT seeded ids from the normal tokens, BOS first where add_bos."""
    f = FAMILIES[name]
    r = np.random.default_rng(1000 + f["seed"])
    if f["tok"] == "bpe":
        return r.integers(0, f["vocab"] - len(QWEN_SPECIALS), N_PROMPT).tolist()
    specials = GEMMA_SPECIALS if f["tok"] == "gemma" else MISTRAL_SPECIALS
    bos = specials.index("<bos>" if f["tok"] == "gemma" else "<s>")
    return [bos] + r.integers(len(specials), f["vocab"], N_PROMPT - 1).tolist()


# ----------------------------------------------------------------------- GGUF


def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: per head, rotate-half rows
    (i, i + D/2) -> interleaved rows (2i, 2i + 1); w: [n_head * D, ...]."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head):
    """The inverse of permute: interleaved rows -> rotate-half rows."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def write_gguf(name, sd, path):
    """The GGUF llama.cpp's converter writes for this HF model (its keys, in
    the converter's order where it matters only for reading): TextModel's
    common keys (context_length, embedding_length, feed_forward_length,
    head_count, head_count_kv, rope.freq_base, layer_norm_rms_epsilon,
    key_length / value_length where config.json has head_dim), plus:
      qwen2   nothing more (QKV biases are tensors; NEOX RoPE, unpermuted q/k)
      qwen3   key_length = value_length = head_dim; attn_q_norm / attn_k_norm
      gemma2  Gemma2Model's own keys and no rope.freq_base (llama.cpp's default
              10000): key/value_length, attn_logit_softcapping,
              final_logit_softcapping, attention.sliding_window; norms + 1
      gemma3  rope.freq_base = the full-attention theta (the local 10000 is
              llama.cpp's constant, no key), attention.sliding_window, no
              soft-cap key (final_logit_softcapping is None); norms + 1,
              attn_q_norm / attn_k_norm
      mistral arch llama (LlamaModel): vocab_size, rope.dimension_count;
              attn_q / attn_k permuted; no sliding-window key (llama.cpp's
              llama arch has none)
      smollm3 as mistral (SmolLM3Model subclasses LlamaModel), arch smollm3;
              no key for the NoPE layers (llama.cpp's n_no_rope_layer_step
              is a constant 4)
      olmo2   TextModel's keys only (no head_dim in Olmo2Config: no
              key_length; no sliding_window: OLMo 2's config has none);
              attn_q_norm [Hq*D], attn_k_norm [Hkv*D], post_attention_norm,
              post_ffw_norm and no attn_norm / ffn_norm (gguf-py's OLMO2
              tensor list); q/k unpermuted, NEOX RoPE
    """
    f = FAMILIES[name]
    arch = f["arch"]
    E, H, Hkv = f["hidden"], f["heads"], f["kv_heads"]
    D = f["head_dim"] or E // H
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name(f"qkv-tiny-{name}")
    w.add_context_length(f.get("ctx", 4096))
    w.add_embedding_length(E)
    w.add_block_count(f["layers"])
    w.add_feed_forward_length(f["ff"])
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(f["eps"])
    if name != "gemma2":
        w.add_rope_freq_base(f["theta"])
    if f["head_dim"]:
        w.add_key_length(D)
        w.add_value_length(D)
    if name == "gemma2":
        w.add_attn_logit_softcapping(f["attn_softcap"])
        w.add_final_logit_softcapping(f["final_softcap"])
    if name.startswith("gemma"):
        w.add_sliding_window(f["window"])
    if name in ("mistral", "smollm3"):
        w.add_vocab_size(f["vocab"])
        w.add_rope_dimension_count(D)
    if arch == "phi3":
        # Phi3MiniModel.set_gguf_parameters: rope_dims = int(rot_pct * n_embd) // n_head,
        # original context; generate_extra_tensors: attn_factor sqrt(1 + ln s / ln orig)
        # (s = ctx / orig), rope_factors_long / _short; no sliding window here
        # (config's None: transformers attends every key, as llama.cpp does for phi3)
        w.add_rope_dimension_count(int(f["rot"] * E) // H)
        w.add_rope_scaling_orig_ctx_len(f["orig"])
        s_ = f["ctx"] / f["orig"]
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(s_) / math.log(f["orig"])) if s_ > 1 else 1.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if f["wtype"] == "F32" else gguf.LlamaFileType.MOSTLY_F16)

    if f["tok"] == "bpe":
        tokens, types, merges = bpe_tokens(f["vocab"])
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(tokens.index("<|endoftext|>"))
        w.add_pad_token_id(tokens.index("<|endoftext|>"))
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
    else:
        specials = GEMMA_SPECIALS if f["tok"] == "gemma" else MISTRAL_SPECIALS
        tokens, types, scores = spm_tokens(f["vocab"], specials)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        if f["tok"] == "gemma":
            w.add_bos_token_id(2)
            w.add_eos_token_id(1)
            w.add_unk_token_id(3)
            w.add_pad_token_id(0)
            w.add_add_bos_token(True)
            w.add_add_eos_token(False)
            w.add_add_space_prefix(False)
        else:
            w.add_bos_token_id(1)
            w.add_eos_token_id(2)
            w.add_unk_token_id(0)
            w.add_add_bos_token(True)
            w.add_add_eos_token(False)
    assert len(tokens) == f["vocab"]

    for key, gname, a in gguf_tensors(name, sd):
        w.add_tensor(gname, a)
    if arch == "phi3":
        rp = longrope(name)
        w.add_tensor("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_tensors(name, sd):
    """(HF key, GGUF tensor name, array as the converter stores it) for every
    tensor of the family's GGUF."""
    f = FAMILIES[name]
    H, Hkv = f["heads"], f["kv_heads"]
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[f["arch"].upper() if name != "mistral" else "LLAMA"],
                                    f["layers"])
    out = []
    for key in sorted(sd):
        if key == "lm_head.weight" and f["tied"]:
            continue                                   # tied: no output.weight
        base, suffix = key.rsplit(".", 1)
        gname = tmap.get_name(base)
        assert gname is not None, key
        a = sd[key].numpy()
        if name in ("mistral", "smollm3") and (".q_proj." in key or ".k_proj." in key):
            a = permute(a, H if ".q_proj." in key else Hkv)
        if name.startswith("gemma") and key.endswith("norm.weight"):
            a = a + np.float32(1.0)                    # Gemma's RMSNorm (1 + w)
            assert np.array_equal(a - np.float32(1.0), sd[key].numpy())
        if a.ndim == 2 and f["wtype"] == "F16":
            assert np.array_equal(a.astype(np.float16).astype(np.float32), a)   # drawn as F16 values
            a = a.astype(np.float16)
        else:
            a = a.astype(np.float32)
        out.append((key, f"{gname}.{suffix}", np.ascontiguousarray(a)))
    return out


def read_back_gguf(name, path, sd):
    """For an architecture transformers' GGUF reader lacks (smollm3, olmo2):
    the file's tensors read with gguf.GGUFReader, named back to the HF keys
    (smollm3's q/k un-permuted), into the family's class with a config from
    what llama.cpp reads (llamacpp_view: the RoPE base, smollm3's NoPE
    layers); sd only names the tensors (its keys). Returns (model, fixes)."""
    f = FAMILIES[name]
    v = llamacpp_view(path)
    r = gguf.GGUFReader(path)
    names = {gname: key for key, gname, _ in gguf_tensors(name, sd)}
    sd = {}
    for t in r.tensors:
        if t.name.startswith("rope_factors_"):
            continue                                   # config, not weights: checked below
        key = names[t.name]
        a = torch.from_numpy(np.array(t.data).astype(np.float32))
        if name == "smollm3" and (".q_proj." in key or ".k_proj." in key):
            a = unpermute(a, v["n_head"] if ".q_proj." in key else f["kv_heads"])
        sd[key] = a.reshape(tuple(reversed([int(x) for x in t.shape])))
    assert set(sd) == set(names.values())
    if f["tied"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    if f["arch"] == "phi3":
        # LongRoPE from what llama.cpp reads: both tables, the original context,
        # the attention factor, the rotary dims
        tabs = {t.name: np.array(t.data).astype(np.float32).tolist() for t in r.tensors
                if t.name.startswith("rope_factors_")}
        n_rot = field(r, "phi3.rope.dimension_count")
        rp = longrope(name, rot=n_rot / v["head_dim"], short=tabs["rope_factors_short.weight"],
                      long=tabs["rope_factors_long.weight"],
                      attention_factor=field(r, "phi3.rope.scaling.attn_factor"))
        rp["original_max_position_embeddings"] = field(r, "phi3.rope.scaling.original_context_length")
        cfg = hf_config(name, rope_parameters=rp, max_position_embeddings=field(r, "phi3.context_length"))
        return build(name, cfg, sd), ["LongRoPE tables, original context, attn_factor and rotary dims from the "
                                      "file's keys"]
    over = dict(rope_parameters={"rope_type": "default", "rope_theta": v["freq_base"]})
    fixes = [f"rope_theta: {v['freq_base']:g} (rope.freq_base)"]
    if name == "smollm3":
        over["no_rope_layers"] = v["no_rope_layers"]
        fixes = [f"no_rope_layers: {','.join(map(str, v['no_rope_layers']))} (llama.cpp's rule)"]
    return build(name, hf_config(name, **over), sd), fixes


# ------------------------------------------------- what llama.cpp reads back


def field(reader, key, default=None):
    fl = reader.fields.get(key)
    return default if fl is None else fl.contents()


def llamacpp_view(path):
    """The attention hyper-parameters llama.cpp (src/llama-model.cpp
    load_hparams, src/llama-hparams.cpp) derives from the file, for the
    architectures here. Keys absent take llama.cpp's defaults."""
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    L = field(r, f"{arch}.block_count")
    E = field(r, f"{arch}.embedding_length")
    H = field(r, f"{arch}.attention.head_count")
    v = dict(arch=arch, n_layer=L, n_embd=E, n_head=H,
             head_dim=field(r, f"{arch}.attention.key_length", E // H),
             freq_base=field(r, f"{arch}.rope.freq_base", 10000.0),
             window=0, swa_layers=[False] * L, attn_softcap=None, final_softcap=None,
             no_rope_layers=[1] * L)
    v["freq_base_swa"] = v["freq_base"]
    v["query_scale_dim"] = v["head_dim"]           # f_attention_scale = 1/sqrt(n_embd_head_k)
    if arch == "gemma2":
        v["window"] = field(r, f"{arch}.attention.sliding_window", 4096)
        v["swa_layers"] = [il % 2 < 1 for il in range(L)]          # set_swa_pattern(2)
        v["attn_softcap"] = field(r, f"{arch}.attn_logit_softcapping", 50.0)
        v["final_softcap"] = field(r, f"{arch}.final_logit_softcapping", 30.0)
        if L == 46:                                                # 27B: 1/sqrt(n_embd / n_head)
            v["query_scale_dim"] = E // H
    elif arch == "gemma3":
        v["window"] = field(r, f"{arch}.attention.sliding_window", 0)
        if v["window"] > 0:
            v["swa_layers"] = [il % 6 < 5 for il in range(L)]      # set_swa_pattern(6)
            # rope_freq_base_train_swa: a constant 10000 in llama.cpp's GEMMA3
            # case; a file that sets rope.freq_base_swa is taken at its word
            v["freq_base_swa"] = field(r, f"{arch}.rope.freq_base_swa", 10000.0)
        v["final_softcap"] = field(r, f"{arch}.final_logit_softcapping", None) or None
        if L == 62:
            v["query_scale_dim"] = E // H
    elif arch == "smollm3":
        v["no_rope_layers"] = [int((il + 1) % 4 != 0) for il in range(L)]   # n_no_rope_layer_step = 4
    return v


def fix_config(cfg, v):
    """transformers' GGUF config with what llama.cpp reads from the file put
    back: the keys its loader ignores (see the module docstring). Returns the
    list of fields changed, as 'field: before -> after'."""
    changes = []

    def put(attr, value):
        before = getattr(cfg, attr, None)
        if before != value:
            setattr(cfg, attr, value)
            changes.append(f"{attr}: {before} -> {value}")

    if (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads) != v["head_dim"]:
        put("head_dim", v["head_dim"])
    if v["arch"] in ("gemma2", "gemma3"):
        put("query_pre_attn_scalar", v["query_scale_dim"])
        put("sliding_window", v["window"])
        put("layer_types", ["sliding_attention" if s else "full_attention" for s in v["swa_layers"]])
        put("attn_logit_softcapping", v["attn_softcap"])
        put("final_logit_softcapping", v["final_softcap"])
    if v["arch"] == "gemma3":
        rp = {"sliding_attention": {"rope_type": "default", "rope_theta": v["freq_base_swa"]},
              "full_attention": {"rope_type": "default", "rope_theta": v["freq_base"]}}
        put("rope_parameters", rp)
    cfg._attn_implementation = "eager"
    return changes


def load_gguf_model(path, fixes=True):
    """transformers' own GGUF loader, float32, eager; with the config fixes
    unless fixes is False. Returns (model or None, changes, error)."""
    d, f = os.path.split(os.path.abspath(path))
    try:
        cfg = AutoConfig.from_pretrained(d, gguf_file=f)
    except ValueError as e:                  # an architecture the reader lacks (smollm3)
        return None, [], str(e).splitlines()[0][:160]
    changes = fix_config(cfg, llamacpp_view(path)) if fixes else []
    try:
        m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, config=cfg, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    except Exception as e:  # noqa: BLE001 -- reported, not hidden
        msg = str(e).splitlines()[0][:160]
        if "ignore_mismatched_sizes" in msg:
            msg = f"the weights do not fit a model of head_dim {cfg.head_dim} (size mismatch)"
        return None, changes, msg
    return m, changes, None


# ------------------------------------------------------------- measurements


def run(model, ids, inputs_embeds_scale=None):
    """Logits [n, V] and attention maps [L, Hq, n, n] of one forward call."""
    x = torch.tensor([ids])
    with torch.no_grad():
        if inputs_embeds_scale is not None:
            emb = model.get_input_embeddings()(x) * inputs_embeds_scale
            out = model(inputs_embeds=emb, output_attentions=True)
        else:
            out = model(x, output_attentions=True)
    maps = torch.stack([a[0] for a in out.attentions]).float()
    return out.logits[0].float(), maps


def row_rel(a, b):
    """max over rows of max |a - b| / max |b| (rows: the last dimension)."""
    a = a.double().reshape(-1, a.shape[-1])
    b = b.double().reshape(-1, b.shape[-1])
    return ((a - b).abs().amax(-1) / b.abs().amax(-1).clamp_min(1e-30)).max().item()


def greedy(model, ids):
    """N_GEN greedy tokens: full forward of the growing sequence each step
    (argmax, lowest id on ties); the top-2 margins."""
    seq, margins = list(ids), []
    for _ in range(N_GEN):
        with torch.no_grad():
            lg = model(torch.tensor([seq])).logits[0, -1].float()
        top = torch.topk(lg, 2)
        margins.append((top.values[0] - top.values[1]).item())
        seq.append(int(torch.nonzero(lg == lg.max())[0, 0]))
    return seq[len(ids):], margins


def features(name, sd):
    """(feature, what removing it means, config overrides, state dict edit,
    module edit, input-embedding scale) for the family."""
    f = FAMILIES[name]
    H, Hkv = f["heads"], f["kv_heads"]
    D = f["head_dim"] or f["hidden"] // H
    out = []

    def sd_edit(fn):
        new = {k: v.clone() for k, v in sd.items()}
        fn(new)
        if f["tied"]:
            new["lm_head.weight"] = new["model.embed_tokens.weight"]
        return new

    def rows_interleaved(new):
        """What interleaved (Llama) RoPE on the GGUF's unpermuted rows computes:
        rotate-half on the rows unpermuted."""
        for k in list(new):
            for proj, nh in ((".q_proj.", H), (".k_proj.", Hkv)):
                if proj in k:
                    new[k] = unpermute(new[k], nh)
            for nrm in (".q_norm.", ".k_norm."):
                if nrm in k:        # per head ([D]) or over the whole projection ([H*D])
                    new[k] = unpermute(new[k].reshape(-1), new[k].numel() // D)

    if name in ("qwen2", "qwen3", "gemma2", "gemma3", "olmo2"):
        out.append(("rope_neox", "interleaved (Llama) RoPE pairs on the GGUF's unpermuted q/k rows",
                    {}, sd_edit(rows_interleaved), None, None))
    if name == "qwen2":
        def no_bias(new):
            for k in new:
                if k.endswith(".bias"):
                    new[k] = torch.zeros_like(new[k])
        out.append(("qkv_bias", "attn_q/k/v.bias left out", {}, sd_edit(no_bias), None, None))
    if name in ("qwen3", "gemma3"):
        out.append(("qk_norm", "attn_q_norm / attn_k_norm left out (no RMSNorm of q, k per head)",
                    {}, sd, "qk_norm", None))
    if name.startswith("gemma"):
        out.append(("sliding_window", f"window {f['window']} dropped (every layer causal over all keys)",
                    {"sliding_window": 4096}, sd, None, None))
        out.append(("query_scale", "query scale 1/sqrt(256) (transformers' query_pre_attn_scalar "
                    f"default) instead of 1/sqrt(key_length {f['head_dim']})",
                    {"query_pre_attn_scalar": 256}, sd, None, None))
        out.append(("norm_plus_one", "1 added again to the GGUF's norm weights (they already hold 1 + w)",
                    {}, sd_edit(lambda new: [new.__setitem__(k, new[k] + 1.0) for k in new
                                             if k.endswith("norm.weight")]), None, None))
        out.append(("embed_scale", f"token embeddings not scaled by sqrt({f['hidden']})",
                    {}, sd, None, 1.0 / math.sqrt(f["hidden"])))
        out.append(("post_norms", "post_attention_norm / post_ffw_norm left out", {}, sd, "post_norms", None))
        out.append(("gelu_erf", "exact (erf) GELU instead of the tanh approximation (informative)",
                    {"hidden_activation": "gelu"}, sd, None, None))
    if name == "gemma2":
        out.append(("attn_softcap", f"attention soft-cap {f['attn_softcap']} dropped",
                    {"attn_logit_softcapping": None}, sd, None, None))
        out.append(("final_softcap", f"final logit soft-cap {f['final_softcap']} dropped",
                    {"final_logit_softcapping": None}, sd, None, None))
        out.append(("softcaps_50_30", "soft-caps 50 / 30 (transformers' GGUF defaults) instead of "
                    f"{f['attn_softcap']} / {f['final_softcap']}",
                    {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}, sd, None, None))
    if name == "gemma3":
        out.append(("local_rope_base", f"sliding layers at the global RoPE base {f['theta']:g} instead of "
                    f"{f['local_theta']:g}",
                    {"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": f["theta"]},
                                         "full_attention": {"rope_type": "default", "rope_theta": f["theta"]}}},
                    sd, None, None))
        out.append(("swa_pattern", "every layer sliding (no global layer 5)",
                    {"layer_types": ["sliding_attention"] * f["layers"]}, sd, None, None))
    if name == "smollm3":
        L = f["layers"]
        out.append(("nope", "RoPE on every layer (the NoPE layers " +
                    ",".join(str(i) for i in range(L) if (i + 1) % f["no_rope_step"] == 0) + " rotated too)",
                    {"no_rope_layers": [1] * L}, sd, None, None))
        out.append(("nope_offset", "NoPE on layers il % 4 == 0 instead of (il + 1) % 4 == 0",
                    {"no_rope_layers": [int(i % f["no_rope_step"] != 0) for i in range(L)]}, sd, None, None))
    if name == "olmo2":
        out.append(("qk_norm_whole", "QK-norm per head (qwen3's) with the same weights, not over the whole "
                    f"projection ({H}x{D} for q, {Hkv}x{D} for k)", {}, sd, "qk_norm_per_head", None))
        out.append(("qk_norm", "attn_q_norm / attn_k_norm left out", {}, sd, "qk_norm", None))
        out.append(("no_pre_norms", "an RMSNorm (unit weight) added before attention and before the MLP, as "
                    "llama's attn_norm / ffn_norm", {}, sd, "pre_norms", None))
        out.append(("post_norms", "post_attention_norm / post_ffw_norm left out", {}, sd, "post_norms", None))
    if f["arch"] == "phi3":
        rp = longrope(name)
        n_rot = len(rp["short_factor"]) * 2
        D = f["hidden"] // H
        pad = [1.0] * ((D - n_rot) // 2)
        out.append(("partial_rotary", f"RoPE on all {D} dims of each head (not the first {n_rot}; factors 1 "
                    "beyond them)", {"rope_parameters": longrope(name, rot=1.0, short=rp["short_factor"] + pad,
                                                                 long=rp["long_factor"] + pad)}, sd, None, None))
        out.append(("longrope", "plain RoPE (no LongRoPE factors, attention factor 1)",
                    {"rope_parameters": longrope(name, rope_type="default")}, sd, None, None))
        out.append(("attn_factor", "LongRoPE's attention factor 1 instead of sqrt(1 + ln(ctx/orig) / ln(orig))",
                    {"rope_parameters": longrope(name, attention_factor=1.0)}, sd, None, None))
        if name == "phi3":
            out.append(("long_factors", "the long factors instead of the short (n_ctx <= original context)",
                        {"rope_parameters": longrope(name, short=rp["long_factor"])}, sd, None, None))
        else:
            out.append(("short_factors", "the short factors instead of the long (n_ctx > original context)",
                        {"rope_parameters": longrope(name, long=rp["short_factor"])}, sd, None, None))
    if name in ("mistral", "smollm3"):
        def gguf_rows(new):
            for k in list(new):
                if ".q_proj." in k:
                    new[k] = permute(new[k], H)
                if ".k_proj." in k:
                    new[k] = permute(new[k], Hkv)
        out.append(("qk_permute", "rotate-half RoPE on the GGUF's permuted attn_q / attn_k rows "
                    "(not un-permuted, or interleaved pairing not used)", {}, sd_edit(gguf_rows), None, None))
    return out


class PerHeadNorm(nn.Module):
    """An RMSNorm over the whole projection [.., H*D] run per head instead:
    each [D] slice normed alone, times the same [H*D] weight."""

    def __init__(self, norm, D):
        super().__init__()
        self.norm, self.D = norm, D

    def forward(self, x):
        h = x.reshape(*x.shape[:-1], -1, self.D)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.norm.variance_epsilon)
        return self.norm.weight * h.reshape(x.shape)


class PreNorm(nn.Module):
    """A sublayer run on rmsnorm(x) (unit weight) instead of x."""

    def __init__(self, inner, eps):
        super().__init__()
        self.inner, self.eps = inner, eps

    def forward(self, hidden_states, *args, **kwargs):
        h = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.inner(h, *args, **kwargs)


def apply_module_edit(model, what):
    D = model.config.hidden_size // model.config.num_attention_heads
    for layer in model.model.layers:
        if what == "qk_norm_per_head":
            layer.self_attn.q_norm = PerHeadNorm(layer.self_attn.q_norm, D)
            layer.self_attn.k_norm = PerHeadNorm(layer.self_attn.k_norm, D)
        elif what == "pre_norms":
            layer.self_attn = PreNorm(layer.self_attn, model.config.rms_norm_eps)
            layer.mlp = PreNorm(layer.mlp, model.config.rms_norm_eps)
        elif what == "qk_norm":
            layer.self_attn.q_norm = nn.Identity()
            layer.self_attn.k_norm = nn.Identity()
        elif what == "post_norms":
            layer.post_attention_layernorm = nn.Identity()
            layer.post_feedforward_layernorm = nn.Identity()


def llamacpp_logits(path, ids):
    """llama.cpp's logits [n, V] on the GGUF (llama-cpp-python, F32 KV cache,
    2 threads), or None when llama-cpp-python is not installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2, n_threads_batch=2,
                logits_all=True, type_k=0, type_v=0, verbose=False)
    llm.eval(ids)
    lg = torch.tensor(np.array(llm.scores[:len(ids)], dtype=np.float32))
    del llm
    return lg


def save(out, name, arr):
    np.save(os.path.join(out, name), np.ascontiguousarray(arr))


# ----------------------------------------------------------------------- main


def make_family(name, out_root, manifest):
    f = FAMILIES[name]
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    sd = draw_weights(name)
    ref_model = build(name, hf_config(name), sd)
    path = os.path.join(out, "model.gguf")
    write_gguf(name, sd, path)
    ids = prompt_ids(name)
    logits, maps = run(ref_model, ids)
    n, V = logits.shape
    L, Hq = maps.shape[0], maps.shape[1]
    print(f"\n== {name}: {path} {os.path.getsize(path)} bytes; n {n}, V {V}, L {L}, Hq {Hq}; "
          f"logit std {logits.std().item():.2f}")

    # transformers' own GGUF reader, with and without the config fixes (smollm3,
    # olmo2: the file read back by gguf-py, transformers' reader has no such arch)
    if name in READ_BACK:
        gm, changes = read_back_gguf(name, path, sd)
        changes = [f"transformers' GGUF reader has no {name}: read back with gguf.GGUFReader" +
                   (" (q/k rows un-permuted)" if name == "smollm3" else " (q/k rows as stored)")] + changes
    elif f["arch"] == "phi3":
        gm, changes = read_back_gguf(name, path, sd)
        changes = ["read back with gguf.GGUFReader (fused attn_qkv / ffn_up as stored)"] + changes
    else:
        gm, changes, err = load_gguf_model(path, fixes=True)
        assert gm is not None, err
    same_w = max((gm.state_dict()[k] - v).abs().max().item() for k, v in ref_model.state_dict().items())
    g_logits, g_maps = run(gm, ids)
    d_fixed = row_rel(g_logits, logits)
    print(f"  transformers GGUF reader: config fixes {changes or 'none'}; weights max |diff| {same_w:g}; "
          f"logits rel {d_fixed:.2e}, maps rel {row_rel(g_maps, maps):.2e}")
    assert same_w == 0.0 and d_fixed < 1e-6, (same_w, d_fixed)
    raw, _, raw_err = load_gguf_model(path, fixes=False)
    if raw is None:
        raw_line = f"fails to load: {raw_err}"
    else:
        rl, _ = run(raw, ids)
        raw_line = (f"max |dlogit| {(rl - logits).abs().max().item():.3g}, rel {row_rel(rl, logits):.3g}"
                    if changes else "identical (no fix needed)")
    print(f"  without the fixes: {raw_line}")
    manifest.append(f"fixes {name} {'; '.join(changes) if changes else 'none'}")
    manifest.append(f"unfixed {name} {raw_line}")

    # llama.cpp itself on the same file: a check of the conventions, not a fixture
    lc = llamacpp_logits(path, ids)
    if lc is None:
        lc_line = "llama-cpp-python not installed: not compared"
    else:
        lc_line = (f"max |dlogit| {(lc - logits).abs().max().item():.3g}, rel {row_rel(lc, logits):.3g}, "
                   f"argmax agreement {(lc.argmax(-1) == logits.argmax(-1)).float().mean().item():.3f}")
    print(f"  llama.cpp ({version('llama_cpp_python') if lc is not None else '-'}) on model.gguf: {lc_line}")
    manifest.append(f"llamacpp {name} {lc_line}")

    # each feature matters
    for feat, what, over, fsd, medit, escale in features(name, sd):
        m = build(name, hf_config(name, **over), fsd)
        if medit:
            apply_module_edit(m, medit)
        fl, _ = run(m, ids, escale)
        dmax, rel = (fl - logits).abs().max().item(), row_rel(fl, logits)
        print(f"  without {feat:16s} max |dlogit| {dmax:8.3g}  rel {rel:8.3g}   ({what})")
        assert rel > 100 * TOL or (feat == "gelu_erf" and rel > TOL), (name, feat, rel)
        manifest.append(f"feature {name} {feat} {dmax:.3g} {rel:.3g} {what}")

    gen, margins = greedy(ref_model, ids)
    with torch.no_grad():
        hf_gen = ref_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    do_sample=False, max_new_tokens=N_GEN, min_new_tokens=N_GEN,
                                    eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    assert hf_gen == gen, (hf_gen, gen)
    print(f"  greedy {gen} (generate() agrees), min top-2 margin {min(margins):.3g}")
    assert min(margins) >= MIN_MARGIN, margins

    save(out, "ids.npy", np.array(ids, dtype=np.int32))
    save(out, "logits.npy", logits.numpy().astype(np.float32))
    save(out, "maps.npy", maps.numpy().astype(np.float32))
    save(out, "gen.npy", np.array(gen, dtype=np.int32))
    save(out, "gen_margin.npy", np.array(margins, dtype=np.float32))
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    D = f["head_dim"] or f["hidden"] // f["heads"]
    extra = ""
    if f["arch"] == "phi3":
        extra = (f" n_rot {int(f['rot'] * f['hidden']) // f['heads']} ctx {f['ctx']} orig {f['orig']} factors "
                 f"{'short' if n + N_GEN <= f['orig'] else 'long'}")
    if name == "smollm3":
        extra = " no_rope_layers " + ",".join(
            str(i) for i, r in enumerate(llamacpp_view(path)["no_rope_layers"]) if not r)
    if name.startswith("gemma"):
        extra = f" window {f['window']} swa_layers " + ",".join(
            str(i) for i, s in enumerate(llamacpp_view(path)["swa_layers"]) if s)
    manifest.append(f"family {name} arch {f['arch']} n {n} vocab {V} layers {L} heads {Hq} kv_heads "
                    f"{f['kv_heads']} head_dim {D} hidden {f['hidden']} ff {f['ff']} weights {f['wtype']} "
                    f"tied {int(f['tied'])} gen {N_GEN} min_margin {min(margins):.3g} bytes {size}{extra}")
    print(f"  {out}: {size} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/families")
    ap.add_argument("--only", default="", help="comma list of families (default: all)")
    args = ap.parse_args()
    check_versions()
    torch.set_num_threads(2)
    names = [x for x in args.only.split(",") if x] or list(FAMILIES)
    # the families not run keep their lines of the manifest already there
    mpath = os.path.join(args.out, "manifest.txt")
    kept = {}
    if os.path.exists(mpath) and args.only:
        with open(mpath, encoding="utf-8") as fh:
            for line in fh.read().splitlines():
                if line and not line.startswith("#") and line.split()[1] not in names:
                    kept.setdefault(line.split()[1], []).append(line)
    lines = {}
    for name in names:
        lines[name] = []
        make_family(name, args.out, lines[name])
    manifest = ["# tools/oracle/make_family_fixtures.py: " +
                ", ".join(f"{p} {version(p)}" for p in PINNED),
                "# family NAME arch ARCH n N vocab V layers L heads HQ kv_heads HKV head_dim D ... (sizes)",
                "# fixes NAME what had to be put into the config of transformers' GGUF reader",
                "# unfixed NAME what transformers' GGUF reader gives without those fixes",
                "# feature NAME FEATURE MAX_ABS_DLOGIT ROW_REL what was removed (same weights, same prompt)"]
    for name in FAMILIES:
        manifest += lines.get(name, kept.get(name, []))
    with open(mpath, "w") as fh:
        fh.write("\n".join(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(dp, x)) for dp, _, fs in os.walk(args.out) for x in fs)
    print(f"\n{args.out}: {total} bytes")


if __name__ == "__main__":
    main()
