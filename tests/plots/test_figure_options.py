"""The figure builders' keyword forms from before SpacedTokensStyle, ScatterStyle, HeatmapColors and PaperStyle
still draw the very same figure, with a DeprecationWarning that names the options object."""

from __future__ import annotations

import re

import numpy as np
import pytest

from repo_lens.plots import (DIVERGING, HeatmapColors, PaperStyle, ScatterStyle, SpacedTokensStyle, export,
                             layer_head_heatmap, position_scatter_figure, spaced_tokens_figure)
from repo_lens.trace import Trace


def make_trace() -> Trace:
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.uniform(0.2, 1.5, size=(3, 2, 40)), axis=-1).astype(np.float32)
    return Trace(tokens=[chr(97 + index % 26) for index in range(40)], token_ids=np.arange(40), positions=z,
                 layer_kinds=["rope", "repo", "repo"])


def test_spaced_tokens_keywords_become_its_style():
    trace = make_trace()
    new = spaced_tokens_figure(trace, head=1, scale="shared", style=SpacedTokensStyle(
        title="bytes", x_range=(2.0, 30.0), chunk_size=8, connect=False, max_tokens=30, label_limit=5, width=500,
        font_size=10, max_connectors=4))
    with pytest.warns(DeprecationWarning, match=r"pass style=SpacedTokensStyle\(title=..., x_range=..., chunk_size="):
        old = spaced_tokens_figure(trace, head=1, scale="shared", title="bytes", x_range=(2.0, 30.0), chunk_size=8,
                                   connect=False, max_tokens=30, label_limit=5, width=500, font_size=10,
                                   max_connectors=4)
    assert old.to_json() == new.to_json()
    assert new.layout.width == 500 and new.layout.meta["label_limit"] == 5 and new.layout.meta["sampled"]


def test_scatter_keywords_become_its_style():
    trace = make_trace()
    new = position_scatter_figure(trace, 2, "all", style=ScatterStyle(title="z", k=0.5, max_points=10,
                                                                      max_total_points=12, context=2, width=480))
    with pytest.warns(DeprecationWarning, match=r"position_scatter_figure\(title=..., k=..., max_points=..., "):
        old = position_scatter_figure(trace, 2, "all", title="z", k=0.5, max_points=10, max_total_points=12,
                                      context=2, width=480)
    assert old.to_json() == new.to_json()
    assert sum(len(d.x) for d in new.data) <= 12 and new.layout.title.text == "z"


def test_heatmap_keywords_become_its_colors():
    values = np.array([[-1.0, 0.5], [2.0, 0.0]])
    new = layer_head_heatmap(values, title="t", colorbar_title="Δ",
                             colors=HeatmapColors(colorscale=DIVERGING, zmin=-2.0, zmax=2.0, zmid=0.0))
    with pytest.warns(DeprecationWarning, match=r"pass colors=HeatmapColors\(colorscale=..., zmin=..., zmax=..., "
                                                r"zmid=...\) instead"):
        old = layer_head_heatmap(values, title="t", colorbar_title="Δ", colorscale=DIVERGING, zmin=-2.0, zmax=2.0,
                                 zmid=0.0)
    assert old.to_json() == new.to_json()
    assert (new.data[0].zmin, new.data[0].zmax, new.data[0].zmid) == (-2.0, 2.0, 0.0)


def test_export_keywords_become_its_paper_style(tmp_path):
    figure = layer_head_heatmap(np.eye(2), title="t", colorbar_title="d")
    new = export(figure, tmp_path / "new.html", layout="icml-column", paper=PaperStyle(aspect=0.5, font_pt=9))
    with pytest.warns(DeprecationWarning, match=r"export\(aspect=..., font_pt=...\) is deprecated"):
        old = export(figure, tmp_path / "old.html", layout="icml-column", aspect=0.5, font_pt=9)

    def without_ids(path):  # plotly names each figure's div with a fresh uuid
        return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", path.read_text())

    assert without_ids(old) == without_ids(new)
    assert '"width":312' in without_ids(new).replace(" ", "")  # 3.25 in at 96 px per inch
