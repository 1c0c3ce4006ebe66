#!/usr/bin/env python3
"""Golden token ids, logits, greedy continuations and attention-map rows of
the real Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, base model) from Hugging
Face transformers loading the same GGUF.

Pinned and checked (make_family_fixtures.PINNED, tools/oracle/requirements.txt).
Needs models/gemma-3-270m-q4_k_m.gguf (`make model`; sha256 checked below).
llama-cpp-python (pinned there too), if installed, is a second opinion on the
token ids and on the logits; it is not the reference.

    /work/oracle-venv/bin/python tools/oracle/make_gemma3_fixtures.py \
        [--model models/gemma-3-270m-q4_k_m.gguf] [--out tests/fixtures/gemma3]

Reference: AutoTokenizer / AutoModelForCausalLM.from_pretrained("models",
gguf_file=..., dtype=float32, attn_implementation="eager"), 2 threads.
transformers' legacy GGUF path dequantises every tensor (Q8_0 token_embd and
attn_v, Q5_0, Q4_K, Q6_K, F32 norms) with gguf.quants.dequantize to float32 and
subtracts 1 from every *norm.weight (Gemma's RMSNorm multiplies by 1 + w; the
converter stored 1 + w). Its config is checked against what llama.cpp reads
from the file (make_family_fixtures.llamacpp_view / fix_config: head_dim 256,
query_pre_attn_scalar 256 = key_length, sliding_window 512, layers 5, 11, 17
global, RoPE 1e6 global / 10000 local, no soft-caps); for this file nothing
needs fixing -- the script asserts it.

Files (float32 / int32 little-endian C order):
  tokens.txt   ids of 34 strings x (add_special 1/0) x (parse_special 0/1), the
               format of tests/fixtures/tokenizer/*.txt: a '# text' comment,
               then `<add><parse> TAB <text hex> TAB <ids> TAB <llama.cpp ids
               or '='>` ('=': llama.cpp's tokenizer gives the same ids)
  PROMPT.ids.npy [n]                  the prompt, BOS first (add_bos_token)
  PROMPT.lse.npy [n]                  logsumexp of each position's logits
                                      (float64 of the float32 row)
  PROMPT.top5_ids.npy [n, 5] int32, PROMPT.top5.npy [n, 5]
  PROMPT.sub.npy [n, 256]             the logits of sub_ids.npy [256] (a fixed
                                      seeded sample of ids, sorted)
  gen_PROMPT.ids.npy [16], gen_PROMPT.margin.npy [16]  greedy continuation
                                      (argmax; EOS not special) and top-2 margins
  gpl3.pattern_rows.npy [R] int32     query rows 0, 511, 512, 513, 1000, n-1
  gpl3.pattern.L.npy [Hq, R, n]       attention weights of those rows, every
                                      head, layer L in 0 (sliding) and 5 (global)
  manifest.txt  sha256, versions, the config, the prompts, the measured errors
PROMPTs: gpl3 (the GPL-3 from its first line to section 1, 1,2xx tokens: past
the 512 window), chinese (年假怎么申请？), english (a short sentence).
"""
import argparse
import os
import sys
from importlib.metadata import version

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_family_fixtures import PINNED, check_versions, fix_config, llamacpp_view  # noqa: E402
from gguf_f32 import dequantised_f32_gguf  # noqa: E402
from make_logits_fixtures import save, sha256  # noqa: E402

MODEL = "models/gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GPL3 = "/usr/share/common-licenses/GPL-3"
N_SUB = 256
N_GEN = 16
MAP_LAYERS = [0, 5]           # sliding, global
STRINGS = [
    "年假怎么申请？", "病假怎么申请？", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "👋🏽 Hello 🌍! 😀👍🏽", "1234567890", "3.14159 2024-06-01 1,000,000", "a  b   c\t\td\n\n\ne",
    "   leading spaces", "trailing spaces   ", "\n", "", " ", "Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया",
    "こんにちは世界", "안녕하세요 세계", "https://example.com/path?q=1&r=2",
    '{"key": [1, 2, 3], "nested": {"a": null}}', "<div class=\"x\">text</div>",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "I'm sure you'll see it's fine, isn't it?",
    "naïve café résumé Zürich", "    indented\n\tTabbed\r\nCRLF", "x" * 40, "ЁЁЁ ёёё",
    "中文，标点。English, punctuation.", "tab\there", "👨‍👩‍👧‍👦 family", "0 00 000 0000 00000", "  \n  \n",
    "ℌ𝔢𝔩𝔩𝔬 𝕨𝕠𝕣𝕝𝕕",
]


def llamacpp_logits(lc, ids, n):
    """llama-cpp-python's logits [n, V] for ids, from a fresh context."""
    lc.reset()
    lc.eval(ids)
    return torch.tensor(np.array(lc.scores[:n], dtype=np.float32))


def gpl3_head():
    """The GPL-3 verbatim from its first line up to, not including, section 1
    ("  1. Source Code."): the preamble and section 0, whitespace runs kept."""
    with open(GPL3, encoding="utf-8") as f:
        text = f.read()
    return text[:text.index("  1. Source Code.")]


def prompts():
    return [("gpl3", gpl3_head()), ("chinese", "年假怎么申请？"),
            ("english", "The quick brown fox jumps over the lazy dog. Attention is all you need, and the "
                        "capital of France is")]


GEN_PROMPTS = ["chinese", "english"]


def llamacpp(path, **kw):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    return Llama(model_path=path, verbose=False, **kw)


def write_tokens(tok, path, out):
    """tokens.txt: transformers' ids, llama.cpp's where it differs."""
    lc = llamacpp(path, vocab_only=True)
    lines = [f"# {os.path.basename(path)} (sha256 {SHA256[:16]}...); ids: transformers' GGUF tokenizer "
             f"({type(tok).__name__}); last column llama.cpp's ids ('=' same)"
             + ("" if lc else " -- llama-cpp-python not installed: '?'"),
             "# add_special parse_special <TAB> text hex <TAB> ids <TAB> llama.cpp ids or '='"]
    n = n_diff = 0
    for text in STRINGS:
        for add in (1, 0):
            for special in (0, 1):
                ids = tok(text, add_special_tokens=bool(add), split_special_tokens=not special)["input_ids"]
                other = "?"
                if lc is not None:
                    theirs = lc.tokenize(text.encode("utf-8"), add_bos=bool(add), special=bool(special))
                    other = "=" if theirs == ids else ",".join(map(str, theirs))
                    n_diff += other != "="
                lines.append(f"# {text!r}")
                lines.append(f"{add}{special}\t{text.encode('utf-8').hex()}\t{','.join(map(str, ids))}\t{other}")
                n += 1
    with open(os.path.join(out, "tokens.txt"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines) + "\n")
    summary = (f"tokens: {len(STRINGS)} strings, {n} cases; llama.cpp "
               + (f"differs on {n_diff}" if lc is not None else "not installed"))
    print(summary)
    return summary


def forward(model, ids, attentions=False):
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=attentions)
    return out.logits[0], (out.attentions if attentions else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default="tests/fixtures/gemma3")
    ap.add_argument("--llamacpp-f32", metavar="PATH", default=None,
                    help="also run llama.cpp on the GGUF dequantised to F32 (written to PATH, ~1.1 GB) with an "
                         "F32 KV cache, and record how far it is from transformers")
    args = ap.parse_args()
    check_versions()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    digest = sha256(args.model)
    assert digest == SHA256, f"{args.model}: sha256 {digest}, want {SHA256}"

    d, f = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    cfg = model.config
    view = llamacpp_view(args.model)
    changes = fix_config(cfg.__class__.from_dict(cfg.to_dict()), view)
    assert not changes, f"transformers' config differs from llama.cpp's reading: {changes}"
    cfg_line = (f"config: {cfg.model_type}, layers {cfg.num_hidden_layers}, hidden {cfg.hidden_size}, heads "
                f"{cfg.num_attention_heads}/{cfg.num_key_value_heads}, head_dim {cfg.head_dim}, vocab "
                f"{cfg.vocab_size}, query_pre_attn_scalar {cfg.query_pre_attn_scalar}, sliding_window "
                f"{cfg.sliding_window}, global layers "
                f"{[i for i, t in enumerate(cfg.layer_types) if t == 'full_attention']}, rope "
                f"{cfg.rope_parameters['full_attention']['rope_theta']:g} / "
                f"{cfg.rope_parameters['sliding_attention']['rope_theta']:g}, softcaps "
                f"{cfg.attn_logit_softcapping} / {cfg.final_logit_softcapping}, tied {cfg.tie_word_embeddings}, "
                f"add_bos {tok.add_bos_token}")
    print(cfg_line)
    manifest = [f"# model {os.path.basename(args.model)} sha256 {digest}",
                "# " + ", ".join(f"{p} {version(p)}" for p in PINNED), "# " + cfg_line,
                "# logits NAME N_TOKENS", "# gen NAME N_PROMPT N_NEW",
                "# pattern PROMPT LAYER ROWS(comma)", "# measured: see the 'measured' lines"]
    manifest.append("# " + write_tokens(tok, args.model, args.out))

    V = cfg.vocab_size
    sub_ids = np.sort(np.random.default_rng(270).choice(V, N_SUB, replace=False)).astype(np.int32)
    save(args.out, "sub_ids.npy", sub_ids)
    # the same weights in float64: how far float32 rounding alone moves transformers' numbers
    model64 = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float64,
                                                   attn_implementation="eager").eval()
    assert all(p.dtype == torch.float64 for p in model64.parameters())
    lc_kw = dict(n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=2, n_threads_batch=2, logits_all=True)
    lc = llamacpp(args.model, **lc_kw)
    lc32 = None
    if args.llamacpp_f32 and lc is not None:
        dequantised_f32_gguf(args.model, args.llamacpp_f32)
        lc32 = llamacpp(args.llamacpp_f32, type_k=0, type_v=0, **lc_kw)
    all_ids = {}
    for name, text in prompts():
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and tok.bos_token_id not in ids[1:], name
        all_ids[name] = ids
        n = len(ids)
        logits, att = forward(model, ids, attentions=(name == "gpl3"))
        logits = logits.float()
        top = torch.topk(logits, 5, dim=-1)
        lse = torch.logsumexp(logits.double(), dim=-1)
        save(args.out, f"{name}.ids.npy", np.array(ids, dtype=np.int32))
        save(args.out, f"{name}.lse.npy", lse.float().numpy())
        save(args.out, f"{name}.top5_ids.npy", top.indices.numpy().astype(np.int32))
        save(args.out, f"{name}.top5.npy", top.values.numpy().astype(np.float32))
        save(args.out, f"{name}.sub.npy", logits[:, sub_ids].numpy().astype(np.float32))
        manifest.append(f"logits {name} {n}")
        margin = (top.values[:, 0] - top.values[:, 1])
        print(f"{name}: {n} tokens, logits in [{logits.min().item():.1f}, {logits.max().item():.1f}], "
              f"min top-2 margin {margin.min().item():.2e}")

        l64, att64 = forward(model64, ids, attentions=(name == "gpl3"))
        d64 = (logits.double() - l64).abs()
        dlse = (lse - torch.logsumexp(l64, dim=-1)).abs().max().item()
        line = (f"measured {name} float32 vs float64 transformers: max |dlogit| {d64.max().item():.2e} "
                f"(position {int(d64.amax(-1).argmax())}), max |dlse| {dlse:.2e}, argmax agreement "
                f"{(logits.argmax(-1) == l64.argmax(-1)).double().mean().item():.4f}")
        if lc is not None:
            lg = llamacpp_logits(lc, ids, n)
            line += (f"; llama.cpp (defaults, 8-bit activations) vs transformers max |dlogit| "
                     f"{(lg - logits).abs().max().item():.3g}, argmax agreement "
                     f"{(lg.argmax(-1) == logits.argmax(-1)).double().mean().item():.4f}")
        if lc32 is not None:
            lg = llamacpp_logits(lc32, ids, n)
            dl = (lg - logits).abs()
            line += (f"; llama.cpp on the F32-dequantised GGUF, F32 KV cache, vs transformers max |dlogit| "
                     f"{dl.max().item():.3g} (median over positions {dl.amax(-1).median().item():.2g}), argmax "
                     f"agreement {(lg.argmax(-1) == logits.argmax(-1)).double().mean().item():.4f}")
        print(" ", line)
        manifest.append(line)

        if name == "gpl3":
            rows = [r for r in (0, 511, 512, 513, 1000, n - 1) if r < n]
            save(args.out, "gpl3.pattern_rows.npy", np.array(rows, dtype=np.int32))
            for L in MAP_LAYERS:
                a = att[L][0][:, rows, :].float()                      # [Hq, R, n]
                a64 = att64[L][0][:, rows, :]
                save(args.out, f"gpl3.pattern.{L}.npy", a.numpy().astype(np.float32))
                kind = cfg.layer_types[L]
                row_rel = ((a.double() - a64).abs().amax(-1) / a64.abs().amax(-1)).max().item()
                vis = (a[:, -1, :] > 0).sum(-1).tolist()
                print(f"  pattern layer {L} ({kind}): rows {rows}, keys with weight > 0 in the last row per head "
                      f"{vis}; float32 vs float64 worst row rel {row_rel:.2e}")
                manifest.append(f"pattern gpl3 {L} {','.join(map(str, rows))}")
                manifest.append(f"measured pattern {L} ({kind}) float32 vs float64 worst row rel {row_rel:.2e}; "
                                f"keys > 0 in row {n - 1}: {vis}")
        del att, att64

    for name in GEN_PROMPTS:
        ids = all_ids[name]
        inp = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                 max_new_tokens=N_GEN, min_new_tokens=N_GEN, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        new = out.sequences[0, len(ids):].numpy().astype(np.int32)
        step = torch.stack([lg[0] for lg in out.logits]).float()
        top2 = torch.topk(step, 2, dim=-1).values
        assert (step.argmax(-1).numpy() == new).all()
        # the cached decode against a full recompute of the whole sequence
        full, _ = forward(model, out.sequences[0].tolist())
        assert (full[len(ids) - 1:-1].argmax(-1).numpy() == new).all()
        save(args.out, f"gen_{name}.ids.npy", new)
        save(args.out, f"gen_{name}.margin.npy", (top2[:, 0] - top2[:, 1]).numpy().astype(np.float32))
        manifest.append(f"gen {name} {len(ids)} {len(new)}")
        print(f"gen {name}: {tok.decode(new)!r}, min margin {(top2[:, 0] - top2[:, 1]).min().item():.3g}")

    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")
    if lc32 is not None:
        del lc32
        os.remove(args.llamacpp_f32)
    total = sum(os.path.getsize(os.path.join(args.out, x)) for x in os.listdir(args.out))
    print(f"{args.out}: {total} bytes")


if __name__ == "__main__":
    main()
