"""The dot-and-whisker chart of estimates with intervals."""

from __future__ import annotations

import math

import pytest

from repo_lens import InputError
from repo_lens.interventions import stats
from repo_lens.plots import interval_figure


def test_markers_sit_at_the_estimates_and_whiskers_reach_the_interval_ends():
    rates = {"constant": [stats.accuracy([1, 1, 0, 0, 0]), stats.accuracy([1] * 9 + [0])],
             "affine": [stats.accuracy([0] * 10), stats.accuracy([1] * 10)]}
    fig = interval_figure(rates, ["L2 h0", "L2 h3"], "accuracy", "t", reference=0.75, reference_label="unedited")
    for trace, entries in zip(fig.data, rates.values()):
        for x, plus, minus, entry in zip(trace.x, trace.error_x.array, trace.error_x.arrayminus, entries):
            assert x == pytest.approx(entry["value"])
            assert x + plus == pytest.approx(entry["high"]) and x - minus == pytest.approx(entry["low"])
    constant, affine = fig.data
    assert [round(y) for y in constant.y] == [1, 0] and all(a < c for a, c in zip(affine.y, constant.y))
    assert dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext)) == {1: "L2 h0", 0: "L2 h3"}
    assert fig.layout.shapes[0].x0 == 0.75 and fig.layout.annotations[0].text == "unedited"
    assert constant.marker.symbol != affine.marker.symbol  # apart in greyscale too


def test_a_nan_estimate_leaves_its_marker_out():
    nan = {"value": math.nan, "low": math.nan, "high": math.nan}
    fig = interval_figure({"a": [nan, {"value": 0.5, "low": 0.4, "high": 0.6}]}, ["x", "y"], "v", "t")
    assert math.isnan(fig.data[0].x[0]) and fig.data[0].x[1] == 0.5


@pytest.mark.parametrize("estimates, units, match", [
    ({"a": [{"value": 0.5, "low": 0.6, "high": 0.7}]}, ["x"], "does not hold its value"),
    ({"a": [{"value": 0.5}]}, ["x"], "'value', 'low', 'high'"),
    ({"a": [{"value": 0.5, "low": 0.4, "high": 0.6}]}, ["x", "y"], "one estimate per unit"),
    ({}, ["x"], "non-empty mapping"),
    ({"a": [{"value": "0.5", "low": 0.4, "high": 0.6}]}, ["x"], "must be a number"),
])
def test_bad_estimates_are_refused_with_what_to_pass(estimates, units, match):
    with pytest.raises(InputError, match=match):
        interval_figure(estimates, units, "v", "t")
