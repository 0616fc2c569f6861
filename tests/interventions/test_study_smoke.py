"""`repo-lens reproduce position_interventions` end to end, quick, on tiny random checkpoints (the zoo run
itself is in RESULTS.md): every family, every edit and control, intervals on every rate, span-restricted
patching maps; and the language-model protocol on a short-context model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.studies.reproductions import STUDIES


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    specs = {"tiny-repo": ("repo", 512), "tiny-rope": ("rope", 512), "tiny-fox": ("fox", 128)}
    for name, (mechanism, context) in specs.items():
        save_checkpoint(tiny_model(mechanism, n_layers=3, d_model=32, n_heads=2, context=context),
                        root / name, info={"name": name})
    models = [str(root / name) for name in specs]
    document = STUDIES["position_interventions"].load()(root / "out", models, quick=True, figures=False,
                                                        progress=False, batch_size=8)
    return root, models, document


@pytest.mark.study
def test_every_rate_has_an_interval_and_the_families_are_all_there(study):
    root, (repo_name, rope_name, _), document = study
    repo = document["results"][repo_name]["ablations"]
    assert set(repo["unedited"]["by_family"]) == {"needle_noise", "needle_text", "kv_lines", "fact_text"}
    for entry in repo["conditions"].values():
        if entry["moves"]:
            accuracy = entry["accuracy"]
            assert accuracy["low"] <= accuracy["value"] <= accuracy["high"] and accuracy["n"] == 8
            assert 0.0 <= entry["vs_unedited"]["accuracy"]["p"] <= 1.0
    modes = {entry["mode"] for entry in repo["conditions"].values()}
    assert {"affine", "rank", "scaled", "random", "window 8"} <= modes
    assert repo["conditions"]["head 2.1 affine"]["by_family"]["kv_lines"]["accuracy"]["n"] == 2
    assert len([key for key in repo["head_comparisons"] if " constant " in key]) == 2  # h0 vs h1 in layers 1 and 2


def test_the_rope_control_is_reported_as_unmoved_and_patching_it_changes_only_the_moved_needle(study):
    """RoPE's positions are the integers: an equal-length pair has the same positions token by token, so
    patching every token, the rest, the question or the answer (at the same indices in both prompts) changes
    nothing; the needle, transplanted from where it sat in the clean prompt, is moved back."""
    _, (_, rope_name, _), document = study
    rope = document["results"][rope_name]
    conditions = rope["ablations"]["conditions"]
    for mode in ("integer", "affine", "rank", "scaled", "random"):  # RoPE's positions already are the integers
        assert conditions[f"all {mode}"]["moves"] is False
    assert conditions["all constant"]["moves"] is True
    maps = rope["patching"]["maps"]
    for label in ("every token", "rest", "question", "answer"):
        assert np.nanmax(np.abs(np.asarray(maps[label]["value"], dtype=float))) == 0.0, label
    assert np.nanmax(np.abs(np.asarray(maps["needle"]["value"], dtype=float))) > 0.0


def test_the_short_context_model_goes_through_the_language_model_protocol(study):
    root, (_, _, fox_name), document = study
    fox = document["results"][fox_name]
    assert fox["protocol"] == "language model" and fox["windows"] == 4
    change = fox["conditions"]["all constant"]["change"]
    assert change["low"] <= change["value"] <= change["high"]
    written = json.loads((root / "out" / "results.json").read_text())
    assert written["study"] == "position_interventions" and "### One head at a time" in written["markdown"]
    assert "Language models" in (root / "out" / "table.md").read_text()
