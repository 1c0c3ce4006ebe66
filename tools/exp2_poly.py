#!/usr/bin/env python3
"""tools/exp2_poly.py — the coefficients of exp2_frac (src/attn/tile_impl.h):
2^f on [-1/2, 1/2] as 1 + f (c1 + f (c2 + ... + f c5)), the constant term
fixed at 1 so that 2^0 is exactly 1, the others of least maximum relative
error (Lawson's iteratively reweighted least squares on Chebyshev nodes).
Prints them rounded to float and the largest relative error of the float
Horner evaluation the kernels do (FMA: one rounding a step), over 400001
points.

  python3 tools/exp2_poly.py [--degree 5]      (numpy; the oracle venv has it)
"""
import argparse

import numpy as np


def minimax(a, b, iterations=300):
    """c minimising max |a c - b| over the rows (Lawson: least squares,
    reweighted by each row's error, until the weights sit on the extrema)."""
    w = np.ones(len(b))
    for _ in range(iterations):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        e = np.abs(a @ c - b)
        w = w * e
        w /= w.sum()
    return c


def fit(degree):
    x = np.cos(np.pi * (np.arange(4000) + 0.5) / 4000) * 0.5
    a = np.vander(x, degree, increasing=True) * x[:, None] / (2**x)[:, None]  # f^1 .. f^degree, relative
    b = (2**x - 1) / 2**x
    return np.concatenate([[1.0], minimax(a, b)]).astype(np.float32)


def float_error(coef):
    f = np.linspace(-0.5, 0.5, 400001).astype(np.float32)
    p = np.full_like(f, coef[-1])
    for c in coef[-2::-1]:  # one rounding per step, as an FMA
        p = (p.astype(np.float64) * f + np.float64(c)).astype(np.float32)
    exact = 2.0 ** f.astype(np.float64)
    return float(np.max(np.abs(p - exact) / exact))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--degree", type=int, default=5)
    args = ap.parse_args()
    coef = fit(args.degree)
    for i, c in enumerate(coef):
        print(f"c{i} = {float(c)!r}")
    print(f"max relative error, float Horner: {float_error(coef):.3g}")


if __name__ == "__main__":
    main()
