"""Every ``dynamic_pe_mode`` with a forward pass in the RePo authors' transformers code loads as
their code runs it: weights named like theirs, strict loading, positions and logits equal to an
independent float64 reference written from their equations (tests/reference_repo.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
from conftest import add_repo_weights, hf_model, save_hf_model, tiny_olmo2_config
from reference_repo import reference_forward

TOLERANCE = 1e-4
START, N_LAYERS, N_HEADS, D_MODEL = 2, 4, 4, 64
IDS = torch.randint(2, 64, (40,), generator=torch.Generator().manual_seed(9)).tolist()
# the dynamic_map each mode's layers hold (their Olmo2Attention.__init__): [out, D_MODEL]
DYNAMIC_MAP_ROWS = {"multihead_continuous": N_HEADS, "continuous": 1}
KINDS = {"multihead_continuous": "repo-multihead-continuous", "continuous": "repo-continuous", "nope": "nope"}


def _pe_config(mode):
    return {"dynamic_pe_mode": mode, "dynamic_pe_start_layer": START, "dynmaic_pe_start_layer": START,
            "dynamic_pe_layer_ids": "", "dynmaic_pe_layer_ids": ""}


def _write(directory, mode, weights=None):
    config = json.loads((directory / "config.json").read_text())
    config["pe_config"] = _pe_config(mode)
    (directory / "config.json").write_text(json.dumps(config))
    if weights is not None:
        save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def _dynamic_maps(mode, layers=range(START, N_LAYERS), rows=None):
    generator = torch.Generator().manual_seed(2)
    rows = DYNAMIC_MAP_ROWS[mode] if rows is None else rows
    # scaled so that z spans several units: the rotation really depends on it
    return {f"model.layers.{layer}.self_attn.dynamic_map.weight": torch.randn(rows, D_MODEL, generator=generator) * 0.5
            for layer in layers}


def _checkpoint(tmp_path, mode, extra_weights=None):
    directory = save_hf_model(hf_model(tiny_olmo2_config(), seed=3), tmp_path / mode)
    weights = load_file(str(directory / "model.safetensors"))
    weights.update(_dynamic_maps(mode) if mode in DYNAMIC_MAP_ROWS else {})
    weights.update(extra_weights or {})
    return _write(directory, mode, weights)


@pytest.mark.parametrize("mode", ["multihead_continuous", "continuous", "nope"])
def test_positions_and_logits_match_their_equations(mode, tmp_path):
    directory = _checkpoint(tmp_path, mode)
    lens = repo_lens.load(directory, device="cpu")
    assert lens.model.layer_kinds == ["rope"] * START + [KINDS[mode]] * (N_LAYERS - START)
    trace = lens.trace(IDS)
    weights = load_file(str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    expected_logits, expected_positions = reference_forward(weights, config, IDS, repo_layers=range(START, N_LAYERS),
                                                            mode=mode)
    np.testing.assert_allclose(trace.positions, expected_positions.numpy(), atol=TOLERANCE, rtol=0)
    with torch.no_grad():
        logits = lens.model(torch.tensor([IDS]))[0]
    assert (logits.double() - expected_logits).abs().max().item() < TOLERANCE
    upper = trace.positions[START:]
    if mode == "nope":
        assert (upper == 0).all()
    else:
        assert np.abs(upper - np.arange(len(IDS))).max() > 1.0 and upper.std() > 1.0
        heads_agree = np.allclose(upper, upper[:, :1])
        assert heads_agree == (mode == "continuous")  # continuous: one position per token, every head


@pytest.mark.parametrize("mode", ["multihead_continuous", "continuous"])
def test_kv_cache_decoding_equals_the_full_forward(mode, tmp_path):
    model = repo_lens.load(_checkpoint(tmp_path, mode), device="cpu").model
    ids = torch.tensor([IDS])
    cache = model.new_cache()
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :30], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(30, len(IDS))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    "mode, edit, key, message",
    [
        ("multihead_continuous", lambda w: w.pop("model.layers.3.self_attn.dynamic_map.weight"),
         "model.layers.3.self_attn.dynamic_map.weight", "missing weights"),
        ("multihead_continuous", lambda w: w.update(_dynamic_maps("multihead_continuous", layers=[0])),
         "model.layers.0.self_attn.dynamic_map.weight", "surplus weights"),
        ("continuous", lambda w: w.update(_dynamic_maps("continuous", layers=[2], rows=N_HEADS)),
         "model.layers.2.self_attn.dynamic_map.weight", "shape mismatches"),
        ("nope", lambda w: w.update(_dynamic_maps("continuous", layers=[3])),
         "model.layers.3.self_attn.dynamic_map.weight", "surplus weights"),
        # swigluex_multihead's maps in a continuous layer: their model has no such parameter
        ("continuous", lambda w: w.__setitem__("model.layers.2.self_attn.gate_map.weight", torch.zeros(8, D_MODEL)),
         "model.layers.2.self_attn.gate_map.weight", "surplus weights"),
    ],
)
def test_missing_surplus_and_misshapen_maps_are_refused_by_name(mode, edit, key, message, tmp_path):
    directory = _checkpoint(tmp_path, mode)
    weights = load_file(str(directory / "model.safetensors"))
    edit(weights)
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(repo_lens.CheckpointError, match=message) as error:
        repo_lens.load(directory, device="cpu")
    assert key in str(error.value)


@pytest.mark.parametrize("mode", ["swiglu", "swigluex"])
def test_swiglu_modes_rotate_by_the_index_with_unread_maps(mode, tmp_path):
    """Their substring test gives swiglu / swigluex layers RePo's maps, but their forward rotates by
    the integer index: a RoPE model, i.e. stock transformers' forward of the same weights."""
    from transformers import AutoModelForCausalLM

    directory = save_hf_model(hf_model(tiny_olmo2_config(), seed=3), tmp_path / mode)
    add_repo_weights(directory, start=START)
    _write(directory, mode)
    with pytest.warns(UserWarning, match="rotates by the integer index"):
        lens = repo_lens.load(directory, device="cpu")
    assert lens.model.layer_kinds == ["rope"] * N_LAYERS
    assert any("loaded (shape-checked) and unused" in note for note in lens.meta["pe_config_notes"])
    ids = torch.tensor([IDS])
    stock = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(lens.model(ids), stock(ids).logits, atol=TOLERANCE, rtol=0)

    weights = load_file(str(directory / "model.safetensors"))
    weights["model.layers.3.self_attn.final_map.weight"] = torch.zeros(2, 8)  # their model declares [4, 8]
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    mismatch = "shape mismatches.*layers.3.self_attn.final_map"
    with pytest.warns(UserWarning), pytest.raises(repo_lens.CheckpointError, match=mismatch):
        repo_lens.load(directory, device="cpu")


def test_unread_maps_outside_the_selected_layers_are_surplus(tmp_path):
    directory = save_hf_model(hf_model(tiny_olmo2_config(), seed=3), tmp_path / "swiglu")
    add_repo_weights(directory, start=1)  # maps in layer 1, which start 2 does not select
    _write(directory, "swiglu")
    with pytest.warns(UserWarning), pytest.raises(repo_lens.CheckpointError, match="surplus.*model.layers.1.self_attn"):
        repo_lens.load(directory, device="cpu")
