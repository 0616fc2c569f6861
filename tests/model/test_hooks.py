"""Hook points: names by module path, shapes as the hook-shape table says, no effect unless they change something."""

from __future__ import annotations

import pytest
import torch

import repo_lens
from repo_lens.model.hook_shapes import dimension_sizes, expected_shapes, mechanism_submodule, table_key

IDS = torch.tensor([[1, 5, 9, 12, 7, 3, 20, 8, 2, 6]])


@pytest.fixture(scope="module")
def lens(repo_dir):
    return repo_lens.load(repo_dir, device="cpu")


def test_hook_names_and_shapes(lens):
    """Every hook of the RePo checkpoint has the shape the hook-shape table gives for its config (batch 1, T = 10):
    the embeddings, the residual stream, the positions and the attention of every layer."""
    _, cache = lens.model.run_with_cache(IDS)
    mechanism = mechanism_submodule(lens.model.blocks[0].attn)
    sizes = dimension_sizes(lens.model.cfg, batch=1, n_tokens=IDS.shape[1])
    for name in ("hook_embed", "blocks.2.attn.hook_pos", "blocks.2.attn.hook_rot_k", "blocks.3.hook_resid_post"):
        assert name in cache, name
    for name, value in cache.items():
        assert tuple(value.shape) == expected_shapes(table_key(name, mechanism), sizes)[0], name


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
    gradient = lens.model.blocks[2].attn.mechanism.gate_map.weight.grad
    assert gradient is not None and gradient.abs().sum() > 0
    lens.model.zero_grad()


def test_olmo2_blocks_normalise_what_their_attention_and_mlp_add(lens):
    """An Olmo2Block adds norm(attn(h)) and norm(mlp(h)) (its RMSNorms sit after the sublayers, where a LlamaBlock's
    sit before them): each increment, divided by its norm's weight, has a root mean square of 1 in every row."""
    blocks = repo_lens.model.blocks
    assert blocks.BLOCKS == {"olmo2": blocks.Olmo2Block, "llama": blocks.LlamaBlock}
    block = lens.model.blocks[1]
    assert isinstance(block, blocks.Olmo2Block) and not hasattr(block, "input_layernorm")
    norms = (block.post_attention_layernorm, block.post_feedforward_layernorm)
    eps = [norm.eps for norm in norms]
    try:
        for norm in norms:
            norm.eps = 0.0  # the tiny model's sublayer outputs are small enough for eps to show
        _, cache = lens.model.run_with_cache(IDS)
    finally:
        for norm, value in zip(norms, eps):
            norm.eps = value
    for hook, norm in zip(("hook_attn_out", "hook_mlp_out"), norms):
        rms = (cache[f"blocks.1.{hook}"] / norm.weight).pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-4, rtol=0)
    resid_rms = cache["blocks.1.hook_resid_pre"].pow(2).mean(-1).sqrt()
    assert not torch.allclose(resid_rms, torch.ones_like(resid_rms), atol=1e-2)
