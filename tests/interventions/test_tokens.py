"""tokens=: patching, ablation and attribution restricted to some tokens, against the same edit made by
hand with run_with_hooks, and the named spans of built prompts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.data.spans import PromptBuilder
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer

from .helpers import ids_of, tiny_lens

CLEAN, CORRUPTED = "the cat sat on a mat", "the dog sat in a hat"


@pytest.fixture(scope="module")
def lens():
    return tiny_lens("repo")


def _prompt(text: str) -> object:
    builder = PromptBuilder()
    builder.add(text[:4])
    builder.add(text[4:7], "needle")
    builder.add(text[7:15])
    builder.add(text[15:], "question")
    return builder.build(ByteTokenizer(), append_answer=False, add_special_tokens=False)


def _metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1, 101] - logits[:, -1, 102]


def _patched_by_hand(lens, layer: int, head: int, tokens: list[int]) -> float:
    hook = f"blocks.{layer}.attn.hook_pos"
    _, cache = lens.model.run_with_cache(ids_of(CLEAN), names_filter=[hook])
    clean = cache[hook]

    def write(value, hook):
        out = value.clone()
        out[:, head, tokens] = clean[:, head, tokens]
        return out

    with torch.no_grad():
        return float(_metric(lens.model.run_with_hooks(ids_of(CORRUPTED), fwd_hooks=[(hook, write)]))[0])


def test_patching_some_tokens_equals_the_hand_patch(lens):
    tokens = [4, 5, 6, 13]
    grid = interventions.patch(lens, CLEAN, CORRUPTED, _metric,
                               options=interventions.GridOptions(tokens=tokens, progress=False))
    for layer, head in ((1, 0), (1, 3), (2, 1)):
        assert grid.values[layer, head] == pytest.approx(_patched_by_hand(lens, layer, head, tokens), abs=1e-4)
    everything = interventions.patch(lens, CLEAN, CORRUPTED, _metric,
                                     options=interventions.GridOptions(progress=False))
    assert not np.allclose(grid.values[1:], everything.values[1:], atol=1e-4)


def test_a_named_span_and_its_complement_patch_their_own_tokens(lens):
    clean, corrupted = _prompt(CLEAN), _prompt(CORRUPTED)
    start, end = corrupted.spans["needle"]
    needle = interventions.patch(lens, clean, corrupted, _metric,
                                 options=interventions.GridOptions(tokens="needle", progress=False))
    assert needle.values[1, 1] == pytest.approx(_patched_by_hand(lens, 1, 1, list(range(start, end))), abs=1e-4)
    outside = [t for t in range(len(corrupted)) if not start <= t < end]
    rest = interventions.patch(lens, clean, corrupted, _metric,
                               options=interventions.GridOptions(tokens="~needle", progress=False))
    assert rest.values[2, 2] == pytest.approx(_patched_by_hand(lens, 2, 2, outside), abs=1e-4)


def test_ablating_some_tokens_equals_the_hand_edit_and_the_grid_agrees(lens):
    hook = "blocks.1.attn.hook_pos"

    def zero(value, hook):
        out = value.clone()
        out[:, 1, 3:9] = 0.0
        return out

    with torch.no_grad():
        by_hand = float(_metric(lens.model.run_with_hooks(ids_of(CORRUPTED), fwd_hooks=[(hook, zero)]))[0])
    ablated = interventions.ablate(lens, CORRUPTED, mode="constant", layers=[1], heads=[1], tokens=slice(3, 9),
                                   metric=_metric)[0]
    assert ablated == pytest.approx(by_hand, abs=1e-4)
    grid = interventions.ablation_grid(lens, CORRUPTED, _metric, mode="affine",
                                       options=interventions.GridOptions(tokens=slice(3, 9), progress=False))
    one = interventions.ablate(lens, CORRUPTED, mode="affine", layers=[2], heads=[2], tokens=slice(3, 9),
                               metric=_metric)[0]
    assert grid.values[2, 2] == pytest.approx(one, abs=1e-4)


def test_attribution_over_some_tokens_sums_the_per_token_estimates(lens):
    per_token = interventions.attribute(lens, CLEAN, CORRUPTED, _metric, grid="layer_head_position")
    some = interventions.attribute(lens, CLEAN, CORRUPTED, _metric,
                                   options=interventions.GridOptions(tokens=[4, 5, 6]))
    expected = per_token.baseline + (per_token.values[1:, :, 4:7] - per_token.baseline).sum(-1)
    np.testing.assert_allclose(some.values[1:], expected, atol=1e-4)


def test_bad_token_selections_name_the_problem(lens):
    with pytest.raises(InputError, match="names a span of a built prompt"):
        interventions.ablate(lens, CORRUPTED, mode="constant", tokens="needle")
    with pytest.raises(InputError, match="has no span 'needl'"):
        interventions.ablate(lens, _prompt(CORRUPTED), mode="constant", tokens="needl")
    with pytest.raises(InputError, match="out of range"):
        interventions.ablate(lens, CORRUPTED, mode="constant", tokens=[99])
    with pytest.raises(InputError, match="selects no token"):
        interventions.ablate(lens, CORRUPTED, mode="constant", tokens=slice(5, 5))
