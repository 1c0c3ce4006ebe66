"""qkv.Model: a Llama-family GGUF model, its tokenizer, and exact attention maps.

n = tokens, V = vocabulary, L = layers, Hq = query heads. forward, run_with_cache,
run_with_hooks, attention and sinks each run their ids as a fresh sequence from
position 0; an intervention (zero_heads=, a hook) lasts for that call only.
The long calls (attention, sinks, inspect, ablate, stream, needle) take
progress=: None, True (a bar) or fn(done, total) (_progress.py).
"""
import codecs
import dataclasses
import html
import os
import tempfile
import time
import warnings

import numpy as np

from . import _hooks, _patch, _progress, _qkv

# qkv needle's defaults (cli/cmd_needle.c)
GPL3 = "/usr/share/common-licenses/GPL-3"
NEEDLE = "The secret number that unlocks the archive is 4817."
QUESTION = "What is the secret number that unlocks the archive? Answer with the number only."
ANSWER = "4817"


@dataclasses.dataclass(frozen=True)
class LayerAttention:
    """One layer's attention as the model runs it (qkv_layer_attn): window 0 is
    causal over every earlier key, W the last W keys; softcap 0 is none; no_rope
    a layer without RoPE."""
    n_head: int
    n_kv_head: int
    head_dim: int
    scale: float
    window: int
    softcap: float
    rope_theta: float
    qk_norm: int  # 0 none, 1 per head (qwen3, gemma3), 2 over the whole projection (olmo2)
    qkv_bias: bool
    no_rope: bool  # q and k unrotated (SmolLM3's every fourth layer)


Config = dataclasses.make_dataclass("Config", _qkv.CONFIG_FIELDS, frozen=True, namespace={
    "__module__": __name__,
    "__doc__": """What the GGUF says about the model (qkv_model_config), plus the open context
    (n_ctx, bos, eos, path). arch names the family (llama, qwen2, qwen3, gemma2, gemma3, smollm3,
    olmo2, phi3); layers holds each layer's attention spec (LayerAttention). The fields are the C
    struct's, as the extension lists them (qkv._qkv.CONFIG_FIELDS)."""})


class Inspection:
    """The attention maps of one sequence as `qkv inspect` draws them: the page of
    --html (every requested map as a heatmap, hover for query, key and weight,
    self-contained: no network) and the figure of --png. Shown inline in Jupyter
    (_repr_html_, in an iframe); save_html and save_png write the files.

    png_labels: whether the PNG has its text (token labels, title, captions,
    legend), drawn with GNU Unifont from /usr/share/unifont/unifont.hex (or
    $QKV_FONT) as read when inspect ran; without that file the figure has the
    heatmaps only, and save_png warns."""

    def __init__(self, page, figure, n_tokens, layers, heads):
        self.html = page
        self._figure = figure
        self.n_tokens, self.layers, self.heads = n_tokens, list(layers), list(heads)
        self.png_labels = _qkv.png_has_font(figure)

    def _repr_html_(self):
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
                f'style="width: 100%; height: 820px; border: 0"></iframe>')

    def save_html(self, path):
        """Writes the page to path, whole or not at all (a temporary beside it, then a
        rename): on failure, OSError with the library's message, an existing file intact."""
        _qkv.file_replace(os.fspath(path), self.html.encode("utf-8"))

    def save_png(self, path):
        """Writes the figure `qkv inspect --png` draws for the same ids, layers and heads
        (the same code, pixel for pixel): one viridis panel per map, each normalised to
        its own largest weight, maps above the panel size max-pooled. Whole or not at
        all, as save_html."""
        if not self.png_labels:
            warnings.warn("no font at /usr/share/unifont/unifont.hex ($QKV_FONT) when inspect ran: "
                          "the PNG has no labels (Debian: apt-get install unifont)", stacklevel=2)
        _qkv.png_save(self._figure, os.fspath(path))

    def __repr__(self):
        return (f"<qkv.Inspection: {self.n_tokens} tokens, {len(self.layers)} layers x {len(self.heads)} heads, "
                f"{len(self.html):,} bytes of HTML>")


_SINK_FIELDS = ("sink", "first", "top_other", "top_other_dist", "sink_top", "entropy")


class _Closable:
    """A context manager that calls close() on exit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Weights(_Closable):
    """Weights(path): a GGUF's weights, opened once and shared by every Model made on them.

    Model(weights, ...) is a sequence of its own (KV cache, run state) over these
    weights: several at once cost one copy of the weights. Each Model keeps the
    weights alive, so close() here (or dropping this object) frees them only
    after the last Model on them is closed. nbytes: the file's mapping and the
    tensors dequantised at open.
    """

    def __init__(self, path):
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"path: expected a file name, got {type(path).__name__}")
        self._c = _qkv.Weights(os.fspath(path))
        self.path = os.fspath(path)

    @property
    def nbytes(self):
        return self._c.nbytes()

    def close(self):
        """Drops these weights; Models already made on them keep theirs. New Models raise ValueError."""
        self._c.close()

    def __repr__(self):
        return f"qkv.Weights({self.path!r})"


class Model(_Closable):
    """Model(source, *, ctx=None, threads=0, kv_dtype="f32"): a GGUF model opened for inference.

    source: a file name (the model opens its own weights), or a qkv.Weights that
    several Models share (each its own sequence and KV cache, one copy of the weights).
    ctx: positions the KV cache holds (None: min(training context, 8192));
    threads: 0 = all cores; kv_dtype: "f32", "bf16" or "f16" KV cache.
    Use as a context manager, or call close().
    """

    def __init__(self, source, *, ctx=None, threads=0, kv_dtype="f32"):
        if not isinstance(source, (str, bytes, os.PathLike, Weights)):
            raise TypeError(f"source: expected a file name or qkv.Weights, got {type(source).__name__}")
        if ctx is not None and int(ctx) < 1:
            raise ValueError(f"ctx must be >= 1, got {ctx}")
        c_source = source._c if isinstance(source, Weights) else os.fspath(source)
        self._c = _qkv.Model(c_source, 0 if ctx is None else int(ctx), kv_dtype, int(threads))
        raw = self._c.config()
        raw["layers"] = tuple(LayerAttention(**a) for a in raw["layers"])
        self.config = Config(**raw)
        self._generating = False  # a generate() iterator holds the KV cache
        self._kv_elem = {"f32": 4, "bf16": 2, "f16": 2}.get(kv_dtype, 4)  # bytes per cached K or V element

    def close(self):
        """Frees the model; later calls raise ValueError."""
        self._c.close()

    def __repr__(self):
        c = self.config
        return f"qkv.Model({c.path!r}: {c.n_layer} layers, {c.n_head} heads x {c.head_dim}, vocab {c.n_vocab})"

    # ------------------------------------------------------------ tokens

    def tokenize(self, text, *, chat=False, special=False, system=None, add_special=True):
        """Token ids (int32 [n]) of text; chat=True wraps it in the model's chat template
        (one user turn, the assistant header after it; special tokens parsed);
        special=True recognises control tokens written in the text; add_special=False
        leaves out the BOS/EOS the GGUF asks for."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected str, got {type(text).__name__}")
        data = text.encode("utf-8", "surrogatepass")
        if chat:
            data = self._c.chat_text(data, system)  # str or None: the C side takes it as UTF-8
            special = True
            bos = self._c.piece(self.config.bos) if self.config.bos >= 0 else None
            if bos and data.startswith(bos):
                add_special = False  # the template's BOS, not a second one (as qkv's CLI)
        return np.frombuffer(self._c.tokenize(data, bool(add_special), bool(special)), dtype=np.int32).copy()

    def detokenize(self, ids, *, skip_special=False):
        """The text of ids (invalid UTF-8 from partial tokens shown as U+FFFD)."""
        return self._c.detokenize(self._ids(ids), bool(skip_special)).decode("utf-8", "replace")

    def piece(self, token_id):
        """The bytes one token stands for in text."""
        p = self._c.piece(int(token_id))
        if p is None:
            raise ValueError(f"token id {token_id} outside [0, {self.config.n_vocab})")
        return p

    def _ids(self, ids, *, allow_empty=False):
        a = np.asarray(ids)
        if a.ndim != 1 or not (a.size == 0 or np.issubdtype(a.dtype, np.integer)):
            raise TypeError("ids: expected a 1-D sequence of integer token ids")
        if a.size == 0 and not allow_empty:
            raise ValueError("ids: no tokens")
        if a.size and (a.min() < 0 or a.max() >= self.config.n_vocab):
            raise ValueError(f"ids: token ids must be in [0, {self.config.n_vocab}), got {a.min()} .. {a.max()}")
        return np.ascontiguousarray(a, dtype=np.int32)

    def _fits(self, n):
        if self._generating:
            raise RuntimeError("a generate() iterator of this model is running: exhaust or close() it first")
        if n > self.config.n_ctx:
            raise ValueError(f"{n} tokens do not fit the context of {self.config.n_ctx} (open with ctx=)")

    # ----------------------------------------------------------- forward

    def forward(self, ids, *, positions="all", zero_heads=None):
        """Logits float32 [rows, V] of the sequence ids at the positions asked for:
        "all" (every position), "last", or a list of positions (rows in that order).
        Only those rows go through the output layer: the sequence runs in one
        forward call per requested position (each up to it), so memory is
        [rows, V], never [n, V]. zero_heads: [(layer, head), ...] whose output
        (hook_z) is zeroed before W_O, at every position, in this call only."""
        ids = self._ids(ids)
        n, V = len(ids), self.config.n_vocab
        self._fits(n)
        zero = self._zero_heads(zero_heads)
        self._c.rewind(0)
        try:
            if isinstance(positions, str):
                if positions not in ("all", "last"):
                    raise ValueError(f'positions must be "all", "last" or a list of positions, got {positions!r}')
                out = np.empty((n if positions == "all" else 1, V), dtype=np.float32)
                self._c.forward(out, ids, positions == "all", zero_heads=zero)
                return out
            pos = np.asarray(positions)
            if pos.ndim != 1 or pos.size == 0 or not np.issubdtype(pos.dtype, np.integer):
                raise ValueError("positions: expected a non-empty 1-D list of integer positions")
            if pos.min() < 0 or pos.max() >= n:
                raise ValueError(f"positions must be in [0, {n}), got {pos.min()} .. {pos.max()}")
            wanted = np.unique(pos)
            rows = np.empty((len(wanted), V), dtype=np.float32)
            start = 0
            for i, p in enumerate(wanted):
                self._c.forward(rows[i], ids[start:p + 1], False, zero_heads=zero)
                start = p + 1
            return rows[np.searchsorted(wanted, pos)]
        finally:
            self._c.rewind(0)

    def _zero_heads(self, zero_heads):
        """int32 [k, 2] (layer, head) for the extension, or None."""
        if zero_heads is None:
            return None
        a = np.asarray(zero_heads)
        if a.size == 0:
            return None
        if a.ndim != 2 or a.shape[1] != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError("zero_heads: expected a list of (layer, head) pairs of integers")
        c = self.config
        bad = (a[:, 0] < 0) | (a[:, 0] >= c.n_layer) | (a[:, 1] < 0) | (a[:, 1] >= c.n_head)
        if bad.any():
            raise ValueError(f"zero_heads: ({a[bad][0, 0]}, {a[bad][0, 1]}) outside layers [0, {c.n_layer}) "
                             f"x heads [0, {c.n_head})")
        return np.ascontiguousarray(a, dtype=np.int32)

    # ------------------------------------------- activations (TransformerLens)

    @property
    def hook_names(self):
        """The full names of the activation points, in forward order: hook_embed,
        blocks.L.hook_resid_pre, blocks.L.attn.hook_q ... blocks.L.hook_resid_post,
        ln_final.hook_normalized (TransformerLens's names; shapes at run_with_cache)."""
        return _hooks.hook_names(self.config.n_layer)

    def _run(self, ids, hooks, zero_heads):
        """Logits float32 [n, V] of one forward call of ids from position 0 with these hooks."""
        ids = self._ids(ids)
        n = len(ids)
        self._fits(n)
        zero = self._zero_heads(zero_heads)
        logits = np.empty((n, self.config.n_vocab), dtype=np.float32)
        self._c.rewind(0)
        try:
            self._c.forward(logits, ids, True, hooks=hooks, zero_heads=zero)
        finally:
            self._c.rewind(0)
        return logits

    def run_with_cache(self, ids, names_filter=None, *, zero_heads=None):
        """(logits, cache) of one forward call of ids, as TransformerLens's
        run_with_cache: logits float32 [n, V]; cache an ActivationCache, full hook
        name -> float32 array in TransformerLens's shape WITHOUT the batch dimension
        (n = tokens, E = n_embd, Hq / Hkv = query / KV heads, D = head_dim):
          hook_embed, blocks.L.hook_resid_pre / hook_attn_out / hook_resid_mid /
          hook_mlp_out / hook_resid_post, ln_final.hook_normalized   [n, E]
          blocks.L.attn.hook_q / hook_rot_q / hook_z                 [n, Hq, D]
          blocks.L.attn.hook_k / hook_rot_k / hook_v                 [n, Hkv, D]
          blocks.L.attn.hook_pattern                                 [Hq, n, n]
        hook_q / hook_k are before RoPE, hook_rot_q / hook_rot_k after it;
        ln_final.hook_normalized is x / rms(x), before the norm's weight (as
        TransformerLens's RMSNorm). The cache also takes TransformerLens's
        decompose_resid, stack_head_results and apply_ln_to_stack. names_filter: None (every point: the patterns are
        L x Hq x n x n floats, so keep prompts short), a name, a list of names
        ("blocks.*.<point>" for every layer), or a callable name -> bool.
        ValueError naming any unknown name. zero_heads: as forward's."""
        if names_filter is None:
            names = self.hook_names
        else:
            wanted = [names_filter] if isinstance(names_filter, str) or callable(names_filter) else names_filter
            names = _hooks.resolve(wanted, self.config.n_layer, "names_filter")
        acts = {}
        logits = self._run(ids, [(name, _hooks.cache_hook(acts, name)) for name in names], zero_heads)
        return logits, _hooks.ActivationCache(acts, self, len(logits))

    def run_with_hooks(self, ids, fwd_hooks=(), *, zero_heads=None):
        """Logits float32 [n, V] of one forward call of ids with fwd_hooks, a list of
        (name, fn) as TransformerLens's: name a full hook name (run_with_cache lists
        them), "blocks.*.<point>" for every layer, or a callable name -> bool;
        fn(activation, hook) is called where the forward reaches that point (in list
        order at one point), with activation a float32 numpy COPY (the batch
        dimension dropped, shapes as run_with_cache's) and hook.name, hook.layer.
        fn returns None, and what it left in the copy (edited in place or not) goes
        on into the forward; or an array of the same shape (float32, or a real dtype
        converted to it) that replaces the activation. A wrong shape or dtype:
        ValueError. hook_pattern is read-only (the copy is a read-only array; a
        returned value is a ValueError). An exception raised in fn stops the forward
        and propagates as it was raised. The hooks last for this call only."""
        hooks = []
        for item in fwd_hooks:
            if not (isinstance(item, (tuple, list)) and len(item) == 2 and callable(item[1])):
                raise TypeError("fwd_hooks: expected a list of (name, function) pairs")
            name, fn = item
            hooks += [(full, _hooks.user_hook(fn, full))
                      for full in _hooks.resolve([name], self.config.n_layer, "fwd_hooks")]
        return self._run(ids, hooks, zero_heads)

    def generate(self, prompt, n=32, *, temp=0.0, top_k=0, top_p=1.0, seed=1, chat=False):
        """An iterator of (token id, text) for up to n new tokens after prompt (a
        string, tokenized, or ids); greedy when temp is 0; stops where `qkv run` stops, at
        a token that ends the turn (the EOS or an end-of-turn control token such as
        <|im_end|>, <|eot_id|>: libqkv's qkv_token_ends_turn).
        The text of a token is what it adds to the decoded output (a character cut
        between tokens comes with the token that completes it)."""
        ids = self.tokenize(prompt, chat=chat) if isinstance(prompt, str) else self._ids(prompt)
        self._fits(len(ids) + max(int(n) - 1, 0))
        sampler = _qkv.Sampler(self.config.n_vocab, float(temp), int(top_k), float(top_p), int(seed))
        return self._generate(ids, int(n), sampler)

    def _generate(self, ids, n, sampler):
        logits = np.empty((1, self.config.n_vocab), dtype=np.float32)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._fits(len(ids))
        self._generating = True
        self._c.rewind(0)
        try:
            self._c.forward(logits, ids, False)
            for step in range(n):
                tok = sampler.sample(logits[0])
                if self._c.ends_turn(tok):
                    return
                yield tok, decoder.decode(self._c.piece(tok))
                if step + 1 < n:
                    self._c.forward(logits, np.array([tok], dtype=np.int32), False)
        finally:
            self._generating = False
            self._c.rewind(0)

    # --------------------------------------------------------- attention

    def attention(self, ids, *, layer=None, head=None, layers=None, heads=None, rows=None, progress=None):
        """Exact attention weights of the sequence ids, recomputed from the kernel's LSE:
        w[i, j] = exp(scale * q_i . k_j - lse_i), 0 where masked.
        layer=, head= (ints): [n_rows, n]. layers=, heads= (lists): [layers, heads, n_rows, n].
        rows: query positions (default all, in order). progress: None, True (a bar) or
        fn(done, total), after each layer of the forward call (of n_layer)."""
        ids = self._ids(ids)
        n = len(ids)
        self._fits(n)
        single = layers is None and heads is None
        if single and (layer is None or head is None):
            raise TypeError("attention: give layer= and head=, or layers= and heads= lists")
        if not single and (layer is not None or head is not None):
            raise TypeError("attention: give layer=/head= or layers=/heads=, not both")
        ls = np.atleast_1d(np.asarray(layer if single else layers))
        hs = np.atleast_1d(np.asarray(head if single else heads))
        rs = np.arange(n) if rows is None else np.atleast_1d(np.asarray(rows))
        for name, a, top in (("layers", ls, self.config.n_layer), ("heads", hs, self.config.n_head), ("rows", rs, n)):
            if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"{name}: expected a non-empty list of integers")
            if a.min() < 0 or a.max() >= top:
                raise ValueError(f"{name} must be in [0, {top}), got {a.min()} .. {a.max()}")
            if len(np.unique(a)) != len(a):
                raise ValueError(f"{name}: an entry is repeated")
        order = np.argsort(ls, kind="stable")  # the engine takes layers in increasing order
        out = np.empty((len(ls), len(hs), len(rs), n), dtype=np.float32)
        with _progress.Progress(progress, "attention", "layers", self.config.n_layer) as pr:
            self._c.maps(out=out, ids=ids, layers=np.ascontiguousarray(ls[order], dtype=np.int32),
                         heads=np.ascontiguousarray(hs, dtype=np.int32), rows=np.ascontiguousarray(rs, dtype=np.int32),
                         progress=pr.fn)
        if not np.array_equal(order, np.arange(len(ls))):
            out = out[np.argsort(order)]
        return out[0, 0] if single else out

    def sinks(self, ids, *, n_first=4, skip=16, every=16, progress=None):
        """Attention sinks of the sequence ids, per layer and head (qkv sinks): a dict of
        float64 [L, Hq] arrays — sink (weight on token 0), first (on tokens 0..n_first-1),
        top_other, top_other_dist, sink_top, entropy (from every `every`-th row) — and
        int64 [L, Hq] n_rows, n_sampled. Rows at positions < skip are left out.
        progress: as attention's (per layer)."""
        ids = self._ids(ids)
        self._fits(len(ids))
        L, H = self.config.n_layer, self.config.n_head
        means = np.empty((6, L, H), dtype=np.float64)
        counts = np.empty((2, L, H), dtype=np.int64)
        with _progress.Progress(progress, "sinks", "layers", L) as pr:
            self._c.sinks(means=means, counts=counts, ids=ids, n_first=int(n_first), skip=int(skip), every=int(every),
                          progress=pr.fn)
        out = {name: means[i] for i, name in enumerate(_SINK_FIELDS)}
        out["n_rows"], out["n_sampled"] = counts[0], counts[1]
        return out

    def inspect(self, ids, *, layers=None, heads=None, title=None, progress=None):
        """The attention maps of the sequence ids (a str is tokenized), layers x heads
        (default all), as `qkv inspect --html --png` draws them, in one forward pass;
        returns an Inspection (inline in Jupyter, .save_html(path), .save_png(path)).
        progress: as attention's (per layer)."""
        ids = self.tokenize(ids) if isinstance(ids, str) else self._ids(ids)
        self._fits(len(ids))
        ls = np.arange(self.config.n_layer) if layers is None else np.atleast_1d(np.asarray(layers))
        hs = np.arange(self.config.n_head) if heads is None else np.atleast_1d(np.asarray(heads))
        for name, a, top in (("layers", ls, self.config.n_layer), ("heads", hs, self.config.n_head)):
            if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"{name}: expected a non-empty list of integers")
            if a.min() < 0 or a.max() >= top:
                raise ValueError(f"{name} must be in [0, {top}), got {a.min()} .. {a.max()}")
        ls = np.sort(ls)
        c, n = self.config, len(ids)
        if title is None:
            title = (f"{os.path.basename(c.path)}: {n} tokens, {len(ls)} layer{'s' * (len(ls) != 1)} x "
                     f"{len(hs)} head{'s' * (len(hs) != 1)}")
        subtitle = (f"qkv {_qkv.version()} inspect; weights recomputed from q, K and the kernel's LSE: "
                    f"w = exp(q\u00b7k/\u221a{c.head_dim} - lse)")
        with tempfile.TemporaryDirectory() as d, _progress.Progress(progress, "inspect", "layers", c.n_layer) as pr:
            path = os.path.join(d, "inspect.html")
            figure = self._c.inspect_maps(path=path, ids=ids, layers=np.ascontiguousarray(ls, dtype=np.int32),
                                          heads=np.ascontiguousarray(hs, dtype=np.int32), title=title,
                                          subtitle=subtitle, progress=pr.fn)
            with open(path, encoding="utf-8") as f:
                page = f.read()
        return Inspection(page, figure, n, ls, hs)

    def ablate(self, ids, *, scope="all", layer=None, head=None, target=None, heads=False, progress=None):
        """Weight against influence (qkv ablate): the next-token distribution of the
        last position with key j hidden, for every position j, as a dict of the CLI's
        JSON fields — target, p_target, top_full, scope, layer, head, and [n] arrays
        attn_mean, attn_max (the full run's last-row weight on j over the scoped heads),
        kl (KL(p_full || p_ablated), nats), dp_target, top_after; spearman_attn_kl.
        scope "all": j leaves every row; "last": only the final row. layer=, head=
        scope the hiding (default every layer / head). heads=True instead zeroes each
        head's output in turn: kl, dp_target, top_after as [L, Hq] arrays.
        progress: None, True (a bar) or fn(done, total) in tokens run, after each
        forward call: n + n(n+1)/2 in all (scope "all"), 2n ("last"), (1 + L Hq) n
        (heads=True)."""
        ids = self._ids(ids)
        self._fits(len(ids))
        n, c = len(ids), self.config
        tgt = -1 if target is None else int(target)
        if tgt < -1 or tgt >= c.n_vocab:
            raise ValueError(f"target must be a token id in [0, {c.n_vocab}), got {target}")
        if heads:
            if layer is not None or head is not None or scope != "all":
                raise ValueError("heads=True zeroes every head in turn: no scope, layer or head")
            values = np.empty((2, c.n_layer, c.n_head), dtype=np.float64)
            top = np.empty((c.n_layer, c.n_head), dtype=np.int32)
            with _progress.Progress(progress, "ablate --heads", "tokens") as pr:
                t, p, top_full, _ = self._c.ablate_heads(values=values, top=top, ids=ids, target=tgt, progress=pr.fn)
            return dict(target=t, p_target=p, top_full=top_full, n_layer=c.n_layer, n_head=c.n_head,
                        kl=values[0], dp_target=values[1], top_after=top)
        if scope not in ("all", "last"):
            raise ValueError(f'scope must be "all" or "last", got {scope!r}')
        values = np.empty((4, n), dtype=np.float64)
        top = np.empty(n, dtype=np.int32)
        li = -1 if layer is None else int(layer)
        hi = -1 if head is None else int(head)
        with _progress.Progress(progress, "ablate", "tokens") as pr:
            t, p, top_full, rho = self._c.ablate_positions(values=values, top=top, ids=ids,
                                                           scope=0 if scope == "all" else 1, layer=li, head=hi,
                                                           target=tgt, progress=pr.fn)
        return dict(target=t, p_target=p, top_full=top_full, scope=scope, layer=layer, head=head,
                    attn_mean=values[0], attn_max=values[1], kl=values[2], dp_target=values[3], top_after=top,
                    spearman_attn_kl=None if np.isnan(rho) else rho)

    # ------------------------------- patching, logit attribution, logit lens

    def _prompt(self, prompt, chat, what):
        """Ids of a prompt given as text (tokenized; chat=True: the chat template) or ids."""
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError(f"{what}: the text is empty")
            return self.tokenize(prompt, chat=chat)
        if chat:
            raise ValueError(f"{what}: chat=True needs text, not token ids")
        return self._ids(prompt)

    def _one_token(self, token, what):
        """The id of one token given as text (exactly one token, no BOS) or an id; None stays None."""
        if token is None:
            return None
        if isinstance(token, str):
            ids = self.tokenize(token, add_special=False)
            if len(ids) != 1:
                pieces = " ".join(repr(self.piece(int(t))) for t in ids)
                raise ValueError(f"{what} {token!r} is {len(ids)} tokens ({pieces}), not one")
            return int(ids[0])
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"{what}: expected a token's text (str) or id (int), got {type(token).__name__}")
        if not 0 <= token < self.config.n_vocab:
            raise ValueError(f"{what}: token id {token} outside [0, {self.config.n_vocab})")
        return int(token)

    def _labels(self, ids):
        return _patch.token_labels([self._c.piece(int(t)) for t in ids])

    def patch(self, clean, corrupt, *, metric="kl", answer=None, wrong=None, per_position=False, sweeps=None,
              chat=False, max_bytes=0, progress=None):
        """Activation patching (qkv patch): runs the corrupted prompt with one
        component's activation replaced by the clean run's, for every component of
        the sweeps, and measures how much of the clean behaviour at the last position
        comes back; returns a PatchResult (the CLI's --json fields as numpy arrays,
        inline in Jupyter as heatmaps). clean, corrupt: text (chat=True: the chat
        template) or ids, the same number of tokens. metric "kl" (recovery = 1 -
        KL(p_clean || p_patched) / KL(p_clean || p_corrupt)) or "logit_diff" (the
        CLI's "logit-diff" too) with answer and wrong (text of exactly one token, or
        ids): the share of
        logit[answer] - logit[wrong] brought back. sweeps: names from head_out,
        head_out_pos, resid_pre, attn_out, mlp_out (default all but head_out_pos;
        per_position=True adds it). max_bytes: the activations both runs may cache
        for the sweeps (qkv_patch_bytes; 0: the library's 1 GiB); more is a
        ValueError naming the bytes. progress: None, True or fn(done, total) in components done. Each
        patched run resumes from the layer it patches (qkv_patch); a component equal
        in both runs (before the first differing token) is 0 without a run."""
        if metric not in _patch.METRICS:
            raise ValueError(f'metric must be "kl" or "logit_diff", got {metric!r}')
        kind = _patch.METRICS[metric]
        if kind == 1 and (answer is None or wrong is None):
            raise ValueError("metric logit_diff needs answer= and wrong= (one token each)")
        if kind == 0 and (answer is not None or wrong is not None):
            raise ValueError("answer= and wrong= go with metric=\"logit_diff\" (kl takes none)")
        a, w = self._one_token(answer, "answer"), self._one_token(wrong, "wrong")
        names = list(_patch.DEFAULT_SWEEPS if sweeps is None else ([sweeps] if isinstance(sweeps, str) else sweeps))
        unknown = [s for s in names if s not in _patch.SWEEPS]
        if unknown or not names:
            raise ValueError(f"sweeps: {', '.join(map(repr, unknown)) or 'none'}; choose from {', '.join(_patch.SWEEPS)}")
        if per_position and "head_out_pos" not in names:
            names.append("head_out_pos")
        ci, ki = self._prompt(clean, chat, "clean"), self._prompt(corrupt, chat, "corrupt")
        if len(ci) != len(ki):
            raise ValueError(f"the clean prompt is {len(ci)} tokens and the corrupted one {len(ki)}: "
                             "patching needs the same count")
        self._fits(len(ci))
        c, n = self.config, len(ci)
        out = {s: np.empty(shape, dtype=np.float32) if s in names else None
               for s, shape in _qkv.sweeps(c.n_layer, c.n_head, n)}
        with _progress.Progress(progress, "patch", "components") as pr:
            vc, vk, steps, naive, count, unchanged = self._c.patch(list(out.values()), ci, ki, kind,
                                                                   -1 if a is None else a, -1 if w is None else w,
                                                                   int(max_bytes), progress=pr.fn)
        return _patch.PatchResult(
            metric="kl" if kind == 0 else "logit_diff", answer=a, wrong=w,
            answer_piece=None if a is None else self.piece(a), wrong_piece=None if w is None else self.piece(w),
            clean_ids=ci, corrupt_ids=ki, clean_tokens=self._labels(ci), corrupt_tokens=self._labels(ki),
            clean=vc, corrupt=vk, **out, layer_token_steps=steps, naive_layer_token_steps=naive, n_components=count,
            n_unchanged=unchanged, model=c.path)

    def attribute(self, prompt, *, answer=None, wrong=None, chat=False):
        """Direct logit attribution (qkv attribute) at the last position of prompt
        (text or ids): each head's, attention layer's, MLP's and the embedding's
        share of logit[answer] - logit[wrong] (answer, wrong: one token's text or id;
        default the model's own top-1 and top-2 there), through the final norm with
        this run's RMS frozen; an Attribution (the CLI's --json fields as numpy).
        Heads are NaN where they are not additive (Gemma's post-attention norm)."""
        ids = self._prompt(prompt, chat, "prompt")
        self._fits(len(ids))
        a, w = self._one_token(answer, "answer"), self._one_token(wrong, "wrong")
        c = self.config
        heads = np.empty((c.n_layer, c.n_head), dtype=np.float32)
        attn = np.empty(c.n_layer, dtype=np.float32)
        mlp = np.empty(c.n_layer, dtype=np.float32)
        embed, total, ld, linear, capped, a, w = self._c.attribute(heads=heads, attn=attn, mlp=mlp, ids=ids,
                                                                   answer=-1 if a is None else a,
                                                                   wrong=-1 if w is None else w)
        return _patch.Attribution(ids=ids, tokens=self._labels(ids), answer=a, wrong=w, answer_piece=self.piece(a),
                                  wrong_piece=self.piece(w), heads=heads, attn=attn, mlp=mlp, embed=embed,
                                  total=total, logit_diff=ld, heads_linear=bool(linear), final_softcap=bool(capped),
                                  model=c.path)

    def lens(self, prompt, *, k=5, target=None, chat=False):
        """The logit lens (qkv lens) of prompt (text or ids): every layer's
        hook_resid_post at every position through the final norm, the unembedding
        (and any final soft-cap), softmax: the top-k tokens and their probabilities,
        and the probability of target (one token's text or id; None: the model's
        own top-1 at the last position, as the CLI's); a Lens (the CLI's --json
        fields as numpy, inline in Jupyter as a grid)."""
        ids = self._prompt(prompt, chat, "prompt")
        self._fits(len(ids))
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.config.n_vocab:
            raise ValueError(f"k must be an int in [1, {self.config.n_vocab}], got {k!r}")
        t = self._one_token(target, "target")
        if t is None:
            t = int(np.argmax(self.forward(ids, positions="last")[0]))  # the lowest id on ties
        c, n = self.config, len(ids)
        top_ids = np.empty((c.n_layer, n, k), dtype=np.int32)
        top_probs = np.empty((c.n_layer, n, k), dtype=np.float32)
        target_prob = np.empty((c.n_layer, n), dtype=np.float32)
        self._c.lens(top_ids=top_ids, top_probs=top_probs, target_prob=target_prob, ids=ids, k=int(k), target=t)
        flat = self._labels(top_ids.ravel())
        labels = [[flat[(l * n + p) * k:(l * n + p + 1) * k] for p in range(n)] for l in range(c.n_layer)]
        return _patch.Lens(ids=ids, tokens=self._labels(ids), top_ids=top_ids, top_probs=top_probs, target=t,
                           target_piece=self.piece(t), target_prob=target_prob,
                           top_labels=labels, model=c.path)

    # ------------------------------------------------------------ stream

    def stream(self, ids, *, window=256, sinks=4, chunk=64, progress=None):
        """Perplexity of the sequence ids under a bounded KV cache (qkv stream), every
        token scored once, the text read in chunks of `chunk` tokens: the CLI's JSON
        fields as a dict — window, sinks, chunk, n_tokens, variants (a list of dicts:
        name, positions, ppl, tokens_per_s, kv_bytes, and nll float32 [n - 1]) for
        full, window/orig, window/shifted, sinks/orig, sinks/shifted and recompute
        (qkv_stream_score's policies), chunk_start int [chunks] and chunk_nll float64
        [variants, chunks] (mean NLL per chunk). The model's context must hold n.
        progress: None, True (a bar) or fn(done, total) in tokens run, after each
        chunk, counted over the six variants together."""
        ids = self._ids(ids)
        self._fits(len(ids))
        n, c = len(ids), self.config
        if n < 2:
            raise ValueError(f"stream needs at least 2 tokens, got {n}")
        if window < 1 or chunk < 1 or not 0 <= sinks < window:
            raise ValueError(f"need window >= 1, 0 <= sinks < window and chunk >= 1, got {window}, {sinks}, {chunk}")
        row_bytes = c.n_layer * 2 * c.n_kv_head * c.head_dim * self._kv_elem
        variants = []
        steps = [_qkv.stream_steps(n, policy, int(window), int(sinks), int(chunk))
                 for _, _, policy, _ in _STREAM_VARIANTS]
        with _progress.Progress(progress, "stream", "tokens", sum(steps)) as pr:
            for k, (name, positions, policy, cache) in enumerate(_STREAM_VARIANTS):
                pr.stage(f"stream {name} ({k + 1}/{len(_STREAM_VARIANTS)})")
                nll = np.empty(n - 1, dtype=np.float32)
                t0 = time.perf_counter()
                rows = self._c.stream_score(nll=nll, ids=ids, policy=policy, cache=cache, window=int(window),
                                            sinks=int(sinks), chunk=int(chunk),
                                            progress=pr.part(sum(steps[:k]), sum(steps)))
                dt = time.perf_counter() - t0
                variants.append(dict(name=name, positions=positions,
                                     ppl=float(np.exp(nll.astype(np.float64).mean())),
                                     tokens_per_s=(n - 1) / dt if dt > 0 else float("inf"),
                                     kv_bytes=rows * row_bytes, nll=nll))
        starts = np.arange(0, n - 1, chunk)
        chunk_nll = np.array([[v["nll"][a:a + chunk].astype(np.float64).mean() for a in starts] for v in variants])
        return dict(window=window, sinks=sinks, chunk=chunk, n_tokens=n, variants=variants, chunk_start=starts,
                    chunk_nll=chunk_nll)

    # ------------------------------------------------------------ needle

    def needle(self, haystack=None, *, lengths=(1024, 2048, 4096, 8192), depths=(0, 25, 50, 75, 100),
               needle=NEEDLE, question=QUESTION, answer=ANSWER, system=None, max_answer=16, chat=True,
               progress=None):
        """Needle in a haystack with attention telemetry (qkv needle): for each length
        (prompt + max_answer tokens) and depth (percent) the needle sentence goes into
        the haystack text (default: the GPL-3 file) at a sentence boundary, the question
        follows as a chat turn (chat=False: as plain text after the BOS, for a base model
        without a chat template), the model answers greedily and the reply is correct when
        it contains `answer` (ASCII case folded, as RULER's string_match_all). A dict of
        the CLI's JSON fields: cells (a list of dicts: length, depth, tokens, needle_pos,
        needle_tokens, correct, answer, needle_mass_max, needle_mass_mean,
        needle_mass_by_layer [L] (max over heads), needle_mass_mean_by_layer [L],
        answer_step, answer_mass_max, answer_mass_mean, answer_mass_by_layer [L] or None)
        and retrieval_heads (dicts layer, head, score, best first) with retrieval
        float64 [L, Hq]. The model's context must hold the longest length.
        progress: None, True (a bar) or fn(done, total) after each cell, in tokens
        (each cell counts its length, as the CLI's line)."""
        if haystack is None:
            with open(GPL3, encoding="utf-8") as f:
                haystack = f.read()
        for name, v in (("haystack", haystack), ("needle", needle), ("question", question), ("answer", answer)):
            if not isinstance(v, str):
                raise TypeError(f"{name}: expected str, got {type(v).__name__}")
            if not v:
                raise ValueError(f"{name} is empty")
        lengths, depths = [int(x) for x in lengths], [int(x) for x in depths]
        if not lengths or not depths:
            raise ValueError("lengths and depths must not be empty")
        if min(depths) < 0 or max(depths) > 100:
            raise ValueError(f"depths must be in [0, 100], got {min(depths)} .. {max(depths)}")
        if min(lengths) < 1 or max(lengths) > self.config.n_ctx:
            raise ValueError(f"lengths must be in [1, {self.config.n_ctx}] (the open context; open with ctx=), "
                             f"got {min(lengths)} .. {max(lengths)}")
        if max_answer < 1:
            raise ValueError(f"max_answer must be >= 1, got {max_answer}")
        if _find_folded(needle, answer) < 0:
            raise ValueError(f"answer {answer!r} is not in the needle: the model could not find it")
        if _find_folded(haystack, answer) >= 0:
            raise ValueError(f"answer {answer!r} is already in the haystack")
        self._fits(1)
        hay = self.tokenize(haystack, add_special=False)
        if len(self.tokenize(needle, add_special=False)) >= len(hay):
            raise ValueError("the needle is not shorter than the haystack")
        c = self.config
        L, H, A = c.n_layer, c.n_head, int(max_answer)
        retrieval = np.zeros((L, H), dtype=np.float64)
        cells, done = [], 0
        total = sum(lengths) * len(depths)
        with _progress.Progress(progress, "needle", "tokens", total) as pr:
            for length in lengths:
                for depth in depths:
                    pr.stage(f"needle {length} tokens, depth {depth}% ({len(cells) + 1}/{len(lengths) * len(depths)})")
                    pids, pos, nlen, _ = self._c.needle_prompt(hay=hay, needle=needle.encode("utf-8"),
                                                                question=question.encode("utf-8"), system=system,
                                                                max_answer=A, length=length, depth=float(depth),
                                                                plain=not chat)
                    ids = np.frombuffer(pids, dtype=np.int32).copy()
                    reply = np.empty(A, dtype=np.int32)
                    mass = np.zeros((2, L), dtype=np.float64)
                    step = np.zeros((2, A, L), dtype=np.float64)
                    k = self._c.needle_run(answer=reply, mass=mass, step=step, retrieval=retrieval, ids=ids,
                                           needle_pos=pos, needle_len=nlen)
                    reply = reply[:k]
                    raw = self._c.detokenize(reply, True)
                    text = raw.decode("utf-8", "replace")
                    at = raw.lower().find(answer.encode("utf-8").lower())  # bytes: ASCII folding, byte offsets
                    cell = dict(length=length, depth=depth, tokens=len(ids), needle_pos=pos, needle_tokens=nlen,
                                correct=at >= 0, answer=text, needle_mass_max=float(mass[0].max()),
                                needle_mass_mean=float(mass[1].mean()), needle_mass_by_layer=mass[0],
                                needle_mass_mean_by_layer=mass[1], answer_step=None, answer_mass_max=None,
                                answer_mass_mean=None, answer_mass_by_layer=None)
                    if at >= 0:
                        s = self._answer_step(reply, at)
                        cell.update(answer_step=s, answer_mass_max=float(step[0, s].max()),
                                    answer_mass_mean=float(step[1, s].mean()), answer_mass_by_layer=step[0, s])
                    cells.append(cell)
                    done += length
                    pr.report(done, total)
        retrieval /= len(cells)
        order = sorted(range(L * H), key=lambda i: -retrieval.flat[i])  # stable: ties by (layer, head)
        heads = [dict(layer=i // H, head=i % H, score=float(retrieval.flat[i])) for i in order]
        return dict(haystack_tokens=len(hay), needle=needle, question=question, answer=answer, chat=bool(chat),
                    cells=cells, retrieval_heads=heads, retrieval=retrieval)

    def _answer_step(self, reply, offset):
        """The reply token whose text holds byte `offset` of the reply (where the answer starts)."""
        for i in range(len(reply)):
            if len(self._c.detokenize(reply[:i + 1], True)) > offset:
                return i
        return len(reply) - 1


# qkv_stream_policy and qkv_stream_cache values, in the CLI's order
_STREAM_VARIANTS = (("full", "absolute", 0, 0), ("window/orig", "original", 1, 1), ("window/shifted", "shifted", 1, 2),
                    ("sinks/orig", "original", 2, 1), ("sinks/shifted", "shifted", 2, 2), ("recompute", "fresh", 3, 0))


def _find_folded(text, sub):
    """Byte offset of sub in text (UTF-8), ASCII case folded as qkv_needle_match; -1 if absent."""
    t, s = text.encode("utf-8").lower(), sub.encode("utf-8").lower()  # bytes.lower folds ASCII only
    return t.find(s) if s else -1
