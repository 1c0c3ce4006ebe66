#!/usr/bin/env python3
"""Expected dequantised rows of the real model, from the `gguf` package.

Pinned: gguf==0.19.0, numpy==2.4.6 (tools/oracle/requirements-gguf.txt).
Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/get-model.sh).

    /work/gguf-venv/bin/python tools/oracle/make_model_gguf_fixture.py

Writes tests/fixtures/gguf/smollm2_rows.gguf, read by tests/test_model_gguf.c
with qkv's own reader (its f32 tensors are plain copies):
  model.sha256 (string), model.n_tensors (u32), model.file_size (u64);
  for each tensor NAME picked below, a metadata key "rows.NAME" (i32 array:
  the row indices, outermost dimension) and an f32 tensor "rows.NAME" of shape
  [n_rows, row length] = gguf.quants.dequantize of those rows, plus
  "type.NAME" (u32: the ggml type id found in the model).
"""
import argparse
import hashlib
import os

import numpy as np
import gguf
from gguf import GGUFReader

MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"

# tensor name -> rows (of the outermost dimension) to keep
PICK = {
    "token_embd.weight": [0, 1, 2, 100, 12345, 49151],   # q8_0 [49152, 576]
    "blk.0.attn_q.weight": [0, 575],                      # q4_1 [576, 576]
    "blk.0.attn_k.weight": [191],                         # q4_1 [192, 576]
    "blk.29.ffn_down.weight": [0, 300],                   # q4_1 [576, 1536]
    "output_norm.weight": None,                           # f32 [576], 1-D: all of it
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default="tests/fixtures/gguf/smollm2_rows.gguf")
    args = ap.parse_args()

    r = GGUFReader(args.model)
    by_name = {t.name: t for t in r.tensors}
    w = gguf.GGUFWriter(args.out, arch="qkv-fixture")
    w.add_string("model.sha256", sha256(args.model))
    w.add_uint32("model.n_tensors", len(r.tensors))
    w.add_uint64("model.file_size", os.path.getsize(args.model))
    for name, rows in PICK.items():
        t = by_name[name]
        data = np.asarray(t.data)            # outermost first: [rows, bytes or elements]
        if data.ndim == 1:
            data = data.reshape(1, -1)
            rows = [0]
        sel = data[rows]
        vals = gguf.quants.dequantize(sel, t.tensor_type).astype(np.float32)
        w.add_key_value("rows." + name, rows, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
        w.add_uint32("type." + name, int(t.tensor_type))
        w.add_tensor("rows." + name, vals)
        print(f"{name}: {t.tensor_type.name} rows {rows} -> {vals.shape}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
