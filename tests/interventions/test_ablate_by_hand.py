"""Issue 33, item 5: every ablation mode equals the same edit made by hand with run_with_hooks, on every
learned mechanism; and the registry declares the edits the hand table states."""

from __future__ import annotations

import pytest
import torch

from repo_lens import interventions
from repo_lens.interventions import Constant, Integer, Interpolate, Mean, Shuffle
from repo_lens.interventions.edits import prompt_seeds
from repo_lens.model.registry import position_edit

from .helpers import HAND_EDITS, LEARNED, hook_name, ids_of, tiny_lens

TEXT = "the needle sits in hay"
REFERENCE = ["a haystack of plain text!", "another reference prompt?"]  # both longer than TEXT


def test_every_learned_mechanism_has_a_hand_edit_matching_the_registry():
    assert sorted(HAND_EDITS) == sorted(LEARNED), "a new learned mechanism needs its hand edit in helpers.HAND_EDITS"
    for kind, (hook, integer, constant, pairwise) in HAND_EDITS.items():
        edit = position_edit(kind)
        assert (edit.hook, edit.integer, edit.constant, edit.pairwise) == (
            hook, None if integer == "index" else integer, constant, pairwise), kind


def _integer(kind: str, value: torch.Tensor) -> torch.Tensor:
    integer = HAND_EDITS[kind][1]
    if integer == "index":
        return torch.arange(value.shape[2], dtype=value.dtype).expand_as(value)
    return torch.full_like(value, integer)


def _shuffled(kind: str, value: torch.Tensor, seed: int) -> torch.Tensor:
    # the prompt's own seed: ``seed`` and its tokens (the same order in any batch)
    prompt_seed = prompt_seeds(ids_of(TEXT), [value.shape[2]], seed)[0]
    order = torch.randperm(value.shape[2], generator=torch.Generator().manual_seed(prompt_seed)).tolist()
    if not HAND_EDITS[kind][3]:
        return value[..., order]
    out = value.clone()
    for row in range(value.shape[2]):  # the row's visible keys, in the order they come in the permutation
        visible = [key for key in order if key <= row]
        out[..., row, :row + 1] = value[..., row, visible]
    return out


def _reference_mean(lens, kind: str, layer: int) -> torch.Tensor:
    width = min(len(text) for text in REFERENCE)
    ids = torch.tensor([list(text.encode())[:width] for text in REFERENCE])
    _, cache = lens.model.run_with_cache(ids, names_filter=[hook_name(kind, layer)])
    return cache[hook_name(kind, layer)].mean(0, keepdim=True)


def _by_hand(lens, kind: str, mode, layers: list[int], heads: list[int]) -> torch.Tensor:
    means = {layer: _reference_mean(lens, kind, layer) for layer in layers} if mode.name == "mean" else {}

    def edit(layer: int):
        def hook(value, hook):
            if mode.name == "integer":
                new = _integer(kind, value)
            elif mode.name == "constant":
                new = torch.full_like(value, HAND_EDITS[kind][2])
            elif mode.name == "shuffle":
                new = _shuffled(kind, value, seed=mode.seed)
            elif mode.name == "mean":
                width = value.shape[2]
                mean = means[layer]
                new = (mean[:, :, :width, :width] if HAND_EDITS[kind][3] else mean[:, :, :width]).expand_as(value)
            else:  # the RePo authors' dynamic_pe_pdrop: (1 - p) * z + p * t
                new = (1 - mode.p) * value + mode.p * _integer(kind, value)
            out = value.clone()
            out[:, heads] = new[:, heads]
            return out

        return hook

    with torch.no_grad():
        return lens.model.run_with_hooks(ids_of(TEXT), fwd_hooks=[(hook_name(kind, layer), edit(layer))
                                                                  for layer in layers])


@pytest.mark.parametrize("kind", LEARNED)
@pytest.mark.parametrize("mode", [Integer(), Constant(), Mean(reference=REFERENCE), Shuffle(seed=7),
                                  Interpolate(p=0.3)], ids=lambda mode: mode.label)
def test_each_mode_equals_the_edit_by_hand(kind, mode):
    lens = tiny_lens(kind)
    with torch.no_grad():
        plain = lens.model(ids_of(TEXT))
    for layers, heads in ((None, None), ([2], [1, 3])):
        ablated = interventions.ablate(lens, TEXT, mode=mode, layers=layers, heads=heads)
        expected = _by_hand(lens, kind, mode, [1, 2] if layers is None else layers,
                            list(range(4)) if heads is None else heads)
        torch.testing.assert_close(ablated, expected, atol=2e-5, rtol=1e-5)
        assert not torch.allclose(ablated, plain, atol=1e-4), f"{kind} {mode}: the edit changed nothing"


def test_interpolation_toward_the_constant_and_its_ends():
    lens = tiny_lens("repo")
    with torch.no_grad():
        plain = lens.model(ids_of(TEXT))
    torch.testing.assert_close(interventions.ablate(lens, TEXT, mode=Interpolate(p=0.0)), plain, atol=0, rtol=0)
    for toward in ("integer", "constant"):
        torch.testing.assert_close(interventions.ablate(lens, TEXT, mode=Interpolate(p=1.0, toward=toward)),
                                   interventions.ablate(lens, TEXT, mode=toward), atol=1e-6, rtol=1e-6)
    half = interventions.ablate(lens, TEXT, mode=Interpolate(p=0.5, toward="constant"), layers=[1])

    def hook(value, hook):
        return 0.5 * value

    torch.testing.assert_close(half, lens.model.run_with_hooks(ids_of(TEXT), fwd_hooks=[("blocks.1.attn.hook_pos", hook)]))


def test_a_metric_gives_one_number_per_row_and_a_batch_pads_after_each_row():
    lens = tiny_lens("repo")
    prompts = ["short text", "a rather longer text here"]
    metric = interventions.logit_difference(ord("e"), ord("a"), position=-1)
    batch = interventions.ablate(lens, prompts, mode="integer", metric=lambda logits: logits[:, 9, 5])
    alone = [interventions.ablate(lens, text, mode="integer", metric=lambda logits: logits[:, 9, 5])[0]
             for text in prompts]
    assert batch.shape == (2,) and abs(batch - alone).max() < 1e-4
    assert interventions.ablate(lens, prompts[1], mode="constant", metric=metric).shape == (1,)


@pytest.mark.parametrize("kind, mode", [("repo", Integer()), ("repo", Mean(reference=REFERENCE)),
                                        ("repo", Interpolate(p=0.4)), ("cope", Shuffle(seed=3)), ("cope", Constant()),
                                        ("lpi", Shuffle(seed=3)), ("fox", Mean(reference=REFERENCE))],
                         ids=lambda value: getattr(value, "label", value))
def test_ablation_grid_cells_equal_ablate_one_cell(kind, mode):
    lens = tiny_lens(kind)
    metric = interventions.logit_difference(ord("e"), ord("a"))
    cells = interventions.ablation_grid(lens, TEXT, metric, mode=mode,
                                        options=interventions.GridOptions(batch_size=3, progress=False))
    for layer in (1, 2):
        for head in range(4):
            one = interventions.ablate(lens, TEXT, mode=mode, layers=[layer], heads=[head], metric=metric)[0]
            assert cells.values[layer, head] == pytest.approx(one, abs=2e-4), (layer, head)
    assert cells.clean == pytest.approx(interventions.ablate(lens, TEXT, mode=mode, metric=metric)[0], abs=1e-5)
    layers = interventions.ablation_grid(lens, TEXT, metric, mode=mode, grid="layer", heads=[0, 3],
                                         options=interventions.GridOptions(progress=False))
    one = interventions.ablate(lens, TEXT, mode=mode, layers=[2], heads=[0, 3], metric=metric)[0]
    assert layers.values[2] == pytest.approx(one, abs=2e-4)
