"""device_map loading (accelerate): blocks stay whole, hooks still fire, numbers do not change.
On a CPU-only machine the device hooks are forced onto a CPU-only map to exercise the same path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("accelerate", reason="device_map loading needs accelerate: pip install accelerate")

import repo_lens  # noqa: E402
from repo_lens.analysis import attention_mass  # noqa: E402
from repo_lens.errors import InputError  # noqa: E402
from repo_lens.lens import Lens  # noqa: E402
from repo_lens.model import LensModel, ModelConfig  # noqa: E402
from repo_lens.model.loaders import save_checkpoint  # noqa: E402
from repo_lens.model.loaders import LoadedModel  # noqa: E402
from repo_lens.model.loaders.device_map import load_dispatched, plan_device_map  # noqa: E402

PLAN = {"embed": "cpu", "blocks.0": "cpu", "blocks.1": "cpu", "blocks.2": "cpu", "final_norm": "cpu", "unembed": "cpu"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=64, n_layers=3, n_heads=4, d_mlp=128,
                      layer_mechanisms=["rope", "repo", "repo"])
    return save_checkpoint(LensModel(cfg), tmp_path_factory.mktemp("dispatch"))


def test_dispatched_model_gives_the_same_logits_positions_and_mass(checkpoint):
    reference = repo_lens.load(checkpoint, device="cpu")
    loaded = load_dispatched(checkpoint, device_map=PLAN, dtype="float32", force_hooks=True)
    assert isinstance(loaded, LoadedModel)  # the loader hands back a plain model; load() wraps it
    lens = Lens(loaded.model, loaded.tokenizer, loaded.meta)
    assert all(hasattr(block, "_hf_hook") for block in lens.model.blocks)
    assert lens.meta["device_map"]["blocks.2"] == "cpu"
    ids = torch.randint(0, 257, (1, 60), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(lens.model(ids), reference.model(ids), atol=0, rtol=0)
    np.testing.assert_array_equal(lens.trace(ids[0].tolist()).positions, reference.trace(ids[0].tolist()).positions)
    spans, query = {"needle": (5, 10)}, (50, 60)
    assert attention_mass(lens, ids[0], spans, query).per_token == attention_mass(reference, ids[0], spans, query).per_token


def test_load_with_a_device_map_returns_a_lens_that_records_the_map(checkpoint):
    reference = repo_lens.load(checkpoint, device="cpu")
    lens = repo_lens.load(checkpoint, device_map=PLAN, dtype="float32")
    assert isinstance(lens, Lens) and lens.meta["device_map"] == PLAN and lens.meta["dtype"] == "float32"
    ids = torch.randint(0, 257, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(lens.model(ids), reference.model(ids), atol=0, rtol=0)
    with pytest.raises(InputError, match="unknown device_map 'everywhere'"):
        repo_lens.load(checkpoint, device_map="everywhere")


def test_device_map_plans_and_bad_maps(checkpoint):
    model = repo_lens.load(checkpoint, device="cpu").model
    assert plan_device_map(model, "auto", max_memory={"cpu": "1GiB"}) == {"": "cpu"}
    with pytest.raises(InputError, match=r"does not place \['blocks.2', 'unembed'\]"):
        plan_device_map(model, {key: "cpu" for key in PLAN if key not in ("blocks.2", "unembed")})
    with pytest.raises(InputError, match="unknown device_map 'everywhere'"):
        plan_device_map(model, "everywhere")
