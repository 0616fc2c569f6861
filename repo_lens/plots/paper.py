"""Sizes and fonts for figures that go into papers.

Plotly measures in CSS pixels (96 per inch); kaleido's PDF pages are in points (72 per inch), so
a 312-pixel-wide figure is a 234-point (3.25-inch) PDF — one column of a two-column paper.
"""

from __future__ import annotations

import plotly.graph_objects as go

from repo_lens.errors import InputError
from repo_lens.plots.style import FONT_FAMILY
from repo_lens.validation import check_positive_number

PX_PER_INCH = 96
# text widths of common templates: one column of a two-column paper (ACL, ICML, NeurIPS-style
# two-column), and the full text width
PAPER_LAYOUTS: dict[str, float] = {"one-column": 3.25, "two-column": 6.75}


def paper_figure(fig: go.Figure, layout: str = "one-column", aspect: float = 0.62, font_pt: float = 8.0) -> go.Figure:
    """A copy of ``fig`` sized for ``layout`` (width in inches from PAPER_LAYOUTS, height = aspect ×
    width) with ``font_pt``-point text in the shared font stack (DejaVu Sans + WenQuanYi for CJK),
    tight margins and the title moved into the caption (papers put titles there).

    Example:
        >>> fig = paper_figure(go.Figure(go.Bar(y=[1, 2])), "two-column")
        >>> fig.layout.width, fig.layout.height, round(fig.layout.font.size, 2)
        (648, 402, 10.67)
    """
    if not isinstance(fig, go.Figure):
        raise InputError(f"paper_figure needs a plotly Figure (from a repo_lens.plots builder), got {type(fig).__name__}")
    if not isinstance(layout, str) or layout not in PAPER_LAYOUTS:
        raise InputError(f"unknown paper layout {layout!r}; use one of {', '.join(PAPER_LAYOUTS)}")
    font_pt = check_positive_number(font_pt, "font_pt")
    if not 0.1 <= check_positive_number(aspect, "aspect") <= 3.0:
        raise InputError(f"aspect {aspect} is out of range; pass height/width between 0.1 and 3")
    width = round(PAPER_LAYOUTS[layout] * PX_PER_INCH)
    font_px = font_pt * PX_PER_INCH / 72
    sized = go.Figure(fig)
    sized.update_layout(
        width=width, height=round(width * aspect), title=None, template="plotly_white",
        font=dict(family=FONT_FAMILY, size=font_px, color="#000000"),
        margin=dict(l=int(5 * font_px), r=int(font_px), t=int(1.5 * font_px), b=int(4 * font_px)),
        legend=dict(font=dict(size=font_px * 0.9)),
    )
    return sized
