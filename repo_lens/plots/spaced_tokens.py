"""Tokens laid out along x by their learned positions, one row per layer (seeds/002's plots)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import (
    PATTERN_COLORS,
    check_layer,
    escape_tokens,
    kind_color,
    layer_label,
    positions_of,
    sample_indices,
    select_head,
    styled,
)

PATTERN_NAMES = ("constant", "mono", "hybrid")


def spaced_tokens_figure(
    trace: Any,
    *,
    head: int | Literal["mean"] = 0,
    layers: Sequence[int] | None = None,
    scale: Literal["row", "shared"] = "row",
    window: tuple[int, int] | None = None,
    patterns: np.ndarray | None = None,
    chunk_size: int = 16,
    connect: bool = True,
    max_tokens: int = 2000,
    label_limit: int = 400,
    title: str | None = None,
) -> go.Figure:
    """Each token drawn at x = its position, one row per layer, faint lines following a token down the layers.

    ``trace``: a :class:`repo_lens.Trace` (anything with ``positions`` (L, H, T), ``tokens`` and
    ``layer_kinds``). ``head``: a head index or ``"mean"`` (mean over heads). ``scale="shared"``
    plots the raw positions on one axis (x equals the positions); ``"row"`` rescales each layer's
    positions over the shown tokens to [0, 1] (min to max), so layers with small and large ranges
    are both legible (seeds/002 scales each layer independently). The raw position is in the
    hover and in ``customdata[:, 1]``. ``window=(start, end)`` shows tokens start..end-1; beyond
    ``max_tokens`` tokens are sampled with an even stride; beyond ``label_limit`` tokens are
    markers instead of text. ``patterns`` (L, n_chunks), from
    :func:`repo_lens.analysis.chunk_patterns` for this head, adds a strip of squares under each
    row coloured by the chunk class of each token. Non-finite positions are left out.

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> z = np.array([[[0, 1, 2, 3]], [[0.0, 0.25, 2.5, 2.75]]], dtype=np.float32)
        >>> t = Trace(tokens=list("ab c"), token_ids=[97, 98, 32, 99], positions=z, layer_kinds=["rope", "repo"])
        >>> fig = spaced_tokens_figure(t, scale="shared")
        >>> [d.name for d in fig.data if d.name], fig.data[-1].x.tolist()
        (['L0 rope', 'L1 repo'], [0.0, 0.25, 2.5, 2.75])
    """
    positions, tokens, kinds = positions_of(trace)
    if scale not in ("row", "shared"):
        raise InputError(f"scale must be 'row' or 'shared', got {scale!r}")
    n_layers, _, n_tokens = positions.shape
    z = select_head(positions, head)
    rows = [check_layer(layer, n_layers) for layer in (range(n_layers) if layers is None else layers)]
    if not rows:
        raise InputError("layers is empty; pass None (all layers) or some layer indices")
    start, end = _window(window, n_tokens)
    shown = np.arange(start, end)[sample_indices(end - start, max_tokens)]
    labels = len(shown) <= label_limit
    display = np.asarray(escape_tokens([tokens[t] for t in shown]), dtype=str)  # not object: plotly deep-copies those

    xs = np.empty((len(rows), len(shown)))
    for r, layer in enumerate(rows):
        xs[r] = _scaled(z[layer, shown], z[layer, start:end], scale)

    fig = go.Figure()
    if connect and len(rows) > 1:
        fig.add_trace(_connectors(xs))
    if patterns is not None:
        for trace_ in _pattern_strip(np.asarray(patterns), rows, shown, xs, chunk_size, n_layers):
            fig.add_trace(trace_)
    increments = np.diff(z, axis=1, prepend=np.nan)
    for r, layer in enumerate(rows):
        kind = kinds[layer] if kinds else ""
        color = kind_color(kind, layer)
        custom = np.column_stack([shown, z[layer, shown], increments[layer, shown]])
        fig.add_trace(go.Scatter(
            x=xs[r], y=np.full(len(shown), r), name=layer_label(layer, kinds),
            mode="text" if labels else "markers",
            text=display, textfont=dict(color=color, size=14),
            marker=dict(color=color, size=5, symbol="line-ns-open"),
            customdata=custom, hovertext=display,
            hovertemplate=("token %{customdata[0]}: %{hovertext}<br>position %{customdata[1]:.3f}"
                           "<br>increment %{customdata[2]:.3f}<extra>%{fullData.name}</extra>"),
            showlegend=False,
        ))
    head_text = "mean of heads" if head == "mean" else f"head {head}"
    axis = "position (each layer rescaled to [0, 1])" if scale == "row" else "position"
    styled(fig, title or f"Tokens spaced by their positions — {head_text}", height=110 + 64 * len(rows))
    fig.update_xaxes(title_text=axis, zeroline=False)
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[layer_label(layer, kinds) for layer in rows],
                     autorange="reversed", showgrid=False, zeroline=False, range=None)
    fig.update_layout(hovermode="closest", showlegend=patterns is not None,
                      legend=dict(orientation="h", y=-0.12 - 0.6 / len(rows), x=0),
                      meta={"kind": "spaced_tokens", "head": head, "scale": scale, "window": [start, end],
                            "sampled": bool(len(shown) < end - start)})
    return fig


def _window(window: tuple[int, int] | None, n_tokens: int) -> tuple[int, int]:
    if window is None:
        return 0, n_tokens
    start, end = (int(window[0]), int(window[1]))
    if not 0 <= start < end <= n_tokens:
        raise InputError(f"window {window} must satisfy 0 <= start < end <= {n_tokens} (end exclusive)")
    return start, end


def _scaled(values: np.ndarray, reference: np.ndarray, scale: str) -> np.ndarray:
    values = values.astype(np.float64)
    out = np.where(np.isfinite(values), values, np.nan)
    if scale == "shared":
        return out
    finite = reference[np.isfinite(reference)]
    if finite.size == 0:
        return out
    low, high = float(finite.min()), float(finite.max())
    if high - low <= 1e-12 * max(1.0, abs(high)):
        return np.where(np.isfinite(out), 0.5, np.nan)
    return (out - low) / (high - low)


def _connectors(xs: np.ndarray) -> go.Scatter:
    n_rows, n_tokens = xs.shape
    x = np.full((n_tokens, n_rows + 1), np.nan)
    y = np.full((n_tokens, n_rows + 1), np.nan)
    x[:, :n_rows] = xs.T
    y[:, :n_rows] = np.arange(n_rows)
    return go.Scatter(x=x.ravel(), y=y.ravel(), mode="lines", line=dict(color="rgba(60,60,60,0.16)", width=0.8),
                      hoverinfo="skip", showlegend=False, name="", connectgaps=False)


def _pattern_strip(patterns: np.ndarray, rows: list[int], shown: np.ndarray, xs: np.ndarray, size: int,
                   n_layers: int) -> list[go.Scatter]:
    if patterns.ndim != 2 or patterns.shape[0] != n_layers:
        raise InputError(
            f"patterns must be (n_layers={n_layers}, n_chunks) for the shown head, got shape {patterns.shape}; "
            "pass chunk_patterns(positions)[:, head]"
        )
    labels = np.asarray(PATTERN_NAMES)[patterns] if patterns.dtype.kind in "iu" else patterns.astype(str)
    chunk = shown // size
    inside = chunk < patterns.shape[1]
    out = []
    for name in PATTERN_NAMES:
        x, y = [], []
        for r, layer in enumerate(rows):
            hit = inside.copy()
            hit[inside] = labels[layer, chunk[inside]] == name
            x.append(xs[r, hit])
            y.append(np.full(int(hit.sum()), r + 0.34))
        out.append(go.Scatter(
            x=np.concatenate(x), y=np.concatenate(y), mode="markers", name=f"{name} chunk",
            marker=dict(symbol="square", size=6, color=PATTERN_COLORS[name]), hoverinfo="skip",
        ))
    return out
