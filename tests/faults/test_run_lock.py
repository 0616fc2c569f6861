"""One writer per run directory: a second process is refused naming the first; a lock left by a
killed process is taken over; the ranks of one distributed run share the directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import repo_lens
from repo_lens.run_lock import LOCK_NAME, run_lock
from repo_lens.studies.resumable import run_items

REPO = Path(__file__).resolve().parents[2]
HOLD = textwrap.dedent("""
    import sys
    from repo_lens.run_lock import run_lock
    with run_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()   # hold until the test closes our stdin
""")
CLEAN_ENV = {key: value for key, value in os.environ.items()
             if key not in ("REPO_LENS_RUN_ID", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}


def hold(directory: Path, **env: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), "--marker"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO, env={**CLEAN_ENV, **env})
    assert holder.stdout.readline().strip() == "held"
    return holder


def release(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    holder.wait(30)


@pytest.fixture(autouse=True)
def no_distributed_env(monkeypatch):
    for key in ("REPO_LENS_RUN_ID", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    holder = hold(tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(repo_lens.RunInUseError) as caught:
            run_items(tmp_path, [("a", lambda: {"x": 1})], {"k": 1}, progress=False)
        assert time.monotonic() - started < 2.0
        message = str(caught.value)
        assert f"pid {holder.pid} on {socket.gethostname()}" in message and "--marker" in message
        assert not (tmp_path / "items").exists()  # nothing computed or written
    finally:
        release(holder)
    assert run_items(tmp_path, [("a", lambda: {"x": 1})], {"k": 1}, progress=False) == [{"item": "a", "x": 1}]
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.study
def test_a_second_analyze_is_refused_with_one_error_line(tmp_path):
    holder = hold(tmp_path)
    try:
        result = subprocess.run([sys.executable, "-m", "repo_lens.cli", "analyze", "--model", "zoo:bytes-repo",
                                 "--study", "positions", "--samples", "1", "--out", str(tmp_path), "--quiet"],
                                capture_output=True, text=True, timeout=300, cwd=REPO, env=CLEAN_ENV)
    finally:
        release(holder)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {tmp_path.resolve()} is in use by another run: pid {holder.pid}" in result.stderr


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    holder = hold(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(30)
    stale = json.loads((tmp_path / LOCK_NAME).read_text())
    assert stale["pid"] == holder.pid  # the file is still there, naming a dead process
    with run_lock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_stale_lock_file_with_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "old"}))
    assert run_items(tmp_path, [("a", lambda: {"x": 2})], {"k": 1}, progress=False) == [{"item": "a", "x": 2}]


def test_ranks_of_one_distributed_run_share_the_directory_and_another_run_is_refused(tmp_path, monkeypatch):
    rank = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2"}
    holder = hold(tmp_path, RANK="0", **rank)
    try:
        for key, value in rank.items():
            monkeypatch.setenv(key, value)
        with run_lock(tmp_path):  # rank 1 of the same run
            pass
        assert (tmp_path / LOCK_NAME).exists()  # rank 1 leaves rank 0's lock alone
        monkeypatch.setenv("MASTER_PORT", "29501")  # another torchrun on this host
        with pytest.raises(repo_lens.RunInUseError, match=f"pid {holder.pid}"):
            with run_lock(tmp_path):
                pass
    finally:
        release(holder)


def test_the_same_process_may_nest_the_lock(tmp_path):
    with run_lock(tmp_path), run_lock(tmp_path / "."):
        assert (tmp_path / LOCK_NAME).exists()
    assert not (tmp_path / LOCK_NAME).exists()


# The Windows lock (msvcrt.locking on one byte past the holder's details), run here with fcntl hidden
# and msvcrt played by POSIX record locks, which also belong to the process and die with it.
FAKE_MSVCRT = textwrap.dedent("""
    import fcntl as _fcntl, os, sys, types
    fake = types.ModuleType("msvcrt")
    fake.LK_UNLCK, fake.LK_NBLCK = 0, 2
    def locking(descriptor, mode, nbytes):
        start = os.lseek(descriptor, 0, os.SEEK_CUR)
        operation = _fcntl.LOCK_UN if mode == fake.LK_UNLCK else _fcntl.LOCK_EX | _fcntl.LOCK_NB
        try:
            _fcntl.lockf(descriptor, operation, nbytes, start, os.SEEK_SET)
        except OSError as error:
            raise PermissionError(13, "Permission denied") from error
    fake.locking = locking
    sys.modules["msvcrt"], sys.modules["fcntl"] = fake, None
""")
TRY_LOCK = textwrap.dedent("""
    import sys
    from repo_lens.errors import RunInUseError
    from repo_lens.run_lock import run_lock
    try:
        with run_lock(sys.argv[1]):
            print("took it")
    except RunInUseError as error:
        print(error)
""")


def test_the_windows_lock_refuses_a_second_writer_and_frees_with_its_holder(tmp_path):
    def run(script: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", FAKE_MSVCRT + script, str(tmp_path), "--marker"],
                                stdout=subprocess.PIPE, text=True, cwd=REPO, env=CLEAN_ENV, **kwargs)

    holder = run(HOLD, stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == holder.pid  # details stay readable
        second, _ = run(TRY_LOCK).communicate(timeout=120)
        assert f"is in use by another run: pid {holder.pid}" in second and "--marker" in second
    finally:
        release(holder)
    after, _ = run(TRY_LOCK).communicate(timeout=120)
    assert after.strip() == "took it"
    assert not (tmp_path / LOCK_NAME).exists()
