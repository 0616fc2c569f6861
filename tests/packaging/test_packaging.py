"""pip is the way in: the sdist and wheel ``python -m build`` makes from the files git would ship pass
``twine check --strict``; the sdist holds the package and its data but no tests; the wheel holds the package data (zoo models, mechanisms.json, py.typed, the app's
.streamlit/config.toml) and no tests; installed (non-editable, its dependencies taken from this environment)
into a fresh virtual environment, ``repo-lens --help``, ``python -m repo_lens --help``, ``repo-lens app --help``
and the README's quickstart on a zoo model work from outside the source tree."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import repo_lens
from repo_lens.plots import export_unavailable

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
QUICKSTART = """
import sys
import repo_lens
lens = repo_lens.load("zoo:bytes1k-repo")
t = lens.trace("hello")
repo_lens.plots.export(t.plot(), sys.argv[1])
print(repo_lens.__file__, t.positions.shape)
"""


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist and wheel built from a copy of the files git would ship (tracked and not ignored), so neither
    the build's leftovers nor anyone's ignored files in this tree reach them."""
    source = tmp_path_factory.mktemp("source")
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], cwd=source, timeout=600)
    return out


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    (path,) = dist.glob("*.whl")
    return path


def test_the_distributions_pass_twine_check(dist):
    assert sorted(path.suffix for path in dist.iterdir()) == [".gz", ".whl"]
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))], cwd=dist)


def test_the_sdist_holds_the_package_and_no_tests(dist):
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "LICENSE", "repo_lens/py.typed", "repo_lens/model/mechanisms.json",
            "repo_lens/app/.streamlit/config.toml", "repo_lens/zoo/models/bytes1k-repo/model.safetensors.xz"} <= names
    assert not [name for name in names if name.startswith("tests/")]


def test_the_wheel_holds_the_package_data_and_no_tests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"repo_lens/py.typed", "repo_lens/model/mechanisms.json", "repo_lens/app/.streamlit/config.toml",
            "repo_lens/app/streamlit_app.py", "repo_lens/__main__.py"} <= names
    models = sorted(path.parent.name for path in (ROOT / "repo_lens" / "zoo" / "models").glob("*/config.json"))
    assert "bytes1k-repo" in models
    for model in models:
        shipped = {path.name for path in (ROOT / "repo_lens" / "zoo" / "models" / model).iterdir() if path.is_file()}
        assert {f"repo_lens/zoo/models/{model}/{name}" for name in shipped} <= names, model
    assert not [name for name in names if name.startswith(("tests/", "notebooks/", "docs/", "build/"))]
    dist_info = f"repo_lens-{repo_lens.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    with zipfile.ZipFile(wheel) as archive:
        metadata = email.message_from_bytes(archive.read(f"{dist_info}/METADATA"))
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert metadata["Version"] == repo_lens.__version__ and metadata["License-Expression"] == "Apache-2.0"
    assert {"app", "notebooks"} <= set(metadata.get_all("Provides-Extra"))
    required = {line.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
                for line in metadata.get_all("Requires-Dist") if "extra ==" not in line}
    assert {"torch", "plotly", "kaleido", "huggingface-hub", "accelerate"} <= {name.replace("_", "-")
                                                                              for name in required}
    assert "repo-lens = repo_lens.cli:main" in entry_points


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed (no editable link to this tree); the dependencies
    come from this environment's site-packages through a .pth line (no download), after the venv's own."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index", "--no-deps",
          str(wheel)], cwd=venv)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=venv).strip())
    (purelib / "_repo_lens_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("command", [["repo-lens", "--help"], ["python", "-m", "repo_lens", "--help"],
                                     ["repo-lens", "app", "--help"]])
def test_the_installed_commands_answer_help(installed, tmp_path, command):
    out = _run([str(installed / "bin" / command[0]), *command[1:]], cwd=tmp_path, env=_env())
    assert out.startswith("usage: repo-lens") and ("streamlit run" in out) == (command[-2] == "app")


def test_the_quickstart_runs_on_the_installed_wheel(installed, tmp_path):
    figure = tmp_path / ("hello.svg" if export_unavailable() is None else "hello.html")  # SVG needs Chromium
    out = _run([str(installed / "bin" / "python"), "-c", QUICKSTART, str(figure)], cwd=tmp_path, env=_env())
    where, shape = out.strip().split(" ", 1)
    assert Path(where).is_relative_to(installed) and not Path(where).is_relative_to(ROOT)  # the wheel, not this tree
    assert shape.startswith("(") and figure.stat().st_size > 1000
    assert figure.read_text(errors="replace").lstrip().startswith(("<svg", "<?xml", "<html", "<!DOCTYPE"))
