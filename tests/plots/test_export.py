"""Static export through kaleido and the local Chromium: real files with the right magic bytes."""

from __future__ import annotations

import html
import os
import re
import shutil

import numpy as np
import pytest

from repo_lens import InputError
from repo_lens.plots import export, figure_bytes, spaced_tokens_figure
from repo_lens.trace import Trace

HAVE_CHROMIUM = any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))
needs_chromium = pytest.mark.skipif(not HAVE_CHROMIUM and not os.environ.get("CI"),
                                    reason="no Chromium (make browser installs it); required in CI")

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "svg": b"<svg", "pdf": b"%PDF-"}


@pytest.fixture(scope="module")
def figure():
    text = "Marie Curie 人工智能 was born."
    z = np.stack([np.arange(len(text), dtype=np.float32), np.cumsum(np.linspace(0.5, 1.5, len(text)))])[:, None]
    trace = Trace(tokens=list(text), token_ids=np.arange(len(text)), positions=z.astype(np.float32),
                  layer_kinds=["rope", "repo"])
    return spaced_tokens_figure(trace, scale="shared")


@needs_chromium
@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_export_writes_the_format_of_the_suffix(tmp_path, figure, fmt):
    path = export(figure, tmp_path / f"figure.{fmt}")
    data = path.read_bytes()
    assert data.startswith(MAGIC[fmt]) or (fmt == "svg" and data.lstrip().startswith(b"<svg"))
    assert len(data) > 5000
    assert [p.name for p in tmp_path.iterdir()] == [f"figure.{fmt}"]  # no temp file left behind
    if fmt == "svg":
        text = html.unescape(data.decode("utf-8"))
        assert all(f">{char}</text>" in text for char in "人工智能") and "WenQuanYi Micro Hei" in text


def test_html_export_is_offline(tmp_path, figure):
    data = export(figure, tmp_path / "figure.html").read_bytes()
    assert b"<html" in data and not re.search(rb"<script[^>]*src=", data)  # no external scripts
    assert len(data) > 1_000_000  # plotly.js is embedded


def test_unknown_suffix_and_format_are_clear_errors(tmp_path, figure):
    with pytest.raises(InputError, match=r"\.png, \.svg, \.pdf"):
        export(figure, tmp_path / "figure.jpeg")
    with pytest.raises(InputError, match="unknown figure format"):
        figure_bytes(figure, "eps")
    with pytest.raises(InputError, match="plotly Figure"):
        figure_bytes({"data": []}, "svg")


def test_pdf_export_is_off_without_rsvg_convert_and_names_its_package(monkeypatch):
    import importlib

    export_module = importlib.import_module("repo_lens.plots.export")  # the package re-exports a function `export`
    monkeypatch.setattr(export_module, "find_browser", lambda: "/usr/bin/chromium")
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "rsvg-convert" else real_which(name))
    assert export_module.export_unavailable("png") is None and export_module.export_unavailable("svg") is None
    assert "librsvg2-bin" in export_module.export_unavailable("pdf")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/" + name)
    assert export_module.export_unavailable("pdf") is None
