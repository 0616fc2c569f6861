"""Interventions on the generic Hugging Face lens (repo_lens.interventions.hf_positions and hf_grids, through
repo_lens.hf.load_hf on tiny Llama and Qwen2 checkpoints that stock transformers writes here, offline): each edit
equals the same transformers model run directly with the edited position_ids (every layer) or with the edited
rotary cos and sin given to one attention layer by a plain torch hook (chosen layers); what cannot work (per-head
edits and grids, a model without a rotary embedding, one whose rotary embedding takes more than the position_ids)
is one InputError naming what it needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import hf_model, save_hf_model
from repo_lens import InputError, interventions
from repo_lens.data.spans import Prompt
from repo_lens.interventions import (Constant, GridOptions, Integer, Interpolate, Mean, Shift, Shuffle, Stretch,
                                     Window)
from repo_lens.interventions.edits import prompt_seeds

pytest.importorskip("nnsight")

from repo_lens.hf import load_hf  # noqa: E402  (after the skip: needs nnsight)

IDS = [1, 5, 9, 12, 7, 3, 22, 40, 17, 8, 30, 2]
T = len(IDS)
METRIC = interventions.logit_difference(5, 9)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def hf_lens(request, tmp_path_factory):
    from transformers import Qwen2Config

    if request.param == "llama":
        return load_hf(request.getfixturevalue("llama_dir"), device="cpu")
    config = Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=0)
    return load_hf(save_hf_model(hf_model(config, seed=4), tmp_path_factory.mktemp("qwen2")), device="cpu")


def _direct(lens, ids: list[int], positions: torch.Tensor) -> torch.Tensor:
    """The transformers model itself, run with ``positions`` as its position_ids (no nnsight)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        return lens.hf_model(x, position_ids=positions[None], attention_mask=torch.ones_like(x)).logits


def _one_layer(lens, ids: list[int], layers: dict[int, torch.Tensor]) -> torch.Tensor:
    """The model with the rotary cos and sin of ``layers[l]`` handed to attention layer l by a torch pre-hook."""
    model = lens.hf_model.model
    handles = []
    for layer, positions in layers.items():
        def swap(module, args, kwargs, positions=positions):
            x = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            return args, {**kwargs, "position_embeddings": model.rotary_emb(x, positions[None].to(x.dtype))}

        handles.append(model.layers[layer].self_attn.register_forward_pre_hook(swap, with_kwargs=True))
    try:
        with torch.no_grad():
            return lens.hf_model(torch.tensor([ids])).logits
    finally:
        for handle in handles:
            handle.remove()


def _shuffled(seed: int) -> torch.Tensor:
    order = torch.randperm(T, generator=torch.Generator().manual_seed(prompt_seeds(torch.tensor([IDS]), [T], seed)[0]))
    return order.float()  # positions 0..T-1 taken in that order


TOKENS = torch.arange(T, dtype=torch.float32)
WHOLE_MODEL = [
    (Constant(), torch.zeros(T)),
    (Integer(), TOKENS),
    (Interpolate(p=0.25, toward="constant"), 0.75 * TOKENS),
    (Interpolate(p=0.5), TOKENS),  # the positions already are the integers
    (Stretch(factor=0.5), 0.5 * TOKENS),
    (Shift(offset=3.0), TOKENS + 3.0),
    (Shuffle(seed=2), _shuffled(2)),
]


@pytest.mark.parametrize("mode, positions", WHOLE_MODEL, ids=[mode.label for mode, _ in WHOLE_MODEL])
def test_every_layer_at_once_equals_the_model_run_with_the_edited_position_ids(hf_lens, mode, positions):
    edited = interventions.ablate(hf_lens, IDS, mode=mode)
    torch.testing.assert_close(edited, _direct(hf_lens, IDS, positions), atol=1e-5, rtol=1e-5)
    scores = interventions.ablate(hf_lens, IDS, mode=mode, metric=METRIC)
    assert isinstance(scores, np.ndarray) and scores.shape == (1,)
    assert scores[0] == pytest.approx(float(METRIC(edited)[0]), abs=1e-6)


def test_a_shift_changes_nothing_but_rounding_and_a_stretch_changes_the_logits(hf_lens):
    plain = _direct(hf_lens, IDS, TOKENS)
    torch.testing.assert_close(interventions.ablate(hf_lens, IDS, mode=Shift(offset=7.0)), plain, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(interventions.ablate(hf_lens, IDS, mode=Stretch(factor=3.0)), plain, atol=1e-3)


def test_a_batch_of_prompts_of_other_lengths_is_each_prompt_alone(hf_lens):
    short = IDS[:7]
    for mode, scale in ((Constant(), 0.0), (Stretch(factor=0.5), 0.5)):
        logits = interventions.ablate(hf_lens, [IDS, short], mode=mode)
        for row, ids in enumerate((IDS, short)):
            expected = _direct(hf_lens, ids, scale * torch.arange(len(ids), dtype=torch.float32))
            torch.testing.assert_close(logits[row:row + 1, :len(ids)], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode, positions", [(Stretch(factor=0.5), 0.5 * TOKENS), (Constant(), torch.zeros(T)),
                                             (Shift(offset=-2.0), TOKENS - 2.0)], ids=["stretch", "constant", "shift"])
def test_chosen_layers_equal_their_rotary_inputs_replaced_by_hand(hf_lens, mode, positions):
    one = interventions.ablate(hf_lens, IDS, mode=mode, layers=[1])
    torch.testing.assert_close(one, _one_layer(hf_lens, IDS, {1: positions}), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(one, _direct(hf_lens, IDS, TOKENS), atol=1e-4) or mode.name == "shift"
    two = interventions.ablate(hf_lens, IDS, mode=mode, layers=[0, -1])
    torch.testing.assert_close(two, _one_layer(hf_lens, IDS, {0: positions, 2: positions}), atol=1e-5, rtol=1e-5)
    every = interventions.ablate(hf_lens, IDS, mode=mode, layers=[0, 1, 2])
    torch.testing.assert_close(every, _direct(hf_lens, IDS, positions), atol=1e-5, rtol=1e-5)


def test_tokens_and_the_mean_of_a_reference(hf_lens):
    some = interventions.ablate(hf_lens, IDS, mode=Constant(), tokens=slice(4, 8))
    expected = TOKENS.clone()
    expected[4:8] = 0.0
    torch.testing.assert_close(some, _direct(hf_lens, IDS, expected), atol=1e-5, rtol=1e-5)
    # the mean position of each token index over a reference set is the index itself: nothing moves
    mean = interventions.ablate(hf_lens, IDS, mode=Mean(reference=[IDS + [4, 4], IDS[:3] * 5]))
    torch.testing.assert_close(mean, _direct(hf_lens, IDS, TOKENS), atol=1e-5, rtol=1e-5)
    with pytest.raises(InputError, match="mean ablation of 12 tokens needs a reference set at least as long"):
        interventions.ablate(hf_lens, IDS, mode=Mean(reference=[IDS[:5]]))


def test_ablated_positions_are_the_edited_position_ids_of_the_edited_layers(hf_lens):
    positions = interventions.ablated_positions(hf_lens, IDS, mode=Stretch(factor=0.5), layers=[1])
    assert positions.shape == (3, 4, T) and positions.dtype == np.float32
    np.testing.assert_allclose(positions[1], np.broadcast_to(0.5 * np.arange(T), (4, T)))
    np.testing.assert_allclose(positions[[0, 2]], np.broadcast_to(np.arange(T), (2, 4, T)))
    window = interventions.ablated_positions(hf_lens, IDS, mode=Window(width=4, seed=1))
    for start in range(0, T, 4):  # every layer, each block of 4 tokens keeps its own positions
        assert sorted(window[0, 0, start:start + 4].tolist()) == list(range(start, min(start + 4, T)))
        np.testing.assert_array_equal(window[2], window[0])


def test_the_layer_grid_of_ablations_is_one_ablation_per_layer(hf_lens):
    also = {"other": interventions.logit_difference(1, 2)}
    grid = interventions.ablation_grid(hf_lens, IDS, METRIC, mode=Stretch(factor=0.25), grid="layer",
                                       options=GridOptions(batch_size=2, progress=False, also=also))
    assert grid.values.shape == (3,) and grid.layers == [0, 1, 2] and grid.heads == [0, 1, 2, 3]
    for layer in range(3):
        alone = _one_layer(hf_lens, IDS, {layer: 0.25 * TOKENS})
        assert grid.values[layer] == pytest.approx(float(METRIC(alone)[0]), abs=1e-5)
        assert grid.also["other"][layer] == pytest.approx(float(also["other"](alone)[0]), abs=1e-5)
    assert grid.baseline == pytest.approx(float(METRIC(_direct(hf_lens, IDS, TOKENS))[0]), abs=1e-5)
    assert grid.clean == pytest.approx(float(METRIC(_direct(hf_lens, IDS, 0.25 * TOKENS))[0]), abs=1e-5)
    assert grid.meta["mode"] == "stretch 0.25"


def _prompt(ids: list[int], needle: int, answer: int) -> Prompt:
    """A prompt whose needle (3 tokens) starts at ``needle`` and whose answer (2 tokens) at ``answer``."""
    return Prompt(text="", ids=np.asarray(ids), spans={"needle": (needle, needle + 3), "answer": (answer, answer + 2)},
                  char_spans={}, query=(answer, answer + 2), answer="")


CLEAN = _prompt([1, 4, 20, 21, 22, 6, 7, 8, 9, 10, 30, 31], needle=2, answer=10)
MOVED = _prompt([1, 4, 6, 7, 8, 9, 10, 20, 21, 22, 11, 12, 13, 30, 31], needle=7, answer=13)


def _moved_positions() -> torch.Tensor:
    """The moved prompt's positions with the clean needle's and answer's written at its own needle and answer."""
    positions = torch.arange(len(MOVED), dtype=torch.float32)
    positions[7:10] = torch.tensor([2.0, 3.0, 4.0])
    positions[13:15] = torch.tensor([10.0, 11.0])
    return positions


def test_patching_writes_the_clean_spans_positions_into_one_layer_at_a_time(hf_lens):
    metric = interventions.answer_logprob(MOVED)
    grid = interventions.patch(hf_lens, CLEAN, MOVED, metric, grid="layer",
                               options=GridOptions(align=["needle", "answer"], progress=False))
    for layer in range(3):
        expected = _one_layer(hf_lens, MOVED.ids.tolist(), {layer: _moved_positions()})
        assert grid.values[layer] == pytest.approx(float(metric(expected)[0]), abs=1e-5)
    plain = _direct(hf_lens, MOVED.ids.tolist(), torch.arange(len(MOVED), dtype=torch.float32))
    assert grid.baseline == pytest.approx(float(metric(plain)[0]), abs=1e-5)
    assert np.isnan(grid.clean)  # the prompts differ in length: the metric reads the moved prompt's answer
    needle = interventions.patch(hf_lens, CLEAN, MOVED, metric, grid="layer", layers=[2],
                                 options=GridOptions(tokens="needle", progress=False))
    positions = torch.arange(len(MOVED), dtype=torch.float32)
    positions[7:10] = torch.tensor([2.0, 3.0, 4.0])
    expected = _one_layer(hf_lens, MOVED.ids.tolist(), {2: positions})
    assert needle.values[2] == pytest.approx(float(metric(expected)[0]), abs=1e-5)
    assert np.isnan(needle.values[:2]).all()
    same = interventions.patch(hf_lens, IDS, IDS, METRIC, grid="layer", options=GridOptions(progress=False))
    np.testing.assert_allclose(same.values, same.baseline, atol=1e-6)  # equal prompts: equal positions
    assert same.clean == pytest.approx(same.baseline, abs=1e-6)


def test_attribution_is_the_derivative_along_the_patch(llama_dir):
    lens = load_hf(llama_dir, device="cpu", dtype=torch.float64)

    def metric(logits):  # the answer's log-probability in float64 (answer_logprob rounds to float32)
        return logits[:, 12].log_softmax(-1)[:, 30] + logits[:, 13].log_softmax(-1)[:, 31]

    estimate = interventions.attribute(lens, CLEAN, MOVED, metric, grid="layer",
                                       options=GridOptions(align=["needle", "answer"]))
    plain = torch.arange(len(MOVED), dtype=torch.float64)
    step = _moved_positions().double() - plain

    def slope(layer: int, epsilon: float) -> float:  # the central difference along the patch, in layer ``layer``
        up, down = (float(metric(_one_layer(lens, MOVED.ids.tolist(), {layer: plain + sign * epsilon * step}))[0])
                    for sign in (1, -1))
        return (up - down) / (2 * epsilon)

    for layer in range(3):
        # Richardson's extrapolation of two central differences: error O(ε⁴), with steps large enough that the
        # rotary embedding's float32 arithmetic does not swamp them
        derivative = (4 * slope(layer, 1e-2) - slope(layer, 2e-2)) / 3
        assert estimate.values[layer] - estimate.baseline == pytest.approx(derivative, rel=5e-3)
        assert abs(derivative) > 1e-5  # the patch moves the metric: the check can fail
    assert estimate.baseline == pytest.approx(float(metric(_direct(lens, MOVED.ids.tolist(), plain))[0]), abs=1e-9)


@pytest.mark.parametrize("call, message", [
    (lambda lens: interventions.ablate(lens, IDS, mode=Constant(), heads=[0]),
     "ablate: every head of a layer of an HFLens shares its positions"),
    (lambda lens: interventions.ablated_positions(lens, IDS, mode=Constant(), heads=[1, 2]),
     "ablated_positions: every head of a layer of an HFLens shares its positions"),
    (lambda lens: interventions.patch(lens, IDS, IDS, METRIC),
     'patch on an HFLens runs grid="layer" only'),
    (lambda lens: interventions.ablation_grid(lens, IDS, METRIC, mode=Constant(), grid="layer_head_position"),
     'ablation_grid on an HFLens runs grid="layer" only'),
    (lambda lens: interventions.attribute(lens, IDS, IDS, METRIC, grid="layer", heads=[0]),
     "attribute: every head of a layer of an HFLens shares its positions"),
    (lambda lens: interventions.attribute(lens, IDS, IDS, lambda logits: np.zeros(logits.shape[0]), grid="layer"),
     "attribute needs a differentiable metric"),
    (lambda lens: interventions.ablate(lens, IDS, mode=Constant(), layers=[3]), "layer 3 does not exist"),
], ids=["ablate-heads", "positions-heads", "patch-grid", "ablation-grid", "attribute-heads", "attribute-metric",
        "layer"])
def test_what_an_hf_lens_cannot_do_is_refused_naming_what_it_needs(hf_lens, call, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as caught:
        call(hf_lens)
    text = str(caught.value)
    if "shares its positions" in text:
        assert "heads=None" in text or 'grid="layer"' in text, text


def test_a_model_without_a_rotary_embedding_or_with_one_per_kind_of_layer_is_refused():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel

    gpt2 = load_hf(GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2)))
    with pytest.raises(InputError, match="GPT2LMHeadModel has no rotary_emb module"):
        interventions.ablate(gpt2, IDS, mode=Constant())
    gemma = load_hf(Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                                       num_hidden_layers=2, num_attention_heads=2,
                                                       num_key_value_heads=1, head_dim=8)))
    with pytest.raises(InputError, match=r"must take \(x, position_ids\) alone; the rotary embedding of "
                                         r"Gemma3ForCausalLM \(model.rotary_emb\) takes"):
        interventions.patch(gemma, IDS, IDS, METRIC, grid="layer")


def test_the_positions_an_edit_starts_from_are_the_models_own_position_ids(hf_lens):
    from repo_lens.interventions.hf_grids import patch_hf
    from repo_lens.interventions.hf_positions import model_positions

    torch.testing.assert_close(model_positions(hf_lens, torch.tensor([IDS, IDS[::-1]])), TOKENS.expand(2, -1))
    # the public patch is the HFLens grid, and the same prompts patch nothing
    grid = patch_hf(hf_lens, IDS, IDS, METRIC, "layer", None, None, GridOptions(progress=False))
    np.testing.assert_allclose(grid.values, np.full(3, grid.baseline), atol=1e-6)


def test_attribution_runs_under_inference_mode(hf_lens):
    metric = interventions.answer_logprob(MOVED)
    options = GridOptions(align=["needle", "answer"])
    outside = interventions.attribute(hf_lens, CLEAN, MOVED, metric, grid="layer", options=options)
    with torch.inference_mode():
        inside = interventions.attribute(hf_lens, CLEAN, MOVED, metric, grid="layer", options=options)
    np.testing.assert_allclose(inside.values, outside.values, atol=1e-6)
    assert np.isfinite(inside.values).all() and not np.allclose(inside.values, inside.baseline)
