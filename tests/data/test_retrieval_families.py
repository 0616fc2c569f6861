"""The causal study's prompt families: each asks for the one fact its haystack holds, and the key–value
family is written in the format the 1,024-byte zoo models' recall rows were trained on."""

from __future__ import annotations

import random
import re

import pytest

from repo_lens.data.retrieval_families import FAMILIES, moved_pairs, retrieval_prompt
from repo_lens.errors import InputError
from repo_lens.model.byte_tokenizer import ByteTokenizer

PAIR = re.compile(r"([a-z]+-[a-z]+)=(\d{7}); ")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_asks_for_the_value_its_needle_holds(family):
    for seed in range(6):
        prompt = retrieval_prompt(ByteTokenizer(), family, 1000, seed=seed, text="Some running text here. " * 80)
        assert len(prompt) <= 1000 and prompt.answer == prompt.span_text("value")
        assert prompt.text.count(prompt.answer) == 2  # in the needle, and as the answer that ends the prompt
        assert prompt.text.endswith(prompt.answer)
        key = prompt.span_text("key")
        assert prompt.text.count(key) >= 2 and key in prompt.span_text("question")


def test_key_value_lines_use_the_trained_recall_format():
    from repo_lens.train.mixture import RetrievalMixTask

    prompt = retrieval_prompt(ByteTokenizer(), "kv_lines", 1000, seed=4)
    assert prompt.text.startswith("Remember:\n")
    pairs = dict(PAIR.findall(prompt.text))
    assert len(pairs) > 30 and prompt.text.endswith(f"\n{prompt.meta['key']}? {prompt.answer}")
    assert pairs[prompt.meta["key"]] == prompt.answer  # parsed from the text, not read from the builder
    trained = None
    for seed in range(40):  # a recall row of the training mixture in the same "key=value; " / "key? " format
        row = RetrievalMixTask._recall(None, random.Random(seed), 600)  # type: ignore[arg-type]
        if "=" in row.text:
            trained = row.text
            break
    assert trained is not None and PAIR.findall(trained)
    asked = re.search(r"\n([a-z]+-[a-z]+)\? (\d{7})\n", trained)
    assert asked and dict(PAIR.findall(trained))[asked.group(1)] == asked.group(2)


@pytest.mark.parametrize("family", FAMILIES)
def test_moved_pairs_keep_the_fact_and_move_the_needle(family):
    for clean, moved in moved_pairs(ByteTokenizer(), family, 1024, 8, seed=20_000):
        assert clean.answer == moved.answer and len(clean) == len(moved)
        assert clean.spans["needle"][0] < moved.spans["needle"][0]


def test_a_haystack_too_short_to_move_the_needle_in_gives_no_pair():
    # 400 bytes hold one unit of RULER's noise beside RULER's needle and question: both depths land
    # before it, so the "moved" needle would sit where the clean one does.
    with pytest.raises(InputError, match="pairs of 400 tokens"):
        moved_pairs(ByteTokenizer(), "needle_text", 400, 1)
