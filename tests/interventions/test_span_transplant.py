"""Patching by span transplants: on a pair whose needle moved, ``tokens="needle"`` writes the clean needle's
own positions into the moved needle (not the positions of whatever sat at its indices in the clean run);
the question and the answer are spans of their own. Checked against a transplant made by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.data.retrieval_families import moved_pairs
from repo_lens.model.byte_tokenizer import ByteTokenizer

from .helpers import tiny_lens

LENGTH = 120


@pytest.fixture(scope="module")
def setup():
    lens = tiny_lens("repo", seed=4)
    clean, moved = moved_pairs(ByteTokenizer(), "kv_lines", LENGTH, 1)[0]
    assert clean.spans["needle"] != moved.spans["needle"]  # the needle moved
    return lens, clean, moved


def positions(lens, prompt) -> dict[int, torch.Tensor]:
    _, cache = lens.model.run_with_cache(torch.as_tensor(np.asarray(prompt.ids))[None])
    return {layer: cache[f"blocks.{layer}.attn.hook_pos"] for layer in (1, 2)}


def by_hand(lens, clean, moved, span: str, layer: int) -> float:
    """The moved prompt's answer log p with layer ``layer``'s positions of ``span`` (every head) replaced by the
    clean prompt's positions of its own ``span``."""
    clean_positions = positions(lens, clean)[layer]
    (a, b), (c, d) = clean.spans[span], moved.spans[span]

    def write(value, hook):
        value = value.clone()
        value[..., c:d] = clean_positions[..., a:b]
        return value

    metric = interventions.answer_logprob(moved)
    with torch.no_grad():
        logits = lens.model.run_with_hooks(torch.as_tensor(np.asarray(moved.ids))[None],
                                           fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", write)])
    return float(metric(logits)[0])


@pytest.mark.parametrize("span", ["needle", "question", "answer"])
def test_a_named_span_takes_its_own_clean_positions(setup, span):
    lens, clean, moved = setup
    grid = interventions.patch(lens, clean, moved, interventions.answer_logprob(moved), grid="layer",
                               options=interventions.GridOptions(tokens=span, progress=False))
    assert grid.layers == [1, 2]
    for layer in grid.layers:
        assert grid.values[layer] == pytest.approx(by_hand(lens, clean, moved, span, layer), abs=1e-4)


def test_the_needle_is_not_given_the_haystacks_positions(setup):
    """What the earlier index alignment did: the clean run's positions at the moved needle's indices."""
    lens, clean, moved = setup
    grid = interventions.patch(lens, clean, moved, interventions.answer_logprob(moved), grid="layer",
                               options=interventions.GridOptions(tokens="needle", progress=False))
    clean_positions = positions(lens, clean)[2]
    c, d = moved.spans["needle"]

    def haystack(value, hook):
        value = value.clone()
        value[..., c:d] = clean_positions[..., c:d]
        return value

    with torch.no_grad():
        logits = lens.model.run_with_hooks(torch.as_tensor(np.asarray(moved.ids))[None],
                                           fwd_hooks=[("blocks.2.attn.hook_pos", haystack)])
    wrong = float(interventions.answer_logprob(moved)(logits)[0])
    assert abs(grid.values[2] - wrong) > 1e-3


def test_attribution_aligns_named_spans_too(setup):
    lens, clean, moved = setup
    from repo_lens.interventions.patching import prepare_pair

    pair = prepare_pair(lens, clean, moved, interventions.answer_logprob(moved), None, None, None, "needle")
    (a, b), (c, d) = clean.spans["needle"], moved.spans["needle"]
    assert pair.mapping[c:d].tolist() == list(range(a, b))
    assert (np.delete(pair.mapping, np.arange(c, d)) == -1).all()
