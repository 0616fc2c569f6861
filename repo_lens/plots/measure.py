"""Measure the text of exported SVG figures in Chromium: each text element's box and font size.

Used to check figures for papers (every text element 5–10 pt, none overlapping another): the
SVGs are laid out in one headless Chromium page (the same browser that renders the exports), which
reports each ``<text>`` element's bounding box in the SVG's own pixels, transforms included.
Plotly's SVG pixels are CSS pixels (96 per inch) and its PDFs are 0.75 pt per pixel, so a font
of ``s`` px prints at ``0.75 s`` pt.

Example:
    >>> boxes = [TextBox("a", "xtick", 0, 0, 10, 10, 8.0), TextBox("b", "xtick", 5, 2, 10, 10, 8.0)]
    >>> len(overlapping_pairs(boxes)), len(overlapping_pairs(boxes[:1]))
    (1, 0)
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repo_lens.errors import InputError

PT_PER_PX = 0.75
MEASURE_TIMEOUT_S = 120.0
# Two boxes overlap when they share more than this many pixels both across and down: text boxes are
# em boxes (ascent to descent), so neighbouring lines of a legend may touch without ink overlapping.
OVERLAP_TOLERANCE_PX = 1.0

_SCRIPT = """
<script>
const out = [];
for (const svg of document.querySelectorAll('body > div > svg')) {
  const base = svg.getBoundingClientRect();
  const boxes = [];
  for (const text of svg.querySelectorAll('text')) {
    const content = text.textContent.trim();
    const style = getComputedStyle(text);
    const box = text.getBoundingClientRect();
    if (!content || box.width <= 0 || style.display === 'none' || style.visibility === 'hidden'
        || parseFloat(style.opacity) === 0 || parseFloat(style.fillOpacity) === 0) continue;
    let kind = text.getAttribute('class') || '';
    if (!kind && text.parentElement) kind = text.parentElement.getAttribute('class') || '';
    // the text's own box (rotated text stays a rotated rectangle) in the SVG's pixels
    const local = text.getBBox();
    const toSvg = svg.getScreenCTM().inverse().multiply(text.getScreenCTM());
    const corners = [[local.x, local.y], [local.x + local.width, local.y],
                     [local.x + local.width, local.y + local.height], [local.x, local.y + local.height]]
      .map(([x, y]) => { const p = new DOMPoint(x, y).matrixTransform(toSvg); return [p.x, p.y]; });
    boxes.push([content, kind, box.left - base.left, box.top - base.top, box.width, box.height,
                parseFloat(style.fontSize), corners]);
  }
  let plot = 0;  // the plotting areas' width: plotly clips each subplot's data to one rect
  for (const rect of svg.querySelectorAll('clipPath.plotclip rect')) plot += parseFloat(rect.getAttribute('width'));
  out.push({width: svg.getAttribute('width'), height: svg.getAttribute('height'), plot: plot, boxes: boxes});
}
document.body.innerHTML = '<pre id="measured">' + JSON.stringify(out).replace(/&/g, '&amp;')
  .replace(/</g, '&lt;') + '</pre>';
</script>
"""


@dataclass(frozen=True)
class TextBox:
    """One drawn text element: its text, plotly's class for it (``xtick``, ``legendtext``, ...), its
    upright bounding box in the SVG's pixels (left, top, width, height), its font size in points and
    the corners of its own box (a rotated rectangle for rotated text; None: the upright box)."""

    text: str
    kind: str
    left: float
    top: float
    width: float
    height: float
    font_pt: float
    corners: tuple[tuple[float, float], ...] | None = None

    def polygon(self) -> np.ndarray:
        if self.corners is not None:
            return np.asarray(self.corners, dtype=np.float64)
        return np.array([[self.left, self.top], [self.right, self.top], [self.right, self.bottom],
                         [self.left, self.bottom]], dtype=np.float64)

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


@dataclass(frozen=True)
class SvgText:
    """An SVG's size in pixels, the summed width of its plotting areas (subplots) and the boxes of its text elements."""

    width_px: float
    height_px: float
    plot_width_px: float
    boxes: tuple[TextBox, ...]

    @property
    def plot_share(self) -> float:
        """The share of the width the plotting areas take (legends, colour bars and labels take the rest)."""
        return self.plot_width_px / self.width_px

    @property
    def smallest_pt(self) -> float:
        return min((box.font_pt for box in self.boxes), default=float("nan"))

    @property
    def largest_pt(self) -> float:
        return max((box.font_pt for box in self.boxes), default=float("nan"))


def overlapping_pairs(boxes: Sequence[TextBox], tolerance_px: float = OVERLAP_TOLERANCE_PX) -> list[tuple[TextBox, TextBox]]:
    """Pairs of text boxes that overlap by more than ``tolerance_px``: their (possibly rotated) boxes,
    each shrunk by ``tolerance_px`` / 2 on every side, still intersect."""
    ordered = sorted(boxes, key=lambda box: box.left)
    polygons = {id(box): _shrunk(box.polygon(), tolerance_px / 2) for box in ordered}
    pairs = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.left >= a.right - tolerance_px:
                break
            if min(a.bottom, b.bottom) - max(a.top, b.top) > tolerance_px and _intersect(polygons[id(a)], polygons[id(b)]):
                pairs.append((a, b))
    return pairs


def _shrunk(corners: np.ndarray, by: float) -> np.ndarray:
    """A rectangle's corners moved ``by`` pixels inwards along both of its sides (no less than to its centre)."""
    centre = corners.mean(axis=0)
    out = corners.copy()
    for axis in (corners[1] - corners[0], corners[3] - corners[0]):
        length = float(np.hypot(*axis))
        if length > 0:
            unit = axis / length
            offset = (corners - centre) @ unit  # each corner's distance from the centre along this side
            out -= np.outer(np.sign(offset) * np.minimum(np.abs(offset), by), unit)
    return out


def _intersect(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex polygons overlap (separating axis theorem; touching is not overlapping)."""
    for polygon in (a, b):
        for i in range(len(polygon)):
            edge = polygon[(i + 1) % len(polygon)] - polygon[i]
            normal = np.array([-edge[1], edge[0]])
            if not normal.any():
                continue
            pa, pb = a @ normal, b @ normal
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return False
    return True


def measure_svgs(svgs: Sequence[bytes | str], *, browser: str | None = None,
                 timeout: float = MEASURE_TIMEOUT_S) -> list[SvgText]:
    """Lay the ``svgs`` out in one headless Chromium page and return, for each, its size and the
    boxes of its visible, non-empty text elements."""
    from repo_lens.plots.export import ExportError, export_unavailable, find_browser

    browser = browser or find_browser()
    if browser is None:
        raise ExportError(export_unavailable() or "no Chromium found")
    texts = [svg.decode("utf-8") if isinstance(svg, bytes) else str(svg) for svg in svgs]
    if not all(text.lstrip().startswith("<svg") for text in texts):
        raise InputError("measure_svgs needs SVG documents (bytes or str starting with <svg)")
    page = ("<!doctype html><html><head><meta charset='utf-8'><style>body{margin:0} div{margin:0 0 8px 0}"
            "</style></head><body>" + "".join(f"<div>{text}</div>" for text in texts) + _SCRIPT + "</body></html>")
    with tempfile.TemporaryDirectory(prefix="repo-lens-measure-") as folder:
        path = Path(folder) / "page.html"
        path.write_text(page, encoding="utf-8")
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--mute-audio",
             f"--user-data-dir={folder}/profile", "--dump-dom", path.as_uri()],
            capture_output=True, timeout=timeout, check=False)
    found = re.search(rb'<pre id="measured">(.*?)</pre>', done.stdout, flags=re.S)
    if found is None:
        raise ExportError(f"Chromium measured nothing (exit {done.returncode}): {done.stderr.decode()[-400:]}")
    import html

    measured = json.loads(html.unescape(found.group(1).decode("utf-8")))
    return [SvgText(float(item["width"]), float(item["height"]), float(item["plot"]),
                    tuple(TextBox(text, kind, left, top, width, height, round(size * PT_PER_PX, 3),
                                  tuple(tuple(point) for point in corners))
                          for text, kind, left, top, width, height, size, corners in item["boxes"]))
            for item in measured]

