"""The post's decay ("Learned position increments", Brendan Long: ``decay`` "alibi" or "learned", a bias computed
once from the token embeddings and added to every layer's scores on top of the rotation) loads as the model's
decay ("alibi", "forget") and runs its forward: against the independent float64 reference of reference_post.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens

from .reference_post import post_config, post_forward, write_post_checkpoint

IDS = list("Marie Curie 人工智能.\n".encode())
LOGIT_TOLERANCE = 1e-4


def _logits(model, ids=IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]))[0].double()


@pytest.mark.parametrize("decay", ["alibi", "learned"])
@pytest.mark.parametrize("encoding", ["selective_rope", "selective_pope"])
def test_frozen_delta_tables_with_a_decay(tmp_path, decay, encoding):
    cfg = post_config(pos_encoding=encoding, decay=decay)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=12, frozen="per_head")
    lens = repo_lens.load(path, device="cpu")
    reference = post_forward(weights, cfg, IDS)
    assert float((_logits(lens.model) - reference["logits"]).abs().max()) < LOGIT_TOLERANCE
    assert lens.layer_kinds == ["lpi-table" + ("-pope" if encoding.endswith("pope") else "")] * cfg["n_layers"]
    np.testing.assert_allclose(lens.trace(IDS, progress=False).positions, reference["positions"].numpy(), rtol=1e-5)


@pytest.mark.parametrize("decay", ["alibi", "learned"])
def test_every_layer_adds_the_posts_decay_matrix(tmp_path, decay):
    """The levels each layer publishes (attn.hook_decay) give A_i − A_j = the reference's decay bias below the
    diagonal; the notes say what the loader made of it."""
    cfg = post_config(pos_encoding="selective_rope", per_layer_delta=True, decay=decay, n_layers=3)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=13)
    lens = repo_lens.load(path, device="cpu")
    expected = post_forward(weights, cfg, IDS)["decay"]
    _, cache = lens.model.run_with_cache(torch.tensor([IDS]), names_filter=lambda name: name.endswith("hook_decay"))
    below = torch.ones(len(IDS), len(IDS), dtype=torch.bool).tril()
    for layer in range(cfg["n_layers"]):
        levels = cache[f"blocks.{layer}.attn.hook_decay"][0].double()
        bias = levels[:, :, None] - levels[:, None, :]
        torch.testing.assert_close(bias[:, below], expected[:, below], atol=2e-5, rtol=1e-5)
    assert lens.model.cfg.decay == {"alibi": "alibi", "learned": "forget"}[decay]
    assert any(f"decay='{decay}'" in note for note in lens.meta["authors"]["notes"])
    assert lens.meta["authors"]["variant"].endswith(f"decay={decay}")


def test_the_forget_gate_is_read_from_forget_mlp(tmp_path):
    """forget_mlp.fc1/fc2 load into the model's decay; zeros written at hook_log_forget give the post's forward
    without decay on the same weights."""
    cfg = post_config(pos_encoding="selective_rope", per_head_delta=True, decay="learned", delta_hidden_dim=12)
    path, weights = write_post_checkpoint(tmp_path, cfg, seed=14)
    model = repo_lens.load(path, device="cpu").model
    torch.testing.assert_close(model.decay.fc2.weight, weights["forget_mlp.fc2.weight"])
    assert tuple(model.decay.fc1.weight.shape) == (12, cfg["dim"]) and model.cfg.decay_hidden == 12
    plain_cfg = {**cfg, "decay": "none"}
    plain = {name: tensor for name, tensor in weights.items() if not name.startswith("forget_mlp.")}
    with torch.no_grad():
        zeroed = model.run_with_hooks(torch.tensor([IDS]), fwd_hooks=[
            ("hook_log_forget", lambda t, hook: torch.zeros_like(t))])[0].double()
    reference = post_forward(plain, plain_cfg, IDS)["logits"]
    assert float((zeroed - reference).abs().max()) < LOGIT_TOLERANCE
    assert float((_logits(model) - reference).abs().max()) > 0.1  # the decay itself matters


@pytest.mark.parametrize("decay", ["alibi", "learned"])
def test_decoding_with_the_kv_cache_equals_the_full_forward(tmp_path, decay):
    cfg = post_config(pos_encoding="selective_pope", per_head_delta=True, decay=decay)
    model = repo_lens.load(write_post_checkpoint(tmp_path, cfg, seed=15)[0], device="cpu").model
    ids = torch.tensor([IDS])
    with torch.no_grad():
        full, cache = model(ids), model.new_cache()
        pieces = [model(ids[:, :9], cache=cache), model(ids[:, 9:10], cache=cache), model(ids[:, 10:], cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-4)
