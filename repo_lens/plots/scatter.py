"""Token index vs position, per layer and head: a focus view (IQR outliers clipped) and a global view.

Beyond ``max_points`` points a head (or ``max_total_points`` in all), each head is decimated on its own:
half of its points are the smallest and largest position of equal token buckets (its envelope and
extremes survive), the other half an even stride over the tokens (so the density between the extremes
shows too, which minima and maxima alone would hide); 16 heads × 4,096 tokens keep 375 points a head.
All traces are SVG (vector in every export): a few thousand SVG points draw faster than a WebGL context
starts in a browser without a GPU, and the app draws each figure twice (Streamlit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.plots.labels import LABEL_GAP_PX, label_width_px
from repo_lens.plots.paper_layout import (
    LINE_EM,
    estimated_plot_width,
    register_relayout,
    relayout_plot,
)
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
    series_style,
    styled,
    token_contexts,
)
from repo_lens.validation import check_int

if TYPE_CHECKING:
    from repo_lens.plots.paper import PaperTarget


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


@dataclass(frozen=True, kw_only=True)
class ScatterStyle:
    """How :func:`position_scatter_figure` draws: ``title`` (default: one naming the layer, head and view),
    ``k`` (the fences' multiple of the interquartile range in the focus view), at most ``max_points`` points
    per head and ``max_total_points`` in all, ``context`` tokens either side of a token in its hover, and the
    figure's ``width`` in pixels.

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> t = Trace(tokens=list("abc"), token_ids=[97, 98, 99], layer_kinds=["repo"],
        ...           positions=np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32))
        >>> position_scatter_figure(t, 0, style=ScatterStyle(title="z", width=500)).layout.width
        500
    """

    title: str | None = None
    k: float = 1.5
    max_points: int = 4000
    max_total_points: int = 6000
    context: int = 8
    width: int = DEFAULT_WIDTH


@grouped_keywords("style", ScatterStyle)
def position_scatter_figure(
    trace: Any, layer: int, head: int | Literal["all", "mean"] = 0, *, view: Literal["focus", "global"] = "focus",
    highlight: Mapping[str, tuple[int, int]] | None = None, style: ScatterStyle | None = None,
) -> go.Figure:
    """Scatter of token index (x) against position (y) for one layer: one head, every head, or their mean.

    ``view="global"`` shows every finite position. ``view="focus"`` sets the y range to Tukey's
    fences of the plotted positions (:func:`iqr_bounds` with ``style.k``, pooled over the plotted heads) and
    draws the points outside them (:func:`iqr_outliers`) clipped onto the fences as triangles, in a trace
    named ``"clipped outliers"`` whose hover (and ``customdata``) holds the true value. Hover shows the
    token and ``style.context`` tokens either side. Each head draws at most ``style.max_points`` points and all
    heads together at most ``style.max_total_points`` (decimated as the module's description says).
    ``highlight``: named token spans ``{name: (start, end)}`` (end exclusive, within the trace; e.g. needle,
    query) shaded in the background, each named at its top left; names that would overlap on a
    ``style.width``-pixel figure go one line lower. ``style``: :class:`ScatterStyle`.

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> z = np.array([[[0.0, 1.0, 2.0, 3.0, 40.0]]], dtype=np.float32)
        >>> t = Trace(tokens=list("abcde"), token_ids=[97, 98, 99, 100, 101], positions=z, layer_kinds=["repo"])
        >>> fig = position_scatter_figure(t, layer=0, head=0, view="focus")
        >>> [(d.name, d.x.tolist()) for d in fig.data]
        [('head 0', [0, 1, 2, 3]), ('clipped outliers', [4])]
    """
    style = options_or_default(style, ScatterStyle, "style")
    k, title, width = style.k, style.title, style.width
    positions, tokens, kinds = positions_of(trace)
    n_layers, n_heads, n_tokens = positions.shape
    layer = check_layer(layer, n_layers)
    spans = check_spans(highlight, n_tokens)
    max_points, max_total_points, context = _check_options(view, k, style.max_points, style.max_total_points,
                                                           style.context, width)
    heads, values = _head_values(positions[layer], head, n_heads)
    finite = np.isfinite(values)
    if not finite.any():
        raise InputError(f"every position of layer {layer} is NaN or infinite; nothing to plot")
    per_head = max(2, min(max_points, max_total_points // len(heads)))
    keeps = [_decimated(n_tokens, per_head, values[row]) for row in range(len(heads))]  # each head its own
    union = np.unique(np.concatenate(keeps))
    context_of = dict(zip(union.tolist(), token_contexts(tokens, union, context)))
    bounds = iqr_bounds(values[finite], k) if view == "focus" else None
    outside = finite & ((values < bounds[0]) | (values > bounds[1])) if bounds else np.zeros_like(finite)
    fig = go.Figure()
    beyond = _add_heads(fig, heads, values, keeps, finite & ~outside, outside, context_of, n_tokens)
    if bounds and outside.any():
        _add_clipped(fig, heads, values, beyond, bounds, context_of)
    title = title or _title(layer_label(layer, kinds), head, view, per_head < n_tokens, int((~finite).sum()))
    _scatter_layout(fig, title, legend=len(heads) > 1 or bool(outside.any()), width=width, n_tokens=n_tokens,
                    spans=spans)
    fig.layout.meta = {"kind": "scatter", "layer": layer, "head": head, "view": view, "n_outliers": int(outside.sum()),
                       "n_tokens": n_tokens, "spans": {name: list(span) for name, span in spans.items()}}
    return fig


def _check_options(view: Any, k: Any, max_points: Any, max_total_points: Any, context: Any,
                   width: Any) -> tuple[int, int, int]:
    if view not in ("focus", "global"):
        raise InputError(f"view must be 'focus' or 'global', got {view!r}")
    if isinstance(k, bool) or not isinstance(k, Real) or not np.isfinite(cast(float, k)) or k < 0:
        raise InputError(f"k (the fences' multiple of the interquartile range) must be a finite number >= 0, "
                         f"got {k!r} ({type(k).__name__})")
    check_int(width, "width (pixels)", minimum=100)
    return (check_int(max_points, "max_points (points drawn per head)", minimum=2),
            check_int(max_total_points, "max_total_points (points drawn in all)", minimum=2),
            check_int(context, "context (tokens either side in the hover)", minimum=0))


def _title(layer_name: str, head: Any, view: str, decimated: bool, hidden: int) -> str:
    head_text = {"all": "all heads", "mean": "mean of heads"}.get(str(head), f"head {head}")
    view_text = "focus: IQR outliers clipped" if view == "focus" else "global"
    return (f"Position vs token index — {layer_name}, {head_text} ({view_text}){' (decimated)' if decimated else ''}"
            + (f" — {hidden} non-finite positions not shown" if hidden else ""))


def check_spans(highlight: Any, n_tokens: int) -> dict[str, tuple[int, int]]:
    """``highlight`` as {name: (start, end)} token spans of the trace, end exclusive (None: no spans),
    else an InputError naming the span and the valid range.

    >>> check_spans({"needle": (3, 5)}, 10)
    {'needle': (3, 5)}
    """
    if highlight is None:
        return {}
    if not isinstance(highlight, Mapping):
        raise InputError(f"highlight must map span names to (start, end) token spans, e.g. {{'needle': (40, 52)}}; "
                         f"got {type(highlight).__name__}")
    spans = {}
    for name, span in highlight.items():
        if not isinstance(name, str):
            raise InputError(f"highlight span names must be str, got {name!r} ({type(name).__name__})")
        if isinstance(span, (str, bytes)) or not isinstance(span, (Sequence, np.ndarray)) or len(span) != 2:
            raise InputError(f"highlight span {name!r} must be (start, end), two token indices; got {span!r}")
        start, end = (check_int(value, f"highlight span {name!r} {bound}") for value, bound in zip(span, ("start", "end")))
        if not 0 <= start < end <= n_tokens:
            raise InputError(f"highlight span {name!r} = ({start}, {end}) is outside the trace: spans must satisfy "
                             f"0 <= start < end <= {n_tokens} (the trace's tokens, end exclusive)")
        spans[name] = (start, end)
    return spans


def _add_heads(fig: go.Figure, heads: list[str], values: np.ndarray, keeps: list[np.ndarray], inside: np.ndarray,
               outside: np.ndarray, context_of: dict[int, str], n_tokens: int) -> list[np.ndarray]:
    """One marker trace per head (its kept points inside the fences); returns each head's kept points outside them."""
    beyond = []
    for row, label in enumerate(heads):
        keep = keeps[row]
        idx = keep[inside[row, keep]]
        look = series_style(row)
        fig.add_trace(go.Scatter(
            x=idx, y=values[row, idx], mode="markers", name=label,
            marker=dict(size=5 if n_tokens > 500 else 7, color=look["color"], symbol=look["symbol"],
                        opacity=0.75 if len(heads) > 1 else 0.9),
            # str, not object: plotly deep-copies object arrays
            hovertext=np.asarray([context_of[i] for i in idx.tolist()], dtype=str),
            hovertemplate="t=%{x}  z=%{y:.3f}<br>%{hovertext}<extra>%{fullData.name}</extra>",
        ))
        beyond.append(keep[outside[row, keep]])
    return beyond


def _add_clipped(fig: go.Figure, heads: list[str], values: np.ndarray, beyond: list[np.ndarray],
                 bounds: tuple[float, float], context_of: dict[int, str]) -> None:
    """The points outside the fences, clipped onto them as triangles (their true value in the hover)."""
    low, high = bounds
    rows = np.concatenate([np.full(len(idx), row) for row, idx in enumerate(beyond)])
    idx = np.concatenate(beyond)
    true = values[rows, idx]
    labels = np.char.add(np.asarray(heads, dtype=str)[rows], ": ")
    fig.add_trace(go.Scatter(
        x=idx, y=np.clip(true, low, high), mode="markers", name="clipped outliers",
        marker=dict(symbol=np.where(true > high, "triangle-up", "triangle-down"), size=9,
                    color="#D55E00", line=dict(width=0)),
        customdata=true, hovertext=np.char.add(labels, np.asarray([context_of[i] for i in idx.tolist()], dtype=str)),
        hovertemplate="t=%{x}  true z=%{customdata:.3f} (clipped)<br>%{hovertext}<extra></extra>",
    ))
    pad = 0.04 * (high - low or 1.0)
    fig.update_yaxes(range=[low - pad, high + pad])


def _scatter_layout(fig: go.Figure, title: str, *, legend: bool, width: int, n_tokens: int,
                    spans: dict[str, tuple[int, int]]) -> None:
    margin_right = right_legend_margin([trace_.name for trace_ in fig.data]) if legend else None
    # tall enough that a legend of every head (and the clipped outliers) fits beside the plot without scrolling
    height = max(460, 140 + LEGEND_ENTRY_PX * len(fig.data)) if legend else 460
    styled(fig, title, height=height)
    fig.update_layout(margin_l=SCATTER_MARGIN_LEFT_PX, **({"margin_r": margin_right} if legend else {}))
    _shade_spans(fig, spans, n_tokens, width - fig.layout.margin.l - fig.layout.margin.r)
    fig.update_xaxes(title_text="token index", range=[-0.5, n_tokens - 0.5])
    fig.update_yaxes(title_text="position")
    fig.update_layout(width=width, hovermode="closest", showlegend=legend)


SPAN_LABEL_FONT = 12
SPAN_LABEL_LINE_PX = 18
SPAN_LABEL_PAD_PX = 4  # annotation box: borderpad 1 px either side, plus rounding
SCATTER_MARGIN_LEFT_PX = 80  # y tick labels such as "−0.0012"
SPAN_NOTE = "span: "  # the name of each span label's annotation, before the span's name


def _shade_spans(fig: go.Figure, spans: Mapping[str, tuple[int, int]], n_tokens: int, plot_width: float) -> None:
    """A shaded band per span, named by :func:`_span_notes`."""
    for name, (start, end) in sorted(spans.items(), key=lambda item: (item[1][0], item[0])):
        fig.add_vrect(x0=start - 0.5, x1=end - 0.5, fillcolor=SPAN_COLORS.get(name, OKABE_ITO[4]), opacity=0.15,
                      line_width=0)
    for note in _span_notes(spans, n_tokens, plot_width, SPAN_LABEL_FONT, SPAN_LABEL_LINE_PX):
        fig.add_annotation(**note)


def _span_notes(spans: Mapping[str, Any], n_tokens: int, plot_width: float, font_size: float,
                line_px: float) -> list[dict[str, Any]]:
    """Each span's name at its band's top left (top right when it would run past the plot); a name that
    would overlap another goes down a line (``yshift``), the highest free line first."""
    px_per_token = plot_width / max(n_tokens, 1)  # the x axis spans -0.5 .. n_tokens - 0.5
    lines: list[list[tuple[float, float]]] = []  # the (left, right) pixels of the names on each line
    notes = []
    for name, (start, end) in sorted(spans.items(), key=lambda item: (item[1][0], item[0])):
        label_px = label_width_px(name, font_size) + SPAN_LABEL_PAD_PX
        at_right = start * px_per_token + label_px > plot_width
        left = end * px_per_token - label_px if at_right else start * px_per_token
        box = (left, left + label_px)
        line = next((i for i, taken in enumerate(lines)
                     if all(box[1] + LABEL_GAP_PX <= a or b + LABEL_GAP_PX <= box[0] for a, b in taken)), len(lines))
        if line == len(lines):
            lines.append([])
        lines[line].append(box)
        notes.append(dict(x=(end if at_right else start) - 0.5, xref="x", xanchor="right" if at_right else "left",
                          y=1, yref="paper", yanchor="top", yshift=-line_px * line, text=name, name=SPAN_NOTE + name,
                          showarrow=False, font=dict(size=font_size), bgcolor="rgba(255,255,255,0.7)",
                          borderpad=SPAN_LABEL_PAD_PX // 4))
    return notes


def paper_layout(fig: go.Figure, target: PaperTarget) -> None:
    """The generic paper re-layout (:mod:`repo_lens.plots.paper_layout`), then the span names placed
    again for the paper's plot width and type size."""
    relayout_plot(fig, target)
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    if not meta.get("spans"):
        return
    fig.layout.annotations = [note for note in fig.layout.annotations if not (note.name or "").startswith(SPAN_NOTE)]
    for note in _span_notes(meta["spans"], int(meta["n_tokens"]), estimated_plot_width(fig, target), target.small_px,
                            LINE_EM * target.small_px + 2):
        fig.add_annotation(**note)


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


register_relayout("scatter", paper_layout)
