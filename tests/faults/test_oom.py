"""Running out of memory in a trace or attention mass is a MemoryLimitError naming the length, the need
and the remedies; the Lens works afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.analysis import attention_mass
from repo_lens.capture import forward_bytes
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model

TEXT = "the needle is in the haystack " * 4
FAILURES = [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            MemoryError(),
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                         "you tried to allocate 68719476736 bytes")]


@pytest.fixture
def lens():
    torch.manual_seed(0)
    return repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=2), ByteTokenizer())


def fail_next_forward(monkeypatch, model, failure):
    """The model's next forward raises ``failure`` once (a simulated allocation failure), then works."""
    block = model.blocks[1]
    real = type(block).forward

    def failing(self, *args, **kwargs):
        monkeypatch.setattr(type(block), "forward", real)
        raise failure

    monkeypatch.setattr(type(block), "forward", failing)


@pytest.mark.parametrize("failure", FAILURES, ids=["cuda", "memoryerror", "cpu-allocator"])
def test_trace_out_of_memory_names_length_need_and_remedies(lens, monkeypatch, failure):
    expected = lens.trace(TEXT).positions
    n_tokens = len(lens.encode(TEXT))
    fail_next_forward(monkeypatch, lens.model, failure)
    with pytest.raises(repo_lens.MemoryLimitError) as caught:
        lens.trace(TEXT)
    message = str(caught.value)
    assert f"tracing of {n_tokens} tokens ran out of memory on cpu (float32)" in message
    need = forward_bytes(lens.model, n_tokens) / 2**30
    assert f"about {need:.2f} GiB" in message
    assert "truncate=True" in message and "device='cuda'" in message and "dtype='bfloat16'" in message
    assert "attention_mass" in message
    assert caught.value.__context__ is None  # the failed pass's frames (and tensors) are not kept alive
    np.testing.assert_array_equal(lens.trace(TEXT).positions, expected)  # the Lens works afterwards


def test_attention_mass_out_of_memory(lens, monkeypatch):
    ids = lens.encode(TEXT)
    spans, query = {"needle": (4, 10)}, (len(ids) - 4, len(ids))
    expected = attention_mass(lens, ids, spans, query).by_layer_head["needle"]
    fail_next_forward(monkeypatch, lens.model, FAILURES[0])
    with pytest.raises(repo_lens.MemoryLimitError, match=f"attention mass of {len(ids)} tokens.*layers=") as caught:
        attention_mass(lens, ids, spans, query)
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, repo_lens.RepoLensError)
    np.testing.assert_array_equal(attention_mass(lens, ids, spans, query).by_layer_head["needle"], expected)


def test_other_runtime_errors_are_not_mistaken_for_memory(lens, monkeypatch):
    fail_next_forward(monkeypatch, lens.model, RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch") as caught:
        lens.trace(TEXT)
    assert not isinstance(caught.value, repo_lens.MemoryLimitError)


def test_forward_bytes_grows_with_the_square_of_the_length(lens):
    cfg = lens.model.cfg
    short, long = forward_bytes(lens.model, 1000), forward_bytes(lens.model, 2000)
    assert long - 2 * short == 2 * cfg.n_heads * 4 * (2000**2 - 2 * 1000**2)  # the linear parts cancel
