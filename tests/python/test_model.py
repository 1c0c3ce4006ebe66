"""qkv.Model against the committed transformers fixtures (tests/fixtures,
tools/oracle/*.py; tests/fixtures/model/README.md describes them):
  - logits: full rows and top-5 logits within 5e-3 (the C tests' bound, ~1e-4
    measured: float32 summation order), argmax equal except at exact near-ties
    (top-2 margin < 1e-3); the tiny random Llama-3.1 model (llama3 RoPE, GQA
    4:1, head_dim 128) always, SmolLM2-135M when `make model` fetched it;
  - greedy generation: the 32 ids transformers generates;
  - attention maps: every layer and head against output_attentions=True,
    1e-4 absolute (tests/test_inspect_oracle.c's bound);
  - token ids: SmolLM2's tokenizer.json ids (tests/fixtures/tokenizer).
"""

import subprocess

import numpy as np
import pytest

import qkv
from conftest import FIXTURES, fixture, qkv_cli_bin

LOGIT_TOL = 5e-3
MAP_TOL = 1e-4
TINY = FIXTURES / "model" / "tiny31" / "tiny-llama31.gguf"


def check_logits(rows, d, name, positions):
    """rows [len(positions), V] against the fixture NAME's top-5, argmax and stored rows."""
    top5, top5_l = fixture(*d, f"{name}.top5_ids.npy"), fixture(*d, f"{name}.top5_logits.npy")
    margin, argmax = fixture(*d, f"{name}.margin.npy"), fixture(*d, f"{name}.argmax.npy")
    got5 = np.take_along_axis(rows, top5[positions], axis=1)
    assert np.abs(got5 - top5_l[positions]).max() <= LOGIT_TOL, f"{name}: top-5 logits"
    differ = rows.argmax(axis=1) != argmax[positions]
    assert not np.any(differ & (margin[positions] >= 1e-3)), f"{name}: argmax differs away from a tie"
    stored = fixture(*d, f"{name}.rows_pos.npy")
    want = fixture(*d, f"{name}.rows.npy")
    where = {p: i for i, p in enumerate(positions)}
    for p, row in zip(stored, want):
        if p in where:
            diff = np.abs(rows[where[p]] - row).max()
            assert diff <= LOGIT_TOL, f"{name} row {p}: max |logit - transformers| = {diff:.2e}"


@pytest.fixture(scope="module")
def tiny():
    m = qkv.Model(TINY, ctx=2500, threads=2)
    yield m
    m.close()


def test_tiny_config(tiny):
    c = tiny.config
    assert (c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_vocab) == (2, 8, 2, 128, 512)
    assert c.rope_theta == 500000 and c.rope_pairing == "interleaved" and not c.tied_embeddings
    assert (c.bos, c.n_ctx) == (509, 2500)


@pytest.mark.parametrize("name", ["s1", "s9", "s64"])
def test_tiny_logits_all_rows(tiny, name):
    d = ("model", "tiny31")
    ids = fixture(*d, f"{name}.ids.npy")
    rows = tiny.forward(ids)
    assert rows.shape == (len(ids), 512) and rows.dtype == np.float32
    check_logits(rows, d, name, np.arange(len(ids)))


def test_tiny_logits_chosen_rows(tiny):
    """positions=[...] gives just those rows (any order), equal to the full run's."""
    d = ("model", "tiny31")
    ids = fixture(*d, "s2500.ids.npy")
    positions = np.array([2499, 0, 1024, 599, 2048])
    rows = tiny.forward(ids, positions=positions)
    assert rows.shape == (5, 512)
    check_logits(rows, d, "s2500", positions)
    last = tiny.forward(fixture(*d, "s64.ids.npy"), positions="last")
    assert last.shape == (1, 512)
    check_logits(last, d, "s64", np.array([63]))


def test_tiny_greedy(tiny):
    d = ("model", "tiny31")
    ids = fixture(*d, "s64.ids.npy")
    want = fixture(*d, "gen_s64.ids.npy")
    got = [t for t, _ in tiny.generate(ids, n=len(want))]  # tiny31 never emits its EOS 510 here
    assert got == list(want)


def test_tiny_attention_rows_sum_to_one_and_match_reference(tiny):
    """The maps come from the kernel's LSE; the rows of a causal map sum to 1, and
    layer 0's map is softmax of its own rotated q.k (checked by the C tests); here:
    the lists form [layers, heads, rows, n] equals the single-map form."""
    ids = fixture("model", "tiny31", "s64.ids.npy")
    w = tiny.attention(ids, layer=1, head=5)
    assert w.shape == (64, 64)
    assert np.allclose(w.sum(axis=1), 1, atol=1e-5) and np.all(np.triu(w, 1) == 0)
    W = tiny.attention(ids, layers=[1, 0], heads=[5, 2], rows=[63, 7])
    assert W.shape == (2, 2, 2, 64)
    assert np.array_equal(W[0, 0], w[[63, 7]])
    assert np.array_equal(W[1, 1], tiny.attention(ids, layer=0, head=2)[[63, 7]])


# ------------------------------------------------------------------ SmolLM2

def manifest(name):
    out = {}
    for line in (FIXTURES / "model" / "smollm2" / "manifest.txt").read_text().splitlines():
        f = line.split()
        if f and f[0] == name:
            out[f[1]] = f[2:]
    return out


@pytest.mark.parametrize("name", sorted(manifest("logits")))
def test_smollm2_tokenize_and_logits(smollm2, name):
    d = ("model", "smollm2")
    special = manifest("logits")[name][1] == "1"
    text = (FIXTURES / "model" / "smollm2" / f"{name}.txt").read_text(encoding="utf-8")
    ids = fixture(*d, f"{name}.ids.npy")
    assert np.array_equal(smollm2.tokenize(text, special=special), ids)
    assert smollm2.detokenize(ids) == text
    if len(ids) < 100:  # every row, in one forward call
        check_logits(smollm2.forward(ids), d, name, np.arange(len(ids)))
    else:  # only the stored rows: one forward call up to each
        positions = fixture(*d, f"{name}.rows_pos.npy")
        check_logits(smollm2.forward(ids, positions=positions), d, name, positions)


def test_smollm2_chat_template(smollm2):
    text = (FIXTURES / "model" / "smollm2" / "chat.txt").read_text(encoding="utf-8")
    user = "What is the capital of France, and why is it famous?"
    assert np.array_equal(smollm2.tokenize(user, chat=True), smollm2.tokenize(text, special=True))
    # a system text of one's own replaces the template's (str, as every text argument)
    mine = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
    assert np.array_equal(smollm2.tokenize(user, chat=True, system="Be brief."), smollm2.tokenize(mine, special=True))


def test_generate_stops_where_qkv_run_stops(tiny):
    """tiny31's <|eot_id|> (511) ends a turn but is not its EOS (510): sampled at
    temperature 1 with seed 11 after these ids, it comes as the 20th token, and
    generate stops before it, as `qkv run` does (one rule: qkv_token_ends_turn)."""
    ids, n = [509, 3, 4, 5], 48
    assert tiny.config.eos == 510 and tiny.piece(511) == b"<|eot_id|>"
    got = [t for t, _ in tiny.generate(ids, n=n, temp=1.0, seed=11)]
    run = subprocess.run([str(qkv_cli_bin()), "run", "-m", str(TINY), "--tokens", ",".join(map(str, ids)),
                          "-n", str(n), "--temp", "1", "--seed", "11", "--print-ids", "--threads", "2"],
                         check=True, capture_output=True, text=True)
    assert got == [int(t) for t in run.stdout.split()]
    assert len(got) == 19  # the sampler's next token is 511: an EOS-only stop would have gone on


@pytest.mark.parametrize("name", ["story"])  # (the C tests run all three)
def test_smollm2_greedy(smollm2, name):
    ids = fixture("model", "smollm2", f"{name}.ids.npy")
    want = fixture("model", "smollm2", f"gen_{name}.ids.npy")
    got = list(smollm2.generate(ids, n=len(want)))
    assert [t for t, _ in got] == list(want)
    assert "".join(s for _, s in got) == smollm2.detokenize(want)


def tokenizer_lines():
    out = []
    for line in (FIXTURES / "tokenizer" / "smollm2.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flags, hexed, ids = line.split("\t")[:3]
        out.append((flags, bytes.fromhex(hexed), [int(x) for x in ids.split(",") if x]))
    return out


def test_smollm2_tokenizer_ids(smollm2):
    lines = tokenizer_lines()
    assert len(lines) > 40
    for flags, text, ids in lines:
        got = smollm2.tokenize(text.decode("utf-8", "surrogateescape"), add_special=flags[0] == "1",
                               special=flags[1] == "1")
        assert list(got) == ids, f"{text!r}"


ATTN_PROMPTS = {"zh": ("年假怎么申请？", False), "zh_chat": ("年假怎么申请？", True),
                "en": ("The quick brown fox jumps over the lazy dog.", False)}


@pytest.mark.parametrize("name", sorted(ATTN_PROMPTS))
def test_smollm2_attention_maps(smollm2, name):
    ids = fixture("attention", f"{name}.ids.npy")
    packed = fixture("attention", f"{name}.attn.npy")  # [L, H, n(n+1)/2]: row i keeps keys 0..i
    text, chat = ATTN_PROMPTS[name]
    assert np.array_equal(smollm2.tokenize(text, chat=chat), ids)
    L, H = packed.shape[:2]
    n = len(ids)
    maps = smollm2.attention(ids, layers=list(range(L)), heads=list(range(H)))
    assert maps.shape == (L, H, n, n)
    lower = np.tril_indices(n)
    assert np.all(maps[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)
    diff = np.abs(maps[..., lower[0], lower[1]] - packed).max()
    assert diff <= MAP_TOL, f"{name}: max |w - transformers| = {diff:.2e}"


def test_smollm2_sinks(smollm2):
    """sinks()' weight on token 0 comes from the LSE by another path (n_first dot
    products per row): with every row measured it is the mean of the fixture's column 0."""
    ids = fixture("attention", "en.ids.npy")
    packed = fixture("attention", "en.attn.npy")
    n = len(ids)
    col0 = packed[..., [i * (i + 1) // 2 for i in range(n)]]  # [L, H, n]: w[i, 0]
    s = smollm2.sinks(ids, skip=0, every=1)
    assert s["sink"].shape == packed.shape[:2]
    assert np.all(s["n_rows"] == n) and np.all(s["n_sampled"] == n)
    assert np.abs(s["sink"] - col0.mean(axis=-1)).max() <= MAP_TOL


def test_smollm2_inspect_page_is_the_cli_page(smollm2, tmp_path):
    """Model.inspect gives the page `qkv inspect --html` writes, byte for byte
    (same writer, same embedded page); the maps in it are those tested above."""
    import subprocess

    from conftest import model_path, qkv_cli_bin

    qkv_bin = qkv_cli_bin()
    text = "年假怎么申请？"
    cli_page = tmp_path / "cli.html"
    subprocess.run([str(qkv_bin), "inspect", "-m", str(model_path()), "-p", text, "--html", str(cli_page),
                    "--threads", "2"], check=True, capture_output=True)
    page = smollm2.inspect(text)  # the default title is the CLI's: "<file>: 15 tokens, 30 layers x 9 heads"
    assert page.html == cli_page.read_text(encoding="utf-8")
    assert page.html.startswith("<!DOCTYPE html>") and "<iframe srcdoc=" in page._repr_html_()
    out = tmp_path / "py.html"
    page.save_html(out)
    assert out.read_text(encoding="utf-8") == page.html
    small = smollm2.inspect(smollm2.tokenize(text), layers=[4, 2], heads=[1])
    assert small.layers == [2, 4] and "2 layers x 1 head" in small.html


def ablate_cases():
    out = []
    for line in (FIXTURES / "ablate" / "manifest.txt").read_text().splitlines():
        f = line.split()
        if f and f[0] == "ablate":
            out.append((f[1], int(f[2]), int(f[3]), float(f[4]), int(f[5]), int(f[6])))
    return out


def check_kl(got, want, what):
    """KL within 1e-3 + 1e-2 KL of transformers' (tests/test_ablate.c's bound; ~1e-5 measured)."""
    bad = np.abs(got - want) > 1e-3 + 1e-2 * want
    assert not bad.any(), f"{what}: {bad.sum()} outside, max diff {np.abs(got - want).max():.3g}"


@pytest.mark.parametrize("case", ablate_cases()[1:], ids=lambda c: c[0])  # the shorter prompt (the C tests run both)
def test_smollm2_ablate_against_transformers(smollm2, case):
    """Against tools/oracle/make_ablate_fixtures.py: transformers with its own 4D masks."""
    name, n, target, p_target, layer, head = case
    ids = fixture("ablate", f"{name}.ids.npy")
    r = smollm2.ablate(ids)
    assert (r["target"], r["top_full"]) == (target, target) and abs(r["p_target"] - p_target) < 1e-3
    assert r["kl"].shape == (n,) and r["attn_mean"].shape == (n,)
    check_kl(r["kl"], fixture("ablate", f"{name}.kl_all.npy"), f"{name} all")
    dp = fixture("ablate", f"{name}.dp_all.npy")
    assert np.all(np.abs(r["dp_target"] - dp) <= 1e-3 + 1e-2 * np.abs(dp))
    assert np.array_equal(r["top_after"], fixture("ablate", f"{name}.top_all.npy"))
    assert r["spearman_attn_kl"] is not None and -1 <= r["spearman_attn_kl"] <= 1
    check_kl(smollm2.ablate(ids, scope="last")["kl"], fixture("ablate", f"{name}.kl_last.npy"), f"{name} last")
    # (scoped runs and the zeroed-head map against the same fixtures: tests/test_ablate.c;
    # 270 forwards are too many for this runner on a shared machine)


def test_tiny_ablate_heads_fields(tiny):
    """heads=True: one zeroed head per forward, [L, Hq] fields; the target is the full run's top token."""
    ids = fixture("model", "tiny31", "s9.ids.npy")
    h = tiny.ablate(ids, heads=True)
    assert h["kl"].shape == (2, 8) and h["top_after"].shape == (2, 8) and np.all(h["kl"] >= 0)
    full_top = int(tiny.forward(ids, positions="last")[0].argmax())
    assert h["target"] == h["top_full"] == full_top and 0 < h["p_target"] <= 1
    assert h["kl"].max() > 0  # zeroing some head moves the distribution
