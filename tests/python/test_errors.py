"""Bad input raises ValueError / TypeError / OSError with a one-line message
naming the problem (the library's where it is the library that refuses) —
never a crash, never a silent wrong answer."""
import numpy as np
import pytest

import qkv
from conftest import FIXTURES

F32 = np.float32


def arrays(hq=4, hkv=2, lq=3, lk=5, d=16):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((hq, lq, d), dtype=F32), rng.standard_normal((hkv, lk, d), dtype=F32),
            rng.standard_normal((hkv, lk, d), dtype=F32))


def raises(exc, match, fn, *a, **kw):
    with pytest.raises(exc, match=match) as e:
        fn(*a, **kw)
    msg = str(e.value)
    assert msg and "\n" not in msg, f"not one line: {msg!r}"


def test_attention_shapes():
    q, k, v = arrays()
    raises(ValueError, "multiple of KV heads", qkv.attention, q[:3], k, v)
    raises(ValueError, "head dim", qkv.attention, q, k[..., :8], v[..., :8])
    raises(ValueError, "same shape", qkv.attention, q, k, v[:, :4])
    raises(ValueError, "number of dimensions", qkv.attention, q, k[None], v[None])
    raises(ValueError, "batch", qkv.attention, np.stack([q, q]), np.stack([k, k, k]), np.stack([v, v, v]))
    raises(ValueError, r"\[Hq, Lq, D\]", qkv.attention, q[0], k[0], v[0])
    raises(ValueError, "head_dim", qkv.attention, *arrays(d=8))   # the library: D outside [16, 256]
    raises(ValueError, "head_dim", qkv.attention, *arrays(d=264))
    raises(ValueError, "q_len", qkv.attention, q[:, :0], k, v)


def test_attention_dtypes():
    q, k, v = arrays()
    raises(TypeError, "float32", qkv.attention, q.astype(np.float64), k, v)
    raises(TypeError, "float32 or float16", qkv.attention, q, k.astype(np.float64), v.astype(np.float64))
    raises(TypeError, "same dtype", qkv.attention, q, k.astype(np.float16), v)
    raises(TypeError, "numpy array", qkv.attention, q.tolist(), k, v)
    raises(ValueError, "kv_dtype", qkv.attention, q, k, v, kv_dtype="int8")


def test_attention_masks_and_options():
    q, k, v = arrays()
    raises(ValueError, "window needs causal", qkv.attention, q, k, v, window=2)
    raises(ValueError, "window must be >= 1", qkv.attention, q, k, v, causal=True, window=0)
    raises(ValueError, "sinks needs a window", qkv.attention, q, k, v, causal=True, sinks=2)
    raises(ValueError, r"exclude: key indices must be in \[0, 5\)", qkv.attention, q, k, v, exclude=[5])
    raises(ValueError, "exclude", qkv.attention, q, k, v, exclude=[-1])
    raises(TypeError, "exclude", qkv.attention, q, k, v, exclude=[0.5])
    raises(ValueError, "scale must be > 0", qkv.attention, q, k, v, scale=-1.0)
    raises(ValueError, "kernel must be", qkv.attention, q, k, v, kernel="fast")
    q9, k9, v9 = arrays(lq=9)
    raises(ValueError, "decode", qkv.attention, q9, k9, v9, kernel="decode")  # the library: Lq <= 8


def test_reference_refuses_huge_score_tables():
    q = np.zeros((1, 1, 16), F32)
    k = np.zeros((1, 1, 16), F32)
    # the limit is on Hq * Lq * Lk; a lazily broadcast q keeps the test's memory small
    big_q = np.broadcast_to(q, (1, 1 << 15, 16))
    big_k = np.broadcast_to(k, (1, 1 << 15, 16))
    raises((ValueError, MemoryError), "score|large|memory", qkv.attention_reference, big_q, big_k, big_k)


def test_rope_errors():
    x = np.zeros((2, 4, 16), F32)
    raises(ValueError, "positions", qkv.rope, x, [0, 1, 2], theta=10000)
    raises(ValueError, "pairing", qkv.rope, x, np.arange(4), theta=10000, pairing="zigzag")
    raises(ValueError, "scaling type", qkv.rope, x, np.arange(4), theta=10000, scaling={"type": "yarn"})
    raises(TypeError, "float32", qkv.rope, x.astype(np.float64), np.arange(4), theta=10000)
    raises(ValueError, "theta|rope", qkv.rope, x, np.arange(4), theta=0.5)   # the library: theta > 1


def test_kv_cache_errors():
    raises(ValueError, "capacity 0 must be >= 1", qkv.KVCache, 2, 16, 0)  # the library's message
    raises(ValueError, "dtype must be", qkv.KVCache, 2, 16, 10, "f64")
    c = qkv.KVCache(2, 16, 4)
    raises(ValueError, r"expected \[2, n, 16\]", c.append, np.zeros((3, 1, 16), F32), np.zeros((3, 1, 16), F32))
    raises(ValueError, "multiple of KV heads", c.attention, np.zeros((3, 1, 16), F32))


def test_model_file_errors(tmp_path):
    raises(OSError, "no-such.gguf", qkv.Model, tmp_path / "no-such.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    raises(ValueError, "bad.gguf", qkv.Model, bad)
    raises(ValueError, "bad_model.gguf|tokenizer|model", qkv.Model, FIXTURES / "tokenizer" / "bad_model.gguf")
    raises(TypeError, "file name", qkv.Model, 3)


def test_model_call_errors():
    with qkv.Model(FIXTURES / "model" / "tiny31" / "tiny-llama31.gguf", ctx=16) as m:
        raises(ValueError, r"token ids must be in \[0, 512\)", m.forward, [1, 512])
        raises(ValueError, "no tokens", m.forward, [])
        raises(ValueError, "do not fit the context of 16", m.forward, np.ones(17, np.int32))
        raises(ValueError, "positions must be in", m.forward, [1, 2, 3], positions=[3])
        raises(ValueError, "positions must be", m.forward, [1, 2, 3], positions="first")
        raises(ValueError, r"layers must be in \[0, 2\)", m.attention, [1, 2], layer=2, head=0)
        raises(ValueError, "repeated", m.attention, [1, 2], layers=[0, 0], heads=[1])
        raises(TypeError, "layer= and head=", m.attention, [1, 2], layer=0)
        raises(TypeError, "str", m.tokenize, b"bytes")
        raises(ValueError, "chat_template|template", m.tokenize, "hi", chat=True)
    raises(ValueError, "closed", m.forward, [1])


def test_model_refuses_calls_while_generating():
    """A running generate() iterator holds the KV cache: other calls raise instead of
    silently restarting its sequence; once it is closed they work again."""
    with qkv.Model(FIXTURES / "model" / "tiny31" / "tiny-llama31.gguf", ctx=32) as m:
        g = m.generate([509, 3, 4], n=8)
        next(g)
        raises(RuntimeError, "generate", m.forward, [509, 3])
        g.close()
        assert m.forward([509, 3]).shape == (2, 512)
        for _ in m.generate([509, 3, 4], n=8):
            break  # a loop left early frees the iterator (and the model) at once
        assert m.forward([509], positions="last").shape == (1, 512)
