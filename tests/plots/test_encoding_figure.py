"""The figure of what the positions encode: one layer × head heatmap per share of
repo_lens.analysis.position_variance_shares, on one 0-1 scale."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis import position_variance_shares
from repo_lens.errors import InputError
from repo_lens.plots import variance_shares_figure
from repo_lens.plots.encoding import overall_shares


def _shares(span: bool):
    rng = np.random.default_rng(0)
    t = np.arange(200.0)
    classes = rng.choice(["digit", "other"], size=200)
    z = np.stack([np.broadcast_to(t, (3, 200)),  # a RoPE-like layer
                  np.stack([np.where(classes == "digit", 2.0, 0.0), rng.normal(size=200), np.full(200, 3.0)])])
    z[1, 1, 90:100] += 5.0
    return position_variance_shares(z, classes, spans=(90, 100) if span else None, span_name="needle")


def test_one_panel_per_share_with_the_span_named_and_a_shared_scale():
    shares = _shares(span=True)
    fig = variance_shares_figure(shares, ["rope", "repo"])
    assert [trace.name for trace in fig.data] == ["index", "content", "needle", "rest"]
    assert {trace.coloraxis for trace in fig.data} == {"coloraxis"}
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    assert list(fig.data[0].y) == ["L0 rope", "L1 repo"] and list(fig.data[0].x) == ["h0", "h1", "h2"]
    np.testing.assert_allclose(fig.data[0].z[0], 1.0)
    assert np.isnan(fig.data[0].z[1][2])  # a constant head: an empty cell
    np.testing.assert_allclose(sum(np.asarray(trace.z, dtype=float) for trace in fig.data)[:, :2], 1.0, atol=1e-9)
    titles = [annotation.text for annotation in fig.layout.annotations]
    assert titles[0].startswith("index (line R²): ") and titles[2].startswith("needle: ")
    assert "200 tokens of 1 text" in fig.layout.title.text and fig.layout.meta["kind"] == "variance_shares"


def test_without_a_span_three_panels_and_the_overall_shares_weigh_heads_by_their_variance():
    shares = _shares(span=False)
    assert [trace.name for trace in variance_shares_figure(shares).data] == ["index", "content", "rest"]
    overall = overall_shares(shares)
    assert set(overall) == {"index", "content", "rest"} and sum(overall.values()) == pytest.approx(1.0)
    weight = np.nan_to_num(shares.variance * np.isfinite(shares.index))
    assert overall["index"] == pytest.approx(np.nansum(shares.index * weight) / weight.sum())


def test_bad_inputs_are_refused_with_what_to_pass():
    with pytest.raises(InputError, match="VarianceShares"):
        variance_shares_figure(np.zeros((2, 2)))
    with pytest.raises(InputError, match="one kind"):
        variance_shares_figure(_shares(span=False), ["rope"])
