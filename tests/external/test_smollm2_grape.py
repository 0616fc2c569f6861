"""zoo:smollm2-135m-grape: SmolLM2-135M with GRAPE-M's content-dependent phase from layer 10, shipped as what
training changed. It loads offline, traces English with RoPE in layers 0-9 and phases that left the index from
layer 10, and its card carries the recipe, the tokens and the evaluation beside the control."""

from __future__ import annotations

import json

import numpy as np
import pytest

import repo_lens
from repo_lens.zoo import ZOO_DIR, zoo_entries
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

needs_smollm2 = pytest.mark.skipif(not external_installed("smollm2-135m"),
                                   reason=f"its base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")

NAME, CONTROL = "smollm2-135m-grape", "smollm2-135m-rope-ct"
TEXT = "The jury said that the city of Atlanta had been well run, and the election was conducted with care."


def test_it_ships_only_what_training_changed_with_the_controls_recipe():
    folder = ZOO_DIR / NAME
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "delta.safetensors.xz", "recipe.json"]
    recipe, control = (json.loads((ZOO_DIR / name / "recipe.json").read_text()) for name in (NAME, CONTROL))
    assert (recipe["base"], recipe["mechanism"], recipe["first_layer"]) == ("zoo:smollm2-135m", "grape-m", 10)
    same = ("base", "lora_rank", "lora_alpha", "adapted", "tokens", "steps")
    assert {key: recipe[key] for key in same} == {key: control[key] for key in same}
    settings = {k: v for k, v in recipe["recipe"].items() if k not in ("mechanism", "corpus")}
    assert settings == {k: v for k, v in control["recipe"].items() if k != "mechanism"}
    card = (folder / "README.md").read_text()
    assert "GRAPE-M with a content-dependent phase" in card and f"{recipe['tokens']:,} tokens" in card
    assert "McNemar p vs control" in card and "other domain" in card
    assert {"name": NAME, "mechanism": "grape-m"}.items() <= next(e for e in zoo_entries() if e["name"] == NAME).items()


@needs_smollm2
def test_it_traces_english_with_rope_below_layer_10_and_phases_that_left_the_index():
    lens = repo_lens.load(f"zoo:{NAME}", device="cpu")
    assert lens.model.cfg.layer_mechanisms == ["rope"] * 10 + ["grape-m"] * 20
    trace = lens.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    index = np.arange(n_tokens, dtype=np.float32)
    np.testing.assert_array_equal(trace.positions[:10], np.broadcast_to(index, (10, 9, n_tokens)))
    learned = trace.positions[10:]
    np.testing.assert_array_equal(learned[..., 0], 0.0)  # the phase is an exclusive running sum
    assert (np.diff(learned, axis=-1) > 0).all()  # ω = softplus(·) > 0
    assert np.abs(learned - index).max() > 1.0


@needs_smollm2
def test_the_app_offers_it_with_its_size():
    """Its size is the base's plus the phase maps: 20 layers × (576 × 9 weights + 9 biases)."""
    pytest.importorskip("streamlit")
    from repo_lens.app.models import model_info, model_sources

    assert f"zoo:{NAME}" in model_sources()
    info, base = model_info(f"zoo:{NAME}"), model_info("zoo:smollm2-135m")
    assert info.parameters == base.parameters + 20 * (576 * 9 + 9)
