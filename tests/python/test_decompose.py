"""ActivationCache.decompose_resid, stack_head_results and apply_ln_to_stack
(TransformerLens's, the batch dimension dropped) on SmolLM2-135M (a 14-token
IOI prompt) and Gemma 3 270M (年假怎么申请？, sandwich norms), and hooks that
return what they were given on Gemma:
  - the parts add up to the cached residual stream: bit for bit when summed in
    the forward's order (the same float32 adds), for every layer, with and
    without mlp_input, and mode "attn" + "mlp" + embed is "all";
  - each head's result is the attention output of a forward call with the
    layer's other heads zeroed, bit for bit (the same matmul on the same rows);
    the heads of a layer sum to its hook_attn_out; with incl_remainder the
    stack sums to the residual;
  - apply_ln: the final residual's parts, each divided by the frozen RMS, sum
    to ln_final.hook_normalized;
  - pos_slice forms agree; Gemma's heads are refused (post-attention norm);
    missing activations are a KeyError naming them.
"""
import numpy as np
import pytest

IOI = "When Mary and John went to the store, John gave a drink to"
LEAVE = "年假怎么申请？"


@pytest.fixture(scope="module")
def smol(smollm2):
    ids = smollm2.tokenize(IOI)
    logits, cache = smollm2.run_with_cache(ids)
    return ids, logits, cache


@pytest.fixture(scope="module")
def gem(gemma3):
    ids = gemma3.tokenize(LEAVE)
    logits, cache = gemma3.run_with_cache(ids)
    return ids, logits, cache


def in_order(stack):
    """stack[0] + stack[1] + ... in float32, left to right (the forward's order)."""
    total = stack[0].copy()
    for part in stack[1:]:
        total = total + part
    return total


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_decompose_resid_adds_up(which, request):
    m = request.getfixturevalue(which)
    _, _, cache = request.getfixturevalue("smol" if which == "smollm2" else "gem")
    L = m.config.n_layer
    for layer in (0, 1, L // 2, L):
        stack, labels = cache.decompose_resid(layer=layer, return_labels=True)
        assert stack.dtype == np.float32 and stack.shape[0] == 1 + 2 * layer and len(labels) == len(stack)
        assert labels[0] == "embed" and (layer == 0 or labels[-1] == f"{layer - 1}_mlp_out")
        want = cache["resid_post", L - 1] if layer == L else cache["resid_pre", layer]
        assert np.array_equal(in_order(stack), want), f"{which} layer {layer}"
        if layer < L:
            mid = cache.decompose_resid(layer=layer, mlp_input=True)
            assert np.array_equal(in_order(mid), cache["resid_mid", layer]), f"{which} mlp_input {layer}"
    attn = cache.decompose_resid(mode="attn", incl_embeds=False)
    mlp = cache.decompose_resid(mode="mlp", incl_embeds=False)
    full = cache.decompose_resid()
    assert np.array_equal(full[1::2], attn) and np.array_equal(full[2::2], mlp)
    assert np.array_equal(full[0], cache["hook_embed"])


def test_decompose_resid_apply_ln_and_pos_slice(smollm2, smol):
    """The final residual's parts / its RMS sum to ln_final.hook_normalized: 1e-5 of
    the largest value (float32 sums of 61 parts against the forward's own norm)."""
    _, _, cache = smol
    parts = cache.decompose_resid(apply_ln=True, pos_slice=-1)
    assert parts.shape == (1 + 2 * smollm2.config.n_layer, smollm2.config.n_embd)
    ln = cache["ln_final.hook_normalized"][-1]
    diff = np.abs(parts.astype(np.float64).sum(0) - ln).max()
    assert diff <= 1e-5 * np.abs(ln).max(), f"max |sum - ln_final| = {diff:.2e}"
    full = cache.decompose_resid(apply_ln=True)
    assert np.array_equal(full[:, -1], parts)
    assert np.array_equal(cache.decompose_resid(pos_slice=(2, 5)), cache.decompose_resid()[:, 2:5])
    assert np.array_equal(cache.decompose_resid(pos_slice=[0, 3]), cache.decompose_resid()[:, [0, 3]])
    scaled = cache.apply_ln_to_stack(cache.decompose_resid(layer=4), layer=4)
    x = cache["resid_pre", 4].astype(np.float64)
    rms = np.sqrt((x * x).mean(-1) + smollm2.config.norm_eps)
    assert np.allclose(in_order(scaled), x / rms[:, None], rtol=0, atol=1e-5 * np.abs(x / rms[:, None]).max())


def test_stack_head_results_are_single_heads(smollm2, smol):
    ids, _, cache = smol
    c = smollm2.config
    L, Hq, n = c.n_layer, c.n_head, len(ids)
    heads, labels = cache.stack_head_results(return_labels=True)
    assert heads.shape == (L * Hq, n, c.n_embd) and heads.dtype == np.float32
    assert labels[:2] == ["L0H0", "L0H1"] and labels[-1] == f"L{L - 1}H{Hq - 1}"
    layer = 5
    for h in (0, 4, Hq - 1):
        others = [(layer, g) for g in range(Hq) if g != h]
        _, alone = smollm2.run_with_cache(ids, names_filter=f"blocks.{layer}.hook_attn_out", zero_heads=others)
        assert np.array_equal(heads[layer * Hq + h], alone["attn_out", layer]), f"L{layer}H{h}"
    worst = max(np.abs(heads[l * Hq:(l + 1) * Hq].astype(np.float64).sum(0) - cache["attn_out", l]).max()
                / np.abs(cache["attn_out", l]).max() for l in range(L))
    assert worst <= 1e-5, f"heads - attn_out, relative to the largest: {worst:.2e}"
    last = cache.stack_head_results(pos_slice=-1)
    assert last.shape == (L * Hq, c.n_embd)
    assert np.abs(last - heads[:, -1]).max() <= 1e-5 * np.abs(heads).max()  # one row through the matmul: ~1e-7
    with_rest, labels = cache.stack_head_results(layer=7, incl_remainder=True, return_labels=True)
    assert labels[-1] == "remainder" and len(with_rest) == 7 * Hq + 1
    assert np.abs(with_rest.astype(np.float64).sum(0) - cache["resid_pre", 7]).max() <= 1e-4
    assert cache.stack_head_results(layer=0).shape == (0, n, c.n_embd)
    ln = cache.stack_head_results(apply_ln=True, pos_slice=-1)
    x = cache["resid_post", L - 1][-1].astype(np.float64)
    assert np.allclose(ln, last / np.sqrt((x * x).mean() + c.norm_eps), rtol=1e-6, atol=0)


def test_what_the_cache_cannot_give(smollm2, gemma3, gem):
    _, _, cache = gem
    with pytest.raises(ValueError, match="post-attention norm"):
        cache.stack_head_results()
    ids = smollm2.tokenize(IOI)
    _, part = smollm2.run_with_cache(ids, names_filter=["hook_embed", "blocks.*.hook_attn_out"])
    with pytest.raises(KeyError, match=r"decompose_resid needs 'blocks\.0\.hook_mlp_out', 'blocks\.1\.hook_mlp_out'"):
        part.decompose_resid(layer=2)
    assert len(part.decompose_resid(layer=2, mode="attn")) == 3
    with pytest.raises(KeyError, match=r"'blocks\.3\.attn\.hook_z'"):
        smollm2.run_with_cache(ids, names_filter=["blocks.0.attn.hook_z", "blocks.1.attn.hook_z", "blocks.2.attn.hook_z"])[1] \
            .stack_head_results(layer=4)
    with pytest.raises(ValueError, match="layer must be in"):
        part.decompose_resid(layer=31)
    with pytest.raises(ValueError, match="mode"):
        part.decompose_resid(mode="heads")


def test_identity_hooks_change_nothing_on_gemma(gemma3, gem):
    """Sandwich norms, QK-norm, sliding layers: hooks that return the array they
    were given, or a float64 copy of it, at every point: logits bit for bit."""
    ids, base, _ = gem
    assert np.array_equal(gemma3.forward(ids), base)
    same = gemma3.run_with_hooks(ids, [(lambda name: not name.endswith("hook_pattern"), lambda act, hook: act)])
    assert np.array_equal(same, base)
    copied = gemma3.run_with_hooks(ids, [(lambda name: not name.endswith("hook_pattern"),
                                          lambda act, hook: act.astype(np.float64))])
    assert np.array_equal(copied, base)
    with pytest.raises(ValueError, match=r"hook blocks\.3\.hook_attn_out: returned shape \(5, 640\), expected \(6, 640\)"):
        gemma3.run_with_hooks(ids, [("blocks.3.hook_attn_out", lambda act, hook: act[1:])])
    with pytest.raises(ValueError, match=r"hook blocks\.3\.attn\.hook_z: returned dtype <U1, expected float32"):
        gemma3.run_with_hooks(ids, [("blocks.3.attn.hook_z", lambda act, hook: np.full(act.shape, "x"))])
    with pytest.raises(ValueError, match="unknown hook name 'blocks.18.hook_resid_pre'"):
        gemma3.run_with_hooks(ids, [("blocks.18.hook_resid_pre", lambda act, hook: None)])
    assert np.array_equal(gemma3.forward(ids), base)
