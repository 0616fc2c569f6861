"""Increments by byte category (grouped bars), and a per-layer series (word-boundary AUC, entity test)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import series_style, styled


def category_increments_figure(layers: Sequence[Mapping[str, float]], categories: Sequence[str] | None = None,
                               title: str = "Mean increment by byte category") -> go.Figure:
    """Grouped bars: one group per category, one bar per layer (``layers[l][category]`` = mean).
    A category a layer lacks, or a NaN mean, leaves its bar out; inf or a non-number is an InputError.

    Example:
        >>> fig = category_increments_figure([{"lowercase": 0.8, "space": 1.1}, {"lowercase": 1.0, "space": 2.0}])
        >>> [bar.name for bar in fig.data], list(fig.data[1].y)
        (['L0', 'L1'], [1.0, 2.0])
    """
    if isinstance(layers, (str, bytes, Mapping)) or not isinstance(layers, Sequence):
        raise InputError(f"layers must be a list of {{category: mean}} mappings, one per layer; "
                         f"got {type(layers).__name__}")
    if not layers:
        raise InputError("layers is empty; pass one {category: mean} mapping per layer")
    for layer, table in enumerate(layers):
        if not isinstance(table, Mapping):
            raise InputError(f"layers[{layer}] must be a {{category: mean}} mapping, got {type(table).__name__}")
        for category, mean in table.items():
            _plottable(mean, f"layers[{layer}][{category!r}]")
    if categories is not None and (isinstance(categories, (str, bytes)) or not isinstance(categories, Sequence)
                                   or not all(isinstance(category, str) for category in categories)):
        raise InputError(f"categories must be a list of category names (str), or None for the first layer's; "
                         f"got {categories!r:.60}")
    shown = list(categories) if categories is not None else list(layers[0])
    fig = go.Figure()
    for layer, table in enumerate(layers):
        fig.add_bar(name=f"L{layer}", x=[category_label(category) for category in shown],
                    y=[table.get(category, float("nan")) for category in shown], marker_color=series_style(layer)["color"])
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888888", annotation_text="RoPE (δ = 1)")
    fig.update_layout(barmode="group", yaxis_title="mean increment δ", xaxis_title="byte category",
                      meta={"kind": "category_increments"})
    return styled(fig, title)


# the analysers' category names as a reader of a figure says them
CATEGORY_LABELS: dict[str, str] = {"cjk_lead": "CJK lead", "other_lead": "other lead", "word_initial": "word start"}


def category_label(category: str) -> str:
    """How a figure names a byte or token category.

    >>> category_label("cjk_lead"), category_label("space"), category_label("my_class")
    ('CJK lead', 'space', 'my class')
    """
    return CATEGORY_LABELS.get(category, category.replace("_", " "))


def layer_series_figure(series: Mapping[str, Sequence[float]], y_title: str, title: str,
                        reference: float | None = None) -> go.Figure:
    """Lines over layers, one per named series (e.g. AUC per layer per model or per segmentation), each
    with its own colour, dash pattern and marker symbol (apart in greyscale too). A NaN value leaves a gap
    in its line; inf or a non-number is an InputError.

    Example:
        >>> fig = layer_series_figure({"ours": [0.5, 0.6], "published": [0.5, 0.54]}, "AUC", "t", reference=0.5)
        >>> [trace.name for trace in fig.data], list(fig.data[0].x)
        (['ours', 'published'], ['L0', 'L1'])
    """
    if not isinstance(series, Mapping):
        raise InputError(f"series must be a mapping {{name: values per layer}}, got {type(series).__name__}")
    if not series:
        raise InputError("series is empty; pass {name: values per layer}")
    for name, values in series.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise InputError(f"series[{name!r}] must be a list of numbers, one per layer; got {type(values).__name__}")
        for layer, value in enumerate(values):
            _plottable(value, f"series[{name!r}][{layer}]")
    if reference is not None:
        _plottable(reference, "reference", allow_nan=False)
    fig = go.Figure()
    for index, (name, values) in enumerate(series.items()):
        look = series_style(index)  # colour, and a dash and marker that tell the lines apart in greyscale
        fig.add_scatter(name=name, x=[f"L{layer}" for layer in range(len(values))], y=list(values),
                        mode="lines+markers", line=dict(color=look["color"], dash=look["dash"]),
                        marker=dict(symbol=look["symbol"], size=7))
    if reference is not None:
        fig.add_hline(y=reference, line_dash="dot", line_color="#888888")
    fig.update_layout(yaxis_title=y_title, xaxis_title="layer", meta={"kind": "layer_series"})
    return styled(fig, title)


def _plottable(value: Any, where: str, *, allow_nan: bool = True) -> None:
    """Refuse a value a bar or line cannot show: not a real number (str, bool, None) or infinite."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InputError(f"{where} must be a number, got {value!r} ({type(value).__name__})"
                         + ("; use NaN to leave it out" if allow_nan else ""))
    if math.isinf(value) or (not allow_nan and math.isnan(value)):
        raise InputError(f"{where} is {value}; pass a finite number" + (" (NaN leaves it out)" if allow_nan else ""))
