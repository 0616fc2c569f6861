"""The figures of the "Why this attention" panel, drawn from an :class:`~repo_lens.app.score_panel.AttentionPanel`
(no Streamlit here): the top keys' scores split into content and position (stacked bars), each frequency
band's term of those scores (a strip per key), and the four patterns of the query row over the keys."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from repo_lens import InputError
from repo_lens.plots import DIVERGING, FONT_FAMILY, OKABE_ITO

from repo_lens.app.score_panel import AttentionPanel

CONTENT, POSITION, SCORE = OKABE_ITO[0], OKABE_ITO[1], OKABE_ITO[7]  # blue, orange (lighter in print), black
PATTERN_STYLE = {  # name -> (row title, colour)
    "actual": ("actual attention (the layer's own pattern)", "#444444"),
    "content": ("the content part alone", CONTENT),
    "position": ("the position part alone", POSITION),
    "reference": ("", OKABE_ITO[2]),  # titled after the reference's positions
}
REFERENCE_TITLES = {"integer": "reference: the same q and k at positions 0, 1, 2, … (RoPE's)",
                    "constant": "reference: the same q and k at one position (no positional signal)",
                    "array": "reference: the same q and k at the positions given"}
MAX_BAND_TICKS = 16  # band labels drawn under the strip at most (the hover names every band)


def token_text(token: str) -> str:
    """A token as a chart shows it: quoted, its escapes visible, safe for plotly's HTML-like text.

    >>> token_text(" <b>"), token_text("a\\n")
    ("' &lt;b&gt;'", "'a\\\\n'")
    """
    return html.escape(repr(token), quote=False)


def key_labels(panel: AttentionPanel, tokens: Sequence[str]) -> list[str]:
    """One label per top key: its index, its token and the attention the query gives it."""
    return [f"key {key} {token_text(tokens[key])} · {100 * attention:.1f}%"
            for key, attention in zip(panel.top.tolist(), panel.attention.tolist())]


def _styled(fig: go.Figure, title: str, height: int, kind: str) -> go.Figure:
    fig.update_layout(template="plotly_white", font=dict(family=FONT_FAMILY, size=13, color="#222222"),
                      title=dict(text=title, x=0.01, xanchor="left"), height=height,
                      margin=dict(l=10, r=20, t=60, b=50), hoverlabel=dict(font_family=FONT_FAMILY),
                      meta={"kind": kind})
    return fig


def split_bars_figure(panel: AttentionPanel, tokens: Sequence[str]) -> go.Figure:
    """The top keys' scores as horizontal stacked bars, content (blue) and position (orange), with the score
    itself (content + position) as a black diamond; the most attended key on top."""
    labels = key_labels(panel, tokens)
    hover = "%{y}<br>%{fullData.name}: %{x:.3f}<extra></extra>"
    fig = go.Figure([
        go.Bar(x=panel.content, y=labels, orientation="h", name="content", marker_color=CONTENT,
               hovertemplate=hover),
        go.Bar(x=panel.position, y=labels, orientation="h", name="position", marker_color=POSITION,
               hovertemplate=hover),
        go.Scatter(x=panel.score, y=labels, mode="markers", name="score (content + position)",
                   marker=dict(symbol="diamond", size=11, color=SCORE, line=dict(color="#FFFFFF", width=1)),
                   hovertemplate=hover),
    ])
    _styled(fig, f"L{panel.layer}H{panel.head}, query {panel.query} {token_text(tokens[panel.query])}: "
                 f"the top {len(panel.top)} keys' scores", 150 + 30 * len(labels), "attention_split_bars")
    fig.update_layout(barmode="relative", legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    fig.update_xaxes(title_text="pre-softmax score", zeroline=True, zerolinecolor="#888888")
    fig.update_yaxes(type="category", autorange="reversed", ticks="outside", ticklen=6, tickcolor="rgba(0,0,0,0)")
    return fig


def band_ticks(frequencies: np.ndarray) -> tuple[list[int], list[str]]:
    """Tick positions and labels of the band axis: each band's wavelength, 2π/θ positions per turn ("∞" for a
    band that does not turn), at most ``MAX_BAND_TICKS`` of them.

    >>> band_ticks(np.array([1.0, 0.01, 0.0]))
    ([0, 1, 2], ['6.3', '628', '∞'])
    """
    step = max(1, math.ceil(len(frequencies) / MAX_BAND_TICKS))
    bands = list(range(0, len(frequencies), step))
    return bands, [_wavelength(float(frequencies[band])) for band in bands]


def _wavelength(theta: float) -> str:
    if theta == 0.0:
        return "∞"
    wavelength = 2 * math.pi / abs(theta)
    return f"{wavelength:.1f}" if wavelength < 100 else f"{wavelength:,.0f}"


def band_strip_figure(panel: AttentionPanel, tokens: Sequence[str]) -> go.Figure:
    """Each frequency band's term of each top key's score: one row per key (as in the bars), one cell per
    band, a diverging colour centred at zero. A layer that rotates nothing has no bands: an InputError."""
    if panel.bands is None or panel.frequencies is None:
        raise InputError(f"layer {panel.layer} rotates neither q nor k, so its scores have no frequency bands")
    bands, frequencies = panel.bands, panel.frequencies
    limit = float(np.nanmax(np.abs(bands))) if np.isfinite(bands).any() else 1.0
    wavelengths = [_wavelength(float(theta)) for theta in frequencies]
    fig = go.Figure(go.Heatmap(
        z=bands, x=list(range(bands.shape[1])), y=key_labels(panel, tokens), colorscale=DIVERGING, zmid=0.0,
        zmin=-(limit or 1.0), zmax=limit or 1.0, xgap=1, ygap=1,
        customdata=np.broadcast_to(np.asarray(wavelengths, dtype=object), bands.shape),
        colorbar=dict(title=dict(text="term of the score")),
        hovertemplate="%{y}<br>band %{x} (one turn every %{customdata} positions): %{z:.3f}<extra></extra>"))
    _styled(fig, f"Each frequency band's term of the top keys' scores (L{panel.layer}H{panel.head})",
            150 + 26 * bands.shape[0], "attention_band_strip")
    fig.update_layout(margin_r=120)
    ticks, text = band_ticks(frequencies)
    fig.update_xaxes(title_text="frequency band, labelled by its wavelength (positions per turn)", tickmode="array",
                     tickvals=ticks, ticktext=text, showgrid=False)
    fig.update_yaxes(type="category", autorange="reversed", showgrid=False)
    return fig


def patterns_figure(panel: AttentionPanel, tokens: Sequence[str]) -> go.Figure:
    """The query row's four patterns over every key it sees, one row of bars each (actual, content alone,
    position alone, reference), sharing the key axis so that a key's bars line up, and one attention scale."""
    names = [name for name in PATTERN_STYLE if name in panel.patterns]
    titles = [REFERENCE_TITLES.get(panel.reference, "reference") if name == "reference" else PATTERN_STYLE[name][0]
              for name in names]
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.09, subplot_titles=titles)
    shown = [token_text(tokens[key]) for key in panel.keys.tolist()]
    for row, name in enumerate(names, start=1):
        fig.add_trace(go.Bar(x=panel.keys, y=panel.patterns[name], name=name, marker_color=PATTERN_STYLE[name][1],
                             marker_line_width=0, customdata=shown, showlegend=False,
                             hovertemplate=f"{name}<br>key %{{x}} %{{customdata}}: %{{y:.3f}}<extra></extra>"),
                      row=row, col=1)
        fig.update_yaxes(rangemode="tozero", nticks=3, matches="y" if row > 1 else None, row=row, col=1)  # one scale: comparable rows
    _styled(fig, f"L{panel.layer}H{panel.head}: where query {panel.query} {token_text(tokens[panel.query])} "
                 "attends, and where each part alone would send it", 110 + 120 * len(names), "attention_patterns")
    fig.update_layout(bargap=0.1)
    fig.update_annotations(font_size=12, x=0.0, xanchor="left")
    fig.update_xaxes(title_text="key (token index)", row=len(names), col=1)
    return fig
