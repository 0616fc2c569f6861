"""``repo-lens zoo --ship-delta RUN NAME`` meets bad input: a name that is not one plain folder, an existing
entry without --force, a damaged recipe, delta or evaluation summary are refused before anything is written,
and the entry is written whole or not at all. The zoo is redirected to a temporary folder
(``repo_lens.zoo.ZOO_DIR``); the package's own zoo is never written.
"""

from __future__ import annotations

import errno
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
from repo_lens.errors import CheckpointError, InputError, WriteError
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import RepositionConfig, train_repositioned
from repo_lens.train.text_tokens import TextTokens
from repo_lens.zoo.ship_delta import ship_delta

PACKAGE_ZOO = repo_lens.zoo.ZOO_DIR
WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()
OLD_CARD = "# zoo:bytes-repo\n\nthe card of the entry already there\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else b"<dir>"
            for path in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 2-step ``train --base`` run on a tiny byte-level RoPE checkpoint."""
    root = tmp_path_factory.mktemp("ship_delta")
    base_model = tiny_model("rope", n_layers=2, d_model=16, n_heads=2, context=64, seed=1)
    base = save_checkpoint(base_model, root / "base")
    text = TextTokens.from_documents([" ".join(WORDS[i:] + WORDS[:i]) * 3 for i in range(20)],
                                     lambda t: list(t.encode()), 256)
    cfg = RepositionConfig(base=str(base), context=16, batch_size=1, steps=2, eval_sequences=2, autocast=False)
    train_repositioned(cfg, base_model, text, root / "run", progress=False)
    return root / "run"


@pytest.fixture
def run(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy, ignore=shutil.ignore_patterns("train_state"))
    return copy


@pytest.fixture
def zoo(tmp_path, monkeypatch) -> Path:
    """A zoo of one entry (``bytes-repo``, with its card), in place of the package's."""
    folder = tmp_path / "zoo"
    entry = save_checkpoint(tiny_model("rope", n_layers=1, d_model=16, n_heads=2, context=32), folder / "bytes-repo",
                            info={"train_config": {"task": "bytes", "mechanism": "rope"}, "metrics": {"val_bpb": 2.5}})
    (entry / "README.md").write_text(OLD_CARD)
    monkeypatch.setattr(repo_lens.zoo, "ZOO_DIR", folder)
    return folder


@pytest.fixture(autouse=True)
def package_zoo_untouched():
    before = sorted(path.name for path in PACKAGE_ZOO.iterdir())
    yield
    assert sorted(path.name for path in PACKAGE_ZOO.iterdir()) == before


def refused_untouched(zoo: Path, error: type, message: str, call: Callable[[], object]) -> str:
    """Run ``call``; it raises ``error`` matching ``message`` and leaves the zoo and its parent as they were."""
    before, around = snapshot(zoo), sorted(path.name for path in zoo.parent.iterdir())
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value), str(raised.value)
    assert snapshot(zoo) == before
    assert sorted(path.name for path in zoo.parent.iterdir()) == around
    return str(raised.value)


# --- the name -----------------------------------------------------------------------------------------------------

BAD_NAMES = ["../escape", "..", ".", "", "a/b", "a/../b", "/tmp/abs", "./x", "trailing/", "a\\b", ".hidden", "-lead",
             "_lead", "Upper", "na me", "a..b", "nul\x00x", "é", "tab\tx", "x" * 101, "zoo:x"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_is_not_one_plain_folder_is_refused(name, run, zoo):
    refused_untouched(zoo, InputError, "not a plain folder name", lambda: ship_delta(run, name))


@pytest.mark.parametrize("name", [None, 5, b"bytes", ["a"]])
def test_a_name_that_is_not_text_is_refused(name, run, zoo):
    refused_untouched(zoo, InputError, "not a plain folder name", lambda: ship_delta(run, name))


@pytest.mark.parametrize("name", ["../escape", "", "a/b"])
def test_the_command_refuses_a_bad_name_with_exit_2(name, run, zoo, capsys):
    before = snapshot(zoo.parent)
    assert main(["zoo", "--ship-delta", str(run), name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("repo-lens: error: zoo name") and "plain folder name" in err
    assert snapshot(zoo.parent) == before


def test_a_symlinked_entry_that_points_outside_is_refused(run, zoo, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (zoo / "link").symlink_to(tmp_path / "elsewhere")
    refused_untouched(zoo, InputError, "would write outside", lambda: ship_delta(run, "link", force=True))


# --- an existing entry ----------------------------------------------------------------------------------------------

def test_an_existing_entry_is_kept_unless_forced(run, zoo, capsys):
    message = refused_untouched(zoo, InputError, "already exists", lambda: ship_delta(run, "bytes-repo"))
    assert "--force" in message
    assert main(["zoo", "--ship-delta", str(run), "bytes-repo"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert (zoo / "bytes-repo" / "README.md").read_text() == OLD_CARD
    assert main(["zoo", "--ship-delta", str(run), "bytes-repo", "--force"]) == 0
    assert sorted(path.name for path in (zoo / "bytes-repo").iterdir()) == ["README.md", "delta.safetensors.xz",
                                                                           "recipe.json"]
    assert (zoo / "bytes-repo" / "README.md").read_text().startswith("# zoo:bytes-repo\n\n`")
    assert repo_lens.load("zoo:bytes-repo", device="cpu").model.cfg.layer_mechanisms == ["rope", "repo"]
    assert sorted(path.name for path in zoo.iterdir()) == ["bytes-repo"]  # no hidden folder left


def test_a_new_entry_ships_whole_and_loads(run, zoo, tmp_path, capsys):
    evaluation = tmp_path / "summary.json"
    evaluation.write_text(json.dumps({"bits": {"trained": {"source": "zoo:tiny-delta", "bits_per_token": 7.5,
                                                           "tokens": 64}}}))
    assert main(["zoo", "--ship-delta", str(run), "tiny-delta", "--evaluation", str(evaluation)]) == 0
    assert repo_lens.load("zoo:tiny-delta", device="cpu").meta["format"] == "repo_lens-delta"
    assert json.loads((zoo / "tiny-delta" / "recipe.json").read_text())["metrics"] == {"held_out_bits_per_token": 7.5}
    capsys.readouterr()
    assert main(["zoo"]) == 0
    assert "zoo:tiny-delta" in capsys.readouterr().out


@pytest.mark.parametrize("failing", ["README.md", "recipe.json", "delta.safetensors.xz"])
@pytest.mark.parametrize("force", [False, True])
def test_a_failed_write_leaves_no_entry_and_keeps_the_old_one(failing, force, run, zoo, monkeypatch):
    """Whole or not at all: a disk that fills up while the entry is written leaves the zoo as it was."""
    import repo_lens.atomic as atomic

    real = atomic.atomic_write

    def full_disk(path, write):
        if Path(path).name == failing:
            raise atomic.write_error(Path(path), OSError(errno.ENOSPC, "No space left on device"))
        return real(path, write)

    for module in ("repo_lens.atomic", "repo_lens.model.loaders.native.packed"):
        monkeypatch.setattr(f"{module}.atomic_write", full_disk)
    name = "bytes-repo" if force else "new-entry"
    refused_untouched(zoo, WriteError, "No space left", lambda: ship_delta(run, name, force=force))


# --- the run's recipe and delta -------------------------------------------------------------------------------------

def _recipe(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        recipe = json.loads((run / "recipe.json").read_text())
        change(recipe)
        (run / "recipe.json").write_text(json.dumps(recipe))
    return damage


def _set(mapping: dict, key: str, value: object) -> None:
    mapping[key] = value


RECIPE_CASES: dict[str, tuple[Callable[[Path], object], str]] = {
    **{f"lacks-{key}": (_recipe(lambda r, key=key: r.pop(key)), f"lacks {key}")
       for key in ("base", "mechanism", "first_layer", "lora_rank", "lora_alpha", "adapted")},
    **{f"lacks-{key}": (_recipe(lambda r, key=key: r.pop(key)), f"{key} is missing")
       for key in ("steps", "tokens", "wall_seconds", "recipe", "log")},
    **{f"lacks-recipe.{key}": (_recipe(lambda r, key=key: r["recipe"].pop(key)), f"recipe.{key} is missing")
       for key in ("context", "batch_size", "lr", "position_lr", "warmup", "anneal_steps", "seed")},
    "empty": (lambda run: (run / "recipe.json").write_text(""), "cannot be read"),
    "not-json": (lambda run: (run / "recipe.json").write_text("base: x"), "cannot be read"),
    "a-list": (lambda run: (run / "recipe.json").write_text("[]"), "lacks base"),
    "latin1": (lambda run: (run / "recipe.json").write_bytes('{"base": "café"}'.encode("latin-1")), "cannot be read"),
    "steps-text": (_recipe(lambda r: _set(r, "steps", "abc")), "steps is 'abc'"),
    "steps-negative": (_recipe(lambda r: _set(r, "steps", -1)), "steps is -1"),
    "tokens-nan": (_recipe(lambda r: _set(r, "tokens", math.nan)), "tokens is nan"),
    "wall-inf": (_recipe(lambda r: _set(r, "wall_seconds", math.inf)), "wall_seconds is inf"),
    "mechanism-unknown": (_recipe(lambda r: _set(r, "mechanism", "alibi")), "mechanism is 'alibi'"),
    "first-layer-text": (_recipe(lambda r: _set(r, "first_layer", "one")), "first_layer is 'one'"),
    "first-layer-negative": (_recipe(lambda r: _set(r, "first_layer", -1)), "first_layer is -1"),
    "adapters-from-negative": (_recipe(lambda r: _set(r, "adapters_from", -1)), "adapters_from is -1"),
    "adapters-from-text": (_recipe(lambda r: _set(r, "adapters_from", "ten")), "adapters_from is 'ten'"),
    "lora-rank-0": (_recipe(lambda r: _set(r, "lora_rank", 0)), "lora_rank is 0"),
    "lora-alpha-nan": (_recipe(lambda r: _set(r, "lora_alpha", math.nan)), "lora_alpha is nan"),
    "adapted-text": (_recipe(lambda r: _set(r, "adapted", "q_proj")), "adapted is 'q_proj'"),
    "adapted-empty": (_recipe(lambda r: _set(r, "adapted", [])), "adapted is []"),
    "base-empty": (_recipe(lambda r: _set(r, "base", "")), "base is ''"),
    "recipe-list": (_recipe(lambda r: _set(r, "recipe", [])), "recipe is []"),
    "context-0": (_recipe(lambda r: r["recipe"].update(context=0)), "recipe.context is 0"),
    "lr-text": (_recipe(lambda r: r["recipe"].update(lr="fast")), "recipe.lr is 'fast'"),
    "log-empty": (_recipe(lambda r: _set(r, "log", [])), "log is []"),
    "log-text": (_recipe(lambda r: _set(r, "log", "x")), "log is 'x'"),
    "log-entry-number": (_recipe(lambda r: r["log"].__setitem__(0, 3)), "log[0] is 3"),
    "log-nan-bits": (_recipe(lambda r: r["log"][-1].update(held_out_bits=math.nan)), "held_out_bits is nan"),
    "log-text-bits": (_recipe(lambda r: r["log"][0].update(held_out_bits="low")), "held_out_bits is 'low'"),
    "log-no-tokens": (_recipe(lambda r: r["log"][0].pop("tokens")), "expected an object with step and tokens"),
}


@pytest.mark.parametrize("damage, message", RECIPE_CASES.values(), ids=RECIPE_CASES.keys())
def test_a_damaged_recipe_is_refused_before_writing(damage, message, run, zoo):
    damage(run)
    text = refused_untouched(zoo, CheckpointError, message, lambda: ship_delta(run, "new-entry"))
    assert str(run / "recipe.json") in text


def _delta(change: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        tensors = load_file(str(run / "delta.safetensors"))
        change(tensors)
        save_file(tensors, str(run / "delta.safetensors"))
    return damage


def _name(tensors: dict[str, torch.Tensor], suffix: str) -> str:
    return next(name for name in sorted(tensors) if name.endswith(suffix))


def _cut(keep: float) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / "delta.safetensors"
        path.write_bytes(path.read_bytes()[:int(path.stat().st_size * keep)])
    return damage


DELTA_CASES: dict[str, tuple[Callable[[Path], object], str]] = {
    "missing": (lambda run: (run / "delta.safetensors").unlink(), "holds no delta.safetensors"),
    "a-folder": (lambda run: (run / "delta.safetensors").unlink() or (run / "delta.safetensors").mkdir(),
                 "holds no delta.safetensors"),
    "empty": (lambda run: (run / "delta.safetensors").write_bytes(b""), "not a readable safetensors file"),
    "truncated": (_cut(0.5), "not a readable safetensors file"),
    "header-only": (_cut(0.02), "not a readable safetensors file"),
    "random": (lambda run: (run / "delta.safetensors").write_bytes(bytes(range(256)) * 4),
               "not a readable safetensors file"),
    "all-nan": (_delta(lambda t: [tensor.fill_(math.nan) for tensor in t.values()]), "NaN or infinite"),
    "one-inf": (_delta(lambda t: t[_name(t, "lora_A")].view(-1)[3].fill_(-math.inf)), "NaN or infinite"),
    "integer": (_delta(lambda t: _set(t, _name(t, "lora_A"), t[_name(t, "lora_A")].to(torch.int64))),
                "not floating point"),
    "untrained": (_delta(lambda t: [tensor.zero_() for name, tensor in t.items() if name.endswith("lora_B")]),
                  "changes nothing"),
    "no-adapters": (_delta(lambda t: [t.pop(name) for name in list(t) if ".lora_" in name]), "changes nothing"),
    "broadcast-1": (_delta(lambda t: _set(t, _name(t, "lora_A"), torch.ones(1))), "does not load"),
    "transposed": (_delta(lambda t: _set(t, _name(t, "lora_B"), t[_name(t, "lora_B")].T.contiguous())),
                   "does not load"),
    "missing-tensor": (_delta(lambda t: t.pop(_name(t, "gate_map.weight"))), "does not fit its recipe"),
    "surplus-tensor": (_delta(lambda t: _set(t, "blocks.0.attn.extra", torch.ones(2))), "does not fit its recipe"),
    "wrong-position-shape": (_delta(lambda t: _set(t, _name(t, "gate_map.weight"), torch.ones(3, 3))),
                             "does not load"),
}


@pytest.mark.parametrize("damage, message", DELTA_CASES.values(), ids=DELTA_CASES.keys())
def test_a_damaged_delta_is_refused_before_writing(damage, message, run, zoo):
    damage(run)
    error = InputError if message.startswith("holds no") else CheckpointError
    refused_untouched(zoo, error, message, lambda: ship_delta(run, "new-entry"))


def test_a_delta_whose_base_is_gone_is_refused(run, zoo, tmp_path):
    recipe = json.loads((run / "recipe.json").read_text())
    recipe["base"] = str(tmp_path / "no-such-base")
    (run / "recipe.json").write_text(json.dumps(recipe))
    refused_untouched(zoo, CheckpointError, "does not load", lambda: ship_delta(run, "new-entry"))


# --- the evaluation summary -----------------------------------------------------------------------------------------

GOOD_ENTRY = {"source": "zoo:new-entry", "bits_per_token": 7.5, "tokens": 64}
EVALUATION_CASES: dict[str, tuple[object, str]] = {  # the summary's JSON (bytes as is), a piece of the message
    "empty": (b"", "cannot be read as JSON"),
    "not-json": (b"bits: 1", "cannot be read as JSON"),
    "latin1": ('{"bits": "é"}'.encode("latin-1"), "cannot be read as JSON"),
    "a-list": ([], "it holds a list"),
    "null": (None, "it holds a NoneType"),
    "no-bits": ({}, "bits is missing or empty"),
    "bits-empty": ({"bits": {}}, "bits is missing or empty"),
    "bits-list": ({"bits": [GOOD_ENTRY]}, "bits is missing or empty"),
    "entry-number": ({"bits": {"a": 5}}, "bits.a is 5"),
    "no-source": ({"bits": {"a": {**GOOD_ENTRY, "source": None}}}, "bits.a is"),
    "bits-nan": ({"bits": {"a": {**GOOD_ENTRY, "bits_per_token": math.nan}}}, "bits.a is"),
    "bits-negative": ({"bits": {"a": {**GOOD_ENTRY, "bits_per_token": -1}}}, "bits.a is"),
    "bits-text": ({"bits": {"a": {**GOOD_ENTRY, "bits_per_token": "5"}}}, "bits.a is"),
    "tokens-0": ({"bits": {"a": {**GOOD_ENTRY, "tokens": 0}}}, "bits.a is"),
    "other-domain-text": ({"bits": {"a": {**GOOD_ENTRY, "other_domain": "x"}}}, "bits.a.other_domain is x"),
    "other-domain-nan": ({"bits": {"a": {**GOOD_ENTRY, "other_domain": {"bits_per_token": math.nan, "tokens": 5}}}},
                         "bits.a.other_domain is"),
    "retrieval-list": ({"bits": {"a": GOOD_ENTRY}, "retrieval": []}, "retrieval is a list"),
    "retrieval-table-text": ({"bits": {"a": GOOD_ENTRY}, "retrieval": {"niah": "x"}}, "retrieval.niah is a str"),
    "retrieval-no-all": ({"bits": {"a": GOOD_ENTRY}, "retrieval": {"niah": {"a": {}}}}, "retrieval.niah.a.all"),
    "retrieval-nan": ({"bits": {"a": GOOD_ENTRY}, "retrieval": {"niah": {"a": {"all": {
        "value": math.nan, "low": 0, "high": 1, "n": 5}}}}}, "retrieval.niah.a.all"),
    "another-model": ({"bits": {"a": {**GOOD_ENTRY, "source": "zoo:other"}}}, "evaluates no model loaded from "
                                                                               "zoo:new-entry"),
}


@pytest.mark.parametrize("content, message", EVALUATION_CASES.values(), ids=EVALUATION_CASES.keys())
def test_a_bad_evaluation_summary_is_refused_naming_the_file(content, message, run, zoo, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    text = refused_untouched(zoo, InputError, message, lambda: ship_delta(run, "new-entry", summary))
    assert f"--evaluation {summary}" in text


@pytest.mark.parametrize("where", ["missing", "a-folder"])
def test_an_evaluation_summary_that_is_not_a_file_is_refused(where, run, zoo, tmp_path):
    summary = tmp_path / "summary.json"
    if where == "a-folder":
        summary.mkdir()
    refused_untouched(zoo, InputError, f"--evaluation {summary} cannot be read",
                      lambda: ship_delta(run, "new-entry", summary))


# --- flags that go with --ship-delta only ---------------------------------------------------------------------------

FLAG_CASES = {
    "evaluation-alone": (["--evaluation", "{tmp}/summary.json"], "--evaluation goes with --ship-delta"),
    "evaluation-with-json": (["--json", "--evaluation", "x.json"], "--evaluation goes with --ship-delta"),
    "evaluation-with-ship": (["--ship", "{run}", "x", "bytes-small", "--evaluation", "x.json"],
                             "--evaluation goes with --ship-delta"),
    "force-alone": (["--force"], "--force goes with --ship-delta"),
    "force-with-ship": (["--ship", "{run}", "x", "bytes-small", "--force"], "--force goes with --ship-delta"),
    "both-ships": (["--ship", "{run}", "x", "bytes-small", "--ship-delta", "{run}", "y"], "give one of them"),
    "json-with-ship-delta": (["--json", "--ship-delta", "{run}", "y"], "--json lists the zoo"),
}


@pytest.mark.parametrize("argv, message", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_a_flag_that_would_be_ignored_is_refused(argv, message, run, zoo, tmp_path, capsys):
    before = snapshot(zoo.parent)
    assert main(["zoo", *(part.format(tmp=tmp_path, run=run) for part in argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("repo-lens: error: ") and message in err, err
    assert snapshot(zoo.parent) == before
