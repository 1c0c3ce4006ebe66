#!/usr/bin/env python3
"""bench/peers.py — qkv's attention against the CPU attention a user could
pick instead, on the same shapes, the same inputs, the same thread count, in
the same process and the same run.

Peers (each skipped with a note when it is not installed):
  torch     PyTorch scaled_dot_product_attention on CPU (enable_gqa; f32, or
            all-bf16 / all-f16 tensors for the bf16 / f16 rows, as torch needs
            one dtype)
  ort       ONNX Runtime, the ONNX Attention op (opset 23, q_num_heads /
            kv_num_heads: its GQA path); f32 only; it materialises the score
            table, so it is skipped where that would pass --ort-max-scores
  openvino  OpenVINO ScaledDotProductAttention, K/V heads broadcast to the
            query heads as exported LLMs do; f32 rows with
            INFERENCE_PRECISION_HINT=f32, bf16 rows with bf16 (its default on
            this CPU); f16 rows skipped
  llamacpp  llama.cpp's ggml FLASH_ATTN_EXT (the CPU flash attention llama.cpp
            runs with -fa), through the libggml bundled with llama-cpp-python,
            by ctypes; K/V in F32 / BF16 / F16 exactly as qkv gets them

qkv itself is called through build*/libqkv.so (ctypes) on the same arrays, so
every peer and qkv see identical inputs; each shape is measured in rounds,
every round running every implementation once in a rotated order, so load
drift on a shared machine hits all of them alike. Each output is compared with
qkv's (max |diff|) so a peer measured on a different problem cannot slip in.

  python bench/peers.py --lib build-perf/libqkv.so --threads 2 --md out.md --json out.json

Pinned versions: bench/requirements.txt. Figures: BENCHMARKS.md.
"""
import argparse
import ctypes
import glob
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

MODELS = {"llama": ("Llama-3.1-8B", 32, 8, 128), "smol": ("SmolLM2-135M", 9, 3, 64)}
DTYPES = ["f32", "bf16", "f16"]

# ----------------------------------------------------------------- inputs


def bf16_bits(x):
    """f32 -> bf16 bit patterns, round to nearest even (no NaN in our data)."""
    u = x.view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def bf16_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


class Problem:
    """One shape's inputs, in every form the implementations want."""

    def __init__(self, model, lq, lk, dtype, seed=1):
        _, self.hq, self.hkv, self.d = MODELS[model]
        self.model, self.lq, self.lk, self.dtype = model, lq, lk, dtype
        r = np.random.default_rng(seed)
        self.q = r.standard_normal((self.hq, lq, self.d), dtype=np.float32)
        k = r.standard_normal((self.hkv, lk, self.d), dtype=np.float32)
        v = r.standard_normal((self.hkv, lk, self.d), dtype=np.float32)
        if dtype == "f32":
            self.k_bits, self.v_bits = k, v
            self.k, self.v = k, v
        elif dtype == "bf16":
            self.k_bits, self.v_bits = bf16_bits(k), bf16_bits(v)
            self.k, self.v = bf16_to_f32(self.k_bits), bf16_to_f32(self.v_bits)
        else:
            kh, vh = k.astype(np.float16), v.astype(np.float16)
            self.k_bits, self.v_bits = kh.view(np.uint16), vh.view(np.uint16)
            self.k, self.v = kh.astype(np.float32), vh.astype(np.float32)
        del k, v
        self.scale = 1.0 / math.sqrt(self.d)

    def visible_pairs(self):
        """Causal, bottom-right aligned: row i sees keys 0 .. lk - lq + i."""
        lq, lk = self.lq, self.lk
        return lq * (lk - lq) + lq * (lq + 1) / 2

    def flops(self):
        return 4.0 * self.d * self.hq * self.visible_pairs()

    def kv_bytes(self):
        return 2.0 * self.hkv * self.lk * self.d * (4 if self.dtype == "f32" else 2)

    def bool_mask(self):
        """[lq, lk], True where the key is visible."""
        i = np.arange(self.lq)[:, None] + (self.lk - self.lq)
        return np.arange(self.lk)[None, :] <= i


# ------------------------------------------------------------ implementations


class Impl:
    name = "?"
    note = ""

    def supports(self, p):
        return True

    def prepare(self, p):
        """Builds whatever a run needs; returns a callable doing one run."""
        raise NotImplementedError

    def output(self):
        """The last run's O as f32 [Hq, Lq, D]."""
        raise NotImplementedError


class Qkv(Impl):
    name = "qkv"
    kernel = 0  # QKV_KERNEL_AUTO: decode for Lq <= 8, else flash

    class Mask(ctypes.Structure):
        _fields_ = [("kind", ctypes.c_int), ("window", ctypes.c_int), ("sinks", ctypes.c_int),
                    ("exclude", ctypes.c_void_p), ("n_exclude", ctypes.c_int)]

    class Desc(ctypes.Structure):
        pass

    Desc._fields_ = [("n_q_head", ctypes.c_int), ("n_kv_head", ctypes.c_int), ("q_len", ctypes.c_int),
                     ("kv_len", ctypes.c_int), ("head_dim", ctypes.c_int), ("scale", ctypes.c_float),
                     ("mask", Mask), ("kv_dtype", ctypes.c_int), ("kv_head_stride", ctypes.c_int64),
                     ("n_threads", ctypes.c_int)]

    class Error(ctypes.Structure):
        _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 320)]

    def __init__(self, lib, threads):
        self.lib = ctypes.CDLL(lib)
        self.lib.qkv_attn.restype = ctypes.c_int
        self.lib.qkv_attn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        self.lib.qkv_attn_isa.restype = ctypes.c_char_p
        self.threads = threads
        self.note = "libqkv %s kernels (%s)" % (self.lib.qkv_attn_isa().decode(), lib)

    def prepare(self, p):
        self.p = p
        self.o = np.zeros((p.hq, p.lq, p.d), np.float32)
        self.lse = np.zeros((p.hq, p.lq), np.float32)
        dt = DTYPES.index(p.dtype)
        self.desc = Qkv.Desc(p.hq, p.hkv, p.lq, p.lk, p.d, 0.0, Qkv.Mask(1, 0, 0, None, 0), dt, 0, self.threads)
        self.err = Qkv.Error()
        args = [a.ctypes.data for a in (self.o, self.lse, p.q, p.k_bits, p.v_bits)]
        kernel = self.kernel

        def run():
            st = self.lib.qkv_attn(*args, ctypes.byref(self.desc), kernel, ctypes.byref(self.err))
            if st:
                raise RuntimeError(self.err.msg.decode())

        return run

    def output(self):
        return self.o


class QkvBf16Dot(Qkv):
    """qkv's flash-bf16 kernel (bf16 dot products), for bf16 KV prefill and chunk rows only."""

    name = "qkv-bf16dot"

    def __init__(self, lib, threads):
        Qkv.__init__(self, lib, threads)
        self.note = "libqkv flash-bf16 kernel (Q and p rounded to bf16, vdpbf16ps), bf16 KV rows with Lq > 8 only"

    def supports(self, p):
        return True if p.dtype == "bf16" and p.lq > 8 else "bf16 KV prefill/chunk rows only"

    kernel = 4  # QKV_KERNEL_FLASH_BF16


class Torch(Impl):
    name = "torch"

    def __init__(self, threads):
        import torch
        import torch.nn.functional as F

        self.torch, self.F = torch, F
        torch.set_num_threads(threads)
        self.note = "torch %s, scaled_dot_product_attention, %d threads" % (torch.__version__, torch.get_num_threads())

    def prepare(self, p):
        torch = self.torch
        tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[p.dtype]
        q = torch.from_numpy(p.q).to(tdt).unsqueeze(0)
        if p.dtype == "f32":
            k, v = torch.from_numpy(p.k).unsqueeze(0), torch.from_numpy(p.v).unsqueeze(0)
        else:
            k = torch.from_numpy(p.k_bits.view(np.int16)).view(tdt).unsqueeze(0)
            v = torch.from_numpy(p.v_bits.view(np.int16)).view(tdt).unsqueeze(0)
        mask = None
        causal = p.lq == p.lk
        if p.lq != p.lk and p.lq > 1:  # torch's is_causal is top-left aligned: give the mask
            mask = torch.from_numpy(p.bool_mask())
        F = self.F

        def run():
            with torch.inference_mode():
                self.o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)

        return run

    def output(self):
        return self.o[0].float().numpy()


class Ort(Impl):
    name = "ort"

    def __init__(self, threads, max_scores):
        import onnx
        import onnxruntime as ort

        self.onnx, self.ort = onnx, ort
        self.threads, self.max_scores = threads, max_scores
        self.note = "onnxruntime %s, ONNX Attention (opset 23, GQA), CPUExecutionProvider, %d intra-op threads" % (
            ort.__version__, threads)

    def supports(self, p):
        if p.dtype != "f32":
            return "f32 only (its CPU Attention takes float)"
        if p.hq * p.lq * p.lk > self.max_scores:
            return "would materialise %.1f GiB of scores" % (p.hq * p.lq * p.lk * 4 / 2**30)
        return True

    def prepare(self, p):
        from onnx import TensorProto, helper

        F = TensorProto.FLOAT
        ins = [helper.make_tensor_value_info("q", F, [1, p.hq, p.lq, p.d]),
               helper.make_tensor_value_info("k", F, [1, p.hkv, p.lk, p.d]),
               helper.make_tensor_value_info("v", F, [1, p.hkv, p.lk, p.d])]
        names = ["q", "k", "v"]
        attrs = dict(q_num_heads=p.hq, kv_num_heads=p.hkv, scale=p.scale)
        feeds = {"q": p.q[None], "k": p.k[None], "v": p.v[None]}
        if p.lq == p.lk:
            attrs["is_causal"] = 1
        elif p.lq > 1:
            ins.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [p.lq, p.lk]))
            names.append("mask")
            feeds["mask"] = p.bool_mask()
        out = helper.make_tensor_value_info("o", F, [1, p.hq, p.lq, p.d])
        node = helper.make_node("Attention", names, ["o"], **attrs)
        model = helper.make_model(helper.make_graph([node], "attention", ins, [out]),
                                  opset_imports=[helper.make_opsetid("", 23)])
        model.ir_version = 10
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        # its workers would otherwise spin after each run and steal the cores
        # from whichever implementation runs next in the round
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = self.ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

        def run():
            self.o = sess.run(None, feeds)[0]

        return run

    def output(self):
        return self.o[0]


class OpenVino(Impl):
    name = "openvino"

    def __init__(self, threads, max_broadcast):
        import openvino as ov
        import openvino.opset13 as ops

        self.ov, self.ops = ov, ops
        self.core = ov.Core()
        self.threads, self.max_broadcast = threads, max_broadcast
        self.note = "openvino %s, ScaledDotProductAttention (K/V broadcast to Hq heads), CPU plugin, %d threads" % (
            ov.__version__, threads)

    def supports(self, p):
        if p.dtype == "f16":
            return "f16 rows skipped (inputs are given as f32; its precisions are f32 and bf16)"
        if p.hq * p.lk * p.d * 4 * 2 > self.max_broadcast:
            return "the broadcast K/V would take %.1f GiB" % (p.hq * p.lk * p.d * 8 / 2**30)
        return True

    def prepare(self, p):
        ops, np_i64 = self.ops, (lambda a: self.ops.constant(np.array(a, np.int64)))
        G = p.hq // p.hkv
        q = ops.parameter([1, p.hq, p.lq, p.d], np.float32, name="q")
        k = ops.parameter([1, p.hkv, p.lk, p.d], np.float32, name="k")
        v = ops.parameter([1, p.hkv, p.lk, p.d], np.float32, name="v")

        def rep(x):
            x = ops.unsqueeze(x, np_i64([2]))
            x = ops.broadcast(x, np_i64([1, p.hkv, G, p.lk, p.d]))
            return ops.reshape(x, np_i64([1, p.hq, p.lk, p.d]), False)

        params = [q, k, v]
        feeds = {"q": p.q[None], "k": p.k[None], "v": p.v[None]}
        if p.lq == p.lk:
            o = ops.scaled_dot_product_attention(q, rep(k), rep(v), causal=True, scale=ops.constant(np.float32(p.scale)))
        else:
            m = ops.parameter([p.lq, p.lk], np.float32, name="mask")
            params.append(m)
            feeds["mask"] = np.where(p.bool_mask(), 0.0, -np.inf).astype(np.float32)
            o = ops.scaled_dot_product_attention(q, rep(k), rep(v), m, ops.constant(np.float32(p.scale)), causal=False)
        model = self.ov.Model([o], params)
        prec = "bf16" if p.dtype == "bf16" else "f32"
        cm = self.core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": self.threads,
                                                     "INFERENCE_PRECISION_HINT": prec, "NUM_STREAMS": 1})
        req = cm.create_infer_request()

        def run():
            self.o = req.infer(feeds)[0]

        return run

    def output(self):
        return np.asarray(self.o)[0]


class GgmlInitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class LlamaCpp(Impl):
    name = "llamacpp"
    GGML_TYPE = {"f32": 0, "f16": 1, "bf16": 30}
    GGML_PREC_F32 = 10
    KQ_MASK_PAD = 64

    def __init__(self, threads, libdir):
        C = ctypes
        self.base = C.CDLL(os.path.join(libdir, "libggml-base.so"), mode=C.RTLD_GLOBAL)
        self.cpu = C.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=C.RTLD_GLOBAL)
        b, c = self.base, self.cpu
        b.ggml_init.restype, b.ggml_init.argtypes = C.c_void_p, [GgmlInitParams]
        b.ggml_free.argtypes = [C.c_void_p]
        b.ggml_new_tensor_3d.restype = C.c_void_p
        b.ggml_new_tensor_3d.argtypes = [C.c_void_p, C.c_int, C.c_int64, C.c_int64, C.c_int64]
        b.ggml_flash_attn_ext.restype = C.c_void_p
        b.ggml_flash_attn_ext.argtypes = [C.c_void_p] * 5 + [C.c_float] * 3
        b.ggml_flash_attn_ext_set_prec.argtypes = [C.c_void_p, C.c_int]
        b.ggml_new_graph.restype, b.ggml_new_graph.argtypes = C.c_void_p, [C.c_void_p]
        b.ggml_build_forward_expand.argtypes = [C.c_void_p, C.c_void_p]
        b.ggml_get_data.restype, b.ggml_get_data.argtypes = C.c_void_p, [C.c_void_p]
        b.ggml_nbytes.restype, b.ggml_nbytes.argtypes = C.c_size_t, [C.c_void_p]
        b.ggml_tensor_overhead.restype = C.c_size_t
        b.ggml_graph_overhead.restype = C.c_size_t
        c.ggml_graph_compute_with_ctx.restype = C.c_int
        c.ggml_graph_compute_with_ctx.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
        c.ggml_cpu_init()
        self.threads, self.ctx = threads, None
        version = "?"
        try:
            import llama_cpp

            version = llama_cpp.__version__
        except Exception:
            pass
        self.note = "llama-cpp-python %s's libggml (%s), ggml_flash_attn_ext, GGML_PREC_F32, %d threads" % (
            version, libdir, threads)

    def prepare(self, p):
        C, b = ctypes, self.base
        if self.ctx:
            b.ggml_free(self.ctx)
            self.ctx = None
        es = 4 if p.dtype == "f32" else 2
        lq_pad = (p.lq + self.KQ_MASK_PAD - 1) // self.KQ_MASK_PAD * self.KQ_MASK_PAD
        need = (2 * p.hq * p.lq * p.d * 4 + 2 * p.hkv * p.lk * p.d * es + lq_pad * p.lk * 2
                + 16 * b.ggml_tensor_overhead() + b.ggml_graph_overhead() + (64 << 20))
        self.ctx = b.ggml_init(GgmlInitParams(need, None, False))
        if not self.ctx:
            raise MemoryError("ggml_init(%d bytes)" % need)
        t = self.GGML_TYPE[p.dtype]
        q = b.ggml_new_tensor_3d(self.ctx, 0, p.d, p.lq, p.hq)
        k = b.ggml_new_tensor_3d(self.ctx, t, p.d, p.lk, p.hkv)
        v = b.ggml_new_tensor_3d(self.ctx, t, p.d, p.lk, p.hkv)
        mask = b.ggml_new_tensor_3d(self.ctx, 1, p.lk, lq_pad, 1)
        for tensor, arr in ((q, p.q), (k, p.k_bits), (v, p.v_bits)):
            arr = np.ascontiguousarray(arr)
            assert b.ggml_nbytes(tensor) == arr.nbytes
            C.memmove(b.ggml_get_data(tensor), arr.ctypes.data, arr.nbytes)
        m = np.full((lq_pad, p.lk), np.float16(-np.inf), np.float16)
        m[:p.lq] = np.where(p.bool_mask(), np.float16(0), np.float16(-np.inf))
        C.memmove(b.ggml_get_data(mask), m.ctypes.data, m.nbytes)
        out = b.ggml_flash_attn_ext(self.ctx, q, k, v, mask, p.scale, 0.0, 0.0)
        b.ggml_flash_attn_ext_set_prec(out, self.GGML_PREC_F32)
        graph = b.ggml_new_graph(self.ctx)
        b.ggml_build_forward_expand(graph, out)
        self.out, self.p = out, p
        cpu, ctx, threads = self.cpu, self.ctx, self.threads

        def run():
            if cpu.ggml_graph_compute_with_ctx(ctx, graph, threads) != 0:
                raise RuntimeError("ggml_graph_compute failed")

        return run

    def output(self):
        p = self.p
        n = p.hq * p.lq * p.d
        buf = (ctypes.c_float * n).from_address(self.base.ggml_get_data(self.out))
        return np.frombuffer(buf, np.float32, n).reshape(p.lq, p.hq, p.d).transpose(1, 0, 2).copy()


# ------------------------------------------------------------------ driver


def find_ggml_dir():
    try:
        import llama_cpp

        d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
        if os.path.exists(os.path.join(d, "libggml-cpu.so")):
            return d
    except Exception:
        pass
    for d in glob.glob("/work/*/lib/python3*/site-packages/llama_cpp/lib"):
        if os.path.exists(os.path.join(d, "libggml-cpu.so")):
            return d
    return None


def shapes(args):
    out = []
    for sweep in args.sweeps:
        for model in args.models:
            for dt in args.kv_dtypes:
                if sweep == "prefill":
                    out += [(sweep, model, n, n, dt) for n in args.prefill_n]
                elif sweep == "chunk":
                    out += [(sweep, model, 512, lk, dt) for lk in args.chunk_lk]
                else:
                    out += [(sweep, model, 1, lk, dt) for lk in args.decode_lk]
    return out


def measure(impls, p, rounds, min_time):
    """Rounds of one run per implementation, rotated; returns {name: dict}."""
    res, runs = {}, {}
    for impl in impls:
        ok = impl.supports(p)
        if ok is not True:
            res[impl.name] = {"skipped": ok}
            continue
        try:
            runs[impl.name] = impl.prepare(p)
            runs[impl.name]()  # warm-up (and first compile for the graph runtimes)
            res[impl.name] = {"times": [], "maxdiff": None}
        except Exception as e:  # a peer that cannot run this shape is reported, not fatal
            res[impl.name] = {"skipped": "error: %s" % str(e).splitlines()[0][:200]}
            runs.pop(impl.name, None)
    order = [i for i in impls if i.name in runs]
    ref = None
    for r in range(rounds):
        rot = order[r % len(order):] + order[:r % len(order)] if order else []
        for impl in rot:
            time.sleep(0.02)  # let the previous runtime's spinning workers go to sleep
            t0 = time.perf_counter()
            runs[impl.name]()
            dt = time.perf_counter() - t0
            res[impl.name]["times"].append(dt)
            if r == 0:
                o = impl.output()
                if impl.name == "qkv":
                    ref = o.copy()
                res[impl.name]["_out"] = o.copy() if impl.name != "qkv" else None
        if r + 1 >= 2 and all(sum(res[i.name]["times"]) > min_time for i in order):
            break
    for impl in order:
        d = res[impl.name]
        o = d.pop("_out", None)
        if ref is not None and o is not None:
            d["maxdiff"] = float(np.max(np.abs(o.astype(np.float32) - ref)))
        t = sorted(d["times"])
        d["median_s"] = statistics.median(t)
        d["min_s"], d["max_s"] = t[0], t[-1]
        d["gflops"] = p.flops() / d["median_s"] * 1e-9
        d["kv_gbs"] = p.kv_bytes() / d["median_s"] * 1e-9
    return res


def svg_plot(path, rows, names):
    """Two panels: prefill GFLOP/s against n, decode KV GB/s against Lk (llama heads)."""
    colors = {"qkv": "#d62728", "qkv-bf16dot": "#8c1a1a", "torch": "#1f77b4", "ort": "#9467bd", "openvino": "#2ca02c",
              "llamacpp": "#ff7f0e"}
    dashes = {"f32": "", "bf16": "6,3", "f16": "2,2"}
    W, H, L, T, PW, PH = 460, 380, 60, 40, 370, 250
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (2 * W, H),
             '<rect width="100%" height="100%" fill="white"/>']
    for pi, (sweep, key, title, ylab) in enumerate([("prefill", "gflops", "prefill, causal, Llama-3.1-8B heads", "GFLOP/s"),
                                                     ("decode", "kv_gbs", "decode, Lq = 1, Llama-3.1-8B heads", "KV GB/s")]):
        sel = [r for r in rows if r["sweep"] == sweep and r["model"] == "llama"]
        pts = [(math.log2(r["lk"]), r["results"][n][key]) for r in sel for n in names if "median_s" in r["results"].get(n, {})]
        x0 = pi * W
        parts.append('<g transform="translate(%d,0)"><text x="%d" y="22" font-size="14" font-weight="bold">%s</text>' % (x0, L, title))
        if not pts:
            parts.append('<text x="%d" y="%d">(not measured)</text></g>' % (L, T + PH // 2))
            continue
        xmin, xmax = min(p[0] for p in pts), max(p[0] for p in pts)
        xmax = xmax if xmax > xmin else xmin + 1
        ymax = max(p[1] for p in pts) * 1.1
        sx = lambda x: L + PW * (x - xmin) / (xmax - xmin)
        sy = lambda y: T + PH - PH * y / ymax
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (L, T, PW, PH))
        for g in range(5):
            y = ymax * g / 4
            parts.append('<text x="%d" y="%.0f" font-size="10" text-anchor="end">%.0f</text>' % (L - 4, sy(y) + 3, y))
        x = math.ceil(xmin)
        while x <= xmax + 1e-9:
            n = 2 ** x
            parts.append('<text x="%.0f" y="%d" font-size="10" text-anchor="middle">%s</text>' % (
                sx(x), T + PH + 14, "%dK" % (n // 1024) if n >= 1024 else "%d" % n))
            x += 1
        parts.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">%s</text>' % (
            L + PW // 2, T + PH + 30, "n = Lq = Lk" if sweep == "prefill" else "Lk (keys)"))
        parts.append('<text x="14" y="%d" font-size="11" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>' % (
            T + PH // 2, T + PH // 2, ylab))
        legend = 0
        for n in names:
            for dt in DTYPES:
                line = sorted((math.log2(r["lk"]), r["results"][n][key]) for r in sel
                              if r["kv_dtype"] == dt and "median_s" in r["results"].get(n, {}))
                if not line:
                    continue
                parts.append('<polyline fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s" points="%s"/>' % (
                    colors.get(n, "#000"), dashes[dt], " ".join("%.0f,%.0f" % (sx(a), sy(b)) for a, b in line)))
                for a, b in line:
                    parts.append('<circle cx="%.0f" cy="%.0f" r="2.5" fill="%s"/>' % (sx(a), sy(b), colors.get(n, "#000")))
                lx, ly = L + (legend % 3) * 125, T + PH + 48 + 13 * (legend // 3)
                parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>' % (
                    lx, ly - 4, lx + 18, ly - 4, colors.get(n, "#000"), dashes[dt]))
                parts.append('<text x="%d" y="%d" font-size="10">%s %s</text>' % (lx + 22, ly, n, dt))
                legend += 1
        parts.append("</g>")
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/libqkv.so", help="libqkv.so to measure (default build/libqkv.so)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--peers", default="torch,ort,openvino,llamacpp")
    ap.add_argument("--sweeps", default="prefill,chunk,decode")
    ap.add_argument("--models", default="llama,smol")
    ap.add_argument("--kv-dtypes", default="f32,bf16,f16")
    ap.add_argument("--prefill-n", default="512,1024,2048,4096")
    ap.add_argument("--chunk-lk", default="4096,16384")
    ap.add_argument("--decode-lk", default="4096,16384,65536")
    ap.add_argument("--rounds", type=int, default=5, help="at most this many rounds per shape")
    ap.add_argument("--min-time", type=float, default=3.0, help="stop after 2 rounds once every impl ran this long")
    ap.add_argument("--ort-max-scores", type=float, default=2**29, help="skip ORT above this many scores (f32)")
    ap.add_argument("--ov-max-bytes", type=float, default=2**31, help="skip OpenVINO when broadcast K/V exceed this")
    ap.add_argument("--ggml-dir", default=None, help="directory of libggml-base.so / libggml-cpu.so")
    ap.add_argument("--quick", action="store_true", help="one small shape per sweep, 2 rounds")
    ap.add_argument("--no-bf16dot", action="store_true", help="leave out qkv's flash-bf16 rows")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--md", help="write the markdown tables here")
    ap.add_argument("--svg", help="write a plot here")
    ap.add_argument("--from-json", help="measure nothing: write --md / --svg from the --json of an earlier run")
    a = ap.parse_args()
    if a.from_json:
        data = json.load(open(a.from_json))
        names = list(data["rows"][0]["results"].keys()) if data["rows"] else []
        if a.md:
            with open(a.md, "w") as f:
                f.write(markdown(data["rows"], names, data["meta"]))
        if a.svg:
            svg_plot(a.svg, data["rows"], names)
        return
    ints = lambda s: [int(x) for x in s.split(",") if x]
    a.sweeps, a.models, a.kv_dtypes = a.sweeps.split(","), a.models.split(","), a.kv_dtypes.split(",")
    a.prefill_n, a.chunk_lk, a.decode_lk = ints(a.prefill_n), ints(a.chunk_lk), ints(a.decode_lk)
    if a.quick:
        a.prefill_n, a.chunk_lk, a.decode_lk, a.rounds, a.min_time = [512], [2048], [4096], 2, 0.0
    for m in a.models:
        if m not in MODELS:
            sys.exit("peers.py: --models: '%s' is not llama or smol" % m)

    impls, notes = [Qkv(a.lib, a.threads)], {}
    if not a.no_bf16dot:
        impls.append(QkvBf16Dot(a.lib, a.threads))
    wanted = a.peers.split(",") if a.peers else []
    for name in wanted:
        try:
            if name == "torch":
                impls.append(Torch(a.threads))
            elif name == "ort":
                impls.append(Ort(a.threads, a.ort_max_scores))
            elif name == "openvino":
                impls.append(OpenVino(a.threads, a.ov_max_bytes))
            elif name == "llamacpp":
                d = a.ggml_dir or find_ggml_dir()
                if not d:
                    raise ImportError("no libggml-cpu.so found (pip install llama-cpp-python, or --ggml-dir)")
                impls.append(LlamaCpp(a.threads, d))
            else:
                sys.exit("peers.py: unknown peer '%s'" % name)
        except ImportError as e:
            notes[name] = "not installed: %s" % e
    for i in impls:
        notes[i.name] = i.note
    load = os.getloadavg()[0]
    print("# peers: %s; %d threads; load %.2f" % (", ".join(i.name for i in impls), a.threads, load), flush=True)
    for n, t in notes.items():
        print("#   %-9s %s" % (n, t), flush=True)

    rows = []
    names = [i.name for i in impls]
    hdr = "%-7s %-5s %-4s %6s %6s  " % ("sweep", "model", "kv", "lq", "lk") + "  ".join("%18s" % n for n in names)
    print(hdr)
    for sweep, model, lq, lk, dt in shapes(a):
        p = Problem(model, lq, lk, dt)
        res = measure(impls, p, a.rounds, a.min_time)
        row = {"sweep": sweep, "model": model, "hq": p.hq, "hkv": p.hkv, "d": p.d, "lq": lq, "lk": lk, "kv_dtype": dt,
               "loadavg_1min": os.getloadavg()[0], "results": res}
        rows.append(row)
        cells = []
        q = res.get("qkv", {}).get("median_s")
        for n in names:
            d = res.get(n, {})
            if "median_s" not in d:
                cells.append("%18s" % "skip")
            elif n == "qkv":
                cells.append("%11.4fs %5.0f%s" % (d["median_s"], d["gflops"] if sweep != "decode" else d["kv_gbs"],
                                                 "GF" if sweep != "decode" else "GB"))
            else:
                cells.append("%11.4fs x%5.2f" % (d["median_s"], d["median_s"] / q if q else float("nan")))
        print("%-7s %-5s %-4s %6d %6d  " % (sweep, model, dt, lq, lk) + "  ".join(cells), flush=True)
        del p

    meta = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "threads": a.threads,
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "peers": notes, "argv": sys.argv}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1, default=float)
    if a.md:
        with open(a.md, "w") as f:
            f.write(markdown(rows, names, meta))
    if a.svg:
        svg_plot(a.svg, rows, names)


def markdown(rows, names, meta):
    peers = [n for n in names if n != "qkv"]
    skipped = {}
    out = ["Measured %s, %d threads. Speed-up = peer median time / qkv median time (> 1: qkv faster); "
           "qkv column: median seconds and GFLOP/s (prefill, chunk) or KV GB/s (decode); "
           "max |O - O_qkv| in brackets.\n" % (meta["date_utc"], meta["threads"])]
    for sweep in ("prefill", "chunk", "decode"):
        sel = [r for r in rows if r["sweep"] == sweep]
        if not sel:
            continue
        out.append("\n%s\n" % {"prefill": "**Prefill** (causal, Lq = Lk)", "chunk": "**Chunked prefill** (Lq = 512)",
                                 "decode": "**Decode** (Lq = 1; nothing flushed between runs, so K/V under ~32 MiB stay in L3)"}[sweep])
        out.append("| %s | kv | lq | lk | qkv | %s |" % ("model", " | ".join(peers)))
        out.append("|---|---|---|---|---|" + "---|" * len(peers))
        for r in sel:
            q = r["results"].get("qkv", {})
            if "median_s" not in q:
                continue
            rate = "%.0f GB/s" % q["kv_gbs"] if sweep == "decode" else "%.0f GFLOP/s" % q["gflops"]
            cells = []
            for n in peers:
                d = r["results"].get(n, {})
                if "median_s" in d:
                    cells.append("%.2fx [%.1e]" % (d["median_s"] / q["median_s"], d["maxdiff"] or 0))
                else:
                    cells.append("—")
                    if d.get("skipped"):
                        skipped.setdefault(n, set()).add(d["skipped"])
            out.append("| %s | %s | %d | %d | %.4f s, %s | %s |" % (r["model"], r["kv_dtype"], r["lq"], r["lk"],
                                                                     q["median_s"], rate, " | ".join(cells)))
    if skipped:
        out.append("\n— not run: " + "; ".join("%s: %s" % (n, ", ".join(sorted(v))) for n, v in skipped.items()) + ".")
    sel = [r for r in rows if "median_s" in r["results"].get("qkv-bf16dot", {})]
    if sel:
        others = [n for n in ("torch", "openvino", "llamacpp") if n in names]
        out.append("\nbf16 K/V computed with bf16 dot products: speed-up of qkv flash-bf16 over each peer's bf16 path "
                   "(torch: all-bf16 tensors; openvino: INFERENCE_PRECISION_HINT=bf16; llama.cpp: BF16 K/V):\n")
        out.append("| %s | sweep | lq | lk | qkv flash-bf16 | %s |" % ("model", " | ".join(others)))
        out.append("|---|---|---|---|---|" + "---|" * len(others))
        for r in sel:
            q = r["results"]["qkv-bf16dot"]
            cells = []
            for n in others:
                d = r["results"].get(n, {})
                cells.append("%.2fx" % (d["median_s"] / q["median_s"]) if "median_s" in d else "—")
            out.append("| %s | %s | %d | %d | %.4f s, %.0f GFLOP/s | %s |" % (
                r["model"], r["sweep"], r["lq"], r["lk"], q["median_s"], q["gflops"], " | ".join(cells)))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
