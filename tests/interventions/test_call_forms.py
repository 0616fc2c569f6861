"""The previous release's call forms still work, each with a DeprecationWarning naming the new form, and give what
the new form gives: the tuple modes, ``Mode(name, …)``, ``seed=`` and ``reference=`` beside the mode, the grids'
keywords that moved into ``GridOptions``, positional construction of the dataclasses, ``interventions.runs`` and
its ``capture``, and the positional arguments of ``edit_hooks`` and ``grid_values``. The names of the modes without
settings are a shorthand that does not warn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from repo_lens import interventions
from repo_lens.interventions import (Constant, GridOptions, Integer, Interpolate, InterventionGrid, Mean, Mode,
                                     Random, Shuffle, Window)
from repo_lens.interventions.edit_targets import Cell, Site, head_mask, select_sites
from repo_lens.interventions.edited_runs import Batch, as_batch, capture_edited, run_prefix
from repo_lens.model.registry import position_edit

from .helpers import tiny_lens

TEXT = "the needle sits in hay"
REFERENCE = ["a haystack of plain text!", "another reference prompt?"]
METRIC = interventions.logit_difference(ord("e"), ord("a"))


@pytest.fixture(scope="module")
def lens():
    return tiny_lens("repo")


@pytest.mark.parametrize("old, new, shown", [
    (("interpolate", 0.3), Interpolate(p=0.3), r"mode=\('interpolate', 0.3\) is deprecated; "
                                               r"pass mode=Interpolate\(p=0.3, toward='integer'\)"),
    (("interpolate", 0.5, "constant"), Interpolate(p=0.5, toward="constant"), r"Interpolate\(p=0.5, toward='constant'\)"),
    (["window", 4], Window(width=4), r"pass mode=Window\(width=4, seed=0\)"),
])
def test_tuple_modes_warn_and_equal_the_mode(lens, old, new, shown):
    with pytest.warns(DeprecationWarning, match=shown):
        ablated = interventions.ablate(lens, TEXT, mode=old)
    assert torch.equal(ablated, interventions.ablate(lens, TEXT, mode=new))
    with pytest.warns(DeprecationWarning, match=shown):
        assert interventions.parse_mode(old) == new


def test_the_names_of_modes_without_settings_do_not_warn(lens):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("integer", "constant", "shuffle", "affine", "rank", "scaled", "random", "window"):
            assert interventions.parse_mode(name) == type(interventions.parse_mode(name))()
            interventions.ablate(lens, TEXT, mode=name, layers=[2])
    assert torch.equal(interventions.ablate(lens, TEXT, mode="constant"), interventions.ablate(lens, TEXT,
                                                                                              mode=Constant()))


def test_mode_built_by_position_warns_and_is_the_mode_of_that_name():
    with pytest.warns(DeprecationWarning, match=r"Mode\('interpolate', ...\) is deprecated; build the mode by "
                                                r"keyword: Interpolate\(p=0.25, toward='constant'\)"):
        assert Mode("interpolate", 0.25, "constant") == Interpolate(p=0.25, toward="constant")
    with pytest.warns(DeprecationWarning, match=r"Integer\(\)"):
        assert Mode("integer") == Integer()
    with pytest.warns(DeprecationWarning):
        assert Mode("window", width=3) == Window(width=3)
    assert isinstance(Integer(), Mode) and Interpolate(p=0.5).label == "interpolate 0.5"


def test_seed_and_reference_beside_the_mode_warn_and_move_into_it(lens):
    with pytest.warns(DeprecationWarning, match=r"ablate\(seed=\) is deprecated: a mode carries its own settings; "
                                                r"pass mode=Shuffle\(seed=3\)"):
        old = interventions.ablate(lens, TEXT, mode="shuffle", seed=3)
    assert torch.equal(old, interventions.ablate(lens, TEXT, mode=Shuffle(seed=3)))
    assert not torch.equal(old, interventions.ablate(lens, TEXT, mode=Shuffle(seed=4)))
    with pytest.warns(DeprecationWarning, match=r"pass mode=Mean\(reference=...\)"):
        old = interventions.ablate(lens, TEXT, mode="mean", reference=REFERENCE)
    assert torch.equal(old, interventions.ablate(lens, TEXT, mode=Mean(reference=REFERENCE)))
    with pytest.warns(DeprecationWarning, match=r"Integer\(\) draws nothing and has no reference: leave it out"):
        old = interventions.ablate(lens, TEXT, mode="integer", seed=5, reference=REFERENCE)
    assert torch.equal(old, interventions.ablate(lens, TEXT, mode=Integer()))
    with pytest.warns(DeprecationWarning, match=r"ablated_positions\(seed=\)"):
        old = interventions.ablated_positions(lens, TEXT, mode="random", seed=2)
    np.testing.assert_array_equal(old, interventions.ablated_positions(lens, TEXT, mode=Random(seed=2)))
    with pytest.warns(DeprecationWarning, match=r"ablation_grid\(seed=, reference=\)"):
        old = interventions.ablation_grid(lens, TEXT, METRIC, mode="mean", seed=1, reference=REFERENCE, grid="layer",
                                          options=GridOptions(progress=False))
    new = interventions.ablation_grid(lens, TEXT, METRIC, mode=Mean(reference=REFERENCE), grid="layer",
                                      options=GridOptions(progress=False))
    np.testing.assert_array_equal(old.values, new.values)


def test_the_grids_keywords_warn_and_equal_grid_options(lens):
    also = {"same": METRIC}
    with pytest.warns(DeprecationWarning, match=r"patch\(tokens=, batch_size=, progress=, also=\) is deprecated; "
                                                r"pass options=GridOptions\(tokens=..., batch_size=..., progress=..., "
                                                r"also=...\)"):
        old = interventions.patch(lens, TEXT, "the needle sits in hat", METRIC, tokens=slice(2, 9), batch_size=3,
                                  progress=False, also=also)
    new = interventions.patch(lens, TEXT, "the needle sits in hat", METRIC,
                              options=GridOptions(tokens=slice(2, 9), batch_size=3, progress=False, also=also))
    np.testing.assert_array_equal(old.values, new.values)
    np.testing.assert_array_equal(old.also["same"], new.also["same"])
    with pytest.warns(DeprecationWarning, match=r"attribute\(align=\)"):
        old = interventions.attribute(lens, TEXT, "the needle sits in hat", METRIC, align="index")
    np.testing.assert_array_equal(old.values, interventions.attribute(lens, TEXT, "the needle sits in hat",
                                                                      METRIC).values)
    with pytest.warns(DeprecationWarning, match=r"ablation_grid\(progress=\)"):
        old = interventions.ablation_grid(lens, TEXT, METRIC, mode="constant", progress=False)
    new = interventions.ablation_grid(lens, TEXT, METRIC, mode="constant", options=GridOptions(progress=False))
    np.testing.assert_array_equal(old.values, new.values)


def test_dataclasses_built_by_position_warn_and_equal_the_keyword_form(lens):
    values = np.array([np.nan, 1.0])
    with pytest.warns(DeprecationWarning, match=r"InterventionGrid\(...\) by position is deprecated; build it by "
                                                r"keyword: InterventionGrid\(method=..., grid=..., values=..."):
        old = InterventionGrid("patch", "layer", values, 0.5, 2.0, [1], [0, 1], meta={"a": 1})
    new = InterventionGrid(method="patch", grid="layer", values=values, baseline=0.5, clean=2.0, layers=[1],
                           heads=[0, 1], meta={"a": 1})
    assert old.to_dict() == new.to_dict()
    with pytest.warns(DeprecationWarning, match=r"Cell\(...\) by position"):
        assert Cell(2, 1) == Cell(layer=2, head=1)
    with pytest.warns(DeprecationWarning, match=r"Site\(...\) by position"):
        assert Site(2, "repo", position_edit("repo")) == select_sites(lens.model, [2])[0]
    batch = as_batch(lens, TEXT)
    with pytest.warns(DeprecationWarning, match=r"Batch\(...\) by position"):
        assert Batch(batch.ids, batch.lengths, batch.prompts).lengths == batch.lengths
    from repo_lens.interventions.patching import Pair

    sites = select_sites(lens.model, None)
    fields = dict(clean=batch, corrupted=batch, mapping=np.arange(batch.lengths[0]), sites=sites,
                  heads=head_mask(lens.model, None), clean_quantities={}, clean_metric=float("nan"),
                  prefix=run_prefix(lens.model, batch.ids, 0))
    with pytest.warns(DeprecationWarning, match=r"Pair\(...\) by position"):
        old_pair = Pair(*fields.values())
    assert old_pair.head_list == Pair(**fields).head_list == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="Cell got 'layer' by position and by keyword"):
        Cell(1, layer=1)


def test_the_runs_module_and_its_capture_warn_and_are_edited_runs(lens):
    from repo_lens.interventions import edited_runs, runs

    with pytest.warns(DeprecationWarning, match="runs.capture is deprecated; use "
                                                "repo_lens.interventions.edited_runs.capture_edited"):
        capture = runs.capture
    assert capture is capture_edited
    with pytest.warns(DeprecationWarning, match="import as_batch from repo_lens.interventions.edited_runs"):
        assert runs.as_batch is edited_runs.as_batch
    with pytest.raises(AttributeError):
        runs.no_such_name  # noqa: B018


def test_edit_hooks_and_grid_values_take_their_previous_positional_arguments(lens):
    from repo_lens.interventions.ablation import checked_means, edit_hooks
    from repo_lens.interventions.patching import grid_values, prepare_pair

    batch = as_batch(lens, TEXT)
    sites = select_sites(lens.model, None)
    heads = head_mask(lens.model, None)
    with pytest.warns(DeprecationWarning):
        old = edit_hooks(lens, batch, Mean(), sites, heads, REFERENCE, 0)
    new = edit_hooks(lens, batch, Mean(), sites, heads, means=checked_means(lens, REFERENCE, sites, 22))
    with torch.no_grad():
        assert torch.equal(lens.model.run_with_hooks(batch.ids, fwd_hooks=old),
                           lens.model.run_with_hooks(batch.ids, fwd_hooks=new))
    pair = prepare_pair(lens, TEXT, "the needle sits in hat", METRIC, None, None, None)
    with torch.no_grad():
        run = capture_edited(lens.model, pair.corrupted.ids, pair.sites, inputs_from=pair.first_layer,
                             prefix=pair.prefix)
    patched = {site.layer: pair.clean_quantities[site.layer] for site in pair.sites}
    with pytest.warns(DeprecationWarning, match=r"grid_values\(\) takes 6 arguments by position"):
        old_values, _ = grid_values(lens, pair, run, patched, "layer", {"metric": METRIC}, 2, False, "patching")
    new_values, _ = grid_values(lens, pair, run, patched, "layer", {"metric": METRIC},
                                options=GridOptions(batch_size=2, progress=False), what="patching")
    np.testing.assert_array_equal(old_values["metric"], new_values["metric"])
