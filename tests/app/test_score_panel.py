"""The "Why this attention" panel's data and figures, without Streamlit: the panel of one head's query row
against the model's own scores and pattern (its hooks), against score_decomposition's parts read here by
index, and against softmaxes of those parts written here; a bias layer's position part against ALiBi's
formula; the figures against the panel's numbers."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens import InputError
from repo_lens.analysis import score_decomposition
from repo_lens.app.score_figures import band_strip_figure, band_ticks, key_labels, patterns_figure, split_bars_figure
from repo_lens.app.score_panel import PATTERNS, TOP_KEYS, attention_panel
from repo_lens.app.score_view import position_note, top_keys_csv
from repo_lens.model.alibi import alibi_slopes
from repo_lens.model.tiny import tiny_model

IDS = [7, 31, 4, 18, 18, 95, 2, 60, 13, 44, 9, 71, 5, 28, 16, 3, 88, 40, 11, 52]
QUERY, HEAD = 15, 1
TOKENS = [f"t{index}<" for index in range(len(IDS))]  # "<" must be escaped in the figures' text


def _lens(kind: str, n_layers: int = 3):
    return repo_lens.Lens(tiny_model(kind, n_layers=n_layers, d_model=32, n_heads=2, seed=4).double(), None)


def _hooked(lens, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's own pre-softmax scores and pattern of layer ``layer``, [head, query, key]."""
    _, cache = lens.model.run_with_cache(torch.tensor([IDS]))
    prefix = f"blocks.{layer}.attn."
    return cache[prefix + "hook_attn_scores"][0].numpy(), cache[prefix + "hook_pattern"][0].numpy()


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - values.max())
    return shifted / shifted.sum()


@pytest.fixture(scope="module")
def repo_lens_double():
    return _lens("repo")


@pytest.mark.parametrize("layer", [0, 2])  # RoPE, then RePo
def test_the_panel_of_a_rotary_layer_is_the_models_own_row(repo_lens_double, layer):
    lens = repo_lens_double
    scores, pattern = _hooked(lens, layer)
    found = score_decomposition(lens, IDS, layer, heads=[HEAD], queries=[QUERY])
    panel = attention_panel(found, HEAD, QUERY, top=5)
    row = pattern[HEAD, QUERY, :QUERY + 1]
    expected = sorted(range(QUERY + 1), key=lambda key: (-row[key], key))[:5]
    assert panel.top.tolist() == expected and panel.top[0] == int(np.argmax(row))
    np.testing.assert_allclose(panel.attention, row[expected], rtol=0, atol=1e-6)
    np.testing.assert_allclose(panel.content + panel.position, scores[HEAD, QUERY, expected], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(panel.content, found.content[0, 0, expected])  # the parts of those keys
    np.testing.assert_array_equal(panel.position, found.position[0, 0, expected])
    np.testing.assert_allclose(panel.bands.sum(-1), scores[HEAD, QUERY, expected], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(panel.frequencies, found.frequencies[0])
    assert panel.keys.tolist() == list(range(QUERY + 1)) and list(panel.patterns) == list(PATTERNS)
    np.testing.assert_allclose(panel.patterns["actual"], row, rtol=0, atol=1e-6)
    np.testing.assert_allclose(panel.patterns["content"], _softmax(found.content[0, 0, :QUERY + 1]), atol=1e-6)
    np.testing.assert_allclose(panel.patterns["position"], _softmax(found.position[0, 0, :QUERY + 1]), atol=1e-6)
    np.testing.assert_allclose(panel.patterns["reference"], found.patterns["reference"][0, 0, :QUERY + 1], atol=0)
    assert (layer, panel.layer, panel.head, panel.query, panel.reference) == (layer, layer, HEAD, QUERY, "integer")
    assert not panel.position_free
    if layer == 0:  # RoPE rotates by the index: the reference pattern is the layer's own
        np.testing.assert_allclose(panel.patterns["reference"], row, rtol=0, atol=1e-6)


def test_top_keys_default_to_eight_and_stop_at_the_keys_the_query_sees(repo_lens_double):
    found = score_decomposition(repo_lens_double, IDS, 2, heads=[0, 1], queries=[3, QUERY])
    assert len(attention_panel(found, 0, QUERY).top) == TOP_KEYS == 8
    early = attention_panel(found, 1, 3, top=20)
    assert sorted(early.top.tolist()) == [0, 1, 2, 3] and early.keys.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(early.attention.sum(), 1.0, atol=1e-6)  # all four keys: all the attention


def test_a_bias_layer_has_the_bias_as_its_position_part_and_no_bands():
    lens = _lens("alibi", n_layers=2)
    scores, pattern = _hooked(lens, 1)
    panel = attention_panel(score_decomposition(lens, IDS, 1, heads=[HEAD], queries=[QUERY]), HEAD, QUERY)
    slope = alibi_slopes(2)[HEAD]
    np.testing.assert_allclose(panel.position, -slope * (QUERY - panel.top), rtol=0, atol=1e-9)  # m·(j − i)
    np.testing.assert_allclose(panel.score, scores[HEAD, QUERY, panel.top], rtol=0, atol=1e-6)
    assert panel.bands is None and panel.frequencies is None and not panel.position_free
    assert "the bias it adds to q·k" in position_note(panel)
    with pytest.raises(InputError, match="no frequency bands"):
        band_strip_figure(panel, TOKENS)


def test_a_layer_without_positions_has_a_zero_position_part_and_says_so():
    lens = _lens("nope", n_layers=2)
    panel = attention_panel(score_decomposition(lens, IDS, 1, heads=[0], queries=[QUERY]), 0, QUERY)
    assert panel.position_free
    np.testing.assert_array_equal(panel.position, 0.0)
    np.testing.assert_allclose(panel.patterns["position"], 1.0 / (QUERY + 1), rtol=0, atol=1e-9)  # uniform
    np.testing.assert_allclose(panel.patterns["content"], panel.patterns["actual"], rtol=0, atol=1e-6)
    assert "uses no position here" in position_note(panel)
    rope = _lens("rope", n_layers=1)
    assert position_note(attention_panel(score_decomposition(rope, IDS, 0, heads=[0], queries=[QUERY]), 0, QUERY)) is None


def test_bad_selections_are_clear_errors(repo_lens_double):
    found = score_decomposition(repo_lens_double, IDS, 2, heads=[1], queries=[QUERY])
    with pytest.raises(InputError, match=r"head 0 was not decomposed.*heads=\[0\]"):
        attention_panel(found, 0, QUERY)
    with pytest.raises(InputError, match=r"query row 4 was not decomposed.*queries=\[4\]"):
        attention_panel(found, HEAD, 4)
    with pytest.raises(InputError, match="top must be an int >= 1"):
        attention_panel(found, HEAD, QUERY, top=0)
    some_keys = score_decomposition(repo_lens_double, IDS, 2, heads=[1], queries=[QUERY], keys=[0, 5])
    with pytest.raises(InputError, match="every key up to query 15"):
        attention_panel(some_keys, HEAD, QUERY)
    with pytest.raises(InputError, match="must be a ScoreDecomposition"):
        attention_panel(found.patterns, HEAD, QUERY)


def test_the_table_and_its_csv_hold_the_panels_numbers(repo_lens_double):
    panel = attention_panel(score_decomposition(repo_lens_double, IDS, 2, heads=[HEAD], queries=[QUERY]), HEAD, QUERY)
    rows = panel.rows(TOKENS)
    assert [row["key"] for row in rows] == panel.top.tolist()
    assert [row["token"] for row in rows] == [TOKENS[key] for key in panel.top]
    for index, row in enumerate(rows):
        assert row["attention_actual"] == pytest.approx(panel.attention[index], abs=1e-12)
        assert (row["content"], row["position"]) == (panel.content[index], panel.position[index])
        assert row["score"] == pytest.approx(row["content"] + row["position"], abs=1e-12)
        for name in PATTERNS:
            assert row[f"attention_{name}"] == pytest.approx(panel.patterns[name][row["key"]], abs=1e-12)
    parsed = list(csv.DictReader(io.StringIO(top_keys_csv(panel, TOKENS).decode("utf-8"))))
    assert [int(row["key"]) for row in parsed] == panel.top.tolist()
    np.testing.assert_allclose([float(row["position"]) for row in parsed], panel.position, rtol=1e-12)


def test_the_figures_draw_the_panels_numbers(repo_lens_double):
    panel = attention_panel(score_decomposition(repo_lens_double, IDS, 2, heads=[HEAD], queries=[QUERY]), HEAD, QUERY)
    labels = key_labels(panel, TOKENS)
    assert labels[0] == f"key {panel.top[0]} 't{panel.top[0]}&lt;' · {100 * panel.attention[0]:.1f}%"
    bars = split_bars_figure(panel, TOKENS)
    assert [trace.name for trace in bars.data] == ["content", "position", "score (content + position)"]
    for trace, values in zip(bars.data, (panel.content, panel.position, panel.score)):
        assert list(trace.y) == labels
        np.testing.assert_array_equal(trace.x, values)
    assert bars.layout.barmode == "relative" and bars.layout.meta["kind"] == "attention_split_bars"
    strip = band_strip_figure(panel, TOKENS)
    np.testing.assert_array_equal(strip.data[0].z, panel.bands)
    assert list(strip.data[0].y) == labels and strip.data[0].zmid == 0.0
    assert list(strip.layout.xaxis.ticktext) == band_ticks(panel.frequencies)[1]
    patterns = patterns_figure(panel, TOKENS)
    assert patterns.layout.meta["kind"] == "attention_patterns" and len(patterns.data) == 4
    for trace, name in zip(patterns.data, PATTERNS):
        assert trace.type == "bar" and trace.name == name
        np.testing.assert_array_equal(trace.x, panel.keys)
        np.testing.assert_array_equal(trace.y, panel.patterns[name])
    titles = [annotation.text for annotation in patterns.layout.annotations]
    assert titles[3].startswith("reference: the same q and k at positions 0, 1, 2")


def test_band_ticks_name_each_bands_wavelength():
    frequencies = 10000.0 ** (-np.arange(40) / 40)  # 40 bands: every third is labelled (at most 16)
    ticks, text = band_ticks(frequencies)
    assert ticks == list(range(0, 40, 3))
    assert text[0] == "6.3" and text[-1] == f"{2 * math.pi / frequencies[39]:,.0f}"
