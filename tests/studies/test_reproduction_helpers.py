"""The reproductions' measurements on a tiny random byte model and hand-made results, in the fast lane (the whole
studies on the zoo's models are in test_reproductions.py, marked study)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import repo_lens.loading
from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.reproductions.flipflop import flipflop_study
from repo_lens.studies.reproductions.increment_findings import CATEGORY_ORDER, findings_markdown
from repo_lens.studies.reproductions.positions import _patterns, _ranges
from repo_lens.studies.reproductions.reversal import mirror_ratios

CONTEXT = 16


@pytest.fixture(scope="module")
def lens():
    return Lens(tiny_model("repo", n_layers=3, d_model=32, seed=1, context=CONTEXT), ByteTokenizer(),
                meta={"name": "tiny"})


def test_a_head_that_keeps_copies_apart_has_a_mirror_ratio_above_one():
    # inputs at z = 0, 1 (tokens 1, 2); outputs at z = 0, 1 (tokens 4, 5) in the input's order, so each copy of the
    # reversed output sits 1 from its source: own gap 1, mean gap to every output item (0 + 1 + 1 + 0) / 4 = 0.5
    positions = np.array([[[9.0, 0.0, 1.0, 9.0, 0.0, 1.0], [9.0, 0.0, 1.0, 9.0, 1.0, 0.0]]])
    np.testing.assert_allclose(mirror_ratios(positions, 1, 4, 2), [[2.0, 0.0]])


def test_rope_layers_range_over_the_whole_window_and_are_monotone_in_every_chunk(lens):
    texts = ["positions drift while heads attend to needles"] * 2  # 46 bytes: enough for 2 × the context
    kinds = list(lens.model.cfg.layer_mechanisms)
    assert kinds == ["rope", "repo", "repo"]
    result, figure = _ranges("tiny", lens, kinds, texts, False, 2)
    assert result["context"] == CONTEXT and list(result["lengths"]) == [str(CONTEXT), str(2 * CONTEXT)]
    for length, row in result["lengths"].items():
        assert row["n_texts"] == 2 and row["learned_layers"] == [1, 2]
        np.testing.assert_allclose(row["d_by_layer_head"][0], int(length) - 1, rtol=1e-5)  # RoPE: z = 0 … T − 1
        assert row["max_d_over_tokens"] == pytest.approx(row["max_d"] / int(length))
    assert len(figure.data) == 2
    patterns, _ = _patterns("tiny", lens, kinds, texts, False, 2)
    assert patterns["n_chunks_per_head"] == 2 * (CONTEXT // 16) and patterns["learned_layers"] == [1, 2]
    assert patterns["per_layer"]["L0"]["mono"] == 1.0 and sum(patterns["learned"].values()) == pytest.approx(1.0)


def test_flipflop_study_tests_at_one_two_and_four_times_the_training_length(lens, tmp_path, monkeypatch):
    monkeypatch.setattr(repo_lens.loading, "load", lambda model, device: lens)
    document = flipflop_study(tmp_path, ["tiny"], progress=False, sequences=2)
    rows = document["results"]["tiny"]["by_length"]
    assert document["results"]["tiny"]["trained_length"] == CONTEXT and list(rows) == ["16", "32", "64"]
    assert all(0.0 <= value <= 1.0 for row in rows.values() for value in row.values())
    assert document["settings"] == {"test_sequences": 2, "test_sequences_longer": 2}
    paper_row = "| paper: RoPE, d 256, 4 layers x 4 heads (512-token training) | — | — | — |"
    assert paper_row in document["markdown"]  # the paper's numbers are at 512 tokens only
    assert json.loads((tmp_path / "results.json").read_text())["markdown"] == document["markdown"]


def test_findings_markdown_tables_each_models_categories_boundaries_and_entities():
    results = {"zoo:lpi": {
        "layer_kinds": ["rope", "lpi", "lpi"],
        "categories": {"layers": [{"space": 1.5, "lowercase": 0.25}, {"space": 2.0, "lowercase": 0.5}]},
        "boundaries": {"auc_gold": [0.5, 0.75], "auc_jieba": [0.625, 0.875], "n_gaps_gold": 40, "n_gaps_jieba": 38},
        "entities": {"mean_real": [1.0, 0.5], "mean_reversed": [1.25, 0.75], "share_smaller": [0.5, 0.9],
                     "p_value": [0.5, 0.001], "n": 12}}}
    lines = findings_markdown(results).splitlines()
    assert "## zoo:lpi (lpi, rope)" in lines
    assert CATEGORY_ORDER.index("lowercase") < CATEGORY_ORDER.index("space")  # rows in the post's order
    assert lines.index("| lowercase | 0.25 | 0.50 |") < lines.index("| space | 1.50 | 2.00 |")
    assert "| L1 | 0.750 | 0.875 | 0.500 | 0.750 | 0.90 | 0.001 |" in lines
    assert "40 scored gaps (gold), 38 (jieba); 12 entity prompts per order." in lines
