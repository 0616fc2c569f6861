"""Paper PDFs read as a reviewer reads them (PyMuPDF, not the SVG): for every builder at three presets the
page is the figure, every character of the figure shows inside it, text is at the stated sizes and fonts
are embedded outlines; the faces asked for or an error naming their package; classes and colour scales
apart in greyscale; heatmaps as vector cells; and the PDFs placed in a two-column LaTeX article."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from repo_lens.plots import PaperStyle, boundary_auc_figure, export, figure_bytes, paper_figure, start_export_server
from repo_lens.plots.export import ExportError
from repo_lens.plots.gallery import example_figures, synthetic_trace
from repo_lens.plots.paper import paper_target
from repo_lens.plots.pdf_export import FACES, PdfExportError, check_fonts, crisp_heatmaps, encode_png, svg_to_pdf
from repo_lens.plots.pdf_measure import largest_empty_band, plot_rows, read_pdf, svg_text
from repo_lens.plots.style import PATTERN_COLORS, SPAN_COLORS, lightness

pytestmark = pytest.mark.latex

pymupdf = pytest.importorskip("pymupdf", reason="PyMuPDF reads the PDFs (pip install pymupdf; in the dev extra)")
REQUIRED = bool(os.environ.get("CI"))
HAVE_EXPORT = bool(shutil.which("chromium") or shutil.which("google-chrome")) and bool(shutil.which("rsvg-convert"))
needs_export = pytest.mark.skipif(not HAVE_EXPORT and not REQUIRED,
                                  reason="no Chromium or rsvg-convert (make browser installs them); required in CI")
LAYOUTS = ("icml-column", "icml-text", "acl-column")
SIZE_TOLERANCE = 0.03
EMPTY_BAND = 0.05


@pytest.fixture(scope="module")
def pdfs():
    """(builder, layout, laid-out figure, the characters of its SVG, its PDF) for every builder and layout."""
    start_export_server()
    figures = example_figures(synthetic_trace(4, 4, 120))
    out = []
    for layout in LAYOUTS:
        for name, figure in figures.items():
            laid_out = paper_figure(figure, layout)
            svg = figure_bytes(laid_out, "svg")
            out.append((name, layout, laid_out, svg_text(svg), svg_to_pdf(svg, "sans")))
    return out


def stated_sizes(font_pt: float) -> list[float]:
    target = paper_target(font_pt=font_pt)
    return [target.font_pt, *(px * 0.75 for px in (target.tick_px, target.small_px))]


@needs_export
def test_every_builder_prints_whole_at_its_stated_sizes_in_embedded_outline_fonts(pdfs):
    for name, layout, figure, expected, data in pdfs:
        pdf = read_pdf(data, expected)
        where = f"{name} at {layout}"
        assert pdf.width_pt == pytest.approx(paper_target(layout).width_px * 0.75, abs=0.5), where
        assert pdf.height_pt == pytest.approx(figure.layout.height * 0.75, abs=0.5), where
        assert expected and not pdf.missing, f"{where}: the PDF lacks {pdf.missing!r}"
        assert not pdf.outside and not pdf.clipped, f"{where}: {pdf.outside + pdf.clipped!r} leave the page"
        allowed = stated_sizes(8.0)  # log axes too: their labels are one text ("1e−3"), no superscript
        for size in pdf.sizes:
            assert min(abs(size / stated - 1) for stated in allowed) <= SIZE_TOLERANCE, f"{where}: {size} pt"
        assert pdf.fonts and all(font.ok_for_print for font in pdf.fonts), f"{where}: {pdf.fonts}"
        assert any(face.startswith("DejaVuSans") for face in pdf.font_names), where
        assert_no_empty_band(data, figure, where)
    assert any(axis.type == "log" for _, _, figure, _, _ in pdfs for axis in figure.select_yaxes()), "no log axis read"


def assert_no_empty_band(data: bytes, figure, where: str, dpi: int = 144) -> None:
    """No blank band over 5 % of the height outside the plot, give or take one raster row of the measure
    (plotly's legend rows are at least 19 px apart, so 9 px text leaves 11 px between two rows)."""
    band = largest_empty_band(data, plot_rows(figure), dpi=dpi)
    row = 1 / (figure.layout.height * 0.75 * dpi / 72)
    assert band <= EMPTY_BAND + row, f"{where}: a band of {band:.1%} outside the plot holds nothing"


@needs_export
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_legend_of_many_heads_takes_the_rows_plotly_draws(layout):
    from repo_lens.plots import position_scatter_figure

    start_export_server()
    scatter = position_scatter_figure(synthetic_trace(4, 16, 120), layer=3, head="all",
                                      highlight={"needle": (12, 20), "query": (80, 95)})  # as the gallery draws it
    figure = paper_figure(scatter, layout)
    assert len(figure.data) >= 16
    assert_no_empty_band(svg_to_pdf(figure_bytes(figure, "svg"), "sans"), figure, f"16 heads at {layout}")


def test_value_labels_share_one_precision_and_categories_read_as_words():
    from repo_lens.plots import category_increments_figure

    figures = example_figures(synthetic_trace(2, 2, 60))
    texts = [str(text) for trace in figures["attention_mass_figure"].data for text in trace.text]
    assert len({len(text.split(".")[1]) for text in texts}) == 1, texts
    bars = category_increments_figure([{"cjk_lead": 1.2, "continuation": 0.8, "space": 1.0}])
    assert list(bars.data[0].x) == ["CJK lead", "continuation", "space"]


@needs_export
def test_export_writes_the_pdf_the_svg_converts_to(pdfs, tmp_path):
    name, layout, figure, expected, data = pdfs[0]
    written = export(example_figures(synthetic_trace(4, 4, 120))[name], tmp_path / "f.pdf", layout=layout)
    assert read_pdf(written.read_bytes(), expected).chars == read_pdf(data).chars


@needs_export
@pytest.mark.parametrize("font", ["serif", "cm"])
def test_serif_and_cm_embed_their_faces_as_outlines(font, tmp_path):
    figure = example_figures(synthetic_trace(2, 2, 60))["range_heatmap"]
    pdf = read_pdf(export(figure, tmp_path / "f.pdf", layout="icml-column", paper=PaperStyle(font=font)).read_bytes())
    names, _ = FACES[font]
    assert any(face.replace("-", "").startswith(names) for face in pdf.font_names), pdf.font_names
    assert all(font.ok_for_print for font in pdf.fonts) and not any(f.type == "Type3" for f in pdf.fonts)


@needs_export
def test_a_missing_face_or_converter_is_an_error_naming_the_package(pdfs, monkeypatch):
    sans_pdf = pdfs[0][4]  # drawn in DejaVu Sans: what a machine without Latin Modern would give for cm
    with pytest.raises(PdfExportError, match="fonts-lmodern"):
        check_fonts(sans_pdf, "cm")
    with pytest.raises(PdfExportError, match="fonts-liberation"):
        check_fonts(sans_pdf, "serif")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ExportError, match="librsvg2-bin"):
        figure_bytes(pdfs[0][2], "pdf")


def grey_at(page, rects) -> list[float]:
    """L* of the greyscale rendering at the centre of each rectangle."""
    pixmap = page.get_pixmap(dpi=150, colorspace=pymupdf.csGRAY)
    scale = 150 / 72
    out = []
    for rect in rects:
        value = pixmap.pixel(int((rect.x0 + rect.x1) / 2 * scale), int((rect.y0 + rect.y1) / 2 * scale))[0]
        out.append(lightness(f"#{value:02x}{value:02x}{value:02x}"))
    return out


def filled_rects(page, color: str) -> list:
    rgb = tuple(int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return [d["rect"] for d in page.get_drawings()
            if d.get("fill") and np.allclose(d["fill"], rgb, atol=1.5 / 255) and d["rect"].width > 0.5]


@needs_export
def test_classes_print_as_greys_at_least_20_apart(pdfs):
    for palette in (PATTERN_COLORS, SPAN_COLORS):
        for a, b in itertools.combinations(palette.values(), 2):
            assert abs(lightness(a) - lightness(b)) >= 20, (a, b)
    strip = next(data for name, layout, _, _, data in pdfs if name == "pattern_strip_figure")
    page = pymupdf.open(stream=strip, filetype="pdf")[0]
    greys = {}
    for name, color in PATTERN_COLORS.items():
        rects = filled_rects(page, color)
        if rects:
            greys[name] = grey_at(page, rects[:1])[0]
    assert len(greys) >= 2, "the strip shows at least two chunk classes as vector cells"
    for a, b in itertools.combinations(greys.values(), 2):
        assert abs(a - b) >= 18, greys  # MuPDF's grey (0.3 R + 0.59 G + 0.11 B) is near, not equal to, L*


@needs_export
def test_the_auc_scale_prints_darker_to_lighter_with_the_value(tmp_path):
    auc = np.linspace(0.0, 1.0, 9).reshape(1, 9)
    data = export(boundary_auc_figure(auc, ["repo"], n_scored=100), tmp_path / "auc.pdf", layout="icml-column").read_bytes()
    page = pymupdf.open(stream=data, filetype="pdf")[0]
    assert not page.get_images(), "heatmap cells are vector shapes, not a bitmap"
    cells = sorted((d["rect"] for d in page.get_drawings() if d.get("fill") and 4 < d["rect"].width < 60
                    and d["rect"].height > 4), key=lambda rect: rect.x0)
    cells = [rect for rect in cells if rect.y0 == pytest.approx(cells[0].y0, abs=1)][:9]
    assert len(cells) == 9
    greys = grey_at(page, cells)
    assert all(later > earlier + 3 for earlier, later in zip(greys, greys[1:])), greys


@needs_export
def test_heatmaps_are_vector_cells_without_grid_lines(pdfs):
    for name, layout, figure, _, data in pdfs:
        if name in ("layer_head_heatmap", "range_heatmap", "pattern_strip_figure") and layout == "icml-column":
            page = pymupdf.open(stream=data, filetype="pdf")[0]
            assert not page.get_images(), name
            cells = np.size(figure.data[0].z)
            assert sum(1 for d in page.get_drawings() if d.get("fill")) >= cells, name
            assert not any(axis.showgrid for axis in [*figure.select_xaxes(), *figure.select_yaxes()]), name


def test_a_finer_bitmap_stays_a_bitmap_of_at_least_300_ppi_drawn_without_smoothing(monkeypatch):
    import base64

    from repo_lens.plots import pdf_export

    pixels = np.zeros((4, 50, 4), dtype=np.uint8)
    pixels[..., 3] = 255
    pixels[:, ::2, 0] = 255  # 50 one-pixel columns, red and black by turns: 50 runs
    svg = (f'<image preserveAspectRatio="none" height="4" width="50" x="0" y="0" '
           f'xlink:href="data:image/png;base64,{base64.b64encode(encode_png(pixels)).decode()}"></image>')
    assert crisp_heatmaps(svg).count("<rect") == 50
    monkeypatch.setattr(pdf_export, "MAX_CELLS", 10)
    enlarged = crisp_heatmaps(svg)
    assert "image-rendering:pixelated" in enlarged
    data = base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", enlarged).group(1))
    width = int.from_bytes(data[16:20], "big")
    assert width / (50 / 96) >= 300


LATEX = r"""\documentclass[twocolumn,10pt]{article}
\usepackage[letterpaper,textwidth=6.75in,columnsep=0.25in]{geometry}
\usepackage{times}
\usepackage{graphicx}
\begin{document}
%s
\end{document}
"""


@needs_export
def test_a_two_column_latex_article_prints_every_figure_whole(pdfs, tmp_path):
    if shutil.which("pdflatex") is None:
        if REQUIRED:
            pytest.fail("pdflatex is missing (make browser installs texlive-latex-base)")
        pytest.skip("no pdflatex (Debian texlive-latex-base; make browser installs it)")
    column = [(name, expected, data) for name, layout, _, expected, data in pdfs if layout == "icml-column"]
    body = []
    for index, (name, _, data) in enumerate(column):
        (tmp_path / f"f{index}.pdf").write_bytes(data)
        body.append(f"\\begin{{figure}}[h]\\includegraphics[width=\\columnwidth]{{f{index}.pdf}}"
                    f"\\caption{{{name.replace('_', ' ')}}}\\end{{figure}}")
    (tmp_path / "paper.tex").write_text(LATEX % "\n".join(body))
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    document = pymupdf.open(tmp_path / "paper.pdf")
    text = "".join(re.sub(r"\s+", "", page.get_text()) for page in document)
    for name, expected, _ in column:
        assert not (set(expected) - set(text)), f"{name}: {set(expected) - set(text)} missing in the article"
    fonts = {font[3]: font for page in range(len(document)) for font in document.get_page_fonts(page)}
    assert all(font[1] != "n/a" and font[2] != "Type3" for font in fonts.values()), fonts
    sizes = {round(size, 1) for page in document for block in page.get_text("dict")["blocks"]
             for line in block.get("lines", []) for span in line["spans"] if span["font"].startswith(("DejaVu",))
             for size in [span["size"]]}
    allowed = stated_sizes(8.0)
    assert sizes and all(min(abs(size / stated - 1) for stated in allowed) <= SIZE_TOLERANCE for size in sizes), sizes
