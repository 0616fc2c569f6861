"""Issue 15's app controls through AppTest: export names, the highlight and zoom of the spaced-token
view, the model list with sizes, presets that fit the model's context, compare mode, upload errors."""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pytest
from safetensors import safe_open

from app_helpers import (  # noqa: F401  (fixtures)
    CONTEXT,
    SHORT_CONTEXT,
    app,
    app_env,
    assert_clean,
    chart_configs,
    checkpoint_root,
    figures,
    messages,
)
from repo_lens.app.attribution_view import METHODS
from repo_lens.app.documents import FREE_TEXT

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _hash_of_text(text: str) -> str:
    ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype("<i8")  # byte model: one id per byte
    return hashlib.sha1(ids.tobytes()).hexdigest()[:6]


def test_export_names_carry_model_view_head_and_input(app):
    at = app().run()
    assert_clean(at)
    labels = [button.label for button in at.get("download_button")]
    assert labels == ["Download PNG", "Download SVG", "Download PDF", "Download HTML"]
    (config,) = chart_configs(at)
    assert config["toImageButtonOptions"]["filename"] == f"tiny-repo_spaced-tokens_H0_{_hash_of_text(FREE_TEXT)}"
    at.selectbox(key="spaced_head").set_value("1")
    at.text_area(key="text_Free text").input("Another text.").run()
    (config,) = chart_configs(at)
    assert config["toImageButtonOptions"]["filename"] == f"tiny-repo_spaced-tokens_H1_{_hash_of_text('Another text.')}"

    at.session_state["view"] = "Scatter"
    at.run()
    at.selectbox(key="scatter_layer").set_value(2).run()
    (config,) = chart_configs(at)
    assert config["toImageButtonOptions"]["filename"] == f"tiny-repo_scatter_L2-Hall_{_hash_of_text('Another text.')}"


def test_highlight_follows_a_token_through_the_layers_and_clears(app):
    at = app().run()
    at.number_input(key="spaced_k").set_value(2)
    at.number_input(key="spaced_token").set_value(10).run()
    assert_clean(at)
    figure = figures(at)[0]  # then the "Why this position" panel's two
    assert figure["layout"]["meta"]["highlight"] == [8, 9, 10, 11, 12]
    (rings,) = [trace for trace in figure["data"] if trace.get("name") == "highlighted tokens"]
    assert sorted(set(rings["customdata"])) == [8, 9, 10, 11, 12] and len(rings["customdata"]) == 5 * 3  # 3 layers
    at.button(key="spaced_clear").click().run()
    assert_clean(at)
    assert at.number_input(key="spaced_token").value is None
    assert figures(at)[0]["layout"]["meta"]["highlight"] == []
    assert at.button(key="spaced_clear").disabled

    at.number_input(key="spaced_token").set_value(5)
    at.slider(key=next(s.key for s in at.slider if s.key.startswith("spaced_window"))).set_value((20, 60)).run()
    assert_clean(at)  # the highlighted token left the window: said, not drawn
    assert any("Token 5 is outside the tokens shown (20..59)" in text for text in (c.value for c in at.caption))
    assert figures(at)[0]["layout"]["meta"]["highlight"] == []


def test_zoom_slider_sets_the_figure_x_range(app):
    at = app().run()
    at.slider(key="spaced_zoom").set_value((0.25, 0.5)).run()
    assert_clean(at)
    np.testing.assert_allclose(figures(at)[0]["layout"]["meta"]["x_range"], [0.25, 0.5])  # per layer: [0, 1] axis
    at.radio(key="spaced_scale").set_value("shared").run()
    (figure,) = figures(at)
    rows = [trace for trace in figure["data"] if str(trace.get("name", "")).startswith("L")]
    xs = np.concatenate([np.asarray(row["x"], dtype=float) for row in rows])
    low, high = np.nanmin(xs), np.nanmax(xs)  # shared: raw positions, the zoom a fraction of their span
    np.testing.assert_allclose(figure["layout"]["meta"]["x_range"],
                               [low + 0.25 * (high - low), low + 0.5 * (high - low)], rtol=1e-4)


def _parameters(directory) -> int:
    with safe_open(str(directory / "model.safetensors"), "np") as tensors:
        return sum(math.prod(tensors.get_slice(name).get_shape()) for name in tensors.keys())


def test_model_selector_shows_each_models_size(app, app_env):
    at = app().run()
    options = at.selectbox(key="model_a").options
    assert "tiny-repo" in options and "tiny-short" in options  # the box holds the name; the size goes below it
    megabytes = (app_env / "tiny-repo" / "model.safetensors").stat().st_size / 1e6
    n = _parameters(app_env / "tiny-repo")
    for name, size in (("tiny-repo", f"3×2 · ctx {CONTEXT:,} · {n / 1e3:.3g}K params · {megabytes:.1f} MB"),
                       ("tiny-short", f"2×2 · ctx {SHORT_CONTEXT}")):
        at.selectbox(key="model_a").set_value(str(app_env / name)).run()
        captions = [caption.value for caption in at.sidebar.caption]
        assert any(caption.startswith(size) and caption.endswith(f"in {app_env}") for caption in captions), captions


def test_niah_offers_only_lengths_that_fit_and_says_when_none_can(app, app_env):
    at = app().run()
    at.selectbox(key="input").set_value("NIAH").run()
    assert_clean(at)
    slider = at.select_slider[0]
    assert slider.options == ["128", "256", "512", "1024"] and slider.value == 512
    assert any(f"Up to {CONTEXT:,} tokens: tiny-repo's context" in c.value for c in at.sidebar.caption)

    at.selectbox(key="model_a").set_value(str(app_env / "tiny-short")).run()
    assert_clean(at)
    assert at.select_slider[0].options == ["128", "256"]
    warnings = messages(at, "warning")
    assert any("tiny-short cannot hold a NIAH prompt of this length" in text and "without any haystack" in text
               for text in warnings), warnings
    assert not figures(at) and not messages(at, "error")
    assert any("Nothing to show yet" in text for text in messages(at, "info"))


def test_beyond_the_context_offers_longer_niah_prompts_traced_and_measured_whole(app, app_env):
    at = app()
    at.session_state["model_a"] = str(app_env / "tiny-short")
    at.run()
    at.selectbox(key="input").set_value("NIAH").run()
    at.checkbox(key="niah_beyond").check().run()
    slider = at.select_slider[0]
    assert "512" in slider.options and "16384" in slider.options
    slider.set_value(512).run()
    assert_clean(at)
    assert any(f"Lengths over {SHORT_CONTEXT} tokens (tiny-short's context) are extrapolation" in c.value
               for c in at.sidebar.caption)
    (figure,) = figures(at)  # the spaced-token view draws all of the prompt, not the first 256 tokens
    assert not any("only the first" in text for text in messages(at, "warning"))
    assert any("it is traced whole (length extrapolation)" in text for text in messages(at, "info"))
    traced = int(re.search(r"([\d,]+) tokens", at.markdown[0].value).group(1).replace(",", ""))
    assert 450 < traced <= 512  # the whole prompt, not the first 256 tokens
    at.session_state["view"] = "Attention mass"
    at.run()
    assert_clean(at)
    assert any("length extrapolation" in text for text in (c.value for c in at.caption))
    assert "mass_beyond" not in [c.key for c in at.checkbox]  # one switch, in the sidebar
    metrics = [metric.label for metric in at.metric]
    assert any(label.startswith("needle (") for label in metrics), metrics


def test_reversal_offers_only_word_counts_whose_prompt_fits_the_context(app, app_env):
    from repo_lens.app.documents import REVERSAL_MAX_WORDS
    from repo_lens.data import reversal_prompt
    from repo_lens.model.byte_tokenizer import ByteTokenizer

    at = app()
    at.session_state["model_a"] = str(app_env / "tiny-short")
    at.run()
    at.selectbox(key="input").set_value("Reversal").run()
    assert_clean(at)
    (slider,) = [s for s in at.slider if s.label == "Words to reverse"]
    most = int(slider.max)
    # independent: the byte lengths of the prompts themselves
    assert len(reversal_prompt(ByteTokenizer(), most, 0).ids) <= SHORT_CONTEXT
    assert len(reversal_prompt(ByteTokenizer(), most + 1, 0).ids) > SHORT_CONTEXT
    assert most < REVERSAL_MAX_WORDS
    assert any(f"Up to {most} words" in c.value for c in at.sidebar.caption)
    slider.set_value(most).run()
    assert_clean(at)
    assert figures(at) and not any("only the first" in text for text in messages(at, "warning"))


def test_a_preset_longer_than_the_context_is_announced_before_tracing(app, app_env):
    at = app()
    at.session_state["model_a"] = str(app_env / "tiny-short")
    at.run()
    at.selectbox(key="input").set_value("Chinese").run()
    assert_clean(at)
    n_bytes = len(at.text_area(key="text_Chinese").value.encode("utf-8"))
    assert n_bytes > SHORT_CONTEXT
    assert any(f"the Chinese input is {n_bytes:,} tokens, more than the model's context ({SHORT_CONTEXT}); "
               f"only the first {SHORT_CONTEXT} are traced" in text for text in messages(at, "warning"))
    assert f"{SHORT_CONTEXT} tokens" in at.markdown[0].value


def test_compare_mode_stacks_full_width_plots_with_titles_below_the_modebar(app, app_env):
    at = app().run()
    at.toggle(key="compare").set_value(True).run()
    at.selectbox(key="model_b").set_value(str(app_env / "tiny-rope")).run()
    assert_clean(at)
    assert [header.value for header in at.subheader] == ["tiny-repo", "tiny-rope"]
    assert not [column for column in at.columns if column.get("plotly_chart")]  # no plot squeezed into a column
    for figure in figures(at):
        assert figure["layout"]["margin"]["t"] >= 80 and figure["layout"]["title"]["pad"]["t"] >= 30
        assert figure["layout"]["title"]["yref"] == "container"
    assert [b.label for b in at.get("download_button")].count("Download PNG") == 2


def test_an_unreadable_trace_upload_names_the_users_file_not_a_server_path(app):
    at = app().run()
    at.radio(key="mode").set_value("Open a saved trace").run()
    at.get("file_uploader")[0].set_value(("my run.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
                                          "application/octet-stream"))
    at.run()
    assert_clean(at)
    (error,) = messages(at, "error")
    assert "my run.safetensors" in error and "/tmp" not in error and "tmp" not in error.lower().replace("my run", "")


def test_a_highlighted_token_opens_why_this_position_with_its_attribution(app, app_env):
    """Highlighting a token opens the panel on the first learned layer and the view's head: its bars are the
    top components of position_attribution on the same model and tokens, its strip token_attribution's
    values up to the token; the gradient method adds its completeness error."""
    import repo_lens
    from repo_lens.analysis import position_attribution, token_attribution

    at = app().run()
    at.number_input(key="spaced_token").set_value(10).run()
    assert_clean(at)
    spaced, bars, strip = figures(at)[:3]  # then the "Why this attention" panel's (tests/app/test_app_score_view.py)
    assert [figure["layout"]["meta"]["kind"] for figure in (spaced, bars, strip)] == [
        "spaced_tokens", "position_attribution_bars", "token_attribution_strip"]
    lens = repo_lens.load(str(app_env / "tiny-repo"))
    ids = lens.trace(FREE_TEXT, progress=False).token_ids
    layer = next(box for box in at.selectbox if box.key.startswith("why_layer_"))
    assert layer.value == 1 and layer.options == ["L1", "L2"]  # layers 1-2 learn their positions
    expected = position_attribution(lens, ids, 1, heads=[0], tokens=[10]).top(0, 10, k=10)
    assert bars["data"][0]["y"][::-1] == [label for label, _ in expected]
    np.testing.assert_allclose(bars["data"][0]["x"][::-1], [value for _, value in expected], atol=1e-6)
    np.testing.assert_allclose(strip["data"][0]["z"][0], token_attribution(lens, ids, 1, 0, 10).values, atol=1e-6)

    layer.set_value(2)
    method = next(radio for radio in at.radio if radio.key.startswith("why_method_"))
    assert method.options == list(METHODS) and method.value == "path ablation (exact)"
    method.set_value("gradient × component").run()
    assert_clean(at)
    assert METHODS["gradient × component"] == "gradient"  # the method position_attribution runs for that choice
    gradient = position_attribution(lens, ids, 2, heads=[0], tokens=[10], method=METHODS["gradient × component"])
    assert figures(at)[1]["data"][0]["y"][::-1] == [label for label, _ in gradient.top(0, 10, k=10)]
    assert any(f"{float(gradient.completeness_error[0, 0]):+.3f}" in caption.value for caption in at.caption)
