"""Static export with no usable Chromium answers with ExportError in seconds, never a hang."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from repo_lens.plots.export import browser_install_hint

HINT = browser_install_hint()  # what to install here: apt-get on Debian, Chrome on macOS, ...
REPO = Path(__file__).resolve().parents[2]
EXPORT_SCRIPT = textwrap.dedent("""
    import sys, time
    import plotly.graph_objects as go
    from repo_lens.plots import ExportError, export, figure_bytes
    target = sys.argv[1]
    started = time.monotonic()
    for call in (lambda: figure_bytes(go.Figure(go.Bar(y=[1, 2])), "png"),
                 lambda: export(go.Figure(go.Bar(y=[1, 2])), target)):
        try:
            call()
        except ExportError as error:
            print("ExportError:", error)
        else:
            print("no error")
    print(f"seconds {time.monotonic() - started:.2f}")
""")


def run_export(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    target = tmp_path / "figure.pdf"
    target.write_bytes(b"earlier figure")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", EXPORT_SCRIPT, str(target)], capture_output=True, text=True,
                            timeout=60, cwd=REPO, env={**os.environ, **env})
    return result, time.monotonic() - started


def test_no_browser_at_all_is_an_export_error_within_five_seconds(tmp_path):
    result, _ = run_export(tmp_path, BROWSER_PATH=str(tmp_path / "no-chromium-here"), PATH=str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["ExportError", "ExportError"], result.stdout
    assert all(HINT in line and "no-chromium-here" in line for line in lines[:2])
    assert float(lines[-1].split()[1]) < 5.0  # both calls together, interpreter start not counted
    assert (tmp_path / "figure.pdf").read_bytes() == b"earlier figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.pdf"]


@pytest.mark.browser
def test_a_browser_that_dies_at_start_is_an_export_error_within_seconds(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    result, _ = run_export(tmp_path, BROWSER_PATH=str(fake))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ExportError") and HINT in lines[0], result.stdout
    assert float(lines[-1].split()[1]) < 15.0  # the browser start is retried once per call
    assert (tmp_path / "figure.pdf").read_bytes() == b"earlier figure"


def test_a_render_that_never_returns_is_cut_off_by_the_timeout(monkeypatch):
    import plotly.graph_objects as go

    export_module = importlib.import_module("repo_lens.plots.export")  # the package re-exports a function `export`

    monkeypatch.setattr(export_module, "start_export_server", lambda: None)
    monkeypatch.setattr(export_module, "_server_alive", lambda: True)
    monkeypatch.setattr(export_module, "EXPORT_TIMEOUT_S", 0.5)
    import kaleido

    monkeypatch.setattr(kaleido, "calc_fig_sync", lambda *a, **k: time.sleep(30))
    started = time.monotonic()
    with pytest.raises(export_module.ExportError, match="REPO_LENS_EXPORT_TIMEOUT"):
        export_module.figure_bytes(go.Figure(go.Bar(y=[1])), "svg")
    assert time.monotonic() - started < 2.0


def test_export_unavailable_names_the_remedy(monkeypatch, tmp_path):
    export_module = importlib.import_module("repo_lens.plots.export")  # the package re-exports a function `export`

    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "missing"))
    assert export_module.find_browser() is None
    assert export_module.export_unavailable().endswith(f"{HINT}; or export HTML instead")


def test_a_study_without_a_browser_still_writes_its_json_and_lists_the_missing_figures(tmp_path, monkeypatch):
    import json

    import plotly.graph_objects as go

    from repo_lens.studies.reproductions.common import save_study

    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))
    document = {"markdown": "| a |\n|---|\n| 1 |", "value": 1.5}
    started = time.monotonic()
    with pytest.warns(UserWarning, match="2 figure file"):
        save_study(tmp_path / "study", document, {"fig1": go.Figure(go.Bar(y=[1]))})
    assert time.monotonic() - started < 5.0
    written = json.loads((tmp_path / "study" / "results.json").read_text())
    assert written["value"] == 1.5 and written["figures"] == []
    assert sorted(written["figures_not_rendered"]) == ["fig1.pdf", "fig1.svg"]
    assert all(HINT in reason for reason in written["figures_not_rendered"].values())
    assert sorted(p.name for p in (tmp_path / "study").iterdir()) == ["results.json", "table.md"]


@pytest.mark.parametrize("system, distribution, says", [
    ("Linux", {"debian"}, "apt-get install chromium fonts-wqy-microhei`"),
    ("Linux", {"ubuntu", "debian"}, "Ubuntu's chromium package is a snap"),  # a snap kaleido cannot start
    ("Linux", {"fedora"}, "with your system's package manager"),
    ("Darwin", set(), "Install Google Chrome (kaleido finds it in /Applications)"),
    ("Windows", set(), "Install Google Chrome"),
])
def test_the_remedy_fits_the_platform(system, distribution, says, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)  # a user: apt-get through sudo
    hint = browser_install_hint(system, distribution)
    assert says in hint and "plotly_get_chrome -y" in hint  # the download that needs no root, on every platform
    assert ("`sudo apt-get install" in hint) == ("apt-get" in hint)
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    assert "sudo" not in browser_install_hint(system, distribution)  # root (a container) has no sudo to run
