"""qkv.attention and qkv.attention_reference against a float64 numpy
reference (the textbook formula, written here independently of qkv) on swept
shapes, and against the committed PyTorch SDPA fixtures (tests/fixtures/attn,
tools/oracle/make_attn_fixtures.py: float64 SDPA).

Tolerances: the kernels accumulate in float32 (flash, decode) or float64
(reference) over at most a few hundred keys of O(1) scores, so 2e-5 absolute
on O and LSE holds with a wide margin for f32 inputs (typical error ~1e-6);
flash-bf16 rounds Q and the weights to bf16 (2^-9 relative): 2e-2.
"""
import numpy as np
import pytest

import qkv
from conftest import FIXTURES, fixture

KERNELS = ["auto", "flash", "reference", "decode", "flash-bf16"]


def visible(lq, lk, causal, window, sinks, exclude):
    """[Lq, Lk] bool: key j visible to row i (p(i) = Lk - Lq + i, bottom-right)."""
    i = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    m = np.ones((lq, lk), dtype=bool)
    if causal:
        m &= j <= i
    if window is not None:
        m &= (j > i - window) | (j < sinks)
    if exclude is not None:
        m[:, list(exclude)] = False
    return m


def attention64(q, k, v, causal=False, window=None, sinks=0, exclude=None, scale=None, softcap=0.0):
    """(o, lse, weights) in float64: softmax(cap(scale q k^T) + mask) v with GQA,
    cap(s) = softcap * tanh(s / softcap) when softcap > 0."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, hkv, d = q.shape[-3], k.shape[-3], q.shape[-1]
    k = np.repeat(k, hq // hkv, axis=-3)
    v = np.repeat(v, hq // hkv, axis=-3)
    s = (q @ np.swapaxes(k, -1, -2)) * (1 / np.sqrt(d) if scale is None else scale)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    s = np.where(visible(q.shape[-2], k.shape[-2], causal, window, sinks, exclude), s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.exp(s - mx)
    tot = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(tot > 0, e / tot, 0)
        lse = np.where(tot[..., 0] > 0, np.log(tot[..., 0]) + mx[..., 0], -np.inf)
    return w @ v, lse, w


def bf16(x):
    """x rounded to bfloat16 (round to nearest even), back as float32."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def qkv_arrays(rng, hq, hkv, lq, lk, d, batch=()):
    q = rng.standard_normal(batch + (hq, lq, d), dtype=np.float32)
    k = rng.standard_normal(batch + (hkv, lk, d), dtype=np.float32)
    v = rng.standard_normal(batch + (hkv, lk, d), dtype=np.float32)
    return q, k, v


def close(got, want, atol, what):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    both_inf = np.isneginf(got) & np.isneginf(want)
    with np.errstate(invalid="ignore"):
        diff = np.where(both_inf, 0, np.abs(got - want))
    assert np.all(np.isfinite(diff)), f"{what}: non-finite mismatch"
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    assert diff.max() <= atol, f"{what}: max |diff| {diff.max():.3g} at {worst} > {atol}"


SHAPES = [  # hq, hkv, lq, lk, d
    (4, 4, 17, 17, 64),     # MHA
    (8, 2, 33, 50, 128),    # GQA 4:1, Lq < Lk
    (6, 1, 9, 70, 80),      # MQA
    (4, 2, 1, 200, 64),     # decode row
    (2, 2, 5, 3, 16),       # Lq > Lk: the first rows see nothing under causal
    (2, 1, 3, 129, 256),
]
MASKS = [  # causal, window, sinks, exclude
    (False, None, 0, None),
    (True, None, 0, None),
    (True, 4, 0, None),
    (True, 6, 2, None),
    (False, None, 0, [0, 2, 2]),
    (True, 5, 1, [1]),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask", MASKS, ids=["none", "causal", "window", "sinkwindow", "excl", "sinkwindow-excl"])
def test_attention_matches_float64(shape, mask):
    hq, hkv, lq, lk, d = shape
    causal, window, sinks, exclude = mask
    rng = np.random.default_rng(hash(shape) % 2**32)
    q, k, v = qkv_arrays(rng, hq, hkv, lq, lk, d)
    o64, lse64, w64 = attention64(q, k, v, causal, window, sinks, exclude)
    kw = dict(causal=causal, window=window, sinks=sinks, exclude=exclude)
    for kernel in KERNELS:
        if kernel == "decode" and lq > 8:
            continue
        o, lse = qkv.attention(q, k, v, kernel=kernel, return_lse=True, **kw)
        tol = 2e-2 if kernel == "flash-bf16" else 2e-5  # bf16 products where the CPU has them
        close(o, o64, tol, f"{kernel} o")
        close(lse, lse64, tol, f"{kernel} lse")
    o, lse, w = qkv.attention_reference(q, k, v, **kw)
    close(w, w64, 1e-6, "reference weights")
    close(o, o64, 2e-5, "reference o")


def test_scale_and_default_scale():
    rng = np.random.default_rng(1)
    q, k, v = qkv_arrays(rng, 2, 2, 7, 9, 32)
    close(qkv.attention(q, k, v, scale=0.3), attention64(q, k, v, scale=0.3)[0], 2e-5, "scale 0.3")
    close(qkv.attention(q, k, v), attention64(q, k, v, scale=32 ** -0.5)[0], 2e-5, "1/sqrt(D)")


def test_batched_equals_each_problem():
    rng = np.random.default_rng(2)
    q, k, v = qkv_arrays(rng, 4, 2, 11, 19, 64, batch=(2, 3))
    o, lse = qkv.attention(q, k, v, causal=True, return_lse=True)
    assert o.shape == (2, 3, 4, 11, 64) and lse.shape == (2, 3, 4, 11)
    o64, lse64, _ = attention64(q, k, v, causal=True)
    close(o, o64, 2e-5, "batched o")
    close(lse, lse64, 2e-5, "batched lse")
    o_ref, lse_ref, w = qkv.attention_reference(q, k, v, causal=True)
    assert w.shape == (2, 3, 4, 11, 19)
    close(o_ref, o64, 2e-5, "batched reference")


def test_float16_kv():
    rng = np.random.default_rng(3)
    q, k, v = qkv_arrays(rng, 8, 2, 13, 40, 64)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    want = attention64(q, k16, v16, causal=True)[0]
    for kernel in ("flash", "reference", "auto"):
        close(qkv.attention(q, k16, v16, causal=True, kernel=kernel), want, 2e-5, f"f16 {kernel}")
    # kv_dtype="f16" rounds float32 K/V as an f16 cache does
    close(qkv.attention(q, k, v, causal=True, kv_dtype="f16"), want, 2e-5, "kv_dtype f16")


def test_bf16_kv_rounding():
    rng = np.random.default_rng(4)
    q, k, v = qkv_arrays(rng, 4, 4, 3, 64, 64)
    want = attention64(q, bf16(k), bf16(v), causal=True)[0]
    for kernel in ("decode", "flash", "reference"):
        close(qkv.attention(q, k, v, causal=True, kv_dtype="bf16", kernel=kernel), want, 2e-5, f"bf16 {kernel}")
    # and it is not the f32 answer: the rounding happened
    assert np.abs(qkv.attention(q, k, v, causal=True, kv_dtype="bf16") - qkv.attention(q, k, v, causal=True)).max() > 1e-4


def test_non_contiguous_inputs():
    rng = np.random.default_rng(5)
    q, k, v = qkv_arrays(rng, 4, 2, 21, 30, 64)
    # the same values laid out [L, H, D] and viewed as [H, L, D]; and a strided slice
    qt = np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)
    kt = np.ascontiguousarray(k.transpose(1, 0, 2)).transpose(1, 0, 2)
    vbig = np.zeros((2, 60, 64), dtype=np.float32)
    vbig[:, ::2] = v
    vs = vbig[:, ::2]
    assert not qt.flags.c_contiguous and not kt.flags.c_contiguous and not vs.flags.c_contiguous
    close(qkv.attention(qt, kt, vs, causal=True), attention64(q, k, v, causal=True)[0], 2e-5, "strided")


def test_fully_masked_rows_are_zero_with_lse_minus_inf():
    rng = np.random.default_rng(6)
    q, k, v = qkv_arrays(rng, 2, 2, 8, 5, 16)
    o, lse = qkv.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(o[:, :3] == 0) and np.all(np.isneginf(lse[:, :3]))
    o, lse = qkv.attention(q, k, v, exclude=[0, 1, 2, 3, 4], return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))


@pytest.mark.parametrize("softcap", [0.5, 2.0, 50.0])
def test_softcap_matches_float64(softcap):
    """Scores capped to c tanh(s / c) in every kernel (queries at sd 2: scores to ~+-8,
    so both the saturated and the nearly linear part of tanh are reached), and the
    reference's weights from the capped scores. Tolerances as without capping
    (flash-bf16 measured 9e-3 at most on O and LSE here)."""
    rng = np.random.default_rng(int(softcap * 10))
    q, k, v = qkv_arrays(rng, 8, 2, 6, 300, 128)
    q *= 2
    kw = dict(causal=True, window=100, sinks=2, exclude=[5], softcap=softcap)
    o64, lse64, w64 = attention64(q, k, v, **kw)
    for kernel in KERNELS:
        o, lse = qkv.attention(q, k, v, kernel=kernel, return_lse=True, **kw)
        tol = 2e-2 if kernel == "flash-bf16" else 2e-5
        close(o, o64, tol, f"{kernel} o")
        close(lse, lse64, tol, f"{kernel} lse")
    o, lse, w = qkv.attention_reference(q, k, v, **kw)
    close(w, w64, 1e-6, "reference weights")
    assert np.abs(o - attention64(q, k, v, causal=True, window=100, sinks=2, exclude=[5])[0]).max() > 1e-3


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_softcap_refuses_negative_nan_and_inf(bad):
    rng = np.random.default_rng(9)
    q, k, v = qkv_arrays(rng, 2, 2, 3, 4, 16)
    with pytest.raises(ValueError, match="softcap"):
        qkv.attention(q, k, v, softcap=bad)
    with pytest.raises(ValueError, match="softcap"):
        qkv.attention_reference(q, k, v, softcap=bad)


def manifest_cases():
    rows = []
    for line in (FIXTURES / "attn" / "manifest.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, hq, hkv, lq, lk, d, mask, window, sinks, exclude, scale, softcap = line.split()
        rows.append((name, mask, int(window), int(sinks), None if exclude == "-" else [int(x) for x in exclude.split(",")],
                     float(scale), float(softcap)))
    return rows


@pytest.mark.parametrize("case", manifest_cases(), ids=lambda c: c[0])
def test_against_pytorch_fixtures(case):
    name, mask, window, sinks, exclude, scale, softcap = case
    q, k, v, o_want, lse_want = (fixture("attn", f"{name}.{x}.npy") for x in ("q", "k", "v", "o", "lse"))
    kw = dict(causal=mask != "none", window=window if mask in ("window", "sinkwindow") else None,
              sinks=sinks if mask == "sinkwindow" else 0, exclude=exclude, scale=scale or None, softcap=softcap)
    for kernel in ("auto", "flash", "reference") + (("decode",) if q.shape[1] <= 8 else ()):
        o, lse = qkv.attention(q, k, v, kernel=kernel, return_lse=True, **kw)
        close(o, o_want, 2e-5, f"{name} {kernel} o")
        close(lse, lse_want, 2e-5, f"{name} {kernel} lse")


def test_contiguous_inputs_are_not_copied():
    """Zero copies for C-contiguous float32 inputs: the call allocates its output
    (o and lse) and nothing the size of q, k or v; a strided q is copied once."""
    import tracemalloc

    rng = np.random.default_rng(7)
    q, k, v = qkv_arrays(rng, 8, 8, 256, 256, 128)  # 1 MiB each
    tracemalloc.start()
    qkv.attention(q, k, v, causal=True, kernel="flash")
    peak_contig = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    qt = np.asfortranarray(q)
    tracemalloc.reset_peak()
    qkv.attention(qt, k, v, causal=True, kernel="flash")
    peak_strided = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    o_bytes = q.nbytes
    assert peak_contig < o_bytes + 256 * 1024, f"contiguous call allocated {peak_contig} bytes"
    assert peak_strided >= 2 * o_bytes, f"a strided q should be copied once ({peak_strided} bytes)"
