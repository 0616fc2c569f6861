"""Bad inputs to the plot builders, studies, corpus parser and weight loader that issue 13's
adversarial probe found answered with an internal exception or accepted silently: one case each,
by class (``plot-``, ``cli-``, ``api-``, ``checkpoint-``). Each must raise the project's own error
with a message naming what was wrong and what would be right.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import repo_lens
from repo_lens.cli import main
from repo_lens.data import parse_peoples_daily
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.registry import mechanism_kinds
from repo_lens.analysis import AttentionMass
from repo_lens.plots import (ScatterStyle, SpacedTokensStyle, attention_mass_layers_figure, boundary_auc_figure,
                             category_increments_figure, export, layer_series_figure,
                             paper_figure, pattern_strip_figure, position_scatter_figure, range_heatmap,
                             spaced_tokens_figure)
from repo_lens.plots.export import figure_bytes
from repo_lens.studies.resumable import run_items
from repo_lens.trace import Trace

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def trace() -> Trace:
    z = np.arange(2 * 1 * 6, dtype=np.float32).reshape(2, 1, 6)
    return Trace(tokens=list("abcdef"), token_ids=list(range(97, 103)), positions=z,
                 layer_kinds=[mechanism_kinds()[0]] * 2)


def bars() -> go.Figure:
    return go.Figure(go.Bar(y=[1, 2]))


TABLE = np.array([[0.5, 0.7], [0.3, 0.5]])
MASS = AttentionMass(per_token={"needle": 0.05, "rest": 0.001},
                     by_layer_head={"needle": np.full((1, 2), 0.05), "rest": np.full((1, 2), 0.001)},
                     span_lengths={"needle": 4, "rest": 300}, query=(320, 324), self_mass=np.zeros((1, 2)), layers=[0])

# (id, call(trace, tmp_path), message fragment)
PLOT_CASES: list[tuple[str, Callable, str]] = [
    ("plot-spaced-window-as-str", lambda t, tmp: spaced_tokens_figure(t, window="0:5"),
     "window must be (start, end), two ints with 0 <= start < end <= 6"),
    ("plot-spaced-window-fractional-start", lambda t, tmp: spaced_tokens_figure(t, window=(0.5, 4)),
     "window start must be an int, got 0.5"),
    ("plot-spaced-window-fractional-end", lambda t, tmp: spaced_tokens_figure(t, window=(0, 3.9)),
     "window end must be an int, got 3.9"),
    ("plot-spaced-window-three-bounds", lambda t, tmp: spaced_tokens_figure(t, window=(0, 2, 4)),
     "window must be (start, end)"),
    ("plot-category-as-str", lambda t, tmp: category_increments_figure("abc"),
     "layers must be a list of {category: mean} mappings, one per layer; got str"),
    ("plot-category-row-not-mapping", lambda t, tmp: category_increments_figure([[1.0, 2.0]]),
     "layers[0] must be a {category: mean} mapping, got list"),
    ("plot-category-inf", lambda t, tmp: category_increments_figure([{"space": INF}]),
     "layers[0]['space'] is inf; pass a finite number (NaN leaves it out)"),
    ("plot-category-str-value", lambda t, tmp: category_increments_figure([{"space": "1.1"}]),
     "layers[0]['space'] must be a number, got '1.1' (str); use NaN to leave it out"),
    ("plot-series-inf", lambda t, tmp: layer_series_figure({"ours": [0.5, -INF]}, "AUC", "t"),
     "series['ours'][1] is -inf; pass a finite number"),
    ("plot-series-str-value", lambda t, tmp: layer_series_figure({"ours": [0.5, "0.6"]}, "AUC", "t"),
     "series['ours'][1] must be a number, got '0.6' (str)"),
    ("plot-series-values-as-str", lambda t, tmp: layer_series_figure({"ours": "0.5"}, "AUC", "t"),
     "series['ours'] must be a list of numbers, one per layer; got str"),
    ("plot-series-not-mapping", lambda t, tmp: layer_series_figure([0.5, 0.6], "AUC", "t"),
     "series must be a mapping {name: values per layer}, got list"),
    ("plot-series-reference-nan", lambda t, tmp: layer_series_figure({"ours": [0.5]}, "AUC", "t", reference=NAN),
     "reference is nan; pass a finite number"),
    ("plot-paper-font-nan", lambda t, tmp: paper_figure(bars(), font_pt=NAN), "font_pt must be a finite number > 0, got nan"),
    ("plot-paper-font-inf", lambda t, tmp: paper_figure(bars(), font_pt=INF), "font_pt must be a finite number > 0, got inf"),
    ("plot-paper-font-zero", lambda t, tmp: paper_figure(bars(), font_pt=0), "font_pt must be a finite number > 0, got 0.0"),
    ("plot-paper-font-str", lambda t, tmp: paper_figure(bars(), font_pt="8"), "font_pt must be a finite number > 0, got '8' (str)"),
    ("plot-paper-aspect-str", lambda t, tmp: paper_figure(bars(), aspect="wide"), "aspect must be a finite number > 0"),
    ("plot-paper-none", lambda t, tmp: paper_figure(None), "paper_figure needs a plotly Figure"),
    ("plot-paper-layout-list", lambda t, tmp: paper_figure(bars(), ["one-column"]), "unknown paper layout"),
    ("plot-range-kinds-short", lambda t, tmp: range_heatmap(TABLE, ["x"]),
     "layer_kinds must name one kind (a str) per layer: 2 layers, got 1 entries"),
    ("plot-range-kinds-as-str", lambda t, tmp: range_heatmap(TABLE, "ab"),
     "layer_kinds must be a list of 2 kind names (one per layer) or None, got str"),
    ("plot-pattern-strip-kinds-long", lambda t, tmp: pattern_strip_figure(np.zeros((1, 2), int), 4, layer_kinds=["a", "b"]),
     "1 layers, got 2 entries"),
    ("plot-boundary-kinds-long", lambda t, tmp: boundary_auc_figure(TABLE, ["a", "b", "c"]),
     "2 layers, got 3 entries"),
    ("plot-boundary-n-scored-negative", lambda t, tmp: boundary_auc_figure(TABLE, n_scored=-3),
     "n_scored (scored gaps; None leaves it out) must be an int >= 0, got -3"),
    ("plot-boundary-n-scored-str", lambda t, tmp: boundary_auc_figure(TABLE, n_scored="12"),
     "n_scored (scored gaps; None leaves it out) must be an int >= 0, got '12' (str)"),
    ("plot-boundary-n-scored-float", lambda t, tmp: boundary_auc_figure(TABLE, n_scored=12.0),
     "must be an int >= 0, got 12.0 (float)"),
    ("plot-export-width-negative", lambda t, tmp: export(bars(), tmp / "f.html", width=-5),
     "width (pixels; None keeps the figure's own) must be an int >= 1, got -5"),
    ("plot-export-height-zero", lambda t, tmp: export(bars(), tmp / "f.html", height=0), "height (pixels"),
    ("plot-export-width-nan", lambda t, tmp: export(bars(), tmp / "f.html", width=NAN), "must be an int >= 1, got nan"),
    ("plot-export-scale-inf", lambda t, tmp: export(bars(), tmp / "f.html", scale=INF),
     "scale must be a finite number > 0, got inf"),
    ("plot-export-scale-negative", lambda t, tmp: export(bars(), tmp / "f.html", scale=-1),
     "scale must be a finite number > 0, got -1.0"),
    # the chunk strip's classes and chunk size, the scatter's point budget and highlighted spans
    ("plot-spaced-pattern-code-3", lambda t, tmp: spaced_tokens_figure(t, patterns=np.array([[0, 3], [1, 2]])),
     "patterns must be labels ('constant', 'mono', 'hybrid') or their int codes 0..2 (chunk_patterns / "
     "chunk_pattern_codes); got values 0..3"),
    ("plot-spaced-pattern-code-negative", lambda t, tmp: spaced_tokens_figure(t, patterns=np.array([[0, -1], [1, 2]])),
     "or their int codes 0..2 (chunk_patterns / chunk_pattern_codes); got values -1..2"),
    ("plot-spaced-pattern-float", lambda t, tmp: spaced_tokens_figure(t, patterns=np.array([[0.0, 1.5], [1.0, 2.0]])),
     "or their int codes 0..2 (chunk_patterns / chunk_pattern_codes); got dtype float64"),
    ("plot-spaced-pattern-label", lambda t, tmp: spaced_tokens_figure(t, patterns=np.array([["mono", "flat"]] * 2)),
     "unknown pattern label 'flat' in patterns; labels are ('constant', 'mono', 'hybrid')"),
    ("plot-spaced-pattern-rows", lambda t, tmp: spaced_tokens_figure(t, patterns=np.zeros((3, 2), dtype=int)),
     "patterns must be (n_layers=2, n_chunks) for the shown head, got shape (3, 2)"),
    ("plot-spaced-chunk-zero", lambda t, tmp: spaced_tokens_figure(t, style=SpacedTokensStyle(chunk_size=0)),
     "chunk_size (tokens per chunk) must be an int >= 1, got 0"),
    ("plot-spaced-chunk-negative", lambda t, tmp: spaced_tokens_figure(t, patterns=np.zeros((2, 2), int),
                                                                       style=SpacedTokensStyle(chunk_size=-4)),
     "chunk_size (tokens per chunk) must be an int >= 1, got -4"),
    ("plot-spaced-chunk-float", lambda t, tmp: spaced_tokens_figure(t, style=SpacedTokensStyle(chunk_size=2.5)),
     "chunk_size (tokens per chunk) must be an int >= 1, got 2.5 (float)"),
    ("plot-spaced-max-tokens-one", lambda t, tmp: spaced_tokens_figure(t, style=SpacedTokensStyle(max_tokens=1)),
     "max_tokens (tokens drawn) must be an int >= 2, got 1"),
    ("plot-spaced-label-limit-negative", lambda t, tmp: spaced_tokens_figure(t,
                                                                             style=SpacedTokensStyle(label_limit=-1)),
     "label_limit (labels per row) must be an int >= 0, got -1"),
    ("plot-spaced-width-tiny", lambda t, tmp: spaced_tokens_figure(t,
                                                                   style=SpacedTokensStyle(width=20)), "width (pixels) must be an int >= 100, got 20"),
    ("plot-spaced-font-zero", lambda t, tmp: spaced_tokens_figure(t,
                                                                  style=SpacedTokensStyle(font_size=0)), "font_size must be a finite number > 0"),
    ("plot-scatter-max-points-one", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(max_points=1)),
     "max_points (points drawn per head) must be an int >= 2, got 1"),
    ("plot-scatter-max-points-zero", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(max_points=0)),
     "max_points (points drawn per head) must be an int >= 2, got 0"),
    ("plot-scatter-max-points-float", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(max_points=2.5)),
     "max_points (points drawn per head) must be an int >= 2, got 2.5 (float)"),
    ("plot-scatter-max-points-bool", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(max_points=True)),
     "max_points (points drawn per head) must be an int >= 2, got True (bool)"),
    ("plot-scatter-span-past-end", lambda t, tmp: position_scatter_figure(t, 0, highlight={"needle": (4, 9)}),
     "highlight span 'needle' = (4, 9) is outside the trace: spans must satisfy 0 <= start < end <= 6"),
    ("plot-scatter-span-negative", lambda t, tmp: position_scatter_figure(t, 0, highlight={"query": (-2, 3)}),
     "highlight span 'query' = (-2, 3) is outside the trace"),
    ("plot-scatter-span-empty", lambda t, tmp: position_scatter_figure(t, 0, highlight={"query": (3, 3)}),
     "0 <= start < end <= 6 (the trace's tokens, end exclusive)"),
    ("plot-scatter-span-float", lambda t, tmp: position_scatter_figure(t, 0, highlight={"query": (1.5, 3)}),
     "highlight span 'query' start must be an int, got 1.5 (float)"),
    ("plot-scatter-span-shape", lambda t, tmp: position_scatter_figure(t, 0, highlight={"query": 3}),
     "highlight span 'query' must be (start, end), two token indices; got 3"),
    ("plot-scatter-spans-list", lambda t, tmp: position_scatter_figure(t, 0, highlight=[(1, 3)]),
     "highlight must map span names to (start, end) token spans"),
    ("plot-scatter-context-negative", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(context=-1)),
     "context (tokens either side in the hover) must be an int >= 0, got -1"),
    ("plot-scatter-k-str", lambda t, tmp: position_scatter_figure(t, 0, style=ScatterStyle(k="1.5")),
     "k (the fences' multiple of the interquartile range) must be a finite number >= 0, got '1.5' (str)"),
    ("plot-spaced-highlight-float", lambda t, tmp: spaced_tokens_figure(t, highlight=(3.5, 1)),
     "highlight token must be an int, got 3.5 (float)"),
    ("plot-mass-layers-unknown-span", lambda t, tmp: attention_mass_layers_figure(MASS, spans=["nope"]),
     "'model' has no span ['nope']; it has ['needle', 'rest']"),
    ("plot-category-categories-str", lambda t, tmp: category_increments_figure([{"a": 1.0}], categories="a"),
     "categories must be a list of category names (str), or None for the first layer's; got 'a'"),
    ("plot-strip-tokens-short", lambda t, tmp: pattern_strip_figure(np.zeros((1, 3), int), 4, tokens=["a"]),
     "tokens has 1 entries, but 3 chunks of 4 start up to token 8; pass the trace's tokens"),
    ("plot-figure-bytes-width-str", lambda t, tmp: figure_bytes(bars(), "html", width="800"),
     "width (pixels; None keeps the figure's own) must be an int >= 1, got '800' (str)"),
]


@pytest.mark.parametrize("call,message", [pytest.param(*rest, id=name) for name, *rest in PLOT_CASES])
def test_bad_plot_input_is_refused(call, message, trace, tmp_path):
    with pytest.raises(InputError) as caught:
        call(trace, tmp_path)
    assert message in str(caught.value)
    assert not any(tmp_path.iterdir())  # a refused export writes nothing


def test_valid_plot_inputs_near_the_new_checks_still_work(trace, tmp_path):
    fig = spaced_tokens_figure(trace, window=(np.int64(1), 4), scale="shared")
    assert fig.layout.meta["window"] == [1, 4]
    bars_ = category_increments_figure([{"space": 1.5, "digit": NAN}, {"space": 2.0}], ["space", "digit"])
    assert np.isnan(bars_.data[0].y[1]) and np.isnan(bars_.data[1].y[1])  # NaN and a missing category: no bar
    assert np.isnan(layer_series_figure({"ours": [0.5, NAN]}, "AUC", "t").data[0].y[1])  # NaN: a gap
    assert round(paper_figure(bars(), font_pt=np.float32(9)).layout.font.size, 2) == 12.0  # 9 pt = 12 px
    assert list(range_heatmap(TABLE, ("a", "b")).data[0].y) == ["L0 a", "L1 b"]
    assert boundary_auc_figure(TABLE, n_scored=np.int64(0)).layout.title.text.endswith("— 0 scored gaps")
    assert position_scatter_figure(trace, 0, style=ScatterStyle(max_points=2),
                                   highlight={"needle": (np.int64(4), 6)}).layout.meta[
        "spans"] == {"needle": [4, 6]}  # the smallest budget, and a span ending at the last token
    assert spaced_tokens_figure(trace, patterns=np.array([["mono", "hybrid"]] * 2),
                                style=SpacedTokensStyle(chunk_size=np.int64(3))).data
    written = export(bars(), tmp_path / "f.html", width=300, height=200, scale=1)
    assert written.read_bytes().startswith(b"<!doctype html>")


# --- studies: one study per run folder ------------------------------------------------------------------

def test_a_run_folder_keeps_its_study_before_any_item_is_written(tmp_path):
    run_items(tmp_path, [], {"study": "first"}, progress=False)  # a run that computed nothing yet
    with pytest.raises(InputError, match="holds a run with other settings .*'study': 'first'"):
        run_items(tmp_path, [("a", lambda: {"x": 1})], {"study": "second"}, progress=False)
    assert not any((tmp_path / "items").iterdir())
    # the same study may still change its settings before its first item (e.g. a length that was too short)
    assert run_items(tmp_path, [("a", lambda: {"x": 1})], {"study": "first", "n": 2}, progress=False) == [
        {"item": "a", "x": 1}]
    assert json.loads((tmp_path / "run.json").read_text()) == {"study": "first", "n": 2}


@pytest.mark.study
def test_cli_analyze_into_another_studys_run_folder_is_refused(byte_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    (out / "items").mkdir(parents=True)
    niah = {"model": str(byte_model_dir), "study": "niah", "lengths": [64], "depths": [0.5], "seeds": [0],
            "beyond_context": False}
    (out / "run.json").write_text(json.dumps(niah))  # what a niah run that stopped before its first item leaves
    code = main(["analyze", "--model", str(byte_model_dir), "--device", "cpu", "--study", "positions",
                 "--samples", "1", "--out", str(out), "--quiet"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "holds a run with other settings" in lines[0] and "'study': 'niah'" in lines[0], lines
    assert "use another --out directory or delete it" in lines[0]
    assert json.loads((out / "run.json").read_text()) == niah and not any((out / "items").iterdir())


# --- corpus parser ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines,message", [
    pytest.param(None, "lines must be an iterable of str lines (a list, or an open text file), got NoneType",
                 id="api-peoples-daily-none"),
    pytest.param("中国/ns", "got str; for one text pass text.splitlines()", id="api-peoples-daily-one-str"),
    pytest.param(["中国/ns", b"x/n"], "line 2 is bytes, not str; open the file in text mode",
                 id="api-peoples-daily-bytes-line"),
])
def test_bad_peoples_daily_lines_are_refused(lines, message):
    with pytest.raises(InputError) as caught:
        parse_peoples_daily(lines)
    assert message in str(caught.value)


# --- weights: NaN / inf and float8 ----------------------------------------------------------------------

def rewrite_weight(ckpt: Path, change: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Apply ``change`` to the checkpoint's first 2-D weight in place; returns its name."""
    path = ckpt / "model.safetensors"
    with safe_open(str(path), framework="pt") as file:
        metadata = file.metadata()
    tensors = load_file(str(path))
    name = next(name for name, tensor in sorted(tensors.items()) if tensor.ndim == 2 and "embed" not in name)
    tensors[name] = change(tensors[name])
    save_file(tensors, str(path), metadata=metadata)
    return name


def with_value(value: float, count: int = 1) -> Callable[[torch.Tensor], torch.Tensor]:
    def change(tensor: torch.Tensor) -> torch.Tensor:
        changed = tensor.clone()
        changed.view(-1)[:count] = value
        return changed
    return change


@pytest.mark.parametrize("change,dtype,expected", [
    pytest.param(with_value(NAN, 2), torch.float32, "{name}: 2 NaN, 0 inf", id="checkpoint-nan-weight"),
    pytest.param(with_value(-INF), torch.float32, "{name}: 0 NaN, 1 inf", id="checkpoint-inf-weight"),
    pytest.param(with_value(1e6, 3), torch.float16, "{name}: 0 NaN, 3 inf", id="checkpoint-weight-overflows-float16"),
])
def test_non_finite_weights_are_refused_naming_the_tensor(change, dtype, expected, byte_model_dir, tmp_path):
    ckpt = shutil.copytree(byte_model_dir, tmp_path / "ckpt")
    name = rewrite_weight(ckpt, change)
    with pytest.raises(CheckpointError) as caught:
        repo_lens.load(ckpt, device="cpu", dtype=dtype)
    message = str(caught.value)
    assert expected.format(name=name) in message, message
    assert "1 weight tensor(s) hold NaN or infinite values" in message and "finite" in message


def test_float8_weights_are_refused_not_upcast(byte_model_dir, tmp_path):
    ckpt = shutil.copytree(byte_model_dir, tmp_path / "ckpt")
    name = rewrite_weight(ckpt, lambda tensor: tensor.to(torch.float8_e4m3fn))
    with pytest.raises(CheckpointError) as caught:
        repo_lens.load(ckpt, device="cpu")
    message = str(caught.value)
    assert f"{name}: float8_e4m3fn" in message, message
    assert "store them as float32, float16, bfloat16, float64" in message


def test_finite_weights_still_load_in_float16(byte_model_dir):
    lens = repo_lens.load(byte_model_dir, device="cpu", dtype=torch.float16)
    assert all(bool(torch.isfinite(parameter).all()) for parameter in lens.model.parameters())


# --- spaced tokens at extreme position magnitudes ----------------------------------------------------------

F32_MAX = float(np.finfo(np.float32).max)
EXTREME_POSITIONS = {  # (2 layers, 6 tokens) of float32 positions
    "constant-1e15": np.full((2, 6), 1e15),
    "constant-4.5e15": np.full((2, 6), 4.5e15),
    "constant-1e16": np.full((2, 6), 1e16),
    "constant-1e30": np.full((2, 6), 1e30),
    "constant-3e38": np.full((2, 6), 3e38),
    "constant--3e38": np.full((2, 6), -3e38),
    "constant-float32-max": np.full((2, 6), F32_MAX),
    "one-step-apart-1e30": np.r_[[1e30] * 5, np.nextafter(np.float32(1e30), np.float32(np.inf))][None].repeat(2, 0),
    "ramp-1e30": 1e30 * (1 + 1e-6 * np.arange(12)).reshape(2, 6),
    "ramp-3e38": np.linspace(3.0e38, 3.4e38, 12).reshape(2, 6),
    "both-ends-of-float32": np.array([[-F32_MAX, 0, F32_MAX, 1, -1, 2]] * 2),
    "mixed-tiny-and-huge": np.array([[1e-45, -1e-30, 3e38, 1e-38, -3e38, 5.0], [1e30, 1e-30, 0, -1e15, 4.5e15, 1e-45]]),
    "subnormal-only": np.array([[1e-45, 2e-45, 3e-45, 4e-45, 5e-45, 6e-45]] * 2),
    "huge-with-nan-and-inf": np.array([[1e30, NAN, 1e30, INF, 1e30, -INF]] * 2),
    "one-layer-huge-one-small": np.array([[1e30] * 6, [0, 1, 2, 3, 4, 5]]),
}


@pytest.mark.parametrize("scale", ["shared", "row"])
@pytest.mark.parametrize("name", list(EXTREME_POSITIONS))
def test_spaced_tokens_at_extreme_position_magnitudes(name, scale):
    """Every finite position is drawn where it is (scale="shared": x is the position itself) inside an
    x range that is a proper interval, and each row gets labels, at any float32 magnitude."""
    z = EXTREME_POSITIONS[name].astype(np.float32)
    trace = Trace(tokens=list("ab cd!"), token_ids=list(b"ab cd!"), positions=z[:, None, :],
                  layer_kinds=[mechanism_kinds()[0]] * 2)
    fig = spaced_tokens_figure(trace, scale=scale)
    low, high = fig.layout.meta["x_range"]
    assert np.isfinite(low) and np.isfinite(high) and low < high
    rows = [trace_ for trace_ in fig.data if trace_.mode in ("markers", "text") and trace_.customdata is not None]
    assert len(rows) == 2  # one trace per layer: every label (text), or marks with hover markers
    for layer, row in enumerate(rows):
        x = np.asarray(row.x, dtype=np.float64)
        finite = np.isfinite(z[layer])
        assert np.array_equal(np.isfinite(x), finite)
        assert ((x[finite] >= low) & (x[finite] <= high)).all()
        if scale == "shared":
            np.testing.assert_array_equal(x[finite], z[layer][finite].astype(np.float64))
    for shape in fig.layout.shapes:  # the ticks, where marks are drawn: where their tokens are, on screen
        layer = int(shape.name.rsplit(" ", 1)[-1])
        ticks = np.array([float(value) for value in re.findall(r"M([^,]+),", shape.path)])
        shown = np.asarray(rows[layer].x, dtype=np.float64)
        assert ((ticks >= low) & (ticks <= high)).all(), (ticks, low, high)
        nearest = np.abs(ticks[:, None] - shown[None, np.isfinite(shown)]).min(axis=1)
        assert (nearest <= (high - low) * 1e-4).all()
    labels = [trace_ for trace_ in fig.data if trace_.mode == "text"]
    assert labels and all(len(trace_.text) for trace_ in labels)
