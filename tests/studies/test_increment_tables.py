"""seeds/002's tables through repo_lens.studies.increment_tables, against direct computations on traces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from repo_lens.analysis import byte_categories, trace_increments
from repo_lens.lens import Lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.studies.increment_tables import boundary_table, category_table, entity_table


def byte_lens(kind: str, seed: int = 0) -> Lens:
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=2, n_heads=2, d_mlp=64,
                      layer_mechanisms=[kind, kind], max_position_embeddings=128)
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.normal_(std=0.5)
    return Lens(model, ByteTokenizer(), meta={"name": kind})


@dataclass
class Sentence:
    text: str
    words: list[str]


def test_category_means_equal_a_direct_computation_from_the_trace():
    lens = byte_lens("lpi-layer")
    texts = ["The cat sat.\nA Dog ran", "人工智能是计算机科学的一个分支。"]
    table = category_table(lens, texts, progress=False)
    values: dict[str, list[float]] = {}
    for text in texts:
        ids = lens.encode(text)
        delta = lens.trace(ids).extras["increments"][1].mean(axis=0)  # layer 1, head-averaged
        for category, value in zip(byte_categories(ids)[1:], delta[1:]):
            values.setdefault(str(category), []).append(float(value))
    for category, seen in values.items():
        assert table["layers"][1][category] == pytest.approx(np.mean(seen), rel=1e-5)
        assert table["counts"][category] == len(seen)


def test_rope_increments_are_one_so_boundaries_are_at_chance_and_entities_tie():
    lens = byte_lens("rope")
    trace = lens.trace("New York")
    np.testing.assert_array_equal(trace_increments(trace)[:, :, 1:], 1.0)
    sentences = [Sentence("人工智能是计算机科学的一个分支", ["人工智能", "是", "计算机科学", "的", "一个", "分支"])]
    auc = boundary_table(lens, sentences, progress=False)
    assert auc["auc_gold"] == [0.5, 0.5] and auc["n_gaps_gold"] == 14  # 15 characters
    assert auc["boundary_share_gold"] == pytest.approx(5 / 14)  # words end after 能 是 学 的 个
    entities = entity_table(lens, [("New", "York"), ("Hong", "Kong")], progress=False)
    assert entities["p_value"] == [1.0, 1.0] and entities["mean_real"] == entities["mean_reversed"] == [1.0, 1.0]


def test_entity_increments_are_read_at_the_space_byte():
    lens = byte_lens("lpi")
    entities = entity_table(lens, [("New", "York"), ("Hong", "Kong")], progress=False)
    real = []
    for a, b in [("New", "York"), ("Hong", "Kong")]:
        for carrier in ("{a} {b}", "the {a} {b}", "I visited {a} {b}", "near {a} {b}", "they went to {a} {b}"):
            text = carrier.format(a=a, b=b)
            delta = lens.trace(text).extras["increments"].mean(axis=1)
            real.append(delta[:, text.index(f"{a} {b}") + len(a)])
    np.testing.assert_allclose(entities["mean_real"], np.mean(real, axis=0), rtol=1e-5)
    assert entities["n"] == 10
