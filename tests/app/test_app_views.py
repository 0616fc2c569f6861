"""Every view and control path of the Streamlit app, through streamlit.testing.v1.AppTest."""

from __future__ import annotations

import numpy as np
import pytest

import repo_lens
from app_helpers import app, app_env, assert_clean, checkpoint_root, figures, messages  # noqa: F401  (fixtures)
from repo_lens.trace import Trace

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def open_view(at, view: str):
    """Select a tab before the first run (AppTest has no tab widget to click, and a session-state
    change after widget interactions is overridden by the tab's own widget state)."""
    at.session_state["view"] = view
    return at.run()


def layer_rows(figure: dict) -> dict[str, dict]:
    return {trace["name"]: trace for trace in figure["data"] if trace.get("name", "").startswith("L")}


def test_every_registered_view_renders_and_the_tabs_are_the_registry(app):
    from repo_lens.app.views import VIEWS

    names = [view.name for view in VIEWS]
    assert len(set(names)) == len(names)
    for view in VIEWS:
        at = open_view(app(), view.name)
        if view.preset:
            at.selectbox(key="input").set_value(view.preset).run()
        assert_clean(at)
        assert [tab.label for tab in at.tabs] == names
        assert not messages(at, "error"), (view.name, messages(at, "error"))
        assert figures(at) or len(at.dataframe), f"{view.name} rendered neither a figure nor a table"


def test_default_model_opens_on_the_spaced_token_view(app):
    at = app().run()
    assert_clean(at)
    assert not messages(at, "error")
    assert "tiny-repo" in at.markdown[0].value and "3 layers (rope/repo)" in at.markdown[0].value
    (figure,) = figures(at)
    rows = layer_rows(figure)
    assert list(rows) == ["L0 rope", "L1 repo", "L2 repo"]
    n = len(rows["L0 rope"]["x"])
    np.testing.assert_allclose(rows["L0 rope"]["x"], np.arange(n) / (n - 1))  # RoPE, each row scaled to [0, 1]
    assert "".join(rows["L0 rope"]["text"]).startswith("Marie␣Curie")
    assert len(at.get("download_button")) == 4  # PNG, SVG, PDF, HTML

    at.radio(key="spaced_scale").set_value("shared")
    at.selectbox(key="spaced_head").set_value("mean")
    at.run()
    rows = layer_rows(figures(at)[0])
    np.testing.assert_allclose(rows["L0 rope"]["x"], np.arange(n))  # raw positions on a shared axis
    assert "mean of heads" in figures(at)[0]["layout"]["title"]["text"]


def test_a_model_whose_layers_all_span_the_text_opens_on_the_shared_scale(app, monkeypatch, checkpoint_root):
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(checkpoint_root / "tiny-rope"))
    at = app().run()
    assert_clean(at)
    assert at.radio(key="spaced_scale").value == "shared"  # every layer's range is the text's length
    rows = layer_rows(figures(at)[0])
    n = len(rows["L0 rope"]["x"])
    np.testing.assert_allclose(rows["L0 rope"]["x"], np.arange(n))
    at.radio(key="spaced_scale").set_value("per layer").run()  # the user's pick is kept
    np.testing.assert_allclose(layer_rows(figures(at)[0])["L0 rope"]["x"], np.arange(n) / (n - 1))


def test_changing_layer_or_head_rerenders_without_a_forward_pass(app, monkeypatch):
    from repo_lens.lens import Lens

    calls = []
    original = Lens.trace

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Lens, "trace", counting)
    at = app()
    at.session_state["view"] = "Scatter"
    at.run()
    calls.clear()  # the default text's trace, which an earlier test in this process may have cached already
    at.text_area(key="text_Free text").input("A text only this test traces: layer changes must not re-trace it.").run()
    assert_clean(at)
    assert len(calls) == 1
    for layer, head in ((0, "all"), (2, "1"), (1, "mean")):
        at.selectbox(key="scatter_layer").set_value(layer)
        at.selectbox(key="scatter_head").set_value(head)
        at.radio(key="scatter_view").set_value("global")
        at.run()
        assert_clean(at)
        (figure,) = figures(at)
        assert figure["layout"]["meta"]["layer"] == layer
    assert len(calls) == 1
    assert figure["layout"]["meta"]["head"] == "mean" and figure["data"][0]["name"] == "mean of heads"


def test_scatter_focus_view_clips_outliers_and_shades_spans(app):
    at = app()
    at.session_state["view"] = "Scatter"
    at.run()
    at.selectbox(key="input").set_value("Few-shot").run()
    assert_clean(at)
    (figure,) = figures(at)
    assert figure["layout"]["meta"]["view"] == "focus"
    shaded = [shape for shape in figure["layout"]["shapes"] if shape["type"] == "rect"]
    assert len(shaded) >= 2  # query and answer
    assert {trace["name"] for trace in figure["data"]} >= {"head 0", "head 1"}


def test_heatmap_view_shows_ranges_patterns_and_the_chunk_strip(app):
    at = open_view(app(), "Heatmaps")
    assert_clean(at)
    ranges, fractions, strip = figures(at)
    n_tokens = int(at.markdown[0].value.split("—")[1].split("tokens")[0].replace(",", ""))
    assert ranges["data"][0]["z"][0] == [n_tokens - 1] * 2  # the RoPE layer spans 0..T-1 in both heads
    assert [trace["name"] for trace in fractions["data"]] == ["constant", "mono", "hybrid"]
    assert len(strip["data"][0]["z"][0]) == n_tokens // 16
    assert {b.label for b in at.get("download_button")} >= {"Ranges (CSV)", "Pattern fractions (CSV)"}

    at.number_input(key="chunk_size").set_value(512).run()  # longer than the text: a message, not a traceback
    assert_clean(at)
    assert any("shorter than one chunk" in text for text in messages(at, "error"))


def test_niah_attention_mass_view(app):
    at = app()
    at.session_state["view"] = "Attention mass"
    at.run()
    assert any("NIAH" in text for text in messages(at, "info"))
    at.selectbox(key="input").set_value("NIAH").run()
    assert_clean(at)
    assert not messages(at, "error")
    assert [m.label.split()[0] for m in at.metric] == ["needle", "query", "rest"]
    bars, by_layer = figures(at)
    assert bars["data"][0]["x"] == ["needle", "query", "rest"]
    assert all(value > 0 for value in bars["data"][0]["y"])
    assert by_layer["layout"]["xaxis"]["title"]["text"] == "layer"


def test_chinese_word_boundary_view(app):
    at = app()
    at.session_state["view"] = "Word boundaries"
    at.run()
    assert any("Chinese" in text for text in messages(at, "error"))  # the default English text: a message
    at.selectbox(key="input").set_value("Chinese").run()
    assert_clean(at)
    (figure,) = figures(at)
    auc = np.asarray(figure["data"][0]["z"], dtype=float)
    assert auc.shape == (3, 2)
    np.testing.assert_allclose(auc[0], 0.5)  # RoPE increments are all 1: chance
    assert "scored gaps" in figure["layout"]["title"]["text"]


def test_trace_and_data_view_offers_trace_and_csv_downloads(app):
    at = open_view(app(), "Trace & data")
    assert_clean(at)
    labels = {button.label for button in at.get("download_button")}
    assert {"Trace (.safetensors)", "Positions (CSV, every layer and head)"} <= labels
    assert len(at.dataframe) == 1


def test_compare_two_models_side_by_side(app, app_env):
    at = app().run()
    at.toggle(key="compare").set_value(True).run()
    at.selectbox(key="model_b").set_value(str(app_env / "tiny-rope")).run()
    assert_clean(at)
    assert "tiny-repo" in at.markdown[0].value and "tiny-rope" in at.markdown[0].value
    first, second = figures(at)
    assert list(layer_rows(first)) == ["L0 rope", "L1 repo", "L2 repo"]
    assert list(layer_rows(second)) == ["L0 rope", "L1 rope", "L2 rope"]
    at = app()
    at.session_state["compare"] = True
    at.session_state["model_b"] = str(app_env / "tiny-rope")
    open_view(at, "Scatter")
    assert_clean(at)
    assert [figure["layout"]["meta"]["kind"] for figure in figures(at)] == ["scatter", "scatter"]


@pytest.mark.parametrize("path, message", [
    ("/etc", "outside the directories"),
    ("relative/dir", "relative path"),
    ("{root}/not-a-checkpoint", "not a checkpoint directory"),
    ("{root}/missing", "no directory"),
    ("{root}/tiny-\x00rope", "holds a NUL character"),  # not Path.resolve's "embedded null byte"
    ("{root}/" + "x" * 300, "cannot be read as a checkpoint directory (File name too long)"),
])
def test_bad_checkpoint_paths_are_refused_with_a_message(app, app_env, path, message):
    at = app().run()
    at.selectbox(key="model_a").set_value("Other directory…").run()
    at.text_input(key="model_a_path").input(path.format(root=app_env)).run()
    assert_clean(at)
    assert any(message in text for text in messages(at, "error")), messages(at, "error")
    assert not figures(at)


def test_a_checkpoint_linked_inside_a_root_is_offered_once_under_its_real_path(app, app_env, tmp_path, monkeypatch):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(app_env / "tiny-rope", root / "runs" / "tiny-rope")
    (root / "latest").symlink_to(root / "runs" / "tiny-rope", target_is_directory=True)
    real = (root / "runs" / "tiny-rope").resolve()
    monkeypatch.setenv("REPO_LENS_APP_ROOTS", str(root))
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", str(root / "latest"))  # by its link: shown by its real path
    at = app().run()
    assert_clean(at)
    options = at.selectbox(key="model_a").options
    # the checkpoint once, "Other directory…" and "Hugging Face Hub id…"
    assert len(options) == 3 and options[1:] == ["Other directory…", "Hugging Face Hub id…"]
    assert at.selectbox(key="model_a").value == str(real) and "latest" not in " ".join(options)


def test_local_checkpoint_by_path(app, app_env):
    at = app().run()
    at.selectbox(key="model_a").set_value("Other directory…").run()
    at.text_input(key="model_a_path").input(str(app_env / "tiny-rope")).run()
    assert_clean(at)
    assert "tiny-rope" in at.markdown[0].value and len(figures(at)) == 1


def test_no_model_configured_explains_what_to_do(app, monkeypatch):
    monkeypatch.delenv("REPO_LENS_APP_ROOTS")
    monkeypatch.delenv("REPO_LENS_APP_DEFAULT_MODEL")
    at = app().run()
    assert_clean(at)
    assert any("REPO_LENS_APP_ROOTS" in text for text in messages(at, "warning"))
    assert not figures(at)


def test_without_the_smollm2_base_the_app_opens_on_the_1k_repo_zoo_model(app, monkeypatch):
    """With the base's GGUF installed it opens on zoo:smollm2-135m-grape (test_browser_default_model.py)."""
    import repo_lens.zoo
    from repo_lens.app import cache

    monkeypatch.undo()  # the real zoo, no roots, no default model: what `make app` starts with
    monkeypatch.delenv("REPO_LENS_APP_DEFAULT_MODEL", raising=False)
    monkeypatch.delenv("REPO_LENS_APP_ROOTS", raising=False)
    monkeypatch.setattr(repo_lens.zoo, "base_installed", lambda name: not name.startswith("smollm2"))
    cache.get_model_sources.clear()
    at = app().run(timeout=180)
    assert_clean(at)
    assert at.selectbox(key="model_a").value == "zoo:bytes1k-repo"
    assert "bytes1k-repo" in at.markdown[0].value and len(figures(at)) == 1
    assert at.radio(key="spaced_scale").value == "per layer"  # RePo's ranges beside RoPE's
    cache.get_model_sources.clear()


def test_default_model_outside_the_roots_is_refused(app, monkeypatch):
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", "/usr")
    at = app().run()
    assert_clean(at)
    assert any("outside the directories" in text for text in messages(at, "error"))
    assert any("Pick a model" in text for text in messages(at, "info"))


def test_uploaded_text_file(app):
    at = app().run()
    at.selectbox(key="input").set_value("Upload text file").run()
    assert any("Upload a text file" in text for text in messages(at, "info"))
    at.get("file_uploader")[0].set_value(("notes.txt", "Uploaded words, placed by position.".encode(), "text/plain"))
    at.run()
    assert_clean(at)
    assert "Uploaded" in "".join(layer_rows(figures(at)[0])["L0 rope"]["text"])
    uploader = at.get("file_uploader")[0]
    # one limit, stated once: by the widget ("Limit 1MB per file"), not again (and differently) in the label
    assert uploader.proto.max_upload_size_mb == 1 and not any(unit in uploader.proto.label for unit in ("kB", "MB"))
    at.get("file_uploader")[0].set_value(("big.txt", b"x" * (2**20 + 1), "text/plain"))
    at.run()
    assert any("big.txt is 1,048,577 bytes" in text and "at most 1 MB (1,048,576 bytes)" in text
               for text in messages(at, "info"))
    at.get("file_uploader")[0].set_value(("binary.txt", b"\xff\xfe\x00bad", "text/plain"))
    at.run()
    assert_clean(at)
    assert any("not UTF-8" in text for text in messages(at, "info"))


def test_long_input_is_truncated_with_a_notice_or_refused(app):
    at = app().run()
    long_text = "The haystack goes on and on. " * 50  # 1,450 bytes > the 1,024-token context
    at.text_area(key="text_Free text").input(long_text).run()
    assert_clean(at)
    assert any("1,450 tokens, more than the model's context (1,024); only the first 1,024 are traced" in text
               for text in messages(at, "warning"))
    assert "1,024 tokens" in at.markdown[0].value
    at.checkbox(key="truncate").uncheck().run()  # said before tracing, and nothing is traced
    assert_clean(at)
    assert any("longer than the model's context (1,024); shorten it" in text for text in messages(at, "warning"))
    assert not figures(at) and not messages(at, "error")
    at.text_area(key="text_Free text").input("   ").run()
    assert any("the text is empty" in text for text in messages(at, "error"))


def _trace_file(tmp_path, trace: Trace) -> bytes:
    return trace.save(tmp_path / "t.safetensors").read_bytes()


def test_saved_trace_without_a_model(app, app_env, tmp_path):
    from repo_lens.app.documents import encode_text, trace_document  # the app's own helpers

    lens = repo_lens.load(app_env / "tiny-repo")
    doc = encode_text(lens.tokenizer, "Chinese", "人工智能是计算机科学的一个分支。它企图了解智能的实质。")
    data = _trace_file(tmp_path, trace_document(lens, doc, truncate=False))
    at = app().run()
    at.radio(key="mode").set_value("Open a saved trace").run()
    assert any("Upload a trace file" in text for text in messages(at, "info"))
    for view, kind in (("Spaced tokens", "spaced_tokens"), ("Word boundaries", None), ("Attention mass", "")):
        at = app()
        at.session_state["mode"] = "Open a saved trace"
        open_view(at, view)
        at.get("file_uploader")[0].set_value(("zh.safetensors", data, "application/octet-stream"))
        at.run()
        assert_clean(at)
        assert not messages(at, "error")
        assert at.markdown[0].value.startswith("**tiny-repo**")
        if kind == "":
            assert not figures(at) and any("NIAH" in text for text in messages(at, "info"))
        elif kind is None:  # the text and its offsets travel inside the trace
            assert figures(at)[0]["layout"]["title"]["text"].startswith("Chinese word-boundary AUC")
        else:
            assert figures(at)[0]["layout"]["meta"]["kind"] == kind


def test_a_file_that_is_no_trace_gives_a_message(app):
    at = app().run()
    at.radio(key="mode").set_value("Open a saved trace").run()
    at.get("file_uploader")[0].set_value(("bad.safetensors", b"this is not a trace", "application/octet-stream"))
    at.run()
    assert_clean(at)
    assert any("not a readable repo_lens trace" in text for text in messages(at, "error"))


def test_nonfinite_positions_are_flagged_and_plots_still_render(app, tmp_path):
    z = np.tile(np.arange(40, dtype=np.float32), (2, 2, 1))
    z[1, 0, 5] = np.nan
    z[1, 1, 7] = np.inf
    meta = {"name": "broken", "warnings": [], "truncation": None}  # unflagged: Trace.load flags it
    trace = Trace(tokens=list("abcdefghij" * 4), token_ids=np.arange(40) % 250, positions=z,
                  layer_kinds=["rope", "repo"], meta=meta)
    data = _trace_file(tmp_path, trace)

    def opened(view: str):
        at = app()
        at.session_state["mode"] = "Open a saved trace"
        at.session_state["scatter_layer"] = 1
        open_view(at, view)
        at.get("file_uploader")[0].set_value(("broken.safetensors", data, "application/octet-stream"))
        at.run()
        assert_clean(at)
        assert any("NaN or infinite positions (2 values on 2 tokens) in 2 heads" in text
                   for text in messages(at, "error"))
        return at

    assert len(figures(opened("Spaced tokens"))) == 1
    assert "2 non-finite positions not shown" in figures(opened("Scatter"))[0]["layout"]["title"]["text"]
    at = opened("Heatmaps")
    assert any("Range statistics" in text and "inf" in text.lower() for text in messages(at, "error"))


def test_fits_says_before_tracing_whether_an_input_can_be_traced(app_env):
    """page.fits, outside a running app: True for an input within the context, and beyond it only when truncation
    is on (the 1,450-byte text above against the 1,024-token context)."""
    from repo_lens.app.page import fits
    from repo_lens.app.sidebar import MODE_MODEL, Selection

    source = str(app_env / "tiny-repo")

    def fit(text: str, truncate: bool) -> bool:
        selection = Selection(mode=MODE_MODEL, sources=[source], text=text, truncate=truncate)
        return fits("tiny-repo", source, 0.0, selection)

    long_text = "The haystack goes on and on. " * 50
    assert fit("The haystack.", truncate=False) and fit("x" * 1024, truncate=False)
    assert fit(long_text, truncate=True) and not fit(long_text, truncate=False)


@pytest.mark.slow
def test_the_learned_increments_posts_model_is_offered_and_spaced_by_its_increments(app, monkeypatch):
    """The zoo's models of "Learned position increments" (per-layer and shared δ) in the model box, the per-layer one
    and its spaced-tokens rows at the positions its own learned increments give (layer 0: Σ δ)."""
    import repo_lens.zoo as zoo
    from repo_lens.analysis import trace_increments
    from repo_lens.zoo import ZOO_DIR

    monkeypatch.undo()  # the real zoo, not the app fixtures' empty one
    monkeypatch.setattr(zoo, "ZOO_DIR", ZOO_DIR)
    monkeypatch.setenv("REPO_LENS_APP_DEFAULT_MODEL", "zoo:bytes-post-lpi-resid")
    from streamlit.testing.v1 import AppTest

    from app_helpers import APP

    at = AppTest.from_file(str(APP), default_timeout=300).run()
    assert_clean(at)
    assert not messages(at, "error")
    assert {"zoo:bytes-post-lpi-resid", "zoo:bytes-post-lpi"} <= set(at.selectbox(key="model_a").options)
    assert at.selectbox(key="model_a").value == "zoo:bytes-post-lpi-resid"
    rows = layer_rows(figures(at)[0])
    assert list(rows) == [f"L{layer} lpi-resid" for layer in range(6)]
    text = "".join(rows["L0 lpi-resid"]["text"]).replace("␣", " ")
    lens = repo_lens.load("zoo:bytes-post-lpi-resid", device="cpu")
    trace = lens.trace(text)
    positions = np.asarray(trace.positions[0, 0], dtype=np.float64)  # layer 0, head 0: the running sum of its δ
    np.testing.assert_allclose(np.diff(positions), trace_increments(trace)[0, 0, 1:], rtol=1e-4)
    if at.radio(key="spaced_scale").value != "shared":  # every row within 10x of the others opens on one axis
        positions = (positions - positions.min()) / (positions.max() - positions.min())
    np.testing.assert_allclose(rows["L0 lpi-resid"]["x"], positions, rtol=1e-4, atol=1e-5)
