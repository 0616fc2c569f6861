"""Issue 33, items 2 and 5: the batched patching grid (started from the cached residual stream and the
shared prefix) equals patching each cell by hand in a full run_with_hooks forward; identical prompts
change nothing; prompts of different lengths align by named spans."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.data.spans import PromptBuilder
from repo_lens.model.byte_tokenizer import ByteTokenizer

from .helpers import LEARNED, hook_name, ids_of, tiny_lens

CLEAN, CORRUPTED = "the cat sat on a mat", "the dog sat on a mat"
METRIC = interventions.logit_difference(ord("t"), ord("a"))


def _by_hand(lens, kind: str, clean: str, corrupted: str, cells: list[tuple], heads=range(4)) -> np.ndarray:
    """One full forward per cell (layer, head or None, token or None), the clean value written by hand."""
    names = sorted({hook_name(kind, layer) for layer, *_ in cells})
    with torch.no_grad():
        _, cache = lens.model.run_with_cache(ids_of(clean), names_filter=names)
        values = []
        for layer, head, token in cells:
            name = hook_name(kind, layer)

            def hook(value, hook, head=head, token=token, name=name):
                out = value.clone()
                rows = list(heads) if head is None else [head]
                columns = slice(None) if token is None else token
                out[:, rows, columns] = cache[name][:, rows, columns]
                return out

            logits = lens.model.run_with_hooks(ids_of(corrupted), fwd_hooks=[(hook_name(kind, layer), hook)])
            values.append(float(METRIC(logits)[0]))
    return np.array(values)


@pytest.mark.parametrize("kind", LEARNED)
def test_head_grid_equals_one_forward_per_cell_by_hand(kind):
    lens = tiny_lens(kind)
    result = interventions.patch(lens, CLEAN, CORRUPTED, METRIC,
                                 options=interventions.GridOptions(batch_size=3, progress=False))
    cells = [(layer, head, None) for layer in (1, 2) for head in range(4)]
    expected = _by_hand(lens, kind, CLEAN, CORRUPTED, cells)
    np.testing.assert_allclose(result.values[1:].ravel(), expected, atol=2e-4, rtol=1e-4)
    assert np.isnan(result.values[0]).all() and result.layers == [1, 2] and result.heads == [0, 1, 2, 3]
    with torch.no_grad():
        assert result.baseline == pytest.approx(float(METRIC(lens.model(ids_of(CORRUPTED)))[0]), abs=1e-4)
        assert result.clean == pytest.approx(float(METRIC(lens.model(ids_of(CLEAN)))[0]), abs=1e-4)
    assert np.abs(result.effects[1:]).max() > 1e-4  # the pair differs where it matters


@pytest.mark.parametrize("kind", ["repo", "cope", "lpi"])
def test_layer_and_position_grids_equal_the_edit_by_hand(kind):
    lens = tiny_lens(kind)
    layer_grid = interventions.patch(lens, CLEAN, CORRUPTED, METRIC, grid="layer", heads=[0, 2],
                                     options=interventions.GridOptions(progress=False))
    expected = _by_hand(lens, kind, CLEAN, CORRUPTED, [(1, None, None), (2, None, None)], heads=[0, 2])
    np.testing.assert_allclose(layer_grid.values[1:], expected, atol=2e-4, rtol=1e-4)
    tokens = interventions.patch(lens, CLEAN, CORRUPTED, METRIC, grid="layer_head_position", layers=[2], heads=[3],
                                 options=interventions.GridOptions(batch_size=7, progress=False))
    cells = [(2, 3, token) for token in range(len(CORRUPTED))]
    np.testing.assert_allclose(tokens.values[2, 3], _by_hand(lens, kind, CLEAN, CORRUPTED, cells), atol=2e-4, rtol=1e-4)
    assert tokens.values.shape == (3, 4, len(CORRUPTED)) and np.isnan(tokens.values[2, :3]).all()
    # tokens before the first difference take the same positions: patching them changes nothing (up to
    # an ulp of the logits: batched copies and the single corrupted run round differently)
    np.testing.assert_allclose(tokens.effects[2, 3, :4], 0.0, atol=1e-5)


@pytest.mark.parametrize("kind", LEARNED)
def test_identical_prompts_change_nothing(kind):
    lens = tiny_lens(kind)
    for grid in ("layer", "layer_head"):
        exact = interventions.patch(lens, CORRUPTED, CORRUPTED, METRIC, grid=grid,
                                    options=interventions.GridOptions(progress=False))
        estimate = interventions.attribute(lens, CORRUPTED, CORRUPTED, METRIC, grid=grid)
        cells = np.isfinite(exact.values)
        assert cells.sum() == (2 if grid == "layer" else 8)
        np.testing.assert_allclose(exact.values[cells], exact.baseline, atol=1e-6)
        np.testing.assert_allclose(estimate.effects[cells], 0.0, atol=1e-6)
        assert exact.clean == pytest.approx(exact.baseline, abs=1e-6)


def test_batch_size_does_not_change_the_grid():
    lens = tiny_lens("repo")
    grids = [interventions.patch(lens, CLEAN, CORRUPTED, METRIC,
                                 options=interventions.GridOptions(batch_size=size, progress=False)).values
             for size in (1, 5, 64)]
    np.testing.assert_allclose(grids[0], grids[1], atol=1e-5)
    np.testing.assert_allclose(grids[0], grids[2], atol=1e-5)


def _prompt(filler: str, needle: str, answer: str):
    builder = PromptBuilder()
    builder.add("Remember: ", "instruction")
    builder.add(filler)
    builder.add(needle, "needle")
    builder.add(" ok. What is it?", "question")
    return builder.build(ByteTokenizer(), answer=answer, add_special_tokens=False)


def test_prompts_of_different_lengths_align_by_spans():
    lens = tiny_lens("repo")
    clean, corrupted = _prompt("x ", "magic 42", "42"), _prompt("some more words ", "magic 17", "42")
    metric = interventions.answer_logprob(corrupted)
    result = interventions.patch(lens, clean, corrupted, metric, grid="layer_head",
                                 options=interventions.GridOptions(align=["needle", "question", "answer"], progress=False))
    mapping = np.full(len(corrupted), -1)
    for name in ("needle", "question", "answer"):
        (a, b), (c, d) = clean.spans[name], corrupted.spans[name]
        mapping[c:d] = np.arange(a, b)
    kept = np.flatnonzero(mapping >= 0)
    with torch.no_grad():
        _, cache = lens.model.run_with_cache(torch.as_tensor(clean.ids)[None],
                                             names_filter=lambda name: name.endswith("hook_pos"))
        for layer, head in ((1, 1), (2, 0)):
            def hook(value, hook, layer=layer, head=head):
                out = value.clone()
                out[0, head, kept] = cache[f"blocks.{layer}.attn.hook_pos"][0, head, mapping[kept]]
                return out

            logits = lens.model.run_with_hooks(torch.as_tensor(corrupted.ids)[None],
                                               fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", hook)])
            assert result.values[layer, head] == pytest.approx(float(metric(logits)[0]), abs=2e-4)
    assert np.isnan(result.clean)  # a metric of the corrupted prompt's answer span does not fit the clean prompt
    tokens = interventions.patch(lens, clean, corrupted, metric, grid="layer_head_position", layers=[2], heads=[0],
                                 options=interventions.GridOptions(align=["needle"], progress=False))
    assert np.isfinite(tokens.values[2, 0]).sum() == corrupted.spans["needle"][1] - corrupted.spans["needle"][0]


@pytest.mark.parametrize("kind", ["repo", "cope", "lpi"])
def test_a_metric_that_names_its_rows_gets_the_same_grid_as_one_that_does_not(kind):
    """Built-in metrics say which logits they read (``first_row``), and grids compute only those; a
    user's callable reads every row. Both give the same grid, and the rows the metric said it
    would not read reach it as NaN."""
    lens = tiny_lens(kind)
    declared = interventions.patch(lens, CLEAN, CORRUPTED, METRIC, options=interventions.GridOptions(progress=False))
    seen = []

    def plain(logits):
        seen.append(logits)
        return METRIC(logits)

    every_row = interventions.patch(lens, CLEAN, CORRUPTED, plain, options=interventions.GridOptions(progress=False))
    np.testing.assert_allclose(declared.values, every_row.values, atol=1e-5, rtol=1e-5)
    assert declared.baseline == pytest.approx(every_row.baseline, abs=1e-5)
    assert declared.clean == pytest.approx(every_row.clean, abs=1e-5)
    assert all(torch.isfinite(logits).all() for logits in seen)
    also = interventions.patch(lens, CLEAN, CORRUPTED, METRIC,
                               options=interventions.GridOptions(also={"plain": plain}, progress=False))
    np.testing.assert_allclose(also.also["plain"], declared.values, atol=1e-5, rtol=1e-5)

    rows = []

    def last_row_only(logits):
        rows.append(logits)
        return METRIC(logits)

    last_row_only.first_row = lambda width: width - 1
    interventions.patch(lens, CLEAN, CORRUPTED, last_row_only, options=interventions.GridOptions(progress=False))
    assert torch.isnan(rows[-1][:, 4:-1]).all() and torch.isfinite(rows[-1][:, -1]).all()
