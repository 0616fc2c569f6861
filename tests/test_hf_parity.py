"""Stock transformers checkpoints load into repo_lens with logits equal to transformers' eager forward."""

from __future__ import annotations

import json

import pytest
import torch

import repo_lens
from conftest import hf_model, save_hf_model, tiny_olmo2_config

TOLERANCE = 1e-4


def hf_logits(directory, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("fixture", ["olmo2_dir", "llama_dir"])
def test_logits_match_transformers_eager(fixture, request):
    directory = request.getfixturevalue(fixture)
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(0))
    lens = repo_lens.load(directory, device="cpu")
    with torch.no_grad():
        ours = lens.model(ids)
    expected = hf_logits(directory, ids)
    assert (ours - expected).abs().max().item() < TOLERANCE
    torch.testing.assert_close(ours, expected, atol=TOLERANCE, rtol=0)


def test_llama_gqa_and_tied_embeddings_are_honoured(llama_dir):
    lens = repo_lens.load(llama_dir, device="cpu")
    assert lens.model.cfg.n_kv_heads == 2 and lens.model.cfg.n_heads == 4
    assert lens.model.unembed.weight.data_ptr() == lens.model.embed.weight.data_ptr()
    assert lens.model.layer_kinds == ["rope"] * 3


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
        {"rope_type": "linear", "rope_theta": 5000.0, "factor": 2.0},
    ],
)
def test_scaled_rope_matches_transformers(rope_parameters, tmp_path):
    config = tiny_olmo2_config(rope_parameters=rope_parameters)
    directory = save_hf_model(hf_model(config, seed=7), tmp_path)
    ids = torch.randint(0, 64, (1, 100), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = repo_lens.load(directory, device="cpu").model(ids)
    torch.testing.assert_close(ours, hf_logits(directory, ids), atol=TOLERANCE, rtol=0)


def test_yarn_frequencies_match_transformers_and_scale_attention():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from repo_lens.model.rotary import rope_frequencies

    scaling = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 64}
    config = tiny_olmo2_config(rope_parameters=scaling, max_position_embeddings=512)
    expected_inv_freq, expected_scale = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    inv_freq, scale = rope_frequencies(16, 10000.0, scaling, 512)
    torch.testing.assert_close(inv_freq, expected_inv_freq.float(), atol=1e-7, rtol=1e-6)
    assert scale == pytest.approx(expected_scale) and scale > 1.0


def test_config_written_by_transformers_4_52_style_is_read(olmo2_dir, tmp_path):
    """transformers 4.52 wrote rope_theta / rope_scaling at top level instead of rope_parameters."""
    import shutil

    directory = tmp_path / "old_style"
    shutil.copytree(olmo2_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    theta = config.pop("rope_parameters")["rope_theta"]
    config.update(rope_theta=theta, rope_scaling=None)
    (directory / "config.json").write_text(json.dumps(config))
    ids = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        old = repo_lens.load(directory, device="cpu").model(ids)
        new = repo_lens.load(olmo2_dir, device="cpu").model(ids)
    assert torch.equal(old, new)
