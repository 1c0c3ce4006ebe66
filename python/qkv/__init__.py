"""qkv: exact, fast self-attention of Llama-family models, from Python.

numpy arrays in and out, on the same C code as libqkv (the extension
qkv._qkv is compiled from its sources). Shapes follow PyTorch's
scaled_dot_product_attention: q [Hq, Lq, D] or [B, Hq, Lq, D], k and v
[Hkv, Lk, D] (batched alike), GQA when Hq is a multiple of Hkv, causal masks
aligned bottom-right (query row i sits at key position Lk - Lq + i).

    import numpy as np, qkv
    o, lse = qkv.attention(q, k, v, causal=True, return_lse=True)
    with qkv.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf") as m:
        ids = m.tokenize("The quick brown fox")
        w = m.attention(ids, layer=3, head=0)      # [n, n] exact weights
        logits, cache = m.run_with_cache(ids)      # TransformerLens's names, no batch dim
        z = cache["blocks.3.attn.hook_z"]          # [n, Hq, D]
        r = m.patch("年假怎么申请？", "病假怎么申请？")  # activation patching (also attribute, lens)
    w = qkv.Weights("models/SmolLM2-135M-Instruct.Q4_1.gguf")  # one copy of the weights,
    a, b = qkv.Model(w), qkv.Model(w)                           # two sequences over it
"""
from ._attention import KVCache, attention, attention_reference, rope
from ._hooks import ActivationCache, Hook
from ._model import Config, Inspection, LayerAttention, Model, Weights
from ._patch import Attribution, Lens, PatchResult, spearman
from . import _qkv

__version__ = _qkv.version()


def isa():
    """The instruction set the attention kernels run on here: "avx512", "avx2" or "scalar"."""
    return _qkv.isa()


__all__ = ["attention", "attention_reference", "rope", "KVCache", "Model", "Weights", "Config", "LayerAttention", "Inspection", "ActivationCache",
           "Hook", "PatchResult", "Attribution", "Lens", "spearman", "isa", "__version__"]
