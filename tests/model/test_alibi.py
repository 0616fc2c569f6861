"""ALiBi (Press et al., 2022; GRAPE-A's special case in seeds/003) against a float64 loop written from its
equation, logit_ij = q_i·k_j/√d − m_h·(i − j), and through everything the other mechanisms go through:
hooks, KV cache, traces, attention mass, the CLI's tiny models, training, the figures' colours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reference_mechanisms as ref
import repo_lens
from repo_lens.analysis import attention_mass
from repo_lens.cli import main as cli_main
from repo_lens.lens import Lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.alibi import alibi_slopes
from repo_lens.model.registry import mechanism_kinds
from repo_lens.plots.style import kind_color

T = 12
SLOPES_4 = [1 / 4, 1 / 16, 1 / 64, 1 / 256]  # 2^(−8h/4), h = 1..4


def make_model(layers=("rope", "alibi", "alibi"), n_heads: int = 4, seed: int = 0, std: float = 0.3) -> LensModel:
    cfg = ModelConfig(family="olmo2", vocab_size=60, d_model=32, n_layers=len(layers), n_heads=n_heads, d_mlp=64,
                      head_dim=8, layer_mechanisms=list(layers))
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.normal_(std=std)
    return model


def ids_for(seed: int = 1, length: int = T, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, 60, (batch, length), generator=torch.Generator().manual_seed(seed))


def alibi_pattern(q: torch.Tensor, k: torch.Tensor, slope: float) -> torch.Tensor:
    """One head's causal attention probabilities, float64, from the ALiBi equation."""
    return ref.pattern(q, k, lambda i, j, scores: -slope * (i - j))


def test_slopes_are_the_papers_geometric_sequence():
    assert alibi_slopes(8) == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]  # the paper's example
    assert alibi_slopes(4) == SLOPES_4
    assert alibi_slopes(1) == [1 / 256]
    # other head counts: the power of two below, then every other slope of twice that many heads
    assert alibi_slopes(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    assert alibi_slopes(3) == [1 / 16, 1 / 256, 1 / 4]
    assert len(set(alibi_slopes(12))) == 12
    with pytest.raises(ValueError, match="at least one head"):
        alibi_slopes(0)


def test_attention_pattern_matches_the_alibi_equation():
    model = make_model()
    _, cache = model.run_with_cache(ids_for(), names_filter=lambda name: name.endswith(("hook_rot_q", "hook_rot_k",
                                                                                          "hook_pattern")))
    for layer in (1, 2):
        q, k = (cache[f"blocks.{layer}.attn.{name}"][0].transpose(0, 1) for name in ("hook_rot_q", "hook_rot_k"))
        for head, slope in enumerate(SLOPES_4):
            torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pattern"][0, head].double(),
                                       alibi_pattern(q[head], k[head], slope), atol=1e-5, rtol=1e-4)


def test_for_six_heads_the_interleaved_slopes_are_used():
    model = make_model(layers=("alibi",), n_heads=6)
    _, cache = model.run_with_cache(ids_for(), names_filter=lambda name: name.endswith(("hook_rot_q", "hook_rot_k",
                                                                                          "hook_pattern")))
    q, k = (cache[f"blocks.0.attn.{name}"][0].transpose(0, 1) for name in ("hook_rot_q", "hook_rot_k"))
    for head, slope in enumerate([1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]):
        torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, head].double(),
                                   alibi_pattern(q[head], k[head], slope), atol=1e-5, rtol=1e-4)


def test_positions_are_the_slope_times_the_index_and_the_increments_the_slope():
    model = make_model()
    _, cache = model.run_with_cache(ids_for(), names_filter=lambda name: name.endswith(("hook_pos", "hook_delta")))
    expected = torch.tensor(SLOPES_4, dtype=torch.float64)[:, None] * torch.arange(T, dtype=torch.float64)
    for layer in (1, 2):
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pos"][0].double(), expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.mechanism.hook_delta"][0].double(),
                                   torch.tensor(SLOPES_4, dtype=torch.float64)[:, None].expand(4, T))
    assert not [name for name, _ in model.named_parameters() if ".mechanism." in name]  # fixed, nothing learned
    assert not [name for name in model.state_dict() if ".mechanism." in name]


def test_alibi_is_fox_with_a_constant_forget_gate():
    """seeds/003: FoX with f_h = exp(−m_h) in every token is ALiBi."""
    alibi = make_model()
    fox = make_model(layers=("rope", "fox", "fox"))
    fox.load_state_dict(alibi.state_dict(), strict=False)
    with torch.no_grad():
        for layer in (1, 2):
            gate = fox.blocks[layer].attn.mechanism.forget_gate
            gate.weight.zero_()
            forget = torch.exp(-torch.tensor(SLOPES_4, dtype=torch.float64))
            gate.bias.copy_(torch.log(forget / (1 - forget)).float())  # sigmoid(bias) = f
        ids = ids_for(batch=2)
        torch.testing.assert_close(fox(ids), alibi(ids), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("hook_name", ["mechanism.hook_delta", "hook_pos"])
def test_zero_increments_or_positions_through_the_hooks_turn_the_layers_into_nope(hook_name):
    alibi = make_model()
    nope = make_model(layers=("rope", "nope", "nope"))
    nope.load_state_dict(alibi.state_dict())
    ids = ids_for()
    hooks = [(f"blocks.{layer}.attn.{hook_name}", lambda value, hook: torch.zeros_like(value)) for layer in (1, 2)]
    with torch.no_grad():
        assert (alibi(ids) - nope(ids)).abs().max() > 1e-3  # the bias does change the model
        torch.testing.assert_close(alibi.run_with_hooks(ids, fwd_hooks=hooks), nope(ids), atol=2e-5, rtol=1e-5)


def test_decoding_with_a_kv_cache_matches_a_full_forward_and_continues_the_positions():
    model = make_model()
    ids = ids_for(seed=3, length=16, batch=2)
    seen = []
    keep = [("blocks.2.attn.hook_pos", lambda positions, hook: seen.append(positions[0].detach().clone()))]
    with torch.no_grad(), model.hooks(fwd_hooks=keep):
        full = model(ids)
        cache = model.new_cache()
        steps = [model(ids[:, :5], cache)] + [model(ids[:, t:t + 1], cache) for t in range(5, 16)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    decoded = torch.cat(seen[1:], dim=-1)  # the prefix of 5 and the 11 single tokens
    torch.testing.assert_close(decoded, seen[0], atol=1e-6, rtol=0)


def test_traces_store_fixed_increments_whose_exclusive_sum_is_the_positions(tmp_path):
    lens = Lens(make_model(), tokenizer=None, meta={"name": "alibi"})
    trace = lens.trace(list(range(1, 11)))
    assert trace.layer_kinds == ["rope", "alibi", "alibi"]
    expected = np.array(SLOPES_4)[:, None] * np.arange(10)
    np.testing.assert_allclose(trace.positions[1], expected, atol=1e-6)
    increments = trace.extras["increments"]
    np.testing.assert_allclose(np.cumsum(increments[1:], axis=-1) - increments[1:], trace.positions[1:], atol=1e-5)
    assert trace.meta["increments"]["learned_layers"] == []  # ALiBi's slopes are fixed
    assert "alibi: the head's slope" in trace.meta["increments"]["definition"]
    path = tmp_path / "t.safetensors"
    trace.save(path)
    np.testing.assert_array_equal(repo_lens.Trace.load(path).positions, trace.positions)


def test_attention_mass_equals_the_full_pattern_computation():
    model = make_model(layers=("alibi", "rope", "alibi"))
    ids = ids_for(seed=5, length=40)
    spans, query = {"needle": (5, 12), "question": (28, 34)}, (34, 40)
    mass = attention_mass(model, ids[0].tolist(), spans, query)
    _, cache = model.run_with_cache(ids, names_filter=lambda name: name.endswith(("hook_rot_q", "hook_rot_k")))
    slopes = {0: SLOPES_4, 1: [0.0] * 4, 2: SLOPES_4}  # the RoPE layer's hooked q, k are already rotated
    rest = [key for key in range(query[0]) if not any(a <= key < b for a, b in spans.values())]
    for layer in range(3):
        q, k = (cache[f"blocks.{layer}.attn.{name}"][0].transpose(0, 1) for name in ("hook_rot_q", "hook_rot_k"))
        for head in range(4):
            rows = alibi_pattern(q[head], k[head], slopes[layer][head])[query[0]:query[1]].numpy()
            for name, (a, b) in spans.items():
                assert mass.by_layer_head[name][layer, head] == pytest.approx(rows[:, a:b].sum(-1).mean() / (b - a),
                                                                              abs=1e-6)
            assert mass.by_layer_head["rest"][layer, head] == pytest.approx(rows[:, rest].sum(-1).mean() / len(rest),
                                                                            abs=1e-6)


def test_cli_tiny_checkpoint_loads_and_traces(tmp_path, capsys):
    assert cli_main(["tiny", str(tmp_path / "tiny"), "--mechanism", "alibi"]) == 0
    lens = repo_lens.load(tmp_path / "tiny", device="cpu")
    trace = lens.trace("hello there")
    assert trace.layer_kinds == ["rope", "rope", "alibi", "alibi"]
    np.testing.assert_allclose(trace.positions[3], np.array(SLOPES_4)[:, None] * np.arange(11), atol=1e-6)


def test_a_few_training_steps_reduce_the_loss(tmp_path):
    from repo_lens.train import ByteLMTask, build_model, preset, train

    cfg = preset("tiny", mechanism="alibi", steps=30)
    texts = ["the quick brown fox jumps over the lazy dog. " * 20, "中文的句子也要学习一下。" * 30]
    task = ByteLMTask({"mix": (texts, texts[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)
    before = task.evaluate(build_model(cfg, task.vocab_size).eval())["val_bpb"]
    result = train(cfg, task, tmp_path / "run", progress=False)
    assert result.metrics["val_bpb"] < before - 1.0
    lens = repo_lens.load(tmp_path / "run", device="cpu")
    assert set(lens.model.layer_kinds) == {"alibi"}  # ALiBi replaces the position encoding of every layer


def test_figures_give_alibi_a_colour_of_its_own():
    from repo_lens.plots import spaced_tokens_figure

    others = {kind_color(kind) for kind in mechanism_kinds() if kind != "alibi"}
    assert kind_color("alibi") not in others
    trace = Lens(make_model(), tokenizer=None).trace(list(range(1, 11)))
    assert kind_color("alibi") in spaced_tokens_figure(trace).to_json()
