"""Figures of the learned-increments post's analyses ("Learned position increments", Brendan Long): characters
spaced by their increments (through :func:`repo_lens.plots.spaced_tokens_figure`) and each category's
relative drift with its bootstrap interval."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.increments import category_label
from repo_lens.plots.labels import label_width_px
from repo_lens.plots.paper import PaperTarget
from repo_lens.plots.paper_layout import LINE_EM, register_relayout, relayout_plot
from repo_lens.plots.spaced_tokens import SpacedTokensStyle, spaced_tokens_figure
from repo_lens.plots.style import DEFAULT_WIDTH, series_style, styled
from repo_lens.trace import Trace


def char_spacing_figure(text: str, increments: np.ndarray, layer_kinds: Sequence[str], title: str | None = None,
                        width: int = DEFAULT_WIDTH, font_size: int = 14,
                        layers: Sequence[int] | None = None) -> go.Figure:
    """Each character of ``text`` at its cumulative position, one row per layer, as the post's
    ``plot_increments.py`` places them: x = :func:`repo_lens.analysis.char_positions` of ``increments``
    (rows, n_chars), from :func:`repo_lens.analysis.char_increments` (per-row or shared scale). ``layer_kinds``
    names each row's mechanism (the model's ``lens.layer_kinds`` for the rows shown); ``layers``, the model's
    layer index of each row, labels the rows (default 0, 1, …). The hover gives each character's increment.

    Example:
        >>> import numpy as np
        >>> fig = char_spacing_figure("ab c", np.array([[1.0, 0.5, 2.0, 0.5]]), ["lpi"], layers=[2])
        >>> fig.data[-1].x.tolist(), fig.layout.yaxis.ticktext
        ([0.0, 0.5, 2.5, 3.0], ('L2 lpi',))
    """
    if not isinstance(text, str) or not text:
        raise InputError("text must be a non-empty str: the characters the increments belong to")
    inc = np.asarray(increments, dtype=np.float64)
    if inc.ndim != 2 or inc.shape[1] != len(text):
        raise InputError(f"increments has shape {inc.shape}; pass (rows, {len(text)}) character increments "
                         "from char_increments(byte_increments, text)")
    from repo_lens.analysis.increments import char_positions  # the analysis package loads torch: only when drawn

    rows = _row_layers(layers, len(inc), len(layer_kinds))
    n_layers = max(rows) + 1
    positions, placed = np.zeros((n_layers, 1, len(text)), np.float32), np.zeros((n_layers, 1, len(text)))
    positions[rows, 0], placed[rows, 0] = char_positions(inc), inc
    kinds = [layer_kinds[0]] * n_layers  # rows not drawn; only the chosen layers' kinds are shown
    for row, kind in zip(rows, layer_kinds):
        kinds[row] = kind
    spaced = Trace(tokens=list(text), token_ids=np.asarray([ord(char) for char in text], dtype=np.int64),
                   positions=positions, layer_kinds=kinds, extras={"increments": placed})
    return spaced_tokens_figure(spaced, scale="shared", layers=rows,
                                style=SpacedTokensStyle(title=title, width=width, font_size=font_size))


def _row_layers(layers: Sequence[int] | None, n_rows: int, n_kinds: int) -> list[int]:
    """The layer index of each row: ``layers`` checked (one distinct, non-negative int per row), or 0, 1, …"""
    if n_kinds != n_rows:
        raise InputError(f"layer_kinds has {n_kinds} entries for {n_rows} rows of increments; pass one kind per row")
    if layers is None:
        return list(range(n_rows))
    chosen = list(layers)
    if len(chosen) != n_rows or len(set(chosen)) != n_rows or not all(
            isinstance(layer, (int, np.integer)) and not isinstance(layer, bool) and layer >= 0 for layer in chosen):
        raise InputError(f"layers={chosen!r}; pass {n_rows} distinct layer indices (ints ≥ 0), one per row of "
                         "increments")
    return [int(layer) for layer in chosen]


def category_drift_figure(drifts: Mapping[str, Any], title: str = "Relative drift of δ by category") -> go.Figure:
    """Each category's median drift (δ − the run's mean) with its bootstrap interval, one series per entry
    of ``drifts`` ({name: :class:`repo_lens.analysis.CategoryDrift`}, e.g. one per layer, or anything with its
    ``labels``, ``median`` and ``median_ci``); a dotted line at 0.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import relative_drift
        >>> drift = relative_drift(np.array([1.0, 1.2, 0.8, 1.0]), ["punct", "punct", "word", "word"], n_boot=50)
        >>> fig = category_drift_figure({"L10": drift})
        >>> list(fig.data[0].x), [round(y, 3) for y in fig.data[0].y]
        (['punct', 'word'], [0.1, -0.1])
    """
    if not isinstance(drifts, Mapping) or not drifts:
        raise InputError("drifts must be a non-empty {name: relative_drift(...)} mapping")
    fig = go.Figure()
    for index, (name, drift) in enumerate(drifts.items()):
        if not all(hasattr(drift, field) for field in ("labels", "median", "median_ci")):
            raise InputError(f"drifts[{name!r}] is {type(drift).__name__}, not the result of relative_drift(...)")
        look = series_style(index)
        low, high = np.asarray(drift.median_ci)[:, 0], np.asarray(drift.median_ci)[:, 1]
        median = np.asarray(drift.median)
        fig.add_scatter(name=str(name), x=[category_label(label) for label in drift.labels], y=median.tolist(),
                        mode="markers", marker=dict(color=look["color"], symbol=look["symbol"], size=8),
                        error_y=dict(type="data", symmetric=False, array=(high - median).tolist(),
                                     arrayminus=(median - low).tolist()))
    fig.add_hline(y=0.0, line_dash="dot", line_color="#888888")
    fig.update_layout(yaxis_title="median drift (δ − mean δ)", xaxis_title="token category", scattermode="group",
                      meta={"kind": "category_drift"})
    return styled(fig, title)


def category_drift_paper_layout(fig: go.Figure, target: PaperTarget) -> None:
    """The generic paper re-layout, with every category named: upright where the names do not fit across (the
    generic layout names only every k-th category, right for layers in order, not for categories)."""
    relayout_plot(fig, target)
    axis = fig.layout.xaxis
    if axis.tickvals is None:
        return
    categories = list(dict.fromkeys(label for trace in fig.data for label in (trace.x or ())))
    widest = max(label_width_px(str(label), target.tick_px) for label in categories) + 4
    axis.update(tickmode="auto", tickvals=None, ticktext=None, tickangle=-90)
    if target.height_px is None:  # the plot keeps its height; the names take more below it
        fig.update_layout(height=math.ceil(fig.layout.height + widest - LINE_EM * target.tick_px))


register_relayout("category_drift", category_drift_paper_layout)
