"""Shift(offset) and Stretch(factor) move a layer's positions (worked on the positions the registry's sum gives,
then turned back into the hooked quantity): the trace of the edited layer holds z + offset or factor·z, an
exclusive sum (which starts at 0) keeps its positions under a shift, CoPE's query × key positions all move with
each query's gate on itself, and a shift of positions that only rotate queries and keys (RePo) leaves the
logits as they are, up to float rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.interventions import Shift, Stretch
from repo_lens.model.registry import position_edit

from .helpers import LEARNED, ids_of, tiny_lens

TEXT = "the needle sits in the hay"


def _layer_one(lens, mode=None) -> np.ndarray:
    """Layer 1's positions [head, pos] as a trace reports them, with ``mode`` applied to layer 1."""
    if mode is None:
        return lens.trace(ids_of(TEXT)[0].tolist(), progress=False).positions[1].astype(np.float64)
    return interventions.ablated_positions(lens, TEXT, mode=mode, layers=[1])[1].astype(np.float64)


@pytest.mark.parametrize("kind", LEARNED)
def test_stretch_multiplies_and_shift_moves_the_positions(kind):
    lens = tiny_lens(kind)
    before = _layer_one(lens)
    how = position_edit(kind).sum
    # GRAPE-AP's trace counts the last query's potential on key 0 too (position_j = Σ_{s≤j} −ψ(T, s)), which no
    # bias reads (Σ_{l=j+1}^{t} ψ(t, l)) and an edit keeps: the distances from key 0 are what stretch
    first = before[:, :1] if how == "suffix_exclusive" else 0.0
    np.testing.assert_allclose(_layer_one(lens, Stretch(factor=0.5)), first + 0.5 * (before - first), atol=1e-4,
                               rtol=1e-4)
    shifted = _layer_one(lens, Shift(offset=2.5))
    expected = before + 2.5
    if how in ("exclusive", "suffix_exclusive"):  # the positions start at 0 by construction: nothing to move
        expected = before
    elif how == "suffix":
        # p_ij = Σ_{j≤s≤i} g_is all grow by 2.5 when each query's gate on itself does; a trace shows the last
        # query's gates summed over the keys (position_j = Σ_{s≤j} g_Ts), so only the last token's moves
        expected = before.copy()
        expected[:, -1] += 2.5
    np.testing.assert_allclose(shifted, expected, atol=1e-4, rtol=1e-4)


def test_positions_that_only_rotate_see_no_shift_but_see_a_stretch():
    lens = tiny_lens("repo")
    with torch.no_grad():
        plain = lens.model(ids_of(TEXT))
    torch.testing.assert_close(interventions.ablate(lens, TEXT, mode=Shift(offset=11.0)), plain, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(interventions.ablate(lens, TEXT, mode=Stretch(factor=4.0)), plain, atol=1e-3)
    torch.testing.assert_close(interventions.ablate(lens, TEXT, mode=Stretch(factor=1.0)), plain, atol=1e-5, rtol=1e-5)


def test_a_stretch_of_one_head_leaves_the_others():
    lens = tiny_lens("lpi")
    before = _layer_one(lens)
    after = interventions.ablated_positions(lens, TEXT, mode=Stretch(factor=3.0), layers=[1], heads=[2])[1]
    np.testing.assert_allclose(after[2], 3.0 * before[2], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(after[[0, 1, 3]], before[[0, 1, 3]], atol=1e-5)
