"""One index check (repo_lens.validation.check_index) behind every layer/head argument: the same
cases give the same answer at every call site (the app's is in tests/app/test_app_validation.py)."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis import select_heads
from repo_lens.errors import InputError
from repo_lens.plots.style import check_layer, select_head
from repo_lens.trace import Trace
from repo_lens.validation import check_index

SIZE = 4
# (value, the index it stands for) — Python's convention: negatives count from the end
GOOD = [(0, 0), (3, 3), (-1, 3), (-4, 0), (np.int64(2), 2), (np.int32(1), 1), (np.uint8(3), 3), (np.array(2), 2)]
# (value, what the error must say); every error also names the valid range and how to count from the end
BAD = [
    (1.5, r"1\.5 is not an integer index \(got float\)"),
    (2.0, r"2\.0 is not an integer index \(got float\)"),
    ("1", r"'1' is not an integer index \(got str\)"),
    (True, r"True is not an integer index \(got bool\)"),
    (False, r"False is not an integer index \(got bool\)"),
    (np.bool_(True), r"np\.True_ is not an integer index \(got bool\)"),
    (None, r"None is not an integer index"),
    (4, r"4 does not exist"),
    (-5, r"-5 does not exist"),
    (10**30, r"1000000000000000000000000000000 does not exist"),
]
RANGE = r"0\.\.3 \(or -4\.\.-1 to count from the end\)"


@pytest.mark.parametrize("value,index", GOOD)
def test_check_index_accepts_integers(value, index):
    result = check_index(value, SIZE, "head")
    assert result == index and type(result) is int


@pytest.mark.parametrize("value,message", BAD)
def test_check_index_refuses_with_value_range_and_fix(value, message):
    with pytest.raises(InputError, match=rf"^head {message}.*{RANGE}") as caught:
        check_index(value, SIZE, "head", owner="model")
    assert "this model has heads" in str(caught.value) or "pass an int" in str(caught.value)


def test_check_index_on_nothing():
    with pytest.raises(InputError, match="this trace has no layers"):
        check_index(0, 0, "layer")


# ------------------------------------------------------------ the call sites, table-driven

POSITIONS = np.arange(SIZE * SIZE * 3, dtype=np.float32).reshape(SIZE, SIZE, 3)  # every value distinct


def trace_head(value):
    trace = Trace(tokens=["a", "b", "c"], token_ids=np.array([1, 2, 3]), layer_kinds=["rope"] * SIZE,
                  positions=POSITIONS)
    return trace.head(value, 0), trace.head(0, value)


def style_select_head(value):
    return select_head(POSITIONS, value)


def style_check_layer(value):
    return check_layer(value, SIZE)


def selection_heads(value):
    return select_heads(POSITIONS, layers=value), select_heads(POSITIONS, heads=[value])


def expected(site, index):
    """What each call site returns for the index ``index`` (already normalised), from plain numpy."""
    return {
        trace_head: (POSITIONS[index, 0], POSITIONS[0, index]),
        style_select_head: POSITIONS[:, index].astype(np.float64),
        style_check_layer: index,
        selection_heads: (POSITIONS[index:index + 1], POSITIONS[:, index:index + 1]),
    }[site]


SITES = [trace_head, style_select_head, style_check_layer, selection_heads]


@pytest.mark.parametrize("site", SITES, ids=lambda site: site.__name__)
@pytest.mark.parametrize("value,index", GOOD)
def test_every_call_site_accepts_the_same_indices(site, value, index):
    got, want = site(value), expected(site, index)
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    for got_part, want_part in pairs:
        np.testing.assert_array_equal(got_part, want_part)


@pytest.mark.parametrize("site", SITES, ids=lambda site: site.__name__)
@pytest.mark.parametrize("value,message", BAD)
def test_every_call_site_refuses_the_same_values(site, value, message):
    with pytest.raises(InputError, match=rf"(layer|head) {message}.*{RANGE}"):
        site(value)


def test_the_mean_head_is_still_a_choice_of_select_head():
    np.testing.assert_allclose(select_head(POSITIONS, "mean"), POSITIONS.astype(np.float64).mean(axis=1))
    with pytest.raises(InputError, match=rf"head 'max' is not an integer index.*{RANGE}, or 'mean'"):
        select_head(POSITIONS, "max")
