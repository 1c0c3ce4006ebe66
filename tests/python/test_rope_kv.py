"""qkv.rope against the committed transformers/torch fixtures
(tests/fixtures/rope, tools/oracle/make_rope_fixtures.py), and qkv.KVCache:
rows stored in its dtype, attention equal to qkv.attention on the same rows."""
import numpy as np
import pytest

import qkv
from conftest import FIXTURES, fixture
from test_attention import attention64, bf16, close


def rope_cases():
    out = []
    for line in (FIXTURES / "rope" / "manifest.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, pairing, theta, scaling, factor, low, high, orig, h, t, d = line.split()
        sc = None if scaling == "none" else dict(type=scaling, factor=float(factor), low_freq_factor=float(low),
                                                 high_freq_factor=float(high), original_max_position=int(orig))
        out.append((name, pairing, float(theta), sc))
    return out


@pytest.mark.parametrize("case", rope_cases(), ids=lambda c: c[0])
def test_rope_against_transformers(case):
    name, pairing, theta, scaling = case
    x, pos, want = (fixture("rope", f"{name}.{s}.npy") for s in ("x", "pos", "out"))
    got = qkv.rope(x, pos, theta=theta, pairing=pairing, scaling=scaling)
    # float32 angles pos * inv_freq up to pos ~ 10^5: sin/cos of the same float32
    # angle agree to ~1e-6, times |x| ~ 4
    close(got, want, 2e-5, name)
    assert not np.shares_memory(got, x)
    if x.shape[0] == 1:  # [T, D] is one head
        close(qkv.rope(x[0], pos, theta=theta, pairing=pairing, scaling=scaling), want[0], 2e-5, name + " 2-D")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_kv_cache_rows_and_attention(dtype):
    rng = np.random.default_rng(8)
    hkv, d = 2, 64
    cache = qkv.KVCache(hkv, d, 40, dtype)
    assert (len(cache), cache.capacity, cache.dtype) == (0, 40, dtype)
    k = rng.standard_normal((hkv, 30, d), dtype=np.float32)
    v = rng.standard_normal((hkv, 30, d), dtype=np.float32)
    cache.append(k[:, :20], v[:, :20])
    cache.append(k[:, 20:], v[:, 20:])
    assert len(cache) == 30
    stored = {"f32": lambda x: x, "bf16": bf16, "f16": lambda x: x.astype(np.float16).astype(np.float32)}[dtype]
    kr, vr = cache.read()
    assert np.array_equal(kr, stored(k)) and np.array_equal(vr, stored(v))
    q = rng.standard_normal((8, 3, d), dtype=np.float32)
    o, lse = cache.attention(q, causal=True, return_lse=True)
    o64, lse64, _ = attention64(q, stored(k), stored(v), causal=True)
    close(o, o64, 2e-5, f"{dtype} cache o")
    close(lse, lse64, 2e-5, f"{dtype} cache lse")
    o = cache.attention(q, causal=True, window=4, sinks=1, exclude=[29])
    close(o, attention64(q, stored(k), stored(v), True, 4, 1, [29])[0], 2e-5, f"{dtype} cache masks")
    o, lse = cache.attention(2 * q, causal=True, softcap=2.0, return_lse=True)
    o64, lse64, _ = attention64(2 * q, stored(k), stored(v), causal=True, softcap=2.0)
    close(o, o64, 2e-5, f"{dtype} cache softcap o")
    close(lse, lse64, 2e-5, f"{dtype} cache softcap lse")
    with pytest.raises(ValueError, match="softcap"):
        cache.attention(q, softcap=-1.0)
    cache.truncate(10)
    assert len(cache) == 10
    with pytest.raises(ValueError, match="full|capacity"):
        cache.append(np.zeros((hkv, 31, d), np.float32), np.zeros((hkv, 31, d), np.float32))
    assert len(cache) == 10
