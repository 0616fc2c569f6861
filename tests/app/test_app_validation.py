"""The app's head choice goes through repo_lens.validation.check_index like every other call site
(tests/base/test_validation.py): same accepted indices, same refusals; an index picked for a wider
model in a comparison is clamped to this model's last head."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens import InputError
from repo_lens.app.ui import clamp_head

N_HEADS = 4


@pytest.mark.parametrize("picked,shown", [
    (0, 0), (3, 3), (np.int64(2), 2), (-1, 3), (-4, 0),
    (4, 3), (9, 3),  # picked for a model with more heads: this model's last head
    ("mean", "mean"), ("all", "all"),
])
def test_clamp_head_accepts(picked, shown):
    result = clamp_head(picked, N_HEADS)
    assert result == shown and type(result) is type(shown)


@pytest.mark.parametrize("picked,message", [
    (1.5, r"head 1\.5 is not an integer index \(got float\)"),
    ("1", r"head '1' is not an integer index \(got str\)"),
    ("max", r"head 'max' is not an integer index"),
    (True, r"head True is not an integer index \(got bool\)"),
    (-5, r"head -5 does not exist; this trace has heads"),
])
def test_clamp_head_refuses(picked, message):
    with pytest.raises(InputError, match=rf"{message}.*0\.\.3 \(or -4\.\.-1 to count from the end\)"):
        clamp_head(picked, N_HEADS)
