"""Figures in Jupyter: a trace's figures by name (:func:`trace_figure`, behind ``Trace.plot``) and
:func:`notebook_setup`, which makes every figure of a notebook fit its output area, in one template,
with a static picture beside it.

In JupyterLab, Jupyter Notebook 7 and VS Code a plotly figure is interactive with plotly's own
renderer for that front end. :func:`notebook_setup` makes that output responsive (it fills the
output area's width, e.g. beside JupyterLab's file browser, instead of a fixed width with a
scrollbar), gives figures made with plain ``go.Figure()`` the same template as repo_lens' builders,
and adds a PNG of every figure as an ``image/png`` entry of the same output, drawn offline by the
local Chromium (the export server of :mod:`repo_lens.plots.export`). GitHub, VS Code's static view
and ``jupyter nbconvert --to html`` show that PNG; JupyterLab's plotly extension shows it until the
pointer enters the figure and then draws the interactive chart in its place.
"""

from __future__ import annotations

import base64
import io
import warnings
from typing import Any

import numpy as np

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer, PlotlyRenderer

from repo_lens.errors import InputError
from repo_lens.plots.export import ExportError, export_unavailable, figure_bytes, start_export_server
from repo_lens.plots.heatmaps import pattern_fractions_figure, range_heatmap
from repo_lens.plots.scatter import position_scatter_figure
from repo_lens.plots.spaced_tokens import spaced_tokens_figure
from repo_lens.plots.style import FONT_FAMILY, OKABE_ITO

STATIC_RENDERER = "repo_lens_png"
"""The name :func:`notebook_setup` registers its static-image renderer under in ``plotly.io.renderers``."""
RESPONSIVE_RENDERER = "repo_lens_plotly"
"""The name of the interactive renderer :func:`notebook_setup` puts in place of plotly's own."""
TEMPLATE = "repo_lens"
"""The template :func:`notebook_setup` makes the default, on top of ``plotly_white``: the builders' fonts and colours."""
INTERACTIVE_RENDERERS = ("plotly_mimetype", "jupyterlab", "nteract", "vscode")  # plotly's mimetype renderers
TRACE_FIGURE_KINDS: tuple[str, ...] = ("spaced", "scatter", "ranges", "patterns")
PALETTE_TOLERANCE = 16
"""The most a notebook's static PNG may move a colour channel (of 255) at its 99.9th-percentile pixel when
:func:`compact_png` stores it with 256 colours; beyond that it keeps every colour."""
"""The ``kind`` values of :func:`trace_figure` (and ``Trace.plot``)."""


class ResponsivePlotlyRenderer(PlotlyRenderer):
    """plotly's interactive output without the figure's fixed width: the chart takes the width of the
    output area (its height is kept), and follows it when the area is resized."""

    config: dict[str, Any]  # set by PlotlyRenderer.__init__

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__({**(config or {}), "responsive": True})

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, Any]:
        layout = {key: value for key, value in fig_dict.get("layout", {}).items() if key != "width"}
        return super().to_mimebundle({**fig_dict, "layout": {**layout, "autosize": True}})


class StaticPngRenderer(MimetypeRenderer):
    """A plotly renderer that adds a PNG of the figure to its output as ``image/png``, rendered by
    :func:`repo_lens.plots.figure_bytes` (the local Chromium, nothing fetched) at the figure's own
    size. When the PNG cannot be drawn it warns and adds nothing, so the interactive output still shows."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
        figure = go.Figure(fig_dict)
        try:
            png = figure_bytes(figure, "png", scale=self.scale)
        except ExportError as error:
            warnings.warn(f"no static image for this figure: {error}", stacklevel=2)
            return {}
        try:
            png = compact_png(png)
        except (OSError, ValueError):  # not a picture Pillow reads: kept as drawn
            pass
        return {"image/png": base64.b64encode(png).decode("ascii")}


def compact_png(png: bytes, tolerance: int = PALETTE_TOLERANCE) -> bytes:
    """``png`` stored small: an opaque picture with 256 colours (median cut, no dithering) when that moves
    no colour channel by more than ``tolerance`` (of 255) at the 99.9th-percentile pixel, else (a finer
    gradient, or transparency) with every pixel kept and the PNG compressed again. A chart's PNG is mostly
    flat colours and anti-aliased edges, so 256 colours draw it about a third of the size.

    Example:
        >>> from PIL import Image
        >>> picture = Image.new("RGB", (64, 32), "white"); picture.paste((0, 114, 178), (8, 8, 40, 24))
        >>> raw = io.BytesIO(); picture.save(raw, "PNG")
        >>> Image.open(io.BytesIO(compact_png(raw.getvalue()))).convert("RGB").tobytes() == picture.tobytes()
        True
    """
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    image.load()
    rgba = image.convert("RGBA")
    kept = io.BytesIO()
    if int(np.asarray(rgba.getchannel("A")).min()) == 255:
        rgb = rgba.convert("RGB")
        palette = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        error = np.abs(np.asarray(palette.convert("RGB"), dtype=np.int16) - np.asarray(rgb, dtype=np.int16))
        if float(np.percentile(error.max(axis=-1), 99.9)) <= tolerance:
            palette.save(kept, "PNG", optimize=True)
            return kept.getvalue()
    image.save(kept, "PNG", optimize=True)
    return kept.getvalue() if kept.tell() < len(png) else png


def _register_template() -> None:
    pio.templates[TEMPLATE] = go.layout.Template(layout=dict(
        font=dict(family=FONT_FAMILY, size=13, color="#222222"), colorway=list(OKABE_ITO),
        hoverlabel=dict(font_family=FONT_FAMILY), title=dict(x=0.01, xanchor="left")))


def notebook_setup(static_images: bool = True, scale: float = 1.0) -> str:
    """Show figures interactively in this notebook, responsive and in repo_lens' template, and, with
    ``static_images``, also as a PNG.

    The interactive part is plotly's own choice for the front end (``plotly_mimetype`` in
    JupyterLab and Jupyter Notebook 7, ``vscode`` in VS Code, ``colab`` in Colab); plotly's
    mimetype renderers are replaced by one that drops the figure's fixed width, so a chart fills
    the output area instead of hiding its right end behind a scrollbar. Figures made after this
    call with plain ``go.Figure()`` get the builders' template (``plotly_white`` with their fonts
    and Okabe–Ito colours). ``static_images=True`` adds a PNG of every figure (``scale`` × the
    figure's size in pixels) as ``image/png`` beside the interactive output, which GitHub, HTML
    exports and other viewers that do not run plotly.js show. The PNG is drawn by the local
    Chromium through repo_lens' export server (started here, MathJax off, plotly.js from the
    installed package: no network). Without Chromium a warning says how to install it and figures
    stay interactive only. ``static_images=False`` removes the PNG again. Returns the renderer now
    in effect (``plotly.io.renderers.default``).

    Example:
        >>> import plotly.io as pio
        >>> before, template = pio.renderers.default, pio.templates.default
        >>> notebook_setup(static_images=False)
        'repo_lens_plotly'
        >>> pio.templates.default
        'plotly_white+repo_lens'
        >>> pio.renderers.default, pio.templates.default = before, template
    """
    pio.renderers[STATIC_RENDERER] = StaticPngRenderer(scale=scale)
    pio.renderers[RESPONSIVE_RENDERER] = ResponsivePlotlyRenderer()
    _register_template()
    pio.templates.default = f"plotly_white+{TEMPLATE}"
    parts = [RESPONSIVE_RENDERER if part in INTERACTIVE_RENDERERS else part
             for part in (pio.renderers.default or "plotly_mimetype").split("+")
             if part and part not in (STATIC_RENDERER, "png")] or [RESPONSIVE_RENDERER]
    parts = list(dict.fromkeys(parts))
    if static_images:
        problem = export_unavailable()
        if problem is None:
            try:
                start_export_server()
            except ExportError as error:
                problem = str(error)
        if problem is None:
            parts.append(STATIC_RENDERER)
        else:
            warnings.warn(f"figures stay interactive only, without a static PNG: {problem}", stacklevel=2)
    pio.renderers.default = "+".join(parts)
    return pio.renderers.default


def trace_figure(trace: Any, kind: str = "spaced", **options: Any) -> go.Figure:
    """A figure of ``trace`` by name (what ``Trace.plot(kind, ...)`` returns); ``options`` go to the builder.

    - ``"spaced"``: tokens laid out by their positions, one row per layer (:func:`spaced_tokens_figure`).
    - ``"scatter"``: token index against position for one layer (:func:`position_scatter_figure`;
      ``layer`` defaults to the last one, ``head`` to 0; ``head="all"`` draws every head).
    - ``"ranges"``: the range d = max z − min z per layer and head (:func:`range_heatmap`, RePo Fig. 2).
    - ``"patterns"``: the share of constant / mono / hybrid chunks per layer and head
      (:func:`pattern_fractions_figure`, RePo Fig. 3; ``size`` and ``eps`` as in
      :func:`repo_lens.analysis.chunk_patterns`).

    Example:
        >>> import numpy as np
        >>> from repo_lens.trace import Trace
        >>> t = Trace(tokens=list("abcd"), token_ids=[97, 98, 99, 100], layer_kinds=["rope"],
        ...           positions=np.array([[[0.0, 1.0, 2.0, 3.0]]], dtype=np.float32))
        >>> trace_figure(t, "ranges").data[0].z.tolist()
        [[3.0]]
        >>> trace_figure(t, "bars")
        Traceback (most recent call last):
        ...
        repo_lens.errors.InputError: unknown figure kind 'bars'; Trace.plot draws one of 'spaced', 'scatter', 'ranges', 'patterns'
    """
    from repo_lens.analysis.position_stats import chunk_patterns, pattern_fractions, range_stats

    if kind == "spaced":
        return spaced_tokens_figure(trace, **options)
    if kind == "scatter":
        layer = options.pop("layer", trace.positions.shape[0] - 1)
        return position_scatter_figure(trace, layer, **options)
    if kind == "ranges":
        if options:
            raise InputError(f"Trace.plot('ranges') takes no options, got {sorted(options)}")
        return range_heatmap(range_stats(trace.positions), trace.layer_kinds)
    if kind == "patterns":
        fractions = pattern_fractions(chunk_patterns(trace.positions, **options))
        return pattern_fractions_figure(fractions, trace.layer_kinds)
    raise InputError(f"unknown figure kind {kind!r}; Trace.plot draws one of "
                     + ", ".join(repr(name) for name in TRACE_FIGURE_KINDS))
