"""The one ``load()``: zoo names, checkpoint directories and GGUF files (tests/external/) all become a
Lens through repo_lens.loading; the loaders below it hand back a plain model + tokenizer + meta."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import repo_lens
from repo_lens.errors import CheckpointError, InputError
from repo_lens.lens import Lens
from repo_lens.loading import load
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.loaders import LoadedModel, load_checkpoint, save_checkpoint
from repo_lens.zoo import ZOO_DIR, available_models, parse_zoo_name, resolve_source, zoo_source


@pytest.fixture(scope="module")
def native_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=3, n_heads=4, d_mlp=64,
                      layer_mechanisms=["rope", "repo", "repo"])
    return save_checkpoint(LensModel(cfg), tmp_path_factory.mktemp("native"))


def test_repo_lens_load_is_the_one_load():
    assert repo_lens.load is load
    from repo_lens import load as imported

    assert imported is load


def test_importing_repo_lens_and_its_zoo_does_not_import_torch():
    code = ("import sys, repo_lens, repo_lens.zoo; repo_lens.zoo.resolve_source('zoo:bytes-repo'); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("fixture", ["native_dir", "olmo2_dir", "repo_dir"])
def test_a_directory_loads_into_a_lens_holding_what_the_loader_returned(fixture, request):
    directory = request.getfixturevalue(fixture)
    loaded = load_checkpoint(directory, device="cpu")
    assert isinstance(loaded, LoadedModel) and not isinstance(loaded, Lens)
    lens = load(directory, device="cpu")
    assert isinstance(lens, Lens)
    assert lens.meta == loaded.meta and lens.meta["source"] == str(Path(directory).resolve())
    assert lens.model.cfg.layer_mechanisms == loaded.model.cfg.layer_mechanisms
    ids = torch.arange(1, 9).unsqueeze(0) % lens.model.cfg.vocab_size
    with torch.no_grad():
        torch.testing.assert_close(lens.model(ids), loaded.model(ids), atol=0, rtol=0)


def test_a_zoo_name_loads_the_shipped_directory():
    name = available_models()[0]
    by_name, by_path = load(zoo_source(name), device="cpu"), load(ZOO_DIR / name, device="cpu")
    assert by_name.meta == by_path.meta and by_name.meta["name"] == name
    ids = torch.arange(10).unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(by_name.model(ids), by_path.model(ids), atol=0, rtol=0)


def test_zoo_names_are_parsed_in_one_place(tmp_path):
    assert parse_zoo_name("zoo:bytes-repo") == "bytes-repo"
    assert parse_zoo_name("zoo:") == ""
    assert parse_zoo_name("/ckpt/zoo:x") is None and parse_zoo_name("Zoo:bytes-repo") is None
    assert parse_zoo_name(Path("models") / "bytes-repo") is None
    assert parse_zoo_name(zoo_source("bytes-rope")) == "bytes-rope"
    assert resolve_source("zoo:bytes-repo") == ZOO_DIR / "bytes-repo"
    assert resolve_source(tmp_path) == tmp_path
    assert resolve_source("~/somewhere") == Path.home() / "somewhere"


def test_bad_sources_name_what_was_wrong(tmp_path):
    with pytest.raises(InputError, match=r"unknown zoo model 'nothing'; available: .*bytes-repo"):
        load("zoo:nothing", device="cpu")
    with pytest.raises(InputError, match="unknown zoo model ''"):
        load("zoo:", device="cpu")
    with pytest.raises(InputError, match="not int"):
        load(42)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="does not exist"):
        load(tmp_path / "missing", device="cpu")

