"""byte_category_table, char_increments, char_positions: the learned-increments post's per-byte table and spacing
plot ("Learned position increments", Brendan Long; byte_boundary_analysis.py Part 1, plot_increments.py),
checked against references written here from the scripts' definitions and against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis import POST_BYTE_CATEGORIES, byte_category_table, char_increments, char_positions
from repo_lens.errors import InputError


def test_the_categories_are_the_scripts_byte_sets():
    """Written out from the script's table: names and byte ranges."""
    expected = {
        "English within-word (a-z)": set(range(97, 123)),
        "Capital letters (A-Z)": set(range(65, 91)),
        "Digits (0-9)": set(range(48, 58)),
        "Chinese char start (lead 0xE4-0xE9)": {0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9},
        "Chinese char interior (cont 0x80-0xBF)": set(range(128, 192)),
        "Space": {32},
        "Sentence punct (. ! ?)": {46, 33, 63},
        "Other punct (, ; : -)": {44, 59, 58, 45},
        "Newline": {10},
        "EOS": {256},
    }
    assert list(POST_BYTE_CATEGORIES) == list(expected)
    assert {name: set(ids) for name, ids in POST_BYTE_CATEGORIES.items()} == expected


def reference_table(delta: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """The script's Part 1 on a (257,) δ: per category, min / max / mean of δ at its byte ids."""
    out = {}
    for name, ids in POST_BYTE_CATEGORIES.items():
        values = [float(delta[i]) for i in ids]
        out[name] = (min(values), max(values), sum(values) / len(values))
    return out


def test_every_byte_table_matches_the_reference_per_layer():
    rng = np.random.default_rng(0)
    delta = rng.uniform(0.2, 3.0, size=(3, 257))  # 3 layers' δ of every byte id
    table = byte_category_table(delta, np.arange(257))
    for layer in range(3):
        expected = reference_table(delta[layer])
        for k, name in enumerate(table.labels):
            assert (table.min[layer, k], table.max[layer, k]) == expected[name][:2]
            assert table.mean[layer, k] == pytest.approx(expected[name][2], rel=1e-12)
            assert table.count[layer, k] == len(POST_BYTE_CATEGORIES[name])
    assert table.rows(1)["Space"]["mean"] == delta[1, 32]


def test_in_context_table_hand_case():
    ids = list("Hi, 中!\n".encode()) + [256]  # H i , ␠ E4 B8 AD ! \n EOS
    delta = np.array([2.0, 0.5, 1.5, 1.0, 3.0, 0.25, 0.75, 1.25, 4.0, 5.0])
    rows = byte_category_table(delta, ids).rows()
    assert rows["Capital letters (A-Z)"] == {"min": 2.0, "max": 2.0, "mean": 2.0, "count": 1}
    assert rows["Chinese char interior (cont 0x80-0xBF)"] == {"min": 0.25, "max": 0.75, "mean": 0.5, "count": 2}
    assert rows["Chinese char start (lead 0xE4-0xE9)"]["mean"] == 3.0
    assert rows["Sentence punct (. ! ?)"]["mean"] == 1.25 and rows["Other punct (, ; : -)"]["mean"] == 1.5
    assert rows["Newline"]["mean"] == 4.0 and rows["EOS"]["mean"] == 5.0
    assert rows["Digits (0-9)"]["count"] == 0 and np.isnan(rows["Digits (0-9)"]["mean"])  # no digit in the text


def test_byte_table_bad_input():
    with pytest.raises(InputError, match="increments covers 3 tokens but token_ids covers 2"):
        byte_category_table(np.ones(3), [97, 98])
    with pytest.raises(InputError, match="token_ids must be a 1-D array of ints"):
        byte_category_table(np.ones(2), [97.0, 98.0])
    with pytest.raises(InputError, match="NaN"):
        byte_category_table(np.array([1.0, np.nan]), [97, 98])
    with pytest.raises(InputError, match="empty"):
        byte_category_table(np.zeros(0), np.zeros(0, dtype=int))
    with pytest.raises(InputError, match="non-empty"):
        byte_category_table(np.ones(1), [97], categories={})


def reference_char_increments(rows: np.ndarray, text: str, shared: bool) -> np.ndarray:
    """plot_increments.py: sum each character's bytes, divide by the row means (or one global mean)."""
    spans, offset = [], 0
    for char in text:
        n = len(char.encode("utf-8"))
        spans.append((offset, offset + n))
        offset += n
    per_char = np.array([[row[a:b].sum() for a, b in spans] for row in rows])
    return per_char / (per_char.mean() if shared else per_char.mean(axis=1, keepdims=True))


@pytest.mark.parametrize("scale", ["per-row", "shared"])
def test_char_increments_match_the_reference(scale):
    text = "Marie Curie 人工智能。é!"
    rng = np.random.default_rng(1)
    rows = rng.uniform(0.1, 10.0, size=(4, len(text.encode())))
    got = char_increments(rows, text, scale=scale)
    np.testing.assert_allclose(got, reference_char_increments(rows, text, scale == "shared"), rtol=1e-12)
    if scale == "per-row":
        np.testing.assert_allclose(got.mean(axis=1), 1.0)  # every row averages 1, RoPE's +1
    else:
        assert got.mean() == pytest.approx(1.0)


def test_char_positions_place_each_character_after_its_own_increment():
    increments = np.array([[0.5, 1.0, 2.0], [1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(char_positions(increments), [[0.0, 1.0, 3.0], [0.0, 1.0, 2.0]])


def test_char_increments_bad_input():
    with pytest.raises(InputError, match="byte_increments covers 2 tokens but text's UTF-8 bytes covers 3"):
        char_increments(np.ones(2), "中")
    with pytest.raises(InputError, match="non-empty str"):
        char_increments(np.ones(1), "")
    with pytest.raises(InputError, match="scale must be 'per-row' or 'shared'"):
        char_increments(np.ones(2), "ab", scale="row")
    with pytest.raises(InputError, match="NaN"):
        char_increments(np.array([1.0, np.nan]), "ab")
    with pytest.raises(InputError, match="mean increment of a row is 0"):
        char_increments(np.zeros((1, 2)), "ab")
    with pytest.raises(InputError, match="cannot be encoded as UTF-8"):
        char_increments(np.ones(3), "\ud800")
    with pytest.raises(InputError, match="empty"):
        char_positions(np.zeros((2, 0)))
