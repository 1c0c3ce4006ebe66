"""Activation points of a forward call in TransformerLens's names, for
Model.run_with_cache and Model.run_with_hooks: the names themselves, the cache
they fill, and the wrappers that turn a user's hook into the one the extension
calls (qkv/_qkv: hooks.c). Shapes are TransformerLens's without the batch
dimension: n = tokens, E = n_embd, Hq / Hkv = query / KV heads, D = head_dim.

    hook_embed, blocks.L.hook_resid_pre / hook_attn_out / hook_resid_mid /
    hook_mlp_out / hook_resid_post, ln_final.hook_normalized    [n, E]
    blocks.L.attn.hook_q / hook_rot_q / hook_z                  [n, Hq, D]
    blocks.L.attn.hook_k / hook_rot_k / hook_v                  [n, Hkv, D]
    blocks.L.attn.hook_pattern                                  [Hq, n, n]  read-only

hook_q and hook_k are before RoPE, hook_rot_q and hook_rot_k after it (the
cache stores rot_k); hook_z is each head's output before W_O.
ln_final.hook_normalized is the final RMSNorm before its weight, x / rms(x), as
TransformerLens's RMSNorm hook_normalized.
"""
import collections.abc
import dataclasses

import numpy as np

from . import _qkv

# (name within a block or the whole name, per layer), in forward order (qkv_hook_point)
POINTS = tuple(_qkv.hook_points())
PATTERN = "attn.hook_pattern"


def hook_names(n_layer):
    """Every activation point's full name, in the order the forward reaches them."""
    outside = [p for p, per_layer in POINTS if not per_layer]  # hook_embed first, ln_final last
    blocks = [f"blocks.{layer}.{p}" for layer in range(n_layer) for p, per_layer in POINTS if per_layer]
    return outside[:1] + blocks + outside[1:]


def layer_of(name):
    """The block index in a full name; None for hook_embed and ln_final.hook_normalized."""
    return int(name.split(".")[1]) if name.startswith("blocks.") else None


def resolve(names, n_layer, what):
    """The full names that names stand for, each once, in forward order: a
    name, "blocks.*.<point>" (every layer), or a callable name -> bool.
    ValueError naming every name that is no activation point of the model."""
    all_names = hook_names(n_layer)
    known = set(all_names)
    chosen, unknown = set(), []
    for name in names:
        if callable(name):
            chosen.update(n for n in all_names if name(n))
        elif not isinstance(name, str):
            raise TypeError(f"{what}: expected hook names (str) or a callable, got {type(name).__name__}")
        elif name.startswith("blocks.*."):
            hits = [n for n in all_names if n.startswith("blocks.") and n.split(".", 2)[2] == name[9:]]
            chosen.update(hits)
            if not hits:
                unknown.append(name)
        elif name in known:
            chosen.add(name)
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"{what}: unknown hook name{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} "
                         f"(this model's: hook_embed, blocks.<0..{n_layer - 1}>.<point>, ln_final.hook_normalized; "
                         f"points: {', '.join(p for p, per_layer in POINTS if per_layer)})")
    return [n for n in all_names if n in chosen]


@dataclasses.dataclass(frozen=True)
class Hook:
    """Where a hook function is called: its full name ("blocks.3.attn.hook_z") and
    block index (None for hook_embed and ln_final.hook_normalized)."""
    name: str
    layer: object


def user_hook(fn, name):
    """The extension's hook for fn(activation, hook) at name: fn gets a float32
    copy of the activation (its own, writable; read-only at hook_pattern). What
    it leaves in that copy goes back into the forward, or the array it returns
    instead (same shape, float32 or convertible to it)."""
    hook = Hook(name, layer_of(name))
    read_only = name.endswith(PATTERN)

    def call(data, shape, layer):
        act = np.frombuffer(data, dtype=np.float32).reshape(shape)
        if read_only:
            act.flags.writeable = False
        r = fn(act, hook)
        if r is None:
            return None if read_only else act
        if read_only:
            raise ValueError(f"hook {name}: hook_pattern is read-only, the function must return None")
        out = np.asarray(r)
        if out.shape != act.shape:
            raise ValueError(f"hook {name}: returned shape {out.shape}, expected {act.shape}")
        if not np.can_cast(out.dtype, np.float32, casting="same_kind"):
            raise ValueError(f"hook {name}: returned dtype {out.dtype}, expected float32 (or a real dtype)")
        return np.ascontiguousarray(out, dtype=np.float32)

    return call


def cache_hook(acts, name):
    """The extension's hook that stores the activation at name in acts (the copy is its own)."""
    def call(data, shape, layer):
        acts[name] = np.frombuffer(data, dtype=np.float32).reshape(shape)

    return call


class ActivationCache(collections.abc.Mapping):
    """The activations of one forward call (Model.run_with_cache): full hook name ->
    float32 numpy array in TransformerLens's shape WITHOUT the batch dimension
    ([n, E], [n, H, D], [Hq, n, n]; see Model.run_with_cache). As
    TransformerLens, cache["pattern", 3] is cache["blocks.3.attn.hook_pattern"]
    (and "resid_pre", "q", "z", "attn_out", ... likewise)."""

    def __init__(self, acts):
        self._acts = dict(acts)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            short, layer = key
            key = next((f"blocks.{int(layer)}.{p}" for p, per_layer in POINTS
                        if per_layer and p.rsplit(".", 1)[-1] == f"hook_{short}"), f"blocks.{layer}.hook_{short}")
        try:
            return self._acts[key]
        except KeyError:
            raise KeyError(f"{key!r} is not in the cache (not a hook name, or left out by names_filter)") from None

    def __iter__(self):
        return iter(self._acts)

    def __len__(self):
        return len(self._acts)

    def __repr__(self):
        return f"<qkv.ActivationCache: {len(self._acts)} activations>"
