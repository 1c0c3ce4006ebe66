"""Model.stream and Model.needle (the article's second and third cautions):
  - stream: the full variant's NLLs equal -log softmax of Model.forward's
    logits (tested against transformers in test_model.py) within 2e-3;
    nothing evicted (window >= n) gives every variant full's NLLs; a
    re-indexed window equals the original one (RoPE is relative) while
    eviction does change NLLs; KV bytes as rows x layers x 2 x Hkv x D x 4;
    the perplexities equal `qkv stream --json`'s on the same ids;
  - needle: one cell equals `qkv needle --json`'s (reply, needle span, the
    masses per layer, the retrieval ranking), whose masses tests/test_needle.c
    checks against a dense softmax; the reply follows the needle (4817 ->
    9023); bad arguments raise ValueError; a base model without a chat
    template (the tiny gemma3 fixture) answers with chat=False as
    `qkv needle --no-chat` does.
"""
import json
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, model_path, qkv_cli_bin

TEXT = ("The licenses for most software and other practical works are designed to take away your freedom to share "
        "and change the works. By contrast, the GNU General Public License is intended to guarantee your freedom to "
        "share and change all versions of a program--to make sure it remains free software for all its users.")


def qkv_cli(*args):
    r = subprocess.run([str(qkv_cli_bin()), *args, "-m", str(model_path()), "--threads", "2", "--json"], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def nll_from_logits(logits, ids):
    x = logits.astype(np.float64)
    lse = x.max(axis=1) + np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1))
    return lse[:-1] - x[np.arange(len(ids) - 1), ids[1:]]


def test_stream_variants(smollm2):
    ids = smollm2.tokenize(TEXT)[:48]
    s = smollm2.stream(ids, window=16, sinks=4, chunk=8)
    v = {x["name"]: x for x in s["variants"]}
    assert list(v) == ["full", "window/orig", "window/shifted", "sinks/orig", "sinks/shifted", "recompute"]
    want = nll_from_logits(smollm2.forward(ids), ids)
    assert np.abs(v["full"]["nll"] - want).max() < 2e-3
    assert np.abs(v["window/orig"]["nll"] - v["window/shifted"]["nll"]).max() < 2e-3
    assert np.abs(v["sinks/orig"]["nll"] - v["full"]["nll"]).max() > 0.05  # eviction is real
    c = smollm2.config
    row = c.n_layer * 2 * c.n_kv_head * c.head_dim * 4
    assert v["full"]["kv_bytes"] == 47 * row and v["sinks/orig"]["kv_bytes"] == (16 - 1 + 8) * row
    assert s["chunk_nll"].shape == (6, 6) and list(s["chunk_start"]) == [0, 8, 16, 24, 32, 40]
    cli = qkv_cli("stream", "--tokens", ",".join(map(str, ids)), "--window", "16", "--sinks", "4", "--chunk", "8")
    for x in cli["variants"]:
        assert abs(v[x["name"]]["ppl"] - x["ppl"]) <= 1e-3 * x["ppl"], x["name"]
    wide = smollm2.stream(ids, window=64, sinks=4, chunk=8)
    for x in wide["variants"]:
        assert np.abs(x["nll"] - v["full"]["nll"]).max() < 2e-3, x["name"]


def test_needle_cell_equals_the_cli(smollm2):
    got = smollm2.needle(lengths=[256], depths=[50])
    cli = qkv_cli("needle", "--lengths", "256", "--depths", "50")
    a, b = got["cells"][0], cli["cells"][0]
    assert a["correct"] and b["correct"] and "4817" in a["answer"]
    assert a["answer"] == b["answer"] and a["tokens"] == b["tokens"] and a["needle_pos"] == b["needle_pos"]
    assert a["answer_step"] == b["answer_step"]
    for k in ("needle_mass_by_layer", "needle_mass_mean_by_layer", "answer_mass_by_layer"):
        assert np.abs(np.asarray(a[k]) - np.asarray(b[k])).max() < 1e-5, k
    top = [(h["layer"], h["head"]) for h in got["retrieval_heads"][:5]]
    assert top == [(h["layer"], h["head"]) for h in cli["retrieval_heads"][:5]]
    assert got["retrieval"].shape == (smollm2.config.n_layer, smollm2.config.n_head)


def test_needle_reply_follows_the_needle(smollm2):
    got = smollm2.needle(lengths=[256], depths=[50], needle="The secret number that unlocks the archive is 9023.",
                         answer="9023")
    assert got["cells"][0]["correct"], got["cells"][0]["answer"]


@pytest.mark.parametrize("kw, msg", [
    (dict(depths=[101]), "depths"),
    (dict(lengths=[99999]), "lengths"),
    (dict(answer="1234"), "not in the needle"),
    (dict(needle="The licence says: program.", answer="program"), "already in the haystack"),
    (dict(haystack="A tiny haystack."), "not shorter"),
    (dict(lengths=[40]), "needs"),
])
def test_needle_bad_arguments(smollm2, kw, msg):
    with pytest.raises(ValueError, match=msg):
        smollm2.needle(**{"lengths": [256], "depths": [50], **kw})


def test_needle_plain_on_a_base_model():
    import qkv

    path = FIXTURES / "families" / "gemma3" / "model.gguf"
    kw = dict(lengths=[96], depths=[0, 100], needle="Key is 42.", question="Key?", answer="42", max_answer=3)
    with qkv.Model(path, ctx=96, threads=2) as m:
        with pytest.raises(ValueError, match="no tokenizer.chat_template"):
            m.needle(**kw)
        with pytest.raises(ValueError, match="system turn needs the chat template"):
            m.needle(chat=False, system="Be brief.", **kw)
        got = m.needle(chat=False, **kw)
    r = subprocess.run([str(qkv_cli_bin()), "needle", "-m", str(path), "--lengths", "96", "--depths", "0,100", "--needle",
                        "Key is 42.", "--question", "Key?", "--answer", "42", "--max-answer", "3", "--no-chat",
                        "--threads", "2", "--json"], check=True, capture_output=True, text=True)
    cli = json.loads(r.stdout)
    assert got["chat"] is False and cli["chat"] is False
    for a, b in zip(got["cells"], cli["cells"], strict=True):
        assert a["tokens"] == b["tokens"] and a["needle_pos"] == b["needle_pos"] and a["answer"] == b["answer"]
        assert np.abs(np.asarray(a["needle_mass_by_layer"]) - np.asarray(b["needle_mass_by_layer"])).max() < 1e-5
