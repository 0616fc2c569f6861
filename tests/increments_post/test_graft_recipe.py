"""``repo-lens train --base MODEL --mechanism lpi-graft``: the recipe starts the graft's DeltaMLP as the
learned-increments post does (experiments/delta_graft: fc2's weight 0 and bias 0.5413), re-positions every layer,
adds the control's adapters (rank 8, alpha 16 on q, k, v and o of layers ⌈L/3⌉+, learning rate 1e-3) so that the
two differ in δ alone, starts as the base at the positions Σ_{s<t} softplus(0.5413) computed here, trains δ and the
adapters, and ships a delta (the DeltaMLP in fp32) that loads back as the trained model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

import repo_lens.zoo
from repo_lens.cli import main
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.grafted_increments import token_deltas
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import (
    GRAFT_KIND,
    RepositionConfig,
    adapters_from_of,
    first_layer_of,
    recipe_config,
    repositioned_model,
    train_repositioned,
    trainable_state,
)
from repo_lens.train.text_tokens import TextTokens
from tests.train.shipped_weights import put_shipped

from .graft_reference import POST_BIAS, exclusive_positions

WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj")


def small_text() -> TextTokens:
    documents = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60)) for i in range(20)]
    return TextTokens.from_documents(documents, lambda text: list(text.encode()), eos=256)


def small_config(**overrides) -> RepositionConfig:
    settings = dict(base="unused", context=32, batch_size=2, steps=4, warmup=1, eval_every=2, eval_sequences=2,
                    checkpoint_every=2, autocast=False, lr=1e-2, position_lr=1e-2)
    return recipe_config(GRAFT_KIND, **{**settings, **overrides})


@pytest.fixture(scope="module")
def base():
    return tiny_model("rope", n_layers=3, d_model=32, n_heads=4, family="llama", seed=1)


def test_the_recipe_re_positions_every_layer_with_the_controls_adapters():
    cfg, control = recipe_config(GRAFT_KIND), recipe_config("rope")
    assert (cfg.mechanism, cfg.first_layer) == ("lpi-graft", 0)  # the post's δ reaches every layer
    # the control adapts from its first re-positioned layer, ⌈L/3⌉ (10 of SmolLM2-135M's 30), and so does the graft
    assert adapters_from_of(cfg, 30) == adapters_from_of(control, 30) == first_layer_of(control, 30) == 10
    assert adapters_from_of(recipe_config(GRAFT_KIND, adapters_from=0), 30) == 0  # the post's: every layer
    assert (cfg.lora_rank, cfg.lora_alpha, cfg.lr, cfg.position_lr, cfg.steps, cfg.batch_size, cfg.context,
            cfg.seed, cfg.corpus) == (control.lora_rank, control.lora_alpha, control.lr, control.position_lr,
                                      control.steps, control.batch_size, control.context, control.seed,
                                      control.corpus) == (8, 16.0, 1e-3, 1e-3, 500, 4, 1024, 0, "brown")


def test_at_step_0_the_graft_is_the_base_at_the_posts_start_positions(base):
    model = repositioned_model(base, small_config())
    assert model.cfg.layer_mechanisms == ["lpi-graft"] * 3  # every layer, as the post's position_ids reach all
    assert torch.count_nonzero(model.shared_delta.fc_out.weight) == 0
    assert float(model.shared_delta.fc_out.bias.detach()) == pytest.approx(POST_BIAS, abs=1e-7)
    adapters = {name.rsplit(".", 1)[0] for name in trainable_state(model) if name.endswith(".lora_A")}
    assert adapters == {f"blocks.{layer}.attn.{proj}" for layer in (1, 2) for proj in ADAPTED}  # ⌈3/3⌉ = 1 on
    assert not hasattr(model.blocks[0].attn.q_proj, "parametrizations")
    factors = model.blocks[1].attn.q_proj.parametrizations.weight[0]
    assert factors.lora_A.shape[0] == 8 and factors.scale == 2.0 and torch.count_nonzero(factors.lora_B) == 0
    tokens = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    start = math.log1p(math.exp(POST_BIAS))  # softplus(0.5413) = 0.999984...
    # as the post computes them: δ = softplus(0.5413) in fp32, cumsum(δ) − δ in fp32
    positions = exclusive_positions(torch.nn.functional.softplus(torch.full((40,), POST_BIAS)))
    torch.testing.assert_close(token_deltas(model).double(), torch.full((257,), start, dtype=torch.float64),
                               rtol=0, atol=1e-7)

    def at_start(value, hook):
        return positions.expand_as(value).clone()

    with torch.no_grad():
        expected = base.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_pos", at_start)
                                                          for layer in range(3)])
        torch.testing.assert_close(model(tokens), expected, rtol=0, atol=1e-5)


def test_a_few_steps_train_delta_and_ship_a_delta_that_loads_back(base, tmp_path):
    base_dir = save_checkpoint(base, tmp_path / "base")
    cfg = small_config(base=str(base_dir), steps=6)
    run = tmp_path / "run"
    summary = train_repositioned(cfg, base, small_text(), run, progress=False)
    assert (summary["first_layer"], summary["adapters_from"]) == (0, 1)
    assert all(math.isfinite(entry["train_bits"]) for entry in summary["log"][1:])
    shipped = load_file(str(run / "delta.safetensors"))
    assert {name.split(".")[1] for name in shipped if name.endswith(".lora_A")} == {"1", "2"}
    increments = {name: tensor for name, tensor in shipped.items() if name.startswith("shared_delta.")}
    assert set(increments) == {f"shared_delta.fc_{part}.{kind}" for part in ("in", "out") for kind in ("weight", "bias")}
    assert {tensor.dtype for tensor in increments.values()} == {torch.float32}  # positions are running sums of δ
    assert torch.count_nonzero(increments["shared_delta.fc_out.weight"]) > 0  # δ learned something
    loaded = load_checkpoint(run, device="cpu")
    assert loaded.model.cfg.layer_mechanisms == ["lpi-graft"] * 3 and loaded.meta["info"]["lora_rank"] == 8
    reference = repositioned_model(base, cfg)  # the recipe's model with the shipped weights put in by hand
    put_shipped(reference, shipped)
    with torch.no_grad():
        tokens = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(loaded.model(tokens), reference(tokens), rtol=1e-4, atol=1e-4)
    deltas = token_deltas(loaded.model)
    assert float(deltas.max() - deltas.min()) > 1e-4  # no longer one δ for every token


def test_the_command_trains_the_graft_in_every_layer_with_the_controls_adapters(base, tmp_path, capsys,
                                                                                  monkeypatch):
    """The command and the card; then the post's own adapters, on every layer (--adapters-from 0), load back."""
    base_dir = save_checkpoint(base, tmp_path / "base")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(40)) for i in range(20)))
    out = tmp_path / "out"
    assert main(["train", "--base", str(base_dir), "--mechanism", "lpi-graft", "--corpus", str(corpus), "--steps",
                 "2", "--context", "32", "--batch-size", "2", "--out", str(out), "--quiet", "--no-autocast"]) == 0
    recipe = json.loads((out / "recipe.json").read_text())
    assert (recipe["mechanism"], recipe["first_layer"], recipe["adapters_from"], recipe["lora_rank"],
            recipe["lora_alpha"]) == ("lpi-graft", 0, 1, 8, 16.0)
    assert recipe["recipe"]["lr"] == recipe["recipe"]["position_lr"] == 1e-3
    assert "trained lpi-graft" in capsys.readouterr().out
    monkeypatch.setattr(repo_lens.zoo, "ZOO_DIR", tmp_path / "zoo")
    assert main(["zoo", "--ship-delta", str(out), "graft-demo"]) == 0
    card = (tmp_path / "zoo" / "graft-demo" / "README.md").read_text()
    assert "continued with **the learned-increments post's graft (one δ per token, shared by every layer)** in " \
           "every layer." in card and "RoPE below" not in card
    assert "on q_proj, k_proj, v_proj, o_proj of layers 1+" in card and "bias 0.5413" in card
    assert "exclusive; shipped in fp32" in card and "cosine to 10 %), fp32, seed 0" in card and "on the CPU\n" in card
    shipped = load_checkpoint(tmp_path / "zoo" / "graft-demo", device="cpu")
    assert shipped.model.cfg.layer_mechanisms == ["lpi-graft"] * 3
    everywhere = tmp_path / "everywhere"
    assert main(["train", "--base", str(base_dir), "--mechanism", "lpi-graft", "--corpus", str(corpus), "--steps",
                 "2", "--context", "32", "--batch-size", "2", "--out", str(everywhere), "--quiet", "--no-autocast",
                 "--adapters-from", "0"]) == 0
    assert json.loads((everywhere / "recipe.json").read_text())["adapters_from"] == 0
    factors = load_file(str(everywhere / "delta.safetensors"))
    assert {name.split(".")[1] for name in factors if name.endswith(".lora_A")} == {"0", "1", "2"}
    assert load_checkpoint(everywhere, device="cpu").model.cfg.layer_mechanisms == ["lpi-graft"] * 3
    recipe = json.loads((everywhere / "recipe.json").read_text())
    (everywhere / "recipe.json").write_text(json.dumps({**recipe, "adapters_from": 1}))  # layer 0's factors left over
    with pytest.raises(CheckpointError, match=r"does not fit its recipe \(8 tensors missing or unexpected, e\.g\. \['blocks\.0\.attn"):
        load_checkpoint(everywhere, device="cpu")


def test_a_base_outside_the_llama_family_is_refused():
    authors = tiny_model("rope", n_layers=2, d_model=32, family="llama")
    authors.cfg.family = "authors"  # as the GRAPE authors' pre-norm blocks report themselves
    with pytest.raises(InputError, match=r"Llama-family model .*got family 'authors'"):
        repositioned_model(authors, small_config())
