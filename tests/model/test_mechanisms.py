"""Learned increments, GRAPE-M, FoX, CoPE and GRAPE-AP against references written from their
sources' equations (tests/reference_mechanisms.py), plus the identities the sources state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reference_mechanisms as ref
from repo_lens.lens import Lens
from repo_lens.model.increments import SOFTPLUS_ONE, ContentPhasePositions, LayerIncrementPositions
from repo_lens.model import LensModel, ModelConfig

NEW_KINDS = ["lpi", "lpi-layer", "grape-m", "fox", "cope", "grape-ap", "lpi-head", "lpi-table", "lpi-resid",
             "lpi-resid-head", "lpi-pope", "lpi-resid-head-pope"]
T = 12


def make_model(kind: str, layers=("rope", None, None), seed: int = 0, std: float = 0.3, **config) -> LensModel:
    mechanisms = [kind if entry is None else entry for entry in layers]
    cfg = ModelConfig(family="olmo2", vocab_size=60, d_model=32, n_layers=len(mechanisms), n_heads=4, d_mlp=64,
                      layer_mechanisms=mechanisms, **config)
    torch.manual_seed(seed)
    model = LensModel(cfg).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim >= 2:
                param.normal_(std=std)
        if hasattr(getattr(model, "shared_delta", None), "table"):  # a frozen δ table holds ones until loaded
            model.shared_delta.deltas.uniform_(0.2, 2.0, generator=torch.Generator().manual_seed(seed))
    return model


def run(model: LensModel, ids: torch.Tensor, names=("hook_pos", "hook_delta", "hook_rot_q", "hook_rot_k",
                                                     "hook_pattern", "hook_resid_pre", "hook_embed")):
    logits, cache = model.run_with_cache(ids, names_filter=lambda name: name.endswith(names))
    return logits, cache


def ids_for(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 60, (1, T), generator=torch.Generator().manual_seed(seed))


def _weights(mlp):
    return mlp.fc_in.weight, mlp.fc_in.bias, mlp.fc_out.weight, mlp.fc_out.bias


def test_shared_increments_are_a_running_sum_of_the_embedding_delta_mlp():
    model = make_model("lpi")
    _, cache = run(model, ids_for())
    delta = ref.shared_increments(cache["hook_embed"][0], _weights(model.shared_delta))
    expected = ref.running_sum(delta)
    for layer in (1, 2):
        for head in range(4):
            torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pos"][0, head].double(), expected,
                                       atol=1e-5, rtol=1e-5)
    assert (delta > 0).all()


def test_per_layer_increments_read_each_layers_input_and_stay_below_the_bound():
    model = make_model("lpi-layer", lpi_max_delta=10.0, std=1.0)
    _, cache = run(model, ids_for())
    for layer in (1, 2):
        h = cache[f"blocks.{layer}.hook_resid_pre"][0]
        delta = ref.bounded_increments(h, _weights(model.blocks[layer].attn.mechanism.delta_mlp), 10.0)
        torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pos"][0, 0].double(), ref.running_sum(delta),
                                   atol=1e-4, rtol=1e-5)
        assert 0 < delta.min() and delta.max() < 10.0


def test_grape_m_phase_is_the_exclusive_running_sum_of_softplus():
    model = make_model("grape-m")
    _, cache = run(model, ids_for())
    layer = 2
    phase_map = model.blocks[layer].attn.mechanism.phase_map
    expected = ref.content_phase(cache[f"blocks.{layer}.hook_resid_pre"][0], phase_map.weight, phase_map.bias)
    torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pos"][0].double(), expected, atol=1e-4, rtol=1e-5)
    assert (cache[f"blocks.{layer}.attn.hook_pos"][0, :, 0] == 0).all()


@pytest.mark.parametrize("kind", ["lpi", "lpi-layer", "grape-m", "lpi-head", "lpi-table", "lpi-resid", "lpi-resid-head"])
def test_unit_increments_reproduce_rope(kind):
    """δ ≡ 1 (written into the increments) is RoPE: the same weights give the same logits."""
    rope = make_model("rope", layers=("rope", "rope", "rope"))
    model = make_model(kind)
    model.load_state_dict(rope.state_dict(), strict=False)
    ids = ids_for()
    ones = lambda delta, hook: torch.ones_like(delta)  # noqa: E731
    hooks = [(f"blocks.{layer}.attn.mechanism.hook_delta", ones) for layer in (1, 2)]
    with torch.no_grad():
        expected = rope(ids)
        assert (model(ids) - expected).abs().max() > 1e-3  # learned increments do change the model
        got = model.run_with_hooks(ids, fwd_hooks=hooks)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)


def test_lpi_starts_as_rope_when_the_increment_mlp_is_initialised():
    """seeds/002 initialises the output bias so δ ≈ 1: with zero output weights δ = 1 everywhere."""
    rope = make_model("rope", layers=("rope", "rope", "rope"))
    model = make_model("lpi")
    model.load_state_dict(rope.state_dict(), strict=False)
    with torch.no_grad():
        model.shared_delta.fc_out.weight.zero_()
        ids = ids_for()
        torch.testing.assert_close(model(ids), rope(ids), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["fox", "cope", "grape-ap"])
def test_additive_mechanisms_match_their_equations(kind):
    model = make_model(kind, std=0.5)
    _, cache = run(model, ids_for())
    for layer in (1, 2):
        mechanism = model.blocks[layer].attn.mechanism
        q, k = (cache[f"blocks.{layer}.attn.{name}"][0].transpose(0, 1) for name in ("hook_rot_q", "hook_rot_k"))
        for head in range(4):
            if kind == "fox":
                gate = mechanism.forget_gate
                h = cache[f"blocks.{layer}.hook_resid_pre"][0].double()
                logit = h @ gate.weight[head].double() + gate.bias[head].double()
                bias = ref.fox_bias(torch.log(torch.sigmoid(logit)).tolist())
            elif kind == "cope":
                bias = ref.cope_bias(q[head], mechanism.position_embeddings, mechanism.max_position)
            else:
                bias = ref.grape_ap_bias(float(mechanism.potential_bias[head].detach()))
            expected = ref.pattern(q[head], k[head], bias)
            torch.testing.assert_close(cache[f"blocks.{layer}.attn.hook_pattern"][0, head].double(), expected,
                                       atol=1e-5, rtol=1e-4)


def test_cope_clamps_positions_at_p_max():
    model = make_model("cope", std=0.5, cope_max_position=3)
    _, cache = run(model, ids_for())
    mechanism = model.blocks[2].attn.mechanism
    q, k = (cache[f"blocks.2.attn.{name}"][0].transpose(0, 1) for name in ("hook_rot_q", "hook_rot_k"))
    expected = ref.pattern(q[1], k[1], ref.cope_bias(q[1], mechanism.position_embeddings, 3))
    torch.testing.assert_close(cache["blocks.2.attn.hook_pattern"][0, 1].double(), expected, atol=1e-5, rtol=1e-4)


def test_cope_with_all_gates_one_uses_token_relative_positions():
    """seeds/004: if the gates are always 1, p_ij = i − j + 1 — relative positions."""
    model = make_model("cope", std=0.5, cope_max_position=T + 1)
    ids = ids_for()
    _, cache = run(model, ids)
    hooks = [(f"blocks.{layer}.attn.mechanism.hook_gates", lambda g, hook: torch.ones_like(g)) for layer in (1, 2)]
    seen = {}
    hooks.append(("blocks.1.attn.hook_pattern", lambda p, hook: seen.setdefault("pattern", p)))
    hooks.append(("blocks.1.attn.hook_rot_q", lambda x, hook: seen.update(q=x.transpose(1, 2))))
    hooks.append(("blocks.1.attn.hook_rot_k", lambda x, hook: seen.update(k=x.transpose(1, 2))))
    with torch.no_grad():
        model.run_with_hooks(ids, fwd_hooks=hooks)
    embeddings = model.blocks[1].attn.mechanism.position_embeddings.detach().double()
    for head in range(4):
        q, k = seen["q"][0, head], seen["k"][0, head]
        q_dot_e = q.double() @ embeddings
        relative = lambda i, j, scores, q_dot_e=q_dot_e: float(q_dot_e[i, i - j + 1])  # noqa: E731
        torch.testing.assert_close(seen["pattern"][0, head].double(), ref.pattern(q, k, relative), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(seen["pattern"][0, head].double(),
                                   ref.pattern(q, k, ref.cope_bias(q, embeddings, T + 1, gates_override=1.0)),
                                   atol=1e-5, rtol=1e-4)


def test_fox_positions_are_the_running_sum_of_minus_log_forget_gates():
    model = make_model("fox")
    _, cache = run(model, ids_for())
    gate = model.blocks[1].attn.mechanism.forget_gate
    h = cache["blocks.1.hook_resid_pre"][0].double()
    delta = -torch.log(torch.sigmoid(h @ gate.weight.detach().double().T + gate.bias.detach().double())).T  # [H, T]
    torch.testing.assert_close(cache["blocks.1.attn.hook_pos"][0].double(), ref.running_sum(delta), atol=1e-5, rtol=1e-5)
    assert (delta > 0).all()  # −log f > 0: the positions only grow


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_decoding_with_a_kv_cache_matches_a_full_forward(kind):
    model = make_model(kind)
    ids = torch.randint(0, 60, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = [model(ids[:, :5], cache)] + [model(ids[:, t:t + 1], cache) for t in range(5, 16)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_traces_store_increments_whose_running_sum_is_the_positions(kind):
    lens = Lens(make_model(kind, layers=("rope", None, None)), tokenizer=None, meta={"name": kind})
    trace = lens.trace(list(range(1, 11)))
    increments = trace.extras["increments"]
    assert increments.shape == trace.positions.shape and increments.dtype == np.float32
    assert trace.meta["increments"]["learned_layers"] == [1, 2]
    running = np.cumsum(increments, axis=-1)
    if kind == "grape-m":  # the phase is an exclusive running sum
        running[1:] -= increments[1:]
    np.testing.assert_allclose(running, trace.positions, atol=1e-4)
    np.testing.assert_allclose(increments[0], np.diff(np.arange(10.0), prepend=0.0)[None].repeat(4, 0))


def test_trace_increments_survive_save_and_load(tmp_path):
    from repo_lens import Trace

    trace = Lens(make_model("lpi", layers=(None, None)), tokenizer=None).trace(list(range(1, 20)))
    path = tmp_path / "t.safetensors"
    trace.save(path)
    again = Trace.load(path)
    np.testing.assert_array_equal(again.extras["increments"], trace.extras["increments"])
    assert again.meta["increments"] == trace.meta["increments"]


def test_increments_started_at_integers_give_rope_positions_and_the_cache_carries_the_running_sum():
    """start_at_integers makes δ = 1 for every input (lpi-layer: max_delta · sigmoid(logit(1 / max_delta)); GRAPE-M:
    softplus(softplus⁻¹(1))): positions 1..T (an inclusive sum), phases 0..T-1 (an exclusive one). Split over a
    KV cache's state, the running sum goes on from the cached tokens."""
    assert abs(float(torch.nn.functional.softplus(torch.tensor(SOFTPLUS_ONE))) - 1.0) < 1e-6
    model = make_model("lpi-layer", layers=("lpi-layer", "grape-m"), lpi_max_delta=10.0, std=1.0)
    layer, grape = model.blocks[0].attn.mechanism, model.blocks[1].attn.mechanism
    assert isinstance(layer, LayerIncrementPositions) and isinstance(grape, ContentPhasePositions)
    h = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for positions in (layer, grape):
            state: dict = {}
            pieces = torch.cat([positions(h[:, :5], state=state), positions(h[:, 5:], state=state)], dim=-1)
            full = positions(h)
            torch.testing.assert_close(pieces, full)
            assert not torch.allclose(full[..., 1:] - full[..., :-1], torch.ones(2, 4, T - 1))  # not integers yet
            positions.start_at_integers()
        torch.testing.assert_close(layer(h), torch.arange(1.0, T + 1).expand(2, 4, T))
        torch.testing.assert_close(grape(h), torch.arange(0.0, T).expand(2, 4, T))
