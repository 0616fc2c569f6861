"""Loading what ``train --base`` changed on a base (``recipe.json`` + ``delta.safetensors``) meets bad input: a
chain of bases that never reaches a model (a delta whose base is itself, deltas naming each other), recipe fields
out of type or range and damaged tensors are a CheckpointError naming the file; one damaged zoo entry never stops
``repo-lens zoo`` from listing the others. The zoo is redirected to a temporary folder (``repo_lens.zoo.ZOO_DIR``).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
import repo_lens.zoo
from repo_lens.cli import main
from repo_lens.errors import CheckpointError
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.loaders.checkpoint import checkpoint_files
from repo_lens.model.loaders.native.delta import MAX_BASE_CHAIN
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import RepositionConfig, train_repositioned
from repo_lens.train.text_tokens import TextTokens
from repo_lens.zoo import resolve_source
from conftest import within

WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("delta_inputs")
    base_model = tiny_model("rope", n_layers=2, d_model=16, n_heads=2, context=64, seed=1)
    base = save_checkpoint(base_model, root / "base")
    text = TextTokens.from_documents([" ".join(WORDS[i:] + WORDS[:i]) * 3 for i in range(20)],
                                     lambda t: list(t.encode()), 256)
    cfg = RepositionConfig(base=str(base), context=16, batch_size=1, steps=2, eval_sequences=2, autocast=False)
    train_repositioned(cfg, base_model, text, root / "run", progress=False)
    return root / "run"


def delta_copy(finished: Path, folder: Path, base: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("recipe.json", "delta.safetensors"):
        shutil.copy(finished / name, folder / name)
    if base is not None:
        set_recipe(folder, lambda recipe: recipe.update(base=base))
    return folder


def set_recipe(folder: Path, change: Callable[[dict], object]) -> None:
    recipe = json.loads((folder / "recipe.json").read_text())
    change(recipe)
    (folder / "recipe.json").write_text(json.dumps(recipe))


LOADERS: dict[str, Callable[[Path], object]] = {
    "repo_lens.load": lambda folder: repo_lens.load(folder, device="cpu"),
    "load_checkpoint": lambda folder: load_checkpoint(folder, device="cpu", resolve_base=resolve_source),
    "checkpoint_files": lambda folder: checkpoint_files(folder, resolve_source),
}


# --- a chain of bases that never reaches a model --------------------------------------------------------------------

def _self(finished: Path, tmp: Path) -> Path:
    return delta_copy(finished, tmp / "a", base=str(tmp / "a"))


def _self_relative_spelling(finished: Path, tmp: Path) -> Path:
    return delta_copy(finished, tmp / "a", base=str(tmp / "a" / ".." / "a" / "."))


def _self_through_a_link(finished: Path, tmp: Path) -> Path:
    (tmp / "link").symlink_to(tmp / "a", target_is_directory=True)
    return delta_copy(finished, tmp / "a", base=str(tmp / "link"))


def _pair(finished: Path, tmp: Path) -> Path:
    delta_copy(finished, tmp / "b", base=str(tmp / "a"))
    return delta_copy(finished, tmp / "a", base=str(tmp / "b"))


def _triangle(finished: Path, tmp: Path) -> Path:
    delta_copy(finished, tmp / "c", base=str(tmp / "a"))
    delta_copy(finished, tmp / "b", base=str(tmp / "c"))
    return delta_copy(finished, tmp / "a", base=str(tmp / "b"))


def _loop_below_a_good_start(finished: Path, tmp: Path) -> Path:
    delta_copy(finished, tmp / "c", base=str(tmp / "b"))
    delta_copy(finished, tmp / "b", base=str(tmp / "c"))
    return delta_copy(finished, tmp / "a", base=str(tmp / "b"))


def _zoo_self(finished: Path, tmp: Path) -> Path:
    return delta_copy(finished, tmp / "zoo" / "me", base="zoo:me")


def _zoo_pair(finished: Path, tmp: Path) -> Path:
    delta_copy(finished, tmp / "zoo" / "other", base="zoo:me")
    return delta_copy(finished, tmp / "zoo" / "me", base="zoo:other")


CYCLES = {"self": _self, "self-spelled-otherwise": _self_relative_spelling, "self-through-a-link": _self_through_a_link,
          "pair": _pair, "triangle": _triangle, "loop-below": _loop_below_a_good_start, "zoo-self": _zoo_self,
          "zoo-pair": _zoo_pair}


@pytest.fixture
def zoo(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "zoo"
    folder.mkdir()
    monkeypatch.setattr(repo_lens.zoo, "ZOO_DIR", folder)
    return folder


@pytest.mark.parametrize("loader", LOADERS.values(), ids=LOADERS.keys())
@pytest.mark.parametrize("make", CYCLES.values(), ids=CYCLES.keys())
def test_a_chain_of_bases_that_comes_back_is_refused_naming_it(make, loader, finished, tmp_path, zoo):
    start = make(finished, tmp_path)
    with within(10), pytest.raises(CheckpointError) as raised:
        loader(start)
    message = str(raised.value)
    assert "leads back to a folder already on the way" in message and " -> " in message, message
    assert "recipe.json" in message


def test_the_command_refuses_a_cycle_with_exit_2(finished, tmp_path, capsys):
    start = _pair(finished, tmp_path)
    assert main(["trace", "--model", str(start), "--text", "hello", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("repo-lens: error: the base of") and "leads back" in err


def test_a_chain_longer_than_the_limit_is_refused(finished, tmp_path):
    links = [delta_copy(finished, tmp_path / f"d{index}", base=str(tmp_path / f"d{index + 1}"))
             for index in range(MAX_BASE_CHAIN + 2)]
    with within(10), pytest.raises(CheckpointError, match=f"longer than {MAX_BASE_CHAIN} deltas"):
        repo_lens.load(links[0], device="cpu")


def test_a_delta_on_a_delta_on_a_model_still_loads(finished, tmp_path):
    """The cycle check refuses loops only: a chain that ends in a model is followed to it."""
    delta_copy(finished, tmp_path / "b")
    top = delta_copy(finished, tmp_path / "a", base=str(tmp_path / "b"))
    assert len(checkpoint_files(top)) == 6  # two deltas' own files, then the base's config and weights
    assert repo_lens.load(top, device="cpu").model.cfg.layer_mechanisms == ["rope", "repo"]


# --- recipe fields and tensors of one delta -------------------------------------------------------------------------

RECIPE_CASES: dict[str, tuple[Callable[[dict], object], str]] = {
    "empty": (lambda r: r.clear(), "lacks base, mechanism"),
    "base-empty": (lambda r: r.update(base=""), "base is ''"),
    "base-number": (lambda r: r.update(base=7), "base is 7"),
    "base-list": (lambda r: r.update(base=["x"]), "base is ['x']"),
    "mechanism-empty": (lambda r: r.update(mechanism=""), "mechanism is ''"),
    "mechanism-number": (lambda r: r.update(mechanism=3), "mechanism is 3"),
    "mechanism-unknown": (lambda r: r.update(mechanism="bogus"), "unknown position mechanism 'bogus'"),
    "first-layer-text": (lambda r: r.update(first_layer="abc"), "first_layer is 'abc'"),
    "first-layer-negative": (lambda r: r.update(first_layer=-1), "first_layer is -1"),
    "first-layer-fraction": (lambda r: r.update(first_layer=1.5), "first_layer is 1.5"),
    "first-layer-bool": (lambda r: r.update(first_layer=True), "first_layer is True"),
    "first-layer-beyond": (lambda r: r.update(first_layer=99), "first_layer is 99, but its base"),
    "adapters-from-text": (lambda r: r.update(adapters_from="1"), "adapters_from is '1'"),
    "adapters-from-negative": (lambda r: r.update(adapters_from=-1), "adapters_from is -1"),
    "adapters-from-bool": (lambda r: r.update(adapters_from=False), "adapters_from is False"),
    "adapters-from-beyond": (lambda r: r.update(adapters_from=99), "adapters_from is 99, but its base"),
    "adapters-from-other": (lambda r: r.update(adapters_from=0), "does not fit its recipe"),
    "lora-rank-0": (lambda r: r.update(lora_rank=0), "lora_rank is 0"),
    "lora-rank-text": (lambda r: r.update(lora_rank="8"), "lora_rank is '8'"),
    "lora-alpha-text": (lambda r: r.update(lora_alpha="x"), "lora_alpha is 'x'"),
    "lora-alpha-nan": (lambda r: r.update(lora_alpha=math.nan), "lora_alpha is nan"),
    "lora-alpha-inf": (lambda r: r.update(lora_alpha=math.inf), "lora_alpha is inf"),
    "adapted-text": (lambda r: r.update(adapted="q_proj"), "adapted is 'q_proj'"),
    "adapted-numbers": (lambda r: r.update(adapted=[1, 2]), "adapted is [1, 2]"),
    "adapted-other": (lambda r: r.update(adapted=["gate_proj"]), "does not fit its recipe"),
}


@pytest.mark.parametrize("change, message", RECIPE_CASES.values(), ids=RECIPE_CASES.keys())
def test_a_recipe_field_out_of_type_or_range_is_refused(change, message, finished, tmp_path):
    folder = delta_copy(finished, tmp_path / "delta")
    set_recipe(folder, change)
    with pytest.raises(CheckpointError) as raised:
        repo_lens.load(folder, device="cpu")
    assert message in str(raised.value), str(raised.value)


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b"null", b'"recipe"', '{"base": "é"}'.encode("latin-1")])
def test_an_unreadable_recipe_is_refused(content, finished, tmp_path):
    folder = delta_copy(finished, tmp_path / "delta")
    (folder / "recipe.json").write_bytes(content)
    with pytest.raises(CheckpointError, match="recipe.json"):
        repo_lens.load(folder, device="cpu")


def _tensors(change: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        tensors = load_file(str(folder / "delta.safetensors"))
        change(tensors)
        save_file(tensors, str(folder / "delta.safetensors"))
    return damage


def _name(tensors: dict[str, torch.Tensor], suffix: str) -> str:
    return next(name for name in sorted(tensors) if name.endswith(suffix))


def _put(tensors: dict[str, torch.Tensor], name: str, tensor: torch.Tensor) -> None:
    tensors[name] = tensor


TENSOR_CASES: dict[str, tuple[Callable[[Path], object], str]] = {
    "empty": (lambda f: (f / "delta.safetensors").write_bytes(b""), "cannot be read"),
    "truncated": (lambda f: (f / "delta.safetensors").write_bytes((f / "delta.safetensors").read_bytes()[:300]),
                  "cannot be read"),
    "random": (lambda f: (f / "delta.safetensors").write_bytes(bytes(range(256)) * 3), "cannot be read"),
    "missing": (lambda f: (f / "delta.safetensors").unlink(), "delta.safetensors"),
    "all-nan": (_tensors(lambda t: [tensor.fill_(math.nan) for tensor in t.values()]), "NaN or infinite"),
    "one-inf": (_tensors(lambda t: t[_name(t, "lora_B")].view(-1)[0].fill_(math.inf)), "NaN or infinite"),
    "integer": (_tensors(lambda t: _put(t, _name(t, "lora_B"), t[_name(t, "lora_B")].to(torch.int32))),
                "not floating point"),
    "lora-broadcast-1": (_tensors(lambda t: _put(t, _name(t, "lora_B"), torch.ones(1))), "do not fit their base"),
    "lora-transposed": (_tensors(lambda t: _put(t, _name(t, "lora_A"), t[_name(t, "lora_A")].T.contiguous())),
                        "do not fit their base"),
    "position-wrong-shape": (_tensors(lambda t: _put(t, _name(t, "final_map.weight"), torch.ones(5, 5))),
                             "does not fit its base"),
    "missing-factor": (_tensors(lambda t: t.pop(_name(t, "lora_A"))), "does not fit its recipe"),
}


@pytest.mark.parametrize("damage, message", TENSOR_CASES.values(), ids=TENSOR_CASES.keys())
def test_a_damaged_delta_file_is_refused(damage, message, finished, tmp_path):
    folder = delta_copy(finished, tmp_path / "delta")
    damage(folder)
    with pytest.raises(CheckpointError) as raised:
        repo_lens.load(folder, device="cpu")
    assert message in str(raised.value), str(raised.value)


# --- the zoo listing -------------------------------------------------------------------------------------------------

def _write(name: str, content: bytes) -> Callable[[Path], Path]:
    def damage(entry: Path) -> Path:
        (entry / name).write_bytes(content)
        return entry / name
    return damage


LISTING_CASES: dict[str, tuple[str, Callable[[Path], Path]]] = {  # entry kind, damage -> the damaged file
    "recipe-empty": ("delta", _write("recipe.json", b"")),
    "recipe-not-json": ("delta", _write("recipe.json", b"{'base': 1}")),
    "recipe-cut": ("delta", _write("recipe.json", b'{"base": "zoo:x", "mech')),
    "recipe-latin1": ("delta", _write("recipe.json", '{"base": "é"}'.encode("latin-1"))),
    "recipe-list": ("delta", _write("recipe.json", b"[]")),
    "recipe-null": ("delta", _write("recipe.json", b"null")),
    "recipe-metrics-list": ("delta", _write("recipe.json", b'{"mechanism": "repo", "metrics": [1]}')),
    "recipe-a-folder": ("delta", lambda entry: (entry / "recipe.json").unlink() or (entry / "recipe.json").mkdir()
                        or entry / "recipe.json"),
    "config-empty": ("model", _write("config.json", b"")),
    "config-not-json": ("model", _write("config.json", b"model: tiny")),
    "config-list": ("model", _write("config.json", b"[1]")),
    "config-info-list": ("model", _write("config.json", b'{"info": []}')),
    "config-train-config-text": ("model", _write("config.json", b'{"info": {"train_config": "x"}}')),
    "config-metrics-number": ("model", _write("config.json", b'{"info": {"metrics": 3}}')),
}


@pytest.mark.parametrize("kind, damage", LISTING_CASES.values(), ids=LISTING_CASES.keys())
def test_the_listing_shows_a_damaged_entry_as_broken_and_lists_the_others(kind, damage, finished, zoo, capsys):
    save_checkpoint(tiny_model("rope", n_layers=1, d_model=16, n_heads=2, context=32), zoo / "good-model",
                    info={"train_config": {"task": "bytes", "mechanism": "rope"}, "metrics": {"val_bpb": 2.5}})
    delta_copy(finished, zoo / "good-delta")
    if kind == "delta":
        entry = delta_copy(finished, zoo / "broken")
    else:
        entry = save_checkpoint(tiny_model("rope", n_layers=1, d_model=16, n_heads=2, context=32), zoo / "broken")
    damaged = damage(entry)
    capsys.readouterr()
    assert main(["zoo"]) == 0
    out = capsys.readouterr().out
    assert "zoo:good-model" in out and "val_bpb 2.500" in out and "zoo:good-delta" in out
    row = next(line for line in out.splitlines() if line.startswith("zoo:broken "))
    assert "broken" in row and "cannot be read" in row and str(damaged) in row, row
    assert main(["zoo", "--json"]) == 0
    entries = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert entries["broken"]["task"] == "broken" and str(damaged) in entries["broken"]["error"]
    assert "error" not in entries["good-model"] and entries["good-model"]["metrics"] == {"val_bpb": 2.5}


def test_a_ship_in_progress_is_not_listed(finished, zoo, capsys):
    delta_copy(finished, zoo / ".half.shipping-1-abcd")
    assert repo_lens.zoo.available_models() == []
    assert main(["zoo"]) == 0
    assert ".half" not in capsys.readouterr().out
