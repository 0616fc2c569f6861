"""The figures of the score decomposition by band (repo_lens.plots.bands): the bands study's band-usage map (its
cells the summary's dominant bands and sink mass, its two colour bars apart on screen and in a paper) and the
attention of one head under the actual, content-only, position-only and integer patterns (the span summary's
means); both exported as vector PDF and SVG whose text never overlaps at the smallest venue width."""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest

import repo_lens
from repo_lens.analysis import score_decomposition
from repo_lens.errors import InputError
from repo_lens.model.tiny import tiny_model
from repo_lens.plots import attention_split_figure, band_usage_figure, export, figure_bytes, paper_figure
from repo_lens.plots.paper import paper_target

HAVE_EXPORT = bool(shutil.which("chromium") or shutil.which("google-chrome")) and bool(shutil.which("rsvg-convert"))
needs_export = pytest.mark.skipif(not HAVE_EXPORT and not os.environ.get("CI"),
                                  reason="no Chromium or rsvg-convert (make browser installs them); required in CI")
FREQUENCIES = [1.0, 0.1, 0.01, 0.001]


def _summary(n_layers: int = 3, n_heads: int = 4) -> dict:
    """A bands summary as summarize_bands writes it: the last layer biases (no bands)."""
    rng = np.random.default_rng(0)
    dominant = rng.integers(0, 4, size=(n_layers, n_heads)).tolist()
    dominant[-1] = [None] * n_heads
    dominant[0][1] = None  # a head without a position part
    return {"layers": [2 * layer for layer in range(n_layers)],
            "layer_kinds_measured": ["rope"] + ["repo"] * (n_layers - 2) + ["fox"],
            "dominant_position_band_by_layer_head": dominant, "n_bands": 4,
            "sink_mass_by_layer_head": rng.uniform(0.0, 1.0, size=(n_layers, n_heads)).round(3).tolist(),
            "band_frequencies_by_layer_head": [[FREQUENCIES] * n_heads] * (n_layers - 1) + [[[]] * n_heads]}


@pytest.fixture(scope="module")
def span_frame():
    lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
    found = score_decomposition(lens, list(range(10, 50)), 2, queries=[37, 38, 39], keys=list(range(37)))
    return found.span_summary({"first": (0, 1), "needle": (8, 14), "query": (25, 37)})


def test_the_band_map_shows_the_dominant_band_and_the_sink_per_layer_and_head():
    summary = _summary()
    fig = band_usage_figure(summary)
    bands, sink = fig.data
    expected = np.array([[np.nan if value is None else value for value in row]
                         for row in summary["dominant_position_band_by_layer_head"]])
    np.testing.assert_array_equal(np.asarray(bands.z, dtype=float), expected)  # NaN: an empty cell
    np.testing.assert_array_equal(np.asarray(sink.z, dtype=float), summary["sink_mass_by_layer_head"])
    assert list(bands.y) == ["L0 rope", "L2 repo", "L4 fox"] and list(sink.x) == ["h0", "h1", "h2", "h3"]
    wavelengths = np.asarray(bands.customdata, dtype=float)
    for (layer, head), band in np.ndenumerate(expected):
        wanted = 2 * math.pi / FREQUENCIES[int(band)] if np.isfinite(band) else np.nan
        np.testing.assert_allclose(wavelengths[layer, head], wanted)
    assert (bands.coloraxis, sink.coloraxis) == ("coloraxis", "coloraxis2")
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, 3)
    assert (fig.layout.coloraxis2.cmin, fig.layout.coloraxis2.cmax) == (0.0, 1.0)
    _assert_bars_apart(fig)


def _assert_bars_apart(fig):
    """The band panel's colour bar sits between the panels, the sink's at the right of the second."""
    first, second = fig.layout.xaxis.domain, fig.layout.xaxis2.domain
    assert first[1] <= fig.layout.coloraxis.colorbar.x < second[0] < second[1] <= fig.layout.coloraxis2.colorbar.x


@pytest.mark.parametrize("layout", ["acl-column", "two-column"])
def test_in_a_paper_the_first_colour_bar_keeps_its_place_between_the_panels(layout):
    fig = paper_figure(band_usage_figure(_summary(16, 16)), layout)
    assert fig.layout.width == paper_target(layout).width_px and not fig.layout.title.text
    _assert_bars_apart(fig)


def test_a_summary_that_is_not_the_bands_studys_is_refused():
    with pytest.raises(InputError, match="takes the bands study's summary"):
        band_usage_figure([[0, 1]])
    with pytest.raises(InputError, match="lacks sink_mass_by_layer_head"):
        band_usage_figure({key: value for key, value in _summary().items() if key != "sink_mass_by_layer_head"})
    with pytest.raises(InputError, match="one row of heads per measured layer"):
        band_usage_figure({**_summary(), "layers": [0, 1]})


def test_the_split_bars_are_the_span_summarys_means_over_the_query_rows(span_frame):
    fig = attention_split_figure(span_frame, head=1, spans=["needle", "query", "rest", "first"])
    assert [bar.name for bar in fig.data] == ["actual", "content", "position", "integers"]
    rows = span_frame[span_frame["head"] == 1]
    for bar, pattern in zip(fig.data, ["actual", "content", "position", "reference"]):
        assert list(bar.x) == ["needle", "query", "rest", "first"]
        expected = [rows[rows.span == span][pattern].mean() for span in bar.x]
        np.testing.assert_allclose(bar.y, expected, rtol=1e-6)  # float32 scores, averaged in float64
    # the four spans cover every key the rows see: each pattern's bars add up to the mass on those keys
    every = rows[rows.span == "all"]
    np.testing.assert_allclose(sum(np.asarray(fig.data[0].y)), every["actual"].mean(), rtol=1e-6)
    per_token = attention_split_figure(span_frame, head=1, per_token=True)
    assert list(per_token.data[0].x) == ["first", "needle", "query", "rest"]  # the summary's order, "all" left out
    needle = rows[rows.span == "needle"]
    assert per_token.data[0].y[1] == pytest.approx((needle["actual"] / needle["keys"]).mean())
    assert "layer 2, head 1" in fig.layout.title.text and fig.layout.meta["kind"] == "attention_split"


def test_bad_split_inputs_name_what_to_pass(span_frame):
    with pytest.raises(InputError, match="takes ScoreDecomposition.span_summary"):
        attention_split_figure({"head": [0]}, head=0)
    with pytest.raises(InputError, match=r"head 7 is not in this span summary; it has heads \[0, 1, 2, 3\]"):
        attention_split_figure(span_frame, head=7)
    with pytest.raises(InputError, match="spans \\['haystack'\\] are not in the span summary"):
        attention_split_figure(span_frame, head=0, spans=["needle", "haystack"])


@pytest.mark.browser
@needs_export
def test_both_figures_export_as_vector_pdf_and_svg_whose_text_never_overlaps(span_frame, tmp_path):
    from repo_lens.plots.measure import measure_svgs, overlapping_pairs

    figures = {"band_usage": band_usage_figure(_summary(16, 16)),
               "attention_split": attention_split_figure(span_frame, head=0, spans=["needle", "query", "rest", "first"])}
    for name, figure in figures.items():
        pdf = export(figure, tmp_path / f"{name}.pdf", layout="acl-column").read_bytes()
        assert pdf.startswith(b"%PDF-") and len(pdf) > 2000 and b"/Type /Font" in pdf.replace(b"/Type/Font", b"/Type /Font")
        assert export(figure, tmp_path / f"{name}.svg", layout="acl-column").read_text().lstrip().startswith(("<svg", "<?xml"))
    laid_out = [paper_figure(figure, "acl-column") for figure in figures.values()]
    for name, figure, svg in zip(figures, laid_out, measure_svgs([figure_bytes(one, "svg") for one in laid_out])):
        assert (svg.width_px, svg.height_px) == (291, figure.layout.height), name
        assert not overlapping_pairs(svg.boxes), f"{name}: {overlapping_pairs(svg.boxes)[:3]}"
        sizes = sorted({box.font_pt for box in svg.boxes})
        assert 5.0 <= sizes[0] and sizes[-1] <= 10.0, f"{name}: text from {sizes[0]} to {sizes[-1]} pt"
