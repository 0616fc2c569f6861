"""Write figures to PNG / SVG / PDF (kaleido ≥ 1 driving the local Chromium) or offline HTML.

Nothing is fetched from the network: plotly.js comes from the installed plotly package and
MathJax is switched off. The first export starts one Chromium (``kaleido.start_sync_server``)
that later exports reuse, so only the first one pays the browser start-up.
"""

from __future__ import annotations

import os
import platform
import struct
import threading
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from repo_lens.atomic import atomic_write_bytes
from repo_lens.errors import InputError, RepoLensError
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.plots.style import DEFAULT_WIDTH
from repo_lens.validation import check_int, check_positive_number

FORMATS: dict[str, str] = {
    "png": "image/png",
    "svg": "image/svg+xml",
    "pdf": "application/pdf",
    "html": "text/html",
}
_lock = threading.Lock()
_server_started = False
_browser_found: dict[tuple[str | None, str | None], tuple[float, str | None]] = {}
MIN_DPI, MAX_DPI = 50, 1200
EXPORT_TIMEOUT_S = float(os.environ.get("REPO_LENS_EXPORT_TIMEOUT", "120"))
"""Seconds one static export may take (browser start included) before :class:`ExportError`."""


class ExportError(RepoLensError, RuntimeError):
    """A figure could not be rendered to a static file (no Chromium, or the renderer failed)."""


def find_browser() -> str | None:
    """The Chromium executable kaleido would start (``BROWSER_PATH`` first), or None if there is none.

    Example:
        >>> find_browser() is None or Path(find_browser()).is_file()
        True
    """
    key = (os.environ.get("BROWSER_PATH"), os.environ.get("PATH"))
    cached = _browser_found.get(key)
    if cached is not None and time.monotonic() - cached[0] < 10.0:  # the app asks on every figure
        return cached[1]
    from choreographer.browsers.chromium import Chromium

    path = Chromium.find_browser(skip_local=False)
    found = str(path) if path and Path(path).is_file() and os.access(path, os.X_OK) else None
    _browser_found.clear()
    _browser_found[key] = (time.monotonic(), found)
    return found


def export_unavailable(fmt: str = "png") -> str | None:
    """Why export to ``fmt`` cannot work here (the :class:`ExportError` message), or None: PNG, SVG and PDF
    need Chromium, and PDF also rsvg-convert.

    Example:
        >>> export_unavailable() is None or browser_install_hint() in export_unavailable()
        True
    """
    if find_browser() is not None:
        if fmt == "pdf":
            from repo_lens.plots.pdf_export import converter_missing

            return converter_missing()
        return None
    where = os.environ.get("BROWSER_PATH")
    return _no_browser_message(f"BROWSER_PATH={where!r} is no executable file" if where else "no Chromium on PATH")


def start_export_server() -> None:
    """Start kaleido's shared Chromium (idempotent); later exports reuse it.

    Raises :class:`ExportError` at once when no Chromium can be found, rather than letting
    kaleido fail in its server thread while the caller waits.
    """
    global _server_started
    with _lock:
        if _server_started and _server_alive():
            return
        if (problem := export_unavailable()) is not None:
            raise ExportError(problem)
        import kaleido

        _stop_dead_server()
        try:
            kaleido.start_sync_server(mathjax=False, silence_warnings=True)
        except Exception as error:  # ChromeNotFoundError and friends
            raise ExportError(_no_browser_message(error)) from None
        _server_started = True


def _server_alive() -> bool:
    import kaleido

    server = kaleido._global_server  # kaleido keeps its one sync server here
    thread = getattr(server, "_thread", None)
    return server.is_running() and thread is not None and thread.is_alive()


def _stop_dead_server() -> None:
    # A server thread that died (browser failed to start or crashed) still reads as running.
    global _server_started
    import kaleido

    server = kaleido._global_server
    if server.is_running() and not _server_alive():
        server.close(silence_warnings=True)
    _server_started = False


def _render(fig: go.Figure, opts: dict, timeout: float) -> bytes:
    """kaleido's blocking render in a worker thread, given up after ``timeout`` s or when the browser dies."""
    import kaleido

    outcome: dict[str, object] = {}
    done = threading.Event()

    def work() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome["data"] = kaleido.calc_fig_sync(fig, opts=opts)
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error
        finally:
            done.set()

    with _lock:
        threading.Thread(target=work, name="repo-lens-export", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not done.wait(0.05):
            if not _server_alive():
                _stop_dead_server()
                raise ExportError(_no_browser_message("the Chromium renderer stopped (it failed to start or crashed)"))
            if time.monotonic() > deadline:
                raise ExportError(f"rendering the figure as {opts['format'].upper()} took over {timeout:g} s "
                                  "(set REPO_LENS_EXPORT_TIMEOUT to wait longer), or export HTML instead")
    if "error" in outcome:
        error = outcome["error"]
        raise ExportError(f"rendering the figure as {opts['format'].upper()} failed: {error}") from None
    return outcome["data"]  # type: ignore[return-value]


def _no_browser_message(error: Exception | str) -> str:
    return (f"static export needs Chromium or Google Chrome (kaleido ≥ 1 renders with it): {error}. "
            f"{browser_install_hint()}; or export HTML instead")


# kaleido's own download (Chrome for Testing, into the user's data folder, found by find_browser): no root needed
_DOWNLOAD = ("run `plotly_get_chrome -y` (installed with plotly; from Python: kaleido.get_chrome_sync()), which "
             "downloads Chrome for Testing into your user folder where the network allows")


def browser_install_hint(system: str | None = None, distribution: set[str] | None = None) -> str:
    """What to install for static export on this machine (``system`` as ``platform.system()`` names it,
    ``distribution`` the ID and ID_LIKE words of /etc/os-release; both read here when None).

    Example:
        >>> "apt-get install chromium fonts-wqy-microhei`" in browser_install_hint("Linux", {"debian"})  # sudo unless root
        True
        >>> browser_install_hint("Darwin").split(",")[0]
        'Install Google Chrome (kaleido finds it in /Applications)'
    """
    system = platform.system() if system is None else system
    if system == "Darwin":
        return f"Install Google Chrome (kaleido finds it in /Applications), or {_DOWNLOAD}"
    if system == "Windows":
        return f"Install Google Chrome (Microsoft Edge works too), or {_DOWNLOAD}"
    distribution = _os_release_ids() if distribution is None else distribution
    sudo = "" if hasattr(os, "geteuid") and os.geteuid() == 0 else "sudo "
    if "ubuntu" in distribution:  # Ubuntu's chromium package installs a snap, which kaleido cannot start
        return (f"On Ubuntu, {_DOWNLOAD}, or install Google Chrome's .deb (Ubuntu's chromium package is a snap, "
                f"which kaleido cannot start); `{sudo}apt-get install fonts-wqy-microhei` adds the font for Chinese "
                "text")
    if "debian" in distribution:
        return (f"Install it with `{sudo}apt-get install chromium fonts-wqy-microhei` (in a source checkout `make "
                f"browser` runs it), or without root {_DOWNLOAD}")
    return (f"Install Chromium or Google Chrome with your system's package manager (and a CJK font such as "
            f"WenQuanYi Micro Hei for Chinese text), or {_DOWNLOAD}")


def _os_release_ids() -> set[str]:
    """The ID and ID_LIKE words of os-release (e.g. {"ubuntu", "debian"}); empty where there is none."""
    try:
        release = platform.freedesktop_os_release()  # /etc/os-release, else /usr/lib/os-release
    except OSError:
        return set()
    return {word.lower() for key in ("ID", "ID_LIKE") for word in release.get(key, "").split()}


def _check_size(width: int | None, height: int | None, scale: float | None) -> None:
    """Refuse a width or height that is not a whole number of pixels >= 1 (None: the figure's own), or
    a scale that is not a finite number > 0 (None: the default)."""
    for name, pixels in (("width", width), ("height", height)):
        if pixels is not None:
            check_int(pixels, f"{name} (pixels; None keeps the figure's own)", minimum=1)
    if scale is not None:
        check_positive_number(scale, "scale")


def figure_bytes(fig: go.Figure, fmt: str, *, width: int | None = None, height: int | None = None,
                 scale: float | None = 2.0, font: str | None = None) -> bytes:
    """The figure as ``fmt`` ("png", "svg", "pdf" or "html") bytes; a PNG has ``scale`` device pixels per
    CSS pixel (None: 2). A PDF is the SVG converted page for page (its page is the figure, fonts embedded,
    heatmaps as vector cells: :func:`repo_lens.plots.pdf_export.svg_to_pdf`); with ``font`` ("sans",
    "serif", "cm") it must embed that face, else an :class:`ExportError` names the package to install.

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
    _check_size(width, height, scale)
    if fmt == "html":
        return fig.to_html(include_plotlyjs=True, full_html=True, include_mathjax=False).encode("utf-8")
    start_export_server()
    opts = {
        "format": "svg" if fmt == "pdf" else fmt,
        "width": int(width or fig.layout.width or DEFAULT_WIDTH),
        "height": int(height or fig.layout.height or 500),
        "scale": (scale or 2.0) if fmt == "png" else 1,
    }
    data = _render(fig, opts, EXPORT_TIMEOUT_S)
    if not data:
        raise ExportError(f"rendering the figure as {fmt.upper()} produced no data")
    if fmt == "pdf":
        from repo_lens.plots.pdf_export import PdfExportError, svg_to_pdf

        try:
            return svg_to_pdf(bytes(data), font)
        except PdfExportError as error:
            raise ExportError(str(error)) from None
    return bytes(data)


def png_with_dpi(data: bytes, dpi: float) -> bytes:
    """``data`` (a PNG) with a pHYs chunk saying ``dpi`` pixels per inch, so programs that read it
    (LaTeX ignores it and uses the width you give) show the image at its paper size.

    Example:
        >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + struct.pack(">I", 13) + b"IHDR" + bytes(13) + bytes(4)
        >>> png_with_dpi(png, 300)[33:41]
        b'\\x00\\x00\\x00\\tpHYs'
    """
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return data
    per_metre = round(dpi / 0.0254)
    body = b"pHYs" + struct.pack(">IIB", per_metre, per_metre, 1)
    chunk = struct.pack(">I", 9) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    end_of_header = 8 + 4 + 4 + 13 + 4  # signature, IHDR length, type, data, CRC
    return data[:end_of_header] + chunk + data[end_of_header:]


@dataclass(frozen=True, kw_only=True)
class PaperStyle:
    """How :func:`export` lays a figure out for a paper (with ``layout=``): ``font_pt``-point text (default 8),
    ``font`` "sans" (default), "serif" (Times) or "cm" (Computer Modern), and height ``aspect`` × width
    (default: what the figure's content needs).

    Example:
        >>> import plotly.graph_objects as go
        >>> export(go.Figure(go.Bar(y=[1, 2])), "/tmp/bars.pdf", layout="neurips",
        ...        paper=PaperStyle(font="serif", aspect=0.5))                                 # doctest: +SKIP
        PosixPath('/tmp/bars.pdf')
        >>> PaperStyle(font="cm").font_pt is None
        True
    """

    aspect: float | None = None
    font_pt: float | None = None
    font: str | None = None


@grouped_keywords("paper", PaperStyle)
def export(fig: go.Figure, path: str | os.PathLike, *, width: int | None = None, height: int | None = None,
           scale: float | None = None, layout: str | None = None, dpi: float | None = None,
           paper: PaperStyle | None = None) -> Path:
    """Write ``fig`` to ``path``, the format picked from the suffix (.png, .svg, .pdf, .html), atomically.

    For a paper, ``layout`` names a venue's width (``"icml-column"``, ``"icml-text"``, ``"neurips"``,
    ``"iclr"``, ``"acl-column"``, ``"acl-text"``, ``"one-column"``, ``"two-column"``: see
    :data:`repo_lens.plots.paper.PAPER_PRESETS`) or gives one with a unit (``"3.3in"``, ``"240pt"``,
    ``"8.5cm"``); the figure is laid out again for it (:func:`paper_figure`) with the text size, font face
    and aspect of ``paper`` (:class:`PaperStyle`: 8-point sans text and the height the figure's content
    needs by default). PDF and SVG are vector: the PDF's
    page is the figure at its size, its fonts embedded as outlines (an error names the package to install
    when the face asked for is missing), its heatmaps drawn as vector cells; a PNG has ``dpi`` pixels per
    inch (default 300 with a layout; it says so in the
    file), or ``scale`` pixels per figure pixel (default 2 without a layout). ``width`` / ``height``
    (pixels) override the figure's own size.

    Example:
        >>> import plotly.graph_objects as go
        >>> export(go.Figure(go.Bar(y=[1, 2])), "/tmp/bars.pdf", layout="icml-column")      # doctest: +SKIP
        PosixPath('/tmp/bars.pdf')
    """
    paper = options_or_default(paper, PaperStyle, "paper")
    aspect, font_pt, font = paper.aspect, paper.font_pt, paper.font
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError(f"cannot tell the format of {path.name!r}; end the name in .png, .svg, .pdf or .html")
    _check_size(width, height, scale)
    if dpi is not None and scale is not None:
        raise InputError(f"pass dpi ({dpi!r}) or scale ({scale!r}), not both: dpi sets a PNG's pixels per inch, "
                         "scale its pixels per figure pixel")
    if dpi is not None:
        dpi = check_positive_number(dpi, "dpi")
        if not MIN_DPI <= dpi <= MAX_DPI:
            raise InputError(f"dpi {dpi:g} is out of range; pass {MIN_DPI} to {MAX_DPI} pixels per inch (300 for print)")
    if layout is not None:
        from repo_lens.plots.paper import DEFAULT_FONT_PT, PNG_DPI
        from repo_lens.plots.paper_layout import paper_figure

        fig = paper_figure(fig, layout, aspect=aspect, font_pt=DEFAULT_FONT_PT if font_pt is None else font_pt,
                           font=font or "sans")
        dpi = dpi or (None if scale is not None else PNG_DPI)
    elif aspect is not None or font_pt is not None or font is not None:
        raise InputError("a PaperStyle (aspect, font_pt, font) sizes a figure for a paper: pass layout= too (a preset "
                         "such as 'icml-column', or a width such as '3.3in')")
    if dpi is not None:
        scale = dpi / 96  # kaleido's scale: device pixels per CSS pixel (96 per inch)
    data = figure_bytes(fig, fmt, width=width, height=height, scale=scale,
                        font=(font or "sans") if layout is not None else None)
    if fmt == "png" and dpi is not None:
        data = png_with_dpi(data, dpi)
    atomic_write_bytes(path, data)
    return path
