"""`repo-lens app` (and `make app`): the command it runs, its error without Streamlit, the app's
Streamlit config beside the script it serves, and a real server started by it."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

from repo_lens.cli import APP_SCRIPT, main

ROOT = Path(__file__).resolve().parents[2]


class Replaced(BaseException):
    """os.execv does not return: the process becomes the server."""


def test_repo_lens_app_runs_streamlit_on_the_local_address_with_passthrough(monkeypatch):
    ran = []

    def execv(path, argv):
        ran.append(argv)
        raise Replaced

    monkeypatch.setattr("os.execv", execv)
    monkeypatch.setattr("subprocess.call", lambda argv: ran.append(argv) or 0)  # where there is no exec (Windows)
    try:
        assert main(["app", "--server.port", "8502", "--theme.base=dark"]) == 0
    except Replaced:
        pass
    (command,) = ran
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT)]
    assert command[5:] == ["--server.address", "127.0.0.1", "--server.headless", "true", "--server.port", "8502",
                           "--theme.base=dark"]
    assert APP_SCRIPT.is_file() and APP_SCRIPT.parent == ROOT / "repo_lens" / "app"


def test_other_commands_still_refuse_unknown_arguments(capsys):
    assert main(["zoo", "--server.port", "8502"]) == 2
    assert "unrecognized arguments: --server.port 8502" in capsys.readouterr().err


def test_without_streamlit_the_error_names_the_extra(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a))
    monkeypatch.setattr("os.execv", lambda *a: pytest.fail("started without Streamlit"))
    assert main(["app"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("repo-lens: error: the app needs Streamlit") and 'pip install "repo_lens[app]"' in err


def test_the_make_target_calls_repo_lens_app():
    recipe = (ROOT / "Makefile").read_text().split("\napp:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/repo-lens app" in recipe and "streamlit run" not in recipe


def test_the_app_config_sits_beside_the_script_and_ships_with_the_package():
    """Streamlit reads ``.streamlit/config.toml`` beside the script it runs (script-level config)."""
    from streamlit import file_util

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = Path(file_util.get_main_script_streamlit_file_path(str(APP_SCRIPT), "config.toml"))
    settings = tomllib.loads(config.read_text())
    assert settings["server"]["address"] == "127.0.0.1" and settings["server"]["fileWatcherType"] == "none"
    assert settings["browser"]["gatherUsageStats"] is False
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["repo_lens"]
    relative = config.relative_to(ROOT / "repo_lens").as_posix()
    assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), (relative, patterns)
    assert "repo_lens*" in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]


@pytest.mark.slow
def test_repo_lens_app_serves_the_app_with_its_config(tmp_path):
    """`repo-lens app` (as the browser tests start it) serves on 127.0.0.1; the script-level config
    applies: with the default browser.gatherUsageStats Streamlit would announce usage statistics."""
    from browser_helpers import app_server

    log = tmp_path / "server.log"
    with app_server({"REPO_LENS_APP_ROOTS": ""}, log) as url:
        assert url.startswith("http://127.0.0.1:")
    text = log.read_text()
    assert f"URL: {url}" in text and "usage statistics" not in text
