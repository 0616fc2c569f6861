"""Hook points: names by module path, shapes as documented, no effect unless they change something."""

from __future__ import annotations

import pytest
import torch

import repo_lens

IDS = torch.tensor([[1, 5, 9, 12, 7, 3, 20, 8, 2, 6]])

DOCUMENTED_SHAPES = {  # hook name -> shape for batch 1, T = 10 on the tiny RePo checkpoint (4 heads, d_head 16)
    "hook_embed": (1, 10, 64),
    "blocks.2.hook_resid_pre": (1, 10, 64),
    "blocks.2.attn.hook_pos": (1, 4, 10),
    "blocks.2.attn.hook_q": (1, 4, 10, 16),
    "blocks.2.attn.hook_k": (1, 4, 10, 16),
    "blocks.2.attn.hook_v": (1, 4, 10, 16),
    "blocks.2.attn.hook_pattern": (1, 4, 10, 10),
    "blocks.2.attn.hook_z": (1, 10, 4, 16),
    "blocks.2.hook_attn_out": (1, 10, 64),
    "blocks.2.hook_resid_mid": (1, 10, 64),
    "blocks.2.hook_mlp_out": (1, 10, 64),
    "blocks.2.hook_resid_post": (1, 10, 64),
}


@pytest.fixture(scope="module")
def lens(repo_dir):
    return repo_lens.load(repo_dir, device="cpu")


def test_hook_names_and_shapes(lens):
    _, cache = lens.model.run_with_cache(IDS)
    for name, shape in DOCUMENTED_SHAPES.items():
        assert tuple(cache[name].shape) == shape, name
    assert set(lens.model.hook_dict) >= set(DOCUMENTED_SHAPES)


def test_hooks_attached_but_unused_leave_logits_bit_identical(lens):
    with torch.no_grad():
        plain = lens.model(IDS)
        seen = []
        hooks = [(name, lambda tensor, hook: seen.append(hook.name)) for name in lens.model.hook_dict]
        hooked = lens.model.run_with_hooks(IDS, fwd_hooks=hooks)
    assert torch.equal(plain, hooked)
    assert set(seen) == set(lens.model.hook_dict)  # every hook really ran, the pattern one included


def test_pattern_hook_matches_the_fused_attention(lens):
    _, cache = lens.model.run_with_cache(IDS, names_filter="blocks.3.attn.hook_pattern")
    pattern = cache["blocks.3.attn.hook_pattern"][0]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(4, 10))
    assert torch.all(pattern.triu(1) == 0)


def test_writing_hook_pos_intervenes_on_positions(lens, olmo2_dir, repo_dir):
    """Replacing every RePo layer's z by the integer index must give exactly the stock RoPE model
    with the same base weights (the RePo fixture's base model is different, so build one)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    stock_dir = repo_dir.parent / "stock_from_repo"
    if not stock_dir.exists():
        shutil.copytree(repo_dir, stock_dir)
        config = json.loads((stock_dir / "config.json").read_text())
        del config["pe_config"]
        (stock_dir / "config.json").write_text(json.dumps(config))
        weights = {k: v for k, v in load_file(str(stock_dir / "model.safetensors")).items() if "_map." not in k}
        save_file(weights, str(stock_dir / "model.safetensors"), metadata={"format": "pt"})
    stock = repo_lens.load(stock_dir, device="cpu")

    def linear_positions(positions, hook):
        return torch.arange(positions.shape[-1], dtype=positions.dtype).expand_as(positions)

    hooks = [(f"blocks.{layer}.attn.hook_pos", linear_positions) for layer in (2, 3)]
    with torch.no_grad():
        intervened = lens.model.run_with_hooks(IDS, fwd_hooks=hooks)
        torch.testing.assert_close(intervened, stock.model(IDS), atol=1e-5, rtol=0)
        assert (lens.model(IDS) - intervened).abs().max() > 1e-3  # the intervention did change something


def test_replacing_the_pattern_changes_the_output(lens):
    def uniform(pattern, hook):
        mask = torch.ones_like(pattern).tril()
        return mask / mask.sum(-1, keepdim=True)

    with torch.no_grad():
        plain = lens.model(IDS)
        changed = lens.model.run_with_hooks(IDS, fwd_hooks=[("blocks.3.attn.hook_pattern", uniform)])
    assert (plain - changed).abs().max() > 1e-3


def test_positions_are_differentiable(lens):
    lens.model.zero_grad()
    loss = torch.nn.functional.cross_entropy(lens.model(IDS)[0, :-1], IDS[0, 1:])
    loss.backward()
    gradient = lens.model.blocks[2].attn.positions.gate_map.weight.grad
    assert gradient is not None and gradient.abs().sum() > 0
    lens.model.zero_grad()
