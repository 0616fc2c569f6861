"""The app with no Chromium: the static export buttons say why they are off, HTML still works, the session lives on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
from app_helpers import app, app_env, assert_clean, checkpoint_root, figures, messages  # noqa: E402,F401  (fixtures)

from repo_lens.plots.export import browser_install_hint  # noqa: E402

HINT = browser_install_hint()

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_no_browser_disables_static_export_with_the_reason_and_the_app_keeps_serving(app, monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium"))
    at = app().run()
    assert_clean(at)
    labels = [button.proto.label for button in at.get("download_button")]
    assert all(label.startswith("Download ") for label in labels), labels
    buttons = {button.proto.label.removeprefix("Download "): button.proto for button in at.get("download_button")}
    assert set(buttons) == {"PNG", "SVG", "PDF", "HTML"}
    assert all(buttons[label].disabled and HINT in buttons[label].help for label in ("PNG", "SVG", "PDF"))
    assert not buttons["HTML"].disabled
    assert any(HINT in text for text in messages(at, "caption"))
    assert not messages(at, "error")

    at.radio(key="spaced_scale").set_value("shared").run()  # the session keeps serving
    assert_clean(at)
    assert figures(at)

    monkeypatch.delenv("BROWSER_PATH")
    at.run()
    buttons = {button.proto.label.removeprefix("Download "): button.proto for button in at.get("download_button")}
    if not buttons["PNG"].disabled:  # a Chromium is installed here: the buttons come back
        assert not any(HINT in text for text in messages(at, "caption"))
