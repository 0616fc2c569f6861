"""Names from before the rename keep working: each attention layer's position mechanism was ``attn.positions``
(now ``attn.mechanism``), the model's shared increments module ``increments`` (now ``shared_delta``), RePo's d_p
the config key ``repo_dim`` (now ``d_position``) and the resumable runs ``repo_lens.studies.runs`` (now
``repo_lens.studies.resumable``). Files saved under the former names load as they are; the former hook names,
attributes and keywords reach the same objects and warn."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
from repo_lens import Trace
from repo_lens.errors import CheckpointError
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.loaders.native.packed import readable_file
from repo_lens.model.tiny import tiny_model
from repo_lens.zoo import resolve_source

IDS = torch.tensor([[5, 1, 9, 3, 7, 2, 8]])


def former(key: str) -> str:
    """A state-dict key as the release before the rename wrote it (spelled out here, not taken from the package)."""
    key = key.replace(".attn.mechanism.", ".attn.positions.")
    return "increments." + key[len("shared_delta."):] if key.startswith("shared_delta.") else key


def assert_same_model(loaded: torch.nn.Module, expected: torch.nn.Module) -> None:
    state, wanted = loaded.state_dict(), expected.state_dict()
    assert state.keys() == wanted.keys()
    for name, tensor in wanted.items():
        assert torch.equal(state[name], tensor), name
    with torch.no_grad():
        assert torch.equal(loaded(IDS), expected(IDS))


@pytest.mark.parametrize("kind", ["repo", "lpi", "lpi-layer", "cope"])
def test_a_state_dict_under_the_former_keys_loads_equal(kind):
    saved = tiny_model(kind, seed=1).eval()
    old = {former(name): tensor.clone() for name, tensor in saved.state_dict().items()}
    assert any(".attn.positions." in name or name.startswith("increments.") for name in old)
    model = tiny_model(kind, seed=2).eval()
    assert not torch.equal(model(IDS), saved(IDS))  # another draw, so the load has something to change
    result = model.load_state_dict(old)  # strict: every key found under its current name
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_model(model, saved)


@pytest.mark.parametrize("kind", ["repo", "lpi"])
def test_a_checkpoint_saved_under_the_former_names_loads_equal(tmp_path, kind):
    saved = tiny_model(kind, seed=3).eval()
    current = save_checkpoint(saved, tmp_path / "current")
    old = tmp_path / "former"
    old.mkdir()
    tensors = load_file(str(current / "model.safetensors"))
    save_file({former(name): tensor for name, tensor in tensors.items()}, str(old / "model.safetensors"))
    config = json.loads((current / "config.json").read_text())
    config["model"]["repo_dim"] = config["model"].pop("d_position")
    (old / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(old, device="cpu", dtype=torch.float32).model.eval()
    assert loaded.cfg.to_dict() == saved.cfg.to_dict()
    assert_same_model(loaded, saved)


def test_the_shipped_zoo_weights_load_under_their_former_names():
    folder = resolve_source("zoo:bytes-repo")
    config = json.loads((folder / "config.json").read_text())["model"]
    shipped = load_file(str(readable_file(folder / "model.safetensors.xz")))
    assert "repo_dim" in config and any(".attn.positions." in name for name in shipped)  # the files as shipped
    model = repo_lens.load("zoo:bytes-repo", device="cpu").model
    assert model.cfg.d_position == (config["repo_dim"] or config["d_model"] // 8)
    state = model.state_dict()
    for name, tensor in shipped.items():
        current = name.replace(".attn.positions.", ".attn.mechanism.")
        assert torch.equal(state[current].float(), tensor.float()), name


def _delta(folder, base_dir, tensors):
    folder.mkdir()
    recipe = {"base": str(base_dir), "mechanism": "repo", "first_layer": 1, "lora_rank": 1, "lora_alpha": 2.0,
              "adapted": ["q_proj"]}
    (folder / "recipe.json").write_text(json.dumps(recipe))
    save_file(tensors, str(folder / "delta.safetensors"))
    return load_checkpoint(folder, device="cpu", dtype=torch.float32).model.eval()


def test_a_delta_saved_under_the_former_names_loads_equal(tmp_path):
    base = tiny_model("rope", n_layers=2, d_model=16, n_heads=2, context=64, seed=1)
    base_dir = save_checkpoint(base, tmp_path / "base")
    shapes = LensModel(dataclasses.replace(base.cfg, layer_mechanisms=["rope", "repo"])).state_dict()
    generator = torch.Generator().manual_seed(0)
    tensors = {name: torch.randn(tensor.shape, generator=generator) for name, tensor in shapes.items()
               if ".attn.mechanism." in name}
    assert len(tensors) == 3  # RePo's gate_map, content_map and final_map in layer 1
    tensors |= {"blocks.1.attn.q_proj.lora_A": torch.randn(1, 16, generator=generator),
                "blocks.1.attn.q_proj.lora_B": torch.randn(16, 1, generator=generator)}
    current = _delta(tmp_path / "current", base_dir, tensors)
    old = _delta(tmp_path / "former", base_dir, {former(name): tensor for name, tensor in tensors.items()})
    assert_same_model(old, current)
    for name, tensor in tensors.items():
        if ".attn.mechanism." in name:
            assert torch.equal(old.state_dict()[name], tensor), name


def _written_at(layer: int, value: float):
    def write(tensor, hook):
        return torch.full_like(tensor, value)
    return f"blocks.{layer}.attn.positions.hook_delta", f"blocks.{layer}.attn.mechanism.hook_delta", write


def test_a_former_hook_name_hooks_the_same_point_and_warns():
    model = tiny_model("lpi-layer").eval()
    old, new, write = _written_at(2, 0.5)
    with torch.no_grad():
        plain = model(IDS)
        written = model.run_with_hooks(IDS, fwd_hooks=[(new, write)])
        with pytest.warns(DeprecationWarning, match=r"'blocks\.2\.attn\.positions\.hook_delta'.*'blocks\.2\.attn\.mechanism"):
            through_old = model.run_with_hooks(IDS, fwd_hooks=[(old, write)])
        assert not torch.equal(written, plain) and torch.equal(through_old, written)
        with pytest.warns(DeprecationWarning), model.hooks(fwd_hooks=[(old, write)]):
            assert torch.equal(model(IDS), written)
        with pytest.warns(DeprecationWarning):
            model.add_hook(old, write)
        try:
            assert torch.equal(model(IDS), written)
        finally:
            model.reset_hooks()
        assert torch.equal(model(IDS), plain)  # nothing left attached
    with pytest.warns(DeprecationWarning):
        assert model.hook_dict[old] is model.hook_dict[new] and model.mod_dict[old] is model.hook_dict[new]


@pytest.mark.parametrize("names_filter", ["blocks.2.attn.positions.hook_delta", ["blocks.2.attn.positions.hook_delta"],
                                          lambda name: name == "blocks.2.attn.positions.hook_delta"])
def test_run_with_cache_takes_a_former_hook_name(names_filter):
    model = tiny_model("lpi-layer").eval()
    with torch.no_grad():
        _, expected = model.run_with_cache(IDS, names_filter="blocks.2.attn.mechanism.hook_delta")
        with pytest.warns(DeprecationWarning, match="attn.positions.hook_delta"):
            _, cache = model.run_with_cache(IDS, names_filter=names_filter)
    assert list(cache.keys()) == ["blocks.2.attn.mechanism.hook_delta"]
    assert torch.equal(cache["blocks.2.attn.mechanism.hook_delta"], expected["blocks.2.attn.mechanism.hook_delta"])
    with pytest.warns(DeprecationWarning):
        assert torch.equal(cache["blocks.2.attn.positions.hook_delta"], expected["blocks.2.attn.mechanism.hook_delta"])


def test_a_filter_of_current_names_warns_about_nothing(recwarn):
    model = tiny_model("lpi-layer").eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(IDS, names_filter=lambda name: name.endswith("mechanism.hook_delta"))
    assert sorted(cache.keys()) == ["blocks.2.attn.mechanism.hook_delta", "blocks.3.attn.mechanism.hook_delta"]
    assert not [warning for warning in recwarn if warning.category is DeprecationWarning]


def test_the_former_attributes_are_the_new_objects_and_warn():
    model = tiny_model("lpi")
    with pytest.warns(DeprecationWarning, match="attn.mechanism"):
        assert model.blocks[2].attn.positions is model.blocks[2].attn.mechanism
    with pytest.warns(DeprecationWarning, match="shared_delta"):
        assert model.increments is model.shared_delta
    assert not hasattr(tiny_model("repo"), "increments")  # no shared increments: neither name exists
    assert "increments" not in dict(model.named_children()) and "positions" not in dict(model.blocks[2].attn.named_children())


def test_d_position_is_one_name_and_repo_dim_its_former_one():
    shape = dict(family="olmo2", vocab_size=64, d_model=64, n_layers=2, n_heads=4, d_mlp=64,
                 layer_mechanisms=["rope", "repo"])
    assert ModelConfig(**shape).d_position == 8  # d_model // 8 when not given
    assert ModelConfig.from_dict({**shape, "repo_dim": 4}) == ModelConfig(**shape, d_position=4)
    assert ModelConfig.from_dict({**shape, "repo_dim": None}).d_position == 8
    with pytest.warns(DeprecationWarning, match=r"d_position"):
        old = ModelConfig(**shape, repo_dim=4)
    assert old == ModelConfig(**shape, d_position=4) and "repo_dim" not in old.to_dict()
    with pytest.warns(DeprecationWarning, match=r"ModelConfig\.d_position"):
        assert old.repo_dim == 4
    with pytest.raises(CheckpointError, match=r"d_position=4 and also its former name repo_dim=6"):
        ModelConfig.from_dict({**shape, "d_position": 4, "repo_dim": 6})
    assert LensModel(old).blocks[1].attn.mechanism.gate_map.weight.shape == (4, 64)


def test_a_trace_recorded_with_repo_dim_reads_it_as_d_position(tmp_path):
    trace = repo_lens.Lens(tiny_model("repo"), ByteTokenizer()).trace("hi", progress=False)
    assert trace.meta["mechanism"]["d_position"] == 8
    settings = {("repo_dim" if key == "d_position" else key): value for key, value in trace.meta["mechanism"].items()}
    old = dataclasses.replace(trace, meta={**trace.meta, "mechanism": settings})
    loaded = Trace.load(old.save(tmp_path / "old.safetensors"))
    assert loaded.meta["mechanism"] == trace.meta["mechanism"]


def test_the_former_module_of_resumable_runs_warns_and_gives_the_same_functions():
    from repo_lens.studies import resumable

    sys.modules.pop("repo_lens.studies.runs", None)
    with pytest.warns(DeprecationWarning, match="repo_lens.studies.resumable"):
        runs = importlib.import_module("repo_lens.studies.runs")
    assert (runs.run_items, runs.write_summary, runs.claim_run, runs.Item) == (
        resumable.run_items, resumable.write_summary, resumable.claim_run, resumable.Item)
