"""Every analysis of repo_lens.analysis and repo_lens.hf on the generic Hugging Face lens (an HFLens from
repo_lens.hf.load_hf), on tiny Llama and Qwen2 checkpoints that stock transformers writes here: each either
works, checked against transformers' own eager forward (its attention weights; the position_ids 0..T-1 a plain
forward gives its rotary embedding), or refuses with an InputError naming what it needs.
docs/guide/checkpoints.md tabulates the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import hf_model, save_hf_model
from repo_lens import analysis
from repo_lens.errors import InputError
from repo_lens.protocol import HookedLensProtocol, LensProtocol

pytest.importorskip("nnsight", reason="the HF lens needs nnsight: pip install nnsight")

from repo_lens.hf import HFLens, attention_mass_hf, load_hf, trace_hf  # noqa: E402  (after the skip: needs nnsight)

IDS = torch.randint(2, 64, (24,), generator=torch.Generator().manual_seed(11)).tolist()
SPANS, QUERY = {"needle": (3, 8), "question": (14, 18)}, (20, 24)
N_LAYERS, N_HEADS = 3, 4


def _qwen2_config():
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=N_LAYERS,
                       num_attention_heads=N_HEADS, num_key_value_heads=2, max_position_embeddings=128,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=0)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def generic(request, tmp_path_factory):
    """(the HFLens, transformers' own eager model of the same directory, its attention weights of IDS: one
    [heads, T, T] array per layer)."""
    from transformers import AutoModelForCausalLM

    if request.param == "llama":
        directory = request.getfixturevalue("llama_dir")
    else:
        directory = save_hf_model(hf_model(_qwen2_config(), seed=4), tmp_path_factory.mktemp("qwen2"))
    reference = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = reference(torch.tensor([IDS]), output_attentions=True).attentions
    return load_hf(directory, device="cpu"), [weights[0].double().numpy() for weights in attentions]


# ------------------------------------------------------------------------------------------------- what works

def test_the_generic_lens_is_a_lens_but_not_a_hooked_one(generic):
    lens, _ = generic
    assert isinstance(lens, HFLens) and isinstance(lens, LensProtocol) and not isinstance(lens, HookedLensProtocol)
    assert not hasattr(lens, "model")


def test_trace_and_trace_hf_read_the_position_ids_of_a_plain_forward(generic):
    lens, _ = generic
    expected = np.broadcast_to(np.arange(len(IDS), dtype=np.float32), (N_LAYERS, N_HEADS, len(IDS)))
    for trace in (lens.trace(IDS), trace_hf(lens, IDS), lens.trace_batch([IDS, IDS[:5]], batch_size=2)[0]):
        np.testing.assert_array_equal(trace.positions, expected)
        assert trace.layer_kinds == ["rope"] * N_LAYERS and trace.token_ids.tolist() == IDS


def test_attention_mass_hf_is_the_eager_weights_summed_over_each_span(generic):
    lens, attentions = generic
    mass = attention_mass_hf(lens, IDS, SPANS, QUERY)
    start, end = QUERY
    rest = [key for key in range(start) if not any(a <= key < b for a, b in SPANS.values())]
    for layer, weights in enumerate(attentions):
        rows = weights[:, start:end, :]  # [head, row, key]
        for name, (a, b) in SPANS.items():
            np.testing.assert_allclose(mass.by_layer_head[name][layer], rows[..., a:b].sum(-1).mean(-1) / (b - a),
                                       rtol=0, atol=1e-6)
        np.testing.assert_allclose(mass.by_layer_head["rest"][layer], rows[..., rest].sum(-1).mean(-1) / len(rest),
                                   rtol=0, atol=1e-6)
        np.testing.assert_allclose(mass.self_mass[layer], rows[..., start:end].sum(-1).mean(-1), rtol=0, atol=1e-6)


def test_score_decomposition_splits_the_scores_whose_softmax_is_the_eager_pattern(generic):
    lens, attentions = generic
    rows = [9, 17, 23]
    for layer in range(N_LAYERS):
        found = analysis.score_decomposition(lens, IDS, layer, queries=rows)
        assert found.kind == "rope" and found.keys.tolist() == list(range(24))
        expected = attentions[layer][:, rows, :]
        np.testing.assert_allclose(found.patterns["actual"], expected, rtol=0, atol=1e-5)
        score = np.where(found.mask, found.score, -np.inf)  # content + position, NaN after each query row
        softmax = np.exp(score - score.max(-1, keepdims=True))
        np.testing.assert_allclose(softmax / softmax.sum(-1, keepdims=True), expected, rtol=0, atol=1e-5)


def test_vocabulary_increments_are_rope_steps_of_one(generic):
    lens, _ = generic
    found = analysis.vocabulary_increments(lens, ids=[5, 9, 30, 63], prefix=[1])
    np.testing.assert_array_equal(found, np.ones((N_LAYERS, 4)))  # position t − (t − 1) in every RoPE layer


def test_the_array_analyzers_take_a_generic_trace(generic):
    lens, _ = generic
    trace = lens.trace(IDS)
    increments = analysis.trace_increments(trace)
    assert np.isnan(increments[..., 0]).all() and (increments[..., 1:] == 1.0).all()  # no step before token 0
    np.testing.assert_array_equal(analysis.range_stats(trace.positions), np.full((N_LAYERS, N_HEADS), 23.0))
    patterns = analysis.chunk_patterns(trace.positions, size=8)
    assert patterns.shape == (N_LAYERS, N_HEADS, 3) and (patterns == "mono").all()  # 0..23 rises by 1 a token


# ------------------------------------------------------------------------------------------ what refuses it

def _niah_records(lens, cells):
    from repo_lens.studies.items import niah_records

    return niah_records(lens, cells)


REFUSED = [
    ("attention_mass", lambda lens: analysis.attention_mass(lens, IDS, SPANS, QUERY),
     ("attention_mass needs a Lens (with .model) or a LensModel; got HFLens", "repo_lens.hf.attention_mass_hf")),
    ("attention_mass_batch", lambda lens: analysis.attention_mass_batch(lens, [(IDS, SPANS, QUERY)]),
     ("attention_mass needs a Lens (with .model) or a LensModel; got HFLens", "repo_lens.hf.attention_mass_hf")),
    ("position_attribution", lambda lens: analysis.position_attribution(lens, IDS, 1),
     ("position_attribution needs a model loaded by repo_lens", "got HFLens", "repo_lens.load(path)")),
    ("token_attribution", lambda lens: analysis.token_attribution(lens, IDS, 1, 0, 5),
     ("token_attribution needs a model loaded by repo_lens", "got HFLens", "repo_lens.load(path)")),
    ("niah study", lambda lens: _niah_records(lens, [(64, 0.5, 0)]),
     ("the niah study needs a model loaded by repo_lens", "got HFLens")),
]


@pytest.mark.parametrize("name,call,parts", [pytest.param(*case, id=case[0]) for case in REFUSED])
def test_what_needs_repo_lens_hooks_refuses_the_generic_lens_naming_what_it_needs(generic, name, call, parts):
    lens, _ = generic
    with pytest.raises(InputError) as caught:
        call(lens)
    message = str(caught.value)
    assert message.startswith(parts[0]) and all(part in message for part in parts[1:]), message
