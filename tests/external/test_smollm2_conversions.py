"""The SmolLM2-135M conversions that start exactly at the base, shipped as what training changed:

- ``zoo:smollm2-135m-grape``: GRAPE-M's content-dependent phase from layer 10
  (``repo-lens train --base zoo:smollm2-135m --mechanism grape-m``);
- ``zoo:smollm2-135m-lpi``: per-layer learned position increments from layer 10 (``--mechanism lpi-layer``).

Each is the control's recipe but for the mechanism; each loads offline, and its positions are a running
sum of positive, content-dependent increments that has left the integers."""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np
import pytest

import repo_lens
from repo_lens.zoo import ZOO_DIR, zoo_entries
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

pytestmark = [pytest.mark.smollm2, pytest.mark.xdist_group("smollm2")]  # one worker reads the GGUF once

needs_smollm2 = pytest.mark.skipif(not external_installed("smollm2-135m"),
                                   reason=f"its base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")

CONTROL = "smollm2-135m-rope-ct"
TEXT = "The jury said that the city of Atlanta had been well run, and the election was conducted with care."
D_MODEL, N_HEADS, LEARNED_LAYERS = 576, 9, 20


class Conversion(NamedTuple):
    mechanism: str
    card_name: str  # what its card calls the mechanism
    layer_parameters: int  # what one re-positioned layer adds


MECHANISMS = {
    "smollm2-135m-grape": Conversion("grape-m", "GRAPE-M with a content-dependent phase", D_MODEL * N_HEADS + N_HEADS),
    # the DeltaMLP: d_model -> d_model / 4 -> 1, with biases
    "smollm2-135m-lpi": Conversion("lpi-layer", "per-layer learned position increments",
                                   D_MODEL * (D_MODEL // 4) + D_MODEL // 4 + D_MODEL // 4 + 1),
}
conversions = pytest.mark.parametrize("name", sorted(MECHANISMS))


def _recipe(name: str) -> dict:
    return json.loads((ZOO_DIR / name / "recipe.json").read_text())


@conversions
def test_only_what_training_changed_is_shipped(name):
    folder = ZOO_DIR / name
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "delta.safetensors.xz", "recipe.json"]
    assert (folder / "delta.safetensors.xz").stat().st_size <= 5e6
    entry = next(e for e in zoo_entries() if e["name"] == name)
    assert {"name": name, "mechanism": MECHANISMS[name].mechanism}.items() <= entry.items()


@conversions
def test_it_is_the_controls_recipe_but_for_the_mechanism(name):
    converted, control = _recipe(name), _recipe(CONTROL)
    assert (converted["mechanism"], control["mechanism"]) == (MECHANISMS[name].mechanism, "rope")
    same = ("base", "first_layer", "lora_rank", "lora_alpha", "adapted", "tokens", "steps")
    assert {key: converted[key] for key in same} == {key: control[key] for key in same}
    # "corpus" did not exist when the control was trained; its default is the control's corpus
    settings = {k: v for k, v in converted["recipe"].items() if k not in ("mechanism", "corpus")}
    assert settings == {k: v for k, v in control["recipe"].items() if k != "mechanism"}
    assert converted["recipe"].get("corpus", "brown") == "brown"


@conversions
def test_the_card_names_the_mechanism_and_compares_it_with_the_control(name):
    recipe, card = _recipe(name), (ZOO_DIR / name / "README.md").read_text()
    assert MECHANISMS[name].card_name in card and f"{recipe['tokens']:,} tokens" in card
    assert "McNemar p vs control" in card and "other domain" in card
    final = recipe["log"][-1]
    assert final["step"] == 500 and f"{final['held_out_bits']:.4f}" in card


@needs_smollm2
@conversions
def test_its_positions_are_a_running_sum_of_positive_increments_that_left_the_index(name):
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    mechanism = MECHANISMS[name].mechanism
    assert lens.model.cfg.layer_mechanisms == ["rope"] * 10 + [mechanism] * LEARNED_LAYERS
    trace = lens.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    index = np.arange(n_tokens, dtype=np.float32)
    np.testing.assert_array_equal(trace.positions[:10], np.broadcast_to(index, (10, N_HEADS, n_tokens)))
    learned = trace.positions[10:]
    assert learned.shape == (LEARNED_LAYERS, N_HEADS, n_tokens) and np.isfinite(learned).all()
    steps = np.diff(learned, axis=-1)
    if mechanism == "grape-m":
        np.testing.assert_array_equal(learned[..., 0], 0.0)  # phase = sum over the tokens before
    else:
        # one increment per token and layer, shared by the heads, summed with the token itself: 0 < δ < 10
        np.testing.assert_array_equal(learned, np.broadcast_to(learned[:, :1], learned.shape))
        assert ((learned[..., 0] > 0) & (learned[..., 0] < 10)).all() and (steps < 10).all()
    assert (steps > 0).all()  # softplus and sigmoid: every increment positive
    assert np.abs(learned - index).max() > 1.0


@needs_smollm2
@conversions
def test_the_app_offers_it_with_its_size(name):
    """The model box lists it; its size is the base's plus the position module of each of the 20 re-positioned
    layers (the adapters are added into the base's weights)."""
    pytest.importorskip("streamlit")
    from repo_lens.app.models import model_info, model_sources

    assert f"zoo:{name}" in model_sources()
    info, base = model_info(f"zoo:{name}"), model_info("zoo:smollm2-135m")
    assert info.parameters == base.parameters + LEARNED_LAYERS * MECHANISMS[name].layer_parameters
