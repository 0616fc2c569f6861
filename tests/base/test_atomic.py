"""repo_lens.atomic is the one way files are written: whole or not at all, old file kept on failure,
no temporary file left behind, the usual file mode; and no module writes files another way."""

from __future__ import annotations

import ast
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import repo_lens
from repo_lens import atomic as atomic_module
from repo_lens.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from repo_lens.trace import Trace

PACKAGE = Path(repo_lens.__file__).resolve().parent  # the app included (repo_lens/app/)


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
    "app/results.py": "a private temp copy of an uploaded trace, read back and deleted",
}
WRITE_PATTERN = re.compile(r"os\.replace\(|os\.rename\(|mkstemp\(|\.replace\([^)]*tmp|\.rename\(|\.tmp\b")


def test_no_module_writes_files_by_hand():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "atomic.py" or relative in NOT_WRITES:
            continue
        if WRITE_PATTERN.search(path.read_text()):
            offenders.append(relative)
    assert offenders == []


# ---- portability: nothing Unix-only in the writer ------------------------------------------------

NO_FCNTL = """
import sys, tempfile
from pathlib import Path
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` fails
import numpy as np
from repo_lens import atomic
from repo_lens.errors import WriteError
from repo_lens.run_lock import run_lock
from repo_lens.trace import Trace
folder = Path(tempfile.mkdtemp())
atomic.atomic_write_text(folder / "a.txt", "written")
trace = Trace(tokens=["a", "b"], token_ids=np.array([1, 2]), layer_kinds=["rope"],
              positions=np.array([[[0.0, 1.0]]], dtype=np.float32))
print(len(Trace.load(trace.save(folder / "t.safetensors"))), (folder / "a.txt").read_text())
try:
    with run_lock(folder):
        pass
except WriteError as error:
    print(error)
"""


def test_atomic_writes_and_traces_work_without_fcntl():
    result = subprocess.run([sys.executable, "-c", NO_FCNTL], capture_output=True, text=True, timeout=300,
                            cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stderr
    saved, refusal = result.stdout.splitlines()
    assert saved == "2 written"
    # no msvcrt either (Linux with fcntl hidden): the run lock says why it cannot hold the directory
    assert "no file locks (neither fcntl nor msvcrt)" in refusal


def test_atomic_imports_nothing_platform_specific():
    tree = ast.parse((PACKAGE / "atomic.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"fcntl", "msvcrt", "termios", "pwd", "grp", "resource", "signal"}


# ---- leftovers of a killed save: removed by the next write, load or run, never a live writer's ----

SLOW_TRACE_SAVE = """
import sys, time
import numpy as np
import repo_lens.trace as trace_module
def slow_save_file(arrays, filename, metadata=None):
    with open(filename, "wb") as file:
        file.write(b"x" * 4_000_000)
        file.flush()
        print("writing", flush=True)
        time.sleep(120)
trace_module.save_file = slow_save_file
trace = trace_module.Trace(tokens=["a"], token_ids=np.array([1]), layer_kinds=["rope"],
                           positions=np.zeros((1, 1, 1), np.float32))
trace.save(sys.argv[1])
"""


def _small_trace() -> Trace:
    return Trace(tokens=["a", "b"], token_ids=np.array([1, 2]), layer_kinds=["rope"],
                 positions=np.array([[[0.0, 1.0]]], dtype=np.float32))


def _temps(folder: Path) -> list[Path]:
    return [path for path in folder.iterdir() if path.name.endswith(".tmp")]


def test_trace_load_removes_what_a_save_killed_mid_write_left_but_not_a_live_save(tmp_path):
    kept = _small_trace().save(tmp_path / "kept.safetensors")  # this process has just looked at the folder
    writer = subprocess.Popen([sys.executable, "-c", SLOW_TRACE_SAVE, str(tmp_path / "big.safetensors")],
                              stdout=subprocess.PIPE, text=True, cwd=PACKAGE.parent)
    try:
        assert writer.stdout.readline().strip() == "writing"
        (leftover,) = _temps(tmp_path)
        assert leftover.stat().st_size == 4_000_000
        assert len(Trace.load(kept)) == 2
        assert leftover.exists()  # its writer is alive: its temp file stays
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()  # reaped, so its pid names no process
        writer.stdout.close()
    assert leftover.exists()  # kill -9 left the full-size temp file behind
    assert len(Trace.load(kept)) == 2  # within the minute of the last look: the writer it saw is rechecked
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept.safetensors"]


def _dead_writer_temp(folder: Path, target: str = "model.safetensors") -> Path:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    temp = folder / f".{target}.{atomic_module._HOST_TAG}-{child.pid}-0123456789ab.tmp"
    temp.write_bytes(b"\0" * 1024)
    return temp


def test_a_checkpoint_load_and_a_run_start_remove_dead_writers_temp_files(tmp_path):
    from repo_lens.model import LensModel, ModelConfig
    from repo_lens.model.loaders import load_checkpoint, save_checkpoint
    from repo_lens.run_lock import run_lock

    config = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
                         layer_mechanisms=["rope"])
    directory = save_checkpoint(LensModel(config), tmp_path / "ckpt")
    leftover = _dead_writer_temp(directory)
    load_checkpoint(directory, device="cpu")
    assert not leftover.exists()
    run = tmp_path / "run"
    run.mkdir()
    leftover = _dead_writer_temp(run, "results.json")
    with run_lock(run):
        assert not leftover.exists()


def test_a_live_writers_temp_file_survives_loads(tmp_path):
    kept = _small_trace().save(tmp_path / "kept.safetensors")
    live = tmp_path / f".other.safetensors.{atomic_module._HOST_TAG}-{os.getppid()}-0123456789ab.tmp"
    live.write_bytes(b"half")
    for _ in range(2):
        Trace.load(kept)
    atomic_module.remove_leftover_temp_files(tmp_path, force=True)
    assert live.exists()


def test_where_pids_cannot_be_probed_a_temp_file_of_this_host_waits_a_day(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic_module, "_CAN_PROBE_PIDS", False)  # as on Windows
    recent, old = _dead_writer_temp(tmp_path, "a.bin"), _dead_writer_temp(tmp_path, "b.bin")
    stale = time.time() - atomic_module.STALE_FOREIGN_TEMP_S - 60
    os.utime(old, (stale, stale))
    assert atomic_module.remove_leftover_temp_files(tmp_path, force=True) == [old]
    assert recent.exists()
