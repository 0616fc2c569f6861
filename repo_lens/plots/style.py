"""Shared look of every figure: colour-blind-safe colours, fonts with a CJK family, sampling helpers.

Colours are Okabe & Ito's palette (distinguishable under the common colour-vision deficiencies);
continuous scales are Cividis (sequential) and a purple–orange diverging scale, both colour-blind safe and
of monotone lightness, so they print in greyscale; classes differ in lightness too. Fonts list
a CJK family so Chinese tokens render in the browser and in exported files alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.model.registry import kind_index, mechanism_kinds
from repo_lens.plots.labels import label_width_px
from repo_lens.validation import check_index

OKABE_ITO: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#000000",  # black
)
# several series (heads, models, layers) of one figure: Okabe–Ito without its yellow, which is hard to see on
# white; with a marker symbol and (lines) a dash pattern per series as well, so they stay apart in greyscale
SERIES_COLORS: tuple[str, ...] = tuple(color for color in OKABE_ITO if color != "#F0E442")
SERIES_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up", "x", "triangle-down", "cross",
                                   "star", "pentagon", "hexagon")
SERIES_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def series_style(index: int) -> dict[str, Any]:
    """Colour, marker symbol and dash of the ``index``-th series (colour and symbol together repeat after 70).

    >>> series_style(0), series_style(8)["symbol"]
    ({'color': '#0072B2', 'symbol': 'circle', 'dash': 'solid'}, 'pentagon')
    """
    return {"color": SERIES_COLORS[index % len(SERIES_COLORS)], "symbol": SERIES_SYMBOLS[index % len(SERIES_SYMBOLS)],
            "dash": SERIES_DASHES[index % len(SERIES_DASHES)]}


# position mechanisms, by their slot in the registry (kind_index): slot 0, the RoPE baseline, in grey,
# then Okabe–Ito, then Paul Tol's muted colour-blind-safe colours for mechanisms added later
KIND_PALETTE: tuple[str, ...] = (
    "#6E6E6E", OKABE_ITO[1], OKABE_ITO[0], OKABE_ITO[2], OKABE_ITO[4], OKABE_ITO[7], OKABE_ITO[5],
    OKABE_ITO[3], OKABE_ITO[6], "#882255", "#44AA99", "#999933", "#AA4499", "#332288", "#117733",
    "#CC6677", "#88CCEE", "#DDCC77", "#661100", "#EE8866", "#EEDD88", "#FFAABB", "#99DDFF", "#AAAA00", "#BBCC33",
    "#DDAA33", "#BB5566", "#225555",
)
# chunk classes and prompt spans: colours whose lightness L* differs by 20 or more between any two classes,
# so they stay apart printed in greyscale (and for colour-blind readers); chunk classes: pale grey (L* 88),
# slate blue (63), brown (41), none close to a kind's colour (a strip under a row of tokens must not read as
# another mechanism's text); spans: navy (29), Okabe–Ito's vermillion (54), grey (76)
PATTERN_COLORS: dict[str, str] = {"constant": "#DDDDDD", "mono": "#8899BB", "hybrid": "#885522"}
SPAN_COLORS: dict[str, str] = {"needle": OKABE_ITO[5], "query": "#004488", "rest": "#BBBBBB"}
# a log axis labelled at the decades only (1e-3, 1e-2, ...), with unlabelled minor ticks at 2..9 × each
# decade: plotly's default labels the minor ticks "2 … 9" beside "0.001" when a range spans few decades
LOG_AXIS: dict[str, Any] = {"type": "log", "dtick": 1, "exponentformat": "power",
                            "minor": {"ticks": "outside", "ticklen": 3, "dtick": "D1", "showgrid": False}}
SEQUENTIAL = "Cividis"
# purple below the middle, orange above, and lightness rising all the way (L* 10, 34, 53, 63, 91), so
# values on either side of the middle print as different greys (PuOr gives both ends the same grey)
DIVERGING: list[list] = [[0.0, "#2D004B"], [0.25, "#5E3C99"], [0.5, "#7F7F7F"], [0.75, "#E08214"], [1.0, "#FEE0B6"]]
FONT_FAMILY = "'DejaVu Sans', 'WenQuanYi Micro Hei', 'Noto Sans CJK SC', 'Microsoft YaHei', sans-serif"
# Times (the ICML, NeurIPS, ICLR and ACL templates' body font: TeX's `times` package draws Nimbus Roman;
# Liberation Serif has Times' metrics) and Computer Modern (LaTeX's default, as Latin Modern or CMU Serif),
# each with a CJK family for Chinese text and no other serif to fall back to (a PDF export checks the face)
SERIF_FAMILY = ("'Nimbus Roman', 'Nimbus Roman No9 L', 'TeX Gyre Termes', 'Times New Roman', 'Liberation Serif', "
                "'WenQuanYi Micro Hei', serif")
CM_FAMILY = "'Latin Modern Roman', 'LM Roman 10', 'CMU Serif', 'WenQuanYi Micro Hei', serif"
MONO_FAMILY = "'DejaVu Sans Mono', 'WenQuanYi Micro Hei Mono', 'WenQuanYi Micro Hei', monospace"
DEFAULT_WIDTH = 1100
MARGIN_LEFT_PX = 70
STYLE_MARGIN_PX = 100  # left + right margin of every styled figure: the plot area is the width less this
# Margins that already hold what plotly would push them out to: when an axis title, a legend or a colour bar
# needs more room than the margin gives, plotly widens the margin after drawing and draws the whole figure a
# second time (in the app, on every change of layer, head or window, and in every export).
MARGIN_BOTTOM_PX = 60  # x tick labels and the x-axis title (plotly needs ~55 px at font size 13)
LEGEND_ROW_PX = 30  # one horizontal legend row
LEGEND_ENTRY_PX = 22  # one entry of a vertical legend at font size 13 (plotly: ~19 px)
LEGEND_SYMBOL_PX = 80  # a vertical legend at the right: symbol, padding and gap beside the longest name
# row names of a heatmap set off from its cells: an outside tick, drawn invisible, as long as the gap
ROW_LABEL_STANDOFF = {"ticks": "outside", "ticklen": 6, "tickcolor": "rgba(0,0,0,0)"}
COLORBAR_MARGIN_PX = 120  # a colour bar with its tick labels and title (plotly needs ~105-110 px)


def kind_color(kind: str, index: int = 0) -> str:
    """Colour of a layer kind: its registry slot's colour, so every registered mechanism has one (the
    palette repeats after its last colour); kinds the registry does not know cycle through Okabe–Ito by ``index``.

    >>> kind_color("rope"), kind_color("no-such-kind", index=1)
    ('#6E6E6E', '#E69F00')
    """
    if kind not in mechanism_kinds():
        return OKABE_ITO[index % len(OKABE_ITO)]
    return KIND_PALETTE[kind_index(kind) % len(KIND_PALETTE)]


KIND_COLORS: dict[str, str] = {kind: kind_color(kind) for kind in mechanism_kinds()}


def styled(fig: go.Figure, title: str | None = None, height: int | None = None) -> go.Figure:
    """Apply the shared template, fonts, colours and margins; returns ``fig``.

    Example:
        >>> fig = styled(go.Figure(), "hello", height=300)
        >>> fig.layout.title.text, fig.layout.height, "WenQuanYi" in fig.layout.font.family
        ('hello', 300, True)
    """
    fig.update_layout(
        template="plotly_white",
        font=dict(family=FONT_FAMILY, size=13, color="#222222"),
        colorway=list(OKABE_ITO),
        title=dict(text=title, x=0.01, xanchor="left") if title else None,
        margin=dict(l=MARGIN_LEFT_PX, r=STYLE_MARGIN_PX - MARGIN_LEFT_PX, t=60 if title else 30, b=MARGIN_BOTTOM_PX),
        hoverlabel=dict(font_family=FONT_FAMILY),
    )
    if height is not None:
        fig.update_layout(height=int(height))
    return fig


def right_legend_margin(names: Sequence[str], font_size: float = 13) -> int:
    """The right margin (px) a vertical legend of ``names`` at the plot's right needs (see MARGIN_BOTTOM_PX).

    Example:
        >>> right_legend_margin(["head 0", "head 15"]) > right_legend_margin(["head 0"])
        True
    """
    return int(np.ceil(LEGEND_SYMBOL_PX + max((label_width_px(name, font_size) for name in names), default=0.0)))


def layer_label(layer: int, kinds: Sequence[str] | None) -> str:
    """'L3 repo' (or 'L3' without kinds)."""
    return f"L{layer} {kinds[layer]}" if kinds is not None and layer < len(kinds) else f"L{layer}"


def select_head(positions: np.ndarray, head: int | str) -> np.ndarray:
    """(L, T) positions of one head, or their mean over heads with ``head="mean"``.

    Example:
        >>> z = np.arange(12, dtype=np.float32).reshape(1, 2, 6)
        >>> select_head(z, 1).tolist(), select_head(z, "mean").tolist()
        ([[6.0, 7.0, 8.0, 9.0, 10.0, 11.0]], [[3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    """
    z = np.asarray(positions)
    if z.ndim != 3:
        raise InputError(f"positions must be (n_layers, n_heads, T), got shape {z.shape}")
    if isinstance(head, str) and head == "mean":
        return z.astype(np.float64).mean(axis=1)
    return z[:, check_head(head, z.shape[1])].astype(np.float64)


def check_layer(layer: int, n_layers: int) -> int:
    """``layer`` as an index in 0..n_layers-1 (negatives count from the end), else InputError."""
    return check_index(layer, n_layers, "layer")


def check_head(head: int | str, n_heads: int, alternatives: str = "'mean' for the mean over heads") -> int:
    """``head`` as an index in 0..n_heads-1 (negatives count from the end); else an InputError that
    also names the ``alternatives`` a figure accepts instead of an index.

    >>> check_head(-1, 4)
    3
    """
    try:
        return check_index(head, n_heads, "head")
    except InputError as error:
        raise InputError(f"{error}, or {alternatives}") from None


def sample_indices(n: int, max_points: int, values: np.ndarray | None = None) -> np.ndarray:
    """Indices of at most ``max_points`` of ``n`` points, sorted; all of them when n <= max_points.

    Without ``values``: an even stride. With ``values`` (n,) or (k, n): min-max decimation, keeping in
    each of max_points/2 buckets the indices of the smallest and largest value (of every row), so the
    envelope and the extremes survive.

    Example:
        >>> sample_indices(10, 4).tolist()
        [0, 3, 6, 9]
        >>> v = np.array([0, 9, 1, 1, 1, 1, -5, 1, 1, 1], dtype=float)
        >>> sample_indices(10, 4, v).tolist()
        [0, 1, 5, 6]
    """
    if max_points < 2:
        raise InputError(f"max_points must be >= 2, got {max_points}")
    if n <= max_points:
        return np.arange(n)
    if values is None:
        return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))
    rows = np.atleast_2d(np.asarray(values, dtype=np.float64))
    n_buckets = max(1, max_points // (2 * rows.shape[0]))
    edges = np.linspace(0, n, n_buckets + 1).astype(np.int64)
    keep: list[np.ndarray] = []
    filled = np.where(np.isfinite(rows), rows, np.nan)
    for start, end in zip(edges[:-1], edges[1:]):
        if end <= start:
            continue
        block = filled[:, start:end]
        finite = np.isfinite(block).any(axis=1)
        if finite.any():
            keep.append(start + np.nanargmin(block[finite], axis=1))
            keep.append(start + np.nanargmax(block[finite], axis=1))
        else:
            keep.append(np.array([start]))
    return np.unique(np.concatenate(keep))


def token_contexts(tokens: Sequence[str], indices: Sequence[int] | np.ndarray, width: int = 8) -> list[str]:
    """For each index: the ``width`` tokens either side with the token itself in brackets, HTML-escaped.

    Example:
        >>> token_contexts(["a", "b", "c", "d"], [1], width=1)
        ['a⟦b⟧c']
    """
    out = []
    n = len(tokens)
    for index in np.asarray(indices, dtype=np.int64).tolist():
        left = "".join(tokens[max(0, index - width):index])
        right = "".join(tokens[index + 1:min(n, index + 1 + width)])
        out.append(_escape(left + "⟦" + tokens[index] + "⟧" + right))
    return out


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", "↵")


def escape_tokens(tokens: Sequence[str]) -> list[str]:
    """Tokens made safe for plotly's HTML-like text (``<``, ``&``, newlines)."""
    return [_escape(token) for token in tokens]


def positions_of(trace: Any) -> tuple[np.ndarray, list[str], list[str] | None]:
    """(positions (L, H, T), tokens, layer kinds) of a Trace-like object."""
    try:
        positions = np.asarray(trace.positions)
        tokens = list(trace.tokens)
    except AttributeError:
        raise InputError(
            f"expected a repo_lens Trace (with .positions and .tokens), got {type(trace).__name__}"
        ) from None
    if positions.ndim != 3 or positions.shape[2] != len(tokens):
        raise InputError(f"positions of shape {positions.shape} do not match {len(tokens)} tokens")
    kinds = getattr(trace, "layer_kinds", None)
    return positions, tokens, list(kinds) if kinds is not None else None


def lightness(color: str) -> float:
    """CIE L* (0 black … 100 white) of an sRGB colour given as "#RRGGBB" or "rgb(r, g, b)": how light it
    prints in greyscale.

    >>> round(lightness("#000000")), round(lightness("#FFFFFF")), round(lightness("#777777"))
    (0, 100, 50)
    """
    found = re.fullmatch(r"\s*#([0-9a-fA-F]{6})\s*", color)
    if found:
        channels: list[float] = [int(found.group(1)[i:i + 2], 16) for i in (0, 2, 4)]
    else:
        found = re.fullmatch(r"\s*rgba?\(\s*([\d.]+)\s*,\s*([\d.]+)\s*,\s*([\d.]+)\s*(?:,\s*[\d.]+\s*)?\)\s*", color)
        if not found:
            raise InputError(f"cannot read the colour {color!r}; give it as '#RRGGBB' or 'rgb(r, g, b)'")
        channels = [float(value) for value in found.groups()]
    linear = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 116 * luminance ** (1 / 3) - 16 if luminance > (6 / 29) ** 3 else luminance * (29 / 3) ** 3
