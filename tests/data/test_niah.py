"""RULER-style NIAH prompts: length, depth, needle counts, wording, spans, attention-mass use."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.data.niah import (
    NOISE,
    NiahSpec,
    niah_multikey,
    niah_multiquery,
    niah_multivalue,
    niah_prompt,
    niah_single,
)
from repo_lens.data.spans import PromptEncoding
from repo_lens.errors import InputError
from prompt_tokenizers import bpe_tokenizer, byte_tokenizer, tokenizer, word_tokenizer  # noqa: F401  (fixtures)

SINGLE_HEAD = ("A special magic number is hidden within the following text. Make sure to memorize it. "
               "I will quiz you about the number afterwards.")
MULTI_HEAD = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
              "I will quiz you about the numbers afterwards.")


def squash(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("length", [700, 1111, 2048])
@pytest.mark.parametrize("builder", [niah_single, niah_multikey, niah_multivalue, niah_multiquery])
def test_hits_requested_length(tokenizer, builder, length):
    prompt = builder(tokenizer, length, seed=length)
    assert len(prompt.ids) <= length
    assert len(prompt.ids) >= length - 8  # the haystack is cut at a word: at most one word short
    assert prompt.meta["n_tokens"] == len(prompt.ids)


def test_needle_depth_is_monotone_and_close(tokenizer):
    depths = [0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0]
    measured = [niah_single(tokenizer, 2000, depth, seed=3).meta["needle_token_depth"][0] for depth in depths]
    assert measured == sorted(measured)
    assert measured[0] == 0.0 and measured[-1] > 0.9
    # the needle sits at a RULER noise block boundary (one block per line): within a block of the target
    np.testing.assert_allclose(measured, depths, atol=0.08)


def test_depth_with_real_text_sentences(byte_tokenizer):
    sentences = [f"Sentence number {i} talks about the weather in town {i}." for i in range(400)]
    measured = []
    for depth in [0.1, 0.3, 0.5, 0.7, 0.9]:
        prompt = niah_single(byte_tokenizer, 3000, depth, haystack=sentences)
        measured.append(prompt.meta["needle_token_depth"][0])
        assert prompt.meta["haystack"] == "text" and not prompt.meta["haystack_repeated"]
        assert "Sentence number 0 talks" in prompt.text
    np.testing.assert_allclose(measured, [0.1, 0.3, 0.5, 0.7, 0.9], atol=0.03)


def test_real_text_string_is_cycled_when_short(byte_tokenizer):
    text = "Paris is a city. Rome is older!  Is Oslo cold?\nYes."
    prompt = niah_single(byte_tokenizer, 900, 0.5, haystack=text)
    assert prompt.meta["haystack_repeated"]
    assert prompt.text.count("Rome is older!") > 3
    assert 890 <= len(prompt.ids) <= 900


def test_single_wording_and_spans(tokenizer):
    prompt = niah_single(tokenizer, 900, 0.5, seed=7)
    key, value = prompt.meta["keys"][0], prompt.answer
    assert prompt.text.startswith(SINGLE_HEAD + "\n")
    assert f"\nOne of the special magic numbers for {key} is: {value}.\n" in prompt.text
    question = f"What is the special magic number for {key} mentioned in the provided text?"
    prefix = f"The special magic number for {key} mentioned in the provided text is"
    assert prompt.text.endswith(f"\n{question} {prefix} {value}")
    assert prompt.span_text("question") == question
    assert prompt.span_text("answer_prefix") == prefix
    assert prompt.span_text("query") == f"{question} {prefix}"
    assert prompt.span_text("needle") == f"One of the special magic numbers for {key} is: {value}."
    assert prompt.span_text("value") == value and prompt.span_text("key") == key
    assert len(value) == 7 and value.isdigit()
    assert prompt.query == prompt.spans["answer"] and prompt.meta["targets"] == ["value"]
    for name, (start, end) in prompt.spans.items():
        decoded = tokenizer.decode([int(i) for i in prompt.ids[start:end]])
        assert squash(decoded) == squash(prompt.span_text(name)), name
    haystack = prompt.span_text("context").replace(prompt.span_text("needle"), "")
    assert set(line for line in haystack.split("\n") if line) <= {NOISE} | {
        NOISE[:cut] for cut in range(len(NOISE))}


def test_multikey(tokenizer):
    prompt = niah_multikey(tokenizer, 1500, 0.5, num_keys=4, seed=1)
    needles = prompt.meta["needles"]
    assert len(needles) == 4 and len({n["key"] for n in needles}) == 4
    assert [n["name"] for n in needles] == ["needle_0", "needle_1", "needle_2", "needle_3"]
    assert sum(n["target"] for n in needles) == 1
    target = next(n for n in needles if n["target"])
    assert prompt.answer == target["value"] and prompt.meta["targets"] == [target["value_name"]]
    assert prompt.meta["kind"] == "multikey"
    assert f"What is the special magic number for {target['key']} mentioned in the provided text?" in prompt.text
    starts = [prompt.spans[f"needle_{i}"][0] for i in range(4)]
    assert starts == sorted(starts)  # numbered in text order
    for i, needle in enumerate(needles):
        assert prompt.span_text(f"value_{i}") == needle["value"] and prompt.span_text(f"key_{i}") == needle["key"]
        assert prompt.text.count(f"One of the special magic numbers for {needle['key']} is:") == 1


def test_multivalue(tokenizer):
    prompt = niah_multivalue(tokenizer, 1500, 0.3, num_values=4, seed=2)
    needles = prompt.meta["needles"]
    key = prompt.meta["keys"][0]
    assert len(needles) == 4 and {n["key"] for n in needles} == {key} and all(n["target"] for n in needles)
    assert prompt.text.startswith(MULTI_HEAD + "\n")
    assert f"What are all the special magic numbers for {key} mentioned in the provided text?" in prompt.text
    assert prompt.span_text("answer_prefix") == f"The special magic numbers for {key} mentioned in the provided text are"
    assert sorted(prompt.answer.split(", ")) == sorted(n["value"] for n in needles)
    assert prompt.text.count(f"One of the special magic numbers for {key} is:") == 4


def test_multiquery(tokenizer):
    prompt = niah_multiquery(tokenizer, 1500, 0.7, num_queries=3, seed=3)
    queries = prompt.meta["queries"]
    assert len(queries) == 3 and len(prompt.meta["needles"]) == 3 and len(prompt.meta["targets"]) == 3
    query = f"{queries[0]}, {queries[1]}, and {queries[2]}"
    assert f"What are all the special magic numbers for {query} mentioned in the provided text?" in prompt.text
    assert prompt.text.endswith(f"The special magic numbers for {query} mentioned in the provided text are "
                                + prompt.answer)
    assert prompt.answer == ", ".join(prompt.meta["answers"])


def test_one_depth_per_needle(byte_tokenizer):
    prompt = niah_multikey(byte_tokenizer, 3000, [0.9, 0.1, 0.5, 0.3], num_keys=4)
    depth = prompt.meta["needle_token_depth"]
    assert depth == sorted(depth) and depth[0] < 0.2 and depth[-1] > 0.8


def test_seed_is_deterministic(byte_tokenizer):
    a = niah_multikey(byte_tokenizer, 1000, seed=5)
    b = niah_multikey(byte_tokenizer, 1000, seed=5)
    c = niah_multikey(byte_tokenizer, 1000, seed=6)
    assert a.text == b.text and a.text != c.text


def test_numbers_as_keys_and_last_token_rows(tokenizer):
    prompt = niah_single(tokenizer, 800, spec=NiahSpec(key_type="numbers"), encoding=PromptEncoding(append_answer=False))
    assert prompt.meta["keys"][0].isdigit()
    assert "answer" not in prompt.spans
    assert prompt.query[1] == len(prompt.ids) and prompt.query[0] == len(prompt.ids) - 1
    assert prompt.spans["query"][1] == prompt.query[0]  # the row is cut from the query span
    assert prompt.text.endswith("mentioned in the provided text is")


def test_attention_mass_on_a_niah_prompt(byte_tokenizer):
    import torch

    from repo_lens.analysis.attention_mass import attention_mass
    from repo_lens.model import LensModel, ModelConfig

    torch.manual_seed(0)
    model = LensModel(ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=2, n_heads=4, d_mlp=64,
                                  layer_mechanisms=["rope", "repo"]))
    prompt = niah_multikey(byte_tokenizer, 1200, 0.4)
    mass = attention_mass(model, prompt.ids, prompt.pick(*prompt.meta["targets"], "query"), prompt.query)
    assert set(mass.per_token) == {prompt.meta["targets"][0], "query", "rest"}
    assert all(np.isfinite(v) and v > 0 for v in mass.per_token.values())


@pytest.mark.parametrize("kwargs,message", [
    (dict(length=100), r"length=100 is too short: the prompt without any haystack already takes"),
    (dict(length=800, depth=1.5), r"needle depth 1.5 must be a fraction of the haystack in \[0.0, 1.0\]"),
    (dict(length=800, depth=[0.1, 0.2]), "got 2 depths for 1 needles"),
    (dict(length=800, spec=NiahSpec(num_keys=0)), "num_keys must be a positive integer"),
    (dict(length=800, spec=NiahSpec(key_type="colours")), "unknown key_type 'colours'"),
    (dict(length=800, spec={"num_keys": 2}), r"spec must be a NiahSpec \(e.g. spec=NiahSpec\(num_keys=...\)\), not dict"),
    (dict(length=800, haystack=""), "the haystack text is empty"),
    (dict(length=-5), "length must be a positive number of tokens"),
])
def test_bad_input(byte_tokenizer, kwargs, message):
    length = kwargs.pop("length")
    with pytest.raises(InputError, match=message):
        niah_prompt(byte_tokenizer, length, **kwargs)
