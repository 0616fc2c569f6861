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


def _hf_rotary(config):
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RotaryEmbedding

    return Olmo2RotaryEmbedding(config)


@pytest.mark.parametrize("head_dim, theta", [(16, 10000.0), (64, 500000.0), (128, 1000000.0)])
@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "default"},
        {"rope_type": "linear", "factor": 2.5},
        {"rope_type": "dynamic", "factor": 3.0},
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
    ],
)
def test_inv_freq_equals_transformers_bit_for_bit(head_dim, theta, rope_parameters):
    """Computed in float32 like transformers' initialisers (the authors' code), not float64 rounded once."""
    from repo_lens.model.rotary import rope_frequencies

    rope_parameters = {**rope_parameters, "rope_theta": theta}
    config = tiny_olmo2_config(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=4,
                               max_position_embeddings=512, rope_parameters=rope_parameters)
    rotary = _hf_rotary(config)
    scaling = None if rope_parameters["rope_type"] == "default" else rope_parameters
    inv_freq, scale = rope_frequencies(head_dim, theta, scaling, 512)
    assert inv_freq.dtype == torch.float32 and torch.equal(inv_freq, rotary.inv_freq)
    assert scale == rotary.attention_scaling


@pytest.mark.parametrize("n_tokens", [513, 700, 4000])
def test_dynamic_inv_freq_at_a_length_equals_transformers_bit_for_bit(n_tokens):
    from repo_lens.model.rotary import rope_frequencies

    rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    config = tiny_olmo2_config(max_position_embeddings=512, rope_parameters=rope_parameters)
    rotary = _hf_rotary(config)
    rotary(torch.zeros(1, dtype=torch.float32), torch.arange(n_tokens)[None])  # the forward rescales in place
    inv_freq, _ = rope_frequencies(16, 10000.0, rope_parameters, 512, seq_len=n_tokens)
    assert torch.equal(inv_freq, rotary.inv_freq)
    assert not torch.equal(inv_freq, rope_frequencies(16, 10000.0)[0])


def test_dynamic_rope_matches_transformers_beyond_the_original_context(tmp_path):
    """Dynamic NTK: inside the original context the frequencies are plain RoPE's; beyond it transformers
    rescales the base from the sequence length (max position id + 1)."""
    config = tiny_olmo2_config(max_position_embeddings=32,
                               rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    directory = save_hf_model(hf_model(config, seed=11), tmp_path)
    lens = repo_lens.load(directory, device="cpu")
    for length in (20, 90):
        ids = torch.randint(0, 64, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            ours = lens.model(ids)
        torch.testing.assert_close(ours, hf_logits(directory, ids), atol=TOLERANCE, rtol=0)
    # and the rescaling really acts: without it the long forward is off
    plain = tiny_olmo2_config(max_position_embeddings=32, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    plain_dir = save_hf_model(hf_model(plain, seed=11), tmp_path / "plain")
    assert (hf_logits(plain_dir, ids) - ours).abs().max() > 100 * TOLERANCE


def test_dynamic_rope_kv_cache_decoding_matches_transformers(tmp_path):
    """Greedy decoding across the original context: each step rescales for the grown length while
    the cached keys keep the rotation they were stored with, in transformers and in repo_lens."""
    from transformers import AutoModelForCausalLM

    config = tiny_olmo2_config(max_position_embeddings=16,
                               rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0})
    directory = save_hf_model(hf_model(config, seed=12), tmp_path)
    prompt = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(3))
    hf = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = hf.generate(prompt, max_new_tokens=10, do_sample=False, output_logits=True,
                               return_dict_in_generate=True, pad_token_id=0)
    model = repo_lens.load(directory, device="cpu").model
    cache, ids, steps = model.new_cache(), prompt, []
    with torch.no_grad():
        for _ in range(10):
            logits = model(ids, cache=cache)[:, -1]
            steps.append(logits)
            ids = logits.argmax(-1, keepdim=True)
    torch.testing.assert_close(torch.stack(steps), torch.stack(expected.logits), atol=TOLERANCE, rtol=0)


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
