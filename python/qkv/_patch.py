"""Activation patching, direct logit attribution and the logit lens from Python
(Model.patch, Model.attribute, Model.lens): the arguments checked and turned
into ids, the library's calls (qkv._qkv: patch.c; qkv_patch, qkv_attribute,
qkv_lens), and their results as objects holding what `qkv patch / attribute /
lens --json` hold, as numpy arrays, shown inline in Jupyter as the heatmap page
the CLI's --html writes (render/'s qkv_heatmap_page). L = layers, Hq = query
heads, n = tokens, k = the lens's top-k. Definitions: docs/patch.md.
"""
import dataclasses
import html
import os

import numpy as np

from . import _progress, _qkv

SWEEPS = tuple(name for name, _ in _qkv.sweeps(1, 1, 1))  # qkv_sweep's names, in its order
DEFAULT_SWEEPS = tuple(s for s in SWEEPS if s != "head_out_pos")
METRICS = {"kl": 0, "logit_diff": 1, "logit-diff": 1}  # qkv_metric_kind; the CLI's spelling too


def spearman(x, y):
    """Spearman's rank correlation of x and y (equal lengths): the Pearson
    correlation of their ranks, ties sharing their mean rank (libqkv's
    qkv_spearman, the one `qkv ablate` reports). NaN when fewer than 2 values or
    either is constant."""
    a = np.ascontiguousarray(np.ravel(x), dtype=np.float64)
    b = np.ascontiguousarray(np.ravel(y), dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"spearman: x has {a.size} values and y {b.size}")
    return _qkv.spearman(a, b)


def token_labels(pieces):
    """Readable labels of token pieces (bytes) as the CLI's pages show them: a
    space as "·", a newline "↵", a character split between tokens whole with "…"
    on the side it continues (render/'s qkv_token_labels)."""
    return _qkv.token_labels([bytes(p) for p in pieces])


def _label(piece):
    """One piece's label (token_labels), for the pages' text."""
    return token_labels([piece])[0]


def _page(title, intro, maps):
    """The self-contained heatmap page (qkv_heatmap_page) of maps: dicts with title,
    caption, values [rows, cols], row_labels, col_labels and optional text, hover
    ([rows, cols] of str), diverging, vmax."""
    return _qkv.heatmap_page(title, intro, [dict(m, values=np.ascontiguousarray(m["values"], dtype=np.float32))
                                            for m in maps])


class _Page:
    """A result shown inline in Jupyter as its heatmap page (in an iframe, as
    Model.inspect's), saved whole or not at all by save_html; each result class
    draws its page in _html."""

    def _repr_html_(self):
        return (f'<iframe srcdoc="{html.escape(self._html(), quote=True)}" '
                f'style="width: 100%; height: 640px; border: 0"></iframe>')

    def save_html(self, path):
        """Writes the page to path whole or not at all (an existing file stays as it
        was on failure: OSError with the library's message)."""
        _qkv.file_replace(os.fspath(path), self._html().encode("utf-8"))


def _layer_labels(L):
    return [f"L{l}" for l in range(L)]


@dataclasses.dataclass(repr=False)
class PatchResult(_Page):
    """Activation patching, clean -> corrupted run (qkv patch --json as numpy):
    recovery of the metric at the last position when one component of the
    corrupted run is replaced by the clean run's (1: all of the clean behaviour
    back, 0: none; not clipped). Arrays are float32, None when not swept:
      head_out [L, Hq]        each head's hook_z at every position
      head_out_pos [L, Hq, n] each head's hook_z at one position (per_position=True)
      resid_pre, attn_out, mlp_out [L, n]  one layer's residual entering it / sublayer output, one position
    clean, corrupt: the metric's values (kl: 0 and KL(p_clean || p_corrupt);
    logit_diff: LD_clean and LD_corrupt). Cost: layer_token_steps run against
    naive_layer_token_steps (a full forward per component); n_unchanged of them
    were equal in both runs (recovery 0, not run)."""
    metric: str
    answer: object          # token id (logit_diff) or None
    wrong: object
    answer_piece: object    # bytes or None
    wrong_piece: object
    clean_ids: np.ndarray
    corrupt_ids: np.ndarray
    clean_tokens: list      # labels (token_labels)
    corrupt_tokens: list
    clean: float
    corrupt: float
    head_out: object
    head_out_pos: object
    resid_pre: object
    attn_out: object
    mlp_out: object
    layer_token_steps: int
    naive_layer_token_steps: int
    n_components: int
    n_unchanged: int        # components equal in both runs: recovery 0, not run
    model: str

    @property
    def n_tokens(self):
        return len(self.clean_ids)

    def position_labels(self):
        """The clean token at each position, "clean→corrupt" where they differ."""
        return [a if x == y else f"{a}→{b}" for a, b, x, y in
                zip(self.clean_tokens, self.corrupt_tokens, self.clean_ids, self.corrupt_ids)]

    def top(self, k=10):
        """The k components of largest |recovery| over every sweep: a list of
        (sweep, layer, head or None, position or None, recovery), largest first."""
        rows = []
        for name in SWEEPS:
            a = getattr(self, name)
            if a is None:
                continue
            for index in np.ndindex(a.shape):
                head = index[1] if name.startswith("head_out") else None
                pos = index[-1] if name != "head_out" else None
                rows.append((name, index[0], head, pos, float(a[index])))
        rows.sort(key=lambda r: -abs(r[4]) if np.isfinite(r[4]) else 0)
        return rows[:k]

    def _html(self):
        pos = self.position_labels()
        maps = []
        if self.head_out is not None:
            L, H = self.head_out.shape
            maps.append(dict(title="head_out: each head's output (attn.hook_z) at every position",
                             values=self.head_out, row_labels=_layer_labels(L), col_labels=[f"H{h}" for h in range(H)],
                             diverging=True, vmax=1.0))
        for name, what in (("resid_pre", "the residual stream entering the layer (hook_resid_pre)"),
                           ("attn_out", "the attention sublayer's output (hook_attn_out)"),
                           ("mlp_out", "the MLP sublayer's output (hook_mlp_out)")):
            a = getattr(self, name)
            if a is not None:
                maps.append(dict(title=f"{name}: {what} at one position", values=a,
                                 row_labels=_layer_labels(len(a)), col_labels=pos, diverging=True, vmax=1.0))
        if self.head_out_pos is not None:
            L, H, _ = self.head_out_pos.shape
            for h in range(H):
                maps.append(dict(title=f"head_out_pos: head {h} at one position", values=self.head_out_pos[:, h],
                                 row_labels=_layer_labels(L), col_labels=pos, diverging=True, vmax=1.0))
        what = ("1 - KL(p_clean || p_patched) / KL(p_clean || p_corrupt)" if self.metric == "kl" else
                f"(LD_patched - LD_corrupt) / (LD_clean - LD_corrupt), LD = logit[{_label(self.answer_piece)}] - "
                f"logit[{_label(self.wrong_piece)}]")
        intro = (f"Recovery at the last position, {what}: red brings the clean behaviour back (1: all of it), blue "
                 f"pushes the other way; not clipped.\nMetric: clean {self.clean:.6g}, corrupt {self.corrupt:.6g}.\n"
                 f"{self.layer_token_steps:,} layer-token steps run, {self.naive_layer_token_steps:,} for a full "
                 f"forward per component.")
        return _page(f"{os.path.basename(self.model)}: patching {''.join(self.clean_tokens)} → "
                     f"{''.join(self.corrupt_tokens)}", intro, maps)

    def __repr__(self):
        swept = [s for s in SWEEPS if getattr(self, s) is not None]
        return (f"<qkv.PatchResult: {self.metric}, {self.n_tokens} tokens, clean {self.clean:.4g}, corrupt "
                f"{self.corrupt:.4g}; {', '.join(swept)}>")


@dataclasses.dataclass(repr=False)
class Attribution(_Page):
    """Direct logit attribution of one prompt at its last position (qkv attribute
    --json as numpy): each part's share of LD = logit[answer] - logit[wrong],
    through the final norm with this run's RMS frozen. heads [L, Hq] float32
    (NaN where heads are not additive: heads_linear False, Gemma's post-attention
    norm), attn [L], mlp [L] float32, embed, total (= embed + sum attn + sum mlp)
    and logit_diff (the model's own, before any final soft-cap: final_softcap)."""
    ids: np.ndarray
    tokens: list
    answer: int
    wrong: int
    answer_piece: bytes
    wrong_piece: bytes
    heads: np.ndarray
    attn: np.ndarray
    mlp: np.ndarray
    embed: float
    total: float
    logit_diff: float
    heads_linear: bool
    final_softcap: bool
    model: str

    def _html(self):
        L = len(self.attn)
        maps = [dict(title="attention and MLP output, per layer", values=np.stack([self.attn, self.mlp], axis=1),
                     row_labels=_layer_labels(L), col_labels=["attn", "mlp"], diverging=True)]
        if self.heads_linear:
            maps.append(dict(title="heads: each head's output through its slice of the output projection",
                             values=self.heads, row_labels=_layer_labels(L),
                             col_labels=[f"H{h}" for h in range(self.heads.shape[1])], diverging=True))
        intro = (f"Each part's share of logit[{_label(self.answer_piece)}] - logit[{_label(self.wrong_piece)}] = "
                 f"{self.logit_diff:.6g} at the last position, through the final norm with this run's RMS frozen; "
                 f"embed {self.embed:.6g}, total {self.total:.6g}."
                 + ("" if self.heads_linear else "\nHeads are not additive here (a post-attention norm): per layer only."))
        return _page(f"{os.path.basename(self.model)}: direct logit attribution", intro, maps)

    def __repr__(self):
        return (f"<qkv.Attribution: {_label(self.answer_piece)} - {_label(self.wrong_piece)} = {self.logit_diff:.4g}, "
                f"total {self.total:.4g}, heads {'per head' if self.heads_linear else 'not additive'}>")


@dataclasses.dataclass(repr=False)
class Lens(_Page):
    """The logit lens (qkv lens --json as numpy): each layer's hook_resid_post at
    each position through the final norm and unembedding: top_ids int32 [L, n, k],
    top_probs float32 [L, n, k], and target_prob float32 [L, n], the probability of
    target (an id). The last layer's row is the model's own output."""
    ids: np.ndarray
    tokens: list
    top_ids: np.ndarray
    top_probs: np.ndarray
    target: int
    target_piece: bytes
    target_prob: np.ndarray
    top_labels: list        # [L][n][k] the top tokens' labels
    model: str

    def _html(self):
        L, n, k = self.top_ids.shape
        text = [[self.top_labels[l][p][0] for p in range(n)] for l in range(L)]
        hover = [["\n".join(f"{self.top_labels[l][p][j]}  {self.top_probs[l, p, j]:.3f}" for j in range(k))
                  for p in range(n)] for l in range(L)]
        maps = [dict(title="top-1 token", caption="each cell's most likely next token, coloured by its probability",
                     values=self.top_probs[:, :, 0], row_labels=_layer_labels(L), col_labels=self.tokens, text=text,
                     hover=hover, vmax=1.0)]
        maps.append(dict(title=f"probability of {_label(self.target_piece)}", values=self.target_prob,
                         row_labels=_layer_labels(L), col_labels=self.tokens, hover=hover))
        return _page(f"{os.path.basename(self.model)}: logit lens", "Each layer's residual stream (hook_resid_post) "
                     "through the final norm and the unembedding, at each position.", maps)

    def __repr__(self):
        L, n, k = self.top_ids.shape
        return f"<qkv.Lens: {L} layers x {n} positions, top {k}, target {_label(self.target_piece)}>"
