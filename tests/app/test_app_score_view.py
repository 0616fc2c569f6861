"""The "Why this attention" panel through AppTest: a highlighted token opens it beside "Why this position";
its bars and patterns are the model's own scores and pattern (its hooks, read here) for the layer and head
picked; a bias layer shows its bias as the position part and no band strip; a saved trace, and a trace
beyond the model's context, get a message instead of the panel."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import repo_lens
from app_helpers import app, app_env, assert_clean, checkpoint_root, figures, messages  # noqa: F401  (fixtures)
from repo_lens.app.documents import FREE_TEXT
from repo_lens.app.score_view import FROM_FILE, INTRO, TITLE
from repo_lens.model.alibi import alibi_slopes

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
TOKEN = 10
ATTENTION_KINDS = ["attention_split_bars", "attention_band_strip", "attention_patterns"]


def _kinds(at) -> list[str]:
    return [figure["layout"]["meta"]["kind"] for figure in figures(at)]


def _panel_figures(at) -> dict[str, dict]:
    return {figure["layout"]["meta"]["kind"]: figure for figure in figures(at)
            if figure["layout"]["meta"]["kind"].startswith("attention_")}


@functools.cache
def _hooks(directory: str) -> dict[str, torch.Tensor]:
    """The model's hooks on the app's free text, read once per model."""
    lens = repo_lens.load(directory)
    _, cache = lens.model.run_with_cache(torch.tensor([lens.trace(FREE_TEXT, progress=False).token_ids]))
    return dict(cache.items())


def _model_row(directory, layer: int, head: int, query: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's own scores and pattern of one query row, from its hooks (keys 0..query)."""
    cache = _hooks(str(directory))
    prefix = f"blocks.{layer}.attn."
    return (cache[prefix + "hook_attn_scores"][0, head, query, :query + 1].double().numpy(),
            cache[prefix + "hook_pattern"][0, head, query, :query + 1].double().numpy())


def _check_against_the_model(at, directory, layer: int, head: int) -> None:
    scores, pattern = _model_row(directory, layer, head, TOKEN)
    top = sorted(range(TOKEN + 1), key=lambda key: (-pattern[key], key))[:8]
    shown = _panel_figures(at)
    content, position, score = shown["attention_split_bars"]["data"]
    assert [label.split(" ")[1] for label in content["y"]] == [str(key) for key in top]  # "key 7 'x' · 31.0%"
    np.testing.assert_allclose(np.add(content["x"], position["x"]), scores[top], rtol=0, atol=1e-5)
    np.testing.assert_allclose(score["x"], scores[top], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.sum(shown["attention_band_strip"]["data"][0]["z"], axis=1), scores[top],
                               rtol=0, atol=1e-5)  # a rotary layer's bands add up to its score
    actual = shown["attention_patterns"]["data"][0]
    assert actual["x"] == list(range(TOKEN + 1))
    np.testing.assert_allclose(actual["y"], pattern, rtol=0, atol=1e-6)
    assert f"L{layer}H{head}, query {TOKEN} " in shown["attention_split_bars"]["layout"]["title"]["text"]


def test_a_highlighted_token_opens_why_this_attention_with_the_models_own_scores(app, app_env):
    at = app().run()
    at.number_input(key="spaced_token").set_value(TOKEN).run()
    assert_clean(at)
    assert not messages(at, "error")
    assert _kinds(at) == ["spaced_tokens", "position_attribution_bars", "token_attribution_strip", *ATTENTION_KINDS]
    titles = [expander.label for expander in at.expander]
    assert [title.split(":")[0] for title in titles if title.startswith("Why this")] == [
        "Why this position", TITLE]
    assert any(title.startswith(f"{TITLE}: query token {TOKEN} ") for title in titles)
    assert any(markdown.value == INTRO for markdown in at.markdown)
    layer = next(box for box in at.selectbox if box.key.startswith("attn_layer_"))
    assert layer.options == ["L0 rope", "L1 repo", "L2 repo"] and layer.value == 1  # the first learned layer
    _check_against_the_model(at, app_env / "tiny-repo", layer=1, head=0)

    layer.set_value(0)  # RoPE: the reference pattern (positions 0, 1, 2, …) is the layer's own
    next(box for box in at.selectbox if box.key.startswith("attn_head_")).set_value(1).run()
    assert_clean(at)
    _check_against_the_model(at, app_env / "tiny-repo", layer=0, head=1)
    rows = _panel_figures(at)["attention_patterns"]["data"]
    np.testing.assert_allclose(rows[3]["y"], rows[0]["y"], rtol=0, atol=1e-6)
    buttons = [button.label for button in at.get("download_button")]
    assert "Top keys (CSV)" in buttons


@pytest.fixture
def bias_app(app, monkeypatch, tmp_path):
    """The app opening on a tiny model whose layers add a bias to q·k and rotate nothing."""
    from repo_lens.model.loaders import save_checkpoint
    from repo_lens.model.tiny import tiny_model

    directory = save_checkpoint(tiny_model("alibi", n_layers=2, d_model=32, n_heads=2),
                                tmp_path / "tiny-bias", info={"name": "tiny-bias"})
    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(tmp_path))
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(directory))
    return app, directory


def test_a_bias_layer_shows_its_bias_as_the_position_part_and_says_there_are_no_bands(bias_app):
    app, directory = bias_app
    at = app().run()
    at.number_input(key="spaced_token").set_value(TOKEN).run()
    assert_clean(at)
    assert not messages(at, "error")
    assert [kind for kind in _kinds(at) if kind.startswith("attention_")] == [
        "attention_split_bars", "attention_patterns"]
    assert any("rotates neither q nor k: its position part is the bias" in text for text in messages(at, "info"))
    layer = next(box for box in at.selectbox if box.key.startswith("attn_layer_")).value
    _, position, score = _panel_figures(at)["attention_split_bars"]["data"]
    keys = np.array([int(label.split(" ")[1]) for label in position["y"]])
    np.testing.assert_allclose(position["x"], -alibi_slopes(2)[0] * (TOKEN - keys), rtol=0, atol=1e-6)  # m·(j − i)
    scores, _ = _model_row(directory, layer, 0, TOKEN)
    np.testing.assert_allclose(score["x"], scores[keys], rtol=0, atol=1e-5)


def test_a_saved_trace_says_the_panel_needs_the_model(app, app_env, tmp_path):
    lens = repo_lens.load(app_env / "tiny-repo")
    data = lens.trace(FREE_TEXT, progress=False).save(tmp_path / "t.safetensors").read_bytes()
    at = app()
    at.session_state["mode"] = "Open a saved trace"
    at.run()
    at.get("file_uploader")[0].set_value(("run.safetensors", data, "application/octet-stream"))
    at.run()
    at.number_input(key="spaced_token").set_value(TOKEN).run()
    assert_clean(at)
    assert not messages(at, "error")
    assert FROM_FILE in messages(at, "info") and "Run a model" in FROM_FILE
    assert not [kind for kind in _kinds(at) if kind.startswith("attention_")]
    assert any(expander.label.startswith(f"{TITLE}: query token {TOKEN} ") for expander in at.expander)


def test_a_trace_beyond_the_context_gets_a_message_not_an_error(app, app_env):
    at = app()
    at.session_state["model_a"] = str(app_env / "tiny-short")
    at.run()
    at.selectbox(key="input").set_value("NIAH").run()
    at.checkbox(key="niah_beyond").check().run()
    at.select_slider[0].set_value(512).run()
    at.number_input(key="spaced_token").set_value(200).run()  # in the window shown
    assert_clean(at)
    assert not [text for text in messages(at, "error") if text.startswith(TITLE)]
    assert any(text.startswith("This input is") and "beyond the model's context (256)" in text
               for text in messages(at, "info"))
    assert not [kind for kind in _kinds(at) if kind.startswith("attention_")]
