"""The GIL is released for the whole of a kernel call: a Python thread keeps
running while another thread is inside qkv.attention (and Model.forward)."""
import threading
import time

import numpy as np
import pytest

import qkv


def progress_during(call):
    """Iterations a Python loop makes while `call` runs in another thread."""
    inside = threading.Event()
    done = threading.Event()
    result = {}

    def worker():
        inside.set()
        t0 = time.perf_counter()
        call()
        result["seconds"] = time.perf_counter() - t0
        done.set()

    th = threading.Thread(target=worker)
    th.start()
    inside.wait()
    count = 0
    while not done.is_set():
        count += 1
    th.join()
    return count, result["seconds"]


def test_attention_releases_the_gil():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 512, 64), dtype=np.float32)
    k = rng.standard_normal((4, 512, 64), dtype=np.float32)
    # the reference kernel on one thread: a long call (~0.3 s)
    count, seconds = progress_during(lambda: qkv.attention(q, k, k, kernel="reference", threads=1))
    assert seconds > 0.05, f"the call was too short to tell ({seconds:.3f} s)"
    # a loop holding the GIL alone runs ~10^7 iterations a second; with the GIL
    # held by the call it would run only between the thread's start and the call
    assert count > 10000, f"the main thread made {count} iterations in {seconds:.2f} s"


def test_kv_cache_refuses_concurrent_use():
    """One call at a time per object: a second thread gets RuntimeError, never a race."""
    rng = np.random.default_rng(1)
    cache = qkv.KVCache(4, 64, 512)
    kv = rng.standard_normal((4, 512, 64), dtype=np.float32)
    cache.append(kv, kv)
    started = threading.Event()

    def attend():  # ~0.2 s on one thread
        started.set()
        cache.attention(kv, causal=True, kernel="reference", threads=1)

    th = threading.Thread(target=attend)
    th.start()
    started.wait()
    time.sleep(0.02)  # the worker is inside its call now (it takes ten times that)
    with pytest.raises(RuntimeError, match="in use by another thread"):
        cache.append(kv[:, :1], kv[:, :1])
    th.join()
    assert len(cache) == 512  # the refused append wrote nothing
