"""The analyzers and interventions read GRAPE authors' models as any other: batched traces equal traces
one at a time, attention mass equals the hooked pattern's, and an ablation edits the hook the registry
names for the layer's kind."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens import interventions
from repo_lens.analysis import attention_mass

from .grape_layout import run_name, write_grape_checkpoint

VARIANTS = ["grape-a-keygated", "grape-a-querygated", "grape-ap-v1", "grape-m-ctx", "fox", "alibi"]
TEXTS = [[5, 9, 2, 33, 4, 4, 80, 1, 7, 19, 26], [40, 2, 2, 61], [8, 3, 50, 50, 11, 6, 90]]


@pytest.fixture(scope="module", params=VARIANTS)
def lens(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp("grape") / run_name(request.param, "M", True)
    write_grape_checkpoint(directory, request.param, "M", True, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return repo_lens.load(directory, device="cpu")


def test_batched_traces_equal_traces_one_at_a_time(lens):
    alone = [lens.trace(ids, progress=False) for ids in TEXTS]
    batched = lens.trace_batch(TEXTS, batch_size=3, progress=False)
    for one, other in zip(alone, batched):
        np.testing.assert_allclose(one.positions, other.positions, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(one.extras["increments"], other.extras["increments"], rtol=1e-5, atol=1e-5)


def test_attention_mass_equals_the_hooked_pattern(lens):
    ids = TEXTS[0]
    spans, query = {"needle": (2, 5)}, (8, 11)
    mass = attention_mass(lens, ids, spans, query)
    _, cache = lens.model.run_with_cache(torch.tensor([ids]), names_filter=lambda name: name.endswith("hook_pattern"))
    patterns = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(lens.n_layers)])
    rows = patterns[:, :, query[0]:query[1]]  # [layer, head, rows, keys]
    needle = rows[..., spans["needle"][0]:spans["needle"][1]].sum(-1).mean(-1) / 3
    np.testing.assert_allclose(mass.by_layer_head["needle"], needle.numpy(), rtol=1e-4, atol=1e-6)


def test_constant_ablation_edits_the_registry_hook(lens):
    metric = interventions.logit_difference(3, 4)
    ablated = interventions.ablate(lens, TEXTS[0], mode="constant", metric=metric)
    with torch.no_grad():
        logits = lens.model(torch.tensor([TEXTS[0]]))
    unedited = float(logits[0, -1, 3] - logits[0, -1, 4])
    assert np.isfinite(ablated).all() and abs(float(ablated[0]) - unedited) > 1e-6
