"""zoo:smollm2-135m-grape: SmolLM2-135M continued with GRAPE-M's content-dependent phase from layer 10
(``repo-lens train --base zoo:smollm2-135m --mechanism grape-m``), shipped as what training changed. It is
the control's recipe but for the mechanism; it loads offline and its positions are a running sum of
positive, content-dependent frequencies that has left the integers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import repo_lens
from repo_lens.zoo import ZOO_DIR, zoo_entries
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

needs_smollm2 = pytest.mark.skipif(not external_installed("smollm2-135m"),
                                   reason=f"its base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")

NAME = "smollm2-135m-grape"
CONTROL = "smollm2-135m-rope-ct"
TEXT = "The jury said that the city of Atlanta had been well run, and the election was conducted with care."


def _recipe(name: str) -> dict:
    return json.loads((ZOO_DIR / name / "recipe.json").read_text())


def test_only_what_training_changed_is_shipped():
    folder = ZOO_DIR / NAME
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "delta.safetensors.xz", "recipe.json"]
    assert (folder / "delta.safetensors.xz").stat().st_size <= 5e6
    assert {"name": NAME, "mechanism": "grape-m"}.items() <= next(e for e in zoo_entries() if e["name"] == NAME).items()


def test_it_is_the_controls_recipe_but_for_the_mechanism():
    grape, control = _recipe(NAME), _recipe(CONTROL)
    assert (grape["mechanism"], control["mechanism"]) == ("grape-m", "rope")
    same = ("base", "first_layer", "lora_rank", "lora_alpha", "adapted", "tokens", "steps")
    assert {key: grape[key] for key in same} == {key: control[key] for key in same}
    # "corpus" did not exist when the control was trained; its default is the control's corpus
    settings = {k: v for k, v in grape["recipe"].items() if k not in ("mechanism", "corpus")}
    assert settings == {k: v for k, v in control["recipe"].items() if k != "mechanism"}
    assert grape["recipe"].get("corpus", "brown") == "brown"


def test_the_card_names_the_mechanism_and_compares_it_with_the_control():
    recipe, card = _recipe(NAME), (ZOO_DIR / NAME / "README.md").read_text()
    assert "GRAPE-M with a content-dependent phase" in card and f"{recipe['tokens']:,} tokens" in card
    assert "McNemar p vs control" in card and "other domain" in card
    final = recipe["log"][-1]
    assert final["step"] == 500 and f"{final['held_out_bits']:.4f}" in card


@needs_smollm2
def test_its_positions_are_a_running_sum_of_positive_frequencies_that_left_the_index():
    lens = repo_lens.load(f"zoo:{NAME}", device="cpu")
    assert lens.model.cfg.layer_mechanisms == ["rope"] * 10 + ["grape-m"] * 20
    trace = lens.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    index = np.arange(n_tokens, dtype=np.float32)
    np.testing.assert_array_equal(trace.positions[:10], np.broadcast_to(index, (10, 9, n_tokens)))
    learned = trace.positions[10:]
    assert learned.shape == (20, 9, n_tokens) and np.isfinite(learned).all()
    np.testing.assert_array_equal(learned[..., 0], 0.0)  # phase = sum over the tokens before
    assert (np.diff(learned, axis=-1) > 0).all()  # softplus: every frequency positive
    assert np.abs(learned - index).max() > 1.0


@needs_smollm2
def test_the_app_offers_it_with_its_size():
    """The model box lists it; its size is the base's plus one 576 → 9 phase map with bias in each of the
    20 re-positioned layers (the adapters are added into the base's weights)."""
    pytest.importorskip("streamlit")
    from repo_lens.app.models import model_info, model_sources

    assert f"zoo:{NAME}" in model_sources()
    info, base = model_info(f"zoo:{NAME}"), model_info("zoo:smollm2-135m")
    assert info.parameters == base.parameters + 20 * (576 * 9 + 9)
