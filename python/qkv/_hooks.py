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


def _positions(a, pos_slice, axis):
    """a along axis `axis` as TransformerLens's Slice takes it: None every position,
    an int that one (the axis dropped), a slice, a (start, stop[, step]) tuple, or
    a list of positions."""
    if pos_slice is None:
        return a
    if isinstance(pos_slice, tuple):
        pos_slice = slice(*pos_slice)
    elif not isinstance(pos_slice, (int, np.integer, slice)):
        pos_slice = np.asarray(pos_slice)
        if pos_slice.ndim != 1 or not np.issubdtype(pos_slice.dtype, np.integer):
            raise ValueError("pos_slice: expected None, an int, a slice, a (start, stop) tuple or a list of positions")
    index = [slice(None)] * a.ndim
    index[axis] = pos_slice
    return a[tuple(index)]


class ActivationCache(collections.abc.Mapping):
    """The activations of one forward call (Model.run_with_cache): full hook name ->
    float32 numpy array in TransformerLens's shape WITHOUT the batch dimension
    ([n, E], [n, H, D], [Hq, n, n]; see Model.run_with_cache). As
    TransformerLens, cache["pattern", 3] is cache["blocks.3.attn.hook_pattern"]
    (and "resid_pre", "q", "z", "attn_out", ... likewise).

    decompose_resid, stack_head_results and apply_ln_to_stack are
    TransformerLens's, without the batch dimension: a stack is [components, n, E]
    ([components, E] for an int pos_slice). Their apply_ln divides by the RMS the
    model's own norm took of that residual in this run (frozen, as TransformerLens's
    cached hook_scale; recomputed in float64 from the cached residual) and does NOT
    multiply by the norm's weight: TransformerLens folds that weight into the next
    matrix (fold_ln), here it stays in the model (m.attribute applies it)."""

    def __init__(self, acts, model=None, n_tokens=None):
        self._acts = dict(acts)
        self._model = model  # the qkv.Model that ran: its config, and Wo for stack_head_results
        self._n = n_tokens

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

    # ------------------------------------------------ the residual stream in parts

    def _config(self, what):
        if self._model is None:
            raise ValueError(f"{what}: this cache was not made by Model.run_with_cache (it knows no model)")
        return self._model.config

    def _need(self, names, what):
        """KeyError naming every one of names the cache lacks."""
        missing = [n for n in names if n not in self._acts]
        if missing:
            raise KeyError(f"{what} needs {', '.join(map(repr, missing))}, not in the cache "
                           f"(run_with_cache with names_filter=None, or with these names)")

    def _layer(self, layer, what):
        L = self._config(what).n_layer
        if layer is None or layer == -1:
            return L
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= L:
            raise ValueError(f"{what}: layer must be in [0, {L}], -1 or None (the final residual), got {layer!r}")
        return int(layer)

    def _empty_stack(self, pos_slice):
        """A stack of no components: [0, n', E] for the positions pos_slice picks."""
        rows = _positions(np.zeros((self._n, self._model.config.n_embd), np.float32), pos_slice, 0)
        return rows[None][:0]

    def _ln_input(self, layer, mlp_input):
        """The residual the norm at the input of `layer` reads: resid_pre (resid_mid
        with mlp_input) of that layer, or the final residual for layer = n_layer."""
        L = self._model.config.n_layer
        if layer == L:
            return f"blocks.{L - 1}.hook_resid_post"
        return f"blocks.{layer}.hook_{'resid_mid' if mlp_input else 'resid_pre'}"

    def apply_ln_to_stack(self, residual_stack, layer=None, mlp_input=False, pos_slice=None):
        """residual_stack [components, n', E] (or [components, E] for an int pos_slice)
        divided by the RMS the norm at the input of `layer` (None or -1: the final
        norm; mlp_input: that layer's MLP norm) took in this run, frozen:
        sqrt(mean(x^2) + eps) of that cached residual at the positions pos_slice
        picks. The norm's weight is not applied (see the class). float32. OLMo 2
        has no norm at a layer's input, only the final one: ValueError for a layer."""
        layer = self._layer(layer, "apply_ln_to_stack")
        if mlp_input and layer == self._model.config.n_layer:
            raise ValueError("apply_ln_to_stack: mlp_input needs a layer below n_layer")
        if self._model.config.no_pre_norms and layer < self._model.config.n_layer:
            raise ValueError(f"apply_ln_to_stack: {self._model.config.arch} has no norm at the input of layer "
                             f"{layer} (its sublayers read the residual stream itself); only the final norm")
        name = self._ln_input(layer, mlp_input)
        self._need([name], "apply_ln_to_stack")
        x = self._acts[name].astype(np.float64)
        scale = np.sqrt((x * x).mean(axis=-1) + float(self._model.config.norm_eps))  # [n]
        scale = _positions(scale, pos_slice, 0)
        stack = np.asarray(residual_stack)
        if stack.shape[1:-1] != np.shape(scale):
            raise ValueError(f"apply_ln_to_stack: a stack of shape {stack.shape} for {np.shape(scale)} positions")
        return (stack / scale[..., None]).astype(np.float32)

    def decompose_resid(self, layer=None, mlp_input=False, mode="all", apply_ln=False, pos_slice=None,
                        incl_embeds=True, return_labels=False):
        """The residual stream entering `layer` (None or -1: the final residual) as the
        stack of what wrote it, TransformerLens's decompose_resid: hook_embed (for
        Gemma the scaled embedding), then for each earlier layer hook_attn_out and
        hook_mlp_out (as added to the stream: for Gemma after its post-sublayer
        norms, so the parts add up there too), and with mlp_input also `layer`'s
        attn_out. mode "all", "attn" (attention parts only) or "mlp". The stack is
        float32 [components, n, E] (pos_slice: see apply_ln_to_stack); with all of
        it, its sum is the cached resid_pre of `layer` (float32 sums). labels:
        "embed", "3_attn_out", "3_mlp_out". KeyError naming the activations the
        cache lacks."""
        layer = self._layer(layer, "decompose_resid")
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f'decompose_resid: mode must be "all", "attn" or "mlp", got {mode!r}')
        if mlp_input and layer == self._model.config.n_layer:
            raise ValueError("decompose_resid: mlp_input needs a layer below n_layer")
        parts = [("hook_embed", "embed")] if incl_embeds else []
        for l in range(layer):
            if mode != "mlp":
                parts.append((f"blocks.{l}.hook_attn_out", f"{l}_attn_out"))
            if mode != "attn":
                parts.append((f"blocks.{l}.hook_mlp_out", f"{l}_mlp_out"))
        if mlp_input and mode != "mlp":
            parts.append((f"blocks.{layer}.hook_attn_out", f"{layer}_attn_out"))
        need = [name for name, _ in parts] + ([self._ln_input(layer, mlp_input)] if apply_ln else [])
        self._need(need, "decompose_resid")
        stack = (np.stack([_positions(self._acts[name], pos_slice, 0) for name, _ in parts]) if parts
                 else self._empty_stack(pos_slice))
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        labels = [label for _, label in parts]
        return (stack, labels) if return_labels else stack

    def stack_head_results(self, layer=-1, return_labels=False, incl_remainder=False, pos_slice=None,
                           apply_ln=False):
        """Each attention head's output in the residual stream for every layer below
        `layer` (-1 or None: all), TransformerLens's stack_head_results: head h of
        layer l is its hook_z through its own slice of Wo, z_h Wo[:, hD:(h+1)D]^T
        (libqkv computes it on the model's weights in their GGUF type,
        qkv_model_head_result); float32 [layer * Hq, n, E], layer-major (labels
        "L3H5"); incl_remainder adds resid_pre of `layer` minus their sum. Needs
        hook_z of those layers in the cache (KeyError naming the missing ones).
        The heads sum to hook_attn_out only where nothing normalises the attention
        output: for Gemma 2 / 3 (post-attention norm) a head's output is not a
        part of the residual stream, and this raises ValueError (decompose_resid
        gives each layer's attn_out, which is)."""
        c = self._config("stack_head_results")
        layer = self._layer(layer, "stack_head_results")
        if c.post_norms:
            raise ValueError(f"stack_head_results: {c.arch} normalises each attention output (post-attention norm) "
                             "before it enters the residual stream, so single heads are not additive parts of it; "
                             "decompose_resid gives each layer's hook_attn_out")
        zs = [f"blocks.{l}.attn.hook_z" for l in range(layer)]
        rest = [self._ln_input(layer, False)] if incl_remainder or apply_ln else []
        self._need(zs + rest, "stack_head_results")
        Hq, E = c.n_head, c.n_embd
        parts = []
        for name, l in zip(zs, range(layer)):
            z = _positions(self._acts[name], pos_slice, 0)
            one = z.ndim == 2  # an int pos_slice: [Hq, D]
            z = np.ascontiguousarray(z[None] if one else z, dtype=np.float32)
            out = np.empty((len(z), Hq, E), dtype=np.float32)
            self._model._c.head_result(out, l, z)
            parts.append(np.moveaxis(out[0] if one else out, -2, 0))  # [Hq, (n,) E]
        stack = np.concatenate(parts) if parts else self._empty_stack(pos_slice)
        labels = [f"L{l}H{h}" for l in range(layer) for h in range(Hq)]
        if incl_remainder:
            total = _positions(self._acts[rest[0]], pos_slice, 0)
            remainder = total - stack.sum(axis=0) if len(stack) else total
            stack = np.concatenate([stack, remainder[None].astype(np.float32)])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack
