"""Files written atomically get the mode ``open(path, "w")`` gives a new file (0666 minus the umask), also
where the writer replaces the temporary file with its own (safetensors makes its files 0600)."""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

import repo_lens
from repo_lens.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


@contextmanager
def umask(mask: int):
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def plain_file_mode(folder: Path) -> int:
    """The mode of a file made the ordinary way, for comparison."""
    with open(folder / "plain.txt", "w") as handle:
        handle.write("x")
    return mode(folder / "plain.txt")


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_every_kind_of_atomic_write_gets_the_mode_of_a_plain_file(tmp_path, mask, expected):
    with umask(mask):
        assert plain_file_mode(tmp_path) == expected
        written = [
            atomic_write_bytes(tmp_path / "a.bin", b"done"),
            atomic_write_text(tmp_path / "a.txt", "done"),
            atomic_write(tmp_path / "a.safetensors", lambda temp: save_file({"x": np.zeros(3)}, str(temp))),
            atomic_write(tmp_path / "a.pt", lambda temp: torch.save({"x": torch.zeros(3)}, temp)),
        ]
    assert {path.name: mode(path) for path in written} == {path.name: expected for path in written}


def test_safetensors_alone_would_write_0600(tmp_path):
    """The case the fix is for: safetensors' save_file replaces the file it is given with one of mode 0600."""
    with umask(0o022):
        save_file({"x": np.zeros(3)}, str(tmp_path / "direct.safetensors"))
    assert mode(tmp_path / "direct.safetensors") == 0o600


def test_a_saved_trace_a_checkpoint_and_an_overwritten_file_are_0644_under_umask_022(tmp_path):
    lens = repo_lens.Lens(tiny_model("repo"), ByteTokenizer())
    with umask(0o022):
        trace_file = lens.trace("the quick brown fox").save(tmp_path / "run.safetensors")
        save_checkpoint(tiny_model("rope"), tmp_path / "ckpt", info={"name": "tiny"})
        os.chmod(trace_file, 0o600)  # as the earlier code left it: the next save gives the usual mode
        lens.trace("jumps over").save(trace_file)
    assert mode(trace_file) == 0o644
    assert {path.name: mode(path) for path in (tmp_path / "ckpt").iterdir()} == {
        path.name: 0o644 for path in (tmp_path / "ckpt").iterdir()}
    assert not list(tmp_path.rglob("*.tmp"))
