"""Laying a figure out again for a paper size (:func:`repo_lens.plots.paper_figure`).

Every figure gets the paper's width, font family and sizes (axis titles at the base size; tick labels,
legends and colour bars a point smaller; text in the plot, such as heatmap values, bar values and
span names, 1.5 points smaller; nothing under 5 pt). Legends go above the plot in rows and colour
bars are slim, so the plotting area keeps most of the width. Heatmap values stay only where they fit
their cells and category axes label every k-th category when all would not fit. Bars of several
series are coloured dark to light (Cividis) and lines have a dash pattern and marker symbol, so series
stay apart in greyscale.
The height suits the content (rows of a heatmap or of a spaced-token figure; about 0.6 × the plot
width for bars, lines and scatters) unless an aspect is given. A builder's figure may re-lay itself
out further, chosen by its ``layout.meta["kind"]`` (the spaced-token figure places its labels again).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from repo_lens.errors import InputError
from repo_lens.plots.labels import label_width_px
from repo_lens.plots.paper import DEFAULT_FONT_PT, PaperTarget, paper_target
from repo_lens.plots.style import SEQUENTIAL

LINE_EM = 1.25  # a line of text, in font sizes
LEGEND_SYMBOL_PX = 40.0  # a legend entry's symbol and the gap before its text (plotly: itemwidth 30 + 10)
LEGEND_GAP_PX = 5.0  # after each entry of a horizontal legend (plotly: itemGap)
LEGEND_PAD_PX = 10  # above and below a legend's rows (plotly: itemGap 5 each), the page's top edge included
COLORBAR_THICKNESS_PX = 8
PLOT_ASPECT = 0.6  # plot height / plot width of bars, lines and scatters
PLOT_HEIGHT_PX = (100, 320)  # the plotting area's height: at least (a heatmap of few rows too), at most
HEATMAP_ROW_EM = 1.35  # a heatmap row, in tick-label sizes (cells holding values: 1.3 × their font + 2 px)
EDGE_PX = 4
_KIND_RELAYOUTS: dict[str, Callable[[go.Figure, PaperTarget], None]] = {}  # filled by register_relayout


def paper_figure(fig: go.Figure, layout: Any = "one-column", aspect: Any = None, font_pt: Any = DEFAULT_FONT_PT,
                 font: Any = "sans") -> go.Figure:
    """A copy of ``fig`` laid out again for a paper: ``layout`` a preset of :data:`PAPER_PRESETS` or a
    width with a unit; ``font_pt``-point text (axis titles; ticks and legends a point smaller, labels in
    the plot 1.5 points smaller, at least 5 pt); ``font`` "sans", "serif" (Times) or "cm" (Computer
    Modern); height ``aspect`` × width, or (None) a height that suits the figure's content.

    Not only the figure-wide font changes: each builder's figure re-lays itself out for the size
    (spaced-token labels placed again for the width, heatmap values kept only where they fit their
    cells, legends above the plot and slim colour bars so the plot keeps the width, span names placed
    again); the title goes (papers put it in the caption).

    Example:
        >>> fig = paper_figure(go.Figure(go.Bar(y=[1, 2])), "two-column", aspect=0.62)
        >>> fig.layout.width, fig.layout.height, round(fig.layout.font.size, 2)
        (648, 402, 10.67)
    """
    if not isinstance(fig, go.Figure):
        raise InputError(f"paper_figure needs a plotly Figure (from a repo_lens.plots builder), got {type(fig).__name__}")
    target = paper_target(layout, aspect=aspect, font_pt=font_pt, font=font)
    sized = go.Figure(fig)
    relayout(sized, target)
    return sized


def relayout(fig: go.Figure, target: PaperTarget) -> None:
    """Lay ``fig`` out for ``target`` in place: the shared look, then its builder's re-layout or the generic one."""
    fig.update_layout(width=target.width_px, title_text="", template="plotly_white",
                      font=dict(family=target.family, size=target.text_px, color="#000000"),
                      hoverlabel=dict(font_family=target.family))
    kind = fig.layout.meta.get("kind") if isinstance(fig.layout.meta, dict) else None
    _KIND_RELAYOUTS.get(cast(str, kind), relayout_plot)(fig, target)


def register_relayout(kind: str, relayout_kind: Callable[[go.Figure, PaperTarget], None]) -> None:
    """Figures whose ``layout.meta["kind"]`` is ``kind`` are laid out for a paper by ``relayout_kind``
    (a builder's module registers its own, so this module imports no builder)."""
    _KIND_RELAYOUTS[kind] = relayout_kind


def relayout_plot(fig: go.Figure, target: PaperTarget) -> None:
    """The generic re-layout: axes, legend, colour bars, traces, annotations, margins and height."""
    plot_width = estimated_plot_width(fig, target)
    heatmap_rows = _heatmaps(fig, target, plot_width)
    _axes(fig, target)
    legend = _legend(fig, target)
    top = legend + _colorbars(fig, target) + _annotations(fig, target, plot_width)
    top += _traces(fig, target, plot_width)
    ticks = _category_ticks(fig, target, plot_width)
    bottom = ticks + LINE_EM * (target.text_px if _has_x_title(fig) else 0) + 8
    if target.height_px is not None:
        height: float = target.height_px
    elif heatmap_rows:
        height = max(PLOT_HEIGHT_PX[0], heatmap_rows * _heatmap_row_px(fig, target)) + top + bottom
    else:
        low, high = PLOT_HEIGHT_PX
        height = min(high, max(low, PLOT_ASPECT * plot_width)) + top + bottom
    fig.update_layout(height=math.ceil(height), margin=dict(l=EDGE_PX, r=EDGE_PX, t=math.ceil(top) + (0 if legend else EDGE_PX),
                                                            b=EDGE_PX, pad=0, autoexpand=True))


def estimated_plot_width(fig: go.Figure, target: PaperTarget) -> float:
    """The plotting area's width at ``target``: the figure's width less the y tick labels and title at
    the left and a colour bar at the right (plotly's automatic margins make room for what is there)."""
    labels = [str(label) for trace in fig.data if getattr(trace, "orientation", None) != "h"
              for label in (_category_labels(trace, "y") or [])]
    widest = max((label_width_px(label, target.tick_px) for label in labels), default=4 * 0.65 * target.tick_px)
    left = widest + 6 + (LINE_EM * target.text_px + 4 if _has_y_title(fig) else 0)
    right = EDGE_PX + (COLORBAR_THICKNESS_PX + 8 + label_width_px("0.00", target.tick_px) if _colorbar_traces(fig) else 0)
    return max(40.0, target.width_px - left - right)


def legend_height(names: Sequence[str], target: PaperTarget, width: float | None = None) -> float:
    """Pixels a horizontal legend of ``names`` takes above a plot ``width`` px wide. Plotly puts the
    entries in one row when they fit, else in a grid whose columns are as wide as the widest entry (its
    symbol, its text and a 5 px gap), as many per row as fit the plot's width; a row is
    max(1.3 × the font, 16) + 3 px high."""
    width = width or target.width_px - 2 * EDGE_PX
    entries = [LEGEND_SYMBOL_PX + text_width_px(_plain(name), target.tick_px) + LEGEND_GAP_PX for name in names]
    if not entries:
        return 0.0
    fits_one_row = sum(entries) - LEGEND_GAP_PX < width
    per_row = len(entries) if fits_one_row else max(1, int((width + LEGEND_GAP_PX) // max(entries)))
    return math.ceil(len(entries) / per_row) * (max(16.0, 1.3 * target.tick_px) + 3) + LEGEND_PAD_PX


@functools.lru_cache(maxsize=1)
def _sans_face() -> Any:
    try:
        from PIL import ImageFont

        return ImageFont.truetype("DejaVuSans.ttf", 100)
    except (ImportError, OSError):  # no DejaVu Sans here: the per-character estimate instead
        return None


def text_width_px(text: str, font_size: float) -> float:
    """Width in pixels of ``text`` at ``font_size`` px as DejaVu Sans draws it (the per-character
    estimate of :func:`label_width_px` where the face is not installed).

    >>> 0 < text_width_px("head 1", 10) <= label_width_px("head 1", 10)
    True
    """
    face = _sans_face()
    if face is None or any(ord(char) > 0x2FFF for char in text):
        return label_width_px(text, font_size)
    return face.getlength(text) * font_size / 100


def _legend(fig: go.Figure, target: PaperTarget) -> float:
    names = _legend_names(fig)
    if not names:
        fig.update_layout(showlegend=False)
        return 0.0
    fig.update_layout(showlegend=True, legend=dict(
        orientation="h", x=0, xanchor="left", y=1.0, yanchor="top", yref="container", xref="paper",
        font=dict(size=target.tick_px), itemwidth=30, itemsizing="trace", tracegroupgap=0,
        bgcolor="rgba(0,0,0,0)", borderwidth=0, title_text=""))
    return legend_height(names, target, estimated_plot_width(fig, target))  # xref="paper": the plot's width


def legend_key(trace: Any) -> bool:
    """A scatter trace with no data that only puts an entry in the legend (the chunk classes of a strip, the
    spaced tokens' connectors)."""
    return (isinstance(trace, go.Scatter) and trace.x is not None and len(trace.x) > 0
            and all(x is None for x in trace.x))


def _legend_names(fig: go.Figure) -> list[str]:
    if fig.layout.showlegend is False:
        return []
    shown = [trace.name for trace in fig.data if trace.name and (trace.showlegend or (
        trace.showlegend is None and not isinstance(trace, go.Heatmap)))]  # plotly lists no heatmap by default
    shapes = [shape.name for shape in fig.layout.shapes if shape.showlegend and shape.name]
    if fig.layout.showlegend is None and len(shown) < 2 and not shapes:  # plotly draws no legend for one trace
        return []
    return list(dict.fromkeys(shown)) + shapes


def _axes(fig: go.Figure, target: PaperTarget) -> None:
    common = dict(tickfont=dict(size=target.tick_px), title_font=dict(size=target.text_px), title_standoff=4,
                  ticklen=3, automargin=True)
    fig.update_xaxes(**common)
    fig.update_yaxes(**common)
    # plotly draws a power label ("10⁻³") with its base and exponent at other sizes than the ticks;
    # "1e−3" (and 0.01, 0.1, 1 written out) is one text at the tick size
    fig.for_each_xaxis(_plain_exponent)
    fig.for_each_yaxis(_plain_exponent)


def _plain_exponent(axis) -> None:
    if axis.exponentformat == "power":
        axis.exponentformat = "e"


def _colorbars(fig: go.Figure, target: PaperTarget) -> float:
    """Slim colour bars at the right, as tall as the plot; returns 0 (they take width, not height)."""
    bar = dict(thickness=COLORBAR_THICKNESS_PX, len=1.0, lenmode="fraction", y=0.5, yanchor="middle", x=1.0,
               xanchor="left", xpad=6, ypad=0, outlinewidth=0, tickfont=dict(size=target.tick_px),
               title=dict(font=dict(size=target.tick_px), side="right"))
    for trace in _colorbar_traces(fig):
        trace.update(colorbar=bar)
    fig.update_coloraxes(colorbar=bar)
    return 0.0


def _colorbar_traces(fig: go.Figure) -> list[Any]:
    with_bars = [trace for trace in fig.data if hasattr(trace, "colorbar") and trace.showscale is not False
                 and getattr(trace, "coloraxis", None) is None]
    return with_bars + [trace for trace in fig.data if getattr(trace, "coloraxis", None)]


def _heatmaps(fig: go.Figure, target: PaperTarget, plot_width: float) -> int:
    """Values kept in the cells only where they fit, category x axes thinned; returns the rows of the tallest heatmap."""
    heatmaps = [trace for trace in fig.data if isinstance(trace, go.Heatmap)]
    if not heatmaps:
        return 0
    panels = len({trace.xaxis for trace in heatmaps})
    cell = plot_width / panels / max(np.shape(heatmaps[0].z)[-1], 1) - (heatmaps[0].xgap or 0)
    row_px = _heatmap_row_px(fig, target)
    for trace in heatmaps:
        suffix = (trace.xaxis or "x")[1:]  # no grid lines between the cells (gaps stay white)
        fig.layout["xaxis" + suffix].update(showgrid=False, zeroline=False)
        fig.layout["yaxis" + (trace.yaxis or "y")[1:]].update(showgrid=False, zeroline=False)
        if trace.texttemplate:
            fits = (cell >= label_width_px(_widest_value(trace), target.small_px) + 2
                    and row_px >= LINE_EM * target.small_px + 2)
            trace.update(texttemplate=trace.texttemplate if fits else "", textfont=dict(size=target.small_px))
        categories = _category_labels(trace, "x")
        if categories:
            ticks = _spread_ticks(categories, cell, max(label_width_px(str(label), target.tick_px) for label in categories),
                                  panel_gap=_panel_gap(fig, plot_width) if panels > 1 else None)
            axis = fig.layout["xaxis" + (trace.xaxis or "x")[1:]]
            axis.update(tickmode="array", tickvals=ticks, ticktext=ticks, tickangle=0)
    return max(np.shape(trace.z)[0] for trace in heatmaps)


def _category_ticks(fig: go.Figure, target: PaperTarget, plot_width: float) -> float:
    """Labels of category x axes (other than heatmaps') that fit: across when they fit their category,
    else every k-th one for ordered categories (layers of a line) and upright for bar groups; returns
    the height the x tick labels take."""
    height = LINE_EM * target.tick_px
    for trace in fig.data:
        categories = _category_labels(trace, "x")
        if isinstance(trace, go.Heatmap) or not categories:
            continue
        cell = plot_width / len(categories)
        widest = max(label_width_px(_plain(str(label)), target.tick_px) for label in categories) + 4
        axis = fig.layout["xaxis" + (trace.xaxis or "x")[1:]]
        if widest <= cell:
            axis.update(tickangle=0)
        elif isinstance(trace, go.Bar):  # every group keeps its name
            axis.update(tickangle=-90)
            height = max(height, widest)
        else:
            step = math.ceil(widest / cell)
            axis.update(tickangle=0, tickmode="array", tickvals=categories[::step], ticktext=categories[::step])
    return height


def _spread_ticks(categories: list[Any], cell: float, widest: float, *, panel_gap: float | None) -> list[Any]:
    """Every k-th category, k so that labels ``widest`` px wide keep a gap between them; with ``panel_gap``
    (px to a panel beside this one, labelled the same) no more of them than keeps this panel's last label
    clear of the next panel's first."""
    need = widest + 6.0
    indices = list(range(0, len(categories), max(1, math.ceil(need / max(cell, 1.0)))))
    if panel_gap is not None:
        while len(indices) > 1 and (len(categories) - indices[-1] + indices[0]) * cell + panel_gap < need:
            indices.pop()
    return [categories[i] for i in indices]


def _panel_gap(fig: go.Figure, plot_width: float) -> float:
    """Pixels between the first two panels side by side (subplots' x domains)."""
    first, second = fig.layout.xaxis.domain or (0, 1), fig.layout.xaxis2.domain or (1, 1)
    return max(0.0, (second[0] - first[1]) * plot_width)


def _heatmap_row_px(fig: go.Figure, target: PaperTarget) -> float:
    values = any(isinstance(trace, go.Heatmap) and trace.texttemplate for trace in fig.data)
    return max(HEATMAP_ROW_EM * target.tick_px, LINE_EM * target.small_px + 2 if values else 0.0)


def _widest_value(trace: go.Heatmap) -> str:
    """The longest text the heatmap's ``%{z:FORMAT}`` template writes."""
    found = re.search(r"%\{z:([^}]*)\}", trace.texttemplate or "")
    values = np.asarray(trace.z, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not values.size:
        return ""
    spec = found.group(1) if found else ".3g"
    try:
        return max((format(float(value), spec) for value in (values.min(), values.max())), key=len)
    except ValueError:  # a d3 format Python does not know
        return max((f"{float(value):.3g}" for value in (values.min(), values.max())), key=len)


def _traces(fig: go.Figure, target: PaperTarget, plot_width: float) -> float:
    """Sizes of marks, lines and text in the plot; returns the height bar values above the plot may take."""
    bars = [trace for trace in fig.data if isinstance(trace, go.Bar)]
    above = 0.0
    for index, trace in enumerate(bars):
        trace.update(marker_line_width=0, textfont_size=target.small_px, constraintext="none")
        if len(bars) > 1:  # dark to light: apart in greyscale too (fill patterns would make PDFs megabytes)
            trace.update(marker_color=sample_colorscale(SEQUENTIAL, [0.05 + 0.9 * index / (len(bars) - 1)])[0],
                         marker_line=dict(width=0.5, color="#000000"))
        above = max(above, _fit_bar_text(fig, trace, target, plot_width, len(bars)))
    for trace in fig.data:
        if isinstance(trace, go.Scatter):
            mode = trace.mode or "lines+markers"
            if legend_key(trace):  # a class's swatch, drawn nowhere in the plot: a bar's legend swatch's size
                trace.marker.size = 1.4 * target.tick_px
            elif "markers" in mode and trace.marker.size is not None and np.ndim(trace.marker.size) == 0:
                trace.marker.size = max(3.0, 0.55 * float(trace.marker.size))
            elif "markers" in mode and trace.marker.size is None:
                trace.marker.size = 4
            if "lines" in mode:
                trace.line.width = min(float(trace.line.width or 2.0), 1.25)
            if "text" in mode:
                trace.textfont.size = target.small_px
    for shape in fig.layout.shapes:
        if shape.line is not None and (shape.line.width or 0) > 1:
            shape.line.width = 1
    return above


def _fit_bar_text(fig: go.Figure, trace: go.Bar, target: PaperTarget, plot_width: float, series: int) -> float:
    """Bar values read across when they fit the bar, up the bar when only that fits, else not at all;
    returns how far values written above the tallest bar may reach above the plot."""
    texts = [str(text) for text in (trace.text if trace.text is not None else [])]
    if not texts:
        return 0.0
    groups = max(len(trace.x) if trace.x is not None else len(texts), 1)
    bar = plot_width / groups * (1 - (fig.layout.bargap if fig.layout.bargap is not None else 0.2)) / max(series, 1)
    widest = max(label_width_px(_plain(text), target.small_px) for text in texts)
    outside = trace.textposition in ("outside", "auto", None)
    if widest + 2 <= bar:  # plotly's autorange makes room in the plot for a line of values above the bars
        trace.update(textangle=0)
        return 0.0
    if LINE_EM * target.small_px <= bar:
        trace.update(textangle=-90)  # upright values reach further than the line plotly's autorange allows
        return max(0.0, widest + 4 - LINE_EM * target.small_px) if outside else 0.0
    trace.update(texttemplate="", text=None)
    return 0.0


def _annotations(fig: go.Figure, target: PaperTarget, plot_width: float) -> float:
    """Annotation text at the small size, subplot titles at the tick size wrapped to their panel's width;
    returns the height the subplot titles take above the plot."""
    panels = len({(note.x, note.y) for note in fig.layout.annotations if _is_subplot_title(note)}) or 1
    top = 0.0
    for note in fig.layout.annotations:
        if _is_subplot_title(note):
            text = _wrap(_plain(note.text or ""), plot_width / panels - 4, target.tick_px)
            note.update(text=text, font=dict(size=target.tick_px))
            top = max(top, (text.count("<br>") + 1) * LINE_EM * target.tick_px + 1)
        else:
            note.update(font=dict(size=target.small_px))
    return top


def _is_subplot_title(note: Any) -> bool:
    return note.xref == "paper" and note.yref == "paper" and note.yanchor == "bottom" and (note.y or 0) >= 1


def _wrap(text: str, width: float, font_px: float) -> str:
    """``text`` broken into lines at spaces (``<br>``) so each fits ``width`` pixels where it can."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and label_width_px(lines[-1] + " " + word, font_px) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", str(text))


def _category_labels(trace: Any, axis: str) -> list[Any] | None:
    values = getattr(trace, axis, None)
    if values is None or not len(values) or not isinstance(values[0], str):
        return None
    return list(values)


def _has_x_title(fig: go.Figure) -> bool:
    return any(axis.title.text for axis in fig.select_xaxes())


def _has_y_title(fig: go.Figure) -> bool:
    return any(axis.title.text for axis in fig.select_yaxes())
