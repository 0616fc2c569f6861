"""Attention mass on needle / query / rest (RePo Table 4), from :func:`repo_lens.analysis.attention_mass`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import LOG_AXIS, OKABE_ITO, SERIES_DASHES, SERIES_SYMBOLS, SPAN_COLORS, series_style, styled


def _as_mapping(masses: Any) -> dict[str, Any]:
    if isinstance(masses, Mapping):
        out = dict(masses)
    else:
        out = {"model": masses}
    for label, mass in out.items():
        if not hasattr(mass, "per_token") or not hasattr(mass, "by_layer_head"):
            raise InputError(f"{label!r} is not an AttentionMass (from repo_lens.analysis.attention_mass)")
    if not out:
        raise InputError("no attention mass to plot")
    return out


def attention_mass_figure(masses: Any, spans: Sequence[str] | None = None, log: bool | None = None, *,
                          log_y: bool = False) -> go.Figure:
    """Bars of the attention mass per token on each span (default: every span, ``rest`` last),
    one bar group per span and one colour per model when ``masses`` maps model labels to results,
    each bar with its value printed above it. The y axis is linear, so bar heights compare as the
    values do; ``log_y=True`` (``log``, its older name) takes a log axis when every value is positive,
    labelled once per decade.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import AttentionMass
        >>> m = AttentionMass(per_token={"needle": 0.05, "query": 0.02, "rest": 0.001},
        ...                   by_layer_head={k: np.full((1, 2), v) for k, v in [("needle", .05), ("query", .02), ("rest", .001)]},
        ...                   span_lengths={"needle": 4, "query": 10, "rest": 300}, query=(320, 324),
        ...                   self_mass=np.zeros((1, 2)), layers=[0])
        >>> fig = attention_mass_figure({"RePo": m})
        >>> list(fig.data[0].x), [round(v, 3) for v in fig.data[0].y]
        (['needle', 'query', 'rest'], [0.05, 0.02, 0.001])
    """
    results = _as_mapping(masses)
    first = next(iter(results.values()))
    names = list(spans) if spans is not None else [n for n in first.per_token if n != "rest"] + (
        ["rest"] if "rest" in first.per_token else [])
    fig = go.Figure()
    single = len(results) == 1
    all_values = []
    for label, mass in results.items():
        missing = [n for n in names if n not in mass.per_token]
        if missing:
            raise InputError(f"{label!r} has no span {missing}; it has {sorted(mass.per_token)}")
        all_values += [float(mass.per_token[n]) for n in names]
    decimals = shared_decimals(all_values)
    for index, (label, mass) in enumerate(results.items()):
        values = [float(mass.per_token[n]) for n in names]
        colors = [SPAN_COLORS.get(n, OKABE_ITO[4]) for n in names] if single else series_style(index)["color"]
        fig.add_trace(go.Bar(
            x=names, y=values, name=label, marker_color=colors,
            text=[f"{v:.{decimals}f}" if np.isfinite(v) else "n/a" for v in values], texttemplate="%{text}",
            textposition="outside", cliponaxis=False,
            customdata=[mass.span_lengths.get(n, 0) for n in names],
            hovertemplate="%{x}: %{y:.4g} per token (%{customdata} tokens)<extra>" + label + "</extra>",
        ))
    styled(fig, "Attention mass per token from the answer rows (mean over rows, heads and layers)", height=440)
    positive = all(np.isfinite(v) and v > 0 for v in all_values)
    wants_log = log_y or bool(log)
    fig.update_yaxes(title_text="mass per token", **(LOG_AXIS if wants_log and positive else {"type": "linear"}))
    fig.update_layout(barmode="group", showlegend=not single, meta={"kind": "attention_mass"})
    return fig


def attention_mass_layers_figure(masses: Any, spans: Sequence[str] | None = None, *, log_y: bool = True) -> go.Figure:
    """Attention mass per token by layer (mean over heads), one line per span (a colour and marker symbol
    per span, a dash pattern per model), on a
    log axis labelled once per decade (needle and rest differ by orders of magnitude), or linear with ``log_y=False``.

    Example:
        >>> import numpy as np
        >>> from repo_lens.analysis import AttentionMass
        >>> m = AttentionMass(per_token={"needle": 0.05, "rest": 0.001},
        ...                   by_layer_head={"needle": np.array([[0.1, 0.0], [0.04, 0.06]]), "rest": np.full((2, 2), 1e-3)},
        ...                   span_lengths={"needle": 4, "rest": 300}, query=(320, 324), self_mass=np.zeros((2, 2)),
        ...                   layers=[0, 1])
        >>> fig = attention_mass_layers_figure(m)
        >>> list(fig.data[0].x), [round(float(v), 3) for v in fig.data[0].y]
        ([0, 1], [0.05, 0.05])
    """
    results = _as_mapping(masses)
    fig = go.Figure()
    for index, (label, mass) in enumerate(results.items()):
        names = list(spans) if spans is not None else list(mass.by_layer_head)
        missing = [name for name in names if name not in mass.by_layer_head]
        if missing:
            raise InputError(f"{label!r} has no span {missing}; it has {sorted(mass.by_layer_head)}")
        for span_index, name in enumerate(names):
            by_layer = np.nanmean(np.asarray(mass.by_layer_head[name], dtype=np.float64), axis=1)
            kinds = list(getattr(mass, "layer_kinds", []) or [])
            fig.add_trace(go.Scatter(
                x=list(mass.layers), y=by_layer, mode="lines+markers",
                name=name if len(results) == 1 else f"{label}: {name}",
                line=dict(color=SPAN_COLORS.get(name, OKABE_ITO[4]), dash=SERIES_DASHES[index % len(SERIES_DASHES)]),
                marker=dict(symbol=SERIES_SYMBOLS[span_index % len(SERIES_SYMBOLS)]),
                customdata=kinds if len(kinds) == len(mass.layers) else None,
                hovertemplate="layer %{x}: %{y:.4g}<extra>%{fullData.name}</extra>",
            ))
    styled(fig, "Attention mass per token by layer (mean over heads)", height=420)
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text="mass per token", **(LOG_AXIS if log_y else {"type": "linear"}))
    fig.update_layout(meta={"kind": "attention_mass_layers"})
    return fig


def shared_decimals(values: list[float], significant: int = 2) -> int:
    """Decimal places that show the smallest non-zero value with ``significant`` digits: one precision for a
    whole set of value labels (at most 6).

    >>> shared_decimals([0.0103, 0.012, 0.5]), shared_decimals([12.5, 3.0]), shared_decimals([0.0, float("nan")])
    (3, 1, 2)
    """
    finite = [abs(value) for value in values if np.isfinite(value) and value != 0]
    if not finite:
        return significant
    return int(min(6, max(0, significant - 1 - np.floor(np.log10(min(finite))))))
