#!/usr/bin/env python3
"""GGUF reader and dequantisation fixtures, written with the `gguf` package.

Pinned: gguf==0.19.0, numpy==2.4.6 (tools/oracle/requirements-gguf.txt):

    python3 -m venv /work/gguf-venv
    /work/gguf-venv/bin/pip install -r tools/oracle/requirements-gguf.txt
    /work/gguf-venv/bin/python tools/oracle/make_gguf_fixtures.py

Writes into tests/fixtures/gguf/ (tests/test_gguf.c and tests/test_dequant.c
hard-code the metadata values below; keep them in step):

  meta.gguf     GGUF v3, default alignment (32). One key per metadata value
                type, one array per element type (numeric, bool, string), an
                array of arrays of i32 and of strings, a string with a NUL
                byte, UTF-8; tensors: f32 "t.3d" of shape [2, 3, 4] (ggml ne
                = {4, 3, 2}) holding 0 .. 23, and a 1-D f16 "t.1d" [8].

  quant.gguf    GGUF v3, general.alignment = 64. For each type T in F32, F16,
                BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K: tensor "T" (the raw
                blocks) and "T.expected" (f32, same shape) holding
                gguf.quants.dequantize of those bytes: the package's own
                decoder, independent of ours. F32/F16/BF16/Q8_0/Q4_0/Q4_1 are
                quantised from random normals with gguf.quants.quantize (plus
                special values for the float types); the package cannot
                quantise K-quants, so their blocks are random bytes with
                finite f16 super-scales (including negative and subnormal
                ones) and the expected floats come from its dequantize.
                Also "q5_0" and "q2_K" (random blocks, no .expected): once
                types the reader knew and qkv_dequantize did not; their
                decoding is now checked with tests/fixtures/dequant/
                (make_dequant_fixtures.py).

Deterministic (seeded); re-running gives identical files.
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

PINNED_GGUF = "0.19.0"
QK_K = 256


def check_versions():
    v = getattr(gguf, "__version__", None)
    if v is None:
        from importlib.metadata import version

        v = version("gguf")
    if v != PINNED_GGUF:
        print(f"warning: gguf {v} installed, fixtures were made with {PINNED_GGUF}", file=sys.stderr)


def write_meta(path):
    w = gguf.GGUFWriter(path, arch="testarch")  # adds general.architecture = "testarch"
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 3.25)
    w.add_bool("test.bool", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo 年假怎么申请")
    w.add_string("test.string_nul", "a\x00b")
    w.add_uint64("test.u64", 2**63 + 5)        # above INT64_MAX: get_int must refuse
    w.add_uint64("test.u64_small", 123456789012)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", 0.1)
    w.add_key_value("test.arr.u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.arr.i8", [-1, 2, -128], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("test.arr.u16", [1, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("test.arr.i16", [-32768, 7], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.arr.u32", [0, 4294967295, 5], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("test.arr.i32", [-5, 6, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.arr.f32", [0.5, -1.25, 1e-3], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.arr.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.arr.u64", [2**64 - 1, 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.arr.i64", [-(2**63), 3], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("test.arr.f64", [2.5, -0.1], V.ARRAY, sub_type=V.FLOAT64)
    w.add_array("test.arr.str", ["a", "", "年假怎么申请", "x\x00y", "<|im_start|>"])
    w.add_array("test.arr.nested", [[1, 2], [3, 4, 5]])
    w.add_array("test.arr.nested_str", [["p", "q"], ["r"]])
    w.add_uint32("test.after_nested", 77)  # parsing must resume correctly after the nested arrays

    t3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    w.add_tensor("t.3d", t3)
    w.add_tensor("t.1d", np.array([1, -2, 0.5, 65504, -0.0, 6e-8, np.inf, -np.inf], dtype=np.float16))
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def f16_scales(rng, n):
    """n finite f16 scales as raw bytes: mostly small positive, some negative,
    some subnormal, one zero."""
    d = rng.uniform(1e-3, 5e-2, n).astype(np.float16)
    d[1::7] = -d[1::7]
    d[2::11] = np.float16(3e-6)     # subnormal in f16
    d[3::13] = np.float16(0.0)
    return d.view(np.uint8).reshape(n, 2)


def kquant_blocks(rng, qtype, n_blocks):
    """Random, valid blocks for Q4_K, Q5_K, Q6_K (layout: ggml-common.h)."""
    if qtype == Q.Q4_K:   # d, dmin, scales[12], qs[128]
        parts = [f16_scales(rng, n_blocks), f16_scales(rng, n_blocks),
                 rng.integers(0, 256, (n_blocks, 12 + 128), dtype=np.uint8)]
    elif qtype == Q.Q5_K:  # d, dmin, scales[12], qh[32], qs[128]
        parts = [f16_scales(rng, n_blocks), f16_scales(rng, n_blocks),
                 rng.integers(0, 256, (n_blocks, 12 + 32 + 128), dtype=np.uint8)]
    elif qtype == Q.Q6_K:  # ql[128], qh[64], scales[16] (int8), d
        parts = [rng.integers(0, 256, (n_blocks, 128 + 64 + 16), dtype=np.uint8),
                 f16_scales(rng, n_blocks)]
    elif qtype in (Q.Q2_K, Q.Q5_0):  # any bytes; only their size matters here
        bs, ts = gguf.GGML_QUANT_SIZES[qtype]
        parts = [rng.integers(0, 256, (n_blocks, ts), dtype=np.uint8)]
    else:
        raise ValueError(qtype)
    return np.concatenate(parts, axis=1)


def write_quant(path):
    rng = np.random.default_rng(20240611)
    w = gguf.GGUFWriter(path, arch="testarch")
    w.add_custom_alignment(64)

    def add(name, qtype, raw, expected):
        w.add_tensor(name, raw, raw_dtype=qtype)
        if expected is not None:
            assert expected.dtype == np.float32
            w.add_tensor(name + ".expected", expected)

    # float types: [3, 40] incl. special values
    x = rng.standard_normal((3, 40)).astype(np.float32)
    x[0, :8] = [0.0, -0.0, np.inf, -np.inf, 1e-40, -3e-39, 65504.0, 1e-7]
    add("f32", Q.F32, x, x.copy())
    h = x.astype(np.float16)
    add("f16", Q.F16, h.view(np.uint8).reshape(3, 80), h.astype(np.float32))
    b = gguf.quants.quantize(x, Q.BF16)
    add("bf16", Q.BF16, b, gguf.quants.dequantize(b, Q.BF16))

    # 32-element block types, quantised by the package: [4, 96] (3 blocks a row)
    for name, qt in (("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1)):
        x = (rng.standard_normal((4, 96)) * rng.uniform(0.01, 3.0, (4, 1))).astype(np.float32)
        x[0, :32] = 0.0                      # an all-zero block: d = 0
        q = gguf.quants.quantize(x, qt)
        add(name, qt, q, gguf.quants.dequantize(q, qt))

    # K-quants: random blocks, [4, 1024] (4 super-blocks a row)
    for name, qt in (("q4_K", Q.Q4_K), ("q5_K", Q.Q5_K), ("q6_K", Q.Q6_K)):
        rows, cols = 4, 4 * QK_K
        blocks = kquant_blocks(rng, qt, rows * cols // QK_K)
        raw = blocks.reshape(rows, -1)
        exp = gguf.quants.dequantize(raw, qt)
        assert exp.shape == (rows, cols) and np.all(np.isfinite(exp))
        add(name, qt, raw, exp.astype(np.float32))

    # no .expected (tests/fixtures/dequant/ has these types' decoded values)
    add("q5_0", Q.Q5_0, kquant_blocks(rng, Q.Q5_0, 2).reshape(1, -1), None)
    add("q2_K", Q.Q2_K, kquant_blocks(rng, Q.Q2_K, 1).reshape(1, -1), None)
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/gguf")
    args = ap.parse_args()
    check_versions()
    os.makedirs(args.out, exist_ok=True)
    write_meta(os.path.join(args.out, "meta.gguf"))
    write_quant(os.path.join(args.out, "quant.gguf"))
    for f in ("meta.gguf", "quant.gguf"):
        p = os.path.join(args.out, f)
        print(f"{p}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
