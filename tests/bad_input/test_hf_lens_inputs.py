"""Bad input on the generic Hugging Face path (repo_lens.hf): the entry points that edit a repo_lens model
through its hooks refuse an HFLens (and anything else that is no repo_lens Lens) with one InputError naming
the function, what it needs and the alternative (the interventions run on an HFLens: what they refuse there is
in tests/interventions/test_hf_lens.py); a weight file load_hf cannot read (empty, truncated, corrupt, not a
file) is a CheckpointError naming the file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from repo_lens import interventions
from repo_lens.analysis import attention_mass
from repo_lens.analysis.position_attribution import position_attribution, token_attribution
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.tiny import tiny_model

pytest.importorskip("nnsight")

from repo_lens.hf import load_hf, trace_hf  # noqa: E402  (after the skip: needs nnsight)

METRIC = interventions.logit_difference(1, 2)
IDS = [1, 5, 9, 12, 7, 3]

INTERVENTIONS: list[tuple[str, Callable]] = [
    ("ablate", lambda lens: interventions.ablate(lens, IDS, mode="constant")),
    ("ablated_positions", lambda lens: interventions.ablated_positions(lens, IDS, mode="integer")),
    ("ablation_grid", lambda lens: interventions.ablation_grid(lens, IDS, METRIC, mode="constant",
                                                               options=interventions.GridOptions(progress=False))),
    ("patch", lambda lens: interventions.patch(lens, IDS, IDS[::-1], METRIC,
                                               options=interventions.GridOptions(progress=False))),
    ("attribute", lambda lens: interventions.attribute(lens, IDS, IDS[::-1], METRIC)),
]
HOOKED_ONLY: list[tuple[str, Callable]] = [
    ("position_attribution", lambda lens: position_attribution(lens, IDS, 1)),
    ("token_attribution", lambda lens: token_attribution(lens, IDS, 1, 0, 2)),
]


@pytest.fixture(scope="module")
def hf_lens(llama_dir):
    return load_hf(llama_dir, device="cpu")


@pytest.mark.parametrize("name,call", [pytest.param(*case, id=case[0]) for case in HOOKED_ONLY])
def test_an_hf_lens_is_refused_naming_what_is_needed_and_the_alternative(hf_lens, name, call):
    with pytest.raises(InputError) as caught:
        call(hf_lens)
    message = str(caught.value)
    assert message.startswith(f"{name} needs a model loaded by repo_lens"), message
    assert "got HFLens" in message and "repo_lens.load(path)" in message and "trace_hf" in message, message


NOT_LENSES = [pytest.param(None, id="none"), pytest.param("/models/llama", id="path"), pytest.param(5, id="int"),
              pytest.param(object(), id="object"), pytest.param(tiny_model("repo", n_layers=2), id="bare-model")]


@pytest.mark.parametrize("lens", NOT_LENSES)
@pytest.mark.parametrize("name,call", [pytest.param(*case, id=case[0]) for case in INTERVENTIONS + HOOKED_ONLY])
def test_what_is_no_lens_is_refused_naming_it(lens, name, call):
    with pytest.raises(InputError) as caught:
        call(lens)
    message = str(caught.value)
    assert message.startswith(f"{name} needs a Lens from repo_lens.load"), message
    assert f"got {type(lens).__name__}" in message, message


def test_attention_mass_refuses_an_hf_lens_too(hf_lens):
    with pytest.raises(InputError, match="attention_mass needs a Lens"):
        attention_mass(hf_lens, list(range(10)), {"n": (1, 3)}, (6, 10))


def test_the_hf_lens_still_traces(hf_lens):
    trace = trace_hf(hf_lens, IDS)
    assert trace.positions.shape == (3, 4, len(IDS)) and trace.positions[0, 0].tolist() == list(range(len(IDS)))


# --- weight files load_hf cannot read -----------------------------------------------------------------------

def _header_length(data: bytes) -> int:
    return struct.unpack("<Q", data[:8])[0]


DAMAGE: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("empty", lambda data: b""),
    ("four-bytes", lambda data: data[:4]),
    ("length-only", lambda data: data[:8]),
    ("header-only", lambda data: data[:8 + _header_length(data)]),
    ("half", lambda data: data[:len(data) // 2]),
    ("one-byte-short", lambda data: data[:-1]),
    ("one-byte-of-data", lambda data: data[:8 + _header_length(data) + 1]),
    ("trailing-junk", lambda data: data + b"\0\0"),
    ("random-bytes", lambda data: random.Random(0).randbytes(len(data))),
    ("text", lambda data: b"not safetensors\n" * 64),
    ("header-length-huge", lambda data: struct.pack("<Q", 2**60) + data[8:]),
    ("header-length-past-the-end", lambda data: struct.pack("<Q", len(data)) + data[8:]),
    ("header-not-json", lambda data: data[:8] + b"{" * _header_length(data) + data[8 + _header_length(data):]),
    ("header-json-list", lambda data: data[:8] + b"[]".ljust(_header_length(data)) + data[8 + _header_length(data):]),
]


@pytest.mark.parametrize("damage", [pytest.param(change, id=name) for name, change in DAMAGE])
def test_a_damaged_weight_file_is_a_checkpoint_error_naming_it(llama_dir, tmp_path, damage):
    directory = tmp_path / "llama"
    shutil.copytree(llama_dir, directory)
    weights = directory / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(CheckpointError) as caught:
        load_hf(directory, device="cpu")
    assert str(weights) in str(caught.value) and "safetensors" in str(caught.value)


@pytest.mark.parametrize("replace", [
    pytest.param(lambda path: path.mkdir(), id="a-directory"),
    pytest.param(lambda path: os.mkfifo(path), id="a-fifo"),
    pytest.param(lambda path: path.symlink_to(path.parent / "missing"), id="a-dangling-link"),
])
def test_a_weight_file_that_is_no_file_is_a_checkpoint_error_naming_it(llama_dir, tmp_path, replace):
    directory = tmp_path / "llama"
    shutil.copytree(llama_dir, directory)
    weights = directory / "model.safetensors"
    weights.unlink()
    replace(weights)
    with pytest.raises(CheckpointError) as caught:
        load_hf(directory, device="cpu")
    assert str(weights) in str(caught.value)


def _sharded(llama_dir: Path, directory: Path) -> list[Path]:
    """``llama_dir``'s weights in two shards with their index, as save_pretrained writes a big model."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(llama_dir, directory)
    weights = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    names = sorted(weights)
    shards = [directory / "model-00001-of-00002.safetensors", directory / "model-00002-of-00002.safetensors"]
    halves = [names[:len(names) // 2], names[len(names) // 2:]]
    for shard, half in zip(shards, halves):
        save_file({name: weights[name] for name in half}, str(shard), metadata={"format": "pt"})
    weight_map = {name: shard.name for shard, half in zip(shards, halves) for name in half}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return shards


@pytest.mark.parametrize("which", [0, 1], ids=["first-shard", "second-shard"])
def test_a_truncated_shard_is_named(llama_dir, tmp_path, which):
    shards = _sharded(llama_dir, tmp_path / "sharded")
    assert load_hf(tmp_path / "sharded", device="cpu").n_layers == 3  # intact shards load
    data = shards[which].read_bytes()
    shards[which].write_bytes(data[:len(data) - 7])
    with pytest.raises(CheckpointError) as caught:
        load_hf(tmp_path / "sharded", device="cpu")
    assert str(shards[which]) in str(caught.value)


def test_an_intact_copy_loads_with_the_original_weights(llama_dir, tmp_path):
    directory = tmp_path / "llama"
    shutil.copytree(llama_dir, directory)
    lens = load_hf(directory, device="cpu")
    with torch.no_grad():
        logits = lens.hf_model(torch.tensor([IDS])).logits
    assert logits.shape == (1, len(IDS), 64) and torch.isfinite(logits).all()
