"""A Trace shows itself in a notebook (short repr, HTML summary, Trace.plot), and figures in Jupyter
are responsive, in one template, and carry a static PNG beside the interactive view
(repo_lens.plots.notebook_setup)."""

from __future__ import annotations

import base64
import re
import subprocess
import sys

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

import repo_lens
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model
from repo_lens.plots import STATIC_RENDERER, TRACE_FIGURE_KINDS, export_unavailable, notebook_setup
from repo_lens.trace import Trace

TEXT = "Positions are learned, not counted. 位置是学出来的。"


@pytest.fixture(scope="module")
def trace():
    lens = repo_lens.Lens(tiny_model("repo"), ByteTokenizer(), {"name": "tiny-repo"})
    return lens.trace(TEXT)


@pytest.fixture
def renderer():
    """Restore plotly's renderer and template after a test changes them."""
    before, template = pio.renderers.default, pio.templates.default
    yield
    pio.renderers.default, pio.templates.default = before, template


def test_a_lens_names_its_layer_kinds_as_its_traces_do(trace):
    lens = repo_lens.Lens(tiny_model("repo"), ByteTokenizer())
    assert lens.layer_kinds == trace.layer_kinds and len(lens.layer_kinds) == lens.n_layers


def test_repr_is_one_short_line_with_model_size_and_kinds(trace):
    text = repr(trace)
    assert "\n" not in text and len(text) < 160
    assert text.startswith("Trace('tiny-repo', ")
    assert f"{len(trace)} tokens 'Positions␣are" in text
    assert f"{trace.n_layers} layers × {trace.n_heads} heads" in text
    kinds = trace.layer_kinds
    assert text.endswith(f"{kinds[0]} ×{kinds.count(kinds[0])}, {kinds[-1]} ×{kinds.count(kinds[-1])})")


def test_repr_stays_short_for_a_long_trace():
    long = Trace(tokens=["x"] * 5000, token_ids=np.zeros(5000, dtype=np.int64), layer_kinds=["rope"] * 16,
                 positions=np.zeros((16, 16, 5000), dtype=np.float32))
    assert len(repr(long)) < 160 and "5000 tokens 'xxx" in repr(long) and "…'" in repr(long)
    assert "unnamed model" in repr(long) and "rope ×16" in repr(long)


def test_html_summary_has_model_tokens_shape_and_a_row_per_layer(trace):
    page = trace._repr_html_()
    assert "tiny-repo" in page and f"{len(trace)} tokens" in page
    assert f"{trace.n_layers} layers × {trace.n_heads} heads" in page
    rows = re.findall(r"<tr><td[^>]*>(\d+)</td><td[^>]*>(\w+)</td>", page)
    assert rows == [(str(layer), kind) for layer, kind in enumerate(trace.layer_kinds)]
    ranges = trace.layer_ranges()
    first = re.search(r"<tr><td[^>]*>0</td>(.*?)</tr>", page).group(1)
    cells = [float(value) for value in re.findall(r">([-\d.e+]+)</td>", first)]
    np.testing.assert_allclose(cells, [ranges[name][0] for name in
                                       ("min", "max", "range_min", "range_mean", "range_max")], rtol=1e-3)


def test_html_escapes_tokens_and_shows_spans_and_warnings():
    t = Trace(tokens=["<b>", "&", "x"], token_ids=[1, 2, 3], layer_kinds=["rope"],
              positions=np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32), spans={"needle": (1, 2)},
              meta={"name": "<script>", "warnings": ["positions <NaN>"]})
    page = t._repr_html_()
    assert "<b>&amp;" not in page and "&lt;b&gt;&amp;x" in page and "&lt;script&gt;" in page
    assert "needle 1–2" in page and "positions &lt;NaN&gt;" in page


def test_layer_ranges_match_the_positions(trace):
    ranges = trace.layer_ranges()
    per_head = trace.positions.max(axis=2) - trace.positions.min(axis=2)
    np.testing.assert_allclose(ranges["range_mean"], per_head.mean(axis=1))
    np.testing.assert_allclose(ranges["min"], trace.positions.min(axis=(1, 2)))
    rope = trace.layer_kinds.index("rope")
    assert ranges["range_max"][rope] == len(trace) - 1  # RoPE: 0..T-1 in every head


@pytest.mark.parametrize("kind", TRACE_FIGURE_KINDS)
def test_plot_draws_every_kind(trace, kind):
    fig = trace.plot(kind)
    assert isinstance(fig, go.Figure) and fig.data


def test_plot_passes_options_and_refuses_unknown_kinds(trace):
    last = trace.plot("scatter", head="all")
    assert len([d for d in last.data if d.name and d.name.startswith("h")]) >= trace.n_heads
    with pytest.raises(InputError, match="unknown figure kind 'heatmap'.*'spaced', 'scatter'"):
        trace.plot("heatmap")
    with pytest.raises(InputError, match="takes no options"):
        trace.plot("ranges", layer=1)


def test_importing_trace_does_not_import_plotly():
    code = "import repo_lens.trace, sys; print('plotly' in sys.modules, 'repo_lens.plots' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_notebook_setup_makes_plotlys_interactive_renderer_responsive(renderer):
    for default in ("plotly_mimetype", "vscode+png", "jupyterlab+plotly_mimetype", None):
        pio.renderers.default = default
        assert notebook_setup(static_images=False) == "repo_lens_plotly", default
    pio.renderers.default = "notebook_connected"  # a front end that writes its own HTML keeps it
    assert notebook_setup(static_images=False) == "notebook_connected"
    pio.renderers.default = "plotly_mimetype"
    notebook_setup(static_images=False)
    bundle = go.Figure(go.Bar(y=[1, 3, 2]), layout={"width": 1100, "height": 300})._repr_mimebundle_()
    spec = bundle["application/vnd.plotly.v1+json"]
    # no fixed width: the chart takes the output area's; the height stays the figure's
    assert "width" not in spec["layout"] and spec["layout"]["height"] == 300 and spec["layout"]["autosize"]
    assert spec["config"]["responsive"] is True


def test_figures_made_after_setup_share_the_builders_template(renderer):
    from repo_lens.plots import OKABE_ITO, range_heatmap

    notebook_setup(static_images=False)
    plain = go.Figure(go.Bar(y=[1, 2])).to_dict()["layout"]["template"]["layout"]
    built = range_heatmap(np.ones((2, 2)), ["rope", "repo"]).to_dict()["layout"]
    # plotly's own default draws on grey (#E5ECF6); the builders' template draws on white, in their font and colours
    assert plain["plot_bgcolor"] == built["template"]["layout"]["plot_bgcolor"] == "white"
    assert plain["font"]["family"] == built["font"]["family"] and plain["colorway"] == list(OKABE_ITO)


@pytest.mark.browser
@pytest.mark.skipif(export_unavailable() is not None, reason="needs Chromium (make browser)")
def test_figures_carry_an_interactive_view_and_a_png(renderer):
    pio.renderers.default = "plotly_mimetype"
    assert notebook_setup() == f"repo_lens_plotly+{STATIC_RENDERER}"
    assert notebook_setup() == f"repo_lens_plotly+{STATIC_RENDERER}"  # idempotent
    bundle = go.Figure(go.Bar(y=[1, 3, 2]), layout={"width": 640, "height": 320})._repr_mimebundle_()
    # image/png beside the interactive figure: what GitHub, VS Code's static view and nbconvert show
    assert sorted(bundle) == ["application/vnd.plotly.v1+json", "image/png"]
    png = base64.b64decode(bundle["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 640 and int.from_bytes(png[20:24], "big") == 320  # the figure's size


def test_a_front_ends_own_html_is_kept_beside_the_static_image(renderer, monkeypatch):
    monkeypatch.setattr("repo_lens.plots.notebook.export_unavailable", lambda: None)
    monkeypatch.setattr("repo_lens.plots.notebook.start_export_server", lambda: None)
    monkeypatch.setattr("repo_lens.plots.notebook.figure_bytes", lambda *args, **kwargs: b"png")
    pio.renderers.default = "notebook_connected"
    assert notebook_setup() == f"notebook_connected+{STATIC_RENDERER}"
    bundle = pio.renderers._build_mime_bundle(go.Figure().to_dict(), pio.renderers.default)
    assert "plotly" in bundle["text/html"].lower() and base64.b64decode(bundle["image/png"]) == b"png"


def test_without_chromium_figures_stay_interactive_with_a_warning(renderer, monkeypatch):
    monkeypatch.setattr("repo_lens.plots.notebook.export_unavailable", lambda: "no Chromium on PATH")
    pio.renderers.default = "plotly_mimetype"
    with pytest.warns(UserWarning, match="interactive only.*no Chromium"):
        assert notebook_setup() == "repo_lens_plotly"


def test_a_failed_png_leaves_the_interactive_view(monkeypatch):
    from repo_lens.plots import ExportError
    from repo_lens.plots.notebook import StaticPngRenderer

    def fail(*args, **kwargs):
        raise ExportError("the Chromium renderer stopped")

    monkeypatch.setattr("repo_lens.plots.notebook.figure_bytes", fail)
    with pytest.warns(UserWarning, match="no static image.*stopped"):
        assert StaticPngRenderer().to_mimebundle(go.Figure().to_dict()) == {}



def test_the_held_out_text_of_the_notebooks_is_public(monkeypatch):
    """repo_lens.data.bilingual_splits / held_out_chinese_sentences: the zoo's text split by document."""
    from repo_lens.data import bilingual_splits, held_out_chinese_sentences, parse_peoples_daily
    from repo_lens.data.bilingual import is_validation
    from repo_lens.data.brown import Document

    names = [f"c{letter}{number:02d}" for letter in "abcdefghij" for number in range(1, 40)]
    documents = [Document(name, f"text of {name}.") for name in names]
    paragraphs = parse_peoples_daily([f"段落/n  {index}/m  。/w" for index in range(200)])
    monkeypatch.setattr("repo_lens.data.bilingual.brown_documents", lambda cache=None: documents)
    monkeypatch.setattr("repo_lens.data.bilingual.peoples_daily", lambda cache=None: paragraphs)
    splits = bilingual_splits()
    train, validation = splits["en"]
    assert validation == [f"text of {name}." for name in sorted(names) if is_validation(name)] and validation
    assert len(train) + len(validation) == len(names)
    held_out = held_out_chinese_sentences()
    assert held_out and {s.text for s in held_out} <= {p for text in splits["zh"][1] for p in text.split("\n")}
    assert not {s.text for s in held_out} & {p for text in splits["zh"][0] for p in text.split("\n")}
