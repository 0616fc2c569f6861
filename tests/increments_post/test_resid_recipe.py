"""``repo-lens train --base MODEL --mechanism lpi-resid``: the learned-increments post's per-layer δ put into a
pretrained RoPE model from layer ⌈L/3⌉, δ_l = max_delta · sigmoid(fc2(gelu(fc1(RMSNorm_l(x_l))))) of the residual
stream x_l entering block l through a norm of its own (the post's ``DeltaMLP(bounded=True)``). The recipe starts
as the base (δ = 1: token t at t + 1, the inclusive sum), trains the DeltaMLPs, their norms and the adapters, and
ships a delta whose position modules (fp32) load back bit for bit."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from safetensors.torch import load_file

from repo_lens.cli import main
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import (RECIPE_KINDS, RepositionConfig, recipe_choices, recipe_config,
                                        repositioned_model, trainable_state)
from repo_lens.zoo.ship_delta import model_card, recipe_problems

from tests.train.shipped_weights import put_shipped

KIND = "lpi-resid"
MAX_DELTA = 10.0  # the post's bound on δ (DeltaMLP(max_delta=10.0)), ModelConfig.lpi_max_delta's default
FP32_EPS = torch.finfo(torch.float32).eps  # nn.RMSNorm(dim)'s eps in an fp32 forward: the post's DeltaMLP norm
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj")
MODULE_WEIGHTS = ("norm.weight", "delta_mlp.fc_in.weight", "delta_mlp.fc_in.bias", "delta_mlp.fc_out.weight",
                  "delta_mlp.fc_out.bias")
WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()


def position_names(layers: range) -> set[str]:
    return {f"blocks.{layer}.attn.mechanism.{weight}" for layer in layers for weight in MODULE_WEIGHTS}


def post_delta(x: torch.Tensor, weights: dict[str, torch.Tensor], layer: int) -> torch.Tensor:
    """δ of the post's bounded DeltaMLP [batch, pos], written from its definition: RMSNorm (eps = float32's machine
    epsilon, a learned weight), fc1, GELU, fc2, max_delta · sigmoid."""
    def weight(name: str) -> torch.Tensor:
        return weights[f"blocks.{layer}.attn.mechanism.{name}"].float()

    x = x.float()
    normed = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + FP32_EPS) * weight("norm.weight")
    hidden = torch.nn.functional.gelu(normed @ weight("delta_mlp.fc_in.weight").T + weight("delta_mlp.fc_in.bias"))
    raw = hidden @ weight("delta_mlp.fc_out.weight").T + weight("delta_mlp.fc_out.bias")
    return MAX_DELTA * torch.sigmoid(raw[..., 0])


@pytest.fixture(scope="module")
def base():
    """A tiny Llama with non-uniform attention norms, so that reading the residual stream and reading the
    attention's normed input give different δ."""
    model = tiny_model("rope", n_layers=4, d_model=32, n_heads=4, family="llama", seed=3)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(0.5 + torch.rand(param.shape, generator=generator))
    return model


def test_lpi_resid_is_a_kind_the_recipe_converts_to(capsys):
    assert KIND in RECIPE_KINDS and f"('--mechanism {KIND}')" in recipe_choices()
    cfg = recipe_config(KIND)  # the control's settings: nothing of the graft's
    assert (cfg.first_layer, cfg.lora_rank, cfg.lora_alpha, cfg.lr, cfg.position_lr) == (None, 8, 16.0, 1e-3, 1e-3)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--base trains [^()]*\blpi-resid\b", text), text


def test_step_0_is_the_base_at_positions_one_past_the_index(base):
    model = repositioned_model(base, recipe_config(KIND, base="unused", autocast=False))
    assert model.cfg.layer_mechanisms == ["rope", "rope", KIND, KIND]  # from ⌈4/3⌉ = 2
    trained = {name for name, param in model.named_parameters() if param.requires_grad}
    adapters = {f"blocks.{layer}.attn.{proj}.parametrizations.weight.0.lora_{factor}"
                for layer in (2, 3) for proj in ADAPTED for factor in "AB"}
    assert trained == position_names(range(2, 4)) | adapters  # every base weight frozen
    for layer in (2, 3):
        module = model.blocks[layer].attn.mechanism
        assert torch.equal(module.norm.weight.detach(), torch.ones(32))
        assert torch.count_nonzero(module.delta_mlp.fc_out.weight) == 0
        assert float(module.delta_mlp.fc_out.bias.detach()) == pytest.approx(math.log(1 / (MAX_DELTA - 1)), abs=1e-7)
    tokens = torch.randint(0, 256, (2, 300), generator=torch.Generator().manual_seed(0))
    positions = {}
    hooks = [(f"blocks.{layer}.attn.hook_pos", lambda value, hook: positions.update({hook.name: value.clone()}))
             for layer in range(4)]
    with torch.no_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
        expected = base(tokens)
    index = torch.arange(300.0).expand(2, 4, 300)
    for layer in range(4):  # RoPE's index below, the inclusive Σ_{s≤t} 1 = t + 1 in the learned layers
        torch.testing.assert_close(positions[f"blocks.{layer}.attn.hook_pos"], index + (layer >= 2), rtol=0, atol=0)
    # a shift common to queries and keys leaves q·k unchanged: the logits are the base's
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)


def _train_through_the_command(base, tmp_path) -> tuple:
    base_dir = save_checkpoint(base, tmp_path / "base")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(40)) for i in range(20)))
    out = tmp_path / "out"
    assert main(["train", "--base", str(base_dir), "--mechanism", KIND, "--corpus", str(corpus), "--steps", "3",
                 "--context", "32", "--batch-size", "2", "--warmup", "1", "--lr", "1e-2", "--threads", "1",
                 "--out", str(out), "--quiet", "--no-autocast"]) == 0
    return base_dir, out


def test_the_command_trains_and_ships_a_delta_that_rebuilds_the_trained_model(base, tmp_path, capsys):
    base_dir, out = _train_through_the_command(base, tmp_path)
    assert f"trained {KIND}" in capsys.readouterr().out
    recipe = json.loads((out / "recipe.json").read_text())
    assert (recipe["mechanism"], recipe["first_layer"], recipe["lora_rank"], recipe["lora_alpha"]) == (KIND, 2, 8, 16.0)
    assert json.loads((out / "train_state" / "progress.json").read_text())["step"] == 3
    trained = load_file(str(out / "train_state" / "trainable.safetensors"))  # the model after step 3, fp32
    shipped = load_file(str(out / "delta.safetensors"))
    positions = position_names(range(2, 4))
    factors = {f"blocks.{layer}.attn.{proj}.lora_{factor}" for layer in (2, 3) for proj in ADAPTED for factor in "AB"}
    assert set(shipped) == positions | factors  # the DeltaMLPs and their norms: nothing dropped
    for name in positions:  # the vectors bit for bit (fp32, as trained), the matrices rounded to bf16
        expected = trained[name] if trained[name].dim() == 1 else trained[name].bfloat16()
        assert shipped[name].dtype == expected.dtype and torch.equal(shipped[name], expected), name
    assert {shipped[name].dtype for name in factors} == {torch.bfloat16}
    for layer in (2, 3):  # training reached every part; bf16 would have rounded the norms' steps off
        norm = shipped[f"blocks.{layer}.attn.mechanism.norm.weight"]
        assert (norm != 1).any() and not torch.equal(norm.bfloat16().float(), norm)
        assert torch.count_nonzero(shipped[f"blocks.{layer}.attn.mechanism.delta_mlp.fc_out.weight"]) > 0

    loaded = load_checkpoint(out, device="cpu", dtype=torch.float32).model
    assert loaded.cfg.layer_mechanisms == ["rope", "rope", KIND, KIND]
    state = loaded.state_dict()
    for name in positions:
        assert torch.equal(state[name], shipped[name].float()), name
    for layer in (2, 3):  # the adapters folded in: W + (alpha / rank) · B A of the shipped factors
        for proj in ADAPTED:
            prefix = f"blocks.{layer}.attn.{proj}"
            folded = base.state_dict()[f"{prefix}.weight"] + 2.0 * (
                shipped[f"{prefix}.lora_B"].float() @ shipped[f"{prefix}.lora_A"].float())
            torch.testing.assert_close(state[f"{prefix}.weight"], folded, rtol=0, atol=1e-7)

    cfg = RepositionConfig(**recipe["recipe"])
    trained_model = repositioned_model(base, cfg).eval()  # the trained model: its step-3 weights put back in
    put_shipped(trained_model, trained)
    assert all(torch.equal(tensor, trained[name]) for name, tensor in trainable_state(trained_model).items())
    tokens = torch.tensor([list(b"the needle is hidden in a haystack of text")])
    seen: dict[str, dict[str, torch.Tensor]] = {"loaded": {}, "trained": {}}

    def keep(into: dict[str, torch.Tensor]):
        return [(name, lambda value, hook: into.update({hook.name: value.clone()})) for name in
                ("blocks.2.hook_resid_pre", "blocks.2.attn.mechanism.hook_delta", "blocks.2.attn.hook_pos")]

    with torch.no_grad():
        loaded.run_with_hooks(tokens, fwd_hooks=keep(seen["loaded"]))
        trained_model.run_with_hooks(tokens, fwd_hooks=keep(seen["trained"]))
    # layer 2, the first learned one, reads a residual stream that only base weights made: the trained positions,
    # but for the DeltaMLP's matrices shipped in bf16 (their rounding moves these 42 positions by a few 1e-4)
    torch.testing.assert_close(seen["loaded"]["blocks.2.attn.hook_pos"], seen["trained"]["blocks.2.attn.hook_pos"],
                               rtol=0, atol=5e-3)
    delta = seen["loaded"]["blocks.2.attn.mechanism.hook_delta"][:, 0]  # [batch, pos]: one δ for every head
    resid = seen["loaded"]["blocks.2.hook_resid_pre"]
    torch.testing.assert_close(delta, post_delta(resid, shipped, 2), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(seen["loaded"]["blocks.2.attn.hook_pos"][:, 0], torch.cumsum(delta, -1), rtol=0, atol=0)
    attention_input = loaded.blocks[2]._norm("before_attention", resid)
    assert (post_delta(attention_input, shipped, 2) - delta).abs().max() > 1e-5  # not lpi-layer's input
    assert float(delta.max() - delta.min()) > 1e-4  # δ left 1, token by token

    card = model_card("smollm2-135m-lpi-resid", recipe)
    assert recipe_problems(recipe) == [] and "residual stream" in card and f"--mechanism {KIND} " in card
    assert str(base_dir) in card
