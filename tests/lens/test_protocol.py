"""The Lens protocol: repo_lens' own Lens and the nnsight-backed HFLens offer the same interface,
share one input path (token ids, context fitting, its meta record) and one AttentionMass assembly,
so the same stock checkpoint loaded both ways gives the same traces and attention mass."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import repo_lens
from conftest import WORDS
from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, is_text_batch
from repo_lens.lens_inputs import prepare_ids
from repo_lens.protocol import HookedLensProtocol, LensProtocol

PACKAGE = Path(repo_lens.__file__).resolve().parent
LONG_TEXT = "the cat sat on the mat . " * 30  # 1 + 7 × 30 = 211 word tokens, beyond the fixtures' 128


# ------------------------------------------------------------ the shared input path, by hand

@pytest.mark.parametrize("ids,limit,options,kept,record", [
    ([1, 2, 3], 3, {}, [1, 2, 3], {"truncation": None}),
    ([1, 2, 3], None, {}, [1, 2, 3], {"truncation": None}),
    ([1, 2, 3, 4, 5], 3, {"truncate": True}, [1, 2, 3],
     {"truncation": {"original_tokens": 5, "kept_tokens": 3}}),
    ([1, 2, 3, 4, 5], 3, {"allow_beyond_context": True}, [1, 2, 3, 4, 5],
     {"truncation": None, "beyond_context": {"tokens": 5, "context": 3}}),
    ([1, 2, 3, 4, 5], 3, {"truncate": True, "allow_beyond_context": True}, [1, 2, 3, 4, 5],
     {"truncation": None, "beyond_context": {"tokens": 5, "context": 3}}),
])
def test_fit_to_context_keeps_and_records(ids, limit, options, kept, record):
    assert fit_to_context(ids, limit, **options) == (kept, record)


def test_fit_to_context_error_names_the_remedies():
    with pytest.raises(InputError, match=r"5 tokens, longer than the model's context of 3.*truncate=True to keep "
                                         r"the first 3.*allow_beyond_context=True"):
        fit_to_context([1, 2, 3, 4, 5], 3)
    with pytest.raises(InputError, match="allow_beyond_context=True") as caught:
        fit_to_context([1, 2, 3, 4, 5], 3, offer_truncation=False)
    assert "truncate" not in str(caught.value)


class ToyLens:
    tokenizer = None
    meta = {"name": "toy"}
    vocab_size = 10
    context_length = 4

    def encode(self, text):
        return [len(word) for word in text.split()]


def test_prepare_ids_and_what_counts_as_a_list_of_texts():
    ids, meta = prepare_ids(ToyLens(), "a bb ccc dddd eeeee", truncate=True)
    assert ids == [1, 2, 3, 4]
    assert meta == {"name": "toy", "warnings": [], "truncation": {"original_tokens": 5, "kept_tokens": 4}}
    with pytest.raises(InputError, match=r"token ids must lie in 0..9"):
        prepare_ids(ToyLens(), [3, 12])
    assert [is_text_batch(value) for value in (["a"], [], "ab", ["a", 1], np.array(["a"]))] == [
        True, False, False, False, False]


class CountingLens(LensProtocol):
    """A lens that only implements trace_batch (one input per call recorded), to test the trace it inherits."""

    tokenizer = None
    meta: dict = {}
    n_layers, n_heads, vocab_size, context_length, device = 1, 1, 10, None, torch.device("cpu")

    def __init__(self):
        self.calls = []

    def encode(self, text):
        return [len(word) for word in text.split()]

    def display_tokens(self, ids):
        return [str(i) for i in ids]

    def trace_batch(self, inputs, *, batch_size=8, truncate=False, allow_beyond_context=False, progress=True):
        self.calls.append((list(inputs), batch_size, truncate, allow_beyond_context, progress))
        return [f"trace of {one!r}" for one in inputs]


def test_the_inherited_trace_gives_one_trace_for_one_input_and_a_list_for_a_list_of_texts():
    lens = CountingLens()
    assert lens.trace("a bb", truncate=True) == "trace of 'a bb'"
    assert lens.trace([4, 5, 6]) == "trace of [4, 5, 6]"  # token ids are one input, not a batch
    assert lens.trace(("ab", "cde"), batch_size=2, progress=False) == ["trace of 'ab'", "trace of 'cde'"]
    assert lens.calls == [(["a bb"], 1, True, False, False), ([[4, 5, 6]], 1, False, False, False),
                          (["ab", "cde"], 2, False, False, False)]
    assert isinstance(lens, LensProtocol) and not isinstance(lens, HookedLensProtocol)


# ------------------------------------------------------------ both lenses on one checkpoint

@pytest.fixture(scope="module")
def lenses(llama_dir):
    pytest.importorskip("nnsight", reason="the HF lens needs nnsight: pip install nnsight")
    from repo_lens.hf import load_hf

    return repo_lens.load(llama_dir, device="cpu"), load_hf(llama_dir, device="cpu")


def test_both_lenses_satisfy_the_protocol(lenses):
    native, hf = lenses
    assert isinstance(native, HookedLensProtocol) and not isinstance(hf, HookedLensProtocol)
    for lens in lenses:
        assert isinstance(lens, LensProtocol)
        assert (lens.n_layers, lens.n_heads, lens.vocab_size, lens.context_length) == (3, 4, 64, 128)
        assert lens.device == torch.device("cpu")
    expected = [1] + [WORDS.index(word) + 2 for word in ("the", "cat", "sat")]  # <bos>, then the word ids
    assert native.encode("the cat sat") == hf.encode("the cat sat") == expected
    assert native.display_tokens(expected[1:3]) == hf.display_tokens(expected[1:3]) == ["the", "cat"]
    assert not isinstance(object(), LensProtocol)


def test_the_same_text_is_truncated_alike(lenses):
    traces = [lens.trace(LONG_TEXT, truncate=True) for lens in lenses]
    for trace in traces:
        assert trace.meta["truncation"] == {"original_tokens": 211, "kept_tokens": 128}
        assert trace.meta["warnings"] == [] and "beyond_context" not in trace.meta
        np.testing.assert_array_equal(trace.positions, np.broadcast_to(np.arange(128, dtype=np.float32), (3, 4, 128)))
    np.testing.assert_array_equal(traces[0].token_ids, traces[1].token_ids)
    assert traces[0].tokens == traces[1].tokens and traces[0].layer_kinds == traces[1].layer_kinds == ["rope"] * 3

    messages = []
    for lens in lenses:
        with pytest.raises(InputError, match="211 tokens, longer than the model's context of 128") as caught:
            lens.trace(LONG_TEXT)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]

    beyond = [lens.trace(LONG_TEXT, allow_beyond_context=True) for lens in lenses]
    for trace in beyond:
        assert len(trace) == 211 and trace.meta["truncation"] is None
        assert trace.meta["beyond_context"] == {"tokens": 211, "context": 128}


def test_a_list_of_texts_gives_a_list_of_traces(lenses):
    for lens in lenses:
        traces = lens.trace(["hello world", "the cat sat on the mat"], progress=False)
        assert [len(trace) for trace in traces] == [3, 7]
        with pytest.raises(InputError, match="text is empty"):
            lens.trace("   ")


def test_attention_mass_is_the_same_from_both_lenses(lenses):
    from repo_lens.analysis import attention_mass
    from repo_lens.hf import attention_mass_hf

    native, hf = lenses
    ids = torch.randint(2, 64, (60,), generator=torch.Generator().manual_seed(7)).tolist()
    spans, query = {"needle": (5, 12), "question": (40, 50)}, (54, 60)
    ours = attention_mass(native, ids, spans, query)
    theirs = attention_mass_hf(hf, ids, spans, query)
    assert ours.span_lengths == theirs.span_lengths == {"needle": 7, "question": 10, "rest": 37}
    assert ours.query == theirs.query == query and ours.layers == theirs.layers == [0, 1, 2]
    for name in ("needle", "question", "rest"):
        np.testing.assert_allclose(ours.by_layer_head[name], theirs.by_layer_head[name], atol=1e-5)
    np.testing.assert_allclose(ours.self_mass, theirs.self_mass, atol=1e-5)


# ------------------------------------------------------------ no private names across modules

@pytest.mark.parametrize("module", ["hf/analysis.py", "hf/model.py", "lens.py", "protocol.py", "inputs.py",
                                    "lens_inputs.py", "capture.py", "trace.py", "analysis/attention_mass.py",
                                    "analysis/mass_rows.py"])
def test_lens_modules_import_no_private_names(module):
    tree = ast.parse((PACKAGE / module).read_text())
    private = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("repo_lens") for alias in node.names if alias.name.startswith("_")]
    assert private == []
