"""Read an exported PDF as a reviewer would: page size, the text it shows and at what size, the fonts it
embeds, and which of the figure's characters it lost (needs PyMuPDF: ``pip install pymupdf``).

A figure's characters are those of its SVG export's ``<text>`` elements; a PDF that draws the figure
whole shows every one of them inside its page. A character is *cut* when the PDF lacks it, when its
box leaves the page, or when the page's clipping hides it.

Example:
    >>> svg_text(b'<svg xmlns="http://www.w3.org/2000/svg"><text>a b</text><text><tspan>c</tspan></text></svg>')
    'abc'
"""

from __future__ import annotations

import re
import unicodedata
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from repo_lens.errors import InputError

EDGE_TOLERANCE_PT = 0.5  # a glyph box may reach this far past the page edge (its side bearing), not further


@dataclass(frozen=True)
class PdfFont:
    """One font of a PDF: its name, PDF type (TrueType, Type0, Type1, Type3 ...) and embedded file type."""

    name: str
    type: str
    embedded: str  # PyMuPDF's extension of the font file: "ttf", "cff", "otf", "pfa" ...; "n/a" when not embedded

    @property
    def ok_for_print(self) -> bool:
        """Embedded and an outline font (a Type 3 font is what camera-ready checks reject)."""
        return self.embedded != "n/a" and self.type != "Type3"


@dataclass
class PdfText:
    """What one PDF page shows: its size, the characters it draws with their sizes, and its fonts."""

    width_pt: float
    height_pt: float
    chars: str
    sizes: list[float]
    fonts: list[PdfFont]
    outside: str = ""  # characters whose box leaves the page
    clipped: str = ""  # characters the page's clipping hides
    missing: str = field(default="")  # characters of the figure that the PDF lacks (set by :func:`read_pdf`)

    @property
    def cut(self) -> int:
        """How many of the figure's characters do not show whole: lost, outside the page, or clipped."""
        return len(self.missing) + len(self.outside) + len(self.clipped)

    @property
    def smallest_pt(self) -> float:
        return min(self.sizes, default=0.0)

    @property
    def largest_pt(self) -> float:
        return max(self.sizes, default=0.0)

    @property
    def font_names(self) -> list[str]:
        """The fonts' names without their subset tag ("ABCDEF+")."""
        return sorted({re.sub(r"^[A-Z]{6}\+", "", font.name) for font in self.fonts})


def svg_text(svg: bytes) -> str:
    """Every character of the SVG's ``<text>`` elements, whitespace left out."""
    try:
        root = ElementTree.fromstring(svg)
    except ElementTree.ParseError as error:
        raise InputError(f"not an SVG document: {error}") from None
    texts = [element for element in root.iter() if element.tag.rsplit("}", 1)[-1] == "text"]
    text = "".join(re.sub(r"\s+", "", "".join(element.itertext())) for element in texts)
    return "".join(char for char in text if unicodedata.category(char) != "Cf")  # no zero-width marks


def read_pdf(data: bytes, expected: str | None = None) -> PdfText:
    """The first page of ``data`` (a PDF) as :class:`PdfText`; with ``expected`` (e.g. :func:`svg_text` of
    the same figure) the characters of it that the page lacks are in ``missing``."""
    import pymupdf

    document = pymupdf.open(stream=data, filetype="pdf")
    page = document[0]
    area = page.rect
    shown = _chars(page, pymupdf.TEXT_CLIP | pymupdf.TEXT_MEDIABOX_CLIP | pymupdf.TEXT_ACCURATE_BBOXES)
    every = _chars(page, pymupdf.TEXT_ACCURATE_BBOXES)
    outside = "".join(char for char, _, box in every if not _inside(box, area))
    clipped = "".join((Counter(char for char, _, _ in every) - Counter(char for char, _, _ in shown)).elements())
    fonts = [PdfFont(name, kind, extension) for _, extension, kind, name, *_ in document.get_page_fonts(0)]
    text = PdfText(area.width, area.height, "".join(char for char, _, _ in every),
                   sorted({round(size, 2) for _, size, _ in every}), fonts, outside, clipped)
    if expected is not None:
        lacking = Counter(re.sub(r"\s+", "", expected)) - Counter(text.chars)
        text.missing = "".join(sorted(lacking.elements()))
    return text


def _chars(page, flags: int) -> list[tuple[str, float, tuple[float, float, float, float]]]:
    out = []
    for block in page.get_text("rawdict", flags=flags)["blocks"]:
        for line in block.get("lines", []):
            for span in line["spans"]:
                out += [(char["c"], span["size"], char["bbox"]) for char in span["chars"] if not char["c"].isspace()]
    return out


def _inside(box: tuple[float, float, float, float], area) -> bool:
    x0, y0, x1, y1 = box
    return (x0 >= area.x0 - EDGE_TOLERANCE_PT and y0 >= area.y0 - EDGE_TOLERANCE_PT
            and x1 <= area.x1 + EDGE_TOLERANCE_PT and y1 <= area.y1 + EDGE_TOLERANCE_PT)


def largest_empty_band(data: bytes, plot: tuple[float, float] | None = None, dpi: int = 144) -> float:
    """The tallest run of blank rows (nothing drawn across the page's width) of the PDF's first page, as a
    share of its height: a band above, between or below the parts of a figure that holds nothing. With
    ``plot`` = (top, bottom) of the plotting area as shares of the height, its rows count as drawn (space
    inside a plot belongs to the data)."""
    import numpy as np
    import pymupdf

    pixmap = pymupdf.open(stream=data, filetype="pdf")[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    grey = np.frombuffer(pixmap.samples, dtype=np.uint8).reshape(pixmap.height, pixmap.stride)[:, :pixmap.width]
    blank = cast("np.ndarray", (grey >= 250).all(axis=1))  # [rows]
    if plot is not None:
        blank[int(plot[0] * len(blank)):int(np.ceil(plot[1] * len(blank)))] = False
    longest = run = 0
    for empty in blank.tolist():
        run = run + 1 if empty else 0
        longest = max(longest, run)
    return longest / max(1, len(blank))


def plot_rows(fig) -> tuple[float, float]:
    """(top, bottom) of a laid-out plotly figure's plotting area as shares of its height, from its margins."""
    height = float(fig.layout.height)
    return fig.layout.margin.t / height, 1 - fig.layout.margin.b / height
