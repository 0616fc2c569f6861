"""repo_lens' own format at lower precision (repo_lens.model.loaders.native.quantized): 2-D weights stored as
int8 codes with a bfloat16 scale per row, checked against a quantizer written here from the definition
(absmax per row / L, scale rounded to bfloat16, codes round half to even and clamped to ±L), and every
malformed quantized checkpoint refused with a CheckpointError that names the tensor or field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.loaders import load_checkpoint, quantize_checkpoint, save_checkpoint
from repo_lens.model.loaders.native.packed import CACHE_ENV, pack_file, packed_twin
from repo_lens.model.loaders.native.quantized import quantize_rows, quantize_state, stored_values
from repo_lens.model.tiny import tiny_model

LEVELS = {"int8": 127, "int7": 63, "int6": 31}


def bfloat16_nearest(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 (round to nearest, ties to even) → float32, on the bit patterns."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def reference_rows(weight: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scale) by the definition, in numpy float32."""
    weight = weight.astype(np.float32)
    scale = bfloat16_nearest((np.abs(weight).max(axis=1) / np.float32(levels)).astype(np.float32))
    safe = np.where(scale > 0, scale, np.float32(1))[:, None]
    codes = np.where(scale[:, None] > 0, np.round(weight / safe), 0)
    return np.clip(codes, -levels, levels).astype(np.int8), scale


def model_with_edge_rows(seed: int = 3):
    """A tiny model whose first MLP weight has a row of zeros and a row with one large entry."""
    model = tiny_model("repo", n_layers=2, d_model=32, n_heads=4, seed=seed)
    with torch.no_grad():
        weight = model.blocks[0].mlp.up_proj.weight
        weight[0].zero_()
        weight[1, 5] = 3.0
    return model


def test_the_scale_and_ties_of_a_hand_computed_row():
    # max |w| = 31/32, so the scale is exactly 1/32 at 31 levels; 2.5 and 3.5 scales are ties: 2 and 4 (half to even)
    weight = torch.tensor([[31 / 32, 2.5 / 32, -3.5 / 32, 0.0], [0.0, 0.0, 0.0, 0.0]])
    codes, scale = quantize_rows(weight, 31)
    assert codes.dtype == torch.int8 and scale.dtype == torch.bfloat16
    assert codes.tolist() == [[31, 2, -4, 0], [0, 0, 0, 0]]
    assert scale.tolist() == [1 / 32, 0.0]


@pytest.mark.parametrize("storage", list(LEVELS))
def test_round_trip_stores_the_reference_codes_and_loads_their_values(storage, tmp_path):
    levels = LEVELS[storage]
    model = model_with_edge_rows()
    folder = save_checkpoint(model, tmp_path / storage, storage=storage)
    stored = load_file(str(folder / "model.safetensors"))
    loaded = load_checkpoint(folder, device="cpu").model
    reference = tiny_model("repo", n_layers=2, d_model=32, n_heads=4, seed=0)  # the reference-dequantized model
    reference_state = {}
    for name, weight in model.state_dict().items():
        if weight.ndim != 2:
            # 1-D tensors (norms) untouched, bit for bit, in the file and in the loaded model
            assert stored[name].dtype == torch.float32 and torch.equal(stored[name], weight), name
            reference_state[name] = weight
            continue
        codes, scale = reference_rows(weight.numpy(), levels)
        assert np.array_equal(stored[name].numpy(), codes), name
        assert np.array_equal(stored[name + ".row_scale"].float().numpy(), scale), name
        values = codes.astype(np.float32) * scale[:, None]
        # the error bound of the definition: half a step, or what clamping the largest entry cost
        bound = scale / 2 + np.maximum(np.abs(weight.numpy()).max(axis=1) - levels * scale, 0)
        assert (np.abs(values - weight.numpy()) <= bound[:, None] + 1e-12).all(), name
        assert np.array_equal(loaded.state_dict()[name].numpy(), values), name
        reference_state[name] = torch.from_numpy(values)
    reference.load_state_dict(reference_state)
    tokens = torch.randint(0, 257, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(loaded(tokens), reference.eval()(tokens), atol=1e-6, rtol=0)


def test_format_2_is_written_only_when_quantized(tmp_path):
    model = tiny_model("rope", n_layers=1, d_model=16, n_heads=2, seed=0)
    plain = json.loads((save_checkpoint(model, tmp_path / "plain", dtype=torch.bfloat16) / "config.json").read_text())
    small = json.loads((save_checkpoint(model, tmp_path / "small", storage="int7") / "config.json").read_text())
    assert plain["repo_lens_format"] == 1 and "storage" not in plain
    assert small["repo_lens_format"] == 2 and small["storage"] == {"scheme": "int8-rows", "levels": 63}
    assert small["model"] == plain["model"]


def test_other_floats_take_the_checkpoint_dtype_and_tied_embeddings_store_once(tmp_path):
    model = tiny_model("lpi-resid", n_layers=1, d_model=16, n_heads=2, seed=1)
    model.cfg.tie_word_embeddings = True
    stored = load_file(str(save_checkpoint(model, tmp_path, dtype=torch.bfloat16, storage="int6")
                           / "model.safetensors"))
    assert "unembed.weight" not in stored and "unembed.weight.row_scale" not in stored
    for name, weight in model.state_dict().items():
        if weight.ndim < 2 and name in stored:
            assert torch.equal(stored[name], weight.to(torch.bfloat16)), name


def test_quantizing_the_loaded_values_again_gives_the_same_codes():
    state = model_with_edge_rows(seed=5).state_dict()
    for levels in LEVELS.values():
        once = quantize_state(state, levels, torch.bfloat16)
        again = quantize_state(stored_values(state, levels, torch.bfloat16), levels, torch.bfloat16)
        assert once.keys() == again.keys()
        assert all(torch.equal(once[name], again[name]) for name in once)


def test_a_packed_quantized_checkpoint_loads_the_same_model(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    model = model_with_edge_rows()
    plain = save_checkpoint(model, tmp_path / "plain", storage="int6")
    packed = save_checkpoint(model, tmp_path / "packed", storage="int6")
    pack_file(packed / "model.safetensors", packed_twin(packed / "model.safetensors"))
    (packed / "model.safetensors").unlink()
    a = load_checkpoint(plain, device="cpu").model.state_dict()
    b = repo_lens.load(packed, device="cpu").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_quantize_checkpoint_restores_a_bfloat16_checkpoint_into_a_new_folder(tmp_path):
    model = model_with_edge_rows()
    source = save_checkpoint(model, tmp_path / "bf16", dtype=torch.bfloat16, info={"name": "kept"})
    before = (source / "model.safetensors").read_bytes()
    target = quantize_checkpoint(source, tmp_path / "int6", storage="int6")
    assert (source / "model.safetensors").read_bytes() == before
    config = json.loads((target / "config.json").read_text())
    assert config["repo_lens_format"] == 2 and config["storage"]["levels"] == 31 and config["info"] == {"name": "kept"}
    stored = load_file(str(target / "model.safetensors"))
    for name, weight in load_file(str(source / "model.safetensors")).items():
        if weight.ndim == 2:
            codes, scale = reference_rows(weight.float().numpy(), 31)
            assert np.array_equal(stored[name].numpy(), codes), name
            assert np.array_equal(stored[name + ".row_scale"].float().numpy(), scale), name
        else:
            assert stored[name].dtype == torch.bfloat16 and torch.equal(stored[name], weight), name
    with pytest.raises(InputError, match="already holds a checkpoint"):
        quantize_checkpoint(source, target, storage="int8")
    with pytest.raises(InputError, match="storage 'int4'"):
        quantize_checkpoint(source, tmp_path / "int4", storage="int4")


def test_quantize_checkpoint_takes_the_tokenizer_files_along_and_refuses_other_formats(tmp_path):
    model = tiny_model("rope", n_layers=1, d_model=16, n_heads=2, seed=0)
    source = tmp_path / "hf-tokenizer"
    source.mkdir()
    (source / "tokenizer.json").write_text('{"version": "1.0"}')
    save_checkpoint(model, source, tokenizer="hf")
    target = quantize_checkpoint(source, tmp_path / "int8", storage="int8")
    assert (target / "tokenizer.json").read_text() == '{"version": "1.0"}'
    assert json.loads((target / "config.json").read_text())["tokenizer"] == "hf"
    foreign = tmp_path / "hf"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError, match="is not a repo_lens checkpoint"):
        quantize_checkpoint(foreign, tmp_path / "out", storage="int8")


def test_save_refuses_an_unknown_storage_before_writing(tmp_path):
    with pytest.raises(InputError, match=r"storage 'int4' .*int8, int7, int6"):
        save_checkpoint(tiny_model("rope", n_layers=1, d_model=16, n_heads=2), tmp_path / "x", storage="int4")
    assert not (tmp_path / "x").exists()


# ---- bad input: each way a quantized checkpoint can be wrong --------------------------------------------

WEIGHT = "blocks.0.attn.q_proj.weight"
SCALE = WEIGHT + ".row_scale"


def _drop_scale(tensors, config):
    del tensors[SCALE]


def _orphan_scale(tensors, config):
    tensors["blocks.0.attn.extra.weight.row_scale"] = torch.ones(4, dtype=torch.bfloat16)


def _short_scale(tensors, config):
    tensors[SCALE] = tensors[SCALE][:-1].clone()


def _float32_scale(tensors, config):
    tensors[SCALE] = tensors[SCALE].float()


def _negative_scale(tensors, config):
    tensors[SCALE] = -tensors[SCALE]


def _code_out_of_range(tensors, config):
    tensors[WEIGHT][0, 0] = 40


def _int16_codes(tensors, config):
    tensors[WEIGHT] = tensors[WEIGHT].to(torch.int16)


def _float_codes(tensors, config):
    tensors[WEIGHT] = tensors[WEIGHT].float()


def _unknown_scheme(tensors, config):
    config["storage"]["scheme"] = "int4-blocks"


def _unknown_levels(tensors, config):
    config["storage"]["levels"] = 15


def _no_storage_field(tensors, config):
    del config["storage"]
    config["repo_lens_format"] = 1


def _format_2_without_storage(tensors, config):
    del config["storage"]


def _storage_in_format_1(tensors, config):
    config["repo_lens_format"] = 1


def _newer_format(tensors, config):
    config["repo_lens_format"] = 3


BAD = {
    "code without scale": (_drop_scale, rf"int8 code tensor '{WEIGHT}' has no scale '{SCALE}'"),
    "scale without code": (_orphan_scale, r"scale 'blocks\.0\.attn\.extra\.weight\.row_scale' has no code tensor"),
    "scale of the wrong shape": (_short_scale, rf"scale '{SCALE}' is bfloat16 of shape \(7,\); expected bfloat16 "
                                               r"of shape \(8,\)"),
    "scale of the wrong dtype": (_float32_scale, rf"scale '{SCALE}' is float32"),
    "negative scale": (_negative_scale, rf"scale '{SCALE}' holds negative"),
    "codes outside the levels": (_code_out_of_range, rf"code tensor '{WEIGHT}' holds codes up to ±40, outside the ±31"),
    "int16 codes": (_int16_codes, rf"code tensor '{WEIGHT}' is int16 .* must be 2-D int8 codes"),
    "float codes": (_float_codes, rf"code tensor '{WEIGHT}' is float32 .* must be 2-D int8 codes"),
    "unknown scheme": (_unknown_scheme, r"storage\.scheme='int4-blocks' is unknown"),
    "unknown level count": (_unknown_levels, r"storage\.levels=15 is not a supported level count"),
    "int8 tensors without a storage field": (_no_storage_field, r"holds quantized tensors .*has no storage field"),
    "format 2 without a storage field": (_format_2_without_storage, r"repo_lens_format 2 .* no storage field"),
    "storage field in format 1": (_storage_in_format_1, r"declares quantized storage but repo_lens_format 1"),
    "newer format": (_newer_format, r"format 3.*Upgrade repo_lens"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_malformed_quantized_checkpoint_is_refused_naming_the_problem(case, tmp_path):
    tamper, message = BAD[case]
    model = tiny_model("rope", n_layers=1, d_model=8, n_heads=2, seed=0)
    folder = save_checkpoint(model, tmp_path, storage="int6")
    tensors = load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    tamper(tensors, config)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder, device="cpu")
