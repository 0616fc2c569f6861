"""The post's graft on SmolLM2-135M itself (zoo:smollm2-135m, d_model 576, so a DeltaMLP 144 wide): a graft file
loads onto it with the reference δ of its whole 49,152-id vocabulary, and the recipe (``repo-lens train --base
zoo:smollm2-135m --mechanism lpi-graft``) starts as the base at the positions Σ_{s<t} softplus(0.5413)."""

from __future__ import annotations


import pytest
import torch

import repo_lens
from repo_lens.model.grafted_increments import token_deltas
from repo_lens.train.reposition import GRAFT_KIND, recipe_config, repositioned_model
from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

from .graft_reference import POST_BIAS, exclusive_positions, graft_state, reference_deltas, write_graft

pytestmark = [pytest.mark.smollm2, pytest.mark.xdist_group("smollm2"),
              pytest.mark.skipif(not external_installed("smollm2-135m"),
                                 reason=f"the base needs the SmolLM2 extra: {EXTERNAL_MODELS['smollm2-135m'].install}")]

TEXT = ("The jury said that the city of Atlanta had been well run, and that the election was conducted with care. "
        "It also found that many of the city's laws were outdated and should be revised by the next council.")


@pytest.fixture(scope="module")
def base():
    return repo_lens.load("zoo:smollm2-135m", device="cpu", dtype="float32")


def test_a_graft_file_loads_onto_smollm2_with_the_reference_deltas(base, tmp_path):
    state = graft_state(576, seed=2, scale=0.2)
    graft = write_graft(tmp_path / "delta_mlp.pt", state)
    lens = repo_lens.load("zoo:smollm2-135m", device="cpu", dtype="float32", graft=graft)
    assert lens.model.cfg.layer_mechanisms == ["lpi-graft"] * 30 and lens.model.cfg.lpi_hidden_dim == 144
    expected = reference_deltas(state, base.model.embed.weight.detach())
    assert expected.shape == (49152,) and float(expected.std()) > 0.05
    torch.testing.assert_close(token_deltas(lens.model).double(), expected, rtol=1e-6, atol=1e-6)
    ids = base.tokenizer.encode(TEXT)
    trace = lens.trace(TEXT, progress=False)
    torch.testing.assert_close(torch.from_numpy(trace.positions[29, 0]).double(), exclusive_positions(expected[ids]),
                               rtol=1e-6, atol=1e-5)


def test_the_recipe_starts_as_smollm2_at_the_posts_start_positions(base):
    model = repositioned_model(base.model, recipe_config(GRAFT_KIND, autocast=False))
    assert model.cfg.layer_mechanisms == ["lpi-graft"] * 30
    tokens = torch.tensor([base.tokenizer.encode(TEXT)])
    # as the post computes them: δ = softplus(0.5413) in fp32, cumsum(δ) − δ in fp32
    positions = exclusive_positions(torch.nn.functional.softplus(torch.full((tokens.shape[1],), POST_BIAS)))

    def at_start(value, hook):
        return positions.expand_as(value).clone()

    with torch.no_grad():
        expected = base.model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", at_start)
                                                                for layer in range(30)])
        torch.testing.assert_close(model(tokens), expected, rtol=0, atol=1e-5)
