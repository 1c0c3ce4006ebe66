#!/usr/bin/env python3
"""Dequantisation fixtures: random ggml blocks and the gguf package's floats.

Pinned: gguf==0.19.0, numpy==2.4.6 (tools/oracle/requirements-gguf.txt, also
in requirements.txt):

    /work/oracle-venv/bin/python tools/oracle/make_dequant_fixtures.py

Writes into tests/fixtures/dequant/ (read by tests/test_dequant.c):

  <type>.bin      n / block_elems blocks of ggml type <type>, raw bytes:
                  random bytes with every f16 scale field (d; m or dmin where
                  the type has one) overwritten by a finite f16: those of
                  make_gguf_fixtures.f16_scales (mostly small of either sign,
                  some subnormal, zero) and a few -0 and 65504.
  <type>.npy      float32 [n]: gguf.quants.dequantize of those bytes, the
                  package's own decoder (numpy, independent of ours).
  manifest.txt    one line per type: "<type> <ggml id> <n>".

Types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (32 blocks of 32) and Q2_K, Q3_K, Q4_K,
Q5_K, Q6_K (12 super-blocks of 256). About 96 KB in all.

Deterministic (seeded); re-running gives identical files.
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

from make_gguf_fixtures import f16_scales as small_f16_scales

PINNED_GGUF = "0.19.0"
PINNED_NUMPY = "2.4.6"

# type name (qkv_ggml_type_name), type, blocks, byte offsets of its f16 scales
TYPES = [
    ("q8_0", Q.Q8_0, 32, (0,)),
    ("q4_0", Q.Q4_0, 32, (0,)),
    ("q4_1", Q.Q4_1, 32, (0, 2)),
    ("q5_0", Q.Q5_0, 32, (0,)),
    ("q5_1", Q.Q5_1, 32, (0, 2)),
    ("q2_K", Q.Q2_K, 12, (80, 82)),    # scales[16] qs[64] d dmin
    ("q3_K", Q.Q3_K, 12, (108,)),      # hmask[32] qs[64] scales[12] d
    ("q4_K", Q.Q4_K, 12, (0, 2)),      # d dmin scales[12] qs[128]
    ("q5_K", Q.Q5_K, 12, (0, 2)),      # d dmin scales[12] qh[32] qs[128]
    ("q6_K", Q.Q6_K, 12, (208,)),      # ql[128] qh[64] scales[16] d
]


def check_versions():
    from importlib.metadata import version

    for pkg, want in (("gguf", PINNED_GGUF), ("numpy", PINNED_NUMPY)):
        have = version(pkg)
        if have != want:
            print(f"warning: {pkg} {have} installed, fixtures were made with {want}", file=sys.stderr)


def f16_scales(rng, n):
    """n finite f16 scales as raw bytes [n, 2]."""
    d = small_f16_scales(rng, n).copy().view(np.float16).reshape(n)
    d[4::17] = np.float16(-0.0)
    d[6::19] = np.float16(65504.0)   # the largest f16
    return d.view(np.uint8).reshape(n, 2)


def random_blocks(rng, qtype, n_blocks, scale_offsets):
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    for off in scale_offsets:
        blocks[:, off:off + 2] = f16_scales(rng, n_blocks)
    return blocks


def write_fixtures(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20250611)
    manifest = []
    total = 0
    for name, qt, n_blocks, scale_offsets in TYPES:
        block_size, _ = gguf.GGML_QUANT_SIZES[qt]
        blocks = random_blocks(rng, qt, n_blocks, scale_offsets)
        raw = blocks.reshape(1, -1)
        y = gguf.quants.dequantize(raw, qt).reshape(-1)
        assert y.dtype == np.float32 and y.size == n_blocks * block_size, (name, y.dtype, y.shape)
        assert np.all(np.isfinite(y)), name
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(raw.tobytes())
        np.save(os.path.join(out, name + ".npy"), y)
        manifest.append(f"{name} {int(qt)} {y.size}")
        total += raw.nbytes + os.path.getsize(os.path.join(out, name + ".npy"))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    print(f"{out}: {len(TYPES)} types, {total} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/dequant")
    check_versions()
    write_fixtures(ap.parse_args().out)


if __name__ == "__main__":
    main()
