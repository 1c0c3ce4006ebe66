"""Model.patch, Model.attribute and Model.lens (libqkv's qkv_patch,
qkv_attribute, qkv_lens) against independent paths through the same model:
  - patch: components redone by hand with run_with_hooks (the corrupted
    prompt, one activation replaced by the clean run's, a full forward, the
    metric in float64) on Gemma 3 (年假 / 病假, KL and logit[年] - logit[病]) and
    SmolLM2 (the IOI pair, logit[ Mary] - logit[ John]); identities: resid_pre
    of layer 0 at the one differing position recovers exactly 1, at a
    position before it exactly 0;
  - attribute: each part projected through the model's own final norm weight
    and unembedding by a forward whose ln_final.hook_normalized rows are
    replaced by the parts / the frozen RMS (decompose_resid and
    stack_head_results with apply_ln); the parts sum to the logit difference;
  - lens: a middle layer's top-k redone through the same hook; the last
    layer's is the model's own output;
  - bad input (different lengths, an answer of two tokens, an unknown metric or
    sweep, a memory limit too small) is one ValueError, and the model is usable
    after it; the results' pages (inline in Jupyter) hold their heatmaps.
"""
import json
import subprocess

import numpy as np
import pytest

import qkv
from conftest import GEMMA3, at_position, head, log_softmax, qkv_cli_bin, recovery_by_hand

CLEAN, CORRUPT = "年假怎么申请？", "病假怎么申请？"
IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def leave(gemma3):
    """The pair's KL run with every sweep but head_out_pos, and its logit[年] - logit[病]
    run with head_out only (head_out_pos: test_patch_per_position, on a shorter pair)."""
    ci, ki = gemma3.tokenize(CLEAN), gemma3.tokenize(CORRUPT)
    kl = gemma3.patch(CLEAN, CORRUPT)
    ld = gemma3.patch(ci, ki, metric="logit_diff", answer="年", wrong="病", sweeps="head_out")
    return ci, ki, kl, ld


def test_patch_result_fields(gemma3, leave):
    ci, ki, kl, ld = leave
    c, n = gemma3.config, len(ci)
    assert n == len(ki) and (ci != ki).sum() == 1
    assert kl.head_out.shape == (c.n_layer, c.n_head) and kl.head_out.dtype == np.float32
    for name in ("resid_pre", "attn_out", "mlp_out"):
        assert getattr(kl, name).shape == (c.n_layer, n) and getattr(kl, name).dtype == np.float32
        assert np.isfinite(getattr(kl, name)).all()
    assert kl.head_out_pos is None and ld.resid_pre is None  # not swept
    assert np.array_equal(kl.clean_ids, ci) and kl.clean_tokens[1] == "年" and kl.corrupt_tokens[1] == "病"
    assert kl.position_labels()[1] == "年→病"
    assert kl.metric == "kl" and kl.clean == 0 and kl.corrupt > 0
    assert ld.metric == "logit_diff" and ld.answer_piece == "年".encode() and ld.wrong_piece == "病".encode()
    assert ld.clean > ld.corrupt  # 年 over 病 after 年假, the other way round after 病假
    # unchanged, not run: position 0 in every per-position sweep, and layer 0's resid_pre (the
    # embedding) at every position but 年/病's
    assert kl.n_components == c.n_layer * (c.n_head + 3 * n) and kl.n_unchanged == 3 * c.n_layer + n - 2
    assert 0 < kl.layer_token_steps < kl.naive_layer_token_steps
    top = kl.top(5)
    assert len(top) == 5 and abs(top[0][4]) >= abs(top[-1][4])


@pytest.fixture(scope="module")
def short(gemma3):
    """<bos>年 against <bos>病, head_out and head_out_pos."""
    return gemma3.patch("年", "病", sweeps=["head_out", "head_out_pos"])


def test_patch_per_position(gemma3, short):
    """The prompts differ at the last position only, so a head patched there alone is
    the head patched everywhere (the same forward call, bit for bit), and at
    position 0 it is the corrupted run (exactly 0, not run)."""
    r, c = short, gemma3.config
    assert r.head_out_pos.shape == (c.n_layer, c.n_head, 2) and r.resid_pre is None
    assert not r.head_out_pos[:, :, 0].any() and r.n_unchanged == c.n_layer * c.n_head
    assert np.array_equal(r.head_out_pos[:, :, 1], r.head_out)
    assert np.abs(r.head_out).max() > 0.01


def test_patch_is_the_cli_json(short):
    """`qkv patch --json` on the same pair: every array equal bit for bit (the JSON's
    floats are float32 printed with 9 significant digits), the metric's values to
    their printed 10 digits, the tokens and the cost equal."""
    out = subprocess.run([str(qkv_cli_bin()), "patch", "-m", str(GEMMA3), "--clean", "年", "--corrupt", "病",
                          "--sweeps", "head_out,head_out_pos", "--json", "--threads", "2"],
                         check=True, capture_output=True, text=True)
    cli = json.loads(out.stdout)
    for name in ("head_out", "head_out_pos"):
        assert np.array_equal(np.array(cli[name], dtype=np.float32), getattr(short, name)), name
    assert cli["resid_pre"] is None and short.resid_pre is None
    assert cli["clean"] == short.clean and cli["corrupt"] == pytest.approx(short.corrupt, rel=1e-9)
    assert [t["id"] for t in cli["clean_tokens"]] == list(short.clean_ids)
    assert [t["piece"] for t in cli["corrupt_tokens"]] == short.corrupt_tokens
    assert cli["cost"] == dict(layer_token_steps=short.layer_token_steps,
                               naive_layer_token_steps=short.naive_layer_token_steps, n_components=short.n_components)


def test_patch_identities(gemma3, leave):
    """resid_pre of layer 0 at the differing position makes the corrupted run the
    clean one: recovery exactly 1; at position 0 (BOS, the same in both) the run is
    the corrupted one: exactly 0."""
    ci, ki, kl, ld = leave
    pos = int(np.flatnonzero(ci != ki)[0])
    assert kl.resid_pre[0, pos] == 1 and kl.resid_pre[0, 0] == 0
    r = gemma3.patch(ci, ki, metric="logit_diff", answer="年", wrong="病", sweeps="resid_pre")
    assert r.resid_pre[0, pos] == 1 and r.resid_pre[0, 0] == 0


@pytest.mark.parametrize("metric", ["kl", "logit_diff"])
def test_patch_equals_hand_made_gemma(gemma3, leave, metric):
    """Components redone by hand: the head of largest |head_out| (both metrics), and
    for KL resid_pre and mlp_out at the last position and attn_out at 年/病's, each
    within the bound recovery_by_hand derives (conftest.py)."""
    ci, ki, kl, ld = leave
    r = kl if metric == "kl" else ld
    how = "kl" if metric == "kl" else (r.answer, r.wrong)
    l, h = divmod(int(np.argmax(np.abs(r.head_out))), gemma3.config.n_head)
    cases = [(f"blocks.{l}.attn.hook_z", head(h), r.head_out[l, h])]
    if metric == "kl":
        cases += [("blocks.9.hook_resid_pre", at_position(-1), r.resid_pre[9, -1]),
                  ("blocks.12.hook_mlp_out", at_position(-1), r.mlp_out[12, -1]),
                  ("blocks.4.hook_attn_out", at_position(1), r.attn_out[4, 1])]
    for name, replace, got in cases:
        want, tol = recovery_by_hand(gemma3, ci, ki, name, replace, how)
        assert abs(want - got) <= tol, f"{metric} {name}: m.patch {got:.7f}, by hand {want:.7f}, bound {tol:.1e}"


def test_patch_equals_hand_made_smollm2(smollm2):
    """The IOI pair, logit[ Mary] - logit[ John], head_out only: two heads by hand."""
    r = smollm2.patch(IOI_CLEAN, IOI_CORRUPT, metric="logit_diff", answer=" Mary", wrong=" John",
                      sweeps=["head_out"])
    assert r.resid_pre is None and r.attn_out is None and r.mlp_out is None
    assert r.clean > 0 > r.corrupt
    ci, ki = smollm2.tokenize(IOI_CLEAN), smollm2.tokenize(IOI_CORRUPT)
    H = smollm2.config.n_head
    for i in np.argsort(-np.abs(r.head_out), axis=None)[:2]:
        l, h = divmod(int(i), H)
        want, tol = recovery_by_hand(smollm2, ci, ki, f"blocks.{l}.attn.hook_z", head(h), (r.answer, r.wrong))
        assert abs(want - r.head_out[l, h]) <= tol, \
            f"L{l}H{h}: m.patch {r.head_out[l, h]:.7f}, by hand {want:.7f}, bound {tol:.1e}"


def project(m, ids, vectors, answer, wrong):
    """vectors [k, E] (already divided by the final RMS) through the model's own final
    norm weight and unembedding: logit[answer] - logit[wrong] of each, from forward
    calls whose ln_final.hook_normalized rows are the vectors (n at a time)."""
    n = len(ids)
    out = []
    for start in range(0, len(vectors), n):
        chunk = vectors[start:start + n]

        def put(act, hook):
            act[:] = 0
            act[:len(chunk)] = chunk

        logits = m.run_with_hooks(ids, [("ln_final.hook_normalized", put)])
        out += [float(logits[i, answer]) - float(logits[i, wrong]) for i in range(len(chunk))]
    return np.array(out)


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_attribute_against_the_cache(which, request):
    """Each part of m.attribute equals the same part from the cache
    (decompose_resid / stack_head_results with apply_ln) pushed through the model's
    own final weight and unembedding: 1e-5 of the largest |part| (float32 logits
    against the library's double sums; 2e-7 measured); the parts sum to the logit difference within 1e-3
    of its size plus 1e-3 (float32 parts, ~60 of them)."""
    m = request.getfixturevalue(which)
    text, answer, wrong = (IOI_CLEAN, " Mary", " John") if which == "smollm2" else (CLEAN, "年", "病")
    a = m.attribute(text, answer=answer, wrong=wrong)
    ids = m.tokenize(text)
    assert a.answer == m.tokenize(answer, add_special=False)[0] and a.wrong == m.tokenize(wrong, add_special=False)[0]
    logits, cache = m.run_with_cache(ids)
    assert abs(a.logit_diff - (float(logits[-1, a.answer]) - float(logits[-1, a.wrong]))) <= 1e-3
    assert abs(a.total - a.logit_diff) <= 1e-3 * abs(a.logit_diff) + 1e-3, (a.total, a.logit_diff)
    assert abs(a.embed + a.attn.sum() + a.mlp.sum() - a.total) <= 1e-3
    parts = cache.decompose_resid(apply_ln=True, pos_slice=-1)  # embed, 0_attn_out, 0_mlp_out, ...
    want = project(m, ids, parts, a.answer, a.wrong)
    got = np.concatenate([[a.embed], np.stack([a.attn, a.mlp], axis=1).ravel()])
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-5 * scale, f"max |attribute - cache| = {np.abs(got - want).max():.2e}"
    if which == "smollm2":
        assert a.heads_linear
        heads = project(m, ids, cache.stack_head_results(apply_ln=True, pos_slice=-1), a.answer, a.wrong)
        diff = np.abs(a.heads.ravel() - heads).max()
        assert diff <= 1e-5 * np.abs(heads).max(), f"max |heads - stack_head_results| = {diff:.2e}"
        assert np.abs(a.heads.sum(axis=1) - a.attn).max() <= 1e-4 * np.abs(a.attn).max()
    else:
        assert not a.heads_linear and np.isnan(a.heads).all()


def test_attribute_defaults_to_the_top_two(gemma3):
    a = gemma3.attribute(CLEAN)
    logits = gemma3.forward(gemma3.tokenize(CLEAN), positions="last")[0]
    top = np.argsort(-logits, kind="stable")[:2]
    assert (a.answer, a.wrong) == (int(top[0]), int(top[1])) and a.logit_diff > 0


def test_lens_against_the_hook(gemma3):
    ids = gemma3.tokenize(CLEAN)
    c, n = gemma3.config, len(ids)
    lens = gemma3.lens(CLEAN, k=4, target="年")
    assert lens.top_ids.shape == (c.n_layer, n, 4) and lens.top_probs.shape == (c.n_layer, n, 4)
    assert lens.target_prob.shape == (c.n_layer, n) and lens.top_labels[0][0][0]
    own = np.array([np.exp(log_softmax(row)) for row in gemma3.forward(ids)])
    assert np.array_equal(lens.top_ids[-1], np.argsort(-own, axis=1, kind="stable")[:, :4])
    assert np.abs(lens.top_probs[-1] - np.take_along_axis(own, lens.top_ids[-1], axis=1)).max() <= 1e-6
    layer = 9
    _, cache = gemma3.run_with_cache(ids, names_filter=f"blocks.{layer}.hook_resid_post")
    x = cache["resid_post", layer].astype(np.float64)
    normed = (x / np.sqrt((x * x).mean(-1, keepdims=True) + c.norm_eps)).astype(np.float32)

    def put(act, hook):
        act[:] = normed

    p = np.array([np.exp(log_softmax(row)) for row in gemma3.run_with_hooks(ids, [("ln_final.hook_normalized", put)])])
    gap = np.sort(p, axis=1)[:, -1] - np.sort(p, axis=1)[:, -2]
    sure = gap >= 1e-3
    assert np.array_equal(lens.top_ids[layer][sure, 0], p.argmax(axis=1)[sure])
    assert np.abs(lens.top_probs[layer] - np.take_along_axis(p, lens.top_ids[layer], axis=1)).max() <= 1e-5
    target = gemma3.tokenize("年", add_special=False)[0]
    assert np.abs(lens.target_prob[layer] - p[:, target]).max() <= 1e-5
    own = gemma3.lens(ids, k=1)  # the target by default: the model's top-1 at the last position
    assert own.target == own.top_ids[-1, -1, 0] and np.array_equal(own.target_prob[-1, -1], own.top_probs[-1, -1, 0])


def cli_json(*args):
    return json.loads(subprocess.run([str(qkv_cli_bin()), *args, "--json", "--threads", "2"], check=True,
                                     capture_output=True, text=True).stdout)


def test_attribute_and_lens_are_the_cli_json(smollm2, gemma3):
    """`qkv attribute --json` (SmolLM2, heads additive) and `qkv lens --json` (Gemma 3):
    float32 arrays bit for bit (printed with 9 digits), the double sums to their 10
    printed digits, the same tokens."""
    from conftest import model_path
    a = smollm2.attribute(IOI_CLEAN, answer=" Mary", wrong=" John")
    cli = cli_json("attribute", "-m", str(model_path()), "-p", IOI_CLEAN, "--answer", " Mary", "--wrong", " John")
    for name in ("heads", "attn", "mlp"):
        assert np.array_equal(np.array(cli[name], dtype=np.float32), getattr(a, name)), name
    for name in ("embed", "total", "logit_diff"):
        assert cli[name] == pytest.approx(getattr(a, name), rel=1e-9, abs=1e-12), name
    assert (cli["answer"]["id"], cli["wrong"]["id"], cli["heads_linear"]) == (a.answer, a.wrong, a.heads_linear)
    g = gemma3.attribute(CLEAN)
    cli = cli_json("attribute", "-m", str(GEMMA3), "-p", CLEAN)
    assert (cli["answer"]["id"], cli["wrong"]["id"]) == (g.answer, g.wrong) and cli["heads_linear"] is False
    assert np.isnan(g.heads).all() and np.array_equal(np.array(cli["attn"], dtype=np.float32), g.attn)
    lens = gemma3.lens(CLEAN, k=3)
    cli = cli_json("lens", "-m", str(GEMMA3), "-p", CLEAN, "-k", "3")
    assert cli["target"]["id"] == lens.target and [t["id"] for t in cli["tokens"]] == list(lens.ids)
    assert np.array_equal(np.array(cli["top_ids"]), lens.top_ids)
    assert np.array_equal(np.array(cli["top_probs"], dtype=np.float32), lens.top_probs)
    assert np.array_equal(np.array(cli["target_prob"], dtype=np.float32), lens.target_prob)
    assert cli["top_pieces"][12][-1][0] == lens.top_labels[12][-1][0]


def test_bad_input_is_one_value_error(gemma3, smollm2):
    with pytest.raises(ValueError, match="the clean prompt is 6 tokens and the corrupted one 7"):
        gemma3.patch(CLEAN, "病假怎么申请呢？")
    with pytest.raises(ValueError, match=r"answer ' Mary and' is 2 tokens"):
        smollm2.patch(IOI_CLEAN, IOI_CORRUPT, metric="logit_diff", answer=" Mary and", wrong=" John")
    with pytest.raises(ValueError, match='metric must be "kl" or "logit_diff"'):
        gemma3.patch(CLEAN, CORRUPT, metric="kl_div")
    with pytest.raises(ValueError, match="needs answer= and wrong="):
        gemma3.patch(CLEAN, CORRUPT, metric="logit_diff", answer="年")
    with pytest.raises(ValueError, match="go with metric"):
        gemma3.patch(CLEAN, CORRUPT, answer="年", wrong="病")
    with pytest.raises(ValueError, match="sweeps: 'heads'"):
        gemma3.patch(CLEAN, CORRUPT, sweeps=["heads"])
    with pytest.raises(ValueError, match="bytes"):
        gemma3.patch(CLEAN, CORRUPT, per_position=True, max_bytes=1000)
    with pytest.raises(ValueError, match="same metric"):
        gemma3.patch(CLEAN, CLEAN, sweeps="head_out")
    with pytest.raises(ValueError, match=r"wrong '申请吗' is 2 tokens"):
        gemma3.attribute(CLEAN, answer="年", wrong="申请吗")
    with pytest.raises(ValueError, match="k must be"):
        gemma3.lens(CLEAN, k=0)
    with pytest.raises(ValueError, match="empty"):
        gemma3.lens("")
    assert gemma3._c.pos() == 0 and gemma3.patch("年", "病", sweeps="resid_pre").resid_pre[0, 1] == 1


def test_pages(gemma3, smollm2, leave, tmp_path):
    _, _, kl, _ = leave
    page = kl._repr_html_()
    assert page.startswith("<iframe") and "head_out" in page and "年→病" in page
    kl.save_html(tmp_path / "patch.html")
    text = (tmp_path / "patch.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "resid_pre" in text and "<script" not in text
    assert "heads:" not in gemma3.attribute(CLEAN, answer="年", wrong="病")._repr_html_()
    assert "heads:" in smollm2.attribute(IOI_CLEAN)._repr_html_()
    assert "top-1 token" in gemma3.lens(CLEAN, target="年")._repr_html_()


def test_spearman_is_the_library_s():
    assert qkv.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1)
    assert qkv.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1)
    assert qkv.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)  # ties: mean ranks
    assert np.isnan(qkv.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="x has 3 values and y 2"):
        qkv.spearman([1, 2, 3], [1, 2])
