"""Layer × head heatmaps (range statistics, pattern fractions) and the chunk-pattern strip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.plots.style import (
    COLORBAR_MARGIN_PX,
    PATTERN_COLORS,
    ROW_LABEL_STANDOFF,
    SEQUENTIAL,
    escape_tokens,
    layer_label,
    right_legend_margin,
    styled,
)

PATTERN_NAMES = ("constant", "mono", "hybrid")


def layer_head_values(values: Any, name: str = "values") -> np.ndarray:
    """``values`` as a float (n_layers, n_heads) array (NaN allowed: an empty cell), else an InputError.

    >>> layer_head_values([[1, 2]]).dtype
    dtype('float64')
    """
    raw = np.asarray(values)
    if raw.dtype.kind not in "biuf":
        raise InputError(f"{name} must be a numeric (n_layers, n_heads) array, got dtype {raw.dtype}")
    v = raw.astype(np.float64)
    if v.ndim != 2 or v.size == 0:
        raise InputError(f"{name} must be a non-empty (n_layers, n_heads) array, got shape {v.shape}")
    if np.isinf(v).any():
        raise InputError(f"{name} contains inf; pass finite values (NaN leaves a cell empty)")
    return v


def pattern_codes(patterns: Any, name: str = "patterns") -> np.ndarray:
    """Chunk classes of one head, (n_layers, n_chunks), as int codes 0 constant, 1 mono, 2 hybrid, from
    labels or codes; anything else (other labels, codes outside 0..2, floats, not 2-D) is an InputError.

    >>> pattern_codes([["mono", "hybrid"]]).tolist(), pattern_codes(np.array([[0, 2]])).tolist()
    ([[1, 2]], [[0, 2]])
    """
    p = np.asarray(patterns)
    if p.ndim != 2 or p.size == 0:
        raise InputError(f"{name} must be (n_layers, n_chunks) for one head, got shape {p.shape}")
    if p.dtype.kind in "US":
        lookup = {label: code for code, label in enumerate(PATTERN_NAMES)}
        try:
            return np.vectorize(lookup.__getitem__, otypes=[np.int64])(p)
        except KeyError as error:
            raise InputError(f"unknown pattern label {error} in {name}; labels are {PATTERN_NAMES}") from None
    if p.dtype.kind in "iu" and p.min() >= 0 and p.max() < len(PATTERN_NAMES):
        return p.astype(np.int64)
    found = f"values {p.min()}..{p.max()}" if p.dtype.kind in "iu" else f"dtype {p.dtype}"
    raise InputError(f"{name} must be labels {PATTERN_NAMES} or their int codes 0..{len(PATTERN_NAMES) - 1} "
                     f"(chunk_patterns / chunk_pattern_codes); got {found}")


def _check_tokens(tokens: Any, n_chunks: int, chunk_size: int) -> None:
    """The strip's tokens (for the hover) must be strings reaching into its last chunk."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
        raise InputError(f"tokens must be a list of the trace's tokens (str), got {type(tokens).__name__}")
    if len(tokens) <= (n_chunks - 1) * chunk_size:
        raise InputError(f"tokens has {len(tokens)} entries, but {n_chunks} chunks of {chunk_size} start up to token "
                         f"{(n_chunks - 1) * chunk_size}; pass the trace's tokens (trace.tokens), or None")


def check_layer_kinds(layer_kinds: Any, n_layers: int) -> list[str] | None:
    """``layer_kinds`` as a list of one str per layer (None: unlabelled layers), else an InputError.

    >>> check_layer_kinds(("rope", "repo"), 2)
    ['rope', 'repo']
    """
    if layer_kinds is None:
        return None
    if isinstance(layer_kinds, (str, bytes)) or not isinstance(layer_kinds, (Sequence, np.ndarray)):
        raise InputError(f"layer_kinds must be a list of {n_layers} kind names (one per layer) or None, "
                         f"got {type(layer_kinds).__name__} {layer_kinds!r:.60}")
    kinds = list(layer_kinds)
    if len(kinds) != n_layers or not all(isinstance(kind, str) for kind in kinds):
        raise InputError(f"layer_kinds must name one kind (a str) per layer: {n_layers} layers, got "
                         f"{len(kinds)} entries {kinds!r:.80}")
    return kinds


@dataclass(frozen=True, kw_only=True)
class HeatmapColors:
    """The colour scale of :func:`layer_head_heatmap`: ``colorscale`` (a plotly name or [[position, colour], …];
    default the sequential scale, ``DIVERGING`` for signed values), its ends ``zmin`` / ``zmax`` (default the
    data's) and ``zmid``, the value at its centre (e.g. 0.0 for a diverging scale).

    Example:
        >>> import numpy as np
        >>> from repo_lens.plots.style import DIVERGING
        >>> colors = HeatmapColors(colorscale=DIVERGING, zmid=0.0)
        >>> layer_head_heatmap(np.array([[-1.0, 2.0]]), title="t", colorbar_title="Δ", colors=colors).data[0].zmid
        0.0
    """

    colorscale: str | list[list[Any]] = SEQUENTIAL
    zmin: float | None = None
    zmax: float | None = None
    zmid: float | None = None


@grouped_keywords("colors", HeatmapColors)
def layer_head_heatmap(
    values: np.ndarray,
    *,
    title: str,
    colorbar_title: str,
    layer_kinds: Sequence[str] | None = None,
    colors: HeatmapColors | None = None,
    value_format: str = ".2f",
) -> go.Figure:
    """A heatmap of an (L, H) array: layers down (layer 0 on top), heads across, values written in
    the cells when there are at most 400. NaN cells stay empty. ``colors``: the colour scale
    (:class:`HeatmapColors`).

    Example:
        >>> import numpy as np
        >>> fig = layer_head_heatmap(np.array([[1.0, 2.0], [3.0, 4.0]]), title="t", colorbar_title="d")
        >>> fig.data[0].z.tolist(), list(fig.data[0].y), list(fig.data[0].x)
        ([[1.0, 2.0], [3.0, 4.0]], ['L0', 'L1'], ['h0', 'h1'])
    """
    v = layer_head_values(values)
    n_layers, n_heads = v.shape
    layer_kinds = check_layer_kinds(layer_kinds, n_layers)
    colors = options_or_default(colors, HeatmapColors, "colors")
    heatmap = go.Heatmap(
        z=v, x=[f"h{h}" for h in range(n_heads)], y=[layer_label(layer, layer_kinds) for layer in range(n_layers)],
        colorscale=colors.colorscale, zmin=colors.zmin, zmax=colors.zmax, zmid=colors.zmid,
        colorbar=dict(title=dict(text=colorbar_title)),
        hovertemplate="%{y}, %{x}: %{z:" + value_format + "}<extra></extra>", xgap=1, ygap=1,
    )
    if v.size <= 400:
        heatmap.update(texttemplate="%{z:" + value_format + "}", textfont=dict(size=11))
    fig = go.Figure(heatmap)
    styled(fig, title, height=140 + 34 * n_layers)
    fig.update_layout(margin_r=COLORBAR_MARGIN_PX)
    fig.update_yaxes(autorange="reversed", type="category", **ROW_LABEL_STANDOFF)
    fig.update_xaxes(type="category", title_text="head")
    fig.update_layout(meta={"kind": "layer_head_heatmap"})
    return fig


def range_heatmap(ranges: np.ndarray, layer_kinds: Sequence[str] | None = None) -> go.Figure:
    """Heatmap of :func:`repo_lens.analysis.range_stats` (max z − min z per layer and head; RePo Fig. 2).

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import range_stats
        >>> fig = range_heatmap(range_stats(np.array([[[0.0, 3.0], [1.0, 1.0]]])), ["repo"])
        >>> fig.data[0].z.tolist()
        [[3.0, 0.0]]
    """
    return layer_head_heatmap(ranges, title="Position range d = max z − min z per layer and head",
                              colorbar_title="d", layer_kinds=layer_kinds, colors=HeatmapColors(zmin=0.0))


def pattern_fractions_figure(fractions: Any, layer_kinds: Sequence[str] | None = None) -> go.Figure:
    """Three heatmaps (constant / mono / hybrid) of the share of chunks per layer and head, from
    :func:`repo_lens.analysis.pattern_fractions` (RePo Fig. 3), on one 0–1 colour scale.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import chunk_patterns, pattern_fractions
        >>> z = np.array([[[0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0]]])
        >>> fig = pattern_fractions_figure(pattern_fractions(chunk_patterns(z, size=4)))
        >>> [d.z.tolist() for d in fig.data]
        [[[0.5]], [[0.5]], [[0.0]]]
    """
    per_head = np.asarray(getattr(fractions, "per_head", None), dtype=np.float64)
    labels = tuple(getattr(fractions, "labels", PATTERN_NAMES))
    if per_head.ndim != 3 or per_head.shape[2] != len(labels):
        raise InputError("expected a PatternFractions from repo_lens.analysis.pattern_fractions")
    n_layers, n_heads, _ = per_head.shape
    layer_kinds = check_layer_kinds(layer_kinds, n_layers)
    overall = np.asarray(fractions.overall, dtype=np.float64)
    fig = make_subplots(rows=1, cols=len(labels), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[f"{name} ({share:.0%} overall)" for name, share in zip(labels, overall)])
    y = [layer_label(layer, layer_kinds) for layer in range(n_layers)]
    x = [f"h{h}" for h in range(n_heads)]
    for col, name in enumerate(labels):
        heatmap = go.Heatmap(z=per_head[:, :, col], x=x, y=y, coloraxis="coloraxis", name=name, xgap=1, ygap=1,
                             hovertemplate=f"{name}: " + "%{y}, %{x}: %{z:.0%}<extra></extra>")
        if per_head[:, :, 0].size <= 200:
            heatmap.update(texttemplate="%{z:.2f}", textfont=dict(size=10))
        fig.add_trace(heatmap, row=1, col=col + 1)
    styled(fig, f"Chunk patterns per layer and head ({fractions.n_chunks} chunks per head)", height=170 + 34 * n_layers)
    fig.update_layout(margin_r=COLORBAR_MARGIN_PX)
    fig.update_layout(coloraxis=dict(colorscale=SEQUENTIAL, cmin=0.0, cmax=1.0, colorbar=dict(title=dict(text="share"))))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    fig.update_layout(meta={"kind": "pattern_fractions"})
    return fig


def pattern_strip_figure(
    patterns: np.ndarray,
    chunk_size: int,
    *,
    tokens: Sequence[str] | None = None,
    layer_kinds: Sequence[str] | None = None,
    title: str | None = None,
) -> go.Figure:
    """The chunk classification of one head as a strip per layer along the token index (x = the
    chunk's token range), coloured constant / mono / hybrid; hover shows the chunk's text.

    ``patterns``: (L, n_chunks) labels or int codes for one head, e.g. ``chunk_patterns(z)[:, head]``.

    Example:
        >>> import numpy as np
        >>> fig = pattern_strip_figure(np.array([["constant", "hybrid"]]), 4)
        >>> fig.data[0].z.tolist(), fig.data[0].x.tolist()
        ([[0, 2]], [1.5, 5.5])
    """
    codes = pattern_codes(patterns)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise InputError(f"chunk_size must be a whole number of tokens >= 1, got {chunk_size!r}")
    n_layers, n_chunks = codes.shape
    layer_kinds = check_layer_kinds(layer_kinds, n_layers)
    centers = np.arange(n_chunks) * chunk_size + (chunk_size - 1) / 2
    if tokens is not None:
        _check_tokens(tokens, n_chunks, chunk_size)
        chunk_text = ["".join(escape_tokens(tokens[c * chunk_size:(c + 1) * chunk_size])) for c in range(n_chunks)]
    else:
        chunk_text = [f"tokens {c * chunk_size}–{(c + 1) * chunk_size - 1}" for c in range(n_chunks)]
    c0, c1, c2 = (PATTERN_COLORS[name] for name in PATTERN_NAMES)
    scale = [[0.0, c0], [1 / 3, c0], [1 / 3, c1], [2 / 3, c1], [2 / 3, c2], [1.0, c2]]
    names = np.asarray(PATTERN_NAMES, dtype=object)[codes]
    fig = go.Figure(go.Heatmap(
        z=codes, x=centers, y=[layer_label(layer, layer_kinds) for layer in range(n_layers)],
        zmin=-0.5, zmax=2.5, colorscale=scale, xgap=1, ygap=2,
        customdata=np.dstack([names, np.broadcast_to(np.asarray(chunk_text, dtype=object), codes.shape)]),
        hovertemplate="%{y}, chunk at t≈%{x}: %{customdata[0]}<br>%{customdata[1]}<extra></extra>",
        showscale=False,
    ))
    # the classes in a legend, not on a colour bar: a strip of a few layers is too short for three names
    for name in PATTERN_NAMES:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True, hoverinfo="skip",
                                 marker=dict(symbol="square", size=12, color=PATTERN_COLORS[name])))
    styled(fig, title or f"Chunk classification (chunks of {chunk_size} tokens)", height=110 + 26 * n_layers)
    fig.update_layout(margin_r=right_legend_margin(PATTERN_NAMES), showlegend=True,
                      legend=dict(title_text="chunk", tracegroupgap=0))
    fig.update_yaxes(autorange="reversed", type="category", **ROW_LABEL_STANDOFF)
    fig.update_xaxes(title_text="token index", range=[-0.5, n_chunks * chunk_size - 0.5])
    fig.update_layout(meta={"kind": "pattern_strip"})
    return fig
