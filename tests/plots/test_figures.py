"""The figure builders draw what the data says: coordinates, clipping, colours, sampling."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from repo_lens import InputError
from repo_lens.analysis import AttentionMass, chunk_pattern_codes, chunk_patterns, pattern_fractions, range_stats
from repo_lens.plots import (
    FONT_FAMILY,
    ScatterStyle,
    SpacedTokensStyle,
    OKABE_ITO,
    PATTERN_COLORS,
    attention_mass_figure,
    attention_mass_layers_figure,
    boundary_auc_figure,
    iqr_bounds,
    iqr_outliers,
    pattern_fractions_figure,
    pattern_strip_figure,
    position_scatter_figure,
    range_heatmap,
    sample_indices,
    spaced_tokens_figure,
)
from repo_lens.trace import Trace


def make_trace(n_layers: int = 3, n_heads: int = 2, n_tokens: int = 40, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    z = np.empty((n_layers, n_heads, n_tokens), dtype=np.float32)
    z[0] = np.arange(n_tokens)  # a RoPE layer
    z[1:] = rng.normal(size=(n_layers - 1, n_heads, n_tokens)).cumsum(-1)
    tokens = [chr(ord("a") + i % 26) for i in range(n_tokens)]
    tokens[3] = "中"
    tokens[4] = "<b>"  # must be escaped for plotly's HTML-like text
    return Trace(tokens=tokens, token_ids=np.arange(n_tokens), positions=z,
                 layer_kinds=["rope"] + ["repo"] * (n_layers - 1))


def layer_traces(fig):
    return [d for d in fig.data if d.name and d.name.startswith("L")]


def path_commands(path: str) -> list[tuple[float, float, str, float]]:
    """A shape path of "M x,y V y2" (ticks) or "M x,y H x2" (strip bands) commands as (x, y, V/H, to)."""
    found = re.findall(r"M([-\d.e+]+),([-\d.e+]+)([VH])([-\d.e+]+)", path)
    assert "".join(f"M{x},{y}{c}{to}" for x, y, c, to in found) == path, "unexpected path commands"
    return [(float(x), float(y), c, float(to)) for x, y, c, to in found]


def test_spaced_tokens_x_equals_positions_with_shared_scale():
    trace = make_trace()
    for head in range(trace.n_heads):
        fig = spaced_tokens_figure(trace, head=head, scale="shared", style=SpacedTokensStyle(connect=False))
        rows = layer_traces(fig)
        assert [d.name for d in rows] == ["L0 rope", "L1 repo", "L2 repo"]
        for layer, row in enumerate(rows):
            np.testing.assert_array_equal(np.asarray(row.x, dtype=np.float32), trace.positions[layer, head])
            assert set(np.asarray(row.y).tolist()) == {layer}
            np.testing.assert_array_equal(np.asarray(row.customdata)[:, 1].astype(np.float32), trace.positions[layer, head])


def test_spaced_tokens_row_scale_maps_each_layer_to_unit_range_and_keeps_order():
    trace = make_trace()
    fig = spaced_tokens_figure(trace, head=1, scale="row")
    for layer, row in enumerate(layer_traces(fig)):
        x = np.asarray(row.x, dtype=float)
        z = trace.positions[layer, 1].astype(float)
        assert x.min() == pytest.approx(0.0) and x.max() == pytest.approx(1.0)
        np.testing.assert_allclose(x, (z - z.min()) / (z.max() - z.min()), rtol=1e-6)


def test_spaced_tokens_mean_head_window_labels_and_escaping():
    trace = make_trace()
    fig = spaced_tokens_figure(trace, head="mean", scale="shared", window=(2, 10))
    rows = layer_traces(fig)
    np.testing.assert_allclose(np.asarray(rows[1].x), trace.positions[1, :, 2:10].astype(float).mean(0), rtol=1e-6)
    assert list(rows[0].text)[1] == "中" and list(rows[0].text)[2] == "&lt;b&gt;"
    # the RoPE row's 8 evenly spaced tokens all fit on a 1,100 px figure: every one is labelled
    labels = [d for d in fig.data if (d.meta or {}).get("labels_of_layer") == 0]
    drawn = list(labels[0].text) if labels else list(rows[0].text)
    assert (labels[0].mode if labels else rows[0].mode) == "text" and drawn == list(rows[0].text)
    assert "WenQuanYi Micro Hei" in fig.layout.font.family == FONT_FAMILY


def test_spaced_tokens_connectors_follow_each_token_across_layers():
    trace = make_trace(n_tokens=12)
    fig = spaced_tokens_figure(trace, head=0, scale="shared")
    (lines,) = [d for d in fig.data if d.name == "connectors"]
    x = np.asarray(lines.x, dtype=float).reshape(12, 4)  # per token: L0, L1, L2, gap
    np.testing.assert_allclose(x[:, :3], trace.positions[:, 0].T, rtol=1e-6)
    assert np.isnan(x[:, 3]).all()


def test_spaced_tokens_hover_shows_the_trace_increments():
    """The hover's increment is repo_lens.analysis.trace_increments: a GRAPE-M layer's stored ω (its
    positions are an exclusive sum, so ω_t is not z_t − z_{t−1}), position differences elsewhere."""
    omega = np.array([[0.5, 2.0, 1.0, 3.0], [1.0, 1.0, 0.25, 0.5]], dtype=np.float32)
    z = np.stack([np.tile(np.arange(4, dtype=np.float32), (2, 1)), np.cumsum(omega, axis=-1) - omega])
    increments = np.stack([np.diff(z[0], prepend=0.0), omega]).astype(np.float32)
    trace = Trace(tokens=list("abcd"), token_ids=[97, 98, 99, 100], positions=z, layer_kinds=["rope", "grape-m"],
                  extras={"increments": increments})
    for head, expected in ((1, omega[1]), ("mean", omega.mean(axis=0))):
        fig = spaced_tokens_figure(trace, head=head, scale="shared", style=SpacedTokensStyle(connect=False))
        rows = {d.meta["layer"]: np.asarray(d.customdata, dtype=float) for d in fig.data if d.customdata is not None}
        np.testing.assert_allclose(rows[1][:, 2], expected, rtol=1e-6)
        np.testing.assert_array_equal(rows[0][:, 2], [np.nan, 1.0, 1.0, 1.0])


def test_spaced_tokens_pattern_strip_colours_tokens_by_their_chunk():
    trace = make_trace(n_tokens=40)
    codes = chunk_pattern_codes(trace.positions, size=8)[:, 0]
    fig = spaced_tokens_figure(trace, head=0, scale="shared", patterns=codes, style=SpacedTokensStyle(chunk_size=8))
    strips = {shape.name: shape for shape in fig.layout.shapes if shape.name.endswith("chunk")}
    labels = chunk_patterns(trace.positions, size=8)[:, 0]  # (layer, chunk)
    assert sorted(strips) == sorted(f"{name} chunk" for name in set(labels.ravel().tolist()))  # classes present
    low, high = fig.layout.xaxis.range
    half_band = 3 * (high - low) / (fig.layout.width - fig.layout.margin.l - fig.layout.margin.r)  # 6 px wide at least
    for name, strip in strips.items():
        assert strip.line.color == PATTERN_COLORS[name.split()[0]] and strip.showlegend
        bands = path_commands(strip.path)
        for layer in range(3):
            x = trace.positions[layer, 0, :40].astype(float)
            ours = np.repeat(labels[layer] == name.split()[0], 8)  # the tokens of this class in this row
            row_bands = [(a, b) for a, y, command, b in bands if command == "H" and y == pytest.approx(layer + 0.34)]
            covered = np.array([any(a - 1e-6 <= v <= b + 1e-6 for a, b in row_bands) for v in x])
            assert covered[ours].all()  # every token of the class has its band
            for a, b in row_bands:  # each band: the class's tokens under it, widened by half a band each side
                under = x[ours & (x >= a - 1e-6) & (x <= b + 1e-6)]
                assert under.size and a == pytest.approx(under.min() - half_band, abs=1e-5)
                assert b == pytest.approx(under.max() + half_band, abs=1e-5)


def test_spaced_tokens_sampling_and_markers_for_long_inputs():
    trace = make_trace(n_layers=2, n_tokens=5000)
    fig = spaced_tokens_figure(trace, head=0, scale="shared", style=SpacedTokensStyle(max_tokens=1000, label_limit=400))
    row = layer_traces(fig)[0]
    # the marks are one shape of ticks; the row's trace, invisible markers, carries their hover text and clicks
    assert row.mode == "markers" and row.marker.opacity == 0 and row.marker.maxdisplayed == 1
    assert fig.layout.meta["sampled"] is True
    ticks = path_commands(next(shape for shape in fig.layout.shapes if shape.name == "marks of layer 0").path)
    np.testing.assert_allclose([x for x, _, _, _ in ticks], np.asarray(row.x, dtype=float), rtol=1e-6)
    sampled = np.arange(5000)[sample_indices(5000, 1000)]  # 1,000 tokens, an even stride
    assert len(sampled) == 1000
    drawn = np.asarray(row.customdata)[:, 0].astype(int)
    assert set(drawn) <= set(sampled.tolist())
    # one mark per occupied 2-pixel column of the plot: the shared scale puts token t at x = z = t here
    low, high = fig.layout.xaxis.range
    px = (fig.layout.width - fig.layout.margin.l - fig.layout.margin.r) / (high - low)
    columns = np.floor(trace.positions[0, 0, sampled] * px / 2)
    assert len(drawn) == len(np.unique(columns)) < 1000
    assert len(np.unique(np.floor(np.asarray(row.x) * px / 2))) == len(drawn)  # no two marks share a column
    merged = [text for text in row.text if "more tokens here" in text]
    assert merged and all("zoom in" in text for text in merged)


def test_spaced_tokens_bad_arguments_are_clear():
    trace = make_trace()
    with pytest.raises(InputError, match="head 9"):
        spaced_tokens_figure(trace, head=9)
    with pytest.raises(InputError, match="window"):
        spaced_tokens_figure(trace, window=(5, 2))
    with pytest.raises(InputError, match="scale"):
        spaced_tokens_figure(trace, scale="log")


def test_iqr_outliers_match_tukey_fences():
    values = np.array([1.0, 2.0, 2.5, 3.0, 3.5, 4.0, 50.0, -40.0, np.nan])
    q1, q3 = np.percentile(values[np.isfinite(values)], [25, 75])
    low, high = iqr_bounds(values)
    assert (low, high) == pytest.approx((q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)))
    assert iqr_outliers(values).tolist() == [False] * 6 + [True, True, False]


def test_focus_view_clips_exactly_the_iqr_outliers():
    trace = make_trace(n_tokens=200)
    z = trace.positions[2, 1].astype(float)
    z[[10, 50, 120]] = [500.0, -300.0, 900.0]
    trace.positions[2, 1] = z
    fig = position_scatter_figure(trace, layer=2, head=1, view="focus")
    low, high = iqr_bounds(z)
    outliers = np.flatnonzero((z < low) | (z > high))
    clipped = next(d for d in fig.data if d.name == "clipped outliers")
    inside = next(d for d in fig.data if d.name == "head 1")
    assert sorted(np.asarray(clipped.x).tolist()) == outliers.tolist()
    assert {10, 50, 120} <= set(outliers.tolist())
    np.testing.assert_allclose(np.asarray(clipped.y, dtype=float), np.clip(z[np.asarray(clipped.x)], low, high))
    np.testing.assert_allclose(np.asarray(clipped.customdata, dtype=float), z[np.asarray(clipped.x)])
    assert sorted(np.asarray(inside.x).tolist() + np.asarray(clipped.x).tolist()) == list(range(200))
    pad = 0.04 * (high - low)
    assert list(fig.layout.yaxis.range) == pytest.approx([low - pad, high + pad])


def test_global_view_shows_every_point_and_hover_has_context():
    trace = make_trace(n_tokens=30)
    fig = position_scatter_figure(trace, layer=1, head="all", view="global")
    assert [d.name for d in fig.data] == ["head 0", "head 1"]
    for head, d in enumerate(fig.data):
        np.testing.assert_array_equal(np.asarray(d.x), np.arange(30))
        np.testing.assert_allclose(np.asarray(d.y), trace.positions[1, head].astype(float))
    assert fig.data[0].hovertext[3] == "abc⟦中⟧&lt;b&gt;fghijkl"
    assert fig.data[0].marker.color == OKABE_ITO[0] and fig.data[1].marker.color == OKABE_ITO[1]


def test_spaced_tokens_draw_no_ticks_where_positions_are_not_finite():
    trace = make_trace(n_tokens=400)
    trace.positions[1, 0] = np.nan  # a whole row
    trace.positions[2, 0, ::3] = np.inf
    fig = spaced_tokens_figure(trace, head=0, scale="shared")
    marks = {shape.name: path_commands(shape.path) for shape in fig.layout.shapes if shape.name.startswith("marks")}
    assert sorted(marks) == ["marks of layer 0", "marks of layer 2"]  # the NaN row draws nothing
    ticks_x = np.array([x for x, _, _, _ in marks["marks of layer 2"]])
    assert np.isfinite(ticks_x).all() and 0 < len(ticks_x) <= int(np.isfinite(trace.positions[2, 0]).sum())


def test_scatter_leaves_out_nonfinite_positions_and_says_so():
    trace = make_trace(n_tokens=30)
    trace.positions[1, 0, [2, 7]] = np.nan
    fig = position_scatter_figure(trace, layer=1, head=0, view="global")
    assert 2 not in np.asarray(fig.data[0].x) and len(fig.data[0].x) == 28
    assert "2 non-finite positions not shown" in fig.layout.title.text


def test_scatter_decimation_keeps_extremes():
    trace = make_trace(n_layers=2, n_heads=1, n_tokens=20000)
    z = trace.positions[1, 0].astype(float)
    fig = position_scatter_figure(trace, layer=1, head=0, view="global", style=ScatterStyle(max_points=2000))
    x = np.asarray(fig.data[0].x)
    assert len(x) <= 2000
    assert int(np.argmax(z)) in x and int(np.argmin(z)) in x
    assert sample_indices(10, 20).tolist() == list(range(10))


def test_range_and_pattern_heatmaps_hold_the_analysis_values():
    trace = make_trace(n_tokens=64)
    fig = range_heatmap(range_stats(trace.positions), trace.layer_kinds)
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float), range_stats(trace.positions))
    assert list(fig.data[0].y) == ["L0 rope", "L1 repo", "L2 repo"]
    fractions = pattern_fractions(chunk_patterns(trace.positions, size=8))
    fig = pattern_fractions_figure(fractions, trace.layer_kinds)
    assert [d.name for d in fig.data] == ["constant", "mono", "hybrid"]
    for index, d in enumerate(fig.data):
        np.testing.assert_allclose(np.asarray(d.z, dtype=float), fractions.per_head[:, :, index])
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1


def test_pattern_strip_places_chunks_on_the_token_axis():
    trace = make_trace(n_tokens=40)
    labels = chunk_patterns(trace.positions, size=8)[:, 1]
    fig = pattern_strip_figure(labels, 8, tokens=trace.tokens, layer_kinds=trace.layer_kinds)
    codes = np.asarray(fig.data[0].z)
    assert codes.shape == (3, 5)
    assert (np.asarray(("constant", "mono", "hybrid"))[codes] == labels).all()
    np.testing.assert_allclose(np.asarray(fig.data[0].x, dtype=float), np.arange(5) * 8 + 3.5)
    assert (codes[0] == 1).all()  # the RoPE layer is monotone everywhere


def _mass(scale: float = 1.0) -> AttentionMass:
    by = {"needle": np.array([[0.2, 0.1], [0.05, 0.05]]) * scale, "query": np.full((2, 2), 0.01),
          "rest": np.full((2, 2), 0.001)}
    return AttentionMass(per_token={k: float(v.mean()) for k, v in by.items()}, by_layer_head=by,
                         span_lengths={"needle": 7, "query": 20, "rest": 400}, query=(430, 437),
                         self_mass=np.zeros((2, 2)), layers=[0, 1], layer_kinds=["rope", "repo"])


def test_attention_mass_figures_show_per_token_mass_per_model():
    fig = attention_mass_figure({"RePo": _mass(), "RoPE": _mass(0.5)})
    assert [d.name for d in fig.data] == ["RePo", "RoPE"]
    assert list(fig.data[0].x) == ["needle", "query", "rest"]
    assert list(fig.data[1].y) == pytest.approx([0.05, 0.01, 0.001])
    assert fig.layout.yaxis.type == "linear"  # bar heights compare as the values do
    for bars in fig.data:  # each bar's value printed on it, to 3 significant digits
        assert [float(text) for text in bars.text] == pytest.approx(list(bars.y), rel=5e-3)
        assert bars.texttemplate == "%{text}" and bars.textposition == "outside"
    log = attention_mass_figure({"RePo": _mass()}, log_y=True)
    # labels at the decades only (dtick 1 on a log axis); the 2..9 ticks between them are unlabelled minor ticks
    assert log.layout.yaxis.type == "log" and log.layout.yaxis.dtick == 1 and log.layout.yaxis.minor.dtick == "D1"
    assert attention_mass_figure({"RePo": _mass()}, log=True).layout.yaxis.type == "log"  # the older name
    fig = attention_mass_layers_figure(_mass())
    needle = next(d for d in fig.data if d.name == "needle")
    assert list(needle.y) == pytest.approx([0.15, 0.05])
    with pytest.raises(InputError, match="AttentionMass"):
        attention_mass_figure({"x": 3})


def test_boundary_auc_figure_is_centred_at_chance():
    auc = np.array([[0.5, 0.5], [0.7, 0.9], [0.2, 0.4]])
    fig = boundary_auc_figure(auc, ["rope", "repo", "repo"], n_scored=12)
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float), auc)
    assert fig.data[0].zmid == 0.5 and (fig.data[0].zmin, fig.data[0].zmax) == (0.0, 1.0)
    assert list(fig.data[0].y)[1] == "L1 repo · mean 0.80"
    assert "12 scored gaps" in fig.layout.title.text



def test_plots_need_no_torch():
    code = "import sys, repo_lens.plots; assert 'torch' not in sys.modules, 'plots imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_scatter_decimates_each_head_on_its_own_within_the_total_budget_and_the_strip_is_one_path_per_class():
    trace = make_trace(n_heads=4, n_tokens=400)
    fig = position_scatter_figure(trace, 1, "all", view="global",
                                  style=ScatterStyle(max_points=1000, max_total_points=200))
    heads = [d for d in fig.data if d.name.startswith("head")]
    assert {d.type for d in heads} == {"scatter"}  # SVG: vector in every export
    assert sum(len(d.x) for d in heads) <= 200 and "decimated" in fig.layout.title.text
    edges = np.linspace(0, 400, 13).astype(int)  # 200 points / 4 heads = 50 a head: half on 12 buckets' min and max
    for head, drawn in enumerate(heads):
        z, x = trace.positions[1, head], np.asarray(drawn.x)
        for start, end in zip(edges[:-1], edges[1:]):
            assert start + int(np.argmin(z[start:end])) in x and start + int(np.argmax(z[start:end])) in x
        # the other half an even stride: no gap between drawn tokens wider than 400 / 26 (+ rounding)
        assert len(x) <= 50 and np.diff(np.sort(x)).max() <= 400 / 26 + 1 and x.min() == 0 and x.max() == 399
    with pytest.raises(InputError, match="max_total_points"):
        position_scatter_figure(trace, 1, "all", style=ScatterStyle(max_total_points=1))
    # the chunk strip of 2,000 tokens: one path per class, bands at least 6 px wide and never overlapping
    long = make_trace(n_tokens=2000)
    codes = chunk_pattern_codes(long.positions, size=16)[:, 0]
    fig = spaced_tokens_figure(long, head=0, patterns=codes, style=SpacedTokensStyle(width=600))
    assert [d for d in fig.data if d.name and d.name.endswith("chunk")] == []
    plot_px = 600 - fig.layout.margin.l - fig.layout.margin.r
    for strip in (shape for shape in fig.layout.shapes if shape.name.endswith("chunk")):
        assert len(path_commands(strip.path)) <= 3 * (plot_px // 6 + 1)  # 3 rows
