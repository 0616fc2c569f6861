"""Issue 15: figures at the published model's shape (16 layers × 16 heads × 4,096 tokens) stay readable
and small: no label over another in a row, every token a mark or counted by the mark of its pixel
column, zoom and highlight, JSON ≤ 3 MB."""

from __future__ import annotations

import html
import unicodedata

import numpy as np
import pytest

from repo_lens import InputError
from repo_lens.analysis import AttentionMass, chunk_patterns, pattern_fractions, range_stats
from repo_lens.model.registry import kind_index, mechanism_kinds
from repo_lens.plots import (
    PATTERN_COLORS,
    SpacedTokensStyle,
    attention_mass_figure,
    pattern_fractions_figure,
    pattern_strip_figure,
    position_scatter_figure,
    range_heatmap,
    spaced_tokens_figure,
)
from repo_lens.plots.labels import place_labels
from repo_lens.plots.style import KIND_PALETTE, escape_tokens, kind_color
from repo_lens.trace import Trace

BUDGET = 3_000_000
FONT = 14


def big_trace(n_layers: int = 16, n_heads: int = 16, n_tokens: int = 4096, seed: int = 0) -> Trace:
    """RoPE rows, then random-walk rows with a few far outliers; tokens cycle through letters and CJK."""
    rng = np.random.default_rng(seed)
    z = np.empty((n_layers, n_heads, n_tokens), dtype=np.float32)
    z[:5] = np.arange(n_tokens)
    z[5:] = rng.normal(0.3, 1.0, size=(n_layers - 5, n_heads, n_tokens)).cumsum(-1)
    z[5:, :, ::301] -= 150.0
    alphabet = list("abcdefghij klmnop") + ["中", "<b>", "WWW"]
    tokens = [alphabet[i % len(alphabet)] for i in range(n_tokens)]
    return Trace(tokens=tokens, token_ids=np.arange(n_tokens) % 256, positions=z,
                 layer_kinds=[mechanism_kinds()[0]] * 5 + [mechanism_kinds()[2]] * (n_layers - 5))


@pytest.fixture(scope="module")
def trace() -> Trace:
    return big_trace()


def width_px(text: str) -> float:
    """The test's own estimate: 1 em per wide (CJK) character, 0.65 em per other character."""
    shown = html.unescape(text)
    return FONT * max(0.65, sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.65 for c in shown))


def rows_of(fig) -> dict[int, object]:
    return {d.meta["layer"]: d for d in fig.data if isinstance(d.meta, dict) and "layer" in d.meta}


def labels_of(fig) -> dict[int, tuple[np.ndarray, list[str]]]:
    """Per layer: the x and text of every label drawn (the row itself when it is all text)."""
    out = {layer: (np.asarray(row.x, dtype=float), list(row.text))
           for layer, row in rows_of(fig).items() if row.mode == "text"}
    for d in fig.data:
        if isinstance(d.meta, dict) and "labels_of_layer" in d.meta:
            out[d.meta["labels_of_layer"]] = (np.asarray(d.x, dtype=float), list(d.text))
    return out


def assert_no_overlap(fig) -> int:
    low, high = fig.layout.xaxis.range
    plot_px = fig.layout.width - fig.layout.margin.l - fig.layout.margin.r
    drawn = 0
    for layer, (x, text) in labels_of(fig).items():
        centre = (x - low) * plot_px / (high - low)
        half = np.array([width_px(t) / 2 for t in text])
        order = np.argsort(centre)
        left, right = (centre - half)[order], (centre + half)[order]
        assert (left[1:] >= right[:-1]).all(), f"layer {layer}: labels overlap"
        drawn += len(x)
    return drawn


def test_labels_never_overlap_in_a_row_at_4096_tokens(trace):
    fig = spaced_tokens_figure(trace, head=3, scale="shared")
    drawn = assert_no_overlap(fig)
    assert 16 * 2 <= drawn < 16 * 4096  # words labelled in every row, not every token
    text = "".join(html.unescape(token) for token in trace.tokens)
    for layer, (x, labels) in labels_of(fig).items():
        assert len(x) >= 2, f"layer {layer} has {len(x)} labels"
        assert all(html.unescape(label) in text for label in labels), f"layer {layer}: {labels}"


@pytest.mark.parametrize("n_tokens", [30, 300])
def test_labels_never_overlap_at_short_lengths(n_tokens):
    trace = big_trace(n_layers=6, n_heads=2, n_tokens=n_tokens, seed=1)
    for scale in ("row", "shared"):
        assert_no_overlap(spaced_tokens_figure(trace, head=1, scale=scale))


def test_every_token_is_a_mark_or_counted_by_the_mark_of_its_pixel_column(trace):
    fig = spaced_tokens_figure(trace, head=0)
    rows = rows_of(fig)
    assert sorted(rows) == list(range(16))
    low, high = fig.layout.xaxis.range
    column = 2 * (high - low) / (fig.layout.width - fig.layout.margin.l - fig.layout.margin.r)  # 2 pixels
    for layer, row in rows.items():
        assert row.mode == "markers" and row.marker.opacity == 0 and "%{text}" in row.hovertemplate
        drawn = np.asarray(row.customdata)[:, 0].astype(int)
        assert len(drawn) <= 1100 / 2 + 1 and row.type == "scatter"  # at most one mark per 2-pixel column: SVG
        # the positions the row is drawn at (rescaled per layer), computed here from the trace
        z = trace.positions[layer, 0].astype(np.float64)
        x = (z - z.min()) / (z.max() - z.min())
        columns = np.floor(x / column)
        np.testing.assert_allclose(np.asarray(row.x, dtype=float), x[drawn], atol=1e-6)
        counts = {c: n for c, n in zip(*np.unique(columns, return_counts=True))}
        assert set(columns[drawn]) == set(counts)  # every occupied column has its mark
        for token, text in zip(drawn, row.text):
            n = counts[columns[token]]
            assert text.startswith(escape_tokens([trace.tokens[token]])[0])
            assert (f"+{n - 1} more tokens here" in text) == (n > 1)


def test_zooming_into_a_range_labels_tokens_that_were_not_labelled_there(trace):
    whole = spaced_tokens_figure(trace, head=0, scale="shared")
    low, high = 1000.0, 1100.0
    zoomed = spaced_tokens_figure(trace, head=0, scale="shared", style=SpacedTokensStyle(x_range=(low, high)))
    assert tuple(zoomed.layout.xaxis.range) == (low, high)
    assert_no_overlap(zoomed)
    for layer in range(5):  # the RoPE rows: x = token index, so the range holds tokens 1000..1100
        before_x, _ = labels_of(whole)[layer]
        after_x, _ = labels_of(zoomed)[layer]
        before = set(before_x[(before_x >= low) & (before_x <= high)].round().astype(int).tolist())
        after = set(after_x.round().astype(int).tolist())
        assert all(low <= x <= high for x in after)
        assert len(after - before) >= 3 and len(after) > 2 * len(before)  # whole words, 10 to 24 tokens long


@pytest.mark.parametrize("token, k", [(2048, 3), (0, 2), (4095, 5)])
def test_highlight_marks_the_token_and_its_neighbours_in_every_layer(trace, token, k):
    fig = spaced_tokens_figure(trace, head=2, highlight=(token, k))
    expected = set(range(max(0, token - k), min(4096, token + k + 1)))
    (rings,) = [d for d in fig.data if d.name == "highlighted tokens"]
    index, row = np.asarray(rings.customdata), np.asarray(rings.y)
    for layer in range(16):
        assert sorted(index[row == layer].tolist()) == sorted(expected)
    # connectors only for the highlighted tokens: one polyline through the 16 rows each, then a gap
    (lines,) = [d for d in fig.data if d.name == "connectors"]
    x = np.asarray(lines.x, dtype=float).reshape(len(expected), 17)
    rows = rows_of(fig)
    for slot, t in enumerate(sorted(expected)):
        at = [dict(zip(np.asarray(rows[layer].customdata)[:, 0].astype(int).tolist(), rows[layer].x))[t]
              for layer in range(16)]  # every highlighted token keeps its own mark
        np.testing.assert_allclose(x[slot, :16], at, rtol=1e-6)
    assert np.isnan(x[:, 16]).all()
    assert_no_overlap(fig)


def test_highlight_outside_the_window_is_an_input_error(trace):
    with pytest.raises(InputError, match="outside the shown tokens 100..199"):
        spaced_tokens_figure(trace, window=(100, 200), highlight=(50, 2))
    with pytest.raises(InputError, match="k must be >= 0"):
        spaced_tokens_figure(trace, highlight=(50, -1))


def test_connectors_without_highlight_are_few(trace):
    fig = spaced_tokens_figure(trace, head=0)
    (lines,) = [d for d in fig.data if d.name == "connectors"]
    x = np.asarray(lines.x, dtype=float)
    segments = int((np.isfinite(x[1:]) & np.isfinite(x[:-1])).sum())
    assert 0 < segments <= 200


def test_greedy_placement_is_maximal_and_never_overlapping():
    rng = np.random.default_rng(4)
    for _ in range(20):
        x = rng.uniform(0, 10, size=200)
        widths = rng.uniform(5, 40, size=200)
        chosen = place_labels(x, widths, (0.0, 10.0), 600.0, gap_px=0.0)
        left, right = x * 60 - widths / 2, x * 60 + widths / 2
        kept = np.flatnonzero(chosen)
        for i in kept:
            for j in kept:
                assert i == j or right[i] <= left[j] or right[j] <= left[i]
        for i in np.flatnonzero(~chosen):  # each label left out collides with a label drawn
            assert ((left[kept] < right[i]) & (left[i] < right[kept])).any()


def mass_16x16() -> AttentionMass:
    values = {"needle": 0.05, "query": 0.02, "rest": 9e-4}
    return AttentionMass(per_token=values, by_layer_head={k: np.full((16, 16), v) for k, v in values.items()},
                         span_lengths={"needle": 12, "query": 30, "rest": 4000}, query=(4090, 4096),
                         self_mass=np.zeros((16, 16)), layers=list(range(16)))


def test_every_figure_json_is_at_most_3_mb_at_16_x_16_x_4096(trace):
    patterns = chunk_patterns(trace.positions)
    figures = {
        "spaced tokens": spaced_tokens_figure(trace, head=0, patterns=patterns[:, 0]),
        "spaced tokens, mean, highlight": spaced_tokens_figure(trace, head="mean", patterns=patterns[:, 0],
                                                               highlight=(2000, 8)),
        "scatter": position_scatter_figure(trace, 8, "all", highlight={"needle": (2000, 2012)}),
        "range heatmap": range_heatmap(range_stats(trace.positions), trace.layer_kinds),
        "pattern fractions": pattern_fractions_figure(pattern_fractions(patterns), trace.layer_kinds),
        "pattern strip": pattern_strip_figure(patterns[:, 0], 16, tokens=trace.tokens),
        "attention mass": attention_mass_figure(mass_16x16()),
    }
    sizes = {name: len(fig.to_json()) for name, fig in figures.items()}
    assert max(sizes.values()) <= BUDGET, sizes


def test_the_published_shape_trace_plots_within_budget(published_shape_trace):
    fig = spaced_tokens_figure(published_shape_trace, head=5)
    assert len(fig.to_json()) <= BUDGET
    assert len(rows_of(fig)) == 16
    assert_no_overlap(fig)


def annotation_boxes(fig) -> list[tuple[float, float, float, str]]:
    """(left px, right px, yshift, text) of each annotation, by the test's own width estimate."""
    low, high = fig.layout.xaxis.range
    plot_px = fig.layout.width - 100 - 140  # margins, and room for a legend of heads
    boxes = []
    for note in fig.layout.annotations:
        width = 12 * 0.65 * len(note.text) + 4
        at = (note.x - low) * plot_px / (high - low)
        left = at - width if note.xanchor == "right" else at
        boxes.append((left, left + width, note.yshift or 0, note.text))
    return boxes


@pytest.mark.parametrize("n_tokens", [120, 4096])
def test_scatter_span_names_do_not_collide(n_tokens):
    trace = big_trace(n_layers=6, n_heads=4, n_tokens=n_tokens)
    end = n_tokens
    # a NIAH prompt's spans: question inside query, answer right after it, the needle alone
    spans = {"needle": (n_tokens // 2, n_tokens // 2 + 5), "question": (end - 30, end - 12),
             "query": (end - 30, end - 6), "answer": (end - 6, end)}
    fig = position_scatter_figure(trace, 5, "all", highlight=spans)
    boxes = annotation_boxes(fig)
    assert sorted(text for *_, text in boxes) == sorted(spans)
    for i, (a0, a1, ashift, atext) in enumerate(boxes):
        for b0, b1, bshift, btext in boxes[i + 1:]:
            if ashift == bshift:
                assert a1 <= b0 or b1 <= a0, f"{atext} and {btext} overlap on one line"
    assert len({shift for *_, shift, _ in boxes}) >= 2  # the three names at the end are stacked
    assert all(-0.5 <= note.x <= n_tokens - 0.5 for note in fig.layout.annotations)


def rgb(color: str) -> np.ndarray:
    return np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)


def test_no_kind_colour_equals_or_resembles_a_pattern_colour():
    kind_colors = {kind_color(kind) for kind in mechanism_kinds()} | set(KIND_PALETTE)
    assert not kind_colors & set(PATTERN_COLORS.values())
    for kind in kind_colors:
        for pattern, color in PATTERN_COLORS.items():
            assert np.linalg.norm(rgb(kind) - rgb(color)) >= 60, (kind, pattern, color)
    assert len(set(PATTERN_COLORS.values())) == 3
    assert all(kind_index(kind) < len(KIND_PALETTE) for kind in mechanism_kinds())
