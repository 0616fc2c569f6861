"""The Makefile's run targets use an environment that already has what they run (e.g. one made by the
README's pip route) as it is: `make app` and `make notebooks-lab` neither set up nor reinstall into it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _environment(tmp_path: Path, modules: str) -> Path:
    """A stand-in for a .venv made with pip: its python is this one (restricted to ``modules`` of the
    asked-for ones), and its repo-lens and jupyter only say how they were called."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = -c ] && echo \"$2\" | grep -qx 'import [a-z_, ]*'; then\n"  # an import check: only `modules`
        "  for m in $(echo \"$2\" | sed 's/import //; s/,/ /g'); do\n"
        f"    case \" {modules} \" in *\" $m \"*) ;; *) exit 1;; esac\n"
        "  done\n"
        "  exit 0\n"
        "fi\n"
        f"exec {sys.executable} \"$@\"\n")
    for tool in ("repo-lens", "jupyter", "pip"):
        (venv / "bin" / tool).write_text(f"#!/bin/sh\necho \"{tool} $*\"\n")
    for path in (venv / "bin").iterdir():
        path.chmod(0o755)
    return venv


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize(("target", "modules", "runs"), [
    ("app", "repo_lens streamlit", "repo-lens app"),
    ("notebooks-lab", "repo_lens jupyterlab ipykernel", "jupyter lab --ServerApp.ip=127.0.0.1 --notebook-dir=notebooks"),
])
def test_a_run_target_uses_an_environment_that_has_what_it_runs(tmp_path, target, modules, runs):
    venv = _environment(tmp_path, modules)
    done = subprocess.run(["make", "-s", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MAKEFLAGS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [runs]  # no setup: nothing installed, no torch replaced


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_a_run_target_sets_up_an_environment_that_lacks_what_it_runs_keeping_its_torch(tmp_path):
    venv = _environment(tmp_path, "repo_lens torch")  # no streamlit: `make app` sets up first
    done = subprocess.run(["make", "-s", "app", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MAKEFLAGS": ""})
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if line.startswith("pip ")]
    assert installs and all("torch==" not in line.split("-c")[0] for line in installs), installs  # torch kept
    assert installs[0].startswith(f"pip install -q -c {venv}/torch-pin.txt -e .[")
    import torch

    assert (venv / "torch-pin.txt").read_text().strip() == f"torch=={torch.__version__.split('+')[0]}"
    assert done.stdout.splitlines()[-1] == "repo-lens app"
