"""Estimates with their intervals: one row per unit (a head, a layer, a condition), one marker per series
(an edit, a set of patched tokens) at the estimate, whiskers from the interval's low to its high end."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.increments import _plottable
from repo_lens.plots.paper import PaperTarget
from repo_lens.plots.paper_layout import (LINE_EM, PLOT_ASPECT, PLOT_HEIGHT_PX, estimated_plot_width, register_relayout,
                                          relayout_plot)
from repo_lens.plots.style import series_style, styled

ROW_SPREAD = 0.6  # the share of a row's height that its series' markers spread over
MARKER_ROW_PX = 4.0  # in a paper figure, the height each series adds to a row


def _estimate(entry: Any, where: str) -> tuple[float, float, float]:
    if not isinstance(entry, Mapping) or not {"value", "low", "high"} <= set(entry):
        raise InputError(f"{where} must be an estimate {{'value', 'low', 'high'}} (as repo_lens.interventions.stats "
                         f"writes them), got {entry!r:.80}")
    value, low, high = (entry[key] for key in ("value", "low", "high"))
    for key, number in (("value", value), ("low", low), ("high", high)):
        _plottable(number, f"{where}[{key!r}]")
    slack = 1e-9 * max(1.0, abs(value))  # rounding: a Wilson bound of 10/10 computes as 0.9999999999999999
    if not (np.isnan(value) or np.isnan(low) or np.isnan(high)) and not low - slack <= value <= high + slack:
        raise InputError(f"{where}: the interval [{low}, {high}] does not hold its value {value}")
    return float(value), float(low), float(high)


def interval_figure(estimates: Mapping[str, Sequence[Mapping[str, float]]], units: Sequence[str], x_title: str,
                    title: str, reference: float | None = None, reference_label: str | None = None) -> go.Figure:
    """Dot-and-whisker chart: ``estimates[series][i]`` is the estimate of ``units[i]`` (a dict with
    ``value``, ``low`` and ``high``, as ``repo_lens.interventions.stats`` stores them); each series has its
    colour and marker, and is drawn a little above or below the row's centre so the whiskers never
    overlap. A NaN estimate leaves its marker out; ``reference`` draws a dotted vertical line (e.g. the
    unedited accuracy).

    Example:
        >>> fig = interval_figure({"constant": [{"value": 0.4, "low": 0.3, "high": 0.5}]}, ["L2 h3"], "accuracy", "t")
        >>> fig.data[0].x[0], fig.data[0].error_x.array[0], fig.layout.yaxis.ticktext
        (0.4, 0.09999999999999998, ('L2 h3',))
    """
    if not isinstance(estimates, Mapping) or not estimates:
        raise InputError("estimates must be a non-empty mapping {series name: one estimate per unit}")
    if isinstance(units, (str, bytes)) or not isinstance(units, Sequence) or not units:
        raise InputError(f"units must be a non-empty list of row labels, got {units!r:.60}")
    if reference is not None:
        _plottable(reference, "reference", allow_nan=False)
    fig = go.Figure()
    count = len(estimates)
    for index, (name, entries) in enumerate(estimates.items()):
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence) or len(entries) != len(units):
            raise InputError(f"estimates[{name!r}] must hold one estimate per unit ({len(units)}), "
                             f"got {entries!r:.60}")
        values = [_estimate(entry, f"estimates[{name!r}][{row}]") for row, entry in enumerate(entries)]
        offset = 0.0 if count == 1 else ROW_SPREAD * (0.5 - index / (count - 1))
        look = series_style(index)
        fig.add_scatter(name=name, x=[value for value, _, _ in values],
                        y=[len(units) - 1 - row + offset for row in range(len(units))], mode="markers",
                        marker=dict(color=look["color"], symbol=look["symbol"], size=7),
                        error_x=dict(type="data", symmetric=False, array=[max(0.0, high - value) for value, _, high in values],
                                     arrayminus=[max(0.0, value - low) for value, low, _ in values], color=look["color"],
                                     thickness=1.5, width=3),
                        customdata=[[low, high] for _, low, high in values],
                        hovertemplate=f"{name}: %{{x:.3g}} [%{{customdata[0]:.3g}}, %{{customdata[1]:.3g}}]"
                                      "<extra></extra>")
    if reference is not None:
        fig.add_vline(x=reference, line_dash="dot", line_color="#888888",
                      annotation_text=reference_label or "", annotation_position="top")
    fig.update_layout(xaxis_title=x_title, meta={"kind": "intervals"},
                      yaxis=dict(tickmode="array", tickvals=list(range(len(units)))[::-1], ticktext=list(units),
                                 range=[-0.6, len(units) - 0.4], showgrid=False, zeroline=False))
    return styled(fig, title)


def paper_layout(fig: go.Figure, target: PaperTarget) -> None:
    """The generic paper re-layout, with a plot tall enough for every row's label and its series' whiskers."""
    relayout_plot(fig, target)
    if target.height_px is not None:
        return
    rows, series = len(fig.layout.yaxis.tickvals), len(fig.data)
    row_px = max(LINE_EM * target.tick_px + 2, MARKER_ROW_PX * series + 4)
    plot = min(PLOT_HEIGHT_PX[1], max(PLOT_HEIGHT_PX[0], PLOT_ASPECT * estimated_plot_width(fig, target)))
    fig.update_layout(height=fig.layout.height + max(0, math.ceil(rows * row_px - plot)))


register_relayout("intervals", paper_layout)
