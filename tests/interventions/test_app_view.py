"""Issue 33, item 4: the app's Interventions view on the NIAH input of a tiny checkpoint (AppTest)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from app_helpers import app, app_env, assert_clean, checkpoint_root, figures, messages  # noqa: F401  (fixtures)

from repo_lens.app.intervention_view import intervention_result, mode_argument

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _open(app):
    at = app()
    at.session_state["view"] = "Interventions"
    at.run()
    at.selectbox(key="input").set_value("NIAH").run()
    return at


def test_the_view_shows_the_answer_before_and_after_and_a_head_map(app):
    at = _open(app)
    assert_clean(at)
    assert not messages(at, "error"), messages(at, "error")
    labels = [metric.label for metric in at.metric]
    assert labels[:3] == ["p(answer) before", "p(answer) after", "greedy answer correct"]
    shown = figures(at)
    assert len(shown) == 3  # spaced tokens before and after, the layer x head map
    heat = shown[2]["data"][0]
    assert heat["type"] == "heatmap" and len(heat["z"]) == 3
    assert all(math.isnan(value) for value in heat["z"][0])  # layer 0 is RoPE: no cell (NaN)
    assert not any(math.isnan(value) for row in heat["z"][1:] for value in row)
    at.selectbox(key="iv_mode").set_value("constant (NoPE-like)").run()
    assert not messages(at, "error")
    at.multiselect(key="iv_heads").set_value([]).run()
    assert any("at least one layer and one head" in text for text in messages(at, "info"))


def test_the_result_agrees_with_the_api(checkpoint_root):
    import numpy as np

    import repo_lens
    from repo_lens import interventions
    from repo_lens.data import niah_single

    lens = repo_lens.load(checkpoint_root / "tiny-repo", device="cpu")
    prompt = niah_single(lens.tokenizer, 400, 0.5, seed=0)
    mode = mode_argument("interpolate-constant", 0.5)
    result = intervention_result(lens, prompt.ids.tolist(), prompt.query, mode, [1, 2], [1], with_map=True)
    metric = interventions.answer_logprob(prompt)
    after = interventions.ablate(lens, prompt, mode=mode, layers=[1, 2], heads=[1], metric=metric)[0]
    assert result.after["logprob"] == pytest.approx(after, abs=1e-4)
    assert result.after["probability"] == pytest.approx(np.exp(after), rel=1e-4)
    assert result.positions.shape == (3, 2, len(prompt))
    np.testing.assert_allclose(result.positions[1, 1], 0.5 * lens.trace(prompt.ids, progress=False).positions[1, 1],
                               atol=1e-4)
    assert np.isnan(result.effects[:, 0]).all() and np.isfinite(result.effects[1:, 1]).all()


@pytest.mark.parametrize("label", ["affine (each head's own straight line)", "rank (order kept, spacing made even)",
                                   "scaled (the integers at each head's own range)",
                                   "random (a random edit as large as affine)",
                                   "window (shuffled within blocks of 8 tokens)"])
def test_every_edit_on_the_positions_scale_and_every_control_can_be_picked(app, label, checkpoint_root):
    import numpy as np

    import repo_lens
    from repo_lens import interventions
    from repo_lens.app.intervention_view import MODES
    from repo_lens.data import niah_single

    at = _open(app)
    at.selectbox(key="iv_mode").set_value(label).run()
    assert_clean(at)
    assert not messages(at, "error"), messages(at, "error")
    lens = repo_lens.load(checkpoint_root / "tiny-repo", device="cpu")
    prompt = niah_single(lens.tokenizer, 400, 0.5, seed=0)
    mode = mode_argument(MODES[label], 1.0)
    result = intervention_result(lens, prompt.ids.tolist(), prompt.query, mode, [1, 2], [0, 1], with_map=False)
    unedited = lens.trace(prompt.ids, progress=False).positions
    assert not np.allclose(result.positions[1:], unedited[1:], atol=1e-5)  # the edit moved the learned positions
    expected = interventions.ablated_positions(lens, prompt, mode=mode, layers=[1, 2], heads=[0, 1])
    np.testing.assert_allclose(result.positions, expected, atol=1e-6)
