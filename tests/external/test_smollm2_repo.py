"""zoo:smollm2-135m-repo: SmolLM2-135M re-positioned with RePo from layer 10 (``repo-lens train --base``),
shipped as what training changed on the packaged GGUF. Loads offline, traces English with RoPE in layers
0-9 and learned positions from layer 10, and its card states the recipe and the tokens seen."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.zoo import ZOO_DIR, zoo_entries
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

pytestmark = [pytest.mark.smollm2, pytest.mark.xdist_group("smollm2")]  # one worker reads the GGUF once

needs_smollm2 = pytest.mark.skipif(not external_installed("smollm2-135m"),
                                   reason=f"its base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")

NAME = "smollm2-135m-repo"
TEXT = "The jury said that the city of Atlanta had been well run, and the election was conducted with care."


@pytest.fixture(scope="module")
def lens():
    return repo_lens.load(f"zoo:{NAME}", device="cpu")


def test_only_what_training_changed_is_shipped_and_the_card_states_the_recipe():
    folder = ZOO_DIR / NAME
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "delta.safetensors.xz", "recipe.json"]
    assert (folder / "delta.safetensors.xz").stat().st_size <= 60e6
    recipe = json.loads((folder / "recipe.json").read_text())
    assert (recipe["base"], recipe["mechanism"], recipe["first_layer"]) == ("zoo:smollm2-135m", "repo", 10)
    assert recipe["tokens"] >= 2_000_000 and recipe["steps"] * 4 * 1024 == recipe["tokens"]
    card = (folder / "README.md").read_text()
    assert f"{recipe['tokens']:,} tokens" in card and "Brown" in card and "held-out" in card
    assert {"name": NAME, "mechanism": "repo"}.items() <= next(e for e in zoo_entries() if e["name"] == NAME).items()


@needs_smollm2
def test_it_traces_english_with_rope_below_layer_10_and_learned_positions_above(lens):
    assert lens.model.cfg.layer_mechanisms == ["rope"] * 10 + ["repo"] * 20
    trace = lens.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    assert trace.positions.shape == (30, 9, n_tokens) and "".join(trace.tokens).count("jury") == 1
    np.testing.assert_array_equal(trace.positions[:10], np.broadcast_to(np.arange(n_tokens, dtype=np.float32),
                                                                         (10, 9, n_tokens)))
    learned = trace.positions[10:]
    assert np.isfinite(learned).all()
    assert np.abs(learned - np.arange(n_tokens)).max() > 1.0  # not the integers


@needs_smollm2
def test_the_delta_adds_to_the_base(lens):
    """Layers 0-9 are the base's own; the adapted projections of layers 10+ differ from the base's."""
    base = repo_lens.load("zoo:smollm2-135m", device="cpu").model.state_dict()
    weights = lens.model.state_dict()
    assert torch.equal(weights["blocks.3.attn.q_proj.weight"], base["blocks.3.attn.q_proj.weight"])
    assert not torch.equal(weights["blocks.12.attn.q_proj.weight"], base["blocks.12.attn.q_proj.weight"])
    assert torch.equal(weights["blocks.12.mlp.up_proj.weight"], base["blocks.12.mlp.up_proj.weight"])


@needs_smollm2
def test_the_app_offers_it_with_its_size():
    """The model box lists it; its size is the base's plus the position modules (the adapters are added
    into the base's weights): 20 layers × (two 576 × 72 maps and a 72 × 9 one)."""
    pytest.importorskip("streamlit")
    from repo_lens.app.models import model_info, model_sources

    assert f"zoo:{NAME}" in model_sources()
    info, base = model_info(f"zoo:{NAME}"), model_info("zoo:smollm2-135m")
    assert (info.n_layers, info.n_heads, info.context) == (30, 9, 8192)
    assert info.parameters == base.parameters + 20 * (2 * 576 * 72 + 72 * 9)


CONTROL = "smollm2-135m-rope-ct"


def test_the_control_is_shipped_the_same_way_with_rope_kept():
    folder = ZOO_DIR / CONTROL
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "delta.safetensors.xz", "recipe.json"]
    control = json.loads((folder / "recipe.json").read_text())
    repo = json.loads((ZOO_DIR / NAME / "recipe.json").read_text())
    assert (control["mechanism"], control["first_layer"]) == ("rope", 10)
    same = ("base", "lora_rank", "lora_alpha", "adapted", "tokens", "steps")
    assert {key: control[key] for key in same} == {key: repo[key] for key in same}
    assert {k: v for k, v in control["recipe"].items() if k != "mechanism"} == {
        k: v for k, v in repo["recipe"].items() if k != "mechanism"}
    assert "RoPE (the control" in (folder / "README.md").read_text()


@needs_smollm2
def test_the_control_rotates_by_the_integers_in_every_layer():
    control = repo_lens.load(f"zoo:{CONTROL}", device="cpu")
    assert control.model.cfg.layer_mechanisms == ["rope"] * 30
    trace = control.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    np.testing.assert_array_equal(trace.positions, np.broadcast_to(np.arange(n_tokens, dtype=np.float32),
                                                                    (30, 9, n_tokens)))


@needs_smollm2
def test_the_position_edits_analysis_agrees_with_the_card_and_a_plain_forward(tmp_path):
    """analyses/smollm2_position_edits.py: its unedited held-out bits are the card script's on the same
    sequence (two code paths), the integer edit changes them, and the boundary AUCs are probabilities."""
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "analyses"))
    from smollm2_position_edits import main  # in this process: the base's GGUF is read once per session

    assert main(["--out", str(tmp_path), "--prompts", "1", "--sequences", "1", "--edits", "integer"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["layers"] == list(range(10, 30)) and set(summary["edits"]) == {"none", "integer"}
    from smollm2_repo_card import held_out_bits

    card = held_out_bits(repo_lens.load(f"zoo:{NAME}", device="cpu", dtype="float32"), 1024, 1)
    assert abs(summary["edits"]["none"]["held_out_bits_per_token"] - card["bits_per_token"]) < 1e-4
    assert abs(summary["edits"]["integer"]["held_out_bits_per_token"] - card["bits_per_token"]) > 0.1
    aucs = np.array([row for row in summary["word_boundary_auc"]["by_layer"].values()])
    assert aucs.shape == (20, 9) and ((aucs >= 0) & (aucs <= 1)).all()
