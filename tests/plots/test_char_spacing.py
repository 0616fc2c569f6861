"""The post's spaced-characters figure: rows labelled by the model's layer, each character at the running sum
of its increments less the first's (the first at 0, as the post's plot_increments.py draws them), and bad row labels refused."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.errors import InputError
from repo_lens.plots import char_spacing_figure

INCREMENTS = np.array([[1.0, 0.5, 2.0, 0.5], [2.0, 2.0, 1.0, 1.0]])


def test_rows_carry_the_layers_they_come_from():
    fig = char_spacing_figure("ab c", INCREMENTS, ["lpi-resid", "lpi-resid"], layers=[3, 5])
    assert list(fig.layout.yaxis.ticktext) == ["L3 lpi-resid", "L5 lpi-resid"]
    drawn = sorted(tuple(trace.x) for trace in fig.data if trace.x is not None and len(trace.x) == 4)
    expected = sorted(tuple(np.cumsum(row) - row[0]) for row in INCREMENTS)  # the script: Σ_{s≤i} δ_s − δ_0
    assert drawn == expected


@pytest.mark.parametrize("layers, kinds, message", [
    ([3], ["lpi", "lpi"], "pass 2 distinct layer indices"),
    ([3, 3], ["lpi", "lpi"], "pass 2 distinct layer indices"),
    ([3, -1], ["lpi", "lpi"], "ints ≥ 0"),
    ([True, 2], ["lpi", "lpi"], "distinct layer indices"),
    (None, ["lpi"], "layer_kinds has 1 entries for 2 rows"),
])
def test_bad_rows_are_refused_by_name(layers, kinds, message):
    with pytest.raises(InputError, match=message):
        char_spacing_figure("ab c", INCREMENTS, kinds, layers=layers)
