"""Bad input to score_decomposition and its result's methods: each is one InputError naming the argument and
what it accepts, raised before anything runs where it can be, and nothing is lost (no hook is left on the
model, the caller's arrays are unchanged, the next call gives the same result as before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repo_lens.analysis import score_decomposition
from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.tiny import tiny_model

IDS = [5, 9, 2, 7, 3, 8]  # 6 tokens
LAYER = 2  # layers: rope, repo, repo (4 heads)


def _lens(kind: str) -> Lens:
    return Lens(tiny_model(kind, n_layers=3, d_model=32, n_heads=4, seed=0), None)


@pytest.fixture(scope="module")
def lens() -> Lens:
    return _lens("repo")


@pytest.fixture(scope="module")
def before(lens):
    return score_decomposition(lens, IDS, LAYER, queries=[4, 5])


def _no_hook_left(lens: Lens) -> bool:
    return all(not point.fwd_hooks and not point.bwd_hooks for point in lens.model.hook_dict.values())


def _refused(lens, before, match: str, **options):
    arguments = {"queries": [4, 5], **options}
    layer = arguments.pop("layer", LAYER)
    with pytest.raises(InputError, match=match):
        score_decomposition(lens, IDS, layer, **arguments)
    assert _no_hook_left(lens)
    again = score_decomposition(lens, IDS, LAYER, queries=[4, 5])
    np.testing.assert_array_equal(again.content, before.content)


@pytest.mark.parametrize("layer, match", [
    (3, r"layer 3 does not exist; this model has layers 0\.\.2"), (-4, r"layer -4 does not exist"),
    (1.0, r"layer 1\.0 is not an integer index .*give the int 1"), ("2", r"layer '2' is not an integer index"),
    (True, r"layer True is not an integer index"), (None, r"layer None is not an integer index"),
])
def test_a_bad_layer_names_the_layers(lens, before, layer, match):
    _refused(lens, before, match, layer=layer)


@pytest.mark.parametrize("heads, match", [
    (4, r"head 4 does not exist; this model has heads 0\.\.3"), ([0, -5], r"head -5 does not exist"),
    ([0.5], r"head 0\.5 is not an integer index"), ("01", r"heads '01' is a str"),
    (np.array([True, False, True, False]), r"heads is a bool array"), ([], r"no heads selected"),
    ([1, 1], r"heads lists 1 more than once"), (np.zeros((2, 2), dtype=int), r"heads has shape \(2, 2\)"),
])
def test_bad_heads_name_the_heads(lens, before, heads, match):
    _refused(lens, before, match, heads=heads)


@pytest.mark.parametrize("queries, match", [
    (6, r"query row 6 does not exist; this input has query rows 0\.\.5"), ([2, 9], r"query row 9 does not exist"),
    ([2.0], r"query row 2\.0 is not an integer index"), ([], r"no query rows selected"),
])
def test_query_rows_past_the_end_name_the_rows(lens, before, queries, match):
    _refused(lens, before, match, queries=queries)


@pytest.mark.parametrize("keys, match", [
    (7, r"key 7 does not exist; this input has keys 0\.\.5"), ([1, 1], r"keys lists 1 more than once"),
    ([3, 4], r"every key asked for \(3, 4\) comes after the last query row \(2\).*pass keys in 0\.\.2"),
])
def test_bad_keys_name_the_keys(lens, before, keys, match):
    _refused(lens, before, match, queries=[1, 2], keys=keys)


def test_keys_after_some_queries_are_masked_not_refused(lens):
    found = score_decomposition(lens, IDS, LAYER, queries=[1, 4], keys=[0, 3, 5])
    assert found.mask.tolist() == [[True, False, False], [True, True, False]]
    assert np.isnan(found.content[:, ~found.mask]).all() and (found.patterns["actual"][:, ~found.mask] == 0).all()


@pytest.mark.parametrize("reference, match", [
    ("integers", r"reference 'integers' is not one of 'integer', 'constant'.*\(4, 6\).*None"),
    (np.zeros((4, 5)), r"reference positions have shape \(4, 5\); pass \(4, 6\).* or \(6,\)"),
    (np.zeros((2, 4, 6)), r"reference positions have shape \(2, 4, 6\)"),
    (np.array([0.0, 1.0, np.nan, 3.0, 4.0, 5.0]), r"reference contains NaN at index \(2,\)"),
    (np.array([0.0, 1.0, 2.0, np.inf, 4.0, 5.0]), r"reference contains inf at index \(3,\)"),
    (np.array(["a"] * 6), r"reference must be a numeric array"), ([], r"reference is empty"),
])
def test_a_bad_reference_names_what_it_accepts(lens, before, reference, match):
    kept = np.array(reference, copy=True) if isinstance(reference, np.ndarray) else reference
    _refused(lens, before, match, reference=reference)
    if isinstance(reference, np.ndarray):
        np.testing.assert_array_equal(reference, kept)


def test_a_reference_array_is_refused_where_positions_depend_on_the_query():
    lens = _lens("cope")
    with pytest.raises(InputError, match=r"layer 2 \('cope'\) biases each query's scores by positions that depend "
                                         r"on the query; reference positions there can be 'integer' or 'constant'"):
        score_decomposition(lens, IDS, LAYER, reference=np.arange(6.0))
    assert _no_hook_left(lens)


@pytest.mark.parametrize("kind", ["alibi", "fox", "cope", "grape-ap"])
def test_bands_of_a_layer_that_rotates_nothing_are_refused(kind):
    found = score_decomposition(_lens(kind), IDS, LAYER, queries=[5])
    with pytest.raises(InputError, match=rf"layer 2 \('{kind}'\) rotates neither q nor k, so its scores have no "
                                         r"frequency bands.*\.content and \.position"):
        found.bands
    assert found.table(bands=False).part.isin(["content", "position"]).all()
    with pytest.raises(InputError, match="rotates neither q nor k"):
        found.table(bands=True)


@pytest.mark.parametrize("spans, match", [
    ({"needle": (2, 9)}, r"span 'needle' = \(2, 9\) must be non-empty and within the 6 tokens"),
    ({"needle": (3, 3)}, r"span 'needle' = \(3, 3\) must be non-empty"),
    ({"needle": (1.0, 3)}, r"span 'needle' must be a pair of integers"),
    ({"a": (0, 3), "b": (2, 4)}, r"spans 'a' = \(0, 3\) and 'b' = \(2, 4\) overlap"),
    ({"rest": (0, 1)}, r"span name 'rest' is reserved"), ({"all": (0, 1)}, r"span name 'all' is reserved"),
    ([(0, 1)], r"spans must be a dict name -> \(start, end\)"),
])
def test_bad_spans_are_named(before, spans, match):
    with pytest.raises(InputError, match=match):
        before.span_summary(spans)


def test_a_model_without_hooks_is_refused():
    from types import SimpleNamespace

    with pytest.raises(InputError, match=r"score_decomposition needs a Lens from repo_lens\.load"):
        score_decomposition(SimpleNamespace(model=torch.nn.Linear(2, 2)), IDS, 0)


def test_a_hugging_face_model_whose_rotation_repo_lens_cannot_identify_is_refused():
    pytest.importorskip("nnsight", reason="the generic Hugging Face path needs nnsight")
    from transformers import GPT2Config, GPT2LMHeadModel

    from repo_lens.hf import load_hf

    torch.manual_seed(0)
    generic = load_hf(GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
                      device="cpu")
    with pytest.raises(InputError, match=r"calls no apply_rotary_pos_emb .*rotary kind is not one repo_lens can "
                                         r"identify"):
        score_decomposition(generic, IDS, 1)
    with pytest.raises(InputError, match=r"layer 2 does not exist; this model has layers 0\.\.1"):
        score_decomposition(generic, IDS, 2)


def test_a_layer_that_normalises_after_rotating_is_refused(tmp_path):
    import warnings

    from authors.grape_layout import run_name, write_grape_checkpoint

    from repo_lens import load

    directory = tmp_path / run_name("grape-m-ctx", "M", True)
    write_grape_checkpoint(directory, "grape-m-ctx", "M", True, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grape = load(directory, device="cpu")
    with pytest.raises(InputError, match=r"layer 1 normalises q and k after rotating them .*cannot split it"):
        score_decomposition(grape, IDS, 1)
    assert _no_hook_left(grape)
