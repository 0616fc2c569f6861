"""Character -> token spans, encode_with_offsets, PromptBuilder, Prompt."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.data.spans import Prompt, PromptBuilder, char_to_token_span, encode_with_offsets
from repo_lens.errors import InputError
from prompt_tokenizers import bpe_tokenizer, byte_tokenizer, tokenizer, word_tokenizer  # noqa: F401  (fixtures)


def squash(text: str) -> str:
    return "".join(text.split())


def test_char_to_token_span_overlap_rule():
    offsets = [(0, 0), (0, 3), (3, 4), (4, 9), (9, 9), (0, 0)]
    assert char_to_token_span(offsets, 0, 3) == (1, 2)
    assert char_to_token_span(offsets, 2, 4) == (1, 3)  # partly covered tokens belong
    assert char_to_token_span(offsets, 5, 6) == (3, 4)
    with pytest.raises(InputError, match=r"character span \(9, 12\) covers no token"):
        char_to_token_span(offsets, 9, 12)
    with pytest.raises(InputError, match="0 <= start < end"):
        char_to_token_span(offsets, 4, 4)


def test_hf_special_tokens_belong_to_no_span(bpe_tokenizer):
    ids, offsets = encode_with_offsets(bpe_tokenizer, "The sky is blue.")
    assert ids[0] == bpe_tokenizer.bos_token_id and offsets[0] == (0, 0)
    assert char_to_token_span(offsets, 0, 3)[0] == 1
    ids_plain, offsets_plain = encode_with_offsets(bpe_tokenizer, "The sky is blue.", add_special_tokens=False)
    assert ids_plain == ids[1:] and offsets_plain == offsets[1:]


def test_raw_tokenizers_object(bpe_tokenizer):
    raw = bpe_tokenizer.backend_tokenizer
    assert encode_with_offsets(raw, "The grass is green.") == encode_with_offsets(bpe_tokenizer, "The grass is green.")


def test_unsupported_tokenizer():
    with pytest.raises(InputError, match="cannot get character offsets"):
        encode_with_offsets(object(), "text")


PIECES = [
    [("The grass", "a"), (" is ", None), ("green.", "b"), (" ", None), ("Here we go.", "c")],
    [("人民日报", "a"), ("发表", "b"), ("新年讲话。", "c"), ("Here", "d"), (" we go.", None)],
    [("é", "a"), ("日", "b"), ("x", "c")],
]


@pytest.mark.parametrize("pieces", PIECES, ids=["english", "chinese", "multibyte"])
def test_spans_decode_to_their_text(tokenizer, pieces):
    b = PromptBuilder()
    for piece, name in pieces:
        b.add(piece, *((name,) if name else ()))
    prompt = b.build(tokenizer)
    assert prompt.text == "".join(piece for piece, _ in pieces)
    assert sorted(prompt.spans) == sorted(name for _, name in pieces if name)
    for name, (start, end) in prompt.spans.items():
        decoded = tokenizer.decode([int(i) for i in prompt.ids[start:end]])
        assert squash(decoded) == squash(prompt.span_text(name)), name


def test_word_level_tokenizer_round_trip(word_tokenizer):
    b = PromptBuilder()
    b.add("The sky is blue.", "first")
    b.add(" ")
    b.add("Here we go.", "second")
    prompt = b.build(word_tokenizer, "There and back again.")
    for name in ["first", "second", "answer"]:
        start, end = prompt.spans[name]
        assert squash(word_tokenizer.decode(prompt.ids[start:end].tolist())) == squash(prompt.span_text(name))
    assert prompt.query == prompt.spans["answer"]


def test_prompt_builder_query_rows(byte_tokenizer):
    b = PromptBuilder()
    b.add("Question: where?", "query")
    with_answer = b.build(byte_tokenizer, "here")
    assert with_answer.query == (17, 21) and with_answer.span_text("answer") == "here"
    assert with_answer.answer == "here"
    no_answer = b.build(byte_tokenizer, "here", append_answer=False, last_k=2, trim_from="query")
    assert no_answer.query == (14, 16) and no_answer.spans["query"] == (0, 14)
    assert no_answer.span_text("query") == "Question: wher"
    assert no_answer.answer == "here" and no_answer.text == "Question: where?"
    with pytest.raises(InputError, match="last_k=16 must be in 1..15"):
        b.build(byte_tokenizer, last_k=16)
    assert isinstance(with_answer, Prompt) and with_answer.ids.dtype == np.int64 and len(with_answer) == 21
    assert with_answer.pick("query") == {"query": (0, 16)}
    with pytest.raises(InputError, match=r"unknown span names \['nope'\]"):
        with_answer.pick("nope")
