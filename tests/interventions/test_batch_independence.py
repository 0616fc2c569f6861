"""Issue 49, item 3: what the random edits draw ("random"'s direction, "window"'s and "shuffle"'s token
orders) is the prompt's own, so a prompt's result does not depend on the batch size, its place in the
batch or the padding: on every learned mechanism through ``ablate``, and in the causal study's quick mode
at batch sizes 1 and 8 and in a shuffled order."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.interventions import Interpolate, Random, Shuffle, Window
from repo_lens.interventions.edits import mixed_seed, prompt_seeds, scale_edit, target_values
from repo_lens.model.registry import position_edit

from .helpers import LEARNED, tiny_lens

TEXTS = ["the needle sits in the hay", "a short one", "the needle sits in the hay, far away from here",
         "the needle sits in the hay"[::-1], "0123456789 digits and words, then some more words"]
MODES = [Random(), Window(width=4), Shuffle()]


def _logits_by_prompt(lens, texts: list[str], mode, batch_size: int, order: list[int], seed: int = 5) -> list:
    """Each text's logits over its own tokens, the texts run in ``order``, ``batch_size`` at a time."""
    mode = dataclasses.replace(mode, seed=seed) if mode.draws else mode
    out: dict[int, torch.Tensor] = {}
    for first in range(0, len(order), batch_size):
        rows = order[first:first + batch_size]
        logits = interventions.ablate(lens, [texts[row] for row in rows], mode=mode)
        for place, row in enumerate(rows):
            out[row] = logits[place, :len(texts[row].encode())]
    return [out[row] for row in range(len(texts))]


@pytest.mark.parametrize("kind", LEARNED)
def test_a_prompts_random_edit_is_the_same_in_any_batch(kind):
    lens = tiny_lens(kind)
    order = list(np.random.default_rng(0).permutation(len(TEXTS)))
    for mode in MODES:
        alone = _logits_by_prompt(lens, TEXTS, mode, 1, list(range(len(TEXTS))))
        together = _logits_by_prompt(lens, TEXTS, mode, len(TEXTS), list(range(len(TEXTS))))
        shuffled = _logits_by_prompt(lens, TEXTS, mode, 2, order)
        plain = _logits_by_prompt(lens, TEXTS, Interpolate(p=0.0), 1, list(range(len(TEXTS))))
        other_seed = _logits_by_prompt(lens, TEXTS, mode, 1, list(range(len(TEXTS))), seed=6)
        for row in range(len(TEXTS)):
            torch.testing.assert_close(together[row], alone[row], atol=2e-5, rtol=1e-5)
            torch.testing.assert_close(shuffled[row], alone[row], atol=2e-5, rtol=1e-5)
        # the check can fail: the edit changes the logits, and another seed draws something else ("random"
        # moves as far as "affine": not at all where the positions already lie on their line, as GRAPE-A's do)
        if mode.name == "random" and _affine_moves_nothing(lens, plain):
            continue
        assert any(not torch.allclose(alone[row], plain[row], atol=1e-3) for row in range(len(TEXTS))), (kind, mode)
        assert any(not torch.allclose(alone[row], other_seed[row], atol=1e-3) for row in range(len(TEXTS))), (kind, mode)


def _affine_moves_nothing(lens, plain: list) -> bool:
    affine = _logits_by_prompt(lens, TEXTS, interventions.Affine(), len(TEXTS), list(range(len(TEXTS))))
    return all(torch.allclose(affine[row], plain[row], atol=1e-3) for row in range(len(TEXTS)))


def test_the_random_direction_is_drawn_per_prompt_and_head_over_the_real_tokens():
    edit = position_edit("repo")
    generator = torch.Generator().manual_seed(0)
    value = torch.randn((3, 2, 7), generator=generator)
    value[2] = value[0]  # the same prompt twice in one batch
    lengths, seeds = [7, 4, 7], [11, 12, 11]
    integer = target_values(edit, value, "integer")
    batched = scale_edit(value, "random", edit, integer, lengths, seeds)
    assert torch.equal(batched[0], batched[2]), "the same prompt, the same seed: the same edit"
    alone = scale_edit(value[1:2, :, :4], "random", edit, integer[1:2, :, :4], [4], seeds[1:2])
    torch.testing.assert_close(batched[1:2, :, :4], alone, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(batched[1, :, 4:], value[1, :, 4:])  # the pads keep their values
    # head 1's direction is the head's own draw, and differs from head 0's
    step = batched[0] - value[0]
    own = torch.randn(7, generator=torch.Generator().manual_seed(mixed_seed(11, 1)))
    cosine = torch.nn.functional.cosine_similarity(step[1], own, dim=0)
    assert float(cosine) == pytest.approx(1.0, abs=1e-5)
    assert abs(float(torch.nn.functional.cosine_similarity(step[0], step[1], dim=0))) < 0.99


def test_prompt_seeds_follow_the_real_tokens_and_the_seed_only():
    ids = torch.tensor([[1, 2, 3, 0], [1, 2, 3, 4], [1, 2, 3, 0]])
    seeds = prompt_seeds(ids, [3, 4, 3], seed=0)
    assert seeds[0] == seeds[2] != seeds[1]
    assert prompt_seeds(torch.tensor([[1, 2, 3]]), [3], seed=0)[0] == seeds[0]  # padding plays no part
    assert prompt_seeds(ids, [3, 4, 3], seed=1)[0] != seeds[0]


@pytest.mark.study
def test_the_study_quick_mode_gives_the_same_numbers_at_batch_sizes_1_and_8(tmp_path):
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.studies.reproductions import STUDIES

    checkpoint = tmp_path / "tiny-repo"
    save_checkpoint(_tiny_retrieval_model(), checkpoint, info={"name": "tiny-repo"})
    run = STUDIES["position_interventions"].load()
    documents = {size: run(tmp_path / f"out{size}", [str(checkpoint)], quick=True, figures=False, progress=False,
                           batch_size=size)["results"][str(checkpoint)]["ablations"]["conditions"]
                 for size in (1, 8)}
    assert documents[1].keys() == documents[8].keys()
    assert {"all random", "all window 8"} <= {key for key, entry in documents[1].items() if entry["moves"]}
    for key, entry in documents[1].items():
        other = documents[8][key]
        assert entry["moves"] == other["moves"], key
        if entry["moves"]:
            assert entry["hits"] == other["hits"], key
            np.testing.assert_allclose(entry["logprobs"], other["logprobs"], atol=1.5e-3, err_msg=key)


def _tiny_retrieval_model():
    from repo_lens.model.tiny import tiny_model

    model = tiny_model("repo", n_layers=3, d_model=32, n_heads=2, context=512)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights far from their start, so that every edit moves the answer's log p
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def test_the_study_scorer_gives_each_prompt_its_own_numbers_in_a_shuffled_order():
    from repo_lens.lens import Lens
    from repo_lens.model.byte_tokenizer import ByteTokenizer
    from repo_lens.studies.reproductions.position_interventions import Scorer, study_prompts

    lens = Lens(_tiny_retrieval_model(), ByteTokenizer())
    prompts = study_prompts(lens.tokenizer, 512, 2, None)
    order = list(np.random.default_rng(1).permutation(len(prompts)))
    in_order, shuffled = Scorer(lens, prompts, 8), Scorer(lens, [prompts[row] for row in order], 3)
    for mode in ("random", Window(width=8), "shuffle"):
        hits, logprobs = in_order(mode, layers=None, heads=None)
        other_hits, other_logprobs = shuffled(mode, layers=None, heads=None)
        back = np.argsort(order)
        np.testing.assert_array_equal(other_hits[back], hits)
        np.testing.assert_allclose(other_logprobs[back], logprobs, atol=1e-4)
