#!/usr/bin/env python3
"""Golden token ids, logits and greedy continuations of SmolLM2-135M-Instruct
(Q4_1 GGUF) from Hugging Face transformers loading the same GGUF.

Pinned: see tools/oracle/requirements.txt (torch, transformers, gguf, numpy,
accelerate — transformers refuses gguf_file= without accelerate).
Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (`make model`).

    /work/oracle-venv/bin/python tools/oracle/make_logits_fixtures.py \
        [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--out tests/fixtures/model/smollm2]

Reference: AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32,
attn_implementation="eager") and AutoTokenizer.from_pretrained(dir,
gguf_file=...). transformers dequantises every GGUF tensor to float32 with
gguf.quants.dequantize at load time (Q4_1 / Q8_0 -> exact float32 values of
the quantised weights), un-permutes attn_q / attn_k back to the HF
rotate-half layout, and then runs a plain float32 forward: no activation
quantisation. SmolLM2's GGUF says tokenizer.ggml.add_bos_token = false and
transformers follows it: no BOS is prepended.

Formats: see tests/fixtures/model/README.md. Everything is written with
torch.set_num_threads(2) (float32 matmul sums depend a little on threading).
"""
import argparse
import hashlib
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
GPL3 = "/usr/share/common-licenses/GPL-3"
TOPK = 5
# token ids whose logit is stored at every position of every prompt
PROBE_IDS = [0, 1, 2, 28, 100, 1000, 12345, 49151]
N_NEW = 32
CHAT_QUESTION = "What is the capital of France, and why is it famous?"


def gpl3_section6(tok, min_tokens=1000):
    """The body of section 6 ("Conveying Non-Source Forms") of the GPL-3: from
    "  You may convey a covered work in object code form" up to, not including,
    "  7. Additional Terms." (1116 tokens). Verbatim, whitespace runs included.
    Its section heading is left out on purpose: "\n\n  6." is one of the texts
    where transformers' GGUF tokenizer and SmolLM2's own disagree (see
    native_tokenizer)."""
    with open(GPL3, encoding="utf-8") as f:
        text = f.read()
    head = "  6. Conveying Non-Source Forms.\n\n"
    a = text.index(head) + len(head)
    b = text.index("  7. Additional Terms.")
    text = text[a:b]
    assert len(tok(text).input_ids) >= min_tokens
    return text


def native_tokenizer(tok):
    """SmolLM2's own tokenizer (its tokenizer.json; what llama.cpp implements for
    pre "smollm"): Digits(individual_digits=True) then ByteLevel. transformers
    rebuilds the GGUF's tokenizer with plain GPT-2 ByteLevel (it knows no "smollm"
    split), which differs when a whitespace run precedes a digit ("\n\n  6.").
    Every prompt here is checked to tokenise the same both ways."""
    from tokenizers import Tokenizer, pre_tokenizers
    native = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    native.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return native


def prompts(tok):
    chat = tok.apply_chat_template([{"role": "user", "content": CHAT_QUESTION}],
                                   add_generation_prompt=True, tokenize=False)
    return [
        # name, text, special (special tokens in the text are parsed as such)
        ("english", "The quick brown fox jumps over the lazy dog. Attention is all you need, "
                    "and the capital of France is", False),
        ("story", "Once upon a time, in a small village by the sea, there lived", False),
        ("chinese", "年假怎么申请？", False),
        ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
                 "    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(", False),
        ("mixed", "Hello 世界! 👋 2024-06-01: 1234567890 ×  tabs\tand   spaces…", False),
        ("chat", chat, True),
        ("gpl3", gpl3_section6(tok), False),
    ]


GEN_PROMPTS = ["story", "code", "chat"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save(out, name, arr):
    np.save(os.path.join(out, name), np.ascontiguousarray(arr))


def load_reference(path):
    """transformers' tokenizer and float32 eager model from the GGUF at path
    (2 threads: float32 matmul sums depend a little on threading)."""
    torch.set_num_threads(2)
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    return tok, model


def start(doc, out):
    """A fixture script's start: --model and --out (default out) parsed, the
    output directory made, the reference loaded. Returns args, tok, model."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=out)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return (args, *load_reference(args.model))


def main():
    args, tok, model = start(__doc__, "tests/fixtures/model/smollm2")
    assert model.config.tie_word_embeddings
    print("bos", tok.bos_token, tok.bos_token_id, "eos", tok.eos_token, tok.eos_token_id,
          "add_bos_token", getattr(tok, "add_bos_token", None))
    with open(os.path.join(args.out, "chat_template.jinja"), "w", encoding="utf-8") as fh:
        fh.write(tok.chat_template)

    save(args.out, "probe_ids.npy", np.array(PROBE_IDS, dtype=np.int32))
    manifest = [f"# model {os.path.basename(args.model)} sha256 {sha256(args.model)}",
                "# logits NAME N_TOKENS SPECIAL ROW_POSITIONS(comma)",
                "# gen NAME N_PROMPT N_NEW"]
    native = native_tokenizer(tok)
    all_ids = {}
    for name, text, special in prompts(tok):
        with open(os.path.join(args.out, name + ".txt"), "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        enc = tok(text, add_special_tokens=True)
        plain = tok(text, add_special_tokens=False)
        assert enc.input_ids == plain.input_ids, "tokenizer added special tokens"
        ids = enc.input_ids
        assert native.encode(text, add_special_tokens=True).ids == ids, \
            f"{name}: transformers and SmolLM2's own tokenizer disagree"
        if not special:
            # no special token may come out of a non-special prompt
            assert not any(i in tok.all_special_ids for i in ids), name
        all_ids[name] = ids
        t = len(ids)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()    # [T, V]
        top = torch.topk(logits, TOPK, dim=-1)
        lse = torch.logsumexp(logits.double(), dim=-1).float()
        rows = [t - 1] if name != "gpl3" else [t // 2, t - 1]
        save(args.out, f"{name}.ids.npy", np.array(ids, dtype=np.int32))
        save(args.out, f"{name}.top5_ids.npy", top.indices.numpy().astype(np.int32))
        save(args.out, f"{name}.top5_logits.npy", top.values.numpy().astype(np.float32))
        save(args.out, f"{name}.argmax.npy", top.indices[:, 0].numpy().astype(np.int32))
        save(args.out, f"{name}.margin.npy", (top.values[:, 0] - top.values[:, 1]).numpy().astype(np.float32))
        save(args.out, f"{name}.lse.npy", lse.numpy().astype(np.float32))
        save(args.out, f"{name}.probe.npy", logits[:, PROBE_IDS].numpy().astype(np.float32))
        save(args.out, f"{name}.rows_pos.npy", np.array(rows, dtype=np.int32))
        save(args.out, f"{name}.rows.npy", logits[rows].numpy().astype(np.float32))
        manifest.append(f"logits {name} {t} {int(special)} {','.join(map(str, rows))}")
        m = (top.values[:, 0] - top.values[:, 1])
        print(f"{name}: {t} tokens, min margin {m.min().item():.3g}, "
              f"next '{tok.decode([top.indices[-1, 0].item()])}'")

    for name in GEN_PROMPTS:
        ids = all_ids[name]
        inp = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                 max_new_tokens=N_NEW, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=tok.eos_token_id)
        new = out.sequences[0, len(ids):].numpy().astype(np.int32)
        step_logits = torch.stack([l[0] for l in out.logits]).float()   # [n_new, V]
        top2 = torch.topk(step_logits, 2, dim=-1).values
        assert (step_logits.argmax(-1).numpy() == new).all()
        save(args.out, f"gen_{name}.ids.npy", new)
        save(args.out, f"gen_{name}.margin.npy", (top2[:, 0] - top2[:, 1]).numpy().astype(np.float32))
        manifest.append(f"gen {name} {len(ids)} {len(new)}")
        print(f"gen {name}: {len(new)} tokens: {tok.decode(new)!r}")

    with open(os.path.join(args.out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(args.out, x)) for x in os.listdir(args.out))
    print(f"{args.out}: {total} bytes")


if __name__ == "__main__":
    main()
