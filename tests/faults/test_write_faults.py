"""A failed write (file too large, read-only file system, permission denied, a directory in the way)
is a WriteError naming the path and the cause; the earlier file is intact and no temporary file is left."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import repo_lens
from repo_lens.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from repo_lens.errors import WriteError

REPO = Path(__file__).resolve().parents[2]
FSIZE_SCRIPT = textwrap.dedent("""
    import resource, signal, sys, time
    import numpy as np
    import repo_lens
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # the write then fails with EFBIG instead of killing us
    target = sys.argv[1]
    trace = repo_lens.Trace(tokens=[str(i) for i in range(4096)], token_ids=np.arange(4096),
                            positions=np.zeros((4, 4, 4096), np.float32), layer_kinds=["rope"] * 4)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
    started = time.monotonic()
    try:
        trace.save(target)
    except repo_lens.WriteError as error:
        print(f"WriteError errno={error.errno} seconds={time.monotonic() - started:.3f}")
        print(error)
""")


def small_trace(n: int = 8) -> repo_lens.Trace:
    return repo_lens.Trace(tokens=[str(i) for i in range(n)], token_ids=np.arange(n),
                           positions=np.zeros((2, 2, n), np.float32), layer_kinds=["rope", "rope"])


def test_trace_bigger_than_the_file_size_limit_is_a_write_error(tmp_path):
    target = tmp_path / "big.trace.safetensors"
    small_trace().save(target)
    before = target.read_bytes()
    result = subprocess.run([sys.executable, "-c", FSIZE_SCRIPT, str(target)], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.splitlines()[:2]
    assert first.startswith(f"WriteError errno={errno.EFBIG}"), result.stdout
    assert float(first.split("seconds=")[1]) < 5.0
    assert str(target) in message and "File too large" in message and "SafetensorError" not in message
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert len(repo_lens.Trace.load(target)) == 8


@pytest.mark.parametrize("code, cause", [(errno.EROFS, "Read-only file system"), (errno.ENOSPC, "No space left"),
                                         (errno.EACCES, "Permission denied")])
def test_failure_at_the_rename_keeps_the_old_file(tmp_path, monkeypatch, code, cause):
    target = tmp_path / "out.txt"
    target.write_text("earlier")

    def failing_replace(source, destination):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(WriteError, match=cause) as caught:
        atomic_write_text(target, "new")
    assert caught.value.errno == code and str(target) in str(caught.value)
    assert isinstance(caught.value, OSError)  # callers that caught OSError still do
    assert target.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_failure_to_create_the_temporary_file_is_a_write_error(tmp_path, monkeypatch):
    real_open = os.open

    def read_only_open(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    with pytest.raises(WriteError, match="Read-only file system.*write somewhere else"):
        atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert list(tmp_path.iterdir()) == []


def test_a_wrapped_io_error_from_a_writer_library_is_recognised(tmp_path):
    class LibraryError(Exception):  # the shape of safetensors' SafetensorError
        pass

    def write(temp):
        temp.write_bytes(b"partial")
        raise LibraryError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(WriteError, match="No space left on device") as caught:
        atomic_write(tmp_path / "w.bin", write)
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_other_errors_of_the_writer_pass_through_unchanged(tmp_path):
    def write(temp):
        raise ValueError("not a write problem")

    with pytest.raises(ValueError, match="not a write problem"):
        atomic_write(tmp_path / "w.bin", write)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_in_the_way_and_a_file_in_the_path(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "kept.txt").write_text("kept")
    started = time.monotonic()
    with pytest.raises(WriteError, match="Is a directory.*give a file name"):
        small_trace().save(tmp_path / "folder")
    assert time.monotonic() - started < 5.0
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == ["kept.txt"]
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(WriteError, match="plain/below.txt"):
        atomic_write_text(tmp_path / "plain" / "below.txt", "x")
    assert (tmp_path / "plain").read_text() == "a file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o555 directory; EROFS/EACCES are simulated above")
def test_read_only_directory(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "old.txt").write_text("old")
    folder.chmod(0o555)
    try:
        with pytest.raises(WriteError, match="Permission denied"):
            atomic_write_text(folder / "old.txt", "new")
        assert (folder / "old.txt").read_text() == "old"
        assert sorted(p.name for p in folder.iterdir()) == ["old.txt"]
    finally:
        folder.chmod(0o755)


def test_analyze_into_an_unwritable_path_prints_one_error_line(tmp_path):
    (tmp_path / "plain").write_text("a file")
    result = subprocess.run([sys.executable, "-m", "repo_lens.cli", "analyze", "--model", "zoo:bytes-repo",
                             "--study", "positions", "--samples", "1", "--out", str(tmp_path / "plain" / "run"),
                             "--quiet"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    # refused while parsing the arguments, before the model loads: the path is named with the fix
    assert len(errors) == 1 and "plain is a file" in errors[0] and "choose another path" in errors[0], result.stderr


def test_a_resumable_run_resumes_once_the_write_works_again(tmp_path, monkeypatch):
    from repo_lens.studies.resumable import run_items

    computed = []

    def item(key):
        return key, lambda: computed.append(key) or {"value": len(key)}

    real_replace = os.replace

    def disk_full_for_b(source, destination):
        if str(destination).endswith("b.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", disk_full_for_b)
    with pytest.raises(WriteError, match="No space left"):
        run_items(tmp_path, [item("a"), item("b"), item("c")], {"k": 1}, progress=False)
    monkeypatch.setattr(os, "replace", real_replace)
    records = run_items(tmp_path, [item("a"), item("b"), item("c")], {"k": 1}, progress=False)
    assert computed == ["a", "b", "b", "c"]  # a was kept, b recomputed after the failure, c computed once
    assert [record["item"] for record in records] == ["a", "b", "c"]
    assert not [p for p in tmp_path.rglob("*.tmp")]
