"""repo_lens.atomic is the one way files are written: whole or not at all, old file kept on failure,
no temporary file left behind, the usual file mode; and no module writes files another way."""

from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

import repo_lens
from repo_lens.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from repo_lens.trace import Trace

PACKAGE = Path(repo_lens.__file__).resolve().parent
APP = PACKAGE.parent / "app"


def test_bytes_text_and_callback_forms(tmp_path):
    assert atomic_write_bytes(tmp_path / "a" / "b.bin", b"\x00\x01").read_bytes() == b"\x00\x01"  # parents made
    assert atomic_write_text(tmp_path / "t.txt", "位置 z\n").read_bytes() == "位置 z\n".encode()
    assert atomic_write(tmp_path / "c.txt", lambda temp: temp.write_text("via a path")).read_text() == "via a path"
    atomic_write_text(tmp_path / "t.txt", "replaced")
    assert (tmp_path / "t.txt").read_text() == "replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c.txt", "t.txt"]


def test_mode_follows_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        path = atomic_write_bytes(tmp_path / "f", b"x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_failing_writer_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = atomic_write_text(tmp_path / "results.json", "old")

    def half_then_fail(temp: Path) -> None:
        temp.write_text("ne")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_readers_see_one_whole_version(tmp_path):
    target = atomic_write_bytes(tmp_path / "big", b"a" * 200_000)
    versions = {b"a" * 200_000, b"b" * 200_000}
    seen, stop = [], threading.Event()

    def write(fill: bytes) -> None:
        for _ in range(40):
            atomic_write_bytes(target, fill * 200_000)

    def read() -> None:
        while not stop.is_set():
            seen.append(target.read_bytes() in versions)

    reader = threading.Thread(target=read)
    writers = [threading.Thread(target=write, args=(fill,)) for fill in (b"a", b"b")]
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen and all(seen)
    assert [p.name for p in tmp_path.iterdir()] == ["big"]


def test_a_failed_trace_save_keeps_the_old_trace(tmp_path, monkeypatch):
    import repo_lens.trace as trace_module

    trace = Trace(tokens=["a", "b"], token_ids=np.array([1, 2]), layer_kinds=["rope"],
                  positions=np.array([[[0.0, 1.0]]], dtype=np.float32))
    path = trace.save(tmp_path / "t.safetensors")

    def broken_save_file(arrays, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(trace_module, "save_file", broken_save_file)
    with pytest.raises(OSError, match="Read-only"):
        trace.save(path)
    np.testing.assert_array_equal(Trace.load(path).positions, trace.positions)
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]


# Other uses of rename / temp files, and why they are no file write of their own.
NOT_WRITES = {
    "data/brown.py": "moves a fully unpacked staging directory into place (a directory, not a file)",
    "lens_app/results.py": "a private temp copy of an uploaded trace, read back and deleted",
}
WRITE_PATTERN = re.compile(r"os\.replace\(|os\.rename\(|mkstemp\(|\.replace\([^)]*tmp|\.rename\(|\.tmp\b")


def test_no_module_writes_files_by_hand():
    offenders = []
    for root in (PACKAGE, APP):
        for path in root.rglob("*.py"):
            relative = path.relative_to(root).as_posix()
            if relative == "atomic.py" or relative in NOT_WRITES:
                continue
            if WRITE_PATTERN.search(path.read_text()):
                offenders.append(relative)
    assert offenders == []
