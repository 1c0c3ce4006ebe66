#!/usr/bin/env python3
"""tools/tanh_poly.py — the coefficients of the soft-capping tanh (vtanh in
src/attn/tile_impl.h, attn_tanhf in src/attn/softcap.c): for |x| below the
split, tanh x = x + x z P(z) with z = x^2 and P of --degree coefficients, of least
maximum relative error on [0, split] (Lawson's iteratively reweighted least
squares on Chebyshev nodes, as tools/exp2_poly.py). Prints them rounded to
float, the largest error of the float evaluation the kernels do (FMA: one
rounding a step) below the split, and that of the other branch above it,
(1 - e) / (1 + e) with e = 2^(|x| * -2 log2(e)) from the kernels' exp2
(range reduction to [-1/2, 1/2] and exp2_frac's polynomial), over 2000001
points each.

  python3 tools/tanh_poly.py [--degree 5] [--split 0.625]   (numpy; the oracle venv has it)
"""
import argparse

import numpy as np

from exp2_poly import fit as exp2_fit
from exp2_poly import minimax

F32 = np.float32


def fit(degree, split):
    x = (np.cos(np.pi * (np.arange(4000) + 0.5) / 4000) * 0.5 + 0.5) * split
    z, t = x * x, np.tanh(x)
    a = np.vander(z, degree, increasing=True) * (x * z / t)[:, None]  # relative to tanh x
    return minimax(a, (t - x) / t).astype(F32)


def fma(a, b, c):
    return (a.astype(np.float64) * b + np.float64(c)).astype(F32)


def small_branch(x, coef):
    z = (x * x).astype(F32)
    p = np.full_like(z, coef[-1])
    for c in coef[-2::-1]:
        p = fma(p, z, c)
    return (((x * z).astype(F32)).astype(np.float64) * p + x).astype(F32)


def large_branch(x):
    t = (x * F32(-2 * 1.4426950408889634)).astype(F32)
    n = np.round(t).astype(F32)
    f = (t - n).astype(F32)
    exp2 = exp2_fit(5)  # exp2_frac's coefficients, as tile_impl.h has them
    p = np.full_like(f, exp2[-1])
    for c in exp2[-2::-1]:
        p = fma(p, f, c)
    e = (p * np.exp2(n.astype(np.float64))).astype(F32)
    return ((F32(1) - e).astype(F32) / (F32(1) + e).astype(F32)).astype(F32)


def ulps(y, x):
    exact = np.tanh(x.astype(np.float64))
    return float(np.max(np.abs(y - exact) / np.spacing(exact.astype(F32))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--degree", type=int, default=5, help="coefficients of P")
    ap.add_argument("--split", type=float, default=0.625)
    args = ap.parse_args()
    coef = fit(args.degree, args.split)
    for i, c in enumerate(coef):
        print(f"p{i} = {float(c)!r}")
    xs = np.linspace(1e-6, args.split, 2000001).astype(F32)
    xl = np.linspace(args.split, 12, 2000001).astype(F32)
    print(f"max error below the split: {ulps(small_branch(xs, coef), xs):.3g} ulp")
    print(f"max error above the split: {ulps(large_branch(xl), xl):.3g} ulp")


if __name__ == "__main__":
    main()
