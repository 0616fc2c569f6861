"""Figures of the score decomposition by rotary frequency band: the band-usage map of the ``bands`` study
(:func:`band_usage_figure`) and the attention of one head split into what content and position alone would
give (:func:`attention_split_figure`, from :meth:`repo_lens.analysis.ScoreDecomposition.span_summary`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from repo_lens.errors import InputError
from repo_lens.plots.attention_mass import shared_decimals
from repo_lens.plots.labels import label_width_px
from repo_lens.plots.paper import PaperTarget
from repo_lens.plots.paper_layout import COLORBAR_THICKNESS_PX, LINE_EM, estimated_plot_width, register_relayout, \
    relayout_plot
from repo_lens.plots.style import COLORBAR_MARGIN_PX, SEQUENTIAL, layer_label, series_style, styled

__all__ = ["attention_split_figure", "band_usage_figure"]

_SUMMARY_KEYS = ("layers", "dominant_position_band_by_layer_head", "sink_mass_by_layer_head",
                 "band_frequencies_by_layer_head")
_PANEL_GAP = 0.16  # the share of the screen figure's plot width between the two panels (the first colour bar)
# short enough for one legend row at a one-column paper width; the title says each is the attention of that part alone
PATTERN_LABELS = {"actual": "actual", "content": "content", "position": "position"}


# ---------------------------------------------------------------------------------------------- band usage


def _layer_head(summary: Mapping[str, Any], key: str, n_layers: int) -> np.ndarray:
    """summary[key] as a float (layer, head) array, None read as NaN (an empty cell)."""
    try:
        values = np.asarray(summary[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"summary[{key!r}] must be a (layer, head) table of numbers; got {summary[key]!r:.80}") from None
    if values.ndim != 2 or values.shape[0] != n_layers or values.shape[1] == 0:
        raise InputError(f"summary[{key!r}] must hold one row of heads per measured layer ({n_layers}); got shape "
                         f"{values.shape}")
    return values


def _checked_summary(summary: Any) -> tuple[list[int], list[str] | None, np.ndarray, np.ndarray]:
    """(layers, their kinds, dominant bands, sink mass) of a ``bands`` summary, else an InputError."""
    if not isinstance(summary, Mapping):
        raise InputError(f"band_usage_figure takes the bands study's summary (a dict, summary.json), got "
                         f"{type(summary).__name__}")
    missing = [key for key in _SUMMARY_KEYS if key not in summary]
    if missing:
        raise InputError(f"this summary lacks {', '.join(missing)}: pass the summary of `repo-lens analyze --study "
                         "bands` (its summary.json) or of repo_lens.studies.band_items.summarize_bands, with at least "
                         "one window measured")
    layers = [int(layer) for layer in summary["layers"]]
    kinds = summary.get("layer_kinds_measured")
    kinds = list(kinds) if kinds is not None and len(kinds) == len(layers) else None
    dominant = _layer_head(summary, "dominant_position_band_by_layer_head", len(layers))
    sink = _layer_head(summary, "sink_mass_by_layer_head", len(layers))
    if dominant.shape != sink.shape:
        raise InputError(f"the summary's dominant bands {dominant.shape} and sink mass {sink.shape} differ in shape")
    return layers, kinds, dominant, sink


def _wavelengths(summary: Mapping[str, Any], dominant: np.ndarray) -> np.ndarray:
    """(layer, head) 2π / frequency of each dominant band, in tokens (NaN where there is none)."""
    out = np.full(dominant.shape, np.nan)
    for layer, frequencies in enumerate(summary["band_frequencies_by_layer_head"]):
        for head, band in enumerate(dominant[layer]):
            if np.isfinite(band) and head < len(frequencies) and int(band) < len(frequencies[head]):
                angle = frequencies[head][int(band)]
                out[layer, head] = 2 * math.pi / angle if angle else np.nan
    return out


def band_usage_figure(summary: Mapping[str, Any], *, title: str | None = None) -> go.Figure:
    """The band-usage map of a ``bands`` study's summary: layers down, heads across; left, each cell coloured by
    the rotary band carrying most of the head's position part (band 0 turns fastest; empty where a layer has no
    bands or no position part), its number written in the cell; right, the sink mass (mean attention on the
    first token). Hover gives the band's wavelength in tokens.

    Example:
        >>> summary = {"layers": [0, 2], "layer_kinds_measured": ["rope", "repo"],
        ...            "dominant_position_band_by_layer_head": [[0, 1], [3, None]],
        ...            "sink_mass_by_layer_head": [[0.1, 0.2], [0.7, 0.9]], "n_bands": 4,
        ...            "band_frequencies_by_layer_head": [[[1.0, 0.1, 0.01, 0.001]] * 2, [[1.0, 0.1, 0.01, 0.001]] * 2]}
        >>> fig = band_usage_figure(summary)
        >>> fig.data[0].z.tolist(), list(fig.data[1].y), round(float(fig.data[0].customdata[1][0]))
        ([[0.0, 1.0], [3.0, nan]], ['L0 rope', 'L2 repo'], 6283)
    """
    layers, kinds, dominant, sink = _checked_summary(summary)
    n_bands = int(summary.get("n_bands") or (np.nanmax(dominant) + 1 if np.isfinite(dominant).any() else 1))
    every_kind = [""] * (max(layers) + 1)
    for layer, kind in zip(layers, kinds or []):
        every_kind[layer] = kind
    y = [layer_label(layer, every_kind if kinds else None) for layer in layers]
    x = [f"h{head}" for head in range(dominant.shape[1])]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=_PANEL_GAP,
                        subplot_titles=["band of the position part", "sink mass"])
    fig.add_trace(go.Heatmap(z=dominant, x=x, y=y, coloraxis="coloraxis", name="position band", xgap=1, ygap=1,
                             customdata=_wavelengths(summary, dominant), texttemplate="%{z:.0f}",
                             textfont=dict(size=10),
                             hovertemplate="%{y}, %{x}: band %{z:.0f} (wavelength %{customdata:.3g} tokens)"
                                           "<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Heatmap(z=sink, x=x, y=y, coloraxis="coloraxis2", name="sink mass", xgap=1, ygap=1,
                             texttemplate="%{z:.2f}" if sink.size <= 200 else "", textfont=dict(size=10),
                             hovertemplate="%{y}, %{x}: sink mass %{z:.3f}<extra></extra>"), row=1, col=2)
    styled(fig, title or "Band carrying most of each head's position part, and attention on the first token",
           height=170 + 34 * len(layers))
    first_end = fig.layout.xaxis.domain[1]
    fig.update_layout(
        margin_r=COLORBAR_MARGIN_PX, meta={"kind": "band_usage"},
        coloraxis=dict(colorscale=SEQUENTIAL, cmin=0, cmax=max(n_bands - 1, 1),
                       colorbar=dict(title=dict(text="band"), x=first_end + 0.01, xanchor="left",
                                     dtick=max(1, math.ceil(n_bands / 8)))),
        coloraxis2=dict(colorscale=SEQUENTIAL, cmin=0.0, cmax=1.0,
                        colorbar=dict(title=dict(text="sink mass"), x=1.01, xanchor="left")))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    return fig


def band_usage_paper_layout(fig: go.Figure, target: PaperTarget) -> None:
    """The generic paper re-layout, with the band panel's colour bar between the two panels and the sink's at
    the right (the generic one puts every colour bar at the right)."""
    plot = estimated_plot_width(fig, target)
    bar_px = COLORBAR_THICKNESS_PX + 6 + label_width_px("00", target.tick_px) + LINE_EM * target.tick_px + 6
    gap = min(0.45, bar_px / plot)
    half = (1.0 - gap) / 2
    fig.update_layout(xaxis=dict(domain=[0.0, half]), xaxis2=dict(domain=[half + gap, 1.0]))
    relayout_plot(fig, target)
    fig.update_layout(coloraxis_colorbar=dict(x=half, xanchor="left"), coloraxis2_colorbar=dict(x=1.0, xanchor="left"))


register_relayout("band_usage", band_usage_paper_layout)


# -------------------------------------------------------------------------------------- attention split


def _split_values(frame: Any, head: int, spans: Sequence[str] | None, per_token: bool
                  ) -> tuple[list[str], dict[str, list[float]], int | None]:
    """(span names, each pattern's mean mass per span over the head's query rows, the layer) of a span summary."""
    needed = {"head", "span", "keys", "actual", "content", "position"}
    columns = set(getattr(frame, "columns", []))
    if not needed <= columns:
        raise InputError("attention_split_figure takes ScoreDecomposition.span_summary(spans)'s DataFrame (columns "
                         f"{', '.join(sorted(needed))}); got {type(frame).__name__} with {sorted(columns)}")
    heads = sorted({int(value) for value in frame["head"]})
    if head not in heads:
        raise InputError(f"head {head} is not in this span summary; it has heads {heads}")
    rows = frame[frame["head"] == head]
    names = [name for name in dict.fromkeys(rows["span"]) if name != "all"] if spans is None else list(spans)
    unknown = [name for name in names if name not in set(rows["span"])]
    if unknown or not names:
        raise InputError(f"spans {unknown or names} are not in the span summary; it has "
                         f"{sorted(set(rows['span']))}")
    patterns = [name for name in ("actual", "content", "position", "reference") if name in columns]
    values: dict[str, list[float]] = {pattern: [] for pattern in patterns}
    for name in names:
        span = rows[rows["span"] == name]
        for pattern in patterns:
            mass = span[pattern].to_numpy(dtype=np.float64)
            if per_token:
                keys = span["keys"].to_numpy(dtype=np.float64)
                mass = np.where(keys > 0, mass / np.where(keys > 0, keys, 1.0), np.nan)
            values[pattern].append(float(np.nanmean(mass)) if np.isfinite(mass).any() else float("nan"))
    layer = int(rows["layer"].iloc[0]) if "layer" in columns and len(rows) else None
    return names, values, layer


def attention_split_figure(span_summary: Any, head: int, *, spans: Sequence[str] | None = None,
                           per_token: bool = False, reference_label: str = "integers",
                           title: str | None = None) -> go.Figure:
    """Bars of the attention one head's query rows put on each span (mean over the rows) under the layer's own
    pattern and the patterns its content part alone, its position part alone and the reference positions would
    give: from :meth:`repo_lens.analysis.ScoreDecomposition.span_summary` (spans in its order, "all" left out,
    unless ``spans`` names them; ``per_token`` divides each row's mass by the span's keys). Each bar has its
    value above it.

    Example:
        >>> import repo_lens
        >>> from repo_lens.analysis import score_decomposition
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> found = score_decomposition(lens, list(range(10, 40)), 2, queries=[28, 29], keys=list(range(28)))
        >>> frame = found.span_summary({"first": (0, 1), "needle": (8, 12), "query": (20, 28)})
        >>> fig = attention_split_figure(frame, head=1, spans=["needle", "query", "rest", "first"])
        >>> [bar.name for bar in fig.data], list(fig.data[0].x)
        (['actual', 'content', 'position', 'integers'], ['needle', 'query', 'rest', 'first'])
    """
    names, values, layer = _split_values(span_summary, int(head), spans, per_token)
    decimals = min(3, shared_decimals([value for series in values.values() for value in series]))
    fig = go.Figure()
    for index, (pattern, series) in enumerate(values.items()):
        label = reference_label if pattern == "reference" else PATTERN_LABELS[pattern]
        fig.add_trace(go.Bar(
            x=names, y=series, name=label, marker_color=series_style(index)["color"],
            text=[f"{value:.{decimals}f}" if np.isfinite(value) else "n/a" for value in series],
            texttemplate="%{text}", textposition="outside", cliponaxis=False,
            hovertemplate="%{x}: %{y:.4g}<extra>" + label + "</extra>"))
    where = f"layer {layer}, head {head}" if layer is not None else f"head {head}"
    styled(fig, title or f"Attention of {where} by each part of the score alone (mean over the query rows)",
           height=440)
    fig.update_yaxes(title_text="attention per token" if per_token else "attention mass", rangemode="tozero")
    fig.update_layout(barmode="group", meta={"kind": "attention_split"})
    return fig
