"""The ``attention_sources`` study: its head selection on constructed masses, its targets against the tasks'
own definitions, its measures against sums written here, the decomposition's promise (the integer reference
pattern is the pattern of the forward ``interventions.ablate`` makes integer, also when the integers are written
into ``hook_pos`` by hand), and the whole entry with ``--quick`` on tiny models built here."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.analysis import score_decomposition
from repo_lens.errors import InputError
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.reproductions import STUDIES
from repo_lens.studies.reproductions.attention_sources import reference_check
from repo_lens.studies.reproductions.attention_sources_cases import Item, flipflop_item, needle_item, reversal_item
from repo_lens.studies.reproductions.attention_sources_lm import decomposed_at, quarters, spread, window_values
from repo_lens.studies.reproductions.attention_sources_measures import (closer_share, pick_heads,
                                                                       score_position_share, target_measures)
from repo_lens.studies.reproductions.attention_sources_report import markdown

ROOT = Path(__file__).resolve().parents[2]
IDS = [5, 9, 2, 33, 4, 4, 80, 1, 7, 19, 26, 3, 14, 15, 92, 65]
ROWS = [9, 12, 15]


@pytest.fixture(scope="module")
def lens():
    model = tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=2).double()
    with torch.no_grad():  # move RePo's position module off its initialisation so its positions vary
        generator = torch.Generator().manual_seed(1)
        for parameter in model.blocks[2].attn.mechanism.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return repo_lens.Lens(model, None)


# ------------------------------------------------------------------------------------------- head selection


def test_heads_are_picked_by_their_mean_mass_with_a_floor_a_relative_cut_and_a_cap():
    layers = [2, 3]
    mass = np.zeros((4, 2, 3))  # 4 inputs, 2 layers, 3 heads
    mass[:, 0, 1] = [0.9, 0.8, 1.0, 0.9]  # L2H1: mean 0.9, the best
    mass[:, 1, 2] = [0.5, 0.3, 0.4, 0.4]  # L3H2: 0.4, above 0.3 and above half the best (0.45)? no: 0.4 < 0.45
    mass[:, 1, 0] = [0.6, 0.4, 0.5, 0.5]  # L3H0: 0.5, picked
    mass[:, 0, 2] = [0.9, 0.0, 0.0, 0.1]  # L2H2: one input high, mean 0.25, not picked
    assert pick_heads(mass, layers) == ([(2, 1), (3, 0)], True)
    assert pick_heads(mass, layers, relative=0.0) == ([(2, 1), (3, 0), (3, 2)], True)
    assert pick_heads(mass, layers, relative=0.0, at_most=2) == ([(2, 1), (3, 0)], True)
    # no head reaches the floor: the best head alone, and the result says so
    assert pick_heads(mass * 0.3, layers) == ([(2, 1)], False)
    with pytest.raises(InputError, match="mass must be"):
        pick_heads(mass[:, :1], layers)


# ---------------------------------------------------------------------------------------------- the targets


def test_targets_are_what_each_task_asks_for():
    from repo_lens.data import PromptEncoding, niah_prompt
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.train.flipflop import FlipFlopTask
    from repo_lens.train.tasks import ReversalTask

    prompt = niah_prompt(ByteTokenizer(), 700, depth=0.3, seed=4, encoding=PromptEncoding(add_special_tokens=False))
    item = needle_item(prompt)
    assert [prompt.ids[row + 1] for row in item.rows] == list(prompt.answer.encode())  # each row predicts a digit
    assert bytes(prompt.ids[item.targets[0]].tolist()).decode() == prompt.answer and item.targets[0][0] < item.rows[0]

    task = ReversalTask(batch_size=1)
    example = task.example(random.Random(3), 6)
    words = example.ids[example.answer_start:-1]
    inputs = example.ids[example.answer_start - 1 - 6:example.answer_start - 1]
    assert words == inputs[::-1]
    item = reversal_item(example.ids[:-1], np.arange(example.answer_start - 1, len(example.ids) - 1), "6 words")
    for k, (row, target) in enumerate(zip(item.rows, item.targets)):
        assert row == example.answer_start - 1 + k and inputs[5 - k] == example.ids[target[0]] == words[k]

    flipflop = FlipFlopTask(batch_size=1, length=40)
    ids = flipflop.sequence(random.Random(5), 0.5)[:-1]
    item = flipflop_item(ids, "test")
    for row, target in zip(item.rows, item.targets):
        bit = ids[row + 1] if row + 1 < len(ids) else None
        writes = [index for index in range(0, row, 2) if flipflop.vocab[ids[index]] == "w"]
        assert target.tolist() == [writes[-1], writes[-1] + 1] and flipflop.vocab[ids[row]] == "r"
        assert bit is None or bit == ids[writes[-1] + 1]  # the read returns the latest write's bit
    assert len(item.rows) == sum(flipflop.vocab[token] == "r" for token in ids[::2])


# --------------------------------------------------------------------------------------------- the measures


def test_target_measures_sum_the_patterns_and_split_the_lead(lens):
    found = score_decomposition(lens, IDS, 2, queries=ROWS)
    targets = [np.array([1, 4]), np.array([0]), np.array([7, 8, 15])]
    measured = target_measures(found, targets)
    for name, pattern in found.patterns.items():
        expected = np.mean([pattern[:, row, keys].sum(-1) for row, keys in enumerate(targets)], axis=0)
        np.testing.assert_allclose(measured[f"mass_{name}"], expected, atol=1e-12)
    for part, values in (("content", found.content), ("position", found.position)):
        leads = []
        for row, keys in enumerate(targets):
            others = [key for key in range(ROWS[row] + 1) if key not in keys]
            leads.append(values[:, row, keys].mean(-1) - values[:, row, others].mean(-1))
        np.testing.assert_allclose(measured[f"lead_{part}"], np.mean(leads, axis=0), atol=1e-10)
    with pytest.raises(InputError, match="at or before the row"):
        target_measures(found, [np.array([10]), np.array([0]), np.array([1])])  # key 10 comes after row 9


def test_shares_against_sums_written_here(lens):
    found = score_decomposition(lens, IDS, 2, queries=ROWS)
    constant = decomposed_at(lens, IDS, 2, ROWS, torch.zeros(len(IDS)))
    # the model rotates in float32: the content from the constant run's bands agrees to float32's rounding
    np.testing.assert_allclose(constant.bands.sum(-1)[:, found.mask], found.content[:, found.mask], atol=1e-6)
    share = score_position_share(found.position, found.score, found.mask)
    pairs = [(found.position[h, r, :q + 1], found.score[h, r, :q + 1]) for h in range(4) for r, q in enumerate(ROWS)]
    expected = sum(((p - p.mean()) * (s - s.mean())).sum() for p, s in pairs) / sum(((s - s.mean()) ** 2).sum()
                                                                                     for _, s in pairs)
    assert share == pytest.approx(expected, abs=1e-10)
    assert quarters(np.ones(10)).tolist() == [3.0, 3.0, 2.0, 2.0] and spread(4, 0, 3) == [0, 1, 2, 3]
    assert closer_share(np.array([0.0, 5.0, 1.0, 2.0]), [3], [np.array([0])]) == 0.5  # keys 2 and 3: |z − 2| < 2


def test_a_language_models_window_pools_the_bands_records_heads(lens):
    from repo_lens.studies.band_items import band_record

    record = band_record(lens, IDS, [0, 2], 4)  # RoPE, RePo
    values = window_values(record, 1)  # layer 2, RePo
    position = np.asarray(record["position_band_abs_mean"][1])  # [head, band]
    np.testing.assert_allclose(values["bands"], position.sum(0) / position.sum(), atol=1e-12)
    assert sum(values["bands"]) == pytest.approx(1.0) and values["bands"] != values["bands_integer"]
    assert values["first_token"]["actual"] == pytest.approx(np.mean(record["sink_mass"][1]))
    content, moved = np.sum(record["content_abs_mean"][1]), np.sum(record["position_abs_mean"][1])
    assert values["position_share"] == pytest.approx(moved / (moved + content))
    assert record["layer_kinds"] == ["rope", "repo"]
    rope = window_values(record, 0)  # layer 0 rotates by the index: its integer profile is its own
    np.testing.assert_allclose(rope["bands"], rope["bands_integer"], atol=1e-12)


# ------------------------------------------------------------------------------ the decomposition's promise


def test_the_integer_reference_is_the_pattern_of_the_forward_made_integer(lens):
    found = score_decomposition(lens, IDS, 2, queries=ROWS)
    seen = {}

    def keep(pattern, hook):
        seen["pattern"] = pattern[0].detach()

    with lens.model.hooks(fwd_hooks=[("blocks.2.attn.hook_pattern", keep)]):
        interventions.ablate(lens, [IDS], mode="integer", layers=[2])
    np.testing.assert_allclose(found.patterns["reference"], seen["pattern"][:, ROWS].numpy(), atol=1e-6)
    assert not np.allclose(found.patterns["reference"], found.patterns["actual"], atol=1e-3)  # the edit moves it
    # the same integers written into hook_pos by hand: the decomposition's own pattern is then the reference
    by_hand = decomposed_at(lens, IDS, 2, ROWS, torch.arange(len(IDS)))
    np.testing.assert_allclose(by_hand.patterns["actual"], found.patterns["reference"], atol=1e-6)
    item = Item(ids=IDS, rows=ROWS, targets=[np.array([0])] * 3, family="test")
    assert reference_check(lens, item, 2, [0, 3]) < 1e-6


# ---------------------------------------------------------------------------------------- the whole entry


def _checkpoint(directory: Path, mechanism: str, task: str | None, **shape) -> str:
    model = tiny_model(mechanism, n_layers=2, d_model=32, n_heads=2, seed=1, **shape)
    info = {"name": f"tiny-{mechanism}", **({"train_config": {"task": task}} if task else {})}
    return str(save_checkpoint(model, directory, info=info))


@pytest.mark.study
def test_the_entry_runs_quick_on_tiny_models_of_every_protocol(tmp_path):
    models = [_checkpoint(tmp_path / "needle", "repo", "mix", context=512),
              _checkpoint(tmp_path / "reversal", "repo", "reversal", context=72),
              _checkpoint(tmp_path / "flipflop", "cope", "flipflop", context=32),
              _checkpoint(tmp_path / "language", "lpi", None, context=128)]
    done = subprocess.run([sys.executable, str(ROOT / "analyses" / "attention_sources.py"), "--out",
                           str(tmp_path / "out"), *sum((["--model", model] for model in models), []), "--quick",
                           "--no-figures", "--quiet"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    results = document["results"]
    assert [results[model]["protocol"] for model in models] == ["needle", "reversal", "flipflop", "bands"]
    for model in models[:3]:
        result = results[model]
        assert result["picked"] and set(result["heads"]) == set(result["picked"])
        assert result["reference_vs_ablated_max_abs"] < 1e-5
        edits = [entry["edit"] for entry in result["causal"]]
        assert edits[0] == "unedited" and "layer integer" in edits
        for head in result["heads"].values():
            for pattern in ("actual", "content", "position", "reference"):
                assert 0.0 <= head[f"mass_{pattern}"]["value"] <= 1.0
    language = results[models[3]]["layers"]
    learned = [row for row in language.values() if row["kind"] == "lpi"]
    assert learned and all(sum(row["bands"]) == pytest.approx(1.0, abs=1e-6) for row in learned)
    assert document["markdown"] == markdown(results) and "| head |" in done.stdout
    assert STUDIES["attention_sources"].batched


# ------------------------------------------------------------------------------- the committed results


COMMITTED = ROOT / "analyses" / "results" / "attention_sources" / "results.json.gz"


def test_the_committed_results_follow_from_their_own_per_input_values():
    """RESULTS.md quotes analyses/results/attention_sources: its picked heads follow from the selection masses it
    stores, each head's intervals from its per-input values, each causal score from its per-input hits."""
    import gzip

    from repo_lens.interventions import stats

    if not COMMITTED.is_file():
        pytest.skip(f"{COMMITTED} is not in this checkout")
    results = json.loads(gzip.decompress(COMMITTED.read_bytes()))["results"]
    tasks = {model: result for model, result in results.items() if result["protocol"] != "bands"}
    assert set(tasks) == {"zoo:bytes1k-repo", "zoo:reversal-repo", "zoo:flipflop-cope"}
    for model, result in tasks.items():
        layers = result["candidate_layers"]
        heads = max(int(name.split("H")[1]) for name in result["selection_mass"]) + 1
        mass = np.array([[result["selection_mass"][f"L{layer}H{head}"] for head in range(heads)] for layer in layers])
        picked, reached = pick_heads(mass[None], layers)
        assert [f"L{layer}H{head}" for layer, head in picked] == result["picked"] and reached, model
        for index, head in enumerate(result["picked"]):
            for key in ("mass_actual", "mass_content", "mass_position", "mass_reference", "lead_content"):
                values = np.asarray(result["per_input"][key])[:, index]
                expected = stats.bootstrap_mean(values)
                for end in ("value", "low", "high"):  # per-input values are stored to 4 decimals
                    assert result["heads"][head][key][end] == pytest.approx(expected[end], abs=2e-3), (model, head, key)
        for entry in result["causal"]:
            hits = np.asarray(entry["hits"])
            assert entry["accuracy"] == pytest.approx(stats.wilson(int(hits.sum()), hits.size)), (model, entry["edit"])
    language = [result for result in results.values() if result["protocol"] == "bands"]
    assert len(language) == 4 and all(sum(row["bands"]) == pytest.approx(1.0) for result in language
                                      for row in result["layers"].values() if "bands" in row)
