"""Hook points: names by module path, shapes as documented, no effect unless they change something."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import repo_lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.registry import decay_names, mechanism_kinds

ROOT = Path(__file__).resolve().parents[2]
IDS = torch.tensor([[1, 5, 9, 12, 7, 3, 20, 8, 2, 6]])

DOCUMENTED_SHAPES = {  # hook name -> shape for batch 1, T = 10 on the tiny RePo checkpoint (4 heads, d_head 16)
    "hook_embed": (1, 10, 64),
    "blocks.2.hook_resid_pre": (1, 10, 64),
    "blocks.2.attn.hook_pos": (1, 4, 10),
    "blocks.2.attn.hook_q": (1, 10, 4, 16),
    "blocks.2.attn.hook_k": (1, 10, 4, 16),
    "blocks.2.attn.hook_v": (1, 10, 4, 16),
    "blocks.2.attn.hook_rot_q": (1, 10, 4, 16),
    "blocks.2.attn.hook_rot_k": (1, 10, 4, 16),
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


def readme_hook_table() -> dict[str, tuple[str, ...]]:
    """The documentation's hook table (docs/guide/hook-points.md): name (``{l}`` for the layer) -> the
    dimension names of its shape."""
    section = (ROOT / "docs" / "guide" / "hook-points.md").read_text().split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| \[([^\]]+)\] \|", section, flags=re.MULTILINE)
    assert rows, "the hook-points page has no hook table"
    return {name: tuple(part.strip() for part in shape.split(",")) for name, shape in rows}


def test_readme_hook_table_is_every_hook_with_its_shape():
    """Every hook of a model of each registered mechanism, and of models with each decay (OLMo-2 blocks with GQA,
    so q_norm, k_norm and repeated keys all take part) is in the documented table, every row of the table is one
    of them, and a run_with_cache gives each the documented shape; every dimension size differs from the others."""
    sizes = {"batch": 3, "pos": 6, "query_pos": 6, "key_pos": 6, "head": 4, "kv_head": 2, "d_head": 8,
             "d_model": 48, "d_mlp": 64, "q_width": 32, "kv_width": 16, "one": 1}
    table = readme_hook_table()
    seen = set()
    models = [(family, kind, "none") for family in ("olmo2", "llama") for kind in mechanism_kinds()]
    models += [(family, "repo", decay) for family in ("olmo2", "llama") for decay in decay_names()]
    for family, kind, decay in models:
        torch.manual_seed(0)
        cfg = ModelConfig(family=family, vocab_size=64, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2,
                          head_dim=8, d_mlp=64, layer_mechanisms=["rope", kind], decay=decay)
        model = LensModel(cfg).eval()
        model.set_use_attn_result(True)  # the heads' results are cached only when asked for
        with torch.no_grad():
            _, cache = model.run_with_cache(torch.randint(0, 64, (sizes["batch"], sizes["pos"])))
        assert set(cache.keys()) == set(model.hook_dict), kind  # every hook fires (the pattern when asked for)
        for name, value in cache.items():
            documented = re.sub(r"^blocks\.\d+\.", "blocks.{l}.", name)
            assert documented in table, f"{name} ({kind}) is not in the documented hook table"
            expected = tuple(sizes[dim] for dim in table[documented])
            if documented == "blocks.{l}.attn.hook_rot_k" and value.shape[2] == sizes["head"]:
                # GQA keys per query head where the layer's positions differ between a group's heads
                assert cache[name.replace("hook_rot_k", "hook_pos")].stride(1) != 0, name
                expected = (sizes["batch"], sizes["pos"], sizes["head"], sizes["d_head"])
            assert tuple(value.shape) == expected, f"{name} ({kind}): {tuple(value.shape)}, docs {table[documented]}"
            seen.add(documented)
    assert seen == set(table), f"the docs list hooks no model has: {sorted(set(table) - seen)}"


def test_every_hook_point_is_declared_with_its_shape():
    """Each ``HookPoint()`` attribute in the model carries its shape in a trailing comment."""
    declarations = [(path.name, line.strip()) for path in sorted((ROOT / "repo_lens" / "model").rglob("*.py"))
                    for line in path.read_text().splitlines() if "= HookPoint()" in line]
    assert len(declarations) >= 10
    for file, line in declarations:
        assert re.search(r"= HookPoint\(\)  # \[[a-z_]+(, [a-z_]+)*\]", line), f"{file}: {line}"


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
