#!/usr/bin/env python3
"""make_corpus.py -- writes the fuzz targets' seed corpora, fuzz/corpus/<target>/.

Python 3 standard library only; deterministic (running it again rewrites the
same bytes), so the committed corpora are this script's output. Run from the
repository root:  python3 fuzz/make_corpus.py

  gguf       small valid GGUFs qkv reads whole: tiny Llama models (F32 and F16
             weights, SentencePiece and byte-level BPE vocabularies, ChatML and
             Llama-3 templates, rope_freqs), a tiny model of each other family
             (qwen2 biases, qwen3 QK-norms and key_length != E / H, gemma2
             windows and soft-caps, gemma3 sliding pattern and local RoPE base),
             each family's hostile files (window 0, soft-caps <= 0 or NaN,
             key_length 512, a pattern with no global layer, a missing QK-norm,
             bias or post-norm, NaN scales in Q5_0 and Q4_K blocks, an unknown
             architecture), a metadata-only model, a vocabulary-only file, two
             blocks of every quantised type qkv_dequantize reads (the second
             with a NaN or inf scale), and the small committed test fixtures
  npy        .npy files of every dtype and header version the loader takes
  tokenizer  flag byte (bit 0 vocabulary, bit 1 specials, bit 2 BOS/EOS) + text
  chat       TEMPLATE \\0 SYSTEM \\0 USER
  flags      argv[1..] joined by NUL bytes
"""
import os
import random
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")

# ------------------------------------------------------------------ GGUF

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_SYSTEM = ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant."
                 "<|im_end|>\\n' }}{% endif %}" + CHATML)
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == U32:
        out += struct.pack("<I", value)
    elif vtype == I32:
        out += struct.pack("<i", value)
    elif vtype == F32:
        out += struct.pack("<f", value)
    elif vtype == BOOL:
        out += struct.pack("<B", value)
    elif vtype == STRING:
        out += gstr(value)
    elif vtype == ARRAY:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        for it in items:
            out += gstr(it) if etype == STRING else struct.pack({I32: "<i", F32: "<f", U32: "<I"}[etype], it)
    return out


def gguf(kvs, tensors=()):
    """kvs: [(key, type, value)]; tensors: [(name, shape outermost first, ggml type, values: floats for
    F32/F16, raw bytes for the block types)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    body = b"".join(kv(*x) for x in kvs)
    infos, data = b"", b""
    for name, shape, gtype, values in tensors:
        infos += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        infos += struct.pack("<IQ", gtype, len(data))
        if isinstance(values, bytes):
            data += values
        else:
            data += struct.pack("<%d%s" % (len(values), "f" if gtype == GGML_F32 else "e"), *values)
        data += b"\0" * (-len(data) % 32)
    out = head + body + infos
    return out + b"\0" * (-len(out) % 32) + data


def spm_vocab(n):
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(4)] + ["\u2581" + chr(97 + i) for i in range(n - 7)]
    types = [2, 3, 3] + [6] * 4 + [1] * (n - 7)
    return [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, toks)),
            ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
            ("tokenizer.ggml.scores", ARRAY, (F32, [-float(i) for i in range(n)])),
            ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2)]


def bpe_vocab(n, pre):
    special = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>",
               "<|start_header_id|>", "<|end_header_id|>"]
    base = ["a", "b", "\u0120", "\u0120a", "ab", "\u010a"]
    toks = (special + base + ["x%d" % i for i in range(n)])[:n]
    types = [3 if t in special else 1 for t in toks]
    return [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, pre),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, toks)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
            ("tokenizer.ggml.merges", ARRAY, (STRING, ["\u0120 a", "a b"])),
            ("tokenizer.ggml.bos_token_id", U32, 2), ("tokenizer.ggml.eos_token_id", U32, 3),
            ("tokenizer.ggml.padding_token_id", U32, 1)]


def tiny_llama(vocab, template, gtype=GGML_F32, rope_freqs=False, layers=1):
    E, F, V = 16, 16, 16
    meta = [("general.architecture", STRING, "llama"), ("llama.block_count", U32, layers),
            ("llama.embedding_length", U32, E), ("llama.attention.head_count", U32, 1),
            ("llama.attention.head_count_kv", U32, 1), ("llama.feed_forward_length", U32, F),
            ("llama.context_length", U32, 32), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
            ("llama.rope.freq_base", F32, 10000.0)] + vocab
    if template:
        meta.append(("tokenizer.chat_template", STRING, template))

    def mat(r, c, k):
        return [((i * 7 + k) % 11 - 5) / 50 for i in range(r * c)]

    ts = [("token_embd.weight", (V, E), gtype, mat(V, E, 1)), ("output_norm.weight", (E,), GGML_F32, [1.0] * E)]
    if rope_freqs:
        ts.append(("rope_freqs.weight", (E // 2,), GGML_F32, [1.0 + i for i in range(E // 2)]))
    for l in range(layers):
        for k, (suffix, shape) in enumerate([("attn_q", (E, E)), ("attn_k", (E, E)), ("attn_v", (E, E)),
                                             ("attn_output", (E, E)), ("ffn_gate", (F, E)), ("ffn_up", (F, E)),
                                             ("ffn_down", (E, F))]):
            ts.append(("blk.%d.%s.weight" % (l, suffix), shape, gtype, mat(shape[0], shape[1], k + l)))
        ts.append(("blk.%d.attn_norm.weight" % l, (E,), GGML_F32, [1.0] * E))
        ts.append(("blk.%d.ffn_norm.weight" % l, (E,), GGML_F32, [1.0] * E))
    return gguf(meta, ts)


def tiny_family(arch, layers=2, E=16, D=16, F=16, meta=(), drop=(), quant=None):
    """A tiny model of a family as llama.cpp's converter lays it out: one
    head of D, ffn F, F16 matrices, the SentencePiece vocabulary of 16. meta: (key, type,
    value) set over the defaults; drop: keys or tensors left out; quant:
    (tensor, ggml type, raw block bytes) replacing an F32 matrix."""
    qk_norm, post = arch in ("qwen3", "gemma3"), arch in ("gemma2", "gemma3")
    kv = {"general.architecture": (STRING, arch)}
    for suffix, t, v in [("block_count", U32, layers), ("embedding_length", U32, E), ("attention.head_count", U32, 1),
                         ("attention.head_count_kv", U32, 1), ("feed_forward_length", U32, F),
                         ("context_length", U32, 32), ("attention.layer_norm_rms_epsilon", F32, 1e-6),
                         ("attention.key_length", U32, D), ("attention.value_length", U32, D)]:
        kv["%s.%s" % (arch, suffix)] = (t, v)
    if post:
        kv[arch + ".attention.sliding_window"] = (U32, 4)
    if arch == "gemma2":
        kv["gemma2.attn_logit_softcapping"] = (F32, 50.0)
        kv["gemma2.final_logit_softcapping"] = (F32, 30.0)
    if arch == "gemma3":
        kv["gemma3.rope.freq_base"] = (F32, 1e6)
    for k, t, v in meta:
        kv[k] = (t, v)
    for k, (t, v) in spm_vocab_kv(16).items():
        kv.setdefault(k, (t, v))

    def mat(r, c, k):
        return [((i * 7 + k) % 11 - 5) / 50 for i in range(r * c)]

    ts = [("token_embd.weight", (16, E), GGML_F32, mat(16, E, 1)), ("output_norm.weight", (E,), GGML_F32, [1.0] * E)]
    for l in range(layers):
        per = [("attn_norm.weight", (E,)), ("attn_q.weight", (D, E)), ("attn_k.weight", (D, E)),
               ("attn_v.weight", (D, E))]
        per += [("attn_%s.bias" % x, (D,)) for x in "qkv" if arch == "qwen2"]
        per += [("attn_q_norm.weight", (D,)), ("attn_k_norm.weight", (D,))] if qk_norm else []
        per += [("attn_output.weight", (E, D))] + ([("post_attention_norm.weight", (E,))] if post else [])
        per += [("ffn_norm.weight", (E,)), ("ffn_gate.weight", (F, E)), ("ffn_up.weight", (F, E)),
                ("ffn_down.weight", (E, F))] + ([("post_ffw_norm.weight", (E,))] if post else [])
        for k, (suffix, shape) in enumerate(per):
            name = "blk.%d.%s" % (l, suffix)
            if quant and quant[0] == name:
                ts.append((name, shape, quant[1], quant[2]))
            elif len(shape) == 1:
                ts.append((name, shape, GGML_F32, [0.01 if "bias" in suffix else 1.0] * shape[0]))
            else:
                ts.append((name, shape, GGML_F16, mat(shape[0], shape[1], k + l)))
    kvs = [(k, t, v) for k, (t, v) in kv.items() if k not in drop]
    return gguf(kvs, [x for x in ts if x[0] not in drop])


def spm_vocab_kv(n):
    return {k: (t, v) for k, t, v in spm_vocab(n)}


def family_seeds():
    """A good tiny model of each family, and its hostile files (one fault each)."""
    nan = float("nan")

    def blocks(gtype, nblocks, bad):
        """nblocks blocks of a type: varied codes, every scale 0.25, block 1's d (and m / dmin) bad."""
        _, _, _, nbytes, d = next(q for q in QUANT_TYPES if q[1] == gtype)
        rng = random.Random(gtype)
        out = bytearray(rng.getrandbits(8) for _ in range(nblocks * nbytes))
        for b in range(nblocks):
            for off in (d, d + 2) if gtype in (7, 12) else (d,):
                out[b * nbytes + off:b * nbytes + off + 2] = struct.pack("<H", bad if b == 1 else 0x3400)
        return bytes(out)

    g3 = ("gemma3.attention.sliding_window_pattern", U32, 2)
    return {
        "family-qwen2.gguf": tiny_family("qwen2"),
        "family-qwen3.gguf": tiny_family("qwen3", D=32),
        "family-gemma2.gguf": tiny_family("gemma2"),
        "family-gemma3.gguf": tiny_family("gemma3", layers=6, meta=[("gemma3.rope.freq_base_swa", F32, 10000.0)]),
        "family-gemma3-pattern2.gguf": tiny_family("gemma3", meta=[g3]),
        "hostile-gemma2-window0.gguf": tiny_family("gemma2", meta=[("gemma2.attention.sliding_window", U32, 0)]),
        "hostile-gemma3-no-window.gguf": tiny_family("gemma3", meta=[g3], drop=["gemma3.attention.sliding_window"]),
        "hostile-gemma2-softcap-nan.gguf": tiny_family("gemma2", meta=[("gemma2.attn_logit_softcapping", F32, nan)]),
        "hostile-gemma2-final-softcap0.gguf": tiny_family("gemma2", meta=[("gemma2.final_logit_softcapping", F32, 0.0)]),
        "hostile-gemma3-keylen512.gguf": tiny_family("gemma3", meta=[g3, ("gemma3.attention.key_length", U32, 512)]),
        "hostile-qwen3-keylen-vs-q.gguf": tiny_family("qwen3", D=32, meta=[("qwen3.attention.key_length", U32, 16),
                                                                           ("qwen3.attention.value_length", U32, 16)]),
        "hostile-gemma3-no-global.gguf": tiny_family("gemma3", meta=[("gemma3.attention.sliding_window_pattern", U32, 8)]),
        "hostile-gemma3-default-no-global.gguf": tiny_family("gemma3", layers=4),
        "hostile-gemma3-swabase-nan.gguf": tiny_family("gemma3", meta=[g3, ("gemma3.rope.freq_base_swa", F32, nan)]),
        "hostile-qwen3-no-knorm.gguf": tiny_family("qwen3", D=32, drop=["blk.1.attn_k_norm.weight"]),
        "hostile-qwen2-no-bias.gguf": tiny_family("qwen2", drop=["blk.0.attn_v.bias"]),
        "hostile-gemma2-no-postnorm.gguf": tiny_family("gemma2", drop=["blk.1.post_ffw_norm.weight"]),
        "hostile-qwen2-q5_0-nan.gguf": tiny_family("qwen2", F=32, quant=("blk.0.ffn_down.weight", 6,
                                                                         blocks(6, 16, 0x7e00))),
        "hostile-qwen3-q4_K-nan.gguf": tiny_family("qwen3", layers=1, D=32, F=256,
                                                   quant=("blk.0.ffn_down.weight", 12, blocks(12, 16, 0x7e00))),
        "hostile-gemma2-q8_0-inf.gguf": tiny_family("gemma2", F=32, quant=("blk.1.ffn_down.weight", 8,
                                                                           blocks(8, 16, 0x7c00))),
        "hostile-falcon.gguf": tiny_family("falcon"),
    }


# name, ggml type, elements and bytes a block, byte offset of the scale d
QUANT_TYPES = [("q8_0", 8, 32, 34, 0), ("q4_0", 2, 32, 18, 0), ("q4_1", 3, 32, 20, 0), ("q5_0", 6, 32, 22, 0),
               ("q5_1", 7, 32, 24, 0), ("q2_K", 10, 256, 84, 80), ("q3_K", 11, 256, 110, 108),
               ("q4_K", 12, 256, 144, 0), ("q5_K", 13, 256, 176, 0), ("q6_K", 14, 256, 210, 208)]


def quant_blocks():
    """[1, 2 * block] tensors of each block type: random bytes, then d = 0.25
    in block 0 and d = NaN (f16 0x7e00) or inf (0x7c00) in block 1."""
    rng = random.Random(6)
    ts = []
    for i, (name, gtype, elems, nbytes, d) in enumerate(QUANT_TYPES):
        blocks = bytearray(rng.getrandbits(8) for _ in range(2 * nbytes))
        blocks[d:d + 2] = struct.pack("<e", 0.25)
        blocks[nbytes + d:nbytes + d + 2] = struct.pack("<H", 0x7e00 if i % 2 == 0 else 0x7c00)
        ts.append((name, (1, 2 * elems), gtype, bytes(blocks)))
    return gguf([("general.architecture", STRING, "llama")], ts)


def gguf_seeds():
    seeds = {
        "tiny-spm-f32.gguf": tiny_llama(spm_vocab(16), CHATML_SYSTEM),
        "tiny-spm-f16.gguf": tiny_llama(spm_vocab(16), None, GGML_F16, layers=2),
        "tiny-bpe-smollm.gguf": tiny_llama(bpe_vocab(16, "smollm"), CHATML),
        "tiny-bpe-llama3-rope.gguf": tiny_llama(bpe_vocab(16, "llama-bpe"), LLAMA3, rope_freqs=True),
        "meta-only.gguf": gguf([("general.architecture", STRING, "llama"), ("llama.block_count", U32, 2),
                                ("llama.embedding_length", U32, 64), ("llama.attention.head_count", U32, 4),
                                ("llama.feed_forward_length", U32, 128), ("llama.vocab_size", U32, 16)] +
                               spm_vocab(16)),
        "vocab-only.gguf": gguf(bpe_vocab(16, "llama3") + [("tokenizer.chat_template", STRING, LLAMA3)]),
        "empty.gguf": gguf([]),
        "quant-blocks.gguf": quant_blocks(),
    }
    seeds.update(family_seeds())
    for rel in ("tests/fixtures/gguf/meta.gguf", "tests/fixtures/tokenizer/llama_bpe.gguf",
                "tests/fixtures/tokenizer/spm.gguf", "tests/fixtures/tokenizer/bad_merge.gguf",
                "tests/fixtures/tokenizer/bad_bos.gguf"):
        with open(os.path.join(ROOT, rel), "rb") as f:
            seeds["fixture-" + os.path.basename(rel)] = f.read()
    return seeds

# ------------------------------------------------------------------- npy


def npy(descr, shape, payload, version=1, fortran="False"):
    sh = "(" + "".join("%d," % d for d in shape) + ")" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, sh)
    lenfmt, pre = ("<H", 10) if version == 1 else ("<I", 12)
    pad = -(pre + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack(lenfmt, len(header)) + header.encode() + payload


def npy_seeds():
    f4 = lambda n: struct.pack("<%df" % n, *[i / 4 - 1 for i in range(n)])
    return {
        "f32-3.npy": npy("<f4", (3,), f4(3)),
        "f32-2x3.npy": npy("<f4", (2, 3), f4(6)),
        "f32-2x3x4.npy": npy("<f4", (2, 3, 4), f4(24)),
        "f32-1x2x2x2.npy": npy("<f4", (1, 2, 2, 2), f4(8)),
        "f32-0x4.npy": npy("<f4", (0, 4), b""),
        "f32-scalar.npy": npy("<f4", (), f4(1)),
        "i32-4.npy": npy("<i4", (4,), struct.pack("<4i", 1, -2, 3, 2**31 - 1)),
        "i64-3.npy": npy("<i8", (3,), struct.pack("<3q", 0, -1, 2**40)),
        "f32-v2.npy": npy("<f4", (2, 2), f4(4), version=2),
        "f32-fortran.npy": npy("<f4", (2, 2), f4(4), fortran="True"),
        "f32-bigendian.npy": npy(">f4", (2,), struct.pack(">2f", 1, 2)),
        "f32-short.npy": npy("<f4", (4,), f4(3)),
    }

# ------------------------------------------------------------- tokenizer


def tokenizer_seeds():
    texts = [b"Hello world\n", "年假怎么申请？".encode(), b"def f(x):\n    return x * 2  # 1234567\n",
             b"<|im_start|>user\nhi<|im_end|>\n", b"<|begin_of_text|><|start_header_id|>user<|end_header_id|>",
             b"\xff\xfe invalid \xe5\xb9 utf-8 \xc0\x80", b"   \t\t\n\n  spaces  ", b"I'm don't we'll THEY'RE",
             "Ünïcödé çåsé — “quotes” …".encode(), "🙂👍🏽 emoji ZWJ 👩‍💻".encode(), b"a" * 300,
             b"12345678901234567890 3.14159 1e-5", b"", b"\x00\x01\x02 control \x7f"]
    seeds = {}
    for i, t in enumerate(texts):
        for flags in (0, 1, 6, 7):
            seeds["text%02d-flags%d" % (i, flags)] = bytes([flags]) + t
    return seeds

# ------------------------------------------------------------------ chat


def chat_seeds():
    with open(os.path.join(ROOT, "tests/fixtures/model/smollm2/chat_template.jinja"), "rb") as f:
        smollm2 = f.read()
    combos = [(smollm2, None, b"hi"), (smollm2, b"be brief", "年假怎么申请？".encode()),
              (CHATML.encode(), None, b"hello"), (CHATML_SYSTEM.encode(), b"", b""),
              (LLAMA3.encode(), None, b"What is 2+2?"), (LLAMA3.encode(), b"You are terse.", b"<|eot_id|>"),
              (b"{{ messages }}", None, b"unknown template"), (b"<|im_start|>system\\nno end", None, b"x"),
              (b"<|im_start|>system\nplain<|im_end|>", None, b"y")]
    seeds = {}
    for i, (tmpl, system, user) in enumerate(combos):
        seeds["chat%02d" % i] = tmpl + b"\0" + (system + b"\0" + user if system is not None else user)
    return seeds

# ----------------------------------------------------------------- flags


def flags_seeds():
    lists = [["--bool", "--int", "42", "--string", "s"], ["-i", "-5", "--i64", "4611686018427387904"],
             ["--float", "0.5", "--double", "-1e300"], ["--colour", "green", "--colours", "red,blue"],
             ["--ints", "0,1,2,100"], ["--half", "3"], ["-p", "hello", "--chat", "--system", "sys"],
             ["--tokens", "1,2,3", "--special"], ["-f", "-"], ["--help"], ["--int"], ["--bogus"],
             ["--int", "4097"], ["--float", "nan"], ["--ints", ",,"], ["--colours", "red,,"],
             ["--int", "0x10"], ["--double", "1e309"], ["extra"]]
    return {"argv%02d" % i: "\0".join(a).encode() for i, a in enumerate(lists)}


def main():
    targets = {"gguf": gguf_seeds(), "npy": npy_seeds(), "tokenizer": tokenizer_seeds(), "chat": chat_seeds(),
               "flags": flags_seeds()}
    for target, seeds in targets.items():
        d = os.path.join(OUT, target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in sorted(seeds.items()):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print("%s: %d seeds, %d bytes" % (target, len(seeds), sum(map(len, seeds.values()))))


if __name__ == "__main__":
    main()
