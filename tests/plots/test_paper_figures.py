"""Figures for papers, checked on what is exported: every public builder at the smallest venue preset
gives an SVG of the requested size whose text is 5–10 pt with no two text elements overlapping
(measured in Chromium on the SVG); PDFs embed their fonts; PNGs have the chosen dpi; presets, free
widths, aspect and fonts reach the file; series stay apart without colour."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from repo_lens import InputError, plots
from repo_lens.plots import (PAPER_PRESETS, PaperStyle, export, figure_bytes, layer_series_figure, paper_figure,
                             position_scatter_figure, spaced_tokens_figure, start_export_server)
from repo_lens.plots.gallery import example_figures, synthetic_trace
from repo_lens.plots.measure import measure_svgs, overlapping_pairs
from repo_lens.plots.paper import PX_PER_INCH, paper_target

HAVE_CHROMIUM = any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))
needs_chromium = pytest.mark.skipif(not HAVE_CHROMIUM and not os.environ.get("CI"),
                                    reason="no Chromium (make browser installs it); required in CI")
SMALLEST = min(PAPER_PRESETS, key=lambda name: PAPER_PRESETS[name].width_in)
MIN_PT, MAX_PT = 5.0, 10.0
FEW_ROWS = ("spaced_tokens_figure", "range_heatmap", "pattern_fractions_figure", "pattern_strip_figure")
LEAST_PLOT_SHARE = {"boundary_auc_figure": 0.45,  # its layer labels carry each layer's mean
                    "band_usage_figure": 0.5,  # two panels, a colour bar each
                    "variance_shares_figure": 0.55}  # four panels side by side, gaps between them
GALLERY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "gallery.md"
# functions of repo_lens.plots that return a figure but are no builders of their own
NOT_BUILDERS = {"paper_figure": "re-lays out a figure it is given",
                "trace_figure": "draws a trace with one of the builders, chosen by name"}


def public_builders() -> set[str]:
    """Every function repo_lens.plots exports that returns a figure, less :data:`NOT_BUILDERS`."""
    returns_figure = {name for name in plots.__all__ if inspect.isfunction(getattr(plots, name))
                      and inspect.signature(getattr(plots, name)).return_annotation in ("go.Figure", go.Figure)}
    assert set(NOT_BUILDERS) <= returns_figure, "NOT_BUILDERS names a function that is gone or draws no figure"
    return returns_figure - set(NOT_BUILDERS)


@pytest.mark.slow
def test_the_gallery_draws_every_public_figure_builder():
    figures = example_figures(synthetic_trace(4, 4, 120))
    assert all(isinstance(figure, go.Figure) and figure.data for figure in figures.values())
    assert {name.split(" ")[0] for name in figures} == public_builders()


def test_the_gallery_page_shows_every_public_figure_builder():
    builders = public_builders()
    assert {"band_usage_figure", "char_spacing_figure", "spaced_tokens_figure"} <= builders
    page = GALLERY_PAGE.read_text(encoding="utf-8")
    shown = set(re.findall(r"^\| `(\w+)`", page, flags=re.M))
    assert shown == builders, f"docs/gallery.md lacks {sorted(builders - shown)} (run python docs/gallery.py)"
    for image in re.findall(r"\]\((gallery/[\w-]+\.(?:png|pdf))\)", page):
        assert (GALLERY_PAGE.parent / image).is_file(), f"docs/gallery.md shows {image}, which is missing"


@pytest.fixture(scope="module")
def exported():
    """(name, laid-out figure, measured SVG) of every builder's example at the smallest preset: the
    published shape (16 layers × 16 heads) and, for the figures with a row per layer, 4 layers."""
    start_export_server()
    cases = [(name, figure) for name, figure in example_figures(synthetic_trace(16, 16, 250)).items()]
    cases += [(f"{name} (4 layers)", figure) for name, figure in example_figures(synthetic_trace(4, 4, 250)).items()
              if name in FEW_ROWS]
    laid_out = [(name, paper_figure(figure, SMALLEST)) for name, figure in cases]
    svgs = [figure_bytes(figure, "svg") for _, figure in laid_out]
    return [(name, figure, measured) for (name, figure), measured in zip(laid_out, measure_svgs(svgs))]


def test_the_smallest_preset_is_acl_one_column():
    assert SMALLEST == "acl-column" and paper_target(SMALLEST).width_px == round(7.7 / 2.54 * PX_PER_INCH) == 291


@pytest.mark.browser
@needs_chromium
def test_every_builder_at_the_smallest_preset_has_the_size_and_readable_text_that_never_overlaps(exported):
    assert {name.split(" ")[0] for name, _, _ in exported} == public_builders()
    problems = []
    for name, figure, svg in exported:
        assert (svg.width_px, svg.height_px) == (291, figure.layout.height), name
        assert len(svg.boxes) >= 8, f"{name}: only {len(svg.boxes)} text elements drawn"
        sizes = sorted({box.font_pt for box in svg.boxes})
        if not (MIN_PT <= sizes[0] and sizes[-1] <= MAX_PT):
            problems.append(f"{name}: text from {sizes[0]} to {sizes[-1]} pt")
        for a, b in overlapping_pairs(svg.boxes):
            problems.append(f"{name}: {a.kind} {a.text[:20]!r} overlaps {b.kind} {b.text[:20]!r}")
    assert not problems, "\n".join(problems[:20])


@needs_chromium
def test_legends_and_colour_bars_leave_the_plot_most_of_the_width(exported):
    for name, _, svg in exported:
        least = LEAST_PLOT_SHARE.get(name.split(" ")[0], 0.6)
        assert svg.plot_share >= least, f"{name}: the plot has {svg.plot_share:.0%} of the width"
    scatter = next(figure for name, figure, _ in exported if name == "position_scatter_figure")
    assert scatter.layout.legend.orientation == "h" and scatter.layout.legend.yanchor == "top"


@needs_chromium
def test_spaced_tokens_are_labelled_again_for_the_paper_width_with_marks_for_the_rest(exported):
    screen = spaced_tokens_figure(synthetic_trace(16, 16, 250), head=0)
    paper = next(figure for name, figure, _ in exported if name == "spaced_tokens_figure")
    labelled = paper.layout.meta["labelled"]
    assert 0 < sum(labelled) < sum(screen.layout.meta["labelled"])  # fewer labels at 3 in than at 1,100 px
    marks = [shape for shape in paper.layout.shapes if (shape.name or "").startswith("marks of layer")]
    assert len(marks) == 16
    low, high = paper.layout.xaxis.range
    plot = paper.layout.width - paper.layout.margin.l - paper.layout.margin.r
    for trace in paper.data:
        if isinstance(trace.meta, dict) and "labels_of_layer" in trace.meta:
            assert trace.textfont.size == pytest.approx(paper_target(SMALLEST).small_px)
            centre = (np.asarray(trace.x, dtype=float) - low) / (high - low) * plot
            assert (centre >= 0).all() and (centre <= plot).all()
    assert paper.layout.height > next(f for n, f, _ in exported if n == "attention_mass_figure").layout.height


def test_paper_layout_labels_spaced_tokens_again_at_the_paper_width_and_type_size():
    """Without a browser: the rows read back from the screen figure and drawn again at 291 px, with fewer labels
    (at the paper's small type size, none past the plot's edges) in every row."""
    from repo_lens.plots.spaced_tokens_paper import paper_layout

    figure = spaced_tokens_figure(synthetic_trace(4, 4, 120), head=0)
    screen = list(figure.layout.meta["labelled"])
    target = paper_target(SMALLEST)
    paper_layout(figure, target)
    meta = figure.layout.meta
    assert (meta["width"], meta["paper"]) == (291, SMALLEST) and len(meta["labelled"]) == len(screen) == 4
    assert all(0 < paper <= on_screen for paper, on_screen in zip(meta["labelled"], screen))
    assert sum(meta["labelled"]) < sum(screen)
    low, high = figure.layout.xaxis.range
    labels = [trace for trace in figure.data if isinstance(trace.meta, dict) and "labels_of_layer" in trace.meta]
    assert [len(trace.x) for trace in labels] == meta["labelled"]
    for trace in labels:
        assert trace.textfont.size == pytest.approx(target.small_px)
        assert low <= min(trace.x) and max(trace.x) <= high


def pdf_objects(data: bytes) -> dict[int, bytes]:
    """The PDF's objects by number, their dictionaries as written (Chromium writes no object streams)."""
    assert b"/ObjStm" not in data, "objects in compressed streams: read them with a PDF library"
    return {int(number): body for number, body in re.findall(rb"(\d+) 0 obj(.*?)endobj", data, flags=re.S)}


@needs_chromium
def test_pdf_embeds_its_fonts_and_has_the_paper_size(tmp_path):
    trace = synthetic_trace(4, 2, 120)
    trace.tokens[5:9] = list("人工智能")
    data = export(spaced_tokens_figure(trace, head=0), tmp_path / "spaced.pdf", layout="icml-column",
                  paper=PaperStyle(font="serif")).read_bytes()
    width = float(re.search(rb"/MediaBox\s*\[\s*0 0 ([0-9.]+)", data).group(1))
    assert width == pytest.approx(3.25 * 72, abs=1.0)
    objects = pdf_objects(data)
    fonts = [body for body in objects.values() if re.search(rb"/Type\s*/Font\b", body)]
    descriptors = [body for body in objects.values() if re.search(rb"/Type\s*/FontDescriptor", body)]
    faces = {name for body in fonts for name in re.findall(rb"/BaseFont\s*/([\w+-]+)", body)}
    assert len(descriptors) >= 2 and len(faces) >= 2  # a Latin and a CJK face at least
    assert all(re.search(rb"/FontFile[23]?\s", body) for body in descriptors), "a font is not embedded"
    for body in fonts:  # every simple or CID font has a descriptor; a composite (Type0) font has one through its CID font
        if not re.search(rb"/Subtype\s*/(Type0|Type3)", body):
            assert b"/FontDescriptor" in body, body[:200]
    assert all(re.match(rb"[A-Z]{6}\+", face) for face in faces)  # subsets: the glyphs the figure uses


@needs_chromium
def test_png_has_the_chosen_dpi(tmp_path):
    fig = layer_series_figure({"a": [0.5, 0.6], "b": [0.4, 0.7]}, "AUC", "t", reference=0.5)
    for dpi in (300, 150):
        data = export(fig, tmp_path / f"f{dpi}.png", layout="icml-column", **({} if dpi == 300 else {"dpi": dpi})).read_bytes()
        width = struct.unpack(">I", data[16:20])[0]
        assert width == pytest.approx(3.25 * dpi, abs=2)
        per_metre = struct.unpack(">I", data[data.index(b"pHYs") + 4:][:4])[0]
        assert per_metre == round(dpi / 0.0254)


@needs_chromium
def test_presets_free_widths_aspect_and_font_reach_the_svg():
    fig = layer_series_figure({"a": [0.5, 0.6]}, "AUC", "t")
    for layout, inches in (("neurips", 5.5), ("iclr", 5.5), ("acl-text", 16 / 2.54), ("3.3in", 3.3),
                           ("240pt", 240 / 72.27), ("8.5cm", 8.5 / 2.54)):
        sized = paper_figure(fig, layout, aspect=0.5, font="cm")
        assert (sized.layout.width, sized.layout.height) == (round(inches * 96), round(round(inches * 96) * 0.5))
    svg = figure_bytes(paper_figure(fig, "icml-text", font="serif", font_pt=9), "svg").decode()
    assert re.search(r'<svg[^>]* width="648"', svg) and "Nimbus Roman" in svg
    assert re.search(r"font-size: 12px", svg)  # 9 pt axis titles


def test_line_and_scatter_series_differ_in_more_than_colour():
    fig = layer_series_figure({name: [0.5, 0.6, 0.55] for name in "abcdefgh"}, "AUC", "t")
    looks = {(trace.line.dash, trace.marker.symbol) for trace in fig.data}
    assert len(looks) == 8 and all(trace.line.color != "#F0E442" for trace in fig.data)  # no yellow line
    scatter = position_scatter_figure(synthetic_trace(2, 8, 60), 1, "all")
    assert len({trace.marker.symbol for trace in scatter.data}) == 8
    bars = paper_figure(example_figures(synthetic_trace(4, 2, 60))["category_increments_figure"], "one-column")
    grey = [np.dot([0.299, 0.587, 0.114], [int(c) for c in re.findall(r"\d+", trace.marker.color)[:3]]) for trace in bars.data]
    assert len(grey) == 4 and np.all(np.diff(grey) > 25)  # dark to light: apart in greyscale


def test_heatmap_values_stay_only_where_they_fit():
    shares = example_figures(synthetic_trace(4, 16, 60))["layer_head_heatmap"]  # values such as "0.53"
    wide, narrow = paper_figure(shares, "two-column"), paper_figure(shares, "acl-column")
    assert wide.data[0].texttemplate and not narrow.data[0].texttemplate  # 16 heads fit 6.75 in, not 3.03 in
    assert narrow.layout.xaxis.ticktext == ("h0", "h3", "h6", "h9", "h12", "h15")  # every 3rd head named


@pytest.mark.parametrize("call,message", [
    (lambda fig: paper_figure(fig, "poster"), "unknown paper layout 'poster'; use one of icml-column"),
    (lambda fig: paper_figure(fig, "12in"), "paper width '12in' (12.00 in) is out of range; pass 1.5 to 10 in"),
    (lambda fig: paper_figure(fig, "3.3 furlongs"), "or a width with a unit such as '3.3in'"),
    (lambda fig: paper_figure(fig, font="comic"), "unknown font 'comic'; use one of sans, serif, cm"),
    (lambda fig: paper_figure(fig, font_pt=20), "font_pt 20 is out of range; pass 5 to 12 points"),
    (lambda fig: paper_figure(fig, aspect=5), "aspect 5 is out of range; pass height/width between 0.1 and 3"),
    (lambda fig: export(fig, "/tmp/never.png", layout="one-column", dpi=10), "dpi 10 is out of range; pass 50 to 1200"),
    (lambda fig: export(fig, "/tmp/never.png", dpi=300, scale=2), "pass dpi (300) or scale (2), not both"),
    (lambda fig: export(fig, "/tmp/never.png", paper=PaperStyle(font="serif")), "pass layout= too"),
])
def test_bad_paper_options_are_refused_by_name_and_range(call, message):
    with pytest.raises(InputError) as caught:
        call(go.Figure(go.Bar(y=[1, 2])))
    assert message in str(caught.value)
    assert not os.path.exists("/tmp/never.png")


@needs_chromium
def test_reproduce_exports_its_figures_with_the_options_given(tmp_path):
    from repo_lens.cli import build_parser
    from repo_lens.studies.reproductions import reproduce
    from repo_lens.studies.reproductions.common import figure_options, figure_options_of, write_figures

    args = build_parser().parse_args(["reproduce", "range_stats", "--layout", "acl-column", "--font", "serif",
                                      "--aspect", "0.5", "--font-pt", "9"])
    options = figure_options_of(args)
    assert options == {"layout": "acl-column", "aspect": 0.5, "font_pt": 9.0, "font": "serif"}
    with figure_options(options):
        names, not_rendered = write_figures(tmp_path, {"bars": go.Figure(go.Bar(y=[1, 2]))})
    assert names == ["bars.pdf", "bars.svg"] and not not_rendered
    svg = (tmp_path / "bars.svg").read_text()
    assert re.search(r'<svg[^>]* width="291" height="146"', svg) and "Nimbus Roman" in svg
    with pytest.raises(InputError, match="unknown paper layout 'poster'"):  # refused before any study runs
        reproduce(["range_stats"], tmp_path / "run", figure_options={"layout": "poster"}, progress=False)
    assert not (tmp_path / "run" / "range_stats").exists()
