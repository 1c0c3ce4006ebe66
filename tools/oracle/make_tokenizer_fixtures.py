#!/usr/bin/env python3
"""Golden token ids for tests/test_tokenizer.c, from Hugging Face transformers /
tokenizers building tokenizers out of the same GGUF files qkv reads.

    PY=/work/oracle-venv/bin/python
    $PY tools/oracle/make_tokenizer_fixtures.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--out tests/fixtures/tokenizer]

Writes, under --out:
  smollm2.txt      ids of SmolLM2-135M-Instruct (byte-level BPE, tokenizer.ggml.pre "smollm")
  llama_bpe.gguf   a tiny synthetic Llama-3-style vocabulary (byte-level BPE trained here,
                   tokenizer.ggml.pre "llama-bpe", <|begin_of_text|> BOS, control tokens)
  llama_bpe.txt    its ids
  spm.gguf         a tiny synthetic SentencePiece-style vocabulary ("llama": scores, <0xXX>
                   byte fallback, add_space_prefix)
  spm.txt          its ids
  bad_*.gguf       vocabularies the loader must refuse (pre "tekken", a merge of unknown
                   tokens, model "bert", a BOS id out of range)
  splits.txt       pre-tokenizer pieces (gpt2, smollm, llama3, qwen2) from HF tokenizers'
                   own pre-tokenizers on hand-picked and random strings

Ids file format, one case per line (lines starting with '#' are comments; each
case is preceded by a '#' line showing the text with Python escapes):

    <add_special><parse_special> TAB <text as hex bytes> TAB <ids> TAB <transformers ids>

add_special / parse_special are 0 or 1 (the arguments of qkv_tokenize); ids are
comma separated (empty for none). The last field is "=" when transformers' GGUF
tokenizer gives the same ids, else its ids: see "Two oracles" below.

splits.txt: <pre> TAB <text as hex> TAB <piece end byte offsets, comma separated>.

Two oracles. `AutoTokenizer.from_pretrained(dir, gguf_file=...)` is transformers'
reconstruction of a tokenizer from GGUF metadata. Where it is known to differ
from the tokenizer the model was trained with (and which llama.cpp implements),
the expected ids come from that original tokenizer, built with HF tokenizers by
changing one component of transformers' reconstruction; the transformers ids
are kept in the last column so the difference stays visible:
  smollm2    transformers has no split for pre "smollm" and uses plain GPT-2
             ByteLevel; SmolLM2's tokenizer.json (and llama.cpp) first isolate
             every digit (Digits(individual_digits=True)). Texts with a space
             run before a digit differ.
  llama_bpe  transformers' BPE merges every word; Llama-3's tokenizer.json
             (and llama.cpp) have ignore_merges=True: a word that is a token is
             taken whole.
  spm        transformers uses Metaspace(prepend_scheme="first"), which adds no
             "▁" to text that starts with a space nor after a special token;
             sentencepiece, Llama-2's tokenizer.json (normalizer Prepend("▁") +
             Replace(" ", "▁")) and llama.cpp do.
Everything is deterministic: rerunning with the pinned versions
(requirements.txt) rewrites the same files.
"""
import argparse
import json
import os
import random
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS  # noqa: E402
from transformers.convert_slow_tokenizer import bytes_to_unicode  # noqa: E402

LLAMA3_SPLIT = GGUF_PRE_TOKENIZER_SPLITS["llama-bpe"]
QWEN2_SPLIT = GGUF_PRE_TOKENIZER_SPLITS["qwen2"]
BYTE_OF = {c: b for b, c in bytes_to_unicode().items()}

# --------------------------------------------------------------------- texts

# The SmolLM2 list: English, Chinese, mixed scripts, emoji, code, digit runs,
# whitespace runs (tabs, CR LF, trailing spaces), contractions, special tokens.
# (add_special, parse_special, text)
SMOLLM2_CASES = [
    (1, 0, "Hello, world!"),
    (1, 0, "The quick brown fox jumps over the lazy dog."),
    (1, 0, "年假怎么申请？"),
    (1, 0, "我想请三天年假，需要提前多久申请？"),
    (1, 0, "Привет, как дела? Всё хорошо."),
    (1, 0, "こんにちは世界、カタカナとひらがな"),
    (1, 0, "안녕하세요, 반갑습니다"),
    (1, 0, "مرحبا بالعالم"),
    (1, 0, "Mixed: English, 中文, русский, ελληνικά, עברית and हिन्दी."),
    (1, 0, "Emoji: 😀👍🏽🎉 ❤️ 🇨🇳"),
    (1, 0, "👨‍👩‍👧‍👦 family 🧑🏿‍💻"),
    (1, 0, "def add(a, b):\n    return a + b\n"),
    (1, 0, "for (int i = 0; i < n; i++) {\n\tsum += x[i];\n}\n"),
    (1, 0, '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); return 0; }'),
    (1, 0, "1234567890"),
    (1, 0, "Pi is 3.14159265358979 and e is 2.71828."),
    (1, 0, "In 2024, 1,000,000 people paid $19.99 (or €18,50)."),
    (1, 0, "  12  345   6789"),
    (1, 0, "items:\n    1. first\n    2. second\n        10. nested"),
    (1, 0, "a  b   c    d     e"),
    (1, 0, "\t\ttabs\tand  spaces \t mixed"),
    (1, 0, "line1\r\nline2\r\n\r\nline3\n"),
    (1, 0, "trailing spaces   "),
    (1, 0, "   leading spaces"),
    (1, 0, "\n\n\nnewlines\n\n"),
    (1, 0, "I'm sure they'll say it's fine, don't you think? We've seen it'd work."),
    (1, 0, "DON'T SHOUT, I'LL LISTEN; she'S here"),
    (1, 1, "<|im_start|>user\n年假怎么申请？<|im_end|>\n<|im_start|>assistant\n"),
    (1, 0, "<|im_start|>user\nHello<|im_end|>"),
    (1, 1, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"),
    (1, 1, "<|endoftext|>text<|im_end|><|im_end|> <repo_name>x<filename>"),
    (1, 1, "a<|im_start|>b <|im_end|> c"),
    (1, 0, "naïve café résumé Ångström façade"),
    (1, 0, "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#top"),
    (1, 0, "x²+y³=z⁴, ½ of Ⅻ, ٣ and ३"),
    (1, 0, ""),
    (1, 0, " "),
    (1, 0, "a\u00a0b\u3000c\u2028d\u200be"),
    (1, 0, "a" * 64),
    (1, 0, "## Title\n\n- item **bold** _it_ `code`\n\n> quote\n"),
    (1, 0, '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}'),
    (1, 0, "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;"),
    (1, 0, "!!!???...,,,;;;:::---___"),
    (1, 0, "The year 1999 ended; 2000 began at 00:00:00."),
    (1, 0, "bytes without a token: a\x04b\x06c\x7fd"),
]

SYNTH_CASES = [
    (1, 0, "Hello world"),
    (0, 0, "Hello world"),
    (1, 0, "the theory of the thing"),
    (1, 0, "I'm sure they'll say it's fine, don't you think?"),
    (1, 0, "IT'S LOUD, WE'LL SEE"),
    (1, 0, "1234567 and 89"),
    (1, 0, "  12  345   6789"),
    (1, 0, "a  b   c    d"),
    (1, 0, "\t\ttabs\tand  spaces \t"),
    (1, 0, "line1\r\nline2\r\n\r\nline3\n"),
    (1, 0, "trailing spaces   "),
    (1, 0, "   leading spaces"),
    (1, 0, " one leading space"),
    (1, 0, "\n\nnewlines\n"),
    (1, 0, "年假怎么申请？"),
    (1, 0, "Mixed: English, 中文, русский."),
    (1, 0, "Emoji 😀👍🏽 done"),
    (1, 0, "def f(x):\n    return x * 2  # double\n"),
    (1, 0, "for (i = 0; i < n; i++) { s += a[i]; }"),
    (1, 0, "naïve café"),
    (1, 0, "!!!???...;;;"),
    (1, 0, ""),
    (0, 0, ""),
    (1, 0, " "),
    (1, 0, "x²+y³ ½"),
    (1, 0, "the"),
    (1, 0, "encyclopedia"),
    (1, 0, "hello hello hello"),
    (1, 0, "Über straße"),
    (1, 0, "a" * 40),
]

LLAMA_BPE_SPECIAL_CASES = [
    (1, 0, "a zebra and a quokka"),
    (1, 0, "zebra quokkas"),
    (1, 1, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"),
    (1, 0, "<|start_header_id|>user<|end_header_id|>"),
    (0, 1, "x<|eot_id|>y <|eot_id|> z"),
    (1, 0, "think: <think>why</think>"),
    (1, 1, "<|eot_id|><|eot_id|>"),
]

SPM_SPECIAL_CASES = [
    (1, 1, "<s>hello</s>"),
    (1, 1, "hello <s> world"),
    (1, 0, "hello <s> world"),
    (0, 1, "a</s>b"),
    (1, 1, "<unk>x"),
]

# The corpus the synthetic vocabularies are trained on.
CORPUS = [
    "The theory of the thing is that the other things are there.",
    "Hello world! Hello there, hello again. The world is wide and the sea is deep.",
    "I'm sure they'll say it's fine, don't you think? We've seen it'd work, we'd hope.",
    "In the beginning there was the word, and the word was with the writer.",
    "Encyclopedia entries describe the history of thinking, theology and theatre.",
    "def function(x):\n    return x * 2\n\nfor i in range(10):\n    print(i, function(i))\n",
    "int main(void) { for (int i = 0; i < n; i++) { sum += a[i]; } return sum; }",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 123 1000 2024 3.14 42.",
    "Mixed scripts: русский текст, ελληνικά, 中文文本, 年假, 申请, こんにちは.",
    "Über die Straße gehen, naïve café, résumé, façade, Ångström.",
    "   indented line\n\tTabbed line\n\n\nthree newlines\r\nwindows line\r\n",
    "she sells sea shells by the sea shore; the shells she sells are sea shells.",
    "To be, or not to be, that is the question: whether 'tis nobler in the mind.",
    "hello hello hello world world world the the the and and and",
    "Questions? Answers! Ellipsis... Dashes -- and (parentheses) [brackets] {braces}.",
]
CORPUS = CORPUS * 3

# Random strings for the pre-tokenizer splits: atoms that poke at each
# alternative of the regexes (classes, contractions in both cases, every kind
# of White_Space, CR/LF, numbers of the three N categories, marks, emoji).
ATOMS = (list("abcXYZ") + ["the", "Hello", "I", "'s", "'S", "'t", "'re", "'VE", "'ll", "'d", "'m", "'x", "'",
         "0", "7", "12", "345", "2024", "²", "½", "Ⅻ", "٣", "३",
         " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\x0b", "\x0c",
         "\u200b", "\x1c", ".", ",", "!", "?", "...", "-", "_", "(", ")", "<", ">", "/", "\\", "\"", "#", "$",
         "é", "ß", "Ω", "я", "年", "假", "の", "한", "\u0301", "😀", "👍🏽", "ſ", "K", "ŉ", "ǅ"])
SPLIT_TEXTS = [
    "Hello, world!", "I'm sure they'll say it's fine, don't you think?", "DON'T SHOUT I'LL 'S 'Re",
    "  12  345   6789", "1234567890", "x²+y³=z⁴ ½ Ⅻ ٣ ३", "a  b   c    d", "\t\ttabs\tand  spaces ",
    "line1\r\nline2\r\n\r\nline3\n", "trailing   ", "   leading", "\n\n\nx\n\n", " \n ", "a \n b",
    "a\u00a0b\u3000c\u2028d\u200be\x1cf", "年假怎么申请？", "Emoji 😀👍🏽 done", "def f(x):\n    return x\n",
    "...\n\n", "?!\r\n\r\nx", " ?!", "'s", "'ſ", "'", "''s", "x's", "\u0301a", "a\u0301b", "", " ", "  ", "\n",
    "1 2  3   4", "a1b22c333d4444", "$19.99", " $ ", "—dash—", "<|im_start|>user", "\x00\x01\x7f",
]


def random_texts(rng, n):
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 16))))
    return out


# ------------------------------------------------------------------ helpers


def hexs(s):
    return s.encode("utf-8").hex()


def ids_str(ids):
    return ",".join(str(i) for i in ids)


def load_hf(path):
    d, name = os.path.split(os.path.abspath(path))
    return AutoTokenizer.from_pretrained(d, gguf_file=name)


def edited_backend(hf, edit):
    """HF tokenizers' Tokenizer rebuilt from transformers' one with one JSON edit."""
    j = json.loads(hf.backend_tokenizer.to_str())
    edit(j)
    return Tokenizer.from_str(json.dumps(j))


def hf_ids(hf, text, add_special, parse_special):
    return hf(text, add_special_tokens=bool(add_special), split_special_tokens=not parse_special)["input_ids"]


def native_ids(tok, text, add_special, parse_special):
    tok.encode_special_tokens = not parse_special
    return tok.encode(text, add_special_tokens=bool(add_special)).ids


def write_ids(path, title, cases, hf, native):
    lines = [f"# {title}", "# add_special parse_special <TAB> text hex <TAB> ids <TAB> transformers ids or '='"]
    n_diff = 0
    for add, special, text in cases:
        want = native_ids(native, text, add, special) if native else hf_ids(hf, text, add, special)
        got_hf = hf_ids(hf, text, add, special)
        same = want == got_hf
        n_diff += not same
        lines.append(f"# {text!r}" + ("" if same else "  (transformers differs)"))
        lines.append(f"{add}{special}\t{hexs(text)}\t{ids_str(want)}\t{'=' if same else ids_str(got_hf)}")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(cases)} cases, transformers differs on {n_diff}")


# ------------------------------------------------------------------- SmolLM2


def smollm2(model, out):
    hf = load_hf(model)

    def digits_then_bytelevel(j):
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}

    native = edited_backend(hf, digits_then_bytelevel)
    write_ids(os.path.join(out, "smollm2.txt"),
              "SmolLM2-135M-Instruct.Q4_1.gguf (sha256 in models.sha256); ids: SmolLM2's tokenizer.json "
              "pre-tokenizer (Digits + ByteLevel)", SMOLLM2_CASES, hf, native)


# --------------------------------------------------------- synthetic vocabs


def write_gguf(path, tokens, types, scores=None, merges=None, model="gpt2", pre=None, bos=None, eos=None,
               unk=None, add_bos=None, add_space_prefix=None):
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_head_count(1)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if unk is not None:
        w.add_unk_token_id(unk)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_bpe(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    # Whole words no merge sequence reaches: only ignore_merges takes them whole.
    tokens += ["\u0120zebra", "quokka"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    for s in specials:
        tokens.append(s)
        types.append(gguf.TokenType.CONTROL)
    for s in ["<think>", "</think>"]:
        tokens.append(s)
        types.append(gguf.TokenType.USER_DEFINED)
    bos = tokens.index("<|begin_of_text|>")
    eos = tokens.index("<|eot_id|>")
    path = os.path.join(out, "llama_bpe.gguf")
    write_gguf(path, tokens, types, merges=merges, pre="llama-bpe", bos=bos, eos=eos, add_bos=True)
    hf = load_hf(path)

    def ignore_merges(j):
        j["model"]["ignore_merges"] = True

    native = edited_backend(hf, ignore_merges)
    write_ids(os.path.join(out, "llama_bpe.txt"),
              f"llama_bpe.gguf: {len(tokens)} tokens, {len(merges)} merges, pre llama-bpe; ids: BPE with "
              "ignore_merges (Llama-3's tokenizer.json)", SYNTH_CASES + LLAMA_BPE_SPECIAL_CASES, hf, native)


def spm(out):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False, special_tokens=["<unk>"])
    # trained without the non-Latin line, so CJK, Cyrillic and emoji take the byte fallback
    tok.train_from_iterator([t for t in CORPUS if max(map(ord, t)) < 0x300], trainer)
    j = json.loads(tok.to_str())
    learned = [t for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]) if t != "<unk>"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)
    # Llama-2's convention: a piece's score is minus its merge order, so that
    # merging by score (sentencepiece, llama.cpp) and by rank (HF) agree.
    for i, t in enumerate(learned):
        tokens.append(t)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-float(i))
    path = os.path.join(out, "spm.gguf")
    write_gguf(path, tokens, types, scores=scores, model="llama", bos=1, eos=2, unk=0, add_bos=True,
               add_space_prefix=True)
    hf = load_hf(path)

    def legacy(j):
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "},
                                                       "content": "\u2581"}]}
        j["pre_tokenizer"] = None

    native = edited_backend(hf, legacy)
    write_ids(os.path.join(out, "spm.txt"),
              f"spm.gguf: {len(tokens)} tokens with scores, <0xXX> byte fallback; ids: Llama-2's tokenizer.json "
              "layout (Prepend + Replace normalizer)", SYNTH_CASES + SPM_SPECIAL_CASES, hf, native)


# -------------------------------------------------------------------- splits


def pieces_bytelevel(pre, text):
    ends, total = [], 0
    for piece, _ in pre.pre_tokenize_str(text):
        total += len(bytes(BYTE_OF[c] for c in piece))
        ends.append(total)
    return ends


def pieces_plain(pre, text):
    ends, total, pieces = [], 0, pre.pre_tokenize_str(text)
    assert "".join(p for p, _ in pieces) == text, (text, pieces)
    for piece, _ in pieces:
        total += len(piece.encode("utf-8"))
        ends.append(total)
    return ends


def splits(out):
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pres = {
        "gpt2": lambda s: pieces_bytelevel(bl, s),
        "smollm": lambda s: pieces_bytelevel(pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True), bl]), s),
        "llama3": lambda s: pieces_plain(pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"), s),
        "qwen2": lambda s: pieces_plain(pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), s),
    }
    texts = SPLIT_TEXTS + random_texts(random.Random(20260101), 120)
    lines = ["# pre <TAB> text hex <TAB> piece end byte offsets (HF tokenizers pre-tokenizers)",
             f"# llama3 = {LLAMA3_SPLIT}", f"# qwen2  = {QWEN2_SPLIT}"]
    for name, fn in pres.items():
        for t in texts:
            ends = fn(t)
            assert not t or ends[-1] == len(t.encode("utf-8")), (name, t, ends)
            lines.append(f"{name}\t{hexs(t)}\t{ids_str(ends)}")
    path = os.path.join(out, "splits.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(texts)} texts x {len(pres)} pre-tokenizers")


def bad_ggufs(out):
    """Files the loader must refuse: each differs from a good vocabulary in one key."""
    tokens = [bytes_to_unicode()[b] for b in range(256)] + ["ab"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    write_gguf(os.path.join(out, "bad_pre.gguf"), tokens, types, merges=["a b"], pre="tekken")
    write_gguf(os.path.join(out, "bad_merge.gguf"), tokens, types, merges=["a b", "ab zz"], pre="gpt2")
    write_gguf(os.path.join(out, "bad_model.gguf"), tokens, types, model="bert")
    write_gguf(os.path.join(out, "bad_bos.gguf"), tokens, types, merges=["a b"], bos=len(tokens))
    print(f"{out}/bad_*.gguf: 4 files")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    splits(args.out)
    bad_ggufs(args.out)
    llama_bpe(args.out)
    spm(args.out)
    if os.path.exists(args.model):
        smollm2(args.model, args.out)
    else:
        print(f"{args.model} missing: smollm2.txt not written (run `make model`)", file=sys.stderr)


if __name__ == "__main__":
    main()
