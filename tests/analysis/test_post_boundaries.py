"""cjk_gap_windows, boundary_windows, window_boundary_auc: the learned-increments post's between-CJK word-boundary
protocol ("Learned position increments", Brendan Long; byte_boundary_analysis.py Part 2), against a reference
written here from the script's definition: 512-byte character-aligned windows run alone, gaps between two
U+4E00-U+9FFF characters inside a window, score = δ at the next character's lead byte, label = jieba ends a
word at the previous character (precise mode, whole text), texts until max_gaps, sklearn's ROC-AUC."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from repo_lens.analysis import (
    boundary_windows,
    cjk_gap_windows,
    is_cjk_unified,
    jieba_words,
    window_boundary_auc,
)
from repo_lens.errors import InputError

TEXTS = [
    "人工智能是计算机科学的一个分支。它研究如何让机器像人一样思考，例如下棋与翻译。",
    "北京大学成立于1898年，是中国近代第一所国立综合性大学。㐀字不在基本区。",
    "Mixed 文本 with 中文词语 and English words 在一起。",
]


def fake_delta(byte_ids: list[int], n_layers: int = 3) -> np.ndarray:
    """A deterministic stand-in for a model's per-layer δ of one window (depends on the byte and its place)."""
    ids = np.asarray(byte_ids, dtype=np.float64)
    place = np.arange(len(ids), dtype=np.float64)
    return np.stack([np.sin(ids * (layer + 1) + 0.1 * place) + 0.01 * layer for layer in range(n_layers)])


def reference(texts: list[str], max_bytes: int, max_gaps: int) -> tuple[list[float], int, float]:
    """The script's boundary_auc, written as loops over characters."""
    scores: list[list[float]] = [[], [], []]
    labels: list[int] = []
    for text in texts:
        final, at = set(), 0
        for word in jieba_words(text):
            at += len(word)
            final.add(at - 1)
        windows, chars, ids, starts = [], [], [], []
        for char in text:
            encoded = char.encode("utf-8")
            if ids and len(ids) + len(encoded) > max_bytes:
                windows.append((chars, ids, starts))
                chars, ids, starts = [], [], []
            starts.append(len(ids))
            chars.append(char)
            ids.extend(encoded)
        windows.append((chars, ids, starts))
        first = 0
        for chars, ids, starts in windows:
            delta = fake_delta(ids)
            for i in range(len(chars) - 1):
                if 0x4E00 <= ord(chars[i]) <= 0x9FFF and 0x4E00 <= ord(chars[i + 1]) <= 0x9FFF:
                    labels.append(int(first + i in final))
                    for layer in range(3):
                        scores[layer].append(float(delta[layer, starts[i + 1]]))
            first += len(chars)
        if len(labels) >= max_gaps:
            break
    return [roc_auc_score(labels, layer) for layer in scores], len(labels), sum(labels) / len(labels)


@pytest.mark.parametrize(("max_bytes", "max_gaps"), [(512, 40_000), (16, 40_000), (7, 10), (30, 1)])
def test_window_auc_matches_the_scripts_protocol(max_bytes, max_gaps):
    windows = boundary_windows(TEXTS, max_bytes=max_bytes, max_gaps=max_gaps)
    assert all(len(w.byte_ids) <= max_bytes for w in windows)
    result = window_boundary_auc([fake_delta(w.byte_ids.tolist()) for w in windows], windows)
    aucs, n_gaps, rate = reference(TEXTS, max_bytes, max_gaps)
    np.testing.assert_allclose(result.auc, aucs, atol=1e-12)
    assert (result.n_gaps, result.boundary_rate) == (n_gaps, pytest.approx(rate))


def test_windows_hand_case():
    """人工智能是分支 in windows of 8 bytes: 人工|智能|是分|支; gaps only inside a window."""
    windows = cjk_gap_windows("人工智能是分支", ["人工智能", "是", "分支"], max_bytes=8)
    assert [w.char_start for w in windows] == [0, 2, 4, 6]
    assert [w.lead_bytes.tolist() for w in windows] == [[3], [3], [3], []]
    assert [w.labels.tolist() for w in windows] == [[False], [False], [True], []]  # 智|能 in, 是|分 a boundary
    assert bytes(windows[0].byte_ids.tolist()).decode() == "人工"


def test_only_unified_ideographs_are_scored():
    assert is_cjk_unified("一") and is_cjk_unified("鿿") and not is_cjk_unified("㐀") and not is_cjk_unified("\uf900")
    [window] = cjk_gap_windows("中㐀文字", ["中", "㐀", "文字"])
    assert window.lead_bytes.tolist() == [9] and window.labels.tolist() == [False]  # 文|字 only


def test_a_hand_computed_auc():
    [window] = cjk_gap_windows("人工智能是分支", ["人工智能", "是", "分支"])
    delta = np.ones(21)
    delta[[12, 15]] = 2.0  # larger δ at both word-initial lead bytes (是, 分): perfect separation
    assert window_boundary_auc([delta], [window]).auc == 1.0
    delta[3] = 3.0  # the first non-boundary gap now scores highest: 8 of 8 pairs → 6 of 8
    assert window_boundary_auc([delta], [window]).auc == pytest.approx(6 / 8)


def test_bad_input():
    windows = boundary_windows(["人工智能是分支"])
    with pytest.raises(InputError, match=r"window_increments\[0\] covers 20 tokens but windows\[0\].byte_ids covers 21"):
        window_boundary_auc([np.ones(20)], windows)
    with pytest.raises(InputError, match="1 arrays of increments for 2 windows"):
        window_boundary_auc([np.ones(21)], windows * 2)
    with pytest.raises(InputError, match="leading shape"):
        window_boundary_auc([np.ones((2, 21)), np.ones((3, 21))], windows * 2)
    with pytest.raises(InputError, match="NaN"):
        window_boundary_auc([np.full(21, np.nan)], windows)
    with pytest.raises(InputError, match="windows is empty"):
        window_boundary_auc([], [])
    with pytest.raises(InputError, match="both classes"):
        window_boundary_auc([np.ones(6)], boundary_windows(["人工"]))
    with pytest.raises(InputError, match="max_bytes must be an int >= 4"):
        boundary_windows(["人工"], max_bytes=3)
    with pytest.raises(InputError, match="max_gaps must be a positive int"):
        boundary_windows(["人工"], max_gaps=0)
    with pytest.raises(InputError, match="texts is a single str"):
        boundary_windows("人工")
    with pytest.raises(InputError, match=r"texts\[1\] is int"):
        boundary_windows(["人工", 5])
    with pytest.raises(InputError, match="do not concatenate"):
        cjk_gap_windows("人工智能", ["人工", "只能"])
    assert boundary_windows(["", "人工"])[0].text_index == 1  # an empty text adds nothing
