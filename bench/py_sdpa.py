#!/usr/bin/env python3
"""bench/py_sdpa.py — qkv.attention against torch.nn.functional.scaled_dot_product_attention,
both called from Python on the same numpy arrays (torch.from_numpy: no copy),
the same thread count, in the same process.

Two tables: call overhead (small shapes, where the time is mostly the call:
argument checks, allocation of the output, the GIL) as the median microseconds
per call, and throughput at large shapes as GFLOP/s (4 * Hq * D * visible keys
per row, the multiply-adds of QK^T and PV counted twice). Each shape runs in
rounds, the two implementations alternating, so load drift on a shared machine
hits both alike; outputs are compared (max |diff|). Causal only where Lq = Lk
(torch's is_causal is top-left aligned, qkv's bottom-right; they agree there).

  PYTHONPATH=python /work/oracle-venv/bin/python bench/py_sdpa.py --threads 2
(qkv importable: `pip install .`, or python/ after `python setup.py build_ext --inplace`.)
"""
import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

import qkv

SMALL = [  # hq, hkv, lq, lk, d, causal
    (1, 1, 1, 16, 64, False),
    (8, 8, 1, 64, 64, False),
    (8, 2, 16, 16, 64, True),
    (32, 8, 1, 256, 128, False),
]
LARGE = [
    (32, 8, 1024, 1024, 128, True),
    (32, 8, 4096, 4096, 128, True),
    (32, 8, 1, 32768, 128, False),
    (32, 8, 512, 8192, 128, False),
]


def flops(hq, lq, lk, d, causal):
    keys = lq * (lq + 1) / 2 if causal else lq * lk
    return 4.0 * hq * d * keys


def timed(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def run(shape, threads, rounds, reps):
    hq, hkv, lq, lk, d, causal = shape
    rng = np.random.default_rng(0)
    q = rng.standard_normal((hq, lq, d), dtype=np.float32)
    k = rng.standard_normal((hkv, lk, d), dtype=np.float32)
    v = rng.standard_normal((hkv, lk, d), dtype=np.float32)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

    def run_qkv():
        return qkv.attention(q, k, v, causal=causal, threads=threads)

    def run_torch():
        with torch.no_grad():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, enable_gqa=hq != hkv)

    diff = float(np.abs(run_qkv() - run_torch().numpy()).max())
    times = {"qkv": [], "torch": []}
    for r in range(rounds):
        order = [("qkv", run_qkv), ("torch", run_torch)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            times[name].append(timed(fn, reps))
    return {n: statistics.median(t) for n, t in times.items()}, diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and only the smaller large shapes")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rounds = 3 if a.quick else a.rounds
    print(f"qkv {qkv.__version__} ({qkv.isa()}), torch {torch.__version__}, {a.threads} threads\n")
    print("call overhead: median microseconds per call")
    print("| Hq | Hkv | Lq | Lk | D | causal | qkv µs | torch µs | max abs diff |")
    print("|---:|---:|---:|---:|---:|:---:|---:|---:|---:|")
    for s in SMALL:
        t, diff = run(s, a.threads, rounds, 2000 if not a.quick else 300)
        print(f"| {' | '.join(map(str, s[:5]))} | {'yes' if s[5] else 'no'} | {t['qkv'] * 1e6:.1f} | "
              f"{t['torch'] * 1e6:.1f} | {diff:.1e} |", flush=True)
    print("\nthroughput: GFLOP/s (median of rounds)")
    print("| Hq | Hkv | Lq | Lk | D | causal | qkv ms | torch ms | qkv GFLOP/s | torch GFLOP/s | max abs diff |")
    print("|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|")
    for s in LARGE[:2] if a.quick else LARGE:
        t, diff = run(s, a.threads, rounds, 1)
        f = flops(s[0], s[2], s[3], s[4], s[5])
        print(f"| {' | '.join(map(str, s[:5]))} | {'yes' if s[5] else 'no'} | {t['qkv'] * 1e3:.1f} | "
              f"{t['torch'] * 1e3:.1f} | {f / t['qkv'] / 1e9:.1f} | {f / t['torch'] / 1e9:.1f} | {diff:.1e} |",
              flush=True)


if __name__ == "__main__":
    main()
