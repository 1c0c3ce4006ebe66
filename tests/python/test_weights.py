"""qkv.Weights: one copy of a GGUF's weights shared by several Models.

Two Models on one Weights give the same logits, bit for bit, as a Model that
opened the file itself (the same C forward on the same weights), in any
order of their calls (each keeps its own sequence); the Weights may be
closed or dropped before its Models, which keep working; a Model cannot be
made on closed Weights.
"""
import gc
import threading

import numpy as np
import pytest

import qkv
from conftest import model_path


@pytest.fixture()
def path():
    p = model_path()
    if not p.exists():
        pytest.skip(f"{p} missing (make model)")
    return p


def test_two_models_on_one_weights_match_a_model_of_its_own(path):
    text = "The quick brown fox jumps over the lazy dog."
    with qkv.Model(path, ctx=64, threads=2) as alone, qkv.Weights(path) as w:
        ids = alone.tokenize(text)
        want = alone.forward(ids)
        a, b = qkv.Model(w, ctx=64, threads=2), qkv.Model(w, ctx=32, threads=1)
        assert w.nbytes > path.stat().st_size, "nbytes: the mapping and what open dequantised"
        assert a.config.n_layer == alone.config.n_layer and a.config.path == str(path)
        np.testing.assert_array_equal(a.forward(ids), want)
        np.testing.assert_array_equal(b.forward(ids), want)
        np.testing.assert_array_equal(a.forward(ids, positions="last"), alone.forward(ids, positions="last"))
        a.close()
        b.close()


def test_models_on_one_weights_in_two_threads(path):
    with qkv.Weights(path) as w:
        models = [qkv.Model(w, ctx=64, threads=1) for _ in range(2)]
        ids = models[0].tokenize("年假怎么申请？ The answer is in the handbook.")
        want = models[0].forward(ids)
        got = [None, None]

        def run(i):
            got[i] = models[i].forward(ids)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g in got:
            np.testing.assert_array_equal(g, want)
        for m in models:
            m.close()


def test_weights_closed_or_dropped_before_their_models(path):
    w = qkv.Weights(path)
    a = qkv.Model(w, ctx=64, threads=2)
    ids = a.tokenize("Hello, world")
    want = a.forward(ids)
    w.close()  # a keeps its own reference
    with pytest.raises(ValueError, match="closed"):
        qkv.Model(w, ctx=64)
    np.testing.assert_array_equal(a.forward(ids), want)
    w2 = qkv.Weights(path)
    b = qkv.Model(w2, ctx=64, threads=2)
    del w2
    gc.collect()
    np.testing.assert_array_equal(b.forward(ids), want)
    a.close()
    b.close()


def test_weights_refuses_bad_sources(tmp_path):
    with pytest.raises(TypeError, match="file name or qkv.Weights"):
        qkv.Model(3)
    with pytest.raises(TypeError, match="file name"):
        qkv.Weights(None)
    with pytest.raises((OSError, ValueError)):
        qkv.Weights(tmp_path / "missing.gguf")
