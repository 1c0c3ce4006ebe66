"""Model.run_with_cache / run_with_hooks (TransformerLens's names, the batch
dimension dropped) and forward(zero_heads=) on SmolLM2-135M, 10 tokens:
  - the cache: every name of Model.hook_names, in forward order, with
    TransformerLens's shapes; the residual stream adds up; hook_pattern is
    Model.attention's map and hook_z is pattern @ v;
  - the hooks add nothing by being there: logits bit for bit the plain
    forward's, with an identity hook at every point;
  - an intervention through a hook equals the C path's (zeroed heads), and
    lasts for its call only;
  - errors: unknown names, a wrong shape or dtype, a value returned at
    hook_pattern, an exception raised in a hook (propagated as raised); the
    model is usable after each.
Exact comparisons where both sides do the same float32 operations; the
tolerances elsewhere are said where they are used.
"""
import numpy as np
import pytest

from conftest import fixture


@pytest.fixture(scope="module")
def run(smollm2):
    """ids, the plain forward's logits [n, V] and run_with_cache's (logits, cache) of every point."""
    ids = fixture("attention", "en.ids.npy")
    base = smollm2.forward(ids)
    logits, cache = smollm2.run_with_cache(ids)
    return ids, base, logits, cache


def test_cache_names_and_shapes(smollm2, run):
    ids, _, logits, cache = run
    c, n = smollm2.config, len(ids)
    E, Hq, Hkv, D, L = c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.n_layer
    names = smollm2.hook_names
    assert len(names) == 2 + 12 * L and names[0] == "hook_embed" and names[-1] == "ln_final.hook_normalized"
    assert list(cache) == names  # every point, in the order the forward reaches them
    want = {"hook_resid_pre": (n, E), "attn.hook_q": (n, Hq, D), "attn.hook_k": (n, Hkv, D),
            "attn.hook_v": (n, Hkv, D), "attn.hook_rot_q": (n, Hq, D), "attn.hook_rot_k": (n, Hkv, D),
            "attn.hook_pattern": (Hq, n, n), "attn.hook_z": (n, Hq, D), "hook_attn_out": (n, E),
            "hook_resid_mid": (n, E), "hook_mlp_out": (n, E), "hook_resid_post": (n, E)}
    for name in names:
        a = cache[name]
        point = name.split(".", 2)[2] if name.startswith("blocks.") else None
        assert a.dtype == np.float32 and a.shape == (want[point] if point else (n, E)), name
        assert np.isfinite(a).all(), name
    assert logits.shape == (n, c.n_vocab) and logits.dtype == np.float32
    assert cache["pattern", 3] is cache["blocks.3.attn.hook_pattern"]
    assert cache["resid_pre", 0] is cache["blocks.0.hook_resid_pre"]
    with pytest.raises(KeyError, match="blocks.99.attn.hook_z"):
        cache["z", 99]


def test_cache_logits_are_the_forward_logits(run):
    _, base, logits, _ = run
    assert np.array_equal(logits, base)


def test_cache_residual_stream_adds_up(smollm2, run):
    """resid_pre[0] = embed; resid_mid = resid_pre + attn_out and resid_post = resid_mid
    + mlp_out exactly (the forward's own float32 adds, x += h); resid_post[L] is
    resid_pre[L+1] (the same stream)."""
    _, _, _, cache = run
    L = smollm2.config.n_layer
    assert np.array_equal(cache["hook_embed"], cache["resid_pre", 0])
    for layer in range(L):
        assert np.array_equal(cache["resid_mid", layer], cache["resid_pre", layer] + cache["attn_out", layer]), layer
        assert np.array_equal(cache["resid_post", layer], cache["resid_mid", layer] + cache["mlp_out", layer]), layer
        if layer + 1 < L:
            assert np.array_equal(cache["resid_post", layer], cache["resid_pre", layer + 1]), layer


def test_cache_ln_final_is_the_last_stream_normed(smollm2, run):
    """ln_final.hook_normalized = resid_post[L-1] / rms, before the norm's weight (as
    TransformerLens's RMSNorm); 1e-5 of the largest value: float32 rounding of the
    norm (~1e-6 measured)."""
    _, _, _, cache = run
    r = cache["resid_post", smollm2.config.n_layer - 1].astype(np.float64)
    normed = r / np.sqrt((r * r).mean(axis=-1, keepdims=True) + smollm2.config.norm_eps)
    ln = cache["ln_final.hook_normalized"].astype(np.float64)
    diff = np.abs(normed - ln).max()
    assert diff <= 1e-5 * np.abs(ln).max(), f"max |resid_post / rms - ln_final| = {diff:.2e}"


def test_cache_pattern_and_z(smollm2, run):
    """hook_pattern is Model.attention's map bit for bit (the same weights from the
    same q, K and LSE); hook_z[:, h] = pattern[h] @ v[:, h // group] within 1e-4
    (the weights from the LSE carry ~1e-6 relative error, |v| < 10; ~2e-5 measured)."""
    ids, _, _, cache = run
    c = smollm2.config
    L, H, g = c.n_layer, c.n_head, c.n_head // c.n_kv_head
    maps = smollm2.attention(ids, layers=list(range(L)), heads=list(range(H)))
    assert np.array_equal(maps, np.stack([cache["pattern", layer] for layer in range(L)]))
    worst = 0.0
    for layer in range(L):
        p, v, z = cache["pattern", layer], cache["v", layer], cache["z", layer]
        for h in range(H):
            want = p[h].astype(np.float64) @ v[:, h // g].astype(np.float64)
            worst = max(worst, float(np.abs(want - z[:, h]).max()))
    assert worst <= 1e-4, f"max |pattern @ v - z| = {worst:.2e}"


def test_names_filter_forms(smollm2, run):
    ids, base, _, full = run
    logits, cache = smollm2.run_with_cache(ids, names_filter=["blocks.*.attn.hook_z", "hook_embed"])
    assert list(cache) == ["hook_embed"] + [f"blocks.{layer}.attn.hook_z" for layer in range(smollm2.config.n_layer)]
    assert np.array_equal(logits, base)
    assert all(np.array_equal(cache[k], full[k]) for k in cache)
    _, cache = smollm2.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_pattern"))
    assert len(cache) == smollm2.config.n_layer and np.array_equal(cache["pattern", 7], full["pattern", 7])
    _, cache = smollm2.run_with_cache(ids, names_filter="ln_final.hook_normalized")
    assert list(cache) == ["ln_final.hook_normalized"]
    with pytest.raises(ValueError, match=r"'blocks\.30\.hook_resid_pre', 'hook_pattern'"):
        smollm2.run_with_cache(ids, names_filter=["blocks.30.hook_resid_pre", "hook_embed", "hook_pattern"])
    with pytest.raises(ValueError, match="unknown hook name 'blocks.3.attn.hook_x'"):
        smollm2.run_with_hooks(ids, [("blocks.3.attn.hook_x", lambda a, h: None)])


def test_hooks_see_every_point_in_order(smollm2, run):
    ids, base, _, full = run
    seen = []

    def record(act, hook):
        seen.append((hook.name, hook.layer))
        assert np.array_equal(act, full[hook.name])

    logits = smollm2.run_with_hooks(ids, [(lambda name: True, record)])
    names = smollm2.hook_names
    assert [s[0] for s in seen] == names
    assert [s[1] for s in seen] == [None] + [int(k.split(".")[1]) for k in names[1:-1]] + [None]
    assert np.array_equal(logits, base)


def test_identity_hooks_change_nothing(smollm2, run):
    """A hook returning None, or the array it was given, at every point: the
    activations go back as they were, bit for bit."""
    ids, base, _, _ = run
    assert np.array_equal(smollm2.run_with_hooks(ids, [(lambda name: True, lambda act, hook: None)]), base)
    same = smollm2.run_with_hooks(ids, [(lambda name: not name.endswith("hook_pattern"), lambda act, hook: act)])
    assert np.array_equal(same, base)
    copied = smollm2.run_with_hooks(ids, [("blocks.*.hook_resid_mid", lambda act, hook: act.astype(np.float64))])
    assert np.array_equal(copied, base)


def test_zeroed_head_through_a_hook_is_the_c_path(smollm2, run):
    """hook_z[:, h] = 0 in place, or returned as a new array, equals forward(zero_heads=)
    (the forward zeroes the head's output before W_O) bit for bit."""
    ids, base, _, _ = run

    def zero_in_place(act, hook):
        act[:, 2] = 0

    def zero_returned(act, hook):
        out = act.copy()
        out[:, 2] = 0
        return out

    want = smollm2.forward(ids, zero_heads=[(4, 2)])
    assert not np.array_equal(want, base)
    assert np.array_equal(smollm2.run_with_hooks(ids, [("blocks.4.attn.hook_z", zero_in_place)]), want)
    assert np.array_equal(smollm2.run_with_hooks(ids, [("blocks.4.attn.hook_z", zero_returned)]), want)
    both = smollm2.forward(ids, zero_heads=[(4, 2), (9, 0)])
    hooked = smollm2.run_with_hooks(ids, [("blocks.4.attn.hook_z", zero_in_place)], zero_heads=[(9, 0)])
    assert np.array_equal(hooked, both)
    # one row through the output layer: its matmul sums in another order (~2e-6 measured)
    last = smollm2.forward(ids, positions="last", zero_heads=[(4, 2)])
    assert np.abs(last[0] - want[-1]).max() <= 1e-4


def test_a_replaced_activation_goes_on(smollm2, run):
    """Zeros for ln_final: the unembedding of zeros is zeros."""
    ids, _, _, _ = run
    logits = smollm2.run_with_hooks(ids, [("ln_final.hook_normalized", lambda act, hook: np.zeros_like(act))])
    assert not logits.any()


def test_bad_hook_results_raise(smollm2, run):
    ids, base, _, _ = run
    with pytest.raises(ValueError, match=r"blocks\.2\.hook_resid_pre: returned shape \(3, 576\), expected \(10, 576\)"):
        smollm2.run_with_hooks(ids, [("blocks.2.hook_resid_pre", lambda act, hook: act[:3])])
    with pytest.raises(ValueError, match="returned dtype complex64"):
        smollm2.run_with_hooks(ids, [("blocks.2.attn.hook_q", lambda act, hook: act.astype(np.complex64))])
    with pytest.raises(ValueError, match="hook_pattern is read-only"):
        smollm2.run_with_hooks(ids, [("blocks.5.attn.hook_pattern", lambda act, hook: act)])

    def edit_pattern(act, hook):
        act[0, 0, 0] = 1  # a read-only array: numpy's ValueError

    with pytest.raises(ValueError, match="read-only"):
        smollm2.run_with_hooks(ids, [("blocks.5.attn.hook_pattern", edit_pattern)])
    with pytest.raises(TypeError, match="fwd_hooks"):
        smollm2.run_with_hooks(ids, [("blocks.5.attn.hook_z",)])
    with pytest.raises(ValueError, match="zero_heads"):
        smollm2.forward(ids, zero_heads=[(30, 0)])
    assert smollm2._c.pos() == 0 and np.array_equal(smollm2.forward(ids), base)


class HookFailed(Exception):
    pass


def test_an_exception_in_a_hook_propagates(smollm2, run):
    """The forward stops at the hook (later hooks are not called) and its exception
    comes out as raised, traceback included; the model is as before."""
    ids, base, _, _ = run
    raised = HookFailed("stop at layer 3")
    later = []

    def fail(act, hook):
        if hook.layer == 3:
            raise raised

    with pytest.raises(HookFailed) as e:
        smollm2.run_with_hooks(ids, [("blocks.*.hook_mlp_out", fail), ("blocks.*.hook_resid_post", lambda act, hook: later.append(hook.layer))])
    assert e.value is raised and e.traceback[-1].name == "fail"
    assert later == [0, 1, 2]
    assert smollm2._c.pos() == 0 and np.array_equal(smollm2.forward(ids), base)

    def reenter(act, hook):
        smollm2.forward(ids)

    with pytest.raises(RuntimeError, match="in use"):
        smollm2.run_with_hooks(ids, [("hook_embed", reenter)])
    assert np.array_equal(smollm2.forward(ids), base)


def test_interventions_last_one_call(smollm2, run):
    """Back to back on one model, each call sees only its own options."""
    ids, base, _, full = run
    second = smollm2.forward(ids, zero_heads=[(7, 4)])

    def zero_31(act, hook):
        act[:, 1] = 0

    first = smollm2.run_with_hooks(ids, [("blocks.3.attn.hook_z", zero_31)])
    assert not np.array_equal(first, base)
    assert np.array_equal(smollm2.forward(ids, zero_heads=[(7, 4)]), second)
    logits, cache = smollm2.run_with_cache(ids, names_filter=["blocks.3.attn.hook_z", "blocks.7.attn.hook_z"])
    assert np.array_equal(logits, base)
    assert np.array_equal(cache["z", 3], full["z", 3]) and np.array_equal(cache["z", 7], full["z", 7])
    assert np.array_equal(smollm2.run_with_hooks(ids, []), base)
    assert np.array_equal(smollm2.forward(ids), base)

