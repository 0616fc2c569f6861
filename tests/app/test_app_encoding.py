"""The app's "Encoding" view: each head's position variance split into token index, content class, a span
of the input and the rest (repo_lens.analysis.position_variance_shares), as heatmaps and CSV."""

from __future__ import annotations

import numpy as np
import pytest

from app_helpers import app, app_env, checkpoint_root, figures, messages  # noqa: F401  (fixtures)
from repo_lens.app.views import VIEWS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _span_box(at):
    return next(box for box in at.selectbox if box.label == "Span")


def test_the_encoding_view_splits_each_heads_variance_with_the_needle_as_its_span(app):
    assert "Encoding" in [view.name for view in VIEWS]
    at = app()
    at.session_state["view"] = "Encoding"
    at.run()
    at.selectbox(key="input").set_value("NIAH").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not messages(at, "error"), messages(at, "error")
    assert _span_box(at).value == "needle"
    (figure,) = figures(at)
    panels = {trace["name"]: np.asarray(trace["z"], dtype=float) for trace in figure["data"]}
    assert list(panels) == ["index", "content", "needle", "rest"]
    np.testing.assert_allclose(sum(panels.values()), 1.0, atol=1e-6)
    np.testing.assert_allclose(panels["index"][0], 1.0, atol=1e-6)  # layer 0 is RoPE: its positions are the index
    assert "Shares (CSV)" in {button.label for button in at.get("download_button")}

    _span_box(at).set_value("none").run()
    assert [trace["name"] for trace in figures(at)[0]["data"]] == ["index", "content", "rest"]


def test_the_encoding_view_on_free_text_offers_no_span_and_still_splits(app):
    at = app()
    at.session_state["view"] = "Encoding"
    at.run()
    assert not at.exception and not messages(at, "error")
    assert _span_box(at).value == "none"
    (figure,) = figures(at)
    assert [trace["name"] for trace in figure["data"]] == ["index", "content", "rest"]
