"""A figure's PDF made from its SVG: the page is the figure (no print margins, no scaling, nothing clipped),
text at the sizes the figure states, fonts embedded as TrueType / OpenType outlines, heatmaps as vector cells.

The SVG that Chromium draws (see :mod:`repo_lens.plots.export`) is converted by ``rsvg-convert`` (librsvg,
Debian package ``librsvg2-bin``), which runs offline and embeds each face as a TrueType or CFF subset.
Plotly paints a heatmap as a bitmap of one pixel per screen pixel; here each run of same-coloured pixels
becomes a rectangle, slightly overlapping its right and lower neighbours so no seam shows between cells.

Example:
    >>> cells = np.zeros((2, 3, 4), dtype=np.uint8); cells[..., 3] = 255; cells[:, 2, :3] = 200
    >>> [(x, y, w, h) for x, y, w, h, _ in pixel_runs(cells)]
    [(0, 0, 2, 2), (2, 0, 1, 2)]
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from typing import cast

import numpy as np

from repo_lens.errors import RepoLensError

CONVERTER = "rsvg-convert"
CONVERT_TIMEOUT_S = 120.0
MAX_CELLS = 40_000  # rectangles per heatmap image; a finer image stays a bitmap, enlarged to RASTER_PPI
RASTER_PPI = 300
SEAM_PX = 0.3  # how far a cell reaches under its right and lower neighbours
# the faces a ``font=`` choice must embed, by PostScript name, and the Debian package that installs one
FACES: dict[str, tuple[tuple[str, ...], str]] = {
    "sans": (("DejaVuSans",), "fonts-dejavu-core"),
    "serif": (("LiberationSerif", "NimbusRoman", "NimbusRomNo9L", "TeXGyreTermes", "TimesNewRoman"),
              "fonts-liberation"),
    "cm": (("LMRoman", "LatinModernRoman", "CMUSerif"), "fonts-lmodern"),
}
_IMAGE = re.compile(r'<image\b([^>]*?)xlink:href="data:image/png;base64,([A-Za-z0-9+/=]+)"([^>]*)>(?:</image>)?')


class PdfExportError(RepoLensError, RuntimeError):
    """The SVG could not be made into a print-ready PDF (converter or face missing, or a bitmap font)."""


def svg_to_pdf(svg: bytes, font: str | None = None) -> bytes:
    """The PDF of ``svg`` (a plotly SVG): one page of the SVG's size, heatmaps as vector cells; with ``font``
    ("sans", "serif", "cm") the PDF must embed that face, else :class:`PdfExportError` names its package."""
    converter = shutil.which(CONVERTER)
    if converter is None:
        raise PdfExportError(converter_missing())
    text = crisp_heatmaps(svg.decode("utf-8"))
    try:
        done = subprocess.run([converter, "--format", "pdf", "--dpi-x", "96", "--dpi-y", "96"], input=text.encode(),
                              capture_output=True, timeout=CONVERT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise PdfExportError(f"rsvg-convert took over {CONVERT_TIMEOUT_S:g} s on the figure; export SVG instead") from None
    if done.returncode != 0 or not done.stdout.startswith(b"%PDF"):
        raise PdfExportError(f"rsvg-convert failed ({done.returncode}): {done.stderr.decode(errors='replace')[:300]}")
    check_fonts(done.stdout, font, has_text="<text" in text)
    return done.stdout


def converter_missing() -> str | None:
    """Why PDF export cannot convert here (rsvg-convert missing, with the package to install), or None."""
    if shutil.which(CONVERTER) is not None:
        return None
    return ("PDF export needs rsvg-convert (librsvg): install it with `apt-get install librsvg2-bin` (Debian, "
            "Ubuntu; `make browser` in a source checkout), `brew install librsvg` (macOS) or your system's librsvg "
            "package; or export SVG instead")


def embedded_faces(pdf: bytes) -> list[str]:
    """The PostScript names of the fonts ``pdf`` uses, without subset tags (cairo writes them uncompressed)."""
    return sorted({name.decode() for name in re.findall(rb"/BaseFont\s*/(?:[A-Z]{6}\+)?([^\s/\[<>()]+)", pdf)})


def check_fonts(pdf: bytes, font: str | None, *, has_text: bool = True) -> None:
    """Refuse a PDF with a Type 3 (bitmap-like) font, or one that lacks the face ``font`` asks for."""
    if re.search(rb"/Subtype\s*/Type3", pdf):
        raise PdfExportError("the PDF would hold a Type 3 font, which print checks reject; the figure's font is "
                             "a bitmap font: pick another font= ('sans', 'serif', 'cm')")
    if font is None or not has_text or font not in FACES:
        return
    names, package = FACES[font]
    faces = embedded_faces(pdf)
    if not any(face.replace("-", "").startswith(names) for face in faces):
        raise PdfExportError(f"font={font!r} needs one of the faces {', '.join(names)}, but this machine drew the "
                             f"figure in {', '.join(faces) or 'no font'}: install the Debian package {package} "
                             f"(`apt-get install {package}`; `make browser` does) or that face from elsewhere")


def crisp_heatmaps(svg: str) -> str:
    """``svg`` with each embedded PNG bitmap (plotly's heatmaps) drawn as rectangles of its pixel runs, or,
    above :data:`MAX_CELLS` rectangles, enlarged without smoothing to :data:`RASTER_PPI` pixels per inch."""
    return _IMAGE.sub(_replace_image, svg)


def _replace_image(found: re.Match) -> str:
    attributes = found.group(1) + found.group(3)
    pixels = decode_png(base64.b64decode(found.group(2)))
    if pixels is None:
        return found.group(0)
    box = {name: float(value) for name, value in re.findall(r'\b(x|y|width|height)="([-\d.e]+)"', attributes)}
    x, y = box.get("x", 0.0), box.get("y", 0.0)
    width, height = box.get("width", pixels.shape[1]), box.get("height", pixels.shape[0])
    sx, sy = width / pixels.shape[1], height / pixels.shape[0]
    runs = pixel_runs(pixels)
    if len(runs) > MAX_CELLS:
        return _enlarged(found.group(0), pixels, cast(float, width))
    rects = []
    for col, row, cols, rows, rgba in runs:
        right = SEAM_PX if col + cols < pixels.shape[1] and pixels[row, col + cols, 3] else 0.0
        below = SEAM_PX if row + rows < pixels.shape[0] and pixels[row + rows, col, 3] else 0.0
        opacity = f' fill-opacity="{rgba[3] / 255:.3g}"' if rgba[3] < 255 else ""
        rects.append(f'<rect x="{x + col * sx:.3f}" y="{y + row * sy:.3f}" width="{cols * sx + right:.3f}" '
                     f'height="{rows * sy + below:.3f}" fill="#{rgba[0]:02x}{rgba[1]:02x}{rgba[2]:02x}"{opacity}/>')
    return f'<g shape-rendering="crispEdges">{"".join(rects)}</g>'


def _enlarged(element: str, pixels: np.ndarray, width_px: float) -> str:
    factor = max(1, int(np.ceil(RASTER_PPI / 96 * width_px / pixels.shape[1])))
    big = np.repeat(np.repeat(pixels, factor, axis=0), factor, axis=1)
    data = base64.b64encode(encode_png(big)).decode()
    element = re.sub(r"base64,[A-Za-z0-9+/=]+", "base64," + data, element)
    return element.replace("<image ", '<image style="image-rendering:pixelated" ', 1)


def pixel_runs(pixels: np.ndarray) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
    """(column, row, columns, rows, RGBA) of each run of same-coloured, not fully transparent pixels in
    ``pixels`` (rows × columns × 4): rows alike in every pixel share their runs."""
    out = []
    row = 0
    while row < pixels.shape[0]:
        band = row + 1
        while band < pixels.shape[0] and np.array_equal(pixels[band], pixels[row]):
            band += 1
        line = pixels[row]
        changes = np.flatnonzero(np.any(line[1:] != line[:-1], axis=1)) + 1
        for start, end in zip(np.r_[0, changes], np.r_[changes, line.shape[0]]):
            if line[start, 3]:
                out.append((int(start), row, int(end - start), band - row, tuple(int(v) for v in line[start])))
        row = band
    return out


def decode_png(data: bytes) -> np.ndarray | None:
    """A PNG as a rows × columns × 4 (RGBA) uint8 array; None when ``data`` is no PNG."""
    from PIL import Image

    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))


def encode_png(pixels: np.ndarray) -> bytes:
    """A rows × columns × 4 uint8 array as an RGBA PNG."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels), "RGBA").save(out, format="PNG")
    return out.getvalue()
