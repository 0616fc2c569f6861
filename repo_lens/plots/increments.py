"""Figures for seeds/002's tables: increments by byte category, and a per-layer series (AUC, entity test)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import OKABE_ITO, styled


def category_increments_figure(layers: Sequence[Mapping[str, float]], categories: Sequence[str] | None = None,
                               title: str = "Mean increment by byte category") -> go.Figure:
    """Grouped bars: one group per category, one bar per layer (``layers[l][category]`` = mean).

    Example:
        >>> fig = category_increments_figure([{"lowercase": 0.8, "space": 1.1}, {"lowercase": 1.0, "space": 2.0}])
        >>> [bar.name for bar in fig.data], list(fig.data[1].y)
        (['L0', 'L1'], [1.0, 2.0])
    """
    if not layers:
        raise InputError("layers is empty; pass one {category: mean} mapping per layer")
    shown = list(categories) if categories is not None else list(layers[0])
    fig = go.Figure()
    for layer, table in enumerate(layers):
        fig.add_bar(name=f"L{layer}", x=shown, y=[table.get(category, float("nan")) for category in shown],
                    marker_color=OKABE_ITO[layer % len(OKABE_ITO)])
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888888", annotation_text="RoPE (δ = 1)")
    fig.update_layout(barmode="group", yaxis_title="mean increment δ", xaxis_title="byte category")
    return styled(fig, title)


def layer_series_figure(series: Mapping[str, Sequence[float]], y_title: str, title: str,
                        reference: float | None = None) -> go.Figure:
    """Lines over layers, one per named series (e.g. AUC per layer per model or per segmentation).

    Example:
        >>> fig = layer_series_figure({"ours": [0.5, 0.6], "seeds/002": [0.5, 0.54]}, "AUC", "t", reference=0.5)
        >>> [trace.name for trace in fig.data], list(fig.data[0].x)
        (['ours', 'seeds/002'], ['L0', 'L1'])
    """
    if not series:
        raise InputError("series is empty; pass {name: values per layer}")
    fig = go.Figure()
    for index, (name, values) in enumerate(series.items()):
        fig.add_scatter(name=name, x=[f"L{layer}" for layer in range(len(values))], y=list(values),
                        mode="lines+markers", line_color=OKABE_ITO[index % len(OKABE_ITO)])
    if reference is not None:
        fig.add_hline(y=reference, line_dash="dot", line_color="#888888")
    fig.update_layout(yaxis_title=y_title, xaxis_title="layer")
    return styled(fig, title)
