"""The generic Hugging Face path (nnsight): any causal LM's positions and attention mass, checked
against an independent computation from transformers' own ``output_attentions=True``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("nnsight", reason="the generic HF path needs nnsight: pip install nnsight")

import repo_lens  # noqa: E402
from repo_lens.analysis.attention_mass import AttentionMass  # noqa: E402
from repo_lens.errors import CheckpointError, InputError  # noqa: E402
from repo_lens.hf import attention_mass_hf, load_hf, trace_hf  # noqa: E402

SPANS = {"needle": (6, 11), "question": (30, 38)}
QUERY = (38, 44)


def _save(model, directory):
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


def _random(config, seed):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # sharper attention than the default init, so the spans really differ
        for name, param in model.named_parameters():
            if "q_proj.weight" in name or "k_proj.weight" in name:
                param.mul_(8.0)
    return model


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    from transformers import Qwen2Config

    config = Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return _save(_random(config, 0), tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    from transformers import MistralConfig

    config = MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
                           sliding_window=16)
    return _save(_random(config, 1), tmp_path_factory.mktemp("mistral"))


def reference_mass(directory, ids, spans, query, layers=None):
    """Per-token mass from the full attention matrices transformers returns (no repo_lens code)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(torch.tensor([ids]), output_attentions=True).attentions
    start, end = query
    layers = range(len(attentions)) if layers is None else layers
    out = {}
    in_span = np.zeros(len(ids), bool)
    for name, (a, b) in spans.items():
        out[name] = np.mean([attentions[l][0, :, start:end, a:b].sum(-1).mean(-1).numpy() / (b - a) for l in layers])
        in_span[a:b] = True
    rest = [k for k in range(start) if not in_span[k]]
    out["rest"] = np.mean([attentions[l][0, :, start:end, rest].sum(-1).mean(-1).numpy() / len(rest) for l in layers])
    return out


@pytest.mark.parametrize("fixture", ["qwen_dir", "mistral_dir"])
def test_attention_mass_equals_output_attentions(fixture, request):
    directory = request.getfixturevalue(fixture)
    ids = torch.randint(0, 96, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    mass = attention_mass_hf(load_hf(directory, device="cpu"), ids, SPANS, QUERY)
    expected = reference_mass(directory, ids, SPANS, QUERY)
    assert isinstance(mass, AttentionMass)
    assert set(mass.per_token) == {"needle", "question", "rest"}
    for name, value in expected.items():
        assert mass.per_token[name] == pytest.approx(value, abs=1e-5), name
    assert mass.by_layer_head["needle"].shape == (mass.self_mass.shape[0], 4)
    total = sum(mass.total(name) for name in mass.per_token) + mass.self_mass.mean()
    assert total == pytest.approx(1.0, abs=1e-5)
    assert mass.layer_kinds == ["rope"] * len(mass.layers)


def test_layer_subset_stops_early_and_matches(qwen_dir):
    ids = torch.randint(0, 96, (60,), generator=torch.Generator().manual_seed(3)).tolist()
    hf_lens = load_hf(qwen_dir, device="cpu")
    mass = attention_mass_hf(hf_lens, ids, SPANS, QUERY, layers=[1])
    expected = reference_mass(qwen_dir, ids, SPANS, QUERY, layers=[1])
    assert mass.layers == [1]
    for name, value in expected.items():
        assert mass.per_token[name] == pytest.approx(value, abs=1e-5), name
    full = attention_mass_hf(hf_lens, ids, SPANS, QUERY)
    np.testing.assert_allclose(full.by_layer_head["needle"][1], mass.by_layer_head["needle"][0], atol=1e-7)


def test_a_loaded_sdpa_model_is_switched_to_eager(qwen_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(qwen_dir), attn_implementation="sdpa").eval()
    ids = list(range(50))
    mass = attention_mass_hf(model, ids, {"needle": (5, 9)}, (45, 50))
    expected = reference_mass(qwen_dir, ids, {"needle": (5, 9)}, (45, 50))
    assert mass.per_token["needle"] == pytest.approx(expected["needle"], abs=1e-5)


def test_trace_hf_positions_are_the_models_position_ids(qwen_dir, tmp_path):
    ids = list(range(1, 31))
    trace = trace_hf(qwen_dir, ids, device="cpu")
    assert isinstance(trace, repo_lens.Trace)
    assert trace.positions.shape == (3, 4, 30) and trace.positions.dtype == np.float32
    assert trace.layer_kinds == ["rope"] * 3
    np.testing.assert_array_equal(trace.positions[2, 3], np.arange(30, dtype=np.float32))
    assert "rotary_emb" in trace.meta["positions_source"]
    loaded = repo_lens.Trace.load(trace.save(tmp_path / "t.safetensors"))
    np.testing.assert_array_equal(loaded.positions, trace.positions)


def test_memory_cost_is_announced(qwen_dir, monkeypatch):
    import repo_lens.hf.model as hf_model

    monkeypatch.setattr(hf_model, "MEMORY_WARNING_BYTES", 0)
    with pytest.warns(ResourceWarning, match=r"\[4 heads × 60 × 60\].*T²"):
        attention_mass_hf(load_hf(qwen_dir, device="cpu"), list(range(60)), SPANS, QUERY)
    assert hf_model.eager_attention_bytes(32, 8192) == 32 * 8192**2 * 8 + 8192**2 * 4


def test_bad_input_is_named(qwen_dir, tmp_path):
    hf_lens = load_hf(qwen_dir, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError, match="overlaps the query rows"):
            attention_mass_hf(hf_lens, list(range(50)), {"needle": (40, 46)}, (45, 50))
        with pytest.raises(InputError, match="layer 7 does not exist; this model has layers 0..2"):
            attention_mass_hf(hf_lens, list(range(50)), {"needle": (4, 6)}, (45, 50), layers=[7])
        with pytest.raises(InputError, match="not text"):
            attention_mass_hf(hf_lens, "some text", {"needle": (4, 6)}, (45, 50))
        with pytest.raises(InputError, match="longer than the model's context of 128"):
            attention_mass_hf(hf_lens, [1] * 200, {"needle": (4, 6)}, (195, 200))
        with pytest.raises(InputError, match="no tokenizer"):
            trace_hf(hf_lens, "hello")
        with pytest.raises(InputError, match="vocabulary"):
            trace_hf(hf_lens, [1, 2, 500])
    with pytest.raises(CheckpointError, match="no config.json"):
        load_hf(tmp_path, device="cpu")
    truncated = trace_hf(hf_lens, [1] * 200, truncate=True)
    assert len(truncated) == 128 and truncated.meta["truncation"] == {"original_tokens": 200, "kept_tokens": 128}

