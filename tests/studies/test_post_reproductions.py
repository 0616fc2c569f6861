"""`repo-lens reproduce increment_post_scripts` and `increment_post_vocabulary` (the learned-increments post's
scripts, "Learned position increments", Brendan Long): each entry run with --quick on tiny models built here,
its numbers checked against references computed directly from the models' weights; the zoo defaults in the
``study`` lane."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from repo_lens.analysis import (
    POST_BYTE_CATEGORIES,
    boundary_windows,
    char_increments,
    vocabulary_categories,
    vocabulary_table,
)
from repo_lens.errors import InputError
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.loaders.native.format import save_checkpoint
from repo_lens.studies.reproductions import STUDIES

HELD_OUT = {
    "en": ["Marie Curie, a Polish-born physicist, won two Nobel Prizes.\nIt rained; yes: no - 42 days!"],
    "zh": ["人工智能是计算机科学的一个分支。它研究如何让机器像人一样思考，例如下棋与翻译。",
           "北京大学成立于1898年，是中国近代第一所国立综合性大学。"],
}
SUBWORD_TOKENS = ["<|endoftext|>", "Ġthe", "Ġof", "Ġand", "Ġa", ".", "!", "?", ",", ";", "(", "ing", "ed", "s", "ly",
                  "tion", "ĠNew", "ĠYork", "Ġcat", "Ġdog", "Ġhouse", "Ċ", "Ġ42", "ĠThe", "Ġto", "er", "Ġrun", '."']


def byte_model(tmp_path: Path, name: str, mechanisms: list[str], seed: int) -> str:
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=len(mechanisms), n_heads=2, d_mlp=64,
                      max_position_embeddings=128, layer_mechanisms=mechanisms)
    torch.manual_seed(seed)
    return str(save_checkpoint(LensModel(cfg).eval(), tmp_path / name, info={"name": name}))


def embedding_deltas(path: str) -> np.ndarray:
    """δ = softplus(DeltaMLP(E[id])) of every id, straight from a shared-DeltaMLP checkpoint's weights."""
    import repo_lens

    model = repo_lens.load(path, device="cpu").model
    with torch.no_grad():
        return F.softplus(model.shared_delta(model.embed.weight)).squeeze(-1).numpy().astype(np.float64)


@pytest.fixture(scope="module")
def scripts_run(tmp_path_factory):
    """The scripts entry, once, on a shared-DeltaMLP and a per-layer tiny byte model."""
    root = tmp_path_factory.mktemp("scripts")
    shared = byte_model(root, "shared", ["lpi", "lpi"], seed=1)
    per_layer = byte_model(root, "per-layer", ["lpi-layer", "lpi-layer"], seed=2)
    document = STUDIES["increment_post_scripts"].load()(root / "out", [shared, per_layer], quick=True,
                                                        figures=False, progress=False, held_out=HELD_OUT)
    return root / "out", shared, per_layer, document


def test_scripts_entry_runs_quick_on_tiny_byte_models(scripts_run):
    out, shared, per_layer, document = scripts_run
    saved = json.loads((out / "results.json").read_text())
    assert saved["markdown"] == document["markdown"]
    assert (out / "post_scripts.md").read_text() == document["markdown"] + "\n"
    one = document["results"][shared]
    assert one["shared_delta"] and one["rows"] == [0, 1]
    delta = embedding_deltas(shared)  # the script's Part 1: every byte's embedding-level δ
    for name, ids in POST_BYTE_CATEGORIES.items():
        row = one["byte_table"]["vocabulary"][0][name]
        assert row["mean"] == pytest.approx(delta[list(ids)].mean(), rel=1e-5)
        assert (row["min"], row["max"]) == (pytest.approx(delta[list(ids)].min(), rel=1e-5),
                                            pytest.approx(delta[list(ids)].max(), rel=1e-5))
    # a shared δ is a function of the byte: the space is the same in both orders, so p = 1 in every layer
    assert one["entities"]["p_value"] == [1.0, 1.0] and one["entities"]["n_entities"] == 79
    spacing = one["spacing"]["english"]
    text = spacing["text"]
    expected = char_increments(delta[list(text.encode())], text)  # first layer's δ does not depend on context
    np.testing.assert_allclose(spacing["per_row"][0], expected, rtol=1e-5)
    windows = boundary_windows(HELD_OUT["zh"], max_bytes=128, max_gaps=2000)
    bounds = one["boundaries"]
    assert bounds["n_gaps"] == sum(len(w.labels) for w in windows) and bounds["max_bytes"] == 128
    scores = np.concatenate([delta[w.byte_ids[w.lead_bytes]] for w in windows])
    labels = np.concatenate([w.labels for w in windows])
    from sklearn.metrics import roc_auc_score

    assert bounds["auc"][0] == pytest.approx(roc_auc_score(labels, scores), abs=1e-9)
    other = document["results"][per_layer]
    assert not other["shared_delta"] and other["entities"]["p_value"][0] == 1.0  # L0 reads byte identity only
    assert "| L1 |" in document["markdown"] and "| shared |" in document["markdown"]


def test_scripts_entry_refuses_models_it_cannot_read(tmp_path):
    rope = byte_model(tmp_path, "rope", ["rope", "rope"], seed=0)
    with pytest.raises(InputError, match="sum no learned increments"):
        STUDIES["increment_post_scripts"].load()(tmp_path / "out", [rope], quick=True, figures=False,
                                                 progress=False, held_out=HELD_OUT)


def subword_model(tmp_path: Path, mechanisms: tuple[str, ...] = ("lpi", "lpi")) -> str:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SUBWORD_TOKENS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    directory = tmp_path / ("subword-" + "-".join(mechanisms))
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>").save_pretrained(str(directory))
    cfg = ModelConfig(family="llama", vocab_size=len(vocab), d_model=32, n_layers=len(mechanisms), n_heads=2,
                      d_mlp=64, max_position_embeddings=64, layer_mechanisms=list(mechanisms))
    torch.manual_seed(3)
    return str(save_checkpoint(LensModel(cfg).eval(), directory, tokenizer="hf", info={"name": "subword"}))


def test_vocabulary_entry_runs_quick_on_a_tiny_subword_model(tmp_path):
    path = subword_model(tmp_path)
    document = STUDIES["increment_post_vocabulary"].load()(tmp_path / "out", [path], quick=True, figures=False,
                                                           progress=False)
    result = document["results"][path]
    assert result["rows"] == [0, 1] and result["n_ids"] == len(SUBWORD_TOKENS) and result["eos_id"] == 0
    assert result["shared_delta"] and list(result["layers"]) == ["0"]  # one DeltaMLP: its table once
    delta = embedding_deltas(path)
    expected = vocabulary_table(delta, SUBWORD_TOKENS, eos_id=0)
    table = result["layers"]["0"]["table"]
    assert list(table["categories"]) == list(expected.categories)
    assert [row["median"] for row in table["categories"].values()] == pytest.approx(expected.median.tolist(), rel=1e-5)
    assert [entry["id"] for entry in table["top"]] == expected.top.tolist()
    assert table["eos"]["delta"] == pytest.approx(delta[0], rel=1e-5)
    kept = np.setdiff1d(np.arange(len(delta)), expected.unused)
    drift = result["layers"]["0"]["drift"]
    assert drift["center"] == pytest.approx(delta[kept].mean(), rel=1e-5)
    labels = vocabulary_categories(SUBWORD_TOKENS)
    for name, row in drift["categories"].items():
        member = delta[kept][labels[kept] == name]
        assert row["median"] == pytest.approx(np.median(member) - delta[kept].mean(), abs=1e-6)
        assert row["count"] == member.size
    tests = result["layers"]["0"]["tests"]
    assert 0 < tests["trend"]["p_value"] <= 1 and -1 <= tests["trend"]["value"] <= 1 and 0 < tests["spread"]["p_value"] <= 1
    markdown = (tmp_path / "out" / "vocabulary.md").read_text()
    assert "| shared |" in markdown and "| L0 |" not in markdown
    assert "| the post, LoRA | 1.0420 | 1.0440 | 1.0280 | 1.0340 | 1.0320 | – | 1.0530 |" in markdown


def test_vocabulary_entry_gives_each_layer_its_own_table_when_layers_learn_their_own(tmp_path):
    """Per-layer increments (the post's residual-stream δ from the second layer): one table per learned layer,
    each from that layer's own δ of every id after EOS."""
    path = subword_model(tmp_path, ("rope", "lpi-resid", "lpi-resid"))
    document = STUDIES["increment_post_vocabulary"].load()(tmp_path / "out", [path], quick=True, figures=False,
                                                           progress=False)
    result = document["results"][path]
    assert not result["shared_delta"] and result["rows"] == [1, 2] and list(result["layers"]) == ["1", "2"]
    import repo_lens

    lens = repo_lens.load(path, device="cpu")
    # δ of id i after EOS is the step of the learned positions from EOS to i (an inclusive running sum)
    steps = np.stack([np.diff(lens.trace(torch.tensor([0, i]), progress=False).positions, axis=-1)[..., 0].mean(axis=1)
                      for i in range(len(SUBWORD_TOKENS))], axis=1)
    for layer in (1, 2):
        expected = vocabulary_table(steps[layer], SUBWORD_TOKENS, eos_id=0)
        medians = [row["median"] for row in result["layers"][str(layer)]["table"]["categories"].values()]
        assert medians == pytest.approx(expected.median.tolist(), rel=1e-6)
    markdown = document["markdown"]
    assert "| L1 |" in markdown and "| L2 |" in markdown and "Layer 1: drift" in markdown


def test_vocabulary_entry_refuses_a_byte_model(tmp_path):
    shared = byte_model(tmp_path, "shared", ["lpi", "lpi"], seed=1)
    with pytest.raises(InputError, match="needs a subword tokenizer"):
        STUDIES["increment_post_vocabulary"].load()(tmp_path / "out", [shared], quick=True, figures=False,
                                                    progress=False)


def test_the_entries_figures_are_built(scripts_run, tmp_path):
    """The figure builders of both entries on the tiny models' results (export needs Chromium; not here)."""
    from repo_lens.studies.reproductions import post_analyses, post_vocabulary
    from repo_lens.studies.reproductions.common import stem

    _, shared, _, scripts = scripts_run
    figures = post_analyses.figures_of(scripts["results"])
    name = stem(shared)
    assert {f"{name}_byte_table", f"{name}_boundary_auc", f"{name}_entities",
            f"{name}_spacing_chinese_shared"} <= set(figures)
    spacing = figures[f"{name}_spacing_english_per_row"]
    assert len(spacing.data[-1].x) == len(scripts["results"][shared]["spacing"]["english"]["text"])
    path = subword_model(tmp_path)
    vocabulary = STUDIES["increment_post_vocabulary"].load()(tmp_path / "b", [path], quick=True, figures=False,
                                                             progress=False)
    drawn = post_vocabulary.figures_of(vocabulary["results"])
    assert set(drawn) == {f"{stem(path)}_category_medians", f"{stem(path)}_drift"}
    medians = drawn[f"{stem(path)}_category_medians"]
    assert {trace.name for trace in medians.data} == set(vocabulary["results"][path]["layers"]["0"]["table"]["categories"])
    assert all(trace.y[0] == trace.y[1] for trace in medians.data)  # the shared δ: the same median in both layers


@pytest.mark.study
def test_zoo_defaults_quick(tmp_path):
    """The defaults: the zoo's byte models and the SmolLM2-135M conversion (about a minute to load)."""
    scripts = STUDIES["increment_post_scripts"]
    document = scripts.load()(tmp_path / "scripts", list(scripts.default_models), quick=True, figures=False,
                              progress=False)
    per_layer = document["results"]["zoo:bytes-post-lpi-resid"]
    assert per_layer["rows"] == list(range(6)) and per_layer["entities"]["p_value"][0] == 1.0
    assert per_layer["boundaries"]["n_gaps"] >= 2000 and 0.4 < per_layer["boundaries"]["auc"][0] < 0.6
    vocabulary = STUDIES["increment_post_vocabulary"]
    document = vocabulary.load()(tmp_path / "vocabulary", list(vocabulary.default_models), quick=True, figures=False,
                                 progress=False)
    graft = document["results"]["zoo:smollm2-135m-graft"]  # one DeltaMLP for all 30 layers: one table
    assert graft["shared_delta"] and graft["rows"] == list(range(30)) and list(graft["layers"]) == ["0"]
    result = document["results"]["zoo:smollm2-135m-lpi"]
    assert result["n_ids"] == 2048 and result["rows"][0] == 10
    assert set(result["layers"]["10"]["table"]["categories"]) >= {"word_start", "subword_continuation", "function_word"}
