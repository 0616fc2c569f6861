"""Every bad input of DESIGN's list that the core touches gets a clear error and loses nothing."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

import repo_lens


@pytest.fixture(scope="module")
def lens(repo_dir):
    return repo_lens.load(repo_dir, device="cpu")


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text(lens, text):
    with pytest.raises(repo_lens.InputError, match="text is empty"):
        lens.trace(text)


def test_empty_ids(lens):
    with pytest.raises(repo_lens.InputError, match="non-empty 1-D sequence of token ids"):
        lens.trace([])


def test_ids_outside_the_vocabulary(lens):
    with pytest.raises(repo_lens.InputError, match=r"0\.\.63"):
        lens.trace([1, 2, 64])


def test_too_long_text_errors_unless_truncation_is_asked(lens):
    text = " ".join(["the cat sat on the mat ."] * 30)  # BOS + 210 words > context 128
    with pytest.raises(repo_lens.InputError, match="longer than the model's context of 128.*truncate=True"):
        lens.trace(text)
    trace = lens.trace(text, truncate=True)
    assert len(trace) == 128
    assert trace.meta["truncation"] == {"original_tokens": 211, "kept_tokens": 128}


def test_unknown_layer_or_head(lens):
    trace = lens.trace("hello world")
    with pytest.raises(repo_lens.InputError, match="layer 9 does not exist; this trace has layers 0..3"):
        trace.head(9, 0)
    with pytest.raises(repo_lens.InputError, match="head 4 does not exist; this trace has heads 0..3"):
        trace.head(0, 4)


def test_not_a_checkpoint_directory(tmp_path):
    with pytest.raises(repo_lens.CheckpointError, match="not a checkpoint directory: it has no config.json"):
        repo_lens.load(tmp_path, device="cpu")
    with pytest.raises(repo_lens.CheckpointError, match="does not exist"):
        repo_lens.load(tmp_path / "missing", device="cpu")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(repo_lens.CheckpointError, match="is a file, not a checkpoint directory"):
        repo_lens.load(tmp_path / "file.txt", device="cpu")


def test_pickle_weights_are_refused(olmo2_dir, tmp_path):
    directory = tmp_path / "pickled"
    shutil.copytree(olmo2_dir, directory)
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")
    with pytest.raises(repo_lens.CheckpointError, match="pickle-based weights are never loaded"):
        repo_lens.load(directory, device="cpu")


def test_unsupported_architecture_and_broken_config(olmo2_dir, tmp_path):
    directory = tmp_path / "gpt2"
    shutil.copytree(olmo2_dir, directory)
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(repo_lens.CheckpointError, match="model_type 'gpt2' has no repo_lens adapter; supported: olmo2, llama"):
        repo_lens.load(directory, device="cpu")
    (directory / "config.json").write_text("{not json")
    with pytest.raises(repo_lens.CheckpointError, match="not valid JSON"):
        repo_lens.load(directory, device="cpu")


def test_corrupt_trace_files(lens, tmp_path):
    good = lens.trace("hello world").save(tmp_path / "good.safetensors")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\x01 definitely not a trace")
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-7])
    foreign = tmp_path / "foreign.safetensors"
    save_file({"weight": np.zeros(3, dtype=np.float32)}, str(foreign))
    for path, message in [(garbage, "not a readable repo_lens trace"), (truncated, "not a readable repo_lens trace"),
                          (foreign, "not a repo_lens trace"), (tmp_path / "absent", "no trace file")]:
        with pytest.raises(repo_lens.TraceFileError, match=message):
            repo_lens.Trace.load(path)
    assert repo_lens.Trace.load(good).tokens  # the good file is untouched


def test_nonfinite_positions_are_flagged(repo_dir):
    lens = repo_lens.load(repo_dir, device="cpu")
    with torch.no_grad():
        lens.model.blocks[3].attn.mechanism.final_map.weight[1].fill_(float("nan"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = lens.trace("hello world")
    assert trace.meta["nonfinite_positions"] == [[3, 1]]
    assert "NaN or infinite" in trace.meta["warnings"][0]
    assert any("NaN or infinite" in str(w.message) for w in caught)


def test_cli_reports_errors_without_traceback(tmp_path, capsys):
    from repo_lens.cli import main

    assert main(["trace", "--model", str(tmp_path), "--text", "hi"]) == 2
    assert "repo-lens: error:" in capsys.readouterr().err
