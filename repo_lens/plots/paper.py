"""Sizes and fonts for figures that go into papers: the venues' column and text widths, or any width.

Plotly measures in CSS pixels (96 per inch); kaleido's PDF pages are in points (72 per inch), so
a 312-pixel-wide figure is a 234-point (3.25-inch) PDF: one column of a two-column paper.

The presets are the widths the venues' current LaTeX style files set (``\\textwidth`` for a figure
across the page, ``(\\textwidth − \\columnsep) / 2`` for one column of a two-column layout):

=================  ========  ===================================================================
preset             width     source
=================  ========  ===================================================================
``icml-column``    3.25 in   icml2025.sty: ``\\textwidth 6.75in``, ``\\columnsep 0.25in``
``icml-text``      6.75 in   icml2025.sty: ``\\textwidth 6.75in``
``neurips``        5.5 in    neurips_2025.sty: geometry ``textwidth=5.5in`` (one column)
``iclr``           5.5 in    iclr2025_conference.sty: ``\\textwidth 5.5in`` (one column)
``acl-column``     3.03 in   acl.sty (ACL, EMNLP, NAACL, EACL): A4 with 2.5 cm margins (16 cm of
                             text), ``\\columnsep 0.6cm``: a 7.7 cm column
``acl-text``       6.30 in   acl.sty: 16 cm
``one-column``     3.25 in   generic two-column paper (US letter, as ICML): one column
``two-column``     6.75 in   generic two-column paper: both columns (a ``figure*``)
=================  ========  ===================================================================

Any other width is a string with a unit: ``"3.3in"``, ``"240pt"`` (TeX points, 72.27 per inch, as
``\\the\\columnwidth`` prints them), ``"8.5cm"``, ``"85mm"``.

Math in labels: MathJax is off (exports work offline), so write it with plotly's HTML subset and
Unicode, e.g. ``fig.update_yaxes(title_text="<i>z</i><sub>t</sub> − <i>z</i><sub>t−1</sub>")`` or
``"mean increment δ"``; it is drawn in the figure's font and embedded in the PDF like any other text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from repo_lens.errors import InputError
from repo_lens.plots.style import CM_FAMILY, FONT_FAMILY, SERIF_FAMILY
from repo_lens.validation import check_positive_number

PX_PER_INCH = 96
PT_PER_INCH = 72  # PostScript points: the PDF's unit, and what a figure's font sizes are stated in


@dataclass(frozen=True)
class PaperPreset:
    """A venue's figure width in inches and where it comes from."""

    width_in: float
    source: str


PAPER_PRESETS: dict[str, PaperPreset] = {
    "icml-column": PaperPreset(3.25, "icml2025.sty: \\textwidth 6.75in, \\columnsep 0.25in -> (6.75 - 0.25) / 2"),
    "icml-text": PaperPreset(6.75, "icml2025.sty: \\textwidth 6.75in"),
    "neurips": PaperPreset(5.5, "neurips_2025.sty: geometry textwidth=5.5in, one column"),
    "iclr": PaperPreset(5.5, "iclr2025_conference.sty: \\textwidth 5.5in, one column"),
    "acl-column": PaperPreset(7.7 / 2.54, "acl.sty (ACL, EMNLP, NAACL, EACL): A4, margin=2.5cm -> 16.0 cm of text, "
                                          "\\columnsep 0.6cm -> (16.0 - 0.6) / 2 = 7.7 cm"),
    "acl-text": PaperPreset(16.0 / 2.54, "acl.sty: A4, margin=2.5cm -> 16.0 cm"),
    "one-column": PaperPreset(3.25, "generic two-column paper on US letter (as ICML): one column"),
    "two-column": PaperPreset(6.75, "generic two-column paper on US letter (as ICML): both columns"),
}
PAPER_LAYOUTS: dict[str, float] = {name: preset.width_in for name, preset in PAPER_PRESETS.items()}
"""Width in inches of each preset of :data:`PAPER_PRESETS`."""
FONT_FAMILIES: dict[str, str] = {"sans": FONT_FAMILY, "serif": SERIF_FAMILY, "cm": CM_FAMILY}
"""``font=`` choices: ``sans`` (DejaVu Sans), ``serif`` (Times, the body font of the ICML, NeurIPS, ICLR and
ACL templates) and ``cm`` (Latin Modern / Computer Modern, LaTeX's default); each with a CJK fallback."""
UNITS_PER_INCH = {"in": 1.0, "pt": 72.27, "bp": 72.0, "cm": 2.54, "mm": 25.4, "px": 96.0}
WIDTH_RANGE_IN = (1.5, 10.0)
FONT_PT_RANGE = (5.0, 12.0)
ASPECT_RANGE = (0.1, 3.0)
DEFAULT_FONT_PT = 8.0
PNG_DPI = 300


@dataclass(frozen=True)
class PaperTarget:
    """A figure's size and type for a paper: width, base font size (axis titles; tick labels and
    legends one point smaller, labels in the plot 1.5 points smaller, never below 5 pt), font
    family and, when given, height / width (else each figure's height suits its content)."""

    name: str
    width_in: float
    font_pt: float = DEFAULT_FONT_PT
    font: str = "sans"
    aspect: float | None = None

    @property
    def width_px(self) -> int:
        return round(self.width_in * PX_PER_INCH)

    @property
    def height_px(self) -> int | None:
        return None if self.aspect is None else round(self.width_px * self.aspect)

    @property
    def family(self) -> str:
        return FONT_FAMILIES[self.font]

    @staticmethod
    def px(points: float) -> float:
        """Points to plotly's pixels."""
        return points * PX_PER_INCH / PT_PER_INCH

    @property
    def text_px(self) -> float:
        return self.px(self.font_pt)

    @property
    def tick_px(self) -> float:
        return self.px(max(FONT_PT_RANGE[0], self.font_pt - 1.0))

    @property
    def small_px(self) -> float:
        return self.px(max(FONT_PT_RANGE[0], self.font_pt - 1.5))


def paper_target(layout: Any = "one-column", *, aspect: Any = None, font_pt: Any = DEFAULT_FONT_PT,
                 font: Any = "sans") -> PaperTarget:
    """The :class:`PaperTarget` of a preset name or a width with a unit, checked.

    Example:
        >>> paper_target("acl-column").width_px, paper_target("240pt", font="serif").width_px
        (291, 319)
    """
    name, width_in = _layout_width(layout)
    font_pt = check_positive_number(font_pt, "font_pt")
    if not FONT_PT_RANGE[0] <= font_pt <= FONT_PT_RANGE[1]:
        raise InputError(f"font_pt {font_pt:g} is out of range; pass {FONT_PT_RANGE[0]:g} to {FONT_PT_RANGE[1]:g} "
                         "points (the body text of most templates is 10 pt, figure text 7-9 pt)")
    if aspect is not None:
        aspect = check_positive_number(aspect, "aspect")
        if not ASPECT_RANGE[0] <= aspect <= ASPECT_RANGE[1]:
            raise InputError(f"aspect {aspect:g} is out of range; pass height/width between {ASPECT_RANGE[0]:g} and "
                             f"{ASPECT_RANGE[1]:g}, or None for a height that suits the figure")
    if not isinstance(font, str) or font not in FONT_FAMILIES:
        raise InputError(f"unknown font {font!r}; use one of {', '.join(FONT_FAMILIES)}")
    return PaperTarget(name, width_in, float(font_pt), font, aspect)


def _layout_width(layout: Any) -> tuple[str, float]:
    """(name, width in inches) of a preset name or a width such as "3.3in" / "240pt" / "8cm"."""
    if isinstance(layout, str) and layout in PAPER_PRESETS:
        return layout, PAPER_PRESETS[layout].width_in
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(in|pt|bp|cm|mm|px)\s*", layout) if isinstance(layout, str) else None
    if found is None:
        raise InputError(f"unknown paper layout {layout!r}; use one of {', '.join(PAPER_PRESETS)}, or a width with "
                         "a unit such as '3.3in', '240pt', '8.5cm', '85mm'")
    width_in = float(found.group(1)) / UNITS_PER_INCH[found.group(2)]
    low, high = WIDTH_RANGE_IN
    if not low <= width_in <= high:
        raise InputError(f"paper width {layout!r} ({width_in:.2f} in) is out of range; pass {low:g} to {high:g} in "
                         f"({low * 72.27:.0f} to {high * 72.27:.0f} pt)")
    return layout.strip(), width_in
