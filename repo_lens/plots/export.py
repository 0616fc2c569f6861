"""Write figures to PNG / SVG / PDF (kaleido ≥ 1 driving the local Chromium) or offline HTML.

Nothing is fetched from the network: plotly.js comes from the installed plotly package and
MathJax is switched off. The first export starts one Chromium (``kaleido.start_sync_server``)
that later exports reuse, so only the first one pays the browser start-up.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import plotly.graph_objects as go

from repo_lens.atomic import atomic_write_bytes
from repo_lens.errors import InputError, RepoLensError
from repo_lens.plots.style import DEFAULT_WIDTH

FORMATS: dict[str, str] = {
    "png": "image/png",
    "svg": "image/svg+xml",
    "pdf": "application/pdf",
    "html": "text/html",
}
_lock = threading.Lock()
_server_started = False


class ExportError(RepoLensError, RuntimeError):
    """A figure could not be rendered to a static file (no Chromium, or the renderer failed)."""


def start_export_server() -> None:
    """Start kaleido's shared Chromium (idempotent); later exports reuse it."""
    global _server_started
    with _lock:
        if _server_started:
            return
        import kaleido

        try:
            kaleido.start_sync_server(mathjax=False, silence_warnings=True)
        except Exception as error:  # ChromeNotFoundError and friends
            raise ExportError(_no_browser_message(error)) from None
        _server_started = True


def _no_browser_message(error: Exception) -> str:
    return (f"static export needs Chromium (kaleido ≥ 1 renders with it): {error}. Install it with "
            "`make browser` (apt-get install chromium fonts-wqy-microhei) or export HTML instead")


def figure_bytes(fig: go.Figure, fmt: str, *, width: int | None = None, height: int | None = None,
                 scale: float = 2.0) -> bytes:
    """The figure as ``fmt`` ("png", "svg", "pdf" or "html") bytes.

    Example:
        >>> import plotly.graph_objects as go
        >>> figure_bytes(go.Figure(go.Bar(y=[1, 2])), "svg")[:4]   # doctest: +SKIP
        b'<svg'
    """
    fmt = fmt.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"unknown figure format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not isinstance(fig, go.Figure):
        raise InputError(f"expected a plotly Figure, got {type(fig).__name__}")
    if fmt == "html":
        return fig.to_html(include_plotlyjs=True, full_html=True, include_mathjax=False).encode("utf-8")
    start_export_server()
    import kaleido

    opts = {
        "format": fmt,
        "width": int(width or fig.layout.width or DEFAULT_WIDTH),
        "height": int(height or fig.layout.height or 500),
        "scale": scale if fmt == "png" else 1,
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = kaleido.calc_fig_sync(fig, opts=opts)
    except Exception as error:
        raise ExportError(f"rendering the figure as {fmt.upper()} failed: {error}") from None
    if not data:
        raise ExportError(f"rendering the figure as {fmt.upper()} produced no data")
    return bytes(data)


def export(fig: go.Figure, path: str | os.PathLike, *, width: int | None = None, height: int | None = None,
           scale: float = 2.0, layout: str | None = None) -> Path:
    """Write ``fig`` to ``path``, the format picked from the suffix (.png, .svg, .pdf, .html), atomically.
    ``layout="one-column"`` / ``"two-column"`` sizes it for a paper first (:func:`paper_figure`).

    Example:
        >>> import plotly.graph_objects as go
        >>> export(go.Figure(go.Bar(y=[1, 2])), "/tmp/bars.pdf")      # doctest: +SKIP
        PosixPath('/tmp/bars.pdf')
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"cannot tell the format of {path.name!r}; end the name in .png, .svg, .pdf or .html")
    if layout is not None:
        from repo_lens.plots.paper import paper_figure

        fig = paper_figure(fig, layout)
    data = figure_bytes(fig, fmt, width=width, height=height, scale=scale)
    atomic_write_bytes(path, data)
    return path
