"""Token index vs position, per layer and head: a focus view (IQR outliers clipped) and a global view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.labels import LABEL_GAP_PX, label_width_px
from repo_lens.plots.style import (
    DEFAULT_WIDTH,
    LEGEND_ENTRY_PX,
    OKABE_ITO,
    SPAN_COLORS,
    check_head,
    check_layer,
    layer_label,
    positions_of,
    right_legend_margin,
    sample_indices,
    styled,
    token_contexts,
)
from repo_lens.validation import check_int


def iqr_bounds(values: np.ndarray, k: float = 1.5) -> tuple[float, float]:
    """Tukey's fences (Q1 − k·IQR, Q3 + k·IQR) of the finite ``values``.

    Example:
        >>> iqr_bounds(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
        (-1.0, 7.0)
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise InputError("no finite values to compute quartiles of; every position is NaN or infinite")
    if not np.isfinite(k) or k < 0:
        raise InputError(f"k must be a finite number >= 0, got {k!r}")
    q1, q3 = np.percentile(v, [25.0, 75.0])
    spread = q3 - q1
    return float(q1 - k * spread), float(q3 + k * spread)


def iqr_outliers(values: np.ndarray, k: float = 1.5) -> np.ndarray:
    """Boolean mask of the finite values outside :func:`iqr_bounds` (NaN/inf are not outliers).

    Example:
        >>> iqr_outliers(np.array([1.0, 2.0, 3.0, 4.0, 100.0])).tolist()
        [False, False, False, False, True]
    """
    v = np.asarray(values, dtype=np.float64)
    low, high = iqr_bounds(v, k)
    return np.isfinite(v) & ((v < low) | (v > high))


def position_scatter_figure(
    trace: Any,
    layer: int,
    head: int | Literal["all", "mean"] = 0,
    *,
    view: Literal["focus", "global"] = "focus",
    k: float = 1.5,
    max_points: int = 4000,
    max_total_points: int = 6000,
    context: int = 8,
    highlight: Mapping[str, tuple[int, int]] | None = None,
    title: str | None = None,
    width: int = DEFAULT_WIDTH,
) -> go.Figure:
    """Scatter of token index (x) against position (y) for one layer: one head, every head, or their mean.

    ``view="global"`` shows every finite position. ``view="focus"`` sets the y range to Tukey's
    fences of the plotted positions (:func:`iqr_bounds`, pooled over the plotted heads) and draws
    the points outside them (:func:`iqr_outliers`) clipped onto the fences as triangles, in a trace
    named ``"clipped outliers"`` whose hover (and ``customdata``) holds the true value. Hover shows the token and
    ``context`` tokens either side. Each head draws at most ``max_points`` points and all heads together at
    most ``max_total_points``; beyond, each head is decimated on its own: half of its points are the
    smallest and largest position of equal token buckets (its envelope and extremes survive), the other
    half an even stride over the tokens (so the density between the extremes shows too, which minima and
    maxima alone would hide). 16 heads × 4,096 tokens keep 375 points a head.
    ``highlight``: named token spans (e.g. needle, query) shaded in the background, each named at its
    top left; names that would overlap on a ``width``-pixel figure go one line lower. All traces are SVG
    (vector in every export): a few thousand SVG points draw faster than a WebGL context starts in a
    browser without a GPU, and the app draws each figure twice (Streamlit).

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> z = np.array([[[0.0, 1.0, 2.0, 3.0, 40.0]]], dtype=np.float32)
        >>> t = Trace(tokens=list("abcde"), token_ids=[97, 98, 99, 100, 101], positions=z, layer_kinds=["repo"])
        >>> fig = position_scatter_figure(t, layer=0, head=0, view="focus")
        >>> [(d.name, d.x.tolist()) for d in fig.data]
        [('head 0', [0, 1, 2, 3]), ('clipped outliers', [4])]
    """
    positions, tokens, kinds = positions_of(trace)
    n_layers, n_heads, n_tokens = positions.shape
    layer = check_layer(layer, n_layers)
    if view not in ("focus", "global"):
        raise InputError(f"view must be 'focus' or 'global', got {view!r}")
    heads, values = _head_values(positions[layer], head, n_heads)
    finite = np.isfinite(values)
    if not finite.any():
        raise InputError(f"every position of layer {layer} is NaN or infinite; nothing to plot")
    max_total_points = check_int(max_total_points, "max_total_points", minimum=2)
    per_head = max(2, min(max_points, max_total_points // len(heads)))
    keeps = [_decimated(n_tokens, per_head, values[row]) for row in range(len(heads))]  # each head its own
    union = np.unique(np.concatenate(keeps))
    context_of = dict(zip(union.tolist(), token_contexts(tokens, union, context)))
    fig = go.Figure()
    many = len(heads) > 1
    if view == "focus":
        low, high = iqr_bounds(values[finite], k)
        outside = finite & ((values < low) | (values > high))
    else:
        outside = np.zeros_like(finite)
    clipped_rows, clipped_idx = [], []
    for row, label in enumerate(heads):
        keep = keeps[row]
        idx = keep[finite[row, keep] & ~outside[row, keep]]
        fig.add_trace(go.Scatter(
            x=idx, y=values[row, idx], mode="markers", name=label,
            marker=dict(size=5 if n_tokens > 500 else 7, color=OKABE_ITO[row % len(OKABE_ITO)],
                        opacity=0.75 if many else 0.9),
            # str, not object: plotly deep-copies object arrays
            hovertext=np.asarray([context_of[i] for i in idx.tolist()], dtype=str),
            hovertemplate="t=%{x}  z=%{y:.3f}<br>%{hovertext}<extra>%{fullData.name}</extra>",
        ))
        beyond = keep[outside[row, keep]]
        clipped_rows.append(np.full(len(beyond), row))
        clipped_idx.append(beyond)
    if view == "focus" and outside.any():
        rows, idx = np.concatenate(clipped_rows), np.concatenate(clipped_idx)
        true = values[rows, idx]
        clipped = np.clip(true, low, high)
        labels = np.char.add(np.asarray(heads, dtype=str)[rows], ": ")
        fig.add_trace(go.Scatter(
            x=idx, y=clipped, mode="markers", name="clipped outliers",
            marker=dict(symbol=np.where(true > high, "triangle-up", "triangle-down"), size=9,
                        color="#D55E00", line=dict(width=0)),
            customdata=true, hovertext=np.char.add(labels, np.asarray([context_of[i] for i in idx.tolist()], dtype=str)),
            hovertemplate="t=%{x}  true z=%{customdata:.3f} (clipped)<br>%{hovertext}<extra></extra>",
        ))
        pad = 0.04 * (high - low or 1.0)
        fig.update_yaxes(range=[low - pad, high + pad])
    legend = many or bool(outside.any())
    margin_right = right_legend_margin([trace_.name for trace_ in fig.data]) if legend else None
    hidden = int((~finite).sum())
    suffix = f" — {hidden} non-finite positions not shown" if hidden else ""
    sampled = " (decimated)" if per_head < n_tokens else ""
    head_text = {"all": "all heads", "mean": "mean of heads"}.get(str(head), f"head {head}")
    view_text = "focus: IQR outliers clipped" if view == "focus" else "global"
    # tall enough that a legend of every head (and the clipped outliers) fits beside the plot without scrolling
    height = max(460, 140 + LEGEND_ENTRY_PX * len(fig.data)) if legend else 460
    styled(fig, title or f"Position vs token index — {layer_label(layer, kinds)}, {head_text} ({view_text}){sampled}{suffix}",
           height=height)
    fig.update_layout(margin_l=SCATTER_MARGIN_LEFT_PX, **({"margin_r": margin_right} if legend else {}))
    _shade_spans(fig, highlight or {}, n_tokens, width - fig.layout.margin.l - fig.layout.margin.r)
    fig.update_xaxes(title_text="token index", range=[-0.5, n_tokens - 0.5])
    fig.update_yaxes(title_text="position")
    fig.update_layout(width=width, hovermode="closest", showlegend=legend,
                      meta={"kind": "scatter", "layer": layer, "head": head, "view": view,
                            "n_outliers": int(outside.sum())})
    return fig


SPAN_LABEL_FONT = 12
SPAN_LABEL_LINE_PX = 18
SPAN_LABEL_PAD_PX = 4  # annotation box: borderpad 1 px either side, plus rounding
SCATTER_MARGIN_LEFT_PX = 80  # y tick labels such as "−0.0012"


def _shade_spans(fig: go.Figure, spans: Mapping[str, tuple[int, int]], n_tokens: int, plot_width: int) -> None:
    """A shaded band per span, its name at the band's top left (top right when it would run past the
    plot); a name that would overlap another goes down a line (``yshift``), the highest free line first."""
    px_per_token = plot_width / max(n_tokens, 1)  # the x axis spans -0.5 .. n_tokens - 0.5
    lines: list[list[tuple[float, float]]] = []  # the (left, right) pixels of the names on each line
    for name, (start, end) in sorted(spans.items(), key=lambda item: (item[1][0], item[0])):
        fig.add_vrect(x0=start - 0.5, x1=end - 0.5, fillcolor=SPAN_COLORS.get(name, OKABE_ITO[4]), opacity=0.15,
                      line_width=0)
        label_px = label_width_px(name, SPAN_LABEL_FONT) + SPAN_LABEL_PAD_PX
        at_right = start * px_per_token + label_px > plot_width
        left = end * px_per_token - label_px if at_right else start * px_per_token
        box = (left, left + label_px)
        line = next((i for i, taken in enumerate(lines)
                     if all(box[1] + LABEL_GAP_PX <= a or b + LABEL_GAP_PX <= box[0] for a, b in taken)), len(lines))
        if line == len(lines):
            lines.append([])
        lines[line].append(box)
        fig.add_annotation(x=(end if at_right else start) - 0.5, xref="x", xanchor="right" if at_right else "left",
                           y=1, yref="paper", yanchor="top", yshift=-SPAN_LABEL_LINE_PX * line, text=name,
                           showarrow=False, font=dict(size=SPAN_LABEL_FONT), bgcolor="rgba(255,255,255,0.7)",
                           borderpad=SPAN_LABEL_PAD_PX // 4)


def _decimated(n_tokens: int, budget: int, values: np.ndarray) -> np.ndarray:
    """Indices of at most ``budget`` of ``n_tokens`` points: the bucket minima and maxima of ``values`` on
    half the budget, an even stride on the rest (all of them when they fit).

    Example:
        >>> _decimated(10, 6, np.array([0, 9, 1, 1, 1, 1, -5, 1, 1, 1], dtype=float)).tolist()  # max 1, min 6
        [0, 1, 3, 6, 9]
    """
    if n_tokens <= budget:
        return np.arange(n_tokens)
    envelope = sample_indices(n_tokens, max(2, budget // 2), values)
    return np.union1d(envelope, sample_indices(n_tokens, max(2, budget - len(envelope))))


def _head_values(layer_positions: np.ndarray, head: Any, n_heads: int) -> tuple[list[str], np.ndarray]:
    z = np.asarray(layer_positions, dtype=np.float64)
    if head == "all":
        return [f"head {h}" for h in range(n_heads)], z
    if head == "mean":
        return ["mean of heads"], z.mean(axis=0, keepdims=True)
    index = check_head(head, n_heads, "'all' or 'mean'")
    return [f"head {index}"], z[index][None]
