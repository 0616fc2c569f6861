"""Edits on the positions' own scale ("affine", "rank", "scaled", "random", "window") against numpy
references computed from the positions a trace reports, on every learned mechanism; and the
registry's ``sum`` declarations against the positions the layers really use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.errors import InputError
from repo_lens.interventions.edits import to_positions, valid_mask
from repo_lens.model.registry import position_edit

from .helpers import HAND_EDITS, LEARNED, hook_name, ids_of, tiny_lens

TEXT = "the needle sits in the hay, far away"
TOKEN_WISE = [kind for kind in LEARNED if not HAND_EDITS[kind][3]]
PAIRWISE = [kind for kind in LEARNED if HAND_EDITS[kind][3]]


@pytest.fixture(scope="module")
def lenses():
    return {kind: tiny_lens(kind) for kind in LEARNED}


def _positions(lens, **ablation) -> np.ndarray:
    """Layer 1's positions [head, pos] (its input is unchanged by an edit of layer 1)."""
    if not ablation:
        return lens.trace(ids_of(TEXT)[0].tolist(), progress=False).positions[1].astype(np.float64)
    return interventions.ablated_positions(lens, TEXT, layers=[1], **ablation)[1].astype(np.float64)


@pytest.mark.parametrize("kind", LEARNED)
def test_the_declared_sum_turns_the_hooked_quantity_into_the_layers_positions(lenses, kind):
    lens = lenses[kind]
    _, cache = lens.model.run_with_cache(ids_of(TEXT), names_filter=[hook_name(kind, 1)])
    quantity = cache[hook_name(kind, 1)]
    edit = position_edit(kind)
    summed = to_positions(quantity, edit.sum, valid_mask(quantity, None, edit.pairwise)).double()[0]
    traced = torch.as_tensor(_positions(lens)) * (-1 if (edit.integer or 0) < 0 else 1)  # GRAPE's potentials are −increments
    if edit.pairwise:  # the trace shows the last query's prefix sums P_j; the declared sum is its suffix view
        last = summed[:, -1]
        prefix = torch.cat([torch.zeros(traced.shape[0], 1, dtype=traced.dtype), traced[:, :-1]], dim=1)
        shift = 0 if edit.sum == "suffix" else 1  # Σ_{s≥j} or Σ_{s>j}
        expected = traced[:, -1:] - (prefix if shift == 0 else traced)
        assert torch.allclose(last, expected, atol=1e-4)
    else:
        assert torch.allclose(summed, traced, atol=1e-4)


@pytest.mark.parametrize("kind", TOKEN_WISE)
def test_affine_rank_and_scaled_match_numpy_on_the_traced_positions(lenses, kind):
    lens = lenses[kind]
    before = _positions(lens)
    t = np.arange(before.shape[1], dtype=np.float64)
    exclusive = position_edit(kind).sum == "exclusive"  # starts at 0 by construction: compare up to a shift

    def same(got, want):
        np.testing.assert_allclose(got - (got[0] if exclusive else 0), want - (want[0] if exclusive else 0), atol=2e-3)

    for head in range(before.shape[0]):
        assert np.ptp(before[head]) > 1e-3, "the test needs positions that vary"
    affine, rank, scaled = (_positions(lens, mode=mode, heads=[0, 2]) for mode in ("affine", "rank", "scaled"))
    for head in (0, 2):
        z = before[head]
        line = np.polyval(np.polyfit(t, z, 1), t)
        same(affine[head], line)
        order = np.argsort(np.argsort(z, kind="stable"), kind="stable")
        same(rank[head], z.min() + order / (len(z) - 1) * np.ptp(z))
        same(scaled[head], z.min() + t / (len(z) - 1) * np.ptp(z))
    for head in (1, 3):  # heads not selected keep their positions
        np.testing.assert_allclose(affine[head], before[head], atol=1e-4)


@pytest.mark.parametrize("kind", PAIRWISE)
def test_pairwise_affine_is_linear_and_rank_keeps_order(lenses, kind):
    lens = lenses[kind]
    before = _positions(lens)
    affine, rank = (_positions(lens, mode=mode) for mode in ("affine", "rank"))
    # a line in the key index (last query's view), but for the last keys, where CoPE's line is cut at 0
    assert np.abs(np.diff(affine, n=2, axis=1)[:, 1:-2]).max() < 2e-3
    if np.abs(np.diff(before, n=2, axis=1)[:, 1:]).max() > 1e-2:  # positions that are not a line already
        assert not np.allclose(affine, before, atol=1e-3)
    for head in range(before.shape[0]):  # the last query's prefix sums P_j, j < T − 1, mirror its suffix sums S_j+1
        np.testing.assert_array_equal(np.argsort(rank[head, :-1], kind="stable"),
                                      np.argsort(before[head, :-1], kind="stable"))


@pytest.mark.parametrize("kind", ["repo", "fox"])
def test_random_moves_as_far_as_affine_in_another_direction(lenses, kind):
    lens = lenses[kind]
    before = _positions(lens)
    affine, random_a, random_b = (_positions(lens, mode=interventions.Random(seed=seed) if seed else "affine")
                                  for seed in (0, 1, 2))
    for head in range(before.shape[0]):
        size = np.linalg.norm(affine[head] - before[head])
        if position_edit(kind).sum == "none":
            assert np.linalg.norm(random_a[head] - before[head]) == pytest.approx(size, rel=1e-3)
        assert not np.allclose(random_a[head], affine[head], atol=1e-3)
    assert not np.allclose(random_a, random_b)


def test_window_permutes_positions_only_within_blocks(lenses):
    lens = lenses["repo"]
    before = _positions(lens)
    after = _positions(lens, mode=interventions.Window(width=4))
    assert not np.allclose(after, before)
    for start in range(0, before.shape[1], 4):
        block = slice(start, start + 4)
        np.testing.assert_allclose(np.sort(after[:, block], axis=1), np.sort(before[:, block], axis=1), atol=1e-5)


def test_rope_positions_are_unchanged_by_affine_rank_and_scaled():
    lens = tiny_lens("rope")
    before = interventions.ablated_positions(lens, TEXT, mode=interventions.Interpolate(p=0.0))
    for mode in ("affine", "rank", "scaled"):
        np.testing.assert_allclose(interventions.ablated_positions(lens, TEXT, mode=mode), before, atol=1e-4)


def test_bad_window_widths_are_refused():
    for width in (1, 2.5, "4"):
        with pytest.raises(InputError, match="window width"):
            interventions.Window(width=width)
