"""Documents cut into windows (issue 35): every token in a window, none past the model's context, no
window ending inside a character, and bad window settings named with their fix."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_tokenizers import bpe_tokenizer  # noqa: F401 - a fixture

from repo_lens.data.corpus_sources import Document
from repo_lens.data.windows import (
    WindowSpec,
    document_windows,
    special_prefix,
    tokenize_document,
    window_bounds,
)
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), size=st.integers(1, 12), data=st.data())
def test_windows_cover_every_token_in_order_within_the_size(n, size, data):
    stride = data.draw(st.integers(1, size))
    breakable = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if n:
        breakable[0] = True
    bounds = window_bounds(n, size, stride, breakable)
    covered = np.zeros(n, dtype=int)
    for start, end in bounds:
        assert 0 <= start < end <= n and end - start <= size
        covered[start:end] += 1
    assert (covered >= 1).all()
    assert [start for start, _ in bounds] == sorted({start for start, _ in bounds})  # strictly increasing
    if bounds:
        assert bounds[0][0] == 0 and bounds[-1][1] == n
    if stride == size:  # side by side: every token in exactly one window
        assert (covered == 1).all()


def test_byte_windows_never_split_a_character_and_match_the_tokenizer():
    text = "中文文本，" * 7 + "and ASCII."
    tokens = tokenize_document(ByteTokenizer(), text)
    assert tokens.ids.tolist() == ByteTokenizer().encode(text)
    assert [tuple(span) for span in tokens.offsets.tolist()] == ByteTokenizer().offsets(text)
    windows = document_windows(ByteTokenizer(), Document(3, "d", text), size=10, stride=8)
    assert all(window.text for window in windows)
    for window in windows:  # each window starts and ends on a character boundary: its text re-encodes to its ids
        assert window.text.encode("utf-8") == bytes(window.ids)
        assert window.columns()["document"] == 3 and len(window.offsets) == len(window.ids)
    assert windows[-1].token_end == len(text.encode("utf-8"))


def test_a_bpe_tokenizer_s_bos_starts_every_window(bpe_tokenizer):  # noqa: F811
    prefix = special_prefix(bpe_tokenizer)
    assert prefix == [bpe_tokenizer.bos_token_id]
    text = "The special magic number is 2058756. " * 6
    windows = document_windows(bpe_tokenizer, Document(0, "d", text), size=12, stride=12, prefix=prefix)
    ids = bpe_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert [token for window in windows for token in window.ids[1:]] == ids
    assert all(window.ids[0] == prefix[0] and window.prefix == 1 for window in windows)
    assert "".join(window.text for window in windows) == text[:windows[-1].char_end]


@pytest.mark.parametrize("spec, message", [
    (WindowSpec(size=300), ("--window 300 is longer than the model's context of 256 tokens; use --window 256 or "
                            "less, or pass --beyond-context")),
    (WindowSpec(size=0), "--window .* must be an int >= 1"),
    (WindowSpec(stride=300), "--stride 300 is longer than the window of 256 tokens"),
    (WindowSpec(stride=0), "--stride .* >= 1"),
    (WindowSpec(overlap=256), "--overlap 256 leaves no new tokens in a window of 256; use an overlap of 0..255"),
    (WindowSpec(overlap=-1), "--overlap .* >= 0"),
    (WindowSpec(stride=8, overlap=8), "either --stride .* or --overlap .*, not both"),
])
def test_bad_window_settings_name_the_fix(spec, message):
    with pytest.raises(InputError, match=message):
        spec.resolve(context=256, prefix=0)


def test_window_defaults_fill_the_context_less_the_bos():
    assert WindowSpec().resolve(256, 0) == (256, 256)
    assert WindowSpec().resolve(256, 1) == (255, 255)
    assert WindowSpec(overlap=55).resolve(256, 1) == (255, 200)
    assert WindowSpec(size=1000, beyond_context=True).resolve(256, 0) == (1000, 1000)
    with pytest.raises(InputError, match="pass --window N"):
        WindowSpec().resolve(None, 0)

