"""The package and the notebook sources pass ruff with the project's settings (pyproject.toml,
notebooks/ruff.toml), and the whole package passes mypy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed; it comes with the dev extra (make setup)")
    return found


@pytest.mark.parametrize("target", ["repo_lens"])  # the notebooks: tests/notebooks
def test_ruff_is_clean(target):
    result = subprocess.run([ruff(), "check", target], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_passes_on_the_whole_package():
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    if mypy is None:
        pytest.fail("mypy is not installed; it comes with the dev extra (make setup)")
    # files (the whole repo_lens package, imports followed): pyproject.toml
    result = subprocess.run([mypy], cwd=ROOT, capture_output=True, text=True, timeout=1200)  # cold: minutes
    assert result.returncode == 0, result.stdout + result.stderr
