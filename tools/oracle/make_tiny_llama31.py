#!/usr/bin/env python3
"""A tiny random Llama-3.1-shaped model (transformers LlamaConfig), written to
GGUF with the `gguf` package, and its reference logits from transformers.

What SmolLM2 does not exercise and this does: GQA 4:1 (8 query heads, 2 KV
heads), head_dim 128 (explicit: hidden 128 != 8 * 128), llama3 RoPE scaling
(theta 500000, factor 8, low 1, high 4, original context 8192), an untied
lm_head (output.weight), F16 weight matrices.

Pinned: see tools/oracle/requirements.txt.

    /work/oracle-venv/bin/python tools/oracle/make_tiny_llama31.py \
        [--out tests/fixtures/model/tiny31]

The model: LlamaForCausalLM(LlamaConfig(...)) with every parameter then
redrawn from torch.Generator seed 31 (sizes chosen so attention is not flat:
q/k rows ~ N(0, (1.2^2)/hidden), so scores have std ~1.4; norm weights
U(0.5, 1.5)). Every 2-D weight is rounded to float16 *in the HF model*, so the
F16 GGUF holds exactly the weights the reference ran with; norms are F32.

The GGUF (arch "llama", GGUF v3, alignment 32):
  general.name = "qkv-tiny-llama31", general.file_type = 1 (mostly F16)
  llama.context_length 131072, llama.embedding_length 128, llama.block_count 2,
  llama.feed_forward_length 256, llama.attention.head_count 8,
  llama.attention.head_count_kv 2, llama.attention.key_length 128,
  llama.attention.value_length 128, llama.rope.dimension_count 128,
  llama.rope.freq_base 500000, llama.attention.layer_norm_rms_epsilon 1e-5,
  llama.vocab_size 512.
  RoPE scaling is carried the way llama.cpp's convert_hf_to_gguf.py carries
  llama3 scaling: a tensor rope_freqs.weight, F32 [64], one factor per
  frequency pair; ggml divides the angle pos * theta^(-2i/128) by it (1 for
  high frequencies, 8 for low, smooth in between). The converter writes no
  rope.scaling.* key for llama3 (and llama.cpp would reject
  llama.rope.scaling.type = "llama3", and would apply llama.rope.scaling.factor
  as *linear* scaling on top), so the parameters are recorded under keys of
  our own, which llama.cpp and transformers ignore:
    qkv.rope.scaling.type = "llama3"                  (string)
    qkv.rope.scaling.factor = 8.0                     (f32)
    qkv.rope.scaling.low_freq_factor = 1.0            (f32)
    qkv.rope.scaling.high_freq_factor = 4.0           (f32)
    qkv.rope.scaling.original_context_length = 8192   (u32)
  Tensors (GGUF dims are innermost first; shapes below are numpy/PyTorch,
  outermost first): token_embd.weight F16 [512,128], output.weight F16
  [512,128], output_norm.weight F32 [128], rope_freqs.weight F32 [64], and per
  block N: attn_norm / ffn_norm F32 [128], attn_q F16 [1024,128], attn_k F16
  [256,128], attn_v F16 [256,128], attn_output F16 [128,1024], ffn_gate /
  ffn_up F16 [256,128], ffn_down F16 [128,256]. attn_q and attn_k are
  permuted like convert_hf_to_gguf.py's LlamaModel.permute (per head, rows
  (i, i+64) of the rotate-half layout become rows (2i, 2i+1): the interleaved
  pairing ggml's NORM rope uses); attn_k is permuted with the KV head count.
  Tokenizer: byte-level BPE (tokenizer.ggml.model "gpt2", pre "llama-bpe"):
  256 byte tokens + 253 merges learned on the GPL-3 text with the Llama-3
  split regex + <|begin_of_text|> 509 (BOS), <|end_of_text|> 510 (EOS),
  <|eot_id|> 511, token types 1 normal / 3 control, add_bos_token true.

Checks (printed, summarised in tests/fixtures/model/README.md): transformers
loads the GGUF back (gguf_file=), weights identical; logits identical once
the llama3 rope parameters are restored (transformers' GGUF loader ignores
rope_freqs and so runs default RoPE by itself); with llama-cpp-python
installed, llama.cpp's logits on the same ids are compared too.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import regex
import torch
import gguf
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

SEED = 31
VOCAB, HIDDEN, INTER, LAYERS, NH, NKV, HD = 512, 128, 256, 2, 8, 2, 128
THETA = 500000.0
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
BOS, EOS, EOT = 509, 510, 511
GPL3 = "/usr/share/common-licenses/GPL-3"
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
N_GEN = 16


def config(rope="llama3"):
    rp = {"rope_type": "default", "rope_theta": THETA}
    if rope == "llama3":
        rp = {"rope_type": "llama3", "rope_theta": THETA, **LLAMA3}
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER,
                       num_hidden_layers=LAYERS, num_attention_heads=NH, num_key_value_heads=NKV,
                       head_dim=HD, max_position_embeddings=131072, rms_norm_eps=1e-5,
                       rope_parameters=rp, tie_word_embeddings=False, attention_bias=False,
                       mlp_bias=False, hidden_act="silu", bos_token_id=BOS, eos_token_id=EOS,
                       pad_token_id=EOS)


def build_model():
    torch.manual_seed(SEED)
    cfg = config()
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).float().eval()
    g = torch.Generator().manual_seed(SEED)
    sd = model.state_dict()
    for name in sorted(sd):
        p = sd[name]
        if p.ndim == 1:                                   # RMSNorm weights
            new = 0.5 + torch.rand(p.shape, generator=g)
        else:
            fan_in = p.shape[1]
            gain = 1.0
            if "embed_tokens" in name:
                gain = math.sqrt(fan_in)                  # N(0, 1) embeddings
            elif "q_proj" in name or "k_proj" in name:
                gain = 1.2
            elif "lm_head" in name:
                gain = 3.0
            new = torch.randn(p.shape, generator=g) * (gain / math.sqrt(fan_in))
            new = new.half().float()                      # exactly representable in F16
        with torch.no_grad():
            p.copy_(new)
    return model


def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half -> interleaved rows."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


def rope_factors():
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors, llama3 branch."""
    freqs = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    factor, low, high = LLAMA3["factor"], LLAMA3["low_freq_factor"], LLAMA3["high_freq_factor"]
    old = LLAMA3["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def train_bpe(n_merges):
    """Plain byte-level BPE on the GPL-3 (most frequent pair, ties by the pair)."""
    b2u = bytes_to_unicode()
    with open(GPL3, encoding="utf-8") as f:
        text = f.read()
    words = {}
    for piece in regex.findall(LLAMA3_SPLIT, text):
        w = tuple(b2u[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    byte_tokens = [b2u[b] for b in range(256)]
    tokens = byte_tokens + [a + b for a, b in merges]
    assert len(set(tokens)) == len(tokens)
    return tokens, [f"{a} {b}" for a, b in merges]


def write_gguf(model, path):
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("qkv-tiny-llama31")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(131072)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_string("qkv.rope.scaling.type", "llama3")
    w.add_float32("qkv.rope.scaling.factor", LLAMA3["factor"])
    w.add_float32("qkv.rope.scaling.low_freq_factor", LLAMA3["low_freq_factor"])
    w.add_float32("qkv.rope.scaling.high_freq_factor", LLAMA3["high_freq_factor"])
    w.add_uint32("qkv.rope.scaling.original_context_length", LLAMA3["original_max_position_embeddings"])

    tokens, merges = train_bpe(VOCAB - 256 - 3)
    tokens += ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    assert len(tokens) == VOCAB
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * (VOCAB - 3) + [gguf.TokenType.CONTROL] * 3)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(True)

    f16 = lambda a: a.astype(np.float16)
    f32 = lambda a: a.astype(np.float32)
    w.add_tensor("token_embd.weight", f16(sd["model.embed_tokens.weight"]))
    w.add_tensor("rope_freqs.weight", rope_factors())
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", f32(sd[p + "input_layernorm.weight"]))
        w.add_tensor(f"blk.{i}.attn_q.weight", f16(permute(sd[p + "self_attn.q_proj.weight"], NH)))
        w.add_tensor(f"blk.{i}.attn_k.weight", f16(permute(sd[p + "self_attn.k_proj.weight"], NKV)))
        w.add_tensor(f"blk.{i}.attn_v.weight", f16(sd[p + "self_attn.v_proj.weight"]))
        w.add_tensor(f"blk.{i}.attn_output.weight", f16(sd[p + "self_attn.o_proj.weight"]))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", f32(sd[p + "post_attention_layernorm.weight"]))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", f16(sd[p + "mlp.gate_proj.weight"]))
        w.add_tensor(f"blk.{i}.ffn_up.weight", f16(sd[p + "mlp.up_proj.weight"]))
        w.add_tensor(f"blk.{i}.ffn_down.weight", f16(sd[p + "mlp.down_proj.weight"]))
    w.add_tensor("output_norm.weight", f32(sd["model.norm.weight"]))
    w.add_tensor("output.weight", f16(sd["lm_head.weight"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sequences():
    """name -> token ids (int), fixed."""
    r = np.random.default_rng(SEED)
    return {
        "s1": [BOS],
        "s9": [BOS] + r.integers(0, 509, 8).tolist(),
        "s64": [BOS] + r.integers(0, 509, 63).tolist(),
        "s2500": [BOS] + r.integers(0, 509, 2499).tolist(),
    }


def row_positions(t):
    if t <= 64:
        return list(range(t))
    pos = set(range(0, t, 64)) | set(range(t - 4, t)) | {1, 2, 3, 599, 600, 1023, 1024, 2047, 2048}
    return sorted(p for p in pos if p < t)


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def save(out, name, arr):
    np.save(os.path.join(out, name), np.ascontiguousarray(arr))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/model/tiny31")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp comparison")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    gguf_path = os.path.join(args.out, "tiny-llama31.gguf")

    model = build_model()
    write_gguf(model, gguf_path)
    print(f"{gguf_path}: {os.path.getsize(gguf_path)} bytes")
    inv_freq = model.model.rotary_emb.inv_freq.float().numpy()
    save(args.out, "inv_freq.npy", inv_freq.astype(np.float32))
    # inv_freq of transformers' llama3 == theta^(-2i/d) / rope_factors (up to f32 rounding)
    base = 1.0 / (THETA ** (np.arange(0, HD, 2, dtype=np.float32) / HD))
    print("max rel |inv_freq - base/factors|:",
          float(np.max(np.abs(inv_freq - base / rope_factors()) / inv_freq)))

    # the same weights under default RoPE: how much would ignoring llama3 scaling move the logits?
    plain = LlamaForCausalLM(config("default")).float().eval()
    plain.config._attn_implementation = "eager"
    plain.load_state_dict(model.state_dict())

    manifest = ["# tiny-llama31.gguf: vocab 512, hidden 128, 2 layers, 8 q heads, 2 kv heads,"
                " head_dim 128, ffn 256, rope theta 500000 llama3 (8, 1, 4, 8192), untied",
                "# logits NAME N_TOKENS N_ROWS", "# gen NAME N_PROMPT N_NEW"]
    seqs = sequences()
    ref = {}
    for name, ids in seqs.items():
        t = len(ids)
        lg = logits_of(model, ids)
        ref[name] = lg
        rows = row_positions(t)
        top = torch.topk(lg, 5, dim=-1)
        save(args.out, f"{name}.ids.npy", np.array(ids, dtype=np.int32))
        save(args.out, f"{name}.rows_pos.npy", np.array(rows, dtype=np.int32))
        save(args.out, f"{name}.rows.npy", lg[rows].numpy().astype(np.float32))
        save(args.out, f"{name}.top5_ids.npy", top.indices.numpy().astype(np.int32))
        save(args.out, f"{name}.top5_logits.npy", top.values.numpy().astype(np.float32))
        save(args.out, f"{name}.argmax.npy", top.indices[:, 0].numpy().astype(np.int32))
        save(args.out, f"{name}.margin.npy", (top.values[:, 0] - top.values[:, 1]).numpy().astype(np.float32))
        save(args.out, f"{name}.lse.npy", torch.logsumexp(lg.double(), -1).float().numpy())
        manifest.append(f"logits {name} {t} {len(rows)}")
        d = (logits_of(plain, ids) - lg).abs().max(-1).values
        first = int(torch.nonzero(d > 5e-3)[0, 0]) if (d > 5e-3).any() else -1
        print(f"{name}: T={t}, logit std {lg.std().item():.2f}, min margin "
              f"{(top.values[:, 0] - top.values[:, 1]).min().item():.2e}; default-RoPE vs llama3 "
              f"max |dlogit| {d.max().item():.3g} (first position > 5e-3: {first})")

    # greedy continuation: prefill s64, then 16 decode steps
    ids = seqs["s64"]
    inp = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                             max_new_tokens=N_GEN, min_new_tokens=0, eos_token_id=None,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=EOS)
    new = out.sequences[0, len(ids):].numpy().astype(np.int32)
    sl = torch.stack([l[0] for l in out.logits]).float()
    top2 = torch.topk(sl, 2, -1).values
    assert (sl.argmax(-1).numpy() == new).all()
    save(args.out, "gen_s64.ids.npy", new)
    save(args.out, "gen_s64.margin.npy", (top2[:, 0] - top2[:, 1]).numpy().astype(np.float32))
    manifest.append(f"gen s64 {len(ids)} {len(new)}")
    print("gen s64:", new.tolist(), "min margin", top2[:, 0].sub(top2[:, 1]).min().item())

    with open(os.path.join(args.out, "config.json"), "w") as fh:
        json.dump(model.config.to_dict(), fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")
    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")

    check_gguf_roundtrip(gguf_path, model, seqs, ref)
    if not args.no_llamacpp:
        check_llamacpp(gguf_path, seqs, ref)
    total = sum(os.path.getsize(os.path.join(args.out, x)) for x in os.listdir(args.out))
    print(f"{args.out}: {total} bytes")


def check_gguf_roundtrip(path, model, seqs, ref):
    """transformers loads the GGUF back: tokenizer, config, weights, logits."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    print("GGUF tokenizer:", type(tok).__name__, "bos", tok.bos_token_id, "eos", tok.eos_token_id,
          "'Hello world' ->", tok("Hello world").input_ids)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    c = m.config
    print("GGUF config: head_dim", c.head_dim, "heads", c.num_attention_heads, c.num_key_value_heads,
          "tie", c.tie_word_embeddings, "rope", c.rope_parameters)
    a, b = model.state_dict(), m.state_dict()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"GGUF weights vs HF: max |diff| {worst} over {len(a)} tensors, "
          f"same names: {sorted(a) == sorted(b)}")
    for label in ("as loaded", "llama3 rope restored"):
        if label != "as loaded":
            c.rope_parameters = {"rope_type": "llama3", "rope_theta": THETA, **LLAMA3}
            m.model.rotary_emb = LlamaRotaryEmbedding(config=c)
        for name, ids in seqs.items():
            diff = (logits_of(m, ids) - ref[name]).abs().max().item()
            print(f"  transformers(GGUF, {label}) vs HF, {name}: max |dlogit| {diff:.3g}")


def check_llamacpp(path, seqs, ref):
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama-cpp-python not installed: llama.cpp comparison skipped")
        return
    import tempfile
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_llamacpp import dequantised_f32_gguf
    tmp = tempfile.mkdtemp()
    f32_path = os.path.join(tmp, "tiny-llama31-f32.gguf")
    dequantised_f32_gguf(path, f32_path)
    for label, p, kw in (("F16 weights, F16 KV cache (defaults)", path, {}),
                         ("F16 weights, F32 KV cache", path, {"type_k": 0, "type_v": 0}),
                         ("weights as F32, F32 KV cache", f32_path, {"type_k": 0, "type_v": 0})):
        llm = Llama(model_path=p, n_ctx=4096, n_batch=4096, n_ubatch=4096, n_threads=2,
                    n_threads_batch=2, logits_all=True, verbose=False, **kw)
        for name, ids in seqs.items():
            llm.reset()
            llm.eval(ids)
            lg = np.array(llm.scores[:len(ids)], dtype=np.float32)
            r = ref[name].numpy()
            diff = np.abs(lg - r).max(-1)
            agree = (lg.argmax(-1) == r.argmax(-1)).mean()
            print(f"  llama.cpp ({label}) vs HF, {name}: max |dlogit| {diff.max():.3g} "
                  f"(at position {int(diff.argmax())}), argmax agreement {agree:.4f}")
        del llm
    os.remove(f32_path)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
