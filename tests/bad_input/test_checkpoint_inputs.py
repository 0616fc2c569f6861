"""Issue 13, the checkpoint boundary and the app's roots: one case per bad input. Each case corrupts a
copy of a valid tiny checkpoint (repo_lens' own format, the HF OLMo-2 layout, the published RePo
layout, a sharded copy, or a GGUF) and names the error type and a piece of its message. Every case
must answer within seconds (a FIFO or a device never hangs a load).

Ids by class: ``checkpoint-...`` (``repo_lens.load``), ``app-roots-...`` (repo_lens/app/config.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import repo_lens
from repo_lens import CheckpointError, InputError
from conftest import within
from repo_lens.app import config as app_config

MIB = 1024 * 1024
INDEX = "model.safetensors.index.json"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


# --- building blocks -------------------------------------------------------------------------------------

def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_config(change: Callable[[dict], object]) -> Callable[[Path, Path], None]:
    return lambda ckpt, outside: edit_json(ckpt / "config.json", change)


def edit_model_section(change: Callable[[dict], object]) -> Callable[[Path, Path], None]:
    return edit_config(lambda config: change(config["model"]))


def edit_index(change: Callable[[dict], object]) -> Callable[[Path, Path], None]:
    return lambda ckpt, outside: edit_json(ckpt / INDEX, lambda index: change(index["weight_map"]))


def set_field(key: str, value: object) -> Callable[[dict], object]:
    return lambda data: data.__setitem__(key, value)


def drop_field(key: str) -> Callable[[dict], object]:
    return lambda data: data.pop(key)


def make_fifo(name: str) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        (ckpt / name).unlink(missing_ok=True)
        os.mkfifo(ckpt / name)
    return corrupt


def link_to(name: str, target: str | Callable[[Path, Path], Path]) -> Callable[[Path, Path], None]:
    """Replace ``name`` by a symlink to ``target`` (a path, or a function of (ckpt, outside))."""
    def corrupt(ckpt: Path, outside: Path) -> None:
        if (ckpt / name).is_dir() and not (ckpt / name).is_symlink():
            shutil.rmtree(ckpt / name)
        else:
            (ckpt / name).unlink(missing_ok=True)
        (ckpt / name).symlink_to(target(ckpt, outside) if callable(target) else target)
    return corrupt


def link_out(name: str) -> Callable[[Path, Path], None]:
    """Replace ``name`` by a symlink to the same file of the checkpoint copy outside."""
    return link_to(name, lambda ckpt, outside: outside / name)


def replace_by_directory(name: str) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        (ckpt / name).unlink()
        (ckpt / name).mkdir()
    return corrupt


def write_bytes(name: str, data: bytes) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        (ckpt / name).write_bytes(data)
    return corrupt


def truncate(name: str, keep: int) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        (ckpt / name).write_bytes((ckpt / name).read_bytes()[:keep])
    return corrupt


def sparse_file(name: str, size: int) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        with open(ckpt / name, "wb") as file:
            file.truncate(size)  # sparse: no disk space used
    return corrupt


def edit_tensors(file: str, change: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path, Path], None]:
    def corrupt(ckpt: Path, outside: Path) -> None:
        tensors = load_file(str(ckpt / file))
        change(tensors)
        save_file(tensors, str(ckpt / file), metadata={"format": "pt"})
    return corrupt


def retype(name_part: str, dtype: torch.dtype) -> Callable[[dict[str, torch.Tensor]], None]:
    def change(tensors: dict[str, torch.Tensor]) -> None:
        name = next(name for name in sorted(tensors) if name_part in name)
        tensors[name] = (tensors[name] > 0).to(dtype)
    return change


def shard(directory: Path) -> None:
    """Split model.safetensors into two shards and the index transformers writes for them."""
    tensors = load_file(str(directory / "model.safetensors"))
    names = sorted(tensors)
    halves = (names[: len(names) // 2], names[len(names) // 2:])
    weight_map = {}
    for file, part in zip(SHARDS, halves):
        save_file({name: tensors[name] for name in part}, str(directory / file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    (directory / "model.safetensors").unlink()
    (directory / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def first_tensor_of(ckpt: Path, file: str) -> str:
    return sorted(load_file(str(ckpt / file)))[0]


def copy_tensor_into_other_shard(ckpt: Path, outside: Path) -> None:
    name = first_tensor_of(ckpt, SHARDS[0])
    copy = load_file(str(ckpt / SHARDS[0]))[name]
    edit_tensors(SHARDS[1], lambda tensors: tensors.__setitem__(name, copy))(ckpt, outside)


def list_tensor_in_wrong_shard(ckpt: Path, outside: Path) -> None:
    name = first_tensor_of(ckpt, SHARDS[0])
    edit_index(set_field(name, SHARDS[1]))(ckpt, outside)


def add_unlisted_tensor(ckpt: Path, outside: Path) -> None:
    edit_tensors(SHARDS[1], lambda tensors: tensors.__setitem__("model.extra.weight", torch.zeros(2)))(ckpt, outside)


def point_shard_at_outside_copy(shard_name: str) -> Callable[[Path, Path], None]:
    """The index names the outside copy of ``shard_name`` by its absolute path."""
    def corrupt(ckpt: Path, outside: Path) -> None:
        edit_index(lambda m: m.update({k: str(outside / v) for k, v in m.items() if v == shard_name}))(ckpt, outside)
    return corrupt


def duplicate_index_key(ckpt: Path, outside: Path) -> None:
    index = json.loads((ckpt / INDEX).read_text())
    name, file = next(iter(index["weight_map"].items()))
    text = json.dumps(index)
    other = SHARDS[1] if file == SHARDS[0] else SHARDS[0]
    (ckpt / INDEX).write_text(text.replace('"weight_map": {', f'"weight_map": {{"{name}": "{other}", ', 1))


def gguf_header(version: int = 3, n_tensors: int = 5, n_kv: int = 3, tail: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + tail


def gguf_file(data: bytes) -> Callable[[Path, Path], Path]:
    def corrupt(ckpt: Path, outside: Path) -> Path:
        (ckpt / "model.gguf").write_bytes(data)
        return ckpt / "model.gguf"
    return corrupt


def gguf_fifo(ckpt: Path, outside: Path) -> Path:
    os.mkfifo(ckpt / "model.gguf")
    return ckpt / "model.gguf"


# --- the cases --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    base: str  # "native", "olmo2", "repo", "sharded" or "empty" (a directory for a GGUF)
    corrupt: Callable[[Path, Path], Path | None]  # (checkpoint copy, a copy outside) -> the path to load, or None
    message: str  # a piece of the error message
    error: type[Exception] = CheckpointError


CHECKPOINT_CASES = {
    # config.json: what it is, its size, its JSON
    "checkpoint-config-dev-zero": Case("olmo2", link_to("config.json", "/dev/zero"), "is a character device, not a regular file"),
    "checkpoint-config-fifo": Case("native", make_fifo("config.json"), "is a FIFO (named pipe), not a regular file"),
    "checkpoint-config-directory": Case("olmo2", replace_by_directory("config.json"), "is a directory, not a regular file"),
    "checkpoint-config-oversized": Case("olmo2", sparse_file("config.json", 17 * MIB),
                                        "17,825,792 bytes, over the 16,777,216-byte limit"),
    "checkpoint-config-deeply-nested": Case("olmo2", write_bytes("config.json", b"[" * 200_000), "RecursionError"),
    "checkpoint-config-invalid-utf8": Case("native", write_bytes("config.json", b'{"a": "\xff"}'), "not valid JSON"),
    "checkpoint-config-not-an-object": Case("olmo2", write_bytes("config.json", b"[1, 2]"),
                                            "must hold a JSON object, found list"),
    # HF config fields (OLMo-2 and the RePo layout)
    "checkpoint-config-hf-negative-hidden-size": Case("olmo2", edit_config(set_field("hidden_size", -64)),
                                                      "hidden_size=-64 is invalid; expected a positive integer"),
    "checkpoint-config-hf-missing-intermediate-size": Case("olmo2", edit_config(drop_field("intermediate_size")),
                                                           "lacks the field 'intermediate_size'"),
    "checkpoint-config-hf-size-as-string": Case("olmo2", edit_config(set_field("vocab_size", "64")),
                                                "vocab_size='64' is invalid; expected a positive integer"),
    "checkpoint-config-hf-size-as-bool": Case("olmo2", edit_config(set_field("num_hidden_layers", True)),
                                              "num_hidden_layers=True is invalid"),
    "checkpoint-config-hf-size-as-float": Case("olmo2", edit_config(set_field("hidden_size", 64.5)),
                                               "hidden_size=64.5 is invalid"),
    "checkpoint-config-hf-heads-do-not-divide-width": Case("olmo2", edit_config(set_field("num_attention_heads", 3)),
                                                           "hidden_size=64 is not divisible by num_attention_heads=3"),
    "checkpoint-config-hf-kv-heads-zero": Case("olmo2", edit_config(set_field("num_key_value_heads", 0)),
                                               "num_key_value_heads=0 is invalid"),
    "checkpoint-config-hf-kv-heads-do-not-divide": Case("olmo2", edit_config(set_field("num_key_value_heads", 3)),
                                                        "num_key_value_heads=3 does not divide num_attention_heads=4"),
    "checkpoint-config-hf-rope-theta-string": Case("olmo2", edit_config(set_field("rope_theta", "10000")),
                                                   "rope_theta='10000' is invalid; expected a finite positive number"),
    "checkpoint-config-hf-rope-theta-nan": Case("olmo2", edit_config(set_field("rope_theta", float("nan"))),
                                                "rope_theta=nan is invalid"),
    "checkpoint-config-hf-rope-scaling-list": Case("olmo2", edit_config(set_field("rope_scaling", [2.0])),
                                                   "rope_scaling=[2.0] is invalid; expected a JSON object or null"),
    "checkpoint-config-hf-rope-factor-string": Case(
        "olmo2", edit_config(set_field("rope_scaling", {"rope_type": "linear", "factor": "2"})), "factor='2' is invalid"),
    "checkpoint-config-hf-rope-factor-missing": Case(
        "olmo2", edit_config(set_field("rope_scaling", {"rope_type": "dynamic"})), "lacks 'factor'"),
    "checkpoint-config-hf-eps-negative": Case("olmo2", edit_config(set_field("rms_norm_eps", -1e-6)),
                                              "rms_norm_eps=-1e-06 is invalid"),
    "checkpoint-config-hf-tie-embeddings-string": Case("olmo2", edit_config(set_field("tie_word_embeddings", "no")),
                                                       "tie_word_embeddings='no' is invalid; expected true or false"),
    "checkpoint-config-repo-pe-config-string": Case("repo", edit_config(set_field("pe_config", "swigluex_multihead")),
                                                    "pe_config='swigluex_multihead' is invalid; expected a JSON object"),
    "checkpoint-config-repo-pe-config-list": Case("repo", edit_config(set_field("pe_config", [5])),
                                                  "pe_config=[5] is invalid"),
    # repo_lens' own config
    "checkpoint-config-native-negative-d-model": Case("native", edit_model_section(set_field("d_model", -64)),
                                                      "d_model=-64 is invalid; expected a positive integer"),
    "checkpoint-config-native-missing-d-mlp": Case("native", edit_model_section(drop_field("d_mlp")),
                                                   "lacks the field 'd_mlp'"),
    "checkpoint-config-native-heads-do-not-divide-width": Case(
        "native", edit_model_section(lambda model: model.update(n_heads=3, n_kv_heads=None, head_dim=None)),
        "d_model=64 is not divisible by n_heads=3"),
    "checkpoint-config-native-kv-heads-do-not-divide": Case("native", edit_model_section(set_field("n_kv_heads", 3)),
                                                            "n_kv_heads=3 does not divide n_heads=4"),
    "checkpoint-config-native-mechanisms-string": Case("native", edit_model_section(set_field("layer_mechanisms", "x")),
                                                       "layer_mechanisms='x' is invalid; expected a list of strings"),
    "checkpoint-config-native-mechanism-count": Case(
        "native", edit_model_section(lambda model: model["layer_mechanisms"].pop()),
        "layer_mechanisms has 3 entries for n_layers=4"),
    "checkpoint-config-native-rope-scaling-string": Case("native", edit_model_section(set_field("rope_scaling", "yarn")),
                                                         "rope_scaling='yarn' is invalid"),
    "checkpoint-config-native-model-list": Case("native", edit_config(set_field("model", [])),
                                                "is list; expected a JSON object of ModelConfig fields"),
    "checkpoint-config-native-format-bool": Case("native", edit_config(set_field("repo_lens_format", True)),
                                                 "checkpoint format True"),
    "checkpoint-config-native-format-zero": Case("native", edit_config(set_field("repo_lens_format", 0)),
                                                 "checkpoint format 0"),
    "checkpoint-config-native-tokenizer-unknown": Case("native", edit_config(set_field("tokenizer", "gpt2")),
                                                       "tokenizer='gpt2' is invalid; expected one of bytes, hf"),
    "checkpoint-config-native-info-string": Case("native", edit_config(set_field("info", "tiny")),
                                                 "info='tiny' is invalid; expected a JSON object"),
    # model.safetensors
    "checkpoint-weights-fifo": Case("olmo2", make_fifo("model.safetensors"), "is a FIFO (named pipe), not a regular file"),
    "checkpoint-weights-dev-zero": Case("native", link_to("model.safetensors", "/dev/zero"), "is a character device"),
    "checkpoint-weights-directory": Case("olmo2", replace_by_directory("model.safetensors"), "is a directory"),
    "checkpoint-weights-truncated": Case("olmo2", truncate("model.safetensors", 5000), "is not a readable safetensors file"),
    "checkpoint-weights-hf-int-tensor": Case("olmo2", edit_tensors("model.safetensors", retype("mlp.up_proj", torch.int64)),
                                             "non-floating tensors where weights must be floats"),
    "checkpoint-weights-repo-int-position-map": Case(
        "repo", edit_tensors("model.safetensors", retype("gate_map", torch.int32)), "gate_map.weight: int32"),
    "checkpoint-weights-native-bool-tensor": Case(
        "native", edit_tensors("model.safetensors", retype("embed", torch.bool)), "embed.weight: bool"),
    # the shard index and the shards
    "checkpoint-index-weight-map-list": Case("sharded", lambda ckpt, outside: edit_json(
        ckpt / INDEX, lambda index: index.__setitem__("weight_map", list(index["weight_map"].values()))),
        "weight_map is a list; expected a JSON object"),
    "checkpoint-index-no-weight-map": Case("sharded", write_bytes(INDEX, b'{"metadata": {}}'), "weight_map is missing"),
    "checkpoint-index-empty-weight-map": Case("sharded", write_bytes(INDEX, b'{"weight_map": {}}'), "weight_map is empty"),
    "checkpoint-index-not-json": Case("sharded", write_bytes(INDEX, b'{"weight_map": '), "not valid JSON"),
    "checkpoint-index-fifo": Case("sharded", make_fifo(INDEX), "is a FIFO (named pipe)"),
    "checkpoint-index-absolute-shard": Case("sharded", point_shard_at_outside_copy(SHARDS[0]),
                                            "which is outside the checkpoint directory"),
    "checkpoint-index-dotdot-shard": Case(
        "sharded", edit_index(lambda m: m.update({k: f"../outside/{v}" for k, v in m.items()})),
        "'../outside/model-0000"),
    "checkpoint-index-shard-symlink-out": Case("sharded", link_out(SHARDS[1]), "a symlink to"),
    "checkpoint-index-shard-name-number": Case("sharded", edit_index(lambda m: m.update({next(iter(m)): 3})),
                                               "names the file 3; expected a non-empty file name"),
    "checkpoint-index-shard-missing": Case("sharded", lambda ckpt, outside: (ckpt / SHARDS[1]).unlink(), "does not exist"),
    "checkpoint-index-shard-fifo": Case("sharded", make_fifo(SHARDS[1]), "is a FIFO (named pipe)"),
    "checkpoint-index-tensor-listed-twice": Case("sharded", duplicate_index_key, "twice"),
    "checkpoint-index-tensor-in-two-shards": Case("sharded", copy_tensor_into_other_shard, "is in two weight files"),
    "checkpoint-index-tensor-in-wrong-shard": Case("sharded", list_tensor_in_wrong_shard,
                                                   "in shards that do not hold them"),
    "checkpoint-index-unlisted-tensor": Case("sharded", add_unlisted_tensor, "does not list"),
    # tokenizer files
    "checkpoint-tokenizer-fifo": Case("olmo2", make_fifo("tokenizer.json"), "tokenizer file) is a FIFO"),
    "checkpoint-tokenizer-config-dev-zero": Case("repo", link_to("tokenizer_config.json", "/dev/zero"),
                                                 "is a character device"),
    "checkpoint-tokenizer-versioned-file-outside": Case(
        "olmo2", lambda ckpt, outside: edit_json(ckpt / "tokenizer_config.json",
                                                 set_field("fast_tokenizer_files", ["tokenizer.9/../../x.json"])),
        "outside the checkpoint directory"),
    # GGUF files
    "checkpoint-gguf-truncated-header": Case("empty", gguf_file(b"GGUF\x03\x00"), "truncated, corrupt"),
    "checkpoint-gguf-header-without-metadata": Case("empty", gguf_file(gguf_header()), "truncated, corrupt"),
    "checkpoint-gguf-truncated-metadata": Case(
        "empty", gguf_file(gguf_header(tail=struct.pack("<Q", 40) + b"general.")), "truncated, corrupt"),
    "checkpoint-gguf-fifo": Case("empty", gguf_fifo, "is a FIFO (named pipe)"),
    "checkpoint-gguf-not-gguf": Case("empty", gguf_file(b"PK\x03\x04 a zip file"), "does not start with the 'GGUF'"),
}


@dataclass(frozen=True)
class AppCase:
    base: str
    corrupt: Callable[[Path, Path], None]  # (checkpoint copy under the root, a checkpoint copy outside it)
    message: str
    path: str = "{ckpt}"  # the path the user picks; {ckpt}, {root}, {outside}
    corrupts: bool = True  # False: the checkpoint under the root stays valid (the path itself is bad)


APP_CASES = {
    "app-roots-config-symlink-out": AppCase("native", link_out("config.json"), "config.json resolves to"),
    "app-roots-weights-symlink-out": AppCase("native", link_out("model.safetensors"), "model.safetensors resolves to"),
    "app-roots-index-symlink-out": AppCase("sharded", link_out(INDEX), "index.json resolves to"),
    "app-roots-shard-symlink-out": AppCase("sharded", link_out(SHARDS[0]), "00002.safetensors resolves to"),
    "app-roots-index-absolute-shard": AppCase("sharded", point_shard_at_outside_copy(SHARDS[1]),
                                              "outside the checkpoint directory"),
    "app-roots-index-dotdot-shard": AppCase(
        "sharded", edit_index(lambda m: m.update({k: f"../../outside/{v}" for k, v in m.items()})),
        "outside the checkpoint directory"),
    "app-roots-tokenizer-symlink-out": AppCase("olmo2", link_out("tokenizer.json"), "tokenizer.json resolves to"),
    "app-roots-tokenizer-config-symlink-out": AppCase("repo", link_out("tokenizer_config.json"),
                                                      "tokenizer_config.json resolves to"),
    "app-roots-chat-template-symlink-out": AppCase(
        "olmo2", link_to("chat_template.jinja", lambda ckpt, outside: outside / "config.json"),
        "chat_template.jinja resolves to"),
    "app-roots-unlisted-file-symlink-out": AppCase(
        "native", link_to("merges.bpe", lambda ckpt, outside: outside / "config.json"), "merges.bpe resolves to"),
    "app-roots-config-fifo": AppCase("native", make_fifo("config.json"), "is a FIFO (named pipe)"),
    "app-roots-config-dev-zero": AppCase("native", link_to("config.json", "/dev/zero"),
                                         "config.json resolves to /dev/zero, outside the directories"),
    "app-roots-weights-fifo": AppCase("native", make_fifo("model.safetensors"), "is a FIFO (named pipe)"),
    "app-roots-directory-symlink-out": AppCase("native", lambda ckpt, outside: None, "outside the directories",
                                               path="{root}/link", corrupts=False),
    "app-roots-dotdot-path": AppCase("native", lambda ckpt, outside: None, "outside the directories",
                                     path="{root}/../outside", corrupts=False),
    "app-roots-relative-path": AppCase("native", lambda ckpt, outside: None, "is a relative path", path="ckpt",
                                       corrupts=False),
}


# --- fixtures ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bases(olmo2_dir, repo_dir, byte_model_dir, tmp_path_factory) -> dict[str, Path]:
    sharded = tmp_path_factory.mktemp("sharded") / "ckpt"
    shutil.copytree(olmo2_dir, sharded)
    shard(sharded)
    empty = tmp_path_factory.mktemp("empty")
    return {"olmo2": olmo2_dir, "repo": repo_dir, "native": byte_model_dir, "sharded": sharded, "empty": empty}


def copies(base: Path, tmp_path: Path, parent: str = "") -> tuple[Path, Path]:
    """(a copy of ``base`` at tmp/{parent}/ckpt, another at tmp/outside)."""
    ckpt, outside = tmp_path / parent / "ckpt", tmp_path / "outside"
    shutil.copytree(base, ckpt)
    shutil.copytree(base, outside)
    return ckpt, outside


# --- tests ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["native", "olmo2", "repo", "sharded"])
def test_every_base_loads_before_it_is_corrupted(bases, name, tmp_path):
    ckpt, _ = copies(bases[name], tmp_path)
    lens = repo_lens.load(ckpt, device="cpu")
    assert lens.model.cfg.n_layers == 4


@pytest.mark.parametrize("case", CHECKPOINT_CASES.values(), ids=CHECKPOINT_CASES.keys())
def test_bad_checkpoint_is_refused(case, bases, tmp_path):
    ckpt, outside = copies(bases[case.base], tmp_path)
    target = case.corrupt(ckpt, outside) or ckpt
    with within(30), pytest.raises(case.error) as caught:
        repo_lens.load(target, device="cpu")
    assert case.message in str(caught.value)


@pytest.mark.parametrize("case", APP_CASES.values(), ids=APP_CASES.keys())
def test_app_reads_nothing_outside_its_roots(case, bases, tmp_path, monkeypatch):
    ckpt, outside = copies(bases[case.base], tmp_path, parent="root")
    root = ckpt.parent
    (root / "link").symlink_to(outside, target_is_directory=True)
    case.corrupt(ckpt, outside)
    path = case.path.format(ckpt=ckpt, root=root, outside=outside)
    roots = [root.resolve()]
    with within(30):
        with pytest.raises(InputError) as caught:
            app_config.resolve_checkpoint(path, roots)
        assert case.message in str(caught.value)
        monkeypatch.setenv(app_config.ROOTS_ENV, str(root))
        with pytest.raises(InputError, match=re.escape(case.message)):
            app_config.loadable(path)  # the check right before the app loads
        assert app_config.discover_checkpoints(roots) == ([] if case.corrupts else [str(ckpt)])


def test_app_accepts_links_that_stay_inside_the_roots(bases, tmp_path, monkeypatch):
    ckpt, _ = copies(bases["olmo2"], tmp_path, parent="root")
    kept = ckpt.parent / "kept"
    kept.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (ckpt / name).rename(kept / name)
        (ckpt / name).symlink_to(kept / name)
    roots = [ckpt.parent.resolve()]
    assert app_config.resolve_checkpoint(str(ckpt), roots) == ckpt.resolve()
    assert str(ckpt) in app_config.discover_checkpoints(roots)
    monkeypatch.setenv(app_config.ROOTS_ENV, str(ckpt.parent))
    assert repo_lens.load(app_config.loadable(str(ckpt)), device="cpu").model.cfg.n_layers == 4


@pytest.mark.parametrize("name", ["native", "olmo2", "repo", "sharded"])
def test_checkpoint_files_lists_every_file_a_load_opens(bases, name, tmp_path):
    """The Python-level opens of a load (audit events) all fall inside checkpoint_files, and the listed
    weights are exactly the safetensors files in the directory."""
    ckpt, _ = copies(bases[name], tmp_path)
    listed = {path.resolve() for path in repo_lens.checkpoint_files(ckpt)}
    opened: set[Path] = set()
    recording = [True]

    def audit(event: str, args: tuple) -> None:
        if recording[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = Path(os.fsdecode(args[0]))
            if path.is_absolute() and path.resolve().is_relative_to(ckpt.resolve()) and path.is_file():
                opened.add(path.resolve())

    sys.addaudithook(audit)
    try:
        repo_lens.load(ckpt, device="cpu")
    finally:
        recording[0] = False
    assert (ckpt / "config.json").resolve() in opened
    assert opened <= listed, f"opened but not listed: {sorted(opened - listed)}"
    weights = {path.resolve() for path in ckpt.glob("*.safetensors")}
    assert weights and weights <= listed


def test_checkpoint_files_of_a_sharded_checkpoint(bases):
    names = [path.name for path in repo_lens.checkpoint_files(bases["sharded"])]
    assert names[:4] == ["config.json", INDEX, *SHARDS]
    assert "tokenizer.json" in names and "tokenizer_config.json" in names

