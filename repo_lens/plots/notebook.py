"""Figures in Jupyter: a trace's figures by name (:func:`trace_figure`, behind ``Trace.plot``) and
:func:`notebook_setup`, which adds a static picture to every figure a notebook shows.

In JupyterLab, Jupyter Notebook 7 and VS Code a plotly figure is interactive with plotly's own
renderer for that front end; nothing needs to be set. What a plain notebook lacks is a picture for
readers who do not run it: GitHub, ``jupyter nbconvert --to html`` and other static viewers ignore
plotly's output. :func:`notebook_setup` keeps the interactive output and adds a PNG to it, drawn
offline by the local Chromium (the export server of :mod:`repo_lens.plots.export`).

The PNG travels as an HTML ``<img>`` (``text/html``), not as ``image/png``: JupyterLab's plotly
extension shows a stored ``image/png`` *instead of* the interactive chart when a notebook is
opened, whereas front ends that run plotly.js (JupyterLab, Notebook 7, VS Code) rank plotly's own
output above ``text/html`` and the static viewers take the HTML.
"""

from __future__ import annotations

import base64
import html
import warnings
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

from repo_lens.errors import InputError
from repo_lens.plots.export import ExportError, export_unavailable, figure_bytes, start_export_server
from repo_lens.plots.heatmaps import pattern_fractions_figure, range_heatmap
from repo_lens.plots.scatter import position_scatter_figure
from repo_lens.plots.spaced_tokens import spaced_tokens_figure

STATIC_RENDERER = "repo_lens_png"
"""The name :func:`notebook_setup` registers its static-image renderer under in ``plotly.io.renderers``."""
TRACE_FIGURE_KINDS: tuple[str, ...] = ("spaced", "scatter", "ranges", "patterns")
"""The ``kind`` values of :func:`trace_figure` (and ``Trace.plot``)."""


class StaticPngRenderer(MimetypeRenderer):
    """A plotly renderer that adds a PNG of the figure to its output, as ``text/html`` holding an
    ``<img>`` (see the module's note), rendered by :func:`repo_lens.plots.figure_bytes` (the local
    Chromium, nothing fetched). When the PNG cannot be drawn it warns and adds nothing, so the
    interactive output still shows."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
        figure = go.Figure(fig_dict)
        try:
            png = figure_bytes(figure, "png", scale=self.scale)
        except ExportError as error:
            warnings.warn(f"no static image for this figure: {error}", stacklevel=2)
            return {}
        title = figure.layout.title.text or "figure"
        return {"text/html": f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" '
                             f'alt="{html.escape(title)}" style="max-width:100%;height:auto">'}


def notebook_setup(static_images: bool = True, scale: float = 1.0) -> str:
    """Show figures interactively in this notebook and, with ``static_images``, also as a PNG.

    The interactive part is plotly's own choice for the front end (``plotly_mimetype`` in
    JupyterLab and Jupyter Notebook 7, ``vscode`` in VS Code, ``colab`` in Colab) and is kept;
    ``static_images=True`` adds a PNG of every figure to its output (``scale`` × the figure's
    size in pixels), which GitHub, HTML exports and other viewers that do not run plotly.js show;
    JupyterLab and VS Code keep showing the interactive chart. Where the front end's own renderer
    already writes HTML (Colab, the classic ``notebook`` renderer), that HTML wins and no image is
    added. The PNG is drawn by the local Chromium through repo_lens' export server (started here,
    MathJax off, plotly.js from the installed package: no network). Without Chromium a warning says
    how to install it and figures stay interactive only. ``static_images=False`` removes the PNG
    again. Returns the renderer now in effect (``plotly.io.renderers.default``).

    Example:
        >>> import plotly.io as pio
        >>> before = pio.renderers.default
        >>> "repo_lens_png" in notebook_setup(static_images=False)
        False
        >>> pio.renderers.default = before
    """
    pio.renderers[STATIC_RENDERER] = StaticPngRenderer(scale=scale)
    parts = [part for part in (pio.renderers.default or "plotly_mimetype").split("+")
             if part and part not in (STATIC_RENDERER, "png")] or ["plotly_mimetype"]
    if static_images:
        problem = export_unavailable()
        if problem is None:
            try:
                start_export_server()
            except ExportError as error:
                problem = str(error)
        if problem is None:
            parts.insert(0, STATIC_RENDERER)  # first: a front end's own text/html, if any, overwrites it
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
