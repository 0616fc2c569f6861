"""The zoo's weights ship xz-packed: a load reads exactly the tensors that were packed, from an unpacked
copy keyed by the packed file's hash, and a damaged packed file fails loudly instead of loading."""

from __future__ import annotations

import lzma

import pytest
import torch
from safetensors.torch import load_file

import repo_lens
from repo_lens import CheckpointError
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.loaders.native.packed import CACHE_ENV, pack_file, packed_twin, readable_file
from repo_lens.model.tiny import tiny_model
from repo_lens.zoo import ZOO_DIR, available_models


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def test_every_zoo_model_ships_its_weights_packed_and_only_packed():
    for name in available_models():
        files = sorted(path.name for path in (ZOO_DIR / name).iterdir())
        assert not [file for file in files if file.endswith(".safetensors")], (name, files)
        assert [file for file in files if file.endswith(".safetensors.xz")], (name, files)


def test_a_packed_checkpoint_loads_the_same_tensors_as_the_unpacked_one(tmp_path):
    model = tiny_model("repo", n_layers=2, d_model=32, n_heads=4, seed=3)
    plain = save_checkpoint(model, tmp_path / "plain")
    packed = save_checkpoint(model, tmp_path / "packed")
    pack_file(packed / "model.safetensors", packed_twin(packed / "model.safetensors"))
    (packed / "model.safetensors").unlink()
    assert lzma.decompress((packed / "model.safetensors.xz").read_bytes()) == (plain / "model.safetensors").read_bytes()
    a, b = load_checkpoint(plain, device="cpu").model, load_checkpoint(packed, device="cpu").model
    for (name, x), (other, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert name == other and torch.equal(x, y)
    assert sorted(path.name for path in (tmp_path / "cache" / "unpacked").iterdir())[0].endswith("-model.safetensors")


def test_a_reshipped_file_never_meets_a_stale_copy(tmp_path):
    source = tmp_path / "w.safetensors"
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(3)}, str(source))
    first = readable_file(pack_file(source, tmp_path / "w.safetensors.xz"))
    save_file({"x": torch.ones(3)}, str(source))
    second = readable_file(pack_file(source, tmp_path / "w.safetensors.xz"))
    assert first != second
    assert torch.equal(load_file(str(second))["x"], torch.ones(3))


def test_a_damaged_packed_file_fails_loudly_and_names_itself(tmp_path):
    model = tiny_model("rope", n_layers=1, d_model=16, n_heads=2, seed=0)
    folder = save_checkpoint(model, tmp_path / "ckpt")
    packed = pack_file(folder / "model.safetensors", packed_twin(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    data = bytearray(packed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    packed.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors\.xz is damaged"):
        load_checkpoint(folder, device="cpu")
    assert packed.read_bytes() == bytes(data)  # nothing of the user's is touched


def test_a_zoo_model_loads_from_its_packed_weights():
    lens = repo_lens.load("zoo:bytes-repo", device="cpu")
    assert lens.model.cfg.layer_mechanisms[-1] == "repo"
