"""Attention, RoPE and the KV cache on numpy arrays (qkv.attention and friends).

Dimension legend: B = batch, Hq / Hkv = query / KV heads, Lq / Lk = query /
key rows, D = head dim. Inputs that are already C-contiguous with the right
dtype are passed to the C kernels as they are (no copy); any other layout is
copied once. Every C call releases the GIL.
"""
import numpy as np

from . import _qkv

_MASK_NONE, _MASK_CAUSAL, _MASK_WINDOW, _MASK_SINK_WINDOW = 0, 1, 2, 3
_KV_DTYPES = {"f32": np.float32, "f16": np.float16}


def _c_array(x, dtype, name):
    """x as a C-contiguous ndarray of dtype: x itself when it already is one."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name}: expected {np.dtype(dtype).name}, got {x.dtype}")
    return np.ascontiguousarray(x)


def _mask_args(causal, window, sinks, exclude, lk):
    """The C mask (kind, window, sinks, exclude int32 array or None) of the keyword arguments."""
    if window is None:
        if sinks:
            raise ValueError("sinks needs a window (sinks=S keeps keys 0..S-1 besides the last `window` keys)")
        kind, window = (_MASK_CAUSAL if causal else _MASK_NONE), 0
    else:
        if not causal:
            raise ValueError("window needs causal=True (a window mask is causal: keys p-W+1 .. p)")
        if int(window) < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if int(sinks) < 0:
            raise ValueError(f"sinks must be >= 0, got {sinks}")
        kind = _MASK_SINK_WINDOW if sinks else _MASK_WINDOW
    if exclude is not None:
        ex = np.asarray(exclude)
        if ex.ndim != 1 or not (ex.size == 0 or np.issubdtype(ex.dtype, np.integer)):
            raise TypeError("exclude: expected a 1-D list of integer key indices")
        if ex.size and (ex.min() < 0 or ex.max() >= lk):
            raise ValueError(f"exclude: key indices must be in [0, {lk}), got {ex.min()} .. {ex.max()}")
        exclude = np.ascontiguousarray(ex, dtype=np.int32)
    return kind, int(window), int(sinks), exclude


def _kv_arrays(k, v, kv_dtype):
    """(k, v, dtype name) ready for the kernels: float32 or float16 as given,
    or rounded to bf16 (stored as uint16) when kv_dtype is "bf16"."""
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array, got {type(x).__name__}")
        if x.dtype not in (np.float32, np.float16):
            raise TypeError(f"{name}: expected float32 or float16, got {x.dtype}")
    if k.dtype != v.dtype:
        raise TypeError(f"k and v must have the same dtype, got {k.dtype} and {v.dtype}")
    given = "f32" if k.dtype == np.float32 else "f16"
    if kv_dtype is None or kv_dtype == given:
        return np.ascontiguousarray(k), np.ascontiguousarray(v), given
    if kv_dtype == "f16" and given == "f32":
        return k.astype(np.float16, order="C"), v.astype(np.float16, order="C"), "f16"
    if kv_dtype == "bf16":
        out = []
        for x in (k, v):
            x32 = np.ascontiguousarray(x, dtype=np.float32)
            r = np.empty(x32.shape, dtype=np.uint16)
            _qkv.round_kv(r, x32, "bf16")
            out.append(r)
        return out[0], out[1], "bf16"
    raise ValueError(f'kv_dtype must be None, "f32", "f16" or "bf16", got {kv_dtype!r}')


def _shapes(q, k, v):
    """(batch shape, B, Hq, Hkv, Lq, Lk, D) of SDPA-shaped q, k, v."""
    if q.ndim < 3:
        raise ValueError(f"q: expected [Hq, Lq, D] or [..., Hq, Lq, D], got shape {q.shape}")
    if k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"q, k and v must have the same number of dimensions, got {q.shape}, {k.shape}, {v.shape}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    batch = q.shape[:-3]
    if k.shape[:-3] != batch:
        raise ValueError(f"q and k must have the same batch dimensions, got {q.shape} and {k.shape}")
    hq, lq, d = q.shape[-3:]
    hkv, lk, dk = k.shape[-3:]
    if dk != d:
        raise ValueError(f"q and k must have the same head dim, got {d} and {dk}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")
    b = int(np.prod(batch)) if batch else 1
    return batch, b, hq, hkv, lq, lk, d


def _prepare(q, k, v, causal, window, sinks, exclude, scale, softcap, kv_dtype):
    q = _c_array(q, np.float32, "q")
    k, v, dt = _kv_arrays(k, v, kv_dtype)
    batch, b, hq, hkv, lq, lk, d = _shapes(q, k, v)
    kind, window, sinks, exclude = _mask_args(causal, window, sinks, exclude, lk)
    if scale is not None and not float(scale) > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    softcap = float(softcap)
    if not (np.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be finite and >= 0 (0 = none), got {softcap}")
    args = dict(batch=b, n_q_head=hq, n_kv_head=hkv, q_len=lq, kv_len=lk, head_dim=d,
                scale=0.0 if scale is None else float(scale), softcap=softcap, mask=kind, window=window,
                sinks=sinks, exclude=exclude, kv_dtype=dt)
    return q, k, v, batch, args


def attention(q, k, v, *, causal=False, window=None, sinks=0, exclude=None, scale=None, softcap=0.0,
              kernel="auto", kv_dtype=None, return_lse=False, threads=0):
    """O = softmax(cap(scale * Q K^T) + mask) V, as torch.nn.functional.scaled_dot_product_attention.

    q: [Hq, Lq, D] or [B, Hq, Lq, D] float32 (any number of batch dimensions, as SDPA);
    k, v: [Hkv, Lk, D] or [B, Hkv, Lk, D] with q's batch dimensions,
    float32 or float16 (kv_dtype="bf16" rounds them as a bf16 KV cache stores them,
    "f16" as an f16 one). causal: bottom-right aligned; window=W: causal, the last W
    keys (self included); sinks=S with a window: also keys 0..S-1 (StreamingLLM);
    exclude: key indices hidden from every row. scale: default 1/sqrt(D).
    softcap=c > 0: every score s becomes c * tanh(s / c) before the mask and the
    softmax (Gemma 2's attn_logit_softcapping, 50.0); LSE is then over the capped
    scores. 0 (the default): no capping.
    kernel: "auto", "flash", "decode" (Lq <= 8), "flash-bf16" or "reference".
    threads: 0 = all cores. A row with no visible key has O = 0 and LSE = -inf.

    Returns o float32 [..., Hq, Lq, D], and (o, lse [..., Hq, Lq]) with return_lse.
    """
    q, k, v, batch, args = _prepare(q, k, v, causal, window, sinks, exclude, scale, softcap, kv_dtype)
    o = np.empty(q.shape, dtype=np.float32)
    lse = np.empty(q.shape[:-1], dtype=np.float32) if return_lse else None
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a string, got {type(kernel).__name__}")
    _qkv.attention(o, lse, q, k, v, kernel=kernel, threads=int(threads), **args)
    return (o, lse) if return_lse else o


def attention_reference(q, k, v, *, causal=False, window=None, sinks=0, exclude=None, scale=None, softcap=0.0,
                        kv_dtype=None):
    """The textbook kernel (scores materialised, double accumulation) with its weights:
    (o [..., Hq, Lq, D], lse [..., Hq, Lq], weights [..., Hq, Lq, Lk]); arguments as attention()."""
    q, k, v, batch, args = _prepare(q, k, v, causal, window, sinks, exclude, scale, softcap, kv_dtype)
    o = np.empty(q.shape, dtype=np.float32)
    lse = np.empty(q.shape[:-1], dtype=np.float32)
    weights = np.empty(q.shape[:-1] + (k.shape[-2],), dtype=np.float32)
    _qkv.attention_reference(o, lse, q, k, v, kernel="reference", threads=0, weights=weights, **args)
    return o, lse, weights


def rope(x, positions, *, theta, pairing="half", scaling=None):
    """x rotated by RoPE at the given positions (a new float32 array; x is not changed).

    x: [T, D] or [H, T, D] float32; positions: [T] integers. pairing: "half"
    (rotate-half, HF transformers) or "interleaved" (Meta, ggml). scaling: None or
    {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
    "original_max_position": 8192} (Llama-3.1).
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(f"x: expected a float32 numpy array, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected [T, D] or [H, T, D], got shape {x.shape}")
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    h, t, d = (1,) + x.shape if x.ndim == 2 else x.shape
    pos = np.asarray(positions)
    if pos.shape != (t,) or not (pos.size == 0 or np.issubdtype(pos.dtype, np.integer)):
        raise ValueError(f"positions: expected [{t}] integers, got shape {pos.shape} of {pos.dtype}")
    pos = np.ascontiguousarray(pos, dtype=np.int64)
    if pairing not in ("half", "interleaved"):
        raise ValueError(f'pairing must be "half" or "interleaved", got {pairing!r}')
    s = dict(scaling or {})
    kind = s.pop("type", "llama3") if scaling is not None else "none"
    if kind not in ("none", "llama3"):
        raise ValueError(f'scaling type must be "llama3", got {kind!r}')
    factor = float(s.pop("factor", 8.0))
    low = float(s.pop("low_freq_factor", 1.0))
    high = float(s.pop("high_freq_factor", 4.0))
    orig = int(s.pop("original_max_position", 8192))
    if s:
        raise ValueError(f"scaling: unknown keys {sorted(s)}")
    _qkv.rope(out, pos, h, t, d, pairing=1 if pairing == "interleaved" else 0, theta=float(theta),
              scaling=1 if kind == "llama3" else 0, factor=factor, low=low, high=high, orig=orig)
    return out


class KVCache:
    """One layer's K/V cache: [Hkv, capacity, D] of dtype "f32", "bf16" or "f16".

    append(k, v) converts [Hkv, n, D] float32 rows to the cache dtype; attention(q, ...)
    attends [Hq, Lq, D] queries to every row held, arguments as qkv.attention.
    """

    def __init__(self, n_kv_head, head_dim, capacity, dtype="f32"):
        self._c = _qkv.KVCache(int(n_kv_head), int(head_dim), int(capacity), dtype)
        self.n_kv_head, self.head_dim = int(n_kv_head), int(head_dim)

    def __len__(self):
        return self._c.length

    @property
    def capacity(self):
        return self._c.capacity

    @property
    def dtype(self):
        return self._c.dtype

    def _rows(self, x, name):
        x = _c_array(x, np.float32, name)
        if x.ndim != 3 or x.shape[0] != self.n_kv_head or x.shape[2] != self.head_dim:
            raise ValueError(f"{name}: expected [{self.n_kv_head}, n, {self.head_dim}], got shape {x.shape}")
        return x

    def append(self, k, v):
        """Appends k, v [Hkv, n, D] float32 (ValueError when the cache would overflow: nothing written)."""
        k, v = self._rows(k, "k"), self._rows(v, "v")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
        self._c.append(k, v, k.shape[1])

    def read(self, start=0, n=None):
        """Rows start .. start+n-1 as float32 (k, v), each [Hkv, n, D]."""
        n = len(self) - start if n is None else n
        k = np.empty((self.n_kv_head, max(n, 0), self.head_dim), dtype=np.float32)
        v = np.empty_like(k)
        self._c.read(k, v, int(start), int(n))
        return k, v

    def truncate(self, length):
        """Forgets every row from `length` on."""
        self._c.truncate(int(length))

    def attention(self, q, *, causal=False, window=None, sinks=0, exclude=None, scale=None, softcap=0.0,
                  kernel="auto", return_lse=False, threads=0):
        """Attention of q [Hq, Lq, D] float32 against the rows held; returns o (and lse).
        softcap > 0: scores become softcap * tanh(s / softcap) (Gemma 2), as in attention()."""
        q = _c_array(q, np.float32, "q")
        if q.ndim != 3 or q.shape[2] != self.head_dim:
            raise ValueError(f"q: expected [Hq, Lq, {self.head_dim}], got shape {q.shape}")
        if q.shape[0] % self.n_kv_head:
            raise ValueError(f"query heads ({q.shape[0]}) must be a multiple of KV heads ({self.n_kv_head})")
        kind, window, sinks, exclude = _mask_args(causal, window, sinks, exclude, len(self))
        softcap = float(softcap)
        if not (np.isfinite(softcap) and softcap >= 0):
            raise ValueError(f"softcap must be finite and >= 0 (0 = none), got {softcap}")
        o = np.empty(q.shape, dtype=np.float32)
        lse = np.empty(q.shape[:-1], dtype=np.float32) if return_lse else None
        self._c.attention(o, lse, q, n_q_head=q.shape[0], q_len=q.shape[1],
                          scale=0.0 if scale is None else float(scale), softcap=softcap, mask=kind, window=window,
                          sinks=sinks, exclude=exclude, kernel=kernel, threads=int(threads))
        return (o, lse) if return_lse else o
