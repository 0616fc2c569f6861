"""RePo's recipe on a pretrained RoPE model (``repo-lens train --base``), on a tiny random Llama: it starts
as the base, anneals z from the index to f(h) as defined, resumes where it stopped, and ships a delta that
loads back as the trained model."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from repo_lens import CheckpointError, InputError
from repo_lens.model.loaders import load_checkpoint, save_checkpoint
from repo_lens.model.tiny import tiny_model
from repo_lens.train.reposition import (
    PositionAnneal,
    RepositionConfig,
    repositioned_model,
    train_repositioned,
    trainable_state,
)
from repo_lens.train.text_tokens import TextTokens
from tests.train.shipped_weights import put_shipped

WORDS = "the needle is hidden in a haystack of text and the magic number is four two seven".split()


def small_text() -> TextTokens:
    documents = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60)) for i in range(20)]
    return TextTokens.from_documents(documents, lambda text: list(text.encode()), eos=256)


def small_config(**overrides) -> RepositionConfig:
    settings = dict(base="unused", context=32, batch_size=2, steps=4, warmup=1, anneal_steps=2, eval_every=2,
                    eval_sequences=2, checkpoint_every=2, autocast=False, lr=1e-2, position_lr=1e-2)
    return RepositionConfig(**{**settings, **overrides})


@pytest.fixture(scope="module")
def base():
    return tiny_model("rope", n_layers=3, d_model=32, n_heads=4, family="llama", seed=1)


def test_the_recipe_starts_as_the_base(base):
    model = repositioned_model(base, small_config())
    assert model.cfg.layer_mechanisms == ["rope", "repo", "repo"]  # from ceil(3/3) = layer 1
    anneal = PositionAnneal(model)
    tokens = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), base(tokens), rtol=0, atol=1e-5)
    anneal.remove()


def test_annealed_positions_are_the_index_blended_with_f(base):
    model = repositioned_model(base, small_config(position_init_std=0.5))
    anneal = PositionAnneal(model)
    anneal.value = 0.3
    module = model.blocks[2].attn.mechanism
    seen = {}
    module.register_forward_hook(lambda mod, args, out: seen.update(h=args[0], z=out))
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 12)))
        h = seen["h"]
        f = F.linear(F.silu(h @ module.gate_map.weight.T) * (h @ module.content_map.weight.T),
                     module.final_map.weight).transpose(1, 2)  # RePo Eq. 4-6, [batch, head, pos]
    expected = 0.7 * torch.arange(12.0) + 0.3 * f
    torch.testing.assert_close(seen["z"], expected, rtol=1e-5, atol=1e-5)
    assert f.abs().max() > 0.01  # f is not negligible here, so the blend is tested


def test_the_control_keeps_rope_and_trains_only_adapters(base):
    model = repositioned_model(base, small_config(mechanism="rope"))
    assert model.cfg.layer_mechanisms == ["rope"] * 3
    trained = trainable_state(model)
    assert trained and all(name.endswith((".lora_A", ".lora_B")) for name in trained)
    assert {name.split(".attn.")[0] for name in trained} == {"blocks.1", "blocks.2"}


def test_training_resumes_where_it_stopped(base, tmp_path, monkeypatch):
    cfg = small_config()
    whole = train_repositioned(cfg, base, small_text(), tmp_path / "whole", progress=False)
    text = small_text()
    calls = {"n": 0}
    original = TextTokens.train_batch

    def dies_at_step_3(self, step, *args, **kwargs):
        if step == 3:
            raise KeyboardInterrupt
        calls["n"] += 1
        return original(self, step, *args, **kwargs)

    monkeypatch.setattr(TextTokens, "train_batch", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train_repositioned(cfg, base, text, tmp_path / "broken", progress=False)
    monkeypatch.setattr(TextTokens, "train_batch", original)
    resumed = train_repositioned(cfg, base, text, tmp_path / "broken", progress=False)
    assert calls["n"] == 3 and resumed["steps"] == whole["steps"] == 4
    from safetensors.torch import load_file

    first, second = (load_file(str(tmp_path / run / "delta.safetensors")) for run in ("whole", "broken"))
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)
    assert [e["train_bits"] for e in whole["log"][1:]] == pytest.approx([e["train_bits"] for e in resumed["log"][1:]])


def test_training_lowers_the_held_out_loss(base, tmp_path):
    cfg = small_config(steps=30, eval_every=30, anneal_steps=10)
    summary = train_repositioned(cfg, base, small_text(), tmp_path / "run", progress=False)
    held_out = [entry["held_out_bits"] for entry in summary["log"] if "held_out_bits" in entry]
    assert held_out[-1] < held_out[0] - 0.5, held_out


def test_the_shipped_delta_loads_as_the_trained_model(base, tmp_path):
    base_dir = save_checkpoint(base, tmp_path / "base")
    cfg = small_config(base=str(base_dir), steps=6)
    run = tmp_path / "run"
    train_repositioned(cfg, base, small_text(), run, progress=False)
    loaded = load_checkpoint(run, device="cpu")
    assert loaded.model.cfg.layer_mechanisms == ["rope", "repo", "repo"]
    assert loaded.meta["format"] == "repo_lens-delta" and loaded.meta["base"] == str(base_dir)
    # the reference: the recipe's model with the shipped (bf16) position weights and adapter factors
    reference = repositioned_model(base, cfg)
    from safetensors.torch import load_file

    shipped = load_file(str(run / "delta.safetensors"))
    put_shipped(reference, shipped)
    with torch.no_grad():
        tokens = torch.randint(0, 256, (2, 24))
        torch.testing.assert_close(loaded.model(tokens), reference(tokens), rtol=1e-4, atol=1e-4)
    assert any(tensor.abs().max() > 0 for name, tensor in shipped.items() if name.endswith("lora_B"))


def test_a_delta_that_does_not_fit_its_recipe_fails_loudly(base, tmp_path):
    base_dir = save_checkpoint(base, tmp_path / "base")
    run = tmp_path / "run"
    train_repositioned(small_config(base=str(base_dir), steps=2), base, small_text(), run, progress=False)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(run / "delta.safetensors"))
    dropped = sorted(tensors)[0]
    save_file({name: tensor for name, tensor in tensors.items() if name != dropped}, str(run / "delta.safetensors"))
    with pytest.raises(CheckpointError, match="does not fit its recipe"):
        load_checkpoint(run, device="cpu")
    recipe = json.loads((run / "recipe.json").read_text())
    del recipe["first_layer"]
    (run / "recipe.json").write_text(json.dumps(recipe))
    with pytest.raises(CheckpointError, match="lacks first_layer"):
        load_checkpoint(run, device="cpu")


def test_bad_settings_are_refused_with_what_to_do(base, tmp_path):
    with pytest.raises(InputError, match="'repo'.*'rope'"):
        repositioned_model(base, small_config(mechanism="nope"))
    with pytest.raises(InputError, match="first_layer must be in 0..2"):
        repositioned_model(base, small_config(first_layer=7))
    train_repositioned(small_config(steps=2), base, small_text(), tmp_path / "run", progress=False)
    with pytest.raises(InputError, match="steps differ"):
        train_repositioned(small_config(steps=3), base, small_text(), tmp_path / "run", progress=False)
    with pytest.raises(InputError, match="must be a RoPE model"):
        repositioned_model(tiny_model("repo", n_layers=3, d_model=32, family="llama"), small_config())


def test_the_command_names_what_to_train(tmp_path, capsys):
    from repo_lens.cli import main

    assert main(["train", "--out", str(tmp_path / "x")]) != 0
    assert "--preset NAME" in capsys.readouterr().err
    assert main(["train", "--base", "zoo:smollm2-135m", "--mechanism", "nope", "--out", str(tmp_path / "y")]) != 0
    assert "control" in capsys.readouterr().err


@pytest.mark.parametrize("mechanism", ["grape-m", "lpi-layer", "lpi-resid"])
def test_grape_m_and_layer_increments_start_exactly_as_the_base(base, mechanism):
    """ω = softplus(0·h + softplus⁻¹(1)) = 1 and δ = 10·sigmoid(0·MLP(h) + logit(1/10)) = 1: the positions are
    the index (GRAPE-M's exclusive sum) or the index plus one (the increments' inclusive sum), so the logits
    are the base's in fp32, with no anneal."""
    model = repositioned_model(base, small_config(mechanism=mechanism))
    assert model.cfg.layer_mechanisms == ["rope", mechanism, mechanism]
    tokens = torch.randint(0, 256, (2, 300))
    seen = {}
    model.blocks[2].attn.mechanism.register_forward_hook(lambda mod, args, out: seen.update(z=out))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), base(tokens), rtol=0, atol=1e-5)
    shift = 0.0 if mechanism == "grape-m" else 1.0
    torch.testing.assert_close(seen["z"], (torch.arange(300.0) + shift).expand(2, 4, 300), rtol=0, atol=0)
    trained = trainable_state(model)
    assert {name.split(".attn.")[0] for name in trained} == {"blocks.1", "blocks.2"}
    assert any(".attn.mechanism." in name for name in trained)


@pytest.mark.parametrize("mechanism", ["grape-m", "lpi-layer", "lpi-resid"])
def test_grape_m_and_layer_increments_train_their_positions_off_the_index_and_ship(base, mechanism, tmp_path):
    base_dir = save_checkpoint(base, tmp_path / "base")
    cfg = small_config(base=str(base_dir), mechanism=mechanism, steps=6)
    summary = train_repositioned(cfg, base, small_text(), tmp_path / "run", progress=False)
    assert summary["log"][0]["step"] == 0 and summary["steps"] == 6
    loaded = load_checkpoint(tmp_path / "run", device="cpu")
    assert loaded.model.cfg.layer_mechanisms == ["rope", mechanism, mechanism]
    seen = {}
    loaded.model.blocks[1].attn.mechanism.register_forward_hook(lambda mod, args, out: seen.update(z=out))
    with torch.no_grad():
        loaded.model(torch.tensor([list(b"the needle is hidden in a haystack")]))
    index = torch.arange(seen["z"].shape[-1], dtype=torch.float32) + (mechanism != "grape-m")
    assert (seen["z"] - index).abs().max() > 0.01  # the positions left the index
    increments = torch.diff(seen["z"], dim=-1)
    assert (increments > 0).all()  # softplus and sigmoid keep every increment positive
