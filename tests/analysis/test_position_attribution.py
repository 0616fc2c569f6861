"""position_attribution against brute force: for every learned mechanism with a position module, removing a
component from the layer's input by a hook written here (the component itself taken from the model's own
hooks, a head's part from hook_result or from a re-run without that head) moves the layer's positions by
exactly the attributed value; the gradient method is the ablation where the module is linear and agrees
with reverse-mode autograd where it is not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens import InputError
from repo_lens.analysis.position_attribution import position_attribution
from repo_lens.model.tiny import tiny_model

IDS = [72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33, 32, 78, 101, 119]
CASES = [("repo", "olmo2"), ("repo", "llama"), ("lpi-layer", "llama"), ("lpi-layer", "olmo2"), ("grape-m", "llama"),
         ("grape-m", "olmo2"), ("fox", "llama"), ("repo-multihead-continuous", "olmo2")]


def lens_of(kind: str, family: str) -> repo_lens.Lens:
    return repo_lens.Lens(tiny_model(kind, n_layers=3, d_model=32, n_heads=4, family=family, seed=7).eval(), None)


def learned_layer(model) -> int:
    return max(i for i, kind in enumerate(model.cfg.layer_mechanisms) if kind != "rope")


def captured(model, names, hooks=()):
    seen = {}

    def keep(tensor, hook):
        seen[hook.name] = tensor.detach().clone()

    with torch.no_grad(), model.hooks(fwd_hooks=[*hooks, *[(name, keep) for name in names]]):
        model(torch.tensor([IDS]))
    return seen


def independent_parts(model, layer):
    """Every component, from the model's own hooks; heads from hook_result (pre-norm) or a re-run without them."""
    names = ["hook_embed"] + [f"blocks.{l}.{p}" for l in range(layer) for p in ("hook_attn_out", "hook_mlp_out")]
    names += [f"blocks.{l}.attn.hook_result" for l in range(layer)]
    seen = captured(model, names)
    parts = {"embed": seen["hook_embed"][0]}
    for l in range(layer):
        parts[f"{l}_attn_out"], parts[f"{l}_mlp_out"] = seen[f"blocks.{l}.hook_attn_out"][0], seen[f"blocks.{l}.hook_mlp_out"][0]
    for l in range(layer):
        for head in range(model.cfg.n_heads):
            if model.cfg.family == "llama":
                parts[f"L{l}H{head}"] = seen[f"blocks.{l}.attn.hook_result"][0, :, head]
            else:
                def without(z, hook, head=head):
                    z = z.clone()
                    z[:, :, head] = 0
                    return z
                rerun = captured(model, [f"blocks.{l}.hook_attn_out"], [(f"blocks.{l}.attn.hook_z", without)])
                parts[f"L{l}H{head}"] = seen[f"blocks.{l}.hook_attn_out"][0] - rerun[f"blocks.{l}.hook_attn_out"][0]
    return parts


def brute_force(model, layer, part):
    """The layer's positions with ``part`` subtracted from its input (its other inputs unchanged)."""
    position_hook = f"blocks.{layer}.attn.hook_pos"
    subtract = (f"blocks.{layer}.hook_resid_pre", lambda x, hook: x - part)
    return captured(model, [position_hook])[position_hook][0] - captured(model, [position_hook], [subtract])[position_hook][0]


@pytest.mark.parametrize(("kind", "family"), CASES)
def test_the_ablation_is_a_brute_force_path_ablation_of_each_component(kind, family):
    lens = lens_of(kind, family)
    layer = learned_layer(lens.model)
    found = position_attribution(lens, IDS, layer)
    parts = independent_parts(lens.model, layer)
    assert found.labels == list(parts)
    for index, label in enumerate(found.labels):
        expected = brute_force(lens.model, layer, parts[label]).double().numpy()  # [head, pos]
        np.testing.assert_allclose(found.values[..., index], expected, atol=2e-5, err_msg=label)
    assert np.abs(found.values).max() > 1e-3  # the components move the positions: the comparison is not of zeros


def test_the_heads_of_a_post_norm_block_are_not_its_pre_norm_shares():
    """On OLMo-2 blocks a head's part goes through the norm: it differs from its o_proj share."""
    lens = lens_of("repo", "olmo2")
    seen = captured(lens.model, ["blocks.0.attn.hook_result"])
    parts = independent_parts(lens.model, 2)
    assert not torch.allclose(parts["L0H1"], seen["blocks.0.attn.hook_result"][0, :, 1], atol=1e-4)


def test_the_gradient_equals_the_ablation_where_the_module_is_linear():
    lens = lens_of("repo-multihead-continuous", "olmo2")  # z = h W on the raw residual: linear in it
    exact = position_attribution(lens, IDS, 2)
    linear = position_attribution(lens, IDS, 2, method="gradient")
    np.testing.assert_allclose(linear.values, exact.values, atol=1e-5)
    np.testing.assert_allclose(linear.completeness_error, 0.0, atol=1e-4)


@pytest.mark.parametrize(("kind", "family"), [("repo", "llama"), ("grape-m", "olmo2"), ("lpi-layer", "llama")])
def test_the_gradient_is_reverse_mode_autograd_times_the_component(kind, family):
    lens = lens_of(kind, family)
    layer = learned_layer(lens.model)
    found = position_attribution(lens, IDS, layer, method="gradient", heads=[2], tokens=[5, 15])
    parts = independent_parts(lens.model, layer)
    resid = captured(lens.model, [f"blocks.{layer}.hook_resid_pre"])[f"blocks.{layer}.hook_resid_pre"][0]
    block = lens.model.blocks[layer]
    for column, token in enumerate(found.tokens):
        x = resid.clone().requires_grad_(True)
        z = block.attn.mechanism(block._norm("before_attention", x[None]), 0)[0, 2, token]
        (gradient,) = torch.autograd.grad(z, x)
        for index, label in enumerate(found.labels):
            expected = float((gradient * parts[label]).sum())
            assert found.values[0, column, index] == pytest.approx(expected, abs=1e-4), label
    assert found.completeness_error.shape == (1, 2) and np.isfinite(found.completeness_error).all()


def test_shared_increments_move_only_with_the_embedding():
    """lpi: δ = softplus(DeltaMLP(e)) from the embeddings alone; removing the embedding leaves δ of a zero input."""
    lens = lens_of("lpi", "llama")
    layer = learned_layer(lens.model)
    found = position_attribution(lens, IDS, layer)
    embed = found.labels.index("embed")
    others = [i for i in range(len(found.labels)) if i != embed]
    assert np.abs(found.values[..., others]).max() == 0.0
    mlp = lens.model.shared_delta
    with torch.no_grad():
        zero_delta = torch.nn.functional.softplus(mlp.fc_out(torch.nn.functional.gelu(mlp.fc_in.bias)))[0]
    expected = found.positions - np.cumsum(np.full(len(IDS), float(zero_delta)))
    np.testing.assert_allclose(found.values[..., embed], expected, atol=1e-5)


def test_the_table_top_and_bad_input():
    lens = lens_of("repo", "llama")
    found = position_attribution(lens, IDS, 2, heads=[0, 3], tokens=[4], per_head=False)
    assert found.labels == ["embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    table = found.table()
    assert len(table) == 2 * 1 * 5 and set(table.columns) == {"layer", "head", "token", "component", "value"}
    top = found.top(3, 4, k=2)
    assert abs(top[0][1]) >= abs(top[1][1]) and top[0][1] == table.query("head == 3").value.abs().max() * np.sign(top[0][1])
    with pytest.raises(InputError, match="layer 0 is 'rope'"):
        position_attribution(lens, IDS, 0)
    with pytest.raises(InputError, match="method must be one of"):
        position_attribution(lens, IDS, 2, method="shapley")
    with pytest.raises(InputError, match="head 4 does not exist; this model has heads 0..3"):
        position_attribution(lens, IDS, 2, heads=[4])


def test_token_attribution_is_exact_where_the_position_is_linear_in_the_embeddings():
    """One OLMo-2 layer whose positions are z = e W (no norm before it): ∂z_t/∂e_s is W's row for s = t, 0 else."""
    from repo_lens.analysis import token_attribution
    from repo_lens.model import LensModel, ModelConfig

    cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
                      layer_mechanisms=["repo-multihead-continuous"])
    torch.manual_seed(0)
    lens = repo_lens.Lens(LensModel(cfg).eval(), None)
    found = token_attribution(lens, IDS[:6], layer=0, head=1, token=4)
    weight = lens.model.blocks[0].attn.mechanism.dynamic_map.weight.detach().double().numpy()
    expected = np.zeros((5, 16))
    expected[4] = weight[1]
    np.testing.assert_allclose(found.gradient, expected, atol=1e-7)
    embedding = lens.model.embed.weight.detach().double().numpy()[IDS[4]]
    assert found.values[4] == pytest.approx(float(embedding @ weight[1]), abs=1e-6)
    assert found.position == pytest.approx(float(embedding @ weight[1]), abs=1e-5)


def test_token_attribution_matches_finite_differences_through_the_layers_below():
    from repo_lens.analysis import token_attribution

    lens = lens_of("grape-m", "llama")
    found = token_attribution(lens, IDS, layer=2, head=3, token=12)
    position = "blocks.2.attn.hook_pos"
    step = 1e-2
    for source, coordinate in [(3, 5), (12, 0), (7, 20)]:
        def nudge(sign):
            def hook(x, hook):
                x = x.clone()
                x[0, source, coordinate] += sign * step
                return x
            return captured(lens.model, [position], [("hook_embed", hook)])[position][0, 3, 12].item()
        numeric = (nudge(1) - nudge(-1)) / (2 * step)
        assert found.gradient[source, coordinate] == pytest.approx(numeric, rel=2e-2, abs=2e-3)
    assert found.gradient.shape == (13, 32) and np.abs(found.gradient).max() > 1e-3
