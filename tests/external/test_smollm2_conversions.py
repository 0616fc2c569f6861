"""The SmolLM2-135M conversions that start exactly at the base, shipped as what training changed:

- ``zoo:smollm2-135m-grape``: GRAPE-M's content-dependent phase from layer 10
  (``repo-lens train --base zoo:smollm2-135m --mechanism grape-m``);
- ``zoo:smollm2-135m-lpi``: the learned-increments post's per-layer increments from layer 10, each layer's δ read
  from the residual stream entering it through a norm of its own (``--mechanism lpi-resid``);
- ``zoo:smollm2-135m-graft``: the learned-increments post's graft, one δ per token from the input embeddings
  for every layer (``--mechanism lpi-graft``), with the control's adapters (layers 10-29).

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
    added_parameters: int  # what its position modules add to the base
    first_layer: int = 10  # the first re-positioned layer (the adapters are the control's, 10-29, for each)
    departure: float = 1.0  # how far from the index some token of TEXT has moved, at least (step 0: none)


DELTA_MLP = D_MODEL * (D_MODEL // 4) + D_MODEL // 4 + D_MODEL // 4 + 1  # d_model -> d_model / 4 -> 1, with biases
MECHANISMS = {
    "smollm2-135m-grape": Conversion("grape-m", "GRAPE-M with a content-dependent phase",
                                     LEARNED_LAYERS * (D_MODEL * N_HEADS + N_HEADS)),
    # a DeltaMLP and its RMSNorm's weight per re-positioned layer
    "smollm2-135m-lpi": Conversion("lpi-resid", "per-layer learned position increments from the residual stream",
                                   LEARNED_LAYERS * (DELTA_MLP + D_MODEL)),
    # one DeltaMLP for every layer; its δ stays within a few per cent of 1, so on TEXT's 21 tokens it moves less
    "smollm2-135m-graft": Conversion("lpi-graft", "the learned-increments post's graft", DELTA_MLP, first_layer=0,
                                     departure=0.2),
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


# what may differ from the control's settings: the mechanism; settings added since it was trained (their defaults
# are the control's); where the positions start (the graft re-positions every layer, its adapters are the
# control's); and the precision (bf16 autocast where the CPU has bf16, else fp32)
ALLOWED_TO_DIFFER = ("mechanism", "corpus", "adapters_from", "first_layer", "autocast")


@conversions
def test_it_is_the_controls_recipe_but_for_the_mechanism(name):
    converted, control = _recipe(name), _recipe(CONTROL)
    assert (converted["mechanism"], control["mechanism"]) == (MECHANISMS[name].mechanism, "rope")
    same = ("base", "lora_rank", "lora_alpha", "adapted", "tokens", "steps")
    assert {key: converted[key] for key in same} == {key: control[key] for key in same}
    assert converted["first_layer"] == MECHANISMS[name].first_layer
    assert converted.get("adapters_from", converted["first_layer"]) == control["first_layer"]  # the same adapters
    settings = {k: v for k, v in converted["recipe"].items() if k not in ALLOWED_TO_DIFFER}
    assert settings == {k: v for k, v in control["recipe"].items() if k not in ALLOWED_TO_DIFFER}
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
    mechanism, first = MECHANISMS[name].mechanism, MECHANISMS[name].first_layer
    assert lens.model.cfg.layer_mechanisms == ["rope"] * first + [mechanism] * (30 - first)
    trace = lens.trace(TEXT, progress=False)
    n_tokens = len(trace.tokens)
    index = np.arange(n_tokens, dtype=np.float32)
    np.testing.assert_array_equal(trace.positions[:first], np.broadcast_to(index, (first, N_HEADS, n_tokens)))
    learned = trace.positions[first:]
    assert learned.shape == (30 - first, N_HEADS, n_tokens) and np.isfinite(learned).all()
    steps = np.diff(learned, axis=-1)
    if mechanism == "grape-m":
        np.testing.assert_array_equal(learned[..., 0], 0.0)  # phase = sum over the tokens before
    elif mechanism == "lpi-graft":
        # one δ per token for every layer and head, summed over the tokens before: the first token at 0
        np.testing.assert_array_equal(learned, np.broadcast_to(learned[:1, :1], learned.shape))
        np.testing.assert_array_equal(learned[..., 0], 0.0)
    else:
        # one increment per token and layer, shared by the heads, summed with the token itself: 0 < δ < 10
        np.testing.assert_array_equal(learned, np.broadcast_to(learned[:, :1], learned.shape))
        assert ((learned[..., 0] > 0) & (learned[..., 0] < 10)).all() and (steps < 10).all()
    assert (steps > 0).all()  # softplus and sigmoid: every increment positive
    assert np.abs(learned - index).max() > MECHANISMS[name].departure


@needs_smollm2
@conversions
def test_the_app_offers_it_with_its_size(name):
    """The model box lists it; its size is the base's plus its position modules (one per re-positioned layer, or
    the one DeltaMLP the graft's layers share; the adapters are added into the base's weights)."""
    pytest.importorskip("streamlit")
    from repo_lens.app.models import model_info, model_sources

    assert f"zoo:{name}" in model_sources()
    info, base = model_info(f"zoo:{name}"), model_info("zoo:smollm2-135m")
    assert info.parameters == base.parameters + MECHANISMS[name].added_parameters
