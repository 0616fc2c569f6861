"""Tokens laid out along x by their learned positions, one row per layer (:func:`spaced_tokens_figure`).

Labels never overlap within a row: when every token's label fits, each row is one text trace;
otherwise each row draws its tokens as vertical tick marks, all of a row one layout shape (named
"marks of layer N"; beyond ``COLUMN_DEDUP_MIN_TOKENS`` shown tokens one tick per 2-pixel column),
under invisible markers (the trace named after the layer; ``marker.maxdisplayed=1``, so the browser
creates one element) that carry their hover (a tick standing for several tokens says how many) and
clicks, and a second trace per row (``meta["labels_of_layer"]``) draws the whole words that fit, placed
greedily from left to right (:func:`repo_lens.plots.labels.place_labels`). One SVG path per row rather
than thousands of marker elements keeps a 16-layer view of 4,096 tokens quick to draw. The connectors
are the trace named "connectors", keyed in the legend by a line of their colour; the chunk strip is a
shape per class, named in the legend. For a
paper, :func:`repo_lens.plots.export` with a ``layout`` draws the rows again for the paper's width
(:func:`repo_lens.plots.spaced_tokens_paper.paper_layout`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.plots.heatmaps import PATTERN_NAMES, pattern_codes
from repo_lens.plots.spaced_token_labels import RowLabels, place_rows
from repo_lens.plots.style import (
    DEFAULT_WIDTH,
    LEGEND_ROW_PX,
    MARGIN_BOTTOM_PX,
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
from repo_lens.validation import check_int, check_positive_number

# beyond this many shown tokens each row draws one tick mark per COLUMN_PX pixels
COLUMN_DEDUP_MIN_TOKENS = 100
COLUMN_PX = 2
# a row's marks are vertical ticks of this half-height (in rows), all of a row one SVG path: thousands of
# separate marker elements cost the browser far more to draw (and to draw again, which Streamlit does)
TICK_HALF_HEIGHT = 0.06
STRIP_SQUARE_PX = 6  # the chunk strip: a band this many pixels high and at least this wide per token
OPTION_UNITS = {"max_tokens": "tokens drawn", "label_limit": "labels per row", "width": "pixels",
                "max_connectors": "connector segments", "chunk_size": "tokens per chunk"}
HOVER = ("token %{customdata[0]}: %{text}<br>position %{customdata[1]:.3f}"
         "<br>increment %{customdata[2]:.3f}<extra>%{fullData.name}</extra>")
MERGED_NOTE = " (+{n} more tokens here: zoom in to separate them)"  # a mark's hover when it stands for others
MERGED_PATTERN = re.compile(r" \(\+\d+ more tokens here: zoom in to separate them\)$")


SHARED_SCALE_RATIO = 10.0  # layers whose ranges of positions differ by more than this are rescaled one by one


def suggested_scale(positions: np.ndarray, head: int | Literal["mean"] = 0) -> Literal["row", "shared"]:
    """The x scale that shows ``positions`` (L, H, T) best in :func:`spaced_tokens_figure`: ``"shared"`` (the
    positions themselves on one axis) when every layer's range (max − min) for ``head`` is within a factor of
    ``SHARED_SCALE_RATIO`` of the widest, so one axis shows how fast each layer's positions run (RoPE, learned
    increments, GRAPE-M: a rescaled row would look like RoPE's); ``"row"`` (each layer rescaled to [0, 1])
    when some layer spans far less than another (RePo's few units beside RoPE's hundreds), which one axis
    would squash to a point.

    Example:
        >>> index = np.arange(50.0)
        >>> suggested_scale(np.stack([index, 1.3 * index])[:, None])  # RoPE, then a head 1.3x as fast
        'shared'
        >>> suggested_scale(np.stack([index, np.sin(index)])[:, None])  # RoPE, then a range of 2 units
        'row'
    """
    z = select_head(np.asarray(positions, dtype=np.float64), head)  # (L, T)
    if z.shape[-1] == 0:
        return "row"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer of NaNs only has no range: left out below
        ranges = np.nanmax(z, axis=-1) - np.nanmin(z, axis=-1)
    ranges = ranges[np.isfinite(ranges)]
    if ranges.size == 0 or ranges.max() <= 0:
        return "row"
    return "shared" if ranges.min() * SHARED_SCALE_RATIO >= ranges.max() else "row"


@dataclass(frozen=True, kw_only=True)
class SpacedTokensStyle:
    """How :func:`spaced_tokens_figure` draws: ``title`` (default: one naming the head and scale), ``x_range``
    (low, high) to zoom the x axis (in x units: [0, 1] with ``scale="row"``; labels are placed for that range),
    ``chunk_size`` (tokens per chunk of the pattern strip), ``connect`` (faint lines following tokens down the
    layers, at most ``max_connectors`` line segments' worth of evenly spaced tokens), ``max_tokens`` (beyond
    it, tokens are sampled with an even stride), at most ``label_limit`` labels a row, placed for a
    ``width``-pixel figure with ``font_size``-pixel text.

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> t = Trace(tokens=list("abc"), token_ids=[97, 98, 99], layer_kinds=["rope"],
        ...           positions=np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32))
        >>> spaced_tokens_figure(t, style=SpacedTokensStyle(width=500, title="bytes")).layout.width
        500
    """

    title: str | None = None
    x_range: tuple[float, float] | None = None
    chunk_size: int = 16
    connect: bool = True
    max_tokens: int = 8192
    label_limit: int = 400
    width: int = DEFAULT_WIDTH
    font_size: int = 14
    max_connectors: int = 200


@grouped_keywords("style", SpacedTokensStyle)
def spaced_tokens_figure(
    trace: Any, *, head: int | Literal["mean"] = 0, layers: Sequence[int] | None = None,
    scale: Literal["row", "shared"] = "row", window: tuple[int, int] | None = None, patterns: np.ndarray | None = None,
    highlight: tuple[int, int] | None = None, style: SpacedTokensStyle | None = None,
) -> go.Figure:
    """Each token drawn at x = its position, one row per layer, faint lines following tokens down the layers
    (how the rows are drawn: see the module's description).

    ``trace``: a :class:`repo_lens.Trace` (anything with ``positions`` (L, H, T), ``tokens`` and
    ``layer_kinds``). ``head``: a head index or ``"mean"`` (mean over heads). ``scale="shared"`` plots the
    raw positions on one axis (x equals the positions); ``"row"`` rescales each layer's positions over the
    shown tokens to [0, 1] (min to max), so layers with small and large ranges are both legible. The raw
    position is in the hover and in ``customdata[:, 1]``. ``window=(start, end)`` shows tokens start..end-1;
    beyond ``style.max_tokens`` tokens are sampled with an even stride. Non-finite positions are left out.
    ``highlight=(token, k)`` rings the token and its ±k neighbours in every layer, labels them first and
    draws the connectors for those tokens only. ``patterns`` (L, n_chunks), from
    :func:`repo_lens.analysis.chunk_patterns` for this head (labels or their codes 0, 1, 2), adds a strip
    under each row coloured by the class of each token's chunk of ``style.chunk_size`` tokens. ``style``: the
    title, zoom, connectors, limits and sizes (:class:`SpacedTokensStyle`).

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> z = np.array([[[0, 1, 2, 3]], [[0.0, 0.25, 2.5, 2.75]]], dtype=np.float32)
        >>> t = Trace(tokens=list("ab c"), token_ids=[97, 98, 32, 99], positions=z, layer_kinds=["rope", "repo"])
        >>> fig = spaced_tokens_figure(t, scale="shared")
        >>> [d.name for d in fig.data if d.name], fig.data[-1].x.tolist()
        (['connectors', 'a token across layers', 'L0 rope', 'L1 repo'], [0.0, 0.25, 2.5, 2.75])
    """
    style = options_or_default(style, SpacedTokensStyle, "style")
    title, x_range, chunk_size, connect, max_tokens = (style.title, style.x_range, style.chunk_size, style.connect,
                                                       style.max_tokens)
    label_limit, width, font_size, max_connectors = style.label_limit, style.width, style.font_size, style.max_connectors
    _check_drawing_options(max_tokens=max_tokens, label_limit=label_limit, width=width, font_size=font_size,
                           max_connectors=max_connectors, chunk_size=chunk_size)
    chosen = _choose_tokens(trace, head=head, layers=layers, scale=scale, window=window, max_tokens=max_tokens,
                            highlight=highlight)
    rows = _rows(trace, chosen, head, patterns, chunk_size)
    axis_range = x_axis_range(chosen.xs, x_range)
    fig = go.Figure()
    connected = connect and len(rows) > 1
    _lay_out(fig, title=title, head=head, scale=scale, rows=chosen.rows, kinds=chosen.kinds, width=width,
             axis_range=axis_range, legend=patterns is not None or connected)
    look = RowLook.screen(width - fig.layout.margin.l - fig.layout.margin.r, font_size)
    tokens = None if len(chosen.shown) < chosen.window[1] - chosen.window[0] else rows[0].display.tolist()
    placed = place_rows(rows, axis_range, look, label_limit, tokens=(chosen.window[0], tokens) if tokens else None)
    if connected:
        slots = chosen.first if chosen.marked.size else _connected(len(chosen.shown), len(rows), max_connectors)
        fig.add_trace(_connectors(chosen.xs, slots, strong=bool(chosen.marked.size)))
        fig.add_trace(_connectors_key(strong=bool(chosen.marked.size)))
    draw_rows(fig, rows, placed, look, axis_range)
    if chosen.marked.size:
        fig.add_trace(_highlight_marks(chosen.xs, chosen.first, chosen.shown, rows[0].display))
    start, end = chosen.window
    fig.layout.meta = {"kind": "spaced_tokens", "head": head, "scale": scale, "window": [start, end],
                       "sampled": bool(len(chosen.shown) < end - start), "x_range": list(axis_range),
                       "labelled": [len(p.x) for p in placed], "highlight": chosen.marked.tolist(), "width": width,
                       "label_limit": label_limit, "tokens": tokens}
    return fig


@dataclass(frozen=True)
class _Chosen:
    """The tokens and layers a spaced-token figure shows, and their x in each row."""

    rows: list[int]  # the layers shown, top to bottom
    kinds: list[str] | None
    window: tuple[int, int]
    shown: np.ndarray  # token indices
    marked: np.ndarray  # highlighted token indices
    first: np.ndarray  # slots (into shown) of the highlighted tokens
    xs: np.ndarray  # (rows, shown) x of each shown token in each row
    z: np.ndarray  # (L, T) positions of the head (or the mean of heads)


@dataclass
class Row:
    """One layer's row: x, text and hover data of its tokens (one per slot), and its look."""

    layer: int
    name: str
    color: str
    x: np.ndarray
    display: np.ndarray  # the label of each token (HTML-escaped)
    custom: np.ndarray  # (n, 3 or 4) float32: token index, position, increment[, chunk class code or -1]
    first: np.ndarray  # slots labelled first (the highlighted tokens)
    hover: np.ndarray | None = None  # hover texts, where they differ from display


@dataclass(frozen=True)
class RowLook:
    """How rows are drawn: plot width (px), label font (px), tick half-height, label and strip offsets
    (rows; the y axis runs down), strip thickness and the column width of one mark (px)."""

    plot_width: float
    font_size: float
    tick_half: float = 0.06
    label_dy: float = 0.0
    label_position: str = "top center"
    strip_dy: float = 0.34
    strip_px: float = 6.0
    column_px: float = 2.0
    tick_width: float = 1.0
    label_inside: bool = False  # keep every label inside the plot area (papers: nothing runs into the margin)

    @classmethod
    def screen(cls, plot_width: float, font_size: float) -> RowLook:
        return cls(float(plot_width), float(font_size), tick_half=TICK_HALF_HEIGHT, strip_px=STRIP_SQUARE_PX,
                   column_px=COLUMN_PX)


def _check_drawing_options(**options: Any) -> None:
    """Refuse drawing options that are not whole numbers in range (font_size: a number > 0)."""
    minimum = {"max_tokens": 2, "label_limit": 0, "width": 100, "max_connectors": 0, "chunk_size": 1}
    for name, low in minimum.items():
        check_int(options[name], f"{name} ({OPTION_UNITS[name]})", minimum=low)
    check_positive_number(options["font_size"], "font_size")


def _choose_tokens(trace: Any, *, head: Any, layers: Sequence[int] | None, scale: str,
                   window: tuple[int, int] | None, max_tokens: int, highlight: tuple[int, int] | None) -> _Chosen:
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
    marked = _highlighted(highlight, start, end)
    if marked.size:
        shown = np.union1d(shown, marked)
    xs = np.empty((len(rows), len(shown)))
    for r, layer in enumerate(rows):
        xs[r] = _scaled(z[layer, shown], z[layer, start:end], scale)
    return _Chosen(rows, kinds, (start, end), shown, marked, np.flatnonzero(np.isin(shown, marked)), xs, z)


def _rows(trace: Any, chosen: _Chosen, head: Any, patterns: Any, chunk_size: Any) -> list[Row]:
    tokens = list(trace.tokens)
    shown = chosen.shown
    display = np.asarray(escape_tokens([tokens[t] for t in shown]), dtype=str)  # not object: plotly deep-copies those
    classes = None if patterns is None else _chunk_classes(patterns, chunk_size, chosen)
    increments = select_head(_increments(trace), head)
    out = []
    for r, layer in enumerate(chosen.rows):
        columns = [shown, chosen.z[layer, shown], increments[layer, shown]]
        if classes is not None:
            columns.append(classes[r])
        out.append(Row(layer, layer_label(layer, chosen.kinds), kind_color(chosen.kinds[layer] if chosen.kinds else "", layer),
                       chosen.xs[r], display, np.column_stack(columns).astype(np.float32), chosen.first))
    return out


def _chunk_classes(patterns: Any, chunk_size: Any, chosen: _Chosen) -> np.ndarray:
    """(rows, shown) class code (0 constant, 1 mono, 2 hybrid) of each shown token's chunk, -1 past the last chunk."""
    n_layers = chosen.z.shape[0]
    codes = pattern_codes(patterns)
    if codes.shape[0] != n_layers:
        raise InputError(f"patterns must be (n_layers={n_layers}, n_chunks) for the shown head, got shape "
                         f"{codes.shape}; pass chunk_patterns(positions)[:, head]")
    chunk = chosen.shown // chunk_size
    inside = chunk < codes.shape[1]
    out = np.full((len(chosen.rows), len(chosen.shown)), -1, dtype=np.int64)
    out[:, inside] = codes[np.asarray(chosen.rows)][:, chunk[inside]]
    return out


def draw_rows(fig: go.Figure, rows: list[Row], placed: list[RowLabels], look: RowLook,
               axis_range: tuple[float, float]) -> None:
    """Each row as one text trace when every label fits, else as marks (ticks, hover markers, the labels
    that fit); the chunk strip first, under them."""
    units_per_px = (axis_range[1] - axis_range[0]) / look.plot_width
    digits = path_digits(axis_range, units_per_px)
    if any(row.custom.shape[1] > 3 for row in rows):
        for shape in _strip_shapes(rows, look, units_per_px, digits):
            fig.add_shape(**shape)
    every_label = all(labels.every_token for labels in placed)
    row_dtype = np.int8 if len(rows) < 128 else np.int32
    for r, (row, labels) in enumerate(zip(rows, placed)):
        if every_label:
            fig.add_trace(go.Scatter(
                x=row.x.astype(np.float32), y=_row_y(len(row.x), r, row_dtype, look.label_dy), name=row.name,
                mode="text", text=row.display, textfont=dict(color=row.color, size=look.font_size),
                textposition=None if look.label_dy == 0 else look.label_position, customdata=row.custom,
                meta={"layer": row.layer}, hovertemplate=HOVER, showlegend=False,
            ))
        else:
            _draw_marks(fig, r, row, labels, look, units_per_px, row_dtype, digits)


def path_digits(axis_range: tuple[float, float], units_per_px: float) -> int:
    """Significant digits that put an x of ``axis_range`` in an SVG path within a tenth of a pixel: 7 for
    ordinary positions, up to 17 (float64's) where the range is narrow for its magnitude (1e30 ± a few units).

    >>> path_digits((-10.0, 4100.0), 4.0), path_digits((1e30 - 1e15, 1e30 + 1e15), 2e12)
    (7, 17)
    """
    magnitude = max(abs(axis_range[0]), abs(axis_range[1]))
    if not (units_per_px > 0 and magnitude > 0):
        return 7
    return int(np.clip(np.ceil(np.log10(magnitude / (units_per_px / 10))) + 1, 7, 17))


def _row_y(n: int, r: int, dtype: type, dy: float) -> np.ndarray:
    """The y of ``n`` points of row ``r``, ``dy`` rows off it (ints when on it: a smaller figure)."""
    return np.full(n, r, dtype=dtype) if dy == 0 else np.full(n, r + dy, dtype=np.float32)


def _draw_marks(fig: go.Figure, r: int, row: Row, labels: RowLabels, look: RowLook, units_per_px: float,
                row_dtype: type, digits: int = 7) -> None:
    drawn, text = np.arange(len(row.x)), row.display if row.hover is None else row.hover
    if len(row.x) > COLUMN_DEDUP_MIN_TOKENS:
        drawn, text = _one_mark_per_column(row.x, text, np.isin(np.arange(len(row.x)), row.first),
                                           look.column_px * units_per_px)
    ticks = _ticks_path(row.x[drawn], r, look.tick_half, digits)
    if ticks:  # empty when every shown position of the row is NaN or infinite
        fig.add_shape(type="path", path=ticks, xref="x", yref="y", line=dict(color=row.color, width=look.tick_width),
                      layer="above", name=f"marks of layer {row.layer}")
    # invisible markers carry each mark's hover text and click (plotly selects only points of traces with
    # markers or text); maxdisplayed=1: the browser creates one marker element, not one per mark
    fig.add_trace(go.Scatter(
        x=row.x[drawn].astype(np.float32), y=np.full(len(drawn), r, dtype=row_dtype), name=row.name,
        mode="markers", marker=dict(color=row.color, size=7, opacity=0, maxdisplayed=1), text=text,
        customdata=row.custom[drawn], meta={"layer": row.layer}, hovertemplate=HOVER, showlegend=False,
    ))
    fig.add_trace(go.Scatter(  # the words that fit
        x=labels.x.astype(np.float32), y=_row_y(len(labels.x), r, row_dtype, look.label_dy),
        mode="text", text=labels.text, textposition=look.label_position,
        textfont=dict(color=row.color, size=look.font_size), hoverinfo="skip", showlegend=False, name="",
        meta={"labels_of_layer": row.layer},
    ))


def _lay_out(fig: go.Figure, *, title: str | None, head: Any, scale: str, rows: list[int], kinds: Any, width: int,
             axis_range: tuple[float, float], legend: bool) -> None:
    head_text = "mean of heads" if head == "mean" else f"head {head}"
    axis = "position (each layer rescaled to [0, 1])" if scale == "row" else "position"
    styled(fig, title or f"Tokens spaced by their positions — {head_text}", height=110 + 64 * len(rows))
    fig.update_xaxes(title_text=axis, zeroline=False, range=list(axis_range))
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[layer_label(layer, kinds) for layer in rows],
                     autorange="reversed", showgrid=False, zeroline=False, range=None)
    # the legend (the connectors, the chunk strip's classes): one row at the bottom, in a margin made for it
    fig.update_layout(width=width, hovermode="closest", showlegend=legend,
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0),
                      margin_b=MARGIN_BOTTOM_PX + (LEGEND_ROW_PX if legend else 0))


def _highlighted(highlight: tuple[int, int] | None, start: int, end: int) -> np.ndarray:
    """Token indices of ``highlight=(token, k)``: token-k..token+k, within the window."""
    if highlight is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(highlight, (str, bytes)) or not isinstance(highlight, (Sequence, np.ndarray)) or len(highlight) != 2:
        raise InputError(f"highlight must be (token index, k neighbours), got {highlight!r}")
    token, k = check_int(highlight[0], "highlight token"), check_int(highlight[1], "highlight neighbours k")
    if not start <= token < end:
        raise InputError(f"highlight token {token} is outside the shown tokens {start}..{end - 1}; "
                         "pick a token in the window, or pass highlight=None")
    if k < 0:
        raise InputError(f"highlight neighbours k must be >= 0, got {k}")
    return np.arange(max(start, token - k), min(end, token + k + 1))


def x_axis_range(xs: np.ndarray, x_range: tuple[float, float] | None) -> tuple[float, float]:
    if x_range is not None:
        try:
            low, high = (float(value) for value in x_range)
        except (TypeError, ValueError):
            raise InputError(f"x_range must be (low, high), got {x_range!r}") from None
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise InputError(f"x_range must be two finite numbers with low < high, got {x_range!r}")
        return low, high
    finite = xs[np.isfinite(xs)]
    if finite.size == 0:
        return -0.5, 0.5
    low, high = float(finite.min()), float(finite.max())
    pad = 0.03 * (high - low) if high > low else 0.5
    # beyond 2**53 (about 9e15) a pad of 0.5 is below float64's spacing and would vanish: at least 4 steps
    pad = max(pad, 4 * float(np.spacing(max(abs(low), abs(high)))))
    return low - pad, high + pad


def _connected(n_tokens: int, n_rows: int, max_segments: int) -> np.ndarray:
    """Evenly spaced token slots whose connectors make at most ``max_segments`` segments."""
    per_token = max(1, n_rows - 1)
    return sample_indices(n_tokens, max(2, max_segments // per_token))


def _increments(trace: Any) -> np.ndarray:
    """(L, H, T) increments for the hover: :func:`repo_lens.analysis.trace_increments` (imported when
    drawn: the analyzers import torch)."""
    from repo_lens.analysis.increments import trace_increments

    return trace_increments(trace)


def _window(window: tuple[int, int] | None, n_tokens: int) -> tuple[int, int]:
    if window is None:
        return 0, n_tokens
    if isinstance(window, (str, bytes)) or not isinstance(window, (Sequence, np.ndarray)) or len(window) != 2:
        raise InputError(f"window must be (start, end), two ints with 0 <= start < end <= {n_tokens} "
                         f"(end exclusive), got {window!r}")
    start, end = (check_int(value, f"window {bound}") for value, bound in zip(window, ("start", "end")))
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


def _connectors(xs: np.ndarray, slots: np.ndarray, strong: bool = False) -> go.Scatter:
    """One polyline per token slot through its x in every row, separated by gaps (NaN)."""
    n_rows = xs.shape[0]
    x = np.full((len(slots), n_rows + 1), np.nan)
    y = np.full((len(slots), n_rows + 1), np.nan)
    x[:, :n_rows] = xs[:, slots].T
    y[:, :n_rows] = np.arange(n_rows)
    line = dict(color="rgba(0,0,0,0.55)", width=1.2) if strong else dict(color="rgba(60,60,60,0.16)", width=0.8)
    return go.Scatter(x=x.ravel(), y=y.ravel(), mode="lines", line=line, hoverinfo="skip", showlegend=False,
                      name="connectors", connectgaps=False)


CONNECTORS_KEY = "a token across layers"
HIGHLIGHTED_CONNECTORS_KEY = "highlighted tokens across layers"


def _connectors_key(strong: bool) -> go.Scatter:
    """The connectors' legend entry: a line in their colour, drawn more opaque than the faint connectors
    so that it shows at legend size."""
    line = dict(color="rgba(0,0,0,0.55)", width=1.2) if strong else dict(color="rgba(60,60,60,0.5)", width=1.2)
    return go.Scatter(x=[None], y=[None], mode="lines", line=line, hoverinfo="skip", showlegend=True, legendrank=1,
                      name=HIGHLIGHTED_CONNECTORS_KEY if strong else CONNECTORS_KEY)


def _highlight_marks(xs: np.ndarray, slots: np.ndarray, shown: np.ndarray, display: np.ndarray) -> go.Scatter:
    n_rows = xs.shape[0]
    return go.Scatter(
        x=xs[:, slots].ravel(), y=np.repeat(np.arange(n_rows), len(slots)), mode="markers",
        name="highlighted tokens", marker=dict(symbol="circle-open", size=13, color="#000000", line=dict(width=2)),
        customdata=np.tile(shown[slots], n_rows), text=np.tile(display[slots], n_rows),
        hovertemplate="token %{customdata}: %{text}<extra>highlighted</extra>", showlegend=False,
    )


def _one_mark_per_column(x: np.ndarray, display: np.ndarray, keep: np.ndarray,
                         column: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the marks a row draws, one per ``column``-wide stretch of x (its first token; marks
    closer than a pixel or two look like one), plus every token in ``keep``, and their hover texts:
    a mark standing for others says how many. Non-finite x are kept (plotly leaves them out)."""
    finite = np.isfinite(x)
    if column <= 0 or not finite.any():
        return np.arange(len(x)), display
    bins = np.floor(np.where(finite, x, 0.0) / column)
    _, first, counts = np.unique(bins[finite], return_index=True, return_counts=True)
    finite_index = np.flatnonzero(finite)
    drawn = np.union1d(finite_index[first], np.flatnonzero(keep | ~finite))
    stands_for = np.ones(len(x), dtype=np.int64)
    stands_for[finite_index[first]] = counts
    text = display[drawn].astype(object)
    for slot, index in enumerate(drawn):
        if stands_for[index] > 1 and not keep[index]:
            text[slot] = text[slot] + MERGED_NOTE.format(n=stands_for[index] - 1)
    return drawn, text.astype(str)


def _ticks_path(x: np.ndarray, row: int, half_height: float, digits: int = 7) -> str:
    """An SVG path (in data coordinates, for a layout shape) of a vertical tick at each finite ``x`` on ``row``
    (x with ``digits`` significant digits, :func:`path_digits`).

    Example:
        >>> _ticks_path(np.array([0.25, np.nan, 0.5]), 2, 0.1)
        'M0.25,1.9V2.1M0.5,1.9V2.1'
    """
    bottom, top = f"{row - half_height:.6g}", f"{row + half_height:.6g}"
    return "".join(f"M{value:.{digits}g},{bottom}V{top}"
                   for value in np.asarray(x, dtype=np.float64)[np.isfinite(x)].tolist())


def _runs(x: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the union of ``width``-wide intervals centred on the finite ``x``."""
    x = np.sort(np.asarray(x, dtype=np.float64)[np.isfinite(x)])
    if x.size == 0:
        return x, x
    breaks = np.flatnonzero(np.diff(x) > width) + 1
    return x[np.r_[0, breaks]] - width / 2, x[np.r_[breaks - 1, len(x) - 1]] + width / 2


def _strip_shapes(rows: list[Row], look: RowLook, units_per_px: float, digits: int = 7) -> list[dict[str, Any]]:
    """One layout shape (a single SVG path, named in the legend) per chunk class: under each row, a band
    ``look.strip_px`` high over each token of that class (``custom[:, 3]``), at least as wide
    (``units_per_px`` x units per pixel), neighbouring tokens' bands merged into one segment: it looks like
    a square per token and draws in a fraction of the time of thousands of marker elements."""
    square = look.strip_px * units_per_px if units_per_px > 0 else 0.0
    out = []
    for code, name in enumerate(PATTERN_NAMES):
        path = []
        for r, row in enumerate(rows):
            if row.custom.shape[1] < 4:
                continue
            starts, ends = _runs(row.x[row.custom[:, 3] == code], square)
            y = f"{r + look.strip_dy:.6g}"
            path += [f"M{a:.{digits}g},{y}H{b:.{digits}g}" for a, b in zip(starts.tolist(), ends.tolist())]
        if path:  # a class no shown token has gets no shape, and no legend entry
            out.append(dict(type="path", path="".join(path), xref="x", yref="y", layer="above", showlegend=True,
                            line=dict(color=PATTERN_COLORS[name], width=look.strip_px), name=f"{name} chunk"))
    return out
